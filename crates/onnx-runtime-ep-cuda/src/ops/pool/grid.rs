//! GridSample: 2-D at opset 16 (bilinear / nearest / bicubic), N-D from opset 20 (linear /
//! nearest / cubic; cubic up to 3-D), padding zeros / border / reflection, align_corners.
//! The sampling math is the CPU provider's (`onnx-runtime-ep-cpu/src/ops/tensor/grid.rs`),
//! in double precision on the device; X and the grid may have any strides and float types.

use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

const GS_MAX: usize = 6;

/// Mirrors `struct GridParams` in `kernels/grid.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct GridParams {
    points: i64,
    p: i64,
    k: i32,
    mode: i32,
    padding: i32,
    align: i32,
    grid_dtype: i32,
    _pad: i32,
    c: i64,
    cchunk: i64,
    in_dims: [i64; GS_MAX],
    xs_n: i64,
    xs_c: i64,
    xs: [i64; GS_MAX],
    out_dims: [i64; GS_MAX],
    gs_n: i64,
    gs: [i64; GS_MAX],
    gs_last: i64,
    ys_n: i64,
    ys_c: i64,
    ys: [i64; GS_MAX],
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Interp {
    Nearest = 0,
    Linear = 1,
    Cubic = 2,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Padding {
    Zeros = 0,
    Border = 1,
    Reflection = 2,
}

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

struct GridKernel {
    base: Base,
    interp: Interp,
    padding: Padding,
    align: bool,
    v16: bool,
    /// `grid_sample_<dtype>_k{1,2,3}_t{1,2,4}` then `_k0`.
    fns: HashMap<DataType, [Function; 10]>,
}

impl GridKernel {
    fn out_shape(&self, x: &TensorView<'_>, g: &TensorView<'_>) -> EpResult<Vec<usize>> {
        let (xs, gs) = (x.shape, g.shape);
        let k = xs.len().saturating_sub(2);
        if k == 0
            || gs.len() != xs.len()
            || gs[0] != xs[0]
            || gs[gs.len() - 1] != k
            || (self.v16 && k != 2)
        {
            return Err(self.base.err(format!(
                "X {xs:?} and grid {gs:?} do not match: grid must be [N, out..., {k}]{}",
                if self.v16 {
                    " with 2 spatial dims at opset 16"
                } else {
                    ""
                }
            )));
        }
        if self.interp == Interp::Cubic && k > 3 {
            return Err(self.base.err("cubic sampling supports 2-D and 3-D inputs"));
        }
        if k > GS_MAX {
            return Err(self.base.err(format!(
                "the CUDA GridSample takes up to {GS_MAX} spatial dims, X has {k}"
            )));
        }
        for t in [x.dtype, g.dtype] {
            if !FLOATS.contains(&t) {
                return Err(self.base.unsupported(
                    t,
                    "GridSample takes float types only (float, double, float16, bfloat16)",
                ));
            }
        }
        let mut shape = vec![xs[0], xs[1]];
        shape.extend_from_slice(&gs[1..gs.len() - 1]);
        checked_numel(&self.base, &shape)?;
        Ok(shape)
    }
}

/// Which kernel samples `k` spatial dims in `interp` mode: `_k{k}_t{taps}` for 1 to 3 dims
/// (taps 1 nearest, 2 linear, 4 cubic), the general `_k0` otherwise.
fn grid_variant(k: usize, interp: Interp) -> usize {
    if (1..=3).contains(&k) {
        (k - 1) * 3 + interp as usize
    } else {
        9
    }
}

/// The launch parameters of a GridSample of `x` (shape, strides) at `grid` (shape, strides,
/// dtype) into outputs of strides `ys`, and the thread count.
fn grid_params(
    (interp, padding, align): (Interp, Padding, bool),
    (xshape, xstrides): (&[usize], &[usize]),
    (gshape, gstrides, gdtype): (&[usize], &[usize], DataType),
    ystrides: &[usize],
    sms: usize,
) -> (GridParams, u64) {
    let k = xshape.len() - 2;
    let c = xshape[1];
    let n = xshape[0];
    let pts: usize = gshape[1..=k].iter().product();
    let points = n * pts;
    // Enough threads to fill the device; each takes a run of channels of one point.
    let target = sms * 2048;
    let chunks = target.div_ceil(points.max(1)).clamp(1, c.max(1));
    let cchunk = c.div_ceil(chunks).max(1);
    let chunks = c.div_ceil(cchunk).max(1);
    let mut p = GridParams {
        points: points as i64,
        p: pts as i64,
        k: k as i32,
        mode: interp as i32,
        padding: padding as i32,
        align: align as i32,
        grid_dtype: gdtype.onnx_code(),
        c: c as i64,
        cchunk: cchunk as i64,
        xs_n: xstrides[0] as i64,
        xs_c: xstrides[1] as i64,
        gs_n: gstrides[0] as i64,
        gs_last: gstrides[k + 1] as i64,
        ys_n: ystrides[0] as i64,
        ys_c: ystrides[1] as i64,
        ..Default::default()
    };
    for d in 0..k {
        p.in_dims[d] = xshape[2 + d] as i64;
        p.xs[d] = xstrides[2 + d] as i64;
        p.out_dims[d] = gshape[1 + d] as i64;
        p.gs[d] = gstrides[1 + d] as i64;
        p.ys[d] = ystrides[2 + d] as i64;
    }
    (p, (points as u64) * (chunks as u64))
}

impl Kernel for GridKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        let g = self.base.req(inputs, 1)?;
        Ok(vec![(x.dtype, self.out_shape(x, g)?)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let g = base.req(inputs, 1)?;
        let shape = self.out_shape(x, g)?;
        base.expect_outputs(outputs, &[(x.dtype, shape)])?;
        let y = &outputs[0];
        if y.numel() == 0 {
            return Ok(());
        }
        let k = x.shape.len() - 2;
        let sms = self.base.rt.sm_count().max(1) as usize;
        let (mut p, threads) = grid_params(
            (self.interp, self.padding, self.align),
            (x.shape, x.strides),
            (g.shape, g.strides, g.dtype),
            y.strides,
            sms,
        );
        let fns = self
            .fns
            .get(&x.dtype)
            .ok_or_else(|| base.unsupported(x.dtype, "GridSample takes float types only"))?;
        let f = fns[grid_variant(k, self.interp)];
        let (mut px, mut pg, mut py) = (ptr_of(x), ptr_of(g), mut_ptr_of(y));
        let mut args = [arg(&mut px), arg(&mut pg), arg(&mut py), arg(&mut p)];
        // SAFETY: grid_sample_*(x, grid, y, GridParams) reads x at clamped or checked
        // indices and the grid inside their views, and writes inside y's view.
        unsafe { base.rt.launch(f, threads, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn grid_sample(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let v16 = req.opset < 20;
    let mode = attr_string(node, "mode")?
        .unwrap_or_else(|| if v16 { "bilinear" } else { "linear" }.to_string());
    let interp = match (mode.as_str(), v16) {
        ("nearest", _) => Interp::Nearest,
        ("bilinear", true) | ("linear", false) => Interp::Linear,
        ("bicubic", true) | ("cubic", false) => Interp::Cubic,
        (other, _) => {
            return Err(EpError::invalid_attribute(
                node,
                "mode",
                format!(
                    "'{other}' is not a mode at opset {} (16: bilinear/nearest/bicubic; 20+: \
                     linear/nearest/cubic)",
                    req.opset
                ),
            ))
        }
    };
    let padding = match attr_string(node, "padding_mode")?.as_deref() {
        None | Some("zeros") => Padding::Zeros,
        Some("border") => Padding::Border,
        Some("reflection") => Padding::Reflection,
        Some(other) => {
            return Err(EpError::invalid_attribute(
                node,
                "padding_mode",
                format!("'{other}' is not zeros, border or reflection"),
            ))
        }
    };
    let align = attr_int(node, "align_corners")?.unwrap_or(0) != 0;
    let base = Base::new(rt, node);
    let module = base.module(&super::grid_module())?;
    let mut fns = HashMap::new();
    for dtype in FLOATS {
        let tag = type_tag(dtype).expect("a typed dtype");
        let f = |v: &str| module.function(&format!("grid_sample_{tag}_{v}"));
        let mut all = Vec::with_capacity(10);
        for k in 1..=3 {
            for t in [1, 2, 4] {
                all.push(f(&format!("k{k}_t{t}"))?);
            }
        }
        all.push(f("k0")?);
        let all: [Function; 10] = all.try_into().expect("ten variants");
        fns.insert(dtype, all);
    }
    Ok(Box::new(GridKernel {
        base,
        interp,
        padding,
        align,
        v16,
        fns,
    }))
}

pub fn register(r: &mut Registry) {
    for since in [16, 20, 22] {
        r.register("", "GridSample", since, grid_sample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(
            std::mem::size_of::<GridParams>(),
            16 + 24 + 16 + 48 + 16 + 48 * 2 + 8 + 48 + 8 + 16 + 48
        );
    }
}
