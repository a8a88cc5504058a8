//! Construction ops: ConstantOfShape, Shape, Size, Range, OneHot, Trilu. `execute` reads no
//! device data on the host (scalar inputs are read by the kernels themselves, or passed by
//! value when the session gave them in host memory; the output shapes come resolved), so all
//! of them can be captured at once; `output_types` reads the shape-carrying inputs
//! (ConstantOfShape's shape, Range's bounds, OneHot's depth) on the host.

use super::common::*;
use super::params::{FillParams, OneHotParams, TriluParams, ValuesParams, MAX_RANK};
use super::Registry;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{Attribute, DataType};
use std::collections::HashMap;
use std::sync::Arc;

enum Op {
    ConstantOfShape { dtype: DataType, value: [u64; 2] },
    Shape { start: i64, end: Option<i64> },
    Size,
    Range,
    OneHot { axis: i64 },
    Trilu { upper: bool },
}

struct ConstructKernel {
    base: Base,
    op: Op,
    width_fns: Option<WidthFns>,
    typed: HashMap<DataType, Function>,
    /// Range with start/delta by value (passed in host memory).
    range_by_value: HashMap<DataType, Function>,
    values_fn: Option<Function>,
}

impl ConstructKernel {
    fn write_i64s(&self, out: &TensorMut<'_>, values: &[i64]) -> EpResult<()> {
        let base = &self.base;
        if out.dtype != DataType::Int64 {
            return Err(base.unsupported(out.dtype, "the output must be int64"));
        }
        if values.len() > 16 {
            return Err(base.err("more than 16 values; run this node on the CPU provider"));
        }
        let mut p = ValuesParams {
            n: values.len() as i64,
            stride: out.strides.first().copied().unwrap_or(1) as i64,
            values: fill(values),
        };
        let mut po = mut_ptr_of(out);
        let mut args = [arg(&mut po), arg(&mut p)];
        let f = self.values_fn.expect("built with write_i64s");
        // SAFETY: write_i64s(out, ValuesParams) writes n elements along the view.
        unsafe { base.rt.launch(f, values.len() as u64, &mut args) }
    }
}

/// The dims Shape returns for an input of `shape`: axes `start..end`, both clamped to the rank
/// after adding it to negative values.
fn shape_slice(shape: &[usize], start: i64, end: Option<i64>) -> Vec<i64> {
    let r = shape.len() as i64;
    let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
    let (s, e) = (clamp(start), clamp(end.unwrap_or(r)));
    if e > s {
        shape[s..e].iter().map(|&d| d as i64).collect()
    } else {
        Vec::new()
    }
}

/// Range's length for integer bounds, `max(ceil((limit - start) / delta), 0)`; `None` when
/// delta is 0.
fn range_len_int(start: i64, limit: i64, delta: i64) -> Option<usize> {
    let (s, l, d) = (start as i128, limit as i128, delta as i128);
    if d == 0 {
        return None;
    }
    usize::try_from(((l - s + d - d.signum()) / d).max(0)).ok()
}

/// Range's length for float bounds, computed in f64 like the CPU provider; `None` when delta
/// is 0 or not finite or the range is unbounded.
fn range_len_float(start: f64, limit: f64, delta: f64) -> Option<usize> {
    if delta == 0.0 || !delta.is_finite() {
        return None;
    }
    let n = ((limit - start) / delta).ceil().max(0.0);
    n.is_finite().then_some(n as usize)
}

impl ConstructKernel {
    /// The output's dtype and shape. The extents that depend on input values (ConstantOfShape's
    /// shape, Range's length, OneHot's depth) are taken from `resolved`, the caller's output
    /// shape, when `execute` checks its output (so it reads nothing on the host and stays
    /// capturable), and are read on the host when `resolved` is `None` (`output_types`).
    fn output_type(
        &self,
        inputs: &[TensorView<'_>],
        resolved: Option<&[usize]>,
    ) -> EpResult<(DataType, Vec<usize>)> {
        let base = &self.base;
        match &self.op {
            Op::ConstantOfShape { dtype, .. } => {
                let dims = self.constant_shape(inputs, resolved)?;
                check_view_rank(base, &dims)?;
                Ok((*dtype, dims))
            }
            Op::Shape { start, end } => {
                let x = base.req(inputs, 0)?;
                Ok((
                    DataType::Int64,
                    vec![shape_slice(x.shape, *start, *end).len()],
                ))
            }
            Op::Size => {
                base.req(inputs, 0)?;
                Ok((DataType::Int64, Vec::new()))
            }
            Op::Range => self.range_type(inputs, resolved),
            Op::OneHot { axis } => self.one_hot_type(inputs, *axis, resolved),
            Op::Trilu { .. } => {
                let x = base.req(inputs, 0)?;
                if x.rank() < 2 {
                    return Err(base.err("Trilu needs a tensor of rank 2 or more"));
                }
                check_view_rank(base, x.shape)?;
                base.width(x.dtype)?;
                if let Some(k) = base.input(inputs, 1) {
                    if k.dtype != DataType::Int64 || k.numel() != 1 {
                        return Err(base.err("k must be an int64 scalar"));
                    }
                }
                Ok((x.dtype, x.shape.to_vec()))
            }
        }
    }

    /// ConstantOfShape's output shape: the values of its shape input (a 1-D int64 tensor).
    fn constant_shape(
        &self,
        inputs: &[TensorView<'_>],
        resolved: Option<&[usize]>,
    ) -> EpResult<Vec<usize>> {
        let base = &self.base;
        if let Some(dims) = resolved {
            match base.input(inputs, 0) {
                Some(s) if s.numel() != dims.len() => Err(base.err(format!(
                    "the shape input holds {} dims but the output has rank {}",
                    s.numel(),
                    dims.len()
                ))),
                _ => Ok(dims.to_vec()),
            }
        } else {
            let shape = read_ints(base, base.req(inputs, 0)?, "shape input")?;
            shape
                .iter()
                .map(|&d| {
                    usize::try_from(d)
                        .map_err(|_| base.err(format!("shape {shape:?} has a negative dimension")))
                })
                .collect()
        }
    }

    /// Range's kernel for `dtype`.
    fn range_fn(&self, dtype: DataType) -> EpResult<Function> {
        self.typed.get(&dtype).copied().ok_or_else(|| {
            self.base.unsupported(
                dtype,
                "Range takes float, double, float16, bfloat16, int16, int32, int64",
            )
        })
    }

    /// Range's output: start's dtype, `max(ceil((limit - start) / delta), 0)` elements.
    fn range_type(
        &self,
        inputs: &[TensorView<'_>],
        resolved: Option<&[usize]>,
    ) -> EpResult<(DataType, Vec<usize>)> {
        let base = &self.base;
        let views = [
            base.req(inputs, 0)?,
            base.req(inputs, 1)?,
            base.req(inputs, 2)?,
        ];
        let dtype = views[0].dtype;
        for (v, name) in views.iter().zip(["start", "limit", "delta"]) {
            base.same_dtype(dtype, v.dtype, name)?;
            if v.numel() != 1 {
                return Err(base.err(format!("{name} must be a scalar, got shape {:?}", v.shape)));
            }
        }
        self.range_fn(dtype)?;
        let n = match resolved {
            Some([n]) => *n,
            Some(_) => return Err(base.err("the output must be 1-D")),
            None if dtype.is_integer() => {
                let [s, l, d] = views.map(|v| read_ints(base, v, "start/limit/delta inputs"));
                range_len_int(s?[0], l?[0], d?[0]).ok_or_else(|| base.err("delta must not be 0"))?
            }
            None => {
                let [s, l, d] = views.map(|v| read_f64s(base, v, "start/limit/delta inputs"));
                let (s, l, d) = (s?[0], l?[0], d?[0]);
                range_len_float(s, l, d).ok_or_else(|| {
                    base.err(format!(
                        "the range from {s} to {l} by {d} is unbounded (delta must be finite \
                         and non-zero)"
                    ))
                })?
            }
        };
        Ok((dtype, vec![n]))
    }

    /// OneHot's output: values' dtype, the indices' shape with `depth` inserted at `axis`.
    fn one_hot_type(
        &self,
        inputs: &[TensorView<'_>],
        axis: i64,
        resolved: Option<&[usize]>,
    ) -> EpResult<(DataType, Vec<usize>)> {
        let base = &self.base;
        let (idx, values) = (base.req(inputs, 0)?, base.req(inputs, 2)?);
        let rank = idx.rank() + 1;
        base.check_rank(rank, MAX_RANK + 1)?;
        let axis = base.axis(axis, rank, "axis")?;
        if values.numel() != 2 {
            return Err(base.err("values must hold [off_value, on_value]"));
        }
        if type_tag(idx.dtype).filter(|t| *t != "bool").is_none() {
            return Err(base.unsupported(idx.dtype, "indices must be numeric"));
        }
        base.width(values.dtype)?;
        let depth = match resolved {
            Some(r) if r.len() == rank => r[axis],
            Some(_) => return Err(base.err(format!("the output must have rank {rank}"))),
            None => {
                let d = read_f64s(base, base.req(inputs, 1)?, "depth input")?;
                match d[..] {
                    [d] if d.is_finite() && d >= 1.0 => d as usize,
                    _ => {
                        return Err(base.err(format!(
                            "depth must be one finite value of at least 1, got {d:?}"
                        )))
                    }
                }
            }
        };
        let mut shape = idx.shape.to_vec();
        shape.insert(axis, depth);
        Ok((values.dtype, shape))
    }
}

impl Kernel for ConstructKernel {
    fn host_inputs(&self) -> Vec<usize> {
        match self.op {
            Op::ConstantOfShape { .. } => vec![0],
            // All three: start and delta in host memory go to the kernel by value.
            Op::Range => vec![0, 1, 2],
            Op::OneHot { .. } => vec![1],
            _ => Vec::new(),
        }
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        Ok(vec![self.output_type(inputs, None)?])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        base.expect_outputs(
            outputs,
            &[self.output_type(inputs, Some(outputs[0].shape))?],
        )?;
        let out = &outputs[0];
        match &self.op {
            Op::ConstantOfShape { dtype, value } => {
                let width = base.width(*dtype)?;
                let mut p = FillParams {
                    n: out.numel() as i64,
                    rank: out.rank() as i32,
                    value: *value,
                    ..Default::default()
                };
                p.dims = fill(&out.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
                p.strides = fill(&istrides(out.strides));
                let mut po = mut_ptr_of(out);
                let mut args = [arg(&mut po), arg(&mut p)];
                let f = self.width_fns.as_ref().expect("fill").get(width);
                // SAFETY: fill_w{width}(out, FillParams) writes inside the view.
                unsafe { base.rt.launch(f, p.n as u64, &mut args) }
            }
            Op::Shape { start, end } => {
                let x = base.req(inputs, 0)?;
                self.write_i64s(out, &shape_slice(x.shape, *start, *end))
            }
            Op::Size => {
                let x = base.req(inputs, 0)?;
                self.write_i64s(out, &[x.numel() as i64])
            }
            Op::Range => {
                let (start, delta) = (base.req(inputs, 0)?, base.req(inputs, 2)?);
                let mut po = mut_ptr_of(out);
                let mut n = out.numel() as i64;
                let mut stride = out.strides[0] as i64;
                if in_host_memory(base, &[0], inputs) || in_host_memory(base, &[2], inputs) {
                    // By value: start/delta in host memory are read in place (nothing to read
                    // on the device, so capturable); one of them on the device is copied.
                    let f = self
                        .range_by_value
                        .get(&start.dtype)
                        .copied()
                        .ok_or_else(|| base.unsupported(start.dtype, "no by-value Range kernel"))?;
                    let w = base.width(start.dtype)?;
                    let bits = |v: &TensorView<'_>| -> EpResult<u64> {
                        let b = read_bytes(base, v, w, "start/delta inputs")?;
                        let mut word = [0u8; 8];
                        word[..w].copy_from_slice(&b[..w]);
                        Ok(u64::from_le_bytes(word))
                    };
                    let (mut sb, mut db) = (bits(start)?, bits(delta)?);
                    let mut args = [
                        arg(&mut po),
                        arg(&mut sb),
                        arg(&mut db),
                        arg(&mut n),
                        arg(&mut stride),
                    ];
                    // SAFETY: range_v_T(out, start bits, delta bits, n, stride) writes n
                    // elements.
                    return unsafe { base.rt.launch(f, n as u64, &mut args) };
                }
                let f = self.range_fn(start.dtype)?;
                let (mut ps, mut pd) = (ptr_of(start), ptr_of(delta));
                let mut args = [
                    arg(&mut po),
                    arg(&mut ps),
                    arg(&mut pd),
                    arg(&mut n),
                    arg(&mut stride),
                ];
                // SAFETY: range_T(out, start, delta, n, stride) writes n elements.
                unsafe { base.rt.launch(f, n as u64, &mut args) }
            }
            Op::OneHot { axis } => {
                let (idx, values) = (base.req(inputs, 0)?, base.req(inputs, 2)?);
                let rank = out.rank();
                let axis = base.axis(*axis, rank, "axis")?;
                let mut idx_strides = istrides(idx.strides);
                idx_strides.insert(axis, 0);
                let mut p = OneHotParams {
                    n: out.numel() as i64,
                    rank: rank as i32,
                    axis: axis as i32,
                    depth: out.shape[axis] as i64,
                    values_stride: values.strides.first().copied().unwrap_or(1) as i64,
                    idx_dtype: idx.dtype.onnx_code(),
                    ..Default::default()
                };
                p.dims = fill(&out.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
                p.out_strides = fill(&istrides(out.strides));
                p.idx_strides = fill(&idx_strides);
                let width = base.width(out.dtype)?;
                let (mut pi, mut pv, mut po) = (ptr_of(idx), ptr_of(values), mut_ptr_of(out));
                let mut args = [arg(&mut pi), arg(&mut pv), arg(&mut po), arg(&mut p)];
                let f = self.width_fns.as_ref().expect("one_hot").get(width);
                // SAFETY: one_hot_w{width}(idx, values, out, OneHotParams) stays in the views.
                unsafe { base.rt.launch(f, p.n as u64, &mut args) }
            }
            Op::Trilu { upper } => {
                let x = base.req(inputs, 0)?;
                let mut k_ptr: CuPtr = base.input(inputs, 1).map_or(0, ptr_of);
                let mut p = TriluParams {
                    n: x.numel() as i64,
                    rank: x.rank() as i32,
                    upper: *upper as i32,
                    ..Default::default()
                };
                p.dims = fill(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
                p.in_strides = fill(&istrides(x.strides));
                p.out_strides = fill(&istrides(out.strides));
                let width = base.width(x.dtype)?;
                let (mut pi, mut po) = (ptr_of(x), mut_ptr_of(out));
                let mut args = [arg(&mut pi), arg(&mut po), arg(&mut k_ptr), arg(&mut p)];
                let f = self.width_fns.as_ref().expect("trilu").get(width);
                // SAFETY: trilu_w{width}(in, out, k, TriluParams) stays in the views.
                unsafe { base.rt.launch(f, p.n as u64, &mut args) }
            }
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn kernel(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, op: Op) -> ConstructKernel {
    ConstructKernel {
        base: Base::new(rt, req.node),
        op,
        width_fns: None,
        typed: HashMap::new(),
        range_by_value: HashMap::new(),
        values_fn: None,
    }
}

fn constant_of_shape(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let (dtype, bytes) = match req.node.attribute("value") {
        None => (DataType::Float32, vec![0u8; 4]),
        Some(Attribute::Tensor(t)) => {
            if t.numel() != 1 {
                return Err(EpError::invalid_attribute(
                    req.node,
                    "value",
                    "must be a one-element tensor",
                ));
            }
            (t.dtype, t.bytes().to_vec())
        }
        Some(other) => {
            return Err(EpError::invalid_attribute(
                req.node,
                "value",
                format!("expected a tensor, got {:?}", other.kind()),
            ))
        }
    };
    let mut raw = [0u8; 16];
    if bytes.len() > 16 {
        return Err(EpError::invalid_attribute(
            req.node,
            "value",
            "element too wide",
        ));
    }
    raw[..bytes.len()].copy_from_slice(&bytes);
    let value = [
        u64::from_ne_bytes(raw[..8].try_into().expect("8")),
        u64::from_ne_bytes(raw[8..].try_into().expect("8")),
    ];
    let mut k = kernel(rt, req, Op::ConstantOfShape { dtype, value });
    k.base.width(dtype)?;
    let module = k.base.module(&copy_module())?;
    k.width_fns = Some(WidthFns::load(&module, "fill", "")?);
    Ok(Box::new(k))
}

fn with_values(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    op: Op,
) -> EpResult<Box<dyn Kernel>> {
    let mut k = kernel(rt, req, op);
    let module = k.base.module(&copy_module())?;
    k.values_fn = Some(module.function("write_i64s")?);
    Ok(Box::new(k))
}

fn shape(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let start = attr_int(req.node, "start")?.unwrap_or(0);
    let end = attr_int(req.node, "end")?;
    with_values(rt, req, Op::Shape { start, end })
}

fn size(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    with_values(rt, req, Op::Size)
}

fn range(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let mut k = kernel(rt, req, Op::Range);
    let module = k.base.module(&construct_module())?;
    for (dtype, tag) in [
        (DataType::Float32, "f32"),
        (DataType::Float64, "f64"),
        (DataType::Int16, "i16"),
        (DataType::Int32, "i32"),
        (DataType::Int64, "i64"),
        (DataType::Float16, "f16"),
        (DataType::BFloat16, "bf16"),
    ] {
        k.typed
            .insert(dtype, module.function(&format!("range_{tag}"))?);
        k.range_by_value
            .insert(dtype, module.function(&format!("range_v_{tag}"))?);
    }
    Ok(Box::new(k))
}

fn one_hot(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let axis = attr_int(req.node, "axis")?.unwrap_or(-1);
    let mut k = kernel(rt, req, Op::OneHot { axis });
    let module = k.base.module(&construct_module())?;
    k.width_fns = Some(WidthFns::load(&module, "one_hot", "")?);
    Ok(Box::new(k))
}

fn trilu(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let upper = attr_int(req.node, "upper")?.unwrap_or(1) != 0;
    let mut k = kernel(rt, req, Op::Trilu { upper });
    let module = k.base.module(&copy_module())?;
    k.width_fns = Some(WidthFns::load(&module, "trilu", "")?);
    Ok(Box::new(k))
}

pub fn register(r: &mut Registry) {
    r.register("", "ConstantOfShape", 9, constant_of_shape);
    r.register("", "Shape", 1, shape);
    r.register("", "Size", 1, size);
    r.register("", "Range", 11, range);
    r.register("", "OneHot", 9, one_hot);
    r.register("", "Trilu", 14, trilu);
}

#[cfg(test)]
mod tests {
    use super::{range_len_float, range_len_int, shape_slice};

    #[test]
    fn shape_slice_clamps_like_onnx() {
        let shape = [2, 3, 4, 5];
        assert_eq!(shape_slice(&shape, 0, None), vec![2, 3, 4, 5]);
        assert_eq!(shape_slice(&shape, -3, Some(-1)), vec![3, 4]);
        assert_eq!(shape_slice(&shape, -10, Some(2)), vec![2, 3]);
        assert_eq!(shape_slice(&shape, 3, Some(1)), Vec::<i64>::new());
        assert_eq!(shape_slice(&[], 0, None), Vec::<i64>::new());
    }

    #[test]
    fn range_len_is_ceil_of_span_over_delta() {
        assert_eq!(range_len_int(10, -7, -3), Some(6));
        assert_eq!(range_len_int(0, 17, 4), Some(5));
        assert_eq!(range_len_int(5, 1, 2), Some(0));
        assert_eq!(range_len_int(i64::MIN, i64::MAX, i64::MAX), Some(3));
        assert_eq!(range_len_int(1, 5, 0), None);
        assert_eq!(range_len_float(1.0, 2.0, 0.3f32 as f64), Some(4));
        assert_eq!(range_len_float(-1.0, 1.0, 0.125), Some(16));
        assert_eq!(range_len_float(1.0, 0.0, 0.5), Some(0));
        assert_eq!(range_len_float(0.0, 1.0, 0.0), None);
        assert_eq!(range_len_float(0.0, f64::INFINITY, 1.0), None);
    }
}
