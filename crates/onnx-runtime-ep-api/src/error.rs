//! Errors execution providers return. Each names the node, the op, the dtype or shape at
//! fault where one is known, and says what the user can do.

use onnx_runtime_ir::{DataType, Node};

pub type EpResult<T> = Result<T, EpError>;

#[derive(Debug, thiserror::Error)]
pub enum EpError {
    #[error("{node}: the {ep} execution provider has no kernel for {domain_op} at opset {opset}; {hint}")]
    UnsupportedOp {
        ep: String,
        node: String,
        domain_op: String,
        opset: u64,
        hint: String,
    },
    #[error("{node}: {op} does not support dtype {dtype} ({detail}); {hint}")]
    UnsupportedDtype {
        node: String,
        op: String,
        dtype: DataType,
        detail: String,
        hint: String,
    },
    #[error("{node}: invalid attribute '{name}': {message}")]
    InvalidAttribute {
        node: String,
        name: String,
        message: String,
    },
    #[error("{node}: invalid input: {message}")]
    InvalidInput { node: String, message: String },
    #[error("{node}: graph capture: {message}")]
    Capture { node: String, message: String },
    #[error("{context}: device error: {message}")]
    Device { context: String, message: String },
    #[error("{0}")]
    Other(String),
}

impl EpError {
    /// The user gave the node an input it cannot take.
    pub fn invalid_input(node: &Node, message: impl Into<String>) -> Self {
        EpError::InvalidInput {
            node: node.describe(),
            message: message.into(),
        }
    }

    pub fn invalid_attribute(node: &Node, name: &str, message: impl Into<String>) -> Self {
        EpError::InvalidAttribute {
            node: node.describe(),
            name: name.into(),
            message: message.into(),
        }
    }

    pub fn unsupported_dtype(node: &Node, dtype: DataType, detail: impl Into<String>) -> Self {
        EpError::UnsupportedDtype {
            node: node.describe(),
            op: node.op_type.clone(),
            dtype,
            detail: detail.into(),
            hint:
                "cast the input to a supported type, or run this node on another execution provider"
                    .into(),
        }
    }

    pub fn unsupported_op(ep: &str, node: &Node, opset: u64) -> Self {
        let domain_op = if node.normalized_domain().is_empty() {
            node.op_type.clone()
        } else {
            format!("{}::{}", node.domain, node.op_type)
        };
        EpError::UnsupportedOp {
            ep: ep.into(),
            node: node.describe(),
            domain_op,
            opset,
            hint: "run the node on another execution provider (the CPU provider covers the standard operator set), or ask for this op to be added".into(),
        }
    }

    pub fn device(context: impl Into<String>, message: impl std::fmt::Display) -> Self {
        EpError::Device {
            context: context.into(),
            message: message.to_string(),
        }
    }
}
