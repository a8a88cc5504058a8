//! The scaled-dot-product core every attention op runs on.
//!
//! A [`Problem`] describes one attention call in BNSH terms: Q [b, hq, sq, d], K [b, hkv, t, d]
//! and V [b, hkv, t, dv] as element-strided views (the first `past` keys read from the past
//! caches, the rest from the new keys, so no concatenated copy is needed), an optional additive
//! or boolean mask over [b, hq, sq, t], an optional com.microsoft key padding mask, per-batch
//! valid key counts, causal / window ranges and the output view. [`Sdpa::run`] picks the
//! kernel (tensor cores for half types on sm_80+, else CUDA cores), the padded head size and
//! the number of key splits, and launches one fused kernel (plus the split combine).
//!
//! The split count: when the (query tile, batch, kv head) blocks alone would not fill the
//! device twice over (decode, short prompts), the keys are split into chunks of whole tiles so
//! that about two blocks per multiprocessor run; each split writes unnormalized partials
//! (O, row max, row sum) to a workspace the kernel keeps, and `attn_combine` merges them.

use super::{fwd_module, mma_module, needs_simt, simt_variants, FLOATS, MAX_HEAD, MMA_VARIANTS};
use crate::ops::common::{arg, Base};
use crate::runtime::{CuPtr, Function};
use onnx_runtime_ep_api::EpResult;
use onnx_runtime_ir::DataType;
use std::collections::HashMap;

mod decode;
pub use crate::ops::scratch::Scratch;
use decode::{DEC1_HEADS, DEC_HEADS, DEC_ROWS};

/// Mirrors `AttnSrc` in attention_common.cuh.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AttnSrc {
    pub ptr: CuPtr,
    pub bias: CuPtr,
    pub sb: i64,
    pub sh: i64,
    pub ss: i64,
    pub sc: i64,
    pub bias_h: i64,
    pub vec: i32,
    pub _pad: i32,
}

/// Mirrors `AttnParams` in attention_common.cuh.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct AttnParams {
    pub q: AttnSrc,
    pub k: AttnSrc,
    pub v: AttnSrc,
    pub pk: AttnSrc,
    pub pv: AttnSrc,
    pub out: CuPtr,
    pub ob: i64,
    pub oh: i64,
    pub os: i64,
    pub oc: i64,
    pub mask: CuPtr,
    pub mb: i64,
    pub mh: i64,
    pub ms: i64,
    pub mt: i64,
    pub kpm: CuPtr,
    pub kb: i64,
    pub ks: i64,
    pub kt: i64,
    pub nonpad: CuPtr,
    pub seqlens: CuPtr,
    pub sink: CuPtr,
    pub part: CuPtr,
    pub count: CuPtr,
    pub err: CuPtr,
    pub scale: f64,
    pub softcap: f64,
    pub filter: f64,
    pub b: i32,
    pub hq: i32,
    pub hkv: i32,
    pub group: i32,
    pub sq: i32,
    pub skv: i32,
    pub past: i32,
    pub t: i32,
    pub d: i32,
    pub dv: i32,
    pub mask_len: i32,
    pub mask_kind: i32,
    pub mask_code: i32,
    pub kpm_kind: i32,
    pub kpm_code: i32,
    pub causal: i32,
    pub left: i32,
    pub right: i32,
    pub contrib_causal: i32,
    pub splits: i32,
    pub chunk: i32,
    pub vec_out: i32,
    pub id: i32,
    pub skip_filter: i32,
    pub plain: i32,
    pub seqlens_code: i32,
    pub first_prompt: i32,
    pub has_sink: i32,
    pub sink_code: i32,
    pub _pad: i32,
}

/// Mirrors `ScoresOut` in attention_fwd.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ScoresOut {
    out: CuPtr,
    sb: i64,
    sh: i64,
    ss: i64,
    st: i64,
    mode: i32,
    _pad: i32,
}

/// Mirrors `ConcatParams` in attention_fwd.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ConcatParams {
    past: AttnSrc,
    cur: AttnSrc,
    out: CuPtr,
    ob: i64,
    oh: i64,
    os: i64,
    oc: i64,
    n: i64,
    heads: i32,
    npast: i32,
    t: i32,
    width: i32,
    vec: i32,
    _pad: i32,
}

/// Mirrors `ProjParams` in attention_fwd.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct ProjParams {
    x: CuPtr,
    w: CuPtr,
    bias: CuPtr,
    y: CuPtr,
    xb: i64,
    xs: i64,
    xk: i64,
    wk: i64,
    wn: i64,
    bn: i64,
    m: i32,
    n: i32,
    k: i32,
    seq: i32,
}

/// A (batch, head, seq, feature) view: device address, element strides, and an optional
/// per-feature bias (address of head 0's bias, elements between heads) added on read.
#[derive(Clone, Copy, Debug)]
pub struct View4 {
    pub ptr: CuPtr,
    pub strides: [i64; 4],
    pub bias: Option<(CuPtr, i64)>,
}

impl View4 {
    pub fn new(ptr: CuPtr, strides: [i64; 4]) -> Self {
        View4 {
            ptr,
            strides,
            bias: None,
        }
    }

    /// A 4-D (B, H, S, D) view.
    pub fn bhsd(ptr: CuPtr, strides: &[usize]) -> Self {
        View4::new(
            ptr,
            [
                strides[0] as i64,
                strides[1] as i64,
                strides[2] as i64,
                strides[3] as i64,
            ],
        )
    }

    /// A 3-D (B, S, H * D) view with heads of `head` features.
    pub fn bsh(ptr: CuPtr, strides: &[usize], head: usize) -> Self {
        View4::new(
            ptr,
            [
                strides[0] as i64,
                (head * strides[2]) as i64,
                strides[1] as i64,
                strides[2] as i64,
            ],
        )
    }

    /// The view `elems` elements of `width` bytes further on.
    pub fn offset(mut self, elems: i64, width: usize) -> Self {
        self.ptr = (self.ptr as i64 + elems * width as i64) as CuPtr;
        self
    }

    fn src(&self, width: usize) -> AttnSrc {
        let [sb, sh, ss, sc] = self.strides;
        let v = (16 / width.max(1)) as i64;
        let vec = sc == 1
            && self.ptr.is_multiple_of(16)
            && sb % v == 0
            && sh % v == 0
            && ss % v == 0
            && self.bias.is_none_or(|(p, h)| p % 16 == 0 && h % v == 0);
        AttnSrc {
            ptr: self.ptr,
            bias: self.bias.map_or(0, |b| b.0),
            sb,
            sh,
            ss,
            sc,
            bias_h: self.bias.map_or(0, |b| b.1),
            vec: vec as i32,
            _pad: 0,
        }
    }

    /// Whether 16-byte stores along the feature axis are safe.
    fn vec_out(&self, width: usize) -> bool {
        let v = (16 / width.max(1)) as i64;
        let [sb, sh, ss, sc] = self.strides;
        sc == 1 && self.ptr.is_multiple_of(16) && sb % v == 0 && sh % v == 0 && ss % v == 0
    }
}

/// The mask over the scores [b, hq, sq, t] (strides per axis; keys at or beyond `len` are
/// hidden).
#[derive(Clone, Copy, Debug)]
pub enum Mask {
    /// Values of ONNX dtype `code` added to the scores.
    Additive {
        ptr: CuPtr,
        code: i32,
        strides: [i64; 4],
        len: usize,
    },
    /// True keeps a key, false hides it (-inf).
    Bool {
        ptr: CuPtr,
        strides: [i64; 4],
        len: usize,
    },
}

/// The com.microsoft key padding mask (`mask_filter_value` added where it masks).
#[derive(Clone, Copy, Debug)]
pub enum KeyPadding {
    /// [b]: keys at or beyond the batch's length are masked.
    Lengths { ptr: CuPtr, code: i32, sb: i64 },
    /// [b, t]: zero masks.
    PerBatch {
        ptr: CuPtr,
        code: i32,
        sb: i64,
        st: i64,
    },
    /// [b, sq, t]: zero masks.
    PerQuery {
        ptr: CuPtr,
        code: i32,
        sb: i64,
        ss: i64,
        st: i64,
    },
}

/// GroupQueryAttention's per-batch key counts: seqlens_k (address, ONNX dtype code) and
/// whether this is the first prompt (queries start at key 0).
#[derive(Clone, Copy, Debug)]
pub struct SeqLens {
    pub ptr: CuPtr,
    pub code: i32,
    pub first_prompt: bool,
}

/// An extra softmax logit per query head (attention sinks / smooth softmax).
#[derive(Clone, Copy, Debug)]
pub enum Sink {
    None,
    /// Smooth softmax: logit 0 for every head.
    Zero,
    /// One logit per head (address, ONNX dtype code).
    Values(CuPtr, i32),
}

/// One attention call.
#[derive(Clone, Debug)]
pub struct Problem {
    pub dtype: DataType,
    pub b: usize,
    pub hq: usize,
    pub hkv: usize,
    pub sq: usize,
    /// New keys (after the past ones).
    pub skv: usize,
    pub past: usize,
    pub d: usize,
    pub dv: usize,
    pub q: View4,
    pub k: View4,
    pub v: View4,
    /// The past caches [b, hkv, past, d|dv].
    pub past_kv: Option<(View4, View4)>,
    pub out: View4,
    pub mask: Option<Mask>,
    pub kpm: Option<KeyPadding>,
    /// int64 [b] valid key counts (ONNX nonpad_kv_seqlen).
    pub nonpad: Option<CuPtr>,
    pub scale: f64,
    pub softcap: f64,
    pub filter: f64,
    pub causal: bool,
    /// Sliding window (-1 unbounded).
    pub left: i64,
    pub right: i64,
    /// com.microsoft causal: keys after past + i get `filter` (not -inf).
    pub contrib_causal: bool,
    pub seqlens: Option<SeqLens>,
    pub sink: Sink,
}

impl Problem {
    pub fn t(&self) -> usize {
        self.past + self.skv
    }
}

/// The kernels of one dtype.
struct Fns {
    width: usize,
    acc_width: usize,
    /// (padded head size, function) of the CUDA-core kernel, ascending.
    simt: Vec<(usize, Function)>,
    simt_bm: usize,
    simt_bn: usize,
    /// (padded head size, key tile, function) of the tensor-core kernel, ascending.
    mma: Vec<(usize, usize, Function)>,
    /// (padded head size, function) of the decode kernel (`attn_dec_<dp>`), ascending.
    dec: Vec<(usize, Function)>,
    /// (padded head size, function) of the one-pass decode kernel (`attn_dec1_<dp>`),
    /// ascending; empty below sm_80 and for float64.
    dec1: Vec<(usize, Function)>,
    combine: Function,
    scores: Function,
    concat: Function,
    proj: Function,
}

/// The attention kernels of every float dtype, loaded when a node's kernel is built, with the
/// split workspace.
pub struct Sdpa {
    fns: HashMap<DataType, Fns>,
    split: Scratch,
    /// The decode kernel's per (batch x kv head) split counters (it merges its own splits).
    counters: Scratch,
}

/// Converts a size to the kernels' 32-bit ints.
pub(super) fn i32_of(base: &Base, v: usize, what: &str) -> EpResult<i32> {
    i32::try_from(v)
        .ok()
        .filter(|&x| x <= i32::MAX / 2)
        .ok_or_else(|| {
            base.err(format!(
                "{what} = {v} exceeds the CUDA attention kernels' limit of {}",
                i32::MAX / 2
            ))
        })
}

/// Query rows x keys x head size up to which half types run on the SIMT kernels.
const SMALL_WORK: u64 = 1 << 20;

impl Sdpa {
    pub fn load(base: &Base) -> EpResult<Self> {
        let mut fns = HashMap::new();
        let arch = base.rt.arch();
        let tensor_cores = arch >= 80;
        for (dtype, _, _, _) in FLOATS {
            // Half types take the float32 SIMT kernels too, for problems too small for the
            // tensor cores to pay (see `SMALL_WORK`).
            let with_simt = needs_simt(dtype, arch) || mma_module(dtype).is_some();
            let spec = fwd_module(dtype, with_simt).expect("a float dtype");
            let m = base.module(&spec)?;
            let (dps, bm, bn) = simt_variants(dtype);
            let simt = if with_simt {
                dps.iter()
                    .map(|&dp| Ok((dp, m.function(&format!("attn_simt_{dp}"))?)))
                    .collect::<EpResult<Vec<_>>>()?
            } else {
                Vec::new()
            };
            let mma = match mma_module(dtype) {
                Some(spec) if tensor_cores => {
                    let mm = base.module(&spec)?;
                    MMA_VARIANTS
                        .iter()
                        .map(|&(dp, bn)| Ok((dp, bn, mm.function(&format!("attn_mma_{dp}"))?)))
                        .collect::<EpResult<Vec<_>>>()?
                }
                _ => Vec::new(),
            };
            let width = dtype.element_size().expect("fixed width");
            let dec = DEC_HEADS
                .iter()
                .filter(|&&dp| dp / (16 / width) <= 32)
                // SAFETY: attn_dec_* start with pdl_begin (attention_fwd.cu).
                .map(|&dp| {
                    Ok((dp, unsafe {
                        m.function(&format!("attn_dec_{dp}"))?.overlapped()
                    }))
                })
                .collect::<EpResult<Vec<_>>>()?;
            let dec1 = if tensor_cores && dtype != DataType::Float64 {
                DEC1_HEADS
                    .iter()
                    .filter(|&&dp| dp * width <= 256)
                    // SAFETY: attn_dec1_* start with pdl_begin (attention_dec.cu).
                    .map(|&dp| {
                        Ok((dp, unsafe {
                            m.function(&format!("attn_dec1_{dp}"))?.overlapped()
                        }))
                    })
                    .collect::<EpResult<Vec<_>>>()?
            } else {
                Vec::new()
            };
            fns.insert(
                dtype,
                Fns {
                    width,
                    acc_width: if dtype == DataType::Float64 { 8 } else { 4 },
                    simt,
                    simt_bm: bm,
                    simt_bn: bn,
                    mma,
                    dec,
                    dec1,
                    combine: m.function("attn_combine")?,
                    scores: m.function("attn_scores")?,
                    concat: m.function("attn_concat")?,
                    proj: m.function("attn_proj")?,
                },
            );
        }
        Ok(Sdpa {
            fns,
            split: Scratch::new(&base.rt),
            counters: Scratch::new(&base.rt),
        })
    }

    fn fns(&self, base: &Base, dtype: DataType) -> EpResult<&Fns> {
        self.fns.get(&dtype).ok_or_else(|| {
            base.unsupported(
                dtype,
                "the CUDA attention kernels take float, double, float16 and bfloat16",
            )
        })
    }

    /// Refuses (a planned CPU fallback) what the kernels do not take: other dtypes and head
    /// sizes above 256.
    pub fn check(&self, base: &Base, dtype: DataType, d: usize, dv: usize) -> EpResult<()> {
        self.fns(base, dtype)?;
        if matches!(dtype, DataType::Float16 | DataType::BFloat16) && !half_path_enabled() {
            return Err(base.unsupported(
                dtype,
                "ONNX_RUNTIME_CUDA_HALF_ATTENTION=0 keeps float16/bfloat16 attention on the CPU",
            ));
        }
        if d.max(dv) > MAX_HEAD {
            return Err(base.unsupported(
                dtype,
                format!(
                    "head size {} exceeds the CUDA attention kernels' limit of {MAX_HEAD}",
                    d.max(dv)
                ),
            ));
        }
        Ok(())
    }

    /// The launch parameters of `p` (no split).
    fn params(&self, base: &Base, f: &Fns, p: &Problem) -> EpResult<AttnParams> {
        let w = f.width;
        let t = p.t();
        let zero = View4::new(0, [0; 4]);
        let (pk, pv) = p.past_kv.unwrap_or((zero, zero));
        let mut a = AttnParams {
            q: p.q.src(w),
            k: p.k.src(w),
            v: p.v.src(w),
            pk: pk.src(w),
            pv: pv.src(w),
            out: p.out.ptr,
            ob: p.out.strides[0],
            oh: p.out.strides[1],
            os: p.out.strides[2],
            oc: p.out.strides[3],
            nonpad: p.nonpad.unwrap_or(0),
            err: base.rt.err_ptr(),
            scale: p.scale,
            softcap: p.softcap,
            filter: p.filter,
            b: i32_of(base, p.b, "batch")?,
            hq: i32_of(base, p.hq, "query heads")?,
            hkv: i32_of(base, p.hkv, "kv heads")?,
            group: i32_of(base, p.hq / p.hkv.max(1), "head group")?,
            sq: i32_of(base, p.sq, "query length")?,
            skv: i32_of(base, p.skv, "key length")?,
            past: i32_of(base, p.past, "past length")?,
            t: i32_of(base, t, "total key length")?,
            d: i32_of(base, p.d, "head size")?,
            dv: i32_of(base, p.dv, "value head size")?,
            causal: p.causal as i32,
            left: p.left.clamp(-1, i32::MAX as i64 / 2) as i32,
            right: p.right.clamp(-1, i32::MAX as i64 / 2) as i32,
            contrib_causal: p.contrib_causal as i32,
            splits: 1,
            chunk: 0,
            vec_out: p.out.vec_out(w) as i32,
            id: base.id as i32,
            skip_filter: (p.contrib_causal && p.filter <= -5000.0) as i32,
            ..Default::default()
        };
        match p.mask {
            Some(Mask::Additive {
                ptr,
                code,
                strides,
                len,
            }) => {
                a.mask = ptr;
                a.mask_kind = 1;
                a.mask_code = code;
                [a.mb, a.mh, a.ms, a.mt] = strides;
                a.mask_len = i32_of(base, len, "mask length")?;
            }
            Some(Mask::Bool { ptr, strides, len }) => {
                a.mask = ptr;
                a.mask_kind = 2;
                [a.mb, a.mh, a.ms, a.mt] = strides;
                a.mask_len = i32_of(base, len, "mask length")?;
            }
            None => {}
        }
        match p.kpm {
            Some(KeyPadding::Lengths { ptr, code, sb }) => {
                (a.kpm, a.kpm_kind, a.kpm_code, a.kb) = (ptr, 1, code, sb);
            }
            Some(KeyPadding::PerBatch { ptr, code, sb, st }) => {
                (a.kpm, a.kpm_kind, a.kpm_code, a.kb, a.kt) = (ptr, 2, code, sb, st);
            }
            Some(KeyPadding::PerQuery {
                ptr,
                code,
                sb,
                ss,
                st,
            }) => {
                (a.kpm, a.kpm_kind, a.kpm_code, a.kb, a.ks, a.kt) = (ptr, 3, code, sb, ss, st);
            }
            None => {}
        }
        if let Some(sl) = p.seqlens {
            a.seqlens = sl.ptr;
            a.seqlens_code = sl.code;
            a.first_prompt = sl.first_prompt as i32;
        }
        match p.sink {
            Sink::None => {}
            Sink::Zero => a.has_sink = 1,
            Sink::Values(ptr, code) => {
                (a.has_sink, a.sink, a.sink_code) = (1, ptr, code);
            }
        }
        a.plain =
            (p.softcap <= 0.0 && a.mask_kind == 0 && a.kpm_kind == 0 && !p.contrib_causal) as i32;
        Ok(a)
    }

    /// Runs the attention of `p`, writing `p.out`.
    pub fn run(&self, base: &Base, p: &Problem) -> EpResult<()> {
        let f = self.fns(base, p.dtype)?;
        self.check(base, p.dtype, p.d, p.dv)?;
        if p.hkv == 0 || !p.hq.is_multiple_of(p.hkv) {
            return Err(base.err(format!(
                "{} query heads do not divide into {} kv heads",
                p.hq, p.hkv
            )));
        }
        let rows = p.b * p.hq * p.sq;
        if rows == 0 || p.dv == 0 {
            return Ok(());
        }
        let mut a = self.params(base, f, p)?;
        let need = p.d.max(p.dv).max(1);
        let group = p.hq / p.hkv;
        if group * p.sq <= DEC_ROWS {
            if let Some(func) = decode::one_pass(f, p, &a, need) {
                return self.run_decode1(base, f, p, &mut a, func);
            }
            if let Some(&(_, func)) = f.dec.iter().find(|(dp, _)| *dp >= need) {
                return self.run_decode(base, f, p, &mut a, func);
            }
        }
        // (function, rows per block, keys per tile, shared bytes)
        // A small problem runs on the SIMT kernels, which keep the probabilities in float32
        // (the tensor-core kernels round them to the half type before P V): as fast there, and
        // within half an ulp of a float32 reference where the tensor cores can be one ulp off.
        let work = (rows as u64)
            .saturating_mul(p.t() as u64)
            .saturating_mul(need as u64);
        let tensor = work > SMALL_WORK || f.simt.is_empty();
        let mma = if tensor {
            f.mma.iter().find(|(dp, _, _)| *dp >= need)
        } else {
            None
        };
        let (func, bm, bn, smem) = match mma {
            Some(&(dp, bn, func)) => (func, 64usize, bn, (64 + 4 * bn) * (dp + 8) * f.width),
            None => {
                let &(dp, func) = f.simt.iter().find(|(dp, _)| *dp >= need).ok_or_else(|| {
                    base.unsupported(
                        p.dtype,
                        format!("no CUDA attention kernel for head size {need}"),
                    )
                })?;
                let (bm, bn) = (f.simt_bm, f.simt_bn);
                let elems = bm * (dp + 1) + bn * (dp + 1) + bn * dp + bm * (bn + 1);
                (func, bm, bn, elems * f.acc_width)
            }
        };
        let tiles = (group * p.sq).div_ceil(bm);
        let bh = p.b * p.hkv;
        if bh > 65535 || tiles > i32::MAX as usize {
            return Err(base.err(format!(
                "batch x kv heads = {bh} exceeds the CUDA attention grid limit of 65535; run \
                 this node on the CPU provider"
            )));
        }
        // Split the keys when the blocks alone would leave the device idle.
        let t = p.t();
        let blocks = tiles * bh;
        let target = 2 * base.rt.sm_count() as usize;
        let key_tiles = t.div_ceil(bn);
        let mut splits = 1usize;
        // A short key range splits down to one tile a split: with few blocks each one's
        // latency is the kernel's (BERT at batch 1: 24 blocks over 128 keys).
        if blocks < target && key_tiles >= 2 {
            let most = if key_tiles >= 4 {
                key_tiles / 2
            } else {
                key_tiles
            };
            splits = target.div_ceil(blocks).min(most).min(64);
        }
        if splits > 1 {
            let chunk = key_tiles.div_ceil(splits) * bn;
            splits = t.div_ceil(chunk);
            a.chunk = i32_of(base, chunk, "split chunk")?;
        }
        if splits > 1 {
            self.split_partials(base, f, p, &mut a, splits)?;
        }
        let mut args = [arg(&mut a)];
        // SAFETY: attn_* take one AttnParams by value; every view lies inside its tensor
        // (the callers derive them from the node's views) and `part` holds the partials.
        unsafe {
            base.rt.launch_cfg(
                func,
                (tiles as u32, bh as u32, splits as u32),
                (128, 1, 1),
                smem as u32,
                &mut args,
            )?;
        }
        if splits > 1 {
            self.combine(base, f, p, &mut a)?;
        }
        Ok(())
    }

    /// Sets `a` up for `splits` key splits: the count and the partials' workspace.
    fn split_partials(
        &self,
        base: &Base,
        f: &Fns,
        p: &Problem,
        a: &mut AttnParams,
        splits: usize,
    ) -> EpResult<()> {
        let rows = p.b * p.hq * p.sq;
        a.splits = splits as i32;
        let bytes = splits * rows * (p.dv + 2) * f.acc_width;
        a.part = self.split.get(base, bytes, "split-K partial results")?;
        Ok(())
    }

    /// Merges the split partials of `a` into `p.out` (attn_combine).
    fn combine(&self, base: &Base, f: &Fns, p: &Problem, a: &mut AttnParams) -> EpResult<()> {
        let rows = p.b * p.hq * p.sq;
        let mut args = [arg(a)];
        // SAFETY: attn_combine reads the partials the split kernel wrote and writes p.out.
        unsafe {
            base.rt.launch_cfg(
                f.combine,
                (rows.div_ceil(4) as u32, 1, 1),
                (128, 1, 1),
                0,
                &mut args,
            )
        }
    }

    /// Writes the scores [b, hq, sq, t] of `p` to `out` (strides per axis): mode 0 scaled
    /// (and soft-capped) Q K^T, 1 after the masks and biases, 2 the softmax.
    pub fn scores(
        &self,
        base: &Base,
        p: &Problem,
        out: CuPtr,
        strides: [i64; 4],
        mode: i32,
    ) -> EpResult<()> {
        let f = self.fns(base, p.dtype)?;
        let rows = p.b * p.hq * p.sq;
        if rows == 0 || p.t() == 0 {
            return Ok(());
        }
        let mut a = self.params(base, f, p)?;
        let mut so = ScoresOut {
            out,
            sb: strides[0],
            sh: strides[1],
            ss: strides[2],
            st: strides[3],
            mode,
            _pad: 0,
        };
        let blocks = rows
            .div_ceil(4)
            .min(base.rt.sm_count() as usize * 16)
            .max(1);
        let mut args = [arg(&mut a), arg(&mut so)];
        // SAFETY: attn_scores(AttnParams, ScoresOut) reads the problem's views and writes the
        // [b, hq, sq, t] scores through `strides`.
        unsafe {
            base.rt
                .launch_cfg(f.scores, (blocks as u32, 1, 1), (128, 1, 1), 0, &mut args)
        }
    }

    /// present = concat(past, cur) along the sequence: [b, heads, npast + snew, width].
    #[allow(clippy::too_many_arguments)]
    pub fn concat(
        &self,
        base: &Base,
        dtype: DataType,
        past: Option<View4>,
        cur: View4,
        (b, heads, npast, snew, width): (usize, usize, usize, usize, usize),
        out: View4,
    ) -> EpResult<()> {
        let f = self.fns(base, dtype)?;
        let w = f.width;
        let t = npast + snew;
        let n = b * heads * t * width;
        if n == 0 {
            return Ok(());
        }
        let past = past.unwrap_or(View4::new(0, [0; 4]));
        let (ps, cs) = (past.src(w), cur.src(w));
        let v = 16 / w;
        let vec = out.vec_out(w)
            && width % v == 0
            && cs.vec != 0
            && (npast == 0 || ps.vec != 0)
            && cur
                .bias
                .is_none_or(|(p, h)| p % 16 == 0 && h % v as i64 == 0);
        let mut c = ConcatParams {
            past: ps,
            cur: cs,
            out: out.ptr,
            ob: out.strides[0],
            oh: out.strides[1],
            os: out.strides[2],
            oc: out.strides[3],
            n: if vec { n / v } else { n } as i64,
            heads: i32_of(base, heads, "heads")?,
            npast: i32_of(base, npast, "past length")?,
            t: i32_of(base, t, "total length")?,
            width: i32_of(base, width, "head size")?,
            vec: vec as i32,
            _pad: 0,
        };
        let mut args = [arg(&mut c)];
        // SAFETY: attn_concat(ConcatParams) reads the past and new views and writes `out`.
        unsafe { base.rt.launch(f.concat, c.n as u64, &mut args) }
    }

    /// y [m, n] (contiguous) = x . w + bias, x a [batch, seq, k] view (strides xs), w a
    /// [k, n] view (strides ws), bias [n] with stride bias.1.
    #[allow(clippy::too_many_arguments)]
    pub fn proj(
        &self,
        base: &Base,
        dtype: DataType,
        (x, xs): (CuPtr, [i64; 3]),
        (w, ws): (CuPtr, [i64; 2]),
        bias: Option<(CuPtr, i64)>,
        y: CuPtr,
        (m, n, k, seq): (usize, usize, usize, usize),
    ) -> EpResult<()> {
        let f = self.fns(base, dtype)?;
        if m == 0 || n == 0 {
            return Ok(());
        }
        let mut pp = ProjParams {
            x,
            w,
            bias: bias.map_or(0, |b| b.0),
            y,
            xb: xs[0],
            xs: xs[1],
            xk: xs[2],
            wk: ws[0],
            wn: ws[1],
            bn: bias.map_or(0, |b| b.1),
            m: i32_of(base, m, "rows")?,
            n: i32_of(base, n, "columns")?,
            k: i32_of(base, k, "inner size")?,
            seq: i32_of(base, seq.max(1), "sequence")?,
        };
        let grid = (n.div_ceil(64) as u32, m.div_ceil(64) as u32, 1);
        if grid.1 > 65535 {
            return Err(base.err(format!(
                "{m} projection rows exceed the CUDA kernel's grid limit; run this node on \
                 the CPU provider"
            )));
        }
        let mut args = [arg(&mut pp)];
        // SAFETY: attn_proj(ProjParams) reads x, w and bias inside their views and writes the
        // contiguous [m, n] y.
        unsafe { base.rt.launch_cfg(f.proj, grid, (256, 1, 1), 0, &mut args) }
    }
}

/// The element width of a float dtype the kernels take.
pub fn width_of(dtype: DataType) -> usize {
    dtype.element_size().unwrap_or(4)
}

/// The broadcast strides (batch, heads, queries) of a mask / bias whose leading axes
/// right-align with [b, h, sq], plus the stride of its last axis.
pub fn mask_strides(
    base: &Base,
    shape: &[usize],
    strides: &[usize],
    target: [usize; 3],
    what: &str,
) -> EpResult<[i64; 4]> {
    let r = shape.len();
    if r == 0 || r > 4 {
        return Err(base.err(format!(
            "{what} {shape:?} must have 1 to 4 axes to broadcast to the scores {target:?} x keys"
        )));
    }
    let lead = crate::ops::common::broadcast_strides(
        base,
        &shape[..r - 1],
        &strides[..r - 1],
        &target,
        what,
    )?;
    let last = if shape[r - 1] == 1 {
        0
    } else {
        strides[r - 1] as i64
    };
    Ok([lead[0], lead[1], lead[2], last])
}

/// Whether the float16/bfloat16 (tensor-core) attention kernels run: yes unless
/// `ONNX_RUNTIME_CUDA_HALF_ATTENTION=0` (read once), a switch for telling a kernel problem from
/// a model problem.
fn half_path_enabled() -> bool {
    static ON: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ON.get_or_init(|| std::env::var("ONNX_RUNTIME_CUDA_HALF_ATTENTION").map_or(true, |v| v != "0"))
}
