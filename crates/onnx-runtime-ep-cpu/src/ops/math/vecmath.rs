//! Branch-free f32 approximations of exp, sigmoid, tanh and erf that the compiler can
//! vectorize (libm's scalar calls cannot be), and slice maps that run them with AVX2 when the
//! CPU has it. Each approximation stays within a few ulp of the f64 result (see the tests).

/// `2^n` for an integer-valued `n` in [-126, 127], built from its exponent bits. Adding
/// 1.5 * 2^23 puts `n` in the low mantissa bits (bits = 0x4B40_0000 + n), so no float-to-int
/// conversion (which does not vectorize well) is needed.
#[inline(always)]
fn pow2i(n: f32) -> f32 {
    let bits = (n + 12_582_912.0).to_bits();
    f32::from_bits(bits.wrapping_sub(0x4B40_0000 - 127) << 23)
}

/// Rounds to the nearest integer (ties to even) for |x| < 2^22, without a rounding
/// instruction (so it vectorizes on plain SSE2).
#[inline(always)]
fn round_magic(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 * 2^23
    (x + MAGIC) - MAGIC
}

/// e^x with about 1 ulp of error; overflows to +inf, underflows gradually to 0, NaN stays NaN.
#[inline(always)]
pub fn exp(x: f32) -> f32 {
    const LOG2E: f32 = std::f32::consts::LOG2_E;
    // ln 2 split so that n * LN2_HI is exact for |n| < 2^9.
    const LN2_HI: f32 = 0.6933594;
    const LN2_LO: f32 = -0.00021219444;
    let xc = x.clamp(-104.0, 89.0);
    let n = round_magic(xc * LOG2E);
    let r = xc - n * LN2_HI - n * LN2_LO;
    // e^r on |r| <= ln2/2: Taylor to degree 6 (truncation below 1.3e-7 relative).
    let p = 1.0 / 720.0;
    let p = p * r + 1.0 / 120.0;
    let p = p * r + 1.0 / 24.0;
    let p = p * r + 1.0 / 6.0;
    let p = p * r + 0.5;
    let p = p * r * r + r + 1.0;
    // 2^n as two factors so that each stays a normal number for n in [-150, 129].
    let n1 = round_magic(n * 0.5);
    let y = p * pow2i(n1) * pow2i(n - n1);
    if x.is_nan() {
        x
    } else {
        y
    }
}

/// 1 / (1 + e^-x).
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + exp(-x))
}

/// tanh(x): an odd polynomial near zero (no cancellation), 1 - 2 / (e^2|x| + 1) elsewhere.
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    let a = x.abs();
    let u = x * x;
    // tanh(x) / x on |x| <= 0.625 as a polynomial in x^2 (least-squares fit, 4e-9 relative).
    let p = -0.0056975223f32;
    let p = p * u + 0.020630307;
    let p = p * u - 0.053735863;
    let p = p * u + 0.13331366;
    let p = p * u - 0.33333275;
    let p = p * u + 1.0;
    let small = x * p;
    let big = 1.0 - 2.0 / (exp(2.0 * a.min(10.0)) + 1.0);
    if a <= 0.625 || x.is_nan() {
        small
    } else {
        big.copysign(x)
    }
}

/// erf(x): x * P(x^2) on |x| <= 1, 1 - e^(-x^2) * Q(1 / (1 + |x|/2)) on 1 < |x| < 4 and ±1
/// beyond (both least-squares fits; absolute error below 1e-7).
#[inline(always)]
pub fn erf(x: f32) -> f32 {
    let a = x.abs();
    let u = x * x;
    let p = 7.89821e-05_f32;
    let p = p * u - 0.0008024354;
    let p = p * u + 0.0051900535;
    let p = p * u - 0.02685481;
    let p = p * u + 0.11283612;
    let p = p * u - 0.3761263;
    let p = p * u + std::f32::consts::FRAC_2_SQRT_PI;
    let small = x * p;
    let ac = a.min(4.0);
    let t = 1.0 / (1.0 + 0.5 * ac);
    let q = -0.052171595f32;
    let q = q * t - 0.060614824;
    let q = q * t + 0.40690643;
    let q = q * t + 0.09987527;
    let q = q * t + 0.33113867;
    let q = q * t + 0.27359807;
    let q = q * t + 0.0006053052;
    let big = (1.0 - exp(-ac * ac) * q).copysign(x);
    if a <= 1.0 || x.is_nan() {
        small
    } else {
        big
    }
}

/// `dst[i] = f(src[i])`, compiled for AVX2+FMA when the CPU has them. `f` is called
/// directly (no `&F` forwarding shim), so a closure marked `#[inline(always)]` is inlined into
/// the loop and vectorized with it.
#[inline]
pub fn map<T: Copy, U, F: Fn(T) -> U>(src: &[T], dst: &mut [std::mem::MaybeUninit<U>], f: &F) {
    debug_assert_eq!(src.len(), dst.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports the features `map_avx2` is compiled for.
        unsafe { map_avx2(src, dst, f) };
        return;
    }
    map_plain(src, dst, f);
}

#[inline(always)]
fn map_plain<T: Copy, U, F: Fn(T) -> U>(src: &[T], dst: &mut [std::mem::MaybeUninit<U>], f: &F) {
    for (o, &x) in dst.iter_mut().zip(src) {
        o.write((*f)(x));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn map_avx2<T: Copy, U, F: Fn(T) -> U>(
    src: &[T],
    dst: &mut [std::mem::MaybeUninit<U>],
    f: &F,
) {
    map_plain(src, dst, f)
}

/// `x[i] = f(x[i])` in place, compiled for AVX2+FMA when the CPU has them.
#[inline]
pub fn map_inplace<T: Copy>(x: &mut [T], f: impl Fn(T) -> T) {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports the features `inplace_avx2` is compiled for.
        unsafe { inplace_avx2(x, &f) };
        return;
    }
    for v in x.iter_mut() {
        *v = f(*v);
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn inplace_avx2<T: Copy>(x: &mut [T], f: &impl Fn(T) -> T) {
    for v in x.iter_mut() {
        *v = f(*v);
    }
}

/// Runs `body` compiled for AVX2+FMA when the CPU has them (for loops written inline).
#[inline]
pub fn with_avx2<R>(body: impl FnOnce() -> R) -> R {
    #[cfg(target_arch = "x86_64")]
    if has_avx2() {
        // SAFETY: the CPU supports the features `call_avx2` is compiled for.
        return unsafe { call_avx2(body) };
    }
    body()
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn call_avx2<R>(body: impl FnOnce() -> R) -> R {
    body()
}

#[cfg(target_arch = "x86_64")]
#[inline]
pub fn has_avx2() -> bool {
    std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
}

/// The slice as f32 when `T` is f32 (for f32-only fast paths inside generic kernels).
#[inline]
pub fn as_f32_mut<T: 'static + bytemuck::Pod>(x: &mut [T]) -> Option<&mut [f32]> {
    if std::any::TypeId::of::<T>() == std::any::TypeId::of::<f32>() {
        Some(bytemuck::cast_slice_mut(x))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Largest error of `f` against `want` over `xs`, in units of f32 epsilon relative to
    /// max(|want|, floor).
    fn worst(xs: &[f32], f: impl Fn(f32) -> f32, want: impl Fn(f64) -> f64, floor: f64) -> f64 {
        xs.iter()
            .map(|&x| {
                let w = want(x as f64);
                let g = f(x) as f64;
                (g - w).abs() / w.abs().max(floor) / f32::EPSILON as f64
            })
            .fold(0.0, f64::max)
    }

    fn grid(lo: f32, hi: f32, n: usize) -> Vec<f32> {
        (0..=n)
            .map(|i| lo + (hi - lo) * i as f32 / n as f32)
            .collect()
    }

    #[test]
    fn exp_is_within_two_ulp() {
        let xs = grid(-87.0, 88.5, 400_000);
        assert!(worst(&xs, exp, f64::exp, 0.0) < 2.0);
        assert_eq!(exp(100.0), f32::INFINITY);
        assert_eq!(exp(-200.0), 0.0);
        assert_eq!(exp(f32::NEG_INFINITY), 0.0);
        assert_eq!(exp(f32::INFINITY), f32::INFINITY);
        assert!(exp(f32::NAN).is_nan());
        assert_eq!(exp(0.0), 1.0);
        // Subnormal results keep their magnitude.
        let s = exp(-100.0) as f64;
        assert!((s - (-100f64).exp()).abs() < 1e-44);
    }

    #[test]
    fn sigmoid_and_tanh_are_close() {
        let xs = grid(-30.0, 30.0, 300_000);
        assert!(worst(&xs, sigmoid, |x| 1.0 / (1.0 + (-x).exp()), 0.0) < 4.0);
        assert!(worst(&xs, tanh, f64::tanh, 0.0) < 4.0);
        let tiny = grid(-1e-3, 1e-3, 10_000);
        assert!(worst(&tiny, tanh, f64::tanh, 0.0) < 2.0);
        assert_eq!(tanh(50.0), 1.0);
        assert_eq!(tanh(-50.0), -1.0);
        assert!(tanh(f32::NAN).is_nan());
        assert!(sigmoid(f32::NAN).is_nan());
        assert_eq!(sigmoid(-200.0), 0.0);
        assert_eq!(sigmoid(200.0), 1.0);
    }

    #[test]
    fn erf_is_close() {
        let xs = grid(-6.0, 6.0, 300_000);
        // Absolute error below 2 eps (relative to max(|erf|, 0.1)); near 0 relative.
        assert!(worst(&xs, erf, libm::erf, 0.1) < 2.0);
        let tiny = grid(-1e-3, 1e-3, 10_000);
        assert!(worst(&tiny, erf, libm::erf, 0.0) < 2.0);
        assert_eq!(erf(10.0), 1.0);
        assert_eq!(erf(-10.0), -1.0);
        assert!(erf(f32::NAN).is_nan());
    }

    #[test]
    fn maps_write_every_element() {
        let src: Vec<f32> = grid(-5.0, 5.0, 1000);
        let mut dst = vec![std::mem::MaybeUninit::<f32>::uninit(); src.len()];
        map(&src, &mut dst, &sigmoid);
        for (d, &x) in dst.iter().zip(&src) {
            // SAFETY: `map` wrote every element.
            assert_eq!(unsafe { d.assume_init() }, sigmoid(x));
        }
        let mut v = src.clone();
        map_inplace(&mut v, tanh);
        assert_eq!(v, src.iter().map(|&x| tanh(x)).collect::<Vec<_>>());
        let mut w = vec![1.0f64, 2.0];
        assert!(as_f32_mut(&mut w).is_none());
    }
}
