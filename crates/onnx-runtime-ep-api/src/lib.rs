//! What every execution provider implements, and what the session calls.
//!
//! An [`ExecutionProvider`] builds a [`Kernel`] for one node and its resolved input shapes
//! ([`ExecutionProvider::get_kernel`]), hands out device memory ([`DeviceBuffer`]) and copies
//! bytes between host and device. Kernels read [`TensorView`]s and write [`TensorMut`]s: raw
//! device pointers with a dtype, a shape and element strides. Kernels are looked up in an
//! [`OpRegistry`] keyed by (domain, op, since-version).

mod error;
mod kernel;
mod provider;
mod registry;
mod tensor;

pub use error::{EpError, EpResult};
pub use kernel::{CaptureSupport, Kernel, KernelFactory, KernelRequest};
pub use provider::{DeviceGraph, ExecutionProvider};
pub use registry::OpRegistry;
pub use tensor::{
    is_contiguous, DeviceBuffer, DeviceId, DeviceKind, DevicePtr, DevicePtrMut, TensorMut,
    TensorView,
};
