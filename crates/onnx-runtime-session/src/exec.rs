//! Runs a compiled graph: values live in a slot table, each step reads its inputs by slot,
//! and intermediates are dropped after their last reader.

use crate::compile::{CompiledGraph, StepKind};
use crate::error::{SessionError, SessionResult};
use crate::profile::Profile;
use onnx_runtime_ep_cpu::Value;
use std::borrow::Cow;
use std::time::Instant;

/// Runs `graph` with `inputs` (one per graph input, `None` to use its initializer or leave
/// an optional input absent) and `captures` (one per `graph.captures` entry). Returns one
/// value per graph output. With `profile`, each step's time is recorded in it.
pub(crate) fn run_graph<'a>(
    graph: &'a CompiledGraph,
    inputs: Vec<Option<Cow<'a, Value>>>,
    captures: &[&'a Value],
    profile: Option<&mut Profile>,
) -> SessionResult<Vec<Value>> {
    // Kernels that split work over rayon would each hand it from this thread to the pool and
    // sleep until a worker woke up and finished it. Running the whole graph on a pool worker
    // instead makes that one hand-off per run: inside the pool, work nobody steals runs inline.
    if rayon::current_thread_index().is_none() {
        return rayon::scope(|_| run_steps(graph, inputs, captures, profile));
    }
    run_steps(graph, inputs, captures, profile)
}

fn run_steps<'a>(
    graph: &'a CompiledGraph,
    inputs: Vec<Option<Cow<'a, Value>>>,
    captures: &[&'a Value],
    mut profile: Option<&mut Profile>,
) -> SessionResult<Vec<Value>> {
    let mut slots: Vec<Option<Cow<'a, Value>>> = (0..graph.num_slots).map(|_| None).collect();
    for (slot, value) in &graph.constants {
        slots[*slot] = Some(Cow::Borrowed(value));
    }
    for ((io, default), feed) in graph.inputs.iter().zip(&graph.input_defaults).zip(inputs) {
        slots[io.slot] = feed.or_else(|| default.as_ref().map(Cow::Borrowed));
    }
    for ((_, slot), value) in graph.captures.iter().zip(captures) {
        slots[*slot] = Some(Cow::Borrowed(*value));
    }

    for step in &graph.steps {
        let started = profile.as_ref().map(|_| Instant::now());
        let results = {
            // Most nodes have a few inputs: gather them on the stack.
            let mut small: [Option<&Value>; 8] = [None; 8];
            let large: Vec<Option<&Value>>;
            let inputs: &[Option<&Value>] = if step.inputs.len() <= small.len() {
                for (d, s) in small.iter_mut().zip(&step.inputs) {
                    *d = s.and_then(|s| slots[s].as_deref());
                }
                &small[..step.inputs.len()]
            } else {
                large = step
                    .inputs
                    .iter()
                    .map(|s| s.and_then(|s| slots[s].as_deref()))
                    .collect();
                &large
            };
            match &step.kind {
                StepKind::Cpu(kernel) => kernel.run(inputs)?,
                StepKind::Control(op) => {
                    let implicit = step
                        .implicit
                        .iter()
                        .map(|&s| {
                            slots[s].as_deref().ok_or_else(|| {
                                SessionError::invalid(format!(
                                    "{}: a value its body reads from the enclosing graph was not produced",
                                    step.name
                                ))
                            })
                        })
                        .collect::<SessionResult<Vec<&Value>>>()?;
                    op.run(&step.name, inputs, &implicit)?
                }
            }
        };
        if let (Some(p), Some(t)) = (profile.as_deref_mut(), started) {
            p.record(&step.op_type, &step.name, t.elapsed());
        }
        if results.len() > step.outputs.len() {
            return Err(SessionError::invalid(format!(
                "{} returned {} outputs but the node declares {}",
                step.name,
                results.len(),
                step.outputs.len()
            )));
        }
        for (&slot, value) in step.outputs.iter().zip(results) {
            slots[slot] = Some(Cow::Owned(value));
        }
        for &slot in &step.free_after {
            slots[slot] = None;
        }
    }

    graph
        .outputs
        .iter()
        .map(|io| {
            slots[io.slot]
                .as_deref()
                .cloned()
                .ok_or_else(|| {
                    SessionError::invalid(format!(
                        "graph output '{}' was not produced (an optional output no node wrote, or an input that was not fed)",
                        io.name
                    ))
                })
        })
        .collect()
}
