//! Test helpers: run a registered kernel on tensors and compare with reference values.
#![allow(dead_code)]

use crate::kernel::BuildContext;
use crate::{Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{Attribute, Node, NodeId, ValueId};

/// Runs `op` (domain `domain`, model opset `opset`) with `attrs` on `inputs` (`None` = omitted).
pub fn run_op(
    domain: &str,
    op: &str,
    opset: u64,
    attrs: Vec<(&str, Attribute)>,
    inputs: &[Option<Tensor>],
) -> Result<Vec<Tensor>, EpError> {
    let mut node = Node::new(
        NodeId(0),
        op,
        (0..inputs.len()).map(|i| Some(ValueId(i))).collect(),
        vec![ValueId(100)],
    )
    .with_domain(domain);
    for (k, v) in attrs {
        node.attributes.insert(k.to_string(), v);
    }
    let (_, factory) = crate::registry()
        .lookup(domain, op, opset)
        .unwrap_or_else(|| panic!("{op} is not registered at opset {opset}"));
    let kernel = factory(&BuildContext::new(&node, opset))?;
    let values: Vec<Option<Value>> = inputs
        .iter()
        .map(|t| t.clone().map(Value::Tensor))
        .collect();
    let refs: Vec<Option<&Value>> = values.iter().map(|v| v.as_ref()).collect();
    Ok(kernel
        .run(&refs)?
        .into_iter()
        .map(|v| v.into_tensor().expect("tensor output"))
        .collect())
}

/// `run_op` in the standard domain with all inputs present, returning the first output.
pub fn run1(op: &str, opset: u64, attrs: Vec<(&str, Attribute)>, inputs: &[Tensor]) -> Tensor {
    let inputs: Vec<Option<Tensor>> = inputs.iter().cloned().map(Some).collect();
    run_op("", op, opset, attrs, &inputs).unwrap().remove(0)
}

/// Asserts `got` (any float dtype or integer) is within `atol + rtol * |want|` of `want`.
pub fn assert_close(got: &Tensor, want: &[f64], shape: &[usize], rtol: f64, atol: f64) {
    assert_eq!(got.shape(), shape, "shape");
    let g = got.to_f64_vec().expect("numeric output");
    assert_eq!(g.len(), want.len());
    for (i, (&x, &y)) in g.iter().zip(want).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= atol + rtol * y.abs();
        assert!(ok, "element {i}: got {x}, want {y}");
    }
}

pub fn f32s(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as f32).collect())
}

pub fn f64s(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

pub fn f16s(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_vec(
        shape.to_vec(),
        v.iter().map(|&x| half::f16::from_f64(x)).collect(),
    )
}

pub fn bf16s(shape: &[usize], v: &[f64]) -> Tensor {
    Tensor::from_vec(
        shape.to_vec(),
        v.iter().map(|&x| half::bf16::from_f64(x)).collect(),
    )
}

pub fn i64s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.to_vec())
}

pub fn i32s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as i32).collect())
}

pub fn i8s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as i8).collect())
}

pub fn u8s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as u8).collect())
}

pub fn u32s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as u32).collect())
}

pub fn u64s(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_vec(shape.to_vec(), v.iter().map(|&x| x as u64).collect())
}

pub fn bools(shape: &[usize], v: &[i64]) -> Tensor {
    Tensor::from_bools(
        shape.to_vec(),
        &v.iter().map(|&x| x != 0).collect::<Vec<_>>(),
    )
}

pub fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

pub fn int(v: i64) -> Attribute {
    Attribute::Int(v)
}

pub fn float(v: f32) -> Attribute {
    Attribute::Float(v)
}

pub fn string(v: &str) -> Attribute {
    Attribute::String(v.to_string())
}

/// Runs a case and checks its first output against the reference.
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn check(
    op: &str,
    opset: u64,
    attrs: Vec<(&str, Attribute)>,
    inputs: &[Tensor],
    want_dtype: onnx_runtime_ir::DataType,
    shape: &[usize],
    want: &[f64],
    tol: f64,
) {
    check_output(op, opset, attrs, inputs, 0, want_dtype, shape, want, tol)
}

/// Like [`check`], for output `index`.
#[track_caller]
#[allow(clippy::too_many_arguments)]
pub fn check_output(
    op: &str,
    opset: u64,
    attrs: Vec<(&str, Attribute)>,
    inputs: &[Tensor],
    index: usize,
    want_dtype: onnx_runtime_ir::DataType,
    shape: &[usize],
    want: &[f64],
    tol: f64,
) {
    let ins: Vec<Option<Tensor>> = inputs.iter().cloned().map(Some).collect();
    let got = run_op("", op, opset, attrs, &ins).unwrap().remove(index);
    assert_eq!(got.dtype(), want_dtype, "{op}: dtype");
    let ctx = op.to_string();
    let g = got.to_f64_vec().expect("numeric output");
    assert_eq!(got.shape(), shape, "{ctx}: shape");
    for (i, (&x, &y)) in g.iter().zip(want).enumerate() {
        let ok = (x.is_nan() && y.is_nan()) || x == y || (x - y).abs() <= tol * (1.0 + y.abs());
        assert!(ok, "{ctx}: element {i}: got {x}, want {y}");
    }
}
