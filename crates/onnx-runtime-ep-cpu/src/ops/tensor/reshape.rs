//! Zero-copy shape changes: Reshape, Flatten, Squeeze, Unsqueeze.

use super::common::{int_values, invalid, one, opt_ints_input};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::shape::normalize_axes;
use crate::{attrs, CpuRegistry};
use onnx_runtime_ep_api::EpError;

/// Resolves a Reshape target against the input shape (0 copies, -1 infers).
pub fn reshape_target(
    node: &str,
    in_shape: &[usize],
    target: &[i64],
    allowzero: bool,
) -> Result<Vec<usize>, EpError> {
    let numel: usize = in_shape.iter().product();
    let mut out = Vec::with_capacity(target.len());
    let mut infer = None;
    for (i, &d) in target.iter().enumerate() {
        match d {
            -1 => {
                if infer.replace(i).is_some() {
                    return Err(invalid(
                        node,
                        format!("shape {target:?} has more than one -1"),
                    ));
                }
                out.push(1);
            }
            0 if !allowzero => {
                let v = *in_shape.get(i).ok_or_else(|| {
                    invalid(
                        node,
                        format!(
                            "shape {target:?} copies dimension {i} (0) but the input {in_shape:?} has rank {}",
                            in_shape.len()
                        ),
                    )
                })?;
                out.push(v);
            }
            d if d < 0 => {
                return Err(invalid(
                    node,
                    format!("shape {target:?} has invalid dimension {d}"),
                ))
            }
            d => out.push(d as usize),
        }
    }
    if allowzero && infer.is_some() && target.contains(&0) {
        return Err(invalid(
            node,
            format!("shape {target:?} has both 0 and -1 with allowzero=1"),
        ));
    }
    let known: usize = out.iter().product();
    if let Some(i) = infer {
        if known == 0 || !numel.is_multiple_of(known) {
            return Err(invalid(
                node,
                format!("cannot infer -1 in {target:?} for input shape {in_shape:?}"),
            ));
        }
        out[i] = numel / known;
    } else if known != numel {
        return Err(invalid(
            node,
            format!(
                "cannot reshape {in_shape:?} ({numel} elements) to {target:?} ({known} elements)"
            ),
        ));
    }
    Ok(out)
}

fn build_reshape(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let allowzero = attrs::int(ctx.node, "allowzero", 0)? != 0;
    if ctx.opset < 5 {
        let shape = attrs::ints(ctx.node, "shape")?;
        return Ok(kernel_fn(move |inputs| {
            let x = tensor_input(&node, inputs, 0)?;
            one(x.reshaped(reshape_target(&node, x.shape(), &shape, false)?))
        }));
    }
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let shape = int_values(&node, tensor_input(&node, inputs, 1)?, "shape")?;
        one(x.reshaped(reshape_target(&node, x.shape(), &shape, allowzero)?))
    }))
}

fn build_flatten(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let axis = attrs::int(ctx.node, "axis", 1)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let r = x.rank() as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if a < 0 || a > r {
            return Err(invalid(
                &node,
                format!("axis {axis} is out of range for rank {r}; use -{r}..{r}"),
            ));
        }
        let outer: usize = x.shape()[..a as usize].iter().product();
        let inner: usize = x.shape()[a as usize..].iter().product();
        one(x.reshaped(vec![outer, inner]))
    }))
}

fn build_squeeze(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let attr_axes = if ctx.opset < 13 {
        attrs::opt_ints(ctx.node, "axes")?
    } else {
        None
    };
    let from_input = ctx.opset >= 13;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let axes = if from_input {
            opt_ints_input(&node, inputs, 1, "axes")?
        } else {
            attr_axes.clone()
        };
        let shape = x.shape();
        let out: Vec<usize> = match axes {
            None => shape.iter().copied().filter(|&d| d != 1).collect(),
            Some(axes) => {
                let axes = normalize_axes(&node, &axes, x.rank())?;
                for &a in &axes {
                    if shape[a] != 1 {
                        return Err(invalid(
                            &node,
                            format!(
                                "cannot squeeze axis {a} of shape {shape:?}: its size is not 1"
                            ),
                        ));
                    }
                }
                (0..shape.len())
                    .filter(|i| !axes.contains(i))
                    .map(|i| shape[i])
                    .collect()
            }
        };
        one(x.reshaped(out))
    }))
}

fn build_unsqueeze(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let attr_axes = if ctx.opset < 13 {
        Some(attrs::ints(ctx.node, "axes")?)
    } else {
        None
    };
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let axes = match &attr_axes {
            Some(a) => a.clone(),
            None => int_values(&node, tensor_input(&node, inputs, 1)?, "axes")?,
        };
        let out_rank = x.rank() + axes.len();
        let axes = normalize_axes(&node, &axes, out_rank)?;
        let mut out = Vec::with_capacity(out_rank);
        let mut src = x.shape().iter();
        for i in 0..out_rank {
            if axes.contains(&i) {
                out.push(1);
            } else {
                out.push(*src.next().expect("rank arithmetic"));
            }
        }
        one(x.reshaped(out))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 5, 13, 14, 19, 21, 23, 24, 25] {
        r.register("", "Reshape", since, build_reshape);
    }
    for since in [1, 9, 11, 13, 21, 23, 24, 25] {
        r.register("", "Flatten", since, build_flatten);
    }
    for since in [1, 11, 13, 21, 23, 24, 25] {
        r.register("", "Squeeze", since, build_squeeze);
        r.register("", "Unsqueeze", since, build_unsqueeze);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn reshape_rules() {
        let n = node("Reshape", 2, 1, vec![]);
        let x = t(&[2, 3, 4], (0..24).map(|v| v as f32).collect());
        let o = run(&n, 14, &[x.clone(), t(&[3], vec![0i64, -1, 2])]).unwrap();
        assert_eq!(out::<f32>(&o, 0).0, vec![2, 6, 2]);
        assert!(run(&n, 14, &[x.clone(), t(&[2], vec![-1i64, -1])]).is_err());
        assert!(run(&n, 14, &[x.clone(), t(&[2], vec![5i64, 5])]).is_err());
        let nz = node("Reshape", 2, 1, vec![("allowzero", Attribute::Int(1))]);
        let e = t(&[0, 3], Vec::<f32>::new());
        let o = run(&nz, 14, &[e, t(&[2], vec![3i64, 0])]).unwrap();
        assert_eq!(out::<f32>(&o, 0).0, vec![3, 0]);
    }

    #[test]
    fn squeeze_unsqueeze_flatten() {
        let x = t(&[1, 3, 1, 2], vec![1i32, 2, 3, 4, 5, 6]);
        let o = run(&node("Squeeze", 1, 1, vec![]), 13, std::slice::from_ref(&x)).unwrap();
        assert_eq!(out::<i32>(&o, 0).0, vec![3, 2]);
        let o = run(
            &node("Squeeze", 2, 1, vec![]),
            13,
            &[x.clone(), t(&[1], vec![-2i64])],
        )
        .unwrap();
        assert_eq!(out::<i32>(&o, 0).0, vec![1, 3, 2]);
        assert!(run(
            &node("Squeeze", 2, 1, vec![]),
            13,
            &[x.clone(), t(&[1], vec![1i64])]
        )
        .is_err());
        let n = node(
            "Unsqueeze",
            1,
            1,
            vec![("axes", Attribute::Ints(vec![0, -1]))],
        );
        let o = run(&n, 11, std::slice::from_ref(&x)).unwrap();
        assert_eq!(out::<i32>(&o, 0).0, vec![1, 1, 3, 1, 2, 1]);
        let n = node("Flatten", 1, 1, vec![("axis", Attribute::Int(-2))]);
        let o = run(&n, 13, &[x]).unwrap();
        assert_eq!(out::<i32>(&o, 0), (vec![3, 2], vec![1, 2, 3, 4, 5, 6]));
    }
}
