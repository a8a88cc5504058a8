//! [`CpuExecutionProvider`]: the generic execution-provider interface over host memory.

use crate::kernel::{BuildContext, CpuKernel};
use crate::{registry, Tensor, Value};
use onnx_runtime_ep_api::{
    CaptureSupport, DeviceBuffer, DeviceId, DevicePtr, DevicePtrMut, EpError, ExecutionProvider,
    Kernel, TensorMut, TensorView,
};
use onnx_runtime_ir::{DataType, Node};
use std::alloc::Layout;

/// Alignment of every buffer [`CpuExecutionProvider::allocate`] hands out.
const CPU_ALIGN: usize = 64;

/// Runs nodes on the host. Sessions call [`CpuKernel`]s directly; this type adapts them to
/// [`ExecutionProvider`] for callers that hold raw host buffers.
#[derive(Default)]
pub struct CpuExecutionProvider;

impl CpuExecutionProvider {
    pub fn new() -> Self {
        CpuExecutionProvider
    }
}

struct Adapter {
    node: String,
    inner: Box<dyn CpuKernel>,
}

/// Copies a (possibly strided) host view into a contiguous tensor.
///
/// # Safety
/// `view.ptr` must address host memory valid for every element the strides reach.
unsafe fn read_view(node: &str, view: &TensorView<'_>) -> Result<Tensor, EpError> {
    if view.dtype == DataType::String || view.dtype.is_sub_byte() && !view.is_contiguous() {
        return Err(EpError::UnsupportedDtype {
            node: node.into(),
            op: node.into(),
            dtype: view.dtype,
            detail: "raw views of this type must be contiguous and fixed-width".into(),
            hint: "pass a contiguous tensor".into(),
        });
    }
    let mut out = Tensor::zeros(view.dtype, view.shape.to_vec());
    if view.is_contiguous() {
        let n = out.bytes().len();
        let src = std::slice::from_raw_parts(view.ptr.0 as *const u8, n);
        out.bytes_mut().copy_from_slice(src);
        return Ok(out);
    }
    let width = view.dtype.element_size().unwrap_or(1);
    let base = view.ptr.0 as *const u8;
    let dst = out.bytes_mut();
    crate::shape::for_each_offset(view.shape, [view.strides], |i, [off]| {
        let src = std::slice::from_raw_parts(base.add(off * width), width);
        dst[i * width..(i + 1) * width].copy_from_slice(src);
    });
    Ok(out)
}

impl Kernel for Adapter {
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<(), EpError> {
        let values = inputs
            .iter()
            // SAFETY: the caller guarantees the views address valid host memory.
            .map(|v| unsafe { read_view(&self.node, v) }.map(Value::Tensor))
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<Option<&Value>> = values.iter().map(Some).collect();
        let results = self.inner.run(&refs)?;
        for (i, (out, result)) in outputs.iter_mut().zip(results).enumerate() {
            let t = result.into_tensor().ok_or_else(|| EpError::InvalidInput {
                node: self.node.clone(),
                message: format!("output {i} is not a tensor"),
            })?;
            if t.shape() != out.shape || t.dtype() != out.dtype || !out.is_contiguous() {
                return Err(EpError::InvalidInput {
                    node: self.node.clone(),
                    message: format!(
                        "output {i} is {} {:?} but the caller gave a buffer for {} {:?} (contiguous: {})",
                        t.dtype(),
                        t.shape(),
                        out.dtype,
                        out.shape,
                        out.is_contiguous()
                    ),
                });
            }
            let bytes = t.bytes();
            // SAFETY: the caller guarantees the output view covers its contiguous bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(bytes.as_ptr(), out.ptr.0 as *mut u8, bytes.len());
            }
        }
        Ok(())
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Unsupported {
            reason: format!("{}: the CPU provider has no device graphs", self.node),
        }
    }
}

impl ExecutionProvider for CpuExecutionProvider {
    fn name(&self) -> &str {
        "cpu"
    }

    fn device_id(&self) -> DeviceId {
        DeviceId::CPU
    }

    fn supports(&self, node: &Node, opset: u64) -> bool {
        registry().contains(&node.domain, &node.op_type, opset)
    }

    fn get_kernel(
        &self,
        node: &Node,
        _input_shapes: &[Vec<usize>],
        opset: u64,
    ) -> Result<Box<dyn Kernel>, EpError> {
        let (_, factory) = registry()
            .lookup(&node.domain, &node.op_type, opset)
            .ok_or_else(|| EpError::unsupported_op("cpu", node, opset))?;
        let inner = factory(&BuildContext::new(node, opset))?;
        Ok(Box::new(Adapter {
            node: node.describe(),
            inner,
        }))
    }

    fn allocate(&self, size: usize, align: usize) -> Result<DeviceBuffer, EpError> {
        if align > CPU_ALIGN || !align.is_power_of_two() && align != 0 {
            return Err(EpError::device(
                "cpu allocate",
                format!("alignment {align} is not a power of two up to {CPU_ALIGN}; CPU buffers are {CPU_ALIGN}-byte aligned"),
            ));
        }
        let layout = Layout::from_size_align(size.max(1), CPU_ALIGN)
            .map_err(|e| EpError::device("cpu allocate", e))?;
        // SAFETY: the layout has a non-zero size.
        let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
        if ptr.is_null() {
            return Err(EpError::device(
                "cpu allocate",
                format!("out of memory for {size} bytes"),
            ));
        }
        // SAFETY: ptr is a fresh allocation of layout.size() bytes.
        Ok(unsafe { DeviceBuffer::from_raw_parts(ptr.cast(), size, layout.size(), DeviceId::CPU) })
    }

    fn deallocate(&self, mut buffer: DeviceBuffer) -> Result<(), EpError> {
        if buffer.device() != DeviceId::CPU {
            return Err(EpError::device(
                "cpu deallocate",
                "the buffer belongs to another device",
            ));
        }
        let layout = Layout::from_size_align(buffer.capacity(), CPU_ALIGN)
            .map_err(|e| EpError::device("cpu deallocate", e))?;
        // SAFETY: every CPU buffer was allocated with exactly this layout (capacity, CPU_ALIGN).
        unsafe { std::alloc::dealloc(buffer.as_mut_ptr().cast(), layout) };
        Ok(())
    }

    unsafe fn copy_from_host(&self, src: &[u8], dst: DevicePtrMut) -> Result<(), EpError> {
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0 as *mut u8, src.len());
        Ok(())
    }

    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), EpError> {
        std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.as_mut_ptr(), dst.len());
        Ok(())
    }

    unsafe fn copy_on_device(
        &self,
        src: DevicePtr,
        dst: DevicePtrMut,
        bytes: usize,
    ) -> Result<(), EpError> {
        std::ptr::copy(src.0 as *const u8, dst.0 as *mut u8, bytes);
        Ok(())
    }

    fn synchronize(&self) -> Result<(), EpError> {
        Ok(())
    }
}
