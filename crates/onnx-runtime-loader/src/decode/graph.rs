//! `GraphProto` -> [`Graph`]: values, initializers, nodes and subgraphs.

use super::attribute::decode_attribute;
use crate::data::{densify, sparse_from_proto, tensor::tensor_from_proto};
use crate::error::Within;
use crate::external::ExternalFiles;
use crate::proto;
use crate::types::type_from_proto;
use crate::{LoadError, LoadOptions};
use onnx_runtime_ir::{static_shape, Graph, Node, NodeId, ValueId, ValueType};
use std::cell::Cell;
use std::collections::{BTreeMap, HashSet};

/// State shared while decoding one model.
pub(crate) struct Decoder<'a> {
    pub files: &'a ExternalFiles,
    pub options: &'a LoadOptions,
    depth: Cell<usize>,
    /// What is left of `options.max_dense_sparse_bytes` for densifying sparse initializers.
    dense_budget: Cell<usize>,
}

impl<'a> Decoder<'a> {
    pub(crate) fn new(files: &'a ExternalFiles, options: &'a LoadOptions) -> Self {
        Decoder {
            files,
            options,
            depth: Cell::new(0),
            dense_budget: Cell::new(options.max_dense_sparse_bytes),
        }
    }
}

/// The names a graph defines, for its subgraphs to refer to.
pub(crate) struct Scope<'a> {
    names: HashSet<String>,
    parent: Option<&'a Scope<'a>>,
}

impl Scope<'_> {
    fn contains(&self, name: &str) -> bool {
        self.names.contains(name) || self.parent.is_some_and(|p| p.contains(name))
    }
}

struct DepthGuard<'a>(&'a Cell<usize>);

impl Drop for DepthGuard<'_> {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

pub(crate) fn describe_node(n: &proto::NodeProto, index: usize) -> String {
    if n.name().is_empty() {
        format!("node #{index} ({})", n.op_type())
    } else {
        format!("node '{}' ({})", n.name(), n.op_type())
    }
}

/// Decodes a graph. `outer` is the enclosing graph's scope for subgraphs (names not defined
/// here then refer to it), `None` for a main graph or a function body.
pub(crate) fn decode_graph(
    d: &Decoder,
    mut g: proto::GraphProto,
    outer: Option<&Scope>,
    opsets: &BTreeMap<String, u64>,
) -> Result<Graph, LoadError> {
    let depth = d.depth.get() + 1;
    if depth > d.options.max_graph_depth {
        return Err(LoadError::invalid(format!(
            "subgraphs are nested more than {} deep; the model is hostile or malformed",
            d.options.max_graph_depth
        )));
    }
    d.depth.set(depth);
    let _guard = DepthGuard(&d.depth);

    let mut graph = Graph::new();
    graph.name = g.name.take().unwrap_or_default();
    graph.doc_string = g.doc_string.take().unwrap_or_default();
    // Subgraphs use the model's opset imports; only main graphs and function bodies have any.
    if outer.is_none() {
        graph.opset_imports = opsets.clone();
    }
    graph.metadata = std::mem::take(&mut g.metadata_props)
        .into_iter()
        .map(|e| (e.key.unwrap_or_default(), e.value.unwrap_or_default()))
        .collect();

    let names: HashSet<String> = g
        .input
        .iter()
        .map(|v| v.name().to_string())
        .chain(g.initializer.iter().map(|t| t.name().to_string()))
        .chain(
            g.sparse_initializer
                .iter()
                .filter_map(|s| s.values.as_ref().map(|v| v.name().to_string())),
        )
        .chain(g.node.iter().flat_map(|n| n.output.iter().cloned()))
        .filter(|n| !n.is_empty())
        .collect();
    let scope = Scope {
        names,
        parent: outer,
    };

    for vi in std::mem::take(&mut g.input) {
        let name = vi.name().to_string();
        if !name.is_empty() && graph.value_by_name(&name).is_some() {
            return Err(LoadError::invalid(format!(
                "graph input '{name}' is listed twice; remove the duplicate"
            )));
        }
        let ty = value_type(&vi).within(|| format!("graph input '{name}'"))?;
        let id = graph.create_value(name, ty);
        graph.value_mut(id).doc_string = vi.doc_string.unwrap_or_default();
        graph.add_input(id);
    }

    for t in std::mem::take(&mut g.initializer) {
        let name = t.name().to_string();
        let tensor = tensor_from_proto(t, d.files).within(|| "initializer".into())?;
        let ty = ValueType::tensor(tensor.dtype, static_shape(tensor.shape.iter().copied()));
        let id = initializer_value(&mut graph, &name, ty)?;
        graph.add_initializer(id, tensor);
    }
    for s in std::mem::take(&mut g.sparse_initializer) {
        let name = s
            .values
            .as_ref()
            .map(|v| v.name().to_string())
            .unwrap_or_default();
        let place = || format!("sparse initializer '{name}'");
        let sparse = sparse_from_proto(s, d.files).within(place)?;
        let dense = densify(&sparse, d.dense_budget.get()).within(place)?;
        let used = dense.bytes().len() + dense.strings().map_or(0, |s| s.len() * 24);
        d.dense_budget
            .set(d.dense_budget.get().saturating_sub(used));
        let ty = ValueType::tensor(dense.dtype, static_shape(dense.shape.iter().copied()));
        let id = initializer_value(&mut graph, &name, ty)?;
        graph.add_initializer(id, dense);
        graph.sparse_initializers.insert(id, sparse);
    }

    // Node outputs first, so that inputs may refer to values produced later in the file.
    let nodes = std::mem::take(&mut g.node);
    let mut outputs = Vec::with_capacity(nodes.len());
    for (i, n) in nodes.iter().enumerate() {
        let mut ids = Vec::with_capacity(n.output.len());
        for name in &n.output {
            if !name.is_empty() && graph.value_by_name(name).is_some() {
                return Err(LoadError::invalid(format!(
                    "output '{name}' is already defined (by another node, a graph input or an \
                     initializer); every value must have exactly one producer"
                )))
                .within(|| describe_node(n, i));
            }
            ids.push(graph.create_value(name.clone(), None));
        }
        outputs.push(ids);
    }
    for (i, (mut n, outs)) in nodes.into_iter().zip(outputs).enumerate() {
        let place = describe_node(&n, i);
        let node = decode_node(d, &mut graph, &mut n, outs, &scope).within(|| place)?;
        graph.insert_node(node);
    }

    for vi in std::mem::take(&mut g.output) {
        let name = vi.name().to_string();
        let place = || format!("graph output '{name}'");
        let id = resolve(&mut graph, &name, outer).within(place)?;
        let ty = value_type(&vi).within(place)?;
        let v = graph.value_mut(id);
        if v.ty.is_none() {
            v.ty = ty;
        }
        if v.doc_string.is_empty() {
            v.doc_string = vi.doc_string.unwrap_or_default();
        }
        graph.add_output(id);
    }

    for vi in std::mem::take(&mut g.value_info) {
        let name = vi.name().to_string();
        let ty = value_type(&vi).within(|| format!("value_info '{name}'"))?;
        // An annotation of a name nothing defines is kept as a value of its own.
        let id = match graph.value_by_name(&name) {
            Some(id) if !name.is_empty() => id,
            _ => graph.create_value(name, None),
        };
        let v = graph.value_mut(id);
        if v.ty.is_none() {
            v.ty = ty;
        }
        if v.doc_string.is_empty() {
            v.doc_string = vi.doc_string.unwrap_or_default();
        }
        graph.value_info.push(id);
    }
    Ok(graph)
}

fn value_type(vi: &proto::ValueInfoProto) -> Result<Option<ValueType>, LoadError> {
    match &vi.r#type {
        Some(t) => type_from_proto(t),
        None => Ok(None),
    }
}

/// The value an initializer named `name` defines (the graph input of that name, if any).
fn initializer_value(graph: &mut Graph, name: &str, ty: ValueType) -> Result<ValueId, LoadError> {
    match graph.value_by_name(name) {
        Some(id) if !name.is_empty() => {
            if graph.initializers.contains_key(&id) {
                return Err(LoadError::invalid(format!(
                    "initializer '{name}' is defined twice; remove the duplicate"
                )));
            }
            Ok(id)
        }
        _ => Ok(graph.create_value(name, Some(ty))),
    }
}

/// The value `name` refers to: defined in this graph, or (in a subgraph) an enclosing one.
fn resolve(graph: &mut Graph, name: &str, outer: Option<&Scope>) -> Result<ValueId, LoadError> {
    if let Some(id) = graph.value_by_name(name) {
        return Ok(id);
    }
    if !name.is_empty() && outer.is_some_and(|s| s.contains(name)) {
        return Ok(graph.create_value(name, None));
    }
    Err(LoadError::invalid(format!(
        "'{name}' is not produced by any node, graph input or initializer{}; the model is \
         incomplete or not topologically valid",
        if outer.is_some() {
            " of this subgraph or an enclosing graph"
        } else {
            ""
        }
    )))
}

fn decode_node(
    d: &Decoder,
    graph: &mut Graph,
    n: &mut proto::NodeProto,
    outputs: Vec<ValueId>,
    scope: &Scope,
) -> Result<Node, LoadError> {
    if n.op_type().is_empty() {
        return Err(LoadError::invalid("node has no op_type"));
    }
    let mut inputs = Vec::with_capacity(n.input.len());
    for name in &n.input {
        if name.is_empty() {
            inputs.push(None);
        } else {
            let id = resolve(graph, name, scope.parent).within(|| format!("input '{name}'"))?;
            inputs.push(Some(id));
        }
    }
    let mut node = Node::new(
        NodeId(0),
        n.op_type.take().unwrap_or_default(),
        inputs,
        outputs,
    );
    node.name = n.name.take().unwrap_or_default();
    node.domain = n.domain.take().unwrap_or_default();
    node.overload = n.overload.take().unwrap_or_default();
    node.doc_string = n.doc_string.take().unwrap_or_default();
    for a in std::mem::take(&mut n.attribute) {
        let name = a.name().to_string();
        if name.is_empty() {
            return Err(LoadError::invalid("an attribute has no name"));
        }
        if node.attributes.contains_key(&name) {
            return Err(LoadError::invalid(format!(
                "attribute '{name}' is given twice; remove the duplicate"
            )));
        }
        let value = decode_attribute(d, a, Some(scope)).within(|| format!("attribute '{name}'"))?;
        node.attributes.insert(name, value);
    }
    Ok(node)
}
