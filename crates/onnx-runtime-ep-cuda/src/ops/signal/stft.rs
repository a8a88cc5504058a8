//! STFT (opset 17): for a signal `[batch, length, 1 or 2]`, frames of `frame_length` samples
//! every `frame_step` (inputs read on the host), each times the optional `window` (its
//! length is the frame length when `frame_length` is omitted), transformed forward; output
//! `[batch, frames, bins, 2]` with bins = frame_length / 2 + 1 when `onesided` (the default),
//! else frame_length. Semantics mirror the CPU provider
//! (`onnx-runtime-ep-cpu/src/ops/nn/signal/spectral.rs`); the transforms are DFT's kernels
//! ([`super::dft::DftFns`]: one line per (batch, frame), the frame offset a stride).

use super::dft::{DftFns, DftParams, FLOATS};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use std::sync::Arc;

struct StftKernel {
    base: Base,
    host: HostReads,
    onesided: bool,
    fns: DftFns,
}

impl StftKernel {
    /// The transform parameters (output strides left for `execute`) and the output shape.
    fn plan(
        &self,
        inputs: &[TensorView<'_>],
        host: &HostValues,
    ) -> EpResult<(DftParams, Vec<usize>)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        if !self.fns.supports(x.dtype) {
            return Err(base.unsupported(x.dtype, "STFT takes float, double, float16, bfloat16"));
        }
        let scalar = |pos: usize, what: &str| -> EpResult<Option<i64>> {
            match host.get(pos).cloned().flatten() {
                None => Ok(None),
                Some(v) => v
                    .first()
                    .copied()
                    .map(Some)
                    .ok_or_else(|| base.err(format!("{what} must be a scalar"))),
            }
        };
        let step = scalar(1, "frame_step")?
            .ok_or_else(|| base.err("required input 1 (frame_step) is missing"))?;
        let window = base.input(inputs, 2);
        let flen = scalar(3, "frame_length")?;
        let shape = x.shape;
        if shape.len() != 3 || !matches!(shape[2], 1 | 2) {
            return Err(base.err(format!("signal {shape:?} must be [batch, length, 1 or 2]")));
        }
        let flen = match (flen, window) {
            (Some(f), _) => f,
            (None, Some(w)) => w.numel() as i64,
            (None, None) => return Err(base.err("give frame_length or window")),
        };
        if step < 1 || flen < 1 || flen as usize > shape[1] {
            return Err(base.err(format!(
                "frame_step {step} and frame_length {flen} must be positive and fit the signal \
                 of {}",
                shape[1]
            )));
        }
        let (step, flen) = (step as usize, flen as usize);
        let mut p = DftParams::default();
        if let Some(w) = window {
            if !FLOATS.contains(&w.dtype) {
                return Err(base.unsupported(w.dtype, "STFT's window must be a float type"));
            }
            if w.numel() != flen {
                return Err(base.err(format!(
                    "window has {} values; frame_length is {flen}",
                    w.numel()
                )));
            }
            p.ws = if w.numel() <= 1 {
                0
            } else if w.rank() == 1 {
                w.strides[0] as i64
            } else if w.is_contiguous() {
                1
            } else {
                return Err(base.err(format!("window {:?} must be 1-D or dense", w.shape)));
            };
            p.win_code = w.dtype.onnx_code();
        }
        let (batch, slen) = (shape[0], shape[1]);
        let frames = 1 + (slen - flen) / step;
        let bins = if self.onesided { flen / 2 + 1 } else { flen };
        p.lines = (batch * frames) as i64;
        p.nld = 2;
        p.ldims[0] = batch as i64;
        p.ldims[1] = frames as i64;
        p.lxs[0] = x.strides[0] as i64;
        p.lxs[1] = (step * x.strides[1]) as i64;
        p.n = flen as i64;
        p.len = flen as i64;
        p.m = flen as i64;
        p.out_len = bins as i64;
        p.xt = x.strides[1] as i64;
        p.xc = x.strides[2] as i64;
        p.comps = shape[2] as i32;
        p.out_comps = 2;
        Ok((p, vec![batch, frames, bins, 2]))
    }
}

impl Kernel for StftKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let (_, shape) = self.plan(inputs, &self.host.peek(base, inputs)?)?;
        Ok(vec![(x.dtype, shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        let host = self.host.values(base, inputs, outputs)?;
        let (mut p, shape) = self.plan(inputs, &host)?;
        base.expect_outputs(outputs, &[(x.dtype, shape)])?;
        let y = &outputs[0];
        p.los[0] = y.strides[0] as i64;
        p.los[1] = y.strides[1] as i64;
        p.ot = y.strides[2] as i64;
        p.oc = y.strides[3] as i64;
        let win = base.input(inputs, 2).map_or(0, ptr_of);
        self.fns
            .launch(base, x.dtype, ptr_of(x), win, mut_ptr_of(y), &p)
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }

    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }
}

fn stft(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let onesided = attr_int(node, "onesided")?.unwrap_or(1) != 0;
    let base = Base::new(rt, node);
    let fns = DftFns::load(&base)?;
    let host = HostReads::new(&base, &[1, 3], "frame_step / frame_length");
    Ok(Box::new(StftKernel {
        base,
        host,
        onesided,
        fns,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "STFT", 17, stft);
}
