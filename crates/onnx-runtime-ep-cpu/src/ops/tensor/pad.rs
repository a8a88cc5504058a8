//! Padding and cropping: Pad (constant, reflect, edge, wrap) and CenterCropPad.

use super::common::{checked_numel, int_values, invalid, move_data, one, opt_ints_input, unpacked};
use super::copy;
use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::shape::normalize_axes;
use crate::{attrs, CpuRegistry, Tensor};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Constant,
    Reflect,
    Edge,
    Wrap,
}

/// The input index along one axis for each output index.
fn axis_table(
    node: &str,
    dim: usize,
    begin: i64,
    end: i64,
    mode: Mode,
) -> Result<Vec<Option<usize>>, EpError> {
    let out = dim as i64 + begin + end;
    if out < 0 {
        return Err(invalid(
            node,
            format!("pads ({begin}, {end}) remove more than the axis length {dim}"),
        ));
    }
    if dim == 0 && out > 0 && mode != Mode::Constant {
        return Err(invalid(
            node,
            format!("{mode:?} padding needs a non-empty axis to read from"),
        ));
    }
    let d = dim as i64;
    Ok((0..out)
        .map(|o| {
            let i = o - begin;
            if (0..d).contains(&i) {
                return Some(i as usize);
            }
            match mode {
                Mode::Constant => None,
                Mode::Edge => Some(i.clamp(0, d - 1) as usize),
                Mode::Wrap => Some(i.rem_euclid(d) as usize),
                Mode::Reflect => {
                    if d == 1 {
                        return Some(0);
                    }
                    let p = 2 * (d - 1);
                    let m = i.rem_euclid(p);
                    Some(if m >= d { p - m } else { m } as usize)
                }
            }
        })
        .collect())
}

/// Pads `x`; `pads` is `[begins..., ends...]` over `axes` (all axes when `None`); `value` is a
/// one-element tensor of `x`'s dtype for constant mode (zero when `None`).
fn pad_tensor(
    node: &str,
    x: &Tensor,
    pads: &[i64],
    axes: Option<&[i64]>,
    mode: Mode,
    value: Option<&Tensor>,
) -> Result<Tensor, EpError> {
    let rank = x.rank();
    let all: Vec<i64> = (0..rank as i64).collect();
    let axes = normalize_axes(node, axes.unwrap_or(&all), rank)?;
    if pads.len() != 2 * axes.len() {
        return Err(invalid(
            node,
            format!(
                "pads {pads:?} must have 2 × {} entries (begins then ends)",
                axes.len()
            ),
        ));
    }
    let mut tables: Vec<Vec<Option<usize>>> = x
        .shape()
        .iter()
        .map(|&d| (0..d).map(Some).collect())
        .collect();
    for (k, &a) in axes.iter().enumerate() {
        tables[a] = axis_table(node, x.shape()[a], pads[k], pads[k + axes.len()], mode)?;
    }
    let out_shape: Vec<usize> = tables.iter().map(|t| t.len()).collect();
    checked_numel(node, &out_shape)?;
    if let Some(v) = value {
        if v.dtype() != x.dtype() {
            return Err(invalid(
                node,
                format!(
                    "constant_value is {} but the data is {}",
                    v.dtype(),
                    x.dtype()
                ),
            ));
        }
    }
    let value = value.map(unpacked);
    Ok(move_data!(node, "Pad", x, out_shape, T, |src, dst| {
        let fill = value
            .as_ref()
            .and_then(|v| T::items(v).first().cloned())
            .unwrap_or_default();
        copy::gather_tables(src, x.shape(), &tables, &fill, dst)
    }))
}

/// A float attribute value as a one-element tensor of `dtype` (Pad-1/2's `value`).
fn value_as(dtype: DataType, v: f32) -> Option<Tensor> {
    use half::{bf16, f16};
    Some(match dtype {
        DataType::Float32 => Tensor::scalar(v),
        DataType::Float64 => Tensor::scalar(v as f64),
        DataType::Float16 => Tensor::scalar(f16::from_f32(v)),
        DataType::BFloat16 => Tensor::scalar(bf16::from_f32(v)),
        _ => return None,
    })
}

fn build_pad(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let mode = match attrs::string(ctx.node, "mode", "constant")?.as_str() {
        "constant" => Mode::Constant,
        "reflect" => Mode::Reflect,
        "edge" => Mode::Edge,
        "wrap" if ctx.opset >= 19 => Mode::Wrap,
        other => {
            return Err(EpError::invalid_attribute(
                ctx.node,
                "mode",
                format!("'{other}' is not supported at opset {}; use constant, reflect, edge or (opset 19+) wrap", ctx.opset),
            ))
        }
    };
    if ctx.opset < 11 {
        let name = if ctx.opset < 2 { "paddings" } else { "pads" };
        let pads = attrs::ints(ctx.node, name)?;
        let value = attrs::float(ctx.node, "value", 0.0)?;
        return Ok(kernel_fn(move |inputs| {
            let x = tensor_input(&node, inputs, 0)?;
            let v = value_as(x.dtype(), value);
            one(pad_tensor(&node, x, &pads, None, mode, v.as_ref())?)
        }));
    }
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let pads = int_values(&node, tensor_input(&node, inputs, 1)?, "pads")?;
        let value = optional_tensor_input(&node, inputs, 2)?;
        let axes = opt_ints_input(&node, inputs, 3, "axes")?;
        one(pad_tensor(&node, x, &pads, axes.as_deref(), mode, value)?)
    }))
}

fn build_center_crop_pad(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let axes = attrs::opt_ints(ctx.node, "axes")?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let shape = int_values(&node, tensor_input(&node, inputs, 1)?, "shape")?;
        let all: Vec<i64> = (0..x.rank() as i64).collect();
        let axes = normalize_axes(&node, axes.as_deref().unwrap_or(&all), x.rank())?;
        if shape.len() != axes.len() {
            return Err(invalid(
                &node,
                format!("shape {shape:?} must have one entry per axis {axes:?}"),
            ));
        }
        let mut tables: Vec<Vec<Option<usize>>> = x
            .shape()
            .iter()
            .map(|&d| (0..d).map(Some).collect())
            .collect();
        for (&a, &t) in axes.iter().zip(&shape) {
            let t = super::common::to_dim(&node, t, "shape")?;
            let d = x.shape()[a];
            tables[a] = if t <= d {
                let s = (d - t) / 2;
                (0..t).map(|o| Some(s + o)).collect()
            } else {
                let b = (t - d) / 2;
                (0..t)
                    .map(|o| o.checked_sub(b).filter(|i| *i < d))
                    .collect()
            };
        }
        let out_shape: Vec<usize> = tables.iter().map(|t| t.len()).collect();
        one(move_data!(
            &node,
            "CenterCropPad",
            x,
            out_shape,
            T,
            |src, dst| { copy::gather_tables(src, x.shape(), &tables, &T::default(), dst) }
        ))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 2, 11, 13, 18, 19, 21, 23, 24, 25] {
        r.register("", "Pad", since, build_pad);
    }
    r.register("", "CenterCropPad", 18, build_center_crop_pad);
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    fn pad(mode: &str, x: Vec<f32>, pads: Vec<i64>) -> Vec<f32> {
        let n = node("Pad", 2, 1, vec![("mode", Attribute::String(mode.into()))]);
        let o = run(&n, 19, &[t(&[x.len()], x), t(&[2], pads)]).unwrap();
        out::<f32>(&o, 0).1
    }

    #[test]
    fn modes_match_numpy() {
        let x = vec![1.0f32, 2., 3.];
        // np.pad(x, (4, 2), mode=...)
        assert_eq!(
            pad("reflect", x.clone(), vec![4, 2]),
            vec![1., 2., 3., 2., 1., 2., 3., 2., 1.]
        );
        assert_eq!(
            pad("edge", x.clone(), vec![4, 2]),
            vec![1., 1., 1., 1., 1., 2., 3., 3., 3.]
        );
        assert_eq!(
            pad("wrap", x.clone(), vec![4, 2]),
            vec![3., 1., 2., 3., 1., 2., 3., 1., 2.]
        );
        assert_eq!(pad("constant", x.clone(), vec![-1, 1]), vec![2., 3., 0.]);
    }

    #[test]
    fn constant_value_and_axes() {
        let n = node("Pad", 4, 1, vec![]);
        let x = t(&[2, 2], vec![1i32, 2, 3, 4]);
        let o = run(
            &n,
            18,
            &[
                x,
                t(&[2], vec![1i64, 0]),
                t(&[], vec![7i32]),
                t(&[1], vec![-1i64]),
            ],
        )
        .unwrap();
        assert_eq!(out::<i32>(&o, 0), (vec![2, 3], vec![7, 1, 2, 7, 3, 4]));
    }

    #[test]
    fn center_crop_pad() {
        // crop 5 -> 3 keeps [1..4); pad 2 -> 5 puts the data at offset 1.
        let n = node("CenterCropPad", 2, 1, vec![]);
        let x = t(&[5, 2], (0..10i64).collect());
        let o = run(&n, 18, &[x, t(&[2], vec![3i64, 5])]).unwrap();
        let (s, v) = out::<i64>(&o, 0);
        assert_eq!(s, vec![3, 5]);
        assert_eq!(&v[..5], &[0, 2, 3, 0, 0]);
    }
}
