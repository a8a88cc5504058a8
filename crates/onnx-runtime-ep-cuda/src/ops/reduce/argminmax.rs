//! ArgMax and ArgMin along one axis (int64 indices), for every numeric dtype and bool:
//! `keepdims`, `select_last_index` (opset 12) and negative axes. NaN counts as the extreme
//! value (numpy's argmax, as the CPU provider has it). The reduction kernels of reduce.cu with
//! an (index, value) accumulator.

use super::*;
use onnx_runtime_ep_api::{CaptureSupport, Kernel, KernelRequest, TensorMut, TensorView};
use std::collections::HashMap;

pub(crate) fn module() -> ModuleSpec {
    ModuleSpec::new("reduce_arg", with_common!("../../kernels/reduce.cu"))
        .define("REDUCE_KIND", "KArg")
        .with_half()
}

struct ArgKernel {
    base: Base,
    max: bool,
    axis: i64,
    keepdims: bool,
    last: bool,
    fns: HashMap<DataType, RedFns>,
    ws: Arc<Workspace>,
}

impl ArgKernel {
    /// The normalized axis (None for a scalar input) and the output shape.
    fn resolve(&self, x: &TensorView<'_>) -> EpResult<(Option<usize>, Vec<usize>)> {
        let base = &self.base;
        if !self.fns.contains_key(&x.dtype) {
            return Err(base.unsupported(x.dtype, "ArgMax/ArgMin take numeric types and bool"));
        }
        if x.rank() == 0 {
            if self.axis != 0 {
                return Err(base.err(format!(
                    "axis {} is out of range for a scalar input (accepted: 0)",
                    self.axis
                )));
            }
            return Ok((None, Vec::new()));
        }
        let a = base.axis(self.axis, x.rank(), "axis")?;
        if x.shape[a] == 0 {
            return Err(base.err(format!("cannot take {} over axis {a} of size 0", base.op)));
        }
        let mut shape = x.shape.to_vec();
        if self.keepdims {
            shape[a] = 1;
        } else {
            shape.remove(a);
        }
        Ok((Some(a), shape))
    }
}

impl Kernel for ArgKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        check_view_rank(base, x.shape)?;
        Ok(vec![(DataType::Int64, self.resolve(x)?.1)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        check_view_rank(base, x.shape)?;
        let (axis, shape) = self.resolve(x)?;
        base.expect_outputs(outputs, &[(DataType::Int64, shape)])?;
        let out = &outputs[0];
        let rank = x.rank();
        let mut reduced = vec![false; rank];
        let mut out_strides = vec![0i64; rank];
        let mut j = 0;
        for k in 0..rank {
            let r = Some(k) == axis;
            reduced[k] = r;
            if !r {
                out_strides[k] = out.strides[j] as i64;
            }
            if !r || self.keepdims {
                j += 1;
            }
        }
        let r = Reduction {
            shape: x.shape,
            in_strides: istrides(x.strides),
            out_strides,
            reduced,
            count: axis.map_or(1, |a| x.shape[a] as i64),
            flags: i32::from(self.max) | (i32::from(self.last) << 1),
            elem: base.width(x.dtype)?,
        };
        launch_reduction(
            base,
            &self.fns[&x.dtype],
            &self.ws,
            &r,
            ptr_of(x),
            mut_ptr_of(out),
        )
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, max: bool) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let base = Base::new(rt, node);
    let module = base.module(&module())?;
    let mut fns = HashMap::new();
    for (dtype, tag) in numeric() {
        fns.insert(dtype, RedFns::load(&module, tag)?);
    }
    let u8_fns = fns[&DataType::Uint8];
    fns.insert(DataType::Bool, u8_fns);
    Ok(Box::new(ArgKernel {
        max,
        axis: attr_int(node, "axis")?.unwrap_or(0),
        keepdims: attr_int(node, "keepdims")?.unwrap_or(1) != 0,
        last: attr_int(node, "select_last_index")?.unwrap_or(0) != 0,
        fns,
        ws: workspace(rt)?,
        base,
    }))
}

fn argmax(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, true)
}

fn argmin(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, false)
}

pub fn register(r: &mut Registry) {
    for since in [1, 11, 12, 13] {
        r.register("", "ArgMax", since, argmax);
        r.register("", "ArgMin", since, argmin);
    }
}
