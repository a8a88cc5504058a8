//! 2-D f32 pools on SIMD:
//! - 3x3 windows of stride 1 or 2 (Inception's stride-1 branch pools, the 3x3 stride-2
//!   downsampling) on AVX-512F through the depthwise plane kernels: max ([`max3x3_f32`]) or
//!   average ([`avg3x3_f32`]) straight from the input plane, masked loads for the padding;
//! - other MaxPool windows with column stride 1 or 2 on AVX2 ([`max2d_f32`]): the kernel rows
//!   fold with explicit max-and-store into a padded row buffer, and each kernel column reads 8
//!   values (stride 1) or reads 16 and keeps the even ones (stride 2: a shuffle and a lane
//!   permute), so 8 outputs take `kw` loads and maxes (the generic path lays each folded row
//!   out in stride phases, a scalar gather).

use crate::ops::nn::conv::depthwise_kernel::{self, Fold, Max, Sum};
use crate::ops::nn::pool::pool2d::{planes_vec, tap_counts};
use crate::ops::nn::scratch::{scratch, PhaseRows};
use crate::ops::nn::window::Window;
use std::mem::MaybeUninit;

/// The max pool of `x` (`planes` planes) over `w` when the fast path applies: f32, column
/// stride 1 or 2, no column dilation, and a CPU with AVX2. `w` must satisfy
/// [`crate::ops::nn::pool::pool2d::fits`]. 3x3 windows of equal strides take
/// [`max3x3_f32`] where the CPU has AVX-512F.
pub fn max2d_f32(x: &[f32], planes: usize, w: &Window) -> Option<Vec<f32>> {
    max3x3_f32(x, planes, w).or_else(|| max2d_avx2_f32(x, planes, w))
}

/// [`max2d_f32`] on AVX2 (any kernel).
fn max2d_avx2_f32(x: &[f32], planes: usize, w: &Window) -> Option<Vec<f32>> {
    #[cfg(target_arch = "x86_64")]
    {
        let sw = w.strides[1];
        if !(sw == 1 || sw == 2) || w.dilations[1] != 1 || !std::is_x86_feature_detected!("avx2") {
            return None;
        }
        let plane = w.output_size();
        Some(planes_vec(
            planes,
            plane,
            plane * w.kernel_size(),
            |first, out| {
                // SAFETY: the CPU has AVX2 (checked above).
                unsafe {
                    if sw == 2 {
                        avx2::planes::<2>(x, w, first, out)
                    } else {
                        avx2::planes::<1>(x, w, first, out)
                    }
                }
            },
        ))
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (x, planes, w);
        None
    }
}

/// The f32 average pool of `x` over a 3x3 window of stride 1 or 2 (both axes), dilation 1,
/// on AVX-512F: the depthwise plane kernels with unit weights sum each window straight from
/// the input plane, each sum divided by its tap count in registers (with or without the padding,
/// as `include_pad` says). `w` must satisfy [`crate::ops::nn::pool::pool2d::fits`]; None
/// where this path does not apply.
pub fn avg3x3_f32(x: &[f32], planes: usize, w: &Window, include_pad: bool) -> Option<Vec<f32>> {
    if !plane3x3_fits(w) {
        return None;
    }
    let count = |d: usize| -> Vec<f32> {
        tap_counts(w, d)
            .into_iter()
            .map(|(valid, padded)| (if include_pad { padded } else { valid }) as f32)
            .collect()
    };
    Some(pool3x3::<Sum>(x, planes, w, Some((&count(0), &count(1)))))
}

/// The f32 max pool of `x` over a 3x3 window of stride 1 or 2 (both axes), dilation 1, on
/// AVX-512F: the depthwise plane kernels folding maxima straight from the input plane (the
/// padding reads -inf through the lane masks). NaN inputs are skipped, as in the other f32
/// max pools. `w` as [`avg3x3_f32`] requires; None where this path does not apply.
pub fn max3x3_f32(x: &[f32], planes: usize, w: &Window) -> Option<Vec<f32>> {
    plane3x3_fits(w).then(|| pool3x3::<Max>(x, planes, w, None))
}

/// Whether [`pool3x3`] takes the window: 2-D 3x3, equal strides of 1 or 2, dilation 1, and a
/// CPU with AVX-512F.
fn plane3x3_fits(w: &Window) -> bool {
    let s = w.strides[0];
    w.input.len() == 2
        && w.kernel == [3, 3]
        && w.strides[1] == s
        && (s == 1 || s == 2)
        && w.dilations.iter().all(|&d| d == 1)
        && depthwise_kernel::available()
}

/// Every plane of `x` through the 3x3 plane kernel of the window's stride, folded with `F`
/// (unit weights; `div` the row and column tap counts a sum is divided by).
fn pool3x3<F: Fold>(
    x: &[f32],
    planes: usize,
    w: &Window,
    div: Option<(&[f32], &[f32])>,
) -> Vec<f32> {
    let (ih, iw, oh, ow) = (w.input[0], w.input[1], w.output[0], w.output[1]);
    let geom = depthwise_kernel::Plane3x3 {
        ih,
        iw,
        ow,
        pt: w.pad_begin[0],
        pl: w.pad_begin[1],
    };
    let plane = oh * ow;
    let f = if w.strides[0] == 1 {
        depthwise_kernel::plane3x3_s1::<F>
    } else {
        depthwise_kernel::plane3x3_s2::<F>
    };
    planes_vec(planes, plane, plane * 9, |first, out| {
        for (j, o) in out.chunks_mut(plane).enumerate() {
            let xp = &x[(first + j) * ih * iw..(first + j + 1) * ih * iw];
            // SAFETY: the CPU has AVX-512F (plane3x3_fits); `xp` is the ih x iw plane the
            // geometry describes and `o` the oh x ow output plane, written whole.
            unsafe {
                f(
                    &geom,
                    xp.as_ptr(),
                    &[1.0; 9],
                    0.0,
                    oh,
                    o.as_mut_ptr().cast(),
                    div,
                )
            };
        }
    })
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::*;
    use std::arch::x86_64::*;

    /// The even-indexed values of `p[0..16]`, in order.
    ///
    /// # Safety
    /// AVX2; `p` valid for 16 reads.
    #[inline(always)]
    unsafe fn evens(p: *const f32) -> __m256 {
        // SAFETY: the caller's contract.
        unsafe {
            let (a, b) = (_mm256_loadu_ps(p), _mm256_loadu_ps(p.add(8)));
            // [a0 a2 b0 b2 | a4 a6 b4 b6] -> [a0 a2 a4 a6 b0 b2 b4 b6]
            let t = _mm256_shuffle_ps::<0b10_00_10_00>(a, b);
            _mm256_castpd_ps(_mm256_permute4x64_pd::<0b11_01_10_00>(_mm256_castps_pd(t)))
        }
    }

    /// The 8 values kernel column `kx` reads for outputs `o8..o8 + 8` at column stride `S`.
    ///
    /// # Safety
    /// AVX2; `p` (the padded row at `S * o8 + kx`) valid for `8 * S` reads.
    #[inline(always)]
    unsafe fn taps<const S: usize>(p: *const f32) -> __m256 {
        // SAFETY: the caller's contract.
        unsafe {
            if S == 2 {
                evens(p)
            } else {
                _mm256_loadu_ps(p)
            }
        }
    }

    /// `dst[i] = max(src[i], dst[i])`, with plain stores.
    #[inline(always)]
    fn fold_max(dst: &mut [f32], src: &[f32]) {
        let n = dst.len().min(src.len());
        let mut i = 0;
        // SAFETY: i + 8 <= n for every vector access; AVX2 is enabled in the caller.
        unsafe {
            while i + 8 <= n {
                let d = dst.as_mut_ptr().add(i);
                let v = _mm256_max_ps(_mm256_loadu_ps(src.as_ptr().add(i)), _mm256_loadu_ps(d));
                _mm256_storeu_ps(d, v);
                i += 8;
            }
        }
        // The tail with scalar maxes too: a select here compiles to masked stores.
        while i < n {
            // SAFETY: i < n.
            unsafe {
                let d = dst.as_mut_ptr().add(i);
                _mm_store_ss(
                    d,
                    _mm_max_ss(_mm_load_ss(src.as_ptr().add(i)), _mm_load_ss(d)),
                );
            }
            i += 1;
        }
    }

    /// Output planes `first..` (as many as `out` holds), column stride `S`.
    ///
    /// # Safety
    /// AVX2; `w` as [`max2d_f32`] requires, `out` a whole number of output planes within the
    /// `x`'s planes.
    #[target_feature(enable = "avx2")]
    pub unsafe fn planes<const S: usize>(
        x: &[f32],
        w: &Window,
        first: usize,
        out: &mut [MaybeUninit<f32>],
    ) {
        let g = PhaseRows::new(w);
        let (ih, iw, oh, ow, kw) = (g.ih, g.iw, g.oh, g.ow, g.kw);
        let pl = w.pad_begin[1];
        let plane = oh * ow;
        // Padded row: column c of the padded input at `c`; every read of the 8-output
        // blocks (below S * ow8 + kw + 8 * S) stays inside.
        let ow8 = ow.div_ceil(8) * 8;
        let plen = (S * ow8 + kw + 8 * S).max(pl + iw);
        // A guard, not a closure: the loops stay in this AVX2 function.
        let mut prow = scratch::<f32>(plen);
        let prow: &mut [f32] = &mut prow;
        // The padding stays -inf: only columns pl..pl+iw are ever written.
        prow.fill(f32::NEG_INFINITY);
        for (j, o) in out.chunks_mut(plane).enumerate() {
            let xp = &x[(first + j) * ih * iw..(first + j + 1) * ih * iw];
            for oy in 0..oh {
                let orow = &mut o[oy * ow..(oy + 1) * ow];
                let dst = &mut prow[pl..pl + iw];
                let mut have = false;
                for ky in 0..g.kh {
                    if let Some(r) = g.input_row(oy, ky) {
                        let src = &xp[r * iw..(r + 1) * iw];
                        if have {
                            fold_max(dst, src);
                        } else {
                            dst.copy_from_slice(src);
                            have = true;
                        }
                    }
                }
                if !have {
                    dst.fill(f32::NEG_INFINITY);
                }
                let base = prow.as_ptr();
                let mut o8 = 0;
                while o8 < ow {
                    // SAFETY: reads end below S * o8 + kw + 8 * S <= plen.
                    let m = unsafe {
                        let p = base.add(S * o8);
                        let mut m = taps::<S>(p);
                        for kx in 1..kw {
                            m = _mm256_max_ps(taps::<S>(p.add(kx)), m);
                        }
                        m
                    };
                    let dst = orow[o8..].as_mut_ptr() as *mut f32;
                    if o8 + 8 <= ow {
                        // SAFETY: 8 outputs of this row remain.
                        unsafe { _mm256_storeu_ps(dst, m) };
                    } else {
                        let mut t = [0f32; 8];
                        // SAFETY: `t` holds 8 values; `ow - o8` of this row remain.
                        unsafe {
                            _mm256_storeu_ps(t.as_mut_ptr(), m);
                            std::ptr::copy_nonoverlapping(t.as_ptr(), dst, ow - o8);
                        }
                    }
                    o8 += 8;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::rand;
    use crate::ops::nn::pool::pool2d::tests::reference;
    use crate::ops::nn::window::{AutoPad, WindowAttrs};

    #[test]
    fn strides_one_and_two_match_brute_force() {
        if !std::is_x86_feature_detected!("avx2") {
            return;
        }
        // (input, kernel, strides, pads [top, left, bottom, right], ceil_mode, planes)
        type Case = ([usize; 2], [usize; 2], [usize; 2], [usize; 4], bool, usize);
        let cases: &[Case] = &[
            ([109, 109], [3, 3], [2, 2], [0, 0, 0, 0], true, 5),
            ([55, 55], [3, 3], [2, 2], [0, 0, 0, 0], false, 3),
            ([112, 112], [3, 3], [2, 2], [1, 1, 1, 1], false, 2),
            ([8, 9], [2, 2], [2, 2], [0, 0, 0, 0], false, 4),
            ([7, 5], [3, 3], [1, 2], [1, 1, 1, 1], true, 3),
            ([4, 3], [1, 1], [2, 2], [0, 0, 0, 0], false, 2),
            ([13, 40], [3, 4], [2, 2], [0, 2, 1, 1], false, 70),
            ([28, 28], [3, 3], [1, 1], [1, 1, 1, 1], false, 6),
            ([9, 17], [2, 3], [2, 1], [0, 0, 1, 2], true, 3),
            ([3, 3], [3, 3], [1, 1], [0, 0, 0, 0], false, 2),
            // Around the 16-lane strips of the AVX-512 3x3 kernels.
            ([14, 14], [3, 3], [1, 1], [1, 1, 1, 1], false, 3),
            ([9, 33], [3, 3], [1, 1], [0, 2, 1, 0], false, 2),
            ([15, 31], [3, 3], [2, 2], [1, 1, 1, 1], true, 3),
            ([6, 17], [3, 3], [2, 2], [0, 0, 0, 0], true, 2),
            ([35, 35], [3, 3], [2, 2], [0, 0, 0, 0], false, 2),
        ];
        for &(input, kernel, strides, pads, ceil_mode, planes) in cases {
            let attrs = WindowAttrs {
                kernel: Some(kernel.to_vec()),
                strides: Some(strides.to_vec()),
                dilations: None,
                pads: Some(pads.to_vec()),
                auto_pad: AutoPad::NotSet,
                ceil_mode,
            };
            let w = attrs.resolve("test", &input, &kernel).unwrap();
            let n = planes * input[0] * input[1];
            // f32 values, so the float64 brute force is exact.
            let x: Vec<f64> = rand(n, 9, -5.0, 5.0)
                .iter()
                .map(|&v| v as f32 as f64)
                .collect();
            let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            let want = reference(&x, planes, &w).0;
            let paths = [
                ("avx2", max2d_avx2_f32(&xf, planes, &w)),
                ("avx512 3x3", max3x3_f32(&xf, planes, &w)),
            ];
            assert!(
                paths[0].1.is_some(),
                "{input:?} {kernel:?}: the AVX2 path declined"
            );
            for (path, got) in paths {
                let Some(got) = got else { continue };
                let got: Vec<f64> = got.iter().map(|&v| v as f64).collect();
                assert_eq!(
                    got, want,
                    "{path}: {input:?} {kernel:?} {strides:?} {pads:?}"
                );
            }
        }
    }

    #[test]
    fn average_3x3_matches_brute_force() {
        if !crate::ops::nn::conv::depthwise_kernel::available() {
            return;
        }
        // (input, strides, pads [top, left, bottom, right], ceil_mode, planes): widths
        // around the 16-lane strips, stride 1 and 2, asymmetric pads, ceil_mode.
        type Case = ([usize; 2], usize, [usize; 4], bool, usize);
        let cases: &[Case] = &[
            ([28, 28], 1, [1, 1, 1, 1], false, 5),
            ([14, 14], 1, [1, 1, 1, 1], false, 3),
            ([7, 7], 1, [1, 1, 1, 1], false, 3),
            ([9, 33], 1, [0, 2, 1, 0], false, 2),
            ([56, 56], 2, [0, 0, 1, 1], false, 2),
            ([15, 31], 2, [1, 1, 1, 1], true, 3),
            ([6, 17], 2, [0, 0, 0, 0], true, 2),
            ([3, 3], 1, [0, 0, 0, 0], false, 2),
        ];
        for &(input, s, pads, ceil_mode, planes) in cases {
            let attrs = WindowAttrs {
                kernel: Some(vec![3, 3]),
                strides: Some(vec![s, s]),
                dilations: None,
                pads: Some(pads.to_vec()),
                auto_pad: AutoPad::NotSet,
                ceil_mode,
            };
            let w = attrs.resolve("test", &input, &[3, 3]).unwrap();
            let n = planes * input[0] * input[1];
            let x: Vec<f64> = rand(n, 7, -5.0, 5.0)
                .iter()
                .map(|&v| v as f32 as f64)
                .collect();
            let xf: Vec<f32> = x.iter().map(|&v| v as f32).collect();
            let (_, av, avp) = reference(&x, planes, &w);
            for (include_pad, want) in [(false, av), (true, avp)] {
                let got = avg3x3_f32(&xf, planes, &w, include_pad).expect("fast path");
                assert_eq!(got.len(), want.len());
                for (i, (&g, &e)) in got.iter().zip(&want).enumerate() {
                    // A sum of nine f32 values, then one division: a few ulps.
                    assert!(
                        (g as f64 - e).abs() <= 1e-5 * e.abs().max(1.0),
                        "{input:?} stride {s} {pads:?} pad {include_pad} at {i}: {g} vs {e}"
                    );
                }
            }
        }
    }
}
