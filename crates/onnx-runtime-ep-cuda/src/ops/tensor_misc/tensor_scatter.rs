//! TensorScatter (opset 24): a copy of `past_cache` with `update` written along the sequence
//! `axis` (default -2; never the batch axis 0) at `write_indices[b]` for batch b (0 when the
//! input is omitted); `mode` linear (the default: the run must fit the cache) or circular
//! (positions wrap around `max_sequence_length`). Every fixed-width element type (strings
//! and sub-byte types run on the CPU provider), any strides. One gather pass with no races;
//! contiguous calls move the widest aligned words (16 bytes on an aligned cache). A bad write
//! index leaves that batch's cache unchanged and is reported as an error naming the node at
//! the next synchronization. Semantics mirror the CPU provider
//! (`onnx-runtime-ep-cpu/src/ops/tensor/tensor_scatter.rs`).

use crate::compiler::ModuleSpec;
use crate::ops::common::*;
use crate::ops::pool::{FastDiv, FAST_LIMIT};
use crate::ops::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use std::sync::Arc;

const TS_MAX: usize = 8;

/// Mirrors `struct ScatterParams` in `kernels/tensor_scatter.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ScatterParams {
    n: i64,
    rank: i32,
    axis: i32,
    max_seq: i64,
    seq: i64,
    ws: i64,
    has_w: i32,
    wcode: i32,
    circular: i32,
    fast: i32,
    id: u32,
    _pad: i32,
    dims: [i64; TS_MAX],
    div: [FastDiv; TS_MAX],
    ps: [i64; TS_MAX],
    us: [i64; TS_MAX],
    ys: [i64; TS_MAX],
}

/// TensorScatter by word width.
pub(super) fn tensor_scatter_module() -> ModuleSpec {
    ModuleSpec::new(
        "tensor_scatter",
        concat!(
            include_str!("../../kernels/pool_common.cuh"),
            include_str!("../../kernels/tensor_scatter.cu")
        ),
    )
    .with_half()
}

struct TensorScatterKernel {
    base: Base,
    axis: i64,
    circular: bool,
    /// `tensor_scatter_w{1,2,4,8,16}`.
    fns: [Function; 5],
}

fn slot(width: usize) -> Option<usize> {
    Some(match width {
        1 => 0,
        2 => 1,
        4 => 2,
        8 => 3,
        16 => 4,
        _ => return None,
    })
}

impl TensorScatterKernel {
    /// The normalized axis, checked against the inputs.
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<usize> {
        let base = &self.base;
        let past = base.req(inputs, 0)?;
        let upd = base.req(inputs, 1)?;
        base.width(past.dtype)?;
        if past.dtype != upd.dtype {
            return Err(base.err(format!(
                "past_cache is {} but update is {}",
                past.dtype, upd.dtype
            )));
        }
        let (ps, us) = (past.shape, upd.shape);
        let rank = ps.len();
        base.check_rank(rank, TS_MAX)?;
        let axis = base.axis(self.axis, rank, "axis")?;
        if axis == 0 {
            return Err(base.err("axis must not be the batch axis 0"));
        }
        if us.len() != rank || (0..rank).any(|i| i != axis && us[i] != ps[i]) || us[axis] > ps[axis]
        {
            return Err(base.err(format!(
                "update shape {us:?} must match past_cache shape {ps:?} except along axis \
                 {axis}, where it must not be longer"
            )));
        }
        if let Some(w) = base.input(inputs, 2) {
            if !w.dtype.is_integer() || w.dtype.is_sub_byte() {
                return Err(base.err(format!("write_indices must be integers, got {}", w.dtype)));
            }
            if w.numel() != ps[0] || w.rank() > 1 {
                return Err(base.err(format!(
                    "write_indices has shape {:?}; it needs one value per batch ({})",
                    w.shape, ps[0]
                )));
            }
        }
        Ok(axis)
    }
}

/// Whether `strides` are the row-major strides of `shape`.
fn is_contiguous(shape: &[usize], strides: &[usize]) -> bool {
    let mut want = 1usize;
    for (&d, &s) in shape.iter().zip(strides).rev() {
        if d != 1 && s != want {
            return false;
        }
        want *= d;
    }
    true
}

impl Kernel for TensorScatterKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        self.plan(inputs)?;
        let past = self.base.req(inputs, 0)?;
        Ok(vec![(past.dtype, past.shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let axis = self.plan(inputs)?;
        let past = base.req(inputs, 0)?;
        let upd = base.req(inputs, 1)?;
        let widx = base.input(inputs, 2);
        base.expect_outputs(outputs, &[(past.dtype, past.shape.to_vec())])?;
        let y = &outputs[0];
        let n = y.numel();
        if n == 0 {
            return Ok(());
        }
        let width = base.width(past.dtype)?;
        let rank = past.rank();
        let (max_seq, seq) = (past.shape[axis], upd.shape[axis]);
        let mut p = ScatterParams {
            max_seq: max_seq as i64,
            seq: seq as i64,
            circular: self.circular as i32,
            id: base.id,
            ..Default::default()
        };
        let mut pw = 0;
        if let Some(w) = widx {
            pw = ptr_of(w);
            p.has_w = 1;
            p.ws = w.strides.first().copied().unwrap_or(0) as i64;
            p.wcode = w.dtype.onnx_code();
        }
        let (pp, pu, py) = (ptr_of(past), ptr_of(upd), mut_ptr_of(y));
        let dense = is_contiguous(past.shape, past.strides)
            && is_contiguous(upd.shape, upd.strides)
            && is_contiguous(y.shape, y.strides);
        let word;
        let dims: Vec<usize>;
        if dense {
            // [batch, mid, max_seq, inner words] with the widest word that divides the inner
            // run and every base address.
            let inner_bytes = past.shape[axis + 1..].iter().product::<usize>() * width;
            word = [16usize, 8, 4, 2]
                .into_iter()
                .find(|&w| {
                    inner_bytes.is_multiple_of(w)
                        && [pp, pu, py].iter().all(|&a| a.is_multiple_of(w as u64))
                })
                .unwrap_or(1);
            let inner = inner_bytes / word;
            let mid: usize = past.shape[1..axis].iter().product();
            dims = vec![past.shape[0], mid, max_seq, inner];
            let c = |s: usize| contiguous(&[past.shape[0], mid, s, inner]);
            let (cp, cu) = (c(max_seq), c(seq));
            p.axis = 2;
            p.rank = 4;
            p.ps = fill(&cp);
            p.ys = fill(&cp);
            p.us = fill(&cu);
        } else {
            word = width;
            dims = past.shape.to_vec();
            p.axis = axis as i32;
            p.rank = rank as i32;
            p.ps = fill(&istrides(past.strides));
            p.us = fill(&istrides(upd.strides));
            p.ys = fill(&istrides(y.strides));
        }
        let words: usize = dims.iter().product();
        p.n = words as i64;
        p.fast = (words <= FAST_LIMIT) as i32;
        for (k, &d) in dims.iter().enumerate() {
            p.dims[k] = d as i64;
            p.div[k] = FastDiv::new(d);
        }
        let f = self.fns[slot(word).ok_or_else(|| base.err("no kernel for this word width"))?];
        let (mut a, mut b, mut c, mut e) = (pp, pu, py, base.rt.err_ptr());
        let mut args = [
            arg(&mut a),
            arg(&mut b),
            arg(&mut pw),
            arg(&mut c),
            arg(&mut e),
            arg(&mut p),
        ];
        // SAFETY: tensor_scatter_wW(past, update, widx, y, err, ScatterParams) reads past and
        // the update at in-range coordinates of their views (update positions are checked
        // against its sequence length), write_indices at batch coordinates, and writes each
        // output element of its view once.
        unsafe { base.rt.launch(f, words as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn tensor_scatter(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let circular = match attr_string(node, "mode")?.as_deref() {
        None | Some("linear") => false,
        Some("circular") => true,
        Some(other) => {
            return Err(EpError::invalid_attribute(
                node,
                "mode",
                format!("'{other}' is not 'linear' or 'circular'"),
            ))
        }
    };
    let axis = attr_int(node, "axis")?.unwrap_or(-2);
    let base = Base::new(rt, node);
    let module = base.module(&tensor_scatter_module())?;
    let f = |w: usize| module.function(&format!("tensor_scatter_w{w}"));
    let fns = [f(1)?, f(2)?, f(4)?, f(8)?, f(16)?];
    Ok(Box::new(TensorScatterKernel {
        base,
        axis,
        circular,
        fns,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "TensorScatter", 24, tensor_scatter);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(
            std::mem::size_of::<ScatterParams>(),
            8 + 8 + 24 + 24 + 8 * 8 * 4 + 16 * 8
        );
    }

    #[test]
    fn contiguity() {
        assert!(is_contiguous(&[2, 3], &[3, 1]));
        assert!(is_contiguous(&[2, 1], &[1, 7]));
        assert!(!is_contiguous(&[2, 3], &[1, 2]));
    }
}
