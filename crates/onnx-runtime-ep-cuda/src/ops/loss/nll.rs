//! NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (log-softmax over axis 1, then the
//! NLL loss), reduction none / sum / mean (the weighted mean over non-ignored targets), with
//! optional class weights, `ignore_index` and SCE's optional `log_prob` output. Scores are
//! float, double, float16 or bfloat16 of shape `(N, C, d1..dk)` with any strides; targets are
//! int32 or int64 of shape `(N, d1..dk)`.
//!
//! One launch computes every position's loss (a thread per position, or a warp per position
//! for SCE with many classes and few inner positions, where the class walk dominates); for
//! sum and mean it writes one (loss, weight) partial per block to a per-runtime workspace and
//! a second one-block launch reduces them into the scalar (the mean's divisor is summed on the
//! device: no host synchronization). Targets out of range (and not `ignore_index`) are never
//! dereferenced; they are reported through the device error word.

use super::super::common::*;
use super::super::params::MAX_RANK;
use super::super::Registry;
use super::loss_module;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

/// Mirrors `LossParams` in `kernels/loss.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct LossParams {
    positions: i64,
    classes: i64,
    rank: i32,
    softmax: i32,
    dims: [i64; MAX_RANK],
    xs: [i64; MAX_RANK],
    ts: [i64; MAX_RANK],
    os: [i64; MAX_RANK],
    ls: [i64; MAX_RANK],
    x_cstride: i64,
    l_cstride: i64,
    w_stride: i64,
    ignore_index: i64,
    has_ignore: i32,
    has_weight: i32,
    reduce: i32,
    has_logp: i32,
    id: u32,
    _pad: u32,
}

/// Most blocks a reducing launch uses (the workspace holds one (loss, weight) pair of f64
/// per block).
const MAX_PARTS: usize = 1024;
const BLOCK: u32 = 256;

/// The per-runtime workspace for the block partials. Work on the runtime's one stream is
/// ordered, so every loss kernel can share it.
struct LossWorkspace {
    ptr: CuPtr,
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Reduction {
    None,
    Sum,
    Mean,
}

/// The kernels of one score type: `[i32 target, i64 target] x [thread, warp]` and the final
/// reduction.
struct TypeFns {
    body: [[Function; 2]; 2],
    fin: Function,
}

struct LossKernel {
    base: Base,
    softmax: bool,
    reduction: Reduction,
    ignore_index: Option<i64>,
    fns: HashMap<DataType, TypeFns>,
    ws: Arc<LossWorkspace>,
}

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

impl LossKernel {
    fn op(&self) -> &'static str {
        if self.softmax {
            "SoftmaxCrossEntropyLoss"
        } else {
            "NegativeLogLikelihoodLoss"
        }
    }

    /// Whether the node asks for SCE's `log_prob` output.
    fn wants_logp(&self) -> bool {
        self.softmax && self.base.outputs > 1
    }

    /// Checks the inputs and gives the outputs' dtypes and shapes.
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let t = base.req(inputs, 1)?;
        if !self.fns.contains_key(&x.dtype) {
            return Err(base.unsupported(
                x.dtype,
                format!(
                    "the CUDA {} takes float, double, float16 and bfloat16 scores",
                    self.op()
                ),
            ));
        }
        if !matches!(t.dtype, DataType::Int32 | DataType::Int64) {
            return Err(base.unsupported(t.dtype, "targets must be int32 or int64"));
        }
        let shape = x.shape;
        if shape.len() < 2 {
            return Err(base.err(format!(
                "input must have shape (N, C, d1, ..., dk), got {shape:?}"
            )));
        }
        check_view_rank(base, shape)?;
        let mut want_t = vec![shape[0]];
        want_t.extend_from_slice(&shape[2..]);
        if t.shape != want_t.as_slice() {
            return Err(base.err(format!(
                "target shape {:?} must be {want_t:?} for input shape {shape:?}",
                t.shape
            )));
        }
        if let Some(w) = base.input(inputs, 2) {
            if w.shape != [shape[1]] {
                return Err(base.err(format!(
                    "weight shape {:?} must be [{}] (one weight per class)",
                    w.shape, shape[1]
                )));
            }
            if w.dtype != x.dtype {
                return Err(base.unsupported(
                    w.dtype,
                    format!("the weights must have the scores' dtype {}", x.dtype),
                ));
            }
        }
        let loss_shape = match self.reduction {
            Reduction::None => want_t,
            _ => Vec::new(),
        };
        let mut out = vec![(x.dtype, loss_shape)];
        if self.wants_logp() {
            out.push((x.dtype, shape.to_vec()));
        }
        Ok(out)
    }
}

impl Kernel for LossKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        self.plan(inputs)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let want = self.plan(inputs)?;
        base.expect_outputs(outputs, &want)?;
        let x = base.req(inputs, 0)?;
        let t = base.req(inputs, 1)?;
        let w = base.input(inputs, 2);
        let fns = &self.fns[&x.dtype];
        let (n, c) = (x.shape[0], x.shape[1]);
        let inner: usize = x.shape[2..].iter().product();
        let positions = n * inner;
        let rank = x.rank() - 1;

        // Position axes: 0 and 2.. of the scores.
        let pos_axes: Vec<usize> = std::iter::once(0).chain(2..x.rank()).collect();
        let mut p = LossParams {
            positions: positions as i64,
            classes: c as i64,
            rank: rank as i32,
            softmax: self.softmax as i32,
            x_cstride: x.strides[1] as i64,
            w_stride: w.map_or(0, |w| w.strides[0] as i64),
            ignore_index: self.ignore_index.unwrap_or(0),
            has_ignore: self.ignore_index.is_some() as i32,
            has_weight: w.is_some() as i32,
            reduce: (self.reduction != Reduction::None) as i32,
            id: base.id,
            ..Default::default()
        };
        for (k, &a) in pos_axes.iter().enumerate() {
            p.dims[k] = x.shape[a] as i64;
            p.xs[k] = x.strides[a] as i64;
            p.ts[k] = t.strides[k] as i64;
        }
        let out_ptr = mut_ptr_of(&outputs[0]);
        if self.reduction == Reduction::None {
            for k in 0..rank {
                p.os[k] = outputs[0].strides[k] as i64;
            }
        }
        let mut logp_ptr: CuPtr = 0;
        if self.wants_logp() {
            let lp = &outputs[1];
            logp_ptr = mut_ptr_of(lp);
            p.has_logp = 1;
            p.l_cstride = lp.strides[1] as i64;
            for (k, &a) in pos_axes.iter().enumerate() {
                p.ls[k] = lp.strides[a] as i64;
            }
        }

        // A warp per position when the class walk dominates and positions are few or not
        // adjacent in memory; else a thread per position (adjacent threads read adjacent
        // inner positions).
        let warp = self.softmax && c >= 32 && inner < 32;
        let g: usize = if warp { 32 } else { 1 };
        let wanted = (positions * g).div_ceil(BLOCK as usize).max(1);
        let cap = if self.reduction == Reduction::None {
            self.base.rt.sm_count() as usize * 16
        } else {
            (self.base.rt.sm_count() as usize * 4).min(MAX_PARTS)
        };
        let blocks = wanted.min(cap.max(1)) as u32;
        let f = fns.body[(t.dtype == DataType::Int64) as usize][warp as usize];

        let (mut px, mut pt) = (ptr_of(x), ptr_of(t));
        let mut pw: CuPtr = w.map_or(0, ptr_of);
        let mut po: CuPtr = if self.reduction == Reduction::None {
            out_ptr
        } else {
            0
        };
        let mut pl = logp_ptr;
        let mut parts = self.ws.ptr;
        let mut err = base.rt.err_ptr();
        if positions > 0 || self.reduction != Reduction::None {
            let mut args = [
                arg(&mut px),
                arg(&mut pt),
                arg(&mut pw),
                arg(&mut po),
                arg(&mut pl),
                arg(&mut parts),
                arg(&mut err),
                arg(&mut p),
            ];
            // SAFETY: loss_T_I_gG(x, t, w, out, logp, partials, err, LossParams): every walk
            // stays inside the views (targets are bounds-checked on the device); the
            // workspace holds MAX_PARTS >= blocks pairs.
            unsafe {
                base.rt
                    .launch_cfg(f, (blocks, 1, 1), (BLOCK, 1, 1), 0, &mut args)?
            };
        }
        if self.reduction == Reduction::None {
            return Ok(());
        }
        let mut parts = self.ws.ptr;
        let mut nparts = blocks as i32;
        let mut mean = (self.reduction == Reduction::Mean) as i32;
        let mut po = out_ptr;
        let mut args = [
            arg(&mut parts),
            arg(&mut nparts),
            arg(&mut mean),
            arg(&mut po),
        ];
        // SAFETY: loss_final_T(partials, nparts, mean, out) reads the pairs the launch above
        // wrote and writes the scalar output.
        unsafe {
            base.rt
                .launch_cfg(fns.fin, (1, 1, 1), (BLOCK, 1, 1), 0, &mut args)
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    softmax: bool,
) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let reduction = match attr_string(node, "reduction")?.as_deref().unwrap_or("mean") {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "mean" => Reduction::Mean,
        other => {
            return Err(EpError::invalid_attribute(
                node,
                "reduction",
                format!("'{other}' is not one of none, sum, mean"),
            ))
        }
    };
    let base = Base::new(rt, node);
    let module = base.module(&loss_module())?;
    let mut fns = HashMap::new();
    for dtype in FLOATS {
        let tag = type_tag(dtype).unwrap_or("f32");
        let f = |i: &str, g: u32| module.function(&format!("loss_{tag}_{i}_g{g}"));
        fns.insert(
            dtype,
            TypeFns {
                body: [[f("i32", 1)?, f("i32", 32)?], [f("i64", 1)?, f("i64", 32)?]],
                fin: module.function(&format!("loss_final_{tag}"))?,
            },
        );
    }
    let ws = rt.extension(|rt| {
        let (ptr, _) = rt.allocate(MAX_PARTS * 16, 256)?;
        Ok(LossWorkspace { ptr })
    })?;
    Ok(Box::new(LossKernel {
        base,
        softmax,
        reduction,
        ignore_index: attr_int(node, "ignore_index")?,
        fns,
        ws,
    }))
}

fn nll(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, false)
}

fn sce(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, true)
}

pub fn register(r: &mut Registry) {
    for since in [12, 13, 22] {
        r.register("", "NegativeLogLikelihoodLoss", since, nll);
    }
    // SoftmaxCrossEntropyLoss has versions 12 and 13 only (13 serves later opsets).
    for since in [12, 13] {
        r.register("", "SoftmaxCrossEntropyLoss", since, sce);
    }
}
