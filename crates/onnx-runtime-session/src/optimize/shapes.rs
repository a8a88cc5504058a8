//! Static shapes, where the graph's inputs have them: propagated through the ops CNNs are
//! made of (element-wise, broadcasting, Conv, pooling, Concat). Used only to prove that two
//! values have the same shape; anything not covered is unknown.

use super::rewriter::Rewriter;
use onnx_runtime_ir::{Node, ValueId};

/// Ops whose first output has the shape of their first input.
const SAME_SHAPE: &[&str] = &[
    "Relu",
    "Sigmoid",
    "Tanh",
    "LeakyRelu",
    "Clip",
    "HardSigmoid",
    "HardSwish",
    "Elu",
    "Selu",
    "Softplus",
    "Softsign",
    "Erf",
    "Exp",
    "Log",
    "Neg",
    "Abs",
    "Sqrt",
    "Reciprocal",
    "Identity",
    "Dropout",
    "Cast",
    "BatchNormalization",
    "InstanceNormalization",
    "LRN",
    "Softmax",
    "LogSoftmax",
    "PRelu",
    "Mish",
    "Gelu",
    "LpNormalization",
];

/// Ops that broadcast all their inputs (numpy rules).
const BROADCAST: &[&str] = &[
    "Add", "Sub", "Mul", "Div", "Pow", "Sum", "Max", "Min", "Mean",
];

fn broadcast(shapes: &[&Vec<usize>]) -> Option<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max()?;
    let mut out = vec![1usize; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return None;
            }
        }
    }
    Some(out)
}

fn ints(node: &Node, name: &str) -> Option<Option<Vec<i64>>> {
    match node.attribute(name) {
        None => Some(None),
        Some(a) => a.as_ints().map(|v| Some(v.to_vec())),
    }
}

/// Output spatial sizes of a sliding window (Conv, MaxPool, AveragePool) over `input`
/// (spatial dims only), with kernel sizes `kernel`. `None` for forms this does not model
/// (ceil_mode, unknown auto_pad).
fn windowed(node: &Node, input: &[usize], kernel: &[usize]) -> Option<Vec<usize>> {
    let n = input.len();
    if kernel.len() != n {
        return None;
    }
    let strides = ints(node, "strides")?.unwrap_or_else(|| vec![1; n]);
    let dilations = ints(node, "dilations")?.unwrap_or_else(|| vec![1; n]);
    let pads = ints(node, "pads")?.unwrap_or_else(|| vec![0; 2 * n]);
    if strides.len() != n || dilations.len() != n || pads.len() != 2 * n {
        return None;
    }
    if node
        .attribute("ceil_mode")
        .and_then(|a| a.as_int())
        .unwrap_or(0)
        != 0
    {
        return None;
    }
    let auto_pad = node
        .attribute("auto_pad")
        .map_or(Some("NOTSET"), |a| a.as_str())?;
    let mut out = Vec::with_capacity(n);
    for i in 0..n {
        let (s, d) = (strides[i], dilations[i]);
        if s < 1 || d < 1 || pads[i] < 0 || pads[i + n] < 0 {
            return None;
        }
        let (s, d, x) = (s as usize, d as usize, input[i]);
        let span = (kernel[i].checked_sub(1)?) * d + 1;
        let o = match auto_pad {
            "NOTSET" | "" => {
                let padded = x + pads[i] as usize + pads[i + n] as usize;
                padded.checked_sub(span)? / s + 1
            }
            "VALID" => x.checked_sub(span)? / s + 1,
            "SAME_UPPER" | "SAME_LOWER" => x.div_ceil(s),
            _ => return None,
        };
        out.push(o);
    }
    Some(out)
}

/// The static shape of every value that can be worked out, by value id.
pub(crate) fn infer(rw: &Rewriter<'_>) -> Vec<Option<Vec<usize>>> {
    let g = &*rw.g;
    let mut shapes: Vec<Option<Vec<usize>>> = vec![None; g.values.len()];
    for &v in &g.inputs {
        if g.initializer(v).is_some() {
            continue;
        }
        shapes[v.0] = g.value(v).shape().and_then(|s| s.to_static());
    }
    let known = |shapes: &Vec<Option<Vec<usize>>>, v: Option<ValueId>| -> Option<Vec<usize>> {
        let v = v?;
        shapes[v.0]
            .clone()
            .or_else(|| rw.constant(v).map(|t| t.shape))
    };
    for id in rw.live_nodes() {
        let node = rw.node(id);
        let Some(&out) = node.outputs.first() else {
            continue;
        };
        let input = |i: usize| known(&shapes, node.inputs.get(i).copied().flatten());
        let std = node.normalized_domain().is_empty();
        let op = node.op_type.as_str();
        let shape = if std && SAME_SHAPE.contains(&op) {
            input(0)
        } else if std && BROADCAST.contains(&op) {
            let all: Option<Vec<Vec<usize>>> = (0..node.inputs.len()).map(input).collect();
            all.and_then(|a| broadcast(&a.iter().collect::<Vec<_>>()))
        } else if (std && op == "Conv") || (node.domain == "com.microsoft" && op == "FusedConv") {
            (|| {
                let x = input(0)?;
                let w = input(1)?;
                if x.len() < 3 || w.len() != x.len() {
                    return None;
                }
                let mut o = vec![x[0], w[0]];
                o.extend(windowed(node, &x[2..], &w[2..])?);
                Some(o)
            })()
        } else if std && (op == "MaxPool" || op == "AveragePool") && node.outputs.len() == 1 {
            (|| {
                let x = input(0)?;
                let k: Vec<usize> = ints(node, "kernel_shape")??
                    .iter()
                    .map(|&v| usize::try_from(v).ok())
                    .collect::<Option<_>>()?;
                if x.len() < 3 {
                    return None;
                }
                let mut o = x[..2].to_vec();
                o.extend(windowed(node, &x[2..], &k)?);
                Some(o)
            })()
        } else if std && (op == "GlobalAveragePool" || op == "GlobalMaxPool") {
            input(0).filter(|x| x.len() >= 3).map(|x| {
                let mut o = x[..2].to_vec();
                o.resize(x.len(), 1);
                o
            })
        } else if std && op == "Concat" {
            (|| {
                let all: Vec<Vec<usize>> =
                    (0..node.inputs.len()).map(input).collect::<Option<_>>()?;
                let rank = all.first()?.len() as i64;
                let axis = node.attribute("axis")?.as_int()?;
                let axis = if axis < 0 { axis + rank } else { axis };
                if !(0..rank).contains(&axis) {
                    return None;
                }
                let axis = axis as usize;
                let mut o = all[0].clone();
                o[axis] = 0;
                for s in &all {
                    if s.len() != o.len()
                        || s.iter().enumerate().any(|(i, &d)| i != axis && d != o[i])
                    {
                        return None;
                    }
                    o[axis] += s[axis];
                }
                Some(o)
            })()
        } else {
            None
        };
        // Only the first output is modelled (Dropout's mask, BatchNormalization's training
        // statistics and the like stay unknown).
        shapes[out.0] = shape;
    }
    shapes
}
