//! The editing context the passes share: which node produces and which nodes read each
//! value, which values must keep their identity (graph outputs, values subgraphs read by
//! name), constant lookup, and node removal that the driver compacts at the end.

use onnx_runtime_ep_api::{DeviceKind, ExecutionProvider};
use onnx_runtime_ep_cpu::CpuRegistry;
use onnx_runtime_ir::{Attribute, DataType, Graph, Node, NodeId, TensorData, ValueId, ValueType};
use std::collections::{BTreeMap, BTreeSet};

/// A float constant read out of the graph: shape and values widened to f64.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct ConstF {
    pub shape: Vec<usize>,
    pub data: Vec<f64>,
}

impl ConstF {
    /// The single value of a one-element tensor.
    pub fn scalar(&self) -> Option<f64> {
        (self.data.len() == 1).then(|| self.data[0])
    }
}

pub(crate) struct Rewriter<'g> {
    pub g: &'g mut Graph,
    pub registry: &'g CpuRegistry,
    /// Opset of the default domain (subgraphs use their model's).
    pub opset: u64,
    /// Nodes removed so far; dropped from the graph when the driver finishes.
    dead: Vec<bool>,
    producer: Vec<Option<NodeId>>,
    consumers: Vec<Vec<NodeId>>,
    /// Values whose name is visible outside the node list: graph outputs and names read by
    /// subgraphs of this graph's nodes.
    pinned: Vec<bool>,
    inputs: BTreeSet<ValueId>,
    /// Domains of the nodes passes added (the model must import each).
    pub new_domains: BTreeSet<&'static str>,
    /// Rewrites applied, by pass name.
    pub applied: BTreeMap<&'static str, usize>,
    /// Static shapes by value, worked out on first use (rewrites keep every value's
    /// meaning, so they stay valid).
    shapes: Option<Vec<Option<Vec<usize>>>>,
    /// Symbolic shapes, worked out on first use (valid for the same reason).
    sym: Option<super::sym_shapes::SymShapes>,
}

impl<'g> Rewriter<'g> {
    /// Builds the use lists of `graph`. `None` if the graph is not well formed enough to
    /// rewrite safely (a value with two producers): it is then left for the compiler to
    /// report.
    pub fn new(g: &'g mut Graph, registry: &'g CpuRegistry, opset: u64) -> Option<Self> {
        let mut subgraph_reads = BTreeSet::new();
        for node in &g.nodes {
            for attr in node.attributes.values() {
                match attr {
                    Attribute::Graph(sub) => crate::compile::free_names(sub, &mut subgraph_reads),
                    Attribute::Graphs(subs) => subs
                        .iter()
                        .for_each(|s| crate::compile::free_names(s, &mut subgraph_reads)),
                    _ => {}
                }
            }
        }
        let n = g.values.len();
        let mut pinned = vec![false; n];
        for &o in &g.outputs {
            pinned[o.0] = true;
        }
        for name in &subgraph_reads {
            if let Some(v) = g.value_by_name(name) {
                pinned[v.0] = true;
            }
        }
        let inputs = g.inputs.iter().copied().collect();
        let mut rw = Rewriter {
            dead: vec![false; g.nodes.len()],
            producer: Vec::new(),
            consumers: Vec::new(),
            pinned,
            inputs,
            g,
            registry,
            opset,
            new_domains: BTreeSet::new(),
            applied: BTreeMap::new(),
            shapes: None,
            sym: None,
        };
        if !rw.refresh() {
            return None;
        }
        Some(rw)
    }

    /// Recomputes producers and consumers from the live nodes. False when a named value
    /// has two producers.
    pub fn refresh(&mut self) -> bool {
        // A rewrite can make more shapes known (a fused node's rule where the pattern had
        // none): infer again on next use.
        self.sym = None;
        let n = self.g.values.len();
        self.pinned.resize(n, false);
        self.producer = vec![None; n];
        self.consumers = vec![Vec::new(); n];
        for node in &self.g.nodes {
            if self.dead[node.id.0] {
                continue;
            }
            for &o in &node.outputs {
                if self.g.value(o).name.is_empty() {
                    continue;
                }
                if self.producer[o.0].replace(node.id).is_some() {
                    return false;
                }
            }
            for &i in node.inputs.iter().flatten() {
                if !self.consumers[i.0].contains(&node.id) {
                    self.consumers[i.0].push(node.id);
                }
            }
        }
        true
    }

    pub fn node(&self, id: NodeId) -> &Node {
        self.g.node(id)
    }

    pub fn is_dead(&self, id: NodeId) -> bool {
        self.dead[id.0]
    }

    /// Live node ids in file order.
    pub fn live_nodes(&self) -> Vec<NodeId> {
        (0..self.g.nodes.len())
            .map(NodeId)
            .filter(|&id| !self.dead[id.0])
            .collect()
    }

    pub fn remove(&mut self, id: NodeId) {
        self.dead[id.0] = true;
    }

    pub fn producer(&self, v: ValueId) -> Option<NodeId> {
        self.producer.get(v.0).copied().flatten()
    }

    /// The live node that produces `v`, if it has op `op` in the default domain.
    pub fn producer_op(&self, v: ValueId, op: &str) -> Option<NodeId> {
        self.producer(v).filter(|&p| is_op(self.node(p), op))
    }

    pub fn consumers(&self, v: ValueId) -> &[NodeId] {
        &self.consumers[v.0]
    }

    pub fn is_pinned(&self, v: ValueId) -> bool {
        self.pinned[v.0]
    }

    pub fn is_graph_input(&self, v: ValueId) -> bool {
        self.inputs.contains(&v)
    }

    /// The single live reader of `v`, when `v` is an intermediate nothing else sees.
    pub fn sole_consumer(&self, v: ValueId) -> Option<NodeId> {
        if self.pinned[v.0] || self.is_graph_input(v) {
            return None;
        }
        match self.consumers[v.0].as_slice() {
            [only] => {
                // Read once by one node, not twice by it (Mul(x, x)).
                let reads = self
                    .node(*only)
                    .inputs
                    .iter()
                    .filter(|i| **i == Some(v))
                    .count();
                (reads == 1).then_some(*only)
            }
            _ => None,
        }
    }

    /// Whether `v` is an intermediate whose every reader is in `allowed`.
    pub fn only_read_by(&self, v: ValueId, allowed: &[NodeId]) -> bool {
        !self.pinned[v.0]
            && !self.is_graph_input(v)
            && self.consumers[v.0].iter().all(|c| allowed.contains(c))
    }

    /// The constant tensor behind `v`: an initializer that is not a graph input (those can
    /// be fed), or the output of a `Constant` node.
    pub fn constant(&self, v: ValueId) -> Option<TensorData> {
        if self.is_graph_input(v) {
            return None;
        }
        if let Some(t) = self.g.initializer(v) {
            return Some(t.clone());
        }
        let p = self.producer(v)?;
        let node = self.node(p);
        if is_op(node, "ConstantOfShape") {
            return self.constant_of_shape(node);
        }
        if let Some(t) = self.reshaped_constant(node) {
            return Some(t);
        }
        if !is_op(node, "Constant") || node.attributes.len() != 1 {
            return None;
        }
        match node.attributes.iter().next()? {
            (k, Attribute::Tensor(t)) if k == "value" => Some(t.clone()),
            (k, Attribute::Float(f)) if k == "value_float" => Some(TensorData::from_bytes(
                DataType::Float32,
                vec![],
                f.to_le_bytes().to_vec(),
            )),
            (k, Attribute::Floats(fs)) if k == "value_floats" => Some(TensorData::from_bytes(
                DataType::Float32,
                vec![fs.len()],
                fs.iter().flat_map(|f| f.to_le_bytes()).collect(),
            )),
            (k, Attribute::Int(i)) if k == "value_int" => Some(TensorData::from_bytes(
                DataType::Int64,
                vec![],
                i.to_le_bytes().to_vec(),
            )),
            (k, Attribute::Ints(is)) if k == "value_ints" => Some(TensorData::from_bytes(
                DataType::Int64,
                vec![is.len()],
                is.iter().flat_map(|i| i.to_le_bytes()).collect(),
            )),
            _ => None,
        }
    }

    /// The output of a shape-only op (Identity, Unsqueeze, Squeeze, Reshape, Flatten) on a
    /// constant: the same elements under the output's shape.
    fn reshaped_constant(&self, node: &Node) -> Option<TensorData> {
        let op = node.op_type.as_str();
        if !node.normalized_domain().is_empty()
            || !matches!(
                op,
                "Identity" | "Unsqueeze" | "Squeeze" | "Reshape" | "Flatten"
            )
        {
            return None;
        }
        let t = self.constant(node.inputs.first().copied().flatten()?)?;
        let shape = &t.shape;
        let axes = || -> Option<Option<Vec<i64>>> {
            match node.inputs.get(1).copied().flatten() {
                Some(a) => Some(Some(self.const_ints(a)?)),
                None => Some(
                    node.attribute("axes")
                        .and_then(|a| a.as_ints())
                        .map(<[i64]>::to_vec),
                ),
            }
        };
        let norm = |a: i64, rank: usize| -> Option<usize> {
            let r = rank as i64;
            let a = if a < 0 { a + r } else { a };
            (0..r).contains(&a).then_some(a as usize)
        };
        let new_shape: Vec<usize> = match op {
            "Identity" => shape.clone(),
            "Unsqueeze" => {
                let axes = axes()??;
                let rank = shape.len() + axes.len();
                let mut ones = vec![false; rank];
                for &a in &axes {
                    let a = norm(a, rank)?;
                    if std::mem::replace(&mut ones[a], true) {
                        return None;
                    }
                }
                let mut rest = shape.iter();
                ones.iter()
                    .map(|&one| if one { Some(1) } else { rest.next().copied() })
                    .collect::<Option<_>>()?
            }
            "Squeeze" => match axes()? {
                None => shape.iter().copied().filter(|&d| d != 1).collect(),
                Some(axes) => {
                    let drop: Vec<usize> = axes
                        .iter()
                        .map(|&a| norm(a, shape.len()))
                        .collect::<Option<_>>()?;
                    if drop.iter().any(|&a| shape[a] != 1) {
                        return None;
                    }
                    (0..shape.len())
                        .filter(|i| !drop.contains(i))
                        .map(|i| shape[i])
                        .collect()
                }
            },
            "Flatten" => {
                let axis = node.attribute("axis").and_then(|a| a.as_int()).unwrap_or(1);
                let axis = if axis < 0 {
                    axis + shape.len() as i64
                } else {
                    axis
                };
                let axis = usize::try_from(axis).ok().filter(|&a| a <= shape.len())?;
                vec![
                    shape[..axis].iter().product(),
                    shape[axis..].iter().product(),
                ]
            }
            _ => {
                // Reshape: 0 copies the input's dimension (unless allowzero), -1 is inferred.
                let want = self.const_ints(node.inputs.get(1).copied().flatten()?)?;
                let allowzero = node.attribute("allowzero").and_then(|a| a.as_int()) == Some(1);
                let mut out = Vec::with_capacity(want.len());
                let mut infer = None;
                for (i, &d) in want.iter().enumerate() {
                    match d {
                        -1 if infer.is_none() => {
                            infer = Some(i);
                            out.push(1);
                        }
                        0 if !allowzero => out.push(*shape.get(i)?),
                        d if d >= 0 => out.push(d as usize),
                        _ => return None,
                    }
                }
                if let Some(i) = infer {
                    let known: usize = out.iter().product();
                    if known == 0 || t.numel() % known != 0 {
                        return None;
                    }
                    out[i] = t.numel() / known;
                }
                out
            }
        };
        if new_shape.iter().product::<usize>() != t.numel() {
            return None;
        }
        let mut t = t;
        t.shape = new_shape;
        Some(t)
    }

    /// The output of ConstantOfShape with a constant shape: its `value` (float32 zero by
    /// default) repeated.
    fn constant_of_shape(&self, node: &Node) -> Option<TensorData> {
        let shape = self.const_ints(node.inputs.first().copied().flatten()?)?;
        let shape: Vec<usize> = shape
            .iter()
            .map(|&d| usize::try_from(d).ok())
            .collect::<Option<_>>()?;
        let fill = match node.attribute("value") {
            None => TensorData::from_bytes(DataType::Float32, vec![1], vec![0; 4]),
            Some(Attribute::Tensor(t)) => t.clone(),
            Some(_) => return None,
        };
        let elem = fill.dtype.element_size()?;
        if fill.numel() != 1 || fill.bytes().len() != elem || fill.dtype.is_sub_byte() {
            return None;
        }
        let n: usize = shape.iter().product();
        let bytes = fill.bytes().repeat(n);
        Some(TensorData::from_bytes(fill.dtype, shape, bytes))
    }

    /// A float32 constant, widened to f64.
    pub fn const_f32(&self, v: ValueId) -> Option<ConstF> {
        let t = self.constant(v)?;
        if t.dtype != DataType::Float32 {
            return None;
        }
        let b = t.bytes();
        if b.len() != t.numel() * 4 {
            return None;
        }
        let data = b
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]) as f64)
            .collect();
        Some(ConstF {
            shape: t.shape.clone(),
            data,
        })
    }

    /// A one-element float32 constant of rank 0 or 1 (one that broadcasts against any
    /// tensor of rank 1 or more without changing its shape).
    pub fn const_scalar(&self, v: ValueId) -> Option<f64> {
        let c = self.const_f32(v)?;
        if c.shape.len() > 1 {
            return None;
        }
        c.scalar()
    }

    /// An integer constant (int32/int64/...) as i64s.
    pub fn const_ints(&self, v: ValueId) -> Option<Vec<i64>> {
        self.constant(v)?.to_i64_vec()
    }

    /// The element type of `v` where it is known for sure: graph inputs and initializers
    /// (declared), constants, and outputs of Cast.
    pub fn known_dtype(&self, v: ValueId) -> Option<DataType> {
        if let Some(t) = self.constant(v) {
            return Some(t.dtype);
        }
        if self.is_graph_input(v) {
            return match &self.g.value(v).ty {
                Some(ValueType::Tensor { dtype, .. }) if *dtype != DataType::Undefined => {
                    Some(*dtype)
                }
                _ => None,
            };
        }
        let p = self.producer(v)?;
        let node = self.node(p);
        if is_op(node, "Cast") {
            let to = node.attribute("to")?.as_int()?;
            return DataType::from_onnx(to as i32);
        }
        None
    }

    /// Adds a float32 initializer named after `hint`, returning its value.
    pub fn add_f32_initializer(&mut self, hint: &str, shape: Vec<usize>, data: &[f64]) -> ValueId {
        let name = self.fresh_name(hint);
        let bytes: Vec<u8> = data
            .iter()
            .flat_map(|&x| (x as f32).to_le_bytes())
            .collect();
        let mut t = TensorData::from_bytes(DataType::Float32, shape.clone(), bytes);
        t.name = name.clone();
        let id = self.g.create_value(
            name,
            Some(ValueType::tensor(
                DataType::Float32,
                onnx_runtime_ir::static_shape(shape),
            )),
        );
        self.g.add_initializer(id, t);
        self.pinned.push(false);
        id
    }

    /// A new unnamed value: an optional output left unproduced.
    pub fn unnamed_value(&mut self) -> ValueId {
        let id = self.g.create_value(String::new(), None);
        self.pinned.push(false);
        id
    }

    /// A value name not used in the graph, starting with `hint`.
    pub fn fresh_name(&self, hint: &str) -> String {
        let mut k = 0usize;
        loop {
            let name = format!("{hint}_opt{k}");
            if self.g.value_by_name(&name).is_none() {
                return name;
            }
            k += 1;
        }
    }

    /// Points every live reader of `from` at `to` instead.
    pub fn replace_uses(&mut self, from: ValueId, to: ValueId) {
        let readers = self.consumers[from.0].clone();
        for r in readers {
            for i in self.g.node_mut(r).inputs.iter_mut() {
                if *i == Some(from) {
                    *i = Some(to);
                }
            }
        }
    }

    /// The static shape of `v`, if the graph's input shapes determine it.
    pub fn static_shape(&mut self, v: ValueId) -> Option<Vec<usize>> {
        if self.shapes.is_none() {
            self.shapes = Some(super::shapes::infer(self));
        }
        self.shapes.as_ref()?.get(v.0).cloned().flatten()
    }

    /// The symbolic dimensions of `v` ([`super::sym_shapes`]), when they can be told.
    pub fn sym_dims(&mut self, v: ValueId) -> Option<Vec<super::sym_shapes::D>> {
        if self.sym.is_none() {
            let s = super::sym_shapes::SymShapes::infer(self);
            self.sym = Some(s);
        }
        self.sym.as_ref()?.dims(v).map(<[_]>::to_vec)
    }

    /// The elements of `v` when it is a small integer tensor computed from shapes.
    pub fn sym_vals(&mut self, v: ValueId) -> Option<Vec<super::sym_shapes::D>> {
        self.sym_dims(v);
        self.sym.as_ref()?.vals(v).map(<[_]>::to_vec)
    }

    /// Whether the registry has a kernel for `domain:op` at `version`.
    pub fn has_kernel(&self, domain: &str, op: &str, version: u64) -> bool {
        self.registry.contains(domain, op, version)
    }

    pub fn count(&mut self, pass: &'static str) {
        *self.applied.entry(pass).or_default() += 1;
    }

    /// Drops removed nodes (renumbering the rest), then nodes nothing reads any more (the
    /// constants and shape arithmetic a fusion left behind; never control flow or random
    /// ops), then initializers nothing reads.
    pub fn finish(mut self) -> (BTreeMap<&'static str, usize>, BTreeSet<&'static str>) {
        // Constant producers left without readers (a folded weight's ConstantOfShape and the
        // Constant shape feeding it go in two rounds).
        loop {
            self.refresh();
            let mut removed = false;
            for id in self.live_nodes() {
                let node = self.node(id);
                if is_pure(node)
                    && !node.outputs.is_empty()
                    && node
                        .outputs
                        .iter()
                        .all(|&o| self.consumers[o.0].is_empty() && !self.pinned[o.0])
                {
                    self.dead[id.0] = true;
                    removed = true;
                }
            }
            if !removed {
                break;
            }
        }
        let dead = std::mem::take(&mut self.dead);
        let nodes = std::mem::take(&mut self.g.nodes);
        for node in nodes.into_iter().filter(|n| !dead[n.id.0]) {
            self.g.insert_node(node);
        }
        let mut read = vec![false; self.g.values.len()];
        for node in &self.g.nodes {
            for &i in node.inputs.iter().flatten() {
                read[i.0] = true;
            }
        }
        let unused: Vec<ValueId> = self
            .g
            .initializers
            .keys()
            .copied()
            .filter(|&v| !read[v.0] && !self.pinned[v.0] && !self.inputs.contains(&v))
            .collect();
        for v in unused {
            self.g.initializers.remove(&v);
        }
        (self.applied, self.new_domains)
    }
}

/// A node whose only effect is its outputs: one of the default domain that is neither
/// random ([`crate::compile::NONDETERMINISTIC`]) nor control flow (no subgraphs).
pub(crate) fn is_pure(node: &Node) -> bool {
    node.normalized_domain().is_empty()
        && !crate::compile::NONDETERMINISTIC.contains(&node.op_type.as_str())
        && !node
            .attributes
            .values()
            .any(|a| matches!(a, Attribute::Graph(_) | Attribute::Graphs(_)))
}

/// Whether a session on `device` gets a fusion into `domain:op`: a CUDA device that runs
/// it, with the CPU provider's kernel in `registry` to fall back on.
pub(crate) fn device_runs(
    device: Option<&dyn ExecutionProvider>,
    registry: &CpuRegistry,
    domain: &str,
    op: &str,
) -> bool {
    let Some(dev) = device else { return false };
    if dev.device_id().kind != DeviceKind::Cuda {
        return false;
    }
    let probe = Node::new(NodeId(0), op, vec![], vec![]).with_domain(domain);
    dev.supports(&probe, 1) && registry.contains(domain, op, 1)
}

/// Whether `node` is `op` of the default ONNX domain.
pub(crate) fn is_op(node: &Node, op: &str) -> bool {
    node.op_type == op && node.normalized_domain().is_empty()
}

/// The other input of a two-input node, given one of them.
pub(crate) fn other_input(node: &Node, v: ValueId) -> Option<ValueId> {
    match node.inputs.as_slice() {
        [Some(a), Some(b)] if *a == v => Some(*b),
        [Some(a), Some(b)] if *b == v => Some(*a),
        _ => None,
    }
}
