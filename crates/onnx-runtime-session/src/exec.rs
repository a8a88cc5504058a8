//! Runs a compiled graph: values live in a slot table, each step reads its inputs by slot,
//! and intermediates are dropped after their last reader.

use crate::compile::{CompiledGraph, Step, StepKind};
use crate::device::{placeable, DeviceStep, DeviceTensor};
use crate::error::{SessionError, SessionResult};
use crate::profile::Profile;
use onnx_runtime_ep_cpu::Value;
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

/// Runs `graph` with `inputs` (one per graph input, `None` to use its initializer or leave
/// an optional input absent) and `captures` (one per `graph.captures` entry). Returns one
/// value per graph output. With `profile`, each step's time is recorded in it. `spin` keeps
/// the pool's workers polling for work during a run started outside the pool.
pub(crate) fn run_graph<'a>(
    graph: &'a CompiledGraph,
    inputs: Vec<Option<Cow<'a, Value>>>,
    captures: &[&'a Value],
    profile: Option<&mut Profile>,
    spin: bool,
) -> SessionResult<Vec<Value>> {
    // Kernels that split work over rayon would each hand it from this thread to the pool and
    // sleep until a worker woke up and finished it. Running the whole graph on a pool worker
    // instead makes that one hand-off per run: inside the pool, work nobody steals runs inline,
    // and the other workers stay awake to steal (see `workers`).
    if rayon::current_thread_index().is_none() {
        return crate::workers::run_on_pool(spin, || run_steps(graph, inputs, captures, profile));
    }
    run_steps(graph, inputs, captures, profile)
}

fn run_steps<'a>(
    graph: &'a CompiledGraph,
    inputs: Vec<Option<Cow<'a, Value>>>,
    captures: &[&'a Value],
    mut profile: Option<&mut Profile>,
) -> SessionResult<Vec<Value>> {
    let mut slots = Slots::new(graph);
    for (slot, value) in &graph.constants {
        slots.host[*slot] = Some(Cow::Borrowed(value));
    }
    for ((io, default), feed) in graph.inputs.iter().zip(&graph.input_defaults).zip(inputs) {
        slots.host[io.slot] = feed.or_else(|| default.as_ref().map(Cow::Borrowed));
    }
    for ((_, slot), value) in graph.captures.iter().zip(captures) {
        slots.host[*slot] = Some(Cow::Borrowed(*value));
    }

    for step in &graph.steps {
        let started = profile.as_ref().map(|_| Instant::now());
        let on_device = match &step.kind {
            StepKind::Device(device) => run_on_device(device, step, &mut slots)?,
            _ => None,
        };
        let results = match on_device {
            Some(outputs) => {
                for (&slot, t) in step.outputs.iter().zip(outputs) {
                    slots.device[slot] = Some(Arc::new(t));
                }
                None
            }
            None => Some(run_on_host(step, &mut slots)?),
        };
        if let (Some(p), Some(t)) = (profile.as_deref_mut(), started) {
            p.record(&step.op_type, &step.name, t.elapsed());
        }
        if let Some(results) = results {
            if results.len() > step.outputs.len() {
                return Err(SessionError::invalid(format!(
                    "{} returned {} outputs but the node declares {}",
                    step.name,
                    results.len(),
                    step.outputs.len()
                )));
            }
            for (&slot, value) in step.outputs.iter().zip(results) {
                slots.host[slot] = Some(Cow::Owned(value));
            }
        }
        for &slot in &step.free_after {
            slots.free(slot);
        }
    }

    graph
        .outputs
        .iter()
        .map(|io| {
            slots.fetch(io.slot)?;
            slots.host[io.slot]
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

/// Every value of a run: on the host, on the device, or both (a copy made when the other
/// side needed it). Without device steps the device table stays empty.
struct Slots<'a> {
    host: Vec<Option<Cow<'a, Value>>>,
    device: Vec<Option<Arc<DeviceTensor>>>,
}

impl<'a> Slots<'a> {
    fn new(graph: &'a CompiledGraph) -> Self {
        let mut device: Vec<Option<Arc<DeviceTensor>>> = Vec::new();
        if graph.uses_device {
            device.resize(graph.num_slots, None);
            for (slot, t) in &graph.device_constants {
                device[*slot] = Some(t.clone());
            }
        }
        Slots {
            host: (0..graph.num_slots).map(|_| None).collect(),
            device,
        }
    }

    /// Makes a value that lives only on the device available on the host too.
    fn fetch(&mut self, slot: usize) -> SessionResult<()> {
        if self.host[slot].is_none() {
            if let Some(t) = self.device.get(slot).and_then(Option::as_ref) {
                self.host[slot] = Some(Cow::Owned(Value::Tensor(t.download()?)));
            }
        }
        Ok(())
    }

    fn free(&mut self, slot: usize) {
        self.host[slot] = None;
        if let Some(d) = self.device.get_mut(slot) {
            *d = None;
        }
    }
}

/// Runs a device step when all its inputs can live on the device (uploading those that are
/// only on the host). `None`: the step runs on the host instead.
fn run_on_device(
    device: &DeviceStep,
    step: &Step,
    slots: &mut Slots<'_>,
) -> SessionResult<Option<Vec<DeviceTensor>>> {
    for &slot in step.inputs.iter().flatten() {
        if slots.device[slot].is_some() {
            continue;
        }
        match slots.host[slot].as_deref() {
            Some(Value::Tensor(t)) if placeable(t) => {
                slots.device[slot] = Some(Arc::new(DeviceTensor::upload(&device.ep, t)?));
            }
            // Absent inputs, sequences, maps and strings: the CPU kernel decides.
            _ => return Ok(device.refuse()),
        }
    }
    let inputs: Vec<Option<&DeviceTensor>> = step
        .inputs
        .iter()
        .map(|s| s.and_then(|s| slots.device[s].as_deref()))
        .collect();
    device.run(&inputs)
}

/// Runs a CPU, control-flow or refused device step on the host, fetching device inputs.
fn run_on_host(step: &Step, slots: &mut Slots<'_>) -> SessionResult<Vec<Value>> {
    for &slot in step.inputs.iter().flatten().chain(&step.implicit) {
        slots.fetch(slot)?;
    }
    let host = &slots.host;
    // Most nodes have a few inputs: gather them on the stack.
    let mut small: [Option<&Value>; 8] = [None; 8];
    let large: Vec<Option<&Value>>;
    let inputs: &[Option<&Value>] = if step.inputs.len() <= small.len() {
        for (d, s) in small.iter_mut().zip(&step.inputs) {
            *d = s.and_then(|s| host[s].as_deref());
        }
        &small[..step.inputs.len()]
    } else {
        large = step
            .inputs
            .iter()
            .map(|s| s.and_then(|s| host[s].as_deref()))
            .collect();
        &large
    };
    Ok(match &step.kind {
        StepKind::Cpu(kernel) => kernel.run(inputs)?,
        StepKind::Device(device) => device.fallback.run(inputs)?,
        StepKind::Control(op) => {
            let implicit = step
                .implicit
                .iter()
                .map(|&s| {
                    host[s].as_deref().ok_or_else(|| {
                        SessionError::invalid(format!(
                            "{}: a value its body reads from the enclosing graph was not produced",
                            step.name
                        ))
                    })
                })
                .collect::<SessionResult<Vec<&Value>>>()?;
            op.run(&step.name, inputs, &implicit)?
        }
    })
}
