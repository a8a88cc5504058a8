//! QuantizeLinear and DequantizeLinear (opsets 10 to 25: per tensor, per axis and blocked;
//! outputs/inputs uint8, int8, uint16, int16, int32 (dequantize), float8 e4m3fn/e4m3fnuz/
//! e5m2/e5m2fnuz, float4e2m1 and packed uint4/int4/uint2/int2), and DynamicQuantizeLinear
//! (opset 11). Semantics mirror the CPU provider's (`onnx-runtime-ep-cpu` nn/quant): x / scale
//! in float32, round half to even, saturation; float8 codes round to nearest even.
//!
//! Every dtype combination is picked at run time inside one kernel per quantized type, so a
//! node's kernel is ready whatever dtypes arrive. Dense, aligned tensors take vector loads and
//! stores of 8 elements per thread; anything else walks the strides. DynamicQuantizeLinear is
//! two launches and no host synchronization: per-block (min, max) partials into a per-runtime
//! workspace, then a kernel whose every block folds the partials into the scale and zero point
//! before quantizing its share.

use super::common::*;
use super::params::MAX_RANK;
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    is_contiguous, CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{compute_contiguous_strides, DataType};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const SOURCE: &str = include_str!("../kernels/quant.cu");

fn quantize_module() -> ModuleSpec {
    ModuleSpec::new("quantize", SOURCE)
        .define("QUANT_Q", "1")
        .with_half()
}

fn dequantize_module() -> ModuleSpec {
    ModuleSpec::new("dequantize", SOURCE)
        .define("QUANT_DQ", "1")
        .with_half()
}

fn dynamic_module() -> ModuleSpec {
    ModuleSpec::new("dynamic_quantize", SOURCE)
        .define("QUANT_DYN", "1")
        .with_half()
}

/// The quantized types and their kernel-name tags (`quantize_to_<tag>`, `dequantize_<tag>`).
const QTYPES: [(DataType, &str); 14] = [
    (DataType::Uint8, "u8"),
    (DataType::Int8, "i8"),
    (DataType::Uint16, "u16"),
    (DataType::Int16, "i16"),
    (DataType::Int32, "i32"),
    (DataType::Uint4, "u4"),
    (DataType::Int4, "i4"),
    (DataType::Uint2, "u2"),
    (DataType::Int2, "i2"),
    (DataType::Float8E4M3FN, "e4m3fn"),
    (DataType::Float8E4M3FNUZ, "e4m3fnuz"),
    (DataType::Float8E5M2, "e5m2"),
    (DataType::Float8E5M2FNUZ, "e5m2fnuz"),
    (DataType::Float4E2M1, "f4e2m1"),
];

/// Scale dtypes the kernels read (the CPU provider reads any numeric scale; these are the
/// spec's, with double).
fn scale_supported(d: DataType) -> bool {
    matches!(
        d,
        DataType::Float32
            | DataType::Float16
            | DataType::BFloat16
            | DataType::Float64
            | DataType::Float8E8M0
            | DataType::Int32
    )
}

/// Mirrors `QParams` in quant.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct QParams {
    n: i64,
    rank: i32,
    mode: i32,
    vec: i32,
    _pad0: i32,
    saturate: i32,
    s_code: i32,
    has_zp: i32,
    axis: i32,
    v_code: i32,
    _pad: i32,
    axis_len: i64,
    inner: i64,
    block: i64,
    param_axis_len: i64,
    dims: [i64; MAX_RANK],
    xs: [i64; MAX_RANK],
    ys: [i64; MAX_RANK],
    ss: [i64; MAX_RANK],
    zs: [i64; MAX_RANK],
}

/// Mirrors `DqlParams` in quant.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct DqlParams {
    n: i64,
    rank: i32,
    x_dense: i32,
    y_dense: i32,
    vec: i32,
    nparts: i32,
    _pad: i32,
    dims: [i64; MAX_RANK],
    xs: [i64; MAX_RANK],
    ys: [i64; MAX_RANK],
}

/// How the scale (and zero point) maps onto x, as the CPU provider's `ParamMap` decides it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Granularity {
    PerTensor,
    /// Per axis (block 1) or blocked.
    Axis {
        axis: usize,
        axis_len: usize,
        inner: usize,
        block: usize,
        param_axis_len: usize,
    },
}

fn granularity(
    base: &Base,
    x_shape: &[usize],
    s_shape: &[usize],
    axis: i64,
    block: usize,
) -> EpResult<Granularity> {
    let numel: usize = s_shape.iter().product();
    if block == 0 && (s_shape.is_empty() || numel == 1 && s_shape.len() <= 1) {
        return Ok(Granularity::PerTensor);
    }
    let a = base.axis(axis, x_shape.len(), "axis")?;
    let axis_len = x_shape[a];
    let inner: usize = x_shape[a + 1..].iter().product();
    if block == 0 {
        if s_shape != [axis_len] {
            return Err(base.err(format!(
                "per-axis scale {s_shape:?} must be 1-D of x's axis {a} extent {axis_len} (x is \
                 {x_shape:?}); a scalar scale quantizes per tensor"
            )));
        }
        return Ok(Granularity::Axis {
            axis: a,
            axis_len,
            inner,
            block: 1,
            param_axis_len: axis_len,
        });
    }
    let want: Vec<usize> = x_shape
        .iter()
        .enumerate()
        .map(|(i, &d)| if i == a { d.div_ceil(block) } else { d })
        .collect();
    if s_shape != want.as_slice() {
        return Err(base.err(format!(
            "blocked scale {s_shape:?} must be {want:?} for x {x_shape:?}, axis {a}, block_size \
             {block}"
        )));
    }
    Ok(Granularity::Axis {
        axis: a,
        axis_len,
        inner,
        block,
        param_axis_len: want[a],
    })
}

/// Parsed QuantizeLinear / DequantizeLinear attributes.
#[derive(Clone, Copy, Debug)]
struct QAttrs {
    axis: i64,
    block: usize,
    saturate: bool,
    output_dtype: Option<DataType>,
}

fn q_attrs(req: &KernelRequest<'_>) -> EpResult<QAttrs> {
    let n = req.node;
    let block = attr_int(n, "block_size")?.unwrap_or(0);
    if block < 0 {
        return Err(EpError::invalid_attribute(
            n,
            "block_size",
            format!("{block} must not be negative"),
        ));
    }
    let od = attr_int(n, "output_dtype")?.unwrap_or(0);
    let output_dtype = if od == 0 {
        None
    } else {
        Some(
            DataType::from_onnx(od as i32)
                .filter(|d| *d != DataType::Undefined)
                .ok_or_else(|| {
                    EpError::invalid_attribute(
                        n,
                        "output_dtype",
                        format!("{od} is not a data type"),
                    )
                })?,
        )
    };
    Ok(QAttrs {
        axis: attr_int(n, "axis")?.unwrap_or(1),
        block: block as usize,
        saturate: attr_int(n, "saturate")?.unwrap_or(1) != 0,
        output_dtype,
    })
}

/// Bytes an aligned whole-chunk access of 8 elements of `bits` needs (at most 16).
fn chunk_align(bits: usize) -> usize {
    (8 * bits / 8).min(16)
}

fn aligned(ptr: CuPtr, align: usize) -> bool {
    (ptr as usize).is_multiple_of(align)
}

/// The element strides of a packed (sub-byte) tensor: it must be dense, and then its element
/// index is its row-major index.
fn packed_strides(
    base: &Base,
    dtype: DataType,
    shape: &[usize],
    strides: &[usize],
    what: &str,
) -> EpResult<Vec<usize>> {
    if !is_contiguous(shape, strides) {
        return Err(base.unsupported(
            dtype,
            format!("{what} of a packed 4/2-bit type must be dense; copy it to a contiguous tensor first"),
        ));
    }
    Ok(compute_contiguous_strides(shape))
}

/// A parameter tensor's strides along x's axes: zero where it does not vary, its own stride
/// (per axis: its only one) along the others.
fn param_strides(g: &Granularity, rank: usize, pstrides: &[i64]) -> [i64; MAX_RANK] {
    let mut out = [0i64; MAX_RANK];
    match *g {
        Granularity::PerTensor => {}
        Granularity::Axis { axis, block, .. } => {
            if block == 1 && pstrides.len() == 1 {
                out[axis] = pstrides[0];
            } else {
                out[..rank].copy_from_slice(&pstrides[..rank]);
            }
        }
    }
    out
}

/// Everything one QuantizeLinear/DequantizeLinear launch needs: the parameters and the thread
/// count.
#[allow(clippy::too_many_arguments)]
fn plan_launch(
    base: &Base,
    x: &TensorView<'_>,
    s: &TensorView<'_>,
    zp: Option<&TensorView<'_>>,
    y: &TensorMut<'_>,
    g: &Granularity,
    q: DataType,
    v_code: i32,
    quantize: bool,
    saturate: bool,
) -> EpResult<(QParams, u64)> {
    let rank = x.rank();
    base.check_rank(rank, MAX_RANK)?;
    let n = x.numel();
    let qbits = q.bit_width().unwrap_or(8);
    // The quantized side: x when dequantizing, y when quantizing.
    let xs = if !quantize && q.is_sub_byte() {
        istrides(&packed_strides(base, q, x.shape, x.strides, "the input")?)
    } else {
        istrides(x.strides)
    };
    let ys = if quantize && q.is_sub_byte() {
        istrides(&packed_strides(base, q, y.shape, y.strides, "the output")?)
    } else {
        istrides(y.strides)
    };
    // Parameters are indexed in the scale's shape; a zero point of another shape (same
    // element count) is read by its row-major index, which needs it dense.
    let s_str = istrides(s.strides);
    let z_str: Vec<i64> = match zp {
        None => vec![0; s.rank()],
        Some(z) if z.shape == s.shape && !q.is_sub_byte() => istrides(z.strides),
        Some(z) => {
            if !is_contiguous(z.shape, z.strides) {
                return Err(base.err(format!(
                    "the zero point {:?} must have the scale's shape {:?} or be dense",
                    z.shape, s.shape
                )));
            }
            istrides(&compute_contiguous_strides(s.shape))
        }
    };
    let mut p = QParams {
        n: n as i64,
        rank: rank as i32,
        saturate: saturate as i32,
        s_code: s.dtype.onnx_code(),
        has_zp: zp.is_some() as i32,
        axis: -1,
        v_code,
        axis_len: 1,
        inner: 1,
        block: 1,
        param_axis_len: 1,
        ..Default::default()
    };
    p.dims = fill(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
    p.xs = fill(&xs);
    p.ys = fill(&ys);
    p.ss = param_strides(g, rank, &s_str);
    p.zs = param_strides(g, rank, &z_str);
    let uniform = match *g {
        Granularity::PerTensor => true,
        Granularity::Axis {
            axis,
            axis_len,
            inner,
            block,
            param_axis_len,
        } => {
            p.mode = if block == 1 && s.rank() == 1 { 1 } else { 2 };
            p.axis = axis as i32;
            p.axis_len = axis_len.max(1) as i64;
            p.inner = inner.max(1) as i64;
            p.block = block.max(1) as i64;
            p.param_axis_len = param_axis_len.max(1) as i64;
            if p.mode == 1 {
                inner.is_multiple_of(8)
            } else {
                inner == 1 && block.is_multiple_of(8) && axis_len.is_multiple_of(8)
            }
        }
    };
    let dense = x.is_contiguous()
        && y.is_contiguous()
        && s.is_contiguous()
        && zp.is_none_or(|z| z.is_contiguous());
    let (x_bits, y_bits) = if quantize {
        (x.dtype.bit_width().unwrap_or(32), qbits)
    } else {
        (qbits, y.dtype.bit_width().unwrap_or(32))
    };
    let is_aligned =
        aligned(ptr_of(x), chunk_align(x_bits)) && aligned(mut_ptr_of(y), chunk_align(y_bits));
    p.vec = if dense && is_aligned {
        if uniform {
            1
        } else {
            2
        }
    } else {
        0
    };
    let threads = if p.vec != 0 {
        n.div_ceil(8)
    } else if quantize && q.is_sub_byte() {
        n.div_ceil(8 / qbits)
    } else {
        n
    };
    Ok((p, threads as u64))
}

// ---- QuantizeLinear ----

struct QuantizeKernel {
    base: Base,
    attrs: QAttrs,
    fns: HashMap<DataType, Function>,
}

impl QuantizeKernel {
    fn out_dtype(&self, zp: Option<&TensorView<'_>>) -> DataType {
        zp.map(|z| z.dtype)
            .or(self.attrs.output_dtype)
            .unwrap_or(DataType::Uint8)
    }

    /// Checks the inputs; returns the output dtype, the granularity and the kernel.
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<(DataType, Granularity, Function)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let s = base.req(inputs, 1)?;
        let zp = base.input(inputs, 2);
        if !matches!(
            x.dtype,
            DataType::Float32
                | DataType::Float16
                | DataType::BFloat16
                | DataType::Float64
                | DataType::Int32
        ) {
            return Err(base.unsupported(
                x.dtype,
                "QuantizeLinear takes float, float16, bfloat16, double or int32 inputs",
            ));
        }
        if !scale_supported(s.dtype) {
            return Err(base.unsupported(
                s.dtype,
                "the CUDA QuantizeLinear takes float, float16, bfloat16, double, int32 or \
                 float8e8m0 scales",
            ));
        }
        let q = self.out_dtype(zp);
        let f = *self.fns.get(&q).ok_or_else(|| {
            base.unsupported(
                q,
                "QuantizeLinear produces 8/16-bit, 4-bit and 2-bit integers and float8/float4 \
                 types",
            )
        })?;
        let g = granularity(base, x.shape, s.shape, self.attrs.axis, self.attrs.block)?;
        if let Some(z) = zp {
            if z.numel() != s.numel() {
                return Err(base.err(format!(
                    "zero point {:?} must have the scale's shape {:?}",
                    z.shape, s.shape
                )));
            }
        }
        Ok((q, g, f))
    }
}

impl Kernel for QuantizeKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (q, _, _) = self.plan(inputs)?;
        let x = self.base.req(inputs, 0)?;
        Ok(vec![(q, x.shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.expect_outputs(outputs, &self.output_types(inputs)?)?;
        let (q, g, f) = self.plan(inputs)?;
        let x = base.req(inputs, 0)?;
        let s = base.req(inputs, 1)?;
        let zp = base.input(inputs, 2);
        let y = &outputs[0];
        if x.numel() == 0 {
            return Ok(());
        }
        let (mut p, threads) = plan_launch(
            base,
            x,
            s,
            zp,
            y,
            &g,
            q,
            x.dtype.onnx_code(),
            true,
            self.attrs.saturate,
        )?;
        let (mut px, mut ps, mut pz, mut py) = (
            ptr_of(x),
            ptr_of(s),
            zp.map(ptr_of).unwrap_or(0),
            mut_ptr_of(y),
        );
        let mut args = [
            arg(&mut px),
            arg(&mut ps),
            arg(&mut pz),
            arg(&mut py),
            arg(&mut p),
        ];
        // SAFETY: quantize_to_q(x, scale, zp, y, QParams) reads x, the scale and the zero point
        // inside their views (offsets from their strides, or dense row-major indices when
        // p.vec is set) and writes y inside its view.
        unsafe { base.rt.launch(f, threads, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn quantize(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let attrs = q_attrs(req)?;
    let base = Base::new(rt, req.node);
    let module = base.module(&quantize_module())?;
    let mut fns = HashMap::new();
    for (dtype, tag) in QTYPES.iter().filter(|q| q.0 != DataType::Int32) {
        fns.insert(*dtype, module.function(&format!("quantize_to_{tag}"))?);
    }
    Ok(Box::new(QuantizeKernel { base, attrs, fns }))
}

// ---- DequantizeLinear ----

struct DequantizeKernel {
    base: Base,
    attrs: QAttrs,
    fns: HashMap<DataType, Function>,
}

impl DequantizeKernel {
    /// Checks the inputs; returns the output dtype, the granularity and the kernel.
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<(DataType, Granularity, Function)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let s = base.req(inputs, 1)?;
        let zp = base.input(inputs, 2);
        let f = *self.fns.get(&x.dtype).ok_or_else(|| {
            base.unsupported(
                x.dtype,
                "DequantizeLinear takes 8/16/32-bit, 4-bit and 2-bit integers and float8/float4 \
                 types",
            )
        })?;
        if let Some(z) = zp {
            if z.dtype != x.dtype {
                return Err(base.err(format!(
                    "zero point is {} but x is {}; they must have one type",
                    z.dtype, x.dtype
                )));
            }
            if z.numel() != s.numel() {
                return Err(base.err(format!(
                    "zero point {:?} must have the scale's shape {:?}",
                    z.shape, s.shape
                )));
            }
        }
        if !scale_supported(s.dtype) {
            return Err(base.unsupported(
                s.dtype,
                "the CUDA DequantizeLinear takes float, float16, bfloat16, double, int32 or \
                 float8e8m0 scales",
            ));
        }
        let out = self
            .attrs
            .output_dtype
            .unwrap_or(if s.dtype == DataType::Float8E8M0 {
                DataType::Float32
            } else {
                s.dtype
            });
        if !matches!(
            out,
            DataType::Float32 | DataType::Float16 | DataType::BFloat16 | DataType::Float64
        ) {
            return Err(base.unsupported(
                out,
                "DequantizeLinear produces float, float16, bfloat16 or double",
            ));
        }
        let g = granularity(base, x.shape, s.shape, self.attrs.axis, self.attrs.block)?;
        Ok((out, g, f))
    }
}

impl Kernel for DequantizeKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (out, _, _) = self.plan(inputs)?;
        let x = self.base.req(inputs, 0)?;
        Ok(vec![(out, x.shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.expect_outputs(outputs, &self.output_types(inputs)?)?;
        let (out, g, f) = self.plan(inputs)?;
        let x = base.req(inputs, 0)?;
        let s = base.req(inputs, 1)?;
        let zp = base.input(inputs, 2);
        let y = &outputs[0];
        if x.numel() == 0 {
            return Ok(());
        }
        let (mut p, threads) = plan_launch(
            base,
            x,
            s,
            zp,
            y,
            &g,
            x.dtype,
            out.onnx_code(),
            false,
            false,
        )?;
        let (mut px, mut ps, mut pz, mut py) = (
            ptr_of(x),
            ptr_of(s),
            zp.map(ptr_of).unwrap_or(0),
            mut_ptr_of(y),
        );
        let mut args = [
            arg(&mut px),
            arg(&mut ps),
            arg(&mut pz),
            arg(&mut py),
            arg(&mut p),
        ];
        // SAFETY: dequantize_q(x, scale, zp, y, QParams) reads inside the input views and
        // writes y inside its view (see quantize).
        unsafe { base.rt.launch(f, threads, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn dequantize(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let attrs = q_attrs(req)?;
    let base = Base::new(rt, req.node);
    let module = base.module(&dequantize_module())?;
    let mut fns = HashMap::new();
    for (dtype, tag) in QTYPES {
        fns.insert(dtype, module.function(&format!("dequantize_{tag}"))?);
    }
    Ok(Box::new(DequantizeKernel { base, attrs, fns }))
}

// ---- DynamicQuantizeLinear ----

/// The most (min, max) partials the first launch writes.
const MAX_PARTS: usize = 1024;

/// The partials' device memory, shared by the DynamicQuantizeLinear kernels of one runtime;
/// the lock spans both launches (work on the one stream is ordered, so holding it while
/// enqueueing is enough).
struct DqlWorkspace {
    ptr: CuPtr,
    lock: Mutex<()>,
}

struct DynamicQuantizeKernel {
    base: Base,
    partial: Function,
    quantize: Function,
    ws: Arc<DqlWorkspace>,
}

impl Kernel for DynamicQuantizeKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        if x.dtype != DataType::Float32 {
            return Err(self
                .base
                .unsupported(x.dtype, "DynamicQuantizeLinear takes float inputs"));
        }
        Ok(vec![
            (DataType::Uint8, x.shape.to_vec()),
            (DataType::Float32, Vec::new()),
            (DataType::Uint8, Vec::new()),
        ])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.expect_outputs(outputs, &self.output_types(inputs)?)?;
        let x = base.req(inputs, 0)?;
        check_view_rank(base, x.shape)?;
        let n = x.numel();
        let (y, y_scale, y_zp) = (&outputs[0], &outputs[1], &outputs[2]);
        let sms = base.rt.sm_count() as usize;
        let parts = n.div_ceil(2048).clamp(1, (4 * sms).min(MAX_PARTS));
        let x_dense = x.is_contiguous();
        let y_dense = y.is_contiguous();
        let mut p = DqlParams {
            n: n as i64,
            rank: x.rank() as i32,
            x_dense: x_dense as i32,
            y_dense: y_dense as i32,
            vec: (x_dense && y_dense && aligned(ptr_of(x), 16) && aligned(mut_ptr_of(y), 8)) as i32,
            nparts: if n == 0 { 0 } else { parts as i32 },
            ..Default::default()
        };
        p.dims = fill(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.xs = fill(&istrides(x.strides));
        p.ys = fill(&istrides(y.strides));
        let _guard = self.ws.lock.lock().unwrap_or_else(|e| e.into_inner());
        let (mut px, mut pw) = (ptr_of(x), self.ws.ptr);
        if n > 0 {
            let mut args = [arg(&mut px), arg(&mut pw), arg(&mut p)];
            // SAFETY: dql_partial reads x inside its view and writes one (min, max) pair per
            // block, parts <= MAX_PARTS pairs of the workspace.
            unsafe {
                base.rt.launch_cfg(
                    self.partial,
                    (parts as u32, 1, 1),
                    (256, 1, 1),
                    0,
                    &mut args,
                )?
            };
        }
        let blocks = n.div_ceil(8).div_ceil(256).clamp(1, 16 * sms) as u32;
        let (mut py, mut ps, mut pz) = (mut_ptr_of(y), mut_ptr_of(y_scale), mut_ptr_of(y_zp));
        let mut args = [
            arg(&mut px),
            arg(&mut pw),
            arg(&mut py),
            arg(&mut ps),
            arg(&mut pz),
            arg(&mut p),
        ];
        // SAFETY: dql_quantize reads the nparts partials just written and x inside its view,
        // writes y inside its view and one element of each scalar output.
        unsafe {
            base.rt
                .launch_cfg(self.quantize, (blocks, 1, 1), (256, 1, 1), 0, &mut args)
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn dynamic_quantize(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let module = base.module(&dynamic_module())?;
    let ws = rt.extension(|rt| {
        let (ptr, _) = rt.allocate(MAX_PARTS * 8, 256)?;
        Ok(DqlWorkspace {
            ptr,
            lock: Mutex::new(()),
        })
    })?;
    Ok(Box::new(DynamicQuantizeKernel {
        partial: module.function("dql_partial")?,
        quantize: module.function("dql_quantize")?,
        base,
        ws,
    }))
}

pub fn register(r: &mut Registry) {
    for since in [10, 13, 19, 21, 23, 24, 25] {
        r.register("", "QuantizeLinear", since, quantize);
        r.register("", "DequantizeLinear", since, dequantize);
    }
    r.register("", "DynamicQuantizeLinear", 11, dynamic_quantize);
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![quantize_module(), dequantize_module(), dynamic_module()]
}
