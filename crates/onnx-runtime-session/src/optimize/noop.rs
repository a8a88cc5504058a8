//! Nodes that do nothing at inference: Identity, Dropout, Cast to the type the input already
//! has, reshapes of reshapes, and Squeeze/Unsqueeze pairs that cancel.

use super::rewriter::{is_op, Rewriter};
use onnx_runtime_ir::{NodeId, ValueId};

/// Tries every no-op rule on `id`.
pub(crate) fn remove_noop(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    if !node.normalized_domain().is_empty() {
        return false;
    }
    match node.op_type.as_str() {
        "Identity" => identity(rw, id),
        "Dropout" => dropout(rw, id),
        "Cast" => cast(rw, id),
        "Reshape" => reshape_chain(rw, id),
        "Squeeze" | "Unsqueeze" => squeeze_pair(rw, id),
        _ => false,
    }
}

/// Makes `out` (the output of node `id`) the same value as `src`, then removes `id`. When
/// `out` is pinned (a graph output or read by a subgraph) the producer of `src` is made
/// to write `out` instead, if `src` has no other use; otherwise nothing changes.
fn bypass(rw: &mut Rewriter<'_>, id: NodeId, src: ValueId, out: ValueId) -> bool {
    if src == out {
        return false;
    }
    if !rw.is_pinned(out) {
        rw.replace_uses(out, src);
        rw.remove(id);
        return true;
    }
    let Some(p) = rw.producer(src) else {
        return false;
    };
    if rw.sole_consumer(src) != Some(id) {
        return false;
    }
    for o in rw.g.node_mut(p).outputs.iter_mut() {
        if *o == src {
            *o = out;
        }
    }
    rw.remove(id);
    true
}

fn identity(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    let (Some(Some(src)), [out]) = (node.inputs.first().copied(), node.outputs.as_slice()) else {
        return false;
    };
    if node.inputs.len() != 1 {
        return false;
    }
    let out = *out;
    if bypass(rw, id, src, out) {
        rw.count("identity");
        return true;
    }
    false
}

/// Dropout outside training: the data output is the input. Kept when the mask is used or
/// the node may be in training mode (`training_mode` input not a constant false from opset
/// 12; `is_test = 0` with a mask output before opset 7).
fn dropout(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    let Some(Some(src)) = node.inputs.first().copied() else {
        return false;
    };
    let Some(&out) = node.outputs.first() else {
        return false;
    };
    if let Some(&mask) = node.outputs.get(1) {
        if !rw.g.value(mask).name.is_empty()
            && (rw.is_pinned(mask) || !rw.consumers(mask).is_empty())
        {
            return false;
        }
    }
    if rw.opset >= 12 {
        if let Some(Some(t)) = node.inputs.get(2) {
            match rw.const_ints(*t) {
                Some(v) if v.iter().all(|&x| x == 0) => {}
                _ => return false,
            }
        }
    } else if rw.opset < 7 {
        let is_test = node
            .attribute("is_test")
            .and_then(|a| a.as_int())
            .unwrap_or(0);
        if is_test == 0 && node.outputs.len() > 1 {
            return false;
        }
    }
    if bypass(rw, id, src, out) {
        rw.count("dropout");
        return true;
    }
    false
}

/// Cast to the element type the input is known to have already.
fn cast(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    let (Some(Some(src)), [out]) = (node.inputs.first().copied(), node.outputs.as_slice()) else {
        return false;
    };
    let out = *out;
    let Some(to) = node.attribute("to").and_then(|a| a.as_int()) else {
        return false;
    };
    // Cast-23 `saturate` only matters for float8 targets, which a same-type cast never is.
    match rw.known_dtype(src) {
        Some(d) if d.onnx_code() as i64 == to => {}
        _ => return false,
    }
    if bypass(rw, id, src, out) {
        rw.count("cast");
        return true;
    }
    false
}

/// Reshape whose data comes from another reshape-like op (Reshape, Flatten, Squeeze,
/// Unsqueeze: all keep the element order) read only here: the outer Reshape can read the
/// inner op's input directly when its target shape is a constant that does not copy
/// dimensions from its input (no 0 unless `allowzero`).
fn reshape_chain(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    let (Some(Some(data)), Some(Some(shape))) = (node.inputs.first(), node.inputs.get(1)) else {
        return false;
    };
    let (data, shape) = (*data, *shape);
    let allowzero = node
        .attribute("allowzero")
        .and_then(|a| a.as_int())
        .unwrap_or(0)
        != 0;
    let Some(dims) = rw.const_ints(shape) else {
        return false;
    };
    if !allowzero && dims.contains(&0) {
        return false;
    }
    let Some(inner) = rw.producer(data) else {
        return false;
    };
    let inner_node = rw.node(inner);
    if !["Reshape", "Flatten", "Squeeze", "Unsqueeze"]
        .iter()
        .any(|op| is_op(inner_node, op))
    {
        return false;
    }
    if rw.sole_consumer(data) != Some(id) {
        return false;
    }
    let Some(Some(src)) = inner_node.inputs.first().copied() else {
        return false;
    };
    rw.g.node_mut(id).inputs[0] = Some(src);
    rw.remove(inner);
    rw.count("reshape_chain");
    true
}

/// The axes of a Squeeze/Unsqueeze: the attribute before opset 13, the input from 13.
fn axes_of(rw: &Rewriter<'_>, id: NodeId) -> Option<Vec<i64>> {
    let node = rw.node(id);
    if rw.opset >= 13 {
        let v = node.inputs.get(1).copied().flatten()?;
        rw.const_ints(v)
    } else {
        node.attribute("axes")?.as_ints().map(<[i64]>::to_vec)
    }
}

/// Squeeze(Unsqueeze(x, a), a) and Unsqueeze(Squeeze(x, a), a) are x. Both nodes read
/// their axes against the same (larger) rank, so equal axis lists mean equal axes.
fn squeeze_pair(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    let outer_is_squeeze = node.op_type == "Squeeze";
    let (Some(Some(mid)), [out]) = (node.inputs.first().copied(), node.outputs.as_slice()) else {
        return false;
    };
    let out = *out;
    let inner_op = if outer_is_squeeze {
        "Unsqueeze"
    } else {
        "Squeeze"
    };
    let Some(inner) = rw.producer_op(mid, inner_op) else {
        return false;
    };
    if rw.sole_consumer(mid) != Some(id) {
        return false;
    }
    let Some(Some(src)) = rw.node(inner).inputs.first().copied() else {
        return false;
    };
    let (Some(mut a), Some(mut b)) = (axes_of(rw, id), axes_of(rw, inner)) else {
        return false;
    };
    a.sort_unstable();
    b.sort_unstable();
    if a.is_empty() || a != b || a.windows(2).any(|w| w[0] == w[1]) {
        return false;
    }
    if rw.is_pinned(out) {
        return false;
    }
    rw.replace_uses(out, src);
    rw.remove(id);
    rw.remove(inner);
    rw.count("squeeze_pair");
    true
}
