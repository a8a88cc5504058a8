//! Loads `.onnx` models into the runtime's graph IR ([`onnx_runtime_ir::Graph`]) and writes
//! them back.
//!
//! - [`Model::load`] memory-maps the file and resolves external data in the model's folder
//!   (never outside it); [`Model::from_bytes`] refuses external data.
//! - Model-local functions are inlined by default ([`LoadOptions::inline_functions`]) and
//!   kept in [`Model::functions`].
//! - [`data`] reads and writes the values of the ONNX test data (`TensorProto`,
//!   `SequenceProto`, `OptionalProto`, `MapProto`).
//!
//! Malformed or hostile input gives a [`LoadError`], never a panic; sizes are checked against
//! the data actually present before anything is allocated for them.

pub mod data;
mod decode;
mod encode;
mod error;
mod external;
mod external_writer;
mod function;
mod inline;
mod model;
mod types;

/// Rust types generated from `proto/onnx.proto` (ONNX IR version 13 and the test-data protos).
pub mod proto {
    #![allow(clippy::all, missing_docs)]
    include!(concat!(env!("OUT_DIR"), "/onnx.rs"));
}

pub use error::LoadError;
pub use external_writer::ExternalDataOptions;
pub use function::Function;
pub use model::{LoadOptions, Model};
