//! Device pointers, tensor views and device buffers.

use onnx_runtime_ir::DataType;
use std::ffi::c_void;

/// Which kind of device memory lives on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DeviceKind {
    Cpu,
    Cuda,
}

/// A device: its kind and ordinal.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct DeviceId {
    pub kind: DeviceKind,
    pub ordinal: u32,
}

impl DeviceId {
    pub const CPU: DeviceId = DeviceId {
        kind: DeviceKind::Cpu,
        ordinal: 0,
    };

    pub fn cuda(ordinal: u32) -> Self {
        DeviceId {
            kind: DeviceKind::Cuda,
            ordinal,
        }
    }
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.kind {
            DeviceKind::Cpu => write!(f, "cpu"),
            DeviceKind::Cuda => write!(f, "cuda:{}", self.ordinal),
        }
    }
}

/// A read-only pointer into device memory (host memory for the CPU provider).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevicePtr(pub *const c_void);

/// A writable pointer into device memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DevicePtrMut(pub *mut c_void);

impl DevicePtrMut {
    pub fn as_const(self) -> DevicePtr {
        DevicePtr(self.0)
    }
}

/// A tensor an execution provider reads: pointer, element type, shape and element strides.
/// A stride of 0 broadcasts along that axis.
#[derive(Clone, Copy, Debug)]
pub struct TensorView<'a> {
    pub ptr: DevicePtr,
    pub dtype: DataType,
    pub shape: &'a [usize],
    pub strides: &'a [usize],
    pub device: DeviceId,
}

impl<'a> TensorView<'a> {
    pub fn new(
        ptr: DevicePtr,
        dtype: DataType,
        shape: &'a [usize],
        strides: &'a [usize],
        device: DeviceId,
    ) -> Self {
        TensorView {
            ptr,
            dtype,
            shape,
            strides,
            device,
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    /// Whether the elements lie densely in row-major order.
    pub fn is_contiguous(&self) -> bool {
        is_contiguous(self.shape, self.strides)
    }

    /// Bytes the elements occupy when stored contiguously.
    pub fn contiguous_bytes(&self) -> usize {
        self.dtype.storage_bytes(self.numel())
    }
}

/// A tensor an execution provider writes.
#[derive(Debug)]
pub struct TensorMut<'a> {
    pub ptr: DevicePtrMut,
    pub dtype: DataType,
    pub shape: &'a [usize],
    pub strides: &'a [usize],
    pub device: DeviceId,
}

impl<'a> TensorMut<'a> {
    pub fn new(
        ptr: DevicePtrMut,
        dtype: DataType,
        shape: &'a [usize],
        strides: &'a [usize],
        device: DeviceId,
    ) -> Self {
        TensorMut {
            ptr,
            dtype,
            shape,
            strides,
            device,
        }
    }

    pub fn numel(&self) -> usize {
        self.shape.iter().product()
    }

    pub fn rank(&self) -> usize {
        self.shape.len()
    }

    pub fn is_contiguous(&self) -> bool {
        is_contiguous(self.shape, self.strides)
    }

    pub fn contiguous_bytes(&self) -> usize {
        self.dtype.storage_bytes(self.numel())
    }

    /// A read-only view of the same memory.
    pub fn as_view(&self) -> TensorView<'_> {
        TensorView::new(
            self.ptr.as_const(),
            self.dtype,
            self.shape,
            self.strides,
            self.device,
        )
    }
}

/// Whether `strides` describe a dense row-major layout of `shape` (size-1 axes may have any
/// stride; an empty tensor is contiguous).
pub fn is_contiguous(shape: &[usize], strides: &[usize]) -> bool {
    if shape.len() != strides.len() {
        return false;
    }
    if shape.contains(&0) {
        return true;
    }
    let mut expected = 1usize;
    for (&dim, &stride) in shape.iter().zip(strides).rev() {
        if dim != 1 && stride != expected {
            return false;
        }
        expected = expected.saturating_mul(dim);
    }
    true
}

/// A block of device memory handed out by [`crate::ExecutionProvider::allocate`]. It must be
/// returned with [`crate::ExecutionProvider::deallocate`] to the provider that made it;
/// dropping it leaks the memory into the provider's pool until the provider is dropped.
#[derive(Debug)]
pub struct DeviceBuffer {
    ptr: *mut c_void,
    len: usize,
    capacity: usize,
    device: DeviceId,
}

// SAFETY: a DeviceBuffer is a handle (address and size) to memory owned by its provider; it
// carries no thread-affine state.
unsafe impl Send for DeviceBuffer {}
// SAFETY: see above; shared references only read the address.
unsafe impl Sync for DeviceBuffer {}

impl DeviceBuffer {
    /// Wraps memory a provider allocated.
    ///
    /// # Safety
    /// `ptr` must point to at least `capacity` bytes of memory on `device` that stay valid until
    /// the buffer is handed back to the provider, and `len <= capacity`.
    pub unsafe fn from_raw_parts(
        ptr: *mut c_void,
        len: usize,
        capacity: usize,
        device: DeviceId,
    ) -> Self {
        DeviceBuffer {
            ptr,
            len,
            capacity,
            device,
        }
    }

    pub fn as_ptr(&self) -> *const c_void {
        self.ptr
    }

    pub fn as_mut_ptr(&mut self) -> *mut c_void {
        self.ptr
    }

    /// The size asked for.
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The size actually reserved (the allocator's size class).
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    pub fn device(&self) -> DeviceId {
        self.device
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contiguity() {
        assert!(is_contiguous(&[2, 3], &[3, 1]));
        assert!(!is_contiguous(&[2, 3], &[1, 2]));
        assert!(is_contiguous(&[1, 3], &[99, 1]));
        assert!(!is_contiguous(&[2, 3], &[0, 1]));
        assert!(is_contiguous(&[], &[]));
    }
}
