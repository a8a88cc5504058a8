//! com.microsoft GatherBlockQuantized with the CPU provider's semantics: data int4 / uint4
//! (any gather and quantize axes, zero points of the data's type, default 0) or uint8 holding
//! 2/4/8-bit codes along the last axis (`gather_axis` 0, `quantize_axis` the last axis, zero
//! points packed the same way, default 2^(bits-1)); scales float32 / float16 / bfloat16 of the
//! data's shape with ceil(d / block_size) on the quantize axis; int32 / int64 indices, negative
//! ones counted from the end. One thread per output element (`gbq_<T>_<I>` in nbits.cu). An
//! index out of range writes zeros for its slice and raises device error 1, which the runtime
//! reports naming the node at its next synchronization, as the provider's Gather does. float8
//! and float4 data are refused (`UnsupportedDtype`), so those nodes run on the CPU provider.

use super::{nbits_module, FLOATS};
use crate::ops::common::*;
use crate::ops::params::MAX_RANK;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    is_contiguous, CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

/// Mirrors `GbqParams` in nbits.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct GbqParams {
    data: u64,
    idx: u64,
    scales: u64,
    zp: u64,
    y: u64,
    err: u64,
    n: i64,
    n_idx: i64,
    inner: i64,
    dims: [i64; MAX_RANK],
    sstr: [i64; MAX_RANK],
    rank: i32,
    gather: i32,
    quant: i32,
    block_log2: i32,
    kind: i32,
    bits: i32,
    s_last: i32,
    zrow: i32,
    id: i32,
    _pad: i32,
}

struct GbqKernel {
    base: Base,
    gather_axis: i64,
    quantize_axis: i64,
    block: usize,
    bits: usize,
    /// `gbq_<t>_<i>` by (output dtype, index dtype).
    fns: HashMap<(DataType, DataType), Function>,
}

/// A checked call.
struct Plan {
    dtype: DataType,
    out_shape: Vec<usize>,
    p: GbqParams,
}

impl GbqKernel {
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<Plan> {
        let base = &self.base;
        let data = base.req(inputs, 0)?;
        let idx = base.req(inputs, 1)?;
        let scales = base.req(inputs, 2)?;
        let zp = base.input(inputs, 3);
        let (kind, bits) = match data.dtype {
            DataType::Int4 => (0, 4),
            DataType::Uint4 => (1, 4),
            DataType::Uint8 => (2, self.bits),
            other => {
                return Err(base.unsupported(
                    other,
                    "the CUDA GatherBlockQuantized takes int4, uint4 and uint8 data (float8 / \
                     float4 tables run on the CPU provider)",
                ))
            }
        };
        let mut shape = data.shape.to_vec();
        if kind == 2 {
            if let Some(last) = shape.last_mut() {
                *last *= 8 / bits;
            }
        }
        let r = shape.len();
        if r == 0 {
            return Err(base.err("data must have rank >= 1"));
        }
        check_view_rank(base, &shape)?;
        let g = base.axis(self.gather_axis, r, "gather_axis")?;
        let q = base.axis(self.quantize_axis, r, "quantize_axis")?;
        if kind == 2 && (g != 0 || q != r - 1 || (bits < 8 && g == q)) {
            return Err(base.err(format!(
                "uint8 data needs gather_axis 0 and quantize_axis the last axis (and, for \
                 bits < 8, different axes); got gather_axis {} and quantize_axis {}",
                self.gather_axis, self.quantize_axis
            )));
        }
        if !FLOATS.iter().any(|f| f.0 == scales.dtype) {
            return Err(base.unsupported(scales.dtype, "scales must be float, float16 or bfloat16"));
        }
        if !matches!(idx.dtype, DataType::Int32 | DataType::Int64) {
            return Err(base.unsupported(idx.dtype, "indices must be int32 or int64"));
        }
        let want: Vec<usize> = (0..r)
            .map(|a| {
                if a == q {
                    shape[a].div_ceil(self.block)
                } else {
                    shape[a]
                }
            })
            .collect();
        if scales.shape != want.as_slice() {
            return Err(base.err(format!(
                "scales has shape {:?}; want {want:?} (data {shape:?}, quantize_axis {q}, \
                 block_size {})",
                scales.shape, self.block
            )));
        }
        let s_last = want[r - 1];
        let zrow = if kind == 2 {
            (s_last * bits).div_ceil(8)
        } else {
            0
        };
        if let Some(z) = zp {
            if z.dtype != data.dtype {
                return Err(base.err(format!(
                    "zero_points is {}; it must have data's type {}",
                    z.dtype, data.dtype
                )));
            }
            let mut zwant = want.clone();
            if kind == 2 {
                zwant[r - 1] = zrow;
            }
            if z.shape != zwant.as_slice() {
                return Err(base.err(format!(
                    "zero_points has shape {:?}; want {zwant:?}",
                    z.shape
                )));
            }
        }
        for (v, what) in [
            (Some(data), "data"),
            (Some(scales), "scales"),
            (zp, "zero_points"),
        ] {
            if let Some(v) = v {
                if !is_contiguous(v.shape, v.strides) {
                    return Err(base.err(format!("{what} must be contiguous")));
                }
            }
        }
        if !is_contiguous(idx.shape, idx.strides) {
            return Err(base.err("indices must be contiguous"));
        }
        let mut out_shape = shape[..g].to_vec();
        out_shape.extend_from_slice(idx.shape);
        out_shape.extend_from_slice(&shape[g + 1..]);
        check_view_rank(base, &out_shape)?;
        let n = checked_numel(base, &out_shape)?;
        let sc = onnx_runtime_ir::compute_contiguous_strides(&want);
        let mut p = GbqParams {
            data: ptr_of(data),
            idx: ptr_of(idx),
            scales: ptr_of(scales),
            zp: zp.map_or(0, ptr_of),
            err: base.rt.err_ptr(),
            n: n as i64,
            n_idx: idx.numel() as i64,
            inner: shape[g + 1..].iter().product::<usize>() as i64,
            rank: r as i32,
            gather: g as i32,
            quant: q as i32,
            block_log2: self.block.trailing_zeros() as i32,
            kind,
            bits: bits as i32,
            s_last: s_last as i32,
            zrow: zrow as i32,
            id: base.id as i32,
            ..Default::default()
        };
        for a in 0..r {
            p.dims[a] = shape[a] as i64;
            p.sstr[a] = sc[a] as i64;
        }
        Ok(Plan {
            dtype: scales.dtype,
            out_shape,
            p,
        })
    }
}

impl Kernel for GbqKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let plan = self.plan(inputs)?;
        Ok(vec![(plan.dtype, plan.out_shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let mut plan = self.plan(inputs)?;
        base.expect_outputs(outputs, &[(plan.dtype, plan.out_shape.clone())])?;
        let out = &outputs[0];
        if !is_contiguous(out.shape, out.strides) {
            return Err(base.err("the output must be contiguous"));
        }
        let idx_dtype = base.req(inputs, 1)?.dtype;
        let f = self.fns[&(plan.dtype, idx_dtype)];
        plan.p.y = mut_ptr_of(out);
        let n = plan.p.n as u64;
        let mut args = [arg(&mut plan.p)];
        // SAFETY: gbq_* reads data, indices, scales and zero points inside the checked views
        // (indices bounds-checked on the device) and writes n elements of the output.
        unsafe { base.rt.launch(f, n, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

pub fn gather_block_quantized(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
) -> EpResult<Box<dyn Kernel>> {
    let nd = req.node;
    let bits = attr_int(nd, "bits")?.unwrap_or(4);
    if ![2, 4, 8].contains(&bits) {
        return Err(EpError::invalid_attribute(
            nd,
            "bits",
            format!("{bits} is not 2, 4 or 8"),
        ));
    }
    let block = attr_int(nd, "block_size")?.unwrap_or(128);
    if block < 16 || !(block as u64).is_power_of_two() {
        // block_size 0 (float8 / float4 tables) is the CPU provider's.
        return Err(EpError::invalid_attribute(
            nd,
            "block_size",
            format!("{block} must be a power of two >= 16 on the CUDA provider"),
        ));
    }
    let base = Base::new(rt, nd);
    let module = base.module(&nbits_module())?;
    let mut fns = HashMap::new();
    for (dtype, tag) in FLOATS {
        for (idt, itag) in [(DataType::Int32, "i32"), (DataType::Int64, "i64")] {
            fns.insert((dtype, idt), module.function(&format!("gbq_{tag}_{itag}"))?);
        }
    }
    Ok(Box::new(GbqKernel {
        base,
        gather_axis: attr_int(nd, "gather_axis")?.unwrap_or(0),
        quantize_axis: attr_int(nd, "quantize_axis")?.unwrap_or(1),
        block: block as usize,
        bits: bits as usize,
        fns,
    }))
}
