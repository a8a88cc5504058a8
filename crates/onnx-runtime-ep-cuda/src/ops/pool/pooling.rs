//! MaxPool (with the optional Indices output), AveragePool, LpPool over 1 to 8 spatial dims,
//! and GlobalMaxPool, GlobalAveragePool, GlobalLpPool, on any input strides.
//!
//! The window geometry (kernel, strides, dilations, explicit pads or auto_pad, ceil_mode with
//! its "a window must start inside the input or its begin pad" rule) is the CPU provider's
//! (`onnx-runtime-ep-cpu/src/ops/nn/window.rs`), resolved on the host per input shape; the
//! kernels take it by value. Windowed pools run one thread per output; global pools are plane
//! reductions (a warp per plane, or a block per part of a plane when planes are few, with a
//! second pass over the parts' partial results).

use super::{merge_axes, DeviceBlocks, FastDiv, FAST_LIMIT};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{DataType, Node};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// Spatial dims the kernels take.
const MAXK: usize = 8;

/// Mirrors `struct PoolParams` in `kernels/pool.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct PoolParams {
    n: i64,
    k: i32,
    flags: i32,
    c: i64,
    in_plane: i64,
    in_dims: [i64; MAXK],
    out_dims: [i64; MAXK],
    kernel: [i64; MAXK],
    stride: [i64; MAXK],
    dil: [i64; MAXK],
    pad_b: [i64; MAXK],
    pad_e: [i64; MAXK],
    in_mul: [i64; MAXK],
    xs_n: i64,
    xs_c: i64,
    xs: [i64; MAXK],
    ys_n: i64,
    ys_c: i64,
    ys: [i64; MAXK],
    is_n: i64,
    is_c: i64,
    is: [i64; MAXK],
    div_out: [FastDiv; MAXK],
    div_c: FastDiv,
    p: f32,
    inv_p: f32,
    p_d: f64,
    inv_p_d: f64,
}

const INCLUDE_PAD: i32 = 1;
const INDICES: i32 = 2;
const FAST: i32 = 4;

/// Mirrors `struct GlobalParams` in `kernels/pool.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct GlobalParams {
    planes: i64,
    inner: i64,
    c: i64,
    xs_n: i64,
    xs_c: i64,
    rank: i32,
    contiguous: i32,
    dims: [i64; MAXK],
    strides: [i64; MAXK],
    ys_n: i64,
    ys_c: i64,
    splits: i64,
    chunk: i64,
    p: f32,
    inv_p: f32,
    p_d: f64,
    inv_p_d: f64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// The window attributes as written on the node.
#[derive(Clone, Debug)]
struct WindowAttrs {
    kernel: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    auto_pad: AutoPad,
    ceil_mode: bool,
}

/// The resolved geometry for one input.
#[derive(Clone, Debug, PartialEq)]
struct Window {
    input: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    pad_begin: Vec<usize>,
    pad_end: Vec<usize>,
    output: Vec<usize>,
}

fn usize_list(node: &Node, name: &str) -> EpResult<Option<Vec<usize>>> {
    match attr_ints(node, name)? {
        None => Ok(None),
        Some(v) => v
            .iter()
            .map(|&x| {
                usize::try_from(x).map_err(|_| {
                    EpError::invalid_attribute(
                        node,
                        name,
                        format!("{v:?} must hold non-negative values"),
                    )
                })
            })
            .collect::<EpResult<Vec<usize>>>()
            .map(Some),
    }
}

impl WindowAttrs {
    fn parse(node: &Node) -> EpResult<Self> {
        let auto_pad = match attr_string(node, "auto_pad")?.as_deref() {
            None | Some("NOTSET") | Some("") => AutoPad::NotSet,
            Some("SAME_UPPER") => AutoPad::SameUpper,
            Some("SAME_LOWER") => AutoPad::SameLower,
            Some("VALID") => AutoPad::Valid,
            Some(other) => {
                return Err(EpError::invalid_attribute(
                    node,
                    "auto_pad",
                    format!("'{other}' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID"),
                ))
            }
        };
        let w = WindowAttrs {
            kernel: usize_list(node, "kernel_shape")?,
            strides: usize_list(node, "strides")?,
            dilations: usize_list(node, "dilations")?,
            pads: usize_list(node, "pads")?,
            auto_pad,
            ceil_mode: attr_int(node, "ceil_mode")?.unwrap_or(0) != 0,
        };
        if w.strides.as_ref().is_some_and(|s| s.contains(&0)) {
            return Err(EpError::invalid_attribute(
                node,
                "strides",
                "strides must be positive",
            ));
        }
        if w.dilations.as_ref().is_some_and(|s| s.contains(&0)) {
            return Err(EpError::invalid_attribute(
                node,
                "dilations",
                "dilations must be positive",
            ));
        }
        Ok(w)
    }

    /// The window over `input` spatial dims with `kernel` (the CPU provider's rules).
    fn resolve(&self, node: &str, input: &[usize], kernel: &[usize]) -> EpResult<Window> {
        let err = |message: String| EpError::InvalidInput {
            node: node.to_string(),
            message,
        };
        let r = input.len();
        let check = |name: &str, v: &Option<Vec<usize>>, len: usize| -> EpResult<()> {
            match v {
                Some(v) if v.len() != len => Err(err(format!(
                    "{name} has {} values but the input has {r} spatial dims",
                    v.len()
                ))),
                _ => Ok(()),
            }
        };
        if kernel.len() != r {
            return Err(err(format!(
                "kernel {kernel:?} does not match {r} spatial dims of the input"
            )));
        }
        check("strides", &self.strides, r)?;
        check("dilations", &self.dilations, r)?;
        check("pads", &self.pads, 2 * r)?;
        let strides = self.strides.clone().unwrap_or_else(|| vec![1; r]);
        let dilations = self.dilations.clone().unwrap_or_else(|| vec![1; r]);
        let mut pad_begin = vec![0; r];
        let mut pad_end = vec![0; r];
        let mut output = vec![0; r];
        for i in 0..r {
            let ek = (kernel[i].max(1) - 1) * dilations[i] + 1;
            let s = strides[i];
            match self.auto_pad {
                AutoPad::NotSet => {
                    if let Some(p) = &self.pads {
                        pad_begin[i] = p[i];
                        pad_end[i] = p[i + r];
                    }
                    let span = input[i] + pad_begin[i] + pad_end[i];
                    if span < ek {
                        return Err(err(format!(
                            "padded input extent {span} on spatial axis {i} is smaller than the \
                             dilated kernel {ek}; use a smaller kernel_shape or more padding"
                        )));
                    }
                    output[i] = if self.ceil_mode {
                        let mut o = (span - ek).div_ceil(s) + 1;
                        // The last window must start inside the input or its begin pad.
                        if (o - 1) * s >= input[i] + pad_begin[i] {
                            o -= 1;
                        }
                        o
                    } else {
                        (span - ek) / s + 1
                    };
                }
                AutoPad::Valid => {
                    if input[i] < ek {
                        return Err(err(format!(
                            "input extent {} on spatial axis {i} is smaller than the dilated \
                             kernel {ek}",
                            input[i]
                        )));
                    }
                    output[i] = if self.ceil_mode {
                        (input[i] - ek).div_ceil(s) + 1
                    } else {
                        (input[i] - ek) / s + 1
                    };
                }
                AutoPad::SameUpper | AutoPad::SameLower => {
                    output[i] = input[i].div_ceil(s);
                    let total = ((output[i].max(1) - 1) * s + ek).saturating_sub(input[i]);
                    let small = total / 2;
                    if self.auto_pad == AutoPad::SameUpper {
                        pad_begin[i] = small;
                        pad_end[i] = total - small;
                    } else {
                        pad_begin[i] = total - small;
                        pad_end[i] = small;
                    }
                }
            }
        }
        Ok(Window {
            input: input.to_vec(),
            kernel: kernel.to_vec(),
            strides,
            dilations,
            pad_begin,
            pad_end,
            output,
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Kind {
    Max,
    Avg { include_pad: bool },
    Lp { p: f32 },
}

impl Kind {
    fn tag(self) -> &'static str {
        match self {
            Kind::Max => "max",
            Kind::Avg { .. } => "avg",
            Kind::Lp { .. } => "lp",
        }
    }

    fn dtypes(self) -> &'static [DataType] {
        match self {
            Kind::Max => &[
                DataType::Float32,
                DataType::Float64,
                DataType::Float16,
                DataType::BFloat16,
                DataType::Int8,
                DataType::Uint8,
            ],
            _ => &[
                DataType::Float32,
                DataType::Float64,
                DataType::Float16,
                DataType::BFloat16,
            ],
        }
    }

    fn p(self) -> f32 {
        match self {
            Kind::Lp { p } => p,
            _ => 1.0,
        }
    }
}

/// The kernels of one dtype: windowed K = 1, 2, 3, general; global warp, block, finish.
struct Fns {
    window: [Function; 4],
    global: [Function; 3],
}

struct PoolKernel {
    base: Base,
    kind: Kind,
    wa: WindowAttrs,
    storage_order: bool,
    global: bool,
    fns: HashMap<DataType, Fns>,
    /// Partial results of split global reductions: (address, bytes) of the current block.
    scratch: Mutex<Option<(u64, usize)>>,
    blocks: DeviceBlocks,
}

impl PoolKernel {
    /// Whether this node writes MaxPool's Indices output.
    fn indices(&self) -> bool {
        self.kind == Kind::Max && self.base.outputs > 1
    }

    fn window(&self, x: &[usize]) -> EpResult<Window> {
        if x.len() < 3 || x.len() > 2 + MAXK {
            return Err(self.base.err(format!(
                "X {x:?} must be [N, C, spatial...] with 1 to {MAXK} spatial dims"
            )));
        }
        let spatial = &x[2..];
        if self.global {
            let g = WindowAttrs {
                kernel: None,
                strides: None,
                dilations: None,
                pads: None,
                auto_pad: AutoPad::NotSet,
                ceil_mode: false,
            };
            return g.resolve(&self.base.node, spatial, spatial);
        }
        let kernel = self
            .wa
            .kernel
            .clone()
            .ok_or_else(|| self.base.err("kernel_shape is required"))?;
        self.wa.resolve(&self.base.node, spatial, &kernel)
    }

    fn fns(&self, dtype: DataType) -> EpResult<&Fns> {
        self.fns.get(&dtype).ok_or_else(|| {
            self.base.unsupported(
                dtype,
                match self.kind {
                    Kind::Max => {
                        "the CUDA max pools take float, double, float16, bfloat16, int8 or uint8"
                    }
                    _ => "the CUDA average and Lp pools take float, double, float16 or bfloat16",
                },
            )
        })
    }

    fn shapes(&self, x: &TensorView<'_>) -> EpResult<(Window, OutputTypes)> {
        let w = self.window(x.shape)?;
        self.fns(x.dtype)?;
        let mut shape = x.shape[..2].to_vec();
        shape.extend(&w.output);
        checked_numel(&self.base, &shape)?;
        let mut out = vec![(x.dtype, shape.clone())];
        if self.indices() {
            out.push((DataType::Int64, shape));
        }
        Ok((w, out))
    }

    fn run_window(
        &self,
        x: &TensorView<'_>,
        w: &Window,
        outputs: &[TensorMut<'_>],
        fns: &Fns,
    ) -> EpResult<()> {
        let y = &outputs[0];
        let n = y.numel();
        if n == 0 {
            return Ok(());
        }
        let ind = if self.indices() {
            Some(&outputs[1])
        } else {
            None
        };
        let mut p = window_params(
            &self.base.node,
            self.kind,
            self.storage_order,
            (x.shape, x.strides),
            y.strides,
            ind.map(|v| v.strides),
            w,
        )?;
        let mut ind_ptr: u64 = ind.map_or(0, mut_ptr_of);
        let f = fns.window[window_variant(w.input.len())];
        let (mut px, mut py) = (ptr_of(x), mut_ptr_of(y));
        let mut args = [arg(&mut px), arg(&mut py), arg(&mut ind_ptr), arg(&mut p)];
        // SAFETY: pool_<op>_<dtype>_k<K>(x, y, indices, PoolParams) reads inside x's view and
        // writes inside the outputs' views (indices only when the flag is set).
        unsafe { self.base.rt.launch(f, n as u64, &mut args) }
    }

    /// A scratch block of at least `bytes`, grown when needed (not during capture: `None`).
    fn scratch(&self, bytes: usize) -> EpResult<Option<u64>> {
        let mut s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((ptr, have)) = *s {
            if have >= bytes {
                return Ok(Some(ptr));
            }
        }
        if self.base.rt.is_capturing() {
            return Ok(None);
        }
        let ptr = self.blocks.alloc(bytes)?;
        *s = Some((ptr, bytes));
        Ok(Some(ptr))
    }

    fn run_global(&self, x: &TensorView<'_>, y: &TensorMut<'_>, fns: &Fns) -> EpResult<()> {
        let planes = x.shape[0] * x.shape[1];
        if planes == 0 {
            return Ok(());
        }
        let inner: usize = x.shape[2..].iter().product();
        let mut p = global_params(self.kind, (x.shape, x.strides), y.strides);
        let sms = self.base.rt.sm_count().max(1) as usize;
        let (mut px, mut py) = (ptr_of(x), mut_ptr_of(y));
        let Some(want) = global_split(planes, inner, sms) else {
            let blocks = planes.div_ceil(8).clamp(1, sms * 32) as u32;
            let mut args = [arg(&mut px), arg(&mut py), arg(&mut p)];
            // SAFETY: gpool_warp_*(x, y, GlobalParams) reads inside x and writes y's planes.
            return unsafe {
                self.base
                    .rt
                    .launch_cfg(fns.global[0], (blocks, 1, 1), (256, 1, 1), 0, &mut args)
            };
        };
        let acc = if x.dtype == DataType::Float64 { 8 } else { 4 };
        let scratch = if want > 1 {
            self.scratch(planes * want * acc)?
        } else {
            None
        };
        let (splits, chunk) = parts(inner, if scratch.is_some() { want } else { 1 });
        p.splits = splits as i64;
        p.chunk = chunk as i64;
        let blocks = (planes * splits).min(1 << 30) as u32;
        let mut part = scratch.unwrap_or(0);
        let mut args = [arg(&mut px), arg(&mut py), arg(&mut part), arg(&mut p)];
        // SAFETY: gpool_block_*(x, y, part, GlobalParams) reads inside x and writes y, or
        // `planes * splits` partial results into the scratch block.
        unsafe {
            self.base
                .rt
                .launch_cfg(fns.global[1], (blocks, 1, 1), (256, 1, 1), 0, &mut args)?
        };
        if splits > 1 {
            let mut args = [arg(&mut part), arg(&mut py), arg(&mut p)];
            // SAFETY: gpool_finish_*(part, y, GlobalParams) reads the partial results.
            unsafe {
                self.base
                    .rt
                    .launch(fns.global[2], planes as u64, &mut args)?
            };
        }
        Ok(())
    }
}

/// How a global pool of `planes` planes of `inner` elements runs on `sms` multiprocessors:
/// `None` for a warp per plane (small planes, or enough planes to fill the device), else the
/// number of parts per plane wanted (about four blocks per multiprocessor, parts of at least
/// 16K elements).
fn global_split(planes: usize, inner: usize, sms: usize) -> Option<usize> {
    if inner <= 2048 || planes >= sms * 16 {
        return None;
    }
    Some((4 * sms).div_ceil(planes).min(inner.div_ceil(16384)).max(1))
}

/// `inner` elements in at most `splits` parts starting on 16-element boundaries (whole
/// 16-byte words for every width): (parts, elements per part).
fn parts(inner: usize, splits: usize) -> (usize, usize) {
    let chunk = (inner.div_ceil(splits.max(1)).div_ceil(16) * 16).max(16);
    (inner.div_ceil(chunk).max(1), chunk)
}

/// The launch parameters of a global pool of `x` (shape, strides) into outputs of strides
/// `ys`, as one part per plane.
fn global_params(
    kind: Kind,
    (xshape, xstrides): (&[usize], &[usize]),
    ys: &[usize],
) -> GlobalParams {
    let planes = xshape[0] * xshape[1];
    let inner: usize = xshape[2..].iter().product();
    let (dims, strides) = merge_axes(&xshape[2..], &xstrides[2..]);
    let contiguous = dims.is_empty() || (dims.len() == 1 && strides[0] == 1);
    let mut p = GlobalParams {
        planes: planes as i64,
        inner: inner as i64,
        c: xshape[1] as i64,
        xs_n: xstrides[0] as i64,
        xs_c: xstrides[1] as i64,
        rank: dims.len() as i32,
        contiguous: contiguous as i32,
        ys_n: ys[0] as i64,
        ys_c: ys[1] as i64,
        splits: 1,
        chunk: inner as i64,
        p: kind.p(),
        inv_p: 1.0 / kind.p(),
        p_d: kind.p() as f64,
        inv_p_d: 1.0 / kind.p() as f64,
        ..Default::default()
    };
    for (d, (&n, &s)) in dims.iter().zip(&strides).enumerate() {
        p.dims[d] = n as i64;
        p.strides[d] = s;
    }
    p
}

/// Which windowed kernel takes `k` spatial dims: `_k1`, `_k2`, `_k3` or the general `_k0`.
fn window_variant(k: usize) -> usize {
    match k {
        1 => 0,
        2 => 1,
        3 => 2,
        _ => 3,
    }
}

/// The launch parameters of a windowed pool of `x` (shape, strides) over `w`, writing outputs
/// of strides `ys` (and Indices of strides `is`).
fn window_params(
    node: &str,
    kind: Kind,
    storage_order: bool,
    (xshape, xstrides): (&[usize], &[usize]),
    ys: &[usize],
    is: Option<&[usize]>,
    w: &Window,
) -> EpResult<PoolParams> {
    let k = w.input.len();
    let n = xshape[0] * xshape[1] * w.output.iter().product::<usize>();
    let mut p = PoolParams {
        n: n as i64,
        k: k as i32,
        c: xshape[1] as i64,
        in_plane: w.input.iter().product::<usize>() as i64,
        xs_n: xstrides[0] as i64,
        xs_c: xstrides[1] as i64,
        ys_n: ys[0] as i64,
        ys_c: ys[1] as i64,
        div_c: FastDiv::new(xshape[1]),
        p: kind.p(),
        inv_p: 1.0 / kind.p(),
        p_d: kind.p() as f64,
        inv_p_d: 1.0 / kind.p() as f64,
        ..Default::default()
    };
    if let Kind::Avg { include_pad: true } = kind {
        p.flags |= INCLUDE_PAD;
    }
    if n <= FAST_LIMIT {
        p.flags |= FAST;
    }
    // Indices: row-major offsets in the plane, or column-major with storage_order = 1.
    let (mut row_major, mut col_major) = (1i64, 1i64);
    for d in (0..k).rev() {
        if !storage_order {
            p.in_mul[d] = row_major;
        }
        row_major *= w.input[d] as i64;
    }
    for d in 0..k {
        p.in_dims[d] = w.input[d] as i64;
        p.out_dims[d] = w.output[d] as i64;
        p.kernel[d] = w.kernel[d] as i64;
        p.stride[d] = w.strides[d] as i64;
        p.dil[d] = w.dilations[d] as i64;
        p.pad_b[d] = w.pad_begin[d] as i64;
        p.pad_e[d] = w.pad_end[d] as i64;
        if storage_order {
            p.in_mul[d] = col_major;
        }
        col_major *= w.input[d] as i64;
        p.xs[d] = xstrides[2 + d] as i64;
        p.ys[d] = ys[2 + d] as i64;
        p.div_out[d] = FastDiv::new(w.output[d]);
    }
    // The kernels index spatial coordinates in 32 bits.
    let limit = i32::MAX as usize / 2;
    if (0..k).any(|d| {
        w.input[d] + w.pad_begin[d] + w.pad_end[d] > limit
            || w.output[d] * w.strides[d] > limit
            || w.kernel[d] * w.dilations[d] > limit
    }) {
        return Err(EpError::InvalidInput {
            node: node.to_string(),
            message: format!(
                "spatial extents {:?} (kernel {:?}) exceed the CUDA pools' 2^30 limit per axis",
                w.input, w.kernel
            ),
        });
    }
    if let Some(is) = is {
        p.flags |= INDICES;
        p.is_n = is[0] as i64;
        p.is_c = is[1] as i64;
        for d in 0..k {
            p.is[d] = is[2 + d] as i64;
        }
    }
    Ok(p)
}

impl Kernel for PoolKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        Ok(self.shapes(x)?.1)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let (w, want) = self.shapes(x)?;
        base.expect_outputs(outputs, &want)?;
        let fns = self.fns(x.dtype)?;
        if self.global && !self.indices() {
            self.run_global(x, &outputs[0], fns)
        } else {
            self.run_window(x, &w, outputs, fns)
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn make(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    kind: Kind,
    global: bool,
) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let wa = WindowAttrs::parse(node)?;
    if !global && wa.kernel.is_none() {
        return Err(EpError::invalid_attribute(
            node,
            "kernel_shape",
            "is required",
        ));
    }
    if let Kind::Lp { p } = kind {
        if !(p.is_finite() && p > 0.0) {
            return Err(EpError::invalid_attribute(
                node,
                "p",
                format!("must be a positive number, got {p}"),
            ));
        }
    }
    let base = Base::new(rt, node);
    let module = base.module(&super::pool_module())?;
    let mut fns = HashMap::new();
    for &dtype in kind.dtypes() {
        let tag = type_tag(dtype).expect("a typed dtype");
        let op = kind.tag();
        let f = |k: &str| module.function(&format!("pool_{op}_{tag}_{k}"));
        let g = |k: &str| module.function(&format!("gpool_{k}_{op}_{tag}"));
        fns.insert(
            dtype,
            Fns {
                window: [f("k1")?, f("k2")?, f("k3")?, f("k0")?],
                global: [g("warp")?, g("block")?, g("finish")?],
            },
        );
    }
    Ok(Box::new(PoolKernel {
        blocks: DeviceBlocks::new(rt),
        base,
        kind,
        wa,
        storage_order: attr_int(node, "storage_order")?.unwrap_or(0) != 0,
        global,
        fns,
        scratch: Mutex::new(None),
    }))
}

fn lp_p(node: &Node) -> EpResult<f32> {
    Ok(attr_float(node, "p")?.unwrap_or(2.0))
}

fn max_pool(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    make(rt, req, Kind::Max, false)
}

fn average_pool(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let include_pad = attr_int(req.node, "count_include_pad")?.unwrap_or(0) != 0;
    make(rt, req, Kind::Avg { include_pad }, false)
}

fn lp_pool(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    make(rt, req, Kind::Lp { p: lp_p(req.node)? }, false)
}

fn global_max(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    make(rt, req, Kind::Max, true)
}

fn global_average(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    make(rt, req, Kind::Avg { include_pad: false }, true)
}

fn global_lp(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    make(rt, req, Kind::Lp { p: lp_p(req.node)? }, true)
}

pub fn register(r: &mut Registry) {
    // The since-versions the CPU provider registers (8: Indices, 10: dilations and ceil_mode,
    // 11: pads semantics, 12: int8/uint8, 19: AveragePool dilations, 22: bfloat16).
    for since in [1, 8, 10, 11, 12, 22] {
        r.register("", "MaxPool", since, max_pool);
    }
    for since in [1, 7, 10, 11, 19, 22] {
        r.register("", "AveragePool", since, average_pool);
    }
    for since in [1, 2, 11, 18, 22] {
        r.register("", "LpPool", since, lp_pool);
    }
    for since in [1, 22] {
        r.register("", "GlobalMaxPool", since, global_max);
        r.register("", "GlobalAveragePool", since, global_average);
    }
    for since in [1, 2, 22] {
        r.register("", "GlobalLpPool", since, global_lp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pads: Option<Vec<usize>>, auto_pad: AutoPad, ceil: bool) -> WindowAttrs {
        WindowAttrs {
            kernel: None,
            strides: Some(vec![2, 2]),
            dilations: None,
            pads,
            auto_pad,
            ceil_mode: ceil,
        }
    }

    #[test]
    fn params_layout_matches_the_kernel_structs() {
        // The .cu structs' sizes: the same fields in the same order, naturally aligned.
        assert_eq!(std::mem::size_of::<PoolParams>(), 952);
        assert_eq!(std::mem::size_of::<GlobalParams>(), 232);
    }

    #[test]
    fn output_extents_follow_the_cpu_provider() {
        let w = attrs(Some(vec![1, 1, 1, 1]), AutoPad::NotSet, false)
            .resolve("n", &[5, 6], &[3, 3])
            .unwrap();
        assert_eq!(w.output, vec![3, 3]);
        let w = attrs(None, AutoPad::SameUpper, false)
            .resolve("n", &[5, 6], &[3, 3])
            .unwrap();
        assert_eq!(w.output, vec![3, 3]);
        assert_eq!((w.pad_begin, w.pad_end), (vec![1, 0], vec![1, 1]));
        let w = attrs(None, AutoPad::SameLower, false)
            .resolve("n", &[5, 6], &[3, 3])
            .unwrap();
        assert_eq!((w.pad_begin, w.pad_end), (vec![1, 1], vec![1, 0]));
        let w = attrs(None, AutoPad::NotSet, true)
            .resolve("n", &[6, 6], &[3, 3])
            .unwrap();
        assert_eq!(w.output, vec![3, 3]);
        // ceil_mode: a last window that would start in the end pad is dropped.
        let w = WindowAttrs {
            strides: Some(vec![2]),
            pads: Some(vec![0, 1]),
            ..attrs(None, AutoPad::NotSet, true)
        }
        .resolve("n", &[6], &[2])
        .unwrap();
        assert_eq!(w.output, vec![3]);
        let err = attrs(None, AutoPad::NotSet, false)
            .resolve("node 'x'", &[2, 2], &[3, 3])
            .unwrap_err()
            .to_string();
        assert!(err.contains("node 'x'") && err.contains("smaller than the dilated kernel"));
    }
}
