//! CUDA kernels, one module per op family; each family registers its ops next to its code.

mod cast;
pub mod common;
mod construct;
mod cumsum;
mod index;
pub mod modules;
mod movement;
pub mod params;
mod reshape;
mod select;

use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{EpResult, Kernel, KernelRequest, OpRegistry};
use std::sync::Arc;

/// Builds a kernel for a node on a runtime.
pub type Factory = fn(&Arc<CudaRuntime>, &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>>;
pub type Registry = OpRegistry<Factory>;

/// Every op the CUDA provider runs.
pub fn registry() -> Registry {
    let mut r = Registry::new();
    cast::register(&mut r);
    construct::register(&mut r);
    cumsum::register(&mut r);
    index::register(&mut r);
    movement::register(&mut r);
    reshape::register(&mut r);
    select::register(&mut r);
    r
}
