//! The graph intermediate representation shared by every crate of the runtime.
//!
//! Nothing here depends on a device or a file format: the loader turns `.onnx` files into a
//! [`Graph`], execution providers read [`Node`]s, and the session walks the graph.
#![forbid(unsafe_code)]

mod attribute;
mod dtype;
mod graph;
mod shape;
mod tensor;

pub use attribute::{Attribute, AttributeKind, SparseTensorData};
pub use dtype::DataType;
pub use graph::{Graph, Node, NodeId, Value, ValueId};
pub use shape::{compute_contiguous_strides, static_shape, Dim, Shape};
pub use tensor::{SharedBytes, TensorBytes, TensorData, ValueType};
