//! Dtype helpers of the pass: the float dtypes a program computes in, and the ops whose
//! outputs have their first input's dtype, which carry a known dtype on to the chains they
//! feed (the inference itself runs in [`super::fuse_chains`]).

use super::MS;
use onnx_runtime_ep_cpu::INTERNAL_DOMAIN;
use onnx_runtime_ir::{DataType, Node};

/// How many leading outputs of `node` have the dtype of its first input, by the op's type
/// constraints (0 for ops not listed).
pub(super) fn keeps_dtype(node: &Node) -> usize {
    const FIRST: &[&str] = &[
        "Conv",
        "ConvTranspose",
        "MatMul",
        "Gemm",
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSumExp",
        "ReduceSumSquare",
        "Transpose",
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Identity",
        "Softmax",
        "LogSoftmax",
        "BatchNormalization",
        "InstanceNormalization",
        "LayerNormalization",
        "GroupNormalization",
        "RMSNormalization",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "LpPool",
        "Concat",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
        "Expand",
        "Tile",
        "Pad",
        "Resize",
        "Upsample",
        "DepthToSpace",
        "SpaceToDepth",
        "Dropout",
        "CumSum",
        "LRN",
    ];
    const MS_FIRST: &[&str] = &[
        "FusedConv",
        "FusedMatMul",
        "LayerNormalization",
        "SimplifiedLayerNormalization",
        "SkipLayerNormalization",
        "SkipSimplifiedLayerNormalization",
        "BiasAdd",
        "Gelu",
        "FastGelu",
        "BiasGelu",
        "QuickGelu",
    ];
    let op = node.op_type.as_str();
    match node.normalized_domain() {
        "" if op == "Split" => node.outputs.len(),
        "" if FIRST.contains(&op) => 1,
        MS if MS_FIRST.contains(&op) => 1,
        INTERNAL_DOMAIN if op == "MatMulBias" => 1,
        _ => 0,
    }
}

pub(super) fn is_float(d: DataType) -> bool {
    matches!(
        d,
        DataType::Float32 | DataType::Float64 | DataType::Float16 | DataType::BFloat16
    )
}
