//! Matrix products: MatMul, Gemm, the MatMulBias and MatMulSiluMul fusions and the SIMD SGEMM they run on, and
//! the exact 8-bit integer GEMM of the quantized ops.

use crate::CpuRegistry;

pub(crate) mod gemm_op;
pub(crate) mod igemm;
pub(crate) mod igemm_kernel;
pub(crate) mod matmul;
pub(crate) mod matmul_bias;
pub(crate) mod matmul_silu_mul;
pub(crate) mod sgemm;
pub(crate) mod sgemm_kernel;
pub(crate) mod sgemm_wide;

pub fn register(r: &mut CpuRegistry) {
    gemm_op::register(r);
    matmul::register(r);
    matmul_bias::register(r);
    matmul_silu_mul::register(r);
}
