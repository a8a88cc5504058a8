//! Encoding and decoding of the narrow types Cast handles: float8 (E4M3FN, E4M3FNUZ, E5M2,
//! E5M2FNUZ, E8M0), float4 E2M1, and the packed int4/uint4/int2/uint2 integers.

use onnx_runtime_ir::DataType;

/// A minifloat format with sign, `ebits` exponent and `mbits` mantissa bits.
#[derive(Clone, Copy, Debug)]
pub struct Minifloat {
    mbits: u32,
    bias: i32,
    /// The largest positive finite code.
    max_code: u8,
    /// Sign bit mask (0x80 for 8-bit, 0x8 for 4-bit).
    sign: u8,
    nan: Special,
}

/// How a format spells NaN and infinity.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Special {
    /// E4M3FN: no infinity; all-ones (sign either) is NaN.
    Fn,
    /// FNUZ: no infinity, no negative zero; 0x80 is NaN.
    Uz,
    /// E5M2: IEEE-like infinities and NaNs.
    Ieee,
    /// E2M1: neither.
    None,
}

impl Minifloat {
    pub fn of(dtype: DataType) -> Option<Minifloat> {
        use DataType::*;
        let (mbits, bias, max_code, sign, nan) = match dtype {
            Float8E4M3FN => (3, 7, 0x7e, 0x80, Special::Fn),
            Float8E4M3FNUZ => (3, 8, 0x7f, 0x80, Special::Uz),
            Float8E5M2 => (2, 15, 0x7b, 0x80, Special::Ieee),
            Float8E5M2FNUZ => (2, 16, 0x7f, 0x80, Special::Uz),
            Float4E2M1 => (1, 1, 0x7, 0x8, Special::None),
            _ => return None,
        };
        Some(Minifloat {
            mbits,
            bias,
            max_code,
            sign,
            nan,
        })
    }

    fn nan_code(&self, negative: bool) -> u8 {
        match self.nan {
            Special::Fn => 0x7f | if negative { 0x80 } else { 0 },
            Special::Uz => 0x80,
            Special::Ieee => 0x7e | if negative { 0x80 } else { 0 },
            // E2M1 has no NaN; the reference (ml_dtypes) gives negative zero.
            Special::None => self.sign,
        }
    }

    /// The code nearest `x` (ties to even). Out-of-range values saturate to the largest
    /// finite value when `saturate`, else become infinity or NaN as the format allows.
    pub fn encode(&self, x: f64, saturate: bool) -> u8 {
        let neg = x.is_sign_negative();
        let sign = if neg { self.sign } else { 0 };
        if x.is_nan() {
            return self.nan_code(neg);
        }
        let v = x.abs();
        let overflow = |sign: u8| -> u8 {
            if saturate || self.nan == Special::None {
                self.max_code | sign
            } else if self.nan == Special::Ieee {
                0x7c | sign
            } else {
                self.nan_code(sign != 0)
            }
        };
        if v.is_infinite() {
            return overflow(sign);
        }
        if v == 0.0 {
            return if self.nan == Special::Uz { 0 } else { sign };
        }
        let emin = 1 - self.bias;
        let e = (((v.to_bits() >> 52) & 0x7ff) as i32 - 1023).max(emin);
        let quantum = (2f64).powi(e - self.mbits as i32);
        let mut n = (v / quantum).round_ties_even() as u64;
        let mut e = e;
        let implicit = 1u64 << self.mbits;
        let code = if n < implicit {
            // Subnormal (the exponent stayed at emin without an implicit bit).
            n
        } else {
            if n >= 2 * implicit {
                n /= 2;
                e += 1;
            }
            let field = (e + self.bias) as u64;
            (field << self.mbits) | (n - implicit)
        };
        if code > self.max_code as u64 {
            return overflow(sign);
        }
        if code == 0 && self.nan == Special::Uz {
            return 0;
        }
        code as u8 | sign
    }

    pub fn decode(&self, c: u8) -> f32 {
        let neg = c & self.sign != 0;
        let mag = c & (self.sign - 1);
        match self.nan {
            Special::Fn if mag == 0x7f => return f32::NAN,
            Special::Uz if c == 0x80 => return f32::NAN,
            Special::Ieee if mag >= 0x7c => {
                return if mag == 0x7c {
                    if neg {
                        f32::NEG_INFINITY
                    } else {
                        f32::INFINITY
                    }
                } else {
                    f32::NAN
                };
            }
            _ => {}
        }
        let field = (mag >> self.mbits) as i32;
        let m = (mag & ((1 << self.mbits) - 1)) as f32;
        let scale = (1u32 << self.mbits) as f32;
        let v = if field == 0 {
            m / scale * (2f32).powi(1 - self.bias)
        } else {
            (1.0 + m / scale) * (2f32).powi(field - self.bias)
        };
        if neg {
            -v
        } else {
            v
        }
    }
}

/// E8M0 (an exponent only, bias 127, 0xff NaN): 2^(code - 127).
pub fn e8m0_decode(c: u8) -> f32 {
    if c == 0xff {
        f32::NAN
    } else {
        (2f32).powi(c as i32 - 127)
    }
}

/// How a value rounds to E8M0.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum E8m0Round {
    Up,
    Down,
    Nearest,
}

/// Encodes `x` as E8M0 from its float32 exponent, as the ONNX reference does: NaN and
/// infinity map to 0xff; `saturate` keeps rounding from stepping past the largest exponent.
pub fn e8m0_encode(x: f32, saturate: bool, round: E8m0Round) -> u8 {
    let bits = x.to_bits();
    let exponent = (bits >> 23) & 0xff;
    if exponent == 0xff {
        return 0xff;
    }
    let up = match round {
        E8m0Round::Down => false,
        E8m0Round::Up => bits & 0x7f_ffff != 0,
        E8m0Round::Nearest => {
            let g = bits & 0x40_0000 != 0;
            let r = bits & 0x20_0000 != 0;
            let s = bits & 0x1f_ffff != 0;
            g && (r || s || exponent > 0)
        }
    };
    let up = up && !(saturate && exponent == 0xfe);
    (exponent + up as u32) as u8
}

/// Bits per element of the packed integer types, and whether they are signed.
pub fn packed_int(dtype: DataType) -> Option<(u32, bool)> {
    match dtype {
        DataType::Int4 => Some((4, true)),
        DataType::Uint4 => Some((4, false)),
        DataType::Int2 => Some((2, true)),
        DataType::Uint2 => Some((2, false)),
        _ => None,
    }
}

/// Element `i` of a packed tensor of `bits`-wide codes (low bits first).
#[inline(always)]
pub fn packed_get(bytes: &[u8], bits: u32, i: usize) -> u8 {
    let per = 8 / bits as usize;
    let shift = (i % per) as u32 * bits;
    (bytes[i / per] >> shift) & ((1u8 << bits) - 1)
}

/// Sets element `i` of a packed tensor (its slot must still be zero).
#[inline(always)]
pub fn packed_set(bytes: &mut [u8], bits: u32, i: usize, code: u8) {
    let per = 8 / bits as usize;
    let shift = (i % per) as u32 * bits;
    bytes[i / per] |= (code & ((1u8 << bits) - 1)) << shift;
}

/// A packed code widened to i64 (sign-extended for signed types).
#[inline(always)]
pub fn packed_value(code: u8, bits: u32, signed: bool) -> i64 {
    if signed && code & (1 << (bits - 1)) != 0 {
        code as i64 - (1i64 << bits)
    } else {
        code as i64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float8_round_trips_every_code() {
        for d in [
            DataType::Float8E4M3FN,
            DataType::Float8E4M3FNUZ,
            DataType::Float8E5M2,
            DataType::Float8E5M2FNUZ,
        ] {
            let f = Minifloat::of(d).unwrap();
            for c in 0..=255u8 {
                let v = f.decode(c);
                if v.is_nan() || v.is_infinite() {
                    continue;
                }
                assert_eq!(f.encode(v as f64, false), c, "{d} code {c:#x} value {v}");
            }
        }
    }

    /// Values from ml_dtypes (the ONNX reference's float8 types), saturate=false.
    #[test]
    fn float8_rounding_matches_ml_dtypes() {
        let xs = [
            448.0,
            464.0,
            465.0,
            480.0,
            500.0,
            1e9,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ];
        let want: [(DataType, [u8; 8]); 4] = [
            (
                DataType::Float8E4M3FN,
                [126, 126, 127, 127, 127, 127, 127, 255],
            ),
            (DataType::Float8E4M3FNUZ, [128; 8]),
            (DataType::Float8E5M2, [95, 95, 95, 96, 96, 124, 124, 252]),
            (
                DataType::Float8E5M2FNUZ,
                [99, 99, 99, 100, 100, 128, 128, 128],
            ),
        ];
        for (d, codes) in want {
            let f = Minifloat::of(d).unwrap();
            for (x, c) in xs.iter().zip(codes) {
                assert_eq!(f.encode(*x, false), c, "{d} {x}");
            }
        }
        let f = Minifloat::of(DataType::Float8E4M3FNUZ).unwrap();
        assert_eq!(f.encode(0.0009765625, false), 1);
        assert_eq!(f.encode(0.00048828125, false), 0);
    }

    #[test]
    fn float4_matches_ml_dtypes() {
        let f = Minifloat::of(DataType::Float4E2M1).unwrap();
        let xs = [
            0.1, 0.25, 0.3, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 5.5, 6.0, 6.9, 7.0, 100.0, -0.0, -7.0,
        ];
        let want = [
            0.0, 0.0, 0.5, 1.0, 1.0, 2.0, 2.0, 4.0, 4.0, 6.0, 6.0, 6.0, 6.0, 6.0, -0.0, -6.0,
        ];
        for (x, w) in xs.iter().zip(want) {
            assert_eq!(f.decode(f.encode(*x, true)), w, "{x}");
        }
    }
}
