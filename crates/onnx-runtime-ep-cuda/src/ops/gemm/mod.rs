//! Matrix products: MatMul (opsets 1, 9, 13), Gemm (1, 6, 7, 9, 11, 13; the `broadcast`
//! attribute of opsets 1 and 6 changes nothing: C broadcasts as the CPU provider lets it),
//! com.microsoft FusedMatMul, the session's internal MatMulBias and MatMulSiluMul, MatMulInteger (10),
//! QLinearMatMul (10, 21) and Einsum (12, pairwise contractions on the same products, see
//! [`einsum`]).
//!
//! Float products (float32, float16, bfloat16 with float32 accumulation, float64) run on
//! cuBLASLt ([`blas`]): one handle and one 32 MiB workspace per runtime, the heuristic's
//! algorithm chosen once per (shapes, strides, dtype, transposes, epilogue, alignment) and kept
//! by the kernel, so `execute` makes no heuristic query on the hot path. Row-major products map
//! onto the column-major library by computing the transposed product; a transposed view of an
//! input is a transpose flag and a leading dimension, never a copy. Batches are one strided
//! batched call (a broadcast operand has batch stride 0), or one tall GEMM when every batch reads
//! the same right-hand matrix (weights), or a loop over the outer batch axes when broadcasting
//! cannot be one stride. Bias and ReLU / tanh-GELU run in cuBLASLt's epilogue; other
//! activations, Gemm's broadcast C and K = 0 run in a small kernel of `kernels/gemm.cu`.
//!
//! float32 computes in true FP32 (`CUBLAS_COMPUTE_32F`); the provider's `tf32` option
//! (`CudaOptions::tf32`, the CLI's `--tf32`, or `ONNX_RUNTIME_CUDA_TF32=1` for
//! `CudaExecutionProvider::new`) lets float32 products use TF32 tensor cores.
//!
//! Decode shapes (at most four rows of A, a 2-D weight) run on a bandwidth-bound kernel of our
//! own instead ([`gemv`]): cuBLASLt's M = 1 kernels leave most of the device idle there.
//!
//! Integer products (int32/int64/uint32/uint64 MatMul and Gemm with wrapping arithmetic,
//! MatMulInteger, QLinearMatMul) run on a tiled kernel of our own that reads any strides and
//! subtracts zero points as it loads.

pub(crate) mod blas;
pub(crate) mod driver;
mod einsum;
mod gemm_op;
pub(crate) mod gemv;
mod integer;
mod matmul;
pub(crate) mod shape;
mod silu_mul;

use super::Registry;
use crate::compiler::ModuleSpec;

/// The session's internal domain (`onnx_runtime_ep_cpu::INTERNAL_DOMAIN`, repeated here: the
/// CUDA crate does not depend on the CPU provider).
pub const INTERNAL_DOMAIN: &str = "ai.onnx_runtime_rs.internal";

/// The epilogue and integer-product kernels.
pub(crate) fn gemm_module() -> ModuleSpec {
    const SRC: &str = concat!(
        include_str!("../../kernels/gemm_act.cuh"),
        include_str!("../../kernels/gemm.cu")
    );
    ModuleSpec::new("gemm", SRC).with_half()
}

/// The decode product (`gemv_*`, [`gemv`]).
pub(crate) fn gemv_module() -> ModuleSpec {
    const SRC: &str = concat!(
        include_str!("../../kernels/gemm_act.cuh"),
        include_str!("../../kernels/gemv.cu")
    );
    ModuleSpec::new("gemv", SRC).with_half()
}

pub fn register(r: &mut Registry) {
    for since in [1, 9, 13] {
        r.register("", "MatMul", since, matmul::matmul);
    }
    r.register("com.microsoft", "FusedMatMul", 1, matmul::fused_matmul);
    r.register(INTERNAL_DOMAIN, "MatMulBias", 1, matmul::matmul_bias);
    r.register(
        INTERNAL_DOMAIN,
        "MatMulSiluMul",
        1,
        silu_mul::matmul_silu_mul,
    );
    for since in [1, 6, 7, 9, 11, 13] {
        r.register("", "Gemm", since, gemm_op::gemm);
    }
    r.register("", "MatMulInteger", 10, integer::matmul_integer);
    for since in [10, 21] {
        r.register("", "QLinearMatMul", since, integer::qlinear_matmul);
    }
    r.register("", "Einsum", 12, einsum::einsum);
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![gemm_module(), gemv_module(), einsum::einsum_module()]
}
