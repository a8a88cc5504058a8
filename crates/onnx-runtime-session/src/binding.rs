//! IO binding: runs whose inputs come from device memory and whose outputs stay there, so a
//! pipeline (a decoder's KV cache, a model feeding the next) keeps its data on the GPU.
//!
//! [`Session::to_device`] copies a host tensor into the session's device memory;
//! [`Session::run_bound`] takes each input as a host value or a [`DeviceValue`] and returns
//! the outputs asked for, each on the host or as a new [`DeviceValue`] (outputs not asked for
//! are not copied anywhere). Bound runs use the session's CUDA graphs like any other run: a
//! replay copies a device feed into the graph's input buffer on the device and a device output
//! out of the graph's buffer on the device, so no byte crosses to the host.
//!
//! A run that leaves every output it returns on the device does not wait for the device: an
//! error a kernel raises there is reported by the next call that synchronizes
//! ([`Session::synchronize`], [`DeviceValue::to_host`]).

use crate::device::DeviceTensor;
use crate::error::{SessionError, SessionResult};
use crate::exec::{Fetched, Place};
use crate::session::{check_value, IoInfo, Session};
use onnx_runtime_ep_api::{DeviceId, ExecutionProvider};
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::{DataType, Dim, ValueType};
use std::borrow::Cow;
use std::sync::Arc;

/// A tensor in a session's device memory (contiguous, row-major). Cloning shares it.
#[derive(Clone)]
pub struct DeviceValue(pub(crate) Arc<DeviceTensor>);

impl DeviceValue {
    /// Copies `tensor` into `ep`'s device memory (a value made without a session; a session
    /// on the same device takes it as an input).
    pub fn upload(ep: &Arc<dyn ExecutionProvider>, tensor: &Tensor) -> SessionResult<Self> {
        Ok(DeviceValue(Arc::new(DeviceTensor::upload(ep, tensor)?)))
    }

    /// A device value over memory the caller owns (another library's tensor, handed over by
    /// DLPack), without a copy. `keep_alive` is dropped when the last clone of the value is,
    /// which is when the memory may be released. Errors if `dtype` has no byte storage or
    /// the address is null for a non-empty tensor.
    ///
    /// # Safety
    /// `ptr` must address `dtype.storage_bytes(product of shape)` bytes of contiguous
    /// row-major elements on `ep`'s device, aligned to the element type, valid while
    /// `keep_alive` lives and not written while a run reads them. Work that produced the bytes
    /// on another stream must be ordered before `ep`'s stream by the caller, and `keep_alive`
    /// is dropped without waiting for queued work that reads the bytes: a caller that runs
    /// without synchronizing keeps the memory alive until [`Session::synchronize`].
    pub unsafe fn from_raw(
        ep: &Arc<dyn ExecutionProvider>,
        dtype: DataType,
        shape: Vec<usize>,
        ptr: *const std::ffi::c_void,
        keep_alive: Arc<dyn Send + Sync>,
    ) -> SessionResult<Self> {
        // SAFETY: forwarded to the caller.
        let t = unsafe { DeviceTensor::borrowed(ep, dtype, shape, ptr, keep_alive)? };
        Ok(DeviceValue(Arc::new(t)))
    }

    /// The provider whose memory (and stream) holds the value.
    pub fn provider(&self) -> &Arc<dyn ExecutionProvider> {
        self.0.provider()
    }

    /// Waits for the work queued on the value's provider (so the bytes are final for a
    /// reader on another stream) and reports a device error.
    pub fn synchronize(&self) -> SessionResult<()> {
        Ok(self.0.provider().synchronize()?)
    }

    pub fn dtype(&self) -> DataType {
        self.0.dtype()
    }

    pub fn shape(&self) -> &[usize] {
        self.0.shape()
    }

    /// The device whose memory holds it.
    pub fn device_id(&self) -> DeviceId {
        self.0.provider().device_id()
    }

    /// Copies it to the host, after the work queued on the device (so this also reports any
    /// error a kernel raised there).
    pub fn to_host(&self) -> SessionResult<Tensor> {
        self.0.download()
    }

    /// The address of its first element in device memory, for handing the tensor to other
    /// GPU code. The memory stays valid while this value (or a clone) lives; work queued by
    /// the session may still be writing it until [`Session::synchronize`].
    pub fn data_ptr(&self) -> *const std::ffi::c_void {
        self.0.device_ptr()
    }
}

impl std::fmt::Debug for DeviceValue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "DeviceValue({}{:?} on {})",
            self.dtype(),
            self.shape(),
            self.device_id()
        )
    }
}

/// One input of a bound run.
#[derive(Clone, Copy, Debug)]
pub enum Input<'a> {
    Host(&'a Value),
    Device(&'a DeviceValue),
}

/// Where a bound run leaves an output.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OutputOn<'a> {
    Host,
    Device,
    /// In the memory of the named input, bound in the same run as a [`Input::Device`] value
    /// of the output's dtype and shape: the run returns that value, now holding the output
    /// (its old contents are gone). A decoder's present KV cache written into its past
    /// buffer: a kernel that updates it in place (GroupQueryAttention with a shared
    /// past/present buffer) writes only the new rows, and a step moves no cache bytes;
    /// any other producer's output is copied in on the device.
    ///
    /// Replayed device graphs read and write that memory directly, so a captured graph is
    /// kept per address of such an input (pass the same value every step to replay one
    /// graph) and holds the value alive while the session keeps the graph.
    Into(&'a str),
}

/// One output of a bound run.
#[derive(Clone, Debug)]
pub enum Output {
    Host(Value),
    Device(DeviceValue),
}

impl Output {
    /// The value on the host (copied from the device when it is a device value).
    pub fn into_host(self) -> SessionResult<Value> {
        match self {
            Output::Host(v) => Ok(v),
            Output::Device(d) => Ok(Value::Tensor(d.to_host()?)),
        }
    }

    pub fn as_device(&self) -> Option<&DeviceValue> {
        match self {
            Output::Device(d) => Some(d),
            Output::Host(_) => None,
        }
    }
}

impl Session {
    /// The accelerator the session runs on, if any.
    pub fn device(&self) -> Option<&Arc<dyn ExecutionProvider>> {
        self.graph.device.as_ref()
    }

    /// Copies `tensor` into the session's device memory (an error without a device).
    pub fn to_device(&self, tensor: &Tensor) -> SessionResult<DeviceValue> {
        let ep = self.device().ok_or_else(no_device)?;
        Ok(DeviceValue(Arc::new(DeviceTensor::upload(ep, tensor)?)))
    }

    /// [`DeviceValue::from_raw`] on the session's device (an error without a device).
    ///
    /// # Safety
    /// As for [`DeviceValue::from_raw`].
    pub unsafe fn device_value_from_raw(
        &self,
        dtype: DataType,
        shape: Vec<usize>,
        ptr: *const std::ffi::c_void,
        keep_alive: Arc<dyn Send + Sync>,
    ) -> SessionResult<DeviceValue> {
        let ep = self.device().ok_or_else(no_device)?;
        // SAFETY: forwarded to the caller.
        unsafe { DeviceValue::from_raw(ep, dtype, shape, ptr, keep_alive) }
    }

    /// Waits for the work the session queued on its device and reports a device error
    /// (nothing to do without a device).
    pub fn synchronize(&self) -> SessionResult<()> {
        match self.device() {
            Some(ep) => Ok(ep.synchronize()?),
            None => Ok(()),
        }
    }

    /// Runs the model on `inputs` (by name, each a host value or a device value of this
    /// session's device) and returns the outputs named in `outputs`, in that order, each where
    /// it asks. An input left out takes its initializer (or stays absent when optional), as in
    /// [`Session::run`].
    pub fn run_bound(
        &self,
        inputs: &[(&str, Input<'_>)],
        outputs: &[(&str, OutputOn)],
    ) -> SessionResult<Vec<(String, Output)>> {
        let n = self.inputs().len();
        let mut feeds: Vec<Option<Cow<'_, Value>>> = vec![None; n];
        let mut device: Vec<Option<Arc<DeviceTensor>>> = vec![None; n];
        for (name, input) in inputs {
            let i = self.input_index(name)?;
            if feeds[i].is_some() || device[i].is_some() {
                return Err(SessionError::InvalidArgument(format!(
                    "input '{name}' is bound twice"
                )));
            }
            match input {
                Input::Host(v) => {
                    check_value(&self.inputs()[i], v)?;
                    feeds[i] = Some(Cow::Borrowed(*v));
                }
                Input::Device(d) => {
                    self.check_device_input(&self.inputs()[i], d)?;
                    device[i] = Some(d.0.clone());
                }
            }
        }
        let mut places = vec![Place::Skip; self.outputs().len()];
        let mut order = Vec::with_capacity(outputs.len());
        for (name, on) in outputs {
            let k = self
                .outputs()
                .iter()
                .position(|io| io.name == *name)
                .ok_or_else(|| {
                    SessionError::InvalidArgument(format!(
                        "unknown output '{name}': the model's outputs are {}",
                        list(self.outputs())
                    ))
                })?;
            if places[k] != Place::Skip {
                return Err(SessionError::InvalidArgument(format!(
                    "output '{name}' is asked for twice"
                )));
            }
            places[k] = match on {
                OutputOn::Host => Place::Host,
                OutputOn::Device if self.device().is_none() => return Err(no_device()),
                OutputOn::Device => Place::Device,
                OutputOn::Into(input) => {
                    let i = self.input_index(input)?;
                    if device[i].is_none() {
                        return Err(SessionError::InvalidArgument(format!(
                            "output '{name}' is asked for in the memory of input '{input}', \
                             which is not bound to a device value in this run; bind it with \
                             Input::Device"
                        )));
                    }
                    if places.contains(&Place::Into(i)) {
                        return Err(SessionError::InvalidArgument(format!(
                            "two outputs are asked for in the memory of input '{input}'"
                        )));
                    }
                    Place::Into(i)
                }
            };
            order.push(k);
        }
        let mut fetched: Vec<Option<Fetched>> = self
            .execute(feeds, &device, &places, None)?
            .into_iter()
            .map(Some)
            .collect();
        order
            .into_iter()
            .map(|k| {
                let name = self.outputs()[k].name.clone();
                let out = match fetched[k].take() {
                    Some(Fetched::Host(v)) => Output::Host(v),
                    Some(Fetched::Device(t)) => Output::Device(DeviceValue(t)),
                    _ => {
                        return Err(SessionError::invalid(format!(
                            "graph output '{name}' was not produced"
                        )))
                    }
                };
                Ok((name, out))
            })
            .collect()
    }

    /// A device feed must live on this session's device and match the declared type.
    fn check_device_input(&self, io: &IoInfo, d: &DeviceValue) -> SessionResult<()> {
        let ep = self.device().ok_or_else(no_device)?;
        if d.device_id() != ep.device_id() {
            return Err(SessionError::InvalidArgument(format!(
                "input '{}' is a device value on {}, and the session runs on {}; copy it there \
                 first",
                io.name,
                d.device_id(),
                ep.device_id()
            )));
        }
        let Some(ValueType::Tensor { dtype, shape }) = &io.ty else {
            return match &io.ty {
                None => Ok(()),
                Some(_) => Err(SessionError::InvalidArgument(format!(
                    "input '{}' is not a tensor input, so it cannot be bound to a device value",
                    io.name
                ))),
            };
        };
        let dtype_ok = *dtype == d.dtype() || *dtype == DataType::Undefined;
        let shape_ok = shape.as_ref().is_none_or(|s| {
            s.rank() == d.shape().len()
                && s.dims().iter().zip(d.shape()).all(|(dim, &n)| match dim {
                    Dim::Static(v) => *v == n,
                    Dim::Symbolic(_) => true,
                })
        });
        if dtype_ok && shape_ok {
            return Ok(());
        }
        Err(SessionError::InputMismatch {
            name: io.name.clone(),
            expected: crate::session::describe_type(&io.ty),
            got: format!("a {} device value of shape {:?}", d.dtype(), d.shape()),
        })
    }
}

fn no_device() -> SessionError {
    SessionError::InvalidArgument(
        "the session has no device (SessionOptions::device), so values cannot live there".into(),
    )
}

fn list(ios: &[IoInfo]) -> String {
    ios.iter()
        .map(|io| format!("'{}'", io.name))
        .collect::<Vec<_>>()
        .join(", ")
}
