//! Normalizations over trailing axes: LayerNormalization (ONNX 17 and the older
//! com.microsoft/ORT form), RMSNormalization (23), SimplifiedLayerNormalization and the
//! com.microsoft SkipLayerNormalization / SkipSimplifiedLayerNormalization.

use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, c, invalid, Real};
use crate::shape::{broadcast_strides, for_each_offset, normalize_axis};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use rayon::prelude::*;

/// `t` broadcast to `shape` as compute-type values.
fn expand<T: Real>(node: &str, t: &Tensor, shape: &[usize], what: &str) -> Result<Vec<T>, EpError> {
    let v = common::float_vec::<T>(t)
        .ok_or_else(|| invalid(node, format!("{what} must be a float tensor")))?;
    if t.shape() == shape {
        return Ok(v);
    }
    let ok = t.rank() <= shape.len()
        && t.shape()
            .iter()
            .rev()
            .zip(shape.iter().rev())
            .all(|(&a, &b)| a == 1 || a == b);
    if !ok {
        return Err(invalid(
            node,
            format!(
                "{what} of shape {:?} does not broadcast to {shape:?}",
                t.shape()
            ),
        ));
    }
    let strides = broadcast_strides(t.shape(), shape);
    let mut out = vec![T::zero(); shape.iter().product()];
    for_each_offset(shape, [&strides], |i, [o]| out[i] = v[o]);
    Ok(out)
}

struct Norm<T> {
    y: Vec<T>,
    mean: Vec<T>,
    inv_std: Vec<T>,
}

/// Normalizes rows of `inner` values: `(x - mean) * inv_std * scale + bias` (`rms` drops
/// the mean). Statistics accumulate in f64.
fn norm_rows<T: Real>(
    x: &[T],
    inner: usize,
    eps: f64,
    rms: bool,
    scale: &[T],
    bias: Option<&[T]>,
) -> Norm<T> {
    let rows = x.len() / inner.max(1);
    let mut y = vec![T::zero(); x.len()];
    let mut stats = vec![(T::zero(), T::zero()); rows];
    y.par_chunks_mut(inner.max(1))
        .zip(stats.par_iter_mut())
        .enumerate()
        .for_each(|(r, (yr, st))| {
            let xr = &x[r * inner..(r + 1) * inner];
            let n = inner.max(1) as f64;
            let mean = if rms {
                0.0
            } else {
                common::lane_sum(xr, |v| v).to_f64c() / n
            };
            let mt: T = c(mean);
            let var = common::lane_sum(xr, |v| (v - mt) * (v - mt)).to_f64c() / n;
            let inv = 1.0 / (var + eps).sqrt();
            let (m, iv): (T, T) = (c(mean), c(inv));
            match bias {
                Some(b) => {
                    for (((o, &xv), &sv), &bv) in yr.iter_mut().zip(xr).zip(scale).zip(b) {
                        *o = (xv - m) * iv * sv + bv;
                    }
                }
                None => {
                    for ((o, &xv), &sv) in yr.iter_mut().zip(xr).zip(scale) {
                        *o = (xv - m) * iv * sv;
                    }
                }
            }
            *st = (m, iv);
        });
    let (mean, inv_std) = stats.into_iter().unzip();
    Norm { y, mean, inv_std }
}

#[derive(Clone, Copy)]
struct LnAttrs {
    axis: i64,
    eps: f64,
    rms: bool,
    /// Input index of the bias, if the op has one.
    bias_input: Option<usize>,
    /// Output position of the mean (None: the op has no mean output).
    mean_output: Option<usize>,
    inv_output: usize,
}

/// Runs a layer norm over `x` (already skip-summed for the skip variants); returns Y and
/// the statistics outputs in the op's order.
fn layer_norm(
    node: &str,
    op: &str,
    at: LnAttrs,
    x: &Tensor,
    scale: &Tensor,
    bias: Option<&Tensor>,
    n_out: usize,
) -> Result<Vec<Value>, EpError> {
    common::require_float(node, op, x.dtype())?;
    let axis = normalize_axis(node, at.axis, x.rank())?;
    let norm_shape = &x.shape()[axis..];
    let inner: usize = norm_shape.iter().product();
    let mut stat_shape = x.shape()[..axis].to_vec();
    stat_shape.extend(std::iter::repeat_n(1, x.rank() - axis));
    macro_rules! go {
        ($T:ty, $xv:expr) => {{
            let s = expand::<$T>(node, scale, norm_shape, "scale")?;
            let b = bias
                .map(|b| expand::<$T>(node, b, norm_shape, "bias"))
                .transpose()?;
            norm_rows::<$T>($xv, inner, at.eps, at.rms, &s, b.as_deref())
        }};
    }
    let (y, mean, inv) = if x.dtype() == DataType::Float64 {
        let r = go!(f64, x.data::<f64>());
        (
            Tensor::from_vec(x.shape().to_vec(), r.y),
            Tensor::from_vec(stat_shape.clone(), r.mean),
            Tensor::from_vec(stat_shape.clone(), r.inv_std),
        )
    } else {
        let ux = common::upcast(x);
        let r = go!(f32, ux.data::<f32>());
        (
            common::tensor_from_f32(x.dtype(), x.shape().to_vec(), r.y),
            Tensor::from_vec(stat_shape.clone(), r.mean),
            Tensor::from_vec(stat_shape.clone(), r.inv_std),
        )
    };
    let mut out = vec![None; n_out.max(1)];
    out[0] = Some(Value::Tensor(y));
    if let Some(mi) = at.mean_output {
        if mi < out.len() {
            out[mi] = Some(Value::Tensor(mean));
        }
    }
    if at.inv_output < out.len() {
        out[at.inv_output] = Some(Value::Tensor(inv));
    }
    Ok(out
        .into_iter()
        .map(|v| v.unwrap_or(Value::Optional(None)))
        .collect())
}

fn ln_attrs(
    ctx: &BuildContext<'_>,
    rms: bool,
    bias_input: Option<usize>,
    mean_output: Option<usize>,
    inv_output: usize,
) -> Result<LnAttrs, EpError> {
    let n = ctx.node;
    let stash = attrs::int(n, "stash_type", 1)?;
    if stash != 1 && stash != 11 {
        return Err(common::bad_attr(
            n,
            "stash_type",
            format!("{stash} is not float (1) or double (11)"),
        ));
    }
    Ok(LnAttrs {
        axis: attrs::int(n, "axis", -1)?,
        eps: attrs::float(n, "epsilon", 1e-5)? as f64,
        rms,
        bias_input,
        mean_output,
        inv_output,
    })
}

fn build_plain(
    ctx: &BuildContext<'_>,
    rms: bool,
    op: &'static str,
    bias_input: Option<usize>,
    mean_output: Option<usize>,
    inv_output: usize,
) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let at = ln_attrs(ctx, rms, bias_input, mean_output, inv_output)?;
    let n_out = ctx.node.outputs.len();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let scale = tensor_input(&node, inputs, 1)?;
        let bias = match at.bias_input {
            Some(i) => optional_tensor_input(&node, inputs, i)?,
            None => None,
        };
        layer_norm(&node, op, at, x, scale, bias, n_out)
    }))
}

fn build_layer_norm(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_plain(ctx, false, "LayerNormalization", Some(2), Some(1), 2)
}

fn build_rms_norm(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_plain(ctx, true, "RMSNormalization", None, None, 1)
}

pub(crate) fn build_simplified(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_plain(ctx, true, "SimplifiedLayerNormalization", None, None, 1)
}

/// SkipLayerNormalization (`rms = false`: input, skip, gamma, beta?, bias?) and
/// SkipSimplifiedLayerNormalization (`rms = true`: input, skip, gamma, bias?). Outputs:
/// output, mean, inv_std_var, input_skip_bias_sum.
fn build_skip(ctx: &BuildContext<'_>, rms: bool) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let op = if rms {
        "SkipSimplifiedLayerNormalization"
    } else {
        "SkipLayerNormalization"
    };
    let at = ln_attrs(ctx, rms, None, Some(1), 2)?;
    let n_out = ctx.node.outputs.len();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let skip = tensor_input(&node, inputs, 1)?;
        let gamma = tensor_input(&node, inputs, 2)?;
        let (beta, bias) = if rms {
            (None, optional_tensor_input(&node, inputs, 3)?)
        } else {
            (
                optional_tensor_input(&node, inputs, 3)?,
                optional_tensor_input(&node, inputs, 4)?,
            )
        };
        common::require_float(&node, op, x.dtype())?;
        let shape = x.shape().to_vec();
        let hidden = *shape
            .last()
            .ok_or_else(|| invalid(&node, "input must have rank >= 1"))?;
        let sum: Vec<f32> = {
            let xv = common::float_vec::<f32>(x).unwrap_or_default();
            let sv = expand::<f32>(&node, skip, &shape, "skip")?;
            let bv = bias
                .map(|b| expand::<f32>(&node, b, &[hidden], "bias"))
                .transpose()?;
            xv.iter()
                .zip(&sv)
                .enumerate()
                .map(|(i, (&a, &b))| a + b + bv.as_ref().map_or(0.0, |bv| bv[i % hidden.max(1)]))
                .collect()
        };
        let sum_t = common::tensor_from_f32(x.dtype(), shape.clone(), sum);
        let mut out = layer_norm(
            &node,
            op,
            LnAttrs { axis: -1, ..at },
            &sum_t,
            gamma,
            beta,
            n_out.min(3),
        )?;
        if n_out > 3 {
            out.push(Value::Tensor(sum_t));
        }
        Ok(out)
    }))
}

fn build_skip_ln(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_skip(ctx, false)
}

pub(crate) fn build_skip_simplified(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_skip(ctx, true)
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "LayerNormalization", 17, build_layer_norm);
    // ORT's pre-17 LayerNormalization (exported with opset < 17) and its contrib alias.
    r.register("", "LayerNormalization", 1, build_layer_norm);
    r.register("com.microsoft", "LayerNormalization", 1, build_layer_norm);
    r.register("", "RMSNormalization", 23, build_rms_norm);
    r.register("", "SimplifiedLayerNormalization", 1, build_simplified);
    r.register(
        "com.microsoft",
        "SimplifiedLayerNormalization",
        1,
        build_simplified,
    );
    r.register("com.microsoft", "SkipLayerNormalization", 1, build_skip_ln);
    r.register(
        "com.microsoft",
        "SkipSimplifiedLayerNormalization",
        1,
        build_skip_simplified,
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn layer_norm_axis_and_stats() {
        let (a, b, h) = (2, 3, 4);
        let x = rand(a * b * h, 61, -2.0, 2.0);
        let s = rand(b * h, 62, 0.5, 1.5);
        let bi = rand(b * h, 63, -1.0, 1.0);
        let out = run(
            build_layer_norm,
            &node(
                "LayerNormalization",
                3,
                3,
                vec![("axis", Attribute::Int(1))],
            ),
            17,
            &[
                Some(Tensor::from_vec(vec![a, b, h], f32s(&x))),
                Some(Tensor::from_vec(vec![b, h], f32s(&s))),
                Some(Tensor::from_vec(vec![b, h], f32s(&bi))),
            ],
        )
        .unwrap();
        let mut want = vec![];
        let mut means = vec![];
        for row in x.chunks(b * h) {
            let m = row.iter().sum::<f64>() / (b * h) as f64;
            let v = row.iter().map(|q| (q - m).powi(2)).sum::<f64>() / (b * h) as f64;
            means.push(m);
            for (j, q) in row.iter().enumerate() {
                want.push((q - m) / (v + 1e-5).sqrt() * s[j] + bi[j]);
            }
        }
        assert_close(out[0].data::<f32>(), &want, 1e-5);
        assert_eq!(out[1].shape(), &[a, 1, 1]);
        assert_close(out[1].data::<f32>(), &means, 1e-6);
    }

    #[test]
    fn rms_norm() {
        let x = rand(12, 64, -2.0, 2.0);
        let s = rand(4, 65, 0.5, 1.5);
        let out = run(
            build_rms_norm,
            &node("RMSNormalization", 2, 1, vec![]),
            23,
            &[
                Some(Tensor::from_vec(vec![3, 4], f32s(&x))),
                Some(Tensor::from_vec(vec![4], f32s(&s))),
            ],
        )
        .unwrap();
        let mut want = vec![];
        for row in x.chunks(4) {
            let ms = row.iter().map(|q| q * q).sum::<f64>() / 4.0;
            for (j, q) in row.iter().enumerate() {
                want.push(q / (ms + 1e-5).sqrt() * s[j]);
            }
        }
        assert_close(out[0].data::<f32>(), &want, 1e-5);
    }
}
