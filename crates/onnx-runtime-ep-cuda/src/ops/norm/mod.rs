//! Normalizations: row-wise ones over trailing axes (LayerNormalization, RMSNormalization,
//! SimplifiedLayerNormalization, SkipLayerNormalization, SkipSimplifiedLayerNormalization,
//! LpNormalization) in [`row`]; channel-wise and grouped ones (BatchNormalization,
//! InstanceNormalization, GroupNormalization, MeanVarianceNormalization, LRN) in [`channel`];
//! Dropout (inference) in [`dropout`].
//!
//! Every kernel takes float, double, float16 and bfloat16; half types compute in float
//! registers and double in double. The kernels of a dtype live in one NVRTC module per family
//! (`norm_row_*`, `norm_chan_*`), compiled when the node's kernel is built.

mod channel;
mod dropout;
mod kparams;
mod row;

use super::common::Base;
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::CuPtr;
use onnx_runtime_ep_api::EpResult;
use onnx_runtime_ir::DataType;
use std::sync::Mutex;

/// SimplifiedLayerNormalization, or (`skip`) com.microsoft SkipSimplifiedLayerNormalization,
/// for `req`'s node: what fused kernels that normalize their input fall back on.
pub(crate) fn rms_norm_kernel(
    rt: &std::sync::Arc<crate::runtime::CudaRuntime>,
    req: &onnx_runtime_ep_api::KernelRequest<'_>,
    skip: bool,
) -> EpResult<Box<dyn onnx_runtime_ep_api::Kernel>> {
    row::rms_kernel(rt, req, skip)
}

pub fn register(r: &mut Registry) {
    row::register(r);
    channel::register(r);
    dropout::register(r);
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    let mut all = Vec::new();
    for (t, s) in row::ROW_VARIANTS {
        all.extend(row_module(t, s));
    }
    for (t, _, _) in FLOATS {
        all.extend(chan_module(t));
    }
    all
}

/// The float dtypes the kernels take: dtype, kernel-name tag, C type.
pub(crate) const FLOATS: [(DataType, &str, &str); 4] = [
    (DataType::Float32, "f32", "float"),
    (DataType::Float64, "f64", "double"),
    (DataType::Float16, "f16", "f16"),
    (DataType::BFloat16, "bf16", "bf16"),
];

fn float_entry(dtype: DataType) -> Option<(&'static str, &'static str)> {
    FLOATS
        .iter()
        .find(|f| f.0 == dtype)
        .map(|&(_, tag, ctype)| (tag, ctype))
}

/// The compute (and statistics) type of a float dtype: double for double, else float.
pub(crate) fn acc_dtype(dtype: DataType) -> DataType {
    if dtype == DataType::Float64 {
        DataType::Float64
    } else {
        DataType::Float32
    }
}

fn acc_ctype(dtype: DataType) -> &'static str {
    if dtype == DataType::Float64 {
        "double"
    } else {
        "float"
    }
}

/// The row-norm module for inputs of dtype `t` and scale / bias of dtype `s`.
pub(crate) fn row_module(t: DataType, s: DataType) -> Option<ModuleSpec> {
    let (ttag, tc) = float_entry(t)?;
    let (stag, sc) = float_entry(s)?;
    let name = if t == s {
        format!("norm_row_{ttag}")
    } else {
        format!("norm_row_{ttag}_s{stag}")
    };
    Some(
        ModuleSpec::new(name, include_str!("../../kernels/norm_row.cu"))
            .define("NORM_T", tc)
            .define("NORM_S", sc)
            .define("NORM_A", acc_ctype(t))
            .with_half(),
    )
}

/// The channel-norm module for inputs of dtype `t`.
pub(crate) fn chan_module(t: DataType) -> Option<ModuleSpec> {
    let (tag, tc) = float_entry(t)?;
    Some(
        ModuleSpec::new(
            format!("norm_chan_{tag}"),
            include_str!("../../kernels/norm_chan.cu"),
        )
        .define("NORM_T", tc)
        .define("NORM_A", acc_ctype(t))
        .with_half(),
    )
}

/// The ONNX dtype code the kernels read parameters by (float 1, double 11, float16 10,
/// bfloat16 16).
pub(crate) fn dtype_code(dtype: DataType) -> i32 {
    dtype.onnx_code()
}

/// Refuses dtypes other than the four float types (a planned refusal: the CPU kernel runs).
pub(crate) fn require_float(base: &Base, dtype: DataType, what: &str) -> EpResult<()> {
    if float_entry(dtype).is_none() {
        return Err(base.unsupported(
            dtype,
            format!("the CUDA kernel takes {what} of float, double, float16 or bfloat16"),
        ));
    }
    Ok(())
}

/// Device workspace a kernel keeps between runs (partial statistics of split reductions).
/// It grows when a call needs more; blocks are kept until the kernel is dropped, since a
/// captured graph may still use an earlier one.
pub(crate) struct Scratch {
    blocks: Mutex<Vec<(CuPtr, usize)>>,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch {
            blocks: Mutex::new(Vec::new()),
        }
    }

    /// A workspace of at least `bytes` bytes. Allocating during capture works only when the
    /// allocator has a cached block; otherwise the error says to run the signature eagerly
    /// first.
    pub fn get(&self, base: &Base, bytes: usize) -> EpResult<CuPtr> {
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(ptr, cap)) = blocks.last() {
            if cap >= bytes {
                return Ok(ptr);
            }
        }
        let capturing = base.rt.is_capturing();
        let (ptr, cap) = base.rt.allocate(bytes.max(256), 256).map_err(|e| match e {
            onnx_runtime_ep_api::EpError::Capture { .. } if capturing => {
                onnx_runtime_ep_api::EpError::Capture {
                    node: base.node.clone(),
                    message: format!(
                        "{} needs a device workspace of {bytes} bytes for its split \
                             reduction and none can be allocated during capture ({e}); run \
                             this shape once eagerly before capturing",
                        base.op
                    ),
                }
            }
            other => other,
        })?;
        blocks.push((ptr, cap));
        Ok(ptr)
    }

    pub fn release(&self, base: &Base) {
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        for (ptr, _) in blocks.drain(..) {
            let _ = base.rt.free(ptr);
        }
    }
}
