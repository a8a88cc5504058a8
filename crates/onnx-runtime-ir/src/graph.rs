//! Graphs, nodes and the values that connect them.

use crate::{Attribute, DataType, Shape, TensorData, ValueType};
use std::collections::{BTreeMap, HashMap};

/// Index of a value in its graph's value table.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ValueId(pub usize);

/// Index of a node in its graph's node list.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct NodeId(pub usize);

/// A named edge of the graph: a graph input, an initializer, or a node output.
#[derive(Clone, Debug, PartialEq)]
pub struct Value {
    pub name: String,
    /// The declared type, if the model gave one.
    pub ty: Option<ValueType>,
    pub doc_string: String,
}

impl Value {
    /// The element type, for tensor values with a known type.
    pub fn dtype(&self) -> Option<DataType> {
        match &self.ty {
            Some(ValueType::Tensor { dtype, .. }) | Some(ValueType::SparseTensor { dtype, .. }) => {
                Some(*dtype)
            }
            _ => None,
        }
    }

    /// The declared shape, for tensor values with a known rank.
    pub fn shape(&self) -> Option<&Shape> {
        match &self.ty {
            Some(ValueType::Tensor { shape, .. }) | Some(ValueType::SparseTensor { shape, .. }) => {
                shape.as_ref()
            }
            _ => None,
        }
    }
}

/// One operator application.
#[derive(Clone, Debug, PartialEq)]
pub struct Node {
    pub id: NodeId,
    pub name: String,
    pub op_type: String,
    /// The operator set domain; empty (or `ai.onnx`) for the standard operators.
    pub domain: String,
    /// Inputs by position; `None` is an omitted optional input.
    pub inputs: Vec<Option<ValueId>>,
    /// Outputs by position. An omitted optional output is a value with an empty name.
    pub outputs: Vec<ValueId>,
    pub attributes: BTreeMap<String, Attribute>,
    pub doc_string: String,
    /// Overload name of a model-local function (`NodeProto.overload`).
    pub overload: String,
}

impl Node {
    pub fn new(
        id: NodeId,
        op_type: impl Into<String>,
        inputs: Vec<Option<ValueId>>,
        outputs: Vec<ValueId>,
    ) -> Self {
        Node {
            id,
            name: String::new(),
            op_type: op_type.into(),
            domain: String::new(),
            inputs,
            outputs,
            attributes: BTreeMap::new(),
            doc_string: String::new(),
            overload: String::new(),
        }
    }

    pub fn with_domain(mut self, domain: impl Into<String>) -> Self {
        self.domain = domain.into();
        self
    }

    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = name.into();
        self
    }

    pub fn attribute(&self, name: &str) -> Option<&Attribute> {
        self.attributes.get(name)
    }

    /// The domain with the standard aliases folded: `""` for `ai.onnx`.
    pub fn normalized_domain(&self) -> &str {
        if self.domain == "ai.onnx" {
            ""
        } else {
            &self.domain
        }
    }

    /// A short description for error messages: `Op 'name'` or `Op #id`.
    pub fn describe(&self) -> String {
        if self.name.is_empty() {
            format!("{} node #{}", self.op_type, self.id.0)
        } else {
            format!("{} node '{}'", self.op_type, self.name)
        }
    }
}

/// A computation graph: values, nodes in topological (file) order, inputs, outputs,
/// initializers and the opsets it was written against. Subgraphs of If/Loop/Scan live in
/// node attributes as graphs of their own that refer to outer values by name.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Graph {
    pub name: String,
    pub doc_string: String,
    pub values: Vec<Value>,
    pub nodes: Vec<Node>,
    pub inputs: Vec<ValueId>,
    pub outputs: Vec<ValueId>,
    /// Constant tensors by value, in file order.
    pub initializers: BTreeMap<ValueId, TensorData>,
    /// Sparse initializers as ONNX stores them (values, indices, dims).
    pub sparse_initializers: BTreeMap<ValueId, crate::SparseTensorData>,
    /// Values the model annotated with `value_info` (intermediate type hints), in file order.
    pub value_info: Vec<ValueId>,
    /// Operator set versions by domain (`""` is the default ONNX domain).
    pub opset_imports: BTreeMap<String, u64>,
    /// Quantization annotations and other metadata kept for round-trips.
    pub metadata: Vec<(String, String)>,
    by_name: HashMap<String, ValueId>,
}

impl Graph {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a value of any type. Names need not be unique only when empty (omitted outputs).
    pub fn create_value(&mut self, name: impl Into<String>, ty: Option<ValueType>) -> ValueId {
        let name = name.into();
        let id = ValueId(self.values.len());
        if !name.is_empty() {
            self.by_name.insert(name.clone(), id);
        }
        self.values.push(Value {
            name,
            ty,
            doc_string: String::new(),
        });
        id
    }

    /// Adds a tensor value of `dtype` and `shape`.
    pub fn create_named_value(
        &mut self,
        name: impl Into<String>,
        dtype: DataType,
        shape: Shape,
    ) -> ValueId {
        self.create_value(name, Some(ValueType::tensor(dtype, shape)))
    }

    pub fn add_input(&mut self, value: ValueId) {
        self.inputs.push(value);
    }

    pub fn add_output(&mut self, value: ValueId) {
        self.outputs.push(value);
    }

    pub fn add_initializer(&mut self, value: ValueId, tensor: TensorData) {
        self.initializers.insert(value, tensor);
    }

    /// Appends `node`, assigning it the next id, which is returned.
    pub fn insert_node(&mut self, mut node: Node) -> NodeId {
        let id = NodeId(self.nodes.len());
        node.id = id;
        self.nodes.push(node);
        id
    }

    /// The node with `id`. Panics if `id` did not come from this graph.
    pub fn node(&self, id: NodeId) -> &Node {
        &self.nodes[id.0]
    }

    pub fn node_mut(&mut self, id: NodeId) -> &mut Node {
        &mut self.nodes[id.0]
    }

    pub fn get_node(&self, id: NodeId) -> Option<&Node> {
        self.nodes.get(id.0)
    }

    /// The value with `id`. Panics if `id` did not come from this graph.
    pub fn value(&self, id: ValueId) -> &Value {
        &self.values[id.0]
    }

    pub fn value_mut(&mut self, id: ValueId) -> &mut Value {
        &mut self.values[id.0]
    }

    pub fn value_by_name(&self, name: &str) -> Option<ValueId> {
        self.by_name.get(name).copied()
    }

    pub fn initializer(&self, id: ValueId) -> Option<&TensorData> {
        self.initializers.get(&id)
    }

    /// The version of `domain` this graph imports (`""` and `ai.onnx` are the same domain).
    pub fn opset(&self, domain: &str) -> Option<u64> {
        let d = if domain == "ai.onnx" { "" } else { domain };
        self.opset_imports
            .get(d)
            .or_else(|| {
                if d.is_empty() {
                    self.opset_imports.get("ai.onnx")
                } else {
                    None
                }
            })
            .copied()
    }

    /// Rebuilds the name index after values were edited in place.
    pub fn reindex_names(&mut self) {
        self.by_name = self
            .values
            .iter()
            .enumerate()
            .filter(|(_, v)| !v.name.is_empty())
            .map(|(i, v)| (v.name.clone(), ValueId(i)))
            .collect();
    }

    /// For each value, the nodes that consume it (in node order).
    pub fn consumers(&self) -> Vec<Vec<NodeId>> {
        let mut out = vec![Vec::new(); self.values.len()];
        for node in &self.nodes {
            for v in node.inputs.iter().flatten() {
                if !out[v.0].contains(&node.id) {
                    out[v.0].push(node.id);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::static_shape;

    #[test]
    fn build_graph() {
        let mut g = Graph::new();
        g.opset_imports.insert(String::new(), 13);
        let a = g.create_named_value("a", DataType::Float32, static_shape([2]));
        let b = g.create_named_value("b", DataType::Float32, static_shape([2]));
        g.add_input(a);
        let n = g.insert_node(Node::new(NodeId(7), "Relu", vec![Some(a)], vec![b]));
        g.add_output(b);
        assert_eq!(n, NodeId(0));
        assert_eq!(g.node(n).id, n);
        assert_eq!(g.value_by_name("b"), Some(b));
        assert_eq!(g.opset("ai.onnx"), Some(13));
        assert_eq!(g.consumers()[a.0], vec![n]);
    }
}
