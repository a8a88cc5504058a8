//! Single-precision GEMM on packed panels, for products where one operand is constant
//! (weights): the constant side is packed once when the kernel is built, so a call only packs
//! the other side (or, for convolutions, writes im2col columns straight into panels) and runs
//! the register-blocked micro-kernel over them.
//!
//! Layouts (`k` = inner dimension, cut into passes of [`KC`] steps): a packed matrix stores
//! its passes one after another, and each pass its panels one after another, so that one
//! pass over a run of panels is one sequential stream:
//! - an A panel holds [`MR`] rows: in pass `p0` (depth `kc`), element `(row r, depth p0 + p)`
//!   of panel `i` sits at `p0 * panels * MR + i * kc * MR + p * MR + r`;
//! - a B panel holds [`NR`] columns, laid out the same way with `NR` for `MR`.
//!
//! Panels past the matrix edge are zero-padded, so the micro-kernel always runs full tiles
//! and only the store is clipped.

use crate::ops::nn::gemm::sgemm_kernel::{micro_kernel, MR, NR};
use crate::ops::nn::gemm::sgemm_wide::{self, MR_TALL, MR_WIDE};
use crate::ops::nn::scratch::SharedMut;

/// Depth of one pass over a block (a `KC x NR` B panel is 16 KiB and stays in L1).
pub(crate) const KC: usize = 256;
/// Multiply-adds below which a product runs on the calling thread.
const PARALLEL_MACS: usize = 1 << 18;

/// f32 storage whose first element sits on a 64-byte boundary (whole cache lines per panel
/// row).
pub struct AlignedBuf {
    data: Vec<f32>,
    offset: usize,
    len: usize,
}

impl AlignedBuf {
    pub fn zeroed(len: usize) -> AlignedBuf {
        let data = vec![0.0f32; len + 16];
        let offset = data.as_ptr().align_offset(64).min(15);
        AlignedBuf { data, offset, len }
    }

    #[inline]
    pub fn as_slice(&self) -> &[f32] {
        &self.data[self.offset..self.offset + self.len]
    }

    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [f32] {
        &mut self.data[self.offset..self.offset + self.len]
    }
}

/// Length of `panels` packed panels of width `w` and depth `k`.
pub fn packed_len(panels: usize, k: usize, w: usize) -> usize {
    panels * k * w
}

/// Packs columns `0..n` of the `k x n` matrix `b` (element `(p, j)` at `p * rs + j * cs`)
/// into `n.div_ceil(NR)` B panels in `dst`.
pub fn pack_b(b: &[f32], k: usize, n: usize, rs: usize, cs: usize, dst: &mut [f32]) {
    pack(b, n, k, cs, rs, NR, dst)
}

/// Packs `lines` lines of depth `k` (element `(line l, depth p)` at `l * ls + p * ps`) into
/// panels of width `w`: rows of A (`w` = the kernel's row count) or columns of B (`w` = NR).
fn pack(src: &[f32], lines: usize, k: usize, ls: usize, ps: usize, w: usize, dst: &mut [f32]) {
    pack_on(src, lines, k, ls, ps, w, dst, false)
}

/// [`pack`], its depth passes spread over the pool's threads with `parallel`.
#[allow(clippy::too_many_arguments)]
fn pack_on(
    src: &[f32],
    lines: usize,
    k: usize,
    ls: usize,
    ps: usize,
    w: usize,
    dst: &mut [f32],
    parallel: bool,
) {
    let panels = lines.div_ceil(w);
    assert!(
        dst.len() >= packed_len(panels, k, w),
        "pack: destination too short"
    );
    if lines == 0 || k == 0 {
        return;
    }
    assert!(
        (lines - 1) * ls + (k - 1) * ps < src.len(),
        "pack: source too short"
    );
    let all = &mut dst[..packed_len(panels, k, w)];
    let pass = |(i, pass): (usize, &mut [f32])| {
        let p0 = i * KC;
        pack_pass(src, lines, ls, ps, w, p0, KC.min(k - p0), pass)
    };
    if parallel && k > KC {
        use rayon::prelude::*;
        all.par_chunks_mut(KC * panels * w)
            .enumerate()
            .for_each(pass);
    } else {
        all.chunks_mut(KC * panels * w).enumerate().for_each(pass);
    }
}

/// The depth pass `p0..p0 + kc` of [`pack`] into `pass` (all its panels, `kc * w` each).
#[allow(clippy::too_many_arguments)]
fn pack_pass(
    src: &[f32],
    lines: usize,
    ls: usize,
    ps: usize,
    w: usize,
    p0: usize,
    kc: usize,
    pass: &mut [f32],
) {
    for (i, panel) in pass.chunks_exact_mut(kc * w).enumerate() {
        let l0 = i * w;
        let used = w.min(lines - l0);
        if ps == 1 {
            // Lines of at most 16 at a time (the kernels' widths), steps outer: each
            // step writes a run of consecutive values, and the lines read stay streams.
            for g0 in (0..used).step_by(16) {
                let cnt = (used - g0).min(16);
                let mut lines: [&[f32]; 16] = [&[]; 16];
                for (j, line) in lines[..cnt].iter_mut().enumerate() {
                    *line = &src[(l0 + g0 + j) * ls + p0..][..kc];
                }
                for (p, dst) in panel.chunks_exact_mut(w).enumerate() {
                    for (d, line) in dst[g0..].iter_mut().zip(&lines[..cnt]) {
                        *d = line[p];
                    }
                }
            }
        } else if ls == 1 && used == w && (w == 8 || w == 16) {
            // Whole panel rows of a column-major operand (the transposed convolutions' A):
            // fixed-length runs, moved as vectors rather than by a memcpy call each.
            if w == 8 {
                copy_runs::<8>(src, p0, ps, l0, kc, panel);
            } else {
                copy_runs::<16>(src, p0, ps, l0, kc, panel);
            }
        } else if ls == 1 {
            for p in 0..kc {
                let s = &src[(p0 + p) * ps + l0..(p0 + p) * ps + l0 + used];
                panel[p * w..p * w + used].copy_from_slice(s);
            }
        } else {
            for p in 0..kc {
                for l in 0..used {
                    panel[p * w + l] = src[(l0 + l) * ls + (p0 + p) * ps];
                }
            }
        }
        if used < w {
            for p in 0..kc {
                panel[p * w + used..(p + 1) * w].fill(0.0);
            }
        }
    }
}

/// `panel[p * N..][..N] = src[(p0 + p) * ps + l0..][..N]` for `p < kc`.
#[inline(always)]
fn copy_runs<const N: usize>(
    src: &[f32],
    p0: usize,
    ps: usize,
    l0: usize,
    kc: usize,
    panel: &mut [f32],
) {
    for (p, d) in panel.chunks_exact_mut(N).take(kc).enumerate() {
        let s: &[f32; N] = src[(p0 + p) * ps + l0..][..N].try_into().unwrap();
        let d: &mut [f32; N] = d.try_into().unwrap();
        *d = *s;
    }
}

/// A run of packed panels of width `w` (MR or NR) and depth `k`, out of `count` panels packed
/// together, starting at panel `first`.
#[derive(Clone, Copy)]
pub struct Panels<'a> {
    pub data: &'a [f32],
    pub k: usize,
    /// Panel width: MR (A panels) or NR (B panels).
    pub w: usize,
    pub count: usize,
    pub first: usize,
}

impl<'a> Panels<'a> {
    pub fn new(data: &'a [f32], k: usize, count: usize, w: usize) -> Panels<'a> {
        assert!(
            data.len() >= packed_len(count, k, w),
            "Panels: data too short"
        );
        Panels {
            data,
            k,
            w,
            count,
            first: 0,
        }
    }

    /// The panels from `first` on.
    pub fn skip(self, first: usize) -> Panels<'a> {
        Panels {
            first: self.first + first,
            ..self
        }
    }

    /// Panel `i` (counted from `first`) in the pass starting at depth `p0` of depth `kc`.
    #[inline]
    pub(crate) fn at(&self, p0: usize, kc: usize, i: usize) -> &'a [f32] {
        let w = self.w;
        let off = p0 * self.count * w + (self.first + i) * kc * w;
        &self.data[off..off + kc * w]
    }
}

/// A constant `k x n` right-hand operand in B panels.
pub struct PackedB {
    pub k: usize,
    pub n: usize,
    buf: AlignedBuf,
}

impl PackedB {
    /// Packs the `k x n` matrix `b` with row stride `rs` and column stride `cs`.
    pub fn new(b: &[f32], k: usize, n: usize, rs: usize, cs: usize) -> PackedB {
        let mut buf = AlignedBuf::zeroed(packed_len(n.div_ceil(NR), k, NR));
        pack_b(b, k, n, rs, cs, buf.as_mut_slice());
        PackedB { k, n, buf }
    }

    pub fn panels(&self) -> Panels<'_> {
        Panels::new(self.buf.as_slice(), self.k, self.n.div_ceil(NR), NR)
    }
}

/// `c = a @ b` for a block of `m` rows and `n` columns: `a` holds at least `m.div_ceil(MR)`
/// A panels, `b` at least `n.div_ceil(NR)` B panels, both of depth `k`; the result goes to the
/// row-major block at `c` with row stride `ldc` (only written). `finish(row, segment)` then
/// runs once per finished output row of the block, while it is still in cache.
///
/// # Safety
/// `c` must be valid for writes of `c[i * ldc + j]` for `i < m`, `j < n`, and no other
/// live reference may access that block.
pub unsafe fn gemm_panels(
    m: usize,
    n: usize,
    a: Panels<'_>,
    b: Panels<'_>,
    c: *mut f32,
    ldc: usize,
    finish: &mut dyn FnMut(usize, &mut [f32]),
) {
    let k = a.k;
    let (mp, np) = (m.div_ceil(MR), n.div_ceil(NR));
    assert!(
        b.k == k && a.w == MR && b.w == NR && a.first + mp <= a.count && b.first + np <= b.count,
        "gemm_panels: panels do not cover the block"
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
        // B panel outer (it stays in L1), A panels inner (they stay in L2).
        for jp in 0..np {
            let cols = NR.min(n - jp * NR);
            let bp = b.at(p0, kc, jp);
            for ip in 0..mp {
                let rows = MR.min(m - ip * MR);
                let ap = a.at(p0, kc, ip);
                // SAFETY: both panels hold `kc` steps (slices of exactly that length); the
                // tile (rows x cols at row ip*MR, column jp*NR) lies in the caller's block.
                unsafe {
                    micro_kernel(
                        kc,
                        ap.as_ptr(),
                        bp.as_ptr(),
                        c.add(ip * MR * ldc + jp * NR),
                        ldc,
                        rows,
                        cols,
                        p0 > 0,
                    );
                }
            }
        }
        p0 += kc;
    }
    // SAFETY: the caller's block, fully written by the passes above.
    unsafe { finish_rows(m, n, c, ldc, false, finish) };
}

/// Runs `finish(i, row)` on rows `0..m` (`n` wide) of the block at `c`, first zero-filled
/// when `zero` (a product of depth 0).
///
/// # Safety
/// `c` must be valid for reads and writes of `c[i * ldc + j]` for `i < m`, `j < n`, every
/// element written already unless `zero`, and no other live reference may access the block.
pub(crate) unsafe fn finish_rows(
    m: usize,
    n: usize,
    c: *mut f32,
    ldc: usize,
    zero: bool,
    finish: &mut dyn FnMut(usize, &mut [f32]),
) {
    for i in 0..m {
        // SAFETY: row `i` of the caller's block.
        let row = unsafe {
            if zero {
                std::ptr::write_bytes(c.add(i * ldc), 0, n);
            }
            std::slice::from_raw_parts_mut(c.add(i * ldc), n)
        };
        finish(i, row);
    }
}

/// How a product of `m x n` by depth `k` is cut into (row block, column block) tasks, in
/// panels of `mr` rows and `NR` columns: (A panels per block, B panels per block, run in
/// parallel). Column blocks hold an even number of B panels where they can (the wide
/// kernel takes them in pairs).
fn task_grid(m: usize, n: usize, k: usize, mr: usize, threads: usize) -> (usize, usize, bool) {
    let (mp, np) = (m.div_ceil(mr), n.div_ceil(NR));
    // Blocks of up to 96 rows by 16 B panels (256 columns).
    let mut mb = mp.min(96 / mr);
    let mut nb = np.min(16);
    let parallel = threads > 1 && m.saturating_mul(n).saturating_mul(k) >= PARALLEL_MACS;
    if parallel {
        let want = 2 * threads;
        while mp.div_ceil(mb) * np.div_ceil(nb) < want && (nb > 2 || mb > 1) {
            if nb >= mb && nb > 2 {
                nb = nb.div_ceil(2).next_multiple_of(2);
            } else if mb > 1 {
                mb = mb.div_ceil(2);
            } else {
                break;
            }
        }
    }
    (mb, nb, parallel)
}

/// The micro-kernel family a product runs on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// 6 x 16 tiles (AVX2+FMA, or the portable loop).
    Base,
    /// AVX-512F tiles ([`crate::ops::nn::gemm::sgemm_wide`]): 8 x 32, or 16 x 16 for 9 to 16 rows.
    Wide,
}

impl Isa {
    /// The best family this CPU runs.
    pub fn detect() -> Isa {
        if sgemm_wide::available() {
            Isa::Wide
        } else {
            Isa::Base
        }
    }

    /// Rows per A panel for a product of `m` rows.
    fn mr(self, m: usize) -> usize {
        match self {
            Isa::Base => MR,
            Isa::Wide if m > MR_WIDE && m <= MR_TALL => MR_TALL,
            Isa::Wide => MR_WIDE,
        }
    }
}

/// `c = a @ b` (then `finish(row, column0, segment)` on each finished row segment) for an
/// `m x k` matrix `a` (element `(i, p)` at `i * a_rs + p * a_cs`) and a constant packed `b`;
/// `c` is row-major `m x b.n` and only written.
pub fn gemm_packed_b(
    m: usize,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    b: &PackedB,
    c: &mut [std::mem::MaybeUninit<f32>],
    finish: &(dyn Fn(usize, usize, &mut [f32]) + Sync),
) {
    gemm_packed_b_on(Isa::detect(), m, a, a_rs, a_cs, b, c, finish)
}

/// [`gemm_packed_b`] on a chosen kernel family (`Wide` only where [`Isa::detect`] gives it).
#[allow(clippy::too_many_arguments)]
pub fn gemm_packed_b_on(
    isa: Isa,
    m: usize,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    b: &PackedB,
    c: &mut [std::mem::MaybeUninit<f32>],
    finish: &(dyn Fn(usize, usize, &mut [f32]) + Sync),
) {
    assert!(
        isa == Isa::Base || sgemm_wide::available(),
        "gemm_packed_b_on: this CPU has no AVX-512F"
    );
    let (k, n) = (b.k, b.n);
    assert_eq!(c.len(), m * n, "gemm_packed_b: output size");
    if m == 0 || n == 0 {
        return;
    }
    let mr = isa.mr(m);
    let mp = m.div_ceil(mr);
    let len = packed_len(mp, k, mr);
    crate::ops::nn::scratch::with_scratch::<f32, _>(len + 16, |buf| {
        // Align the packed A to a cache line inside the scratch.
        let off = buf.as_ptr().align_offset(64).min(15);
        let ap = &mut buf[off..off + len];
        let (mb, nb, parallel) = task_grid(m, n, k, mr, rayon::current_num_threads());
        pack_on(a, m, k, a_rs, a_cs, mr, ap, parallel);
        let a_all = Panels::new(ap, k, mp, mr);
        let b_all = b.panels();
        let (tm, tn) = (mp.div_ceil(mb), n.div_ceil(NR).div_ceil(nb));
        let cp = SharedMut(c.as_mut_ptr() as *mut f32);
        let task = |t: usize| {
            let (bi, bj) = (t / tn, t % tn);
            let (r0, c0) = (bi * mb * mr, bj * nb * NR);
            let rows = (mb * mr).min(m - r0);
            let cols = (nb * NR).min(n - c0);
            let (a_blk, b_blk) = (a_all.skip(bi * mb), b_all.skip(bj * nb));
            let out = cp.get().wrapping_add(r0 * n + c0);
            let mut fin = |i: usize, row: &mut [f32]| finish(r0 + i, c0, row);
            // SAFETY: the block rows r0..r0+rows, columns c0..c0+cols lies inside `c`
            // (m x n) and tasks cover disjoint blocks; `Wide` runs only where the CPU has
            // AVX-512F (asserted above).
            unsafe {
                match isa {
                    Isa::Base => gemm_panels(rows, cols, a_blk, b_blk, out, n, &mut fin),
                    Isa::Wide => {
                        sgemm_wide::gemm_panels_wide(rows, cols, a_blk, b_blk, out, n, &mut fin)
                    }
                }
            }
        };
        if parallel && tm * tn > 1 {
            use rayon::prelude::*;
            (0..tm * tn).into_par_iter().for_each(task);
        } else {
            (0..tm * tn).for_each(task);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(seed: &mut u64) -> f32 {
        *seed = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((*seed >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
    }

    /// The kernel families this CPU runs (both are checked where it has AVX-512F).
    fn isas() -> Vec<Isa> {
        let mut v = vec![Isa::Base];
        if sgemm_wide::available() {
            v.push(Isa::Wide);
        }
        v
    }

    fn reference(a: &[f32], b: &[f32], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0.0f64; m * n];
        for i in 0..m {
            for p in 0..k {
                for j in 0..n {
                    out[i * n + j] += a[i * k + p] as f64 * b[p * n + j] as f64;
                }
            }
        }
        out
    }

    #[test]
    fn packed_b_matches_f64_on_ragged_shapes() {
        let mut seed = 7;
        for &(m, k, n) in &[
            (1, 1, 1),
            (5, 3, 17),
            (6, 16, 16),
            (13, 300, 33),
            (16, 384, 384),
            (8, 40, 32),
            (9, 257, 48),
            (17, 1536, 80),
            (24, 512, 1536),
            (100, 600, 50),
            (40, 1536, 70),
            (7, 0, 9),
            // Last A panels of 1 to 4 rows run the half-height kernel, paired and single.
            (20, 1024, 70),
            (4, 64, 48),
            (3, 33, 16),
        ] {
            let a: Vec<f32> = (0..m * k).map(|_| lcg(&mut seed)).collect();
            let b: Vec<f32> = (0..k * n).map(|_| lcg(&mut seed)).collect();
            let want = reference(&a, &b, m, k, n);
            // b given transposed (n x k storage) must pack to the same panels.
            let bt: Vec<f32> = (0..n * k).map(|i| b[(i % k) * n + i / k]).collect();
            for pb in [PackedB::new(&b, k, n, n, 1), PackedB::new(&bt, k, n, 1, k)] {
                for isa in isas() {
                    let mut c = vec![std::mem::MaybeUninit::new(f32::NAN); m * n];
                    gemm_packed_b_on(isa, m, &a, k, 1, &pb, &mut c, &|_, _, _| {});
                    for (i, (got, want)) in c.iter().zip(&want).enumerate() {
                        // SAFETY: every element was written by gemm_packed_b (or set above).
                        let got = unsafe { got.assume_init() } as f64;
                        let tol = 1e-5 * (k as f64).sqrt().max(1.0);
                        assert!(
                            (got - want).abs() <= tol,
                            "{isa:?} {m}x{k}x{n} at {i}: {got} vs {want}"
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_panels_times_packed_b_with_finish() {
        let mut seed = 11;
        let (m, k, n) = (20, 70, 37);
        let a: Vec<f32> = (0..m * k).map(|_| lcg(&mut seed)).collect();
        let b: Vec<f32> = (0..k * n).map(|_| lcg(&mut seed)).collect();
        let want = reference(&a, &b, m, k, n);
        let mut pa = AlignedBuf::zeroed(packed_len(m.div_ceil(MR), k, MR));
        pack(&a, m, k, k, 1, MR, pa.as_mut_slice());
        let pa = Panels::new(pa.as_slice(), k, m.div_ceil(MR), MR);
        let pb = PackedB::new(&b, k, n, n, 1);
        let mut c = vec![0.0f32; m * n];
        let mut seen = vec![0usize; m];
        // SAFETY: `c` is an m x n row-major block owned here.
        unsafe {
            gemm_panels(m, n, pa, pb.panels(), c.as_mut_ptr(), n, &mut |i, row| {
                seen[i] += 1;
                row.iter_mut().for_each(|v| *v += 1.0);
            });
        }
        assert!(
            seen.iter().all(|&s| s == 1),
            "finish runs once per row: {seen:?}"
        );
        for (got, want) in c.iter().zip(&want) {
            assert!((*got as f64 - (want + 1.0)).abs() < 1e-4, "{got} vs {want}");
        }
    }
}
