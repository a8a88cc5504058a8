//! The micro-kernels of [`crate::ops::nn::gemm::igemm`]: a tile of up to `mr` rows of A
//! (unsigned bytes, rows of `4 * kq` values) times `np` packed B panels (signed bytes, [`NR`]
//! columns each, depth in groups of four: group `q` of column `j` is the 4 bytes at
//! `q * 64 + j * 4`), accumulated exactly in i32 and finished with the zero-point
//! corrections of [`Fix`].
//!
//! Families, picked at run time:
//! - AVX-512 VNNI: `vpdpbusd` (u8 x s8, four products per i32 lane, no saturation), 8 rows by
//!   two panels (16 zmm accumulators);
//! - AVX-VNNI: the same instruction on ymm, 4 rows by one panel;
//! - AVX2: the bytes widened to i16 (`vpmaddwd` on even and odd depth pairs), exact where
//!   `vpmaddubsw` would saturate (255 * 127 * 2 > 32767), 4 rows by one panel;
//! - a portable loop over the same layout.

/// Columns per packed B panel.
pub const NR: usize = 16;
/// The most columns any family's tile has (two panels).
pub const NC_MAX: usize = 2 * NR;

/// Turns a tile's raw sums `sum_k a_k * b_k` of stored values into
/// `sum_k (a_k - za) * (b_k - zb)`: `raw - za[r] * ct[j] - zb[j] * rs[r]`, where `rs` are the
/// rows' sums of stored A values and `ct[j] = colsum_j - K * zb[j]` (all wrapping, as i32
/// accumulation wraps).
#[derive(Clone, Copy)]
pub struct Fix<'a> {
    /// Per tile row: the zero point of A in the stored domain.
    pub za: &'a [i32],
    /// Per tile row: the sum of the row's stored values.
    pub rs: &'a [i32],
    /// Per tile column: the zero point of B in the stored domain.
    pub zb: &'a [i32],
    /// Per tile column: the column's sum of stored values minus `K * zb`.
    pub ct: &'a [i32],
}

/// A micro-kernel family.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    Portable,
    Avx2,
    AvxVnni,
    Avx512Vnni,
}

impl Isa {
    /// The best family this CPU runs.
    pub fn detect() -> Isa {
        *Self::all().last().expect("the portable family")
    }

    /// Every family this CPU runs, worst first.
    pub fn all() -> Vec<Isa> {
        let mut v = vec![Isa::Portable];
        #[cfg(target_arch = "x86_64")]
        {
            if std::is_x86_feature_detected!("avx2") {
                v.push(Isa::Avx2);
                if std::is_x86_feature_detected!("avxvnni") {
                    v.push(Isa::AvxVnni);
                }
            }
            if std::is_x86_feature_detected!("avx512f")
                && std::is_x86_feature_detected!("avx512bw")
                && std::is_x86_feature_detected!("avx512vnni")
            {
                v.push(Isa::Avx512Vnni);
            }
        }
        v
    }

    /// Rows per tile.
    pub fn mr(self) -> usize {
        match self {
            Isa::Avx512Vnni => 8,
            _ => 4,
        }
    }

    /// B panels per tile.
    pub fn np(self) -> usize {
        match self {
            Isa::Avx512Vnni => 2,
            _ => 1,
        }
    }
}

/// One tile: `c[r * ldc + j] = fix(sum over kq groups of a row r x column j)` for
/// `r < rows`, `j < cols`. Row `r` of A starts at `a + r * lda`; panel `p` of B at
/// `b + p * bstride`.
///
/// # Safety
/// `isa` must be one [`Isa::all`] lists; `rows <= isa.mr()`, `cols <= isa.np() * NR`, and
/// `cols > (isa.np() - 1) * NR` unless `isa.np() == 1`; each of the `rows` A rows valid for
/// `4 * kq` reads, each used panel for `64 * kq`; `c` valid for the writes; `fix`'s slices
/// hold `rows` and `cols` values.
#[allow(clippy::too_many_arguments)]
pub unsafe fn tile(
    isa: Isa,
    kq: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    bstride: usize,
    rows: usize,
    cols: usize,
    c: *mut i32,
    ldc: usize,
    fix: &Fix<'_>,
) {
    debug_assert!(rows >= 1 && rows <= isa.mr() && cols >= 1 && cols <= isa.np() * NR);
    macro_rules! by_rows {
        ($f:ident $(, $np:literal)?) => {
            match rows {
                1 => $f::<1 $(, $np)?>(kq, a, lda, b, bstride, cols, c, ldc, fix),
                2 => $f::<2 $(, $np)?>(kq, a, lda, b, bstride, cols, c, ldc, fix),
                3 => $f::<3 $(, $np)?>(kq, a, lda, b, bstride, cols, c, ldc, fix),
                4 => $f::<4 $(, $np)?>(kq, a, lda, b, bstride, cols, c, ldc, fix),
                5 => $f::<5 $(, $np)?>(kq, a, lda, b, bstride, cols, c, ldc, fix),
                6 => $f::<6 $(, $np)?>(kq, a, lda, b, bstride, cols, c, ldc, fix),
                7 => $f::<7 $(, $np)?>(kq, a, lda, b, bstride, cols, c, ldc, fix),
                _ => $f::<8 $(, $np)?>(kq, a, lda, b, bstride, cols, c, ldc, fix),
            }
        };
    }
    // SAFETY: the caller's contract; each family runs only where `Isa::all` found it.
    unsafe {
        match isa {
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni if cols > NR => by_rows!(k512, 2),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx512Vnni => by_rows!(k512, 1),
            #[cfg(target_arch = "x86_64")]
            Isa::AvxVnni => by_rows!(k256_vnni),
            #[cfg(target_arch = "x86_64")]
            Isa::Avx2 => by_rows!(k256),
            _ => by_rows!(portable),
        }
    }
}

/// Stores the raw tile `acc` with the corrections.
///
/// # Safety
/// As [`tile`] for `c` and `fix`; `rows <= acc.len()`.
#[inline(always)]
unsafe fn finish(acc: &[[i32; NC_MAX]], cols: usize, c: *mut i32, ldc: usize, fix: &Fix<'_>) {
    let (ct, zb) = (&fix.ct[..cols], &fix.zb[..cols]);
    for (r, line) in acc.iter().enumerate() {
        let (za, rs) = (fix.za[r], fix.rs[r]);
        // SAFETY: row r < rows of the caller's tile, `cols` values.
        let out = unsafe { std::slice::from_raw_parts_mut(c.add(r * ldc), cols) };
        for (((o, &v), &t), &z) in out.iter_mut().zip(&line[..cols]).zip(ct).zip(zb) {
            *o = v
                .wrapping_sub(za.wrapping_mul(t))
                .wrapping_sub(z.wrapping_mul(rs));
        }
    }
}

#[allow(clippy::too_many_arguments)]
unsafe fn portable<const R: usize>(
    kq: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    _bstride: usize,
    cols: usize,
    c: *mut i32,
    ldc: usize,
    fix: &Fix<'_>,
) {
    let mut acc = [[0i32; NC_MAX]; R];
    for q in 0..kq {
        // SAFETY: group q of each row and of the panel lies inside the caller's ranges.
        let bq = unsafe { std::slice::from_raw_parts(b.add(q * 64), 64) };
        for (r, line) in acc.iter_mut().enumerate() {
            // SAFETY: as above.
            let aq = unsafe { std::slice::from_raw_parts(a.add(r * lda + q * 4), 4) };
            for (j, o) in line[..NR].iter_mut().enumerate() {
                let bj = &bq[j * 4..j * 4 + 4];
                for t in 0..4 {
                    *o = o.wrapping_add(aq[t] as i32 * bj[t] as i8 as i32);
                }
            }
        }
    }
    // SAFETY: the caller's contract.
    unsafe { finish(&acc, cols, c, ldc, fix) }
}

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// The A group of 4 bytes at `p` as one i32 (for a broadcast).
///
/// # Safety
/// `p` valid for 4 reads.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn group(p: *const u8) -> i32 {
    // SAFETY: the caller's contract.
    unsafe { (p as *const i32).read_unaligned() }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bw,avx512vnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn k512<const R: usize, const NP: usize>(
    kq: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    bstride: usize,
    cols: usize,
    c: *mut i32,
    ldc: usize,
    fix: &Fix<'_>,
) {
    // SAFETY (whole body): reads stay within the caller's A rows and B panels; the tile is
    // stored through `finish` under the caller's contract.
    unsafe {
        let mut acc = [[_mm512_setzero_si512(); NP]; R];
        for q in 0..kq {
            let mut bv = [_mm512_setzero_si512(); NP];
            for (p, v) in bv.iter_mut().enumerate() {
                *v = _mm512_loadu_si512(b.add(p * bstride + q * 64) as *const _);
            }
            for (r, line) in acc.iter_mut().enumerate() {
                let av = _mm512_set1_epi32(group(a.add(r * lda + q * 4)));
                for (o, &v) in line.iter_mut().zip(&bv) {
                    *o = _mm512_dpbusd_epi32(*o, av, v);
                }
            }
        }
        let mut out = [[0i32; NC_MAX]; R];
        for (line, v) in out.iter_mut().zip(&acc) {
            for (p, &x) in v.iter().enumerate() {
                _mm512_storeu_si512(line.as_mut_ptr().add(p * NR) as *mut _, x);
            }
        }
        finish(&out, cols, c, ldc, fix)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
#[allow(clippy::too_many_arguments)]
unsafe fn k256_vnni<const R: usize>(
    kq: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    _bstride: usize,
    cols: usize,
    c: *mut i32,
    ldc: usize,
    fix: &Fix<'_>,
) {
    // SAFETY (whole body): as `k512`.
    unsafe {
        let mut acc = [[_mm256_setzero_si256(); 2]; R];
        for q in 0..kq {
            let b0 = _mm256_loadu_si256(b.add(q * 64) as *const __m256i);
            let b1 = _mm256_loadu_si256(b.add(q * 64 + 32) as *const __m256i);
            for (r, line) in acc.iter_mut().enumerate() {
                let av = _mm256_set1_epi32(group(a.add(r * lda + q * 4)));
                line[0] = _mm256_dpbusd_avx_epi32(line[0], av, b0);
                line[1] = _mm256_dpbusd_avx_epi32(line[1], av, b1);
            }
        }
        let mut out = [[0i32; NC_MAX]; R];
        for (line, v) in out.iter_mut().zip(&acc) {
            _mm256_storeu_si256(line.as_mut_ptr() as *mut __m256i, v[0]);
            _mm256_storeu_si256(line.as_mut_ptr().add(8) as *mut __m256i, v[1]);
        }
        finish(&out, cols, c, ldc, fix)
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[allow(clippy::too_many_arguments)]
unsafe fn k256<const R: usize>(
    kq: usize,
    a: *const u8,
    lda: usize,
    b: *const u8,
    _bstride: usize,
    cols: usize,
    c: *mut i32,
    ldc: usize,
    fix: &Fix<'_>,
) {
    // SAFETY (whole body): as `k512`.
    unsafe {
        let low_bytes = _mm256_set1_epi32(0x00FF_00FF);
        let mut acc = [[_mm256_setzero_si256(); 2]; R];
        for q in 0..kq {
            let b0 = _mm256_loadu_si256(b.add(q * 64) as *const __m256i);
            let b1 = _mm256_loadu_si256(b.add(q * 64 + 32) as *const __m256i);
            // Depth 0 and 2 (even bytes) and 1 and 3 (odd bytes) of every column, as i16.
            let even = [
                _mm256_srai_epi16::<8>(_mm256_slli_epi16::<8>(b0)),
                _mm256_srai_epi16::<8>(_mm256_slli_epi16::<8>(b1)),
            ];
            let odd = [_mm256_srai_epi16::<8>(b0), _mm256_srai_epi16::<8>(b1)];
            for (r, line) in acc.iter_mut().enumerate() {
                let av = _mm256_set1_epi32(group(a.add(r * lda + q * 4)));
                let (ae, ao) = (_mm256_and_si256(av, low_bytes), _mm256_srli_epi16::<8>(av));
                for h in 0..2 {
                    let s = _mm256_add_epi32(
                        _mm256_madd_epi16(ae, even[h]),
                        _mm256_madd_epi16(ao, odd[h]),
                    );
                    line[h] = _mm256_add_epi32(line[h], s);
                }
            }
        }
        let mut out = [[0i32; NC_MAX]; R];
        for (line, v) in out.iter_mut().zip(&acc) {
            _mm256_storeu_si256(line.as_mut_ptr() as *mut __m256i, v[0]);
            _mm256_storeu_si256(line.as_mut_ptr().add(8) as *mut __m256i, v[1]);
        }
        finish(&out, cols, c, ldc, fix)
    }
}
