//! `Scan`: iterates a body over slices of its scan inputs, carrying state.
//!
//! Opset 8 has a batch axis 0, the scan axis 1, an optional `sequence_lens` first input and
//! `directions`; shorter sequences leave their scan outputs zero-padded. Opsets 9+ drop the
//! batch axis and add `scan_input_axes`, `scan_input_directions`, `scan_output_axes` and
//! `scan_output_directions` (negative axes from opset 11 on; accepted everywhere here).

use super::loop_op::empty_stack;
use super::{axis, invalid, Body};
use crate::compile::Compiler;
use crate::error::{SessionError, SessionResult};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ep_cpu::attrs;
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::Node;
use std::collections::HashMap;

pub(crate) struct ScanOp {
    body: Body,
    /// Opset 8 semantics (batch axis, sequence_lens).
    batched: bool,
    states: usize,
    scan_inputs: usize,
    scan_outputs: usize,
    input_axes: Vec<i64>,
    input_reverse: Vec<bool>,
    output_axes: Vec<i64>,
    output_reverse: Vec<bool>,
}

fn flags(node: &Node, name: &str, n: usize) -> SessionResult<Vec<bool>> {
    let v = attrs::opt_ints(node, name)?.unwrap_or_else(|| vec![0; n]);
    if v.len() != n || v.iter().any(|&d| d != 0 && d != 1) {
        return Err(EpError::invalid_attribute(
            node,
            name,
            format!("needs {n} entries, each 0 (forward) or 1 (reverse), got {v:?}"),
        )
        .into());
    }
    Ok(v.iter().map(|&d| d == 1).collect())
}

fn axes(node: &Node, name: &str, n: usize) -> SessionResult<Vec<i64>> {
    let v = attrs::opt_ints(node, name)?.unwrap_or_else(|| vec![0; n]);
    if v.len() != n {
        return Err(EpError::invalid_attribute(
            node,
            name,
            format!("needs {n} entries, got {}", v.len()),
        )
        .into());
    }
    Ok(v)
}

impl ScanOp {
    pub fn build(
        compiler: &Compiler<'_>,
        node: &Node,
        opset: u64,
        scope: &HashMap<String, Value>,
        names: &mut Vec<String>,
    ) -> SessionResult<ScanOp> {
        let body = Body::build(compiler, node, "body", scope, names)?;
        let batched = opset < 9;
        let scan_inputs = usize::try_from(attrs::int(node, "num_scan_inputs", -1)?)
            .map_err(|_| EpError::invalid_attribute(node, "num_scan_inputs", "is required"))?;
        let operands = node.inputs.len() - usize::from(batched);
        if scan_inputs > operands || scan_inputs == 0 {
            return Err(EpError::invalid_attribute(
                node,
                "num_scan_inputs",
                format!("{scan_inputs} does not fit the node's {operands} state and scan inputs"),
            )
            .into());
        }
        let states = operands - scan_inputs;
        if body.num_inputs() != operands {
            return Err(SessionError::invalid(format!(
                "{}: the body takes {} inputs but the node passes {states} states and {scan_inputs} scan inputs",
                node.describe(),
                body.num_inputs()
            )));
        }
        if body.num_outputs() < states {
            return Err(SessionError::invalid(format!(
                "{}: the body returns {} outputs, fewer than its {states} states",
                node.describe(),
                body.num_outputs()
            )));
        }
        let scan_outputs = body.num_outputs() - states;
        if node.outputs.len() != states + scan_outputs {
            return Err(SessionError::invalid(format!(
                "{} has {} outputs but the body returns {} (states and scan outputs)",
                node.describe(),
                node.outputs.len(),
                body.num_outputs()
            )));
        }
        let (input_axes, input_reverse, output_axes, output_reverse) = if batched {
            (
                vec![0; scan_inputs],
                flags(node, "directions", scan_inputs)?,
                vec![0; scan_outputs],
                vec![false; scan_outputs],
            )
        } else {
            (
                axes(node, "scan_input_axes", scan_inputs)?,
                flags(node, "scan_input_directions", scan_inputs)?,
                axes(node, "scan_output_axes", scan_outputs)?,
                flags(node, "scan_output_directions", scan_outputs)?,
            )
        };
        Ok(ScanOp {
            body,
            batched,
            states,
            scan_inputs,
            scan_outputs,
            input_axes,
            input_reverse,
            output_axes,
            output_reverse,
        })
    }

    pub fn run(
        &self,
        node: &str,
        inputs: &[Option<&Value>],
        implicit: &[&Value],
    ) -> SessionResult<Vec<Value>> {
        let skip = usize::from(self.batched);
        let operands: Vec<&Value> = (0..self.states + self.scan_inputs)
            .map(|i| {
                inputs
                    .get(skip + i)
                    .copied()
                    .flatten()
                    .ok_or_else(|| invalid(node, format!("input {} is missing", skip + i)))
            })
            .collect::<SessionResult<_>>()?;
        let states: Vec<Value> = operands[..self.states]
            .iter()
            .map(|v| (*v).clone())
            .collect();
        let scans: Vec<&Tensor> = operands[self.states..]
            .iter()
            .enumerate()
            .map(|(j, v)| super::as_tensor(node, &format!("scan input {j}"), v))
            .collect::<SessionResult<_>>()?;
        if !self.batched {
            return self.scan(node, states, &scans, None, implicit);
        }

        // Opset 8: one scan per batch entry, results stacked along the batch axis.
        let batch = scans[0].shape().first().copied().unwrap_or(0);
        let lens = match inputs.first().copied().flatten() {
            Some(v) => {
                let t = super::as_tensor(node, "sequence_lens", v)?;
                let l = t
                    .to_i64_vec()
                    .ok_or_else(|| invalid(node, "sequence_lens must be int64"))?;
                if l.len() != batch {
                    return Err(invalid(
                        node,
                        format!("sequence_lens has {} entries for batch {batch}", l.len()),
                    ));
                }
                Some(l)
            }
            None => None,
        };
        let mut per_batch: Vec<Vec<Value>> = Vec::with_capacity(batch);
        for b in 0..batch {
            let take_b = |t: &Tensor, what: &str| {
                axis::take(t, 0, b).map_err(|e| invalid(node, format!("{what}: {e}")))
            };
            let states_b = states
                .iter()
                .enumerate()
                .map(|(i, v)| {
                    let t = super::as_tensor(node, &format!("state {i}"), v)?;
                    take_b(t, &format!("state {i}")).map(Value::Tensor)
                })
                .collect::<SessionResult<Vec<_>>>()?;
            let scans_b = scans
                .iter()
                .enumerate()
                .map(|(j, t)| take_b(t, &format!("scan input {j}")))
                .collect::<SessionResult<Vec<_>>>()?;
            let refs: Vec<&Tensor> = scans_b.iter().collect();
            let len = lens.as_ref().map(|l| l[b]);
            per_batch.push(
                self.scan(node, states_b, &refs, len, implicit)
                    .map_err(|e| e.in_subgraph(format!("batch {b}")))?,
            );
        }
        (0..self.states + self.scan_outputs)
            .map(|k| {
                let items: Vec<Tensor> = per_batch
                    .iter()
                    .map(|outs| super::as_tensor(node, "output", &outs[k]).cloned())
                    .collect::<SessionResult<_>>()?;
                if items.is_empty() {
                    return Ok(Value::Tensor(empty_stack(&self.body.graph.outputs[k].ty)));
                }
                axis::stack(&items, 0)
                    .map(Value::Tensor)
                    .map_err(|e| invalid(node, format!("output {k}: {e}")))
            })
            .collect()
    }

    /// One scan without a batch axis. `len` limits the iterations (opset 8 sequence_lens);
    /// the remaining positions of the scan outputs are zeros.
    fn scan(
        &self,
        node: &str,
        mut states: Vec<Value>,
        scans: &[&Tensor],
        len: Option<i64>,
        implicit: &[&Value],
    ) -> SessionResult<Vec<Value>> {
        let mut axes = Vec::with_capacity(scans.len());
        let mut seq_len = None;
        for (j, t) in scans.iter().enumerate() {
            let a = axis::normalize_axis(self.input_axes[j], t.rank())
                .map_err(|e| invalid(node, format!("scan input {j}: {e}")))?;
            let n = t.shape()[a];
            match seq_len {
                None => seq_len = Some(n),
                Some(m) if m != n => {
                    return Err(invalid(
                        node,
                        format!(
                            "scan input {j} has {n} steps along axis {a}, scan input 0 has {m}"
                        ),
                    ))
                }
                _ => {}
            }
            axes.push(a);
        }
        let seq_len = seq_len.unwrap_or(0);
        let steps = match len {
            Some(l) if l < 0 || l as usize > seq_len => {
                return Err(invalid(
                    node,
                    format!("sequence length {l} is outside 0..={seq_len}"),
                ))
            }
            Some(l) => l as usize,
            None => seq_len,
        };
        let mut collected: Vec<Vec<Tensor>> = vec![Vec::with_capacity(seq_len); self.scan_outputs];
        for t in 0..steps {
            let mut body_inputs = std::mem::take(&mut states);
            for (j, input) in scans.iter().enumerate() {
                let idx = if self.input_reverse[j] {
                    steps - 1 - t
                } else {
                    t
                };
                let slice = axis::take(input, axes[j], idx)
                    .map_err(|e| invalid(node, format!("scan input {j}: {e}")))?;
                body_inputs.push(Value::Tensor(slice));
            }
            let mut outs = self
                .body
                .run(body_inputs, implicit)
                .map_err(|e| e.in_subgraph(format!("{node} body, iteration {t}")))?;
            let elems = outs.split_off(self.states);
            states = outs;
            for (k, v) in elems.into_iter().enumerate() {
                match v {
                    Value::Tensor(x) => collected[k].push(x),
                    other => {
                        return Err(invalid(
                            node,
                            format!(
                                "scan output {k} must be a tensor, got a {}",
                                other.kind_name()
                            ),
                        ))
                    }
                }
            }
        }
        let mut out = states;
        for (k, mut items) in collected.into_iter().enumerate() {
            if items.is_empty() {
                let mut t = empty_stack(&self.body.graph.outputs[self.states + k].ty);
                if seq_len > 0 {
                    // Opset 8 with a zero sequence length: zeros of the padded length.
                    let mut shape = t.shape().to_vec();
                    shape[0] = seq_len;
                    t = Tensor::zeros(t.dtype(), shape);
                }
                out.push(Value::Tensor(t));
                continue;
            }
            // Zero padding for sequences shorter than the scan inputs (opset 8).
            while items.len() < seq_len {
                items.push(Tensor::zeros(items[0].dtype(), items[0].shape().to_vec()));
            }
            if self.output_reverse[k] {
                items.reverse();
            }
            let rank = items[0].rank() + 1;
            let a = axis::normalize_axis(self.output_axes[k], rank)
                .map_err(|e| invalid(node, format!("scan output {k}: {e}")))?;
            let stacked = axis::stack(&items, a)
                .map_err(|e| invalid(node, format!("scan output {k}: {e}")))?;
            out.push(Value::Tensor(stacked));
        }
        Ok(out)
    }
}
