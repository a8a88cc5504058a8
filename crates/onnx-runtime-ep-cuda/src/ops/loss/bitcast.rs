//! BitCast (opset 26): the input's bits reinterpreted as the `to` type of the same bit width;
//! the shape is unchanged (as the CPU provider's). A strided copy of elements of that width
//! (one `cuMemcpyDtoDAsync` when both sides are contiguous).

use super::super::common::*;
use super::super::Registry;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::sync::Arc;

struct BitCastKernel {
    base: Base,
    to: DataType,
    copy: WidthFns,
}

impl BitCastKernel {
    /// The output type and the element width the copy moves.
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<(OutputTypes, usize)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let from = x.dtype;
        if from == DataType::String || from.bit_width().is_none() {
            return Err(base.unsupported(from, "BitCast takes every type except string"));
        }
        if from.bit_width() != self.to.bit_width() {
            return Err(base.err(format!(
                "cannot bit-cast {from} ({:?} bits) to {} ({:?} bits): widths must match",
                from.bit_width(),
                self.to,
                self.to.bit_width()
            )));
        }
        // Sub-byte types are packed; the element-wise copy moves whole bytes.
        let width = match from.element_size() {
            Some(w) => w,
            None => {
                return Err(base.unsupported(
                    from,
                    "the CUDA BitCast moves elements of 1, 2, 4, 8 or 16 bytes (not packed \
                     sub-byte types)",
                ))
            }
        };
        if !matches!(width, 1 | 2 | 4 | 8 | 16) {
            return Err(base.unsupported(
                from,
                "the CUDA BitCast moves elements of 1, 2, 4, 8 or 16 bytes",
            ));
        }
        check_view_rank(base, x.shape)?;
        Ok((vec![(self.to, x.shape.to_vec())], width))
    }
}

impl Kernel for BitCastKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        Ok(self.plan(inputs)?.0)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (want, width) = self.plan(inputs)?;
        base.expect_outputs(outputs, &want)?;
        let x = base.req(inputs, 0)?;
        let out = &outputs[0];
        copy_strided(
            base,
            &self.copy,
            width,
            ptr_of(x),
            mut_ptr_of(out),
            x.shape,
            &istrides(x.strides),
            &istrides(out.strides),
            0,
            0,
        )
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn bitcast(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let code = attr_int(node, "to")?.ok_or_else(|| {
        EpError::invalid_attribute(node, "to", "the required attribute is missing")
    })?;
    let to = i32::try_from(code)
        .ok()
        .and_then(DataType::from_onnx)
        .ok_or_else(|| {
            EpError::invalid_attribute(node, "to", format!("{code} is not an ONNX data type"))
        })?;
    let base = Base::new(rt, node);
    if to == DataType::String || to.bit_width().is_none() {
        return Err(base.unsupported(to, "BitCast takes every type except string"));
    }
    let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
    Ok(Box::new(BitCastKernel { base, to, copy }))
}

pub fn register(r: &mut Registry) {
    r.register("", "BitCast", 26, bitcast);
}
