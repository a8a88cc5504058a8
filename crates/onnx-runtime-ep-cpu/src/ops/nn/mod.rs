//! The `nn` op family: matrix products, convolution, pooling, normalization, resize,
//! recurrent, quantization, signal processing and the `com.microsoft` transformer ops.
//! Each submodule registers its kernels in [`register`].

use crate::CpuRegistry;

pub mod common;
mod conv;
mod conv_transpose;
mod gemm_op;
pub mod matmul;
pub mod window;

pub fn register(r: &mut CpuRegistry) {
    matmul::register(r);
    gemm_op::register(r);
    conv::register(r);
    conv_transpose::register(r);
}
