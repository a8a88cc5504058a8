//! [`Session`]: a model compiled once and run many times, from any number of threads.

use crate::capture::{CaptureReport, CudaGraph, GraphCache};
use crate::compile::{CompiledGraph, Compiler};
use crate::device::DeviceTensor;
use crate::error::{MissingOp, SessionError, SessionResult};
use crate::exec::{run_graph_bound, Fetched, Place};
use crate::optimize::OptimizationLevel;
use crate::precision::{Precision, PrecisionReport};
use crate::profile::Profile;
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ep_cpu::{CpuRegistry, Value};
use onnx_runtime_ir::{Dim, Graph, ValueType};
use std::borrow::Cow;
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// How a session is built.
#[derive(Clone)]
pub struct SessionOptions {
    /// An accelerator (e.g. `onnx_runtime_ep_cuda::CudaExecutionProvider`) that runs every
    /// node it has a kernel for; the CPU runs the rest, and values are copied between them
    /// where one side reads what the other wrote. Inputs and outputs stay host values.
    pub device: Option<Arc<dyn ExecutionProvider>>,
    /// The CPU kernels to use; `None` for [`onnx_runtime_ep_cpu::registry`]. A custom registry
    /// lets an application add its own ops.
    pub registry: Option<&'static CpuRegistry>,
    /// Graph rewrites before kernels are built ([`OptimizationLevel::All`] by default);
    /// [`OptimizationLevel::None`] runs the graph exactly as written.
    pub optimization: OptimizationLevel,
    /// Whether the thread pool's idle workers poll for work while a run is in progress
    /// (default) rather than sleep. Waking a sleeping worker can take longer than the short
    /// parallel pieces a run is made of; polling costs CPU time on the other cores during
    /// runs. Turn it off when many sessions share a busy machine.
    pub spin: bool,
    /// Whether runs on [`SessionOptions::device`] are recorded into device graphs (CUDA
    /// graphs) and replayed ([`CudaGraph::Auto`] by default; see [`Session::capture_report`]).
    /// No effect without a device.
    pub cuda_graph: CudaGraph,
    /// The element type float32 computation runs in ([`Precision::AsWritten`] by default;
    /// [`Precision::Float16`] / [`Precision::BFloat16`] convert the model at load, see
    /// [`crate::precision`]). Models already in half precision run as written either way.
    pub precision: Precision,
}

impl Default for SessionOptions {
    fn default() -> Self {
        SessionOptions {
            device: None,
            registry: None,
            optimization: OptimizationLevel::default(),
            spin: true,
            cuda_graph: CudaGraph::Auto,
            precision: Precision::AsWritten,
        }
    }
}

/// A graph input or output: its name and the type the model declares for it.
#[derive(Clone, Debug, PartialEq)]
pub struct IoInfo {
    pub name: String,
    pub ty: Option<ValueType>,
}

/// A compiled model. `run` takes `&self`, so one session serves concurrent callers; each
/// run has its own value table.
pub struct Session {
    pub(crate) graph: CompiledGraph,
    inputs: Vec<IoInfo>,
    outputs: Vec<IoInfo>,
    /// Whether each input has an initializer (and so may be left out).
    has_default: Vec<bool>,
    /// [`SessionOptions::spin`].
    spin: bool,
    /// The device graphs, with a device and [`CudaGraph::Auto`].
    graphs: Option<GraphCache>,
    /// What the precision conversion did, when [`SessionOptions::precision`] asked for one.
    precision: Option<PrecisionReport>,
}

impl Session {
    /// Loads and compiles a model file (functions inlined, external data from its folder).
    pub fn from_file(
        path: impl AsRef<std::path::Path>,
        options: SessionOptions,
    ) -> SessionResult<Session> {
        let path = path.as_ref();
        let model = onnx_runtime_loader::Model::load(path)
            .map_err(|e| SessionError::Load(format!("{}: {e}", path.display())))?;
        Self::from_model(model, options)
    }

    /// Compiles a loaded model.
    ///
    /// Models of IR version 3 and earlier list every initializer among the graph inputs;
    /// as in onnxruntime, with optimization on those initializers are constants (not
    /// inputs a caller may feed), so the optimizer can fold them.
    pub fn from_model(
        mut model: onnx_runtime_loader::Model,
        options: SessionOptions,
    ) -> SessionResult<Session> {
        if model.ir_version < 4 && options.optimization != OptimizationLevel::None {
            let g = &mut model.graph;
            let inits = &g.initializers;
            g.inputs.retain(|v| !inits.contains_key(v));
        }
        Self::from_graph(&model.graph, options)
    }

    /// Compiles `graph`: checks that every op has a kernel (naming all that do not at once),
    /// orders the nodes, builds each kernel once and plans when each value is freed.
    pub fn from_graph(graph: &Graph, options: SessionOptions) -> SessionResult<Session> {
        // The standard rewrites see the graph as written, then the precision conversion
        // (when asked), then the device-only rewrites see the converted types.
        let prepared;
        let mut precision = None;
        let graph = match (options.precision.half_type(), options.optimization) {
            (None, OptimizationLevel::None) => graph,
            (to, level) => {
                let mut g = graph.clone();
                let convert = |g: &mut Graph| match to {
                    None => Ok(None),
                    Some(to) => crate::precision::convert(g, to)
                        .map(Some)
                        .map_err(|e| SessionError::invalid(format!("precision conversion: {e}"))),
                };
                let (_, report) = crate::optimize::optimize_around(
                    &mut g,
                    level,
                    registry_of(&options),
                    options.device.as_deref(),
                    convert,
                )?;
                precision = report;
                prepared = g;
                &prepared
            }
        };
        let compiler = compiler_for(graph, &options);
        let missing = unsupported_ops(graph, &options)?;
        if !missing.is_empty() {
            return Err(SessionError::UnsupportedOps(missing));
        }
        let compiled = compiler.compile(graph, &HashMap::new())?;
        if let Some((name, _)) = compiled.captures.first() {
            return Err(SessionError::invalid(format!(
                "value '{name}' is read but never produced: it is not a graph input, an initializer or a node output"
            )));
        }
        let io = |slots: &[crate::compile::IoSlot]| {
            slots
                .iter()
                .map(|s| IoInfo {
                    name: s.name.clone(),
                    ty: s.ty.clone(),
                })
                .collect::<Vec<_>>()
        };
        Ok(Session {
            inputs: io(&compiled.inputs),
            outputs: io(&compiled.outputs),
            has_default: compiled
                .input_defaults
                .iter()
                .map(Option::is_some)
                .collect(),
            spin: options.spin,
            graphs: match (&options.device, options.cuda_graph) {
                (Some(ep), CudaGraph::Auto) if ep.supports_capture() => {
                    Some(GraphCache::new(ep.clone()))
                }
                _ => None,
            },
            graph: compiled,
            precision,
        })
    }

    /// What the precision conversion did ([`SessionOptions::precision`]); `None` when the
    /// model runs as written.
    pub fn precision_report(&self) -> Option<&PrecisionReport> {
        self.precision.as_ref()
    }

    /// The graph inputs, in order (initializers that are also inputs included: they may be
    /// fed to override the stored value).
    pub fn inputs(&self) -> &[IoInfo] {
        &self.inputs
    }

    /// The inputs a caller must feed (those without an initializer).
    pub fn required_inputs(&self) -> impl Iterator<Item = &IoInfo> {
        self.inputs
            .iter()
            .zip(&self.has_default)
            .filter(|(_, d)| !**d)
            .map(|(i, _)| i)
    }

    pub fn outputs(&self) -> &[IoInfo] {
        &self.outputs
    }

    /// How many nodes of the main graph run on [`SessionOptions::device`] (nodes folded into
    /// constants at build time run nowhere and are not counted).
    pub fn device_nodes(&self) -> usize {
        self.graph.device_steps()
    }

    /// With an accelerator ([`SessionOptions::device`]): the main graph's nodes that run on
    /// the host, each with the reason (no kernel for the op at this opset, a dtype or
    /// attribute value the device kernel refuses, control flow). Empty when every node that
    /// runs (nodes folded at build excepted) is on the device.
    pub fn host_nodes(&self) -> &[crate::compile::HostNode] {
        &self.graph.host_nodes
    }

    /// Over every run of this session so far, for the main graph's device nodes: how many
    /// calls ran on the device, and how many the device kernel refused (a dtype it does not
    /// take, a non-tensor input) and the CPU ran instead.
    pub fn device_calls(&self) -> (usize, usize) {
        self.graph.device_calls()
    }

    /// The main graph's device nodes whose device kernel refused some calls so far (the CPU
    /// kernel ran those), each with the number of refused calls and the first one's reason.
    pub fn refused_nodes(&self) -> Vec<crate::RefusedNode> {
        self.graph.refused_nodes()
    }

    /// Which runs are recorded into device graphs: why none can be (the nodes that prevent it,
    /// empty when runs can be), and each input signature seen with its state (`warm` after
    /// its first run, `captured` with its replay count, or `eager` with the reason).
    pub fn capture_report(&self) -> CaptureReport {
        match &self.graphs {
            Some(g) => g.report(&self.graph),
            None => CaptureReport {
                blockers: vec![if self.graph.uses_device {
                    "device graphs are off (SessionOptions::cuda_graph), or the device has none"
                        .into()
                } else {
                    "no node runs on the device".into()
                }],
                signatures: Vec::new(),
            },
        }
    }

    /// Runs the model on `inputs` (by name) and returns every graph output, in order.
    pub fn run(&self, inputs: &[(&str, Value)]) -> SessionResult<Vec<(String, Value)>> {
        self.run_with(inputs, None)
    }

    /// [`Session::run`] that also records how long each node took in `profile` (summed over
    /// every run given the same profile). Timing adds a clock read per node.
    pub fn run_profiled(
        &self,
        inputs: &[(&str, Value)],
        profile: &mut Profile,
    ) -> SessionResult<Vec<(String, Value)>> {
        let out = self.run_with(inputs, Some(&mut *profile))?;
        profile.finish_run();
        Ok(out)
    }

    fn run_with(
        &self,
        inputs: &[(&str, Value)],
        profile: Option<&mut Profile>,
    ) -> SessionResult<Vec<(String, Value)>> {
        let mut feeds: Vec<Option<Cow<'_, Value>>> = vec![None; self.inputs.len()];
        for (name, value) in inputs {
            let i = self.input_index(name)?;
            check_value(&self.inputs[i], value)?;
            feeds[i] = Some(Cow::Borrowed(value));
        }
        let places = vec![Place::Host; self.outputs.len()];
        let values = self.execute(feeds, &[], &places, profile)?;
        self.outputs
            .iter()
            .zip(values)
            .map(|(io, v)| Ok((io.name.clone(), v.into_host(&io.name)?)))
            .collect()
    }

    /// The position of input `name`, or the error that lists the model's inputs.
    pub(crate) fn input_index(&self, name: &str) -> SessionResult<usize> {
        self.inputs
            .iter()
            .position(|io| io.name == name)
            .ok_or_else(|| SessionError::UnknownInput {
                name: name.to_string(),
                known: self
                    .inputs
                    .iter()
                    .map(|io| format!("'{}'", io.name))
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Runs with host `feeds` and device feeds `device` (by input position; checked by the
    /// caller), each output left where `places` says.
    pub(crate) fn execute<'a>(
        &'a self,
        feeds: Vec<Option<Cow<'a, Value>>>,
        device: &[Option<Arc<DeviceTensor>>],
        places: &[Place],
        profile: Option<&mut Profile>,
    ) -> SessionResult<Vec<Fetched>> {
        for (i, ((io, feed), has_default)) in self
            .inputs
            .iter()
            .zip(&feeds)
            .zip(&self.has_default)
            .enumerate()
        {
            let bound = device.get(i).is_some_and(Option::is_some);
            if feed.is_none() && !bound && !has_default && !is_optional(&io.ty) {
                return Err(SessionError::MissingInput {
                    name: io.name.clone(),
                    expected: describe_type(&io.ty),
                });
            }
        }
        match (&self.graphs, profile) {
            (Some(graphs), None) if self.graph.capture_blockers.is_empty() => {
                let graph = &self.graph;
                if rayon::current_thread_index().is_none() {
                    crate::workers::run_on_pool(self.spin, || {
                        graphs.run(graph, feeds, device, places)
                    })
                } else {
                    graphs.run(graph, feeds, device, places)
                }
            }
            (_, profile) => run_graph_bound(&self.graph, feeds, device, places, profile, self.spin),
        }
    }

    /// [`Session::run`] with inputs and outputs keyed by name.
    pub fn run_map(&self, inputs: HashMap<String, Value>) -> SessionResult<HashMap<String, Value>> {
        let pairs: Vec<(&str, Value)> = inputs
            .iter()
            .map(|(k, v)| (k.as_str(), v.clone()))
            .collect();
        Ok(self.run(&pairs)?.into_iter().collect())
    }
}

fn registry_of(options: &SessionOptions) -> &'static CpuRegistry {
    options
        .registry
        .unwrap_or_else(|| onnx_runtime_ep_cpu::registry())
}

fn compiler_for(graph: &Graph, options: &SessionOptions) -> Compiler<'static> {
    let registry = registry_of(options);
    let opsets = graph
        .opset_imports
        .iter()
        .map(|(d, v)| {
            let d = if d == "ai.onnx" { "" } else { d.as_str() };
            (d.to_string(), *v)
        })
        .collect();
    Compiler {
        registry,
        opsets,
        device: options.device.clone(),
    }
}

/// Every (domain, op, opset) of `graph` and its subgraphs that the session cannot run with
/// `options`' registry, without building anything.
pub fn unsupported_ops(graph: &Graph, options: &SessionOptions) -> SessionResult<Vec<MissingOp>> {
    let mut missing = BTreeSet::new();
    compiler_for(graph, options).missing_ops(graph, &mut missing)?;
    Ok(missing.into_iter().collect())
}

fn is_optional(ty: &Option<ValueType>) -> bool {
    matches!(ty, Some(ValueType::Optional(_)))
}

/// A declared type in words, e.g. `float tensor [batch, 3]`.
pub fn describe_type(ty: &Option<ValueType>) -> String {
    match ty {
        None => "a value of undeclared type".into(),
        Some(t) => describe_value_type(t),
    }
}

fn describe_value_type(ty: &ValueType) -> String {
    match ty {
        ValueType::Tensor { dtype, shape } | ValueType::SparseTensor { dtype, shape } => {
            match shape {
                Some(s) => format!("{dtype} tensor {s}"),
                None => format!("{dtype} tensor of any rank"),
            }
        }
        ValueType::Sequence(inner) => format!("sequence of {}", describe_value_type(inner)),
        ValueType::Optional(inner) => format!("optional {}", describe_value_type(inner)),
        ValueType::Map { key, value } => {
            format!("map from {key} to {}", describe_value_type(value))
        }
    }
}

/// A runtime value in words, e.g. `int64 tensor [2, 3]`.
pub fn describe_value(v: &Value) -> String {
    match v {
        Value::Tensor(t) => format!("{} tensor {:?}", t.dtype(), t.shape()),
        Value::Sequence { dtype, items } => format!("sequence of {} {dtype} tensors", items.len()),
        Value::Optional(None) => "an empty optional".into(),
        Value::Optional(Some(v)) => format!("optional {}", describe_value(v)),
        Value::Map { keys, values } => format!(
            "map from {} to {} ({} entries)",
            keys.dtype(),
            values.dtype(),
            keys.numel()
        ),
        Value::MapSequence(maps) => format!("sequence of {} maps", maps.len()),
    }
}

/// Checks a fed value against the declared type: kind, element type, rank and static dims.
pub(crate) fn check_value(io: &IoInfo, value: &Value) -> SessionResult<()> {
    let Some(ty) = &io.ty else { return Ok(()) };
    if type_matches(ty, value) {
        return Ok(());
    }
    Err(SessionError::InputMismatch {
        name: io.name.clone(),
        expected: describe_value_type(ty),
        got: describe_value(value),
    })
}

fn type_matches(ty: &ValueType, value: &Value) -> bool {
    match (ty, value) {
        (ValueType::Tensor { dtype, shape }, Value::Tensor(t)) => {
            if *dtype != t.dtype() && *dtype != onnx_runtime_ir::DataType::Undefined {
                return false;
            }
            match shape {
                None => true,
                Some(s) => {
                    s.rank() == t.rank()
                        && s.dims().iter().zip(t.shape()).all(|(d, &n)| match d {
                            Dim::Static(v) => *v == n,
                            Dim::Symbolic(_) => true,
                        })
                }
            }
        }
        (ValueType::Sequence(inner), Value::Sequence { dtype, items }) => match inner.as_ref() {
            ValueType::Tensor { dtype: d, .. } => {
                (*d == *dtype || *d == onnx_runtime_ir::DataType::Undefined)
                    && items
                        .iter()
                        .all(|t| type_matches(inner, &Value::Tensor(t.clone())))
            }
            _ => true,
        },
        (ValueType::Optional(_), Value::Optional(None)) => true,
        (ValueType::Optional(inner), Value::Optional(Some(v))) => type_matches(inner, v),
        // An optional input may be fed its element directly.
        (ValueType::Optional(inner), v) => type_matches(inner, v),
        (ValueType::Map { key, .. }, Value::Map { keys, .. }) => *key == keys.dtype(),
        (ValueType::Sequence(inner), Value::MapSequence(maps)) => match inner.as_ref() {
            ValueType::Map { key, .. } => maps.iter().all(|(k, _)| k.dtype() == *key),
            _ => false,
        },
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn assert_send_sync<T: Send + Sync>() {}

    #[test]
    fn session_is_send_and_sync() {
        assert_send_sync::<Session>();
    }
}
