//! HannWindow, HammingWindow and BlackmanWindow (opset 17): a 1-D window of `size` elements
//! (input 0, an int32/int64 scalar read on the host: it decides the output shape), periodic
//! (divisor `size`, the default) or symmetric (`size - 1`), of type `output_datatype` (every
//! numeric type; float by default). One launch; capturable after one eager run.

use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::sync::Arc;

/// Mirrors `struct WindowParams` in `kernels/signal.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct WindowParams {
    n: i64,
    stride: i64,
    nn: f64,
    kind: i32,
    _pad: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Window {
    Hann = 0,
    Hamming = 1,
    Blackman = 2,
}

struct WindowKernel {
    base: Base,
    host: HostReads,
    kind: Window,
    periodic: bool,
    dtype: DataType,
    f: Function,
}

impl WindowKernel {
    /// The window length from the host-read size input.
    fn size(&self, host: &HostValues) -> EpResult<usize> {
        let base = &self.base;
        let size = match host.first().cloned().flatten().as_deref() {
            Some([s, ..]) => *s,
            _ => return Err(base.err("size must be a scalar (or 1-element) int32/int64 tensor")),
        };
        if size < 0 {
            return Err(base.err(format!("size {size} must not be negative")));
        }
        usize::try_from(size).map_err(|_| base.err(format!("size {size} is too large")))
    }
}

impl Kernel for WindowKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        base.req(inputs, 0)?;
        let size = self.size(&self.host.peek(base, inputs)?)?;
        Ok(vec![(self.dtype, vec![size])])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        base.req(inputs, 0)?;
        let host = self.host.values(base, inputs, outputs)?;
        let size = self.size(&host)?;
        base.expect_outputs(outputs, &[(self.dtype, vec![size])])?;
        if size == 0 {
            return Ok(());
        }
        let out = &outputs[0];
        let mut p = WindowParams {
            n: size as i64,
            stride: out.strides[0] as i64,
            nn: if self.periodic {
                size as f64
            } else {
                size as f64 - 1.0
            },
            kind: self.kind as i32,
            _pad: 0,
        };
        let mut po = mut_ptr_of(out);
        let mut args = [arg(&mut po), arg(&mut p)];
        // SAFETY: window_T(y, WindowParams) writes the `size` elements of the output's view.
        unsafe { base.rt.launch(self.f, size as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

fn build(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    kind: Window,
) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let periodic = attr_int(node, "periodic")?.unwrap_or(1) != 0;
    let code = attr_int(node, "output_datatype")?.unwrap_or(1);
    let dtype = i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .filter(|d| d.is_float() || d.is_integer())
        .ok_or_else(|| {
            EpError::invalid_attribute(
                node,
                "output_datatype",
                format!("{code} is not a numeric type"),
            )
        })?;
    let base = Base::new(rt, node);
    let tag = type_tag(dtype)
        .filter(|_| dtype != DataType::Bool)
        .ok_or_else(|| {
            base.unsupported(
                dtype,
                "the CUDA windows produce float, double, float16, bfloat16 and 8- to 64-bit \
             integers",
            )
        })?;
    let module = base.module(&super::signal_module())?;
    let f = module.function(&format!("window_{tag}"))?;
    let host = HostReads::new(&base, &[0], "size input");
    Ok(Box::new(WindowKernel {
        base,
        host,
        kind,
        periodic,
        dtype,
        f,
    }))
}

fn hann(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Window::Hann)
}

fn hamming(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Window::Hamming)
}

fn blackman(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Window::Blackman)
}

pub fn register(r: &mut Registry) {
    r.register("", "HannWindow", 17, hann);
    r.register("", "HammingWindow", 17, hamming);
    r.register("", "BlackmanWindow", 17, blackman);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(std::mem::size_of::<WindowParams>(), 32);
    }
}
