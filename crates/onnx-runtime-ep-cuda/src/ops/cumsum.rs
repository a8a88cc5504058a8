//! CumSum along one axis (inclusive or exclusive, forward or reverse). The axis is an input
//! read on the host, so the kernel is capturable after one eager run.

use super::common::*;
use super::params::CumSumParams;
use super::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

struct CumSumKernel {
    base: Base,
    host: HostReads,
    exclusive: bool,
    reverse: bool,
    typed: HashMap<DataType, Function>,
}

impl CumSumKernel {
    /// The output's dtype and shape: the input's.
    fn output_type(x: &TensorView<'_>) -> OutputTypes {
        vec![(x.dtype, x.shape.to_vec())]
    }

    /// The kernel for the input's dtype and the normalized axis (host-read), checked against
    /// the input.
    fn plan(&self, x: &TensorView<'_>, host: &HostValues) -> EpResult<(Function, usize)> {
        let base = &self.base;
        let axis = match host.get(1).cloned().flatten().as_deref() {
            Some([a]) => *a,
            _ => return Err(base.err("axis must be a scalar (or 1-element) int tensor")),
        };
        let f = *self.typed.get(&x.dtype).ok_or_else(|| {
            base.unsupported(
                x.dtype,
                "CumSum takes float, double, float16, bfloat16 and integers",
            )
        })?;
        if x.rank() == 0 {
            return Err(base.err("CumSum needs a tensor of rank 1 or more"));
        }
        Ok((f, base.axis(axis, x.rank(), "axis")?))
    }
}

impl Kernel for CumSumKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        check_view_rank(base, x.shape)?;
        self.plan(x, &self.host.peek(base, inputs)?)?;
        Ok(Self::output_type(x))
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        base.expect_outputs(outputs, &Self::output_type(x))?;
        check_view_rank(base, x.shape)?;
        let host = self.host.values(base, inputs, outputs)?;
        let (f, axis) = self.plan(x, &host)?;
        let out = &outputs[0];
        let len = x.shape[axis];
        let lines: usize = x.shape.iter().product::<usize>() / len.max(1);
        if len == 0 || lines == 0 {
            return Ok(());
        }
        let mut dims: Vec<i64> = x.shape.iter().map(|&d| d as i64).collect();
        dims[axis] = 1;
        let mut p = CumSumParams {
            lines: lines as i64,
            rank: x.rank() as i32,
            exclusive: self.exclusive as i32,
            len: len as i64,
            in_axis_stride: x.strides[axis] as i64,
            out_axis_stride: out.strides[axis] as i64,
            reverse: self.reverse as i32,
            ..Default::default()
        };
        p.dims = fill(&dims);
        p.in_strides = fill(&istrides(x.strides));
        p.out_strides = fill(&istrides(out.strides));
        let (mut pi, mut po) = (ptr_of(x), mut_ptr_of(out));
        let mut args = [arg(&mut pi), arg(&mut po), arg(&mut p)];
        // SAFETY: cumsum_T(in, out, CumSumParams) walks inside both views.
        unsafe { base.rt.launch(f, lines as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

fn cumsum(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let module = base.module(&cumsum_module())?;
    let mut typed = HashMap::new();
    for (dtype, tag, _) in TYPED.iter().filter(|t| t.0 != DataType::Bool) {
        typed.insert(*dtype, module.function(&format!("cumsum_{tag}"))?);
    }
    let host = HostReads::new(&base, &[1], "axis input");
    Ok(Box::new(CumSumKernel {
        base,
        host,
        exclusive: attr_int(req.node, "exclusive")?.unwrap_or(0) != 0,
        reverse: attr_int(req.node, "reverse")?.unwrap_or(0) != 0,
        typed,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "CumSum", 11, cumsum);
}
