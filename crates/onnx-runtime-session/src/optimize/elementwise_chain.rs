//! Chains of element-wise nodes become one internal `FusedElementwise` node, for sessions on
//! a CUDA device: a GELU or layer-norm tail written out as 6 to 10 nodes, Conv -> Sigmoid ->
//! Mul, a bias add before an activation, run as one generated kernel (one launch, one pass
//! over memory) instead of one launch per node. The CPU provider's kernel of the same op is
//! the fallback (see `onnx_runtime_ep_cpu::ops::math::fused_elementwise` for the program).
//!
//! The pass runs last, after the fusions into com.microsoft ops and MatMulBias (the device
//! runs those too), and groups the remaining element-wise nodes:
//! - members are the unary math ops and activations, the broadcasting binary arithmetic,
//!   Max/Min/Sum/Mean, PRelu, Clip with constant bounds and the com.microsoft GELUs, whose
//!   values all have one float dtype that the graph declares or that follows from its
//!   declared inputs and constants (nothing is fused where a dtype is unknown);
//! - a group is grown node by node in topological order from its producers' groups, and a
//!   merge is taken only when the group stays convex (no path leaves it and comes back, so
//!   the fused node can be placed), and every value the group hands out has the shape of the
//!   broadcast of all its inputs (each depends on every input, or static shapes prove it);
//! - one-element constants become literals in the program (rank 0 always; rank r when an
//!   input of rank >= r is known, so no rank is lost), other constants stay inputs;
//! - the outputs are the member values read outside the group, by subgraphs, or graph
//!   outputs, keeping their names; the fused node takes the place of the group's last node
//!   and the node list is put back in topological order.

use super::rewriter::{is_op, Rewriter};
use onnx_runtime_ep_api::{DeviceKind, ExecutionProvider};
use onnx_runtime_ep_cpu::ops::math::fused_elementwise::{
    Instr, Op, Operand, Program, MAX_INPUTS, MAX_INSTRS, MAX_OUTPUTS, OP,
};
use onnx_runtime_ep_cpu::{CpuRegistry, Tensor, INTERNAL_DOMAIN};
use onnx_runtime_ir::{Attribute, DataType, Graph, Node, NodeId, ValueId};
use std::collections::{BTreeSet, HashMap};

const MS: &str = "com.microsoft";
/// Nodes a group may hold (the programs' own limit is on instructions).
const MAX_MEMBERS: usize = 64;

/// Whether sessions on `device` get fused chains: a CUDA device that runs `FusedElementwise`,
/// with the CPU kernel in `registry` to fall back on.
pub(crate) fn enabled(device: Option<&dyn ExecutionProvider>, registry: &CpuRegistry) -> bool {
    let Some(dev) = device else { return false };
    if dev.device_id().kind != DeviceKind::Cuda {
        return false;
    }
    let probe = Node::new(NodeId(0), OP, vec![], vec![]).with_domain(INTERNAL_DOMAIN);
    dev.supports(&probe, 1) && registry.contains(INTERNAL_DOMAIN, OP, 1)
}

/// How a member node becomes instructions.
#[derive(Clone, Debug)]
enum Kind {
    /// `op operand0 params...`.
    Unary(Op, Vec<f64>),
    /// A left fold of a binary op over the operands (two operands: one instruction).
    Fold(Op),
    /// Sum of the operands divided by their count.
    Mean,
    /// `op (operand0 + operand1)`: com.microsoft FastGelu / BiasGelu with a bias.
    BiasThen(Op),
}

/// A member candidate: its value operands, whether each must have the node's dtype (all but
/// Pow's exponent), what it computes and the value it produces.
#[derive(Clone, Debug)]
struct Elem {
    inputs: Vec<ValueId>,
    same: Vec<bool>,
    kind: Kind,
    out: ValueId,
}

impl Elem {
    fn instrs(&self) -> usize {
        match self.kind {
            Kind::Unary(..) => 1,
            Kind::Fold(_) => self.inputs.len() - 1,
            Kind::Mean => self.inputs.len(),
            Kind::BiasThen(_) => 2,
        }
    }

    /// Appends the instructions to `prog`; returns the operand holding the result.
    fn emit(&self, ops: &[Operand], prog: &mut Program) -> Operand {
        let push = |op: Op, args: Vec<Operand>, prog: &mut Program| {
            let dst = prog.instrs.len();
            prog.instrs.push(Instr { dst, op, args });
            Operand::Temp(dst)
        };
        match &self.kind {
            Kind::Unary(op, params) => {
                let mut args = vec![ops[0]];
                args.extend(params.iter().map(|&p| Operand::Lit(p)));
                push(*op, args, prog)
            }
            Kind::Fold(op) => {
                let mut acc = ops[0];
                for &o in &ops[1..] {
                    acc = push(*op, vec![acc, o], prog);
                }
                acc
            }
            Kind::Mean => {
                let mut acc = ops[0];
                for &o in &ops[1..] {
                    acc = push(Op::Add, vec![acc, o], prog);
                }
                push(Op::Div, vec![acc, Operand::Lit(ops.len() as f64)], prog)
            }
            Kind::BiasThen(op) => {
                let t = push(Op::Add, vec![ops[0], ops[1]], prog);
                push(*op, vec![t], prog)
            }
        }
    }
}

/// A float attribute as the CPU kernels read it (its f32 value widened), or the default;
/// `None` when it has another type.
fn fattr(node: &Node, name: &str, default: f32) -> Option<f64> {
    match node.attribute(name) {
        None => Some(default as f64),
        Some(a) => a.as_float().map(f64::from),
    }
}

/// The value of a one-element constant `v` with its shape.
fn small_const(rw: &Rewriter<'_>, v: ValueId) -> Option<(Vec<usize>, f64)> {
    if rw.is_graph_input(v) {
        return None;
    }
    if let Some(t) = rw.g.initializer(v) {
        if t.numel() != 1 {
            return None;
        }
    } else {
        let p = rw.producer(v)?;
        let node = rw.node(p);
        let constant_like = [
            "Constant",
            "ConstantOfShape",
            "Identity",
            "Unsqueeze",
            "Squeeze",
            "Reshape",
            "Flatten",
        ];
        if !constant_like.iter().any(|op| is_op(node, op)) {
            return None;
        }
    }
    let t = rw.constant(v)?;
    if t.numel() != 1 {
        return None;
    }
    let value = Tensor::from_tensor_data(&t).ok()?.to_f64_vec()?;
    Some((t.shape.clone(), *value.first()?))
}

/// What node `id` computes, if it is an element-wise op the programs have.
fn elem(rw: &Rewriter<'_>, id: NodeId) -> Option<Elem> {
    let node = rw.node(id);
    if node.outputs.len() != 1
        || node
            .attributes
            .values()
            .any(|a| matches!(a, Attribute::Graph(_) | Attribute::Graphs(_)))
    {
        return None;
    }
    let out = node.outputs[0];
    if rw.g.value(out).name.is_empty() {
        return None;
    }
    let opset = rw.opset;
    let all: Option<Vec<ValueId>> = node.inputs.iter().copied().collect();
    let unary = |op: Op, params: Vec<f64>| -> Option<Elem> {
        let x = (*node.inputs.first()?)?;
        Some(Elem {
            inputs: vec![x],
            same: vec![true],
            kind: Kind::Unary(op, params),
            out,
        })
    };
    let fold = |kind: Kind, min: usize| -> Option<Elem> {
        let inputs = all.clone()?;
        if inputs.len() < min {
            return None;
        }
        Some(Elem {
            same: vec![true; inputs.len()],
            inputs,
            kind,
            out,
        })
    };
    let domain = node.normalized_domain();
    if domain == MS {
        return match node.op_type.as_str() {
            "Gelu" if node.inputs.len() == 1 => unary(Op::Gelu, vec![]),
            "QuickGelu" if node.inputs.len() == 1 => {
                unary(Op::Swish, vec![fattr(node, "alpha", 1.702)?])
            }
            "FastGelu" | "BiasGelu" => {
                let op = if node.op_type == "FastGelu" {
                    Op::GeluTanh
                } else {
                    Op::Gelu
                };
                match node.inputs.as_slice() {
                    [Some(_)] if op == Op::GeluTanh => unary(op, vec![]),
                    [Some(x), Some(b)] => Some(Elem {
                        inputs: vec![*x, *b],
                        same: vec![true, true],
                        kind: Kind::BiasThen(op),
                        out,
                    }),
                    _ => None,
                }
            }
            _ => None,
        };
    }
    if !domain.is_empty() {
        return None;
    }
    let plain = match node.op_type.as_str() {
        "Relu" => Some(Op::Relu),
        "Sigmoid" => Some(Op::Sigmoid),
        "Tanh" => Some(Op::Tanh),
        "Exp" => Some(Op::Exp),
        "Log" => Some(Op::Log),
        "Erf" => Some(Op::Erf),
        "Neg" => Some(Op::Neg),
        "Abs" => Some(Op::Abs),
        "Sqrt" => Some(Op::Sqrt),
        "Reciprocal" => Some(Op::Reciprocal),
        "Softplus" => Some(Op::Softplus),
        "Softsign" => Some(Op::Softsign),
        "Mish" if opset >= 18 => Some(Op::Mish),
        "HardSwish" if opset >= 14 => Some(Op::HardSwish),
        "Floor" => Some(Op::Floor),
        "Ceil" => Some(Op::Ceil),
        "Round" if opset >= 11 => Some(Op::Round),
        "Sign" if opset >= 9 => Some(Op::Sign),
        "Sin" if opset >= 7 => Some(Op::Sin),
        "Cos" if opset >= 7 => Some(Op::Cos),
        _ => None,
    };
    if let Some(op) = plain {
        return if node.inputs.len() == 1 {
            unary(op, vec![])
        } else {
            None
        };
    }
    // Before opset 7 the binary ops broadcast only with `broadcast=1`, by axis.
    let legacy = opset < 7
        && node
            .attribute("broadcast")
            .and_then(|a| a.as_int())
            .unwrap_or(0)
            != 0;
    match node.op_type.as_str() {
        "Gelu" if opset >= 20 => {
            let op = match node.attribute("approximate").map(|a| a.as_str()) {
                None | Some(Some("none")) => Op::Gelu,
                Some(Some("tanh")) => Op::GeluTanh,
                _ => return None,
            };
            unary(op, vec![])
        }
        "LeakyRelu" => unary(Op::LeakyRelu, vec![fattr(node, "alpha", 0.01)?]),
        "Elu" => unary(Op::Elu, vec![fattr(node, "alpha", 1.0)?]),
        "Celu" if opset >= 12 => unary(Op::Celu, vec![fattr(node, "alpha", 1.0)?]),
        "ThresholdedRelu" if opset >= 10 => {
            unary(Op::ThresholdedRelu, vec![fattr(node, "alpha", 1.0)?])
        }
        "Swish" if opset >= 24 => unary(Op::Swish, vec![fattr(node, "alpha", 1.0)?]),
        "Selu" => unary(
            Op::Selu,
            vec![
                fattr(node, "alpha", 1.673_263_2)?,
                fattr(node, "gamma", 1.050_701)?,
            ],
        ),
        "HardSigmoid" => unary(
            Op::HardSigmoid,
            vec![fattr(node, "alpha", 0.2)?, fattr(node, "beta", 0.5)?],
        ),
        "Clip" => {
            let (lo, hi) = if opset < 11 {
                (fattr(node, "min", f32::MIN)?, fattr(node, "max", f32::MAX)?)
            } else {
                let bound = |i: usize, d: f64| -> Option<f64> {
                    match node.inputs.get(i).copied().flatten() {
                        None => Some(d),
                        Some(v) => small_const(rw, v).map(|(_, c)| c),
                    }
                };
                (bound(1, f64::NEG_INFINITY)?, bound(2, f64::INFINITY)?)
            };
            unary(Op::Clip, vec![lo, hi])
        }
        "Add" | "Sub" | "Mul" | "Div" if !legacy && node.inputs.len() == 2 => {
            let op = Op::from_name(&node.op_type)?;
            fold(Kind::Fold(op), 2)
        }
        "Pow" if !legacy && node.inputs.len() == 2 => {
            let mut e = fold(Kind::Fold(Op::Pow), 2)?;
            e.same[1] = false;
            Some(e)
        }
        "PRelu" if opset >= 7 && node.inputs.len() == 2 => fold(Kind::Fold(Op::PRelu), 2),
        "Max" | "Min" | "Sum" => {
            let op = match node.op_type.as_str() {
                "Max" => Op::Max,
                "Min" => Op::Min,
                _ => Op::Add,
            };
            fold(Kind::Fold(op), 2)
        }
        "Mean" => fold(Kind::Mean, 2),
        _ => None,
    }
}

/// How many leading outputs of `node` have the dtype of its first input, by the op's type
/// constraints (0 for ops not listed).
fn keeps_dtype(node: &Node) -> usize {
    const FIRST: &[&str] = &[
        "Conv",
        "ConvTranspose",
        "MatMul",
        "Gemm",
        "ReduceMean",
        "ReduceSum",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSumExp",
        "ReduceSumSquare",
        "Transpose",
        "Reshape",
        "Flatten",
        "Squeeze",
        "Unsqueeze",
        "Identity",
        "Softmax",
        "LogSoftmax",
        "BatchNormalization",
        "InstanceNormalization",
        "LayerNormalization",
        "GroupNormalization",
        "RMSNormalization",
        "MaxPool",
        "AveragePool",
        "GlobalAveragePool",
        "GlobalMaxPool",
        "LpPool",
        "Concat",
        "Slice",
        "Gather",
        "GatherElements",
        "GatherND",
        "Expand",
        "Tile",
        "Pad",
        "Resize",
        "Upsample",
        "DepthToSpace",
        "SpaceToDepth",
        "Dropout",
        "CumSum",
        "LRN",
    ];
    const MS_FIRST: &[&str] = &[
        "FusedConv",
        "FusedMatMul",
        "LayerNormalization",
        "SimplifiedLayerNormalization",
        "SkipLayerNormalization",
        "SkipSimplifiedLayerNormalization",
        "BiasAdd",
        "Gelu",
        "FastGelu",
        "BiasGelu",
        "QuickGelu",
    ];
    let op = node.op_type.as_str();
    match node.normalized_domain() {
        "" if op == "Split" => node.outputs.len(),
        "" if FIRST.contains(&op) => 1,
        MS if MS_FIRST.contains(&op) => 1,
        INTERNAL_DOMAIN if op == "MatMulBias" => 1,
        _ => 0,
    }
}

/// Every value `node` reads: its inputs and the outer names its subgraphs use.
fn reads(g: &Graph, node: &Node) -> Vec<ValueId> {
    let mut reads: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
    let mut names = BTreeSet::new();
    for attr in node.attributes.values() {
        match attr {
            Attribute::Graph(sub) => crate::compile::free_names(sub, &mut names),
            Attribute::Graphs(subs) => subs
                .iter()
                .for_each(|s| crate::compile::free_names(s, &mut names)),
            _ => {}
        }
    }
    reads.extend(names.iter().filter_map(|n| g.value_by_name(n)));
    reads
}

fn is_float(d: DataType) -> bool {
    matches!(
        d,
        DataType::Float32 | DataType::Float64 | DataType::Float16 | DataType::BFloat16
    )
}

fn broadcast(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
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

/// What the fused node of a group reads and writes.
struct Plan {
    /// Node inputs, in first-use order.
    inputs: Vec<ValueId>,
    /// Values inlined as literals.
    literals: HashMap<ValueId, f64>,
    /// Node outputs, in production order.
    outputs: Vec<ValueId>,
}

/// The tables the grouping works from.
struct Ctx {
    elems: Vec<Option<Elem>>,
    /// The dtype of each member candidate (by node id).
    dtype: Vec<Option<DataType>>,
    /// Topological position by node id (`usize::MAX` for dead nodes).
    pos: Vec<usize>,
    reads: Vec<Vec<ValueId>>,
    /// Static shapes and known ranks by value.
    shapes: Vec<Option<Vec<usize>>>,
    ranks: Vec<Option<usize>>,
    /// One-element constants by value (shape, value).
    smalls: HashMap<ValueId, (Vec<usize>, f64)>,
    /// Element types by value where known.
    vtypes: Vec<Option<DataType>>,
    /// DFS marks for the convexity check.
    mark: Vec<u32>,
    stamp: u32,
}

impl Ctx {
    fn elem(&self, id: NodeId) -> &Elem {
        self.elems[id.0].as_ref().expect("a member candidate")
    }

    /// Whether `v` depends on a member of `members` (sorted by position) through nodes
    /// outside it.
    fn reaches(&mut self, rw: &Rewriter<'_>, v: ValueId, members: &[NodeId], lo: usize) -> bool {
        self.stamp += 1;
        let stamp = self.stamp;
        let mut stack = vec![v];
        while let Some(v) = stack.pop() {
            let Some(p) = rw.producer(v) else { continue };
            if members.contains(&p) {
                return true;
            }
            if self.pos[p.0] < lo || self.mark[p.0] == stamp {
                continue;
            }
            self.mark[p.0] = stamp;
            stack.extend(self.reads[p.0].iter().copied());
        }
        false
    }

    /// The plan of a group of `members` (in topological order), if it can be one node.
    fn check(&mut self, rw: &Rewriter<'_>, members: &[NodeId]) -> Option<Plan> {
        if members.len() > MAX_MEMBERS
            || members
                .iter()
                .map(|&m| self.elem(m).instrs())
                .sum::<usize>()
                > MAX_INSTRS
        {
            return None;
        }
        let produced: HashMap<ValueId, usize> = members
            .iter()
            .enumerate()
            .map(|(i, &m)| (self.elem(m).out, i))
            .collect();
        let mut ext: Vec<ValueId> = Vec::new();
        for &m in members {
            for &v in &self.elem(m).inputs {
                if !produced.contains_key(&v) && !ext.contains(&v) {
                    ext.push(v);
                }
            }
        }
        // Convex: no outside path from a member back into the group.
        let lo = members.iter().map(|m| self.pos[m.0]).min()?;
        for &v in &ext {
            if self.reaches(rw, v, members, lo) {
                return None;
            }
        }
        // Literals: one-element constants that cannot change the output's rank.
        let max_rank = ext
            .iter()
            .filter(|v| !self.smalls.contains_key(v))
            .filter_map(|v| self.ranks[v.0])
            .max();
        let mut literals = HashMap::new();
        let mut inputs = Vec::new();
        for &v in &ext {
            match self.smalls.get(&v) {
                Some((shape, c)) if shape.is_empty() || max_rank >= Some(shape.len()) => {
                    literals.insert(v, *c);
                }
                _ => inputs.push(v),
            }
        }
        if inputs.is_empty() || inputs.len() > MAX_INPUTS {
            return None;
        }
        // Operands that must be literals (an exponent of another dtype) and inputs of the
        // group's dtype.
        let dtype = self.dtype[members[0].0]?;
        for &m in members {
            let e = self.elem(m);
            for (v, &same) in e.inputs.iter().zip(&e.same) {
                if !same && self.vtypes[v.0] != Some(dtype) && !literals.contains_key(v) {
                    return None;
                }
            }
        }
        let outputs: Vec<ValueId> = members
            .iter()
            .map(|&m| self.elem(m).out)
            .filter(|&v| rw.is_pinned(v) || rw.consumers(v).iter().any(|c| !members.contains(c)))
            .collect();
        if outputs.is_empty() || outputs.len() > MAX_OUTPUTS {
            return None;
        }
        // Every output must have the broadcast shape of all inputs: it depends on each of
        // them, or static shapes say so.
        let index: HashMap<ValueId, usize> =
            inputs.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let mut deps: HashMap<ValueId, u64> = HashMap::new();
        for &m in members {
            let e = self.elem(m);
            let mut mask = 0u64;
            for v in &e.inputs {
                mask |= match (deps.get(v), index.get(v)) {
                    (Some(&d), _) => d,
                    (None, Some(&i)) => 1 << i,
                    _ => 0,
                };
            }
            deps.insert(e.out, mask);
        }
        let full = (1u64 << inputs.len()) - 1;
        let all_depend = outputs.iter().all(|o| deps.get(o) == Some(&full));
        if !all_depend {
            let shapes: Option<Vec<&[usize]>> =
                inputs.iter().map(|v| self.shapes[v.0].as_deref()).collect();
            let want = broadcast(&shapes?)?;
            if !outputs
                .iter()
                .all(|o| self.shapes[o.0].as_deref() == Some(want.as_slice()))
            {
                return None;
            }
        }
        Some(Plan {
            inputs,
            literals,
            outputs,
        })
    }
}

/// Fuses the chains of `rw`'s graph; true when it fused any.
pub(crate) fn fuse_chains(rw: &mut Rewriter<'_>) -> bool {
    let live = rw.live_nodes();
    let n_nodes = rw.g.nodes.len();
    let n_values = rw.g.values.len();
    let elems: Vec<Option<Elem>> = (0..n_nodes)
        .map(|i| {
            let id = NodeId(i);
            if rw.is_dead(id) {
                None
            } else {
                elem(rw, id)
            }
        })
        .collect();
    if elems.iter().flatten().count() < 2 {
        return false;
    }
    let mut reads_of = vec![Vec::new(); n_nodes];
    for &id in &live {
        reads_of[id.0] = reads(rw.g, rw.node(id));
    }
    // Topological order of the live nodes (Kahn, earliest file position first).
    let Some(order) = topo(rw, &live, &reads_of) else {
        return false;
    };
    let mut pos = vec![usize::MAX; n_nodes];
    for (i, id) in order.iter().enumerate() {
        pos[id.0] = i;
    }
    // Element types: declared, constants, then through the candidates.
    let mut vtypes: Vec<Option<DataType>> = (0..n_values)
        .map(|i| {
            let v = ValueId(i);
            if let Some(t) = rw.g.initializer(v) {
                return Some(t.dtype);
            }
            rw.g.value(v).dtype().filter(|&d| d != DataType::Undefined)
        })
        .collect();
    let mut smalls = HashMap::new();
    let mut dtype = vec![None; n_nodes];
    for &id in &order {
        let Some(e) = &elems[id.0] else {
            // Ops whose outputs have their first input's dtype (the T -> T of their type
            // constraints) carry a known dtype on to the chains they feed.
            let node = rw.node(id);
            let outs = keeps_dtype(node);
            if outs > 0 {
                if let Some(Some(x)) = node.inputs.first() {
                    let d = vtypes[x.0].or_else(|| rw.known_dtype(*x));
                    for &o in node.outputs.iter().take(outs) {
                        if vtypes[o.0].is_none() {
                            vtypes[o.0] = d;
                        }
                    }
                }
            }
            continue;
        };
        for &v in &e.inputs {
            if vtypes[v.0].is_none() {
                vtypes[v.0] = rw.known_dtype(v);
            }
            if let std::collections::hash_map::Entry::Vacant(slot) = smalls.entry(v) {
                if let Some(c) = small_const(rw, v) {
                    slot.insert(c);
                }
            }
        }
        let from_inputs = e
            .inputs
            .iter()
            .zip(&e.same)
            .find(|(_, s)| **s)
            .and_then(|(v, _)| vtypes[v.0]);
        let d = vtypes[e.out.0].or(from_inputs);
        if vtypes[e.out.0].is_none() {
            vtypes[e.out.0] = d;
        }
        let Some(d) = d.filter(|&d| is_float(d)) else {
            continue;
        };
        let typed = e
            .inputs
            .iter()
            .zip(&e.same)
            .all(|(v, &same)| match vtypes[v.0] {
                Some(t) if same => t == d,
                // Pow's exponent: its own dtype (checked against literals later).
                Some(t) => t.is_float() || t.is_integer(),
                None => false,
            });
        if typed {
            dtype[id.0] = Some(d);
        }
    }
    let mut shapes = vec![None; n_values];
    let mut ranks = vec![None; n_values];
    for i in 0..n_values {
        let v = ValueId(i);
        let s = rw
            .static_shape(v)
            .or_else(|| rw.g.initializer(v).map(|t| t.shape.clone()))
            .or_else(|| smalls.get(&v).map(|(s, _)| s.clone()));
        ranks[i] = s
            .as_ref()
            .map(Vec::len)
            .or_else(|| rw.g.value(v).shape().map(|s| s.rank()));
        shapes[i] = s;
    }
    let mut ctx = Ctx {
        elems,
        dtype,
        pos,
        reads: reads_of,
        shapes,
        ranks,
        smalls,
        vtypes,
        mark: vec![0; n_nodes],
        stamp: 0,
    };

    // Grow groups in topological order.
    let mut group_of: Vec<Option<usize>> = vec![None; n_nodes];
    let mut groups: Vec<Vec<NodeId>> = Vec::new();
    for &id in &order {
        let Some(d) = ctx.dtype[id.0] else { continue };
        let mut producers: Vec<usize> = Vec::new();
        for &v in &ctx.elem(id).inputs {
            if let Some(g) = rw.producer(v).and_then(|p| group_of[p.0]) {
                if ctx.dtype[groups[g][0].0] == Some(d) && !producers.contains(&g) {
                    producers.push(g);
                }
            }
        }
        let mut tries: Vec<Vec<usize>> = Vec::new();
        if !producers.is_empty() {
            tries.push(producers.clone());
            if producers.len() > 1 {
                let mut by_size = producers.clone();
                by_size.sort_by_key(|&g| std::cmp::Reverse(groups[g].len()));
                tries.extend(by_size.into_iter().map(|g| vec![g]));
            }
        }
        let mut joined = None;
        for t in tries {
            let mut members: Vec<NodeId> = t.iter().flat_map(|&g| groups[g].clone()).collect();
            members.push(id);
            members.sort_by_key(|m| ctx.pos[m.0]);
            if ctx.check(rw, &members).is_some() {
                joined = Some((t, members));
                break;
            }
        }
        match joined {
            Some((t, members)) => {
                let keep = t[0];
                for &g in &t[1..] {
                    groups[g].clear();
                }
                for &m in &members {
                    group_of[m.0] = Some(keep);
                }
                groups[keep] = members;
            }
            None => {
                group_of[id.0] = Some(groups.len());
                groups.push(vec![id]);
            }
        }
    }
    groups.retain(|g| g.len() >= 2);
    if groups.is_empty() {
        return false;
    }
    // Each group is convex on its own; drop groups until contracting them all leaves no
    // cycle between groups either.
    while let Some(bad) = cyclic_group(rw, &order, &ctx.reads, &groups) {
        groups.remove(bad);
    }
    let mut fused = false;
    for members in &groups {
        let Some(plan) = ctx.check(rw, members) else {
            continue;
        };
        emit(rw, &ctx, members, &plan);
        fused = true;
    }
    fused
}

/// The live nodes in a topological order (earliest file position first), or `None` on a
/// cycle (left for the compiler to report).
fn topo(rw: &Rewriter<'_>, live: &[NodeId], reads: &[Vec<ValueId>]) -> Option<Vec<NodeId>> {
    let n = rw.g.nodes.len();
    let mut indegree = vec![0usize; n];
    let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for &id in live {
        let mut deps: Vec<NodeId> = reads[id.0]
            .iter()
            .filter_map(|&v| rw.producer(v))
            .filter(|&p| p != id)
            .collect();
        deps.sort();
        deps.dedup();
        indegree[id.0] = deps.len();
        for p in deps {
            users[p.0].push(id);
        }
    }
    let mut ready: BTreeSet<NodeId> = live
        .iter()
        .copied()
        .filter(|i| indegree[i.0] == 0)
        .collect();
    let mut order = Vec::with_capacity(live.len());
    while let Some(id) = ready.pop_first() {
        order.push(id);
        for &u in &users[id.0] {
            indegree[u.0] -= 1;
            if indegree[u.0] == 0 {
                ready.insert(u);
            }
        }
    }
    (order.len() == live.len()).then_some(order)
}

/// A group on a cycle of the graph with every group contracted to one node (the smallest of
/// those left unordered), if there is one.
fn cyclic_group(
    rw: &Rewriter<'_>,
    order: &[NodeId],
    reads: &[Vec<ValueId>],
    groups: &[Vec<NodeId>],
) -> Option<usize> {
    let n = rw.g.nodes.len();
    // Super node of each node: groups first, then single nodes.
    let mut sup: Vec<usize> = (0..n).map(|i| groups.len() + i).collect();
    for (g, members) in groups.iter().enumerate() {
        for m in members {
            sup[m.0] = g;
        }
    }
    let total = groups.len() + n;
    let mut deps: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); total];
    let mut present = vec![false; total];
    for &id in order {
        let s = sup[id.0];
        present[s] = true;
        for &v in &reads[id.0] {
            if let Some(p) = rw.producer(v) {
                if sup[p.0] != s {
                    deps[s].insert(sup[p.0]);
                }
            }
        }
    }
    let mut indegree: Vec<usize> = deps.iter().map(BTreeSet::len).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); total];
    for (s, d) in deps.iter().enumerate() {
        for &p in d {
            users[p].push(s);
        }
    }
    let mut ready: Vec<usize> = (0..total)
        .filter(|&s| present[s] && indegree[s] == 0)
        .collect();
    let mut done = vec![false; total];
    while let Some(s) = ready.pop() {
        done[s] = true;
        for &u in &users[s] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.push(u);
            }
        }
    }
    (0..groups.len())
        .filter(|&g| !done[g])
        .min_by_key(|&g| groups[g].len())
}

/// Rewrites the group's last node into the fused node and removes the others.
fn emit(rw: &mut Rewriter<'_>, ctx: &Ctx, members: &[NodeId], plan: &Plan) {
    let mut prog = Program::default();
    let mut val: HashMap<ValueId, Operand> = HashMap::new();
    for (k, &v) in plan.inputs.iter().enumerate() {
        val.insert(v, Operand::Input(k));
    }
    for (&v, &c) in &plan.literals {
        val.insert(v, Operand::Lit(c));
    }
    for &m in members {
        let e = ctx.elem(m);
        let ops: Vec<Operand> = e.inputs.iter().map(|v| val[v]).collect();
        let r = e.emit(&ops, &mut prog);
        val.insert(e.out, r);
    }
    prog.outputs = plan.outputs.iter().map(|v| val[v]).collect();
    let dtype = ctx.dtype[members[0].0].expect("a typed group");
    let host = *members.last().expect("a group has members");
    let names: Vec<String> = members
        .iter()
        .map(|&m| rw.node(m).name.clone())
        .filter(|n| !n.is_empty())
        .collect();
    let node = rw.g.node_mut(host);
    node.op_type = OP.into();
    node.domain = INTERNAL_DOMAIN.into();
    if let (Some(first), Some(last)) = (names.first(), names.last()) {
        node.name = if first == last {
            format!("fused({first})")
        } else {
            format!("fused({first}..{last})")
        };
    }
    node.inputs = plan.inputs.iter().map(|&v| Some(v)).collect();
    node.outputs = plan.outputs.clone();
    node.attributes.clear();
    node.attributes
        .insert("program".into(), Attribute::String(prog.to_text()));
    node.attributes
        .insert("dtype".into(), Attribute::Int(dtype.onnx_code() as i64));
    for &m in members {
        if m != host {
            rw.remove(m);
        }
    }
    rw.new_domains.insert(INTERNAL_DOMAIN);
    rw.count("elementwise_chain");
}

/// Puts `graph`'s nodes back in a topological order (the fused nodes take their group's last
/// position, which readers of an earlier member's value may precede).
pub(crate) fn restore_topological_order(graph: &mut Graph) {
    let Ok(order) = crate::compile::topological_order(graph) else {
        return;
    };
    if order.iter().enumerate().all(|(i, id)| id.0 == i) {
        return;
    }
    let mut slots: Vec<Option<Node>> = std::mem::take(&mut graph.nodes)
        .into_iter()
        .map(Some)
        .collect();
    for id in order {
        if let Some(node) = slots[id.0].take() {
            graph.insert_node(node);
        }
    }
}
