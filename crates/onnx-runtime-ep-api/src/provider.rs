//! The execution-provider trait.

use crate::{DeviceBuffer, DeviceId, DevicePtr, DevicePtrMut, EpError, Kernel};
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

    /// Waits until all work the provider enqueued has finished.
    fn synchronize(&self) -> Result<(), EpError>;
}
