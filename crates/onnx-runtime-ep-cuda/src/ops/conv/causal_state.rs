//! CausalConvWithState (opset 27): depthwise causal 1-D convolution of input (B, C, L) with
//! weight (C, 1, k) over `concat(past_state or zeros, input)` along the last axis, optional
//! bias (C) and fused SiLU (`activation` "silu" or its alias "swish"); present_state
//! (B, C, k - 1) is the last k - 1 positions of that concatenation (past values or zeros too
//! when L < k - 1).
//!
//! One launch of `kernels/causal_conv.cu` writes both outputs, one thread per element, time
//! fastest (coalesced along a row, and along channels in decode where L = 1). Every input may
//! be a strided view; float, float16 and bfloat16, half types accumulating in float32.
//! Capturable: no host reads, syncs or allocations.

use super::super::common::*;
use super::super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::sync::Arc;

/// The dtypes, with their kernel-name tags.
const DTYPES: [(DataType, &str); 3] = [
    (DataType::Float32, "f32"),
    (DataType::Float16, "f16"),
    (DataType::BFloat16, "bf16"),
];

/// The module of the CausalConvWithState kernels (one per dtype).
pub(super) fn module() -> ModuleSpec {
    ModuleSpec::new("causal_conv", include_str!("../../kernels/causal_conv.cu")).with_half()
}

/// Mirrors `CausalConvParams` in causal_conv.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct CausalConvParams {
    x: CuPtr,
    w: CuPtr,
    bias: CuPtr,
    past: CuPtr,
    y: CuPtr,
    present: CuPtr,
    xs: [i64; 3],
    ws: [i64; 2],
    bs: i64,
    ps: [i64; 3],
    ys: [i64; 3],
    ss: [i64; 3],
    c: i64,
    l: i64,
    k: i64,
    ny: i64,
    n: i64,
    silu: i32,
    _pad: i32,
}

struct CausalConv {
    base: Base,
    /// As in [`DTYPES`].
    fns: [Function; 3],
    silu: bool,
}

/// The shapes of one call: (dtype, batch, channels, length, kernel size).
type Plan = (DataType, usize, usize, usize, usize);

fn strides3(s: &[usize]) -> [i64; 3] {
    [s[0] as i64, s[1] as i64, s[2] as i64]
}

impl CausalConv {
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<Plan> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let bias = base.input(inputs, 2);
        let past = base.input(inputs, 3);
        let dtype = x.dtype;
        if !DTYPES.iter().any(|d| d.0 == dtype) {
            return Err(base.unsupported(
                dtype,
                "CausalConvWithState takes float, float16 or bfloat16",
            ));
        }
        for (what, t) in [("weight", Some(w)), ("bias", bias), ("past_state", past)] {
            if let Some(t) = t {
                base.same_dtype(dtype, t.dtype, what)?;
            }
        }
        let [b, c, l] = *x.shape else {
            return Err(base.err(format!(
                "input must be (batch, channels, length), got {:?}",
                x.shape
            )));
        };
        let k = match *w.shape {
            [wc, 1, k] if wc == c && k >= 1 => k,
            _ => {
                return Err(base.err(format!(
                    "weight {:?} must be ({c}, 1, k) with k >= 1",
                    w.shape
                )))
            }
        };
        if let Some(bt) = bias {
            if bt.shape != [c] {
                return Err(base.err(format!("bias {:?} must be [{c}]", bt.shape)));
            }
        }
        if let Some(p) = past {
            if p.shape != [b, c, k - 1] {
                return Err(base.err(format!(
                    "past_state {:?} must be [{b}, {c}, {}]",
                    p.shape,
                    k - 1
                )));
            }
        }
        Ok((dtype, b, c, l, k))
    }
}

impl Kernel for CausalConv {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (dtype, b, c, l, k) = self.plan(inputs)?;
        Ok(vec![(dtype, vec![b, c, l]), (dtype, vec![b, c, k - 1])])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (dtype, b, c, l, k) = self.plan(inputs)?;
        // present_state may be left off by the caller.
        let want = [(dtype, vec![b, c, l]), (dtype, vec![b, c, k - 1])];
        base.expect_outputs(outputs, &want[..outputs.len().clamp(1, 2)])?;
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let bias = base.input(inputs, 2);
        let past = base.input(inputs, 3);
        let y = &outputs[0];
        let present = outputs.get(1);
        let ny = checked_numel(base, &[b, c, l])?;
        let n_state = if present.is_some() {
            checked_numel(base, &[b, c, k - 1])?
        } else {
            0
        };
        let n = ny
            .checked_add(n_state)
            .filter(|&n| n <= i64::MAX as usize)
            .ok_or_else(|| base.err("the outputs have more elements than a launch covers"))?;
        if n == 0 {
            return Ok(());
        }
        let mut p = CausalConvParams {
            x: ptr_of(x),
            w: ptr_of(w),
            bias: bias.map_or(0, ptr_of),
            past: past.map_or(0, ptr_of),
            y: mut_ptr_of(y),
            present: present.map_or(0, mut_ptr_of),
            xs: strides3(x.strides),
            ws: [w.strides[0] as i64, w.strides[2] as i64],
            bs: bias.map_or(0, |t| t.strides[0] as i64),
            ps: past.map_or([0; 3], |t| strides3(t.strides)),
            ys: strides3(y.strides),
            ss: present.map_or([0; 3], |t| strides3(t.strides)),
            c: c as i64,
            l: l as i64,
            k: k as i64,
            ny: ny as i64,
            n: n as i64,
            silu: self.silu as i32,
            _pad: 0,
        };
        let di = DTYPES
            .iter()
            .position(|d| d.0 == dtype)
            .expect("dtype checked by plan");
        let mut args = [arg(&mut p)];
        // SAFETY: causal_conv_<T>(CausalConvParams) reads input, weight, bias and past_state
        // inside their views (shapes checked by `plan`) and writes the n elements of the
        // output and present_state views.
        unsafe { base.rt.launch(self.fns[di], n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let silu = match attr_string(node, "activation")?
        .as_deref()
        .unwrap_or("none")
    {
        "none" => false,
        "silu" | "swish" => true,
        other => {
            return Err(EpError::invalid_attribute(
                node,
                "activation",
                format!("'{other}' is not none, silu or swish"),
            ))
        }
    };
    let base = Base::new(rt, node);
    let module = base.module(&module())?;
    let f = |tag: &str| module.function(&format!("causal_conv_{tag}"));
    let fns = [f(DTYPES[0].1)?, f(DTYPES[1].1)?, f(DTYPES[2].1)?];
    Ok(Box::new(CausalConv { base, fns, silu }))
}

pub fn register(r: &mut Registry) {
    r.register("", "CausalConvWithState", 27, build);
}
