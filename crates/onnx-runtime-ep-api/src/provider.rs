//! The execution-provider trait.

use crate::{DeviceBuffer, DeviceId, DevicePtr, DevicePtrMut, EpError, Kernel};

/// Work recorded from a provider's queue by [`ExecutionProvider::begin_capture`] /
/// [`ExecutionProvider::end_capture`] (a CUDA graph), replayable as one launch.
///
/// The device memory handed out while the capture was in progress belongs to the graph: the
/// replays read and write those same addresses, so the provider gives none of it to anyone
/// else until the graph is dropped. Drop every tensor allocated during the capture before the
/// graph itself.
pub trait DeviceGraph: Send + Sync {
    /// Enqueues one replay of the recorded work on the provider's queue (asynchronously, in
    /// order with the provider's other work).
    fn replay(&self) -> Result<(), EpError>;

    /// Device bytes the graph holds (its private memory).
    fn memory_bytes(&self) -> usize {
        0
    }
}
use onnx_runtime_ir::Node;

/// A device and the kernels that run on it.
pub trait ExecutionProvider: Send + Sync {
    /// A short name: `cpu`, `cuda`.
    fn name(&self) -> &str;

    fn device_id(&self) -> DeviceId;

    /// Whether the provider has a kernel for `node` at the model's `opset` of its domain.
    fn supports(&self, node: &Node, opset: u64) -> bool;

    /// Builds the kernel for `node`. `input_shapes` are the resolved input shapes, or empty
    /// when they are only known at run time; `opset` is the model's version of the node's domain.
    fn get_kernel(
        &self,
        node: &Node,
        input_shapes: &[Vec<usize>],
        opset: u64,
    ) -> Result<Box<dyn Kernel>, EpError>;

    /// Device memory of at least `size` bytes aligned to `align` (a power of two).
    fn allocate(&self, size: usize, align: usize) -> Result<DeviceBuffer, EpError>;

    /// Returns `buffer` to the provider that allocated it.
    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError>;

    /// Copies host bytes to device memory, ordered after the provider's earlier work.
    ///
    /// # Safety
    /// `dst` must point to at least `src.len()` writable bytes on this provider's device.
    unsafe fn copy_from_host(&self, src: &[u8], dst: DevicePtrMut) -> Result<(), EpError>;

    /// Copies device memory to the host; returns once the bytes are in `dst`.
    ///
    /// # Safety
    /// `src` must point to at least `dst.len()` readable bytes on this provider's device.
    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), EpError>;

    /// Copies `bytes` bytes between two places on this provider's device.
    ///
    /// # Safety
    /// Both pointers must be valid for `bytes` bytes on this provider's device.
    unsafe fn copy_on_device(
        &self,
        src: DevicePtr,
        dst: DevicePtrMut,
        bytes: usize,
    ) -> Result<(), EpError>;

    /// Several device-to-device copies `(src, dst, bytes)`, in order with the provider's
    /// queued work; a provider may do them in one launch (the default copies one by one).
    ///
    /// # Safety
    /// As for [`ExecutionProvider::copy_on_device`], for every copy; no destination may
    /// overlap another copy's source or destination.
    unsafe fn copy_many_on_device(
        &self,
        copies: &[(DevicePtr, DevicePtrMut, usize)],
    ) -> Result<(), EpError> {
        for &(src, dst, bytes) in copies {
            self.copy_on_device(src, dst, bytes)?;
        }
        Ok(())
    }

    /// Waits until all work the provider enqueued has finished.
    fn synchronize(&self) -> Result<(), EpError>;

    /// Whether [`ExecutionProvider::begin_capture`] can work on this provider (false by
    /// default).
    fn supports_capture(&self) -> bool {
        false
    }

    /// Starts recording the work enqueued from this thread into a device graph instead of
    /// running it, with a private memory pool: until [`ExecutionProvider::end_capture`] (or
    /// [`ExecutionProvider::abort_capture`]), allocations come from memory the graph will own,
    /// and synchronizing calls (host reads of device memory, host-to-device copies,
    /// synchronize) fail with [`EpError::Capture`]. Kernels run during the capture only
    /// record their launches: their outputs are written by the graph's replays. Only one
    /// capture at a time per provider, and no other thread may use the provider meanwhile.
    /// Providers without device graphs refuse (the default).
    fn begin_capture(&self) -> Result<(), EpError> {
        Err(EpError::Capture {
            node: self.name().to_string(),
            message: format!("the {} provider cannot capture device graphs", self.name()),
        })
    }

    /// Ends the capture begun by [`ExecutionProvider::begin_capture`] and returns the graph,
    /// which owns the memory allocated during the capture.
    fn end_capture(&self) -> Result<Box<dyn DeviceGraph>, EpError> {
        Err(EpError::Capture {
            node: self.name().to_string(),
            message: format!("the {} provider cannot capture device graphs", self.name()),
        })
    }

    /// Abandons a capture in progress (after a failure during it); the memory allocated
    /// during it goes back to the provider once the tensors holding it are dropped. A no-op
    /// when nothing is being captured.
    fn abort_capture(&self) {}
}
