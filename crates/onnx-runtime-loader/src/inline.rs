//! Inlining of model-local functions: each call is replaced by the function's body, with
//! fresh value names, the caller's attributes substituted for `ref_attr_name` references
//! (falling back to the function's defaults), nested calls expanded in turn and the
//! function's opset imports merged into the graph's.

use crate::function::Function;
use crate::LoadError;
use onnx_runtime_ir::{Attribute, Graph, Node, NodeId, ValueId};
use std::collections::{BTreeMap, HashMap, HashSet};

struct Inliner<'a> {
    functions: HashMap<(&'a str, &'a str, &'a str), &'a Function>,
    /// No name in the model starts with this, so `{prefix}{n}_{name}` is always fresh.
    prefix: String,
    instances: usize,
    budget: usize,
    max_depth: usize,
    /// The model's opset imports, which inlined functions' imports are merged into.
    opsets: BTreeMap<String, u64>,
}

/// Inlines every call of `functions` in `graph` and its subgraphs.
pub(crate) fn inline_functions(
    graph: &mut Graph,
    functions: &[Function],
    max_depth: usize,
    budget: usize,
) -> Result<(), LoadError> {
    let mut names = HashSet::new();
    collect_names(graph, &mut names);
    // `_..._inl` with more leading underscores than any name of the form `_..._inl...`.
    let underscores = names
        .iter()
        .filter_map(|n| {
            let rest = n.trim_start_matches('_');
            rest.starts_with("inl").then_some(n.len() - rest.len())
        })
        .max()
        .map_or(1, |u| u + 1);
    let prefix = format!("{}inl", "_".repeat(underscores));
    let mut inliner = Inliner {
        functions: functions
            .iter()
            .map(|f| ((f.domain.as_str(), f.name.as_str(), f.overload.as_str()), f))
            .collect(),
        prefix,
        instances: 0,
        budget,
        max_depth,
        opsets: std::mem::take(&mut graph.opset_imports),
    };
    let result = inliner.graph(graph, 0);
    graph.opset_imports = inliner.opsets;
    result
}

fn collect_names(g: &Graph, out: &mut HashSet<String>) {
    out.extend(g.values.iter().map(|v| v.name.clone()));
    for n in &g.nodes {
        for a in n.attributes.values() {
            for sub in subgraphs(a) {
                collect_names(sub, out);
            }
        }
    }
}

/// Roughly the bytes a node (with its attributes) occupies, for the inlining budget.
/// The caller's attributes (and the function's defaults) by name.
type CallerAttributes<'a> = BTreeMap<&'a str, &'a Attribute>;

/// Roughly the bytes a node (with its attributes, references resolved from `caller`) will
/// occupy once copied, for the inlining budget.
fn node_cost(n: &Node, caller: &CallerAttributes) -> usize {
    256 + n
        .attributes
        .values()
        .map(|a| attribute_cost(a, caller))
        .sum::<usize>()
}

fn attribute_cost(a: &Attribute, caller: &CallerAttributes) -> usize {
    let tensor = |t: &onnx_runtime_ir::TensorData| {
        64 + t.bytes().len()
            + t.strings()
                .map_or(0, |s| s.iter().map(|s| s.len() + 24).sum())
    };
    let graph = |g: &Graph| {
        g.nodes.iter().map(|n| node_cost(n, caller)).sum::<usize>()
            + g.initializers.values().map(tensor).sum::<usize>()
            + g.values.len() * 64
    };
    32 + match a {
        Attribute::String(s) => s.len(),
        Attribute::Tensor(t) => tensor(t),
        Attribute::Graph(g) => graph(g),
        Attribute::SparseTensor(s) => tensor(&s.values) + tensor(&s.indices),
        Attribute::Floats(v) => v.len() * 4,
        Attribute::Ints(v) => v.len() * 8,
        Attribute::Strings(v) => v.iter().map(|s| s.len() + 24).sum(),
        Attribute::Tensors(v) => v.iter().map(tensor).sum(),
        Attribute::Graphs(v) => v.iter().map(graph).sum(),
        Attribute::SparseTensors(v) => v
            .iter()
            .map(|s| tensor(&s.values) + tensor(&s.indices))
            .sum(),
        Attribute::Ref { name, .. } => caller
            .get(name.as_str())
            .map_or(0, |v| attribute_cost(v, &BTreeMap::new())),
        _ => 0,
    }
}

fn subgraphs(a: &Attribute) -> Vec<&Graph> {
    match a {
        Attribute::Graph(g) => vec![g],
        Attribute::Graphs(gs) => gs.iter().collect(),
        _ => Vec::new(),
    }
}

fn subgraphs_mut(a: &mut Attribute) -> Vec<&mut Graph> {
    match a {
        Attribute::Graph(g) => vec![g],
        Attribute::Graphs(gs) => gs.iter_mut().collect(),
        _ => Vec::new(),
    }
}

impl Inliner<'_> {
    fn graph(&mut self, graph: &mut Graph, depth: usize) -> Result<(), LoadError> {
        let nodes = std::mem::take(&mut graph.nodes);
        let mut out = Vec::with_capacity(nodes.len());
        for node in nodes {
            self.emit(graph, node, depth, &mut out)?;
        }
        for mut node in out {
            node.id = NodeId(0);
            graph.insert_node(node);
        }
        graph.reindex_names();
        Ok(())
    }

    fn emit(
        &mut self,
        graph: &mut Graph,
        mut node: Node,
        depth: usize,
        out: &mut Vec<Node>,
    ) -> Result<(), LoadError> {
        let key = (
            node.domain.as_str(),
            node.op_type.as_str(),
            node.overload.as_str(),
        );
        let Some(&f) = self.functions.get(&key) else {
            for a in node.attributes.values_mut() {
                for sub in subgraphs_mut(a) {
                    self.graph(sub, depth)?;
                }
            }
            out.push(node);
            return Ok(());
        };
        if depth >= self.max_depth {
            return Err(LoadError::invalid(format!(
                "calls of function '{}::{}' nest more than {} deep (does it call itself?)",
                f.domain, f.name, self.max_depth
            ))
            .within(|| node.describe()));
        }
        merge_opsets(&mut self.opsets, f).map_err(|e| e.within(|| node.describe()))?;
        let attrs: CallerAttributes = f
            .attribute_defaults
            .iter()
            .map(|(k, v)| (k.as_str(), v))
            .chain(node.attributes.iter().map(|(k, v)| (k.as_str(), v)))
            .collect();
        // Checked before anything is copied.
        let cost = f
            .body
            .nodes
            .iter()
            .map(|n| node_cost(n, &attrs))
            .sum::<usize>()
            + 256 * f.body.outputs.len();
        self.budget = self.budget.checked_sub(cost).ok_or_else(|| {
            LoadError::invalid(
                "inlining functions grows the graph far beyond the model's size; the model is \
                 hostile, or raise LoadOptions::max_inlined_bytes_per_byte if it is trusted",
            )
        })?;
        let body_nodes = self.expand(graph, &node, f, &attrs);
        for n in body_nodes {
            self.emit(graph, n, depth + 1, out)?;
        }
        Ok(())
    }

    /// The body of `f` for the call `call`, its values created in `graph`.
    fn expand(
        &mut self,
        graph: &mut Graph,
        call: &Node,
        f: &Function,
        attrs: &CallerAttributes,
    ) -> Vec<Node> {
        let prefix = format!("{}{}_", self.prefix, self.instances);
        self.instances += 1;
        let body = &f.body;
        // Body value -> caller value (`None`: an omitted optional input).
        let mut map: Vec<Option<Option<ValueId>>> = vec![None; body.values.len()];
        // Body name -> caller name, for subgraphs that refer to body values by name.
        let mut names: HashMap<String, String> = HashMap::new();
        for (i, &formal) in body.inputs.iter().enumerate() {
            let actual = call.inputs.get(i).copied().flatten();
            map[formal.0] = Some(actual);
            let name = actual
                .map(|a| graph.value(a).name.clone())
                .unwrap_or_default();
            names.insert(body.value(formal).name.clone(), name);
        }
        let mut passthrough = Vec::new();
        for (i, &formal) in body.outputs.iter().enumerate() {
            let Some(&actual) = call.outputs.get(i) else {
                continue;
            };
            let formal_name = body.value(formal).name.clone();
            if graph.value(actual).name.is_empty() {
                // Omitted by the caller but maybe used by name inside the body: name it (the
                // name index is rebuilt once the graph is done).
                graph.value_mut(actual).name = format!("{prefix}{formal_name}");
            }
            if let Some(Some(input)) = map[formal.0] {
                // The function returns one of its inputs unchanged.
                passthrough.push((input, actual));
                continue;
            }
            map[formal.0] = Some(Some(actual));
            names.insert(formal_name, graph.value(actual).name.clone());
        }
        let rename = |name: &str| -> String {
            match names.get(name) {
                Some(n) => n.clone(),
                None if name.is_empty() => String::new(),
                None => format!("{prefix}{name}"),
            }
        };
        let mut value = |graph: &mut Graph, v: ValueId| -> Option<ValueId> {
            if let Some(m) = map[v.0] {
                return m;
            }
            let bv = body.value(v);
            let id = graph.create_value(rename(&bv.name), bv.ty.clone());
            map[v.0] = Some(Some(id));
            Some(id)
        };
        let mut nodes = Vec::with_capacity(body.nodes.len() + passthrough.len());
        for bn in &body.nodes {
            let inputs = bn
                .inputs
                .iter()
                .map(|i| i.and_then(|v| value(graph, v)))
                .collect();
            let outputs = bn
                .outputs
                .iter()
                .map(|&o| {
                    value(graph, o).unwrap_or_else(|| graph.create_value(String::new(), None))
                })
                .collect();
            let mut n = Node::new(NodeId(0), bn.op_type.clone(), inputs, outputs);
            n.domain = bn.domain.clone();
            n.overload = bn.overload.clone();
            n.doc_string = bn.doc_string.clone();
            n.name = match (call.name.is_empty(), bn.name.is_empty()) {
                (false, _) => format!("{}/{}", call.name, bn.name),
                (true, false) => format!("{prefix}{}", bn.name),
                (true, true) => String::new(),
            };
            n.attributes = resolve_attributes(&bn.attributes, attrs, &rename);
            nodes.push(n);
        }
        for (input, actual) in passthrough {
            let mut n = Node::new(NodeId(0), "Identity", vec![Some(input)], vec![actual]);
            n.name = format!("{prefix}passthrough");
            nodes.push(n);
        }
        nodes
    }
}

/// A body node's attributes for one call: references replaced by the caller's values (or
/// the defaults; dropped when neither is given), subgraphs renamed into the caller's scope.
fn resolve_attributes(
    attributes: &BTreeMap<String, Attribute>,
    caller: &BTreeMap<&str, &Attribute>,
    rename: &dyn Fn(&str) -> String,
) -> BTreeMap<String, Attribute> {
    let mut out = BTreeMap::new();
    for (k, a) in attributes {
        let mut a = match a {
            Attribute::Ref { name, .. } => match caller.get(name.as_str()) {
                Some(v) => (*v).clone(),
                None => continue,
            },
            other => other.clone(),
        };
        for sub in subgraphs_mut(&mut a) {
            rename_subgraph(sub, caller, rename);
        }
        out.insert(k.clone(), a);
    }
    out
}

fn rename_subgraph(
    g: &mut Graph,
    caller: &BTreeMap<&str, &Attribute>,
    rename: &dyn Fn(&str) -> String,
) {
    let mut emptied = HashSet::new();
    for (i, v) in g.values.iter_mut().enumerate() {
        if !v.name.is_empty() {
            v.name = rename(&v.name);
            if v.name.is_empty() {
                emptied.insert(ValueId(i));
            }
        }
    }
    g.reindex_names();
    for n in &mut g.nodes {
        for i in &mut n.inputs {
            if i.is_some_and(|v| emptied.contains(&v)) {
                *i = None;
            }
        }
        n.attributes = resolve_attributes(&n.attributes, caller, rename);
    }
    for (id, t) in g.initializers.iter_mut() {
        t.name.clone_from(&g.values[id.0].name);
    }
}

fn merge_opsets(opsets: &mut BTreeMap<String, u64>, f: &Function) -> Result<(), LoadError> {
    for (domain, &version) in &f.body.opset_imports {
        let d = if domain == "ai.onnx" {
            ""
        } else {
            domain.as_str()
        };
        let current = opsets
            .get(d)
            .or_else(|| d.is_empty().then(|| opsets.get("ai.onnx")).flatten());
        match current.copied() {
            Some(v) if v != version => {
                return Err(LoadError::invalid(format!(
                    "function '{}::{}' imports opset '{domain}' version {version} but the \
                     graph imports version {v}; one graph cannot run two versions of a domain. \
                     Re-export the model with matching opsets, or load it with \
                     LoadOptions::without_inlining() for an execution provider that runs the \
                     function itself",
                    f.domain, f.name
                )));
            }
            Some(_) => {}
            None => {
                opsets.insert(domain.clone(), version);
            }
        }
    }
    Ok(())
}
