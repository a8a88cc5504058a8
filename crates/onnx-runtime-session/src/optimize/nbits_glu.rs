//! The gated feed-forward of LLM decoders, `silu(A Wg^T) * (A Wu^T)` with both products
//! com.microsoft MatMulNBits of the same A (after [`super::activation::fuse_silu`]: a Mul of
//! QuickGelu(alpha = 1) and the up product), becomes the internal `MatMulNBitsSiluMul`: one
//! node reading A once for both weight sets with SiLU and the product in its epilogue (one
//! launch on CUDA instead of three). The same with both products plain MatMuls of constant 2-D
//! float weights of one shape and type (the float16 exports) becomes the internal
//! `MatMulSiluMul`. Only for a device session whose provider runs the fused node; the CPU
//! provider has both too (the two products, then the epilogue), for fallbacks.

use super::rewriter::{is_op, other_input, Rewriter};
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ep_cpu::INTERNAL_DOMAIN;
use onnx_runtime_ir::{Attribute, DataType, NodeId, ValueId};

pub(crate) const OP: &str = "MatMulNBitsSiluMul";
pub(crate) const FLOAT_OP: &str = "MatMulSiluMul";
const MS: &str = "com.microsoft";

/// Attributes that must agree between the two products (the fused node takes the gate's).
const SHARED: [&str; 4] = ["K", "N", "bits", "block_size"];

/// Whether `device` runs the fused node (and the CPU registry has it for fallbacks).
pub(crate) fn enabled(
    device: Option<&dyn ExecutionProvider>,
    registry: &onnx_runtime_ep_cpu::CpuRegistry,
) -> bool {
    super::rewriter::device_runs(device, registry, INTERNAL_DOMAIN, OP)
}

/// Whether `device` runs `MatMulSiluMul` (and the CPU registry has it for fallbacks).
pub(crate) fn float_enabled(
    device: Option<&dyn ExecutionProvider>,
    registry: &onnx_runtime_ep_cpu::CpuRegistry,
) -> bool {
    super::rewriter::device_runs(device, registry, INTERNAL_DOMAIN, FLOAT_OP)
}

/// The MatMulNBits producing `v` (read only by `reader`) as (node, A, [B, scales, zero
/// points]), when it has no g_idx, no bias and no prepacked weights.
fn nbits_of(
    rw: &Rewriter<'_>,
    v: ValueId,
    reader: NodeId,
) -> Option<(NodeId, ValueId, [Option<ValueId>; 3])> {
    if rw.sole_consumer(v) != Some(reader) {
        return None;
    }
    let id = rw.producer(v)?;
    let n = rw.node(id);
    if n.normalized_domain() != MS || n.op_type != "MatMulNBits" || n.outputs.len() != 1 {
        return None;
    }
    let input = |i: usize| n.inputs.get(i).copied().flatten();
    if input(4).is_some() || input(5).is_some() {
        return None;
    }
    if n.attribute("weight_prepacked")
        .and_then(|a| a.as_int())
        .unwrap_or(0)
        != 0
    {
        return None;
    }
    let (a, b, s) = (input(0)?, input(1)?, input(2)?);
    Some((id, a, [Some(b), Some(s), input(3)]))
}

/// The gated products a Mul node `id` may stand for: (QuickGelu node, the gate value it reads,
/// the Mul's other input) for each input of the Mul that is QuickGelu(alpha 1) of a value
/// and read by this Mul only.
fn silu_gates(rw: &Rewriter<'_>, id: NodeId) -> Vec<(NodeId, ValueId, ValueId)> {
    let node = rw.node(id);
    if !is_op(node, "Mul") || node.outputs.len() != 1 || node.inputs.len() != 2 {
        return Vec::new();
    }
    let mut found = Vec::new();
    for &s in node.inputs.iter().flatten() {
        let (Some(u), Some(act)) = (other_input(node, s), rw.producer(s)) else {
            continue;
        };
        let an = rw.node(act);
        if an.normalized_domain() != MS
            || an.op_type != "QuickGelu"
            || an.attribute("alpha").and_then(|a| a.as_float()) != Some(1.0)
            || an.inputs.len() != 1
            || rw.sole_consumer(s) != Some(id)
        {
            continue;
        }
        if let Some(g) = an.inputs[0] {
            found.push((act, g, u));
        }
    }
    found
}

/// Mul(QuickGelu(alpha 1)(MatMulNBits(A, Wg)), MatMulNBits(A, Wu)) -> MatMulNBitsSiluMul.
pub(crate) fn fuse_nbits_silu_mul(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    for (act, g, u) in silu_gates(rw, id) {
        let (Some((gate, a_g, wg)), Some((up, a_u, wu))) =
            (nbits_of(rw, g, act), nbits_of(rw, u, id))
        else {
            continue;
        };
        if a_g != a_u || gate == up {
            continue;
        }
        let (gn, un) = (rw.node(gate), rw.node(up));
        if SHARED.iter().any(|k| gn.attribute(k) != un.attribute(k)) {
            continue;
        }
        let attributes: Vec<(String, Attribute)> = SHARED
            .iter()
            .chain(["accuracy_level"].iter())
            .filter_map(|k| gn.attribute(k).map(|a| (k.to_string(), a.clone())))
            .collect();
        let fused = rw.g.node_mut(id);
        fused.op_type = OP.into();
        fused.domain = INTERNAL_DOMAIN.into();
        fused.inputs = std::iter::once(Some(a_g)).chain(wg).chain(wu).collect();
        fused.attributes.clear();
        fused.attributes.extend(attributes);
        rw.remove(act);
        rw.remove(gate);
        rw.remove(up);
        rw.new_domains.insert(INTERNAL_DOMAIN);
        rw.count("nbits_silu_mul");
        return true;
    }
    false
}

/// The MatMul producing `v` (read only by `reader`) as (node, A, W), when W is a constant 2-D
/// float initializer; with W's shape and type.
/// A weight's shape and type.
type WeightKind = (Vec<usize>, DataType);

fn matmul_of(
    rw: &Rewriter<'_>,
    v: ValueId,
    reader: NodeId,
) -> Option<(NodeId, ValueId, ValueId, WeightKind)> {
    if rw.sole_consumer(v) != Some(reader) {
        return None;
    }
    let id = rw.producer(v)?;
    let n = rw.node(id);
    if !is_op(n, "MatMul") || n.outputs.len() != 1 || n.inputs.len() != 2 {
        return None;
    }
    let (a, w) = (n.inputs[0]?, n.inputs[1]?);
    if rw.is_graph_input(w) {
        return None;
    }
    let t = rw.g.initializer(w)?;
    let float = matches!(
        t.dtype,
        DataType::Float32 | DataType::Float16 | DataType::BFloat16
    );
    (float && t.shape.len() == 2).then(|| (id, a, w, (t.shape.clone(), t.dtype)))
}

/// Mul(QuickGelu(alpha 1)(MatMul(A, Wg)), MatMul(A, Wu)) -> MatMulSiluMul(A, Wg, Wu).
pub(crate) fn fuse_matmul_silu_mul(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    for (act, g, u) in silu_gates(rw, id) {
        let (Some((gate, a_g, wg, tg)), Some((up, a_u, wu, tu))) =
            (matmul_of(rw, g, act), matmul_of(rw, u, id))
        else {
            continue;
        };
        if a_g != a_u || gate == up || tg != tu {
            continue;
        }
        let fused = rw.g.node_mut(id);
        fused.op_type = FLOAT_OP.into();
        fused.domain = INTERNAL_DOMAIN.into();
        fused.inputs = vec![Some(a_g), Some(wg), Some(wu)];
        fused.attributes.clear();
        rw.remove(act);
        rw.remove(gate);
        rw.remove(up);
        rw.new_domains.insert(INTERNAL_DOMAIN);
        rw.count("matmul_silu_mul");
        return true;
    }
    false
}
