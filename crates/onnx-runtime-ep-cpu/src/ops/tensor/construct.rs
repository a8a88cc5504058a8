//! Tensors made from attributes and shapes: Constant, ConstantOfShape, Shape, Size, Range,
//! EyeLike.

use super::common::{checked_numel, from_f64s, int_values, invalid, one, scalar_f64, to_dim};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{Attribute, DataType, Node, SparseTensorData};

/// A sparse tensor (values, linear or coordinate indices, dims) as a dense tensor.
pub fn sparse_to_dense(node: &Node, s: &SparseTensorData) -> Result<Tensor, EpError> {
    let bad = |m: String| EpError::invalid_attribute(node, "sparse_value", m);
    let dims: Vec<usize> = s
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| bad(format!("negative dim {d}"))))
        .collect::<Result<_, _>>()?;
    let values = Tensor::from_tensor_data(&s.values).map_err(bad)?;
    let idx = s
        .indices
        .to_i64_vec()
        .ok_or_else(|| bad("indices must be integers".into()))?;
    let nnz = values.numel();
    let strides = super::common::strides_of(&dims);
    let total: usize = dims.iter().product();
    let linear: Vec<usize> = if idx.len() == nnz {
        idx.iter().map(|&i| i as usize).collect()
    } else if idx.len() == nnz * dims.len() {
        idx.chunks(dims.len().max(1))
            .map(|c| c.iter().zip(&strides).map(|(&i, &s)| i as usize * s).sum())
            .collect()
    } else {
        return Err(bad(format!(
            "{} indices do not match {nnz} values of a rank-{} tensor",
            idx.len(),
            dims.len()
        )));
    };
    if linear.iter().any(|&l| l >= total) {
        return Err(bad("an index lies outside the dense shape".into()));
    }
    let mut out = Tensor::zeros(values.dtype(), dims);
    if values.dtype() == DataType::String {
        let src = values.strings().to_vec();
        let dst = out.strings_mut();
        for (k, &l) in linear.iter().enumerate() {
            dst[l] = src[k].clone();
        }
    } else {
        let w = values
            .dtype()
            .element_size()
            .ok_or_else(|| bad(format!("{} values cannot be scattered", values.dtype())))?;
        let src = values.bytes().to_vec();
        let dst = out.bytes_mut();
        for (k, &l) in linear.iter().enumerate() {
            dst[l * w..(l + 1) * w].copy_from_slice(&src[k * w..(k + 1) * w]);
        }
    }
    Ok(out)
}

fn constant_value(node: &Node) -> Result<Tensor, EpError> {
    let bad = |m: String| EpError::invalid_attribute(node, "value", m);
    let found: Vec<(&String, &Attribute)> = node
        .attributes
        .iter()
        .filter(|(k, _)| k.starts_with("value") || *k == "sparse_value")
        .collect();
    if found.len() != 1 {
        return Err(bad(format!(
            "Constant needs exactly one value attribute, got {}",
            found.len()
        )));
    }
    let (name, attr) = found[0];
    Ok(match (name.as_str(), attr) {
        ("value", Attribute::Tensor(t)) => Tensor::from_tensor_data(t).map_err(bad)?,
        ("sparse_value", Attribute::SparseTensor(s)) => sparse_to_dense(node, s)?,
        ("value_float", a) => {
            Tensor::scalar(a.as_float().ok_or_else(|| bad("not a float".into()))?)
        }
        ("value_floats", Attribute::Floats(v)) => Tensor::from_vec(vec![v.len()], v.clone()),
        ("value_int", Attribute::Int(v)) => Tensor::scalar(*v),
        ("value_ints", Attribute::Ints(v)) => Tensor::from_vec(vec![v.len()], v.clone()),
        ("value_string", Attribute::String(v)) => Tensor::from_strings(vec![], vec![v.clone()]),
        ("value_strings", Attribute::Strings(v)) => Tensor::from_strings(vec![v.len()], v.clone()),
        (name, a) => {
            return Err(bad(format!(
                "unsupported attribute {name} of kind {:?}",
                a.kind()
            )))
        }
    })
}

fn build_constant(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let value = Value::Tensor(constant_value(ctx.node)?);
    Ok(kernel_fn(move |_| Ok(vec![value.clone()])))
}

fn build_constant_of_shape(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let value = match ctx.node.attribute("value") {
        None => Tensor::scalar(0f32),
        Some(Attribute::Tensor(t)) => {
            let v = Tensor::from_tensor_data(t)
                .map_err(|e| EpError::invalid_attribute(ctx.node, "value", e))?;
            if v.numel() != 1 {
                return Err(EpError::invalid_attribute(
                    ctx.node,
                    "value",
                    format!("must hold one element, got shape {:?}", v.shape()),
                ));
            }
            v
        }
        Some(a) => {
            return Err(EpError::invalid_attribute(
                ctx.node,
                "value",
                format!("must be a tensor, got {:?}", a.kind()),
            ))
        }
    };
    Ok(kernel_fn(move |inputs| {
        let shape = int_values(&node, tensor_input(&node, inputs, 0)?, "shape")?;
        let shape = shape
            .iter()
            .map(|&d| to_dim(&node, d, "shape"))
            .collect::<Result<Vec<_>, _>>()?;
        let n = checked_numel(&node, &shape)?;
        if value.dtype() == DataType::String {
            return one(Tensor::from_strings(
                shape,
                vec![value.strings()[0].clone(); n],
            ));
        }
        let b = value.bytes();
        let mut out = Tensor::zeros(value.dtype(), shape);
        if b.iter().any(|&x| x != 0) {
            for chunk in out.bytes_mut().chunks_mut(b.len()) {
                chunk.copy_from_slice(b);
            }
        }
        one(out)
    }))
}

fn build_shape(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let start = attrs::int(ctx.node, "start", 0)?;
    let end = attrs::opt_int(ctx.node, "end")?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let r = x.rank() as i64;
        let fix = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
        let (s, e) = (fix(start), fix(end.unwrap_or(r)));
        let dims: Vec<i64> = if e > s {
            x.shape()[s..e].iter().map(|&d| d as i64).collect()
        } else {
            vec![]
        };
        one(Tensor::from_vec(vec![dims.len()], dims))
    }))
}

fn build_size(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        one(Tensor::scalar(x.numel() as i64))
    }))
}

fn build_range(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let ts: Vec<&Tensor> = (0..3)
            .map(|i| tensor_input(&node, inputs, i))
            .collect::<Result<_, _>>()?;
        let dtype = ts[0].dtype();
        if ts.iter().any(|t| t.dtype() != dtype) {
            return Err(invalid(&node, "start, limit and delta must have one type"));
        }
        if dtype.is_integer() {
            let v: Vec<i64> = ts
                .iter()
                .zip(["start", "limit", "delta"])
                .map(|(t, w)| int_values(&node, t, w).map(|v| v.first().copied().unwrap_or(0)))
                .collect::<Result<_, _>>()?;
            let (s, l, d) = (v[0], v[1], v[2]);
            if d == 0 {
                return Err(invalid(&node, "delta must not be 0"));
            }
            let n = ((l as i128 - s as i128) + d as i128 - d.signum() as i128) / d as i128;
            let n = n.max(0) as usize;
            checked_numel(&node, &[n])?;
            let vals: Vec<f64> = (0..n).map(|i| (s + i as i64 * d) as f64).collect();
            if dtype == DataType::Int64 {
                let vals: Vec<i64> = (0..n).map(|i| s + i as i64 * d).collect();
                return one(Tensor::from_vec(vec![n], vals));
            }
            return from_f64s(dtype, vec![n], &vals)
                .map(|t| vec![Value::Tensor(t)])
                .ok_or_else(|| invalid(&node, format!("Range does not support {dtype}")));
        }
        let s = scalar_f64(&node, ts[0], "start")?;
        let l = scalar_f64(&node, ts[1], "limit")?;
        let d = scalar_f64(&node, ts[2], "delta")?;
        if d == 0.0 || !d.is_finite() {
            return Err(invalid(
                &node,
                format!("delta must be finite and non-zero, got {d}"),
            ));
        }
        let n = ((l - s) / d).ceil().max(0.0);
        if !n.is_finite() {
            return Err(invalid(&node, "the range is unbounded"));
        }
        let n = n as usize;
        checked_numel(&node, &[n])?;
        let vals: Vec<f64> = if dtype == DataType::Float32 {
            // numpy's arange (the reference): the step is re-derived in the element type as
            // (start + delta) - start, then start + i * step.
            let s = s as f32;
            let d = (s + d as f32) - s;
            (0..n).map(|i| (s + i as f32 * d) as f64).collect()
        } else {
            let d = (s + d) - s;
            (0..n).map(|i| s + i as f64 * d).collect()
        };
        from_f64s(dtype, vec![n], &vals)
            .map(|t| vec![Value::Tensor(t)])
            .ok_or_else(|| invalid(&node, format!("Range does not support {dtype}")))
    }))
}

fn build_eye_like(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let k = attrs::int(ctx.node, "k", 0)?;
    let dtype = match attrs::opt_int(ctx.node, "dtype")? {
        Some(code) => Some(DataType::from_onnx(code as i32).ok_or_else(|| {
            EpError::invalid_attribute(ctx.node, "dtype", format!("unknown type code {code}"))
        })?),
        None => None,
    };
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let [n, m] = *x.shape() else {
            return Err(invalid(
                &node,
                format!("input must be 2-D, got {:?}", x.shape()),
            ));
        };
        let dt = dtype.unwrap_or(x.dtype());
        let mut vals = vec![0f64; n * m];
        for i in 0..n {
            let j = i as i64 + k;
            if (0..m as i64).contains(&j) {
                vals[i * m + j as usize] = 1.0;
            }
        }
        from_f64s(dt, vec![n, m], &vals)
            .map(|t| vec![Value::Tensor(t)])
            .ok_or_else(|| {
                super::common::unsupported(&node, "EyeLike", dt, "numeric and bool only")
            })
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 9, 11, 12, 13, 19, 21, 23, 24, 25] {
        r.register("", "Constant", since, build_constant);
    }
    for since in [9, 20, 21, 23, 24, 25] {
        r.register("", "ConstantOfShape", since, build_constant_of_shape);
    }
    for since in [1, 13, 15, 19, 21, 23, 24, 25] {
        r.register("", "Shape", since, build_shape);
    }
    for since in [1, 13, 19, 21, 23, 24, 25] {
        r.register("", "Size", since, build_size);
    }
    r.register("", "Range", 11, build_range);
    for since in [9, 22] {
        r.register("", "EyeLike", since, build_eye_like);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn range_shape_size() {
        // np.arange(10, 4, -2) and np.arange(1.0, 2.0, 0.3, dtype=np.float32)
        let n = node("Range", 3, 1, vec![]);
        let o = run(
            &n,
            11,
            &[t(&[], vec![10i32]), t(&[], vec![4i32]), t(&[], vec![-2i32])],
        )
        .unwrap();
        assert_eq!(out::<i32>(&o, 0).1, vec![10, 8, 6]);
        let o = run(
            &n,
            11,
            &[t(&[], vec![1f32]), t(&[], vec![2f32]), t(&[], vec![0.3f32])],
        )
        .unwrap();
        assert_eq!(
            out::<f32>(&o, 0).1,
            [
                1.0f64,
                1.2999999523162842,
                1.5999999046325684,
                1.8999998569488525
            ]
            .map(|v| v as f32)
            .to_vec()
        );
        let n = node("Shape", 1, 1, vec![("start", Attribute::Int(-2))]);
        let o = run(&n, 15, &[t(&[2, 3, 4], vec![0u8; 24])]).unwrap();
        assert_eq!(out::<i64>(&o, 0).1, vec![3, 4]);
        let o = run(
            &node("Size", 1, 1, vec![]),
            13,
            &[t(&[2, 3, 4], vec![0u8; 24])],
        )
        .unwrap();
        assert_eq!(out::<i64>(&o, 0), (vec![], vec![24]));
    }

    #[test]
    fn eye_like_and_constant_of_shape() {
        // np.eye(2, 3, k=1, dtype=np.int32)
        let n = node(
            "EyeLike",
            1,
            1,
            vec![("k", Attribute::Int(1)), ("dtype", Attribute::Int(6))],
        );
        let o = run(&n, 9, &[t(&[2, 3], vec![0f32; 6])]).unwrap();
        assert_eq!(out::<i32>(&o, 0).1, vec![0, 1, 0, 0, 0, 1]);
        let value = onnx_runtime_ir::TensorData::from_bytes(
            onnx_runtime_ir::DataType::Int64,
            vec![1],
            7i64.to_le_bytes().to_vec(),
        );
        let n = node(
            "ConstantOfShape",
            1,
            1,
            vec![("value", Attribute::Tensor(value))],
        );
        let o = run(&n, 9, &[t(&[2], vec![2i64, 2])]).unwrap();
        assert_eq!(out::<i64>(&o, 0), (vec![2, 2], vec![7; 4]));
    }
}
