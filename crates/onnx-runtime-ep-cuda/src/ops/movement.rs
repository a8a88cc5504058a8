//! Data movement as strided copies: Transpose, Expand, Tile, Slice, Concat, Split. Each is one
//! launch of `copy_nd_w{width}` per input/output (or a `cuMemcpyDtoDAsync` when the walk is
//! contiguous), with the walk's shape and strides passed by value.

use super::common::*;
use super::Registry;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use std::sync::Arc;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Op {
    Transpose,
    Expand,
    Tile,
    Slice,
    Concat,
    Split,
}

struct MoveKernel {
    base: Base,
    host: HostReads,
    op: Op,
    fns: WidthFns,
    /// Transpose's perm; Slice's starts/ends/axes before opset 10; Split's split attribute.
    ints: Option<Vec<i64>>,
    ends: Option<Vec<i64>>,
    axes: Option<Vec<i64>>,
    axis: i64,
    num_outputs: Option<i64>,
}

/// Slice's walk: the first element and the step along every axis, and the output shape.
struct SlicePlan {
    start: Vec<i64>,
    step: Vec<i64>,
    shape: Vec<usize>,
}

/// Clamped start and output length of one sliced axis (ONNX Slice rules).
pub fn slice_axis(dim: usize, start: i64, end: i64, step: i64) -> (i64, usize) {
    let d = dim as i64;
    let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (s, e) = if step > 0 {
        (norm(start).clamp(0, d), norm(end).clamp(0, d))
    } else {
        (
            norm(start).clamp(0, (d - 1).max(0)),
            norm(end).clamp(-1, d - 1),
        )
    };
    // In i128: a step near i64::MIN or i64::MAX must not overflow.
    let (s_, e_, step_) = (s as i128, e as i128, step as i128);
    let len = if step > 0 {
        if e > s {
            (e_ - s_ + step_ - 1) / step_
        } else {
            0
        }
    } else if s > e {
        (s_ - e_ - step_ - 1) / -step_
    } else {
        0
    };
    (s, if dim == 0 { 0 } else { len as usize })
}

impl MoveKernel {
    #[allow(clippy::too_many_arguments)]
    fn copy(
        &self,
        x: &TensorView<'_>,
        out: &TensorMut<'_>,
        dims: &[usize],
        a: &[i64],
        b: &[i64],
        a_off: i64,
        b_off: i64,
    ) -> EpResult<()> {
        let width = self.base.width(x.dtype)?;
        copy_strided(
            &self.base,
            &self.fns,
            width,
            ptr_of(x),
            mut_ptr_of(out),
            dims,
            a,
            b,
            a_off,
            b_off,
        )
    }

    /// Transpose's permutation: `perm`, or the axes reversed.
    fn perm(&self, rank: usize) -> EpResult<Vec<usize>> {
        let base = &self.base;
        let Some(p) = &self.ints else {
            return Ok((0..rank).rev().collect());
        };
        if p.len() != rank {
            return Err(base.err(format!("perm {p:?} does not match rank {rank}")));
        }
        let mut seen = vec![false; rank];
        let mut perm = Vec::with_capacity(rank);
        for &v in p {
            let k = base.axis(v, rank, "perm entry")?;
            if std::mem::replace(&mut seen[k], true) {
                return Err(base.err(format!("perm {p:?} repeats axis {v}")));
            }
            perm.push(k);
        }
        Ok(perm)
    }

    /// The host-read input 1 (Expand's shape, Tile's repeats).
    fn host_input<'h>(&self, host: &'h HostValues, what: &str) -> EpResult<&'h [i64]> {
        host.get(1)
            .and_then(Option::as_deref)
            .ok_or_else(|| self.base.err(format!("{what} is missing")))
    }

    /// Expand's output shape: the broadcast of the input's shape and `shape`.
    fn expand_shape(&self, x: &[usize], shape: &[i64]) -> EpResult<Vec<usize>> {
        let base = &self.base;
        if shape.iter().any(|&s| s < 0) {
            return Err(base.err(format!("shape {shape:?} has a negative entry")));
        }
        let target: Vec<usize> = shape.iter().map(|&s| s as usize).collect();
        broadcast_shapes(base, &[x, &target])
    }

    /// Tile's output shape: every axis times its repeat count.
    fn tile_shape(&self, x: &[usize], repeats: &[i64]) -> EpResult<Vec<usize>> {
        if repeats.len() != x.len() || repeats.iter().any(|&r| r < 0) {
            return Err(self.base.err(format!(
                "repeats {repeats:?} must have one non-negative entry per input axis ({})",
                x.len()
            )));
        }
        x.iter()
            .zip(repeats)
            .map(|(&d, &r)| {
                d.checked_mul(r as usize).ok_or_else(|| {
                    self.base.err(format!(
                        "repeats {repeats:?} overflow the input's shape {x:?}"
                    ))
                })
            })
            .collect()
    }

    /// Slice's walk for an input of shape `x`, from starts/ends/axes/steps (host-read, or the
    /// attributes before opset 10).
    fn slice_plan(&self, x: &[usize], host: &HostValues) -> EpResult<SlicePlan> {
        let base = &self.base;
        let rank = x.len();
        let (starts, ends, axes, steps) = if host.len() > 1 && host[1].is_some() {
            (
                host[1].clone().unwrap_or_default(),
                host.get(2)
                    .cloned()
                    .flatten()
                    .ok_or_else(|| base.err("ends is missing"))?,
                host.get(3).cloned().flatten(),
                host.get(4).cloned().flatten(),
            )
        } else {
            (
                self.ints.clone().unwrap_or_default(),
                self.ends.clone().unwrap_or_default(),
                self.axes.clone(),
                None,
            )
        };
        let axes = axes.unwrap_or_else(|| (0..starts.len() as i64).collect());
        let steps = steps.unwrap_or_else(|| vec![1; starts.len()]);
        if ends.len() != starts.len() || axes.len() != starts.len() || steps.len() != starts.len() {
            return Err(base.err(format!(
                "starts {starts:?}, ends {ends:?}, axes {axes:?} and steps {steps:?} must have the same length"
            )));
        }
        let mut plan = SlicePlan {
            start: vec![0; rank],
            step: vec![1; rank],
            shape: x.to_vec(),
        };
        let mut seen = vec![false; rank];
        for i in 0..starts.len() {
            let k = base.axis(axes[i], rank, "axis")?;
            if std::mem::replace(&mut seen[k], true) {
                return Err(base.err(format!("axes {axes:?} repeat axis {}", axes[i])));
            }
            if steps[i] == 0 {
                return Err(base.err("a step of 0 is not allowed"));
            }
            let (s, len) = slice_axis(x[k], starts[i], ends[i], steps[i]);
            plan.start[k] = s;
            plan.step[k] = steps[i];
            plan.shape[k] = len;
        }
        Ok(plan)
    }

    /// Concat's inputs (the wired ones, checked to agree outside the axis) and its axis.
    fn concat_views<'b, 'a>(
        &self,
        inputs: &'b [TensorView<'a>],
    ) -> EpResult<(Vec<&'b TensorView<'a>>, usize)> {
        let base = &self.base;
        let views: Vec<&TensorView<'_>> = (0..base.present.len())
            .filter_map(|p| base.input(inputs, p))
            .collect();
        let first = views
            .first()
            .ok_or_else(|| base.err("Concat needs inputs"))?;
        let rank = first.rank();
        let axis = base.axis(self.axis, rank, "axis")?;
        for v in &views {
            base.same_dtype(first.dtype, v.dtype, "input")?;
            if v.rank() != rank
                || v.shape
                    .iter()
                    .enumerate()
                    .any(|(k, &d)| k != axis && d != first.shape[k])
            {
                return Err(base.err(format!(
                    "inputs of shapes {:?} and {:?} cannot be concatenated on axis {}",
                    first.shape, v.shape, self.axis
                )));
            }
        }
        Ok((views, axis))
    }

    /// Split's output sizes along an axis of size `dim`, one per node output: the
    /// split input or attribute, else `num_outputs` near-equal chunks, else equal parts.
    fn split_sizes(&self, dim: usize, host: &HostValues) -> EpResult<Vec<usize>> {
        let base = &self.base;
        let n = base.outputs;
        if let Some(s) = host.get(1).cloned().flatten().or(self.ints.clone()) {
            let total = s.iter().try_fold(0i64, |t, &v| t.checked_add(v));
            if s.len() != n || s.iter().any(|&v| v < 0) || total != Some(dim as i64) {
                return Err(base.err(format!(
                    "split {s:?} must have {n} non-negative entries summing to the axis size {dim}"
                )));
            }
            Ok(s.iter().map(|&v| v as usize).collect())
        } else if let Some(k) = self.num_outputs {
            if k < 1 || k as usize != n {
                return Err(base.err(format!("num_outputs is {k} but the node has {n} outputs")));
            }
            let chunk = dim.div_ceil(n);
            Ok((0..n)
                .map(|i| chunk.min(dim.saturating_sub(chunk * i)))
                .collect())
        } else {
            if n == 0 || !dim.is_multiple_of(n) {
                return Err(base.err(format!(
                    "axis size {dim} does not split evenly into {n} outputs; give split sizes"
                )));
            }
            Ok(vec![dim / n; n])
        }
    }

    /// Every output's dtype (input 0's) and shape for these inputs and host-read values.
    fn output_types_with(
        &self,
        inputs: &[TensorView<'_>],
        host: &HostValues,
    ) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        base.width(x.dtype)?;
        let shapes = match self.op {
            Op::Transpose => vec![self.perm(x.rank())?.iter().map(|&p| x.shape[p]).collect()],
            Op::Expand => vec![self.expand_shape(x.shape, self.host_input(host, "shape")?)?],
            Op::Tile => vec![self.tile_shape(x.shape, self.host_input(host, "repeats")?)?],
            Op::Slice => vec![self.slice_plan(x.shape, host)?.shape],
            Op::Concat => {
                let (views, axis) = self.concat_views(inputs)?;
                let mut want = views[0].shape.to_vec();
                want[axis] = views.iter().map(|v| v.shape[axis]).sum();
                vec![want]
            }
            Op::Split => {
                let axis = base.axis(self.axis, x.rank(), "axis")?;
                let sizes = self.split_sizes(x.shape[axis], host)?;
                sizes
                    .into_iter()
                    .map(|s| {
                        let mut want = x.shape.to_vec();
                        want[axis] = s;
                        want
                    })
                    .collect()
            }
        };
        Ok(shapes.into_iter().map(|s| (x.dtype, s)).collect())
    }

    fn tile(&self, x: &TensorView<'_>, out: &TensorMut<'_>, repeats: &[i64]) -> EpResult<()> {
        let (mut dims, mut a, mut b) = (Vec::new(), Vec::new(), Vec::new());
        for (k, &rep) in repeats.iter().enumerate() {
            let os = out.strides[k] as i64;
            dims.extend([rep as usize, x.shape[k]]);
            a.extend([0, x.strides[k] as i64]);
            b.extend([x.shape[k] as i64 * os, os]);
        }
        self.copy(x, out, &dims, &a, &b, 0, 0)
    }

    fn slice(&self, x: &TensorView<'_>, out: &TensorMut<'_>, host: &HostValues) -> EpResult<()> {
        let plan = self.slice_plan(x.shape, host)?;
        let rank = x.rank();
        let a_off: i64 = (0..rank).map(|k| plan.start[k] * x.strides[k] as i64).sum();
        let a: Vec<i64> = (0..rank)
            .map(|k| plan.step[k] * x.strides[k] as i64)
            .collect();
        self.copy(x, out, out.shape, &a, &istrides(out.strides), a_off, 0)
    }

    fn concat(&self, inputs: &[TensorView<'_>], out: &TensorMut<'_>) -> EpResult<()> {
        let (views, axis) = self.concat_views(inputs)?;
        let b = istrides(out.strides);
        let mut offset = 0i64;
        for v in views {
            let b_off = offset * out.strides[axis] as i64;
            self.copy(v, out, v.shape, &istrides(v.strides), &b, 0, b_off)?;
            offset += v.shape[axis] as i64;
        }
        Ok(())
    }

    /// Copies one slab of the input into each output (whose shapes `output_types_with` gave).
    fn split(&self, x: &TensorView<'_>, outputs: &[TensorMut<'_>]) -> EpResult<()> {
        let axis = self.base.axis(self.axis, x.rank(), "axis")?;
        let a = istrides(x.strides);
        let mut offset = 0usize;
        for out in &outputs[..self.base.outputs] {
            let a_off = (offset * x.strides[axis]) as i64;
            self.copy(x, out, out.shape, &a, &istrides(out.strides), a_off, 0)?;
            offset += out.shape[axis];
        }
        Ok(())
    }
}

impl Kernel for MoveKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let host = self.host.peek(&self.base, inputs)?;
        self.output_types_with(inputs, &host)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let host = self.host.values(base, inputs, outputs)?;
        base.expect_outputs(outputs, &self.output_types_with(inputs, &host)?)?;
        let x = base.req(inputs, 0)?;
        let out = &outputs[0];
        let b = istrides(out.strides);
        match self.op {
            Op::Transpose => {
                let perm = self.perm(x.rank())?;
                let a: Vec<i64> = perm.iter().map(|&p| x.strides[p] as i64).collect();
                self.copy(x, out, out.shape, &a, &b, 0, 0)
            }
            Op::Expand => {
                let a = broadcast_strides(base, x.shape, x.strides, out.shape, "input")?;
                self.copy(x, out, out.shape, &a, &b, 0, 0)
            }
            Op::Tile => self.tile(x, out, self.host_input(&host, "repeats")?),
            Op::Slice => self.slice(x, out, &host),
            Op::Concat => self.concat(inputs, out),
            Op::Split => self.split(x, outputs),
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

fn build(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    op: Op,
    host_inputs: &[usize],
    what: &str,
) -> EpResult<MoveKernel> {
    let base = Base::new(rt, req.node);
    let module = base.module(&copy_module())?;
    let fns = WidthFns::load(&module, "copy_nd", "")?;
    let host = HostReads::new(&base, host_inputs, what);
    Ok(MoveKernel {
        base,
        host,
        op,
        fns,
        ints: None,
        ends: None,
        axes: None,
        axis: 0,
        num_outputs: None,
    })
}

fn transpose(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let mut k = build(rt, req, Op::Transpose, &[], "")?;
    k.ints = attr_ints(req.node, "perm")?;
    Ok(Box::new(k))
}

fn expand(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    Ok(Box::new(build(rt, req, Op::Expand, &[1], "shape input")?))
}

fn tile(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    Ok(Box::new(build(rt, req, Op::Tile, &[1], "repeats input")?))
}

fn slice(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    if req.opset < 10 {
        let mut k = build(rt, req, Op::Slice, &[], "")?;
        k.ints = Some(attr_ints(req.node, "starts")?.unwrap_or_default());
        k.ends = Some(attr_ints(req.node, "ends")?.unwrap_or_default());
        k.axes = attr_ints(req.node, "axes")?;
        Ok(Box::new(k))
    } else {
        Ok(Box::new(build(
            rt,
            req,
            Op::Slice,
            &[1, 2, 3, 4],
            "starts/ends/axes/steps inputs",
        )?))
    }
}

fn concat(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let mut k = build(rt, req, Op::Concat, &[], "")?;
    k.axis = match attr_int(req.node, "axis")? {
        Some(a) => a,
        None if req.opset < 4 => 1,
        None => {
            return Err(onnx_runtime_ep_api::EpError::invalid_attribute(
                req.node,
                "axis",
                "Concat needs the axis attribute",
            ))
        }
    };
    Ok(Box::new(k))
}

fn split(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    // The split sizes are an input from opset 13 (and optionally in opset 1); an attribute in
    // between. num_outputs (opset 18) splits into near-equal chunks.
    let from_input = req.opset >= 13 || req.opset < 2;
    let mut k = build(
        rt,
        req,
        Op::Split,
        if from_input { &[1] } else { &[] },
        "split sizes input",
    )?;
    k.axis = attr_int(req.node, "axis")?.unwrap_or(0);
    k.ints = attr_ints(req.node, "split")?.filter(|s| !s.is_empty());
    k.num_outputs = attr_int(req.node, "num_outputs")?;
    Ok(Box::new(k))
}

pub fn register(r: &mut Registry) {
    r.register("", "Transpose", 1, transpose);
    r.register("", "Expand", 8, expand);
    r.register("", "Tile", 6, tile);
    r.register("", "Slice", 1, slice);
    r.register("", "Concat", 1, concat);
    r.register("", "Split", 1, split);
}

#[cfg(test)]
mod tests {
    use super::slice_axis;

    #[test]
    fn slice_axis_follows_onnx_clamping() {
        assert_eq!(slice_axis(4, 1, 3, 1), (1, 2));
        assert_eq!(slice_axis(4, -1, i64::MIN, -1), (3, 4));
        assert_eq!(slice_axis(4, 0, i64::MAX, 2), (0, 2));
        assert_eq!(slice_axis(4, 10, 20, 1), (4, 0));
        assert_eq!(slice_axis(4, -100, 2, 1), (0, 2));
        assert_eq!(slice_axis(3, 0, -1, 1), (0, 2));
        assert_eq!(slice_axis(4, 3, 0, -2), (3, 2));
        assert_eq!(slice_axis(0, 0, 5, 1), (0, 0));
        // Extreme steps do not overflow.
        assert_eq!(slice_axis(4, 0, i64::MAX, i64::MAX), (0, 1));
        assert_eq!(slice_axis(4, -1, i64::MIN, i64::MIN), (3, 1));
    }
}
