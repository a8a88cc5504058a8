//! The AVX-512 block product of [`crate::ops::nn::gemm::sgemm`], for CPUs that have AVX-512F (Zen 4 and later,
//! Intel server and client cores since Skylake-SP).
//!
//! Its tile is [`MR_WIDE`] rows by two B panels (`2 * NR` = 32 columns): 16 zmm accumulators,
//! two B loads and eight broadcasts per depth step, against the AVX2 tile's 12 accumulators
//! for 6 x 16. Eight rows fit the short products of transformer encoders (sequence lengths
//! of 8, 16, 32 ...) with no padding rows, where the 6-row tile computes 18 rows for 16, and
//! the load-to-FMA ratio halves. B panels are the same packed `NR`-wide panels as for the AVX2
//! kernel (the tile reads two neighbours), so constant weights are packed once for both; only
//! A, packed per call, is packed `MR_WIDE` rows wide.

use crate::ops::nn::gemm::sgemm::{finish_rows, Panels, KC};
use crate::ops::nn::gemm::sgemm_kernel::NR;

/// Rows of C per wide tile (8 x 32).
pub const MR_WIDE: usize = 8;
/// Rows of C per tall tile (16 x 16): products of at most 16 rows stream each B panel once.
pub const MR_TALL: usize = 16;

/// Whether this CPU runs the wide kernel.
#[inline]
pub fn available() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::is_x86_feature_detected!("avx512f")
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

/// `c = a @ b` for a block of `m` rows and `n` columns, as [`crate::ops::nn::gemm::sgemm::gemm_panels`] but
/// with `a` in [`MR_WIDE`]-row panels; `finish(row, segment)` runs once per finished row.
///
/// # Safety
/// [`available`] must be true; `c` must be valid for writes of `c[i * ldc + j]` for `i < m`,
/// `j < n`, and no other live reference may access that block.
pub unsafe fn gemm_panels_wide(
    m: usize,
    n: usize,
    a: Panels<'_>,
    b: Panels<'_>,
    c: *mut f32,
    ldc: usize,
    finish: &mut dyn FnMut(usize, &mut [f32]),
) {
    let k = a.k;
    let mr = a.w;
    let (mp, np) = (m.div_ceil(mr), n.div_ceil(NR));
    assert!(
        b.k == k
            && (mr == MR_WIDE || mr == MR_TALL)
            && b.w == NR
            && a.first + mp <= a.count
            && b.first + np <= b.count,
        "gemm_panels_wide: panels do not cover the block"
    );
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // SAFETY: the caller's block.
        unsafe { finish_rows(m, n, c, ldc, true, finish) };
        return;
    }
    let mut p0 = 0;
    while p0 < k {
        let kc = KC.min(k - p0);
        // A pair of B panels outer (32 KiB, in L1/L2), A panels inner.
        let mut jp = 0;
        while jp < np {
            // Tall tiles take one B panel at a time, wide ones two.
            let pair = mr == MR_WIDE && np - jp >= 2;
            let cols = (if pair { 2 * NR } else { NR }).min(n - jp * NR);
            let b0 = b.at(p0, kc, jp);
            let b1 = if pair { b.at(p0, kc, jp + 1) } else { b0 };
            for ip in 0..mp {
                let rows = mr.min(m - ip * mr);
                let ap = a.at(p0, kc, ip);
                let ct = c.add(ip * mr * ldc + jp * NR);
                // SAFETY: the panels hold `kc` steps each; the tile (rows x cols at row
                // ip*mr, column jp*NR) lies in the caller's block; the CPU has AVX-512F (the
                // caller's contract).
                #[cfg(target_arch = "x86_64")]
                unsafe {
                    let (a, acc) = (ap.as_ptr(), p0 > 0);
                    let (b0, b1) = (b0.as_ptr(), b1.as_ptr());
                    // A last panel with few rows computes only those (plus padding up to 4
                    // or 8): M = 20 is 8 + 8 + 4 rows of work, not 24.
                    const T: usize = MR_TALL;
                    const W: usize = MR_WIDE;
                    match (mr == T, pair, rows <= W / 2) {
                        (true, _, _) if rows <= W => {
                            avx512::kernel::<W, T, 1>(kc, a, [b0], ct, ldc, rows, cols, acc)
                        }
                        (true, _, _) => {
                            avx512::kernel::<T, T, 1>(kc, a, [b0], ct, ldc, rows, cols, acc)
                        }
                        (false, true, true) => avx512::kernel::<{ W / 2 }, W, 2>(
                            kc,
                            a,
                            [b0, b1],
                            ct,
                            ldc,
                            rows,
                            cols,
                            acc,
                        ),
                        (false, true, false) => {
                            avx512::kernel::<W, W, 2>(kc, a, [b0, b1], ct, ldc, rows, cols, acc)
                        }
                        (false, false, true) => {
                            avx512::kernel::<{ W / 2 }, W, 1>(kc, a, [b0], ct, ldc, rows, cols, acc)
                        }
                        (false, false, false) => {
                            avx512::kernel::<W, W, 1>(kc, a, [b0], ct, ldc, rows, cols, acc)
                        }
                    }
                }
                #[cfg(not(target_arch = "x86_64"))]
                let _ = (ap, b1, ct, rows, cols);
            }
            jp += if pair { 2 } else { 1 };
        }
        p0 += kc;
    }
    // SAFETY: the caller's block, fully written by the passes above.
    unsafe { finish_rows(m, n, c, ldc, false, finish) };
}

#[cfg(target_arch = "x86_64")]
mod avx512 {
    use super::NR;
    use std::arch::x86_64::*;

    /// B values (depth steps) each stream prefetches ahead.
    const PREFETCH_STEPS: usize = 32;

    /// `C[0..rows, 0..cols] (+)= A_panel @ [B panels]` over `kc` steps, `NB` B panels of `NR`
    /// columns (one zmm each per step), for the first `R` rows of an A panel `S` rows wide.
    ///
    /// # Safety
    /// AVX-512F; `R <= S`; `a` valid for `kc * S` reads and each `b[i]` for `kc * NR`; `c` for
    /// reads (with `accumulate`) and writes of `c[r * ldc + j]`, `r < rows <= R`,
    /// `j < cols <= NB * NR`.
    #[target_feature(enable = "avx512f")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn kernel<const R: usize, const S: usize, const NB: usize>(
        kc: usize,
        a: *const f32,
        b: [*const f32; NB],
        c: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        accumulate: bool,
    ) {
        // SAFETY (whole body): reads stay within kc * S values of `a` and kc * NR of
        // each B panel (prefetches are hints and never fault); stores within the caller's
        // rows x cols tile of `c`.
        unsafe {
            let mut acc = [[_mm512_setzero_ps(); NB]; R];
            for p in 0..kc {
                let mut bv = [_mm512_setzero_ps(); NB];
                for (v, &bp) in bv.iter_mut().zip(&b) {
                    _mm_prefetch::<_MM_HINT_T0>(
                        bp.wrapping_add((p + PREFETCH_STEPS) * NR) as *const i8
                    );
                    *v = _mm512_loadu_ps(bp.add(p * NR));
                }
                let ap = a.add(p * S);
                for (r, line) in acc.iter_mut().enumerate() {
                    let av = _mm512_set1_ps(*ap.add(r));
                    for (o, &v) in line.iter_mut().zip(&bv) {
                        *o = _mm512_fmadd_ps(av, v, *o);
                    }
                }
            }
            for (r, line) in acc.iter().enumerate().take(rows) {
                let cr = c.add(r * ldc);
                for (q, &v) in line.iter().enumerate() {
                    let j0 = q * NR;
                    if j0 >= cols {
                        break;
                    }
                    let left = cols - j0;
                    let mask: __mmask16 = if left >= NR {
                        0xFFFF
                    } else {
                        (1u16 << left) - 1
                    };
                    let dst = cr.add(j0);
                    let v = if accumulate {
                        _mm512_add_ps(v, _mm512_maskz_loadu_ps(mask, dst))
                    } else {
                        v
                    };
                    _mm512_mask_storeu_ps(dst, mask, v);
                }
            }
        }
    }
}
