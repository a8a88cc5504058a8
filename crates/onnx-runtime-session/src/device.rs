//! Tensors on an accelerator provider's device, and the steps that run nodes there.
//!
//! A node placed on the device runs through the provider's [`Kernel`]: the session uploads
//! the inputs that live on the host, asks the kernel for its output shapes
//! ([`Kernel::output_types`]), allocates the outputs from the provider and runs the kernel.
//! Values move back to the host only when a CPU node, a control-flow body or a graph output
//! reads them. A device kernel that refuses a dtype at run time (strings, sub-byte types)
//! leaves that call to the node's CPU kernel, which every device step keeps.

use crate::error::{SessionError, SessionResult};
use onnx_runtime_ep_api::{
    DeviceBuffer, DeviceId, DevicePtr, DevicePtrMut, EpError, ExecutionProvider, Kernel, TensorMut,
    TensorView,
};
use onnx_runtime_ep_cpu::{CpuKernel, Tensor};
use onnx_runtime_ir::{compute_contiguous_strides, DataType};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

/// A contiguous tensor in device memory; the memory goes back to its provider on drop, unless
/// it is borrowed ([`DeviceTensor::borrowed`]).
pub(crate) struct DeviceTensor {
    buffer: Option<DeviceBuffer>,
    dtype: DataType,
    shape: Vec<usize>,
    strides: Vec<usize>,
    ep: Arc<dyn ExecutionProvider>,
    /// Set for memory the provider did not allocate: what keeps it alive (dropped with the
    /// tensor instead of handing the buffer back to the provider).
    borrowed: Option<Arc<dyn Send + Sync>>,
}

impl DeviceTensor {
    /// Device memory for a tensor of `dtype` and `shape`, contents undefined.
    pub fn allocate(
        ep: &Arc<dyn ExecutionProvider>,
        dtype: DataType,
        shape: Vec<usize>,
    ) -> SessionResult<DeviceTensor> {
        let numel: usize = shape.iter().product();
        let bytes = dtype.checked_storage_bytes(numel).ok_or_else(|| {
            SessionError::Kernel(EpError::Other(format!(
                "a {dtype} tensor of shape {shape:?} has no byte storage to place on {}",
                ep.device_id()
            )))
        })?;
        let buffer = ep.allocate(bytes, 256)?;
        Ok(DeviceTensor {
            buffer: Some(buffer),
            dtype,
            strides: compute_contiguous_strides(&shape),
            shape,
            ep: ep.clone(),
            borrowed: None,
        })
    }

    /// A tensor over `ptr`, device memory on `ep`'s device that someone else owns (another
    /// library's tensor, handed over by DLPack): nothing is copied, and on drop `keep_alive`
    /// is dropped instead of the memory going to the provider.
    ///
    /// # Safety
    /// `ptr` must address the tensor's bytes (contiguous, row-major) on `ep`'s device,
    /// aligned to the element type, and stay valid while `keep_alive` lives. The session
    /// reads it in order with the work on `ep`'s stream, and writes it only where a run binds
    /// an output into it ([`crate::OutputOn::Into`]).
    pub unsafe fn borrowed(
        ep: &Arc<dyn ExecutionProvider>,
        dtype: DataType,
        shape: Vec<usize>,
        ptr: *const std::ffi::c_void,
        keep_alive: Arc<dyn Send + Sync>,
    ) -> SessionResult<DeviceTensor> {
        let numel: usize = shape.iter().product();
        let bytes = dtype.checked_storage_bytes(numel).ok_or_else(|| {
            SessionError::InvalidArgument(format!(
                "a {dtype} tensor of shape {shape:?} has no byte storage to read on {}",
                ep.device_id()
            ))
        })?;
        if bytes > 0 && ptr.is_null() {
            return Err(SessionError::InvalidArgument(format!(
                "a {dtype} tensor of shape {shape:?} on {} has a null address",
                ep.device_id()
            )));
        }
        // SAFETY: the caller guarantees `bytes` bytes at `ptr` on this device; the buffer is
        // never handed to the provider (Drop checks `borrowed`).
        let buffer =
            unsafe { DeviceBuffer::from_raw_parts(ptr as *mut _, bytes, bytes, ep.device_id()) };
        Ok(DeviceTensor {
            buffer: Some(buffer),
            dtype,
            strides: compute_contiguous_strides(&shape),
            shape,
            ep: ep.clone(),
            borrowed: Some(keep_alive),
        })
    }

    /// A tensor over this one's memory (same dtype and shape) that keeps it alive: an output
    /// written in place into a device feed.
    pub fn alias(self: &Arc<Self>) -> SessionResult<DeviceTensor> {
        // SAFETY: the memory holds the tensor's bytes on its provider's device and stays
        // valid while the Arc (the keep-alive) lives.
        unsafe {
            Self::borrowed(
                &self.ep,
                self.dtype,
                self.shape.clone(),
                self.device_ptr(),
                self.clone(),
            )
        }
    }

    /// Copies a host tensor to the device.
    pub fn upload(ep: &Arc<dyn ExecutionProvider>, tensor: &Tensor) -> SessionResult<Self> {
        let mut t = Self::allocate(ep, tensor.dtype(), tensor.shape().to_vec())?;
        let bytes = tensor.bytes();
        // SAFETY: the buffer holds `storage_bytes(numel)` bytes, which is `bytes.len()` for a
        // tensor with byte storage.
        unsafe { ep.copy_from_host(bytes, t.ptr_mut())? };
        Ok(t)
    }

    /// Copies `tensor` (same dtype and shape) over this tensor's contents, in order with the
    /// provider's queued work. Callers make sure nothing reads or writes the buffer meanwhile
    /// (a captured graph's input buffer, used by one replay at a time).
    pub fn overwrite(&self, tensor: &Tensor) -> SessionResult<()> {
        if tensor.dtype() != self.dtype || tensor.shape() != self.shape.as_slice() {
            return Err(SessionError::invalid(format!(
                "a {} tensor of shape {:?} cannot overwrite a {} buffer of shape {:?}",
                tensor.dtype(),
                tensor.shape(),
                self.dtype,
                self.shape
            )));
        }
        let dst = DevicePtrMut(self.buffer().as_ptr() as *mut std::ffi::c_void);
        // SAFETY: the buffer holds the tensor's bytes (same dtype and shape).
        unsafe { self.ep.copy_from_host(tensor.bytes(), dst)? };
        Ok(())
    }

    /// Copies each `(src, dst)` pair (same dtype and shape) on the device, in one batch where
    /// the provider can (a replay's input and output copies).
    pub fn copy_pairs(pairs: &[(&DeviceTensor, &DeviceTensor)]) -> SessionResult<()> {
        let Some((first, _)) = pairs.first() else {
            return Ok(());
        };
        let mut copies = Vec::with_capacity(pairs.len());
        for (src, dst) in pairs {
            if src.dtype != dst.dtype || src.shape != dst.shape {
                return Err(SessionError::invalid(format!(
                    "a {} device tensor of shape {:?} cannot be copied into a {} buffer of \
                     shape {:?}",
                    src.dtype, src.shape, dst.dtype, dst.shape
                )));
            }
            let numel: usize = dst.shape.iter().product();
            let n = dst.dtype.checked_storage_bytes(numel).unwrap_or(0);
            let d = DevicePtrMut(dst.buffer().as_ptr() as *mut std::ffi::c_void);
            if n > 0 && !std::ptr::eq(src.ptr().0, d.0) {
                copies.push((src.ptr(), d, n));
            }
        }
        // SAFETY: each pair's buffers hold `n` bytes; distinct tensors do not overlap.
        unsafe { first.ep.copy_many_on_device(&copies)? };
        Ok(())
    }

    /// A new device tensor with this one's contents (a copy on the device).
    pub fn duplicate(&self) -> SessionResult<DeviceTensor> {
        let t = Self::allocate(&self.ep, self.dtype, self.shape.clone())?;
        Self::copy_pairs(&[(self, &t)])?;
        Ok(t)
    }

    pub fn dtype(&self) -> DataType {
        self.dtype
    }

    /// The provider whose memory holds the tensor.
    pub fn provider(&self) -> &Arc<dyn ExecutionProvider> {
        &self.ep
    }

    /// The address of the first element in device memory.
    pub fn device_ptr(&self) -> *const std::ffi::c_void {
        self.ptr().0
    }

    /// Copies the tensor back to the host (waits for the provider's queued work).
    pub fn download(&self) -> SessionResult<Tensor> {
        let mut tensor = Tensor::zeros(self.dtype, self.shape.clone());
        let dst = tensor.bytes_mut();
        // SAFETY: the buffer holds the tensor's `dst.len()` bytes.
        unsafe { self.ep.copy_to_host(self.ptr(), dst)? };
        Ok(tensor)
    }

    fn buffer(&self) -> &DeviceBuffer {
        self.buffer
            .as_ref()
            .expect("a device tensor owns its buffer until dropped")
    }

    fn ptr(&self) -> DevicePtr {
        DevicePtr(self.buffer().as_ptr())
    }

    fn ptr_mut(&mut self) -> DevicePtrMut {
        DevicePtrMut(
            self.buffer
                .as_mut()
                .expect("a device tensor owns its buffer until dropped")
                .as_mut_ptr(),
        )
    }

    pub fn shape(&self) -> &[usize] {
        &self.shape
    }

    pub fn view(&self) -> TensorView<'_> {
        TensorView::new(
            self.ptr(),
            self.dtype,
            &self.shape,
            &self.strides,
            self.ep.device_id(),
        )
    }

    fn view_mut(&mut self) -> TensorMut<'_> {
        let ptr = self.ptr_mut();
        TensorMut::new(
            ptr,
            self.dtype,
            &self.shape,
            &self.strides,
            self.ep.device_id(),
        )
    }
}

impl Drop for DeviceTensor {
    fn drop(&mut self) {
        if self.borrowed.is_some() {
            // Not the provider's memory: dropping `borrowed` releases it to its owner.
            return;
        }
        if let Some(buffer) = self.buffer.take() {
            // The provider orders the reuse after the work already queued on its stream; a
            // failure here can only be a buffer from another provider, which cannot happen.
            let _ = self.ep.deallocate(buffer);
        }
    }
}

/// Whether a host tensor can go to the device: it has byte storage.
pub(crate) fn placeable(t: &Tensor) -> bool {
    t.dtype() != DataType::String && t.dtype() != DataType::Undefined
}

/// One input of a device step.
pub(crate) enum StepInput<'a> {
    /// An omitted optional input.
    Absent,
    Device(&'a DeviceTensor),
    /// A host value at one of the kernel's `host_inputs` positions.
    Host(&'a Tensor),
}

/// A node placed on the device, with its CPU kernel for the calls the device kernel refuses.
pub(crate) struct DeviceStep {
    pub kernel: Box<dyn Kernel>,
    /// [`Kernel::host_inputs`]: positions that may be passed in host memory.
    pub host_inputs: Vec<usize>,
    pub fallback: Box<dyn CpuKernel>,
    pub ep: Arc<dyn ExecutionProvider>,
    /// Calls that ran on the device, and calls left to the CPU kernel.
    pub ran: AtomicUsize,
    pub refused: AtomicUsize,
    /// Why the first refused call was refused (the kernel's message).
    pub refusal: std::sync::OnceLock<String>,
}

/// Whether an error from a device kernel means "not on this device" (a dtype or op the
/// kernel does not take, said before it launches anything) rather than bad input or a device
/// failure. Only these two are refusals: every other error, `EpError::Other` included, is the
/// node's error and reaches the caller, so a device fault is never hidden by a CPU rerun.
fn is_refusal(e: &EpError) -> bool {
    matches!(
        e,
        EpError::UnsupportedDtype { .. } | EpError::UnsupportedOp { .. }
    )
}

impl DeviceStep {
    /// Runs the node on the device. `inputs` holds one entry per node input. Returns `None` when the device kernel refuses these inputs'
    /// dtypes, so the caller runs the CPU kernel instead.
    ///
    /// `into[k]`, where set, is the device feed output `k` is written into in place (the
    /// kernel's [`Kernel::in_place_input`] names the input that holds it): the output then
    /// shares its memory when its dtype and shape match the feed's.
    pub fn run(
        &self,
        inputs: &[StepInput<'_>],
        into: &[Option<&Arc<DeviceTensor>>],
    ) -> SessionResult<Option<Vec<DeviceTensor>>> {
        let placeholder_shape: [usize; 0] = [];
        let host_strides: Vec<Vec<usize>> = inputs
            .iter()
            .map(|i| match i {
                StepInput::Host(t) => compute_contiguous_strides(t.shape()),
                _ => Vec::new(),
            })
            .collect();
        let views: Vec<TensorView<'_>> = inputs
            .iter()
            .zip(&host_strides)
            .map(|(t, strides)| match t {
                StepInput::Device(t) => t.view(),
                // A `Kernel::host_inputs` position: the kernel reads host memory in place.
                StepInput::Host(t) => TensorView::new(
                    DevicePtr(t.bytes().as_ptr() as *const std::ffi::c_void),
                    t.dtype(),
                    t.shape(),
                    strides,
                    DeviceId::CPU,
                ),
                StepInput::Absent => TensorView::new(
                    DevicePtr(std::ptr::null()),
                    DataType::Undefined,
                    &placeholder_shape,
                    &placeholder_shape,
                    self.ep.device_id(),
                ),
            })
            .collect();
        let types = match self.kernel.output_types(&views) {
            Ok(t) => t,
            Err(e) if is_refusal(&e) => return Ok(self.refuse(|| e.to_string())),
            Err(e) => return Err(e.into()),
        };
        let mut outputs = types
            .into_iter()
            .enumerate()
            .map(|(k, (dtype, shape))| match into.get(k).copied().flatten() {
                Some(t) if t.dtype == dtype && t.shape == shape => t.alias(),
                _ => DeviceTensor::allocate(&self.ep, dtype, shape),
            })
            .collect::<SessionResult<Vec<_>>>()?;
        let mut out_views: Vec<TensorMut<'_>> = outputs.iter_mut().map(|t| t.view_mut()).collect();
        match self.kernel.execute(&views, &mut out_views) {
            Ok(()) => {}
            Err(e) if is_refusal(&e) => return Ok(self.refuse(|| e.to_string())),
            Err(e) => return Err(e.into()),
        }
        drop(out_views);
        self.ran.fetch_add(1, Ordering::Relaxed);
        Ok(Some(outputs))
    }

    /// Counts a call left to the CPU kernel, keeping the first refusal's reason.
    pub fn refuse<T>(&self, reason: impl FnOnce() -> String) -> Option<T> {
        if self.refused.fetch_add(1, Ordering::Relaxed) == 0 {
            self.refusal.get_or_init(reason);
        }
        None
    }
}
