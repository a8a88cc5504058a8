//! Turns an IR graph into an executable plan: kernels built once, values in a slot table,
//! outer-scope references resolved, and the liveness plan that frees each intermediate after
//! its last consumer.

use crate::constant::fold_constant;
use crate::control::{self, ControlOp};
use crate::device::{placeable, DeviceStep, DeviceTensor};
use crate::error::{MissingOp, SessionError, SessionResult};
use crate::placement::{is_shape_math, makes_shape_values, shape_sinks, MetaOp};
use onnx_runtime_ep_api::{EpError, ExecutionProvider};
use onnx_runtime_ep_cpu::{BuildContext, CpuKernel, CpuRegistry, Value};
use onnx_runtime_ir::{Attribute, Graph, Node, NodeId, ValueId, ValueType};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;

/// What a step runs.
pub(crate) enum StepKind {
    Cpu(Box<dyn CpuKernel>),
    Control(Box<ControlOp>),
    Device(Box<DeviceStep>),
    /// `Shape` / `Size` in a device session, answered from the input's metadata.
    Meta(MetaOp),
}

/// One node of the plan.
pub(crate) struct Step {
    /// `Op node 'name'`, for errors.
    pub name: String,
    /// The node's op type (`domain:Op` outside the default domain), for profiles.
    pub op_type: String,
    pub kind: StepKind,
    /// Slots of the node's inputs (`None`: an omitted optional input).
    pub inputs: Vec<Option<usize>>,
    /// Slots of values the node's subgraphs read from this scope (control flow only).
    pub implicit: Vec<usize>,
    /// Slots the node's outputs go to, in order.
    pub outputs: Vec<usize>,
    /// Slots whose last reader is this step: freed right after it.
    pub free_after: Vec<usize>,
}

/// A graph ready to run. Slots `0..graph.values.len()` are the graph's values by id; slots
/// after them hold outer-scope values the graph reads but whose names it never declared.
pub(crate) struct CompiledGraph {
    pub num_slots: usize,
    /// Slots of the graph inputs, in order, with their declared names and types.
    pub inputs: Vec<IoSlot>,
    /// Initializer values of inputs that have one (a feed overrides it).
    pub input_defaults: Vec<Option<Value>>,
    /// Initializers and folded `Constant` outputs.
    pub constants: Vec<(usize, Value)>,
    /// Copies on the device of the constants that device steps read.
    pub device_constants: Vec<(usize, Arc<DeviceTensor>)>,
    /// Whether any step runs on a device.
    pub uses_device: bool,
    /// The session's accelerator, if it has one (values then have a device slot too).
    pub device: Option<Arc<dyn ExecutionProvider>>,
    /// With an accelerator: the steps that run on the host, each with the reason.
    pub host_nodes: Vec<HostNode>,
    /// Names this graph reads from enclosing scopes, and the slots they go to.
    pub captures: Vec<(String, usize)>,
    pub steps: Vec<Step>,
    pub outputs: Vec<IoSlot>,
    /// By slot: whether the value is a shape or computed on the host from shapes and
    /// constants only (device sessions), so it is the same in every run of one input signature.
    pub host_class: Vec<bool>,
    /// Why a run of this graph cannot be captured as one device graph (empty: it can).
    pub capture_blockers: Vec<String>,
}

impl CompiledGraph {
    /// Steps placed on the device.
    pub fn device_steps(&self) -> usize {
        self.steps
            .iter()
            .filter(|s| matches!(s.kind, StepKind::Device(_)))
            .count()
    }

    /// Over every run so far: calls of device steps that ran on the device, and calls their
    /// CPU kernels took over.
    /// Device nodes some of whose calls the device kernel refused (so the CPU ran them), with
    /// how many and why the first was refused.
    pub fn refused_nodes(&self) -> Vec<RefusedNode> {
        use std::sync::atomic::Ordering::Relaxed;
        self.steps
            .iter()
            .filter_map(|s| match &s.kind {
                StepKind::Device(d) if d.refused.load(Relaxed) > 0 => Some(RefusedNode {
                    node: s.name.clone(),
                    calls: d.refused.load(Relaxed),
                    reason: d.refusal.get().cloned().unwrap_or_default(),
                }),
                _ => None,
            })
            .collect()
    }

    pub fn device_calls(&self) -> (usize, usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.steps
            .iter()
            .fold((0, 0), |(ran, refused), s| match &s.kind {
                StepKind::Device(d) => {
                    (ran + d.ran.load(Relaxed), refused + d.refused.load(Relaxed))
                }
                _ => (ran, refused),
            })
    }
}

pub(crate) struct IoSlot {
    pub name: String,
    pub ty: Option<ValueType>,
    pub slot: usize,
}

/// The ops the session runs itself rather than through the CPU registry, with the first
/// opset of each.
pub(crate) const SESSION_OPS: &[(&str, u64)] =
    &[("If", 1), ("Loop", 1), ("Scan", 8), ("SequenceMap", 17)];

pub(crate) fn is_session_op(node: &Node) -> bool {
    node.normalized_domain().is_empty() && SESSION_OPS.iter().any(|(op, _)| *op == node.op_type)
}

/// Builds plans; shared by a graph and its subgraphs.
pub(crate) struct Compiler<'r> {
    pub registry: &'r CpuRegistry,
    /// Opset by domain (`""` for the default domain), from the model.
    pub opsets: BTreeMap<String, u64>,
    /// The accelerator that takes every node it has a kernel for; the CPU runs the rest.
    pub device: Option<Arc<dyn ExecutionProvider>>,
}

impl Compiler<'_> {
    pub fn opset(&self, node: &Node) -> SessionResult<u64> {
        let domain = node.normalized_domain();
        self.opsets.get(domain).copied().ok_or_else(|| {
            SessionError::invalid(format!(
                "{} is in domain '{}', which the model does not import (add it to opset_import)",
                node.describe(),
                domain
            ))
        })
    }

    /// Every (domain, op, opset) in `graph` and its subgraphs without a kernel.
    pub fn missing_ops(&self, graph: &Graph, out: &mut BTreeSet<MissingOp>) -> SessionResult<()> {
        for node in &graph.nodes {
            let opset = self.opset(node)?;
            let supported = if is_session_op(node) {
                SESSION_OPS
                    .iter()
                    .any(|(op, since)| *op == node.op_type && opset >= *since)
            } else {
                self.registry.contains(&node.domain, &node.op_type, opset)
                    || (node.normalized_domain().is_empty() && node.op_type == "Constant")
            };
            if !supported {
                out.insert(MissingOp {
                    domain: node.normalized_domain().to_string(),
                    op: node.op_type.clone(),
                    opset,
                });
            }
            for attr in node.attributes.values() {
                match attr {
                    Attribute::Graph(g) => self.missing_ops(g, out)?,
                    Attribute::Graphs(gs) => {
                        for g in gs {
                            self.missing_ops(g, out)?;
                        }
                    }
                    _ => {}
                }
            }
        }
        Ok(())
    }

    /// Compiles `graph`. `outer` holds constants visible from enclosing scopes by name, which
    /// kernels of this graph may read at build time.
    pub fn compile(
        &self,
        graph: &Graph,
        outer: &HashMap<String, Value>,
    ) -> SessionResult<CompiledGraph> {
        let order = topological_order(graph)?;
        let nvalues = graph.values.len();
        let mut num_slots = nvalues;

        // Values defined in this scope: inputs, initializers, node outputs.
        let mut defined = vec![false; nvalues];
        let mut constants: HashMap<usize, Value> = HashMap::new();
        let input_set: BTreeSet<ValueId> = graph.inputs.iter().copied().collect();
        for &v in &graph.inputs {
            defined[v.0] = true;
        }
        for (&v, data) in &graph.initializers {
            defined[v.0] = true;
            if !input_set.contains(&v) {
                let t = onnx_runtime_ep_cpu::Tensor::from_tensor_data(data).map_err(|e| {
                    SessionError::invalid(format!("initializer '{}': {e}", graph.value(v).name))
                })?;
                constants.insert(v.0, Value::Tensor(t));
            }
        }
        for (&v, sparse) in &graph.sparse_initializers {
            defined[v.0] = true;
            let t = crate::constant::densify(sparse).map_err(|e| {
                SessionError::invalid(format!("sparse initializer '{}': {e}", graph.value(v).name))
            })?;
            constants.insert(v.0, Value::Tensor(t));
        }
        for node in &graph.nodes {
            for &o in &node.outputs {
                defined[o.0] = true;
            }
        }

        // Names read from enclosing scopes.
        let mut captures: Vec<(String, usize)> = Vec::new();
        let mut capture_slot = |name: &str, id: Option<ValueId>, num_slots: &mut usize| -> usize {
            if let Some((_, s)) = captures.iter().find(|(n, _)| n == name) {
                return *s;
            }
            let slot = match id {
                Some(id) => id.0,
                None => {
                    *num_slots += 1;
                    *num_slots - 1
                }
            };
            captures.push((name.to_string(), slot));
            slot
        };

        // Scope visible to subgraphs: outer constants plus this graph's by name.
        let mut inner_scope = outer.clone();
        for (&slot, v) in &constants {
            inner_scope.insert(graph.values[slot].name.clone(), v.clone());
        }

        let mut device_constants: BTreeMap<usize, Arc<DeviceTensor>> = BTreeMap::new();
        // Shapes and values computed from shapes and constants alone (device sessions).
        let mut host_class: BTreeSet<usize> = BTreeSet::new();
        // Values read only as shapes (device sessions): made on the host too when they can be.
        let sinks = if self.device.is_some() {
            shape_sinks(graph, &order)
        } else {
            Vec::new()
        };
        let mut capture_blockers: Vec<String> = Vec::new();
        let mut host_nodes: Vec<HostNode> = Vec::new();
        let mut steps: Vec<Step> = Vec::with_capacity(graph.nodes.len());
        for &nid in &order {
            let node = graph.node(nid);
            let mut inputs = Vec::with_capacity(node.inputs.len());
            for input in &node.inputs {
                let slot = match input {
                    None => None,
                    Some(id) if graph.value(*id).name.is_empty() => None,
                    Some(id) if defined[id.0] => Some(id.0),
                    Some(id) => Some(capture_slot(
                        &graph.value(*id).name,
                        Some(*id),
                        &mut num_slots,
                    )),
                };
                inputs.push(slot);
            }
            let outputs: Vec<usize> = node.outputs.iter().map(|o| o.0).collect();

            // Constant nodes are evaluated now and never run.
            if node.normalized_domain().is_empty() && node.op_type == "Constant" {
                let value = fold_constant(self, node)?;
                if let Some(&o) = outputs.first() {
                    inner_scope.insert(graph.values[o].name.clone(), value.clone());
                    constants.insert(o, value);
                }
                continue;
            }

            let const_inputs: Vec<Option<&Value>> = node
                .inputs
                .iter()
                .zip(&inputs)
                .map(|(id, slot)| match (id, slot) {
                    (Some(id), Some(slot)) => constants
                        .get(slot)
                        .or_else(|| outer.get(&graph.value(*id).name)),
                    _ => None,
                })
                .collect();

            let opset = self.opset(node)?;
            let (kind, implicit) = if is_session_op(node) {
                let (op, names) = control::build(self, node, opset, &inner_scope)?;
                let mut implicit = Vec::with_capacity(names.len());
                for name in names {
                    let slot = match graph.value_by_name(&name) {
                        Some(id) if defined[id.0] => id.0,
                        id => capture_slot(&name, id, &mut num_slots),
                    };
                    implicit.push(slot);
                }
                (StepKind::Control(Box::new(op)), implicit)
            } else {
                let (_, factory) = self
                    .registry
                    .lookup(&node.domain, &node.op_type, opset)
                    .ok_or_else(|| {
                        SessionError::UnsupportedOps(vec![MissingOp {
                            domain: node.normalized_domain().to_string(),
                            op: node.op_type.clone(),
                            opset,
                        }])
                    })?;
                let ctx = BuildContext {
                    node,
                    opset,
                    constant_inputs: &const_inputs,
                };
                let kernel = factory(&ctx)?;
                // Nodes whose inputs are all constants run now (constant folding), so the
                // kernels that read their outputs see them at build time. A failure leaves
                // the node to run (and report) at run time.
                let folded = if foldable(node, &const_inputs) {
                    kernel
                        .run(&const_inputs)
                        .ok()
                        .filter(|v| v.len() <= outputs.len())
                } else {
                    None
                };
                if let Some(values) = folded {
                    for (&o, value) in outputs.iter().zip(values) {
                        inner_scope.insert(graph.values[o].name.clone(), value.clone());
                        constants.insert(o, value);
                    }
                    continue;
                }
                // Per input: absent, a constant, or a shape-derived host value.
                let known: Vec<bool> = inputs
                    .iter()
                    .map(|slot| {
                        slot.is_none_or(|s| host_class.contains(&s) || constants.contains_key(&s))
                    })
                    .collect();
                let meta = MetaOp::of(node).filter(|_| self.device.is_some());
                // Shape arithmetic over shapes; or a shape-sized tensor (ConstantOfShape,
                // Range) made from shapes and read only as a shape.
                let from_shapes = known.iter().all(|&k| k)
                    && inputs.iter().flatten().any(|s| host_class.contains(s));
                let shape_math = self.device.is_some()
                    && from_shapes
                    && (is_shape_math(node)
                        || (makes_shape_values(node)
                            && outputs
                                .iter()
                                .all(|&o| sinks.get(o).copied().unwrap_or(false))));
                if meta.is_some() || shape_math {
                    host_class.extend(outputs.iter().copied());
                }
                if let Some(op) = meta {
                    (StepKind::Meta(op), Vec::new())
                } else if shape_math {
                    (StepKind::Cpu(kernel), Vec::new())
                } else {
                    match self.place_on_device(graph, node, opset, &const_inputs)? {
                        Ok((device_kernel, ep)) => {
                            for (id, c) in node.inputs.iter().zip(&const_inputs) {
                                if let (Some(id), Some(Value::Tensor(t))) = (id, c) {
                                    if placeable(t)
                                        && constants.contains_key(&id.0)
                                        && !device_constants.contains_key(&id.0)
                                    {
                                        let copy = Arc::new(DeviceTensor::upload(&ep, t)?);
                                        device_constants.insert(id.0, copy);
                                    }
                                }
                            }
                            let host_inputs = device_kernel.host_inputs();
                            for &p in &host_inputs {
                                if !known.get(p).copied().unwrap_or(true) {
                                    capture_blockers.push(format!(
                                    "{}: reads input {p} on the host, and it is computed on the \
                                     device (a device-to-host copy in every run)",
                                    node.describe()
                                ));
                                }
                            }
                            let step = DeviceStep {
                                host_inputs,
                                kernel: device_kernel,
                                fallback: kernel,
                                ep,
                                ran: Default::default(),
                                refused: Default::default(),
                                refusal: Default::default(),
                            };
                            (StepKind::Device(Box::new(step)), Vec::new())
                        }
                        Err(reason) => {
                            if self.device.is_some() {
                                capture_blockers.push(format!(
                                    "{}: runs on the CPU ({reason})",
                                    node.describe()
                                ));
                                host_nodes.push(HostNode {
                                    node: node.describe(),
                                    op: op_name(node),
                                    reason,
                                });
                            }
                            (StepKind::Cpu(kernel), Vec::new())
                        }
                    }
                }
            };
            if matches!(kind, StepKind::Control(_)) && self.device.is_some() {
                capture_blockers.push(format!(
                    "{}: control flow runs on the host",
                    node.describe()
                ));
                host_nodes.push(HostNode {
                    node: node.describe(),
                    op: op_name(node),
                    reason:
                        "control flow runs on the host (its body's nodes are placed on their own)"
                            .into(),
                });
            }
            steps.push(Step {
                name: node.describe(),
                op_type: op_name(node),
                kind,
                inputs,
                implicit,
                outputs,
                free_after: Vec::new(),
            });
        }

        let mut outputs = Vec::with_capacity(graph.outputs.len());
        for &o in &graph.outputs {
            let value = graph.value(o);
            let slot = if defined[o.0] {
                o.0
            } else {
                capture_slot(&value.name, Some(o), &mut num_slots)
            };
            outputs.push(IoSlot {
                name: value.name.clone(),
                ty: value.ty.clone(),
                slot,
            });
        }

        plan_liveness(&mut steps, &outputs, num_slots);

        let inputs: Vec<IoSlot> = graph
            .inputs
            .iter()
            .map(|&v| IoSlot {
                name: graph.value(v).name.clone(),
                ty: graph.value(v).ty.clone(),
                slot: v.0,
            })
            .collect();
        let input_defaults = graph
            .inputs
            .iter()
            .map(|&v| {
                graph
                    .initializer(v)
                    .map(|data| {
                        onnx_runtime_ep_cpu::Tensor::from_tensor_data(data)
                            .map(Value::Tensor)
                            .map_err(|e| {
                                SessionError::invalid(format!(
                                    "initializer '{}': {e}",
                                    graph.value(v).name
                                ))
                            })
                    })
                    .transpose()
            })
            .collect::<SessionResult<Vec<_>>>()?;
        let mut constants: Vec<(usize, Value)> = constants.into_iter().collect();
        constants.sort_by_key(|(s, _)| *s);

        let uses_device = steps.iter().any(|s| matches!(s.kind, StepKind::Device(_)));
        if !uses_device {
            capture_blockers.push("no node runs on the device".into());
        }
        let mut host_class_slots = vec![false; num_slots];
        for s in host_class {
            host_class_slots[s] = true;
        }
        Ok(CompiledGraph {
            num_slots,
            inputs,
            input_defaults,
            constants,
            device_constants: device_constants.into_iter().collect(),
            uses_device,
            device: self.device.clone(),
            host_nodes,
            captures,
            steps,
            outputs,
            host_class: host_class_slots,
            capture_blockers,
        })
    }
}

impl Compiler<'_> {
    /// The device kernel for `node`, with its provider, when the session has an accelerator
    /// that runs it: the provider registers the op at this opset and builds a kernel for it.
    /// Inputs wired to a nameless value stay on the CPU (the provider would count them as
    /// present).
    fn place_on_device(
        &self,
        graph: &Graph,
        node: &Node,
        opset: u64,
        const_inputs: &[Option<&Value>],
    ) -> SessionResult<Result<Placed, String>> {
        let Some(ep) = self.device.as_ref() else {
            return Ok(Err("no accelerator".into()));
        };
        let nameless = node
            .inputs
            .iter()
            .flatten()
            .any(|id| graph.value(*id).name.is_empty());
        if nameless {
            return Ok(Err("an input is wired to a nameless value".into()));
        }
        if !ep.supports(node, opset) {
            return Ok(Err(format!(
                "the {} provider has no kernel for {} at opset {opset}",
                ep.name(),
                op_name(node)
            )));
        }
        match ep.get_kernel(node, &[], opset) {
            Ok(mut kernel) => {
                let constant: Vec<bool> = const_inputs.iter().map(Option::is_some).collect();
                kernel.set_constant_inputs(&constant);
                Ok(Ok((kernel, ep.clone())))
            }
            // The device kernel does not take this node's dtypes or attribute values: a
            // planned host placement, reported with the kernel's reason.
            Err(
                e @ (EpError::UnsupportedOp { .. }
                | EpError::UnsupportedDtype { .. }
                | EpError::InvalidAttribute { .. }),
            ) => Ok(Err(format!("the {} kernel refused it: {e}", ep.name()))),
            // A device that cannot build kernels (a library missing, a compile failure) is an
            // error, not a silent move to the CPU.
            Err(e) => Err(e.into()),
        }
    }
}

/// `Op`, or `domain:Op` outside the default domain.
pub(crate) fn op_name(node: &Node) -> String {
    if node.domain.is_empty() || node.domain == "ai.onnx" {
        node.op_type.clone()
    } else {
        format!("{}:{}", node.domain, node.op_type)
    }
}

/// A node that runs on the host in a session with an accelerator, and why.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HostNode {
    /// `Op node 'name'`.
    pub node: String,
    /// `Op`, or `domain:Op`.
    pub op: String,
    pub reason: String,
}

/// A device node some of whose calls its device kernel refused (the CPU kernel ran them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefusedNode {
    /// `Op node 'name'`.
    pub node: String,
    /// Calls the device kernel refused so far.
    pub calls: usize,
    /// The device kernel's message for the first of them.
    pub reason: String,
}

/// A node's device kernel and the provider it runs on.
type Placed = (
    Box<dyn onnx_runtime_ep_api::Kernel>,
    Arc<dyn ExecutionProvider>,
);

/// Ops whose outputs are not a function of their inputs alone: never folded.
pub(crate) const NONDETERMINISTIC: &[&str] = &[
    "RandomNormal",
    "RandomNormalLike",
    "RandomUniform",
    "RandomUniformLike",
    "Multinomial",
    "Bernoulli",
    "Dropout",
];

/// Whether a node can be evaluated when the session is built: a deterministic op with at
/// least one input, every present input a constant.
fn foldable(node: &Node, const_inputs: &[Option<&Value>]) -> bool {
    let present = node.inputs.iter().filter(|i| i.is_some()).count();
    present > 0
        && const_inputs.iter().filter(|c| c.is_some()).count() == present
        && !NONDETERMINISTIC.contains(&node.op_type.as_str())
}

/// The nodes in an order where every value is produced before it is read: the file order
/// when it already is one (valid ONNX files are), else a stable topological sort. A cycle is
/// an error naming the nodes on it.
pub(crate) fn topological_order(graph: &Graph) -> SessionResult<Vec<NodeId>> {
    let mut producer: HashMap<ValueId, usize> = HashMap::new();
    for (i, node) in graph.nodes.iter().enumerate() {
        for &o in &node.outputs {
            if graph.value(o).name.is_empty() {
                continue;
            }
            if let Some(prev) = producer.insert(o, i) {
                return Err(SessionError::invalid(format!(
                    "value '{}' is produced by both {} and {}",
                    graph.value(o).name,
                    graph.nodes[prev].describe(),
                    node.describe()
                )));
            }
        }
    }
    let deps: Vec<Vec<usize>> = graph
        .nodes
        .iter()
        .map(|node| {
            let mut d: Vec<usize> = node_reads(graph, node)
                .iter()
                .filter_map(|v| producer.get(v).copied())
                .collect();
            d.sort_unstable();
            d.dedup();
            d
        })
        .collect();
    if deps
        .iter()
        .enumerate()
        .all(|(i, d)| d.iter().all(|&p| p < i))
    {
        return Ok(graph.nodes.iter().map(|n| n.id).collect());
    }
    // Kahn's algorithm, always taking the earliest ready node in file order.
    let n = graph.nodes.len();
    let mut indegree: Vec<usize> = deps.iter().map(Vec::len).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); n];
    for (i, d) in deps.iter().enumerate() {
        for &p in d {
            if p == i {
                return Err(SessionError::invalid(format!(
                    "{} reads its own output",
                    graph.nodes[i].describe()
                )));
            }
            users[p].push(i);
        }
    }
    let mut ready: BTreeSet<usize> = (0..n).filter(|&i| indegree[i] == 0).collect();
    let mut order = Vec::with_capacity(n);
    while let Some(i) = ready.pop_first() {
        order.push(graph.nodes[i].id);
        for &u in &users[i] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.insert(u);
            }
        }
    }
    if order.len() != n {
        let stuck: Vec<String> = (0..n)
            .filter(|&i| indegree[i] > 0)
            .take(5)
            .map(|i| graph.nodes[i].describe())
            .collect();
        return Err(SessionError::invalid(format!(
            "the graph has a cycle through {}",
            stuck.join(", ")
        )));
    }
    Ok(order)
}

/// Values a node reads: its inputs and the outer-scope names its subgraphs use that this
/// graph defines.
fn node_reads(graph: &Graph, node: &Node) -> Vec<ValueId> {
    let mut reads: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
    let mut names = BTreeSet::new();
    for attr in node.attributes.values() {
        match attr {
            Attribute::Graph(g) => free_names(g, &mut names),
            Attribute::Graphs(gs) => gs.iter().for_each(|g| free_names(g, &mut names)),
            _ => {}
        }
    }
    reads.extend(names.iter().filter_map(|n| graph.value_by_name(n)));
    reads
}

/// Names `graph` (and its subgraphs) read without defining them.
pub(crate) fn free_names(graph: &Graph, out: &mut BTreeSet<String>) {
    let mut defined: BTreeSet<&str> = BTreeSet::new();
    for &v in graph.inputs.iter().chain(graph.initializers.keys()) {
        defined.insert(&graph.value(v).name);
    }
    for node in &graph.nodes {
        for &o in &node.outputs {
            defined.insert(&graph.value(o).name);
        }
    }
    let mut used = BTreeSet::new();
    for node in &graph.nodes {
        for &i in node.inputs.iter().flatten() {
            used.insert(graph.value(i).name.clone());
        }
        for attr in node.attributes.values() {
            match attr {
                Attribute::Graph(g) => free_names(g, &mut used),
                Attribute::Graphs(gs) => gs.iter().for_each(|g| free_names(g, &mut used)),
                _ => {}
            }
        }
    }
    for &o in &graph.outputs {
        used.insert(graph.value(o).name.clone());
    }
    for name in used {
        if !name.is_empty() && !defined.contains(name.as_str()) {
            out.insert(name);
        }
    }
}

/// Fills each step's `free_after`: a slot is freed after its last reader, or right after its
/// producer when nothing reads it. Graph outputs are never freed.
fn plan_liveness(steps: &mut [Step], outputs: &[IoSlot], num_slots: usize) {
    const NEVER: usize = usize::MAX;
    let mut last_use = vec![NEVER; num_slots];
    let mut keep = vec![false; num_slots];
    for o in outputs {
        keep[o.slot] = true;
    }
    for (i, step) in steps.iter().enumerate() {
        for &s in step.inputs.iter().flatten().chain(&step.implicit) {
            last_use[s] = i;
        }
    }
    for (i, step) in steps.iter().enumerate() {
        for &s in &step.outputs {
            if last_use[s] == NEVER {
                last_use[s] = i;
            }
        }
    }
    for (s, &i) in last_use.iter().enumerate() {
        if i != NEVER && !keep[s] {
            steps[i].free_after.push(s);
        }
    }
}
