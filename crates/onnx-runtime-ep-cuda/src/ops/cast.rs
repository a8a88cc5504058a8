//! Cast between every numeric dtype and bool (float, double, float16, bfloat16, signed and
//! unsigned 8..64-bit integers), honouring strides. One NVRTC module per output type holds a
//! kernel per input type, so the kernel is ready whatever input dtype arrives at run time.

use super::common::*;
use super::params::Strided2;
use super::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{Attribute, DataType};
use std::collections::HashMap;
use std::sync::Arc;

struct CastKernel {
    base: Base,
    to: DataType,
    from: HashMap<DataType, Function>,
    copy: WidthFns,
}

impl CastKernel {
    /// The kernel converting from `from`: `None` when the input already has the target type
    /// (a plain copy).
    fn converter(&self, from: DataType) -> EpResult<Option<Function>> {
        if from == self.to {
            self.base.width(from)?;
            return Ok(None);
        }
        self.from.get(&from).copied().map(Some).ok_or_else(|| {
            self.base
                .unsupported(from, "the CUDA Cast takes numeric types and bool")
        })
    }
}

impl Kernel for CastKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        self.converter(x.dtype)?;
        Ok(vec![(self.to, x.shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        base.expect_outputs(outputs, &self.output_types(inputs)?)?;
        let x = base.req(inputs, 0)?;
        let out = &outputs[0];
        let (a, b) = (istrides(x.strides), istrides(out.strides));
        let Some(f) = self.converter(x.dtype)? else {
            let width = base.width(x.dtype)?;
            return copy_strided(
                base,
                &self.copy,
                width,
                ptr_of(x),
                mut_ptr_of(out),
                x.shape,
                &a,
                &b,
                0,
                0,
            );
        };
        let n = x.numel();
        if n == 0 {
            return Ok(());
        }
        let (dims, sa, sb) = coalesce(x.shape, &a, &b);
        base.check_rank(dims.len(), super::params::MAX_DIMS)?;
        let mut p = Strided2 {
            n: n as i64,
            rank: dims.len() as i32,
            ..Default::default()
        };
        p.dims = fill(&dims.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.a = fill(&sa);
        p.b = fill(&sb);
        let (mut pi, mut po) = (ptr_of(x), mut_ptr_of(out));
        let mut args = [arg(&mut pi), arg(&mut po), arg(&mut p)];
        // SAFETY: cast_from_X(in, out, Strided2) walks inside both views.
        unsafe { base.rt.launch(f, n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn dtype_from_name(name: &str) -> Option<DataType> {
    Some(match name.to_ascii_uppercase().as_str() {
        "FLOAT" => DataType::Float32,
        "DOUBLE" => DataType::Float64,
        "FLOAT16" => DataType::Float16,
        "BFLOAT16" => DataType::BFloat16,
        "INT8" => DataType::Int8,
        "INT16" => DataType::Int16,
        "INT32" => DataType::Int32,
        "INT64" => DataType::Int64,
        "UINT8" => DataType::Uint8,
        "UINT16" => DataType::Uint16,
        "UINT32" => DataType::Uint32,
        "UINT64" => DataType::Uint64,
        "BOOL" => DataType::Bool,
        _ => return None,
    })
}

fn cast(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let to = match node.attribute("to") {
        Some(Attribute::Int(code)) => DataType::from_onnx(*code as i32),
        Some(Attribute::String(name)) => dtype_from_name(name),
        _ => None,
    }
    .ok_or_else(|| EpError::invalid_attribute(node, "to", "missing or not a known dtype"))?;
    let base = Base::new(rt, node);
    let spec = cast_module(to).ok_or_else(|| {
        base.unsupported(
            to,
            "the CUDA Cast produces numeric types and bool (not strings, float8 or 4-bit types)",
        )
    })?;
    let module = base.module(&spec)?;
    let mut from = HashMap::new();
    for (dtype, tag, _) in TYPED {
        from.insert(dtype, module.function(&format!("cast_from_{tag}"))?);
    }
    let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
    Ok(Box::new(CastKernel {
        base,
        to,
        from,
        copy,
    }))
}

/// A Cast kernel converting input 0 of `node` to `to`, for ops that learn `to` at run time
/// (CastLike: the dtype of its second input).
pub(super) fn cast_kernel_to(
    rt: &Arc<CudaRuntime>,
    node: &onnx_runtime_ir::Node,
    to: DataType,
) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, node);
    let spec = cast_module(to).ok_or_else(|| {
        base.unsupported(
            to,
            "the CUDA Cast produces numeric types and bool (not strings, float8 or 4-bit types)",
        )
    })?;
    let module = base.module(&spec)?;
    let mut from = HashMap::new();
    for (dtype, tag, _) in TYPED {
        from.insert(dtype, module.function(&format!("cast_from_{tag}"))?);
    }
    let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
    Ok(Box::new(CastKernel {
        base,
        to,
        from,
        copy,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "Cast", 1, cast);
}
