//! Branch-free f32 approximations of exp, sigmoid, tanh and erf that the compiler can
//! vectorize (libm's scalar calls cannot be), and slice maps that run them with AVX2 when the
//! CPU has it. Each approximation stays within a few ulp of the f64 result (see the tests),
//! except that sigmoid and tanh reproduce onnxruntime's (MLAS's) rational approximations bit
//! for bit, whose error bounds their docs give.

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

/// The logistic function 1 / (1 + e^-x), computed exactly as onnxruntime's CPU provider does
/// (MLAS's `MlasComputeLogistic`, which its Sigmoid kernel, fused Conv activations and LSTM
/// gates use), so that results agree bit for bit: x is clamped to [-18, 18], then
/// `x * P(x^2) / Q(x^2) + 0.5` with a degree 9/10 rational approximation whose polynomials are
/// evaluated by Horner's rule with fused multiply-adds, and the result is raised to 0 where it
/// falls below (it is not clamped above: onnxruntime returns 1.0000001 for a few x near 17.6,
/// and so does this).
///
/// Accuracy against the f64 logistic (every third float32, `examples/activation_accuracy.rs`,
/// in ulps of the float32 result): absolute error below 1.8e-7 everywhere, at most 2.98 ulp
/// for x >= -1; for negative x the relative error grows as the result shrinks (up to 230 ulp
/// on [-5, -1), 3.3e4 on [-10, -5); results below ~1e-7 are dominated by the absolute error
/// and many come out as 0, like onnxruntime's). NaN stays NaN. `mul_add` is an exact FMA everywhere, so the plain and the
/// AVX2+FMA builds give the same bits.
// The coefficients as MLAS publishes them (each rounds to the f32 it uses).
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub fn sigmoid(x: f32) -> f32 {
    const A9: f32 = 4.37031012579801e-11;
    const A7: f32 = 1.15627324459942e-07;
    const A5: f32 = 6.08574864600143e-05;
    const A3: f32 = 8.51377133304701e-03;
    const A1: f32 = 2.48287947061529e-01;
    const B10: f32 = 6.10247389755681e-13;
    const B8: f32 = 5.76102136993427e-09;
    const B6: f32 = 6.29106785017040e-06;
    const B4: f32 = 1.70198817374094e-03;
    const B2: f32 = 1.16817656904453e-01;
    const B0: f32 = 9.93151921023180e-01;
    // Comparisons written so that NaN falls through (and these compile to max/min).
    let x = if x < -18.0 { -18.0 } else { x };
    let x = if x > 18.0 { 18.0 } else { x };
    let x2 = x * x;
    let p = A9.mul_add(x2, A7);
    let p = p.mul_add(x2, A5);
    let p = p.mul_add(x2, A3);
    let p = p.mul_add(x2, A1);
    let p = p * x;
    let q = B10.mul_add(x2, B8);
    let q = q.mul_add(x2, B6);
    let q = q.mul_add(x2, B4);
    let q = q.mul_add(x2, B2);
    let q = q.mul_add(x2, B0);
    let r = p / q + 0.5;
    if r < 0.0 {
        0.0
    } else {
        r
    }
}

/// tanh(x), computed exactly as onnxruntime's CPU provider does (MLAS's `MlasComputeTanh`,
/// used by its Tanh kernel, fused activations and LSTM gates), so that results agree bit for
/// bit: x is clamped to [-9, 9], then `x * P(x^2) / Q(x^2)` with a degree 13/6 rational
/// approximation evaluated by Horner's rule with fused multiply-adds. The result is not
/// clamped (onnxruntime returns ±1.0000001 for some |x| in [8.2, 9], and so does this).
///
/// Accuracy against the f64 tanh (every third float32, in ulps of the float32 result): at
/// most 5.46 ulp for |x| >= 1e-30 (the worst near |x| = 8.5, at most 4.37 below |x| = 2); for
/// |x| < 1e-30 the intermediate `x * P` becomes subnormal and loses precision (14 ulp on
/// [1e-37, 1e-30), up to 104 ulp near 2e-38; below 3e-43 the result is 0). Odd (tanh(-x) = -tanh(x) bit for bit), keeps
/// -0, NaN stays NaN.
// The coefficients as MLAS publishes them (each rounds to the f32 it uses).
#[allow(clippy::excessive_precision)]
#[inline(always)]
pub fn tanh(x: f32) -> f32 {
    const C13: f32 = -2.76076847742355e-16;
    const C11: f32 = 2.00018790482477e-13;
    const C9: f32 = -8.60467152213735e-11;
    const C7: f32 = 5.12229709037114e-08;
    const C5: f32 = 1.48572235717979e-05;
    const C3: f32 = 6.37261928875436e-04;
    const C1: f32 = 4.89352455891786e-03;
    const D6: f32 = 1.19825839466702e-06;
    const D4: f32 = 1.18534705686654e-04;
    const D2: f32 = 2.26843463243900e-03;
    const D0: f32 = 4.89352518554385e-03;
    let x = if x < -9.0 { -9.0 } else { x };
    let x = if x > 9.0 { 9.0 } else { x };
    let x2 = x * x;
    let p = C13.mul_add(x2, C11);
    let p = p.mul_add(x2, C9);
    let p = p.mul_add(x2, C7);
    let p = p.mul_add(x2, C5);
    let p = p.mul_add(x2, C3);
    let p = p.mul_add(x2, C1);
    let p = p * x;
    let q = D6.mul_add(x2, D4);
    let q = q.mul_add(x2, D2);
    let q = q.mul_add(x2, D0);
    p / q
}

/// GELU with the tanh approximation, `x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))`, in
/// onnxruntime's order of operations (its Gelu with approximate="tanh" and com.microsoft
/// FastGelu): `inner = x * (C x x + B)` with B = sqrt(2/pi) and C = 0.044715 B as float32,
/// `tanh` as above, then `(x / 2) * (t + 1)`, each a separately rounded float32 operation, so
/// the bits agree with onnxruntime's. (Expanding `B (x + 0.044715 x^3)` instead rounds
/// differently and disagrees in the last bit on about 11% of inputs.)
#[inline(always)]
pub fn gelu_tanh(x: f32) -> f32 {
    const B: f32 = 0.797_884_6; // sqrt(2/pi)
    const C: f32 = 0.035_677_407; // 0.044715 * sqrt(2/pi)
    let inner = x * (C * x * x + B);
    0.5 * x * (tanh(inner) + 1.0)
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

/// `map` for float32 maps (the float unary kernels): compiled for AVX-512F when the CPU has
/// it (16 lanes; about 15-20% faster than AVX2 for `sigmoid` and `tanh` on a Xeon with
/// AVX-512), else as `map`. Every build runs the same IEEE operations, FMAs included, so the
/// results are the same bits (tests/activation_reference.rs checks the kernels against
/// onnxruntime, and the tests below each build against the scalar function).
#[inline]
pub fn map_f32<F: Fn(f32) -> f32>(src: &[f32], dst: &mut [std::mem::MaybeUninit<f32>], f: &F) {
    debug_assert_eq!(src.len(), dst.len());
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU supports the features `map_avx512` is compiled for.
        unsafe { map_avx512(src, dst, f) };
        return;
    }
    map(src, dst, f);
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn map_avx512<T: Copy, U, F: Fn(T) -> U>(
    src: &[T],
    dst: &mut [std::mem::MaybeUninit<U>],
    f: &F,
) {
    map_plain(src, dst, f)
}

/// `x[i] = f(x[i])` in place, compiled for AVX-512F, else AVX2+FMA, when the CPU has them
/// (the same bits either way, as for `map_f32`).
#[inline]
pub fn map_inplace<T: Copy>(x: &mut [T], f: impl Fn(T) -> T) {
    #[cfg(target_arch = "x86_64")]
    if has_avx512() {
        // SAFETY: the CPU supports the features `inplace_avx512` is compiled for.
        unsafe { inplace_avx512(x, &f) };
        return;
    }
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

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn inplace_avx512<T: Copy>(x: &mut [T], f: &impl Fn(T) -> T) {
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

/// Whether the CPU has AVX-512F (and AVX2 and FMA).
#[cfg(target_arch = "x86_64")]
#[inline]
pub fn has_avx512() -> bool {
    std::is_x86_feature_detected!("avx512f") && has_avx2()
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

    /// (input, Sigmoid, Tanh) bit patterns that onnxruntime's CPU provider produced.
    fn ort_table() -> Vec<(f32, u32, u32)> {
        include_str!("../../../tests/data/ort_sigmoid_tanh_f32.txt")
            .lines()
            .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
            .map(|l| {
                let v: Vec<u32> = l
                    .split_whitespace()
                    .map(|h| u32::from_str_radix(h, 16).unwrap())
                    .collect();
                (f32::from_bits(v[0]), v[1], v[2])
            })
            .collect()
    }

    #[test]
    fn sigmoid_and_tanh_match_onnxruntime_bits() {
        let table = ort_table();
        assert!(table.len() > 500);
        for &(x, s, t) in &table {
            assert_eq!(sigmoid(x).to_bits(), s, "sigmoid({x:e})");
            assert_eq!(tanh(x).to_bits(), t, "tanh({x:e})");
        }
        // The vectorized (AVX-512 / AVX2+FMA) slice maps give the same bits, at every offset.
        let xs: Vec<f32> = table.iter().map(|e| e.0).collect();
        let mut dst = vec![std::mem::MaybeUninit::<f32>::uninit(); xs.len()];
        let mut dst2 = dst.clone();
        map(&xs, &mut dst, &sigmoid);
        map_f32(&xs[1..], &mut dst2[1..], &sigmoid);
        let mut th = xs.clone();
        map_inplace(&mut th[3..], tanh);
        for (i, &(_, s, t)) in table.iter().enumerate() {
            // SAFETY: `map` wrote every element.
            assert_eq!(unsafe { dst[i].assume_init() }.to_bits(), s);
            if i >= 1 {
                // SAFETY: `map_f32` wrote every element from 1 on.
                assert_eq!(unsafe { dst2[i].assume_init() }.to_bits(), s);
            }
            if i >= 3 {
                assert_eq!(th[i].to_bits(), t);
            }
        }
    }

    #[test]
    fn sigmoid_and_tanh_are_close() {
        let xs = grid(-30.0, 30.0, 300_000);
        let logistic = |x: f64| 1.0 / (1.0 + (-x).exp());
        // Sigmoid: absolute error below 1.7e-7 (the floor 1.0 makes `worst` absolute);
        // relative error within 3 ulp where x >= -1.
        assert!(worst(&xs, sigmoid, logistic, 1.0) < 1.7e-7 / f32::EPSILON as f64);
        let upper: Vec<f32> = xs.iter().copied().filter(|&x| x >= -1.0).collect();
        assert!(worst(&upper, sigmoid, logistic, 0.0) < 3.0);
        // Tanh: within 5.5 ulp.
        assert!(worst(&xs, tanh, f64::tanh, 0.0) < 5.5);
        let tiny = grid(-1e-3, 1e-3, 10_000);
        assert!(worst(&tiny, tanh, f64::tanh, 0.0) < 4.5);
        let tinier: Vec<f32> = (1..200).map(|i| 1e-30 * 1.37f32.powi(i)).collect();
        assert!(worst(&tinier, tanh, f64::tanh, 0.0) < 4.5);
        assert_eq!(tanh(50.0), 1.0);
        assert_eq!(tanh(-50.0), -1.0);
        assert_eq!(tanh(f32::INFINITY), 1.0);
        assert_eq!(tanh(-0.0).to_bits(), (-0.0f32).to_bits());
        for &x in &xs {
            assert_eq!(tanh(-x).to_bits(), (-tanh(x)).to_bits());
            let s = sigmoid(x);
            assert!((0.0..=1.000_000_2).contains(&s));
        }
        assert!(tanh(f32::NAN).is_nan());
        assert!(tanh(-f32::NAN).is_nan());
        assert!(sigmoid(f32::NAN).is_nan());
        assert!(sigmoid(-f32::NAN).is_nan());
        assert_eq!(sigmoid(-200.0), 0.0);
        assert_eq!(sigmoid(f32::NEG_INFINITY), 0.0);
        assert_eq!(sigmoid(200.0), 1.0);
        assert_eq!(sigmoid(0.0), 0.5);
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
