//! The `nn` op family: matrix products, convolution, pooling, normalization, resize,
//! recurrent, quantization, signal processing and the `com.microsoft` transformer ops.
//! Each submodule registers its kernels in [`register`].

use crate::CpuRegistry;

pub mod attention;
mod causal_conv;
pub mod common;
mod contrib_attention;
mod contrib_misc;
mod conv;
mod conv_act;
mod conv_direct;
mod conv_gemm;
mod conv_transpose;
mod conv_transpose_tiled;
mod deform_conv;
mod depthwise;
mod dropout;
mod flex_attention;
mod gemm_op;
mod layer_norm;
mod linear_attention;
mod loss;
mod lp_unpool;
pub mod matmul;
mod matmul_bias;
mod matmul_integer;
mod mt19937;
mod norm;
mod pool;
mod pool2d;
mod pool2d_fast;
mod qlinear;
mod qlstm;
mod qtypes;
mod quant;
mod resize;
mod resize_nearest;
mod rnn;
mod scratch;
mod sgemm;
mod sgemm_kernel;
mod sgemm_wide;
mod signal;
mod subgraph;
mod training;
pub mod window;

pub fn register(r: &mut CpuRegistry) {
    matmul::register(r);
    matmul_bias::register(r);
    gemm_op::register(r);
    conv::register(r);
    causal_conv::register(r);
    conv_transpose::register(r);
    deform_conv::register(r);
    pool::register(r);
    norm::register(r);
    layer_norm::register(r);
    linear_attention::register(r);
    loss::register(r);
    lp_unpool::register(r);
    resize::register(r);
    dropout::register(r);
    flex_attention::register(r);
    rnn::register(r);
    matmul_integer::register(r);
    quant::register(r);
    qlinear::register(r);
    qlstm::register(r);
    signal::register(r);
    training::register(r);
    attention::register(r);
    contrib_attention::register(r);
    contrib_misc::register(r);
}
