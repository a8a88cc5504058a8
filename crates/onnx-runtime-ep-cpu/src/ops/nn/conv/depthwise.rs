//! Direct 2-D convolution for one input channel per group (depthwise, any channel
//! multiplier). Each input plane is laid out once as padded, stride-phase-split rows
//! ([`row_phases`]), so every kernel tap is a contiguous run and the inner loops vectorize;
//! 3x3 kernels take all nine taps in one pass per output row. Rows start from the bias and
//! get Z and the activation while in cache. Planes run in parallel in chunks big enough to
//! pay for the hand-off.

use crate::ops::nn::common::Real;
use crate::ops::nn::conv::conv_act::Epilogue;
use crate::ops::nn::conv::conv_op::ConvGeom;
use crate::ops::nn::conv::depthwise_kernel;
use crate::ops::nn::scratch::{fill, planes_per_task, run_simd, scratch, PhaseRows, SimdWork};
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
        // f32 3x3 kernels on AVX-512F take the intrinsics row kernel.
        let fast3x3 = std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>()
            && depthwise_kernel::available();
        let pr = PhaseRows::new(&g.win);
        let (ih, iw, oh, ow, kh, kw) = (pr.ih, pr.iw, pr.oh, pr.ow, pr.kh, pr.kw);
        let plane = oh * ow;
        let mut buf_buf = scratch::<T>(pr.plane_len() + pr.phase_len());
        let buf: &mut [T] = &mut buf_buf;
        let (rows, zero) = buf.split_at_mut(pr.plane_len());
        zero.fill(T::zero());
        let zero = &zero[..ow];
        let win = &g.win;
        // Stride 1 or 2, dilation 1: straight from the input plane (no laid-out copy).
        let stride = win.strides[0];
        let direct = fast3x3
            && kh == 3
            && kw == 3
            && win.strides.iter().all(|&s| s == stride)
            && (stride == 1 || stride == 2)
            && win.dilations.iter().all(|&d| d == 1);
        let geom = depthwise_kernel::Plane3x3 {
            ih,
            iw,
            ow,
            pt: win.pad_begin[0],
            pl: win.pad_begin[1],
        };
        let mut prepared = usize::MAX;
        for (j, o) in out.chunks_mut(plane).enumerate() {
            let p = first + j;
            let (b, m) = (p / g.m, p % g.m);
            let src = b * g.c + m / mg;
            if direct {
                let xp = &x[src * ih * iw..(src + 1) * ih * iw];
                let w9: [f32; 9] = std::array::from_fn(|t| bytemuck::cast(w[m * 9 + t]));
                let bias = ep.init(m);
                // SAFETY: T is f32 (fast3x3), the CPU has AVX-512F, `xp` is the ih x iw plane
                // the geometry describes and `o` holds the oh x ow output plane.
                unsafe {
                    let f = if stride == 1 {
                        depthwise_kernel::plane3x3_s1::<depthwise_kernel::Sum>
                    } else {
                        depthwise_kernel::plane3x3_s2::<depthwise_kernel::Sum>
                    };
                    f(
                        &geom,
                        xp.as_ptr().cast(),
                        &w9,
                        bytemuck::cast(bias),
                        oh,
                        o.as_mut_ptr().cast(),
                        None,
                    )
                };
                // SAFETY: every element of `o` was written; MaybeUninit<T> has T's layout.
                let plane_out = unsafe { &mut *(o as *mut [MaybeUninit<T>] as *mut [T]) };
                ep.finish_row(plane_out, p * plane);
                continue;
            }
            if src != prepared {
                pr.lay_out(&x[src * ih * iw..(src + 1) * ih * iw], T::zero(), rows);
                prepared = src;
            }
            let rows: &[T] = rows;
            let wk = &w[m * kh * kw..(m + 1) * kh * kw];
            // The input run tap (ky, kx) reads for output row oy (zeros in the padding).
            let tap = |oy: usize, ky: usize, kx: usize| pr.run(rows, oy, ky, kx).unwrap_or(zero);
            let bias = ep.init(m);
            for oy in 0..oh {
                let dst = &mut o[oy * ow..(oy + 1) * ow];
                if fast3x3 && kh == 3 && kw == 3 {
                    let taps: [*const f32; 9] =
                        std::array::from_fn(|t| tap(oy, t / 3, t % 3)[..ow].as_ptr().cast());
                    let w9: [f32; 9] = std::array::from_fn(|t| bytemuck::cast(wk[t]));
                    // SAFETY: T is f32 (fast3x3), the CPU has AVX-512F, each tap run holds
                    // `ow` values (sliced above) and `dst` is `ow` elements.
                    unsafe {
                        depthwise_kernel::row3x3(
                            &taps,
                            &w9,
                            bytemuck::cast(bias),
                            dst.as_mut_ptr().cast(),
                            ow,
                        )
                    };
                    // SAFETY: row3x3 wrote all `ow` elements; MaybeUninit<T> has T's layout.
                    let orow = unsafe { &mut *(dst as *mut [MaybeUninit<T>] as *mut [T]) };
                    ep.finish_row(orow, p * plane + oy * ow);
                    continue;
                }
                let orow = fill(dst, bias);
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
    }
}
