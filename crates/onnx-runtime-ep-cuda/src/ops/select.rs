//! Where (selection with three-way broadcasting) and Pad (constant, reflect, edge, wrap).

use super::common::*;
use super::params::{PadParams, WhereParams, MAX_RANK};
use super::Registry;
use crate::runtime::{CuPtr, CudaRuntime};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{Attribute, DataType};
use std::sync::Arc;

struct WhereKernel {
    base: Base,
    fns: WidthFns,
}

impl Kernel for WhereKernel {
    /// X's dtype, the three-way broadcast of the shapes.
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let (c, x, y) = (
            base.req(inputs, 0)?,
            base.req(inputs, 1)?,
            base.req(inputs, 2)?,
        );
        if c.dtype != DataType::Bool {
            return Err(base.unsupported(c.dtype, "the condition must be bool"));
        }
        base.same_dtype(x.dtype, y.dtype, "input Y")?;
        base.width(x.dtype)?;
        let want = broadcast_shapes(base, &[c.shape, x.shape, y.shape])?;
        check_view_rank(base, &want)?;
        Ok(vec![(x.dtype, want)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        base.expect_outputs(outputs, &self.output_types(inputs)?)?;
        let (c, x, y) = (
            base.req(inputs, 0)?,
            base.req(inputs, 1)?,
            base.req(inputs, 2)?,
        );
        let out = &outputs[0];
        let want = out.shape;
        let width = base.width(x.dtype)?;
        let mut p = WhereParams {
            n: want.iter().product::<usize>() as i64,
            rank: want.len() as i32,
            ..Default::default()
        };
        p.dims = fill::<MAX_RANK>(&want.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.c = fill(&broadcast_strides(
            base,
            c.shape,
            c.strides,
            want,
            "condition",
        )?);
        p.x = fill(&broadcast_strides(base, x.shape, x.strides, want, "X")?);
        p.y = fill(&broadcast_strides(base, y.shape, y.strides, want, "Y")?);
        p.o = fill(&istrides(out.strides));
        let (mut pc, mut px, mut py, mut po) = (ptr_of(c), ptr_of(x), ptr_of(y), mut_ptr_of(out));
        let mut args = [
            arg(&mut pc),
            arg(&mut px),
            arg(&mut py),
            arg(&mut po),
            arg(&mut p),
        ];
        // SAFETY: where_w{width}(cond, x, y, out, WhereParams) stays inside the views.
        unsafe { base.rt.launch(self.fns.get(width), p.n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn where_op(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let module = base.module(&copy_module())?;
    let fns = WidthFns::load(&module, "where", "")?;
    Ok(Box::new(WhereKernel { base, fns }))
}

#[derive(Clone, Copy)]
enum PadMode {
    Constant = 0,
    Reflect = 1,
    Edge = 2,
    Wrap = 3,
}

struct PadKernel {
    base: Base,
    host: HostReads,
    fns: WidthFns,
    mode: PadMode,
    /// Pads and value from attributes (opset < 11).
    attr_pads: Option<Vec<i64>>,
    attr_value: f32,
}

/// The bytes of `value` as an element of `dtype` (for the pre-opset-11 float attribute).
fn value_bytes(base: &Base, value: f32, dtype: DataType) -> EpResult<[u64; 2]> {
    let bytes: Vec<u8> = match dtype {
        DataType::Float32 => value.to_ne_bytes().to_vec(),
        DataType::Float64 => (value as f64).to_ne_bytes().to_vec(),
        DataType::Float16 => half::f16::from_f32(value).to_ne_bytes().to_vec(),
        DataType::BFloat16 => half::bf16::from_f32(value).to_ne_bytes().to_vec(),
        DataType::Int8 | DataType::Uint8 | DataType::Bool => vec![value as i64 as u8],
        DataType::Int16 | DataType::Uint16 => (value as i64 as i16).to_ne_bytes().to_vec(),
        DataType::Int32 | DataType::Uint32 => (value as i64 as i32).to_ne_bytes().to_vec(),
        DataType::Int64 | DataType::Uint64 => (value as i64).to_ne_bytes().to_vec(),
        other => return Err(base.unsupported(other, "no constant pad value for this dtype")),
    };
    let mut raw = [0u8; 16];
    raw[..bytes.len()].copy_from_slice(&bytes);
    Ok([
        u64::from_ne_bytes(raw[..8].try_into().expect("8")),
        u64::from_ne_bytes(raw[8..].try_into().expect("8")),
    ])
}

impl PadKernel {
    /// The output's dtype (the input's) and shape, with the begin pad of every axis, from the
    /// pads and axes (host-read, or the attribute before opset 11).
    fn plan(
        &self,
        inputs: &[TensorView<'_>],
        host: &HostValues,
    ) -> EpResult<(OutputTypes, Vec<i64>)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let rank = x.rank();
        check_view_rank(base, x.shape)?;
        base.width(x.dtype)?;
        if let Some(v) = base.input(inputs, 2) {
            if v.numel() >= 1 {
                base.same_dtype(x.dtype, v.dtype, "constant_value")?;
            }
        }
        let raw_pads = host
            .get(1)
            .cloned()
            .flatten()
            .or_else(|| self.attr_pads.clone())
            .ok_or_else(|| base.err("pads are missing"))?;
        let axes: Vec<usize> = match host.get(3).cloned().flatten() {
            Some(a) => a
                .iter()
                .map(|&v| base.axis(v, rank, "axis"))
                .collect::<EpResult<_>>()?,
            None => (0..rank).collect(),
        };
        if raw_pads.len() != 2 * axes.len() {
            return Err(base.err(format!(
                "pads {raw_pads:?} must have 2 entries per padded axis ({})",
                axes.len()
            )));
        }
        let mut begin = vec![0i64; rank];
        let mut end = vec![0i64; rank];
        for (i, &k) in axes.iter().enumerate() {
            begin[k] = raw_pads[i];
            end[k] = raw_pads[i + axes.len()];
        }
        let mut want = Vec::with_capacity(rank);
        for k in 0..rank {
            let d = (x.shape[k] as i64)
                .checked_add(begin[k])
                .and_then(|d| d.checked_add(end[k]))
                .ok_or_else(|| base.err(format!("pads {raw_pads:?} overflow axis {k}")))?;
            if d < 0 {
                return Err(base.err(format!("pads {raw_pads:?} crop axis {k} below zero")));
            }
            if !matches!(self.mode, PadMode::Constant) && x.shape[k] == 0 && d > 0 {
                return Err(base.err(format!(
                    "axis {k} is empty, so it cannot be padded in reflect/edge/wrap mode"
                )));
            }
            want.push(d as usize);
        }
        Ok((vec![(x.dtype, want)], begin))
    }
}

impl Kernel for PadKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let host = self.host.peek(&self.base, inputs)?;
        Ok(self.plan(inputs, &host)?.0)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        base.same_dtype(x.dtype, outputs[0].dtype, "output")?;
        let host = self.host.values(base, inputs, outputs)?;
        let (types, begin) = self.plan(inputs, &host)?;
        base.expect_outputs(outputs, &types)?;
        let out = &outputs[0];
        let (rank, want) = (x.rank(), out.shape);
        let width = base.width(x.dtype)?;
        let mut p = PadParams {
            n: want.iter().product::<usize>() as i64,
            rank: rank as i32,
            mode: self.mode as i32,
            ..Default::default()
        };
        p.out_dims = fill(&want.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.in_dims = fill(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.in_strides = fill(&istrides(x.strides));
        p.out_strides = fill(&istrides(out.strides));
        p.begin = fill(&begin);
        let mut value_ptr: CuPtr = 0;
        if let Some(v) = base.input(inputs, 2) {
            if v.numel() >= 1 {
                value_ptr = ptr_of(v);
            }
        } else if !base.has(1) {
            p.value = value_bytes(base, self.attr_value, x.dtype)?;
        }
        let (mut pi, mut po) = (ptr_of(x), mut_ptr_of(out));
        let mut args = [arg(&mut pi), arg(&mut po), arg(&mut value_ptr), arg(&mut p)];
        // SAFETY: pad_w{width}(in, out, value, PadParams) stays inside the views.
        unsafe { base.rt.launch(self.fns.get(width), p.n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

fn pad(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let mode = match attr_string(req.node, "mode")?
        .as_deref()
        .unwrap_or("constant")
    {
        "constant" => PadMode::Constant,
        "reflect" => PadMode::Reflect,
        "edge" => PadMode::Edge,
        "wrap" if req.opset >= 19 => PadMode::Wrap,
        other => {
            return Err(EpError::invalid_attribute(
                req.node,
                "mode",
                format!("unknown pad mode '{other}' (constant, reflect, edge; wrap from opset 19)"),
            ))
        }
    };
    let (attr_pads, attr_value) = if req.opset < 11 {
        let name = if req.opset < 2 { "paddings" } else { "pads" };
        let value = match req.node.attribute("value") {
            Some(Attribute::Float(v)) => *v,
            _ => 0.0,
        };
        (Some(attr_ints(req.node, name)?.unwrap_or_default()), value)
    } else {
        (None, 0.0)
    };
    let host_inputs: &[usize] = if req.opset < 11 { &[] } else { &[1, 3] };
    let host = HostReads::new(&base, host_inputs, "pads/axes inputs");
    let module = base.module(&copy_module())?;
    let fns = WidthFns::load(&module, "pad", "")?;
    Ok(Box::new(PadKernel {
        base,
        host,
        fns,
        mode,
        attr_pads,
        attr_value,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "Where", 9, where_op);
    r.register("", "Pad", 1, pad);
}
