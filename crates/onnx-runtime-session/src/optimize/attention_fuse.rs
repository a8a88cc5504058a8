//! Scaled dot-product attention written out as ops (what PyTorch exporters write for
//! transformers' encoders) becomes one `com.microsoft` MultiHeadAttention: the fused kernel
//! reads Q, K and V straight from the projections' [batch, seq, heads * head] outputs, so the
//! four transposes, the score and probability tensors and their element-wise passes go away.
//! Only for a device session whose provider runs MultiHeadAttention (the CPU provider has
//! it for fallbacks).
//!
//! The pattern, anchored at the Softmax over the keys:
//!
//! ```text
//! Q = Transpose(Reshape(q, [b, s, heads, head]), [0, 2, 1, 3])    (likewise V from v)
//! Kt = Transpose(Reshape(k, [b, l, heads, head]), [0, 2, 3, 1])   (or [0, 2, 1, 3] then [0, 1, 3, 2])
//! S = MatMul(Q [* c], Kt [* c]) [* c | / c] [+ bias]
//! P = Softmax(S, -1) [then Where(IsNaN(P), 0, P)]
//! out = Reshape(Transpose(MatMul(P, V), [0, 2, 1, 3]), [b, s, heads * head])
//! ```
//!
//! with scalar constants `c` (their product is the scale) and a bias of rank 4 (it broadcasts
//! to [b, heads, s, l] as MultiHeadAttention's attention_bias). The shapes are proven with
//! [`super::sym_shapes`]: the reshapes must split and merge the last axis only. A row whose
//! every key is masked by -inf gives zeros from the fused kernel, as the exporters' NaN guard
//! gives; without the guard the unfused graph gives NaN there.

use super::rewriter::{is_op, Rewriter};
use super::sym_shapes::D;
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ep_cpu::CpuRegistry;
use onnx_runtime_ir::{Attribute, NodeId, ValueId};

const MS: &str = "com.microsoft";
const OP: &str = "MultiHeadAttention";

/// Whether `device` runs MultiHeadAttention (and the CPU registry has it for fallbacks).
pub(crate) fn enabled(device: Option<&dyn ExecutionProvider>, registry: &CpuRegistry) -> bool {
    super::rewriter::device_runs(device, registry, MS, OP)
}

/// The matched nodes (removed on success) and the scale collected so far.
struct Match {
    nodes: Vec<NodeId>,
    scale: f64,
}

impl Match {
    /// The node producing `v` when it is `op` and `v` has no other reader than `reader`.
    fn take(&mut self, rw: &Rewriter<'_>, v: ValueId, op: &str, reader: NodeId) -> Option<NodeId> {
        let p = rw.producer(v)?;
        if !is_op(rw.node(p), op) || !rw.only_read_by(v, &[reader]) || rw.is_pinned(v) {
            return None;
        }
        self.nodes.push(p);
        Some(p)
    }

    /// `v` through an optional Mul (or Div when `div`) by a scalar constant.
    fn unscale(&mut self, rw: &Rewriter<'_>, v: ValueId, reader: NodeId, div: bool) -> ValueId {
        let Some(p) = rw.producer(v) else { return v };
        let n = rw.node(p);
        let op_ok = is_op(n, "Mul") || (div && is_op(n, "Div"));
        if !op_ok || n.inputs.len() != 2 || !rw.only_read_by(v, &[reader]) || rw.is_pinned(v) {
            return v;
        }
        let (Some(a), Some(b)) = (n.inputs[0], n.inputs[1]) else {
            return v;
        };
        let scalar = |x: ValueId| rw.const_scalar(x).filter(|c| c.is_finite() && *c != 0.0);
        let (x, c) = if is_op(n, "Div") {
            match scalar(b) {
                Some(c) => (a, 1.0 / c),
                None => return v,
            }
        } else if let Some(c) = scalar(b) {
            (a, c)
        } else if let Some(c) = scalar(a) {
            (b, c)
        } else {
            return v;
        };
        self.scale *= c;
        self.nodes.push(p);
        x
    }

    /// The projection behind a Transpose(perm) of a Reshape splitting its last axis into
    /// [heads, head]: (projection, heads, head).
    fn heads_of(
        &mut self,
        rw: &mut Rewriter<'_>,
        v: ValueId,
        perm: &[i64],
        reader: NodeId,
    ) -> Option<(ValueId, i64, i64)> {
        let t = self.take(rw, v, "Transpose", reader)?;
        let tn = rw.node(t);
        let mut split = tn.inputs.first().copied().flatten()?;
        let p = tn.attribute("perm").and_then(|a| a.as_ints())?.to_vec();
        let mut reader = t;
        if p.as_slice() != perm {
            // K^T as two transposes: [0, 2, 1, 3] then [0, 1, 3, 2].
            if perm != [0, 2, 3, 1] || p.as_slice() != [0, 1, 3, 2] {
                return None;
            }
            let t2 = self.take(rw, split, "Transpose", t)?;
            let t2n = rw.node(t2);
            if t2n.attribute("perm").and_then(|a| a.as_ints()) != Some(&[0, 2, 1, 3][..]) {
                return None;
            }
            split = t2n.inputs.first().copied().flatten()?;
            reader = t2;
        }
        let r = self.take(rw, split, "Reshape", reader)?;
        let proj = rw.node(r).inputs.first().copied().flatten()?;
        let (Some(out), Some(inp)) = (rw.sym_dims(split), rw.sym_dims(proj)) else {
            return None;
        };
        match (out.as_slice(), inp.as_slice()) {
            ([b, s, D::K(h), D::K(d)], [b2, s2, D::K(e)]) if b == b2 && s == s2 && h * d == *e => {
                Some((proj, *h, *d))
            }
            _ => None,
        }
    }
}

/// Fuses the attention whose Softmax is `id`.
pub(crate) fn fuse_attention(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    if !is_op(node, "Softmax") || node.inputs.len() != 1 || node.outputs.len() != 1 {
        return false;
    }
    let axis = node.attribute("axis").and_then(|a| a.as_int());
    let (Some(logits), probs) = (node.inputs[0], node.outputs[0]) else {
        return false;
    };
    let Some(dims) = rw.sym_dims(logits) else {
        return false;
    };
    // Before opset 13 Softmax flattens from `axis` (default 1): the last axis only when it is.
    let last_only = match axis {
        Some(-1) | Some(3) => true,
        None => rw.opset >= 13,
        _ => false,
    };
    if dims.len() != 4 || !last_only {
        return false;
    }
    let mut m = Match {
        nodes: vec![id],
        scale: 1.0,
    };
    // Softmax input: [Add(bias)] over the scaled product.
    let mut bias = None;
    let mut scores = logits;
    let mut score_reader = id;
    if let Some(add) = m.take(rw, logits, "Add", id) {
        let an = rw.node(add);
        let (Some(a), Some(b)) = (
            an.inputs.first().copied().flatten(),
            an.inputs.get(1).copied().flatten(),
        ) else {
            return false;
        };
        let from_matmul = |v: ValueId| {
            let mut x = v;
            for _ in 0..2 {
                match rw.producer(x).map(|p| rw.node(p)) {
                    Some(n) if is_op(n, "MatMul") => return true,
                    Some(n) if is_op(n, "Mul") || is_op(n, "Div") => {
                        x = match n.inputs.first().copied().flatten() {
                            Some(i) => i,
                            None => return false,
                        }
                    }
                    _ => return false,
                }
            }
            false
        };
        let (s, bv) = if from_matmul(a) { (a, b) } else { (b, a) };
        if !from_matmul(s) || s == bv {
            return false;
        }
        scores = s;
        score_reader = add;
        bias = Some(bv);
    }
    let product = m.unscale(rw, scores, score_reader, true);
    let product_reader = m
        .nodes
        .last()
        .copied()
        .filter(|_| product != scores)
        .unwrap_or(score_reader);
    let Some(mm) = m.take(rw, product, "MatMul", product_reader) else {
        return false;
    };
    let mmn = rw.node(mm);
    let (Some(qs), Some(ks)) = (mmn.inputs[0], mmn.inputs.get(1).copied().flatten()) else {
        return false;
    };
    let q4 = m.unscale(rw, qs, mm, false);
    let q_reader = if q4 != qs {
        *m.nodes.last().unwrap()
    } else {
        mm
    };
    let k4 = m.unscale(rw, ks, mm, false);
    let k_reader = if k4 != ks {
        *m.nodes.last().unwrap()
    } else {
        mm
    };
    let Some((q, heads, head)) = m.heads_of(rw, q4, &[0, 2, 1, 3], q_reader) else {
        return false;
    };
    let Some((k, k_heads, k_head)) = m.heads_of(rw, k4, &[0, 2, 3, 1], k_reader) else {
        return false;
    };
    if (k_heads, k_head) != (heads, head) {
        return false;
    }
    // After the Softmax: an optional NaN guard, then P V.
    let mut p = probs;
    let readers = rw.consumers(probs).to_vec();
    if rw.is_pinned(probs) {
        return false;
    }
    if readers.len() == 2 {
        let isnan = readers
            .iter()
            .copied()
            .find(|&r| is_op(rw.node(r), "IsNaN"));
        let wh = readers
            .iter()
            .copied()
            .find(|&r| is_op(rw.node(r), "Where"));
        let (Some(isnan), Some(wh)) = (isnan, wh) else {
            return false;
        };
        let flag = rw.node(isnan).outputs[0];
        let wn = rw.node(wh);
        let zero = wn
            .inputs
            .get(1)
            .copied()
            .flatten()
            .and_then(|z| rw.const_scalar(z));
        if wn.inputs.as_slice() != [Some(flag), wn.inputs[1], Some(probs)]
            || zero != Some(0.0)
            || !rw.only_read_by(flag, &[wh])
            || rw.is_pinned(flag)
        {
            return false;
        }
        m.nodes.push(isnan);
        m.nodes.push(wh);
        p = wn.outputs[0];
    } else if readers.len() != 1 {
        return false;
    }
    let Some(pv) = rw.sole_consumer(p) else {
        return false;
    };
    let pvn = rw.node(pv);
    if !is_op(pvn, "MatMul") || pvn.inputs.first() != Some(&Some(p)) || rw.is_pinned(p) {
        return false;
    }
    let Some(v4) = pvn.inputs.get(1).copied().flatten() else {
        return false;
    };
    m.nodes.push(pv);
    let Some((v, v_heads, v_head)) = m.heads_of(rw, v4, &[0, 2, 1, 3], pv) else {
        return false;
    };
    if v_heads != heads {
        return false;
    }
    // Back to [b, s, heads * head].
    let o = rw.node(pv).outputs[0];
    let Some(t) = rw.sole_consumer(o) else {
        return false;
    };
    let tn = rw.node(t);
    if !is_op(tn, "Transpose")
        || tn.attribute("perm").and_then(|a| a.as_ints()) != Some(&[0, 2, 1, 3][..])
        || rw.is_pinned(o)
    {
        return false;
    }
    let ot = tn.outputs[0];
    let Some(r) = rw.sole_consumer(ot) else {
        return false;
    };
    let rn = rw.node(r);
    if !is_op(rn, "Reshape") || rw.is_pinned(ot) {
        return false;
    }
    let allowzero = rn.attribute("allowzero").and_then(|a| a.as_int()) == Some(1);
    let Some(target) = rn.inputs.get(1).copied().flatten() else {
        return false;
    };
    m.nodes.push(t);
    // The shapes: q [b, s, e], k and v [b, l, e'], a target of [b, s, heads * v_head] (0
    // copies the size and -1 takes what is left, of [b, s, heads, v_head]), a bias of rank 4.
    let (Some(qd), Some(kd), Some(vd), Some(tv)) = (
        rw.sym_dims(q),
        rw.sym_dims(k),
        rw.sym_dims(v),
        rw.sym_vals(target),
    ) else {
        return false;
    };
    if qd[0] != kd[0] || kd[0] != vd[0] || kd[1] != vd[1] || tv.len() != 3 {
        return false;
    }
    let copy = |t: D, d: D| t == d || (t == D::K(0) && !allowzero);
    if !copy(tv[0], qd[0])
        || !copy(tv[1], qd[1])
        || !(tv[2] == D::K(-1) || tv[2] == D::K(heads * v_head))
    {
        return false;
    }
    if let Some(b) = bias {
        if rw.sym_dims(b).map(|d| d.len()) != Some(4) {
            return false;
        }
    }
    // Rewrite: the output Reshape becomes the fused node.
    let mut inputs = vec![Some(q), Some(k), Some(v)];
    if let Some(b) = bias {
        inputs.extend([None, None, Some(b)]);
    }
    let fused = rw.g.node_mut(r);
    fused.op_type = OP.into();
    fused.domain = MS.into();
    fused.inputs = inputs;
    fused.attributes.clear();
    fused
        .attributes
        .insert("num_heads".into(), Attribute::Int(heads));
    fused
        .attributes
        .insert("scale".into(), Attribute::Float(m.scale as f32));
    for n in m.nodes {
        if n != r {
            rw.remove(n);
        }
    }
    rw.new_domains.insert(MS);
    rw.count("multi_head_attention");
    true
}
