//! Numeric traits the math kernels are generic over: float types computed in a wider
//! type (f16/bf16 in f32, rounded once) and integer types with C-like wrapping arithmetic.

use crate::Element;
use half::{bf16, f16};
use num_traits::{Float, FloatConst};

/// A float type kernels compute in: f32 or f64.
pub trait Real: Float + FloatConst + Send + Sync + std::fmt::Debug + 'static {
    fn erf(self) -> Self;
    /// `v` converted (rounded) to this type.
    fn cst(v: f64) -> Self;
    fn to_f64(self) -> f64;
}

impl Real for f32 {
    fn erf(self) -> f32 {
        libm::erff(self)
    }
    fn cst(v: f64) -> f32 {
        v as f32
    }
    fn to_f64(self) -> f64 {
        self as f64
    }
}

impl Real for f64 {
    fn erf(self) -> f64 {
        libm::erf(self)
    }
    fn cst(v: f64) -> f64 {
        v
    }
    fn to_f64(self) -> f64 {
        self
    }
}

/// A stored float element type and the type it computes in.
pub trait FloatElem: Element + Copy {
    type C: Real;
    fn up(self) -> Self::C;
    fn down(c: Self::C) -> Self;
}

impl FloatElem for f32 {
    type C = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self
    }
    #[inline(always)]
    fn down(c: f32) -> f32 {
        c
    }
}

impl FloatElem for f64 {
    type C = f64;
    #[inline(always)]
    fn up(self) -> f64 {
        self
    }
    #[inline(always)]
    fn down(c: f64) -> f64 {
        c
    }
}

impl FloatElem for f16 {
    type C = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn down(c: f32) -> f16 {
        f16::from_f32(c)
    }
}

impl FloatElem for bf16 {
    type C = f32;
    #[inline(always)]
    fn up(self) -> f32 {
        self.to_f32()
    }
    #[inline(always)]
    fn down(c: f32) -> bf16 {
        bf16::from_f32(c)
    }
}

/// Arithmetic every numeric element type supports, with the semantics ONNX kernels use:
/// integers wrap (as C's two's complement does) and divide truncating toward zero; floats
/// are computed in their compute type. `div` of an integer by zero yields 0 (callers check
/// for zero divisors first and report an error).
pub trait Num: Element + Copy + PartialOrd {
    const IS_FLOAT: bool;
    const SIGNED: bool;
    fn add(self, o: Self) -> Self;
    fn sub(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn div(self, o: Self) -> Self;
    fn num_zero() -> Self;
    fn num_one() -> Self;
    fn isnan(self) -> bool;
    fn as_f64(self) -> f64;
    fn of_f64(v: f64) -> Self;
    fn of_usize(v: usize) -> Self;
    /// The lowest value (-inf for floats).
    fn lowest() -> Self;
    /// The highest value (+inf for floats).
    fn highest() -> Self;
}

macro_rules! num_int {
    ($($t:ty: $signed:expr),*) => {$(
        impl Num for $t {
            const IS_FLOAT: bool = false;
            const SIGNED: bool = $signed;
            #[inline(always)] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)] fn sub(self, o: Self) -> Self { self.wrapping_sub(o) }
            #[inline(always)] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)] fn div(self, o: Self) -> Self {
                if o == 0 { 0 } else { self.wrapping_div(o) }
            }
            #[inline(always)] fn num_zero() -> Self { 0 }
            #[inline(always)] fn num_one() -> Self { 1 }
            #[inline(always)] fn isnan(self) -> bool { false }
            #[inline(always)] fn as_f64(self) -> f64 { self as f64 }
            #[inline(always)] fn of_f64(v: f64) -> Self { v as $t }
            #[inline(always)] fn of_usize(v: usize) -> Self { v as $t }
            fn lowest() -> Self { <$t>::MIN }
            fn highest() -> Self { <$t>::MAX }
        }
    )*};
}
num_int!(i8: true, i16: true, i32: true, i64: true, u8: false, u16: false, u32: false, u64: false);

macro_rules! num_float {
    ($($t:ty),*) => {$(
        impl Num for $t {
            const IS_FLOAT: bool = true;
            const SIGNED: bool = true;
            #[inline(always)] fn add(self, o: Self) -> Self { Self::down(self.up() + o.up()) }
            #[inline(always)] fn sub(self, o: Self) -> Self { Self::down(self.up() - o.up()) }
            #[inline(always)] fn mul(self, o: Self) -> Self { Self::down(self.up() * o.up()) }
            #[inline(always)] fn div(self, o: Self) -> Self { Self::down(self.up() / o.up()) }
            #[inline(always)] fn num_zero() -> Self { Self::down(<<Self as FloatElem>::C as num_traits::Zero>::zero()) }
            #[inline(always)] fn num_one() -> Self { Self::down(<<Self as FloatElem>::C as num_traits::One>::one()) }
            #[inline(always)] fn isnan(self) -> bool { self.up().is_nan() }
            #[inline(always)] fn as_f64(self) -> f64 { Real::to_f64(self.up()) }
            #[inline(always)] fn of_f64(v: f64) -> Self {
                Self::down(<<Self as FloatElem>::C as Real>::cst(v))
            }
            #[inline(always)] fn of_usize(v: usize) -> Self { Self::of_f64(v as f64) }
            fn lowest() -> Self { Self::down(<Self as FloatElem>::C::neg_infinity()) }
            fn highest() -> Self { Self::down(<Self as FloatElem>::C::infinity()) }
        }
    )*};
}
num_float!(f32, f64, f16, bf16);

/// Integer-only operations (bit ops, shifts, exact powers).
pub trait Int: Num + Eq + Ord {
    const BITS: u32;
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn not(self) -> Self;
    fn shl(self, n: Self) -> Self;
    fn shr(self, n: Self) -> Self;
    /// Remainder truncating toward zero (C `%`), 0 for a zero divisor.
    fn rem_trunc(self, o: Self) -> Self;
    fn abs_(self) -> Self;
    fn neg_(self) -> Self;
    fn signum_(self) -> Self;
    /// `self` raised to the integer power `e` (wrapping); negative `e` gives the truncated
    /// quotient 1 / self^|e|.
    fn pow_i(self, e: i64) -> Self;
    fn to_i64(self) -> i64;
}

macro_rules! int_ops {
    ($($t:ty),*) => {$(
        impl Int for $t {
            const BITS: u32 = <$t>::BITS;
            #[inline(always)] fn and(self, o: Self) -> Self { self & o }
            #[inline(always)] fn or(self, o: Self) -> Self { self | o }
            #[inline(always)] fn xor(self, o: Self) -> Self { self ^ o }
            #[inline(always)] fn not(self) -> Self { !self }
            #[inline(always)] fn shl(self, n: Self) -> Self {
                if (n as u64) >= Self::BITS as u64 { 0 } else { self << n }
            }
            #[inline(always)] fn shr(self, n: Self) -> Self {
                // Arithmetic for signed types; a shift past the width (or a negative one)
                // leaves only the sign fill.
                #[allow(unused_comparisons)]
                let fill = if self < 0 { (0 as $t).wrapping_sub(1) } else { 0 };
                if (n as u64) >= Self::BITS as u64 { fill } else { self >> n }
            }
            #[inline(always)] fn rem_trunc(self, o: Self) -> Self {
                if o == 0 { 0 } else { self.wrapping_rem(o) }
            }
            #[inline(always)] fn abs_(self) -> Self {
                #[allow(unused_comparisons)]
                if self < 0 { (0 as $t).wrapping_sub(self) } else { self }
            }
            #[inline(always)] fn neg_(self) -> Self { (0 as $t).wrapping_sub(self) }
            #[inline(always)] fn signum_(self) -> Self {
                #[allow(unused_comparisons)]
                if self > 0 { 1 } else if self < 0 { (0 as $t).wrapping_sub(1) } else { 0 }
            }
            fn pow_i(self, e: i64) -> Self {
                if e < 0 {
                    // Only |base| == 1 gives a non-zero integer result.
                    let one: $t = 1;
                    if self == one { return one; }
                    #[allow(unused_comparisons)]
                    if self < 0 && self.wrapping_add(one) == 0 {
                        return if e % 2 == 0 { one } else { self };
                    }
                    return 0;
                }
                let mut result: $t = 1;
                let mut base = self;
                let mut e = e as u64;
                while e > 0 {
                    if e & 1 == 1 { result = result.wrapping_mul(base); }
                    base = base.wrapping_mul(base);
                    e >>= 1;
                }
                result
            }
            #[inline(always)] fn to_i64(self) -> i64 { self as i64 }
        }
    )*};
}
int_ops!(i8, i16, i32, i64, u8, u16, u32, u64);
