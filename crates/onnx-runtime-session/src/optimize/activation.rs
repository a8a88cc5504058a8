//! Activations: Conv followed by an activation becomes `com.microsoft` FusedConv;
//! x * Sigmoid(x) becomes QuickGelu (alpha 1, i.e. SiLU); the decompositions of HardSwish
//! that exporters write (x * Clip(x + 3, 0, 6) / 6, x * HardSigmoid(x)) become HardSwish.

use super::rewriter::{is_op, other_input, Rewriter};
use onnx_runtime_ir::{Attribute, NodeId, ValueId};

const MS: &str = "com.microsoft";

/// How close a constant must be to 3, 6, 1/6 or 0.5 to count as that number (f32 rounding
/// of the exporters' literals).
const TOL: f64 = 1e-6;

fn near(a: f64, b: f64) -> bool {
    (a - b).abs() <= TOL * b.abs().max(1.0)
}

/// An activation that reads one value and that FusedConv can apply.
pub(crate) struct Activation {
    pub name: &'static str,
    pub params: Vec<f32>,
    /// The nodes that compute it (all removed when it is fused).
    pub nodes: Vec<NodeId>,
    /// The value it produces.
    pub out: ValueId,
}

/// The scalar bounds of a Clip node: attributes before opset 11, constant inputs after.
fn clip_bounds(rw: &Rewriter<'_>, id: NodeId) -> Option<(f64, f64)> {
    let node = rw.node(id);
    if rw.opset < 11 {
        let f = |k: &str, d: f32| {
            node.attribute(k)
                .map_or(Some(d), |a| a.as_float())
                .map(f64::from)
        };
        return Some((f("min", f32::MIN)?, f("max", f32::MAX)?));
    }
    let bound = |i: usize, d: f32| -> Option<f64> {
        match node.inputs.get(i).copied().flatten() {
            None => Some(d as f64),
            Some(v) => {
                let c = rw.const_f32(v)?;
                c.scalar()
            }
        }
    };
    Some((bound(1, f32::MIN)?, bound(2, f32::MAX)?))
}

/// A value `v` that is `x * s` or `s * x` (Mul) or `x / d` (Div) for a one-element constant,
/// returned as (node, x, factor).
fn scaled(rw: &Rewriter<'_>, id: NodeId) -> Option<(ValueId, f64)> {
    let node = rw.node(id);
    let [Some(a), Some(b)] = node.inputs.as_slice() else {
        return None;
    };
    if is_op(node, "Div") {
        return Some((*a, 1.0 / rw.const_scalar(*b)?));
    }
    if is_op(node, "Mul") {
        if let Some(s) = rw.const_scalar(*b) {
            return Some((*a, s));
        }
        return Some((*b, rw.const_scalar(*a)?));
    }
    None
}

/// Whether `v` is Clip(Add(x, 3), 0, 6) (either Add order), its nodes read only inside the
/// pattern ending at `user`. Returns the Clip and Add nodes.
fn relu6_of_x_plus_3(
    rw: &Rewriter<'_>,
    v: ValueId,
    x: ValueId,
    user: NodeId,
) -> Option<[NodeId; 2]> {
    let clip = rw.producer_op(v, "Clip")?;
    if rw.sole_consumer(v) != Some(user) {
        return None;
    }
    let (lo, hi) = clip_bounds(rw, clip)?;
    if lo != 0.0 || hi != 6.0 {
        return None;
    }
    let a = rw.node(clip).inputs.first().copied().flatten()?;
    let add = rw.producer_op(a, "Add")?;
    if rw.sole_consumer(a) != Some(clip) {
        return None;
    }
    let three = other_input(rw.node(add), x)?;
    if !near(rw.const_scalar(three)?, 3.0) {
        return None;
    }
    Some([clip, add])
}

/// HardSwish written out, ending at node `id`:
/// `Div(Mul(x, relu6(x+3)), 6)`, `Mul(Mul(x, relu6(x+3)), 1/6)`, `Mul(x, Div(relu6(x+3), 6))`
/// or `Mul(x, HardSigmoid(x))` with alpha 1/6 and beta 0.5 (any Mul operand order).
fn hard_swish_at(rw: &Rewriter<'_>, id: NodeId) -> Option<(ValueId, Vec<NodeId>)> {
    let node = rw.node(id);
    if node.outputs.len() != 1 {
        return None;
    }
    // Outer scale by 1/6 of x * relu6(x + 3).
    if let Some((p, s)) = scaled(rw, id) {
        if near(s, 1.0 / 6.0) {
            if let Some(m) = rw.producer_op(p, "Mul") {
                if rw.sole_consumer(p) == Some(id) {
                    let mn = rw.node(m);
                    for &x in mn.inputs.iter().flatten() {
                        let Some(r) = other_input(mn, x) else {
                            continue;
                        };
                        if let Some([clip, add]) = relu6_of_x_plus_3(rw, r, x, m) {
                            return Some((x, vec![add, clip, m, id]));
                        }
                    }
                }
            }
        }
    }
    if !is_op(node, "Mul") {
        return None;
    }
    for &x in node.inputs.iter().flatten() {
        let Some(q) = other_input(node, x) else {
            continue;
        };
        if rw.sole_consumer(q) != Some(id) {
            continue;
        }
        let Some(qp) = rw.producer(q) else { continue };
        let qn = rw.node(qp);
        if is_op(qn, "HardSigmoid") && qn.inputs.first() == Some(&Some(x)) {
            let alpha = qn
                .attribute("alpha")
                .and_then(|a| a.as_float())
                .unwrap_or(0.2) as f64;
            let beta = qn
                .attribute("beta")
                .and_then(|a| a.as_float())
                .unwrap_or(0.5) as f64;
            if near(alpha, 1.0 / 6.0) && near(beta, 0.5) {
                return Some((x, vec![qp, id]));
            }
            continue;
        }
        let Some((r, s)) = scaled(rw, qp) else {
            continue;
        };
        if !near(s, 1.0 / 6.0) {
            continue;
        }
        if let Some([clip, add]) = relu6_of_x_plus_3(rw, r, x, qp) {
            return Some((x, vec![add, clip, qp, id]));
        }
    }
    None
}

/// The activation reading `x` (its only reader), if FusedConv supports it.
pub(crate) fn activation_after(rw: &Rewriter<'_>, x: ValueId) -> Option<Activation> {
    // A written-out HardSwish reads x from two nodes; its last node is a reader of x or a
    // reader of one.
    let mut roots: Vec<NodeId> = rw.consumers(x).to_vec();
    for &c in rw.consumers(x) {
        for &o in &rw.node(c).outputs {
            roots.extend_from_slice(rw.consumers(o));
        }
    }
    for root in roots {
        if let Some((hx, nodes)) = hard_swish_at(rw, root) {
            if hx == x && rw.only_read_by(x, &nodes) {
                return Some(Activation {
                    name: "HardSwish",
                    params: vec![],
                    nodes,
                    out: rw.node(root).outputs[0],
                });
            }
        }
    }
    let id = rw.sole_consumer(x)?;
    let node = rw.node(id);
    if node.outputs.len() != 1 || node.inputs.first() != Some(&Some(x)) {
        return None;
    }
    let fattr = |k: &str, d: f32| node.attribute(k).and_then(|a| a.as_float()).unwrap_or(d);
    if node.domain == MS && node.op_type == "QuickGelu" {
        // SiLU arrives here as QuickGelu with alpha 1 (fuse_silu runs in an earlier group).
        return Some(Activation {
            name: "QuickGelu",
            params: vec![fattr("alpha", 1.702)],
            nodes: vec![id],
            out: node.outputs[0],
        });
    }
    if !node.normalized_domain().is_empty() {
        return None;
    }
    let (name, params) = match node.op_type.as_str() {
        "Relu" => ("Relu", vec![]),
        "Sigmoid" => ("Sigmoid", vec![]),
        "Tanh" => ("Tanh", vec![]),
        "HardSwish" => ("HardSwish", vec![]),
        "LeakyRelu" => ("LeakyRelu", vec![fattr("alpha", 0.01)]),
        "HardSigmoid" => ("HardSigmoid", vec![fattr("alpha", 0.2), fattr("beta", 0.5)]),
        "Clip" => {
            let (lo, hi) = clip_bounds(rw, id)?;
            ("Clip", vec![lo as f32, hi as f32])
        }
        _ => return None,
    };
    Some(Activation {
        name,
        params,
        nodes: vec![id],
        out: node.outputs[0],
    })
}

/// Conv (float32 constant weights) -> activation becomes FusedConv, and so does
/// Conv -> Add(conv, z) [-> activation] with `z` proven to have the Conv output's shape
/// (FusedConv's residual input Z), when the registry has a FusedConv kernel.
pub(crate) fn fuse_conv_activation(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    if !is_op(node, "Conv") || node.outputs.len() != 1 || !rw.has_kernel(MS, "FusedConv", 1) {
        return false;
    }
    let Some(Some(w)) = node.inputs.get(1).copied() else {
        return false;
    };
    let Some(wc) = rw.const_f32(w) else {
        return false;
    };
    let x = node.outputs[0];
    let (mut removed, mut out, mut z) = (Vec::new(), x, None);
    if let Some((add, zv)) = residual_add(rw, x) {
        removed.push(add);
        out = rw.node(add).outputs[0];
        z = Some(zv);
    }
    let act = activation_after(rw, out);
    if act.is_none() && z.is_none() {
        return false;
    }
    let (name, params) = match act {
        Some(a) => {
            removed.extend(a.nodes);
            out = a.out;
            (a.name, a.params)
        }
        None => ("Identity", vec![]),
    };
    // Z is the fourth input: an absent bias becomes zeros.
    let bias = match (z, rw.node(id).inputs.get(2).copied().flatten()) {
        (None, _) => None,
        (Some(_), Some(b)) => Some(b),
        (Some(_), None) => {
            let m = wc.shape[0];
            Some(rw.add_f32_initializer("conv_zero_bias", vec![m], &vec![0.0; m]))
        }
    };
    if let Some(z) = z {
        let inputs = &mut rw.g.node_mut(id).inputs;
        inputs.resize(3, None);
        inputs[2] = bias;
        inputs.push(Some(z));
    }
    let pass = if z.is_some() {
        "conv_add_activation"
    } else {
        "conv_activation"
    };
    absorb_chain(
        rw,
        id,
        (MS, "FusedConv"),
        (name, params),
        out,
        removed,
        pass,
    );
    true
}

/// Ends a fusion: node `id` becomes `domain:op` with the `activation` (when named) and
/// `activation_params` (when any) attributes, and takes over `out`, the chain's last value;
/// the chain's other nodes go, and the domain is recorded for import.
pub(crate) fn absorb_chain(
    rw: &mut Rewriter<'_>,
    id: NodeId,
    (domain, op): (&'static str, &str),
    (name, params): (&str, Vec<f32>),
    out: ValueId,
    removed: Vec<NodeId>,
    pass: &'static str,
) {
    let node = rw.g.node_mut(id);
    node.op_type = op.into();
    node.domain = domain.into();
    if !name.is_empty() {
        node.attributes
            .insert("activation".into(), Attribute::String(name.into()));
    }
    if !params.is_empty() {
        node.attributes
            .insert("activation_params".into(), Attribute::Floats(params));
    }
    node.outputs[0] = out;
    for n in removed {
        rw.remove(n);
    }
    rw.new_domains.insert(domain);
    rw.count(pass);
}

/// The Add (or two-input Sum) that is the only reader of `x`, with its other input `z`
/// when both are known to have the same static shape (no broadcasting).
fn residual_add(rw: &mut Rewriter<'_>, x: ValueId) -> Option<(NodeId, ValueId)> {
    let add = rw.sole_consumer(x)?;
    let an = rw.node(add);
    if !(is_op(an, "Add") || is_op(an, "Sum")) || an.outputs.len() != 1 {
        return None;
    }
    let z = other_input(an, x)?;
    if z == x {
        return None;
    }
    let sx = rw.static_shape(x)?;
    (rw.static_shape(z)? == sx).then_some((add, z))
}

/// A written-out HardSwish becomes the HardSwish op (opset 14+, when the model's opset has
/// it). Before opset 14 the four-node forms become `x * HardSigmoid(x)` with alpha 1/6 and
/// beta 1/2: two passes instead of four, and the form FusedConv later takes whole.
pub(crate) fn fuse_hard_swish(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let Some((x, nodes)) = hard_swish_at(rw, id) else {
        return false;
    };
    if rw.opset >= 14 && rw.has_kernel("", "HardSwish", rw.opset) {
        let node = rw.g.node_mut(id);
        node.op_type = "HardSwish".into();
        node.domain = String::new();
        node.inputs = vec![Some(x)];
        node.attributes.clear();
        for n in nodes {
            if n != id {
                rw.remove(n);
            }
        }
        rw.count("hard_swish");
        return true;
    }
    // nodes = [Add, Clip, middle, root] for the written-out forms; [HardSigmoid, Mul] is
    // already the short form.
    let [_, clip, _, root] = nodes[..] else {
        return false;
    };
    if !rw.has_kernel("", "HardSigmoid", rw.opset) {
        return false;
    }
    let hs = rw.node(clip).outputs[0];
    let node = rw.g.node_mut(clip);
    node.op_type = "HardSigmoid".into();
    node.inputs = vec![Some(x)];
    node.attributes.clear();
    node.attributes
        .insert("alpha".into(), Attribute::Float(1.0 / 6.0));
    node.attributes.insert("beta".into(), Attribute::Float(0.5));
    let node = rw.g.node_mut(root);
    node.op_type = "Mul".into();
    node.inputs = vec![Some(x), Some(hs)];
    node.attributes.clear();
    for n in [nodes[0], nodes[2]] {
        rw.remove(n);
    }
    rw.count("hard_swish_as_hard_sigmoid");
    true
}

/// x * Sigmoid(x) becomes com.microsoft QuickGelu with alpha 1 (SiLU / Swish).
pub(crate) fn fuse_silu(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    if !is_op(node, "Mul") || node.outputs.len() != 1 || !rw.has_kernel(MS, "QuickGelu", 1) {
        return false;
    }
    for &x in node.inputs.iter().flatten() {
        let Some(s) = other_input(node, x) else {
            continue;
        };
        let Some(sig) = rw.producer_op(s, "Sigmoid") else {
            continue;
        };
        if rw.node(sig).inputs.first() != Some(&Some(x)) || rw.sole_consumer(s) != Some(id) {
            continue;
        }
        let node = rw.g.node_mut(id);
        node.op_type = "QuickGelu".into();
        node.domain = MS.into();
        node.inputs = vec![Some(x)];
        node.attributes.clear();
        node.attributes
            .insert("alpha".into(), Attribute::Float(1.0));
        rw.remove(sig);
        rw.new_domains.insert(MS);
        rw.count("silu");
        return true;
    }
    false
}
