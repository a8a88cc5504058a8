//! Runs a compiled graph: values live in a slot table, each step reads its inputs by slot,
//! and intermediates are dropped after their last reader.

use crate::compile::{CompiledGraph, Step, StepKind};
use crate::device::{placeable, DeviceStep, DeviceTensor, StepInput};
use crate::error::{SessionError, SessionResult};
use crate::profile::Profile;
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ep_cpu::{Tensor, Value};
use std::borrow::Cow;
use std::sync::Arc;
use std::time::Instant;

/// Where a run leaves a graph output (IO binding).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Place {
    /// Not asked for: nothing is copied.
    Skip,
    Host,
    Device,
    /// In the memory of the device feed of graph input `i` (a KV cache updated in place).
    Into(usize),
}

/// A graph output where the caller asked for it.
pub(crate) enum Fetched {
    Skipped,
    Host(Value),
    Device(Arc<DeviceTensor>),
}

impl Fetched {
    /// The host value of an output asked for on the host.
    pub fn into_host(self, name: &str) -> SessionResult<Value> {
        match self {
            Fetched::Host(v) => Ok(v),
            Fetched::Device(t) => Ok(Value::Tensor(t.download()?)),
            Fetched::Skipped => Err(SessionError::invalid(format!(
                "graph output '{name}' was not asked for"
            ))),
        }
    }
}

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
    profile: Option<&mut Profile>,
) -> SessionResult<Vec<Value>> {
    let mut slots = Slots::new(graph);
    slots.feed(graph, inputs, captures);
    execute_steps(graph, &mut slots, profile)?;
    graph
        .outputs
        .iter()
        .map(|io| slots.output(io.slot, &io.name))
        .collect()
}

/// [`run_graph`] for a top-level graph with device feeds (`device[i]` set: input `i` is that
/// device tensor; IO binding) and each output left where `places` says.
pub(crate) fn run_graph_bound<'a>(
    graph: &'a CompiledGraph,
    inputs: Vec<Option<Cow<'a, Value>>>,
    device: &[Option<Arc<DeviceTensor>>],
    places: &[Place],
    profile: Option<&mut Profile>,
    spin: bool,
) -> SessionResult<Vec<Fetched>> {
    let run = || {
        let mut slots = Slots::new(graph);
        slots.feed(graph, inputs, &[]);
        slots.feed_device(graph, device);
        slots.bind_into(graph, device, places);
        execute_steps(graph, &mut slots, profile)?;
        slots.fetch_outputs(graph, places)
    };
    if rayon::current_thread_index().is_none() {
        return crate::workers::run_on_pool(spin, run);
    }
    run()
}

/// Runs every step of `graph` over `slots` (fed already).
pub(crate) fn execute_steps(
    graph: &CompiledGraph,
    slots: &mut Slots<'_>,
    mut profile: Option<&mut Profile>,
) -> SessionResult<()> {
    for step in &graph.steps {
        let started = profile.as_ref().map(|_| Instant::now());
        let on_device = match &step.kind {
            StepKind::Device(device) => run_on_device(device, step, slots)?,
            _ => None,
        };
        let results = match (&step.kind, on_device) {
            (_, Some(outputs)) => {
                for (&slot, t) in step.outputs.iter().zip(outputs) {
                    slots.device[slot] = Some(Arc::new(t));
                }
                None
            }
            (StepKind::Meta(op), None) => {
                let slot = step.inputs.first().copied().flatten();
                let shape = slot.and_then(|s| slots.shape_of(s)).ok_or_else(|| {
                    SessionError::invalid(format!("{}: its input was not produced", step.name))
                })?;
                Some(vec![op.eval(&shape)])
            }
            (_, None) => Some(run_on_host(step, slots)?),
        };
        if let (Some(p), Some(t)) = (profile.as_deref_mut(), started) {
            // A device step's time is its kernels' time: wait for them (profiled runs only).
            if let StepKind::Device(device) = &step.kind {
                device.ep.synchronize()?;
            }
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
                slots.check_expected(slot, &value, &step.name)?;
                slots.host[slot] = Some(Cow::Owned(value));
            }
        }
        for &slot in &step.free_after {
            slots.free(slot);
        }
    }
    Ok(())
}

/// Every value of a run: on the host, on the device, or both (a copy made when the other
/// side needed it). Without device steps the device table stays empty.
pub(crate) struct Slots<'a> {
    pub host: Vec<Option<Cow<'a, Value>>>,
    pub device: Vec<Option<Arc<DeviceTensor>>>,
    /// When set, host values (other than graph inputs) that device steps had to copy to the
    /// device are recorded here: a capture copies them before it starts.
    pub uploads: Option<Vec<(usize, Tensor)>>,
    /// Host values the run must compute exactly as given (those a capture copied before it
    /// started); any other value is an error.
    pub expected: Vec<(usize, Tensor)>,
    /// By slot (graph outputs asked for with [`Place::Into`]): the device feed whose memory
    /// the value goes to. A producer that can write there in place does
    /// ([`onnx_runtime_ep_api::Kernel::in_place_input`]); otherwise the output is copied in.
    pub into: Vec<Option<Arc<DeviceTensor>>>,
}

impl<'a> Slots<'a> {
    pub fn new(graph: &'a CompiledGraph) -> Self {
        let mut device: Vec<Option<Arc<DeviceTensor>>> = Vec::new();
        if graph.device.is_some() {
            device.resize(graph.num_slots, None);
            for (slot, t) in &graph.device_constants {
                device[*slot] = Some(t.clone());
            }
        }
        let mut host: Vec<Option<Cow<'a, Value>>> = (0..graph.num_slots).map(|_| None).collect();
        for (slot, value) in &graph.constants {
            host[*slot] = Some(Cow::Borrowed(value));
        }
        Slots {
            host,
            device,
            uploads: None,
            expected: Vec::new(),
            into: Vec::new(),
        }
    }

    /// Puts the feeds (or the inputs' initializers) and the outer-scope values in place.
    pub fn feed(
        &mut self,
        graph: &'a CompiledGraph,
        inputs: Vec<Option<Cow<'a, Value>>>,
        captures: &[&'a Value],
    ) {
        for ((io, default), feed) in graph.inputs.iter().zip(&graph.input_defaults).zip(inputs) {
            self.host[io.slot] = feed.or_else(|| default.as_ref().map(Cow::Borrowed));
        }
        for ((_, slot), value) in graph.captures.iter().zip(captures) {
            self.host[*slot] = Some(Cow::Borrowed(*value));
        }
    }

    /// Puts the device feeds (IO binding) in place: `device[i]` for graph input `i`.
    pub fn feed_device(&mut self, graph: &CompiledGraph, device: &[Option<Arc<DeviceTensor>>]) {
        for (io, t) in graph.inputs.iter().zip(device) {
            if let Some(t) = t {
                self.host[io.slot] = None;
                self.device[io.slot] = Some(t.clone());
            }
        }
    }

    /// Marks the slots of the outputs asked for in the memory of a device feed.
    pub fn bind_into(
        &mut self,
        graph: &CompiledGraph,
        device: &[Option<Arc<DeviceTensor>>],
        places: &[Place],
    ) {
        for (io, place) in graph.outputs.iter().zip(places) {
            if let Place::Into(i) = *place {
                if let Some(Some(t)) = device.get(i) {
                    if self.into.is_empty() {
                        self.into.resize(graph.num_slots, None);
                    }
                    self.into[io.slot] = Some(t.clone());
                }
            }
        }
    }

    /// Every graph output where `places` asks for it (uploading a host value asked for on
    /// the device; the device value itself otherwise, no copy).
    pub fn fetch_outputs(
        &mut self,
        graph: &CompiledGraph,
        places: &[Place],
    ) -> SessionResult<Vec<Fetched>> {
        graph
            .outputs
            .iter()
            .enumerate()
            .map(
                |(i, io)| match places.get(i).copied().unwrap_or(Place::Host) {
                    Place::Skip => Ok(Fetched::Skipped),
                    Place::Host => self.output(io.slot, &io.name).map(Fetched::Host),
                    Place::Device => self
                        .device_output(graph, io.slot, &io.name)
                        .map(Fetched::Device),
                    Place::Into(_) => self.written_output(graph, io.slot, &io.name),
                },
            )
            .collect()
    }

    /// A graph output as a device tensor (uploaded when it was computed on the host).
    fn device_output(
        &mut self,
        graph: &CompiledGraph,
        slot: usize,
        name: &str,
    ) -> SessionResult<Arc<DeviceTensor>> {
        if let Some(t) = self.device.get(slot).and_then(Option::as_ref) {
            return Ok(t.clone());
        }
        let ep = graph.device.as_ref().ok_or_else(|| {
            SessionError::invalid(format!(
                "graph output '{name}' was asked for on the device, and the session has none"
            ))
        })?;
        match self.host[slot].as_deref() {
            Some(Value::Tensor(t)) if placeable(t) => Ok(Arc::new(DeviceTensor::upload(ep, t)?)),
            Some(_) => Err(SessionError::invalid(format!(
                "graph output '{name}' is not a tensor of numbers, so it cannot be a device value"
            ))),
            None => Err(SessionError::invalid(format!(
                "graph output '{name}' was not produced (an optional output no node wrote, or an input that was not fed)"
            ))),
        }
    }

    /// A graph output asked for in a device feed's memory: that feed, holding the output
    /// (copied in unless its producer wrote it there).
    fn written_output(
        &mut self,
        graph: &CompiledGraph,
        slot: usize,
        name: &str,
    ) -> SessionResult<Fetched> {
        let target = self.into.get(slot).cloned().flatten().ok_or_else(|| {
            SessionError::invalid(format!(
                "graph output '{name}' was asked for in an input's memory, and that input is not a device value"
            ))
        })?;
        if let Some(t) = self.device.get(slot).and_then(Option::as_ref) {
            write_into(name, t, &target)?;
            return Ok(Fetched::Device(target));
        }
        let t = self.device_output(graph, slot, name)?;
        write_into(name, &t, &target)?;
        Ok(Fetched::Device(target))
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

    /// The shape of a tensor value wherever it lives, without copying it.
    fn shape_of(&self, slot: usize) -> Option<Vec<usize>> {
        if let Some(t) = self.device.get(slot).and_then(Option::as_ref) {
            return Some(t.shape().to_vec());
        }
        match self.host[slot].as_deref() {
            Some(Value::Tensor(t)) => Some(t.shape().to_vec()),
            _ => None,
        }
    }

    /// A graph output as a host value (copied from the device if it lives there).
    pub fn output(&mut self, slot: usize, name: &str) -> SessionResult<Value> {
        self.fetch(slot)?;
        self.host[slot].as_deref().cloned().ok_or_else(|| {
            SessionError::invalid(format!(
                "graph output '{name}' was not produced (an optional output no node wrote, or an input that was not fed)"
            ))
        })
    }

    fn check_expected(&self, slot: usize, value: &Value, step: &str) -> SessionResult<()> {
        let Some((_, want)) = self.expected.iter().find(|(s, _)| *s == slot) else {
            return Ok(());
        };
        match value {
            Value::Tensor(t)
                if t.dtype() == want.dtype()
                    && t.shape() == want.shape()
                    && t.bytes() == want.bytes() =>
            {
                Ok(())
            }
            _ => Err(SessionError::Kernel(EpError::Capture {
                node: step.to_string(),
                message: "a host value the capture copied to the device in advance came out \
                          different in this run"
                    .into(),
            })),
        }
    }

    pub fn free(&mut self, slot: usize) {
        self.host[slot] = None;
        if let Some(d) = self.device.get_mut(slot) {
            *d = None;
        }
    }
}

/// Copies output `name`'s device value into `target` (nothing when it is already there).
pub(crate) fn write_into(
    name: &str,
    value: &DeviceTensor,
    target: &DeviceTensor,
) -> SessionResult<()> {
    if value.dtype() != target.dtype() || value.shape() != target.shape() {
        return Err(SessionError::InvalidArgument(format!(
            "output '{name}' is a {} tensor of shape {:?} and cannot go into the memory of a {} \
             input of shape {:?}; bind it to an input of its own type and shape",
            value.dtype(),
            value.shape(),
            target.dtype(),
            target.shape()
        )));
    }
    DeviceTensor::copy_pairs(&[(value, target)])
}

/// Runs a device step when all its inputs can live on the device (uploading those that are
/// only on the host, except host values at the kernel's `host_inputs` positions, which it
/// reads in place). `None`: the step runs on the host instead.
fn run_on_device(
    device: &DeviceStep,
    step: &Step,
    slots: &mut Slots<'_>,
) -> SessionResult<Option<Vec<DeviceTensor>>> {
    for (pos, slot) in step.inputs.iter().enumerate() {
        let Some(slot) = *slot else { continue };
        if slots.device[slot].is_some() || host_readable(device, pos, slots, slot) {
            continue;
        }
        match slots.host[slot].as_deref() {
            Some(Value::Tensor(t)) if placeable(t) => {
                if let Some(record) = slots.uploads.as_mut() {
                    record.push((slot, t.clone()));
                }
                slots.device[slot] = Some(Arc::new(DeviceTensor::upload(&device.ep, t)?));
            }
            // Absent inputs, sequences, maps and strings: the CPU kernel decides.
            other => {
                return Ok(device.refuse(|| {
                    let what = match other {
                        None => "absent",
                        Some(Value::Tensor(_)) => "a tensor without byte storage",
                        Some(_) => "not a tensor",
                    };
                    format!("input {pos} is {what}, which cannot go to the device")
                }))
            }
        }
    }
    let inputs: Vec<StepInput<'_>> = step
        .inputs
        .iter()
        .enumerate()
        .map(|(pos, s)| match s {
            None => StepInput::Absent,
            Some(s) if host_readable(device, pos, slots, *s) => match slots.host[*s].as_deref() {
                Some(Value::Tensor(t)) => StepInput::Host(t),
                _ => StepInput::Absent,
            },
            Some(s) => slots.device[*s]
                .as_deref()
                .map_or(StepInput::Absent, StepInput::Device),
        })
        .collect();
    let into = in_place_targets(device, step, slots);
    device.run(&inputs, &into)
}

/// Per output of a device step: the device feed it may be written into in place. That is
/// the feed of the input the kernel names ([`onnx_runtime_ep_api::Kernel::in_place_input`]),
/// when the step reads it at that position only and is its last reader (so nothing after
/// the step sees the overwritten bytes).
fn in_place_targets<'s>(
    device: &DeviceStep,
    step: &Step,
    slots: &'s Slots<'_>,
) -> Vec<Option<&'s Arc<DeviceTensor>>> {
    if slots.into.is_empty() {
        return Vec::new();
    }
    step.outputs
        .iter()
        .enumerate()
        .map(|(k, &out)| {
            let target = slots.into[out].as_ref()?;
            let j = device.kernel.in_place_input(k)?;
            let input = (*step.inputs.get(j)?)?;
            let fed = slots.device[input].as_ref()?;
            let once = step
                .inputs
                .iter()
                .flatten()
                .filter(|&&s| s == input)
                .count()
                == 1
                && !step.implicit.contains(&input);
            (Arc::ptr_eq(fed, target) && once && step.free_after.contains(&input)).then_some(target)
        })
        .collect()
}

/// Whether input `pos` of a device step can be passed in host memory: the kernel reads it
/// on the host and the value is a host tensor.
fn host_readable(device: &DeviceStep, pos: usize, slots: &Slots<'_>, slot: usize) -> bool {
    device.host_inputs.contains(&pos)
        && matches!(slots.host[slot].as_deref(), Some(Value::Tensor(t)) if placeable(t))
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
        StepKind::Meta(_) => {
            return Err(SessionError::invalid(format!(
                "{}: a metadata step reached the host kernel path",
                step.name
            )))
        }
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
