//! ConvTranspose whose kernel equals its stride (no dilation, padding or output padding), as
//! in the 2x upsampling heads of detection models: every output element comes from exactly
//! one kernel tap, so nothing is summed. Per block of input rows one GEMM `W_g^T @ X_g` lands
//! in a cache-sized buffer that is interleaved straight into the output with the bias added;
//! the output is never zero-filled and blocks run in parallel.

use crate::ops::nn::common::{gemm_raw, Real};
use crate::ops::nn::scratch::{build_vec, run_simd, scratch, worth_parallel, SharedMut, SimdWork};
use crate::ops::nn::window::Window;
use rayon::prelude::*;
use std::mem::MaybeUninit;

/// Whether `win` (as ConvTranspose builds it: `input` the output image, `output` the input
/// image) is a 1-D or 2-D window with kernel == stride and nothing padded or dilated.
pub fn fits(win: &Window) -> bool {
    let r = win.output.len();
    (r == 1 || r == 2)
        && (0..r).all(|d| {
            win.kernel[d] == win.strides[d]
                && (win.dilations[d] == 1 || win.kernel[d] == 1)
                && win.pad_begin[d] == 0
                && win.pad_end[d] == 0
                && win.input[d] == win.output[d] * win.strides[d]
        })
}

/// Column elements one block's GEMM result should hold (fits in L2 with its inputs).
const BLOCK_ELEMS: usize = 1 << 15;

/// The layer's sizes: `n` images of `c` channels in `group` groups, `m` output channels.
pub struct Dims {
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub group: usize,
}

/// The ConvTranspose of `x` ([n, c, in...]) by `w` ([c, m/group, k...]) plus `bias`; `win`
/// must satisfy [`fits`].
pub fn compute<T: Real>(d: &Dims, win: &Window, x: &[T], w: &[T], bias: Option<&[T]>) -> Vec<T> {
    let (ih, iw, kh, kw) = if win.output.len() == 2 {
        (win.output[0], win.output[1], win.kernel[0], win.kernel[1])
    } else {
        (1, win.output[0], 1, win.kernel[0])
    };
    let (cg, mg) = (d.c / d.group, d.m / d.group);
    let ks = kh * kw;
    let (in_sz, ow) = (ih * iw, iw * kw);
    let out_sz = in_sz * ks;
    let total = d.n * d.m * out_sz;
    if total == 0 {
        return Vec::new();
    }
    let rows = (BLOCK_ELEMS / (mg * ks * iw).max(1)).clamp(1, ih.max(1));
    let blocks = ih.div_ceil(rows);
    let tasks = d.n * d.group * blocks;
    let parallel = tasks > 1 && worth_parallel(total * cg);
    // SAFETY: the tasks together write every output element (each (image, group, block)
    // writes all `mg` planes' rows `iy * kh + ky` for its input rows `iy`), and distinct
    // tasks write disjoint elements.
    unsafe {
        build_vec(total, |out| {
            let dst = SharedMut(out.as_mut_ptr());
            let task = |t: usize| {
                let blk = t % blocks;
                let g = (t / blocks) % d.group;
                let b = t / (blocks * d.group);
                let iy0 = blk * rows;
                let nrows = rows.min(ih - iy0);
                let cols = nrows * iw;
                let mut col_buf = scratch::<T>(mg * ks * cols);
                let col: &mut [T] = &mut col_buf;
                let wg = &w[g * cg * mg * ks..(g + 1) * cg * mg * ks];
                let xg = &x[(b * d.c + g * cg) * in_sz + iy0 * iw..];
                // SAFETY: `col` is `mg*ks` rows of `cols`, a unique borrow.
                gemm_raw(
                    mg * ks,
                    cols,
                    cg,
                    wg,
                    (1, mg * ks),
                    xg,
                    (in_sz, 1),
                    col.as_mut_ptr(),
                    cols,
                    T::one(),
                    T::zero(),
                    gemm::Parallelism::None,
                );
                for mi in 0..mg {
                    let oc = g * mg + mi;
                    let bv = bias.map_or(T::zero(), |bs| bs[oc]);
                    let plane = (b * d.m + oc) * out_sz;
                    for r in 0..nrows {
                        for ky in 0..kh {
                            let oy = (iy0 + r) * kh + ky;
                            // SAFETY: row `oy` of plane `oc` of image `b` belongs to this
                            // task alone and lies inside the `total` elements of `out`.
                            let orow =
                                std::slice::from_raw_parts_mut(dst.get().add(plane + oy * ow), ow);
                            let src = &col[(mi * ks + ky * kw) * cols + r * iw..];
                            run_simd(Interleave {
                                src,
                                stride: cols,
                                iw,
                                kw,
                                bias: bv,
                                out: orow,
                            });
                        }
                    }
                }
            };
            if parallel {
                (0..tasks).into_par_iter().for_each(task);
            } else {
                (0..tasks).for_each(task);
            }
        })
    }
}

/// One output row: `out[ix * kw + kx] = src[kx * stride + ix] + bias`.
struct Interleave<'a, T> {
    src: &'a [T],
    stride: usize,
    iw: usize,
    kw: usize,
    bias: T,
    out: &'a mut [MaybeUninit<T>],
}

impl<T: Real> SimdWork for Interleave<'_, T> {
    #[inline(always)]
    fn run(self) {
        let Interleave {
            src,
            stride,
            iw,
            kw,
            bias,
            out,
        } = self;
        match kw {
            1 => {
                for (o, &v) in out.iter_mut().zip(&src[..iw]) {
                    o.write(v + bias);
                }
            }
            2 => {
                let (s0, s1) = (&src[..iw], &src[stride..stride + iw]);
                for ((o, &a), &b) in out.chunks_exact_mut(2).zip(s0).zip(s1) {
                    o[0].write(a + bias);
                    o[1].write(b + bias);
                }
            }
            _ => {
                for kx in 0..kw {
                    let s = &src[kx * stride..kx * stride + iw];
                    for (o, &v) in out[kx..].iter_mut().step_by(kw).zip(s) {
                        o.write(v + bias);
                    }
                }
            }
        }
    }
}
