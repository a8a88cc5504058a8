//! Transformer patterns: GELU written with Erf (-> com.microsoft Gelu) or with Tanh
//! (-> com.microsoft FastGelu), and layer normalization written out with ReduceMean
//! (-> LayerNormalization).

use super::rewriter::{is_op, other_input, Rewriter};
use onnx_runtime_ir::{Attribute, NodeId, ValueId};

const MS: &str = "com.microsoft";

/// Relative tolerance for the exporters' f32 literals (sqrt 2, 0.044715, ...).
fn near(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-5 * b.abs()
}

/// The other input of two-input node `id` when it is a one-element constant near `want`.
fn const_operand(rw: &Rewriter<'_>, id: NodeId, v: ValueId, want: f64) -> bool {
    other_input(rw.node(id), v)
        .and_then(|c| rw.const_scalar(c))
        .is_some_and(|c| near(c, want))
}

/// The node reading `v` when it is its only reader and has op `op`.
fn next_op(rw: &Rewriter<'_>, v: ValueId, op: &str) -> Option<NodeId> {
    let n = rw.sole_consumer(v)?;
    let node = rw.node(n);
    (is_op(node, op) && node.outputs.len() == 1).then_some(n)
}

/// The tail both GELU forms share, from `t` = erf(..) or tanh(..):
/// `(1 + t) * x * 0.5` as Mul(Mul(x, 1 + t), 0.5), Mul(Mul(1 + t, 0.5), x) or
/// Mul(Mul(x, 0.5), 1 + t), any operand order. Returns the nodes after `t` and the last one.
fn gelu_tail(rw: &Rewriter<'_>, t: ValueId, x: ValueId) -> Option<(Vec<NodeId>, NodeId)> {
    let add = next_op(rw, t, "Add")?;
    if !const_operand(rw, add, t, 1.0) {
        return None;
    }
    let a = rw.node(add).outputs[0];
    let m1 = next_op(rw, a, "Mul")?;
    let other = other_input(rw.node(m1), a)?;
    let m1_out = rw.node(m1).outputs[0];
    if other == x {
        let m2 = next_op(rw, m1_out, "Mul")?;
        if const_operand(rw, m2, m1_out, 0.5) {
            return Some((vec![add, m1, m2], m2));
        }
        return None;
    }
    if rw.const_scalar(other).is_some_and(|c| near(c, 0.5)) {
        let m2 = next_op(rw, m1_out, "Mul")?;
        if other_input(rw.node(m2), m1_out) == Some(x) {
            return Some((vec![add, m1, m2], m2));
        }
        return None;
    }
    // other = Mul(x, 0.5), read only here.
    let h = rw.producer_op(other, "Mul")?;
    if rw.sole_consumer(other) != Some(m1) || !const_operand(rw, h, x, 0.5) {
        return None;
    }
    let hn = rw.node(h);
    if !hn.inputs.contains(&Some(x)) {
        return None;
    }
    Some((vec![add, h, m1], m1))
}

/// Replaces the nodes of a matched pattern by one node `domain:op(inputs)` written where
/// `root` was (its output is kept).
fn replace(
    rw: &mut Rewriter<'_>,
    nodes: &[NodeId],
    root: NodeId,
    domain: &str,
    op: &str,
    inputs: Vec<Option<ValueId>>,
    attrs: Vec<(&str, Attribute)>,
) {
    let node = rw.g.node_mut(root);
    node.op_type = op.into();
    node.domain = domain.into();
    node.inputs = inputs;
    node.attributes.clear();
    for (k, a) in attrs {
        node.attributes.insert(k.into(), a);
    }
    for &n in nodes {
        if n != root {
            rw.remove(n);
        }
    }
    if domain == MS {
        rw.new_domains.insert(MS);
    }
}

/// Erf(x / sqrt 2) (or Erf(x * (1 / sqrt 2))) then the GELU tail: com.microsoft Gelu.
pub(crate) fn fuse_gelu(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    if !is_op(node, "Erf") || !rw.has_kernel(MS, "Gelu", 1) {
        return false;
    }
    let Some(Some(v)) = node.inputs.first().copied() else {
        return false;
    };
    let Some(scale) = rw.producer(v) else {
        return false;
    };
    if rw.sole_consumer(v) != Some(id) {
        return false;
    }
    let sn = rw.node(scale);
    let x = match sn.inputs.as_slice() {
        [Some(x), Some(c)]
            if is_op(sn, "Div")
                && rw
                    .const_scalar(*c)
                    .is_some_and(|c| near(c, std::f64::consts::SQRT_2)) =>
        {
            *x
        }
        [Some(a), Some(b)] if is_op(sn, "Mul") => {
            let half_sqrt2 = std::f64::consts::FRAC_1_SQRT_2;
            if rw.const_scalar(*b).is_some_and(|c| near(c, half_sqrt2)) {
                *a
            } else if rw.const_scalar(*a).is_some_and(|c| near(c, half_sqrt2)) {
                *b
            } else {
                return false;
            }
        }
        _ => return false,
    };
    let t = node.outputs[0];
    let Some((mut nodes, root)) = gelu_tail(rw, t, x) else {
        return false;
    };
    nodes.extend([scale, id]);
    replace(rw, &nodes, root, MS, "Gelu", vec![Some(x)], vec![]);
    rw.count("gelu");
    true
}

/// Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)) then the GELU tail: com.microsoft FastGelu.
/// The cube may be Pow(x, 3) or x * x * x.
pub(crate) fn fuse_fast_gelu(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    if !is_op(node, "Tanh") || !rw.has_kernel(MS, "FastGelu", 1) {
        return false;
    }
    let Some(Some(v)) = node.inputs.first().copied() else {
        return false;
    };
    let Some(outer) = rw.producer_op(v, "Mul") else {
        return false;
    };
    if rw.sole_consumer(v) != Some(id) {
        return false;
    }
    let mut matched = None;
    for &s in rw.node(outer).inputs.iter().flatten() {
        if !const_operand(rw, outer, s, (2.0 / std::f64::consts::PI).sqrt()) {
            continue;
        }
        if let Some(m) = inner_cubic(rw, s, outer) {
            matched = Some(m);
        }
    }
    let Some((x, mut nodes)) = matched else {
        return false;
    };
    let Some((tail, root)) = gelu_tail(rw, node.outputs[0], x) else {
        return false;
    };
    nodes.extend(tail);
    nodes.extend([outer, id]);
    replace(rw, &nodes, root, MS, "FastGelu", vec![Some(x)], vec![]);
    rw.count("fast_gelu");
    true
}

/// `s` = Add(x, Mul(cube(x), 0.044715)) read only by `user`: x and the nodes.
fn inner_cubic(rw: &Rewriter<'_>, s: ValueId, user: NodeId) -> Option<(ValueId, Vec<NodeId>)> {
    let add = rw.producer_op(s, "Add")?;
    if rw.sole_consumer(s) != Some(user) {
        return None;
    }
    let an = rw.node(add);
    for &x in an.inputs.iter().flatten() {
        let Some(k) = other_input(an, x) else {
            continue;
        };
        let Some(mk) = rw.producer_op(k, "Mul") else {
            continue;
        };
        if rw.sole_consumer(k) != Some(add) {
            continue;
        }
        let mkn = rw.node(mk);
        for &c in mkn.inputs.iter().flatten() {
            if !const_operand(rw, mk, c, 0.044715) {
                continue;
            }
            if let Some(mut cube) = cube_of(rw, c, x, mk) {
                cube.extend([mk, add]);
                return Some((x, cube));
            }
        }
    }
    None
}

/// The nodes computing `c` = x^3 (Pow(x, 3) or Mul(x, Mul(x, x)) in any order), read
/// only by `user`.
fn cube_of(rw: &Rewriter<'_>, c: ValueId, x: ValueId, user: NodeId) -> Option<Vec<NodeId>> {
    if rw.sole_consumer(c) != Some(user) {
        return None;
    }
    let p = rw.producer(c)?;
    let pn = rw.node(p);
    if is_op(pn, "Pow") {
        let [Some(b), Some(e)] = pn.inputs.as_slice() else {
            return None;
        };
        let e = rw.constant(*e)?;
        let three = match e.dtype {
            onnx_runtime_ir::DataType::Float32 => rw.const_scalar(pn.inputs[1]?)? == 3.0,
            _ => e.to_i64_vec()? == [3],
        };
        return (*b == x && three).then(|| vec![p]);
    }
    if !is_op(pn, "Mul") {
        return None;
    }
    let sq_v = other_input(pn, x)?;
    let sq = rw.producer_op(sq_v, "Mul")?;
    if rw.sole_consumer(sq_v) != Some(p) {
        return None;
    }
    let sqn = rw.node(sq);
    (sqn.inputs.as_slice() == [Some(x), Some(x)]).then(|| vec![sq, p])
}

/// The reduced axes of a ReduceMean with keepdims 1 (attribute before opset 18, constant
/// input from 18).
fn mean_axes(rw: &Rewriter<'_>, id: NodeId) -> Option<Vec<i64>> {
    let node = rw.node(id);
    if node
        .attribute("keepdims")
        .and_then(|a| a.as_int())
        .unwrap_or(1)
        != 1
    {
        return None;
    }
    if rw.opset >= 18 {
        rw.const_ints(node.inputs.get(1).copied().flatten()?)
    } else {
        node.attribute("axes")?.as_ints().map(<[i64]>::to_vec)
    }
}

/// ReduceMean, Sub, Pow 2 (or Mul by itself), ReduceMean, Add eps, Sqrt, Div, Mul gamma,
/// Add beta over the last axis: one LayerNormalization (ONNX from opset 17, else the
/// com.microsoft one). Anchored at the first ReduceMean.
pub(crate) fn fuse_layer_norm(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    if !is_op(node, "ReduceMean") || node.outputs.len() != 1 {
        return false;
    }
    let Some(Some(x)) = node.inputs.first().copied() else {
        return false;
    };
    if mean_axes(rw, id).as_deref() != Some(&[-1]) {
        return false;
    }
    let mu = node.outputs[0];
    let Some(sub) = next_op(rw, mu, "Sub") else {
        return false;
    };
    if rw.node(sub).inputs.as_slice() != [Some(x), Some(mu)] {
        return false;
    }
    let d = rw.node(sub).outputs[0];
    // d is read by the square and by the Div, nothing else.
    let readers = rw.consumers(d).to_vec();
    if readers.len() != 2 || rw.is_pinned(d) {
        return false;
    }
    let sq = readers.iter().copied().find(|&r| {
        let n = rw.node(r);
        (is_op(n, "Pow")
            && n.inputs.first() == Some(&Some(d))
            && n.inputs
                .get(1)
                .copied()
                .flatten()
                .and_then(|e| rw.constant(e))
                .and_then(|e| match e.dtype {
                    onnx_runtime_ir::DataType::Float32 => rw.const_scalar(n.inputs[1]?),
                    _ => e.to_i64_vec().filter(|v| v.len() == 1).map(|v| v[0] as f64),
                })
                == Some(2.0))
            || (is_op(n, "Mul") && n.inputs.as_slice() == [Some(d), Some(d)])
    });
    let Some(sq) = sq else { return false };
    let Some(div) = readers.iter().copied().find(|&r| r != sq) else {
        return false;
    };
    let sq_out = rw.node(sq).outputs[0];
    let Some(var_mean) = next_op(rw, sq_out, "ReduceMean") else {
        return false;
    };
    if mean_axes(rw, var_mean).as_deref() != Some(&[-1]) {
        return false;
    }
    let var = rw.node(var_mean).outputs[0];
    let Some(add_eps) = next_op(rw, var, "Add") else {
        return false;
    };
    let Some(eps) = other_input(rw.node(add_eps), var).and_then(|e| rw.const_scalar(e)) else {
        return false;
    };
    let Some(sqrt) = next_op(rw, rw.node(add_eps).outputs[0], "Sqrt") else {
        return false;
    };
    let std = rw.node(sqrt).outputs[0];
    if rw.sole_consumer(std) != Some(div) {
        return false;
    }
    let dn = rw.node(div);
    if !is_op(dn, "Div") || dn.inputs.as_slice() != [Some(d), Some(std)] {
        return false;
    }
    let normed = dn.outputs[0];
    // Scale (required) and bias (optional): 1-D constants of the same length.
    let Some(mul) = next_op(rw, normed, "Mul") else {
        return false;
    };
    let Some(gamma) = other_input(rw.node(mul), normed) else {
        return false;
    };
    let Some(g) = rw.const_f32(gamma) else {
        return false;
    };
    if g.shape.len() != 1 {
        return false;
    }
    let scaled = rw.node(mul).outputs[0];
    let mut nodes = vec![id, sub, sq, var_mean, add_eps, sqrt, div, mul];
    let mut root = mul;
    let mut beta = None;
    if let Some(add) = next_op(rw, scaled, "Add") {
        if let Some(b) = other_input(rw.node(add), scaled) {
            if rw.const_f32(b).is_some_and(|c| c.shape == g.shape) {
                beta = Some(b);
                nodes.push(add);
                root = add;
            }
        }
    }
    let onnx = rw.opset >= 17 && rw.has_kernel("", "LayerNormalization", rw.opset);
    if !onnx && !rw.has_kernel(MS, "LayerNormalization", 1) {
        return false;
    }
    let attrs = vec![
        ("axis", Attribute::Int(-1)),
        ("epsilon", Attribute::Float(eps as f32)),
    ];
    let domain = if onnx { "" } else { MS };
    replace(
        rw,
        &nodes,
        root,
        domain,
        "LayerNormalization",
        vec![Some(x), Some(gamma), beta],
        attrs,
    );
    rw.count("layer_norm");
    true
}
