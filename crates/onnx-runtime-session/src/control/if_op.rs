//! `If` (opsets 1..24): runs `then_branch` or `else_branch` on a single-element bool.

use super::{scalar_bool, Body};
use crate::compile::Compiler;
use crate::error::{SessionError, SessionResult};
use onnx_runtime_ep_cpu::Value;
use onnx_runtime_ir::Node;
use std::collections::HashMap;

pub(crate) struct IfOp {
    then_branch: Body,
    else_branch: Body,
}

impl IfOp {
    pub fn build(
        compiler: &Compiler<'_>,
        node: &Node,
        scope: &HashMap<String, Value>,
        names: &mut Vec<String>,
    ) -> SessionResult<IfOp> {
        let then_branch = Body::build(compiler, node, "then_branch", scope, names)?;
        let else_branch = Body::build(compiler, node, "else_branch", scope, names)?;
        for (attr, b) in [("then_branch", &then_branch), ("else_branch", &else_branch)] {
            if b.num_inputs() != 0 {
                return Err(SessionError::invalid(format!(
                    "{}: {attr} must take no inputs, it declares {}",
                    node.describe(),
                    b.num_inputs()
                )));
            }
            if b.num_outputs() != node.outputs.len() {
                return Err(SessionError::invalid(format!(
                    "{}: {attr} has {} outputs but the node has {}",
                    node.describe(),
                    b.num_outputs(),
                    node.outputs.len()
                )));
            }
        }
        Ok(IfOp {
            then_branch,
            else_branch,
        })
    }

    pub fn run(
        &self,
        node: &str,
        inputs: &[Option<&Value>],
        implicit: &[&Value],
    ) -> SessionResult<Vec<Value>> {
        let cond = inputs
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| super::invalid(node, "the condition input is missing"))?;
        let (which, body) = if scalar_bool(node, "the condition", cond)? {
            ("then_branch", &self.then_branch)
        } else {
            ("else_branch", &self.else_branch)
        };
        body.run(Vec::new(), implicit)
            .map_err(|e| e.in_subgraph(format!("{node} {which}")))
    }
}
