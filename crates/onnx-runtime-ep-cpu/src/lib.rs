//! The CPU execution provider.
//!
//! Kernels implement [`CpuKernel`]: they take host [`Value`]s (tensors, sequences, optionals,
//! maps) and return new ones, so data-dependent output shapes (NonZero, Unique) need no
//! special path. Each op family lives in its own module under [`ops`] and registers its
//! kernels, keyed by (domain, op, since-version), next to its code.
//! [`CpuExecutionProvider`] also implements the generic
//! [`onnx_runtime_ep_api::ExecutionProvider`] over raw host pointers.

pub mod attrs;
pub mod dispatch;
pub mod kernel;
pub mod ops;
mod provider;
pub mod shape;
pub mod tensor;

pub use kernel::{BuildContext, CpuFactory, CpuKernel, CpuRegistry};
pub use provider::CpuExecutionProvider;
pub use tensor::{Element, Tensor, Value};

/// The domain of the runtime's own fused ops, which only its graph optimizer writes
/// (MatMulBias: `act(A @ B + bias)`). Models never carry it.
pub const INTERNAL_DOMAIN: &str = "ai.onnx_runtime_rs.internal";

/// The registry with every CPU kernel.
pub fn registry() -> &'static CpuRegistry {
    static REGISTRY: std::sync::OnceLock<CpuRegistry> = std::sync::OnceLock::new();
    REGISTRY.get_or_init(|| {
        let mut r = CpuRegistry::new();
        ops::register_all(&mut r);
        r
    })
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Helpers shared by every op family's unit tests.
    use onnx_runtime_ir::{Attribute, Node, NodeId, ValueId};

    /// A node with inputs `0..n_in`, outputs `100..100 + n_out` and `attrs`.
    pub fn node(op: &str, n_in: usize, n_out: usize, attrs: Vec<(&str, Attribute)>) -> Node {
        let mut n = Node::new(
            NodeId(0),
            op,
            (0..n_in).map(|i| Some(ValueId(i))).collect(),
            (0..n_out).map(|i| ValueId(100 + i)).collect(),
        );
        for (k, v) in attrs {
            n.attributes.insert(k.to_string(), v);
        }
        n
    }
}
