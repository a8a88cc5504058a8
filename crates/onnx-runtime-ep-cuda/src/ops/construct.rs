//! Construction ops: ConstantOfShape, Shape, Size, Range, OneHot, Trilu. None reads device
//! data on the host (scalar inputs are read by the kernels themselves, the output shapes come
//! resolved), so all of them can be captured at once.

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

impl Kernel for ConstructKernel {
    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let out = &outputs[0];
        match &self.op {
            Op::ConstantOfShape { dtype, value } => {
                base.same_dtype(*dtype, out.dtype, "output")?;
                check_view_rank(base, out.shape)?;
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
                let r = x.rank() as i64;
                let clamp = |v: i64| (if v < 0 { v + r } else { v }).clamp(0, r) as usize;
                let (s, e) = (clamp(*start), clamp(end.unwrap_or(r)));
                let values: Vec<i64> = if e > s {
                    x.shape[s..e].iter().map(|&d| d as i64).collect()
                } else {
                    Vec::new()
                };
                base.expect_shape(out, &[values.len()], 0)?;
                self.write_i64s(out, &values)
            }
            Op::Size => {
                let x = base.req(inputs, 0)?;
                base.expect_shape(out, &[], 0)?;
                self.write_i64s(out, &[x.numel() as i64])
            }
            Op::Range => {
                let (start, limit, delta) = (
                    base.req(inputs, 0)?,
                    base.req(inputs, 1)?,
                    base.req(inputs, 2)?,
                );
                for v in [limit, delta] {
                    base.same_dtype(start.dtype, v.dtype, "input")?;
                }
                base.same_dtype(start.dtype, out.dtype, "output")?;
                if out.rank() != 1 {
                    return Err(base.err("the output must be 1-D"));
                }
                let f = *self.typed.get(&start.dtype).ok_or_else(|| {
                    base.unsupported(
                        start.dtype,
                        "Range takes float, double, int16, int32, int64",
                    )
                })?;
                let (mut po, mut ps, mut pd) = (mut_ptr_of(out), ptr_of(start), ptr_of(delta));
                let mut n = out.numel() as i64;
                let mut stride = out.strides[0] as i64;
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
                let rank = idx.rank() + 1;
                base.check_rank(rank, MAX_RANK + 1)?;
                let axis = base.axis(*axis, rank, "axis")?;
                if values.numel() != 2 {
                    return Err(base.err("values must hold [off_value, on_value]"));
                }
                base.same_dtype(values.dtype, out.dtype, "output")?;
                if out.rank() != rank {
                    return Err(base.err(format!("the output must have rank {rank}")));
                }
                let mut want = idx.shape.to_vec();
                want.insert(axis, out.shape[axis]);
                base.expect_shape(out, &want, 0)?;
                let tag = type_tag(idx.dtype).filter(|t| *t != "bool");
                if tag.is_none() {
                    return Err(base.unsupported(idx.dtype, "indices must be numeric"));
                }
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
                p.dims = fill(&want.iter().map(|&d| d as i64).collect::<Vec<_>>());
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
                base.same_dtype(x.dtype, out.dtype, "output")?;
                if x.rank() < 2 {
                    return Err(base.err("Trilu needs a tensor of rank 2 or more"));
                }
                check_view_rank(base, x.shape)?;
                base.expect_shape(out, x.shape, 0)?;
                let mut k_ptr: CuPtr = 0;
                if let Some(k) = base.input(inputs, 1) {
                    if k.dtype != DataType::Int64 || k.numel() != 1 {
                        return Err(base.err("k must be an int64 scalar"));
                    }
                    k_ptr = ptr_of(k);
                }
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
