//! Automatic whole-run device graphs (CUDA graphs).
//!
//! A session whose every step can be recorded (nodes on the device, shape arithmetic on the
//! host, no control flow: [`CompiledGraph::capture_blockers`] is empty) keeps one device graph
//! per input signature (the dtype and shape of each feed):
//! - the first run of a signature runs eagerly, which also warms every kernel (libraries
//!   loaded, algorithms chosen, host-read inputs seen) and records the host values that device
//!   steps copy to the device;
//! - the second copies the feeds into buffers the graph keeps, copies those recorded host
//!   values in advance, and records the whole run into a graph ([`ExecutionProvider::begin_capture`]),
//!   whose private memory holds every intermediate; it then replays it once for its outputs;
//! - later runs copy the feeds into the same buffers, replay the graph (one launch) and copy
//!   the outputs back.
//!
//! Anything that cannot be recorded (a kernel that must read device data on the host or
//! whose output size depends on data, a dtype the device kernel refuses at run time) fails
//! the capture; the run is then redone eagerly and the signature stays eager, with the reason
//! in [`crate::Session::capture_report`]. A run's host values depend only on the signature
//! (they are shapes and what is computed from them), so a replay needs no host step.

use crate::compile::CompiledGraph;
use crate::device::{placeable, DeviceTensor};
use crate::error::{SessionError, SessionResult};
use crate::exec::{execute_steps, write_into, Fetched, Place, Slots};
use onnx_runtime_ep_api::{CaptureSupport, DeviceGraph, ExecutionProvider};
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::DataType;
use std::borrow::Cow;
use std::sync::{Arc, Mutex, RwLock};

use crate::compile::StepKind;

/// Whether a device session records its runs into device graphs.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CudaGraph {
    /// Capture each input signature on its second run and replay it from the third on, when
    /// the graph allows it (the default).
    #[default]
    Auto,
    /// Always run node by node.
    Off,
}

/// Host values (by slot) that device steps copied to the device during a run.
type Uploads = Vec<(usize, Tensor)>;

/// The dtype and shape of each feed (`None`: not fed), and the device address of each feed
/// an output is written into ([`Place::Into`]: the graph reads and writes that memory).
type Signature = (Vec<Option<(DataType, Vec<usize>)>>, Vec<(usize, usize)>);

/// How many signatures keep a graph (least recently used ones are dropped).
const MAX_GRAPHS: usize = 8;

enum State {
    /// Ran eagerly once; the host values its device steps copied to the device.
    Warm(Vec<(usize, Tensor)>),
    Captured(Arc<Captured>),
    /// Runs node by node, for this reason.
    Eager(String),
}

/// A recorded run: the graph and the device buffers its replays read and write.
struct Captured {
    /// Replays of one graph share its buffers: one at a time.
    lock: Mutex<()>,
    /// (graph-input index, buffer the feed is copied into).
    inputs: Vec<(usize, Arc<DeviceTensor>)>,
    /// Host values copied to the device before the capture (kept alive for the replays).
    _copied: Vec<Arc<DeviceTensor>>,
    outputs: Vec<OutputSource>,
    replays: std::sync::atomic::AtomicUsize,
    /// Dropped last: the tensors above hold memory of the graph's pool.
    graph: Box<dyn DeviceGraph>,
}

enum OutputSource {
    Device(Arc<DeviceTensor>),
    /// A host value fixed by the signature (a shape, a constant).
    Fixed(Value),
    /// A graph input passed through.
    Input(usize),
}

/// One session's graphs.
pub(crate) struct GraphCache {
    ep: Arc<dyn ExecutionProvider>,
    entries: Mutex<Vec<(Signature, State)>>,
    /// Eager runs and replays share the device; a capture must be alone on it.
    device: RwLock<()>,
}

/// What [`crate::Session::capture_report`] returns.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CaptureReport {
    /// Why no run of this session can be recorded (empty: runs can be).
    pub blockers: Vec<String>,
    /// Each input signature seen (most recent last): its feeds and state.
    pub signatures: Vec<SignatureReport>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct SignatureReport {
    /// Per graph input: `float[1, 3, 224, 224]`, or `-` when not fed.
    pub inputs: Vec<String>,
    /// `warm` (ran once), `captured`, or `eager: <reason>`.
    pub state: String,
    pub replays: usize,
    /// Device memory the graph holds.
    pub graph_bytes: usize,
}

impl SignatureReport {
    /// The inputs on one line, runs of equal entries folded (`48 x float16[1, 2, 144, 64]`:
    /// a decoder's caches).
    pub fn inputs_summary(&self) -> String {
        let mut parts: Vec<String> = Vec::new();
        let mut i = 0;
        while i < self.inputs.len() {
            let run = self.inputs[i..]
                .iter()
                .take_while(|s| **s == self.inputs[i])
                .count();
            parts.push(match run {
                1 => self.inputs[i].clone(),
                n => format!("{n} x {}", self.inputs[i]),
            });
            i += run;
        }
        parts.join(" ")
    }
}

impl GraphCache {
    pub fn new(ep: Arc<dyn ExecutionProvider>) -> Self {
        GraphCache {
            ep,
            entries: Mutex::new(Vec::new()),
            device: RwLock::new(()),
        }
    }

    fn entries(&self) -> std::sync::MutexGuard<'_, Vec<(Signature, State)>> {
        self.entries.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn report(&self, graph: &CompiledGraph) -> CaptureReport {
        let entries = self.entries();
        CaptureReport {
            blockers: graph.capture_blockers.clone(),
            signatures: entries
                .iter()
                .map(|(sig, state)| {
                    let inputs = sig
                        .0
                        .iter()
                        .enumerate()
                        .map(|(i, s)| match s {
                            Some((d, shape)) if sig.1.iter().any(|(k, _)| *k == i) => {
                                format!("{d}{shape:?} (written in place)")
                            }
                            Some((d, shape)) => format!("{d}{shape:?}"),
                            None => "-".into(),
                        })
                        .collect();
                    let (state, replays, graph_bytes) = match state {
                        State::Warm(_) => ("warm".to_string(), 0, 0),
                        State::Captured(c) => (
                            "captured".to_string(),
                            c.replays.load(std::sync::atomic::Ordering::Relaxed),
                            c.graph.memory_bytes(),
                        ),
                        State::Eager(r) => (format!("eager: {r}"), 0, 0),
                    };
                    SignatureReport {
                        inputs,
                        state,
                        replays,
                        graph_bytes,
                    }
                })
                .collect(),
        }
    }

    /// Runs `graph` on `feeds` (host values, or device tensors in `device` for bound inputs)
    /// through its device graph for their signature (capturing it on the signature's second
    /// run), or eagerly; each output goes where `places` says.
    pub fn run<'a>(
        &self,
        graph: &'a CompiledGraph,
        feeds: Vec<Option<Cow<'a, Value>>>,
        device: &[Option<Arc<DeviceTensor>>],
        places: &[Place],
    ) -> SessionResult<Vec<Fetched>> {
        let run = Run { device, places };
        let Some(sig) = signature(graph, &feeds, device, places) else {
            return self.eager(graph, feeds, &run, false).map(|(v, _)| v);
        };
        enum Next {
            Warm,
            Capture(Vec<(usize, Tensor)>),
            Replay(Arc<Captured>),
            Eager,
        }
        let next = {
            let mut entries = self.entries();
            match entries.iter().position(|(s, _)| *s == sig) {
                None => Next::Warm,
                Some(i) => {
                    // Most recently used last.
                    let entry = entries.remove(i);
                    let next = match &entry.1 {
                        State::Warm(uploads) => Next::Capture(uploads.clone()),
                        State::Captured(c) => Next::Replay(c.clone()),
                        State::Eager(_) => Next::Eager,
                    };
                    entries.push(entry);
                    next
                }
            }
        };
        match next {
            Next::Eager => self.eager(graph, feeds, &run, false).map(|(v, _)| v),
            Next::Replay(c) => self.replay(graph, &c, &feeds, &run),
            Next::Warm => {
                let (values, uploads) = self.eager(graph, feeds, &run, true)?;
                self.set(sig, State::Warm(uploads));
                Ok(values)
            }
            Next::Capture(uploads) => {
                let blocked = graph.steps.iter().find_map(|s| match &s.kind {
                    StepKind::Device(d) => match d.kernel.capture_support() {
                        CaptureSupport::Supported => None,
                        CaptureSupport::Unsupported { reason } => {
                            Some(format!("{}: {reason}", s.name))
                        }
                    },
                    _ => None,
                });
                if let Some(reason) = blocked {
                    self.set(sig, State::Eager(reason));
                    return self.eager(graph, feeds, &run, false).map(|(v, _)| v);
                }
                match self.capture(graph, &feeds, &run, uploads) {
                    Ok(c) => {
                        let c = Arc::new(c);
                        let values = self.replay(graph, &c, &feeds, &run);
                        self.set(sig, State::Captured(c));
                        values
                    }
                    Err(e) => {
                        self.set(sig, State::Eager(format!("the capture failed: {e}")));
                        self.eager(graph, feeds, &run, false).map(|(v, _)| v)
                    }
                }
            }
        }
    }

    fn set(&self, sig: Signature, state: State) {
        let mut entries = self.entries();
        entries.retain(|(s, _)| *s != sig);
        entries.push((sig, state));
        while entries.len() > MAX_GRAPHS {
            entries.remove(0);
        }
    }

    /// A run node by node; with `record`, also the host values device steps copied over.
    fn eager<'a>(
        &self,
        graph: &'a CompiledGraph,
        feeds: Vec<Option<Cow<'a, Value>>>,
        run: &Run<'_>,
        record: bool,
    ) -> SessionResult<(Vec<Fetched>, Uploads)> {
        let _shared = self.device.read().unwrap_or_else(|e| e.into_inner());
        let mut slots = Slots::new(graph);
        slots.feed(graph, feeds, &[]);
        slots.feed_device(graph, run.device);
        slots.bind_into(graph, run.device, run.places);
        if record {
            slots.uploads = Some(Vec::new());
        }
        execute_steps(graph, &mut slots, None)?;
        let values = slots.fetch_outputs(graph, run.places)?;
        Ok((values, slots.uploads.take().unwrap_or_default()))
    }

    /// Records one run of `graph` into a device graph (nothing is computed yet).
    fn capture(
        &self,
        graph: &CompiledGraph,
        feeds: &[Option<Cow<'_, Value>>],
        run: &Run<'_>,
        uploads: Vec<(usize, Tensor)>,
    ) -> SessionResult<Captured> {
        let _alone = self.device.write().unwrap_or_else(|e| e.into_inner());
        let mut slots = Slots::new(graph);
        // The feeds go into buffers the graph keeps; the inputs' initializers when not fed.
        let mut inputs = Vec::new();
        for (i, ((io, default), feed)) in graph
            .inputs
            .iter()
            .zip(&graph.input_defaults)
            .zip(feeds)
            .enumerate()
        {
            if let Some(Some(t)) = run.device.get(i) {
                // A feed an output is written into: the graph works in its memory (its
                // address is part of the signature). Any other: a buffer of the graph's.
                let buffer = if run.places.contains(&Place::Into(i)) {
                    t.clone()
                } else {
                    Arc::new(t.duplicate()?)
                };
                slots.device[io.slot] = Some(buffer.clone());
                inputs.push((i, buffer));
                continue;
            }
            let value = feed.as_deref().or(default.as_ref());
            if let Some(Value::Tensor(t)) = value {
                let buffer = Arc::new(DeviceTensor::upload(&self.ep, t)?);
                slots.device[io.slot] = Some(buffer.clone());
                inputs.push((i, buffer));
            }
        }
        // Host values computed in the run that device steps read (the feeds are in place).
        let mut uploads = uploads;
        uploads.retain(|(slot, _)| !graph.inputs.iter().any(|io| io.slot == *slot));
        let mut copied = Vec::new();
        for (slot, t) in &uploads {
            let buffer = Arc::new(DeviceTensor::upload(&self.ep, t)?);
            slots.device[*slot] = Some(buffer.clone());
            copied.push(buffer);
        }
        slots.expected = uploads;
        slots.bind_into(graph, run.device, run.places);
        self.ep.synchronize()?;

        self.ep.begin_capture()?;
        let ran = execute_steps(graph, &mut slots, None);
        if let Err(e) = ran {
            self.ep.abort_capture();
            return Err(e);
        }
        let mut outputs = Vec::with_capacity(graph.outputs.len());
        for io in &graph.outputs {
            let input = graph.inputs.iter().position(|i| i.slot == io.slot);
            let source = match (
                input,
                &slots.device[io.slot],
                slots.host[io.slot].as_deref(),
            ) {
                (Some(i), _, _) => OutputSource::Input(i),
                (None, _, Some(v)) if graph.host_class[io.slot] || is_constant(graph, io.slot) => {
                    OutputSource::Fixed(v.clone())
                }
                (None, Some(t), _) => OutputSource::Device(t.clone()),
                _ => {
                    self.ep.abort_capture();
                    return Err(SessionError::invalid(format!(
                        "graph output '{}' was not produced on the device",
                        io.name
                    )));
                }
            };
            outputs.push(source);
        }
        drop(slots);
        let device_graph = self.ep.end_capture()?;
        Ok(Captured {
            lock: Mutex::new(()),
            inputs,
            _copied: copied,
            outputs,
            replays: Default::default(),
            graph: device_graph,
        })
    }

    /// Copies the feeds in, replays the graph and copies the outputs out (to the host, or
    /// into new device tensors: the graph's own buffers are overwritten by the next replay).
    fn replay(
        &self,
        graph: &CompiledGraph,
        c: &Captured,
        feeds: &[Option<Cow<'_, Value>>],
        run: &Run<'_>,
    ) -> SessionResult<Vec<Fetched>> {
        let _shared = self.device.read().unwrap_or_else(|e| e.into_inner());
        let _one = c.lock.lock().unwrap_or_else(|e| e.into_inner());
        // Device feeds: one batch of device copies into the graph's buffers (none for the
        // feeds outputs are written into: the graph's buffer is the feed).
        let device_in: Vec<(&DeviceTensor, &DeviceTensor)> = c
            .inputs
            .iter()
            .filter_map(|(i, buffer)| match run.device.get(*i) {
                Some(Some(t)) => Some((&**t, &**buffer)),
                _ => None,
            })
            .collect();
        DeviceTensor::copy_pairs(&device_in)?;
        for (i, buffer) in &c.inputs {
            if let Some(Some(_)) = run.device.get(*i) {
                continue;
            }
            let value = feeds[*i].as_deref().or(graph.input_defaults[*i].as_ref());
            if let Some(Value::Tensor(t)) = value {
                buffer.overwrite(t)?;
            }
        }
        c.graph.replay()?;
        c.replays.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut values = Vec::with_capacity(c.outputs.len());
        let (mut synced, mut on_device) = (false, false);
        for (k, source) in c.outputs.iter().enumerate() {
            let place = run.places.get(k).copied().unwrap_or(Place::Host);
            let name = &graph.outputs[k].name;
            values.push(match (place, source) {
                (Place::Skip, _) => Fetched::Skipped,
                (Place::Host, OutputSource::Device(t)) => {
                    synced = true;
                    Fetched::Host(Value::Tensor(t.download()?))
                }
                (Place::Device, OutputSource::Device(t)) => {
                    // Allocated now, copied below in one batch.
                    on_device = true;
                    let copy = DeviceTensor::allocate(&self.ep, t.dtype(), t.shape().to_vec())?;
                    Fetched::Device(Arc::new(copy))
                }
                (Place::Into(i), source) => {
                    let target = match run.device.get(i) {
                        Some(Some(t)) => t.clone(),
                        _ => {
                            return Err(SessionError::invalid(format!(
                                "graph output '{name}' was asked for in an input's memory, and \
                                 that input is not a device value"
                            )))
                        }
                    };
                    match source {
                        // Copied below in one batch (nothing when written in place).
                        OutputSource::Device(t) => check_into(name, t, &target)?,
                        OutputSource::Fixed(Value::Tensor(t)) => target.overwrite(t)?,
                        OutputSource::Input(j) => match run.device.get(*j) {
                            Some(Some(t)) => write_into(name, t, &target)?,
                            _ => {
                                return Err(SessionError::invalid(format!(
                                    "graph output '{name}' passes a host input through, so \
                                     it cannot be written into a device input's memory; ask \
                                     for it on the device"
                                )))
                            }
                        },
                        OutputSource::Fixed(_) => {
                            return Err(SessionError::invalid(format!(
                                "graph output '{name}' is not a tensor of numbers, so it \
                                 cannot be a device value"
                            )))
                        }
                    }
                    Fetched::Device(target)
                }
                (Place::Host, OutputSource::Fixed(v)) => Fetched::Host(v.clone()),
                (Place::Device, OutputSource::Fixed(Value::Tensor(t))) => {
                    Fetched::Device(Arc::new(DeviceTensor::upload(&self.ep, t)?))
                }
                (Place::Device, OutputSource::Fixed(_)) => {
                    return Err(SessionError::invalid(format!(
                        "graph output '{name}' is not a tensor of numbers, so it cannot be a \
                         device value"
                    )))
                }
                (Place::Host | Place::Device, OutputSource::Input(i)) => {
                    match (place, run.device.get(*i)) {
                        (Place::Device, Some(Some(t))) => Fetched::Device(t.clone()),
                        (Place::Host, Some(Some(t))) => {
                            synced = true;
                            Fetched::Host(Value::Tensor(t.download()?))
                        }
                        _ => {
                            let v = feeds[*i]
                                .as_deref()
                                .or(graph.input_defaults[*i].as_ref())
                                .cloned()
                                .ok_or_else(|| {
                                    SessionError::invalid(format!(
                                        "graph output '{name}' is an input that was not fed"
                                    ))
                                })?;
                            match (place, v) {
                                (Place::Device, Value::Tensor(t)) => {
                                    Fetched::Device(Arc::new(DeviceTensor::upload(&self.ep, &t)?))
                                }
                                (_, v) => Fetched::Host(v),
                            }
                        }
                    }
                }
            });
        }
        let device_out: Vec<(&DeviceTensor, &DeviceTensor)> = c
            .outputs
            .iter()
            .zip(&values)
            .filter_map(|(source, value)| match (source, value) {
                (OutputSource::Device(t), Fetched::Device(copy)) => Some((&**t, &**copy)),
                _ => None,
            })
            .collect();
        DeviceTensor::copy_pairs(&device_out)?;
        if !synced && !on_device {
            // Report a device fault of the replay even when no output comes from the device.
            // (Outputs left on the device are the caller's to synchronize: a bound run does
            // not wait for the device.)
            self.ep.synchronize()?;
        }
        Ok(values)
    }
}

/// A run's device feeds and where its outputs go.
struct Run<'a> {
    device: &'a [Option<Arc<DeviceTensor>>],
    places: &'a [Place],
}

fn is_constant(graph: &CompiledGraph, slot: usize) -> bool {
    graph.constants.iter().any(|(s, _)| *s == slot)
}

/// The feeds' signature, or `None` when a run cannot be recorded (a feed that is not a
/// tensor the device can hold).
fn signature(
    graph: &CompiledGraph,
    feeds: &[Option<Cow<'_, Value>>],
    device: &[Option<Arc<DeviceTensor>>],
    places: &[Place],
) -> Option<Signature> {
    let written = places
        .iter()
        .filter_map(|p| match *p {
            Place::Into(i) => Some((i, device.get(i)?.as_ref()?.device_ptr() as usize)),
            _ => None,
        })
        .collect();
    let feeds = graph
        .inputs
        .iter()
        .zip(&graph.input_defaults)
        .zip(feeds)
        .enumerate()
        .map(|(i, ((_, default), feed))| {
            if let Some(Some(t)) = device.get(i) {
                return Some(Some((t.dtype(), t.shape().to_vec())));
            }
            match feed.as_deref().or(default.as_ref()) {
                None => Some(None),
                Some(Value::Tensor(t)) if placeable(t) => {
                    Some(Some((t.dtype(), t.shape().to_vec())))
                }
                Some(_) => None,
            }
        })
        .collect::<Option<Vec<_>>>()?;
    Some((feeds, written))
}

/// An output's device value fits the feed it is written into.
fn check_into(name: &str, value: &DeviceTensor, target: &DeviceTensor) -> SessionResult<()> {
    if value.dtype() == target.dtype() && value.shape() == target.shape() {
        return Ok(());
    }
    // The same message as an eager run's.
    write_into(name, value, target)
}
