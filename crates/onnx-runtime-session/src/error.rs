//! Errors a session returns: each names the model value or node at fault and what to do.

use onnx_runtime_ep_api::EpError;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The model file could not be read or parsed.
    #[error("cannot load the model: {0}")]
    Load(String),
    /// Ops without a kernel, every one of them at once.
    #[error("the CPU execution provider has no kernel for {}: {}; run the model on a runtime that has them, or ask for these ops to be added", if .0.len() == 1 { "this op" } else { "these ops" }, format_missing(.0))]
    UnsupportedOps(Vec<MissingOp>),
    /// The graph itself is malformed (undefined values, cycles, bad control-flow bodies).
    #[error("invalid graph: {0}")]
    InvalidGraph(String),
    #[error(
        "missing input '{name}': the model needs it (declared as {expected}); pass it by name"
    )]
    MissingInput { name: String, expected: String },
    #[error("unknown input '{name}': the model's inputs are {known}")]
    UnknownInput { name: String, known: String },
    #[error("input '{name}': expected {expected}, got {got}")]
    InputMismatch {
        name: String,
        expected: String,
        got: String,
    },
    /// A call the session cannot honour as asked (IO binding: an input bound twice, an
    /// output asked for on a device the session does not have).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A kernel failed to build or to run.
    #[error("{0}")]
    Kernel(#[from] EpError),
    /// An error inside a control-flow body, with where it happened.
    #[error("{context}: {source}")]
    Subgraph {
        context: String,
        #[source]
        source: Box<SessionError>,
    },
}

/// An op the execution provider cannot run: (domain, op, opset of the domain in the model).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct MissingOp {
    pub domain: String,
    pub op: String,
    pub opset: u64,
}

impl std::fmt::Display for MissingOp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.domain.is_empty() {
            write!(f, "{} (opset {})", self.op, self.opset)
        } else {
            write!(f, "{}::{} (opset {})", self.domain, self.op, self.opset)
        }
    }
}

fn format_missing(ops: &[MissingOp]) -> String {
    ops.iter()
        .map(|m| m.to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl SessionError {
    pub(crate) fn in_subgraph(self, context: impl Into<String>) -> SessionError {
        SessionError::Subgraph {
            context: context.into(),
            source: Box::new(self),
        }
    }

    pub(crate) fn invalid(message: impl Into<String>) -> SessionError {
        SessionError::InvalidGraph(message.into())
    }
}

pub type SessionResult<T> = Result<T, SessionError>;
