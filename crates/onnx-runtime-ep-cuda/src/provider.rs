//! The CUDA execution provider.

use crate::ops::{registry, Registry};
use crate::runtime::{cuptr, CudaRuntime};
use onnx_runtime_ep_api::{
    DeviceBuffer, DeviceGraph, DeviceId, DevicePtr, DevicePtrMut, EpError, EpResult,
    ExecutionProvider, Kernel, KernelRequest,
};
use onnx_runtime_ir::Node;
use std::sync::Arc;

/// How a [`CudaExecutionProvider`] is opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CudaOptions {
    /// The device ordinal (as CUDA numbers the visible devices).
    pub device: usize,
    /// Whether float32 MatMul/Gemm/Conv may use TF32 tensor cores: faster, with about 10
    /// mantissa bits in the products (PyTorch's `allow_tf32`). Off: true float32.
    pub tf32: bool,
}

/// Runs nodes on one CUDA device through one stream.
pub struct CudaExecutionProvider {
    runtime: Arc<CudaRuntime>,
    registry: Registry,
    copy_many: std::sync::OnceLock<crate::runtime::Function>,
}

impl std::fmt::Debug for CudaExecutionProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaExecutionProvider")
            .field("runtime", &self.runtime)
            .finish()
    }
}

/// Segments per `copy_many` launch (kernels/copy.cu: COPY_MANY_SEGS).
const COPY_MANY_SEGS: usize = 64;

#[repr(C)]
#[derive(Clone, Copy, Default)]
struct CopySeg {
    src: u64,
    dst: u64,
    bytes: u64,
}

#[repr(C)]
struct CopyMany {
    seg: [CopySeg; COPY_MANY_SEGS],
    n: i32,
    _pad: i32,
}

impl CudaExecutionProvider {
    /// The batched copy kernel (loaded on first use).
    fn copy_many_fn(&self) -> EpResult<crate::runtime::Function> {
        if let Some(f) = self.copy_many.get() {
            return Ok(*f);
        }
        let module = self.runtime.module(&crate::ops::modules::copy_module())?;
        let f = module.function("copy_many")?;
        Ok(*self.copy_many.get_or_init(|| f))
    }

    /// The provider for device `ordinal` (float32 in true float32 unless the environment
    /// sets `ONNX_RUNTIME_CUDA_TF32=1`).
    pub fn new(ordinal: usize) -> EpResult<Self> {
        Ok(CudaExecutionProvider {
            runtime: CudaRuntime::new(ordinal)?,
            registry: registry(),
            copy_many: std::sync::OnceLock::new(),
        })
    }

    /// The provider with `options` (device ordinal, TF32).
    pub fn with_options(options: CudaOptions) -> EpResult<Self> {
        Ok(CudaExecutionProvider {
            runtime: CudaRuntime::with_options(options.device, options.tf32)?,
            registry: registry(),
            copy_many: std::sync::OnceLock::new(),
        })
    }

    /// The provider for device 0.
    pub fn new_default() -> EpResult<Self> {
        Self::new(0)
    }

    /// The runtime: copies, synchronization and graph capture.
    pub fn runtime(&self) -> &Arc<CudaRuntime> {
        &self.runtime
    }

    /// Every (domain, op, since-version) the provider registers.
    pub fn registered_ops(&self) -> Vec<(String, String, u64)> {
        self.registry.keys()
    }
}

impl ExecutionProvider for CudaExecutionProvider {
    fn name(&self) -> &str {
        "cuda"
    }

    fn device_id(&self) -> DeviceId {
        DeviceId::cuda(self.runtime.ordinal() as u32)
    }

    fn supports(&self, node: &Node, opset: u64) -> bool {
        self.registry
            .contains(node.normalized_domain(), &node.op_type, opset)
    }

    fn get_kernel(
        &self,
        node: &Node,
        input_shapes: &[Vec<usize>],
        opset: u64,
    ) -> Result<Box<dyn Kernel>, EpError> {
        let (_, factory) = self
            .registry
            .lookup(node.normalized_domain(), &node.op_type, opset)
            .ok_or_else(|| EpError::unsupported_op("cuda", node, opset))?;
        factory(
            &self.runtime,
            &KernelRequest {
                node,
                input_shapes,
                opset,
            },
        )
    }

    fn allocate(&self, size: usize, align: usize) -> Result<DeviceBuffer, EpError> {
        let (ptr, capacity) = self.runtime.allocate(size, align)?;
        // SAFETY: the block holds `capacity >= size` bytes until it is deallocated.
        Ok(unsafe {
            DeviceBuffer::from_raw_parts(
                ptr as usize as *mut std::ffi::c_void,
                size,
                capacity,
                self.device_id(),
            )
        })
    }

    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError> {
        if buffer.device() != self.device_id() {
            return Err(EpError::device(
                "cuda: deallocate",
                format!(
                    "the buffer belongs to {}, not {}",
                    buffer.device(),
                    self.device_id()
                ),
            ));
        }
        self.runtime.free(cuptr(buffer.as_ptr()))
    }

    unsafe fn copy_from_host(&self, src: &[u8], dst: DevicePtrMut) -> Result<(), EpError> {
        self.runtime.htod(src, cuptr(dst.0))
    }

    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), EpError> {
        self.runtime.dtoh(dst, cuptr(src.0))
    }

    unsafe fn copy_on_device(
        &self,
        src: DevicePtr,
        dst: DevicePtrMut,
        bytes: usize,
    ) -> Result<(), EpError> {
        self.runtime.dtod(cuptr(src.0), cuptr(dst.0), bytes)
    }

    unsafe fn copy_many_on_device(
        &self,
        copies: &[(DevicePtr, DevicePtrMut, usize)],
    ) -> Result<(), EpError> {
        if copies.len() < 3 {
            for &(src, dst, bytes) in copies {
                self.runtime.dtod(cuptr(src.0), cuptr(dst.0), bytes)?;
            }
            return Ok(());
        }
        let f = self.copy_many_fn()?;
        for chunk in copies.chunks(COPY_MANY_SEGS) {
            let mut p = CopyMany {
                seg: [CopySeg::default(); COPY_MANY_SEGS],
                n: chunk.len() as i32,
                _pad: 0,
            };
            let mut most = 0usize;
            for (seg, &(src, dst, bytes)) in p.seg.iter_mut().zip(chunk) {
                *seg = CopySeg {
                    src: src.0 as u64,
                    dst: dst.0 as u64,
                    bytes: bytes as u64,
                };
                most = most.max(bytes);
            }
            // 256 threads moving 16 bytes each per block-step; at most 64 blocks a segment.
            let blocks = most.div_ceil(256 * 16).clamp(1, 64) as u32;
            let mut args = [&mut p as *mut CopyMany as *mut std::ffi::c_void];
            // SAFETY: copy_many(CopyMany) moves each segment's bytes; the caller vouches for
            // the pointers.
            self.runtime.launch_cfg(
                f,
                (blocks, chunk.len() as u32, 1),
                (256, 1, 1),
                0,
                &mut args,
            )?;
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<(), EpError> {
        self.runtime.synchronize()
    }

    fn supports_capture(&self) -> bool {
        true
    }

    fn begin_capture(&self) -> Result<(), EpError> {
        self.runtime.begin_pooled_capture()
    }

    fn end_capture(&self) -> Result<Box<dyn DeviceGraph>, EpError> {
        Ok(Box::new(self.runtime.end_pooled_capture()?))
    }

    fn abort_capture(&self) {
        self.runtime.abort_pooled_capture()
    }
}
