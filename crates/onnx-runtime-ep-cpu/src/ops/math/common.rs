//! What every math kernel needs: the node's name for errors, input access and registration.

use crate::kernel::{optional_tensor_input, tensor_input};
use crate::{CpuFactory, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{DataType, Node};

/// The node a kernel was built for, kept for error messages.
#[derive(Clone, Debug)]
pub struct NodeInfo {
    pub desc: String,
    pub op: String,
}

impl NodeInfo {
    pub fn new(node: &Node) -> NodeInfo {
        NodeInfo {
            desc: node.describe(),
            op: node.op_type.clone(),
        }
    }

    /// The input dtype is not one this op accepts.
    pub fn bad_dtype(&self, dtype: DataType, detail: impl Into<String>) -> EpError {
        EpError::UnsupportedDtype {
            node: self.desc.clone(),
            op: self.op.clone(),
            dtype,
            detail: detail.into(),
            hint: "cast the input to a type the ONNX spec allows for this op".into(),
        }
    }

    pub fn invalid(&self, message: impl Into<String>) -> EpError {
        EpError::InvalidInput {
            node: self.desc.clone(),
            message: message.into(),
        }
    }

    pub fn input<'a>(&self, inputs: &[Option<&'a Value>], i: usize) -> Result<&'a Tensor, EpError> {
        tensor_input(&self.desc, inputs, i)
    }

    pub fn opt_input<'a>(
        &self,
        inputs: &[Option<&'a Value>],
        i: usize,
    ) -> Result<Option<&'a Tensor>, EpError> {
        optional_tensor_input(&self.desc, inputs, i)
    }

    /// Inputs `a` and `b` must have the same dtype.
    pub fn same_dtype(&self, a: &Tensor, b: &Tensor) -> Result<(), EpError> {
        if a.dtype() != b.dtype() {
            return Err(self.invalid(format!(
                "inputs must have the same type, got {} and {}",
                a.dtype(),
                b.dtype()
            )));
        }
        Ok(())
    }

    /// A scalar (one-element) input's value as f64.
    #[allow(dead_code)]
    pub fn scalar_f64(&self, t: &Tensor, what: &str) -> Result<f64, EpError> {
        if t.numel() != 1 {
            return Err(self.invalid(format!(
                "{what} must be a scalar (one element), got shape {:?}",
                t.shape()
            )));
        }
        t.to_f64_vec()
            .map(|v| v[0])
            .ok_or_else(|| self.bad_dtype(t.dtype(), format!("{what} must be numeric")))
    }

    /// A 1-D (or scalar) integer input's values.
    #[allow(dead_code)]
    pub fn ints_input(&self, t: &Tensor, what: &str) -> Result<Vec<i64>, EpError> {
        if t.rank() > 1 {
            return Err(self.invalid(format!("{what} must be 1-D, got shape {:?}", t.shape())));
        }
        match t.dtype() {
            DataType::Int64 | DataType::Int32 => Ok(t.to_i64_vec().unwrap_or_default()),
            d => Err(self.bad_dtype(d, format!("{what} must be int64"))),
        }
    }
}

/// Registers `factory` for `op` in `domain` at each since-version in `versions`.
pub fn register_versions(
    r: &mut CpuRegistry,
    domain: &str,
    op: &str,
    versions: &[u64],
    factory: CpuFactory,
) {
    for &v in versions {
        r.register(domain, op, v, factory);
    }
}
