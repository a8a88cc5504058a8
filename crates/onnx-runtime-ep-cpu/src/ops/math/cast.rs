//! Cast and CastLike between every numeric type, bool, strings, float8 (E4M3FN, E4M3FNUZ,
//! E5M2, E5M2FNUZ, E8M0 with `saturate` and `round_mode`), float4 E2M1 and the packed
//! int4/uint4/int2/uint2 types.

use super::common::{register_versions, NodeInfo};
use super::elementwise::unary_as;
use super::small_float::{
    e8m0_decode, e8m0_encode, packed_get, packed_int, packed_set, packed_value, E8m0Round,
    Minifloat,
};
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Element, Tensor, Value};
use bytemuck::{Pod, Zeroable};
use half::{bf16, f16};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

/// Bool elements as their own type, so casts can tell them from uint8.
#[derive(Clone, Copy, Debug, Default, PartialEq, Pod, Zeroable)]
#[repr(transparent)]
struct B8(u8);

impl Element for B8 {
    const DTYPE: DataType = DataType::Bool;
}

/// A natively stored element type and its conversions, with numpy's `astype` semantics:
/// floats truncate toward zero into integers, integers wrap into narrower ones.
///
/// Floats out of an integer type's range: the Cast spec (opsets 1 to 25) says "Casting from
/// floating point to ... fixed point: undefined if OOR (out of range)". The kernel truncates
/// toward zero and keeps the low bits (wraps), for the packed int4/uint4/int2/uint2 types
/// too, as onnxruntime does; the expected data of the ONNX backend cases that cast
/// out-of-range floats to those types follow whichever ml_dtypes made them (0.5 wraps, 0.7
/// gives 0), so tests/backend keeps them off the pass lists.
trait Prim: Element {
    const INT: bool;
    const SIGNED: bool;
    fn to_f64(self) -> f64;
    /// Integers: the value's two's complement bits; floats: truncated toward zero.
    fn to_bits64(self) -> i64;
    fn from_f64(v: f64) -> Self;
    fn from_bits64(v: i64, signed: bool) -> Self;
}

/// A float truncated toward zero as integer bits (NaN and infinities give 0).
#[inline(always)]
fn trunc_bits(v: f64) -> i64 {
    if !v.is_finite() {
        0
    } else if v >= (1u64 << 63) as f64 {
        v as u64 as i64
    } else {
        v as i64
    }
}

macro_rules! prim_int {
    ($($t:ty: $signed:expr),*) => {$(
        impl Prim for $t {
            const INT: bool = true;
            const SIGNED: bool = $signed;
            #[inline(always)] fn to_f64(self) -> f64 { self as f64 }
            #[inline(always)] fn to_bits64(self) -> i64 { self as i64 }
            #[inline(always)] fn from_f64(v: f64) -> Self { trunc_bits(v) as $t }
            #[inline(always)] fn from_bits64(v: i64, _: bool) -> Self { v as $t }
        }
    )*};
}
prim_int!(i8: true, i16: true, i32: true, i64: true, u8: false, u16: false, u32: false, u64: false);

macro_rules! prim_float {
    ($($t:ty: |$v:ident| $to:expr, |$w:ident| $from:expr;)*) => {$(
        impl Prim for $t {
            const INT: bool = false;
            const SIGNED: bool = true;
            #[inline(always)] fn to_f64(self) -> f64 { let $v = self; $to }
            #[inline(always)] fn to_bits64(self) -> i64 { trunc_bits(self.to_f64()) }
            #[inline(always)] fn from_f64($w: f64) -> Self { $from }
            #[inline(always)] fn from_bits64(v: i64, signed: bool) -> Self {
                Self::from_f64(if signed { v as f64 } else { v as u64 as f64 })
            }
        }
    )*};
}
prim_float! {
    f32: |v| v as f64, |w| w as f32;
    f64: |v| v, |w| w;
    f16: |v| v.to_f64(), |w| f16::from_f64(w);
    bf16: |v| v.to_f64(), |w| bf16::from_f64(w);
}

impl Prim for B8 {
    const INT: bool = true;
    const SIGNED: bool = false;
    fn to_f64(self) -> f64 {
        (self.0 != 0) as u8 as f64
    }
    fn to_bits64(self) -> i64 {
        (self.0 != 0) as i64
    }
    fn from_f64(v: f64) -> Self {
        B8((v != 0.0) as u8)
    }
    fn from_bits64(v: i64, _: bool) -> Self {
        B8((v != 0) as u8)
    }
}

#[inline(always)]
fn convert<S: Prim, D: Prim>(v: S) -> D {
    if D::DTYPE == DataType::Bool {
        return if S::INT {
            D::from_bits64(v.to_bits64(), S::SIGNED)
        } else {
            D::from_f64(v.to_f64())
        };
    }
    if S::INT {
        D::from_bits64(v.to_bits64(), S::SIGNED)
    } else if D::INT {
        D::from_bits64(v.to_bits64(), true)
    } else {
        D::from_f64(v.to_f64())
    }
}

/// Dispatches on a natively stored type (numeric or bool).
macro_rules! dispatch_prim {
    ($dtype:expr, $T:ident => $body:expr, $other:pat => $fallback:expr) => {{
        match $dtype {
            DataType::Bool => {
                type $T = B8;
                $body
            }
            d => $crate::dispatch_numeric!(d, $T => $body, $other => $fallback),
        }
    }};
}

/// Converts between natively stored types (numeric and bool); `None` for others.
pub fn native_to_native(x: &Tensor, to: DataType) -> Option<Tensor> {
    dispatch_prim!(x.dtype(), S => dispatch_prim!(to, D => Some(unary_as::<S, D>(x, to, convert::<S, D>)), _ => None), _ => None)
}

/// Elements of a native tensor as f64.
fn to_f64s(x: &Tensor) -> Option<Vec<f64>> {
    dispatch_prim!(x.dtype(), S => Some(x.data::<S>().iter().map(|v| v.to_f64()).collect()), _ => None)
}

/// Elements of a native tensor as integer bits (floats truncated).
fn to_bits(x: &Tensor) -> Option<Vec<i64>> {
    dispatch_prim!(x.dtype(), S => Some(x.data::<S>().iter().map(|v| v.to_bits64()).collect()), _ => None)
}

/// Formats a float as numpy's `str()` does: shortest round-trip digits, positional for
/// 1e-4 <= |v| < 1e16, else scientific with a signed two-digit exponent.
fn format_float(v: f64, single: bool) -> String {
    if v.is_nan() {
        return "nan".into();
    }
    if v.is_infinite() {
        return if v > 0.0 { "inf" } else { "-inf" }.into();
    }
    let a = v.abs();
    if a == 0.0 || (1e-4..1e16).contains(&a) {
        let s = if single {
            format!("{}", v as f32)
        } else {
            format!("{v}")
        };
        return if s.contains('.') { s } else { s + ".0" };
    }
    let s = if single {
        format!("{:e}", v as f32)
    } else {
        format!("{v:e}")
    };
    let (m, e) = s.split_once('e').unwrap_or((&s, "0"));
    let e: i32 = e.parse().unwrap_or(0);
    format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
}

fn to_strings(x: &Tensor) -> Option<Vec<String>> {
    Some(match x.dtype() {
        DataType::Bool => x
            .data::<u8>()
            .iter()
            .map(|&b| if b != 0 { "True" } else { "False" }.to_string())
            .collect(),
        DataType::Float32 | DataType::Float16 | DataType::BFloat16 => to_f64s(x)?
            .into_iter()
            .map(|v| format_float(v, true))
            .collect(),
        DataType::Float64 => to_f64s(x)?
            .into_iter()
            .map(|v| format_float(v, false))
            .collect(),
        d if d.is_unsigned_int() => to_bits(x)?
            .into_iter()
            .map(|v| (v as u64).to_string())
            .collect(),
        _ => to_bits(x)?.into_iter().map(|v| v.to_string()).collect(),
    })
}

fn parse_f64(s: &str) -> Option<f64> {
    let t = s.trim();
    match t.to_ascii_lowercase().as_str() {
        "inf" | "+inf" | "infinity" | "+infinity" => Some(f64::INFINITY),
        "-inf" | "-infinity" => Some(f64::NEG_INFINITY),
        "nan" | "+nan" | "-nan" => Some(f64::NAN),
        _ => t.parse::<f64>().ok(),
    }
}

struct Cast {
    info: NodeInfo,
    saturate: bool,
    round: E8m0Round,
}

impl Cast {
    /// Converts a non-native input (strings, float8/4, packed ints) to a native tensor.
    fn widen(&self, x: &Tensor, to: DataType) -> Result<Tensor, EpError> {
        let d = x.dtype();
        let shape = x.shape().to_vec();
        if d == DataType::String {
            let bad = |s: &str| {
                self.info
                    .invalid(format!("cannot parse string '{s}' as a number"))
            };
            if to.is_integer() {
                let mut v = Vec::with_capacity(x.numel());
                for s in x.strings() {
                    let n = match s.trim().parse::<i64>() {
                        Ok(n) => n,
                        Err(_) => trunc_bits(parse_f64(s).ok_or_else(|| bad(s))?),
                    };
                    v.push(n);
                }
                return Ok(Tensor::from_vec(shape, v));
            }
            let mut v = Vec::with_capacity(x.numel());
            for s in x.strings() {
                v.push(parse_f64(s).ok_or_else(|| bad(s))?);
            }
            return Ok(Tensor::from_vec(shape, v));
        }
        if let Some(f) = Minifloat::of(d) {
            if d == DataType::Float4E2M1 {
                let b = x.bytes();
                let v: Vec<f32> = (0..x.numel())
                    .map(|i| f.decode(packed_get(b, 4, i)))
                    .collect();
                return Ok(Tensor::from_vec(shape, v));
            }
            return Ok(unary_as::<u8, f32>(x, DataType::Float32, |c| f.decode(c)));
        }
        if d == DataType::Float8E8M0 {
            return Ok(unary_as::<u8, f32>(x, DataType::Float32, e8m0_decode));
        }
        if let Some((bits, signed)) = packed_int(d) {
            let b = x.bytes();
            let v: Vec<i64> = (0..x.numel())
                .map(|i| packed_value(packed_get(b, bits, i), bits, signed))
                .collect();
            return Ok(Tensor::from_vec(shape, v));
        }
        Err(self.info.bad_dtype(d, "Cast does not convert this type"))
    }

    fn run(&self, x: &Tensor, to: DataType) -> Result<Tensor, EpError> {
        if x.dtype() == to {
            return Ok(x.clone());
        }
        let native = |d: DataType| {
            d == DataType::Bool
                || (d.element_size().is_some() && !d.is_complex() && !d.is_float())
                || matches!(
                    d,
                    DataType::Float32 | DataType::Float64 | DataType::Float16 | DataType::BFloat16
                )
        };
        let widened;
        let x = if native(x.dtype()) {
            x
        } else {
            widened = self.widen(x, to)?;
            &widened
        };
        if x.dtype() == to {
            return Ok(x.clone());
        }
        let shape = x.shape().to_vec();
        let bad = || self.info.bad_dtype(to, "Cast cannot produce this type");
        if native(to) {
            return native_to_native(x, to).ok_or_else(bad);
        }
        if to == DataType::String {
            return Ok(Tensor::from_strings(shape, to_strings(x).ok_or_else(bad)?));
        }
        if let Some(f) = Minifloat::of(to) {
            let v = to_f64s(x).ok_or_else(bad)?;
            let codes: Vec<u8> = v.iter().map(|&e| f.encode(e, self.saturate)).collect();
            if to == DataType::Float4E2M1 {
                return Ok(pack(to, shape, 4, &codes));
            }
            return Tensor::from_bytes(to, shape, &codes).map_err(|e| self.info.invalid(e));
        }
        if to == DataType::Float8E8M0 {
            let v = to_f64s(x).ok_or_else(bad)?;
            let codes: Vec<u8> = v
                .iter()
                .map(|&e| e8m0_encode(e as f32, self.saturate, self.round))
                .collect();
            return Tensor::from_bytes(to, shape, &codes).map_err(|e| self.info.invalid(e));
        }
        if let Some((bits, _)) = packed_int(to) {
            let v = to_bits(x).ok_or_else(bad)?;
            let codes: Vec<u8> = v.iter().map(|&e| e as u8).collect();
            return Ok(pack(to, shape, bits, &codes));
        }
        Err(bad())
    }
}

fn pack(dtype: DataType, shape: Vec<usize>, bits: u32, codes: &[u8]) -> Tensor {
    let mut t = Tensor::zeros(dtype, shape);
    let b = t.bytes_mut();
    for (i, &c) in codes.iter().enumerate() {
        packed_set(b, bits, i, c);
    }
    t
}

fn parse(ctx: &BuildContext<'_>) -> Result<Cast, EpError> {
    let round = match attrs::string(ctx.node, "round_mode", "up")?.as_str() {
        "up" => E8m0Round::Up,
        "down" => E8m0Round::Down,
        "nearest" => E8m0Round::Nearest,
        other => {
            return Err(EpError::invalid_attribute(
                ctx.node,
                "round_mode",
                format!("must be 'up', 'down' or 'nearest', got '{other}'"),
            ))
        }
    };
    Ok(Cast {
        info: NodeInfo::new(ctx.node),
        saturate: attrs::int(ctx.node, "saturate", 1)? != 0,
        round,
    })
}

fn build_cast(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let c = parse(ctx)?;
    let code = match attrs::opt_int(ctx.node, "to")? {
        Some(code) => code,
        None => match attrs::opt_string(ctx.node, "to")? {
            // Opset 1 spelled the type as a string.
            Some(name) => DataType::ALL
                .iter()
                .find(|d| d.name().eq_ignore_ascii_case(&name))
                .map(|d| d.onnx_code() as i64)
                .unwrap_or(-1),
            None => return Err(EpError::invalid_attribute(ctx.node, "to", "is required")),
        },
    };
    let to = DataType::from_onnx(code as i32)
        .filter(|d| *d != DataType::Undefined)
        .ok_or_else(|| {
            EpError::invalid_attribute(ctx.node, "to", format!("{code} is not an ONNX type"))
        })?;
    Ok(kernel_fn(move |inputs| {
        let x = c.info.input(inputs, 0)?;
        Ok(vec![Value::Tensor(c.run(x, to)?)])
    }))
}

fn build_cast_like(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let c = parse(ctx)?;
    Ok(kernel_fn(move |inputs| {
        let x = c.info.input(inputs, 0)?;
        let like = c.info.input(inputs, 1)?;
        Ok(vec![Value::Tensor(c.run(x, like.dtype())?)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    register_versions(
        r,
        "",
        "Cast",
        &[1, 6, 9, 13, 19, 21, 23, 24, 25],
        build_cast,
    );
    register_versions(
        r,
        "",
        "CastLike",
        &[15, 19, 21, 23, 24, 25],
        build_cast_like,
    );
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py cast).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("Cast", 13, vec![("to", int(10))], &[f32s(&[7], &[0.5, -1.5, 2.5, -164.8756866455078, -119.90023040771484, 224.13206481933594, -296.8408203125])], DataType::Float16, &[7], &[0.5, -1.5, 2.5, -164.875, -119.875, 224.125, -296.75], 1e-05);
        check("Cast", 13, vec![("to", int(11))], &[f32s(&[7], &[0.5, -1.5, 2.5, -164.8756866455078, -119.90023040771484, 224.13206481933594, -296.8408203125])], DataType::Float64, &[7], &[0.5, -1.5, 2.5, -164.8756866455078, -119.90023040771484, 224.13206481933594, -296.8408203125], 1e-05);
        check("Cast", 13, vec![("to", int(6))], &[f32s(&[7], &[0.5, -1.5, 2.5, -164.8756866455078, -119.90023040771484, 224.13206481933594, -296.8408203125])], DataType::Int32, &[7], &[0.0, -1.0, 2.0, -164.0, -119.0, 224.0, -296.0], 1e-05);
        check("Cast", 13, vec![("to", int(3))], &[f32s(&[7], &[0.5, -1.5, 2.5, -164.8756866455078, -119.90023040771484, 224.13206481933594, -296.8408203125])], DataType::Int8, &[7], &[0.0, -1.0, 2.0, 92.0, -119.0, -32.0, -40.0], 1e-05);
        check("Cast", 13, vec![("to", int(2))], &[f32s(&[7], &[0.5, -1.5, 2.5, -164.8756866455078, -119.90023040771484, 224.13206481933594, -296.8408203125])], DataType::Uint8, &[7], &[0.0, 255.0, 2.0, 92.0, 137.0, 224.0, 216.0], 1e-05);
        check("Cast", 13, vec![("to", int(9))], &[f32s(&[7], &[0.5, -1.5, 2.5, -164.8756866455078, -119.90023040771484, 224.13206481933594, -296.8408203125])], DataType::Bool, &[7], &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 1e-05);
        check("Cast", 13, vec![("to", int(7))], &[f32s(&[7], &[0.5, -1.5, 2.5, -164.8756866455078, -119.90023040771484, 224.13206481933594, -296.8408203125])], DataType::Int64, &[7], &[0.0, -1.0, 2.0, -164.0, -119.0, 224.0, -296.0], 1e-05);
        check("Cast", 13, vec![("to", int(3))], &[i64s(&[6], &[-1, 642, -738, 594, -762, -65])], DataType::Int8, &[6], &[-1.0, -126.0, 30.0, 82.0, 6.0, -65.0], 1e-05);
        check("Cast", 13, vec![("to", int(4))], &[i64s(&[6], &[632, -394, -317, -444, 438, -491])], DataType::Uint16, &[6], &[632.0, 65142.0, 65219.0, 65092.0, 438.0, 65045.0], 1e-05);
        check("Cast", 13, vec![("to", int(1))], &[i64s(&[6], &[980, -110, -44, 9, 165, 106])], DataType::Float32, &[6], &[980.0, -110.0, -44.0, 9.0, 165.0, 106.0], 1e-05);
        check("Cast", 13, vec![("to", int(1))], &[bools(&[2], &[1, 0])], DataType::Float32, &[2], &[1.0, 0.0], 1e-05);
        check("Cast", 13, vec![("to", int(1))], &[f16s(&[5], &[2.97265625, 1.755859375, 0.73291015625, 2.93359375, -1.7080078125])], DataType::Float32, &[5], &[2.97265625, 1.755859375, 0.73291015625, 2.93359375, -1.7080078125], 1e-05);
        check("Cast", 13, vec![("to", int(10))], &[f64s(&[5], &[-2.0387277968529327, 0.6752376256381849, -2.7363479522317, -2.785918327358423, 0.08933292162822148])], DataType::Float16, &[5], &[-2.0390625, 0.67529296875, -2.736328125, -2.78515625, 0.08935546875], 1e-05);
        check_bytes("Cast", 19, vec![("to", int(17))], &[f32s(&[26], &[-33.793975830078125, 417.16778564453125, 129.22625732421875, 14.117646217346191, -3.1265645027160645, -252.48507690429688, -488.2059631347656, -307.5978698730469, 192.03211975097656, -299.3932800292969, -130.46368408203125, -496.2657470703125, 0.006600954569876194, -0.0069107785820961, -0.004648013971745968, 0.0076066432520747185, 0.00019581620290409774, 0.006943005137145519, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1000000000.0, 61440.0, 464.0])], &[224, 125, 112, 86, 197, 248, 254, 250, 116, 249, 240, 254, 3, 132, 130, 4, 0, 4, 0, 128, 126, 254, 127, 126, 126, 126]);
        check_bytes("Cast", 19, vec![("to", int(17)), ("saturate", int(0))], &[f32s(&[26], &[-33.793975830078125, 417.16778564453125, 129.22625732421875, 14.117646217346191, -3.1265645027160645, -252.48507690429688, -488.2059631347656, -307.5978698730469, 192.03211975097656, -299.3932800292969, -130.46368408203125, -496.2657470703125, 0.006600954569876194, -0.0069107785820961, -0.004648013971745968, 0.0076066432520747185, 0.00019581620290409774, 0.006943005137145519, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1000000000.0, 61440.0, 464.0])], &[224, 125, 112, 86, 197, 248, 255, 250, 116, 249, 240, 255, 3, 132, 130, 4, 0, 4, 0, 128, 127, 255, 127, 127, 127, 126]);
        check_bytes("Cast", 19, vec![("to", int(18))], &[f32s(&[26], &[-33.793975830078125, 417.16778564453125, 129.22625732421875, 14.117646217346191, -3.1265645027160645, -252.48507690429688, -488.2059631347656, -307.5978698730469, 192.03211975097656, -299.3932800292969, -130.46368408203125, -496.2657470703125, 0.006600954569876194, -0.0069107785820961, -0.004648013971745968, 0.0076066432520747185, 0.00019581620290409774, 0.006943005137145519, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1000000000.0, 61440.0, 464.0])], &[232, 127, 120, 94, 205, 255, 255, 255, 124, 255, 248, 255, 7, 135, 133, 8, 0, 7, 0, 0, 127, 255, 128, 127, 127, 127]);
        check_bytes("Cast", 19, vec![("to", int(18)), ("saturate", int(0))], &[f32s(&[26], &[-33.793975830078125, 417.16778564453125, 129.22625732421875, 14.117646217346191, -3.1265645027160645, -252.48507690429688, -488.2059631347656, -307.5978698730469, 192.03211975097656, -299.3932800292969, -130.46368408203125, -496.2657470703125, 0.006600954569876194, -0.0069107785820961, -0.004648013971745968, 0.0076066432520747185, 0.00019581620290409774, 0.006943005137145519, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1000000000.0, 61440.0, 464.0])], &[232, 128, 120, 94, 205, 128, 128, 128, 124, 128, 248, 128, 7, 135, 133, 8, 0, 7, 0, 0, 128, 128, 128, 128, 128, 128]);
        check_bytes("Cast", 19, vec![("to", int(19))], &[f32s(&[26], &[-33.793975830078125, 417.16778564453125, 129.22625732421875, 14.117646217346191, -3.1265645027160645, -252.48507690429688, -488.2059631347656, -307.5978698730469, 192.03211975097656, -299.3932800292969, -130.46368408203125, -496.2657470703125, 0.006600954569876194, -0.0069107785820961, -0.004648013971745968, 0.0076066432520747185, 0.00019581620290409774, 0.006943005137145519, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1000000000.0, 61440.0, 464.0])], &[208, 95, 88, 75, 194, 220, 224, 221, 90, 221, 216, 224, 31, 159, 157, 32, 10, 31, 0, 128, 123, 251, 126, 123, 123, 95]);
        check_bytes("Cast", 19, vec![("to", int(19)), ("saturate", int(0))], &[f32s(&[26], &[-33.793975830078125, 417.16778564453125, 129.22625732421875, 14.117646217346191, -3.1265645027160645, -252.48507690429688, -488.2059631347656, -307.5978698730469, 192.03211975097656, -299.3932800292969, -130.46368408203125, -496.2657470703125, 0.006600954569876194, -0.0069107785820961, -0.004648013971745968, 0.0076066432520747185, 0.00019581620290409774, 0.006943005137145519, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1000000000.0, 61440.0, 464.0])], &[208, 95, 88, 75, 194, 220, 224, 221, 90, 221, 216, 224, 31, 159, 157, 32, 10, 31, 0, 128, 124, 252, 126, 124, 124, 95]);
        check_bytes("Cast", 19, vec![("to", int(20))], &[f32s(&[26], &[-33.793975830078125, 417.16778564453125, 129.22625732421875, 14.117646217346191, -3.1265645027160645, -252.48507690429688, -488.2059631347656, -307.5978698730469, 192.03211975097656, -299.3932800292969, -130.46368408203125, -496.2657470703125, 0.006600954569876194, -0.0069107785820961, -0.004648013971745968, 0.0076066432520747185, 0.00019581620290409774, 0.006943005137145519, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1000000000.0, 61440.0, 464.0])], &[212, 99, 92, 79, 198, 224, 228, 225, 94, 225, 220, 228, 35, 163, 161, 36, 14, 35, 0, 0, 127, 255, 128, 127, 127, 99]);
        check_bytes("Cast", 19, vec![("to", int(20)), ("saturate", int(0))], &[f32s(&[26], &[-33.793975830078125, 417.16778564453125, 129.22625732421875, 14.117646217346191, -3.1265645027160645, -252.48507690429688, -488.2059631347656, -307.5978698730469, 192.03211975097656, -299.3932800292969, -130.46368408203125, -496.2657470703125, 0.006600954569876194, -0.0069107785820961, -0.004648013971745968, 0.0076066432520747185, 0.00019581620290409774, 0.006943005137145519, 0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN, 1000000000.0, 61440.0, 464.0])], &[212, 99, 92, 79, 198, 224, 228, 225, 94, 225, 220, 228, 35, 163, 161, 36, 14, 35, 0, 0, 128, 128, 128, 128, 128, 99]);
        check_bytes("Cast", 23, vec![("to", int(23))], &[f32s(&[9], &[2.2354745864868164, 3.868335247039795, -6.536070346832275, 0.6583011150360107, 0.12435577809810638, 5.94143009185791, -2.2197749614715576, 1.5709450244903564, -7.051973819732666])], &[100, 31, 112, 60, 15]);
        check_bytes("Cast", 21, vec![("to", int(22))], &[f32s(&[8], &[-9.699999809265137, -8.0, -2.5, -0.5, 1.5, 7.5, 15.5, 17.0])], &[135, 14, 113, 31]);
        check_bytes("Cast", 21, vec![("to", int(21))], &[f32s(&[8], &[-9.699999809265137, -8.0, -2.5, -0.5, 1.5, 7.5, 15.5, 17.0])], &[135, 14, 113, 31]);
        check_bytes("Cast", 25, vec![("to", int(26))], &[i32s(&[9], &[-3, -2, -1, 0, 1, 2, 3, 5, 9])], &[57, 121, 1]);
        check_bytes("Cast", 25, vec![("to", int(25))], &[i32s(&[9], &[-3, -2, -1, 0, 1, 2, 3, 5, 9])], &[57, 121, 1]);
        check_bytes("Cast", 24, vec![("to", int(24)), ("round_mode", string("up"))], &[f32s(&[8], &[3.0, 323.0370178222656, 150.20057678222656, 816.3383178710938, 379.44677734375, 978.7479248046875, 589.9921264648438, 605.056640625])], &[129, 136, 135, 137, 136, 137, 137, 137]);
        check_bytes("Cast", 24, vec![("to", int(24)), ("round_mode", string("down"))], &[f32s(&[8], &[3.0, 323.0370178222656, 150.20057678222656, 816.3383178710938, 379.44677734375, 978.7479248046875, 589.9921264648438, 605.056640625])], &[128, 135, 134, 136, 135, 136, 136, 136]);
        check_bytes("Cast", 24, vec![("to", int(24)), ("round_mode", string("nearest"))], &[f32s(&[8], &[3.0, 323.0370178222656, 150.20057678222656, 816.3383178710938, 379.44677734375, 978.7479248046875, 589.9921264648438, 605.056640625])], &[129, 135, 134, 137, 135, 137, 136, 136]);
    }

    /// Runs a Cast and compares the output's packed bytes.
    #[track_caller]
    fn check_bytes(
        op: &str,
        opset: u64,
        attrs: Vec<(&str, onnx_runtime_ir::Attribute)>,
        inputs: &[crate::Tensor],
        want: &[u8],
    ) {
        let got = run1(op, opset, attrs, inputs);
        assert_eq!(got.bytes(), want);
    }

    #[test]
    fn strings_round_trip_numbers() {
        let s = crate::Tensor::from_strings(
            vec![5],
            ["1.5", " -2 ", "1e3", "-INF", "NaN"]
                .map(String::from)
                .to_vec(),
        );
        let got = run1("Cast", 13, vec![("to", int(1))], &[s]);
        assert_close(
            &got,
            &[1.5, -2.0, 1000.0, f64::NEG_INFINITY, f64::NAN],
            &[5],
            0.0,
            0.0,
        );
        let x = f32s(&[6], &[0.1, 1.0, -2.5, 1e-5, 1.5e16, f64::INFINITY]);
        let got = run1("Cast", 13, vec![("to", int(8))], &[x]);
        // numpy: np.array([...], np.float32).astype(str)
        assert_eq!(
            got.strings(),
            ["0.1", "1.0", "-2.5", "1e-05", "1.5e+16", "inf"]
        );
        let bad = crate::Tensor::from_strings(vec![1], vec!["abc".into()]);
        let r = run_op("", "Cast", 13, vec![("to", int(1))], &[Some(bad)]);
        assert!(r.unwrap_err().to_string().contains("abc"));
    }

    /// Floats to INT4, UINT4, INT2 and UINT2: in range, truncation toward zero, exactly;
    /// out of range (undefined in the spec), the low bits of the truncated value.
    #[test]
    fn float_to_packed_ints_truncates_in_range_and_wraps_out_of_range() {
        // (to, ONNX code, lowest, highest)
        for (to, code, lo, hi) in [
            (DataType::Int4, 22, -8i64, 7i64),
            (DataType::Uint4, 21, 0, 15),
            (DataType::Int2, 26, -2, 1),
            (DataType::Uint2, 25, 0, 3),
        ] {
            let mut x = Vec::new();
            let mut want = Vec::new();
            for v in lo..=hi {
                // v and a value that truncates to v from further from zero.
                let away = if v < 0 {
                    v as f64 - 0.75
                } else {
                    v as f64 + 0.75
                };
                x.extend([v as f64, away]);
                want.extend([v, v]);
            }
            x.extend([
                -0.75,
                (hi + 1) as f64,
                (lo - 1) as f64,
                (hi + 1) as f64 + 0.5,
            ]);
            // -0.75 truncates to 0; one past each end wraps to the other end.
            want.extend([0, lo, hi, lo]);
            let n = x.len();
            for input in [f32s(&[n], &x), f16s(&[n], &x)] {
                let src = input.dtype();
                let packed = run1("Cast", 25, vec![("to", int(code))], &[input]);
                assert_eq!(packed.dtype(), to);
                let back = run1("Cast", 25, vec![("to", int(7))], &[packed]);
                assert_eq!(back.data::<i64>(), &want[..], "{src} -> {to}");
            }
            // CastLike takes the same path.
            let like = run1("Cast", 25, vec![("to", int(code))], &[i32s(&[1], &[0])]);
            let packed = run1("CastLike", 25, vec![], &[f32s(&[n], &x), like]);
            let back = run1("Cast", 25, vec![("to", int(7))], &[packed]);
            assert_eq!(back.data::<i64>(), &want[..], "CastLike float -> {to}");
        }
    }

    #[test]
    fn cast_like_takes_the_second_inputs_type() {
        let got = run1(
            "CastLike",
            15,
            vec![],
            &[f32s(&[2], &[1.7, -2.2]), i32s(&[1], &[0])],
        );
        assert_eq!(got.dtype(), DataType::Int32);
        assert_eq!(got.data::<i32>(), &[1, -2]);
    }
}
