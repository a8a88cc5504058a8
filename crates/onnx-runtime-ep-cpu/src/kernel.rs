//! The CPU kernel interface and its registry.

use crate::Value;
use onnx_runtime_ep_api::{EpError, OpRegistry};
use onnx_runtime_ir::Node;

/// A CPU kernel built for one node. `run` gets the node's inputs by position (`None` for an
/// omitted optional input) and returns one value per node output.
pub trait CpuKernel: Send + Sync {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError>;
}

/// What a factory gets to build a kernel: the node, the opset of its domain, and constant
/// input values where the session knows them (initializers), which lets kernels pre-pack
/// weights or read shape inputs once.
pub struct BuildContext<'a> {
    pub node: &'a Node,
    pub opset: u64,
    /// One entry per node input: the value if it is a constant.
    pub constant_inputs: &'a [Option<&'a Value>],
}

impl<'a> BuildContext<'a> {
    pub fn new(node: &'a Node, opset: u64) -> Self {
        BuildContext {
            node,
            opset,
            constant_inputs: &[],
        }
    }

    pub fn constant(&self, index: usize) -> Option<&'a Value> {
        self.constant_inputs.get(index).copied().flatten()
    }
}

pub type CpuFactory = fn(&BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError>;
pub type CpuRegistry = OpRegistry<CpuFactory>;

/// A kernel from a closure, for ops whose state is their parsed attributes.
pub struct FnKernel<F>(pub F);

impl<F> CpuKernel for FnKernel<F>
where
    F: Fn(&[Option<&Value>]) -> Result<Vec<Value>, EpError> + Send + Sync,
{
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        (self.0)(inputs)
    }
}

/// Boxes a closure as a kernel.
pub fn kernel_fn<F>(f: F) -> Box<dyn CpuKernel>
where
    F: Fn(&[Option<&Value>]) -> Result<Vec<Value>, EpError> + Send + Sync + 'static,
{
    Box::new(FnKernel(f))
}

/// Input `index` as a tensor; an error naming `node` if it is missing or not a tensor.
pub fn tensor_input<'a>(
    node: &str,
    inputs: &[Option<&'a Value>],
    index: usize,
) -> Result<&'a crate::Tensor, EpError> {
    match inputs.get(index).copied().flatten() {
        Some(Value::Tensor(t)) => Ok(t),
        Some(other) => Err(EpError::InvalidInput {
            node: node.to_string(),
            message: format!("input {index} must be a tensor, got {}", other.kind_name()),
        }),
        None => Err(EpError::InvalidInput {
            node: node.to_string(),
            message: format!("required input {index} is missing"),
        }),
    }
}

/// Input `index` as a tensor if it is present (optional inputs may be omitted).
pub fn optional_tensor_input<'a>(
    node: &str,
    inputs: &[Option<&'a Value>],
    index: usize,
) -> Result<Option<&'a crate::Tensor>, EpError> {
    match inputs.get(index).copied().flatten() {
        None => Ok(None),
        Some(Value::Tensor(t)) => Ok(Some(t)),
        Some(Value::Optional(None)) => Ok(None),
        Some(Value::Optional(Some(v))) => match v.as_ref() {
            Value::Tensor(t) => Ok(Some(t)),
            other => Err(EpError::InvalidInput {
                node: node.to_string(),
                message: format!("input {index} must be a tensor, got {}", other.kind_name()),
            }),
        },
        Some(other) => Err(EpError::InvalidInput {
            node: node.to_string(),
            message: format!("input {index} must be a tensor, got {}", other.kind_name()),
        }),
    }
}
