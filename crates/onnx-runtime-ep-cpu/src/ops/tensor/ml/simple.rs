//! Element and feature preprocessing of `ai.onnx.ml`: ArrayFeatureExtractor, Binarizer,
//! Normalizer, Scaler, Imputer, FeatureVectorizer, CategoryMapper, OneHotEncoder,
//! DictVectorizer.

use super::super::common::{from_f64s, int_values, invalid, one};
use super::super::gather::gather_tensor;
use super::features;
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

const ML: &str = "ai.onnx.ml";

fn build_array_feature_extractor(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let idx_t = tensor_input(&node, inputs, 1)?;
        if x.rank() == 0 {
            return Err(invalid(&node, "X must have rank 1 or more"));
        }
        let last = x.rank() - 1;
        let idx = int_values(&node, idx_t, "Y")?;
        for &i in &idx {
            if i < 0 || i as usize >= x.shape()[last] {
                return Err(invalid(
                    &node,
                    format!("index {i} is outside 0..{}", x.shape()[last]),
                ));
            }
        }
        let flat = Tensor::from_vec(vec![idx.len()], idx.clone());
        let y = gather_tensor(&node, x, &flat, last)?;
        let mut shape = if x.rank() == 1 {
            vec![1]
        } else {
            x.shape()[..last].to_vec()
        };
        shape.push(idx.len());
        one(y.reshaped(shape))
    }))
}

fn build_binarizer(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let th = attrs::float(ctx.node, "threshold", 0.0)? as f64;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let v = features(&node, x)?;
        let y: Vec<f64> = v.iter().map(|&a| if a > th { 1.0 } else { 0.0 }).collect();
        one(from_f64s(x.dtype(), x.shape().to_vec(), &y).expect("numeric dtype"))
    }))
}

/// Rows of a [N, C] (or [C]) input: (rows, columns).
fn rows_cols(x: &Tensor) -> (usize, usize) {
    match *x.shape() {
        [c] => (1, c),
        [] => (1, 1),
        _ => {
            let c = *x.shape().last().expect("rank >= 2");
            (x.numel() / c.max(1), c)
        }
    }
}

fn build_normalizer(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let norm = attrs::string(ctx.node, "norm", "MAX")?;
    if !matches!(norm.as_str(), "MAX" | "L1" | "L2") {
        return Err(EpError::invalid_attribute(
            ctx.node,
            "norm",
            format!("'{norm}' is not MAX, L1 or L2"),
        ));
    }
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let mut v = features(&node, x)?;
        let (_, c) = rows_cols(x);
        if c > 0 {
            for row in v.chunks_mut(c) {
                let d = match norm.as_str() {
                    "MAX" => row.iter().cloned().fold(f64::NEG_INFINITY, f64::max),
                    "L1" => row.iter().map(|a| a.abs()).sum(),
                    _ => row.iter().map(|a| a * a).sum::<f64>().sqrt(),
                };
                if d != 0.0 {
                    row.iter_mut().for_each(|a| *a /= d);
                }
            }
        }
        one(from_f64s(DataType::Float32, x.shape().to_vec(), &v).expect("float"))
    }))
}

/// A per-feature parameter list (one value broadcasts).
fn per_feature(node: &str, v: &[f64], c: usize, what: &str) -> Result<Vec<f64>, EpError> {
    match v.len() {
        0 => Ok(vec![]),
        1 => Ok(vec![v[0]; c]),
        n if n == c => Ok(v.to_vec()),
        n => Err(invalid(
            node,
            format!("{what} has {n} values for {c} features"),
        )),
    }
}

fn build_scaler(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let f = |n: &str| -> Result<Vec<f64>, EpError> {
        Ok(attrs::opt_floats(ctx.node, n)?
            .unwrap_or_default()
            .iter()
            .map(|&v| v as f64)
            .collect())
    };
    let (offset, scale) = (f("offset")?, f("scale")?);
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let mut v = features(&node, x)?;
        let (_, c) = rows_cols(x);
        let o = per_feature(&node, &offset, c, "offset")?;
        let s = per_feature(&node, &scale, c, "scale")?;
        for (i, a) in v.iter_mut().enumerate() {
            let j = i % c.max(1);
            *a = (*a - o.get(j).copied().unwrap_or(0.0)) * s.get(j).copied().unwrap_or(1.0);
        }
        one(from_f64s(DataType::Float32, x.shape().to_vec(), &v).expect("float"))
    }))
}

fn build_imputer(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let fl: Vec<f64> = attrs::opt_floats(ctx.node, "imputed_value_floats")?
        .unwrap_or_default()
        .iter()
        .map(|&v| v as f64)
        .collect();
    let it: Vec<f64> = attrs::ints(ctx.node, "imputed_value_int64s")?
        .iter()
        .map(|&v| v as f64)
        .collect();
    let rf = attrs::float(ctx.node, "replaced_value_float", 0.0)? as f64;
    let ri = attrs::int(ctx.node, "replaced_value_int64", 0)? as f64;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let float = x.dtype().is_float();
        let (imp, rep) = if float { (&fl, rf) } else { (&it, ri) };
        let mut v = features(&node, x)?;
        let (_, c) = rows_cols(x);
        let imp = per_feature(&node, imp, c, "imputed values")?;
        if imp.is_empty() {
            return Err(invalid(
                &node,
                format!("no imputed values given for {} input", x.dtype()),
            ));
        }
        for (i, a) in v.iter_mut().enumerate() {
            if *a == rep || (rep.is_nan() && a.is_nan()) {
                *a = imp[i % c.max(1)];
            }
        }
        one(from_f64s(x.dtype(), x.shape().to_vec(), &v).expect("numeric dtype"))
    }))
}

fn build_feature_vectorizer(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let dims: Vec<usize> = attrs::ints(ctx.node, "inputdimensions")?
        .iter()
        .map(|&d| d.max(0) as usize)
        .collect();
    Ok(kernel_fn(move |inputs| {
        if inputs.len() != dims.len() {
            return Err(invalid(
                &node,
                format!("{} inputs for {} inputdimensions", inputs.len(), dims.len()),
            ));
        }
        let total: usize = dims.iter().sum();
        let mut n = None;
        let mut cols = Vec::new();
        for (i, &d) in dims.iter().enumerate() {
            let x = tensor_input(&node, inputs, i)?;
            let rows = if x.rank() <= 1 { 1 } else { x.shape()[0] };
            if *n.get_or_insert(rows) != rows {
                return Err(invalid(&node, "inputs disagree on the batch size"));
            }
            let c = x.numel() / rows.max(1);
            cols.push((features(&node, x)?, c, d));
        }
        let n = n.unwrap_or(1);
        let mut out = vec![0f64; n * total];
        let mut off = 0;
        for (v, c, d) in cols {
            for r in 0..n {
                for j in 0..c.min(d) {
                    out[r * total + off + j] = v[r * c + j];
                }
            }
            off += d;
        }
        one(from_f64s(DataType::Float32, vec![n, total], &out).expect("float"))
    }))
}

fn build_category_mapper(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let ints = attrs::ints(ctx.node, "cats_int64s")?;
    let strs = attrs::opt_strings(ctx.node, "cats_strings")?.unwrap_or_default();
    if ints.len() != strs.len() {
        return Err(EpError::invalid_attribute(
            ctx.node,
            "cats_int64s",
            "must pair one-to-one with cats_strings",
        ));
    }
    let d_int = attrs::int(ctx.node, "default_int64", -1)?;
    let d_str = attrs::string(ctx.node, "default_string", "_Unused")?;
    let s2i: std::collections::HashMap<String, i64> =
        strs.iter().cloned().zip(ints.iter().copied()).collect();
    let i2s: std::collections::HashMap<i64, String> =
        ints.iter().copied().zip(strs.iter().cloned()).collect();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        if x.dtype() == DataType::String {
            let v: Vec<i64> = x
                .strings()
                .iter()
                .map(|s| *s2i.get(s).unwrap_or(&d_int))
                .collect();
            one(Tensor::from_vec(x.shape().to_vec(), v))
        } else {
            let v: Vec<String> = int_values(&node, x, "X")?
                .iter()
                .map(|i| i2s.get(i).cloned().unwrap_or_else(|| d_str.clone()))
                .collect();
            one(Tensor::from_strings(x.shape().to_vec(), v))
        }
    }))
}

fn build_one_hot_encoder(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let ints = attrs::ints(ctx.node, "cats_int64s")?;
    let strs = attrs::opt_strings(ctx.node, "cats_strings")?.unwrap_or_default();
    let zeros = attrs::int(ctx.node, "zeros", 1)? != 0;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let pos: Vec<Option<usize>> = if x.dtype() == DataType::String {
            x.strings()
                .iter()
                .map(|s| strs.iter().position(|c| c == s))
                .collect()
        } else {
            features(&node, x)?
                .iter()
                .map(|&v| ints.iter().position(|&c| c as f64 == v))
                .collect()
        };
        let k = if x.dtype() == DataType::String {
            strs.len()
        } else {
            ints.len()
        };
        if !zeros && pos.iter().any(Option::is_none) {
            return Err(invalid(
                &node,
                "an input value is not a category and zeros=0",
            ));
        }
        let mut out = vec![0f64; pos.len() * k];
        for (i, p) in pos.iter().enumerate() {
            if let Some(p) = p {
                out[i * k + p] = 1.0;
            }
        }
        let mut shape = x.shape().to_vec();
        shape.push(k);
        one(from_f64s(DataType::Float32, shape, &out).expect("float"))
    }))
}

fn build_dict_vectorizer(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let svocab = attrs::opt_strings(ctx.node, "string_vocabulary")?.unwrap_or_default();
    let ivocab = attrs::ints(ctx.node, "int64_vocabulary")?;
    Ok(kernel_fn(move |inputs| {
        let Some(Value::Map { keys, values }) = inputs.first().copied().flatten() else {
            return Err(invalid(&node, "DictVectorizer needs a map input"));
        };
        let n = svocab.len().max(ivocab.len());
        let pos: Vec<Option<usize>> = if keys.dtype() == DataType::String {
            keys.strings()
                .iter()
                .map(|k| svocab.iter().position(|v| v == k))
                .collect()
        } else {
            int_values(&node, keys, "keys")?
                .iter()
                .map(|k| ivocab.iter().position(|v| v == k))
                .collect()
        };
        if values.dtype() == DataType::String {
            let mut out = vec![String::new(); n];
            for (p, v) in pos.iter().zip(values.strings()) {
                if let Some(p) = p {
                    out[*p] = v.clone();
                }
            }
            return one(Tensor::from_strings(vec![1, n], out));
        }
        let vals = features(&node, values)?;
        let mut out = vec![0f64; n];
        for (p, v) in pos.iter().zip(vals) {
            if let Some(p) = p {
                out[*p] = v;
            }
        }
        one(from_f64s(values.dtype(), vec![1, n], &out).expect("numeric dtype"))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register(
        ML,
        "ArrayFeatureExtractor",
        1,
        build_array_feature_extractor,
    );
    r.register(ML, "Binarizer", 1, build_binarizer);
    r.register(ML, "Normalizer", 1, build_normalizer);
    r.register(ML, "Scaler", 1, build_scaler);
    r.register(ML, "Imputer", 1, build_imputer);
    r.register(ML, "FeatureVectorizer", 1, build_feature_vectorizer);
    r.register(ML, "CategoryMapper", 1, build_category_mapper);
    r.register(ML, "OneHotEncoder", 1, build_one_hot_encoder);
    r.register(ML, "DictVectorizer", 1, build_dict_vectorizer);
}

#[cfg(test)]
mod tests {
    use super::super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    fn ml(op: &str, n_in: usize, attrs: Vec<(&str, Attribute)>) -> onnx_runtime_ir::Node {
        node(op, n_in, 1, attrs).with_domain("ai.onnx.ml")
    }

    #[test]
    fn normalizer_scaler_binarizer() {
        // sklearn-style: L2 rows of [[3, 4], [1, 0]]
        let o = run(
            &ml(
                "Normalizer",
                1,
                vec![("norm", Attribute::String("L2".into()))],
            ),
            1,
            &[t(&[2, 2], vec![3f64, 4., 1., 0.])],
        )
        .unwrap();
        assert_eq!(out::<f32>(&o, 0).1, vec![0.6, 0.8, 1.0, 0.0]);
        let n = ml(
            "Scaler",
            1,
            vec![
                ("offset", Attribute::Floats(vec![1.0, 2.0])),
                ("scale", Attribute::Floats(vec![2.0])),
            ],
        );
        let o = run(&n, 1, &[t(&[2, 2], vec![1i64, 2, 3, 4])]).unwrap();
        assert_eq!(out::<f32>(&o, 0).1, vec![0., 0., 4., 4.]);
        let o = run(
            &ml("Binarizer", 1, vec![("threshold", Attribute::Float(0.5))]),
            1,
            &[t(&[3], vec![0.2f32, 0.5, 0.7])],
        )
        .unwrap();
        assert_eq!(out::<f32>(&o, 0).1, vec![0., 0., 1.]);
    }

    #[test]
    fn imputer_and_one_hot() {
        let n = ml(
            "Imputer",
            1,
            vec![
                ("imputed_value_floats", Attribute::Floats(vec![9.0])),
                ("replaced_value_float", Attribute::Float(f32::NAN)),
            ],
        );
        let o = run(&n, 1, &[t(&[3], vec![1f32, f32::NAN, 2.])]).unwrap();
        assert_eq!(out::<f32>(&o, 0).1, vec![1., 9., 2.]);
        let n = ml(
            "OneHotEncoder",
            1,
            vec![("cats_int64s", Attribute::Ints(vec![3, 1]))],
        );
        let o = run(&n, 1, &[t(&[2], vec![1i64, 5])]).unwrap();
        assert_eq!(out::<f32>(&o, 0), (vec![2, 2], vec![0., 1., 0., 0.]));
    }
}
