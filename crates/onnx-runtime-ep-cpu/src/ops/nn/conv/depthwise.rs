//! Direct 2-D convolution for one input channel per group (depthwise, any channel
//! multiplier). Each input plane is laid out once as padded, stride-phase-split rows
//! ([`row_phases`]), so every kernel tap is a contiguous run and the inner loops vectorize;
//! 3x3 kernels take all nine taps in one pass per output row. Rows start from the bias and
//! get Z and the activation while in cache. Planes run in parallel in chunks big enough to
//! pay for the hand-off.

use crate::ops::nn::common::Real;
use crate::ops::nn::conv::conv_act::Epilogue;
use crate::ops::nn::conv::conv_op::ConvGeom;
use crate::ops::nn::scratch::{fill, planes_per_task, run_simd, with_scratch, PhaseRows, SimdWork};
use std::mem::MaybeUninit;

/// Writes every element of `out` (`[n, m, oh, ow]`) for a 2-D convolution with one input
/// channel per group.
pub fn depthwise2d<T: Real>(
    g: &ConvGeom,
    x: &[T],
    w: &[T],
    ep: &Epilogue<T>,
    out: &mut [MaybeUninit<T>],
) {
    let win = &g.win;
    let plane = win.output_size();
    let planes = g.n * g.m;
    assert_eq!(out.len(), planes * plane, "depthwise2d: output size");
    if plane == 0 {
        return;
    }
    let run = |first: usize, out: &mut [MaybeUninit<T>]| {
        run_simd(Planes {
            g,
            x,
            w,
            ep,
            first,
            out,
        })
    };
    match planes_per_task(planes, plane * win.kernel_size()) {
        Some(per_task) => {
            use rayon::prelude::*;
            out.par_chunks_mut(per_task * plane)
                .enumerate()
                .for_each(|(i, o)| run(i * per_task, o));
        }
        None => run(0, out),
    }
}

/// Output planes `first..` (as many as `out` holds).
struct Planes<'a, T: Real> {
    g: &'a ConvGeom,
    x: &'a [T],
    w: &'a [T],
    ep: &'a Epilogue<'a, T>,
    first: usize,
    out: &'a mut [MaybeUninit<T>],
}

impl<T: Real> SimdWork for Planes<'_, T> {
    #[inline(always)]
    fn run(self) {
        let Planes {
            g,
            x,
            w,
            ep,
            first,
            out,
        } = self;
        let mg = g.m / g.group;
        let pr = PhaseRows::new(&g.win);
        let (ih, iw, oh, ow, kh, kw) = (pr.ih, pr.iw, pr.oh, pr.ow, pr.kh, pr.kw);
        let plane = oh * ow;
        with_scratch(pr.plane_len() + pr.phase_len(), |buf: &mut [T]| {
            let (rows, zero) = buf.split_at_mut(pr.plane_len());
            zero.fill(T::zero());
            let zero = &zero[..ow];
            let mut prepared = usize::MAX;
            for (j, o) in out.chunks_mut(plane).enumerate() {
                let p = first + j;
                let (b, m) = (p / g.m, p % g.m);
                let src = b * g.c + m / mg;
                if src != prepared {
                    pr.lay_out(&x[src * ih * iw..(src + 1) * ih * iw], T::zero(), rows);
                    prepared = src;
                }
                let rows: &[T] = rows;
                let wk = &w[m * kh * kw..(m + 1) * kh * kw];
                // The input run tap (ky, kx) reads for output row oy (zeros in the padding).
                let tap =
                    |oy: usize, ky: usize, kx: usize| pr.run(rows, oy, ky, kx).unwrap_or(zero);
                let bias = ep.init(m);
                for oy in 0..oh {
                    let orow = fill(&mut o[oy * ow..(oy + 1) * ow], bias);
                    if kh == 3 && kw == 3 {
                        let n = orow.len();
                        let wv: [T; 9] = std::array::from_fn(|i| wk[i]);
                        // Each run sliced to n here, where the loop below can see it.
                        let (s0, s1, s2, s3, s4, s5, s6, s7, s8) = (
                            &tap(oy, 0, 0)[..n],
                            &tap(oy, 0, 1)[..n],
                            &tap(oy, 0, 2)[..n],
                            &tap(oy, 1, 0)[..n],
                            &tap(oy, 1, 1)[..n],
                            &tap(oy, 1, 2)[..n],
                            &tap(oy, 2, 0)[..n],
                            &tap(oy, 2, 1)[..n],
                            &tap(oy, 2, 2)[..n],
                        );
                        for i in 0..n {
                            let a = wv[0] * s0[i] + wv[1] * s1[i] + wv[2] * s2[i];
                            let bb = wv[3] * s3[i] + wv[4] * s4[i] + wv[5] * s5[i];
                            let cc = wv[6] * s6[i] + wv[7] * s7[i] + wv[8] * s8[i];
                            orow[i] += a + bb + cc;
                        }
                    } else {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let Some(run) = pr.run(rows, oy, ky, kx) else {
                                    break;
                                };
                                let wv = wk[ky * kw + kx];
                                for (ov, &xv) in orow.iter_mut().zip(run) {
                                    *ov += wv * xv;
                                }
                            }
                        }
                    }
                    ep.finish_row(orow, p * plane + oy * ow);
                }
            }
        });
    }
}
