//! `Loop` (opsets 1..24): a for/while loop over a body graph
//! `(iteration_num, cond, carried...) -> (cond, carried..., scan_outputs...)`.
//!
//! With the trip count `M` absent the loop runs while `cond` holds; with `cond` absent it
//! runs `M` times and the body's condition output is ignored (as the spec says); with both it
//! stops at whichever ends first. Loop-carried values may be tensors, sequences or optionals
//! and may change shape between iterations; scan outputs are stacked along a new first axis.

use super::{axis, invalid, scalar_bool, scalar_i64, Body};
use crate::compile::Compiler;
use crate::error::{SessionError, SessionResult};
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::{DataType, Dim, Node, ValueType};
use std::collections::HashMap;

pub(crate) struct LoopOp {
    body: Body,
    /// Loop-carried values (N).
    carried: usize,
    /// Scan outputs (K).
    scans: usize,
    /// Node outputs (at most N + K; trailing ones may be left off).
    outputs: usize,
}

impl LoopOp {
    pub fn build(
        compiler: &Compiler<'_>,
        node: &Node,
        scope: &HashMap<String, Value>,
        names: &mut Vec<String>,
    ) -> SessionResult<LoopOp> {
        let body = Body::build(compiler, node, "body", scope, names)?;
        if node.inputs.len() < 2 {
            return Err(SessionError::invalid(format!(
                "{} needs the inputs M and cond (either may be empty)",
                node.describe()
            )));
        }
        let carried = node.inputs.len() - 2;
        if body.num_inputs() != carried + 2 {
            return Err(SessionError::invalid(format!(
                "{}: the body takes {} inputs but the loop carries {carried} values (the body needs iteration_num, cond and one input per carried value)",
                node.describe(),
                body.num_inputs()
            )));
        }
        if body.num_outputs() < carried + 1 {
            return Err(SessionError::invalid(format!(
                "{}: the body returns {} outputs, fewer than cond plus {carried} carried values",
                node.describe(),
                body.num_outputs()
            )));
        }
        let scans = body.num_outputs() - 1 - carried;
        if node.outputs.len() > carried + scans {
            return Err(SessionError::invalid(format!(
                "{} has {} outputs but the body gives {carried} carried values and {scans} scan outputs",
                node.describe(),
                node.outputs.len()
            )));
        }
        Ok(LoopOp {
            body,
            carried,
            scans,
            outputs: node.outputs.len(),
        })
    }

    pub fn run(
        &self,
        node: &str,
        inputs: &[Option<&Value>],
        implicit: &[&Value],
    ) -> SessionResult<Vec<Value>> {
        let trip_count = match inputs.first().copied().flatten() {
            Some(m) => Some(scalar_i64(node, "the trip count M", m)?),
            None => None,
        };
        let has_cond = inputs.get(1).copied().flatten().is_some();
        let mut cond = match inputs.get(1).copied().flatten() {
            Some(c) => scalar_bool(node, "the condition", c)?,
            None => true,
        };
        let mut carried: Vec<Value> = (0..self.carried)
            .map(|i| {
                inputs
                    .get(2 + i)
                    .copied()
                    .flatten()
                    .cloned()
                    .ok_or_else(|| invalid(node, format!("loop-carried input {i} is missing")))
            })
            .collect::<SessionResult<_>>()?;
        let mut scans: Vec<Vec<Tensor>> = vec![Vec::new(); self.scans];
        let mut i: i64 = 0;
        while cond && trip_count.is_none_or(|m| i < m) {
            let mut body_inputs = Vec::with_capacity(2 + self.carried);
            body_inputs.push(Value::Tensor(Tensor::scalar(i)));
            body_inputs.push(Value::Tensor(Tensor::from_bools(vec![], &[cond])));
            // A carried value declared optional in the body may come back from the previous
            // iteration as a plain value (the body's output type need not be optional).
            for (j, v) in carried.drain(..).enumerate() {
                let declared = &self
                    .body
                    .graph
                    .inputs
                    .get(2 + j)
                    .and_then(|io| io.ty.clone());
                body_inputs.push(match (declared, v) {
                    (Some(ValueType::Optional(_)), v @ Value::Optional(_)) => v,
                    (Some(ValueType::Optional(_)), v) => Value::Optional(Some(Box::new(v))),
                    (_, v) => v,
                });
            }
            let mut outs = self
                .body
                .run(body_inputs, implicit)
                .map_err(|e| e.in_subgraph(format!("{node} body, iteration {i}")))?;
            let scan_part = outs.split_off(1 + self.carried);
            carried = outs.split_off(1);
            if has_cond {
                cond = scalar_bool(node, "the body's condition output", &outs[0])?;
            }
            for (k, v) in scan_part.into_iter().enumerate() {
                match v {
                    Value::Tensor(t) => scans[k].push(t),
                    other => {
                        return Err(invalid(
                            node,
                            format!(
                                "scan output {k} must be a tensor, the body gave a {}",
                                other.kind_name()
                            ),
                        ))
                    }
                }
            }
            i += 1;
        }
        let mut out = carried;
        for (k, items) in scans.into_iter().enumerate() {
            let stacked = if items.is_empty() {
                let declared = &self.body.graph.outputs[1 + self.carried + k].ty;
                empty_stack(declared)
            } else {
                axis::stack(&items, 0)
                    .map_err(|e| invalid(node, format!("scan output {k}: {e}")))?
            };
            out.push(Value::Tensor(stacked));
        }
        out.truncate(self.outputs);
        Ok(out)
    }
}

/// The result of stacking zero iterations: shape `[0, dims...]` from the body's declared
/// output type (unknown dimensions count as 0, unknown types as float).
pub(crate) fn empty_stack(declared: &Option<ValueType>) -> Tensor {
    match declared {
        Some(ValueType::Tensor { dtype, shape }) => {
            let mut dims = vec![0];
            if let Some(shape) = shape {
                dims.extend(shape.dims().iter().map(|d| match d {
                    Dim::Static(v) => *v,
                    Dim::Symbolic(_) => 0,
                }));
            }
            Tensor::zeros(*dtype, dims)
        }
        _ => Tensor::zeros(DataType::Float32, vec![0]),
    }
}
