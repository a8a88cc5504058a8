//! Per-output-channel affine maps after a Conv with constant weights, folded into the
//! weights and bias: inference BatchNormalization, and Mul/Add by a constant that varies
//! at most along the channel axis. The same Mul/Add after an inference BatchNormalization
//! folds into its scale and bias.

use super::rewriter::{is_op, other_input, ConstF, Rewriter};
use onnx_runtime_ir::{NodeId, ValueId};

/// A Conv whose weights (and bias, if any) are float32 constants and whose single output
/// is read only by `next`.
struct FoldableConv {
    id: NodeId,
    w: ConstF,
    bias: Option<ConstF>,
    /// Output channels (W's first dimension).
    m: usize,
}

fn foldable_conv(rw: &Rewriter<'_>, x: ValueId, next: NodeId) -> Option<FoldableConv> {
    let id = rw.producer_op(x, "Conv")?;
    let node = rw.node(id);
    if node.outputs.len() != 1 || rw.sole_consumer(x) != Some(next) {
        return None;
    }
    let w = rw.const_f32(node.inputs.get(1).copied().flatten()?)?;
    if w.shape.len() < 3 || w.data.is_empty() {
        return None;
    }
    let m = w.shape[0];
    let bias = match node.inputs.get(2).copied().flatten() {
        None => None,
        Some(b) => {
            let b = rw.const_f32(b)?;
            if b.data.len() != m || b.shape.len() != 1 {
                return None;
            }
            Some(b)
        }
    };
    Some(FoldableConv { id, w, bias, m })
}

/// Gives `conv` the weights `w[m] * scale[m]` and bias `bias[m] * scale[m] + shift[m]`,
/// and makes it write `out` (the folded node's output), removing `folded`.
fn apply(
    rw: &mut Rewriter<'_>,
    conv: FoldableConv,
    scale: &[f64],
    shift: &[f64],
    folded: NodeId,
    pass: &'static str,
) {
    let per = conv.w.data.len() / conv.m;
    let w: Vec<f64> = conv
        .w
        .data
        .iter()
        .enumerate()
        .map(|(i, &v)| v * scale[i / per])
        .collect();
    let b: Vec<f64> = (0..conv.m)
        .map(|c| conv.bias.as_ref().map_or(0.0, |b| b.data[c]) * scale[c] + shift[c])
        .collect();
    let hint = rw.node(conv.id).name.clone();
    let hint = if hint.is_empty() {
        "conv".to_string()
    } else {
        hint
    };
    let wv = rw.add_f32_initializer(&format!("{hint}_W"), conv.w.shape.clone(), &w);
    let bv = rw.add_f32_initializer(&format!("{hint}_B"), vec![conv.m], &b);
    let out = rw.node(folded).outputs[0];
    let node = rw.g.node_mut(conv.id);
    node.inputs.resize(3, None);
    node.inputs[1] = Some(wv);
    node.inputs[2] = Some(bv);
    node.outputs[0] = out;
    rw.remove(folded);
    rw.count(pass);
}

/// Conv -> BatchNormalization (inference, constant statistics) becomes one Conv.
pub(crate) fn fold_batch_norm(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    // Extra outputs (running statistics in training mode, or the saved ones of old opsets)
    // must be absent.
    if !inference_batch_norm(rw, id) {
        return false;
    }
    let node = rw.node(id);
    let eps = node
        .attribute("epsilon")
        .and_then(|a| a.as_float())
        .unwrap_or(1e-5) as f64;
    let ins: Option<Vec<ValueId>> = node.inputs.iter().copied().collect();
    let Some(ins) = ins else { return false };
    let Some(conv) = foldable_conv(rw, ins[0], id) else {
        return false;
    };
    let params: Option<Vec<ConstF>> = ins[1..].iter().map(|&v| rw.const_f32(v)).collect();
    let Some(p) = params else { return false };
    if p.iter().any(|c| c.shape != [conv.m]) {
        return false;
    }
    let (gamma, beta, mean, var) = (&p[0].data, &p[1].data, &p[2].data, &p[3].data);
    // y = (x - mean) / sqrt(var + eps) * gamma + beta, in the BatchNormalization kernel's
    // f32 arithmetic order: the scale is rounded to f32 as the kernel would compute it.
    let scale: Vec<f64> = (0..conv.m)
        .map(|c| gamma[c] / (var[c] + eps).sqrt())
        .collect();
    let shift: Vec<f64> = (0..conv.m).map(|c| beta[c] - mean[c] * scale[c]).collect();
    apply(rw, conv, &scale, &shift, id, "conv_batch_norm");
    true
}

/// The per-channel values of a constant that broadcasts against a Conv output of rank
/// `rank` with `m` channels without changing its shape: every dimension 1 except, at most,
/// the channel one (which is `m`).
fn per_channel(c: &ConstF, rank: usize, m: usize) -> Option<Vec<f64>> {
    if c.shape.len() > rank {
        return None;
    }
    let offset = rank - c.shape.len();
    let mut channel_dim = 1;
    for (i, &d) in c.shape.iter().enumerate() {
        if offset + i == 1 {
            channel_dim = d;
        } else if d != 1 {
            return None;
        }
    }
    match channel_dim {
        1 => Some(vec![c.data[0]; m]),
        d if d == m => Some(c.data.clone()),
        _ => None,
    }
}

/// Conv -> Mul/Add by a per-channel constant becomes one Conv.
pub(crate) fn fold_mul_add(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    let is_mul = is_op(node, "Mul");
    if !(is_mul || is_op(node, "Add")) || node.outputs.len() != 1 {
        return false;
    }
    for &x in node.inputs.iter().flatten() {
        let Some(other) = other_input(node, x) else {
            return false;
        };
        let Some(c) = rw.const_f32(other) else {
            continue;
        };
        let Some(conv) = foldable_conv(rw, x, id) else {
            continue;
        };
        let Some(v) = per_channel(&c, conv.w.shape.len(), conv.m) else {
            continue;
        };
        let (scale, shift) = if is_mul {
            (v, vec![0.0; conv.m])
        } else {
            (vec![1.0; conv.m], v)
        };
        apply(
            rw,
            conv,
            &scale,
            &shift,
            id,
            if is_mul { "conv_mul" } else { "conv_add" },
        );
        return true;
    }
    false
}

/// Inference BatchNormalization -> Mul/Add by a per-channel constant becomes one
/// BatchNormalization: `(bn(x)) * a` scales gamma and beta by `a`; `bn(x) + b` adds `b` to
/// beta.
pub(crate) fn fold_mul_add_into_batch_norm(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    let is_mul = is_op(node, "Mul");
    if !(is_mul || is_op(node, "Add")) || node.outputs.len() != 1 {
        return false;
    }
    let out = node.outputs[0];
    for &x in node.inputs.clone().iter().flatten() {
        let Some(other) = other_input(rw.node(id), x) else {
            return false;
        };
        let Some(c) = rw.const_f32(other) else {
            continue;
        };
        let Some(bn_id) = rw.producer_op(x, "BatchNormalization") else {
            continue;
        };
        if rw.sole_consumer(x) != Some(id) || !inference_batch_norm(rw, bn_id) {
            continue;
        }
        let bn = rw.node(bn_id);
        let (Some(Some(gv)), Some(Some(bv))) = (bn.inputs.get(1), bn.inputs.get(2)) else {
            continue;
        };
        let (gv, bv) = (*gv, *bv);
        let (Some(gamma), Some(beta)) = (rw.const_f32(gv), rw.const_f32(bv)) else {
            continue;
        };
        let m = gamma.data.len();
        if gamma.shape != [m] || beta.shape != [m] {
            continue;
        }
        let Some(rank) = rw.static_shape(x).map(|s| s.len()) else {
            continue;
        };
        // The constant must not grow the output (per_channel checks it broadcasts in place).
        let Some(v) = per_channel(&c, rank, m).filter(|_| rank >= 2) else {
            continue;
        };
        let (g2, b2): (Vec<f64>, Vec<f64>) = if is_mul {
            (
                gamma.data.iter().zip(&v).map(|(g, a)| g * a).collect(),
                beta.data.iter().zip(&v).map(|(b, a)| b * a).collect(),
            )
        } else {
            (
                gamma.data.clone(),
                beta.data.iter().zip(&v).map(|(b, a)| b + a).collect(),
            )
        };
        let hint = rw.node(bn_id).name.clone();
        let hint = if hint.is_empty() { "bn".into() } else { hint };
        let gnew = rw.add_f32_initializer(&format!("{hint}_scale"), vec![m], &g2);
        let bnew = rw.add_f32_initializer(&format!("{hint}_B"), vec![m], &b2);
        let bn = rw.g.node_mut(bn_id);
        bn.inputs[1] = Some(gnew);
        bn.inputs[2] = Some(bnew);
        bn.outputs[0] = out;
        rw.remove(id);
        rw.count(if is_mul {
            "batch_norm_mul"
        } else {
            "batch_norm_add"
        });
        return true;
    }
    false
}

/// Whether `id` is a BatchNormalization in inference form: five inputs, no extra outputs in
/// use, not training mode, spatial.
fn inference_batch_norm(rw: &Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    if !is_op(node, "BatchNormalization") || node.inputs.len() != 5 {
        return false;
    }
    if node.inputs.iter().any(Option::is_none) {
        return false;
    }
    if node.outputs.len() != 1
        && node.outputs[1..]
            .iter()
            .any(|&o| !rw.g.value(o).name.is_empty())
    {
        return false;
    }
    let int_attr = |k: &str, d: i64| node.attribute(k).and_then(|a| a.as_int()).unwrap_or(d);
    if int_attr("training_mode", 0) != 0 || int_attr("spatial", 1) != 1 {
        return false;
    }
    rw.opset >= 7 || int_attr("is_test", 0) != 0
}

/// Whether a Conv reads no padding: `pads` absent or all zero and `auto_pad` NOTSET or
/// VALID. Then every output sums whole windows of its input.
fn unpadded(node: &onnx_runtime_ir::Node) -> bool {
    let pads_zero = node
        .attribute("pads")
        .map_or(Some(true), |a| {
            a.as_ints().map(|p| p.iter().all(|&x| x == 0))
        })
        .unwrap_or(false);
    let auto_pad = node
        .attribute("auto_pad")
        .map_or(Some("NOTSET"), |a| a.as_str());
    pads_zero && matches!(auto_pad, Some("NOTSET") | Some("VALID") | Some(""))
}

/// `v` = u * a + b, u * a or u + b with one-element float32 constants, read only by
/// `conv`: (u, a, b, nodes).
fn scalar_affine(
    rw: &Rewriter<'_>,
    v: ValueId,
    conv: NodeId,
) -> Option<(ValueId, f64, f64, Vec<NodeId>)> {
    if rw.sole_consumer(v) != Some(conv) {
        return None;
    }
    let p = rw.producer(v)?;
    let split = |id: NodeId| -> Option<(ValueId, f64)> {
        let n = rw.node(id);
        let [Some(x), Some(y)] = n.inputs.as_slice() else {
            return None;
        };
        rw.const_scalar(*y)
            .map(|c| (*x, c))
            .or_else(|| rw.const_scalar(*x).map(|c| (*y, c)))
    };
    if is_op(rw.node(p), "Add") {
        let (u, b) = split(p)?;
        if let Some(m) = rw.producer_op(u, "Mul") {
            if rw.sole_consumer(u) == Some(p) {
                if let Some((x, a)) = split(m) {
                    return Some((x, a, b, vec![m, p]));
                }
            }
        }
        return Some((u, 1.0, b, vec![p]));
    }
    if is_op(rw.node(p), "Mul") {
        let (u, a) = split(p)?;
        return Some((u, a, 0.0, vec![p]));
    }
    None
}

/// x * a + b (one-element constants) feeding a Conv without padding: the Conv reads x with
/// weights W * a and bias B + b * (sum of each output channel's weights).
pub(crate) fn fold_input_affine(rw: &mut Rewriter<'_>, id: NodeId) -> bool {
    let node = rw.node(id);
    if !is_op(node, "Conv") || node.outputs.len() != 1 || !unpadded(node) {
        return false;
    }
    let Some(Some(x)) = node.inputs.first().copied() else {
        return false;
    };
    let Some(w) = node
        .inputs
        .get(1)
        .copied()
        .flatten()
        .and_then(|w| rw.const_f32(w))
    else {
        return false;
    };
    if w.shape.len() < 3 || w.data.is_empty() {
        return false;
    }
    let m = w.shape[0];
    let bias = match node.inputs.get(2).copied().flatten() {
        None => vec![0.0; m],
        Some(b) => match rw.const_f32(b) {
            Some(b) if b.shape == [m] => b.data,
            _ => return false,
        },
    };
    let Some((u, a, b, nodes)) = scalar_affine(rw, x, id) else {
        return false;
    };
    let per = w.data.len() / m;
    let new_w: Vec<f64> = w.data.iter().map(|v| v * a).collect();
    let new_b: Vec<f64> = (0..m)
        .map(|c| bias[c] + b * w.data[c * per..(c + 1) * per].iter().sum::<f64>())
        .collect();
    let hint = rw.node(id).name.clone();
    let hint = if hint.is_empty() {
        "conv".to_string()
    } else {
        hint
    };
    let wv = rw.add_f32_initializer(&format!("{hint}_W"), w.shape.clone(), &new_w);
    let bv = rw.add_f32_initializer(&format!("{hint}_B"), vec![m], &new_b);
    let node = rw.g.node_mut(id);
    node.inputs.resize(3, None);
    node.inputs[0] = Some(u);
    node.inputs[1] = Some(wv);
    node.inputs[2] = Some(bv);
    for n in nodes {
        rw.remove(n);
    }
    rw.count("conv_input_affine");
    true
}
