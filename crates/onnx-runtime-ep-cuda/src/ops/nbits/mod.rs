//! Block-quantized weights: com.microsoft MatMulNBits ([`matmul`]) and com.microsoft
//! GatherBlockQuantized ([`gather`]), with the CPU provider's semantics.
//!
//! Kernels live in three NVRTC modules, compiled when a node's kernel is built: `nbits.cu`
//! (the general decode GEMV and GatherBlockQuantized), `nbits_gemv.cu` (the 4-bit tensor-core
//! decode GEMV, sm_80+) and `nbits_dequant.cu` (the prefill path's dequantization).

mod gather;
mod matmul;
mod norm_matmul;

use super::common::Base;
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CuPtr, CudaRuntime};
use onnx_runtime_ep_api::{EpError, EpResult};
use onnx_runtime_ir::DataType;
use std::sync::{Arc, Mutex};

pub(crate) fn nbits_module() -> ModuleSpec {
    ModuleSpec::new("nbits", include_str!("../../kernels/nbits.cu")).with_half()
}

pub fn register(r: &mut Registry) {
    r.register("com.microsoft", "MatMulNBits", 1, matmul::matmul_nbits);
    r.register(
        crate::ops::gemm::INTERNAL_DOMAIN,
        "MatMulNBitsSiluMul",
        1,
        matmul::matmul_nbits_silu_mul,
    );
    r.register(
        crate::ops::gemm::INTERNAL_DOMAIN,
        norm_matmul::OP,
        1,
        norm_matmul::norm_matmul_nbits,
    );
    r.register(
        "com.microsoft",
        "GatherBlockQuantized",
        1,
        gather::gather_block_quantized,
    );
}

/// The 4-bit tensor-core decode GEMV (`nq_gemv_*`, sm_80+).
pub(crate) fn nbits_gemv_module() -> ModuleSpec {
    ModuleSpec::new("nbits_gemv", include_str!("../../kernels/nbits_gemv.cu")).with_half()
}

/// The prefill path's dequantization (`nbits_dequant_*`).
pub(crate) fn nbits_dequant_module() -> ModuleSpec {
    ModuleSpec::new(
        "nbits_dequant",
        include_str!("../../kernels/nbits_dequant.cu"),
    )
    .with_half()
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![nbits_module(), nbits_gemv_module(), nbits_dequant_module()]
}

/// The float dtypes of activations, scales and outputs, with their kernel-name tags.
const FLOATS: [(DataType, &str); 3] = [
    (DataType::Float32, "f32"),
    (DataType::Float16, "f16"),
    (DataType::BFloat16, "bf16"),
];

/// Device workspace a kernel keeps between runs; grows when a call needs more. Blocks stay
/// until the kernel is dropped, since a captured graph may still use an earlier one.
struct Workspace {
    rt: Arc<CudaRuntime>,
    blocks: Mutex<Vec<(CuPtr, usize)>>,
}

impl Workspace {
    fn new(rt: &Arc<CudaRuntime>) -> Self {
        Workspace {
            rt: rt.clone(),
            blocks: Mutex::new(Vec::new()),
        }
    }

    /// At least `bytes` bytes. During capture only an existing block (or a cached one) can be
    /// had; otherwise the error says to run the signature eagerly first.
    fn get(&self, base: &Base, bytes: usize, what: &str) -> EpResult<CuPtr> {
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(ptr, cap)) = blocks.last() {
            if cap >= bytes {
                return Ok(ptr);
            }
        }
        let capturing = self.rt.is_capturing();
        let (ptr, cap) = self.rt.allocate(bytes.max(256), 256).map_err(|e| match e {
            EpError::Capture { .. } if capturing => EpError::Capture {
                node: base.node.clone(),
                message: format!(
                    "{} needs a device workspace of {bytes} bytes for its {what}, and none can \
                     be allocated during capture ({e}); run this shape once eagerly before \
                     capturing",
                    base.op
                ),
            },
            other => other,
        })?;
        blocks.push((ptr, cap));
        Ok(ptr)
    }
}

impl Drop for Workspace {
    fn drop(&mut self) {
        let blocks = self.blocks.get_mut().unwrap_or_else(|e| e.into_inner());
        for (ptr, _) in blocks.drain(..) {
            let _ = self.rt.free(ptr);
        }
    }
}
