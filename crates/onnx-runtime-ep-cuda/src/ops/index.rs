//! Indexed reads and writes: Gather, GatherElements, GatherND, ScatterND, ScatterElements
//! (and the deprecated Scatter). All five are one walk over an iteration shape whose axes feed
//! the data side, the indices and the other side through strides, plus up to 8 gathered index
//! components ([`IndexParams`]). Indices live on the device: an index out of range is skipped
//! by the kernel and reported at the next synchronization.

use super::common::*;
use super::params::{IndexParams, MAX_DIMS, MAX_RANK};
use super::Registry;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Gather,
    GatherElements,
    GatherNd,
    ScatterNd,
    ScatterElements,
}

struct IndexKernel {
    base: Base,
    op: Op,
    axis: i64,
    batch_dims: usize,
    /// 0 none, 1 add, 2 mul, 3 max, 4 min.
    reduction: i32,
    /// Width kernels `gather_w*_i32`, `gather_w*_i64` (or scatter).
    move_i32: WidthFns,
    move_i64: WidthFns,
    copy: WidthFns,
    /// Typed reduction kernels by (dtype, index is i64).
    reduce: HashMap<(DataType, bool), Function>,
}

/// One walk: iteration dims and per-axis strides of the three operands.
#[derive(Default)]
struct Walk {
    dims: Vec<usize>,
    dsf: Vec<i64>,
    isf: Vec<i64>,
    osf: Vec<i64>,
    nd_dims: Vec<i64>,
    nd_strides: Vec<i64>,
    idx_last_stride: i64,
}

impl Walk {
    fn push(&mut self, dim: usize, d: i64, i: i64, o: i64) {
        self.dims.push(dim);
        self.dsf.push(d);
        self.isf.push(i);
        self.osf.push(o);
    }
}

impl IndexKernel {
    fn idx_is_i64(&self, idx: &TensorView<'_>) -> EpResult<bool> {
        match idx.dtype {
            DataType::Int64 => Ok(true),
            DataType::Int32 if !matches!(self.op, Op::GatherNd | Op::ScatterNd) => Ok(false),
            other => Err(self
                .base
                .unsupported(other, "indices must be int64 (or int32)")),
        }
    }

    fn launch(&self, f: Function, walk: Walk, ptrs: [CuPtr; 3], reduce: bool) -> EpResult<()> {
        let base = &self.base;
        let n: usize = walk.dims.iter().product();
        if n == 0 {
            return Ok(());
        }
        if walk.dims.len() > MAX_DIMS || walk.nd_dims.len() > MAX_RANK {
            return Err(base.err(format!(
                "the index walk has {} axes and {} index components; limits are {MAX_DIMS} and {MAX_RANK}",
                walk.dims.len(),
                walk.nd_dims.len()
            )));
        }
        let mut p = IndexParams {
            n: n as i64,
            rank: walk.dims.len() as i32,
            k: walk.nd_dims.len() as i32,
            dims: fill(&walk.dims.iter().map(|&d| d as i64).collect::<Vec<_>>()),
            dsf: fill(&walk.dsf),
            isf: fill(&walk.isf),
            osf: fill(&walk.osf),
            nd_dims: fill(&walk.nd_dims),
            nd_strides: fill(&walk.nd_strides),
            idx_last_stride: walk.idx_last_stride,
            id: base.id,
            _pad: 0,
        };
        let [mut a, mut b, mut c] = ptrs;
        let mut err = base.rt.err_ptr();
        let mut op = self.reduction;
        let mut args = vec![
            arg(&mut a),
            arg(&mut b),
            arg(&mut c),
            arg(&mut err),
            arg(&mut p),
        ];
        if reduce {
            args.push(arg(&mut op));
        }
        // SAFETY: the kernel's signature is (ptr, idx, ptr, err, IndexParams[, op]); every
        // walk stays inside the views and index components are bounds-checked on the device.
        unsafe { base.rt.launch(f, n as u64, &mut args) }
    }

    /// The output's dtype (the data's) and shape, once the indices (and the updates of a
    /// scatter) are checked against the data.
    fn output_type(&self, inputs: &[TensorView<'_>]) -> EpResult<(DataType, Vec<usize>)> {
        let base = &self.base;
        let (data, idx) = (base.req(inputs, 0)?, base.req(inputs, 1)?);
        check_view_rank(base, data.shape)?;
        check_view_rank(base, idx.shape)?;
        base.width(data.dtype)?;
        let i64_idx = self.idx_is_i64(idx)?;
        let r = data.rank();
        let shape = match self.op {
            Op::Gather => {
                let axis = base.axis(self.axis, r, "axis")?;
                let mut want = data.shape[..axis].to_vec();
                want.extend_from_slice(idx.shape);
                want.extend_from_slice(&data.shape[axis + 1..]);
                want
            }
            Op::GatherElements => {
                let axis = base.axis(self.axis, r, "axis")?;
                if idx.rank() != r || (0..r).any(|k| k != axis && idx.shape[k] > data.shape[k]) {
                    return Err(base.err(format!(
                        "indices of shape {:?} do not fit data of shape {:?} (same rank, no \
                         larger outside axis {axis})",
                        idx.shape, data.shape
                    )));
                }
                idx.shape.to_vec()
            }
            Op::GatherNd => {
                let b = self.batch_dims;
                let q = idx.rank();
                if q < 1 {
                    return Err(base.err("indices must have rank 1 or more"));
                }
                let k = idx.shape[q - 1];
                if b >= q || b > r || k + b > r || data.shape[..b] != idx.shape[..b] {
                    return Err(base.err(format!(
                        "indices of shape {:?} do not fit data of shape {:?} with batch_dims {b}",
                        idx.shape, data.shape
                    )));
                }
                let mut want = idx.shape[..q - 1].to_vec();
                want.extend_from_slice(&data.shape[b + k..]);
                want
            }
            Op::ScatterNd | Op::ScatterElements => {
                let upd = base.req(inputs, 2)?;
                base.same_dtype(data.dtype, upd.dtype, "updates")?;
                self.check_scatter(data, idx, upd)?;
                if self.reduction != 0 && !self.reduce.contains_key(&(data.dtype, i64_idx)) {
                    return Err(base.unsupported(data.dtype, "no reduction kernel for this dtype"));
                }
                data.shape.to_vec()
            }
        };
        Ok((data.dtype, shape))
    }

    /// Checks that a scatter's indices and updates fit its data.
    fn check_scatter(
        &self,
        data: &TensorView<'_>,
        idx: &TensorView<'_>,
        upd: &TensorView<'_>,
    ) -> EpResult<()> {
        let r = data.rank();
        let fits = if self.op == Op::ScatterElements {
            let axis = self.base.axis(self.axis, r, "axis")?;
            idx.rank() == r
                && upd.shape == idx.shape
                && (0..r).all(|k| k == axis || idx.shape[k] <= data.shape[k])
        } else {
            let q = idx.rank();
            let k = if q >= 1 { idx.shape[q - 1] } else { usize::MAX };
            let mut want_upd = Vec::new();
            if q >= 1 && k <= r {
                want_upd.extend_from_slice(&idx.shape[..q - 1]);
                want_upd.extend_from_slice(&data.shape[k..]);
            }
            q >= 1 && k <= r && upd.shape == want_upd.as_slice()
        };
        if !fits {
            return Err(self.base.err(format!(
                "indices {:?} and updates {:?} do not fit data {:?}",
                idx.shape, upd.shape, data.shape
            )));
        }
        Ok(())
    }

    /// Gathers into `out` (whose dtype and shape `output_type` checked).
    fn gather(
        &self,
        data: &TensorView<'_>,
        idx: &TensorView<'_>,
        out: &TensorMut<'_>,
    ) -> EpResult<()> {
        let base = &self.base;
        let r = data.rank();
        let mut w = Walk::default();
        match self.op {
            Op::Gather => {
                let axis = base.axis(self.axis, r, "axis")?;
                let os = istrides(out.strides);
                let mut o = 0;
                for k in 0..axis {
                    w.push(data.shape[k], data.strides[k] as i64, 0, os[o]);
                    o += 1;
                }
                for k in 0..idx.rank() {
                    w.push(idx.shape[k], 0, idx.strides[k] as i64, os[o]);
                    o += 1;
                }
                for k in axis + 1..r {
                    w.push(data.shape[k], data.strides[k] as i64, 0, os[o]);
                    o += 1;
                }
                w.nd_dims.push(data.shape[axis] as i64);
                w.nd_strides.push(data.strides[axis] as i64);
            }
            Op::GatherElements => {
                let axis = base.axis(self.axis, r, "axis")?;
                for k in 0..r {
                    let d = if k == axis { 0 } else { data.strides[k] as i64 };
                    w.push(
                        idx.shape[k],
                        d,
                        idx.strides[k] as i64,
                        out.strides[k] as i64,
                    );
                }
                w.nd_dims.push(data.shape[axis] as i64);
                w.nd_strides.push(data.strides[axis] as i64);
            }
            _ => {
                let b = self.batch_dims;
                let q = idx.rank();
                let k = idx.shape[q - 1];
                let os = istrides(out.strides);
                for (j, &o) in os.iter().enumerate().take(q - 1) {
                    let d = if j < b { data.strides[j] as i64 } else { 0 };
                    w.push(idx.shape[j], d, idx.strides[j] as i64, o);
                }
                for (o, j) in (b + k..r).enumerate() {
                    w.push(data.shape[j], data.strides[j] as i64, 0, os[q - 1 + o]);
                }
                for j in 0..k {
                    w.nd_dims.push(data.shape[b + j] as i64);
                    w.nd_strides.push(data.strides[b + j] as i64);
                }
                w.idx_last_stride = idx.strides[q - 1] as i64;
            }
        }
        let width = base.width(data.dtype)?;
        let fns = if self.idx_is_i64(idx)? {
            &self.move_i64
        } else {
            &self.move_i32
        };
        self.launch(
            fns.get(width),
            w,
            [ptr_of(data), ptr_of(idx), mut_ptr_of(out)],
            false,
        )
    }

    /// Scatters into `out` (whose dtype and shape `output_type` checked, like the fit of the
    /// indices and updates).
    fn scatter(
        &self,
        data: &TensorView<'_>,
        idx: &TensorView<'_>,
        upd: &TensorView<'_>,
        out: &TensorMut<'_>,
    ) -> EpResult<()> {
        let base = &self.base;
        let r = data.rank();
        let mut w = Walk::default();
        if self.op == Op::ScatterElements {
            let axis = base.axis(self.axis, r, "axis")?;
            for k in 0..r {
                let d = if k == axis { 0 } else { out.strides[k] as i64 };
                w.push(
                    idx.shape[k],
                    d,
                    idx.strides[k] as i64,
                    upd.strides[k] as i64,
                );
            }
            w.nd_dims.push(data.shape[axis] as i64);
            w.nd_strides.push(out.strides[axis] as i64);
        } else {
            let q = idx.rank();
            let k = idx.shape[q - 1];
            for j in 0..q - 1 {
                w.push(
                    idx.shape[j],
                    0,
                    idx.strides[j] as i64,
                    upd.strides[j] as i64,
                );
            }
            for (o, j) in (k..r).enumerate() {
                w.push(
                    data.shape[j],
                    out.strides[j] as i64,
                    0,
                    upd.strides[q - 1 + o] as i64,
                );
            }
            for j in 0..k {
                w.nd_dims.push(data.shape[j] as i64);
                w.nd_strides.push(out.strides[j] as i64);
            }
            w.idx_last_stride = idx.strides[q - 1] as i64;
        }
        let width = base.width(data.dtype)?;
        // The output starts as a copy of the data.
        copy_strided(
            base,
            &self.copy,
            width,
            ptr_of(data),
            mut_ptr_of(out),
            data.shape,
            &istrides(data.strides),
            &istrides(out.strides),
            0,
            0,
        )?;
        let i64_idx = self.idx_is_i64(idx)?;
        let ptrs = [mut_ptr_of(out), ptr_of(idx), ptr_of(upd)];
        if self.reduction == 0 {
            let fns = if i64_idx {
                &self.move_i64
            } else {
                &self.move_i32
            };
            self.launch(fns.get(width), w, ptrs, false)
        } else {
            let f = *self.reduce.get(&(data.dtype, i64_idx)).ok_or_else(|| {
                base.unsupported(data.dtype, "no reduction kernel for this dtype")
            })?;
            self.launch(f, w, ptrs, true)
        }
    }
}

impl Kernel for IndexKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        Ok(vec![self.output_type(inputs)?])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        base.expect_outputs(outputs, &self.output_types(inputs)?)?;
        let (data, idx) = (base.req(inputs, 0)?, base.req(inputs, 1)?);
        match self.op {
            Op::Gather | Op::GatherElements | Op::GatherNd => self.gather(data, idx, &outputs[0]),
            Op::ScatterNd | Op::ScatterElements => {
                let upd = base.req(inputs, 2)?;
                self.scatter(data, idx, upd, &outputs[0])
            }
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, op: Op) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let node = req.node;
    let scatter = matches!(op, Op::ScatterNd | Op::ScatterElements);
    let reduction = match attr_string(node, "reduction")?.as_deref().unwrap_or("none") {
        "none" => 0,
        "add" if req.opset >= 16 => 1,
        "mul" if req.opset >= 16 => 2,
        "max" if req.opset >= 18 => 3,
        "min" if req.opset >= 18 => 4,
        other => {
            return Err(EpError::invalid_attribute(
                node,
                "reduction",
                format!("'{other}' is not a reduction at opset {} (none, add, mul from 16; max, min from 18)", req.opset),
            ))
        }
    };
    let batch_dims = attr_int(node, "batch_dims")?.unwrap_or(0);
    if batch_dims < 0 {
        return Err(EpError::invalid_attribute(
            node,
            "batch_dims",
            "must be >= 0",
        ));
    }
    let module = base.module(&index_module())?;
    let prefix = if scatter { "scatter" } else { "gather" };
    let move_i32 = WidthFns::load(&module, prefix, "_i32")?;
    let move_i64 = WidthFns::load(&module, prefix, "_i64")?;
    let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
    let mut reduce = HashMap::new();
    if reduction != 0 {
        let m = base.module(&scatter_reduce_module())?;
        for (dtype, tag, _) in TYPED {
            for (is64, it) in [(false, "i32"), (true, "i64")] {
                reduce.insert(
                    (dtype, is64),
                    m.function(&format!("scatter_reduce_{tag}_{it}"))?,
                );
            }
        }
    }
    Ok(Box::new(IndexKernel {
        base,
        op,
        axis: attr_int(node, "axis")?.unwrap_or(0),
        batch_dims: batch_dims as usize,
        reduction,
        move_i32,
        move_i64,
        copy,
        reduce,
    }))
}

fn gather(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Op::Gather)
}
fn gather_elements(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Op::GatherElements)
}
fn gather_nd(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Op::GatherNd)
}
fn scatter_nd(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Op::ScatterNd)
}
fn scatter_elements(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Op::ScatterElements)
}

pub fn register(r: &mut Registry) {
    r.register("", "Gather", 1, gather);
    r.register("", "GatherElements", 11, gather_elements);
    r.register("", "GatherND", 11, gather_nd);
    r.register("", "ScatterND", 11, scatter_nd);
    r.register("", "ScatterElements", 11, scatter_elements);
    r.register("", "Scatter", 9, scatter_elements);
}
