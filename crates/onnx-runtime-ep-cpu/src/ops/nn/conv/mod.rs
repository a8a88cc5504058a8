//! Convolution: Conv (direct, depthwise, im2col + GEMM), fused activations, ConvTranspose, causal and deformable convolution.

use crate::CpuRegistry;

pub(crate) mod causal_conv;
pub(crate) mod conv_act;
pub(crate) mod conv_direct;
pub(crate) mod conv_direct_kernel;
pub(crate) mod conv_gemm;
pub(crate) mod conv_op;
pub(crate) mod conv_transpose;
pub(crate) mod conv_transpose_tiled;
pub(crate) mod deform_conv;
pub(crate) mod depthwise;
pub(crate) mod depthwise_kernel;
pub(crate) mod small_maps;

pub fn register(r: &mut CpuRegistry) {
    conv_op::register(r);
    conv_transpose::register(r);
    causal_conv::register(r);
    deform_conv::register(r);
}
