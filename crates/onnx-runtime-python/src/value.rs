//! `NativeValue`: the Rust half of `onnx_runtime_rs.OrtValue`, a value on the host (any ONNX
//! value; a tensor may share a NumPy array's or a DLPack producer's memory) or a tensor in
//! CUDA device memory (a session's output, an upload, or another library's tensor read in
//! place through DLPack).
//!
//! Values made without a session (`OrtValue.ortvalue_from_numpy(a, "cuda", 0)`,
//! `OrtValue.from_dlpack(torch_tensor)`) live on one process-wide CUDA provider per device;
//! a session on that device synchronizes that provider before a run reads them (see
//! `NativeSession::run_bound`).

use crate::dlpack::{self, Exported, Imported};
use crate::{dtype_of, error, session_error, tensor_to_py, value_from_py, value_to_py, Code};
use onnx_runtime_ep_api::{DeviceKind, DevicePtr, DevicePtrMut, ExecutionProvider};
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_session::DeviceValue;
use pyo3::exceptions::PyValueError;
use pyo3::prelude::*;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Where a value lives.
pub enum Stored {
    Host(Value),
    Device(DeviceValue),
}

#[pyclass(frozen, module = "onnx_runtime_rs._native")]
pub struct NativeValue {
    pub stored: Stored,
    /// Whether a bound run may write an output into its memory (false for read-only arrays
    /// and for values that copied their source, whose writes would reach no one).
    pub writable: bool,
}

static CUDA: Mutex<Option<HashMap<u32, Arc<CudaExecutionProvider>>>> = Mutex::new(None);

/// The process-wide CUDA provider of device `ordinal` (made on first use).
pub fn cuda_provider(ordinal: u32) -> PyResult<Arc<CudaExecutionProvider>> {
    let mut map = CUDA.lock().unwrap_or_else(|p| p.into_inner());
    let map = map.get_or_insert_with(HashMap::new);
    if let Some(ep) = map.get(&ordinal) {
        return Ok(ep.clone());
    }
    let ep = CudaExecutionProvider::new(ordinal as usize).map_err(|e| {
        error(
            Code::EpFail,
            format!("the CUDA execution provider is not available on device {ordinal}: {e}"),
        )
    })?;
    let ep = Arc::new(ep);
    map.insert(ordinal, ep.clone());
    Ok(ep)
}

fn cuda_dyn(ordinal: u32) -> PyResult<Arc<dyn ExecutionProvider>> {
    Ok(cuda_provider(ordinal)? as Arc<dyn ExecutionProvider>)
}

/// The stream of device `ordinal`'s process-wide provider, as the integer a DLPack producer
/// takes in `__dlpack__(stream=...)` (it orders its work before that stream).
#[pyfunction]
pub fn cuda_stream(ordinal: u32) -> PyResult<usize> {
    Ok(cuda_provider(ordinal)?.runtime().stream_handle() as usize)
}

/// Zeroed host memory the runtime reads as external memory, so a bound run may write its
/// outputs there (never while a run reads it: the binding copies after the run).
struct HostBuf(*mut [u64]);

// SAFETY: the buffer is plain memory owned by this handle.
unsafe impl Send for HostBuf {}
unsafe impl Sync for HostBuf {}

impl Drop for HostBuf {
    fn drop(&mut self) {
        // SAFETY: made by Box::into_raw in `host_zeros`, freed once.
        drop(unsafe { Box::from_raw(self.0) });
    }
}

fn host_zeros(dtype: onnx_runtime_ir::DataType, shape: Vec<usize>) -> PyResult<Tensor> {
    let numel: usize = shape.iter().product();
    let len = dtype.checked_storage_bytes(numel).ok_or_else(|| {
        PyValueError::new_err(format!("a {dtype} tensor has no byte storage to allocate"))
    })?;
    let raw = Box::into_raw(vec![0u64; len.div_ceil(8).max(1)].into_boxed_slice());
    let ptr = raw as *mut u8 as *const u8;
    // SAFETY: `raw` holds at least `len` bytes, 8-aligned, alive while the owner is.
    unsafe { Tensor::from_external(dtype, shape, ptr, len, Arc::new(HostBuf(raw))) }
        .map_err(PyValueError::new_err)
}

fn device_error(e: impl std::fmt::Display) -> PyErr {
    error(Code::EpFail, e)
}

impl NativeValue {
    pub fn host(v: Value, writable: bool) -> Self {
        NativeValue {
            stored: Stored::Host(v),
            writable,
        }
    }

    fn tensor_meta(&self) -> Option<(onnx_runtime_ir::DataType, &[usize])> {
        match &self.stored {
            Stored::Host(Value::Tensor(t)) => Some((t.dtype(), t.shape())),
            Stored::Host(_) => None,
            Stored::Device(d) => Some((d.dtype(), d.shape())),
        }
    }
}

#[pymethods]
impl NativeValue {
    /// A value from the package's tagged form (see the crate docs), on the host or, with
    /// `device_id`, copied to that CUDA device.
    #[staticmethod]
    #[pyo3(signature = (value, device_id=None, writable=false))]
    fn from_host(
        value: &Bound<'_, PyAny>,
        device_id: Option<u32>,
        writable: bool,
    ) -> PyResult<Self> {
        let v = value_from_py(value)?;
        let Some(ordinal) = device_id else {
            return Ok(NativeValue::host(v, writable));
        };
        let Value::Tensor(t) = &v else {
            return Err(PyValueError::new_err(format!(
                "only tensors can be placed on cuda:{ordinal}, not a {}",
                v.kind_name()
            )));
        };
        if t.dtype() == onnx_runtime_ir::DataType::String {
            return Err(PyValueError::new_err(
                "string tensors live on the host only, not on a CUDA device",
            ));
        }
        let d = DeviceValue::upload(&cuda_dyn(ordinal)?, t).map_err(session_error)?;
        Ok(NativeValue {
            stored: Stored::Device(d),
            writable: true,
        })
    }

    /// A zero-filled tensor of ONNX type `code` and `shape`, on the host or a CUDA device.
    #[staticmethod]
    #[pyo3(signature = (code, shape, device_id=None))]
    fn zeros(code: i32, shape: Vec<usize>, device_id: Option<u32>) -> PyResult<Self> {
        let dtype = dtype_of(code)?;
        let t = host_zeros(dtype, shape)?;
        let stored = match device_id {
            None => Stored::Host(Value::Tensor(t)),
            Some(n) => {
                Stored::Device(DeviceValue::upload(&cuda_dyn(n)?, &t).map_err(session_error)?)
            }
        };
        Ok(NativeValue {
            stored,
            writable: true,
        })
    }

    /// A tensor over memory at `address` the caller owns (`IOBinding.bind_input` with a
    /// buffer pointer, as in onnxruntime): nothing is copied and nothing keeps the memory
    /// alive but `owner` (when given); the caller keeps it valid while the value is used.
    #[staticmethod]
    #[pyo3(signature = (code, shape, address, device_id=None, owner=None))]
    fn from_address(
        code: i32,
        shape: Vec<usize>,
        address: usize,
        device_id: Option<u32>,
        owner: Option<Py<PyAny>>,
    ) -> PyResult<Self> {
        let dtype = dtype_of(code)?;
        let numel: usize = shape.iter().product();
        let len = dtype.checked_storage_bytes(numel).ok_or_else(|| {
            PyValueError::new_err(format!("a {dtype} tensor cannot be bound by address"))
        })?;
        if address == 0 && len > 0 {
            return Err(PyValueError::new_err("buffer_ptr is 0 (a null address)"));
        }
        let keep: Arc<dyn Send + Sync> = Arc::new(owner);
        let stored = match device_id {
            // SAFETY: the caller's promise (the API is onnxruntime's raw-pointer binding).
            None => Stored::Host(Value::Tensor(
                unsafe { Tensor::from_external(dtype, shape, address as *const u8, len, keep) }
                    .map_err(PyValueError::new_err)?,
            )),
            Some(n) => Stored::Device(
                // SAFETY: as above, for device memory on cuda:n.
                unsafe {
                    DeviceValue::from_raw(&cuda_dyn(n)?, dtype, shape, address as *const _, keep)
                }
                .map_err(session_error)?,
            ),
        };
        Ok(NativeValue {
            stored,
            writable: true,
        })
    }

    /// Takes the tensor of a DLPack capsule (see `dlpack::import`).
    #[staticmethod]
    fn from_dlpack(capsule: &Bound<'_, PyAny>) -> PyResult<Self> {
        let got = dlpack::import(capsule, cuda_dyn)?;
        let stored = match got.value {
            Imported::Host(t) => Stored::Host(Value::Tensor(t)),
            Imported::Device(d) => Stored::Device(d),
        };
        Ok(NativeValue {
            stored,
            writable: !got.read_only,
        })
    }

    fn is_tensor(&self) -> bool {
        self.tensor_meta().is_some()
    }

    /// The value's kind: tensor, sequence, map, optional or map sequence.
    fn kind(&self) -> &'static str {
        match &self.stored {
            Stored::Host(v) => v.kind_name(),
            Stored::Device(_) => "tensor",
        }
    }

    /// onnxruntime's type string of the value: `tensor(float)`, `seq(tensor(int64))`,
    /// `map(string,tensor(float))`, `optional(...)`.
    fn type_string(&self) -> String {
        fn of(v: &Value) -> String {
            match v {
                Value::Tensor(t) => format!("tensor({})", t.dtype()),
                Value::Sequence { dtype, .. } => format!("seq(tensor({dtype}))"),
                Value::Map { keys, values } => {
                    format!("map({},tensor({}))", keys.dtype(), values.dtype())
                }
                Value::Optional(Some(inner)) => format!("optional({})", of(inner)),
                Value::Optional(None) => "optional(undefined)".into(),
                Value::MapSequence(maps) => match maps.first() {
                    Some((k, v)) => format!("seq(map({},tensor({})))", k.dtype(), v.dtype()),
                    None => "seq(map(undefined))".into(),
                },
            }
        }
        match &self.stored {
            Stored::Host(v) => of(v),
            Stored::Device(d) => format!("tensor({})", d.dtype()),
        }
    }

    /// (ONNX element type code, shape) of a tensor; None otherwise.
    fn tensor_type(&self) -> Option<(i32, Vec<usize>)> {
        self.tensor_meta().map(|(d, s)| (d.onnx_code(), s.to_vec()))
    }

    /// ("cpu", 0) or ("cuda", ordinal).
    fn device(&self) -> (&'static str, u32) {
        match &self.stored {
            Stored::Host(_) => ("cpu", 0),
            Stored::Device(d) => match d.device_id().kind {
                DeviceKind::Cuda => ("cuda", d.device_id().ordinal),
                DeviceKind::Cpu => ("cpu", 0),
            },
        }
    }

    fn writable(&self) -> bool {
        self.writable
    }

    /// The address of a tensor's first element (host or device memory).
    fn data_ptr(&self) -> PyResult<usize> {
        match &self.stored {
            Stored::Host(Value::Tensor(t)) if t.dtype() != onnx_runtime_ir::DataType::String => {
                Ok(t.bytes().as_ptr() as usize)
            }
            Stored::Host(v) => Err(PyValueError::new_err(format!(
                "a {} value has no data pointer",
                if matches!(v, Value::Tensor(_)) {
                    "string tensor"
                } else {
                    v.kind_name()
                }
            ))),
            Stored::Device(d) => Ok(d.data_ptr() as usize),
        }
    }

    /// The value in the package's tagged form, on the host (a device tensor is copied).
    fn to_py<'py>(&self, py: Python<'py>) -> PyResult<Bound<'py, PyAny>> {
        match &self.stored {
            Stored::Host(v) => value_to_py(py, v),
            Stored::Device(d) => {
                let t = py.detach(|| d.to_host()).map_err(device_error)?;
                tensor_to_py(py, &t)
            }
        }
    }

    /// A DLPack capsule sharing the tensor's memory (`versioned`: a DLPack 1.0 capsule).
    #[pyo3(signature = (versioned=false))]
    fn dlpack(&self, py: Python<'_>, versioned: bool) -> PyResult<Py<PyAny>> {
        let e = match &self.stored {
            Stored::Host(Value::Tensor(t)) => Exported::Host(t.clone()),
            Stored::Host(v) => {
                return Err(PyValueError::new_err(format!(
                    "a {} value cannot be exported by DLPack, only tensors can",
                    v.kind_name()
                )))
            }
            Stored::Device(d) => Exported::Device(d.clone()),
        };
        dlpack::export(py, e, versioned)
    }

    /// Waits for the device work that writes the value (nothing for a host value).
    fn synchronize(&self, py: Python<'_>) -> PyResult<()> {
        match &self.stored {
            Stored::Device(d) => py.detach(|| d.synchronize()).map_err(device_error),
            Stored::Host(_) => Ok(()),
        }
    }

    /// Copies this tensor into `dst`'s memory (a bound output's own buffer): same element
    /// type and shape, `dst` writable. Waits for the copy.
    fn copy_into(&self, py: Python<'_>, dst: &NativeValue, name: &str) -> PyResult<()> {
        let (Some(src_ty), Some(dst_ty)) = (self.tensor_meta(), dst.tensor_meta()) else {
            return Err(PyValueError::new_err(format!(
                "output '{name}' is not a tensor, so it cannot go into a bound buffer"
            )));
        };
        if src_ty != dst_ty {
            return Err(error(
                Code::InvalidArgument,
                format!(
                    "output '{name}' is a {} tensor of shape {:?}, and the buffer bound for it \
                     holds a {} tensor of shape {:?}",
                    src_ty.0, src_ty.1, dst_ty.0, dst_ty.1
                ),
            ));
        }
        if !dst.writable {
            return Err(error(
                Code::InvalidArgument,
                format!("the buffer bound for output '{name}' is read-only"),
            ));
        }
        let n = src_ty.0.storage_bytes(src_ty.1.iter().product());
        if n == 0 {
            return Ok(());
        }
        let host_dst = |t: &Tensor| t.bytes().as_ptr() as *mut u8;
        py.detach(|| -> Result<(), String> {
            match (&self.stored, &dst.stored) {
                (Stored::Host(Value::Tensor(s)), Stored::Host(Value::Tensor(d))) => {
                    // SAFETY: `d` addresses `n` bytes of memory owned outside the runtime's
                    // own buffers (an array, a DLPack tensor or a HostBuf) that nothing reads
                    // during this copy; `s` holds `n` bytes and is a different tensor.
                    unsafe { std::ptr::copy(s.bytes().as_ptr(), host_dst(d), n) };
                    Ok(())
                }
                (Stored::Device(s), Stored::Host(Value::Tensor(d))) => {
                    let t = s.to_host().map_err(|e| e.to_string())?;
                    // SAFETY: as above.
                    unsafe { std::ptr::copy_nonoverlapping(t.bytes().as_ptr(), host_dst(d), n) };
                    Ok(())
                }
                (Stored::Host(Value::Tensor(s)), Stored::Device(d)) => {
                    let ep = d.provider();
                    // SAFETY: `d` holds `n` bytes on `ep`'s device.
                    unsafe { ep.copy_from_host(s.bytes(), DevicePtrMut(d.data_ptr() as *mut _)) }
                        .and_then(|_| ep.synchronize())
                        .map_err(|e| e.to_string())
                }
                (Stored::Device(s), Stored::Device(d)) => {
                    let ep = s.provider();
                    if s.device_id() != d.device_id() {
                        return Err(format!(
                            "output '{name}' is on {}, and its buffer on {}",
                            s.device_id(),
                            d.device_id()
                        ));
                    }
                    // The buffer's provider may have work writing it queued on its stream.
                    d.synchronize().map_err(|e| e.to_string())?;
                    // SAFETY: both hold `n` bytes on the same device; distinct allocations.
                    unsafe {
                        ep.copy_on_device(
                            DevicePtr(s.data_ptr()),
                            DevicePtrMut(d.data_ptr() as *mut _),
                            n,
                        )
                    }
                    .and_then(|_| ep.synchronize())
                    .map_err(|e| e.to_string())
                }
                _ => Err(format!("output '{name}' is not a tensor")),
            }
        })
        .map_err(|e| error(Code::RuntimeException, e))
    }

    fn __repr__(&self) -> String {
        let (dev, id) = self.device();
        match self.tensor_meta() {
            Some((d, s)) => format!("NativeValue(tensor({d}) {s:?} on {dev}:{id})"),
            None => format!("NativeValue({})", self.kind()),
        }
    }
}
