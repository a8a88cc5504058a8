//! LabelEncoder (ai.onnx.ml 1, 2 and 4): maps keys to values with a default.

use super::super::common::{invalid, one};
use super::super::gather::gather_tensor;
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{Attribute, DataType, Node};
use std::collections::HashMap;

/// A hashable key: strings, integers, or floats by their (canonical) f64 bits.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
enum Key {
    S(String),
    I(i64),
    F(u64),
}

fn float_key(v: f64) -> Key {
    if v.is_nan() {
        Key::F(f64::NAN.to_bits())
    } else if v == 0.0 {
        Key::F(0f64.to_bits())
    } else {
        Key::F(v.to_bits())
    }
}

/// The keys of a tensor's elements, by its dtype.
fn keys_of(node: &str, t: &Tensor) -> Result<Vec<Key>, EpError> {
    if t.dtype() == DataType::String {
        return Ok(t.strings().iter().cloned().map(Key::S).collect());
    }
    if t.dtype().is_float() {
        return Ok(t
            .to_f64_vec()
            .expect("float")
            .into_iter()
            .map(float_key)
            .collect());
    }
    t.to_i64_vec()
        .map(|v| v.into_iter().map(Key::I).collect())
        .ok_or_else(|| {
            invalid(
                node,
                format!("keys of type {} are not supported", t.dtype()),
            )
        })
}

fn tensor_attr(node: &Node, name: &str) -> Result<Option<Tensor>, EpError> {
    match node.attribute(name) {
        Some(Attribute::Tensor(t)) => Tensor::from_tensor_data(t)
            .map(Some)
            .map_err(|e| EpError::invalid_attribute(node, name, e)),
        Some(a) => Err(EpError::invalid_attribute(
            node,
            name,
            format!("must be a tensor, got {:?}", a.kind()),
        )),
        None => Ok(None),
    }
}

/// A 1-D tensor from whichever of `{prefix}_strings`, `_int64s`, `_floats` or `_tensor` is set.
fn list_attr(node: &Node, prefix: &str) -> Result<Option<Tensor>, EpError> {
    if let Some(t) = tensor_attr(node, &format!("{prefix}_tensor"))? {
        return Ok(Some(t.reshaped(vec![t.numel()])));
    }
    if let Some(s) = attrs::opt_strings(node, &format!("{prefix}_strings"))? {
        return Ok(Some(Tensor::from_strings(vec![s.len()], s)));
    }
    if let Some(v) = attrs::opt_ints(node, &format!("{prefix}_int64s"))? {
        return Ok(Some(Tensor::from_vec(vec![v.len()], v)));
    }
    if let Some(v) = attrs::opt_floats(node, &format!("{prefix}_floats"))? {
        return Ok(Some(Tensor::from_vec(vec![v.len()], v)));
    }
    Ok(None)
}

fn default_for(node: &Node, dtype: DataType) -> Result<Tensor, EpError> {
    if let Some(t) = tensor_attr(node, "default_tensor")? {
        if t.dtype() != dtype || t.numel() != 1 {
            return Err(EpError::invalid_attribute(
                node,
                "default_tensor",
                format!("must be one {dtype} value"),
            ));
        }
        return Ok(t.reshaped(vec![1]));
    }
    let vals = |v: f64| super::super::common::from_f64s(dtype, vec![1], &[v]);
    Ok(match dtype {
        DataType::String => Tensor::from_strings(
            vec![1],
            vec![attrs::string(node, "default_string", "_Unused")?],
        ),
        DataType::Float32 => {
            Tensor::from_vec(vec![1], vec![attrs::float(node, "default_float", -0.0)?])
        }
        DataType::Int64 => Tensor::from_vec(vec![1], vec![attrs::int(node, "default_int64", -1)?]),
        d if d.is_float() => vals(-0.0).expect("float"),
        d => vals(-1.0).ok_or_else(|| {
            EpError::invalid_attribute(node, "values", format!("{d} values are not supported"))
        })?,
    })
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let (keys, values) = if ctx.opset < 2 {
        // LabelEncoder-1: strings <-> their index in classes_strings.
        let classes = attrs::opt_strings(ctx.node, "classes_strings")?.unwrap_or_default();
        (None, Some(classes))
    } else {
        (
            Some((
                list_attr(ctx.node, "keys")?.ok_or_else(|| {
                    EpError::invalid_attribute(ctx.node, "keys", "one keys_* attribute is required")
                })?,
                list_attr(ctx.node, "values")?.ok_or_else(|| {
                    EpError::invalid_attribute(
                        ctx.node,
                        "values",
                        "one values_* attribute is required",
                    )
                })?,
            )),
            None,
        )
    };
    if let Some(classes) = values {
        let d_int = attrs::int(ctx.node, "default_int64", -1)?;
        let d_str = attrs::string(ctx.node, "default_string", "_Unused")?;
        let index: HashMap<String, i64> = classes
            .iter()
            .enumerate()
            .map(|(i, s)| (s.clone(), i as i64))
            .collect();
        return Ok(kernel_fn(move |inputs| {
            let x = tensor_input(&node, inputs, 0)?;
            if x.dtype() == DataType::String {
                let v: Vec<i64> = x
                    .strings()
                    .iter()
                    .map(|s| *index.get(s).unwrap_or(&d_int))
                    .collect();
                return one(Tensor::from_vec(x.shape().to_vec(), v));
            }
            let v: Vec<String> = super::super::common::int_values(&node, x, "X")?
                .iter()
                .map(|&i| {
                    usize::try_from(i)
                        .ok()
                        .and_then(|i| classes.get(i))
                        .cloned()
                        .unwrap_or_else(|| d_str.clone())
                })
                .collect();
            one(Tensor::from_strings(x.shape().to_vec(), v))
        }));
    }
    let (k, v) = keys.expect("v2+ keys");
    if k.numel() != v.numel() {
        return Err(EpError::invalid_attribute(
            ctx.node,
            "keys",
            format!("{} keys for {} values", k.numel(), v.numel()),
        ));
    }
    let default = default_for(ctx.node, v.dtype())?;
    let table = super::super::concat_split::concat_tensors(&node, &[&v, &default], 0)?;
    let n = v.numel() as i64;
    let mut map = HashMap::new();
    for (i, key) in keys_of(&node, &k)?.into_iter().enumerate() {
        map.entry(key).or_insert(i as i64);
    }
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let idx: Vec<i64> = keys_of(&node, x)?
            .iter()
            .map(|key| *map.get(key).unwrap_or(&n))
            .collect();
        let idx = Tensor::from_vec(x.shape().to_vec(), idx);
        one(gather_tensor(&node, &table, &idx, 0)?)
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 2, 4] {
        r.register("ai.onnx.ml", "LabelEncoder", since, build);
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::common::testutil::*;
    use crate::{Tensor, Value};
    use onnx_runtime_ir::Attribute;

    #[test]
    fn string_to_int_with_default() {
        let n = node(
            "LabelEncoder",
            1,
            1,
            vec![
                (
                    "keys_strings",
                    Attribute::Strings(vec!["a".into(), "b".into()]),
                ),
                ("values_int64s", Attribute::Ints(vec![7, 8])),
                ("default_int64", Attribute::Int(42)),
            ],
        )
        .with_domain("ai.onnx.ml");
        let x = Some(Value::Tensor(Tensor::from_strings(
            vec![3],
            vec!["b".into(), "z".into(), "a".into()],
        )));
        let o = run(&n, 2, &[x]).unwrap();
        assert_eq!(out::<i64>(&o, 0).1, vec![8, 42, 7]);
    }
}
