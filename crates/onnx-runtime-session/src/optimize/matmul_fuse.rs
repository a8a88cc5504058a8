//! MatMul with constant weights, then Add of a constant bias vector, then optionally an
//! activation, becomes the CPU provider's internal `MatMulBias`: the bias and the activation
//! run on each block of the product while it is in cache, so the two passes over the output
//! go away (transformer encoders have this chain in every projection and feed-forward layer).

use super::activation::{absorb_chain, activation_after};
use super::rewriter::{is_op, other_input, Rewriter};
use onnx_runtime_ep_cpu::INTERNAL_DOMAIN;
use onnx_runtime_ir::{NodeId, ValueId};

const OP: &str = "MatMulBias";
const MS: &str = "com.microsoft";

/// The GELU node reading `x` (its only reader) as (activation name, node, output):
/// `com.microsoft` Gelu or FastGelu without a bias input, or ONNX Gelu (opset 20).
fn gelu_after(rw: &Rewriter<'_>, x: ValueId) -> Option<(&'static str, NodeId, ValueId)> {
    let id = rw.sole_consumer(x)?;
    let node = rw.node(id);
    if node.inputs.len() != 1 || node.inputs[0] != Some(x) || node.outputs.len() != 1 {
        return None;
    }
    let name = match (node.normalized_domain(), node.op_type.as_str()) {
        (MS, "Gelu") => "Gelu",
        (MS, "FastGelu") => "FastGelu",
        ("", "Gelu") => match node.attribute("approximate").and_then(|a| a.as_str()) {
            None | Some("none") => "Gelu",
            Some("tanh") => "FastGelu",
            Some(_) => return None,
        },
        _ => return None,
    };
    Some((name, id, node.outputs[0]))
}

/// MatMul(A, W) -> Add(bias) [-> activation], with W a constant 2-D float32 matrix and the
/// bias a constant float32 vector of W's width (any leading 1s that cannot widen the output).
pub(crate) fn fuse_matmul_bias(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    if !is_op(node, "MatMul")
        || node.inputs.len() != 2
        || node.outputs.len() != 1
        || !rw.has_kernel(INTERNAL_DOMAIN, OP, 1)
    {
        return false;
    }
    let (Some(a), Some(w)) = (node.inputs[0], node.inputs[1]) else {
        return false;
    };
    let Some(wc) = rw.const_f32(w) else {
        return false;
    };
    let &[_, n] = wc.shape.as_slice() else {
        return false;
    };
    let x = node.outputs[0];
    let Some(add) = rw.sole_consumer(x) else {
        return false;
    };
    let an = rw.node(add);
    if !is_op(an, "Add") || an.outputs.len() != 1 {
        return false;
    }
    let Some(b) = other_input(an, x) else {
        return false;
    };
    let Some(bias) = rw.const_f32(b) else {
        return false;
    };
    let added = an.outputs[0];
    // The bias must be [N] after dropping leading 1s, and must not raise the output's rank.
    let lead = bias.shape.len().saturating_sub(1);
    if bias.shape.last() != Some(&n) || bias.shape[..lead].iter().any(|&d| d != 1) {
        return false;
    }
    if lead > 0 {
        // The product has A's rank when A is a matrix or a batch of them.
        match rw.static_shape(a) {
            Some(s) if s.len() >= 2 && s.len() > lead => {}
            _ => return false,
        }
    }
    let (mut removed, mut out) = (vec![add], added);
    let (name, params) = if let Some((g, gid, gout)) = gelu_after(rw, added) {
        removed.push(gid);
        out = gout;
        (g, vec![])
    } else if let Some(act) = activation_after(rw, added) {
        removed.extend(act.nodes);
        out = act.out;
        (act.name, act.params)
    } else {
        ("", vec![])
    };
    let bias_v = if lead == 0 {
        b
    } else {
        rw.add_f32_initializer("matmul_bias", vec![n], &bias.data)
    };
    rw.g.node_mut(id).inputs = vec![Some(a), Some(w), Some(bias_v)];
    let pass = if name.is_empty() {
        "matmul_bias"
    } else {
        "matmul_bias_activation"
    };
    absorb_chain(
        rw,
        id,
        (INTERNAL_DOMAIN, OP),
        (name, params),
        out,
        removed,
        pass,
    );
    true
}
