//! The register-blocked micro-kernel of [`crate::ops::nn::gemm::sgemm`]: an `MR x NR` tile of C from one A
//! panel and one B panel. x86-64 CPUs with AVX2+FMA keep the tile in 12 ymm accumulators;
//! elsewhere a portable loop over the same layout (which the compiler vectorizes for the
//! target) does the work.

/// Rows of C per tile (broadcasts of A per depth step).
pub const MR: usize = 6;
/// Columns of C per tile (two 8-lane vectors).
pub const NR: usize = 16;

/// `C[0..rows, 0..cols] (+)= A_panel @ B_panel` over `kc` depth steps, where `a` points at
/// `kc * MR` packed A values and `b` at `kc * NR` packed B values. With `accumulate` the tile
/// is added to C, otherwise C is only written.
///
/// # Safety
/// `a` and `b` must be valid for those reads; `c` for reads (with `accumulate`) and writes of
/// `c[r * ldc + j]`, `r < rows <= MR`, `j < cols <= NR`.
#[inline]
#[allow(clippy::too_many_arguments)]
pub unsafe fn micro_kernel(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    accumulate: bool,
) {
    debug_assert!(rows <= MR && cols <= NR);
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA; the pointer contract is the caller's.
        unsafe { avx2::kernel(kc, a, b, c, ldc, rows, cols, accumulate) };
        return;
    }
    // SAFETY: the caller's contract.
    unsafe { portable(kc, a, b, c, ldc, rows, cols, accumulate) }
}

#[cfg(target_arch = "x86_64")]
#[inline]
fn has_avx2_fma() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// Writes (or adds) the computed `MR x NR` tile `acc` into C, clipped to `rows x cols`.
///
/// # Safety
/// As [`micro_kernel`] for `c`.
#[inline(always)]
unsafe fn store_tile(
    acc: &[[f32; NR]; MR],
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    accumulate: bool,
) {
    for (r, line) in acc.iter().enumerate().take(rows) {
        for (j, &v) in line.iter().enumerate().take(cols) {
            // SAFETY: r < rows, j < cols, inside the caller's tile.
            unsafe {
                let p = c.add(r * ldc + j);
                *p = if accumulate { *p + v } else { v };
            }
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn portable(
    kc: usize,
    a: *const f32,
    b: *const f32,
    c: *mut f32,
    ldc: usize,
    rows: usize,
    cols: usize,
    accumulate: bool,
) {
    let mut acc = [[0.0f32; NR]; MR];
    // SAFETY: the caller guarantees kc * MR and kc * NR readable values.
    let (a, b) = unsafe {
        (
            std::slice::from_raw_parts(a, kc * MR),
            std::slice::from_raw_parts(b, kc * NR),
        )
    };
    for (ap, bp) in a.chunks_exact(MR).zip(b.chunks_exact(NR)) {
        for (line, &av) in acc.iter_mut().zip(ap) {
            for (o, &bv) in line.iter_mut().zip(bp) {
                *o += av * bv;
            }
        }
    }
    // SAFETY: the caller's contract for `c`.
    unsafe { store_tile(&acc, c, ldc, rows, cols, accumulate) }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{store_tile, MR, NR};
    use std::arch::x86_64::*;

    /// B values (depth steps) the kernel prefetches ahead: B streams from memory when the
    /// other operand has few rows, and one step consumes one cache line of it.
    const PREFETCH_STEPS: usize = 48;

    /// One depth step: two B vectors, six broadcasts of A, twelve FMAs.
    macro_rules! step {
        ($acc:ident, $a:ident, $b:ident, $p:expr) => {{
            // A hint only: prefetching past the end of the panels never faults.
            _mm_prefetch::<_MM_HINT_T0>($b.wrapping_add(($p + PREFETCH_STEPS) * NR) as *const i8);
            let b0 = _mm256_loadu_ps($b.add($p * NR));
            let b1 = _mm256_loadu_ps($b.add($p * NR + 8));
            for r in 0..MR {
                let av = _mm256_broadcast_ss(&*$a.add($p * MR + r));
                $acc[r][0] = _mm256_fmadd_ps(av, b0, $acc[r][0]);
                $acc[r][1] = _mm256_fmadd_ps(av, b1, $acc[r][1]);
            }
        }};
    }

    #[target_feature(enable = "avx2,fma")]
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn kernel(
        kc: usize,
        a: *const f32,
        b: *const f32,
        c: *mut f32,
        ldc: usize,
        rows: usize,
        cols: usize,
        accumulate: bool,
    ) {
        // SAFETY (whole body): reads stay within kc * MR values of `a` and kc * NR of `b`;
        // stores within the caller's rows x cols tile of `c`.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); 2]; MR];
            let (mut a, mut b) = (a, b);
            let mut p = 0;
            while p + 4 <= kc {
                step!(acc, a, b, 0);
                step!(acc, a, b, 1);
                step!(acc, a, b, 2);
                step!(acc, a, b, 3);
                a = a.add(4 * MR);
                b = b.add(4 * NR);
                p += 4;
            }
            while p < kc {
                step!(acc, a, b, 0);
                a = a.add(MR);
                b = b.add(NR);
                p += 1;
            }
            if rows == MR && cols == NR {
                for (r, v) in acc.iter().enumerate() {
                    let cr = c.add(r * ldc);
                    let (mut v0, mut v1) = (v[0], v[1]);
                    if accumulate {
                        v0 = _mm256_add_ps(v0, _mm256_loadu_ps(cr));
                        v1 = _mm256_add_ps(v1, _mm256_loadu_ps(cr.add(8)));
                    }
                    _mm256_storeu_ps(cr, v0);
                    _mm256_storeu_ps(cr.add(8), v1);
                }
            } else {
                let mut tile = [[0.0f32; NR]; MR];
                for (line, v) in tile.iter_mut().zip(&acc) {
                    _mm256_storeu_ps(line.as_mut_ptr(), v[0]);
                    _mm256_storeu_ps(line.as_mut_ptr().add(8), v[1]);
                }
                store_tile(&tile, c, ldc, rows, cols, accumulate);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn simd_and_portable_kernels_agree() {
        let kc = 37;
        let a: Vec<f32> = (0..kc * MR)
            .map(|i| ((i * 7 % 13) as f32 - 6.0) / 8.0)
            .collect();
        let b: Vec<f32> = (0..kc * NR)
            .map(|i| ((i * 5 % 11) as f32 - 5.0) / 4.0)
            .collect();
        for &(rows, cols, acc) in &[
            (MR, NR, false),
            (MR, NR, true),
            (4, 9, false),
            (1, 16, true),
        ] {
            let ldc = 20;
            let mut c1 = vec![0.5f32; MR * ldc];
            let mut c2 = c1.clone();
            // SAFETY: panels hold kc steps; c1/c2 hold MR rows of ldc >= NR.
            unsafe {
                micro_kernel(
                    kc,
                    a.as_ptr(),
                    b.as_ptr(),
                    c1.as_mut_ptr(),
                    ldc,
                    rows,
                    cols,
                    acc,
                );
                portable(
                    kc,
                    a.as_ptr(),
                    b.as_ptr(),
                    c2.as_mut_ptr(),
                    ldc,
                    rows,
                    cols,
                    acc,
                );
            }
            for r in 0..MR {
                for j in 0..ldc {
                    let (x, y) = (c1[r * ldc + j], c2[r * ldc + j]);
                    assert!((x - y).abs() <= 1e-4, "({r},{j}) {x} vs {y}");
                    if r >= rows || j >= cols {
                        assert_eq!(x, 0.5, "outside the tile is untouched");
                    }
                }
            }
            // An independent f64 check of one element.
            let want: f64 = (0..kc)
                .map(|p| a[p * MR] as f64 * b[p * NR] as f64)
                .sum::<f64>()
                + if acc { 0.5 } else { 0.0 };
            assert!((c1[0] as f64 - want).abs() < 1e-4);
        }
    }
}
