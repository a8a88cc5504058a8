//! Sequences and optionals: SequenceEmpty, SequenceConstruct, SequenceInsert, SequenceAt,
//! SequenceErase, SequenceLength, SplitToSequence, ConcatFromSequence, Optional,
//! OptionalHasElement, OptionalGetElement.

use super::common::{int_values, invalid, one, to_dim};
use super::concat_split::{concat_tensors, split_tensor};
use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::shape::normalize_axis;
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

/// Input `index` as a sequence (an optional holding one is unwrapped).
fn seq_input<'a>(
    node: &str,
    inputs: &[Option<&'a Value>],
    index: usize,
) -> Result<(DataType, &'a [Tensor]), EpError> {
    match inputs.get(index).copied().flatten() {
        Some(Value::Sequence { dtype, items }) => Ok((*dtype, items)),
        Some(Value::Optional(Some(v))) => seq_input(node, &[Some(v.as_ref())], 0),
        Some(other) => Err(invalid(
            node,
            format!(
                "input {index} must be a sequence, got {}",
                other.kind_name()
            ),
        )),
        None => Err(invalid(node, format!("required input {index} is missing"))),
    }
}

/// An optional scalar position input resolved against `len` (`extra` allows `len` itself).
fn position(
    node: &str,
    inputs: &[Option<&Value>],
    index: usize,
    len: usize,
    extra: bool,
    default: usize,
) -> Result<usize, EpError> {
    let Some(t) = optional_tensor_input(node, inputs, index)? else {
        return Ok(default);
    };
    let p = *int_values(node, t, "position")?
        .first()
        .ok_or_else(|| invalid(node, "position must hold one value"))?;
    let n = len as i64;
    let hi = if extra { n } else { n - 1 };
    let q = if p < 0 { p + n } else { p };
    if q < 0 || q > hi {
        return Err(invalid(
            node,
            format!("position {p} is out of range for a sequence of length {len}"),
        ));
    }
    Ok(q as usize)
}

fn seq(dtype: DataType, items: Vec<Tensor>) -> Result<Vec<Value>, EpError> {
    Ok(vec![Value::Sequence { dtype, items }])
}

fn check_dtype(node: &str, want: DataType, t: &Tensor) -> Result<(), EpError> {
    if t.dtype() != want {
        return Err(invalid(
            node,
            format!("a {} tensor cannot join a sequence of {want}", t.dtype()),
        ));
    }
    Ok(())
}

fn build_sequence_empty(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let code = attrs::int(ctx.node, "dtype", 1)?;
    let dtype = DataType::from_onnx(code as i32).ok_or_else(|| {
        EpError::invalid_attribute(ctx.node, "dtype", format!("unknown type code {code}"))
    })?;
    Ok(kernel_fn(move |_| seq(dtype, vec![])))
}

fn build_sequence_construct(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let items: Vec<Tensor> = (0..inputs.len())
            .map(|i| tensor_input(&node, inputs, i).cloned())
            .collect::<Result<_, _>>()?;
        let dtype = items
            .first()
            .ok_or_else(|| invalid(&node, "SequenceConstruct needs at least one input"))?
            .dtype();
        for t in &items {
            check_dtype(&node, dtype, t)?;
        }
        seq(dtype, items)
    }))
}

fn build_sequence_insert(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let (dtype, items) = seq_input(&node, inputs, 0)?;
        let t = tensor_input(&node, inputs, 1)?;
        check_dtype(&node, dtype, t)?;
        let p = position(&node, inputs, 2, items.len(), true, items.len())?;
        let mut items = items.to_vec();
        items.insert(p, t.clone());
        seq(dtype, items)
    }))
}

fn build_sequence_at(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let (_, items) = seq_input(&node, inputs, 0)?;
        tensor_input(&node, inputs, 1)?;
        let p = position(&node, inputs, 1, items.len(), false, 0)?;
        one(items[p].clone())
    }))
}

fn build_sequence_erase(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let (dtype, items) = seq_input(&node, inputs, 0)?;
        if items.is_empty() {
            return Err(invalid(&node, "cannot erase from an empty sequence"));
        }
        let p = position(&node, inputs, 1, items.len(), false, items.len() - 1)?;
        let mut items = items.to_vec();
        items.remove(p);
        seq(dtype, items)
    }))
}

fn build_sequence_length(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let (_, items) = seq_input(&node, inputs, 0)?;
        one(Tensor::scalar(items.len() as i64))
    }))
}

fn build_split_to_sequence(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let axis = attrs::int(ctx.node, "axis", 0)?;
    let keepdims = attrs::int(ctx.node, "keepdims", 1)? != 0;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let a = normalize_axis(&node, axis, x.rank())?;
        let dim = x.shape()[a];
        let split = optional_tensor_input(&node, inputs, 1)?;
        let (sizes, squeeze) = match split {
            None => (vec![1; dim], !keepdims),
            Some(s) => {
                let v = int_values(&node, s, "split")?;
                if s.rank() == 0 {
                    let c = to_dim(&node, v[0], "split")?;
                    if c == 0 {
                        return Err(invalid(&node, "split size must be positive"));
                    }
                    let sizes = (0..dim.div_ceil(c)).map(|i| c.min(dim - i * c)).collect();
                    (sizes, false)
                } else {
                    let sizes = v
                        .iter()
                        .map(|&d| to_dim(&node, d, "split"))
                        .collect::<Result<Vec<_>, _>>()?;
                    (sizes, false)
                }
            }
        };
        let mut parts = split_tensor(&node, x, a, &sizes)?;
        if squeeze {
            for p in &mut parts {
                let mut s = p.shape().to_vec();
                s.remove(a);
                *p = p.reshaped(s);
            }
        }
        seq(x.dtype(), parts)
    }))
}

fn build_concat_from_sequence(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let axis = attrs::opt_int(ctx.node, "axis")?
        .ok_or_else(|| EpError::invalid_attribute(ctx.node, "axis", "is required"))?;
    let new_axis = attrs::int(ctx.node, "new_axis", 0)? != 0;
    Ok(kernel_fn(move |inputs| {
        let (_, items) = seq_input(&node, inputs, 0)?;
        let first = items
            .first()
            .ok_or_else(|| invalid(&node, "cannot concatenate an empty sequence"))?;
        let rank = first.rank() + new_axis as usize;
        let a = normalize_axis(&node, axis, rank)?;
        let parts: Vec<Tensor> = if new_axis {
            items
                .iter()
                .map(|t| {
                    let mut s = t.shape().to_vec();
                    s.insert(a, 1);
                    t.reshaped(s)
                })
                .collect()
        } else {
            items.to_vec()
        };
        let refs: Vec<&Tensor> = parts.iter().collect();
        one(concat_tensors(&node, &refs, a)?)
    }))
}

fn build_optional(_ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    Ok(kernel_fn(move |inputs| {
        Ok(vec![Value::Optional(
            inputs
                .first()
                .copied()
                .flatten()
                .map(|v| Box::new(v.clone())),
        )])
    }))
}

fn build_optional_has_element(_ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    Ok(kernel_fn(move |inputs| {
        let has = match inputs.first().copied().flatten() {
            None | Some(Value::Optional(None)) => false,
            Some(_) => true,
        };
        one(Tensor::from_bools(vec![], &[has]))
    }))
}

fn build_optional_get_element(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let v18 = ctx.opset >= 18;
    Ok(kernel_fn(move |inputs| {
        match inputs.first().copied().flatten() {
            Some(Value::Optional(Some(v))) => Ok(vec![v.as_ref().clone()]),
            Some(Value::Optional(None)) | None => Err(invalid(
                &node,
                "the optional is empty; check it with OptionalHasElement first",
            )),
            Some(v) if v18 => Ok(vec![v.clone()]),
            Some(v) => Err(invalid(
                &node,
                format!(
                    "input must be an optional at opset 15-17, got {}",
                    v.kind_name()
                ),
            )),
        }
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "SequenceEmpty", 11, build_sequence_empty);
    r.register("", "SequenceConstruct", 11, build_sequence_construct);
    r.register("", "SequenceInsert", 11, build_sequence_insert);
    r.register("", "SequenceAt", 11, build_sequence_at);
    r.register("", "SequenceErase", 11, build_sequence_erase);
    r.register("", "SequenceLength", 11, build_sequence_length);
    r.register("", "SplitToSequence", 11, build_split_to_sequence);
    r.register("", "ConcatFromSequence", 11, build_concat_from_sequence);
    r.register("", "Optional", 15, build_optional);
    for since in [15, 18] {
        r.register("", "OptionalHasElement", since, build_optional_has_element);
        r.register("", "OptionalGetElement", since, build_optional_get_element);
    }
    for since in [24, 25] {
        r.register("", "SplitToSequence", since, build_split_to_sequence);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use crate::Value;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn construct_insert_at_erase() {
        let a = t(&[2], vec![1f32, 2.]);
        let b = t(&[1], vec![3f32]);
        let s = run(
            &node("SequenceConstruct", 2, 1, vec![]),
            11,
            &[a, b.clone()],
        )
        .unwrap();
        let s = run(
            &node("SequenceInsert", 3, 1, vec![]),
            11,
            &[Some(s[0].clone()), b, t(&[], vec![-2i64])],
        )
        .unwrap();
        let len = run(
            &node("SequenceLength", 1, 1, vec![]),
            11,
            &[Some(s[0].clone())],
        )
        .unwrap();
        assert_eq!(out::<i64>(&len, 0).1, vec![3]);
        let at = run(
            &node("SequenceAt", 2, 1, vec![]),
            11,
            &[Some(s[0].clone()), t(&[], vec![1i32])],
        )
        .unwrap();
        assert_eq!(out::<f32>(&at, 0).1, vec![1., 2.]);
        let e = run(
            &node("SequenceErase", 1, 1, vec![]),
            11,
            &[Some(s[0].clone())],
        )
        .unwrap();
        let Value::Sequence { items, .. } = &e[0] else {
            panic!("sequence")
        };
        assert_eq!(items.len(), 2);
        assert!(run(
            &node("SequenceAt", 2, 1, vec![]),
            11,
            &[Some(s[0].clone()), t(&[], vec![3i64])]
        )
        .is_err());
    }

    #[test]
    fn split_and_concat_round_trip() {
        let x = t(&[3, 2], (0..6i32).collect());
        let n = node(
            "SplitToSequence",
            1,
            1,
            vec![("keepdims", Attribute::Int(0))],
        );
        let s = run(&n, 11, &[x]).unwrap();
        let n = node(
            "ConcatFromSequence",
            1,
            1,
            vec![
                ("axis", Attribute::Int(-1)),
                ("new_axis", Attribute::Int(1)),
            ],
        );
        let o = run(&n, 11, &[Some(s[0].clone())]).unwrap();
        // np.stack(list(arange(6).reshape(3,2)), axis=-1)
        assert_eq!(out::<i32>(&o, 0), (vec![2, 3], vec![0, 2, 4, 1, 3, 5]));
    }

    #[test]
    fn optionals() {
        let o = run(&node("Optional", 1, 1, vec![]), 15, &[t(&[1], vec![1u8])]).unwrap();
        let h = run(
            &node("OptionalHasElement", 1, 1, vec![]),
            18,
            &[Some(o[0].clone())],
        )
        .unwrap();
        assert_eq!(h[0].as_tensor().unwrap().bytes(), &[1]);
        let h = run(&node("OptionalHasElement", 1, 1, vec![]), 18, &[None]).unwrap();
        assert_eq!(h[0].as_tensor().unwrap().bytes(), &[0]);
        let g = run(
            &node("OptionalGetElement", 1, 1, vec![]),
            18,
            &[Some(o[0].clone())],
        )
        .unwrap();
        assert_eq!(out::<u8>(&g, 0).1, vec![1]);
        assert!(run(
            &node("OptionalGetElement", 1, 1, vec![]),
            15,
            &[Some(Value::Optional(None))]
        )
        .is_err());
    }
}
