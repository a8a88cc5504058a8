//! QuantizeLinear / DequantizeLinear (per-tensor, per-axis and blocked; every quantized
//! type of opsets 10..25) and DynamicQuantizeLinear.

use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, bad_attr, invalid};
use crate::ops::nn::quant::qtypes::{decode, encode, is_quant_type};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

/// How a scale (and zero point) maps onto the elements of x.
pub struct ParamMap {
    /// Per tensor; otherwise x's axis extent, the inner size and the block (0: per axis).
    per_tensor: bool,
    axis_len: usize,
    inner: usize,
    block: usize,
    param_axis_len: usize,
}

impl ParamMap {
    pub fn new(
        node: &str,
        x_shape: &[usize],
        p_shape: &[usize],
        axis: i64,
        block: usize,
    ) -> Result<ParamMap, EpError> {
        let numel: usize = p_shape.iter().product();
        if block == 0 && (p_shape.is_empty() || numel == 1 && p_shape.len() <= 1) {
            return Ok(ParamMap {
                per_tensor: true,
                axis_len: 1,
                inner: 1,
                block: 0,
                param_axis_len: 1,
            });
        }
        let a = crate::shape::normalize_axis(node, axis, x_shape.len())?;
        let axis_len = x_shape[a];
        let inner: usize = x_shape[a + 1..].iter().product();
        if block == 0 {
            if p_shape != [axis_len] {
                return Err(invalid(
                    node,
                    format!(
                        "per-axis scale {p_shape:?} must be 1-D of x's axis {a} extent {axis_len}"
                    ),
                ));
            }
            return Ok(ParamMap {
                per_tensor: false,
                axis_len,
                inner,
                block: 0,
                param_axis_len: axis_len,
            });
        }
        let want: Vec<usize> = x_shape
            .iter()
            .enumerate()
            .map(|(i, &d)| if i == a { d.div_ceil(block) } else { d })
            .collect();
        if p_shape != want.as_slice() {
            return Err(invalid(
                node,
                format!("blocked scale {p_shape:?} must be {want:?} for x {x_shape:?}, axis {a}, block_size {block}"),
            ));
        }
        Ok(ParamMap {
            per_tensor: false,
            axis_len,
            inner,
            block,
            param_axis_len: want[a],
        })
    }

    /// The parameter index of element `i` of x.
    #[inline]
    pub fn index(&self, i: usize) -> usize {
        if self.per_tensor {
            return 0;
        }
        let inner_i = i % self.inner;
        let rest = i / self.inner;
        let a = rest % self.axis_len;
        if self.block == 0 {
            return a;
        }
        let outer = rest / self.axis_len;
        (outer * self.param_axis_len + a / self.block) * self.inner + inner_i
    }
}

fn scale_values(node: &str, t: &Tensor) -> Result<Vec<f64>, EpError> {
    if t.dtype() == DataType::Float8E8M0 {
        return decode(t).ok_or_else(|| invalid(node, "bad float8e8m0 scale"));
    }
    common::floats_of(node, t, "scale")
}

struct QAttrs {
    axis: i64,
    block: usize,
    saturate: bool,
    output_dtype: Option<DataType>,
}

fn q_attrs(ctx: &BuildContext<'_>) -> Result<QAttrs, EpError> {
    let n = ctx.node;
    let block = attrs::int(n, "block_size", 0)?;
    if block < 0 {
        return Err(bad_attr(n, "block_size", "must not be negative"));
    }
    let od = attrs::int(n, "output_dtype", 0)?;
    let output_dtype = if od == 0 {
        None
    } else {
        Some(
            DataType::from_onnx(od as i32)
                .ok_or_else(|| bad_attr(n, "output_dtype", format!("{od} is not a data type")))?,
        )
    };
    Ok(QAttrs {
        axis: attrs::int(n, "axis", 1)?,
        block: block as usize,
        saturate: attrs::int(n, "saturate", 1)? != 0,
        output_dtype,
    })
}

/// The parameter of element `i`.
#[inline]
fn param_at(map: &ParamMap, v: &[f64], i: usize) -> f64 {
    v[map.index(i)]
}

fn build_quantize(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let at = q_attrs(ctx)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let s = tensor_input(&node, inputs, 1)?;
        let zp = optional_tensor_input(&node, inputs, 2)?;
        if !matches!(
            x.dtype(),
            DataType::Float32
                | DataType::Float16
                | DataType::BFloat16
                | DataType::Int32
                | DataType::Float64
        ) {
            return Err(common::unsupported(
                &node,
                "QuantizeLinear",
                x.dtype(),
                "float, float16, bfloat16 or int32",
            ));
        }
        let out_dtype = zp
            .map(|z| z.dtype())
            .or(at.output_dtype)
            .unwrap_or(DataType::Uint8);
        if !is_quant_type(out_dtype)
            || out_dtype == DataType::Float8E8M0
            || out_dtype == DataType::Int32
        {
            return Err(common::unsupported(
                &node,
                "QuantizeLinear",
                out_dtype,
                "an 8/16-bit, 4-bit, 2-bit integer or float8/float4 output type",
            ));
        }
        let map = ParamMap::new(&node, x.shape(), s.shape(), at.axis, at.block)?;
        let sv = scale_values(&node, s)?;
        let zv = match zp {
            Some(z) => {
                if z.numel() != s.numel() {
                    return Err(invalid(
                        &node,
                        format!(
                            "zero point {:?} must have the scale's shape {:?}",
                            z.shape(),
                            s.shape()
                        ),
                    ));
                }
                decode(z).ok_or_else(|| invalid(&node, "bad zero point"))?
            }
            None => vec![0.0; sv.len()],
        };
        let xv = x.to_f64_vec().unwrap_or_default();
        let is_int = crate::ops::nn::quant::qtypes::int_range(out_dtype).is_some();
        let vals: Vec<f64> = xv
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let (sc, z) = (param_at(&map, &sv, i), param_at(&map, &zv, i));
                // Divide in f32 like the reference runtimes.
                let q = (v as f32 / sc as f32) as f64;
                if is_int {
                    q.round_ties_even() + z
                } else {
                    q + z
                }
            })
            .collect();
        Ok(vec![Value::Tensor(encode(
            out_dtype,
            x.shape().to_vec(),
            &vals,
            at.saturate,
        ))])
    }))
}

fn build_dequantize(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let at = q_attrs(ctx)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let s = tensor_input(&node, inputs, 1)?;
        let zp = optional_tensor_input(&node, inputs, 2)?;
        if !is_quant_type(x.dtype()) || x.dtype() == DataType::Float8E8M0 {
            return Err(common::unsupported(
                &node,
                "DequantizeLinear",
                x.dtype(),
                "an integer, float8 or float4 quantized type",
            ));
        }
        if let Some(z) = zp {
            if z.dtype() != x.dtype() {
                return Err(invalid(
                    &node,
                    format!("zero point is {} but x is {}", z.dtype(), x.dtype()),
                ));
            }
        }
        let map = ParamMap::new(&node, x.shape(), s.shape(), at.axis, at.block)?;
        let sv = scale_values(&node, s)?;
        let zv = match zp {
            Some(z) => decode(z).ok_or_else(|| invalid(&node, "bad zero point"))?,
            None => vec![0.0; sv.len()],
        };
        let xv = decode(x).ok_or_else(|| invalid(&node, "bad input"))?;
        let out_dtype = at
            .output_dtype
            .unwrap_or(if s.dtype() == DataType::Float8E8M0 {
                DataType::Float32
            } else {
                s.dtype()
            });
        let shape = x.shape().to_vec();
        let y = match out_dtype {
            DataType::Float64 => Tensor::from_vec(
                shape,
                xv.iter()
                    .enumerate()
                    .map(|(i, &v)| (v - param_at(&map, &zv, i)) * param_at(&map, &sv, i))
                    .collect(),
            ),
            DataType::Float32 | DataType::Float16 | DataType::BFloat16 => {
                let v: Vec<f32> = xv
                    .iter()
                    .enumerate()
                    .map(|(i, &v)| {
                        ((v - param_at(&map, &zv, i)) as f32) * param_at(&map, &sv, i) as f32
                    })
                    .collect();
                common::tensor_from_f32(out_dtype, shape, v)
            }
            other => {
                return Err(common::unsupported(
                    &node,
                    "DequantizeLinear",
                    other,
                    "float, float16 or bfloat16 outputs",
                ))
            }
        };
        Ok(vec![Value::Tensor(y)])
    }))
}

/// DynamicQuantizeLinear's uint8 scale and zero point for `x` (f32 math, like onnxruntime):
/// the range is widened to include 0; scale = (max - min) / 255, or 1 when the range is empty
/// (all zeros); zero point = round_half_even(clamp(-min / scale, 0, 255)). NaNs are skipped.
pub fn dynamic_u8_params(x: &[f32]) -> (f32, f32) {
    let (lo, hi) = min_max_with_zero(x);
    let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
    (scale, zp)
}

/// (min(0, x..), max(0, x..)) skipping NaNs (as a fold with `f32::min` / `f32::max`).
fn min_max_with_zero(x: &[f32]) -> (f32, f32) {
    let (mut lo, mut hi, mut i) = (0.0f32, 0.0f32, 0);
    #[cfg(target_arch = "x86_64")]
    if crate::ops::math::vecmath::has_avx2() {
        // SAFETY: the CPU has AVX2.
        (lo, hi, i) = unsafe { simd::min_max(x) };
    }
    for &v in &x[i..] {
        lo = if v < lo { v } else { lo };
        hi = if v > hi { v } else { hi };
    }
    (lo, hi)
}

/// `q[i] = saturate_u8(round_half_even(x[i] / scale) + zp)` (NaN gives 0).
pub fn quantize_u8(x: &[f32], scale: f32, zp: f32, q: &mut [u8]) {
    assert_eq!(x.len(), q.len(), "quantize_u8: lengths differ");
    let mut i = 0;
    #[cfg(target_arch = "x86_64")]
    if crate::ops::math::vecmath::has_avx2() {
        // SAFETY: the CPU has AVX2; the lengths match.
        i = unsafe { simd::quantize(x, scale, zp, q) };
    }
    for (o, &v) in q[i..].iter_mut().zip(&x[i..]) {
        *o = ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8;
    }
}

#[cfg(target_arch = "x86_64")]
mod simd {
    use std::arch::x86_64::*;

    /// Min and max (with 0) of the leading multiple of 8 elements, and that count.
    #[target_feature(enable = "avx2")]
    pub unsafe fn min_max(x: &[f32]) -> (f32, f32, usize) {
        let n = x.len() / 8 * 8;
        let (mut lo, mut hi) = (_mm256_setzero_ps(), _mm256_setzero_ps());
        let p = x.as_ptr();
        let mut i = 0;
        // SAFETY: reads below n <= x.len(). min/max return the second operand (the running
        // value) when x is NaN, so NaNs are skipped.
        unsafe {
            while i < n {
                let v = _mm256_loadu_ps(p.add(i));
                lo = _mm256_min_ps(v, lo);
                hi = _mm256_max_ps(v, hi);
                i += 8;
            }
        }
        let (mut l, mut h) = ([0.0f32; 8], [0.0f32; 8]);
        // SAFETY: 8 floats each.
        unsafe {
            _mm256_storeu_ps(l.as_mut_ptr(), lo);
            _mm256_storeu_ps(h.as_mut_ptr(), hi);
        }
        let lo = l.iter().fold(0.0f32, |a, &b| if b < a { b } else { a });
        let hi = h.iter().fold(0.0f32, |a, &b| if b > a { b } else { a });
        (lo, hi, n)
    }

    /// [`super::quantize_u8`] over the leading multiple of 32 elements; returns that count.
    #[target_feature(enable = "avx2")]
    pub unsafe fn quantize(x: &[f32], scale: f32, zp: f32, q: &mut [u8]) -> usize {
        let n = x.len().min(q.len()) / 32 * 32;
        let (s, z) = (_mm256_set1_ps(scale), _mm256_set1_ps(zp));
        let (zero, top) = (_mm256_setzero_ps(), _mm256_set1_ps(255.0));
        let order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        let (p, o) = (x.as_ptr(), q.as_mut_ptr());
        let mut i = 0;
        // SAFETY: reads and writes below n.
        unsafe {
            while i < n {
                let mut v = [_mm256_setzero_si256(); 4];
                for (t, e) in v.iter_mut().enumerate() {
                    let d = _mm256_div_ps(_mm256_loadu_ps(p.add(i + 8 * t)), s);
                    let r = _mm256_add_ps(
                        _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(d),
                        z,
                    );
                    // max(r, 0) gives 0 for NaN (the second operand), as the scalar clamp
                    // then cast does.
                    let r = _mm256_min_ps(_mm256_max_ps(r, zero), top);
                    *e = _mm256_cvtps_epi32(r);
                }
                let a = _mm256_packus_epi32(v[0], v[1]);
                let b = _mm256_packus_epi32(v[2], v[3]);
                let bytes = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(a, b), order);
                _mm256_storeu_si256(o.add(i) as *mut __m256i, bytes);
                i += 32;
            }
        }
        n
    }
}

fn build_dynamic_quantize(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        if x.dtype() != DataType::Float32 {
            return Err(common::unsupported(
                &node,
                "DynamicQuantizeLinear",
                x.dtype(),
                "float",
            ));
        }
        let xv = x.data::<f32>();
        let (scale, zp) = dynamic_u8_params(xv);
        let mut q = vec![0u8; xv.len()];
        quantize_u8(xv, scale, zp, &mut q);
        Ok(vec![
            Value::Tensor(Tensor::from_vec(x.shape().to_vec(), q)),
            Value::Tensor(Tensor::scalar(scale)),
            Value::Tensor(Tensor::scalar(zp as u8)),
        ])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [10, 13, 19, 21, 23, 24, 25] {
        r.register("", "QuantizeLinear", since, build_quantize);
        r.register("", "DequantizeLinear", since, build_dequantize);
    }
    r.register("", "DynamicQuantizeLinear", 11, build_dynamic_quantize);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn per_axis_round_trip() {
        let x = rand(2 * 3 * 4, 91, -3.0, 3.0);
        let scales = [0.02f32, 0.03, 0.05];
        let zps = [3i8, -2, 0];
        let node_q = node("QuantizeLinear", 3, 1, vec![("axis", Attribute::Int(1))]);
        let q = run(
            build_quantize,
            &node_q,
            13,
            &[
                Some(Tensor::from_vec(vec![2, 3, 4], f32s(&x))),
                Some(Tensor::from_vec(vec![3], scales.to_vec())),
                Some(Tensor::from_vec(vec![3], zps.to_vec())),
            ],
        )
        .unwrap();
        let got = q[0].data::<i8>();
        for (i, &v) in x.iter().enumerate() {
            let c = (i / 4) % 3;
            let want =
                ((v as f32 / scales[c]).round_ties_even() + zps[c] as f32).clamp(-128.0, 127.0);
            assert_eq!(got[i] as f32, want, "element {i}");
        }
        let node_dq = node("DequantizeLinear", 3, 1, vec![("axis", Attribute::Int(1))]);
        let dq = run(
            build_dequantize,
            &node_dq,
            13,
            &[
                Some(q[0].clone()),
                Some(Tensor::from_vec(vec![3], scales.to_vec())),
                Some(Tensor::from_vec(vec![3], zps.to_vec())),
            ],
        )
        .unwrap();
        for (i, &v) in dq[0].data::<f32>().iter().enumerate() {
            let c = (i / 4) % 3;
            assert_eq!(v, (got[i] as f32 - zps[c] as f32) * scales[c]);
        }
    }

    #[test]
    fn dynamic_quantize_matches_the_scalar_formula() {
        let mut x = rand(1000, 17, -3.0, 5.0);
        x[3] = f64::NAN;
        x[700] = -0.0;
        let xf = f32s(&x);
        for len in [0, 1, 15, 16, 17, 999, 1000] {
            let xs = &xf[..len];
            let lo = xs.iter().copied().fold(0.0f32, f32::min);
            let hi = xs.iter().copied().fold(0.0f32, f32::max);
            let scale = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
            let zp = (0.0 - lo / scale).clamp(0.0, 255.0).round_ties_even();
            assert_eq!(dynamic_u8_params(xs), (scale, zp), "len {len}");
            let mut q = vec![7u8; len];
            quantize_u8(xs, scale, zp, &mut q);
            for (i, (&g, &v)) in q.iter().zip(xs).enumerate() {
                let want = ((v / scale).round_ties_even() + zp).clamp(0.0, 255.0) as u8;
                assert_eq!(g, want, "len {len} element {i} ({v})");
            }
        }
        // Saturation on both ends.
        let mut q = [0u8; 3];
        quantize_u8(&[-1e9, 1e9, f32::NAN], 0.5, 3.0, &mut q);
        assert_eq!(q, [0, 255, 0]);
    }
}
