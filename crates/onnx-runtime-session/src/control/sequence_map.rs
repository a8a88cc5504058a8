//! `SequenceMap` (opset 17): runs `body` once per element of the input sequence. Body input 0
//! is the element; each further body input is the matching additional input, indexed the same
//! way when it is a sequence (of the same length) and passed whole when it is a tensor. Each
//! body output becomes one output sequence.

use super::{body_graph, invalid, Body};
use crate::compile::Compiler;
use crate::error::{SessionError, SessionResult};
use onnx_runtime_ep_cpu::Value;
use onnx_runtime_ir::{DataType, Node, ValueType};
use std::collections::HashMap;

pub(crate) struct SequenceMapOp {
    body: Body,
    /// Element type of each output sequence as the body declares it (for empty inputs).
    out_dtypes: Vec<Option<DataType>>,
}

impl SequenceMapOp {
    pub fn build(
        compiler: &Compiler<'_>,
        node: &Node,
        scope: &HashMap<String, Value>,
        names: &mut Vec<String>,
    ) -> SessionResult<SequenceMapOp> {
        let graph = body_graph(node, "body")?;
        let out_dtypes = graph
            .outputs
            .iter()
            .map(|&v| match &graph.value(v).ty {
                Some(ValueType::Tensor { dtype, .. }) => Some(*dtype),
                _ => None,
            })
            .collect();
        let body = Body::build(compiler, node, "body", scope, names)?;
        let describe = node.describe();
        if body.num_inputs() != node.inputs.len() {
            return Err(SessionError::invalid(format!(
                "{describe}: body takes {} inputs but the node has {} (the sequence plus each additional input)",
                body.num_inputs(),
                node.inputs.len()
            )));
        }
        if body.num_outputs() != node.outputs.len() {
            return Err(SessionError::invalid(format!(
                "{describe}: body has {} outputs but the node has {}",
                body.num_outputs(),
                node.outputs.len()
            )));
        }
        Ok(SequenceMapOp { body, out_dtypes })
    }

    pub fn run(
        &self,
        node: &str,
        inputs: &[Option<&Value>],
        implicit: &[&Value],
    ) -> SessionResult<Vec<Value>> {
        let len = match inputs.first().copied().flatten() {
            Some(Value::Sequence { items, .. }) => items.len(),
            Some(other) => {
                return Err(invalid(
                    node,
                    format!("input 0 must be a sequence, got a {}", other.kind_name()),
                ))
            }
            None => return Err(invalid(node, "the input sequence is missing")),
        };
        for (i, v) in inputs.iter().enumerate().skip(1) {
            match v {
                Some(Value::Sequence { items, .. }) if items.len() != len => {
                    return Err(invalid(
                        node,
                        format!(
                            "additional input {i} is a sequence of {} elements; the input sequence has {len}",
                            items.len()
                        ),
                    ))
                }
                Some(Value::Sequence { .. }) | Some(Value::Tensor(_)) => {}
                Some(other) => {
                    return Err(invalid(
                        node,
                        format!(
                            "additional input {i} must be a tensor or a sequence, got a {}",
                            other.kind_name()
                        ),
                    ))
                }
                None => return Err(invalid(node, format!("input {i} is missing"))),
            }
        }
        let mut outs: Vec<Vec<onnx_runtime_ep_cpu::Tensor>> =
            vec![Vec::with_capacity(len); self.body.num_outputs()];
        for step in 0..len {
            let args = inputs
                .iter()
                .map(|v| match v {
                    Some(Value::Sequence { items, .. }) => Value::Tensor(items[step].clone()),
                    Some(other) => (*other).clone(),
                    None => unreachable!("checked above"),
                })
                .collect();
            let results = self
                .body
                .run(args, implicit)
                .map_err(|e| e.in_subgraph(format!("{node} body, element {step}")))?;
            for (o, (acc, v)) in outs.iter_mut().zip(results).enumerate() {
                match v {
                    Value::Tensor(t) => acc.push(t),
                    other => {
                        return Err(invalid(
                            node,
                            format!(
                                "body output {o} must be a tensor, got a {}",
                                other.kind_name()
                            ),
                        ))
                    }
                }
            }
        }
        outs.into_iter()
            .zip(&self.out_dtypes)
            .enumerate()
            .map(|(o, (items, declared))| {
                let dtype = match (items.first(), declared) {
                    (Some(t), _) => t.dtype(),
                    (None, Some(d)) => *d,
                    (None, None) => {
                        return Err(invalid(
                            node,
                            format!("the input sequence is empty and body output {o} declares no tensor type, so output sequence {o} has no element type"),
                        ))
                    }
                };
                if let Some(bad) = items.iter().find(|t| t.dtype() != dtype) {
                    return Err(invalid(
                        node,
                        format!(
                            "body output {o} is {dtype} for one element and {} for another",
                            bad.dtype()
                        ),
                    ));
                }
                Ok(Value::Sequence { dtype, items })
            })
            .collect()
    }
}
