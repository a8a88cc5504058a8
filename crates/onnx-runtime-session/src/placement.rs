//! Shape arithmetic in a device session stays on the host.
//!
//! `Shape` and `Size` read only a tensor's metadata, so a session with an accelerator answers
//! them itself from the tensor wherever it lives ([`MetaOp`]), without copying the tensor to the
//! host. The small integer subgraphs that turn those shapes into Reshape's shape, Slice's
//! starts or Expand's shape ([`is_shape_math`] nodes whose inputs are all shapes or
//! constants) run on the CPU, and the device kernels that read such values on the host get them
//! in host memory ([`onnx_runtime_ep_api::Kernel::host_inputs`]): a device step never waits for
//! the device to learn a shape.

use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::{Attribute, Graph, Node, NodeId};

/// An op the session answers from a tensor's metadata.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum MetaOp {
    /// `Shape` with its `start` / `end` attributes (opset 15).
    Shape {
        start: i64,
        end: Option<i64>,
    },
    Size,
}

impl MetaOp {
    /// The metadata op for `node`, if it is ONNX `Shape` or `Size`.
    pub fn of(node: &Node) -> Option<MetaOp> {
        if !node.normalized_domain().is_empty() || node.inputs.len() != 1 {
            return None;
        }
        let int = |name: &str| match node.attribute(name) {
            Some(Attribute::Int(v)) => Some(*v),
            _ => None,
        };
        match node.op_type.as_str() {
            "Shape" => Some(MetaOp::Shape {
                start: int("start").unwrap_or(0),
                end: int("end"),
            }),
            "Size" => Some(MetaOp::Size),
            _ => None,
        }
    }

    /// The op's output for a tensor of shape `shape`.
    pub fn eval(&self, shape: &[usize]) -> Value {
        match self {
            MetaOp::Size => Value::Tensor(Tensor::scalar(shape.iter().product::<usize>() as i64)),
            MetaOp::Shape { start, end } => {
                let rank = shape.len() as i64;
                let clamp = |v: i64| (if v < 0 { v + rank } else { v }).clamp(0, rank) as usize;
                let (s, e) = (clamp(*start), clamp(end.unwrap_or(rank)));
                let dims: Vec<i64> = shape[s..e.max(s)].iter().map(|&d| d as i64).collect();
                Value::Tensor(Tensor::from_vec(vec![dims.len()], dims))
            }
        }
    }
}

/// ONNX ops that shape arithmetic is written with. A node of these whose inputs are all
/// shapes (or values computed from shapes) and constants runs on the host in a device session.
/// Ops that make tensors as large as the shape they read (ConstantOfShape, Expand, Tile,
/// Range) are not among them: they run on the device and read the shape on the host.
pub(crate) fn is_shape_math(node: &Node) -> bool {
    const OPS: &[&str] = &[
        "Abs",
        "Add",
        "And",
        "Cast",
        "Ceil",
        "Clip",
        "Concat",
        "Div",
        "Equal",
        "Flatten",
        "Floor",
        "Gather",
        "Greater",
        "GreaterOrEqual",
        "Identity",
        "Less",
        "LessOrEqual",
        "Max",
        "Min",
        "Mod",
        "Mul",
        "Neg",
        "Not",
        "Or",
        "Pow",
        "ReduceMax",
        "ReduceMin",
        "ReduceProd",
        "ReduceSum",
        "Reshape",
        "Sign",
        "Slice",
        "Sqrt",
        "Squeeze",
        "Sub",
        "Unsqueeze",
        "Where",
    ];
    node.normalized_domain().is_empty() && OPS.contains(&node.op_type.as_str())
}

/// Whether input `position` of `node` carries a shape, axes, counts or similar small integer
/// parameters that its kernel reads on the host (Reshape's shape, Expand's shape, Slice's
/// starts, ...), as opposed to tensor data.
fn is_shape_position(node: &Node, position: usize) -> bool {
    if !node.normalized_domain().is_empty() {
        return false;
    }
    let op = node.op_type.as_str();
    match op {
        "Reshape" | "Expand" | "Tile" | "Unsqueeze" | "Squeeze" | "TopK" | "Split" | "OneHot"
        | "Upsample" | "CenterCropPad" | "Trilu" | "CumSum" => position == 1,
        "ConstantOfShape" => position == 0,
        "Range" => true,
        "Slice" | "Resize" | "Col2Im" => position >= 1,
        "Pad" => position == 1 || position == 3,
        _ => op.starts_with("Reduce") && position == 1,
    }
}

/// Ops whose output may stay on the host in a device session when every consumer reads it as
/// a shape: the shape arithmetic of [`is_shape_math`], and the ops that make a tensor as
/// large as the (small) shape they read, such as the `ConstantOfShape(Shape(shape))` an
/// exporter writes to resolve `expand(-1, ...)`.
pub(crate) fn makes_shape_values(node: &Node) -> bool {
    is_shape_math(node)
        || (node.normalized_domain().is_empty()
            && matches!(node.op_type.as_str(), "ConstantOfShape" | "Range"))
}

/// For each value of `graph`, whether everything that reads it reads it as a shape: at a
/// shape position of its consumer ([`is_shape_position`]), or through a node of
/// [`makes_shape_values`] whose outputs are all such values. Graph outputs and values without
/// consumers (read by a subgraph, or by nothing) are not. `order` is a topological order.
pub(crate) fn shape_sinks(graph: &Graph, order: &[NodeId]) -> Vec<bool> {
    let consumers = graph.consumers();
    let mut sink = vec![false; graph.values.len()];
    let outputs: std::collections::BTreeSet<usize> = graph.outputs.iter().map(|v| v.0).collect();
    for &nid in order.iter().rev() {
        for &o in &graph.node(nid).outputs {
            if outputs.contains(&o.0) || consumers[o.0].is_empty() {
                continue;
            }
            sink[o.0] = consumers[o.0].iter().all(|&c| {
                let node = graph.node(c);
                let through = makes_shape_values(node) && node.outputs.iter().all(|v| sink[v.0]);
                node.inputs
                    .iter()
                    .enumerate()
                    .filter(|(_, v)| v.is_some_and(|v| v == o))
                    .all(|(p, _)| through || is_shape_position(node, p))
            });
        }
    }
    sink
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ints(v: &Value) -> Vec<i64> {
        v.as_tensor().unwrap().to_i64_vec().unwrap()
    }

    #[test]
    fn shape_start_and_end_clamp_like_the_spec() {
        let shape = [2usize, 3, 4, 5];
        let shape_of = |start, end| ints(&MetaOp::Shape { start, end }.eval(&shape));
        assert_eq!(shape_of(0, None), vec![2, 3, 4, 5]);
        assert_eq!(shape_of(1, Some(3)), vec![3, 4]);
        assert_eq!(shape_of(-1, None), vec![5]);
        assert_eq!(shape_of(-10, Some(10)), vec![2, 3, 4, 5]);
        assert_eq!(shape_of(3, Some(1)), Vec::<i64>::new());
        assert_eq!(ints(&MetaOp::Size.eval(&shape)), vec![120]);
        assert_eq!(ints(&MetaOp::Size.eval(&[])), vec![1]);
    }

    /// The exporter's `expand(-1, ...)` pattern: Shape -> ConstantOfShape -> Mul -> Equal ->
    /// Where -> Expand's shape. Every value on the way is a shape sink; the data is not.
    #[test]
    fn expand_shape_built_with_constant_of_shape_is_a_shape_sink() {
        use onnx_runtime_ir::Node;
        let mut g = Graph::new();
        let x = g.create_value("x", None);
        let shape = g.create_value("shape", None);
        let shape_len = g.create_value("shape_len", None);
        let ones = g.create_value("ones", None);
        let minus = g.create_value("minus", None);
        let neg = g.create_value("neg", None);
        let eq = g.create_value("eq", None);
        let fixed = g.create_value("fixed", None);
        let y = g.create_value("y", None);
        g.add_input(x);
        g.add_input(shape);
        g.add_initializer(
            minus,
            onnx_runtime_ir::TensorData::from_bytes(
                onnx_runtime_ir::DataType::Int64,
                vec![],
                (-1i64).to_le_bytes().to_vec(),
            ),
        );
        let nodes = [
            ("Shape", vec![shape], shape_len),
            ("ConstantOfShape", vec![shape_len], ones),
            ("Mul", vec![ones, minus], neg),
            ("Equal", vec![shape, neg], eq),
            ("Where", vec![eq, ones, shape], fixed),
            ("Expand", vec![x, fixed], y),
        ];
        for (op, inputs, out) in nodes {
            let inputs = inputs.into_iter().map(Some).collect();
            g.insert_node(Node::new(NodeId(0), op, inputs, vec![out]));
        }
        g.add_output(y);
        let order: Vec<NodeId> = g.nodes.iter().map(|n| n.id).collect();
        let sinks = shape_sinks(&g, &order);
        for v in [shape_len, ones, neg, eq, fixed] {
            assert!(sinks[v.0], "{} should be a shape sink", g.value(v).name);
        }
        assert!(!sinks[y.0], "a graph output is not a shape sink");
        assert!(!sinks[x.0], "Expand's data input is not a shape sink");
    }
}
