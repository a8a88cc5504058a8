//! `Constant` nodes are evaluated once, when the session is built: their value becomes a
//! constant that kernels downstream see at build time. The CPU registry's `Constant` kernel is
//! used when it has one; otherwise the attribute is converted here.

use crate::compile::Compiler;
use crate::error::{SessionError, SessionResult};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ep_cpu::{BuildContext, Tensor, Value};
use onnx_runtime_ir::{Attribute, Node};

pub(crate) fn fold_constant(compiler: &Compiler<'_>, node: &Node) -> SessionResult<Value> {
    let opset = compiler.opset(node)?;
    if let Some((_, factory)) = compiler.registry.lookup("", "Constant", opset) {
        let kernel = factory(&BuildContext::new(node, opset))?;
        let mut out = kernel.run(&[])?;
        if out.is_empty() {
            return Err(EpError::invalid_input(node, "Constant produced no value").into());
        }
        return Ok(out.swap_remove(0));
    }
    constant_from_attributes(node).map_err(SessionError::from)
}

/// The value of a `Constant` node from whichever `value*` attribute it carries.
pub(crate) fn constant_from_attributes(node: &Node) -> Result<Value, EpError> {
    let mut found = node
        .attributes
        .iter()
        .filter(|(k, _)| k.starts_with("value") || k.as_str() == "sparse_value");
    let (name, attr) = found.next().ok_or_else(|| {
        EpError::invalid_attribute(node, "value", "Constant needs exactly one value attribute")
    })?;
    if found.next().is_some() {
        return Err(EpError::invalid_attribute(
            node,
            name,
            "Constant must carry exactly one of value, value_float(s), value_int(s), value_string(s), sparse_value",
        ));
    }
    let tensor = match (name.as_str(), attr) {
        ("value", Attribute::Tensor(t)) => {
            Tensor::from_tensor_data(t).map_err(|e| EpError::invalid_attribute(node, "value", e))?
        }
        ("value_float", Attribute::Float(v)) => Tensor::scalar(*v),
        ("value_floats", Attribute::Floats(v)) => Tensor::from_slice(vec![v.len()], v),
        ("value_int", Attribute::Int(v)) => Tensor::scalar(*v),
        ("value_ints", Attribute::Ints(v)) => Tensor::from_slice(vec![v.len()], v),
        ("value_string", Attribute::String(v)) => Tensor::from_strings(vec![], vec![v.clone()]),
        ("value_strings", Attribute::Strings(v)) => Tensor::from_strings(vec![v.len()], v.clone()),
        ("sparse_value", Attribute::SparseTensor(sp)) => {
            densify(sp).map_err(|e| EpError::invalid_attribute(node, "sparse_value", e))?
        }
        (other, attr) => {
            return Err(EpError::invalid_attribute(
                node,
                other,
                format!("unsupported Constant attribute of kind {:?}", attr.kind()),
            ))
        }
    };
    Ok(Value::Tensor(tensor))
}

/// A dense tensor from ONNX sparse storage: `indices` are either `[nnz]` linear offsets or
/// `[nnz, rank]` coordinates.
pub(crate) fn densify(sp: &onnx_runtime_ir::SparseTensorData) -> Result<Tensor, String> {
    let bad = |msg: String| msg;
    let shape: Vec<usize> = sp
        .dims
        .iter()
        .map(|&d| usize::try_from(d).map_err(|_| bad(format!("negative dimension {d}"))))
        .collect::<Result<_, _>>()?;
    let values = Tensor::from_tensor_data(&sp.values).map_err(bad)?;
    let indices = sp
        .indices
        .to_i64_vec()
        .ok_or_else(|| bad("indices must be integers".into()))?;
    let nnz = values.numel();
    let numel: usize = shape.iter().product();
    let strides = onnx_runtime_ir::compute_contiguous_strides(&shape);
    let linear: Vec<usize> = if indices.len() == nnz {
        indices.iter().map(|&i| i as usize).collect()
    } else if indices.len() == nnz * shape.len() {
        indices
            .chunks(shape.len().max(1))
            .map(|c| c.iter().zip(&strides).map(|(&i, &s)| i as usize * s).sum())
            .collect()
    } else {
        return Err(bad(format!(
            "{} indices do not fit {nnz} values of a rank-{} tensor",
            indices.len(),
            shape.len()
        )));
    };
    if let Some(i) = linear.iter().find(|&&i| i >= numel) {
        return Err(bad(format!(
            "index {i} is outside a tensor of {numel} elements"
        )));
    }
    let mut out = Tensor::zeros(values.dtype(), shape);
    if values.dtype() == onnx_runtime_ir::DataType::String {
        let src = values.strings().to_vec();
        let dst = out.strings_mut();
        for (k, &i) in linear.iter().enumerate() {
            dst[i] = src[k].clone();
        }
    } else {
        let width = values.dtype().element_size().ok_or_else(|| {
            bad(format!(
                "{} sparse values are not supported",
                values.dtype()
            ))
        })?;
        let src = values.bytes().to_vec();
        let dst = out.bytes_mut();
        for (k, &i) in linear.iter().enumerate() {
            dst[i * width..(i + 1) * width].copy_from_slice(&src[k * width..(k + 1) * width]);
        }
    }
    Ok(out)
}
