//! Kernels: one node's computation, built once for a node and its input shapes.

use crate::{EpError, TensorMut, TensorView};
use onnx_runtime_ir::{DataType, Node};

/// Whether a kernel may run while a device graph (e.g. a CUDA graph) is being captured.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CaptureSupport {
    /// The kernel enqueues only device work with fixed arguments: it can be captured.
    Supported,
    /// The kernel reads device data on the host, synchronizes, allocates, or has not yet seen
    /// the signature it would be captured with.
    Unsupported { reason: String },
}

/// One node's computation. Built by [`crate::ExecutionProvider::get_kernel`].
pub trait Kernel: Send + Sync {
    /// Runs the node: reads `inputs`, writes `outputs` (whose shapes the caller resolved).
    ///
    /// `inputs` holds one view per node input in order. An omitted optional input in the
    /// middle takes a placeholder view that the kernel ignores; alternatively the caller may
    /// pass only the views of the wired inputs, in order. Trailing omitted inputs may be left
    /// off in both forms.
    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<(), EpError>;

    /// The dtype and shape of every output for `inputs` (the views `execute` would take), for
    /// callers that do not resolve output shapes themselves, such as a session that allocates
    /// each output before running the node. Kernels that read shape-carrying inputs (Reshape's
    /// shape, Slice's starts, ...) read them here as `execute` does; an `execute` that follows
    /// with the same input views may use what was read here rather than read it again.
    fn output_types(
        &self,
        _inputs: &[TensorView<'_>],
    ) -> Result<Vec<(DataType, Vec<usize>)>, EpError> {
        Err(EpError::Other(
            "this kernel does not compute its output shapes; resolve them before calling execute"
                .into(),
        ))
    }

    /// Whether the kernel can run during graph capture now. Kernels that must read
    /// shape-carrying inputs on the host become capturable after one eager run.
    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Unsupported {
            reason: "this kernel does not support graph capture".into(),
        }
    }

    /// Tells the kernel which inputs are constant across runs (initializers).
    fn set_constant_inputs(&mut self, _constant: &[bool]) {}

    /// The input positions whose values the kernel reads on the host (Reshape's shape,
    /// Slice's starts, Range's limits, ...), in any order. At these positions a caller may pass
    /// a view of host memory (`device` = [`crate::DeviceId::CPU`], `ptr` a host address valid
    /// for the view) instead of device memory; the kernel then reads the values there without
    /// waiting for the device, during graph capture too. Every other input must be device
    /// memory. Kernels that read no input on the host return an empty list (the default).
    fn host_inputs(&self) -> Vec<usize> {
        Vec::new()
    }

    /// The input whose memory output `output` may be written into (a KV cache updated in
    /// place: GroupQueryAttention's present_key in the memory of past_key). When the caller
    /// passes the same buffer (same dtype, shape and strides) for both, the kernel reads that
    /// input's prior contents from it and writes only what changes; it must give the same
    /// output values as with separate buffers. `None` (the default): the output never shares
    /// an input's memory.
    fn in_place_input(&self, _output: usize) -> Option<usize> {
        None
    }
}

/// What a factory receives to build a kernel.
#[derive(Clone, Copy, Debug)]
pub struct KernelRequest<'a> {
    pub node: &'a Node,
    /// Resolved input shapes, or empty when unknown until run time.
    pub input_shapes: &'a [Vec<usize>],
    /// The opset version of the node's domain that the model imports.
    pub opset: u64,
}

/// Builds kernels for one (domain, op, since-version) entry; `C` is the provider's context.
pub trait KernelFactory<C: ?Sized>: Send + Sync {
    fn build(&self, ctx: &C, request: &KernelRequest<'_>) -> Result<Box<dyn Kernel>, EpError>;
}

impl<C: ?Sized, F> KernelFactory<C> for F
where
    F: Fn(&C, &KernelRequest<'_>) -> Result<Box<dyn Kernel>, EpError> + Send + Sync,
{
    fn build(&self, ctx: &C, request: &KernelRequest<'_>) -> Result<Box<dyn Kernel>, EpError> {
        self(ctx, request)
    }
}
