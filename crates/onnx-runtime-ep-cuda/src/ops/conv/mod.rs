//! Convolutions: Conv (opset 1, 11, 22) and com.microsoft FusedConv through cuDNN's forward
//! convolution, or one cuBLASLt GEMM for pointwise (1x1) ones, ConvTranspose (1, 11, 22)
//! through cuDNN's backward-data convolution, and direct kernels for ConvInteger and
//! QLinearConv (10). float32 runs with true FP32 math (no TF32; the GEMMs follow the gemm
//! family's `ONNX_RUNTIME_CUDA_TF32`), float16 and bfloat16 with float32 accumulation on
//! tensor cores, float64 in double.
//!
//! cuDNN sees packed NCHW-style tensors only: inputs with other strides are packed by a
//! kernel of `kernels/conv.cu`, which also adds the part of an asymmetric padding that
//! cuDNN's symmetric pads cannot express. Bias, FusedConv's residual Z and activations that
//! cuDNN's fused call does not take run in one vectorized epilogue pass, which also crops a
//! transposed convolution's result and writes strided outputs. The algorithm is chosen once
//! per input shape: the first eager run times the first few of cuDNN's heuristic proposals
//! (no exhaustive search) of both the legacy API and, for float32, float16 and bfloat16, the
//! backend (graph) API ([`graph`], [`graph_plan`]: its tensor-core engines take NCHW half
//! tensors at full speed; float32 keeps to engines without TF32), and keeps the fastest with
//! its workspace, so a kernel is capturable once it ran eagerly for the shape.
//! `ONNX_RUNTIME_CUDA_CONV_BACKEND=0` leaves the backend API out, `=force` times only its
//! engines wherever one builds for the shape.

mod algo;
mod causal_state;
#[allow(clippy::module_inception)]
mod conv;
mod conv_transpose;
pub mod dnn;
mod fused;
mod graph;
mod graph_plan;
mod plan;
mod pointwise;
mod quant;

use super::common::{attr_ints, attr_string, Base};
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CuPtr, Function};
use onnx_runtime_ep_api::{EpError, EpResult};
use onnx_runtime_ir::{DataType, Node};
use std::ffi::c_void;

pub fn register(r: &mut Registry) {
    for since in [1, 11, 22] {
        r.register("", "Conv", since, conv::build_conv);
        r.register("", "ConvTranspose", since, conv_transpose::build);
    }
    r.register("com.microsoft", "FusedConv", 1, conv::build_fused);
    r.register("", "ConvInteger", 10, quant::build_conv_integer);
    r.register("", "QLinearConv", 10, quant::build_qlinear_conv);
    causal_state::register(r);
}

/// The paths the first eager runs chose, by (dtype, X shape, W shape): the last one of each
/// key, at most [`MAX_PATHS`] keys (the benchmark reads them with [`chosen_path`]).
static PATHS: std::sync::Mutex<Vec<PathEntry>> = std::sync::Mutex::new(Vec::new());

/// dtype, X shape, W shape, path.
type PathEntry = (DataType, Vec<usize>, Vec<usize>, String);

const MAX_PATHS: usize = 4096;

fn record_path(dtype: DataType, x: &[usize], w: &[usize], path: String) {
    let mut paths = PATHS.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(e) = paths
        .iter_mut()
        .find(|e| e.0 == dtype && e.1 == x && e.2 == w)
    {
        e.3 = path;
    } else if paths.len() < MAX_PATHS {
        paths.push((dtype, x.to_vec(), w.to_vec(), path));
    }
}

/// The path (cuBLASLt GEMM, a legacy cuDNN algorithm or a cuDNN graph engine) the last Conv /
/// FusedConv planned for these shapes chose on its first eager run, if any ran in this
/// process.
pub fn chosen_path(dtype: DataType, x: &[usize], w: &[usize]) -> Option<String> {
    let paths = PATHS.lock().unwrap_or_else(|e| e.into_inner());
    paths
        .iter()
        .find(|e| e.0 == dtype && e.1 == x && e.2 == w)
        .map(|e| e.3.clone())
}

/// The one module of the family: packing, epilogue and integer kernels.
pub fn conv_module() -> ModuleSpec {
    ModuleSpec::new("conv", include_str!("../../kernels/conv.cu")).with_half()
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![conv_module(), causal_state::module()]
}

/// Highest tensor rank of the kernels here: N, C and up to three spatial axes (cuDNN's limit).
pub const CONV_RANK: usize = 5;

// ---- launch parameters, mirrored in kernels/conv.cu ----

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvPack {
    pub n: i64,
    pub rank: i32,
    pub _pad: i32,
    pub dims: [i64; CONV_RANK],
    pub src_dims: [i64; CONV_RANK],
    pub src_strides: [i64; CONV_RANK],
    pub off: [i64; CONV_RANK],
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvFinish {
    pub n: i64,
    pub rank: i32,
    pub act: i32,
    pub dims: [i64; CONV_RANK],
    pub dst_strides: [i64; CONV_RANK],
    pub src_dims: [i64; CONV_RANK],
    pub off: [i64; CONV_RANK],
    pub z_strides: [i64; CONV_RANK],
    pub bias_stride: i64,
    pub inner: i64,
    pub channels: i64,
    pub alpha: f64,
    pub beta: f64,
    pub has_src: i32,
    pub has_bias: i32,
    pub has_z: i32,
    pub _pad: i32,
}

#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ConvQ {
    pub n: i64,
    pub out_dims: [i64; CONV_RANK],
    pub in_dims: [i64; CONV_RANK],
    pub x_strides: [i64; CONV_RANK],
    pub w_strides: [i64; CONV_RANK],
    pub y_strides: [i64; CONV_RANK],
    pub kernel: [i64; 3],
    pub stride: [i64; 3],
    pub dil: [i64; 3],
    pub pad: [i64; 3],
    pub group_in: i64,
    pub group_out: i64,
    pub wzp_stride: i64,
    pub wscale_stride: i64,
    pub bias_stride: i64,
    pub has_xzp: i32,
    pub has_wzp: i32,
    pub has_bias: i32,
    pub _pad: i32,
}

fn arg<T>(v: &mut T) -> *mut c_void {
    v as *mut T as *mut c_void
}

fn fill5(values: &[i64]) -> [i64; CONV_RANK] {
    let mut a = [0i64; CONV_RANK];
    a[..values.len()].copy_from_slice(values);
    a
}

fn to_i64(v: &[usize]) -> Vec<i64> {
    v.iter().map(|&x| x as i64).collect()
}

// ---- the helper kernels ----

/// The float dtypes the cuDNN convolutions take, with their kernel-name tags.
pub const FLOATS: [(DataType, &str); 4] = [
    (DataType::Float32, "f32"),
    (DataType::Float64, "f64"),
    (DataType::Float16, "f16"),
    (DataType::BFloat16, "bf16"),
];

/// The packing and epilogue kernels of one float dtype.
pub struct Helpers {
    width: usize,
    pack: Function,
    finish: Function,
    finish_contig: Function,
    finish_vec: Function,
}

impl Helpers {
    pub fn load(base: &Base, dtype: DataType) -> EpResult<Self> {
        let tag = FLOATS
            .iter()
            .find(|f| f.0 == dtype)
            .map(|f| f.1)
            .ok_or_else(|| {
                base.unsupported(
                    dtype,
                    "convolutions take float32, float64, float16, bfloat16",
                )
            })?;
        let module = base.module(&conv_module())?;
        let width = dtype.element_size().unwrap_or(4);
        Ok(Helpers {
            width,
            pack: module.function(&format!("conv_pack_w{width}"))?,
            finish: module.function(&format!("conv_finish_{tag}"))?,
            finish_contig: module.function(&format!("conv_finish_contig_{tag}"))?,
            finish_vec: module.function(&format!("conv_finish_vec_{tag}"))?,
        })
    }

    /// Copies `src` (`src_shape`, element strides `src_strides`) into the contiguous `dst` of
    /// `dims`, element `i` of `dst` taking `src[i - off]` and zero where that leaves `src`.
    #[allow(clippy::too_many_arguments)]
    pub fn pack(
        &self,
        base: &Base,
        src: CuPtr,
        src_shape: &[usize],
        src_strides: &[usize],
        off: &[i64],
        dims: &[usize],
        dst: CuPtr,
    ) -> EpResult<()> {
        let n: usize = dims.iter().product();
        if n == 0 {
            return Ok(());
        }
        let rank = dims.len();
        if rank > CONV_RANK || src_shape.len() != rank || off.len() != rank {
            return Err(base.err(format!(
                "internal: packing {src_shape:?} into {dims:?} (rank limit {CONV_RANK})"
            )));
        }
        let mut p = ConvPack {
            n: n as i64,
            rank: rank as i32,
            dims: fill5(&to_i64(dims)),
            src_dims: fill5(&to_i64(src_shape)),
            src_strides: fill5(&to_i64(src_strides)),
            off: fill5(off),
            ..Default::default()
        };
        let (mut s, mut d) = (src, dst);
        let mut args = [arg(&mut s), arg(&mut d), arg(&mut p)];
        // SAFETY: conv_pack_wW(src, dst, ConvPack) reads inside the source view (offsets are
        // bounds-checked against src_dims) and writes `n` contiguous elements of `dst`.
        unsafe { base.rt.launch(self.pack, n as u64, &mut args) }
    }

    /// Runs the epilogue `e` into `dst`.
    pub fn finish(&self, base: &Base, e: &Epilogue<'_>) -> EpResult<()> {
        let n: usize = e.dims.iter().product();
        if n == 0 {
            return Ok(());
        }
        let rank = e.dims.len();
        if !(2..=CONV_RANK).contains(&rank) {
            return Err(base.err(format!("internal: epilogue over {:?}", e.dims)));
        }
        let inner: usize = e.dims[2..].iter().product();
        let contiguous_src = e
            .src
            .is_none_or(|s| s.off.iter().all(|&o| o == 0) && s.dims == e.dims);
        let dst_contig = is_packed(e.dims, e.dst_strides);
        let z_contig = e.z.is_none_or(|z| is_packed(e.dims, z.1));
        let contig = contiguous_src && dst_contig && z_contig;
        let (act, alpha, beta) = e.act.code();
        let mut p = ConvFinish {
            n: n as i64,
            rank: rank as i32,
            act,
            dims: fill5(&to_i64(e.dims)),
            dst_strides: fill5(&to_i64(e.dst_strides)),
            src_dims: fill5(&to_i64(e.src.map_or(e.dims, |s| s.dims))),
            off: fill5(e.src.map_or(&[][..], |s| s.off)),
            z_strides: fill5(&to_i64(e.z.map_or(&[][..], |z| z.1))),
            bias_stride: e.bias.map_or(0, |b| b.1 as i64),
            inner: inner.max(1) as i64,
            channels: e.dims[1].max(1) as i64,
            alpha,
            beta,
            has_src: e.src.is_some() as i32,
            has_bias: e.bias.is_some() as i32,
            has_z: e.z.is_some() as i32,
            _pad: 0,
        };
        let (mut s, mut b, mut z, mut d) = (
            e.src.map_or(0, |s| s.ptr),
            e.bias.map_or(0, |b| b.0),
            e.z.map_or(0, |z| z.0),
            e.dst,
        );
        let vec = 16 / self.width;
        let aligned = [s, z, d].iter().all(|&p| p % 16 == 0) && inner.is_multiple_of(vec);
        let (f, threads) = if contig && aligned {
            (self.finish_vec, n / vec)
        } else if contig {
            (self.finish_contig, n)
        } else {
            (self.finish, n)
        };
        let mut args = [
            arg(&mut s),
            arg(&mut b),
            arg(&mut z),
            arg(&mut d),
            arg(&mut p),
        ];
        // SAFETY: conv_finish*(src, bias, z, dst, ConvFinish) reads the source inside its
        // dims (crop offsets are bounds-checked), bias at `c * bias_stride` for c < dims[1],
        // z and dst at their strides inside `dims`; the vector kernel needs every pointer
        // 16-byte aligned and `inner` a multiple of its width, checked above.
        unsafe { base.rt.launch(f, threads as u64, &mut args) }
    }
}

/// The source of an epilogue: a contiguous tensor of `dims`, read at `index + off`.
#[derive(Clone, Copy)]
pub struct Src<'a> {
    pub ptr: CuPtr,
    pub dims: &'a [usize],
    pub off: &'a [i64],
}

/// What the epilogue computes: `dst = act(src + bias[c] + z)` over `dims`.
pub struct Epilogue<'a> {
    pub dims: &'a [usize],
    pub dst: CuPtr,
    pub dst_strides: &'a [usize],
    /// No source: zeros (a convolution over zero input channels).
    pub src: Option<Src<'a>>,
    /// Pointer and element stride.
    pub bias: Option<(CuPtr, usize)>,
    /// Pointer and element strides (the output's shape).
    pub z: Option<(CuPtr, &'a [usize])>,
    pub act: fused::Activation,
}

/// Whether `strides` are the packed row-major strides of `dims` (size-1 axes ignored).
pub fn is_packed(dims: &[usize], strides: &[usize]) -> bool {
    onnx_runtime_ep_api::is_contiguous(dims, strides)
}

// ---- window geometry (the CPU provider's rules) ----

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum AutoPad {
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// Window attributes as written on the node (the kernel may come from the weights).
#[derive(Clone, Debug)]
pub struct WindowAttrs {
    pub kernel: Option<Vec<usize>>,
    pub strides: Option<Vec<usize>>,
    pub dilations: Option<Vec<usize>>,
    pub pads: Option<Vec<usize>>,
    pub auto_pad: AutoPad,
}

/// The resolved geometry for one input.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub input: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pad_begin: Vec<usize>,
    pub pad_end: Vec<usize>,
    pub output: Vec<usize>,
}

/// A list attribute of non-negative ints.
pub fn usize_list(node: &Node, name: &str) -> EpResult<Option<Vec<usize>>> {
    match attr_ints(node, name)? {
        None => Ok(None),
        Some(v) => v
            .iter()
            .map(|&x| {
                usize::try_from(x).map_err(|_| {
                    EpError::invalid_attribute(node, name, format!("{x} must not be negative"))
                })
            })
            .collect::<EpResult<Vec<_>>>()
            .map(Some),
    }
}

impl WindowAttrs {
    pub fn parse(node: &Node) -> EpResult<Self> {
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

    /// Resolves the window over `input` spatial dims with `kernel` (from the weights).
    pub fn resolve(&self, base: &Base, input: &[usize], kernel: &[usize]) -> EpResult<Window> {
        let r = input.len();
        let check = |name: &str, v: &Option<Vec<usize>>, len: usize| -> EpResult<()> {
            match v {
                Some(v) if v.len() != len => Err(base.err(format!(
                    "{name} has {} values but the input has {r} spatial dims",
                    v.len()
                ))),
                _ => Ok(()),
            }
        };
        if kernel.len() != r {
            return Err(base.err(format!(
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
                        return Err(base.err(format!(
                            "padded input extent {span} on spatial axis {i} is smaller than \
                             the dilated kernel {ek}"
                        )));
                    }
                    output[i] = (span - ek) / s + 1;
                }
                AutoPad::Valid => {
                    if input[i] < ek {
                        return Err(base.err(format!(
                            "input extent {} on spatial axis {i} is smaller than the dilated \
                             kernel {ek}",
                            input[i]
                        )));
                    }
                    output[i] = (input[i] - ek) / s + 1;
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

/// Geometry of one forward convolution call (Conv, FusedConv, ConvInteger, QLinearConv).
#[derive(Clone, Debug, PartialEq)]
pub struct ConvGeom {
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub group: usize,
    pub win: Window,
}

impl ConvGeom {
    pub fn new(
        base: &Base,
        wa: &WindowAttrs,
        group: usize,
        x: &[usize],
        w: &[usize],
    ) -> EpResult<ConvGeom> {
        if x.len() < 3 || x.len() > 10 || w.len() != x.len() {
            return Err(base.err(format!(
                "X {x:?} and W {w:?} must have one rank between 3 and 10"
            )));
        }
        let (n, c, m) = (x[0], x[1], w[0]);
        if group == 0 || c % group != 0 || m % group != 0 || w[1] * group != c {
            return Err(base.err(format!(
                "X has {c} channels and W is {w:?}: with group={group} W's dim 1 must be \
                 C/group and M divisible by group"
            )));
        }
        let kernel = &w[2..];
        if let Some(k) = &wa.kernel {
            if k.as_slice() != kernel {
                return Err(base.err(format!(
                    "kernel_shape {k:?} does not match W's spatial dims {kernel:?}"
                )));
            }
        }
        let win = wa.resolve(base, &x[2..], kernel)?;
        Ok(ConvGeom {
            n,
            c,
            m,
            group,
            win,
        })
    }

    pub fn out_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.m];
        s.extend(&self.win.output);
        s
    }
}

/// The `group` attribute (default 1, at least 1).
pub fn parse_group(node: &Node) -> EpResult<usize> {
    let group = super::common::attr_int(node, "group")?.unwrap_or(1);
    if group < 1 {
        return Err(EpError::invalid_attribute(
            node,
            "group",
            format!("{group} must be >= 1"),
        ));
    }
    Ok(group as usize)
}

/// The refusal for more spatial axes than cuDNN convolves (the CPU provider runs those).
pub fn check_spatial(base: &Base, dtype: DataType, rank: usize) -> EpResult<()> {
    if rank > CONV_RANK {
        return Err(base.unsupported(
            dtype,
            format!(
                "the CUDA convolutions take 1 to 3 spatial axes; this input has {}",
                rank.saturating_sub(2)
            ),
        ));
    }
    Ok(())
}

/// A device scratch buffer owned by a kernel's plan: allocated on first eager use, kept (a
/// captured graph may hold its address) and given back when the plan is dropped.
pub struct Scratch {
    slot: std::sync::Mutex<Option<(CuPtr, usize)>>,
}

impl Scratch {
    pub fn new() -> Self {
        Scratch {
            slot: std::sync::Mutex::new(None),
        }
    }

    /// At least `bytes` bytes; allocates only outside capture.
    pub fn get(&self, base: &Base, bytes: usize, what: &str) -> EpResult<CuPtr> {
        let mut slot = self.slot.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((p, size)) = *slot {
            if size >= bytes {
                return Ok(p);
            }
        }
        if base.rt.is_capturing() {
            return Err(EpError::Capture {
                node: base.node.clone(),
                message: format!(
                    "{} needs a {what} buffer that is allocated on the first eager run of this \
                     signature; run it once eagerly before capturing",
                    base.op
                ),
            });
        }
        let (p, size) = base.rt.allocate(bytes.max(1), 256)?;
        if let Some((old, _)) = slot.replace((p, size)) {
            base.rt.free(old)?;
        }
        Ok(p)
    }

    pub fn release(&self, base: &Base) {
        if let Some((p, _)) = self.slot.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = base.rt.free(p);
        }
    }
}
