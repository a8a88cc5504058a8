//! CUDA kernels, one module per op family; each family registers its ops next to its code.

mod attention;
mod cast;
pub mod common;
mod construct;
mod conv;
pub use conv::chosen_path as conv_chosen_path;
mod cumsum;
mod deform_conv;
mod detection;
mod elementwise;
pub mod fused;
mod gemm;
mod index;
mod linalg;
mod loss;
pub mod modules;
mod movement;
mod nbits;
mod norm;
pub mod params;
mod pool;
mod quant;
mod reduce;
mod reshape;
mod rnn;
mod scratch;
mod select;
mod signal;
mod tensor_misc;

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
    elementwise::register(&mut r);
    reduce::register(&mut r);
    norm::register(&mut r);
    gemm::register(&mut r);
    conv::register(&mut r);
    pool::register(&mut r);
    quant::register(&mut r);
    tensor_misc::register(&mut r);
    attention::register(&mut r);
    rnn::register(&mut r);
    loss::register(&mut r);
    fused::register(&mut r);
    signal::register(&mut r);
    detection::register(&mut r);
    linalg::register(&mut r);
    deform_conv::register(&mut r);
    nbits::register(&mut r);
    r
}

/// The NVRTC modules of the compute families (element-wise, reductions, norms, GEMM epilogues,
/// convolution helpers, pooling), every variant.
pub fn family_modules() -> Vec<crate::compiler::ModuleSpec> {
    let mut all = Vec::new();
    all.extend(elementwise::modules());
    all.extend(reduce::modules());
    all.extend(norm::modules());
    all.extend(gemm::modules());
    all.extend(conv::modules());
    all.extend(pool::modules());
    all.extend(quant::modules());
    all.extend(tensor_misc::modules());
    all.extend(attention::modules());
    all.extend(rnn::modules());
    all.extend(loss::modules());
    all.extend(fused::modules());
    all.extend(signal::modules());
    all.extend(detection::modules());
    all.extend(linalg::modules());
    all.extend(deform_conv::modules());
    all.extend(nbits::modules());
    all
}
