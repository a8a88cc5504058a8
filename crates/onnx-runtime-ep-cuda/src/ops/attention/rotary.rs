//! Rotary position embeddings: ONNX RotaryEmbedding (23) and com.microsoft RotaryEmbedding.
//!
//! ONNX: X [B, H, S, D] or [B, S, H*D] (num_heads), cos / sin caches [B, S, rot/2] without
//! position_ids or [max_pos, rot/2] with position_ids [B, S]; partial rotation through
//! rotary_embedding_dim; interleaved pairs. com.microsoft: X [B, S, H*D] or [B, H, S, D],
//! position_ids [B, S] or a single offset, caches [max_pos, rot/2]. One kernel launch; every
//! position is range-checked on the device (a bad one reports an index error naming the node).
//! float, double, float16, bfloat16 (half types compute in float).

use super::rotary_module;
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

/// Mirrors `RotaryParams` in rotary.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct RotaryParams {
    pub(super) x: CuPtr,
    pub(super) y: CuPtr,
    pub(super) cos: CuPtr,
    pub(super) sin: CuPtr,
    pub(super) pos: CuPtr,
    pub(super) xb: i64,
    pub(super) xs: i64,
    pub(super) xh: i64,
    pub(super) xd: i64,
    pub(super) yb: i64,
    pub(super) ys: i64,
    pub(super) yh: i64,
    pub(super) yd: i64,
    pub(super) cb: i64,
    pub(super) cs: i64,
    pub(super) cp: i64,
    pub(super) cc: i64,
    pub(super) nb: i64,
    pub(super) ns: i64,
    pub(super) np: i64,
    pub(super) nc: i64,
    pub(super) pb: i64,
    pub(super) ps: i64,
    pub(super) n: i64,
    pub(super) err: CuPtr,
    pub(super) b: i32,
    pub(super) s: i32,
    pub(super) h: i32,
    pub(super) d: i32,
    pub(super) rot: i32,
    pub(super) interleaved: i32,
    pub(super) pos_mode: i32,
    pub(super) rows: i32,
    pub(super) pos_code: i32,
    pub(super) id: i32,
    pub(super) seqlens: CuPtr,
    pub(super) seqlens_code: i32,
    pub(super) first_prompt: i32,
}

/// Mirrors `CacheView` in rotary.cu: a (batch, head, seq, feature) view; null: absent.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct CacheView {
    pub(super) ptr: CuPtr,
    pub(super) strides: [i64; 4],
}

/// Mirrors `GqaPrepParams` in rotary.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct GqaPrepParams {
    pub(super) rot: RotaryParams,
    pub(super) past_k: CacheView,
    pub(super) past_v: CacheView,
    pub(super) cur_k: CacheView,
    pub(super) cur_v: CacheView,
    pub(super) out_k: CuPtr,
    pub(super) out_v: CuPtr,
    pub(super) out: [i64; 4],
    pub(super) npres: i64,
    pub(super) kv_heads: i32,
    pub(super) pbuf: i32,
    pub(super) tp: i32,
    pub(super) width: i32,
    pub(super) rotate_k: i32,
    /// The present caches are the past buffers (same memory and strides): only the new rows
    /// are written (`npres` counts b * kv_heads * s * width elements then).
    pub(super) in_place: i32,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Flavor {
    Onnx,
    Microsoft,
}

struct RotaryKernel {
    base: Base,
    flavor: Flavor,
    fns: HashMap<DataType, Function>,
    num_heads: usize,
    rot_dim: usize,
    interleaved: bool,
}

/// A cache viewed as [rows, half]: (rows, row stride, column stride), when its leading axes
/// merge into one uniform stride.
pub(super) fn rows_view(shape: &[usize], strides: &[usize]) -> Option<(usize, i64, i64)> {
    let r = shape.len();
    if r == 0 {
        return None;
    }
    let col = if shape[r - 1] == 1 {
        0
    } else {
        strides[r - 1] as i64
    };
    let rows: usize = shape[..r - 1].iter().product();
    // The innermost leading axis of size > 1 sets the row stride; the others must nest.
    let mut stride: Option<i64> = None;
    let mut span = 1usize;
    for k in (0..r - 1).rev() {
        if shape[k] == 1 {
            continue;
        }
        match stride {
            None => {
                stride = Some(strides[k] as i64);
                span = shape[k];
            }
            Some(s) => {
                if strides[k] as i64 != s * span as i64 {
                    return None;
                }
                span *= shape[k];
            }
        }
    }
    Some((rows, stride.unwrap_or(0), col))
}

/// The (b, s, h, d) element strides of a 4-D [B, H, S, D] or 3-D [B, S, H*D] tensor.
fn bshd(shape: &[usize], strides: &[usize], d: usize) -> [i64; 4] {
    let st = istrides(strides);
    if shape.len() == 4 {
        [st[0], st[2], st[1], st[3]]
    } else {
        [st[0], st[1], d as i64 * st[2], st[2]]
    }
}

/// The shapes and strides of one call.
struct Plan {
    dtype: DataType,
    b: usize,
    s: usize,
    h: usize,
    d: usize,
    rot: usize,
    cos_rows: (usize, i64, i64),
    sin_rows: (usize, i64, i64),
    /// 0: per (b, s) rows, 1: ids [b, s], 2: one offset.
    pos_mode: i32,
    pos_strides: (i64, i64),
}

impl RotaryKernel {
    /// Input positions of (cos, sin, position_ids).
    fn positions(&self) -> (usize, usize, usize) {
        match self.flavor {
            Flavor::Onnx => (1, 2, 3),
            Flavor::Microsoft => (2, 3, 1),
        }
    }

    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<Plan> {
        let base = &self.base;
        let (ci, si, pi) = self.positions();
        let x = base.req(inputs, 0)?;
        let cos = base.req(inputs, ci)?;
        let sin = base.req(inputs, si)?;
        let pos = base.input(inputs, pi);
        let dtype = x.dtype;
        if !self.fns.contains_key(&dtype) {
            return Err(base.unsupported(
                dtype,
                "the CUDA RotaryEmbedding takes float, double, float16 and bfloat16",
            ));
        }
        base.same_dtype(dtype, cos.dtype, "cos_cache")?;
        base.same_dtype(dtype, sin.dtype, "sin_cache")?;
        let shape = x.shape;
        let half_cache = cos.shape.last().copied().unwrap_or(0);
        let (b, s, h, d) = match shape.len() {
            4 => (shape[0], shape[2], shape[1], shape[3]),
            3 => {
                let d = match self.flavor {
                    Flavor::Onnx => {
                        if self.num_heads == 0 {
                            return Err(base.err("a 3-D input needs the num_heads attribute"));
                        }
                        if shape[2] % self.num_heads != 0 {
                            return Err(base.err(format!(
                                "hidden size {} must divide by num_heads {}",
                                shape[2], self.num_heads
                            )));
                        }
                        shape[2] / self.num_heads
                    }
                    Flavor::Microsoft => {
                        let d = shape[2]
                            .checked_div(self.num_heads)
                            .unwrap_or(2 * half_cache);
                        if d == 0 || shape[2] % d != 0 {
                            return Err(base.err(format!(
                                "hidden size {} must divide into heads of {d}",
                                shape[2]
                            )));
                        }
                        d
                    }
                };
                (shape[0], shape[1], shape[2] / d, d)
            }
            _ => return Err(base.err(format!("input {shape:?} must be 3-D or 4-D"))),
        };
        let (rot, half) = match self.flavor {
            Flavor::Onnx => {
                let rot = if self.rot_dim == 0 { d } else { self.rot_dim };
                if rot > d || rot % 2 != 0 {
                    return Err(base.err(format!(
                        "rotary_embedding_dim {rot} must be even and at most head_size {d}"
                    )));
                }
                if half_cache != rot / 2 || sin.shape != cos.shape {
                    return Err(base.err(format!(
                        "cos/sin caches {:?} / {:?} must end in rotary_dim/2 = {}",
                        cos.shape,
                        sin.shape,
                        rot / 2
                    )));
                }
                (rot, rot / 2)
            }
            Flavor::Microsoft => {
                if cos.rank() != 2 || sin.shape != cos.shape {
                    return Err(
                        base.err("cos_cache and sin_cache must be 2-D [max_seq, rotary_dim/2]")
                    );
                }
                let rot = if self.rot_dim > 0 {
                    self.rot_dim
                } else {
                    2 * half_cache
                };
                if rot != 2 * half_cache || rot > d {
                    return Err(base.err(format!(
                        "rotary dim {rot} must be 2 x cache width {half_cache} and at most \
                         head size {d}"
                    )));
                }
                (rot, half_cache)
            }
        };
        let uniform = |t: &TensorView<'_>, what: &str| {
            rows_view(t.shape, t.strides).ok_or_else(|| {
                base.unsupported(
                    dtype,
                    format!("the CUDA RotaryEmbedding needs {what} rows of one stride"),
                )
            })
        };
        let cos_rows = uniform(cos, "cos_cache")?;
        let sin_rows = uniform(sin, "sin_cache")?;
        let rows = cos_rows.0;
        let (pos_mode, pos_strides) = match pos {
            Some(p) => {
                if !p.dtype.is_integer() {
                    return Err(base.err(format!(
                        "position_ids must be an integer tensor, got {}",
                        p.dtype
                    )));
                }
                let n = p.numel();
                if self.flavor == Flavor::Microsoft && n == 1 {
                    (2, (0, 0))
                } else if n == b * s {
                    let st = match p.shape {
                        [pb, ps] if *pb == b && *ps == s => {
                            (p.strides[0] as i64, p.strides[1] as i64)
                        }
                        _ if onnx_runtime_ep_api::is_contiguous(p.shape, p.strides) => {
                            (s as i64, 1)
                        }
                        _ => {
                            return Err(base.unsupported(
                                dtype,
                                "position_ids of this layout runs on the CPU provider",
                            ))
                        }
                    };
                    (1, st)
                } else {
                    let want = if self.flavor == Flavor::Microsoft {
                        "one offset or [batch, seq]"
                    } else {
                        "[batch, seq]"
                    };
                    return Err(base.err(format!(
                        "position_ids {:?} must be {want} = [{b}, {s}] indices below {rows}",
                        p.shape
                    )));
                }
            }
            None if self.flavor == Flavor::Microsoft => {
                return Err(base.err("required input 1 (position_ids) is missing"))
            }
            None => {
                if rows != b * s {
                    return Err(base.err(format!(
                        "without position_ids the caches must be [{b}, {s}, {half}], got {:?}",
                        cos.shape
                    )));
                }
                (0, (0, 0))
            }
        };
        Ok(Plan {
            dtype,
            b,
            s,
            h,
            d,
            rot,
            cos_rows,
            sin_rows,
            pos_mode,
            pos_strides,
        })
    }
}

impl Kernel for RotaryKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let plan = self.plan(inputs)?;
        let x = self.base.req(inputs, 0)?;
        Ok(vec![(plan.dtype, x.shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let plan = self.plan(inputs)?;
        let x = base.req(inputs, 0)?;
        base.expect_outputs(outputs, &[(plan.dtype, x.shape.to_vec())])?;
        let (ci, si, pi) = self.positions();
        let cos = base.req(inputs, ci)?;
        let sin = base.req(inputs, si)?;
        let y = &outputs[0];
        let n = plan.b * plan.s * plan.h * plan.d;
        if n == 0 {
            return Ok(());
        }
        let xs = bshd(x.shape, x.strides, plan.d);
        let ys = bshd(y.shape, y.strides, plan.d);
        let (_, crow, ccol) = plan.cos_rows;
        let (_, srow, scol) = plan.sin_rows;
        let per_row = plan.pos_mode == 0;
        let pos = base.input(inputs, pi);
        let mut p = RotaryParams {
            x: ptr_of(x),
            y: mut_ptr_of(y),
            cos: ptr_of(cos),
            sin: ptr_of(sin),
            pos: pos.map_or(0, ptr_of),
            xb: xs[0],
            xs: xs[1],
            xh: xs[2],
            xd: xs[3],
            yb: ys[0],
            ys: ys[1],
            yh: ys[2],
            yd: ys[3],
            cb: if per_row { plan.s as i64 * crow } else { 0 },
            cs: if per_row { crow } else { 0 },
            cp: crow,
            cc: ccol,
            nb: if per_row { plan.s as i64 * srow } else { 0 },
            ns: if per_row { srow } else { 0 },
            np: srow,
            nc: scol,
            pb: plan.pos_strides.0,
            ps: plan.pos_strides.1,
            n: n as i64,
            err: base.rt.err_ptr(),
            b: plan.b as i32,
            s: plan.s as i32,
            h: plan.h as i32,
            d: plan.d as i32,
            rot: plan.rot as i32,
            interleaved: self.interleaved as i32,
            pos_mode: plan.pos_mode,
            rows: plan.cos_rows.0.min(i32::MAX as usize) as i32,
            pos_code: pos.map_or(7, |p| p.dtype.onnx_code()),
            id: base.id as i32,
            ..Default::default()
        };
        let f = self.fns[&plan.dtype];
        let mut args = [arg(&mut p)];
        // SAFETY: rotary_T(RotaryParams) reads x, the caches and the positions inside their
        // views (positions are range-checked on the device) and writes y.
        unsafe { base.rt.launch(f, n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    flavor: Flavor,
) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    if flavor == Flavor::Microsoft && attr_int(node, "is_packed_batching")?.unwrap_or(0) != 0 {
        return Err(EpError::invalid_attribute(
            node,
            "is_packed_batching",
            "packed (ragged) batching is not supported (as on the CPU provider)",
        ));
    }
    let base = Base::new(rt, node);
    let fns = rotary_functions(&base)?;
    let num_heads = attr_int(node, "num_heads")?.unwrap_or(0).max(0) as usize;
    Ok(Box::new(RotaryKernel {
        base,
        flavor,
        fns,
        num_heads,
        rot_dim: attr_int(node, "rotary_embedding_dim")?.unwrap_or(0).max(0) as usize,
        interleaved: attr_int(node, "interleaved")?.unwrap_or(0) != 0,
    }))
}

/// The rotary kernel of every float dtype.
pub(super) fn rotary_functions(base: &Base) -> EpResult<HashMap<DataType, Function>> {
    let module = base.module(&rotary_module())?;
    let mut fns = HashMap::new();
    for (dtype, tag, _, _) in super::FLOATS {
        fns.insert(dtype, module.function(&format!("rotary_{tag}"))?);
    }
    Ok(fns)
}

/// GroupQueryAttention's fused preparation kernel (rotated queries and both present caches)
/// of every float dtype.
pub(super) fn gqa_prep_functions(base: &Base) -> EpResult<HashMap<DataType, Function>> {
    let module = base.module(&rotary_module())?;
    let mut fns = HashMap::new();
    for (dtype, tag, _, _) in super::FLOATS {
        // SAFETY: gqa_prep_* start with pdl_begin (rotary.cu).
        let f = module.function(&format!("gqa_prep_{tag}"))?;
        fns.insert(dtype, unsafe { f.overlapped() });
    }
    Ok(fns)
}

fn onnx_rotary(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Flavor::Onnx)
}

fn ms_rotary(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Flavor::Microsoft)
}

pub fn register(r: &mut Registry) {
    r.register("", "RotaryEmbedding", 23, onnx_rotary);
    r.register("com.microsoft", "RotaryEmbedding", 1, ms_rotary);
}
