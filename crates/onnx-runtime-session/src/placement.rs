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
use onnx_runtime_ir::{Attribute, Node};

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
}
