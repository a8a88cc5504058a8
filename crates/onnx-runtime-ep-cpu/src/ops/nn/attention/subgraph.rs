//! A small sequential executor for single-input, single-output modifier subgraphs (such as
//! FlexAttention's `score_mod` / `prob_mod`), running each node with the CPU registry.
//! Nodes must be in topological order (as ONNX requires); initializers are constants.

use crate::kernel::{BuildContext, CpuKernel};
use crate::ops::nn::common::invalid;
use crate::{Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{Graph, ValueId};
use std::collections::HashMap;

/// One node to run: its input and output value ids and its kernel.
type Step = (Vec<Option<ValueId>>, Vec<ValueId>, Box<dyn CpuKernel>);

pub struct Subgraph {
    what: String,
    input: ValueId,
    output: ValueId,
    constants: Vec<(ValueId, Value)>,
    steps: Vec<Step>,
}

impl Subgraph {
    /// Builds kernels for every node of `g`; `default_opset` is used for the default domain
    /// when the subgraph declares no opset imports.
    pub fn build(node: &str, what: &str, g: &Graph, default_opset: u64) -> Result<Self, EpError> {
        let what = format!("{node} {what}");
        if g.inputs.len() != 1 || g.outputs.len() != 1 {
            return Err(invalid(
                &what,
                format!(
                    "subgraph must have exactly one input and one output, has {} and {}",
                    g.inputs.len(),
                    g.outputs.len()
                ),
            ));
        }
        let mut constants = Vec::new();
        for (&id, data) in &g.initializers {
            let t = Tensor::from_tensor_data(data).map_err(|e| invalid(&what, e))?;
            constants.push((id, Value::Tensor(t)));
        }
        let mut steps = Vec::with_capacity(g.nodes.len());
        for n in &g.nodes {
            let domain = n.normalized_domain();
            let opset =
                g.opset(domain)
                    .unwrap_or(if domain.is_empty() { default_opset } else { 1 });
            let (_, factory) = crate::registry()
                .lookup(domain, &n.op_type, opset)
                .ok_or_else(|| {
                    invalid(
                        &what,
                        format!(
                            "subgraph node {} ({domain}:{} opset {opset}) has no CPU kernel",
                            n.describe(),
                            n.op_type
                        ),
                    )
                })?;
            let kernel = factory(&BuildContext::new(n, opset))?;
            steps.push((n.inputs.clone(), n.outputs.clone(), kernel));
        }
        Ok(Subgraph {
            what,
            input: g.inputs[0],
            output: g.outputs[0],
            constants,
            steps,
        })
    }

    /// Runs the subgraph on `x` and returns its one output tensor.
    pub fn run(&self, x: Tensor) -> Result<Tensor, EpError> {
        let mut env: HashMap<ValueId, Value> = self.constants.iter().cloned().collect();
        env.insert(self.input, Value::Tensor(x));
        for (ins, outs, kernel) in &self.steps {
            let args: Vec<Option<&Value>> = ins
                .iter()
                .map(|i| match i {
                    None => Ok(None),
                    Some(id) => env.get(id).map(Some).ok_or_else(|| {
                        invalid(
                            &self.what,
                            format!("subgraph value {id:?} is used before it is produced (outer-scope values are not supported)"),
                        )
                    }),
                })
                .collect::<Result<_, _>>()?;
            let results = kernel.run(&args)?;
            for (id, v) in outs.iter().zip(results) {
                env.insert(*id, v);
            }
        }
        match env.remove(&self.output) {
            Some(Value::Tensor(t)) => Ok(t),
            _ => Err(invalid(
                &self.what,
                "subgraph did not produce a tensor output",
            )),
        }
    }
}
