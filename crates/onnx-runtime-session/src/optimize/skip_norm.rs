//! A residual Add read only by a LayerNormalization over the last axis becomes
//! `com.microsoft` SkipLayerNormalization: one row kernel that adds, normalizes and (when the
//! sum has other readers) writes the sum as its fourth output, instead of an element-wise
//! pass and a norm. Transformer encoders have two in every layer. Only for a device session
//! whose provider runs the fused op (on the CPU the two separate kernels are as fast).
//!
//! The two addends must have the same shape, known from the graph (symbolic shapes from the
//! input types, [`super::sym_shapes`]): SkipLayerNormalization broadcasts only its skip
//! input, so a pair that broadcasts either way is left alone.

use super::rewriter::{is_op, Rewriter};
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ep_cpu::CpuRegistry;
use onnx_runtime_ir::{Attribute, NodeId, ValueId};

const MS: &str = "com.microsoft";
const OP: &str = "SkipLayerNormalization";

/// Whether `device` runs SkipLayerNormalization (and the CPU registry has it for fallbacks).
pub(crate) fn enabled(device: Option<&dyn ExecutionProvider>, registry: &CpuRegistry) -> bool {
    super::rewriter::device_runs(device, registry, MS, OP)
}

/// LayerNormalization(Add(a, b), gamma, beta?) over the last axis, with the Add's output read
/// by nothing else than the norm or also by others (then the fused node's fourth output
/// replaces it), and only the norm's first output read.
pub(crate) fn fuse_skip_layer_norm(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    let onnx = is_op(node, "LayerNormalization");
    let ms = node.normalized_domain() == MS && node.op_type == "LayerNormalization";
    if !(onnx || ms) || node.inputs.len() < 2 || node.outputs.is_empty() {
        return false;
    }
    let (Some(sum), Some(gamma)) = (node.inputs[0], node.inputs[1]) else {
        return false;
    };
    let beta = node.inputs.get(2).copied().flatten();
    let epsilon = node
        .attribute("epsilon")
        .and_then(|a| a.as_float())
        .unwrap_or(1e-5);
    let axis = node
        .attribute("axis")
        .and_then(|a| a.as_int())
        .unwrap_or(-1);
    let stash = node
        .attribute("stash_type")
        .and_then(|a| a.as_int())
        .unwrap_or(1);
    let out = node.outputs[0];
    let extra_outputs: Vec<ValueId> = node.outputs[1..].to_vec();
    if stash != 1
        || extra_outputs
            .iter()
            .any(|&o| !rw.consumers(o).is_empty() || rw.is_pinned(o))
    {
        return false;
    }
    let Some(add) = rw.producer(sum) else {
        return false;
    };
    let an = rw.node(add);
    if !is_op(an, "Add") || an.outputs.len() != 1 || an.inputs.len() != 2 {
        return false;
    }
    let (Some(a), Some(b)) = (an.inputs[0], an.inputs[1]) else {
        return false;
    };
    let Some(dims) = rw.sym_dims(a) else {
        return false;
    };
    if dims.is_empty() || rw.sym_dims(b).as_ref() != Some(&dims) {
        return false;
    }
    let rank = dims.len() as i64;
    if axis != -1 && axis != rank - 1 {
        return false;
    }
    // gamma and beta: 1-D of the hidden width when the graph says so.
    let hidden = dims.last().cloned();
    for v in [Some(gamma), beta].into_iter().flatten() {
        match rw.sym_dims(v) {
            Some(d) if d.len() == 1 && Some(&d[0]) == hidden.as_ref() => {}
            _ => return false,
        }
    }
    let sum_read_elsewhere = rw.consumers(sum).iter().any(|&c| c != id) || rw.is_pinned(sum);
    let fused = rw.g.node_mut(id);
    fused.op_type = OP.into();
    fused.domain = MS.into();
    fused.inputs = vec![Some(a), Some(b), Some(gamma), beta];
    fused.attributes.clear();
    fused
        .attributes
        .insert("epsilon".into(), Attribute::Float(epsilon));
    fused.outputs.truncate(1);
    if sum_read_elsewhere {
        // Outputs: output, mean, inv_std_var, input_skip_bias_sum. The two statistics stay
        // unnamed (not produced); the Add's output moves here.
        let (m, v) = (rw.unnamed_value(), rw.unnamed_value());
        let fused = rw.g.node_mut(id);
        fused.outputs.extend([m, v, sum]);
    }
    debug_assert_eq!(rw.g.node(id).outputs[0], out);
    rw.remove(add);
    rw.new_domains.insert(MS);
    rw.count("skip_layer_norm");
    true
}
