//! ConvInteger and QLinearConv (opset 10): a direct kernel, one output element per thread,
//! with uint8/int8 inputs and weights, zero points subtracted in the inner loop (so padding
//! contributes nothing, as the zero point would), 64-bit accumulation, and QLinearConv's
//! per-tensor or per-channel weight scales and requantization with the CPU provider's f32
//! rounding. Scales and zero points are read on the device: no host reads, always
//! capturable. Correctness first: this is not a tensor-core kernel.

use super::conv::vector_stride;
use super::{check_spatial, conv_module, parse_group, ConvGeom, ConvQ, WindowAttrs, CONV_RANK};
use crate::ops::common::{mut_ptr_of, ptr_of, Base, OutputTypes};
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::Arc;

const Q8: [(DataType, &str); 2] = [(DataType::Uint8, "u8"), (DataType::Int8, "i8")];

fn tag(d: DataType) -> Option<&'static str> {
    Q8.iter().find(|q| q.0 == d).map(|q| q.1)
}

struct ConvQKernel {
    base: Base,
    wa: WindowAttrs,
    group: usize,
    qlinear: bool,
    /// By (x, w, y) dtype; y is Int32 for ConvInteger.
    fns: HashMap<(DataType, DataType, DataType), Function>,
}

/// Node input positions of each operand.
struct Pos {
    x: usize,
    xzp: usize,
    w: usize,
    wzp: usize,
}

impl ConvQKernel {
    fn pos(&self) -> Pos {
        if self.qlinear {
            Pos {
                x: 0,
                xzp: 2,
                w: 3,
                wzp: 5,
            }
        } else {
            Pos {
                x: 0,
                xzp: 2,
                w: 1,
                wzp: 3,
            }
        }
    }

    fn q8(&self, t: &TensorView<'_>, what: &str) -> EpResult<()> {
        if tag(t.dtype).is_none() {
            return Err(self
                .base
                .unsupported(t.dtype, format!("{what} must be uint8 or int8")));
        }
        Ok(())
    }

    fn validate(&self, inputs: &[TensorView<'_>]) -> EpResult<(DataType, ConvGeom)> {
        let base = &self.base;
        let pos = self.pos();
        let x = base.req(inputs, pos.x)?;
        let w = base.req(inputs, pos.w)?;
        self.q8(x, "x")?;
        self.q8(w, "w")?;
        check_spatial(base, x.dtype, x.rank())?;
        let g = ConvGeom::new(base, &self.wa, self.group, x.shape, w.shape)?;
        if let Some(z) = base.input(inputs, pos.xzp) {
            base.same_dtype(x.dtype, z.dtype, "x_zero_point")?;
            if z.numel() != 1 {
                return Err(base.err("x_zero_point must be a scalar"));
            }
        }
        if let Some(z) = base.input(inputs, pos.wzp) {
            base.same_dtype(w.dtype, z.dtype, "w_zero_point")?;
            if (z.numel() != 1 && z.numel() != g.m) || vector_stride(z).is_none() {
                return Err(base.err(format!(
                    "w_zero_point has {} values; want 1 or M={}",
                    z.numel(),
                    g.m
                )));
            }
        }
        if !self.qlinear {
            return Ok((DataType::Int32, g));
        }
        for (i, what) in [(1, "x_scale"), (4, "w_scale"), (6, "y_scale")] {
            let s = base.req(inputs, i)?;
            if s.dtype != DataType::Float32 {
                return Err(base.unsupported(s.dtype, format!("{what} must be float32")));
            }
            let ok = if i == 4 {
                (s.numel() == 1 || s.numel() == g.m) && vector_stride(s).is_some()
            } else {
                s.numel() == 1
            };
            if !ok {
                return Err(base.err(format!(
                    "{what} has {} values; want {}",
                    s.numel(),
                    if i == 4 {
                        format!("1 or M={}", g.m)
                    } else {
                        "1".into()
                    }
                )));
            }
        }
        let yzp = base.req(inputs, 7)?;
        self.q8(yzp, "y_zero_point")?;
        if yzp.numel() != 1 {
            return Err(base.err("y_zero_point must be a scalar"));
        }
        if let Some(b) = base.input(inputs, 8) {
            if b.dtype != DataType::Int32 {
                return Err(base.unsupported(b.dtype, "B must be int32"));
            }
            if b.numel() != g.m || vector_stride(b).is_none() {
                return Err(base.err(format!("B has {} values; want M={}", b.numel(), g.m)));
            }
        }
        Ok((yzp.dtype, g))
    }
}

fn arg<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

/// A tensor's strides in the kernel's five axes (spatial axes padded to three).
fn strides5(shape: &[usize], strides: &[usize]) -> [i64; CONV_RANK] {
    let mut s = [0i64; CONV_RANK];
    for k in 0..shape.len().min(CONV_RANK) {
        s[k] = strides[k] as i64;
    }
    s
}

fn dims5(shape: &[usize]) -> [i64; CONV_RANK] {
    let mut d = [1i64; CONV_RANK];
    for k in 0..shape.len().min(CONV_RANK) {
        d[k] = shape[k] as i64;
    }
    d
}

impl Kernel for ConvQKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (dtype, g) = self.validate(inputs)?;
        Ok(vec![(dtype, g.out_shape())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (ydtype, g) = self.validate(inputs)?;
        base.expect_outputs(outputs, &[(ydtype, g.out_shape())])?;
        let out = &outputs[0];
        let n = out.numel();
        if n == 0 {
            return Ok(());
        }
        let pos = self.pos();
        let x = base.req(inputs, pos.x)?;
        let w = base.req(inputs, pos.w)?;
        let f = *self
            .fns
            .get(&(x.dtype, w.dtype, ydtype))
            .ok_or_else(|| base.unsupported(x.dtype, "no kernel for these input types"))?;
        let win = &g.win;
        let r = win.input.len();
        let mut p = ConvQ {
            n: n as i64,
            out_dims: dims5(out.shape),
            in_dims: dims5(x.shape),
            x_strides: strides5(x.shape, x.strides),
            w_strides: strides5(w.shape, w.strides),
            y_strides: strides5(out.shape, out.strides),
            kernel: [1; 3],
            stride: [1; 3],
            dil: [1; 3],
            pad: [0; 3],
            group_in: (g.c / g.group) as i64,
            group_out: (g.m / g.group).max(1) as i64,
            ..Default::default()
        };
        for i in 0..r {
            p.kernel[i] = win.kernel[i] as i64;
            p.stride[i] = win.strides[i] as i64;
            p.dil[i] = win.dilations[i] as i64;
            p.pad[i] = win.pad_begin[i] as i64;
        }
        let xzp = base.input(inputs, pos.xzp);
        let wzp = base.input(inputs, pos.wzp);
        p.has_xzp = xzp.is_some() as i32;
        p.has_wzp = wzp.is_some() as i32;
        p.wzp_stride = wzp.and_then(vector_stride).unwrap_or(0) as i64;
        let (mut px, mut pw) = (ptr_of(x), ptr_of(w));
        let (mut pxz, mut pwz) = (xzp.map_or(0, ptr_of), wzp.map_or(0, ptr_of));
        let mut py = mut_ptr_of(out);
        if !self.qlinear {
            let mut args = [
                arg(&mut px),
                arg(&mut pw),
                arg(&mut pxz),
                arg(&mut pwz),
                arg(&mut py),
                arg(&mut p),
            ];
            // SAFETY: conv_integer_X_W(x, w, xzp, wzp, y, ConvQ) reads x and w at their
            // strides inside their shapes (padding positions are skipped), the zero points
            // when present, and writes y at its strides.
            return unsafe { base.rt.launch(f, n as u64, &mut args) };
        }
        let xs = base.req(inputs, 1)?;
        let ws = base.req(inputs, 4)?;
        let ys = base.req(inputs, 6)?;
        let yzp = base.req(inputs, 7)?;
        let bias = base.input(inputs, 8);
        p.wscale_stride = vector_stride(ws).unwrap_or(0) as i64;
        p.has_bias = bias.is_some() as i32;
        p.bias_stride = bias.and_then(vector_stride).unwrap_or(0) as i64;
        let (mut pxs, mut pws, mut pys, mut pyz) =
            (ptr_of(xs), ptr_of(ws), ptr_of(ys), ptr_of(yzp));
        let mut pb = bias.map_or(0, ptr_of);
        let mut args = [
            arg(&mut px),
            arg(&mut pxs),
            arg(&mut pxz),
            arg(&mut pw),
            arg(&mut pws),
            arg(&mut pwz),
            arg(&mut pys),
            arg(&mut pyz),
            arg(&mut pb),
            arg(&mut py),
            arg(&mut p),
        ];
        // SAFETY: qlinear_conv_X_W_Y(x, xs, xzp, w, ws, wzp, ys, yzp, bias, y, ConvQ) reads
        // as conv_integer does, plus one value of each scalar and M (or 1) values of w_scale,
        // w_zero_point and B at their strides, and writes y at its strides.
        unsafe { base.rt.launch(f, n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    qlinear: bool,
) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let wa = WindowAttrs::parse(node)?;
    let group = parse_group(node)?;
    let base = Base::new(rt, node);
    let module = base.module(&conv_module())?;
    let mut fns = HashMap::new();
    for (xd, xt) in Q8 {
        for (wd, wt) in Q8 {
            if qlinear {
                for (yd, yt) in Q8 {
                    fns.insert(
                        (xd, wd, yd),
                        module.function(&format!("qlinear_conv_{xt}_{wt}_{yt}"))?,
                    );
                }
            } else {
                fns.insert(
                    (xd, wd, DataType::Int32),
                    module.function(&format!("conv_integer_{xt}_{wt}"))?,
                );
            }
        }
    }
    Ok(Box::new(ConvQKernel {
        base,
        wa,
        group,
        qlinear,
        fns,
    }))
}

pub fn build_conv_integer(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, false)
}

pub fn build_qlinear_conv(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, true)
}
