//! Register tiles of the direct convolution ([`super::conv_direct`]), chosen at run time from
//! the CPU's features:
//! - AVX2/FMA: 6 output channels x 16 positions (12 ymm accumulators), or x 8 for a half tile;
//! - AVX-512F: 8 output channels x 48 positions (24 zmm accumulators, three B vectors and the
//!   broadcast weight: 28 of the 32 registers), or x 32 / x 16 at a block's end. Each depth
//!   step loads three B vectors and eight weights (folded into the FMAs as broadcasts) for 24
//!   FMAs, so the two FMA ports stay busy while the loads use under half of the load ports.
//!   The last B vector of a tile takes a lane mask, so that a tile may read its input in place
//!   (pointwise convolutions) and stop at the end of each channel's row of positions.
//!
//! Both compute `C[r][0..w] = post(start[r] + sum_k a[k * mr + r] * B[offs[k]..][..w])`.

/// Depth steps ahead that the tiles prefetch their weights (2 KiB on AVX-512, 1.5 KiB on
/// AVX2: a few hundred cycles of work, about a memory latency).
const A_PREFETCH_STEPS: usize = 64;

/// Rows of the largest tile (the bias start holds this many).
pub const MR_MAX: usize = 8;
/// Widest tile (positions); the planes keep this much zeroed slack after each unit.
pub const NR_MAX: usize = 48;

/// What the accumulators start from.
#[derive(Clone, Copy)]
pub enum Start {
    /// The tile's current values in C (a later depth pass).
    Load,
    /// One value per row (the bias; zeros without one).
    Rows([f32; MR_MAX]),
}

/// An activation applied in registers before the store (the last depth pass only).
#[derive(Clone, Copy, PartialEq, Debug)]
pub enum Post {
    None,
    /// `min(hi, max(lo, x))`, NaN kept (Relu is `(0, inf)`).
    Clamp(f32, f32),
    /// `x < 0 ? x * alpha : x`.
    Leaky(f32),
}

/// The register tile family.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Isa {
    Avx2,
    Avx512,
}

impl Isa {
    /// The best family this CPU runs, or None (no AVX2/FMA).
    pub fn detect() -> Option<Isa> {
        Isa::all().into_iter().next()
    }

    /// Every family this CPU runs, best first.
    pub fn all() -> Vec<Isa> {
        let mut v = Vec::new();
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx512f") {
                v.push(Isa::Avx512);
            }
            if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                v.push(Isa::Avx2);
            }
        }
        v
    }

    /// Output channels per tile (and per packed weight panel).
    pub fn mr(self) -> usize {
        match self {
            Isa::Avx2 => 6,
            Isa::Avx512 => 8,
        }
    }

    /// Positions per full tile.
    pub fn nr(self) -> usize {
        match self {
            Isa::Avx2 => 16,
            Isa::Avx512 => NR_MAX,
        }
    }

    /// The step of tile widths: a block's last tile is any multiple of it up to [`Isa::nr`].
    pub fn quantum(self) -> usize {
        match self {
            Isa::Avx2 => 8,
            Isa::Avx512 => 16,
        }
    }

    /// (channel, tap) steps per pass over a tile: the input a tile reads in one pass (one tile
    /// width per step) fills half the L1 data cache, so it stays there while the tile runs
    /// over every weight panel of its block.
    pub fn kc_steps(self) -> usize {
        let l1 = crate::ops::nn::cpu_cache::caches().l1d;
        (l1 / 2 / (self.nr() * 4)).clamp(32, 512)
    }

    /// Whether tiles can stop reading at a limit (masked loads): pointwise convolutions then
    /// read their input in place.
    pub fn masked(self) -> bool {
        self == Isa::Avx512
    }
}

/// One tile `width` positions wide (a multiple of `isa.quantum()`, at most `isa.nr()`); B reads
/// at each offset, and C reads and writes, stop after `valid` positions (only with
/// `isa.masked()`; `valid` may exceed `width`, and must be more than `width - 16`).
///
/// # Safety
/// `isa` runs on this CPU; `a.len() >= offs.len() * isa.mr()`; `b.add(o)` is valid for
/// `min(width, valid)` reads for every `o` in `offs`, and `c.add(r * ldc)` for as many reads
/// and writes for `r < isa.mr()` (`width` without `isa.masked()`).
#[allow(clippy::too_many_arguments)]
#[inline]
pub unsafe fn tile(
    isa: Isa,
    width: usize,
    valid: usize,
    a: &[f32],
    b: *const f32,
    offs: &[usize],
    c: *mut f32,
    ldc: usize,
    start: &Start,
    post: Post,
) {
    debug_assert!(a.len() >= offs.len() * isa.mr());
    #[cfg(target_arch = "x86_64")]
    // SAFETY: the caller's contract.
    unsafe {
        let a = a.as_ptr();
        match (isa, width) {
            (Isa::Avx2, 16) => avx2::<2>(a, b, offs, c, ldc, start, post),
            (Isa::Avx2, 8) => avx2::<1>(a, b, offs, c, ldc, start, post),
            (Isa::Avx512, _) => {
                let v = width / 16;
                let rest = valid.saturating_sub((v - 1) * 16);
                let mask: u16 = if rest >= 16 {
                    0xFFFF
                } else {
                    (1u16 << rest) - 1
                };
                match v {
                    3 => avx512::<3>(a, b, offs, c, ldc, start, post, mask),
                    2 => avx512::<2>(a, b, offs, c, ldc, start, post, mask),
                    1 => avx512::<1>(a, b, offs, c, ldc, start, post, mask),
                    _ => unreachable!("AVX-512 tile of {width} positions"),
                }
            }
            _ => unreachable!("AVX2 tile of {width} positions"),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = (isa, width, valid, a, b, offs, c, ldc, start, post);
        unreachable!("direct convolution needs AVX2 or AVX-512")
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2<const V: usize>(
    a: *const f32,
    b: *const f32,
    offs: &[usize],
    c: *mut f32,
    ldc: usize,
    start: &Start,
    post: Post,
) {
    use std::arch::x86_64::*;
    const MR: usize = 6;
    // SAFETY (whole body): the reads and writes `tile` documents.
    unsafe {
        let mut acc = [[_mm256_setzero_ps(); V]; MR];
        match start {
            Start::Load => {
                for (r, line) in acc.iter_mut().enumerate() {
                    let p = c.add(r * ldc);
                    for (q, v) in line.iter_mut().enumerate() {
                        *v = _mm256_loadu_ps(p.add(8 * q));
                    }
                }
            }
            Start::Rows(v) => {
                for (line, &x) in acc.iter_mut().zip(v) {
                    *line = [_mm256_set1_ps(x); V];
                }
            }
        }
        let mut a = a;
        for &o in offs {
            // As in the AVX-512 tile: the weights' stream, a hint only.
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(A_PREFETCH_STEPS * MR) as *const i8);
            let bp = b.add(o);
            let mut bv = [_mm256_setzero_ps(); V];
            for (q, v) in bv.iter_mut().enumerate() {
                *v = _mm256_loadu_ps(bp.add(8 * q));
            }
            for (r, line) in acc.iter_mut().enumerate() {
                let av = _mm256_broadcast_ss(&*a.add(r));
                for (l, &bq) in line.iter_mut().zip(&bv) {
                    *l = _mm256_fmadd_ps(av, bq, *l);
                }
            }
            a = a.add(MR);
        }
        let fin = |v: __m256| match post {
            Post::None => v,
            // max/min return their second operand when either is NaN: NaN stays.
            Post::Clamp(lo, hi) => {
                _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), v))
            }
            Post::Leaky(alpha) => {
                let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(v, _mm256_setzero_ps());
                _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(alpha)), neg)
            }
        };
        for (r, line) in acc.iter().enumerate() {
            let p = c.add(r * ldc);
            for (q, &v) in line.iter().enumerate() {
                _mm256_storeu_ps(p.add(8 * q), fin(v));
            }
        }
    }
}

/// `V` vectors of 16 positions per row; the last vector's B loads, and its C loads and
/// stores, take `mask`.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
unsafe fn avx512<const V: usize>(
    a: *const f32,
    b: *const f32,
    offs: &[usize],
    c: *mut f32,
    ldc: usize,
    start: &Start,
    post: Post,
    mask: u16,
) {
    use std::arch::x86_64::*;
    const MR: usize = 8;
    // SAFETY (whole body): the reads and writes `tile` documents; masked-off lanes are not
    // read.
    unsafe {
        let mut acc = [[_mm512_setzero_ps(); V]; MR];
        match start {
            Start::Load => {
                for (r, line) in acc.iter_mut().enumerate() {
                    let p = c.add(r * ldc);
                    for (q, v) in line.iter_mut().enumerate() {
                        *v = if q + 1 == V {
                            _mm512_maskz_loadu_ps(mask, p.add(16 * q))
                        } else {
                            _mm512_loadu_ps(p.add(16 * q))
                        };
                    }
                }
            }
            Start::Rows(v) => {
                for (line, &x) in acc.iter_mut().zip(v) {
                    *line = [_mm512_set1_ps(x); V];
                }
            }
        }
        let mut a = a;
        for &o in offs {
            // The weights stream from memory on a block's first tile of a pass (the block's
            // panels of a pass are contiguous, so this runs on into the next panel); a hint
            // only, past the end it never faults.
            _mm_prefetch::<_MM_HINT_T0>(a.wrapping_add(A_PREFETCH_STEPS * MR) as *const i8);
            let bp = b.add(o);
            let mut bv = [_mm512_setzero_ps(); V];
            for (q, v) in bv.iter_mut().enumerate() {
                *v = if q + 1 == V {
                    _mm512_maskz_loadu_ps(mask, bp.add(16 * q))
                } else {
                    _mm512_loadu_ps(bp.add(16 * q))
                };
            }
            for (r, line) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_ps(*a.add(r));
                for (l, &bq) in line.iter_mut().zip(&bv) {
                    *l = _mm512_fmadd_ps(av, bq, *l);
                }
            }
            a = a.add(MR);
        }
        let fin = |v: __m512| match post {
            Post::None => v,
            // max/min return their second operand when either is NaN: NaN stays.
            Post::Clamp(lo, hi) => {
                _mm512_min_ps(_mm512_set1_ps(hi), _mm512_max_ps(_mm512_set1_ps(lo), v))
            }
            Post::Leaky(alpha) => {
                let neg = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(v, _mm512_setzero_ps());
                _mm512_mask_mul_ps(v, neg, v, _mm512_set1_ps(alpha))
            }
        };
        for (r, line) in acc.iter().enumerate() {
            let p = c.add(r * ldc);
            for (q, &v) in line.iter().enumerate() {
                if q + 1 == V {
                    _mm512_mask_storeu_ps(p.add(16 * q), mask, fin(v));
                } else {
                    _mm512_storeu_ps(p.add(16 * q), fin(v));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kernel throughput on L1-resident operands (`cargo test --release tile_throughput --
    /// --ignored --nocapture`): not a correctness check.
    #[test]
    #[ignore]
    fn tile_throughput() {
        for isa in Isa::all() {
            for stride in [48usize, 64, 49, 1] {
                let (mr, nr, kc) = (isa.mr(), isa.nr(), 128);
                let a = vec![0.5f32; kc * mr];
                let b = vec![0.25f32; kc * stride + nr];
                let offs: Vec<usize> = (0..kc).map(|k| k * stride).collect();
                let mut c = vec![0.0f32; mr * nr];
                let reps = 200_000;
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    // SAFETY: a holds kc * mr values, b every offset plus nr, c mr rows of nr.
                    unsafe {
                        tile(
                            isa,
                            nr,
                            usize::MAX,
                            &a,
                            b.as_ptr(),
                            &offs,
                            c.as_mut_ptr(),
                            nr,
                            &Start::Load,
                            Post::None,
                        )
                    };
                }
                let s = t.elapsed().as_secs_f64();
                let gf = 2.0 * (reps * kc * mr * nr) as f64 / s / 1e9;
                println!("{isa:?} stride {stride}: {gf:.1} GFLOP/s ({})", c[0]);
            }
        }
    }
}
