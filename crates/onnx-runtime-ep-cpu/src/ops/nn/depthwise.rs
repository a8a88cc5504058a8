//! Direct 2-D convolution for one input channel per group (depthwise, any channel
//! multiplier). Each input plane is laid out once as padded, stride-phase-split rows
//! ([`row_phases`]), so every kernel tap is a contiguous run and the inner loops vectorize;
//! 3x3 kernels take all nine taps in one pass per output row. Rows start from the bias and
//! get Z and the activation while in cache. Planes run in parallel in chunks big enough to
//! pay for the hand-off.

use super::common::Real;
use super::conv::ConvGeom;
use super::conv_act::Epilogue;
use super::scratch::{fill, with_scratch, worth_parallel};
use super::window::row_phases;
use std::mem::MaybeUninit;

/// Multiply-adds one parallel task should get at least.
const TASK_MACS: usize = 1 << 15;

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
    let per_plane = plane * win.kernel_size();
    let total = planes * per_plane;
    if worth_parallel(total) {
        use rayon::prelude::*;
        let threads = rayon::current_num_threads();
        let by_work = TASK_MACS.div_ceil(per_plane.max(1));
        let per_task = by_work.max(planes / (4 * threads)).clamp(1, planes);
        out.par_chunks_mut(per_task * plane)
            .enumerate()
            .for_each(|(i, o)| run_planes(g, x, w, ep, i * per_task, o));
    } else {
        run_planes(g, x, w, ep, 0, out);
    }
}

/// Computes output planes `first..` (as many as `out` holds).
fn run_planes<T: Real>(
    g: &ConvGeom,
    x: &[T],
    w: &[T],
    ep: &Epilogue<T>,
    first: usize,
    out: &mut [MaybeUninit<T>],
) {
    #[cfg(target_arch = "x86_64")]
    {
        if std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
        {
            // SAFETY: the CPU has the features `run_planes_avx2` is compiled for.
            unsafe { run_planes_avx2(g, x, w, ep, first, out) };
            return;
        }
    }
    run_planes_body(g, x, w, ep, first, out);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn run_planes_avx2<T: Real>(
    g: &ConvGeom,
    x: &[T],
    w: &[T],
    ep: &Epilogue<T>,
    first: usize,
    out: &mut [MaybeUninit<T>],
) {
    run_planes_body(g, x, w, ep, first, out);
}

#[inline(always)]
fn run_planes_body<T: Real>(
    g: &ConvGeom,
    x: &[T],
    w: &[T],
    ep: &Epilogue<T>,
    first: usize,
    out: &mut [MaybeUninit<T>],
) {
    let win = &g.win;
    let mg = g.m / g.group;
    let (ih, iw) = (win.input[0], win.input[1]);
    let (oh, ow) = (win.output[0], win.output[1]);
    let (kh, kw) = (win.kernel[0], win.kernel[1]);
    let (sh, sw) = (win.strides[0], win.strides[1]);
    let (dh, dw) = (win.dilations[0], win.dilations[1]);
    let (pt, pl) = (win.pad_begin[0], win.pad_begin[1]);
    // Phase length: output column o of tap kx reads phase (kx*dw % sw) at o + kx*dw / sw.
    let plen = ow + ((kw - 1) * dw) / sw;
    let row_len = sw * plen;
    let plane = oh * ow;
    with_scratch(ih * row_len + plen, |buf: &mut [T]| {
        let (rows, zero) = buf.split_at_mut(ih * row_len);
        zero.fill(T::zero());
        let zero = &zero[..ow];
        let mut prepared = usize::MAX;
        for (j, o) in out.chunks_mut(plane).enumerate() {
            let p = first + j;
            let (b, m) = (p / g.m, p % g.m);
            let src = b * g.c + m / mg;
            if src != prepared {
                let xp = &x[src * ih * iw..(src + 1) * ih * iw];
                for (iy, dst) in rows.chunks_exact_mut(row_len).enumerate() {
                    row_phases(&xp[iy * iw..(iy + 1) * iw], pl, sw, plen, T::zero(), dst);
                }
                prepared = src;
            }
            let rows: &[T] = rows;
            let wk = &w[m * kh * kw..(m + 1) * kh * kw];
            // The input run tap (ky, kx) reads for output row oy (zeros in the padding).
            let tap = |oy: usize, ky: usize, kx: usize| {
                let iy = (oy * sh + ky * dh) as isize - pt as isize;
                if iy < 0 || iy >= ih as isize {
                    return zero;
                }
                let t = kx * dw;
                let start = iy as usize * row_len + (t % sw) * plen + t / sw;
                &rows[start..start + ow]
            };
            let bias = ep.init(m);
            for oy in 0..oh {
                let orow = fill(&mut o[oy * ow..(oy + 1) * ow], bias);
                if kh == 3 && kw == 3 {
                    let n = orow.len();
                    let wv: [T; 9] = std::array::from_fn(|i| wk[i]);
                    let (s0, s1, s2) = (
                        &tap(oy, 0, 0)[..n],
                        &tap(oy, 0, 1)[..n],
                        &tap(oy, 0, 2)[..n],
                    );
                    let (s3, s4, s5) = (
                        &tap(oy, 1, 0)[..n],
                        &tap(oy, 1, 1)[..n],
                        &tap(oy, 1, 2)[..n],
                    );
                    let (s6, s7, s8) = (
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
                        let iy = (oy * sh + ky * dh) as isize - pt as isize;
                        if iy < 0 || iy >= ih as isize {
                            continue;
                        }
                        for kx in 0..kw {
                            let wv = wk[ky * kw + kx];
                            for (ov, &xv) in orow.iter_mut().zip(tap(oy, ky, kx)) {
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
