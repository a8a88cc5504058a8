//! Element codecs for quantized types: 8/16/32-bit integers, packed int4/uint4/int2/uint2,
//! the float8 family (e4m3fn, e4m3fnuz, e5m2, e5m2fnuz), float4e2m1 and float8e8m0 scales.
//! Values travel as f64; integer targets round half to even and saturate.

use crate::Tensor;
use onnx_runtime_ir::DataType;
use std::sync::OnceLock;

/// The minifloat layout of a float8/float4 type.
#[derive(Clone, Copy)]
struct Mini {
    exp_bits: u32,
    man_bits: u32,
    bias: i32,
    /// IEEE-style inf/NaN in the top exponent (e5m2).
    ieee: bool,
    /// fnuz: 0x80 is the only NaN, no negative zero.
    fnuz: bool,
    /// e4m3fn: only S.1111.111 is NaN.
    fn_nan: bool,
}

fn mini(dtype: DataType) -> Option<Mini> {
    use DataType::*;
    let m = |exp_bits, man_bits, bias, ieee, fnuz, fn_nan| Mini {
        exp_bits,
        man_bits,
        bias,
        ieee,
        fnuz,
        fn_nan,
    };
    Some(match dtype {
        Float8E4M3FN => m(4, 3, 7, false, false, true),
        Float8E4M3FNUZ => m(4, 3, 8, false, true, false),
        Float8E5M2 => m(5, 2, 15, true, false, false),
        Float8E5M2FNUZ => m(5, 2, 16, false, true, false),
        Float4E2M1 => m(2, 1, 1, false, false, false),
        _ => return None,
    })
}

fn decode_mini(m: Mini, code: u32) -> f64 {
    let bits = 1 + m.exp_bits + m.man_bits;
    let sign = code >> (bits - 1) & 1;
    let e = (code >> m.man_bits) & ((1 << m.exp_bits) - 1);
    let f = code & ((1 << m.man_bits) - 1);
    let emax = (1 << m.exp_bits) - 1;
    if m.fnuz && code == 1 << (bits - 1) {
        return f64::NAN;
    }
    if m.ieee && e == emax {
        return if f == 0 {
            if sign == 1 {
                f64::NEG_INFINITY
            } else {
                f64::INFINITY
            }
        } else {
            f64::NAN
        };
    }
    if m.fn_nan && e == emax && f == (1 << m.man_bits) - 1 {
        return f64::NAN;
    }
    let mag = if e == 0 {
        f as f64 / (1 << m.man_bits) as f64 * 2f64.powi(1 - m.bias)
    } else {
        (1.0 + f as f64 / (1 << m.man_bits) as f64) * 2f64.powi(e as i32 - m.bias)
    };
    if sign == 1 {
        -mag
    } else {
        mag
    }
}

/// Every code's value, and the non-negative finite values sorted with their codes.
struct Table {
    values: Vec<f64>,
    positive: Vec<(f64, u32)>,
}

fn table(dtype: DataType) -> Option<&'static Table> {
    static TABLES: OnceLock<Vec<(DataType, Table)>> = OnceLock::new();
    let all = TABLES.get_or_init(|| {
        use DataType::*;
        [
            Float8E4M3FN,
            Float8E4M3FNUZ,
            Float8E5M2,
            Float8E5M2FNUZ,
            Float4E2M1,
        ]
        .into_iter()
        .map(|d| {
            let m = mini(d).expect("minifloat type");
            let n = 1u32 << (1 + m.exp_bits + m.man_bits);
            let values: Vec<f64> = (0..n).map(|c| decode_mini(m, c)).collect();
            let mut positive: Vec<(f64, u32)> = (0..n / 2)
                .filter(|&c| values[c as usize].is_finite())
                .map(|c| (values[c as usize], c))
                .collect();
            positive.sort_by(|a, b| a.0.total_cmp(&b.0));
            (d, Table { values, positive })
        })
        .collect()
    });
    all.iter().find(|(d, _)| *d == dtype).map(|(_, t)| t)
}

fn encode_mini(dtype: DataType, x: f64, saturate: bool) -> u32 {
    let m = mini(dtype).expect("minifloat type");
    let t = table(dtype).expect("minifloat table");
    let bits = 1 + m.exp_bits + m.man_bits;
    let sign_bit = 1u32 << (bits - 1);
    let nan_code = if m.fnuz { sign_bit } else { (1 << bits) - 1 };
    if x.is_nan() {
        return if dtype == DataType::Float4E2M1 {
            0
        } else {
            nan_code
        };
    }
    let neg = x < 0.0;
    let a = x.abs();
    let (max, max_code) = *t.positive.last().expect("finite values");
    let code = if a > max {
        if saturate || dtype == DataType::Float4E2M1 {
            max_code
        } else if m.ieee {
            (((1 << m.exp_bits) - 1) << m.man_bits) as u32
        } else {
            return nan_code;
        }
    } else {
        let i = t.positive.partition_point(|p| p.0 < a);
        if i == 0 {
            t.positive[0].1
        } else if i == t.positive.len() {
            max_code
        } else {
            let (lo, hi) = (t.positive[i - 1], t.positive[i]);
            if a - lo.0 < hi.0 - a {
                lo.1
            } else if a - lo.0 > hi.0 - a {
                hi.1
            } else if lo.1 & 1 == 0 {
                lo.1
            } else {
                hi.1
            }
        }
    };
    if neg && !(m.fnuz && code == 0) {
        code | sign_bit
    } else {
        code
    }
}

/// The integer range of an integer quantized type.
pub fn int_range(dtype: DataType) -> Option<(f64, f64)> {
    use DataType::*;
    Some(match dtype {
        Int8 => (-128.0, 127.0),
        Uint8 => (0.0, 255.0),
        Int16 => (-32768.0, 32767.0),
        Uint16 => (0.0, 65535.0),
        Int32 => (i32::MIN as f64, i32::MAX as f64),
        Int4 => (-8.0, 7.0),
        Uint4 => (0.0, 15.0),
        Int2 => (-2.0, 1.0),
        Uint2 => (0.0, 3.0),
        _ => return None,
    })
}

/// Whether `dtype` is a type this module encodes and decodes.
pub fn is_quant_type(dtype: DataType) -> bool {
    int_range(dtype).is_some() || mini(dtype).is_some() || dtype == DataType::Float8E8M0
}

/// The elements of a quantized-type tensor as f64 (`None` for other types).
pub fn decode(t: &Tensor) -> Option<Vec<f64>> {
    use DataType::*;
    let n = t.numel();
    let b = t.bytes();
    Some(match t.dtype() {
        Int4 | Uint4 => (0..n)
            .map(|i| {
                let nib = (b[i / 2] >> (4 * (i % 2))) & 0xF;
                if t.dtype() == Int4 {
                    ((nib << 4) as i8 >> 4) as f64
                } else {
                    nib as f64
                }
            })
            .collect(),
        Int2 | Uint2 => (0..n)
            .map(|i| {
                let v = (b[i / 4] >> (2 * (i % 4))) & 0x3;
                if t.dtype() == Int2 {
                    ((v << 6) as i8 >> 6) as f64
                } else {
                    v as f64
                }
            })
            .collect(),
        Float4E2M1 => {
            let tb = table(Float4E2M1)?;
            (0..n)
                .map(|i| tb.values[((b[i / 2] >> (4 * (i % 2))) & 0xF) as usize])
                .collect()
        }
        Float8E8M0 => b
            .iter()
            .map(|&c| {
                if c == 0xFF {
                    f64::NAN
                } else {
                    2f64.powi(c as i32 - 127)
                }
            })
            .collect(),
        d if mini(d).is_some() => {
            let tb = table(d)?;
            b.iter().map(|&c| tb.values[c as usize]).collect()
        }
        _ => t.to_f64_vec()?,
    })
}

/// A tensor of quantized type `dtype` from values: integers round half to even and saturate;
/// minifloats round to nearest even (saturating when `saturate`).
pub fn encode(dtype: DataType, shape: Vec<usize>, v: &[f64], saturate: bool) -> Tensor {
    use DataType::*;
    if let Some((lo, hi)) = int_range(dtype) {
        let q: Vec<i64> = v
            .iter()
            .map(|&x| {
                if x.is_nan() {
                    0
                } else {
                    x.round_ties_even().clamp(lo, hi) as i64
                }
            })
            .collect();
        return match dtype {
            Int8 => Tensor::from_vec(shape, q.iter().map(|&x| x as i8).collect()),
            Uint8 => Tensor::from_vec(shape, q.iter().map(|&x| x as u8).collect()),
            Int16 => Tensor::from_vec(shape, q.iter().map(|&x| x as i16).collect()),
            Uint16 => Tensor::from_vec(shape, q.iter().map(|&x| x as u16).collect()),
            Int32 => Tensor::from_vec(shape, q.iter().map(|&x| x as i32).collect()),
            Int4 | Uint4 => {
                let mut bytes = vec![0u8; v.len().div_ceil(2)];
                for (i, &x) in q.iter().enumerate() {
                    bytes[i / 2] |= ((x as u8) & 0xF) << (4 * (i % 2));
                }
                Tensor::from_bytes(dtype, shape, &bytes).expect("packed length")
            }
            _ => {
                let mut bytes = vec![0u8; v.len().div_ceil(4)];
                for (i, &x) in q.iter().enumerate() {
                    bytes[i / 4] |= ((x as u8) & 0x3) << (2 * (i % 4));
                }
                Tensor::from_bytes(dtype, shape, &bytes).expect("packed length")
            }
        };
    }
    if dtype == Float4E2M1 {
        let mut bytes = vec![0u8; v.len().div_ceil(2)];
        for (i, &x) in v.iter().enumerate() {
            bytes[i / 2] |= (encode_mini(dtype, x, saturate) as u8) << (4 * (i % 2));
        }
        return Tensor::from_bytes(dtype, shape, &bytes).expect("packed length");
    }
    let bytes: Vec<u8> = v
        .iter()
        .map(|&x| encode_mini(dtype, x, saturate) as u8)
        .collect();
    Tensor::from_bytes(dtype, shape, &bytes).expect("one byte per element")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn float8_round_trip_and_limits() {
        for (d, max) in [
            (DataType::Float8E4M3FN, 448.0),
            (DataType::Float8E4M3FNUZ, 240.0),
            (DataType::Float8E5M2, 57344.0),
            (DataType::Float8E5M2FNUZ, 57344.0),
            (DataType::Float4E2M1, 6.0),
        ] {
            let t = encode(d, vec![4], &[1e9, -1e9, 0.5, -1.5], true);
            let v = decode(&t).unwrap();
            assert_eq!(v, vec![max, -max, 0.5, -1.5], "{d:?}");
        }
        // Ties go to the even code: 1.0625 lies between 1.0 and 1.125 in e4m3fn.
        let t = encode(DataType::Float8E4M3FN, vec![1], &[1.0625], true);
        assert_eq!(decode(&t).unwrap(), vec![1.0]);
        let t = encode(DataType::Int4, vec![3], &[-9.0, 2.5, 7.6], true);
        assert_eq!(decode(&t).unwrap(), vec![-8.0, 2.0, 7.0]);
    }
}
