//! Exact 8-bit integer GEMM with i32 results: `C = (A - za) @ (B - zb)` for uint8 or int8
//! operands in any mix, zero points per row of A and per column of B, i32 accumulation that
//! wraps like onnxruntime's.
//!
//! Storage: A rows are unsigned bytes (int8 values + 128), B is signed bytes (uint8 values -
//! 128), so that one `u8 x s8` instruction covers every mix; with `a = sa - oa` and
//! `b = sb + ob` for stored `sa`, `sb`, the product is `sum (sa - ZA)(sb - ZB)` for
//! `ZA = za + oa`, `ZB = zb - ob`, and the kernels expand it as
//! `sum sa * sb - ZA * colsum(sb) - ZB * rowsum(sa) + K * ZA * ZB`.
//!
//! Layouts: an A row holds `kp` bytes (`K` rounded up to 4, zero-padded); B is packed into
//! panels of [`NR`] columns, each panel `kp / 4` groups of 64 bytes (4 depth steps of 16
//! columns, column-major within the group), zero-padded past the matrix edge. Either side
//! can be the constant one (weights packed once at build): MatMulInteger packs B, the
//! convolutions pack the weights as A rows and im2col columns as B panels.

use crate::ops::nn::gemm::igemm_kernel::{tile, Fix, NR};
use crate::ops::nn::scratch::SharedMut;

pub use crate::ops::nn::gemm::igemm_kernel::Isa;

/// Multiply-adds below which a product runs on the calling thread.
const PARALLEL_MACS: usize = 1 << 21;

/// The flip that turns bytes of one signedness into the other's storage (`v ^ 0x80` is
/// `v + 128` for int8 bits read as uint8, and `v - 128` for uint8 read as int8).
#[inline]
fn flip(cond: bool) -> u8 {
    if cond {
        0x80
    } else {
        0
    }
}

/// A rows: `m` rows of `kp` stored (unsigned) bytes and their sums.
pub struct RowsA {
    pub m: usize,
    pub k: usize,
    pub kp: usize,
    pub data: Vec<u8>,
    pub sums: Vec<i32>,
    /// Added to a value to store it: 128 for int8 sources, 0 for uint8.
    pub offset: i32,
}

impl RowsA {
    /// `m x k` bytes (element `(i, p)` at `i * rs + p`), int8 when `signed`.
    pub fn new(src: &[u8], signed: bool, m: usize, k: usize, rs: usize) -> RowsA {
        let kp = k.next_multiple_of(4);
        let mut data = vec![0u8; m * kp];
        let mut sums = vec![0i32; m];
        let f = flip(signed);
        if k > 0 {
            assert!(
                src.len() >= (m.max(1) - 1) * rs + k,
                "RowsA: source too short"
            );
        }
        for i in 0..m {
            let row = &mut data[i * kp..i * kp + k];
            for (d, &s) in row.iter_mut().zip(&src[i * rs..i * rs + k]) {
                *d = s ^ f;
            }
            sums[i] = row.iter().map(|&v| v as i32).sum();
        }
        RowsA {
            m,
            k,
            kp,
            data,
            sums,
            offset: if signed { 128 } else { 0 },
        }
    }
}

/// B packed into [`NR`]-column panels of stored (signed) bytes, with column sums.
pub struct PackedB8 {
    pub k: usize,
    pub n: usize,
    kp: usize,
    panels: usize,
    data: Vec<u8>,
    sums: Vec<i32>,
    /// Added to a stored value to get the source value: 128 for uint8 sources, 0 for int8.
    pub offset: i32,
}

impl PackedB8 {
    /// Packs the `k x n` bytes of `src` (element `(p, j)` at `p * rs + j`), int8 when
    /// `signed`.
    pub fn new(src: &[u8], signed: bool, k: usize, n: usize, rs: usize) -> PackedB8 {
        let kp = k.next_multiple_of(4);
        let panels = n.div_ceil(NR);
        let mut data = vec![0u8; panels * kp * NR];
        let mut sums = vec![0i32; n];
        if k > 0 && n > 0 {
            assert!(src.len() >= (k - 1) * rs + n, "PackedB8: source too short");
        }
        let f = flip(!signed);
        let panel_len = kp * NR;
        for (pi, panel) in data.chunks_exact_mut(panel_len.max(1)).enumerate() {
            let j0 = pi * NR;
            let w = NR.min(n - j0);
            for q in 0..kp / 4 {
                let grp: &mut [u8; 64] = (&mut panel[q * 64..q * 64 + 64])
                    .try_into()
                    .expect("64-byte group");
                let rows = 4.min(k - 4 * q);
                let row = |t: usize| &src[(4 * q + t) * rs + j0..(4 * q + t) * rs + j0 + w];
                if w == NR && rows == 4 {
                    interleave4(
                        [row(0), row(1), row(2), row(3)].map(|r| r.try_into().expect("16")),
                        f,
                        grp,
                    );
                } else {
                    for t in 0..rows {
                        for (j, &v) in row(t).iter().enumerate() {
                            grp[j * 4 + t] = v ^ f;
                        }
                    }
                }
            }
        }
        crate::ops::math::vecmath::with_avx2(|| {
            for p in 0..k {
                for (s, &v) in sums.iter_mut().zip(&src[p * rs..p * rs + n]) {
                    *s += (v ^ f) as i8 as i32;
                }
            }
        });
        PackedB8 {
            k,
            n,
            kp,
            panels,
            data,
            sums,
            offset: if signed { 0 } else { 128 },
        }
    }
}

/// One group of four depth steps of a full panel: `dst[j * 4 + t] = rows[t][j] ^ f`.
#[inline]
fn interleave4(rows: [&[u8; NR]; 4], f: u8, dst: &mut [u8; 64]) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::*;
        // SAFETY: SSE2 is part of x86-64; the loads read 16 bytes of each row and the stores
        // write the 64 bytes of `dst`.
        unsafe {
            let fv = _mm_set1_epi8(f as i8);
            let ld =
                |r: &[u8; NR]| _mm_xor_si128(_mm_loadu_si128(r.as_ptr() as *const __m128i), fv);
            let (r0, r1, r2, r3) = (ld(rows[0]), ld(rows[1]), ld(rows[2]), ld(rows[3]));
            let (a, b) = (_mm_unpacklo_epi8(r0, r1), _mm_unpackhi_epi8(r0, r1));
            let (c, d) = (_mm_unpacklo_epi8(r2, r3), _mm_unpackhi_epi8(r2, r3));
            let out = dst.as_mut_ptr() as *mut __m128i;
            _mm_storeu_si128(out, _mm_unpacklo_epi16(a, c));
            _mm_storeu_si128(out.add(1), _mm_unpackhi_epi16(a, c));
            _mm_storeu_si128(out.add(2), _mm_unpacklo_epi16(b, d));
            _mm_storeu_si128(out.add(3), _mm_unpackhi_epi16(b, d));
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    for j in 0..NR {
        for t in 0..4 {
            dst[j * 4 + t] = rows[t][j] ^ f;
        }
    }
}

/// Zero points: one for all, or one per row (A) / column (B), in the source domain.
#[derive(Clone, Copy)]
pub enum Zero<'a> {
    All(i32),
    Each(&'a [i32]),
}

impl Zero<'_> {
    fn at(&self, i: usize) -> i32 {
        match self {
            Zero::All(z) => *z,
            Zero::Each(v) => v[i],
        }
    }
}

/// `c[i * ldc + j] = sum_p (A[i, p] - za[i]) * (B[p, j] - zb[j])` (wrapping i32) for all
/// `i < a.m`, `j < b.n`, on the best kernel family of this CPU.
pub fn igemm(a: &RowsA, za: Zero<'_>, b: &PackedB8, zb: Zero<'_>, c: &mut [i32], ldc: usize) {
    igemm_on(Isa::detect(), a, za, b, zb, c, ldc)
}

/// [`igemm`] on a chosen family (one [`Isa::all`] lists).
pub fn igemm_on(
    isa: Isa,
    a: &RowsA,
    za: Zero<'_>,
    b: &PackedB8,
    zb: Zero<'_>,
    c: &mut [i32],
    ldc: usize,
) {
    assert!(Isa::all().contains(&isa), "igemm: {isa:?} is not available");
    assert_eq!(a.k, b.k, "igemm: inner dimensions differ");
    let (m, n, k) = (a.m, b.n, b.k);
    if m == 0 || n == 0 {
        return;
    }
    assert!(
        ldc >= n && c.len() >= (m - 1) * ldc + n,
        "igemm: output too short"
    );
    let kk = k as i32;
    let zas: Vec<i32> = (0..m).map(|i| za.at(i).wrapping_add(a.offset)).collect();
    let zbs: Vec<i32> = (0..n).map(|j| zb.at(j).wrapping_sub(b.offset)).collect();
    let cts: Vec<i32> = (0..n)
        .map(|j| b.sums[j].wrapping_sub(kk.wrapping_mul(zbs[j])))
        .collect();
    let (mr, np) = (isa.mr(), isa.np());
    let (rt, ct) = (m.div_ceil(mr), b.panels.div_ceil(np));
    let threads = rayon::current_num_threads();
    let parallel = threads > 1 && m.saturating_mul(n).saturating_mul(k) >= PARALLEL_MACS;
    // Tasks: column tiles in groups of `cg`, row tiles in groups of `rg`.
    let (mut cg, mut rg) = (ct, rt);
    if parallel {
        let want = 4 * threads;
        cg = ct.div_ceil(want).max(1);
        let col_tasks = ct.div_ceil(cg);
        if col_tasks < want {
            rg = rt.div_ceil(want.div_ceil(col_tasks)).max(1);
        }
    }
    let (tc, tr) = (ct.div_ceil(cg), rt.div_ceil(rg));
    let kq = b.kp / 4;
    let bstride = b.kp * NR;
    let cp = SharedMut(c.as_mut_ptr());
    let task = |t: usize| {
        let (ti, tj) = (t / tc, t % tc);
        let out = cp;
        for cj in tj * cg..((tj + 1) * cg).min(ct) {
            let j0 = cj * np * NR;
            let cols = (np * NR).min(n - j0);
            for ri in ti * rg..((ti + 1) * rg).min(rt) {
                let i0 = ri * mr;
                let rows = mr.min(m - i0);
                let fix = Fix {
                    za: &zas[i0..i0 + rows],
                    rs: &a.sums[i0..i0 + rows],
                    zb: &zbs[j0..j0 + cols],
                    ct: &cts[j0..j0 + cols],
                };
                // SAFETY: rows/cols are clipped to the matrices; A rows i0.. hold kp bytes
                // each and the panels from cj * np hold kq groups; the output block lies
                // inside `c` (checked above) and tasks write disjoint blocks.
                unsafe {
                    tile(
                        isa,
                        kq,
                        a.data.as_ptr().add(i0 * a.kp),
                        a.kp,
                        b.data.as_ptr().add(cj * np * bstride),
                        bstride,
                        rows,
                        cols,
                        out.get().add(i0 * ldc + j0),
                        ldc,
                        &fix,
                    )
                }
            }
        }
    };
    if parallel && tc * tr > 1 {
        use rayon::prelude::*;
        (0..tc * tr).into_par_iter().for_each(task);
    } else {
        (0..tc * tr).for_each(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) fn bytes(n: usize, seed: &mut u64) -> Vec<u8> {
        (0..n)
            .map(|_| {
                *seed = seed
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (*seed >> 33) as u8
            })
            .collect()
    }

    fn val(v: u8, signed: bool) -> i64 {
        if signed {
            v as i8 as i64
        } else {
            v as i64
        }
    }

    #[test]
    fn every_family_matches_the_reference() {
        let mut seed = 5;
        for &(m, k, n) in &[
            (1, 1, 1),
            (3, 5, 17),
            (8, 16, 32),
            (9, 33, 31),
            (17, 100, 50),
            (1, 512, 96),
            (40, 259, 70),
            (5, 0, 3),
        ] {
            for (sa, sb) in [(false, false), (false, true), (true, false), (true, true)] {
                let a = bytes(m * k, &mut seed);
                let b = bytes(k * n, &mut seed);
                let za = bytes(m, &mut seed);
                let zb = bytes(n, &mut seed);
                let za: Vec<i32> = za.iter().map(|&v| val(v, sa) as i32).collect();
                let zb: Vec<i32> = zb.iter().map(|&v| val(v, sb) as i32).collect();
                let ra = RowsA::new(&a, sa, m, k, k);
                let pb = PackedB8::new(&b, sb, k, n, n);
                let mut want = vec![0i64; m * n];
                for i in 0..m {
                    for j in 0..n {
                        want[i * n + j] = (0..k)
                            .map(|p| {
                                (val(a[i * k + p], sa) - za[i] as i64)
                                    * (val(b[p * n + j], sb) - zb[j] as i64)
                            })
                            .sum();
                    }
                }
                for isa in Isa::all() {
                    for (zra, zrb) in [
                        (Zero::Each(&za), Zero::Each(&zb)),
                        (Zero::All(za[0]), Zero::All(zb[0])),
                    ] {
                        let ldc = n + 3;
                        let mut c = vec![i32::MIN; m * ldc];
                        igemm_on(isa, &ra, zra, &pb, zrb, &mut c, ldc);
                        for i in 0..m {
                            for j in 0..n {
                                let zi = if let Zero::All(z) = zra { z } else { za[i] };
                                let zj = if let Zero::All(z) = zrb { z } else { zb[j] };
                                let w: i64 = (0..k)
                                    .map(|p| {
                                        (val(a[i * k + p], sa) - zi as i64)
                                            * (val(b[p * n + j], sb) - zj as i64)
                                    })
                                    .sum();
                                assert_eq!(
                                    c[i * ldc + j] as i64,
                                    w,
                                    "{isa:?} {m}x{k}x{n} signed {sa}/{sb} at ({i}, {j})"
                                );
                            }
                            assert!(c[i * ldc + n..(i + 1) * ldc].iter().all(|&v| v == i32::MIN));
                        }
                        if let (Zero::Each(_), Zero::Each(_)) = (zra, zrb) {
                            let got: Vec<i64> = (0..m * n)
                                .map(|e| c[(e / n) * ldc + e % n] as i64)
                                .collect();
                            assert_eq!(got, want);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn large_product_runs_in_parallel_tiles() {
        let mut seed = 9;
        let (m, k, n) = (37, 300, 333);
        let a = bytes(m * k, &mut seed);
        let b = bytes(k * n, &mut seed);
        let ra = RowsA::new(&a, false, m, k, k);
        let pb = PackedB8::new(&b, false, k, n, n);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let mut c = vec![0i32; m * n];
        pool.install(|| igemm(&ra, Zero::All(7), &pb, Zero::All(250), &mut c, n));
        for i in 0..m {
            for j in 0..n {
                let w: i32 = (0..k)
                    .map(|p| (a[i * k + p] as i32 - 7) * (b[p * n + j] as i32 - 250))
                    .sum();
                assert_eq!(c[i * n + j], w);
            }
        }
    }
}
