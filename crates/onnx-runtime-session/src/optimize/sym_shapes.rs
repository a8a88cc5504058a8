//! Symbolic shapes: each value's dimensions as numbers or symbols, worked out from the graph's
//! input types through the ops transformer exports are made of, including the shape
//! arithmetic they compute shapes with (`Shape` -> `Gather` -> `Unsqueeze` -> `Concat` ->
//! `Reshape`). Two values whose dimension lists are equal have equal shapes whatever the
//! inputs are; that is all the fusions use it for. A symbol stands for one unknown size: a
//! named input dimension (the same name is the same symbol), or a fresh symbol for a size
//! nothing here can tell, equal only to itself.

use super::rewriter::{is_op, Rewriter};
use onnx_runtime_ir::{Attribute, Dim, Node, ValueId};
use std::collections::HashMap;

/// One dimension (or one element of a shape tensor): a known number or a symbol.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum D {
    K(i64),
    S(u32),
}

/// The dimensions of every value that could be told, and the elements of the small integer
/// tensors that hold shapes.
pub(crate) struct SymShapes {
    dims: Vec<Option<Vec<D>>>,
    vals: Vec<Option<Vec<D>>>,
    next: u32,
    names: HashMap<String, u32>,
}

/// Ops whose first output has the shape of their first input.
const SAME: &[&str] = &[
    "Abs",
    "Cast",
    "CastLike",
    "Ceil",
    "Celu",
    "Clip",
    "Dropout",
    "Elu",
    "Erf",
    "Exp",
    "Floor",
    "Gelu",
    "HardSigmoid",
    "HardSwish",
    "Identity",
    "IsInf",
    "IsNaN",
    "LayerNormalization",
    "LeakyRelu",
    "Log",
    "LogSoftmax",
    "Mish",
    "Neg",
    "Not",
    "PRelu",
    "Reciprocal",
    "Relu",
    "RMSNormalization",
    "Round",
    "Selu",
    "Sigmoid",
    "Sign",
    "Softmax",
    "Softplus",
    "Softsign",
    "Sqrt",
    "Tanh",
    "ThresholdedRelu",
    "BiasGelu",
    "FastGelu",
    "QuickGelu",
    "SimplifiedLayerNormalization",
    "SkipLayerNormalization",
    "SkipSimplifiedLayerNormalization",
];

/// Ops that broadcast all their inputs.
const BROADCAST: &[&str] = &[
    "Add",
    "And",
    "BitShift",
    "Div",
    "Equal",
    "Greater",
    "GreaterOrEqual",
    "Less",
    "LessOrEqual",
    "Max",
    "Mean",
    "Min",
    "Mod",
    "Mul",
    "Or",
    "Pow",
    "Sub",
    "Sum",
    "Where",
    "Xor",
];

impl SymShapes {
    /// Infers over `rw`'s live nodes (file order, twice, so a node listed before its
    /// producer is reached on the second sweep).
    pub(crate) fn infer(rw: &Rewriter<'_>) -> SymShapes {
        let n = rw.g.values.len();
        let mut s = SymShapes {
            dims: vec![None; n],
            vals: vec![None; n],
            next: 0,
            names: HashMap::new(),
        };
        for &v in &rw.g.inputs {
            if rw.g.initializer(v).is_some() {
                continue;
            }
            if let Some(shape) = rw.g.value(v).shape() {
                let dims = shape.dims().iter().map(|d| s.dim(d)).collect();
                s.dims[v.0] = Some(dims);
            }
        }
        for (&v, t) in &rw.g.initializers {
            if rw.is_graph_input(v) {
                continue;
            }
            s.dims[v.0] = Some(t.shape.iter().map(|&d| D::K(d as i64)).collect());
            if t.numel() <= 64 && t.dtype.is_integer() {
                s.vals[v.0] = t.to_i64_vec().map(|v| v.into_iter().map(D::K).collect());
            }
        }
        for _ in 0..2 {
            for id in rw.live_nodes() {
                s.node(rw.node(id));
            }
        }
        s
    }

    /// The dimensions of `v`, when known.
    pub(crate) fn dims(&self, v: ValueId) -> Option<&[D]> {
        self.dims.get(v.0)?.as_deref()
    }

    /// The elements of `v` when it is a small integer tensor computed from shapes.
    pub(crate) fn vals(&self, v: ValueId) -> Option<&[D]> {
        self.vals.get(v.0)?.as_deref()
    }

    fn fresh(&mut self) -> D {
        self.next += 1;
        D::S(self.next)
    }

    fn dim(&mut self, d: &Dim) -> D {
        match d {
            Dim::Static(n) => D::K(*n as i64),
            Dim::Symbolic(name) if !name.is_empty() => {
                if let Some(&k) = self.names.get(name) {
                    return D::S(k);
                }
                let D::S(k) = self.fresh() else {
                    unreachable!()
                };
                self.names.insert(name.clone(), k);
                D::S(k)
            }
            Dim::Symbolic(_) => self.fresh(),
        }
    }

    fn input_dims(&self, node: &Node, k: usize) -> Option<Vec<D>> {
        self.dims[node.inputs.get(k).copied().flatten()?.0].clone()
    }

    fn input_vals(&self, node: &Node, k: usize) -> Option<Vec<D>> {
        self.vals[node.inputs.get(k).copied().flatten()?.0].clone()
    }

    /// Known integers of input `k` (a shape, axes, indices).
    fn input_ints(&self, node: &Node, k: usize) -> Option<Vec<i64>> {
        self.input_vals(node, k)?
            .into_iter()
            .map(|d| match d {
                D::K(x) => Some(x),
                D::S(_) => None,
            })
            .collect()
    }

    /// numpy broadcasting; `None` when two known sizes disagree.
    fn broadcast(&mut self, shapes: &[Vec<D>]) -> Option<Vec<D>> {
        let rank = shapes.iter().map(Vec::len).max()?;
        let mut out = vec![D::K(1); rank];
        for s in shapes {
            let off = rank - s.len();
            for (i, &d) in s.iter().enumerate() {
                let o = out[off + i];
                out[off + i] = match (o, d) {
                    (D::K(1), x) | (x, D::K(1)) => x,
                    (a, b) if a == b => a,
                    (D::K(_), D::K(_)) => return None,
                    // A valid run has the symbol at 1 or at the known size.
                    (D::K(k), D::S(_)) | (D::S(_), D::K(k)) => D::K(k),
                    (D::S(_), D::S(_)) => self.fresh(),
                };
            }
        }
        Some(out)
    }

    fn node(&mut self, node: &Node) {
        let Some(&out) = node.outputs.first() else {
            return;
        };
        if self.dims[out.0].is_none() {
            self.dims[out.0] = self.out_dims(node);
        }
        if self.vals[out.0].is_none() {
            self.vals[out.0] = self.out_vals(node);
        }
        // SkipLayerNormalization's input + skip (+ bias) sum.
        if node.op_type.starts_with("Skip") && node.outputs.len() > 3 {
            let o = node.outputs[3];
            if self.dims[o.0].is_none() {
                self.dims[o.0] = self.input_dims(node, 0);
            }
        }
    }

    fn out_dims(&mut self, node: &Node) -> Option<Vec<D>> {
        let op = node.op_type.as_str();
        let axis = |d: i64, rank: usize| -> Option<usize> {
            let a = if d < 0 { d + rank as i64 } else { d };
            (0..rank as i64).contains(&a).then_some(a as usize)
        };
        match op {
            "Constant" => match constant_attr(node) {
                Some(Attribute::Tensor(t)) => {
                    Some(t.shape.iter().map(|&d| D::K(d as i64)).collect())
                }
                Some(Attribute::Int(_) | Attribute::Float(_)) => Some(vec![]),
                Some(Attribute::Ints(v)) => Some(vec![D::K(v.len() as i64)]),
                Some(Attribute::Floats(v)) => Some(vec![D::K(v.len() as i64)]),
                _ => None,
            },
            _ if SAME.contains(&op) => self.input_dims(node, 0),
            _ if BROADCAST.contains(&op) => {
                let shapes: Option<Vec<Vec<D>>> = (0..node.inputs.len())
                    .map(|k| self.input_dims(node, k))
                    .collect();
                self.broadcast(&shapes?)
            }
            "Shape" => {
                let r = self.input_dims(node, 0)?.len() as i64;
                let (a, b) = shape_range(node, r);
                Some(vec![D::K((b - a).max(0))])
            }
            "Size" => Some(vec![]),
            "MatMul" | "MatMulBias" | "FusedMatMul" => {
                if op == "FusedMatMul"
                    && ["transA", "transB", "transBatchA", "transBatchB"]
                        .iter()
                        .any(|k| node.attribute(k).and_then(|a| a.as_int()).unwrap_or(0) != 0)
                {
                    return None;
                }
                let (a, b) = (self.input_dims(node, 0)?, self.input_dims(node, 1)?);
                if a.len() < 2 || b.len() < 2 {
                    return None;
                }
                let batch =
                    self.broadcast(&[a[..a.len() - 2].to_vec(), b[..b.len() - 2].to_vec()])?;
                let mut out = batch;
                out.push(a[a.len() - 2]);
                out.push(b[b.len() - 1]);
                Some(out)
            }
            "Gather" => {
                let (data, idx) = (self.input_dims(node, 0)?, self.input_dims(node, 1)?);
                let a = axis(
                    node.attribute("axis").and_then(|a| a.as_int()).unwrap_or(0),
                    data.len(),
                )?;
                Some([&data[..a], &idx[..], &data[a + 1..]].concat())
            }
            "Transpose" => {
                let d = self.input_dims(node, 0)?;
                match node.attribute("perm").and_then(|a| a.as_ints()) {
                    Some(p) if p.len() == d.len() => {
                        p.iter().map(|&i| d.get(i as usize).copied()).collect()
                    }
                    Some(_) => None,
                    None => Some(d.into_iter().rev().collect()),
                }
            }
            "Reshape" => self.reshape(node),
            "Unsqueeze" | "Squeeze" => {
                let d = self.input_dims(node, 0)?;
                let axes = match node.attribute("axes").and_then(|a| a.as_ints()) {
                    Some(a) => Some(a.to_vec()),
                    None if node.inputs.len() > 1 => Some(self.input_ints(node, 1)?),
                    None => None,
                };
                if op == "Unsqueeze" {
                    let axes = axes?;
                    let rank = d.len() + axes.len();
                    let mut ax: Vec<usize> =
                        axes.iter().map(|&a| axis(a, rank)).collect::<Option<_>>()?;
                    ax.sort_unstable();
                    let mut it = d.into_iter();
                    (0..rank)
                        .map(|i| {
                            if ax.contains(&i) {
                                Some(D::K(1))
                            } else {
                                it.next()
                            }
                        })
                        .collect()
                } else {
                    let axes = match axes {
                        Some(a) => a
                            .iter()
                            .map(|&x| axis(x, d.len()))
                            .collect::<Option<Vec<_>>>()?,
                        None => (0..d.len()).filter(|&i| d[i] == D::K(1)).collect(),
                    };
                    Some(
                        d.iter()
                            .enumerate()
                            .filter(|(i, _)| !axes.contains(i))
                            .map(|(_, &x)| x)
                            .collect(),
                    )
                }
            }
            "Expand" => {
                let data = self.input_dims(node, 0)?;
                match self.input_vals(node, 1) {
                    Some(shape) => self.broadcast(&[data, shape]),
                    None => {
                        // The shape's length is known: the rank is, the sizes are not.
                        let len = match self.input_dims(node, 1)?.as_slice() {
                            [D::K(l)] => *l as usize,
                            _ => return None,
                        };
                        let rank = len.max(data.len());
                        Some((0..rank).map(|_| self.fresh()).collect())
                    }
                }
            }
            "ConstantOfShape" => self.input_vals(node, 0),
            "Concat" => {
                let shapes: Vec<Vec<D>> = (0..node.inputs.len())
                    .map(|k| self.input_dims(node, k))
                    .collect::<Option<_>>()?;
                let first = shapes.first()?.clone();
                let a = axis(node.attribute("axis")?.as_int()?, first.len())?;
                let mut total = 0i64;
                for s in &shapes {
                    match s.get(a) {
                        Some(D::K(k)) if s.len() == first.len() => total += k,
                        _ => {
                            let mut out = first.clone();
                            out[a] = self.fresh();
                            return Some(out);
                        }
                    }
                }
                let mut out = first;
                out[a] = D::K(total);
                Some(out)
            }
            "Slice" => self.slice(node),
            "Range" => {
                // Range(0, n, 1) has n elements, whatever n is.
                let (a, b, d) = (
                    self.input_vals(node, 0),
                    self.input_vals(node, 1),
                    self.input_vals(node, 2),
                );
                if let (Some([D::K(0)]), Some([n]), Some([D::K(1)])) =
                    (a.as_deref(), b.as_deref(), d.as_deref())
                {
                    return Some(vec![*n]);
                }
                let n = (|| {
                    let [a, b, d] = [0, 1, 2].map(|k| self.input_ints(node, k));
                    let (a, b, d) = (*a?.first()?, *b?.first()?, *d?.first()?);
                    if d == 0 {
                        return None;
                    }
                    Some(((b - a) as f64 / d as f64).ceil().max(0.0) as i64)
                })();
                Some(vec![n.map_or_else(|| self.fresh(), D::K)])
            }
            "Flatten" => {
                let d = self.input_dims(node, 0)?;
                let a = node.attribute("axis").and_then(|a| a.as_int()).unwrap_or(1);
                let a = if a < 0 { a + d.len() as i64 } else { a };
                if !(0..=d.len() as i64).contains(&a) {
                    return None;
                }
                let (lo, hi) = d.split_at(a as usize);
                let prod = |p: &[D]| -> Option<i64> {
                    p.iter()
                        .map(|x| if let D::K(k) = x { Some(*k) } else { None })
                        .product()
                };
                let one = |me: &mut Self, p: &[D]| match p {
                    [x] => *x,
                    _ => prod(p).map_or_else(|| me.fresh(), D::K),
                };
                let (lo, hi) = (lo.to_vec(), hi.to_vec());
                let l = if lo.is_empty() {
                    D::K(1)
                } else {
                    one(self, &lo)
                };
                let h = if hi.is_empty() {
                    D::K(1)
                } else {
                    one(self, &hi)
                };
                Some(vec![l, h])
            }
            "MultiHeadAttention" => {
                let (q, v) = (self.input_dims(node, 0)?, self.input_dims(node, 2)?);
                (q.len() == 3 && v.len() == 3).then(|| vec![q[0], q[1], v[2]])
            }
            _ => None,
        }
    }

    /// Slice's output: the sliced axes' sizes where starts, ends, axes and steps are known,
    /// fresh symbols for the axes it cuts where they are not.
    fn slice(&mut self, node: &Node) -> Option<Vec<D>> {
        let data = self.input_dims(node, 0)?;
        let r = data.len() as i64;
        let mut out = data.clone();
        let axes: Vec<i64> = match node.inputs.get(3).copied().flatten() {
            Some(_) => self.input_ints(node, 3)?,
            None => (0..r).collect(),
        };
        let (starts, ends) = (self.input_ints(node, 1), self.input_ints(node, 2));
        let steps = match node.inputs.get(4).copied().flatten() {
            Some(_) => self.input_ints(node, 4),
            None => Some(vec![1; axes.len()]),
        };
        for (i, &a) in axes.iter().enumerate() {
            let a = if a < 0 { a + r } else { a };
            if !(0..r).contains(&a) {
                return None;
            }
            let a = a as usize;
            let known = (|| {
                let n = match data[a] {
                    D::K(n) => n,
                    D::S(_) => return None,
                };
                let (s, e, st) = (
                    *starts.as_ref()?.get(i)?,
                    *ends.as_ref()?.get(i)?,
                    *steps.as_ref()?.get(i)?,
                );
                if st == 0 {
                    return None;
                }
                let clamp = |x: i64, lo: i64, hi: i64| {
                    let x = if x < 0 { x + n } else { x };
                    x.clamp(lo, hi)
                };
                let len = if st > 0 {
                    let (s, e) = (clamp(s, 0, n), clamp(e, 0, n));
                    (e - s + st - 1).div_euclid(st).max(0)
                } else {
                    let (s, e) = (clamp(s, -1, n - 1), clamp(e, -1, n - 1));
                    (s - e + (-st) - 1).div_euclid(-st).max(0)
                };
                Some(len)
            })();
            out[a] = known.map_or_else(|| self.fresh(), D::K);
        }
        Some(out)
    }

    /// Reshape's output: 0 copies the input's size (allowzero 0), one -1 takes what is left
    /// when the known sizes and the symbols on both sides cancel.
    fn reshape(&mut self, node: &Node) -> Option<Vec<D>> {
        let data = self.input_dims(node, 0)?;
        let target = self.input_vals(node, 1)?;
        let allowzero = node.attribute("allowzero").and_then(|a| a.as_int()) == Some(1);
        let mut out: Vec<Option<D>> = Vec::with_capacity(target.len());
        for (i, &t) in target.iter().enumerate() {
            out.push(match t {
                D::K(0) if !allowzero => Some(*data.get(i)?),
                D::K(-1) => None,
                D::K(k) if k < 0 => return None,
                d => Some(d),
            });
        }
        let holes = out.iter().filter(|d| d.is_none()).count();
        if holes > 1 {
            return None;
        }
        if holes == 1 {
            // Cancel the symbols the input and the known output sizes share.
            let mut syms: Vec<D> = data
                .iter()
                .filter(|d| matches!(d, D::S(_)))
                .copied()
                .collect();
            let mut known_in: i64 = data
                .iter()
                .map(|d| if let D::K(k) = d { *k } else { 1 })
                .product();
            let mut known_out = 1i64;
            for d in out.iter().flatten() {
                match d {
                    D::K(k) => known_out *= k,
                    s => {
                        let i = syms.iter().position(|x| x == s)?;
                        syms.remove(i);
                    }
                }
            }
            let fill = if syms.is_empty() && known_out > 0 && known_in % known_out == 0 {
                known_in /= known_out;
                D::K(known_in)
            } else {
                self.fresh()
            };
            for d in &mut out {
                if d.is_none() {
                    *d = Some(fill);
                }
            }
        }
        out.into_iter().collect()
    }

    /// The elements of a small integer value computed from shapes.
    fn out_vals(&mut self, node: &Node) -> Option<Vec<D>> {
        match node.op_type.as_str() {
            "Constant" => match constant_attr(node) {
                Some(Attribute::Tensor(t)) if t.dtype.is_integer() && t.numel() <= 64 => {
                    t.to_i64_vec().map(|v| v.into_iter().map(D::K).collect())
                }
                Some(Attribute::Int(v)) => Some(vec![D::K(*v)]),
                Some(Attribute::Ints(v)) => Some(v.iter().map(|&x| D::K(x)).collect()),
                _ => None,
            },
            "Shape" => {
                let d = self.input_dims(node, 0)?;
                let (a, b) = shape_range(node, d.len() as i64);
                Some(d[a as usize..b.max(a) as usize].to_vec())
            }
            "Cast" | "Identity" | "Unsqueeze" | "Squeeze" | "Reshape" => {
                if is_op(node, "Cast") {
                    let to = node.attribute("to").and_then(|a| a.as_int())?;
                    let t = onnx_runtime_ir::DataType::from_onnx(to as i32)?;
                    if !t.is_integer() {
                        return None;
                    }
                }
                self.input_vals(node, 0)
            }
            "Gather" => {
                if node.attribute("axis").and_then(|a| a.as_int()).unwrap_or(0) != 0 {
                    return None;
                }
                let (v, idx) = (self.input_vals(node, 0)?, self.input_ints(node, 1)?);
                let n = v.len() as i64;
                idx.iter()
                    .map(|&i| v.get((if i < 0 { i + n } else { i }) as usize).copied())
                    .collect()
            }
            "Concat" => {
                let mut out = Vec::new();
                for k in 0..node.inputs.len() {
                    out.extend(self.input_vals(node, k)?);
                }
                Some(out)
            }
            _ => None,
        }
    }
}

/// A Constant node's value attribute, whichever of its names it has.
fn constant_attr(node: &Node) -> Option<&Attribute> {
    [
        "value",
        "value_int",
        "value_ints",
        "value_float",
        "value_floats",
    ]
    .iter()
    .find_map(|k| node.attribute(k))
}

/// `Shape`'s `start` / `end` (opset 15) clamped to `[0, rank]`.
fn shape_range(node: &Node, rank: i64) -> (i64, i64) {
    let at = |name: &str, default: i64| {
        let v = node
            .attribute(name)
            .and_then(|a| a.as_int())
            .unwrap_or(default);
        let v = if v < 0 { v + rank } else { v };
        v.clamp(0, rank)
    };
    (at("start", 0), at("end", rank))
}
