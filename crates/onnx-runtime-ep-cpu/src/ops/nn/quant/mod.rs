//! Quantization: QuantizeLinear, DequantizeLinear, DynamicQuantizeLinear, the QLinear ops, MatMulInteger and the quantized element types.

use crate::CpuRegistry;

pub(crate) mod conv_integer;
pub(crate) mod gather_block_quantized;
pub(crate) mod matmul_integer;
pub(crate) mod qlinear;
pub(crate) mod qtypes;
#[cfg(test)]
mod quant_tests;
pub(crate) mod quantize;

pub fn register(r: &mut CpuRegistry) {
    quantize::register(r);
    qlinear::register(r);
    matmul_integer::register(r);
    gather_block_quantized::register(r);
}
