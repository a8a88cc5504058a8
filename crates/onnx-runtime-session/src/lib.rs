//! Sessions: compile an ONNX graph once (kernels built, control-flow bodies compiled, a
//! liveness plan that frees every intermediate after its last reader) and run it from any
//! number of threads.
//!
//! ```no_run
//! use onnx_runtime_session::{Session, SessionOptions};
//! # fn demo(graph: &onnx_runtime_ir::Graph, x: onnx_runtime_ep_cpu::Value) {
//! let session = Session::from_graph(graph, SessionOptions::default()).unwrap();
//! let outputs = session.run(&[("x", x)]).unwrap();
//! # }
//! ```

mod binding;
mod capture;
mod compile;
mod constant;
mod control;
pub mod convert;
mod device;
mod error;
mod exec;
pub mod optimize;
mod placement;
pub mod precision;
mod profile;
mod session;
#[cfg(test)]
mod tests;
mod workers;

pub use binding::{DeviceValue, Input, Output, OutputOn};
pub use capture::{CaptureReport, CudaGraph, SignatureReport};
pub use compile::{HostNode, RefusedNode};
pub use error::{MissingOp, SessionError, SessionResult};
pub use onnx_runtime_ep_cpu::{Tensor, Value};
pub use optimize::optimize_for_device;
pub use optimize::{optimize, OptimizationLevel, OptimizeReport};
pub use precision::{Precision, PrecisionReport};
pub use profile::{OpTime, Profile};
pub use session::{
    describe_type, describe_value, unsupported_ops, IoInfo, Session, SessionOptions,
};
