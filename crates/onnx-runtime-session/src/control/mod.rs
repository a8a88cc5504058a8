//! Control-flow ops (`If`, `Loop`, `Scan`, `SequenceMap`): the session runs them itself because they
//! execute subgraphs. A subgraph reads values of enclosing graphs by name; the compiler turns
//! those reads into implicit inputs of the control-flow node, so liveness in the enclosing
//! graph keeps them alive until the node has run.

mod axis;
mod if_op;
mod loop_op;
mod scan;
mod sequence_map;

use crate::compile::{CompiledGraph, Compiler};
use crate::error::{SessionError, SessionResult};
use crate::exec::run_graph;
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::{Attribute, Graph, Node};
use std::borrow::Cow;
use std::collections::HashMap;

pub(crate) use if_op::IfOp;
pub(crate) use loop_op::LoopOp;
pub(crate) use scan::ScanOp;
pub(crate) use sequence_map::SequenceMapOp;

pub(crate) enum ControlOp {
    If(IfOp),
    Loop(LoopOp),
    Scan(ScanOp),
    SequenceMap(SequenceMapOp),
}

impl ControlOp {
    /// Runs the op; `implicit` holds the enclosing-scope values its bodies read, in the order
    /// [`build`] returned their names.
    pub fn run(
        &self,
        node: &str,
        inputs: &[Option<&Value>],
        implicit: &[&Value],
    ) -> SessionResult<Vec<Value>> {
        match self {
            ControlOp::If(op) => op.run(node, inputs, implicit),
            ControlOp::Loop(op) => op.run(node, inputs, implicit),
            ControlOp::Scan(op) => op.run(node, inputs, implicit),
            ControlOp::SequenceMap(op) => op.run(node, inputs, implicit),
        }
    }
}

/// Builds the control-flow op of `node`. Returns it with the names its bodies read from
/// enclosing scopes (the node's implicit inputs).
pub(crate) fn build(
    compiler: &Compiler<'_>,
    node: &Node,
    opset: u64,
    scope: &HashMap<String, Value>,
) -> SessionResult<(ControlOp, Vec<String>)> {
    let mut names = Vec::new();
    let op = match node.op_type.as_str() {
        "If" => ControlOp::If(IfOp::build(compiler, node, scope, &mut names)?),
        "Loop" => ControlOp::Loop(LoopOp::build(compiler, node, scope, &mut names)?),
        "Scan" => ControlOp::Scan(ScanOp::build(compiler, node, opset, scope, &mut names)?),
        "SequenceMap" => {
            ControlOp::SequenceMap(SequenceMapOp::build(compiler, node, scope, &mut names)?)
        }
        other => {
            return Err(SessionError::invalid(format!(
                "{other} is not a control-flow op"
            )))
        }
    };
    Ok((op, names))
}

/// A compiled body and, for each of its captures, the index of the value in the node's
/// implicit inputs.
pub(crate) struct Body {
    pub graph: CompiledGraph,
    capture_index: Vec<usize>,
}

impl Body {
    /// Compiles the graph attribute `attr` of `node`, adding the names it captures to `names`.
    pub fn build(
        compiler: &Compiler<'_>,
        node: &Node,
        attr: &str,
        scope: &HashMap<String, Value>,
        names: &mut Vec<String>,
    ) -> SessionResult<Body> {
        let graph = body_graph(node, attr)?;
        let graph = compiler
            .compile(graph, scope)
            .map_err(|e| e.in_subgraph(format!("{} attribute '{attr}'", node.describe())))?;
        let capture_index = graph
            .captures
            .iter()
            .map(|(name, _)| match names.iter().position(|n| n == name) {
                Some(i) => i,
                None => {
                    names.push(name.clone());
                    names.len() - 1
                }
            })
            .collect();
        Ok(Body {
            graph,
            capture_index,
        })
    }

    pub fn num_inputs(&self) -> usize {
        self.graph.inputs.len()
    }

    pub fn num_outputs(&self) -> usize {
        self.graph.outputs.len()
    }

    /// Runs the body on `inputs` (one per body input) with the node's implicit inputs.
    pub fn run(&self, inputs: Vec<Value>, implicit: &[&Value]) -> SessionResult<Vec<Value>> {
        let captures: Vec<&Value> = self.capture_index.iter().map(|&i| implicit[i]).collect();
        let inputs = inputs.into_iter().map(|v| Some(Cow::Owned(v))).collect();
        run_graph(&self.graph, inputs, &captures, None, false)
    }
}

fn body_graph<'n>(node: &'n Node, attr: &str) -> SessionResult<&'n Graph> {
    match node.attribute(attr) {
        Some(Attribute::Graph(g)) => Ok(g),
        Some(other) => Err(EpError::invalid_attribute(
            node,
            attr,
            format!("must be a graph, got {:?}", other.kind()),
        )
        .into()),
        None => Err(EpError::invalid_attribute(node, attr, "is required").into()),
    }
}

/// The single element of a bool (or numeric) scalar-like tensor as a bool.
pub(crate) fn scalar_bool(node: &str, what: &str, v: &Value) -> SessionResult<bool> {
    let t = as_tensor(node, what, v)?;
    if t.numel() != 1 {
        return Err(invalid(
            node,
            format!("{what} must have one element, got shape {:?}", t.shape()),
        ));
    }
    let x = t
        .to_f64_vec()
        .ok_or_else(|| invalid(node, format!("{what} must be bool, got {}", t.dtype())))?;
    Ok(x[0] != 0.0)
}

/// The single element of an integer tensor.
pub(crate) fn scalar_i64(node: &str, what: &str, v: &Value) -> SessionResult<i64> {
    let t = as_tensor(node, what, v)?;
    if t.numel() != 1 {
        return Err(invalid(
            node,
            format!("{what} must have one element, got shape {:?}", t.shape()),
        ));
    }
    let x = t.to_i64_vec().ok_or_else(|| {
        invalid(
            node,
            format!("{what} must be an integer tensor, got {}", t.dtype()),
        )
    })?;
    Ok(x[0])
}

pub(crate) fn as_tensor<'v>(node: &str, what: &str, v: &'v Value) -> SessionResult<&'v Tensor> {
    v.as_tensor().ok_or_else(|| {
        invalid(
            node,
            format!("{what} must be a tensor, got a {}", v.kind_name()),
        )
    })
}

pub(crate) fn invalid(node: &str, message: impl Into<String>) -> SessionError {
    SessionError::Kernel(EpError::InvalidInput {
        node: node.to_string(),
        message: message.into(),
    })
}
