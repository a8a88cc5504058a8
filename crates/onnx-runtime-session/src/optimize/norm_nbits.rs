//! An LLM decoder's RMS norm (SimplifiedLayerNormalization over the last axis, or
//! com.microsoft SkipSimplifiedLayerNormalization) whose normalized output is read only by
//! com.microsoft MatMulNBits / internal MatMulNBitsSiluMul nodes (as input A) is folded into
//! each of them: they become the internal `NormMatMulNBits`, which normalizes in the
//! product's prologue. The norm's own launch goes (on CUDA the decode GEMV computes the
//! norm in every block, from the same rows it would have read). The norm's sum output
//! (the residual stream) moves to the first of them. Only for a device session whose
//! provider runs the fused node; the CPU provider has it too, for fallbacks.
//!
//! Runs after [`super::nbits_glu`], so a gated pair is already one node.

use super::rewriter::Rewriter;
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ep_cpu::INTERNAL_DOMAIN;
use onnx_runtime_ir::{Attribute, NodeId, ValueId};

pub(crate) const OP: &str = "NormMatMulNBits";
const MS: &str = "com.microsoft";

/// Whether `device` runs the fused node (and the CPU registry has it for fallbacks).
pub(crate) fn enabled(
    device: Option<&dyn ExecutionProvider>,
    registry: &onnx_runtime_ep_cpu::CpuRegistry,
) -> bool {
    super::rewriter::device_runs(device, registry, INTERNAL_DOMAIN, OP)
}

/// A reader of the normalized rows that can take the norm: MatMulNBits without g_idx or
/// prepacked weights, or MatMulNBitsSiluMul, reading the value as A only. Returns whether it
/// is the gated form.
fn foldable_reader(rw: &Rewriter<'_>, reader: NodeId, v: ValueId) -> Option<bool> {
    let n = rw.node(reader);
    let glu = match (n.normalized_domain(), n.op_type.as_str()) {
        (MS, "MatMulNBits") => false,
        (INTERNAL_DOMAIN, "MatMulNBitsSiluMul") => true,
        _ => return None,
    };
    if n.outputs.len() != 1 || n.inputs.first() != Some(&Some(v)) {
        return None;
    }
    if n.inputs[1..].contains(&Some(v)) {
        return None;
    }
    let input = |i: usize| n.inputs.get(i).copied().flatten();
    if glu {
        if n.inputs.len() != 7 || input(4).is_none() || input(5).is_none() {
            return None;
        }
    } else if input(4).is_some()
        || n.attribute("weight_prepacked")
            .and_then(|a| a.as_int())
            .unwrap_or(0)
            != 0
    {
        return None;
    }
    (input(1).is_some() && input(2).is_some()).then_some(glu)
}

/// SimplifiedLayerNormalization / SkipSimplifiedLayerNormalization -> each MatMulNBits
/// reader becomes NormMatMulNBits.
pub(crate) fn fuse_norm_nbits(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    let skip = match (node.normalized_domain(), node.op_type.as_str()) {
        (MS, "SkipSimplifiedLayerNormalization") => true,
        ("" | MS, "SimplifiedLayerNormalization") => false,
        _ => return false,
    };
    let input = |i: usize| node.inputs.get(i).copied().flatten();
    let (Some(x), Some(gamma)) = (input(0), input(if skip { 2 } else { 1 })) else {
        return false;
    };
    let skip_v = if skip {
        match input(1) {
            Some(s) => Some(s),
            None => return false,
        }
    } else {
        None
    };
    let nbias = if skip { input(3) } else { None };
    if !skip && node.inputs.len() > 2 {
        return false;
    }
    let int = |k: &str, d: i64| node.attribute(k).and_then(|a| a.as_int()).unwrap_or(d);
    if !skip && int("axis", -1) != -1 {
        // Another axis is the last only for a known rank; exporters write -1.
        return false;
    }
    if int("stash_type", 1) != 1 {
        return false;
    }
    let epsilon = node
        .attribute("epsilon")
        .and_then(|a| a.as_float())
        .unwrap_or(1e-5);
    let Some(&out) = node.outputs.first() else {
        return false;
    };
    // The statistics outputs must be unread; the sum (skip form, output 3) may be read.
    let sum = if skip {
        node.outputs.get(3).copied()
    } else {
        None
    };
    let stats: Vec<ValueId> = node
        .outputs
        .iter()
        .enumerate()
        .filter(|&(i, _)| i != 0 && Some(i) != skip.then_some(3))
        .map(|(_, &v)| v)
        .collect();
    if stats
        .iter()
        .any(|&v| !rw.consumers(v).is_empty() || rw.is_pinned(v))
    {
        return false;
    }
    if rw.is_pinned(out) || rw.is_graph_input(out) {
        return false;
    }
    let mut readers: Vec<NodeId> = rw.consumers(out).to_vec();
    readers.sort();
    readers.dedup();
    if readers.is_empty() {
        return false;
    }
    let mut kinds = Vec::with_capacity(readers.len());
    for &r in &readers {
        match foldable_reader(rw, r, out) {
            Some(glu) => kinds.push(glu),
            None => return false,
        }
    }
    let sum_read = sum.filter(|&s| !rw.consumers(s).is_empty() || rw.is_pinned(s));
    for (i, (&r, &glu)) in readers.iter().zip(&kinds).enumerate() {
        let old = rw.node(r).clone();
        let at = |k: usize| old.inputs.get(k).copied().flatten();
        let mut inputs = vec![Some(x), skip_v, Some(gamma), nbias];
        if glu {
            // MatMulNBitsSiluMul: A, B, scales, zp, B2, scales2, zp2.
            inputs.extend([at(1), at(2), at(3), None, at(4), at(5), at(6)]);
        } else {
            // MatMulNBits: A, B, scales, zp, g_idx (none), bias.
            inputs.extend([at(1), at(2), at(3), at(5)]);
        }
        while inputs.last() == Some(&None) {
            inputs.pop();
        }
        let mut attributes = old.attributes.clone();
        attributes.retain(|k, _| {
            ["K", "N", "bits", "block_size", "accuracy_level"].contains(&k.as_str())
        });
        attributes.insert("epsilon".into(), Attribute::Float(epsilon));
        attributes.insert("glu".into(), Attribute::Int(glu as i64));
        let fused = rw.g.node_mut(r);
        fused.op_type = OP.into();
        fused.domain = INTERNAL_DOMAIN.into();
        fused.inputs = inputs;
        fused.attributes = attributes;
        if i == 0 {
            if let Some(s) = sum_read {
                fused.outputs.push(s);
            }
        }
        rw.count("norm_nbits");
    }
    rw.remove(id);
    rw.new_domains.insert(INTERNAL_DOMAIN);
    true
}
