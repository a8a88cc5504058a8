//! Miscellaneous tensor ops: CastLike (through the Cast kernels, built for the second input's
//! dtype on first sight), EyeLike, ReverseSequence, CenterCropPad (through the Pad
//! kernel), Col2Im (`col2im`) and the data-dependent NonZero and Compress (`select`).

mod col2im;
mod select;
mod tensor_scatter;
pub(crate) mod unique;

use super::common::*;
use super::params::{PadParams, MAX_RANK};
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{DataType, Node};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const SOURCE: &str = include_str!("../../kernels/tensor_misc.cu");

/// EyeLike, ReverseSequence, NonZero and Compress, by element width.
fn move_module() -> ModuleSpec {
    ModuleSpec::new("tensor_misc", SOURCE).define("MISC_MOVE", "1")
}

/// Col2Im, typed.
fn typed_module() -> ModuleSpec {
    ModuleSpec::new("tensor_misc_typed", SOURCE)
        .define("MISC_TYPED", "1")
        .with_half()
}

/// The functions `prefix_w{1,2,4,8}` (no 16-byte variant) by element width.
struct NarrowWidthFns([Function; 4]);

impl NarrowWidthFns {
    fn load(base: &Base, spec: &ModuleSpec, prefix: &str) -> EpResult<Self> {
        let m = base.module(spec)?;
        let f = |w: usize| m.function(&format!("{prefix}_w{w}"));
        Ok(NarrowWidthFns([f(1)?, f(2)?, f(4)?, f(8)?]))
    }

    fn get(&self, width: usize) -> Option<Function> {
        Some(
            self.0[match width {
                1 => 0,
                2 => 1,
                4 => 2,
                8 => 3,
                _ => return None,
            }],
        )
    }
}

// ---- CastLike ----

/// Cast to the dtype of input 1, through a Cast kernel per target dtype, built on the first
/// call that needs it (`output_types` normally, so `execute` finds it ready).
struct CastLikeKernel {
    rt: Arc<CudaRuntime>,
    node: Node,
    base: Base,
    casts: Mutex<HashMap<DataType, Arc<dyn Kernel>>>,
}

impl CastLikeKernel {
    fn cast_for(&self, inputs: &[TensorView<'_>]) -> EpResult<Arc<dyn Kernel>> {
        let to = self.base.req(inputs, 1)?.dtype;
        let mut casts = self.casts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(k) = casts.get(&to) {
            return Ok(k.clone());
        }
        let k: Arc<dyn Kernel> = Arc::from(super::cast::cast_kernel_to(&self.rt, &self.node, to)?);
        casts.insert(to, k.clone());
        Ok(k)
    }
}

impl Kernel for CastLikeKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        self.cast_for(inputs)?.output_types(inputs)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        self.cast_for(inputs)?.execute(inputs, outputs)
    }

    fn capture_support(&self) -> CaptureSupport {
        if self
            .casts
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
        {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: CastLike builds its Cast kernel for the second input's dtype on its \
                     first run; run it once eagerly before capturing",
                    self.base.node
                ),
            }
        } else {
            CaptureSupport::Supported
        }
    }
}

fn cast_like(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    Ok(Box::new(CastLikeKernel {
        rt: rt.clone(),
        node: req.node.clone(),
        base: Base::new(rt, req.node),
        casts: Mutex::new(HashMap::new()),
    }))
}

// ---- EyeLike ----

/// Mirrors `EyeParams` in tensor_misc.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct EyeParams {
    n: i64,
    cols: i64,
    k: i64,
    s0: i64,
    s1: i64,
    one: u64,
}

/// The bits of 1 in `dtype` (numeric types and bool).
fn one_bits(dtype: DataType) -> Option<u64> {
    Some(match dtype {
        DataType::Float32 => u64::from(1.0f32.to_bits()),
        DataType::Float64 => 1.0f64.to_bits(),
        DataType::Float16 => u64::from(half::f16::ONE.to_bits()),
        DataType::BFloat16 => u64::from(half::bf16::ONE.to_bits()),
        d if d == DataType::Bool || d.is_integer() && !d.is_sub_byte() => 1,
        _ => return None,
    })
}

struct EyeLikeKernel {
    base: Base,
    k: i64,
    dtype: Option<DataType>,
    fns: NarrowWidthFns,
}

impl EyeLikeKernel {
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<(DataType, [usize; 2], u64, Function)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let [n, m] = *x.shape else {
            return Err(base.err(format!("input must be 2-D, got {:?}", x.shape)));
        };
        let dt = self.dtype.unwrap_or(x.dtype);
        let unsupported = || base.unsupported(dt, "EyeLike produces numeric types and bool");
        let one = one_bits(dt).ok_or_else(unsupported)?;
        let f = dt
            .element_size()
            .and_then(|w| self.fns.get(w))
            .ok_or_else(unsupported)?;
        Ok((dt, [n, m], one, f))
    }
}

impl Kernel for EyeLikeKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (dt, shape, _, _) = self.plan(inputs)?;
        Ok(vec![(dt, shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (dt, [n, m], one, f) = self.plan(inputs)?;
        base.expect_outputs(outputs, &[(dt, vec![n, m])])?;
        let out = &outputs[0];
        let mut p = EyeParams {
            n: (n * m) as i64,
            cols: m as i64,
            k: self.k,
            s0: out.strides[0] as i64,
            s1: out.strides[1] as i64,
            one,
        };
        let mut po = mut_ptr_of(out);
        let mut args = [arg(&mut po), arg(&mut p)];
        // SAFETY: eye_wW(out, EyeParams) writes the n x m elements of the output's view.
        unsafe { base.rt.launch(f, p.n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn eye_like(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let dtype = match attr_int(node, "dtype")? {
        Some(code) => Some(
            DataType::from_onnx(code as i32)
                .filter(|d| *d != DataType::Undefined)
                .ok_or_else(|| {
                    EpError::invalid_attribute(node, "dtype", format!("unknown type code {code}"))
                })?,
        ),
        None => None,
    };
    let base = Base::new(rt, node);
    let fns = NarrowWidthFns::load(&base, &move_module(), "eye")?;
    Ok(Box::new(EyeLikeKernel {
        base,
        k: attr_int(node, "k")?.unwrap_or(0),
        dtype,
        fns,
    }))
}

// ---- ReverseSequence ----

/// Mirrors `RevSeqParams` in tensor_misc.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct RevSeqParams {
    n: i64,
    rank: i32,
    batch_axis: i32,
    time_axis: i32,
    lens_code: i32,
    lens_stride: i64,
    dims: [i64; MAX_RANK],
    xs: [i64; MAX_RANK],
    os: [i64; MAX_RANK],
    id: u32,
    _pad: u32,
}

struct ReverseSequenceKernel {
    base: Base,
    batch_axis: usize,
    time_axis: usize,
    fns: WidthFns,
}

impl ReverseSequenceKernel {
    /// Checks x and sequence_lens; returns the element width and the lengths' stride.
    fn plan(&self, x: &TensorView<'_>, lens: &TensorView<'_>) -> EpResult<(usize, i64)> {
        let base = &self.base;
        let width = base.width(x.dtype)?;
        check_view_rank(base, x.shape)?;
        if x.rank() < 2 {
            return Err(base.err(format!(
                "input must be at least 2-D (batch and time axes), got {:?}",
                x.shape
            )));
        }
        if !matches!(lens.dtype, DataType::Int64 | DataType::Int32) {
            return Err(base.err(format!(
                "sequence_lens must be int64 (or int32), got {}",
                lens.dtype
            )));
        }
        let batch = x.shape[self.batch_axis];
        if lens.numel() != batch {
            return Err(base.err(format!(
                "sequence_lens {:?} must have one entry per batch of {:?} (axis {})",
                lens.shape, x.shape, self.batch_axis
            )));
        }
        let stride = match (lens.rank(), lens.is_contiguous()) {
            (1, _) => lens.strides[0] as i64,
            (_, true) => 1,
            _ => {
                return Err(base.err(format!(
                    "sequence_lens {:?} must be 1-D or dense",
                    lens.shape
                )))
            }
        };
        Ok((width, stride))
    }
}

impl Kernel for ReverseSequenceKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        self.plan(x, self.base.req(inputs, 1)?)?;
        Ok(vec![(x.dtype, x.shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let lens = base.req(inputs, 1)?;
        base.expect_outputs(outputs, &[(x.dtype, x.shape.to_vec())])?;
        let (width, lens_stride) = self.plan(x, lens)?;
        let out = &outputs[0];
        let n = x.numel();
        if n == 0 {
            return Ok(());
        }
        let mut p = RevSeqParams {
            n: n as i64,
            rank: x.rank() as i32,
            batch_axis: self.batch_axis as i32,
            time_axis: self.time_axis as i32,
            lens_code: lens.dtype.onnx_code(),
            lens_stride,
            id: base.id,
            ..Default::default()
        };
        p.dims = fill(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.xs = fill(&istrides(x.strides));
        p.os = fill(&istrides(out.strides));
        let (mut px, mut po, mut pl, mut pe) =
            (ptr_of(x), mut_ptr_of(out), ptr_of(lens), base.rt.err_ptr());
        let mut args = [
            arg(&mut px),
            arg(&mut po),
            arg(&mut pl),
            arg(&mut pe),
            arg(&mut p),
        ];
        // SAFETY: revseq_wW(x, out, lens, err, RevSeqParams) reads x inside its view (time
        // index in [0, steps)), one length per batch, and writes each output element once.
        unsafe { base.rt.launch(self.fns.get(width), n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn reverse_sequence(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let batch_axis = attr_int(node, "batch_axis")?.unwrap_or(1);
    let time_axis = attr_int(node, "time_axis")?.unwrap_or(0);
    if !matches!((batch_axis, time_axis), (0, 1) | (1, 0)) {
        return Err(EpError::invalid_attribute(
            node,
            "batch_axis",
            format!(
                "batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 in some order"
            ),
        ));
    }
    let base = Base::new(rt, node);
    let fns = WidthFns::load(&*base.module(&move_module())?, "revseq", "")?;
    Ok(Box::new(ReverseSequenceKernel {
        base,
        batch_axis: batch_axis as usize,
        time_axis: time_axis as usize,
        fns,
    }))
}

// ---- CenterCropPad ----

struct CenterCropPadKernel {
    base: Base,
    host: HostReads,
    axes: Option<Vec<i64>>,
    pad: WidthFns,
}

impl CenterCropPadKernel {
    /// The output shape and, per axis, the Pad kernel's `begin` (the output index of input
    /// index 0: negative when cropping).
    fn plan(&self, x: &TensorView<'_>, host: &HostValues) -> EpResult<(Vec<usize>, Vec<i64>)> {
        let base = &self.base;
        check_view_rank(base, x.shape)?;
        let rank = x.rank();
        let shape = host
            .get(1)
            .cloned()
            .flatten()
            .ok_or_else(|| base.err("the shape input is missing"))?;
        let axes: Vec<usize> = match &self.axes {
            Some(a) => a
                .iter()
                .map(|&v| base.axis(v, rank, "axis"))
                .collect::<EpResult<_>>()?,
            None => (0..rank).collect(),
        };
        if shape.len() != axes.len() {
            return Err(base.err(format!(
                "shape {shape:?} must have one entry per axis {axes:?}"
            )));
        }
        let mut out = x.shape.to_vec();
        let mut begin = vec![0i64; rank];
        for (&a, &t) in axes.iter().zip(&shape) {
            if t < 0 {
                return Err(base.err(format!("shape {shape:?} has a negative extent")));
            }
            let d = x.shape[a] as i64;
            begin[a] = if t <= d { -((d - t) / 2) } else { (t - d) / 2 };
            out[a] = t as usize;
        }
        Ok((out, begin))
    }
}

impl Kernel for CenterCropPadKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        base.width(x.dtype)?;
        let (shape, _) = self.plan(x, &self.host.peek(base, inputs)?)?;
        Ok(vec![(x.dtype, shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        let width = base.width(x.dtype)?;
        let host = self.host.values(base, inputs, outputs)?;
        let (shape, begin) = self.plan(x, &host)?;
        base.expect_outputs(outputs, &[(x.dtype, shape.clone())])?;
        let out = &outputs[0];
        let mut p = PadParams {
            n: shape.iter().product::<usize>() as i64,
            rank: x.rank() as i32,
            mode: 0,
            ..Default::default()
        };
        p.out_dims = fill(&shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.in_dims = fill(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.in_strides = fill(&istrides(x.strides));
        p.out_strides = fill(&istrides(out.strides));
        p.begin = fill(&begin);
        let (mut pi, mut po, mut pv) = (ptr_of(x), mut_ptr_of(out), 0u64);
        let mut args = [arg(&mut pi), arg(&mut po), arg(&mut pv), arg(&mut p)];
        // SAFETY: pad_wW(in, out, value = null (zeros from p.value), PadParams) reads x inside
        // its view and writes each output element once.
        unsafe { base.rt.launch(self.pad.get(width), p.n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

fn center_crop_pad(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let pad = WidthFns::load(&*base.module(&copy_module())?, "pad", "")?;
    let host = HostReads::new(&base, &[1], "shape input");
    Ok(Box::new(CenterCropPadKernel {
        axes: attr_ints(req.node, "axes")?,
        base,
        host,
        pad,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "CastLike", 15, cast_like);
    r.register("", "EyeLike", 9, eye_like);
    r.register("", "ReverseSequence", 10, reverse_sequence);
    r.register("", "CenterCropPad", 18, center_crop_pad);
    select::register(r);
    col2im::register(r);
    tensor_scatter::register(r);
    unique::register(r);
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![
        move_module(),
        typed_module(),
        tensor_scatter::tensor_scatter_module(),
        unique::unique_module(),
    ]
}
