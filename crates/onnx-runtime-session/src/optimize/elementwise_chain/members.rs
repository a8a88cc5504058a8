//! The member candidates of a chain: which element-wise node computes what ([`elem`]: the
//! unary math ops and activations, broadcasting binary arithmetic, Max/Min/Sum/Mean, PRelu,
//! Clip with constant bounds, the com.microsoft GELUs), the one-element constants that can
//! become literals ([`small_const`]), and how a member becomes program instructions
//! ([`Elem::emit`]).

use super::MS;
use crate::optimize::rewriter::{is_op, Rewriter};
use onnx_runtime_ep_cpu::ops::math::fused_elementwise::{Instr, Op, Operand, Program};
use onnx_runtime_ep_cpu::Tensor;
use onnx_runtime_ir::{Attribute, Node, NodeId, ValueId};

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
pub(super) struct Elem {
    pub(super) inputs: Vec<ValueId>,
    pub(super) same: Vec<bool>,
    kind: Kind,
    pub(super) out: ValueId,
}

impl Elem {
    pub(super) fn instrs(&self) -> usize {
        match self.kind {
            Kind::Unary(..) => 1,
            Kind::Fold(_) => self.inputs.len() - 1,
            Kind::Mean => self.inputs.len(),
            Kind::BiasThen(_) => 2,
        }
    }

    /// Appends the instructions to `prog`; returns the operand holding the result.
    pub(super) fn emit(&self, ops: &[Operand], prog: &mut Program) -> Operand {
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
pub(super) fn small_const(rw: &Rewriter<'_>, v: ValueId) -> Option<(Vec<usize>, f64)> {
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
pub(super) fn elem(rw: &Rewriter<'_>, id: NodeId) -> Option<Elem> {
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
