//! Attention: ONNX Attention, com.microsoft Attention / MultiHeadAttention / GroupQueryAttention, FlexAttention, linear attention, RotaryEmbedding, MatMulNBits the fused MatMulNBitsSiluMul and NormMatMulNBits.

use crate::CpuRegistry;

pub(crate) mod contrib_attention;
pub(crate) mod contrib_misc;
pub(crate) mod flex_attention;
pub(crate) mod linear_attention;
pub(crate) mod nbits_silu_mul;
pub(crate) mod norm_nbits;
pub(crate) mod sdpa;
pub(crate) mod subgraph;

pub fn register(r: &mut CpuRegistry) {
    sdpa::register(r);
    contrib_attention::register(r);
    flex_attention::register(r);
    linear_attention::register(r);
    contrib_misc::register(r);
    nbits_silu_mul::register(r);
    norm_nbits::register(r);
}
