//! The CUDA execution provider: a runtime (context, one stream, caching allocator, copies,
//! CUDA graph capture) and kernels written as `.cu` files, compiled by NVRTC to CUBIN for the
//! device's own architecture and cached on disk.
//!
//! The CUDA libraries are loaded at run time (cudarc's dynamic loading), found without user
//! variables (see [`libs`]), so the crate builds with no CUDA toolkit and no GPU.
//!
//! Out-of-range indices in Gather/GatherElements/GatherND/ScatterND/ScatterElements live on
//! the device, so the kernels guard them: the element is skipped (gathers write 0) and the
//! first such error is reported, naming the node, at the runtime's next synchronization
//! (`dtoh`, `synchronize`). Indices read on the host (Slice, Split, Pad, ...) are checked
//! before any launch.

pub mod allocator;
pub mod compiler;
pub mod libs;
pub mod ops;
mod provider;
pub mod runtime;

pub use provider::{CudaExecutionProvider, CudaOptions};
pub use runtime::CudaRuntime;
