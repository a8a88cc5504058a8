//! `onnx_runtime_rs._native`: the Rust half of the `onnx_runtime_rs` Python package.
//!
//! The Python half (`python/onnx_runtime_rs`) is the API onnxruntime users write
//! (`InferenceSession`, `SessionOptions`, the backend); this module is what it calls: load and
//! build a session (the GIL released), describe its inputs, outputs and metadata, and run it
//! (the GIL released) on values passed as small tagged tuples, which keeps NumPy out of the
//! Rust side (no NumPy C API, so one abi3 wheel serves every CPython from 3.9 on):
//!
//! | tag | fields | value |
//! | --- | --- | --- |
//! | `"t"` | onnx dtype code, shape, address, byte length, owner | a tensor read in place at the address; the owner (the NumPy array) is kept alive while the runtime holds the memory; packed little-endian (sub-byte types two or four to a byte) |
//! | `"s"` | shape, list of str | a string tensor |
//! | `"q"` | onnx dtype code, list of tensors | a sequence of tensors |
//! | `"o"` | a value or `None` | an optional |
//! | `"m"` | keys tensor, values tensor | a map |
//! | `"ms"` | list of (keys, values) | a sequence of maps (outputs only) |
//!
//! Outputs come back in the same form, except that a tensor's fields are dtype code, shape and
//! a `bytearray` holding a copy of its bytes (so the array made from it is writable and owns
//! its memory).
//!
//! `NativeValue` (value.rs) is the other form a value takes: a Python object holding a host
//! value or a tensor in CUDA device memory, for `OrtValue`, IO binding
//! (`NativeSession::run_bound`) and DLPack (dlpack.rs), which shares memory with NumPy,
//! PyTorch or CuPy without a copy.

mod dlpack;
mod value;

use onnx_runtime_ep_api::{EpError, ExecutionProvider};
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::{DataType, Dim, ValueType};
use onnx_runtime_loader::{LoadError, Model};
use onnx_runtime_session::{
    CudaGraph, Input, OptimizationLevel, Output, OutputOn, Precision, Session, SessionError,
    SessionOptions,
};
use pyo3::create_exception;
use pyo3::exceptions::{PyException, PyValueError};
use pyo3::prelude::*;
use pyo3::types::{PyByteArray, PyBytes, PyDict, PyList, PyTuple};
use std::path::PathBuf;
use std::sync::Arc;
use value::{NativeValue, Stored};

// onnxruntime's exception classes (onnxruntime.capi.onnxruntime_pybind11_state), by the same
// names and, like them, subclasses of Exception.
create_exception!(onnx_runtime_rs, Fail, PyException);
create_exception!(onnx_runtime_rs, InvalidArgument, PyException);
create_exception!(onnx_runtime_rs, NoSuchFile, PyException);
create_exception!(onnx_runtime_rs, NoModel, PyException);
create_exception!(onnx_runtime_rs, EngineError, PyException);
create_exception!(onnx_runtime_rs, RuntimeException, PyException);
create_exception!(onnx_runtime_rs, InvalidProtobuf, PyException);
create_exception!(onnx_runtime_rs, NotImplemented, PyException);
create_exception!(onnx_runtime_rs, InvalidGraph, PyException);
create_exception!(onnx_runtime_rs, EPFail, PyException);

/// onnxruntime's status codes, as its messages start: `[ONNXRuntimeError] : 2 :
/// INVALID_ARGUMENT : ...`.
#[derive(Clone, Copy)]
enum Code {
    Fail = 1,
    InvalidArgument = 2,
    NoSuchFile = 3,
    RuntimeException = 6,
    InvalidProtobuf = 7,
    NotImplemented = 9,
    InvalidGraph = 10,
    EpFail = 11,
}

fn error(code: Code, message: impl std::fmt::Display) -> PyErr {
    let name = match code {
        Code::Fail => "FAIL",
        Code::InvalidArgument => "INVALID_ARGUMENT",
        Code::NoSuchFile => "NO_SUCHFILE",
        Code::RuntimeException => "RUNTIME_EXCEPTION",
        Code::InvalidProtobuf => "INVALID_PROTOBUF",
        Code::NotImplemented => "NOT_IMPLEMENTED",
        Code::InvalidGraph => "INVALID_GRAPH",
        Code::EpFail => "EP_FAIL",
    };
    let text = format!("[ONNXRuntimeError] : {} : {name} : {message}", code as i32);
    match code {
        Code::Fail => Fail::new_err(text),
        Code::InvalidArgument => InvalidArgument::new_err(text),
        Code::NoSuchFile => NoSuchFile::new_err(text),
        Code::RuntimeException => RuntimeException::new_err(text),
        Code::InvalidProtobuf => InvalidProtobuf::new_err(text),
        Code::NotImplemented => NotImplemented::new_err(text),
        Code::InvalidGraph => InvalidGraph::new_err(text),
        Code::EpFail => EPFail::new_err(text),
    }
}

fn ep_code(e: &EpError) -> Code {
    match e {
        EpError::UnsupportedOp { .. } | EpError::UnsupportedDtype { .. } => Code::NotImplemented,
        EpError::Device { .. } => Code::EpFail,
        _ => Code::RuntimeException,
    }
}

fn session_code(e: &SessionError) -> Code {
    match e {
        SessionError::Load(_) => Code::InvalidProtobuf,
        SessionError::UnsupportedOps(_) => Code::NotImplemented,
        SessionError::InvalidGraph(_) => Code::InvalidGraph,
        SessionError::MissingInput { .. }
        | SessionError::UnknownInput { .. }
        | SessionError::InputMismatch { .. }
        | SessionError::InvalidArgument(_) => Code::InvalidArgument,
        SessionError::Kernel(k) => ep_code(k),
        SessionError::Subgraph { source, .. } => session_code(source),
    }
}

fn session_error(e: SessionError) -> PyErr {
    error(session_code(&e), e)
}

fn load_error(e: LoadError) -> PyErr {
    let code = match &e {
        LoadError::Io { .. } => Code::NoSuchFile,
        LoadError::Decode { .. } => Code::InvalidProtobuf,
        _ => Code::InvalidGraph,
    };
    error(code, e)
}

fn dtype_of(code: i32) -> PyResult<DataType> {
    DataType::from_onnx(code)
        .filter(|d| *d != DataType::Undefined)
        .ok_or_else(|| PyValueError::new_err(format!("unknown ONNX element type code {code}")))
}

/// onnxruntime's name of a type: `tensor(float)`, `seq(tensor(int64))`,
/// `map(string,tensor(float))`, `optional(tensor(float))`.
fn type_string(ty: &ValueType) -> String {
    match ty {
        ValueType::Tensor { dtype, .. } => format!("tensor({dtype})"),
        ValueType::SparseTensor { dtype, .. } => format!("sparse_tensor({dtype})"),
        ValueType::Sequence(inner) => format!("seq({})", type_string(inner)),
        ValueType::Optional(inner) => format!("optional({})", type_string(inner)),
        ValueType::Map { key, value } => format!("map({key},{})", type_string(value)),
    }
}

/// An input or output for Python: (name, type string, dims or None, element dtype code of a
/// tensor (0 otherwise), whether an initializer backs it).
type IoTuple = (String, String, Option<Vec<Py<PyAny>>>, i32, bool);

fn io_tuple(
    py: Python<'_>,
    name: &str,
    ty: &Option<ValueType>,
    has_default: bool,
) -> PyResult<IoTuple> {
    let (type_name, dims, code) = match ty {
        None => ("tensor(undefined)".to_string(), None, 0),
        Some(t) => {
            let (dims, code) = match t {
                ValueType::Tensor { dtype, shape } | ValueType::SparseTensor { dtype, shape } => {
                    let dims = match shape {
                        None => None,
                        Some(s) => Some(
                            s.dims()
                                .iter()
                                .map(|d| match d {
                                    Dim::Static(n) => Ok(n.into_pyobject(py)?.into_any().unbind()),
                                    Dim::Symbolic(s) if s.is_empty() => Ok(py.None()),
                                    Dim::Symbolic(s) => {
                                        Ok(s.into_pyobject(py)?.into_any().unbind())
                                    }
                                })
                                .collect::<PyResult<Vec<_>>>()?,
                        ),
                    };
                    (dims, dtype.onnx_code())
                }
                _ => (None, 0),
            };
            (type_string(t), dims, code)
        }
    };
    Ok((name.to_string(), type_name, dims, code, has_default))
}

/// The memory of a NumPy array (or any object) the runtime reads in place: holding it keeps
/// the array alive.
struct Owner(#[allow(dead_code)] Py<PyAny>);

fn tensor_from_py(t: &Bound<'_, PyTuple>) -> PyResult<Tensor> {
    let tag: String = t.get_item(0)?.extract()?;
    match tag.as_str() {
        "t" => {
            let dtype = dtype_of(t.get_item(1)?.extract()?)?;
            let shape: Vec<usize> = t.get_item(2)?.extract()?;
            let ptr: usize = t.get_item(3)?.extract()?;
            let len: usize = t.get_item(4)?.extract()?;
            let owner: Arc<dyn Send + Sync> = Arc::new(Owner(t.get_item(5)?.unbind()));
            // SAFETY: the Python side passes the address and byte length of a contiguous,
            // aligned array it gives as the owner; holding the owner keeps that memory alive,
            // and nothing here writes it (the tensor copies before any write).
            unsafe { Tensor::from_external(dtype, shape, ptr as *const u8, len, owner) }
                .map_err(PyValueError::new_err)
        }
        "s" => {
            let shape: Vec<usize> = t.get_item(1)?.extract()?;
            let strings: Vec<String> = t.get_item(2)?.extract()?;
            if shape.iter().product::<usize>() != strings.len() {
                return Err(PyValueError::new_err(format!(
                    "string tensor of shape {shape:?} given {} strings",
                    strings.len()
                )));
            }
            Ok(Tensor::from_strings(shape, strings))
        }
        _ => Err(PyValueError::new_err(format!(
            "expected a tensor, got a '{tag}' value"
        ))),
    }
}

fn value_from_py(obj: &Bound<'_, PyAny>) -> PyResult<Value> {
    let t = obj.cast::<PyTuple>()?;
    let tag: String = t.get_item(0)?.extract()?;
    Ok(match tag.as_str() {
        "t" | "s" => Value::Tensor(tensor_from_py(t)?),
        "q" => {
            let dtype = dtype_of(t.get_item(1)?.extract()?)?;
            let items = t.get_item(2)?;
            let items = items
                .cast::<PyList>()?
                .iter()
                .map(|i| tensor_from_py(i.cast::<PyTuple>()?))
                .collect::<PyResult<Vec<_>>>()?;
            Value::Sequence { dtype, items }
        }
        "o" => {
            let inner = t.get_item(1)?;
            if inner.is_none() {
                Value::Optional(None)
            } else {
                Value::Optional(Some(Box::new(value_from_py(&inner)?)))
            }
        }
        "m" => Value::Map {
            keys: tensor_from_py(t.get_item(1)?.cast::<PyTuple>()?)?,
            values: tensor_from_py(t.get_item(2)?.cast::<PyTuple>()?)?,
        },
        _ => return Err(PyValueError::new_err(format!("unknown value tag '{tag}'"))),
    })
}

fn tensor_to_py<'py>(py: Python<'py>, t: &Tensor) -> PyResult<Bound<'py, PyAny>> {
    let shape = t.shape().to_vec();
    if t.dtype() == DataType::String {
        return Ok(("s", shape, t.strings().to_vec())
            .into_pyobject(py)?
            .into_any());
    }
    let bytes = PyByteArray::new(py, t.bytes());
    Ok(("t", t.dtype().onnx_code(), shape, bytes)
        .into_pyobject(py)?
        .into_any())
}

fn value_to_py<'py>(py: Python<'py>, v: &Value) -> PyResult<Bound<'py, PyAny>> {
    Ok(match v {
        Value::Tensor(t) => tensor_to_py(py, t)?,
        Value::Sequence { dtype, items } => {
            let items = items
                .iter()
                .map(|t| tensor_to_py(py, t))
                .collect::<PyResult<Vec<_>>>()?;
            ("q", dtype.onnx_code(), items)
                .into_pyobject(py)?
                .into_any()
        }
        Value::Optional(None) => ("o", py.None()).into_pyobject(py)?.into_any(),
        Value::Optional(Some(inner)) => {
            ("o", value_to_py(py, inner)?).into_pyobject(py)?.into_any()
        }
        Value::Map { keys, values } => ("m", tensor_to_py(py, keys)?, tensor_to_py(py, values)?)
            .into_pyobject(py)?
            .into_any(),
        Value::MapSequence(maps) => {
            let maps = maps
                .iter()
                .map(|(k, v)| Ok((tensor_to_py(py, k)?, tensor_to_py(py, v)?)))
                .collect::<PyResult<Vec<_>>>()?;
            ("ms", maps).into_pyobject(py)?.into_any()
        }
    })
}

enum Source {
    Path(PathBuf),
    Bytes(Vec<u8>),
}

enum BuildError {
    Load(LoadError),
    Session(SessionError),
    Device(EpError),
}

/// A built session (`onnx_runtime_rs.InferenceSession` wraps one).
#[pyclass(frozen, module = "onnx_runtime_rs._native")]
struct NativeSession {
    session: Session,
    /// The session's own thread pool (`intra_op_num_threads`); `None` runs on the global one.
    pool: Option<rayon::ThreadPool>,
    /// Whether a CUDA device runs the nodes it has kernels for.
    on_device: bool,
    meta: Meta,
    /// Which of `session.inputs()` have an initializer (may be left out of a feed).
    has_default: Vec<bool>,
}

struct Meta {
    producer_name: String,
    producer_version: String,
    domain: String,
    model_version: i64,
    doc_string: String,
    graph_name: String,
    graph_doc_string: String,
    metadata_props: Vec<(String, String)>,
}

#[pymethods]
impl NativeSession {
    /// Loads `model` (a path, or the bytes of a model) and builds the session with the GIL
    /// released. `optimization`: none, basic or all; `threads`: the size of the session's own
    /// thread pool (0: the process-wide pool, one thread per core); `device_id`: run on that
    /// CUDA device (the nodes it has kernels for); `precision`: fp32 (as written), fp16 or
    /// bf16 (a float32 model converted at load); `cuda_graph`: auto or off; `tf32`: float32
    /// products on TF32 tensor cores.
    #[new]
    #[pyo3(signature = (
        model, optimization="all", spin=true, threads=0, device_id=None, precision="fp32",
        cuda_graph="auto", tf32=false
    ))]
    #[allow(clippy::too_many_arguments)]
    fn new(
        py: Python<'_>,
        model: &Bound<'_, PyAny>,
        optimization: &str,
        spin: bool,
        threads: usize,
        device_id: Option<usize>,
        precision: &str,
        cuda_graph: &str,
        tf32: bool,
    ) -> PyResult<Self> {
        let optimization: OptimizationLevel =
            optimization.parse().map_err(PyValueError::new_err)?;
        let precision: Precision = precision.parse().map_err(PyValueError::new_err)?;
        let cuda_graph = match cuda_graph {
            "auto" => CudaGraph::Auto,
            "off" => CudaGraph::Off,
            other => {
                return Err(PyValueError::new_err(format!(
                    "cuda_graph must be 'auto' or 'off', got '{other}'"
                )))
            }
        };
        let source = match model.cast::<PyBytes>() {
            Ok(b) => Source::Bytes(b.as_bytes().to_vec()),
            Err(_) => Source::Path(model.extract::<PathBuf>()?),
        };
        let pool = if threads > 0 {
            Some(
                rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .map_err(|e| {
                        error(Code::Fail, format!("cannot start {threads} threads: {e}"))
                    })?,
            )
        } else {
            None
        };
        let built = py.detach(move || -> Result<(Meta, Session), BuildError> {
            let model = match &source {
                Source::Path(p) => Model::load(p),
                Source::Bytes(b) => Model::from_bytes(b),
            }
            .map_err(BuildError::Load)?;
            let device = match device_id {
                None => None,
                Some(n) => Some(Arc::new(
                    onnx_runtime_ep_cuda::CudaExecutionProvider::with_options(
                        onnx_runtime_ep_cuda::CudaOptions { device: n, tf32 },
                    )
                    .map_err(BuildError::Device)?,
                ) as Arc<dyn ExecutionProvider>),
            };
            let options = SessionOptions {
                device,
                optimization,
                spin,
                precision,
                cuda_graph,
                ..Default::default()
            };
            let meta = Meta {
                producer_name: model.producer_name.clone(),
                producer_version: model.producer_version.clone(),
                domain: model.domain.clone(),
                model_version: model.model_version,
                doc_string: model.doc_string.clone(),
                graph_name: model.graph.name.clone(),
                graph_doc_string: model.graph.doc_string.clone(),
                metadata_props: model.metadata_props.clone(),
            };
            let session = Session::from_model(model, options).map_err(BuildError::Session)?;
            Ok((meta, session))
        });
        let (meta, session) = built.map_err(|e| match e {
            BuildError::Load(e) => load_error(e),
            BuildError::Session(e) => session_error(e),
            BuildError::Device(e) => error(
                Code::EpFail,
                format!("the CUDA execution provider is not available: {e}"),
            ),
        })?;
        let required: Vec<String> = session.required_inputs().map(|i| i.name.clone()).collect();
        let has_default = session
            .inputs()
            .iter()
            .map(|i| !required.contains(&i.name))
            .collect();
        Ok(NativeSession {
            session,
            pool,
            on_device: device_id.is_some(),
            meta,
            has_default,
        })
    }

    /// Every graph input: (name, type, dims or None, tensor dtype code or 0, has an
    /// initializer).
    fn inputs(&self, py: Python<'_>) -> PyResult<Vec<IoTuple>> {
        self.session
            .inputs()
            .iter()
            .zip(&self.has_default)
            .map(|(io, d)| io_tuple(py, &io.name, &io.ty, *d))
            .collect()
    }

    fn outputs(&self, py: Python<'_>) -> PyResult<Vec<IoTuple>> {
        self.session
            .outputs()
            .iter()
            .map(|io| io_tuple(py, &io.name, &io.ty, false))
            .collect()
    }

    /// The model's metadata as a dict.
    fn metadata<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyDict>> {
        let m = &self.meta;
        let d = PyDict::new(py);
        d.set_item("producer_name", &m.producer_name)?;
        d.set_item("producer_version", &m.producer_version)?;
        d.set_item("domain", &m.domain)?;
        d.set_item("model_version", m.model_version)?;
        d.set_item("doc_string", &m.doc_string)?;
        d.set_item("graph_name", &m.graph_name)?;
        d.set_item("graph_doc_string", &m.graph_doc_string)?;
        d.set_item("metadata_props", m.metadata_props.clone())?;
        Ok(d)
    }

    /// Whether the session runs nodes on a CUDA device, and how many of the main graph's
    /// nodes run there.
    fn device(&self) -> (bool, usize) {
        (self.on_device, self.session.device_nodes())
    }

    /// Runs the model with the GIL released on `feeds` ((name, value) pairs) and returns the
    /// outputs at `outputs` (indices into `outputs()`; all when None).
    #[pyo3(signature = (feeds, outputs=None))]
    fn run<'py>(
        &self,
        py: Python<'py>,
        feeds: Vec<(String, Bound<'py, PyAny>)>,
        outputs: Option<Vec<usize>>,
    ) -> PyResult<Vec<Bound<'py, PyAny>>> {
        let values = feeds
            .iter()
            .map(|(n, v)| Ok((n.as_str(), value_from_py(v)?)))
            .collect::<PyResult<Vec<_>>>()?;
        let result = py.detach(|| match &self.pool {
            Some(pool) => pool.install(|| self.session.run(&values)),
            None => self.session.run(&values),
        });
        let mut result = result.map_err(session_error)?;
        let wanted = outputs.unwrap_or_else(|| (0..result.len()).collect());
        let out = wanted
            .iter()
            .map(|&i| match result.get(i) {
                Some((_, v)) => value_to_py(py, v),
                None => Err(PyValueError::new_err(format!("no output {i}"))),
            })
            .collect::<PyResult<Vec<_>>>();
        // The outputs and inputs (which may share the arrays' memory) are dropped here, with
        // the thread attached to the interpreter.
        result.clear();
        drop(values);
        out
    }

    /// A bound run (`run_with_iobinding`): `inputs` are (name, value) pairs, host or device
    /// values; `outputs` are (name, on_device, into) triples, in the order the results come
    /// back; `into` names a device input whose memory the output is written into (a KV
    /// cache bound as both past and present: `OutputOn::Into`), or is None.
    /// Device inputs made on another provider (a value made without this session) are
    /// synchronized first so this session's stream reads their final bytes; with
    /// `synchronize` the run waits for the device before returning (onnxruntime's default).
    #[pyo3(signature = (inputs, outputs, synchronize=true))]
    fn run_bound(
        &self,
        py: Python<'_>,
        inputs: Vec<(String, Py<NativeValue>)>,
        outputs: Vec<(String, bool, Option<String>)>,
        synchronize: bool,
    ) -> PyResult<Vec<NativeValue>> {
        let device = self.session.device();
        for (name, v) in &inputs {
            if let Stored::Device(d) = &v.get().stored {
                let Some(ep) = device else {
                    return Err(error(
                        Code::InvalidArgument,
                        format!(
                            "input '{name}' is bound to a value on {}, and the session runs on the CPU only (CPUExecutionProvider); bind a CPU value or build the session with CUDAExecutionProvider",
                            d.device_id()
                        ),
                    ));
                };
                if !Arc::ptr_eq(d.provider(), ep) {
                    py.detach(|| d.synchronize())
                        .map_err(|e| error(Code::EpFail, e))?;
                }
            }
        }
        if device.is_none() {
            if let Some((name, _, _)) = outputs.iter().find(|(_, on, _)| *on) {
                return Err(error(
                    Code::InvalidArgument,
                    format!(
                        "output '{name}' is bound to a CUDA device, and the session runs on the CPU only (CPUExecutionProvider)"
                    ),
                ));
            }
        }
        let bound: Vec<(&str, Input<'_>)> = inputs
            .iter()
            .map(|(n, v)| {
                let input = match &v.get().stored {
                    Stored::Host(h) => Input::Host(h),
                    Stored::Device(d) => Input::Device(d),
                };
                (n.as_str(), input)
            })
            .collect();
        let wanted: Vec<(&str, OutputOn)> = outputs
            .iter()
            .map(|(n, on, into)| {
                let place = match (into, on) {
                    (Some(input), _) => OutputOn::Into(input),
                    (None, true) => OutputOn::Device,
                    (None, false) => OutputOn::Host,
                };
                (n.as_str(), place)
            })
            .collect();
        let result = py.detach(|| -> Result<_, SessionError> {
            let out = match &self.pool {
                Some(pool) => pool.install(|| self.session.run_bound(&bound, &wanted)),
                None => self.session.run_bound(&bound, &wanted),
            }?;
            if synchronize {
                self.session.synchronize()?;
            }
            Ok(out)
        });
        let result = result.map_err(session_error)?;
        drop(bound);
        Ok(result
            .into_iter()
            .map(|(_, o)| match o {
                Output::Host(v) => NativeValue::host(v, true),
                Output::Device(d) => NativeValue {
                    stored: Stored::Device(d),
                    writable: true,
                },
            })
            .collect())
    }

    /// Waits for the work the session queued on its device (nothing on the CPU).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        py.detach(|| self.session.synchronize())
            .map_err(session_error)
    }
}

/// Whether the CUDA driver library can be loaded here (so a CUDA session may be asked for).
#[pyfunction]
fn cuda_available() -> bool {
    onnx_runtime_ep_cuda::libs::ensure_driver().is_ok()
}

#[pymodule]
fn _native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    let py = m.py();
    m.add_class::<NativeSession>()?;
    m.add_class::<NativeValue>()?;
    m.add_function(wrap_pyfunction!(cuda_available, m)?)?;
    m.add_function(wrap_pyfunction!(value::cuda_stream, m)?)?;
    m.add("Fail", py.get_type::<Fail>())?;
    m.add("InvalidArgument", py.get_type::<InvalidArgument>())?;
    m.add("NoSuchFile", py.get_type::<NoSuchFile>())?;
    m.add("NoModel", py.get_type::<NoModel>())?;
    m.add("EngineError", py.get_type::<EngineError>())?;
    m.add("RuntimeException", py.get_type::<RuntimeException>())?;
    m.add("InvalidProtobuf", py.get_type::<InvalidProtobuf>())?;
    m.add("NotImplemented", py.get_type::<NotImplemented>())?;
    m.add("InvalidGraph", py.get_type::<InvalidGraph>())?;
    m.add("EPFail", py.get_type::<EPFail>())?;
    Ok(())
}
