//! The 3x3 depthwise kernels on AVX-512F ([`super::depthwise`]), sixteen outputs a step with
//! lane masks, three independent FMA chains of three taps each per step (so consecutive steps
//! overlap instead of waiting on one nine-deep chain):
//! - [`plane3x3_s1`]: stride 1, dilation 1, straight from the input plane: each tap's load is
//!   masked to the lanes whose input column lies inside the row, so the padding costs nothing
//!   and no padded copy of the plane is made;
//! - [`plane3x3_s2`]: stride 2 the same way, the even and odd input columns split by
//!   permutes;
//! - [`row3x3`]: any other stride or dilation, one output row from the nine input runs its taps read in a plane
//!   laid out in stride phases (zeros in the padding).
//!
//! The plane kernels fold their taps with a [`Fold`]: [`Sum`] (weighted sums: depthwise
//! convolution, AveragePool with unit weights) or [`Max`] (MaxPool, the weights unused).

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Whether this CPU runs [`row3x3`].
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

/// `out[i] = bias + sum_t w[t] * taps[t][i]` for `i < n`, summed as
/// `(bias + w0 t0 + w1 t1 + w2 t2) + ((w3 t3 + w4 t4 + w5 t5) + (w6 t6 + w7 t7 + w8 t8))`
/// with fused multiply-adds.
///
/// # Safety
/// The CPU has AVX-512F ([`available`]); every `taps[t]` points to at least `n` readable
/// f32 values and `out` to `n` writable ones.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
pub unsafe fn row3x3(taps: &[*const f32; 9], w: &[f32; 9], bias: f32, out: *mut f32, n: usize) {
    let wv: [__m512; 9] = std::array::from_fn(|t| _mm512_set1_ps(w[t]));
    let b = _mm512_set1_ps(bias);
    let mut x = 0;
    while x < n {
        let left = n - x;
        let m: __mmask16 = if left >= 16 {
            0xffff
        } else {
            ((1u32 << left) - 1) as __mmask16
        };
        macro_rules! tap {
            ($t:expr) => {
                // SAFETY: lanes at or past `n` are masked off (not read).
                unsafe { _mm512_maskz_loadu_ps(m, taps[$t].add(x)) }
            };
        }
        let mut a = _mm512_fmadd_ps(wv[0], tap!(0), b);
        let mut c = _mm512_mul_ps(wv[3], tap!(3));
        let mut d = _mm512_mul_ps(wv[6], tap!(6));
        a = _mm512_fmadd_ps(wv[1], tap!(1), a);
        c = _mm512_fmadd_ps(wv[4], tap!(4), c);
        d = _mm512_fmadd_ps(wv[7], tap!(7), d);
        a = _mm512_fmadd_ps(wv[2], tap!(2), a);
        c = _mm512_fmadd_ps(wv[5], tap!(5), c);
        d = _mm512_fmadd_ps(wv[8], tap!(8), d);
        let r = _mm512_add_ps(a, _mm512_add_ps(c, d));
        // SAFETY: as above, for the stores.
        unsafe { _mm512_mask_storeu_ps(out.add(x), m, r) };
        x += 16;
    }
}

/// Lanes `[lo, hi)` of a 16-lane mask (clamped to the vector).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
fn lanes(lo: isize, hi: isize) -> u16 {
    let (lo, hi) = (lo.clamp(0, 16) as u32, hi.clamp(0, 16) as u32);
    if hi <= lo {
        return 0;
    }
    let upto = |n: u32| if n >= 16 { 0xffffu32 } else { (1u32 << n) - 1 };
    (upto(hi) & !upto(lo)) as u16
}

/// How a plane kernel folds its nine taps: the value a tap outside the input reads, the
/// fold of one tap into an accumulator, and the join of two accumulators.
#[cfg(target_arch = "x86_64")]
pub trait Fold {
    /// The value of a tap outside the input (the fold's identity).
    ///
    /// # Safety
    /// AVX-512F.
    unsafe fn identity() -> __m512;
    /// The accumulator a window starts from (the bias of a sum).
    ///
    /// # Safety
    /// AVX-512F.
    unsafe fn start(bias: f32) -> __m512;
    /// `acc` with the tap `v` of weight `w` folded in.
    ///
    /// # Safety
    /// AVX-512F.
    unsafe fn fold(acc: __m512, w: __m512, v: __m512) -> __m512;
    /// Two partial folds joined.
    ///
    /// # Safety
    /// AVX-512F.
    unsafe fn join(a: __m512, b: __m512) -> __m512;
}

/// Weighted sums (`acc + w * v` with fused multiply-adds).
pub struct Sum;
/// Maxima (the weights are ignored; a window with no tap inside the input gives -inf).
pub struct Max;

#[cfg(target_arch = "x86_64")]
impl Fold for Sum {
    #[inline(always)]
    unsafe fn identity() -> __m512 {
        // SAFETY: the caller's contract (AVX-512F).
        unsafe { _mm512_setzero_ps() }
    }
    #[inline(always)]
    unsafe fn start(bias: f32) -> __m512 {
        // SAFETY: the caller's contract (AVX-512F).
        unsafe { _mm512_set1_ps(bias) }
    }
    #[inline(always)]
    unsafe fn fold(acc: __m512, w: __m512, v: __m512) -> __m512 {
        // SAFETY: the caller's contract (AVX-512F).
        unsafe { _mm512_fmadd_ps(w, v, acc) }
    }
    #[inline(always)]
    unsafe fn join(a: __m512, b: __m512) -> __m512 {
        // SAFETY: the caller's contract (AVX-512F).
        unsafe { _mm512_add_ps(a, b) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Fold for Max {
    #[inline(always)]
    unsafe fn identity() -> __m512 {
        // SAFETY: the caller's contract (AVX-512F).
        unsafe { _mm512_set1_ps(f32::NEG_INFINITY) }
    }
    #[inline(always)]
    unsafe fn start(_: f32) -> __m512 {
        // SAFETY: the caller's contract (AVX-512F).
        unsafe { _mm512_set1_ps(f32::NEG_INFINITY) }
    }
    #[inline(always)]
    unsafe fn fold(acc: __m512, _: __m512, v: __m512) -> __m512 {
        // SAFETY: the caller's contract (AVX-512F).
        unsafe { _mm512_max_ps(v, acc) }
    }
    #[inline(always)]
    unsafe fn join(a: __m512, b: __m512) -> __m512 {
        // SAFETY: the caller's contract (AVX-512F).
        unsafe { _mm512_max_ps(a, b) }
    }
}

/// The geometry of one stride-1, dilation-1 3x3 plane: input `ih x iw`, output rows `ow` long,
/// padding `pt` rows above and `pl` columns left (the output rows are the caller's).
#[derive(Clone, Copy, Debug)]
pub struct Plane3x3 {
    pub ih: usize,
    pub iw: usize,
    pub ow: usize,
    pub pt: usize,
    pub pl: usize,
}

/// Output rows `0..oh` of a stride-1 3x3 plane into `out` (`oh * ow`, row after row), folded
/// with `F`: for [`Sum`], `out[y][x] = bias + sum w[ky*3+kx] * x[y+ky-pt][x+kx-pl]` over the
/// taps inside the input (grouped as in [`row3x3`]), each divided by `ny[y] * nx[x]` with
/// `div` (AveragePool's counts); for [`Max`], the largest of those taps (`bias`, `w` and `div`
/// unused). Column strips of 16 outer, rows inner, so the strip's lane masks are computed
/// once; rows whose three input rows all exist take the branch-free body.
///
/// # Safety
/// The CPU has AVX-512F; `x` points to the `ih * iw` input plane and `out` to `oh * ow`
/// writable f32 values.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn plane3x3_s1<F: Fold>(
    g: &Plane3x3,
    x: *const f32,
    w: &[f32; 9],
    bias: f32,
    oh: usize,
    out: *mut f32,
    div: Option<(&[f32], &[f32])>,
) {
    let wv: [__m512; 9] = std::array::from_fn(|t| _mm512_set1_ps(w[t]));
    // SAFETY (every F call below): the CPU has AVX-512F.
    let (id, b) = unsafe { (F::identity(), F::start(bias)) };
    let (ih, iw, ow, pt, pl) = (
        g.ih as isize,
        g.iw as isize,
        g.ow as isize,
        g.pt as isize,
        g.pl as isize,
    );
    let mut x0 = 0isize;
    while x0 < ow {
        let om = lanes(0, ow - x0);
        // AveragePool's divisors of this strip's columns (ones past the row's end).
        // SAFETY: the lanes of om are columns x0 .. ow of nx.
        let dx = div.map(|(_, nx)| unsafe {
            _mm512_mask_loadu_ps(_mm512_set1_ps(1.0), om, nx.as_ptr().wrapping_offset(x0))
        });
        // Tap kx reads column x0 + i + kx - pl for lane i: lanes with it in [0, iw).
        let km: [u16; 3] = std::array::from_fn(|kx| {
            let off = x0 + kx as isize - pl;
            lanes(-off, iw - off) & om
        });
        // Only the masked lanes are read, each inside its row (a base may point before the
        // row's start: wrapping arithmetic, never dereferenced there); the others read F's
        // identity.
        let col = x.wrapping_offset(x0 - pl);
        for oy in 0..oh as isize {
            let iy0 = oy - pt;
            // SAFETY: rows are read only where they exist; lanes outside km not accessed.
            let r = unsafe {
                macro_rules! ld {
                    ($m:expr, $p:expr) => {
                        _mm512_mask_loadu_ps(id, $m, $p)
                    };
                }
                if iy0 >= 0 && iy0 + 2 < ih {
                    let p = col.wrapping_offset(iy0 * iw);
                    let (p1, p2) = (p.wrapping_offset(iw), p.wrapping_offset(2 * iw));
                    let mut a = F::fold(b, wv[0], ld!(km[0], p));
                    let mut c = F::fold(id, wv[3], ld!(km[0], p1));
                    let mut d = F::fold(id, wv[6], ld!(km[0], p2));
                    a = F::fold(a, wv[1], ld!(km[1], p.wrapping_add(1)));
                    c = F::fold(c, wv[4], ld!(km[1], p1.wrapping_add(1)));
                    d = F::fold(d, wv[7], ld!(km[1], p2.wrapping_add(1)));
                    a = F::fold(a, wv[2], ld!(km[2], p.wrapping_add(2)));
                    c = F::fold(c, wv[5], ld!(km[2], p1.wrapping_add(2)));
                    d = F::fold(d, wv[8], ld!(km[2], p2.wrapping_add(2)));
                    F::join(a, F::join(c, d))
                } else {
                    let mut acc = [b, id, id];
                    for (ky, a) in acc.iter_mut().enumerate() {
                        let iy = iy0 + ky as isize;
                        if iy < 0 || iy >= ih {
                            continue;
                        }
                        let p = col.wrapping_offset(iy * iw);
                        for (kx, &m) in km.iter().enumerate() {
                            *a = F::fold(*a, wv[ky * 3 + kx], ld!(m, p.wrapping_add(kx)));
                        }
                    }
                    F::join(acc[0], F::join(acc[1], acc[2]))
                }
            };
            let r = match (div, dx) {
                (Some((ny, _)), Some(dx)) => {
                    _mm512_div_ps(r, _mm512_mul_ps(_mm512_set1_ps(ny[oy as usize]), dx))
                }
                _ => r,
            };
            // SAFETY: the lanes of om are output columns x0 .. ow of row oy.
            unsafe { _mm512_mask_storeu_ps(out.wrapping_offset(oy * ow + x0), om, r) };
        }
        x0 += 16;
    }
}

/// As [`plane3x3_s1`] for stride 2 (`out[y][x]` folds `x[2y+ky-pt][2x+kx-pl]`; `ow` output
/// columns, `oh` rows). Per strip of 16 outputs and input row, two masked 16-lane loads at
/// the strip's first column and two at the column after the next, split into even and odd
/// lanes by permutes: taps 0 and 1 are the first pair's even and odd lanes, tap 2 the second
/// pair's even lanes.
///
/// # Safety
/// As [`plane3x3_s1`].
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[allow(clippy::too_many_arguments)]
pub unsafe fn plane3x3_s2<F: Fold>(
    g: &Plane3x3,
    x: *const f32,
    w: &[f32; 9],
    bias: f32,
    oh: usize,
    out: *mut f32,
    div: Option<(&[f32], &[f32])>,
) {
    let wv: [__m512; 9] = std::array::from_fn(|t| _mm512_set1_ps(w[t]));
    // SAFETY (every F call below): the CPU has AVX-512F.
    let (id, b) = unsafe { (F::identity(), F::start(bias)) };
    let even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    let odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    let (ih, iw, ow, pt, pl) = (
        g.ih as isize,
        g.iw as isize,
        g.ow as isize,
        g.pt as isize,
        g.pl as isize,
    );
    let mut x0 = 0isize;
    while x0 < ow {
        let om = lanes(0, ow - x0);
        // AveragePool's divisors of this strip's columns (ones past the row's end).
        // SAFETY: the lanes of om are columns x0 .. ow of nx.
        let dx = div.map(|(_, nx)| unsafe {
            _mm512_mask_loadu_ps(_mm512_set1_ps(1.0), om, nx.as_ptr().wrapping_offset(x0))
        });
        // The four loads of a row start at columns c0, c0 + 16, c0 + 2, c0 + 18: lanes with
        // their column in [0, iw) are read (outputs past ow compute values nobody stores).
        let c0 = 2 * x0 - pl;
        let lm: [u16; 4] = std::array::from_fn(|k| {
            let off = c0 + [0, 16, 2, 18][k];
            lanes(-off, iw - off)
        });
        let col = x.wrapping_offset(c0);
        for oy in 0..oh as isize {
            let mut acc = [b, id, id];
            for (ky, a) in acc.iter_mut().enumerate() {
                let iy = 2 * oy + ky as isize - pt;
                if iy < 0 || iy >= ih {
                    continue;
                }
                let p = col.wrapping_offset(iy * iw);
                // SAFETY: row iy exists; lanes outside each mask are not accessed.
                unsafe {
                    let (l0, l1, l2, l3) = (
                        _mm512_mask_loadu_ps(id, lm[0], p),
                        _mm512_mask_loadu_ps(id, lm[1], p.wrapping_add(16)),
                        _mm512_mask_loadu_ps(id, lm[2], p.wrapping_add(2)),
                        _mm512_mask_loadu_ps(id, lm[3], p.wrapping_add(18)),
                    );
                    let t0 = _mm512_permutex2var_ps(l0, even, l1);
                    let t1 = _mm512_permutex2var_ps(l0, odd, l1);
                    let t2 = _mm512_permutex2var_ps(l2, even, l3);
                    *a = F::fold(*a, wv[ky * 3], t0);
                    *a = F::fold(*a, wv[ky * 3 + 1], t1);
                    *a = F::fold(*a, wv[ky * 3 + 2], t2);
                }
            }
            // SAFETY: AVX-512F.
            let r = unsafe { F::join(acc[0], F::join(acc[1], acc[2])) };
            let r = match (div, dx) {
                (Some((ny, _)), Some(dx)) => {
                    _mm512_div_ps(r, _mm512_mul_ps(_mm512_set1_ps(ny[oy as usize]), dx))
                }
                _ => r,
            };
            // SAFETY: the lanes of om are output columns x0 .. ow of row oy.
            unsafe { _mm512_mask_storeu_ps(out.wrapping_offset(oy * ow + x0), om, r) };
        }
        x0 += 16;
    }
}

/// The fold of the non-x86 builds (never called there: [`available`] is false).
#[cfg(not(target_arch = "x86_64"))]
pub trait Fold {}
#[cfg(not(target_arch = "x86_64"))]
impl Fold for Sum {}
#[cfg(not(target_arch = "x86_64"))]
impl Fold for Max {}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
pub unsafe fn plane3x3_s2<F: Fold>(
    _: &Plane3x3,
    _: *const f32,
    _: &[f32; 9],
    _: f32,
    _: usize,
    _: *mut f32,
    _: Option<(&[f32], &[f32])>,
) {
    unreachable!("plane3x3_s2 needs AVX-512F (available() is false here)")
}

#[cfg(not(target_arch = "x86_64"))]
#[allow(clippy::too_many_arguments)]
pub unsafe fn plane3x3_s1<F: Fold>(
    _: &Plane3x3,
    _: *const f32,
    _: &[f32; 9],
    _: f32,
    _: usize,
    _: *mut f32,
    _: Option<(&[f32], &[f32])>,
) {
    unreachable!("plane3x3_s1 needs AVX-512F (available() is false here)")
}

#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn row3x3(_: &[*const f32; 9], _: &[f32; 9], _: f32, _: *mut f32, _: usize) {
    unreachable!("row3x3 needs AVX-512F (available() is false here)")
}
