//! Scaled dot-product attention shared by ONNX Attention (23/24) and the com.microsoft
//! attention ops, and rotary embeddings (ONNX RotaryEmbedding 23; the com.microsoft op
//! reuses [`rotate`]). Heads run in parallel; each head is two GEMMs and a row softmax.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid, Real};
use crate::shape::broadcast_strides;
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use rayon::prelude::*;

/// One attention problem in BNSH layout: q [b, hq, sq, d], k [b, hkv, t, d],
/// v [b, hkv, t, dv]; `bias` (already broadcast strides) adds to the scores.
pub struct Sdpa<'a, T> {
    pub b: usize,
    pub hq: usize,
    pub hkv: usize,
    pub sq: usize,
    pub t: usize,
    pub d: usize,
    pub dv: usize,
    pub q: &'a [T],
    pub k: &'a [T],
    pub v: &'a [T],
    /// Additive bias of shape [b, hq, sq, t] read through these strides.
    pub bias: Option<(&'a [T], [usize; 4])>,
    pub scale: T,
    pub softcap: T,
    /// Per batch, the absolute position of the block's first query (the keys that precede
    /// it; negative when the block is longer than the valid keys). `None`: 0.
    pub offsets: Option<Vec<i64>>,
    /// Causal masking: key j is hidden from the query at absolute position p when j > p.
    pub causal: bool,
    /// Sliding window: key j is hidden when j < p - left or j > p + right.
    pub left: Option<usize>,
    pub right: Option<usize>,
    /// Per-head extra softmax logit (smooth softmax / attention sinks).
    pub sink: Option<Vec<T>>,
    /// Per batch: keys at or beyond this count are hidden.
    pub kv_valid: Option<&'a [usize]>,
    /// Value hidden keys get (-inf for ONNX, mask_filter_value for some contrib ops).
    pub masked: T,
}

/// Which score tensor to return besides the output (ONNX qk_matmul_output_mode).
#[derive(Clone, Copy, PartialEq)]
pub enum ScoresOut {
    None,
    Raw,
    Biased,
    Softmax,
}

impl<T: Real> Sdpa<'_, T> {
    /// The keys query `i` of batch `bi` may see under the causal and window masks, as an
    /// inclusive range that may be empty or reach outside `0..t`; `None` when neither mask
    /// applies.
    fn visible_keys(&self, bi: usize, i: usize) -> Option<(i64, i64)> {
        if !self.causal && self.left.is_none() && self.right.is_none() {
            return None;
        }
        let pos = i as i64 + self.offsets.as_ref().map_or(0, |o| o[bi]);
        let mut hi = i64::MAX;
        if self.causal {
            hi = pos;
        }
        if let Some(r) = self.right {
            hi = hi.min(pos.saturating_add(r as i64));
        }
        let lo = self.left.map_or(i64::MIN, |l| pos.saturating_sub(l as i64));
        Some((lo, hi))
    }

    /// Returns (output [b, hq, sq, dv], requested scores [b, hq, sq, t]).
    pub fn run(&self, want: ScoresOut) -> (Vec<T>, Vec<T>) {
        let (sq, t, d, dv) = (self.sq, self.t, self.d, self.dv);
        let group = self.hq / self.hkv.max(1);
        let mut out = vec![T::zero(); self.b * self.hq * sq * dv];
        let mut scores_out = if want == ScoresOut::None {
            Vec::new()
        } else {
            vec![T::zero(); self.b * self.hq * sq * t]
        };
        let heads: Vec<(usize, &mut [T])> = out.chunks_mut((sq * dv).max(1)).enumerate().collect();
        let mut so_chunks: Vec<Option<&mut [T]>> = if want == ScoresOut::None {
            (0..heads.len()).map(|_| None).collect()
        } else {
            scores_out.chunks_mut((sq * t).max(1)).map(Some).collect()
        };
        heads
            .into_par_iter()
            .zip(so_chunks.par_iter_mut())
            .for_each(|((bh, o), so)| {
                let (bi, h) = (bh / self.hq, bh % self.hq);
                let kh = bi * self.hkv + h / group.max(1);
                let q = &self.q[bh * sq * d..(bh + 1) * sq * d];
                let k = &self.k[kh * t * d..(kh + 1) * t * d];
                let v = &self.v[kh * t * dv..(kh + 1) * t * dv];
                let mut s = vec![T::zero(); sq * t];
                // scores = q @ k^T * scale
                common::gemm(sq, t, d, q, d, 1, k, 1, d, &mut s, t, self.scale, T::zero());
                if self.softcap > T::zero() {
                    s.iter_mut()
                        .for_each(|x| *x = self.softcap * (*x / self.softcap).tanh());
                }
                if want == ScoresOut::Raw {
                    so.as_mut().expect("scores").copy_from_slice(&s);
                }
                for i in 0..sq {
                    let row = &mut s[i * t..(i + 1) * t];
                    if let Some((bias, st)) = self.bias {
                        let base = bi * st[0] + h * st[1] + i * st[2];
                        for (j, x) in row.iter_mut().enumerate() {
                            *x += bias[base + j * st[3]];
                        }
                    }
                    if let Some((lo, hi)) = self.visible_keys(bi, i) {
                        for (j, x) in row.iter_mut().enumerate() {
                            if (j as i64) < lo || (j as i64) > hi {
                                *x = self.masked;
                            }
                        }
                    }
                    if let Some(valid) = self.kv_valid {
                        for x in row.iter_mut().skip(valid[bi]) {
                            *x = self.masked;
                        }
                    }
                }
                if want == ScoresOut::Biased {
                    so.as_mut().expect("scores").copy_from_slice(&s);
                }
                let sink = self.sink.as_ref().map(|v| v[h]);
                for row in s.chunks_mut(t.max(1)) {
                    let mut m = row.iter().copied().fold(T::neg_infinity(), T::max);
                    if let Some(sk) = sink {
                        m = m.max(sk);
                    }
                    if m == T::neg_infinity() {
                        // A fully masked row attends to nothing: zero probabilities (as the
                        // ONNX reference does), not exp(-inf - -inf) = NaN.
                        row.fill(T::zero());
                        continue;
                    }
                    let mut sum = sink.map_or(T::zero(), |sk| (sk - m).exp());
                    for x in row.iter_mut() {
                        *x = (*x - m).exp();
                        sum += *x;
                    }
                    row.iter_mut().for_each(|x| *x /= sum);
                }
                if want == ScoresOut::Softmax {
                    so.as_mut().expect("scores").copy_from_slice(&s);
                }
                common::gemm(sq, dv, t, &s, t, 1, v, dv, 1, o, dv, T::one(), T::zero());
            });
        (out, scores_out)
    }
}

/// [b, s, h, d] (3-D [b, s, h*d] input) -> [b, h, s, d].
pub fn bsh_to_bhsd<T: Copy + Default>(x: &[T], b: usize, s: usize, h: usize, d: usize) -> Vec<T> {
    let mut out = vec![T::default(); x.len()];
    for bi in 0..b {
        for si in 0..s {
            for hi in 0..h {
                let src = ((bi * s + si) * h + hi) * d;
                let dst = ((bi * h + hi) * s + si) * d;
                out[dst..dst + d].copy_from_slice(&x[src..src + d]);
            }
        }
    }
    out
}

/// [b, h, s, d] -> [b, s, h*d].
pub fn bhsd_to_bsh<T: Copy + Default>(x: &[T], b: usize, h: usize, s: usize, d: usize) -> Vec<T> {
    let mut out = vec![T::default(); x.len()];
    for bi in 0..b {
        for hi in 0..h {
            for si in 0..s {
                let src = ((bi * h + hi) * s + si) * d;
                let dst = ((bi * s + si) * h + hi) * d;
                out[dst..dst + d].copy_from_slice(&x[src..src + d]);
            }
        }
    }
    out
}

/// Concatenates past [b, h, p, d] and new [b, h, s, d] along the sequence axis.
pub fn concat_seq<T: Copy>(
    past: &[T],
    new: &[T],
    bh: usize,
    p: usize,
    s: usize,
    d: usize,
) -> Vec<T> {
    let mut out = Vec::with_capacity(past.len() + new.len());
    for i in 0..bh {
        out.extend_from_slice(&past[i * p * d..(i + 1) * p * d]);
        out.extend_from_slice(&new[i * s * d..(i + 1) * s * d]);
    }
    out
}

struct AttentionKernel {
    node: String,
    scale: Option<f32>,
    causal: bool,
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    softcap: f32,
    qk_mode: i64,
    n_outputs: usize,
    /// Sliding-window bounds (opset 25); `None` leaves that side unbounded.
    left: Option<usize>,
    right: Option<usize>,
}

impl AttentionKernel {
    fn compute<T: Real>(
        &self,
        inputs: &[Option<&Value>],
        dtype: DataType,
    ) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let cv = |t: &Tensor| common::float_vec::<T>(t).unwrap_or_default();
        let (q, k, v) = (
            tensor_input(node, inputs, 0)?,
            tensor_input(node, inputs, 1)?,
            tensor_input(node, inputs, 2)?,
        );
        let mask = optional_tensor_input(node, inputs, 3)?;
        let past_k = optional_tensor_input(node, inputs, 4)?;
        let past_v = optional_tensor_input(node, inputs, 5)?;
        let nonpad = optional_tensor_input(node, inputs, 6)?;
        let three_d = q.rank() == 3;
        if q.rank() != k.rank() || q.rank() != v.rank() || !(q.rank() == 3 || q.rank() == 4) {
            return Err(invalid(node, "Q, K and V must all be 3-D or all 4-D"));
        }
        let b = q.shape()[0];
        let (hq, hkv, sq, s_kv, d, dv, qv, kv, vv);
        if three_d {
            let (Some(qh), Some(kh)) = (self.q_heads, self.kv_heads) else {
                return Err(invalid(
                    node,
                    "3-D inputs need the q_num_heads and kv_num_heads attributes",
                ));
            };
            hq = qh;
            hkv = kh;
            sq = q.shape()[1];
            s_kv = k.shape()[1];
            if q.shape()[2] % hq != 0 || k.shape()[2] % hkv != 0 || v.shape()[2] % hkv != 0 {
                return Err(invalid(node, "hidden sizes must divide by the head counts"));
            }
            d = q.shape()[2] / hq;
            dv = v.shape()[2] / hkv;
            qv = bsh_to_bhsd(&cv(q), b, sq, hq, d);
            kv = bsh_to_bhsd(&cv(k), b, s_kv, hkv, k.shape()[2] / hkv);
            vv = bsh_to_bhsd(&cv(v), b, s_kv, hkv, dv);
        } else {
            hq = q.shape()[1];
            hkv = k.shape()[1];
            sq = q.shape()[2];
            s_kv = k.shape()[2];
            d = q.shape()[3];
            dv = v.shape()[3];
            qv = cv(q);
            kv = cv(k);
            vv = cv(v);
        }
        let dk = kv.len() / (b * hkv * s_kv).max(1);
        if dk != d || hkv == 0 || hq % hkv != 0 || k.shape()[0] != b || v.shape()[0] != b {
            return Err(invalid(
                node,
                format!(
                    "Q {:?}, K {:?}, V {:?} do not agree on batch, head size or head grouping",
                    q.shape(),
                    k.shape(),
                    v.shape()
                ),
            ));
        }
        let (kv, vv, p) = match (past_k, past_v) {
            (Some(pk), Some(pv)) => {
                let p = pk.shape().get(2).copied().unwrap_or(0);
                if pk.shape() != [b, hkv, p, d] || pv.shape() != [b, hkv, p, dv] {
                    return Err(invalid(
                        node,
                        "past_key/past_value must be [batch, kv_heads, past, head_size]",
                    ));
                }
                (
                    concat_seq(&cv(pk), &kv, b * hkv, p, s_kv, d),
                    concat_seq(&cv(pv), &vv, b * hkv, p, s_kv, dv),
                    p,
                )
            }
            (None, None) => (kv, vv, 0),
            _ => return Err(invalid(node, "past_key and past_value go together")),
        };
        let t = p + s_kv;
        let nonpad_vals: Option<Vec<i64>> = nonpad
            .map(|n| common::ints_of(node, n, "nonpad_kv_seqlen"))
            .transpose()?;
        if nonpad_vals.is_some() && p > 0 {
            return Err(invalid(
                node,
                "nonpad_kv_seqlen describes an external cache; it cannot be combined with past_key/past_value",
            ));
        }
        if nonpad_vals.as_ref().is_some_and(|v| v.len() != b) {
            return Err(invalid(
                node,
                "nonpad_kv_seqlen must have one value per batch",
            ));
        }
        // The mask, padded on its last axis to t and broadcast to [b, hq, sq, t].
        let neg = T::neg_infinity();
        let bias: Option<(Vec<T>, Vec<usize>)> = match mask {
            Some(m) => {
                let ms = m.shape();
                if ms.is_empty() || ms.len() > 4 || ms[ms.len() - 1] > t {
                    return Err(invalid(
                        node,
                        format!("attn_mask {ms:?} does not broadcast to [{b}, {hq}, {sq}, {t}]"),
                    ));
                }
                let last = ms[ms.len() - 1];
                let rows = m.numel() / last.max(1);
                let vals: Vec<T> = if m.dtype() == DataType::Bool {
                    m.data::<u8>()
                        .iter()
                        .map(|&x| if x != 0 { T::zero() } else { neg })
                        .collect()
                } else {
                    cv(m)
                };
                let mut padded = Vec::with_capacity(rows * t);
                for r in 0..rows {
                    padded.extend_from_slice(&vals[r * last..(r + 1) * last]);
                    padded.extend(std::iter::repeat_n(neg, t - last));
                }
                let mut shape = ms.to_vec();
                *shape.last_mut().expect("rank >= 1") = t;
                Some((padded, shape))
            }
            None => None,
        };
        let bias_ref = match &bias {
            Some((vals, shape)) => {
                let out = [b, hq, sq, t];
                if crate::shape::broadcast_shapes(node, &[shape, &out])? != out {
                    return Err(invalid(
                        node,
                        format!("attn_mask {shape:?} does not broadcast to {out:?}"),
                    ));
                }
                let st = broadcast_strides(shape, &out);
                Some((vals.as_slice(), [st[0], st[1], st[2], st[3]]))
            }
            None => None,
        };
        // Keys preceding the query block: the past cache, or per batch the valid keys of an
        // external cache less the block (negative when the block is longer).
        let offsets: Vec<i64> = match (&nonpad_vals, p) {
            (Some(n), 0) => n.iter().map(|&x| x - sq as i64).collect(),
            _ => vec![p as i64; b],
        };
        let kv_valid: Option<Vec<usize>> = nonpad_vals
            .as_ref()
            .map(|v| v.iter().map(|&x| x.clamp(0, t as i64) as usize).collect());
        let scale = self.scale.map_or(1.0 / (d as f64).sqrt(), |s| s as f64);
        let sd = Sdpa {
            b,
            hq,
            hkv,
            sq,
            t,
            d,
            dv,
            q: &qv,
            k: &kv,
            v: &vv,
            bias: bias_ref,
            scale: T::from_f64c(scale),
            softcap: T::from_f64c(self.softcap as f64),
            offsets: Some(offsets),
            causal: self.causal,
            left: self.left,
            right: self.right,
            sink: None,
            kv_valid: kv_valid.as_deref(),
            masked: neg,
        };
        let want = match (self.n_outputs > 3, self.qk_mode) {
            (false, _) => ScoresOut::None,
            (true, 0) | (true, 1) => ScoresOut::Raw,
            (true, 2) => ScoresOut::Biased,
            (true, _) => ScoresOut::Softmax,
        };
        let (y, scores) = sd.run(want);
        let to = |v: Vec<T>, shape: Vec<usize>| -> Tensor {
            let t = Tensor::from_vec(shape, v);
            crate::ops::nn::norm::channel_norm::recast(t, dtype)
        };
        let mut out = vec![if three_d {
            Value::Tensor(to(bhsd_to_bsh(&y, b, hq, sq, dv), vec![b, sq, hq * dv]))
        } else {
            Value::Tensor(to(y, vec![b, hq, sq, dv]))
        }];
        if self.n_outputs > 1 {
            out.push(Value::Tensor(to(kv, vec![b, hkv, t, d])));
        }
        if self.n_outputs > 2 {
            out.push(Value::Tensor(to(vv, vec![b, hkv, t, dv])));
        }
        if self.n_outputs > 3 {
            out.push(Value::Tensor(to(scores, vec![b, hq, sq, t])));
        }
        Ok(out)
    }
}

impl CpuKernel for AttentionKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let q = tensor_input(&self.node, inputs, 0)?;
        common::require_float(&self.node, "Attention", q.dtype())?;
        if q.dtype() == DataType::Float64 {
            self.compute::<f64>(inputs, q.dtype())
        } else {
            self.compute::<f32>(inputs, q.dtype())
        }
    }
}

fn build_attention(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let heads = |name: &str| -> Result<Option<usize>, EpError> {
        match attrs::opt_int(n, name)? {
            Some(v) if v < 1 => Err(common::bad_attr(n, name, "must be positive")),
            v => Ok(v.map(|v| v as usize)),
        }
    };
    let window = |name: &str| -> Result<Option<usize>, EpError> {
        match attrs::int(n, name, -1)? {
            -1 => Ok(None),
            v if v < 0 => Err(common::bad_attr(
                n,
                name,
                format!("{v} is neither -1 (unbounded) nor a nonnegative window"),
            )),
            v => Ok(Some(v as usize)),
        }
    };
    Ok(Box::new(AttentionKernel {
        left: window("left_window_size")?,
        right: window("right_window_size")?,
        node: n.describe(),
        scale: attrs::opt_float(n, "scale")?,
        causal: attrs::int(n, "is_causal", 0)? != 0,
        q_heads: heads("q_num_heads")?,
        kv_heads: heads("kv_num_heads")?,
        softcap: attrs::float(n, "softcap", 0.0)?,
        qk_mode: attrs::int(n, "qk_matmul_output_mode", 0)?,
        n_outputs: n.outputs.len(),
    }))
}

/// Rotates `x` [b, s, h, d] (BSHD) in place with per-(batch, position) cos/sin rows of
/// `rot/2` values: `cs(b, s)` gives (cos, sin) slices.
pub fn rotate<T: Real>(
    x: &mut [T],
    (b, s, h, d): (usize, usize, usize, usize),
    rot: usize,
    interleaved: bool,
    cs: impl Fn(usize, usize) -> (Vec<T>, Vec<T>) + Sync,
) {
    let half = rot / 2;
    x.par_chunks_mut((s * h * d).max(1))
        .take(b)
        .enumerate()
        .for_each(|(bi, xb)| {
            for si in 0..s {
                let (cos, sin) = cs(bi, si);
                for hi in 0..h {
                    let v = &mut xb[(si * h + hi) * d..(si * h + hi + 1) * d];
                    for i in 0..half {
                        let (a, bidx) = if interleaved {
                            (2 * i, 2 * i + 1)
                        } else {
                            (i, i + half)
                        };
                        let (x1, x2) = (v[a], v[bidx]);
                        v[a] = cos[i] * x1 - sin[i] * x2;
                        v[bidx] = sin[i] * x1 + cos[i] * x2;
                    }
                }
            }
        });
}

struct RotaryKernel {
    node: String,
    num_heads: Option<usize>,
    rot_dim: usize,
    interleaved: bool,
}

impl RotaryKernel {
    fn compute<T: Real>(&self, inputs: &[Option<&Value>]) -> Result<Tensor, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let cos = tensor_input(node, inputs, 1)?;
        let sin = tensor_input(node, inputs, 2)?;
        let pos = optional_tensor_input(node, inputs, 3)?;
        let cv = |t: &Tensor| common::float_vec::<T>(t).unwrap_or_default();
        let shape = x.shape().to_vec();
        let (b, s, h, d, mut xv) = match shape.len() {
            4 => {
                let (b, h, s, d) = (shape[0], shape[1], shape[2], shape[3]);
                (b, s, h, d, bhsd_to_bsh(&cv(x), b, h, s, d))
            }
            3 => {
                let nh = self
                    .num_heads
                    .ok_or_else(|| invalid(node, "3-D input needs num_heads"))?;
                if shape[2] % nh != 0 {
                    return Err(invalid(node, "hidden size must divide by num_heads"));
                }
                (shape[0], shape[1], nh, shape[2] / nh, cv(x))
            }
            _ => return Err(invalid(node, format!("input {shape:?} must be 3-D or 4-D"))),
        };
        let rot = if self.rot_dim == 0 { d } else { self.rot_dim };
        if rot > d || rot % 2 != 0 {
            return Err(invalid(
                node,
                format!("rotary_embedding_dim {rot} must be even and at most head_size {d}"),
            ));
        }
        let half = rot / 2;
        let (cvv, svv) = (cv(cos), cv(sin));
        if cos.shape().last() != Some(&half) || sin.shape() != cos.shape() {
            return Err(invalid(
                node,
                format!(
                    "cos/sin caches {:?} must end in rotary_dim/2 = {half}",
                    cos.shape()
                ),
            ));
        }
        let rows = cos.numel() / half.max(1);
        let ids: Option<Vec<i64>> = pos
            .map(|p| common::ints_of(node, p, "position_ids"))
            .transpose()?;
        if let Some(ids) = &ids {
            if ids.len() != b * s || ids.iter().any(|&i| i < 0 || i as usize >= rows) {
                return Err(invalid(
                    node,
                    format!("position_ids must be [{b}, {s}] indices below {rows}"),
                ));
            }
        } else if rows != b * s {
            return Err(invalid(
                node,
                format!("without position_ids the caches must be [{b}, {s}, {half}]"),
            ));
        }
        rotate(&mut xv, (b, s, h, d), rot, self.interleaved, |bi, si| {
            let r = match &ids {
                Some(ids) => ids[bi * s + si] as usize,
                None => bi * s + si,
            };
            (
                cvv[r * half..(r + 1) * half].to_vec(),
                svv[r * half..(r + 1) * half].to_vec(),
            )
        });
        let yv = if shape.len() == 4 {
            bsh_to_bhsd(&xv, b, s, h, d)
        } else {
            xv
        };
        Ok(crate::ops::nn::norm::channel_norm::recast(
            Tensor::from_vec(shape, yv),
            x.dtype(),
        ))
    }
}

impl CpuKernel for RotaryKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let x = tensor_input(&self.node, inputs, 0)?;
        common::require_float(&self.node, "RotaryEmbedding", x.dtype())?;
        let y = if x.dtype() == DataType::Float64 {
            self.compute::<f64>(inputs)?
        } else {
            self.compute::<f32>(inputs)?
        };
        Ok(vec![Value::Tensor(y)])
    }
}

fn build_rotary(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    Ok(Box::new(RotaryKernel {
        node: n.describe(),
        num_heads: attrs::opt_int(n, "num_heads")?
            .filter(|&v| v > 0)
            .map(|v| v as usize),
        rot_dim: attrs::int(n, "rotary_embedding_dim", 0)?.max(0) as usize,
        interleaved: attrs::int(n, "interleaved", 0)? != 0,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [23, 24, 25] {
        r.register("", "Attention", since, build_attention);
    }
    r.register("", "RotaryEmbedding", 23, build_rotary);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use crate::Tensor;

    /// A query row whose every key is masked gets zero probabilities, so a zero output (the
    /// ONNX reference), while the other row is the float64 softmax-weighted sum of V.
    #[test]
    fn fully_masked_row_is_zero_not_nan() {
        let (sq, skv, d) = (2usize, 3usize, 2usize);
        let q = rand(sq * d, 1, -1.0, 1.0);
        let k = rand(skv * d, 2, -1.0, 1.0);
        let v = rand(skv * d, 3, -1.0, 1.0);
        let inf = f64::INFINITY;
        let mask = [-inf, -inf, -inf, 0.0, 0.0, -inf];
        let n = node("Attention", 4, 1, vec![]);
        let t4 = |s: usize, x: &[f64]| Some(Tensor::from_vec(vec![1, 1, s, d], f32s(x)));
        let out = run(
            build_attention,
            &n,
            23,
            &[
                t4(sq, &q),
                t4(skv, &k),
                t4(skv, &v),
                Some(Tensor::from_vec(vec![sq, skv], f32s(&mask))),
            ],
        )
        .unwrap();
        let scale = 1.0 / (d as f64).sqrt();
        let s: Vec<f64> = (0..2)
            .map(|j| (0..d).map(|c| q[d + c] * k[j * d + c]).sum::<f64>() * scale)
            .collect();
        let m = s[0].max(s[1]);
        let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
        let z = e[0] + e[1];
        let mut want = vec![0.0; d];
        want.extend((0..d).map(|c| (e[0] * v[c] + e[1] * v[d + c]) / z));
        assert_close(out[0].data::<f32>(), &want, 1e-5);
    }

    /// Float64 attention of one head with the opset-25 visibility rule written out as the
    /// spec states it: query i of batch bi sits at p = offset + i, offset = nonpad - sq; it
    /// sees key j iff j < nonpad, (causal) j <= p, p - left <= j and j <= p + right.
    fn windowed_reference(
        q: &[f64],
        k: &[f64],
        v: &[f64],
        (sq, t, d): (usize, usize, usize),
        nonpad: i64,
        causal: bool,
        (left, right): (i64, i64),
    ) -> Vec<f64> {
        let scale = 1.0 / (d as f64).sqrt();
        let mut out = vec![0.0; sq * d];
        for i in 0..sq {
            let p = nonpad - sq as i64 + i as i64;
            let seen: Vec<usize> = (0..t)
                .filter(|&j| {
                    let j = j as i64;
                    j < nonpad
                        && (!causal || j <= p)
                        && (left < 0 || p - left <= j)
                        && (right < 0 || j <= p + right)
                })
                .collect();
            if seen.is_empty() {
                continue; // a fully masked row is zero
            }
            let s: Vec<f64> = seen
                .iter()
                .map(|&j| (0..d).map(|c| q[i * d + c] * k[j * d + c]).sum::<f64>() * scale)
                .collect();
            let m = s.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let e: Vec<f64> = s.iter().map(|x| (x - m).exp()).collect();
            let z: f64 = e.iter().sum();
            for c in 0..d {
                out[i * d + c] = seen
                    .iter()
                    .zip(&e)
                    .map(|(&j, w)| w * v[j * d + c])
                    .sum::<f64>()
                    / z;
            }
        }
        out
    }

    /// Opset 25: an external cache (`nonpad_kv_seqlen`, no past) puts the causal frontier at
    /// nonpad - sq per batch (bottom-right), negative offsets leave leading rows empty (zero
    /// output), and left/right windows bound the visible keys around each query's position.
    #[test]
    fn offset_aware_causal_and_windows_match_float64() {
        use onnx_runtime_ir::Attribute;
        let (b, sq, t, d) = (2usize, 3usize, 6usize, 2usize);
        let q = rand(b * sq * d, 11, -1.0, 1.0);
        let k = rand(b * t * d, 12, -1.0, 1.0);
        let v = rand(b * t * d, 13, -1.0, 1.0);
        let nonpad = [5i64, 2];
        for (causal, left, right) in [(1, -1, -1), (1, 1, -1), (0, 1, 1), (0, -1, 0), (0, 2, 1)] {
            let n = node(
                "Attention",
                7,
                1,
                vec![
                    ("is_causal", Attribute::Int(causal)),
                    ("left_window_size", Attribute::Int(left)),
                    ("right_window_size", Attribute::Int(right)),
                ],
            );
            let t4 = |s: usize, x: &[f64]| Some(Tensor::from_vec(vec![b, 1, s, d], f32s(x)));
            let out = run(
                build_attention,
                &n,
                25,
                &[
                    t4(sq, &q),
                    t4(t, &k),
                    t4(t, &v),
                    None,
                    None,
                    None,
                    Some(Tensor::from_vec(vec![b], nonpad.to_vec())),
                ],
            )
            .unwrap();
            let mut want = Vec::new();
            for bi in 0..b {
                want.extend(windowed_reference(
                    &q[bi * sq * d..(bi + 1) * sq * d],
                    &k[bi * t * d..(bi + 1) * t * d],
                    &v[bi * t * d..(bi + 1) * t * d],
                    (sq, t, d),
                    nonpad[bi],
                    causal != 0,
                    (left, right),
                ));
            }
            assert_close(out[0].data::<f32>(), &want, 1e-5);
        }
    }

    #[test]
    fn window_sizes_below_minus_one_are_refused() {
        use onnx_runtime_ir::Attribute;
        let n = node(
            "Attention",
            3,
            1,
            vec![("left_window_size", Attribute::Int(-2))],
        );
        let err = build_attention(&BuildContext::new(&n, 25)).err().unwrap();
        assert!(err.to_string().contains("left_window_size"), "{err}");
    }
}
