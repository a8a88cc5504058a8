//! Attention: ONNX Attention (opsets 23, 24 and the sliding windows of 25) in
//! [`onnx_attention`], com.microsoft Attention (fused QKV projection) and MultiHeadAttention in
//! [`contrib`], com.microsoft GroupQueryAttention in [`gqa`], and the rotary embeddings (ONNX RotaryEmbedding 23, com.microsoft
//! RotaryEmbedding) in [`rotary`]. Every attention op runs on the shared scaled-dot-product
//! core of [`sdpa`]: one fused, tiled, online-softmax kernel (FlashAttention-2 style) that never
//! materializes the scores, on tensor cores (`mma.sync` m16n8k16) for float16 / bfloat16 on
//! sm_80+ and on CUDA cores for float32 / float64, with a split-K pass for short query blocks
//! so one query still fills the GPU; a (batch, kv head) of at most 16 query rows (a decode
//! step's GQA group) takes the decode kernel `attn_dec_<dp>` instead (one block per split of
//! the keys, every row of the group scored against each key row it loads).
//!
//! Kernels: `kernels/attention_common.cuh` (parameters, row setup, score pipeline, loaders),
//! `kernels/attention_fwd.cu` (CUDA-core kernel, split combine, score output, past/present
//! concat, input projection), `kernels/attention_mma.cu` (tensor-core kernel) and
//! `kernels/rotary.cu`. One module per dtype, compiled when a node's kernel is built.

mod contrib;
mod gqa;
mod linear;
mod onnx_attention;
mod rotary;
mod sdpa;

use super::Registry;
use crate::compiler::ModuleSpec;
use onnx_runtime_ir::DataType;

pub fn register(r: &mut Registry) {
    onnx_attention::register(r);
    contrib::register(r);
    gqa::register(r);
    linear::register(r);
    rotary::register(r);
}

/// The float dtypes the attention kernels take: dtype, kernel-name tag, C type, accumulator.
pub(crate) const FLOATS: [(DataType, &str, &str, &str); 4] = [
    (DataType::Float32, "f32", "float", "float"),
    (DataType::Float64, "f64", "double", "double"),
    (DataType::Float16, "f16", "f16", "float"),
    (DataType::BFloat16, "bf16", "bf16", "float"),
];

/// The padded head sizes of the CUDA-core kernel for `dtype`, with its (rows, keys) tile:
/// `attn_simt_<dp>` exists for each. Double tiles are smaller to fit shared memory.
pub(crate) fn simt_variants(dtype: DataType) -> (&'static [usize], usize, usize) {
    match dtype {
        DataType::Float32 => (&[32, 64, 96, 128, 256], 64, 32),
        DataType::Float64 => (&[64, 128, 256], 32, 32),
        _ => (&[64, 128, 256], 64, 32),
    }
}

/// The padded head sizes of the tensor-core kernel, each with its key tile.
pub(crate) const MMA_VARIANTS: [(usize, usize); 6] =
    [(32, 64), (64, 64), (80, 64), (96, 64), (128, 64), (256, 32)];

/// The largest head size the kernels take (larger ones run on the CPU provider).
pub(crate) const MAX_HEAD: usize = 256;

const FWD: &str = concat!(
    include_str!("../../kernels/attention_common.cuh"),
    include_str!("../../kernels/attention_fwd.cu"),
    include_str!("../../kernels/attention_dec.cu")
);
const MMA: &str = concat!(
    include_str!("../../kernels/attention_common.cuh"),
    include_str!("../../kernels/attention_mma.cu")
);

fn entry(dtype: DataType) -> Option<(&'static str, &'static str, &'static str)> {
    FLOATS
        .iter()
        .find(|f| f.0 == dtype)
        .map(|&(_, tag, c, acc)| (tag, c, acc))
}

/// The CUDA-core module of `dtype`: attn_simt_*, attn_combine, attn_scores, attn_concat and
/// attn_proj. Half types on a device with tensor cores (`simt` false) need no attn_simt_*.
pub(crate) fn fwd_module(dtype: DataType, simt: bool) -> Option<ModuleSpec> {
    let (tag, c, acc) = entry(dtype)?;
    let (dps, bm, bn) = simt_variants(dtype);
    let list: Vec<String> = if simt {
        dps.iter().map(|d| format!("X({d},{bm},{bn})")).collect()
    } else {
        Vec::new()
    };
    let name = if simt {
        format!("attention_{tag}")
    } else {
        format!("attention_{tag}_nosimt")
    };
    Some(
        ModuleSpec::new(name, FWD)
            .define("ATT_T", c)
            .define("ATT_ACC", acc)
            .define("ATT_SIMT_LIST", &list.join(" "))
            .with_half(),
    )
}

/// Whether `dtype` runs on the CUDA-core kernel on a device of compute capability `arch`.
pub(crate) fn needs_simt(dtype: DataType, arch: u32) -> bool {
    mma_module(dtype).is_none() || arch < 80
}

/// The tensor-core module of a half dtype (sm_80+): attn_mma_*.
pub(crate) fn mma_module(dtype: DataType) -> Option<ModuleSpec> {
    if !matches!(dtype, DataType::Float16 | DataType::BFloat16) {
        return None;
    }
    let (tag, c, acc) = entry(dtype)?;
    let list: Vec<String> = MMA_VARIANTS
        .iter()
        .map(|(d, bn)| format!("X({d},{bn})"))
        .collect();
    Some(
        ModuleSpec::new(format!("attention_mma_{tag}"), MMA)
            .define("ATT_T", c)
            .define("ATT_ACC", acc)
            .define("ATT_MMA_LIST", &list.join(" "))
            .with_half(),
    )
}

/// The rotary embedding kernels (every float dtype).
pub(crate) fn rotary_module() -> ModuleSpec {
    ModuleSpec::new("rotary", include_str!("../../kernels/rotary.cu")).with_half()
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    let mut all: Vec<ModuleSpec> = FLOATS
        .iter()
        .filter_map(|f| fwd_module(f.0, true))
        .collect();
    all.extend(
        FLOATS
            .iter()
            .filter(|f| mma_module(f.0).is_some())
            .filter_map(|f| fwd_module(f.0, false)),
    );
    all.extend(FLOATS.iter().filter_map(|f| mma_module(f.0)));
    all.push(rotary_module());
    all.push(linear::module());
    all
}
