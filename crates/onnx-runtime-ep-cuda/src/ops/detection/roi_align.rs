//! RoiAlign (opsets 10, 16, 22): for each roi (x1, y1, x2, y2 in input coordinates times
//! `spatial_scale`) of batch `batch_indices[r]`, an `output_height` x `output_width` grid of
//! bins, each the average (`mode` avg, the default) or maximum (max) of bilinear samples on a
//! `sampling_ratio` x `sampling_ratio` grid (0: adaptive, ceil(bin extent)).
//! `coordinate_transformation_mode` half_pixel (opset 16's default) shifts by -0.5;
//! output_half_pixel (opset 10's only behaviour) does not and makes rois at least 1 x 1.
//! X and rois of any float type and strides; batch indices of any integer type. One thread per
//! output element, double precision, no host reads: capturable. Semantics mirror the CPU
//! provider (`onnx-runtime-ep-cpu/src/ops/tensor/detection.rs`).

use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

/// Mirrors `struct RoiAlignParams` in `kernels/detection.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RoiAlignParams {
    total: i64,
    n: i64,
    c: i64,
    h: i64,
    w: i64,
    oh: i64,
    ow: i64,
    xs: [i64; 4],
    ys: [i64; 4],
    rs: [i64; 2],
    bs: i64,
    ratio: i64,
    max_grid: i64,
    scale: f64,
    avg: i32,
    half_pixel: i32,
    roi_code: i32,
    batch_code: i32,
    id: u32,
    _pad: i32,
}

/// The adaptive sampling grid's cap per axis (the CPU has none; this keeps a hostile roi
/// from looping on the device for hours: 65536 x 65536 samples per bin is far beyond use).
const MAX_GRID: i64 = 1 << 16;

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

struct RoiAlignKernel {
    base: Base,
    avg: bool,
    half_pixel: bool,
    oh: usize,
    ow: usize,
    ratio: i64,
    scale: f64,
    fns: HashMap<DataType, Function>,
}

impl RoiAlignKernel {
    fn out_type(&self, inputs: &[TensorView<'_>]) -> EpResult<(DataType, Vec<usize>)> {
        let base = &self.base;
        let (x, rois, b) = (
            base.req(inputs, 0)?,
            base.req(inputs, 1)?,
            base.req(inputs, 2)?,
        );
        if !FLOATS.contains(&x.dtype) {
            return Err(base.unsupported(
                x.dtype,
                "RoiAlign takes float, double, float16 and bfloat16",
            ));
        }
        if !FLOATS.contains(&rois.dtype) {
            return Err(base.unsupported(rois.dtype, "RoiAlign's rois must be a float type"));
        }
        if !b.dtype.is_integer() || b.dtype.is_sub_byte() {
            return Err(base.err(format!("batch_indices must be integers, got {}", b.dtype)));
        }
        let [_, c, h, w] = *x.shape else {
            return Err(base.err(format!("X must be 4-D, got {:?}", x.shape)));
        };
        let nr = b.numel();
        if rois.shape != [nr, 4] {
            return Err(base.err(format!("rois must be [{nr}, 4], got {:?}", rois.shape)));
        }
        if b.rank() > 1 {
            return Err(base.err(format!("batch_indices must be 1-D, got {:?}", b.shape)));
        }
        if h == 0 || w == 0 {
            return Err(base.err("X must have non-empty spatial dims"));
        }
        Ok((x.dtype, vec![nr, c, self.oh, self.ow]))
    }
}

impl Kernel for RoiAlignKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        Ok(vec![self.out_type(inputs)?])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let want = self.out_type(inputs)?;
        base.expect_outputs(outputs, std::slice::from_ref(&want))?;
        let (x, rois, b) = (
            base.req(inputs, 0)?,
            base.req(inputs, 1)?,
            base.req(inputs, 2)?,
        );
        let y = &outputs[0];
        let total = y.numel();
        if total == 0 {
            return Ok(());
        }
        let f = *self
            .fns
            .get(&x.dtype)
            .ok_or_else(|| base.unsupported(x.dtype, "RoiAlign takes float types"))?;
        let mut p = RoiAlignParams {
            total: total as i64,
            n: x.shape[0] as i64,
            c: x.shape[1] as i64,
            h: x.shape[2] as i64,
            w: x.shape[3] as i64,
            oh: self.oh as i64,
            ow: self.ow as i64,
            xs: fill(&istrides(x.strides)),
            ys: fill(&istrides(y.strides)),
            rs: fill(&istrides(rois.strides)),
            bs: b.strides.first().copied().unwrap_or(0) as i64,
            ratio: self.ratio,
            max_grid: MAX_GRID,
            scale: self.scale,
            avg: self.avg as i32,
            half_pixel: self.half_pixel as i32,
            roi_code: rois.dtype.onnx_code(),
            batch_code: b.dtype.onnx_code(),
            id: base.id,
            _pad: 0,
        };
        let (mut px, mut pr, mut pb, mut py, mut pe) = (
            ptr_of(x),
            ptr_of(rois),
            ptr_of(b),
            mut_ptr_of(y),
            base.rt.err_ptr(),
        );
        let mut args = [
            arg(&mut px),
            arg(&mut pr),
            arg(&mut pb),
            arg(&mut py),
            arg(&mut pe),
            arg(&mut p),
        ];
        // SAFETY: roi_align_T(x, rois, batch, y, err, RoiAlignParams) reads the rois and batch
        // views, X only at clamped in-map positions of a checked batch, and writes each output
        // element of its view once.
        unsafe { base.rt.launch(f, total as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn roi_align(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let mode = attr_string(node, "mode")?.unwrap_or_else(|| "avg".into());
    if mode != "avg" && mode != "max" {
        return Err(EpError::invalid_attribute(
            node,
            "mode",
            format!("'{mode}' is not avg or max"),
        ));
    }
    let default_ctm = if req.opset >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let ctm =
        attr_string(node, "coordinate_transformation_mode")?.unwrap_or_else(|| default_ctm.into());
    let half_pixel = match ctm.as_str() {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(EpError::invalid_attribute(
                node,
                "coordinate_transformation_mode",
                format!("'{other}' is not half_pixel or output_half_pixel"),
            ))
        }
    };
    let dim = |name: &str| -> EpResult<usize> {
        let v = attr_int(node, name)?.unwrap_or(1);
        usize::try_from(v).ok().filter(|v| *v > 0).ok_or_else(|| {
            EpError::invalid_attribute(node, name, format!("must be positive, got {v}"))
        })
    };
    let (oh, ow) = (dim("output_height")?, dim("output_width")?);
    let ratio = attr_int(node, "sampling_ratio")?.unwrap_or(0);
    let scale = attr_float(node, "spatial_scale")?.unwrap_or(1.0) as f64;
    let base = Base::new(rt, node);
    let module = base.module(&super::detection_module())?;
    let mut fns = HashMap::new();
    for dtype in FLOATS {
        let tag = type_tag(dtype).expect("a typed dtype");
        fns.insert(dtype, module.function(&format!("roi_align_{tag}"))?);
    }
    Ok(Box::new(RoiAlignKernel {
        base,
        avg: mode == "avg",
        half_pixel,
        oh,
        ow,
        ratio,
        scale,
        fns,
    }))
}

pub fn register(r: &mut Registry) {
    for since in [10, 16, 22] {
        r.register("", "RoiAlign", since, roi_align);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(std::mem::size_of::<RoiAlignParams>(), 8 * 20 + 8 + 24);
    }
}
