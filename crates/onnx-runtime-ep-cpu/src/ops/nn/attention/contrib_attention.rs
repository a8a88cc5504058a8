//! com.microsoft attention ops on the shared [`Sdpa`] core: MultiHeadAttention, Attention
//! (fused QKV projection) and GroupQueryAttention (KV cache, rotary, local window, softcap,
//! smooth softmax / head sinks). Masks add `mask_filter_value` like onnxruntime's CPU kernels.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::attention::sdpa::{
    bhsd_to_bsh, bsh_to_bhsd, concat_seq, rotate, ScoresOut, Sdpa,
};
use crate::ops::nn::common::{self, invalid};
use crate::shape::broadcast_strides;
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

fn f32v(t: &Tensor) -> Vec<f32> {
    common::float_vec::<f32>(t).unwrap_or_default()
}

fn out_t(v: Vec<f32>, shape: Vec<usize>, dtype: DataType) -> Value {
    Value::Tensor(crate::ops::nn::norm::channel_norm::recast(
        Tensor::from_vec(shape, v),
        dtype,
    ))
}

/// The additive bias [b, n, s, t]: attention_bias, a key padding / attention mask and the
/// causal mask (`causal_past` = past length when unidirectional), masked entries getting
/// `filter`.
#[allow(clippy::too_many_arguments)]
fn build_bias(
    node: &str,
    (b, n, s, t): (usize, usize, usize, usize),
    attn_bias: Option<&Tensor>,
    mask: Option<&Tensor>,
    causal_past: Option<usize>,
    filter: f32,
) -> Result<Option<Vec<f32>>, EpError> {
    if attn_bias.is_none() && mask.is_none() && causal_past.is_none() {
        return Ok(None);
    }
    let mut bias = vec![0f32; b * n * s * t];
    let full = [b, n, s, t];
    if let Some(ab) = attn_bias {
        let sh = ab.shape();
        if sh.len() != 4 || crate::shape::broadcast_shapes(node, &[sh, &full])? != full {
            return Err(invalid(
                node,
                format!("attention_bias {sh:?} must broadcast to {full:?}"),
            ));
        }
        let v = f32v(ab);
        let st = broadcast_strides(sh, &full);
        crate::shape::for_each_offset(&full, [&st], |i, [o]| bias[i] = v[o]);
    }
    if let Some(m) = mask {
        let mv = common::ints_of(node, m, "mask").or_else(|_| {
            common::floats_of(node, m, "mask").map(|v| v.into_iter().map(|x| x as i64).collect())
        })?;
        let masked = |bi: usize, si: usize, j: usize| -> bool {
            match m.shape().len() {
                1 => j as i64 >= mv[bi],
                2 => mv[bi * t + j] == 0,
                _ => mv[(bi * s + si) * t + j] == 0,
            }
        };
        let ok = match m.shape() {
            [x] => *x == b,
            [x, y] => *x == b && *y == t,
            [x, y, z] => *x == b && *y == s && *z == t,
            _ => false,
        };
        if !ok {
            return Err(invalid(node, format!("mask {:?} must be [batch], [batch, total_seq] or [batch, seq, total_seq] with total_seq {t}", m.shape())));
        }
        for bi in 0..b {
            for h in 0..n {
                for si in 0..s {
                    for j in 0..t {
                        if masked(bi, si, j) {
                            bias[((bi * n + h) * s + si) * t + j] += filter;
                        }
                    }
                }
            }
        }
    }
    if let Some(p) = causal_past {
        for bi in 0..b {
            for h in 0..n {
                for si in 0..s {
                    for j in p + si + 1..t {
                        bias[((bi * n + h) * s + si) * t + j] = filter;
                    }
                }
            }
        }
    }
    Ok(Some(bias))
}

/// q [b,n,s,d], k/v [b,n,t,*] with an optional full bias; returns [b, s, n*dv] and scores.
#[allow(clippy::too_many_arguments)]
fn attend(
    (b, n, s, t, d, dv): (usize, usize, usize, usize, usize, usize),
    q: &[f32],
    k: &[f32],
    v: &[f32],
    bias: Option<&[f32]>,
    scale: f32,
    want: ScoresOut,
) -> (Vec<f32>, Vec<f32>) {
    let sd = Sdpa {
        b,
        hq: n,
        hkv: n,
        sq: s,
        t,
        d,
        dv,
        q,
        k,
        v,
        bias: bias.map(|x| (x, [n * s * t, s * t, t, 1])),
        scale,
        softcap: 0.0,
        offsets: None,
        causal: false,
        left: None,
        right: None,
        kv_valid: None,
        sink: None,
        masked: f32::NEG_INFINITY,
    };
    let (y, sc) = sd.run(want);
    (bhsd_to_bsh(&y, b, n, s, dv), sc)
}

struct Mha {
    node: String,
    heads: usize,
    scale: Option<f32>,
    filter: f32,
    causal: bool,
    n_out: usize,
}

impl CpuKernel for Mha {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let n = self.heads;
        let q = tensor_input(node, inputs, 0)?;
        common::require_float(node, "MultiHeadAttention", q.dtype())?;
        let key = optional_tensor_input(node, inputs, 1)?;
        let value = optional_tensor_input(node, inputs, 2)?;
        let bias = optional_tensor_input(node, inputs, 3)?.map(f32v);
        let kpm = optional_tensor_input(node, inputs, 4)?;
        let ab = optional_tensor_input(node, inputs, 5)?;
        let (pk, pv) = (
            optional_tensor_input(node, inputs, 6)?,
            optional_tensor_input(node, inputs, 7)?,
        );
        let b = q.shape()[0];
        // Q, K, V in BNSH.
        let (s, d, qv, kv, vv, l, dv);
        if q.rank() == 5 {
            // Packed QKV [b, s, n, 3, h].
            let sh = q.shape();
            if sh[2] != n || sh[3] != 3 {
                return Err(invalid(
                    node,
                    format!("packed QKV {sh:?} must be [batch, seq, num_heads, 3, head]"),
                ));
            }
            s = sh[1];
            d = sh[4];
            l = s;
            dv = d;
            let all = f32v(q);
            let pick = |which: usize| -> Vec<f32> {
                let mut o = Vec::with_capacity(b * s * n * d);
                for row in all.chunks(3 * d) {
                    o.extend_from_slice(&row[which * d..(which + 1) * d]);
                }
                bsh_to_bhsd(&o, b, s, n, d)
            };
            qv = pick(0);
            kv = pick(1);
            vv = pick(2);
        } else {
            if q.rank() != 3 || q.shape()[2] % n != 0 {
                return Err(invalid(
                    node,
                    format!("query {:?} must be [batch, seq, num_heads*head]", q.shape()),
                ));
            }
            s = q.shape()[1];
            let hid = q.shape()[2];
            d = hid / n;
            let mut qf = f32v(q);
            if let Some(bv) = &bias {
                qf.iter_mut()
                    .enumerate()
                    .for_each(|(i, x)| *x += bv[i % hid]);
            }
            qv = bsh_to_bhsd(&qf, b, s, n, d);
            let key =
                key.ok_or_else(|| invalid(node, "key is required unless query is packed QKV"))?;
            match key.rank() {
                5 => {
                    let sh = key.shape();
                    l = sh[1];
                    dv = d;
                    let all = f32v(key);
                    let pick = |which: usize| -> Vec<f32> {
                        let mut o = Vec::with_capacity(b * l * n * d);
                        for row in all.chunks(2 * d) {
                            o.extend_from_slice(&row[which * d..(which + 1) * d]);
                        }
                        bsh_to_bhsd(&o, b, l, n, d)
                    };
                    kv = pick(0);
                    vv = pick(1);
                }
                4 => {
                    let value =
                        value.ok_or_else(|| invalid(node, "value is required with a 4-D key"))?;
                    l = key.shape()[2];
                    dv = value.shape()[3];
                    kv = f32v(key);
                    vv = f32v(value);
                }
                _ => {
                    let value = value.ok_or_else(|| invalid(node, "value is required"))?;
                    l = key.shape()[1];
                    let vh = value.shape()[2];
                    dv = vh / n;
                    let (mut kf, mut vf) = (f32v(key), f32v(value));
                    if let Some(bv) = &bias {
                        kf.iter_mut()
                            .enumerate()
                            .for_each(|(i, x)| *x += bv[hid + i % hid]);
                        vf.iter_mut()
                            .enumerate()
                            .for_each(|(i, x)| *x += bv[2 * hid + i % vh]);
                    }
                    kv = bsh_to_bhsd(&kf, b, l, n, d);
                    vv = bsh_to_bhsd(&vf, b, l, n, dv);
                }
            }
        }
        let (kv, vv, p) = match (pk, pv) {
            (Some(pk), Some(pv)) => {
                let p = pk.shape()[2];
                (
                    concat_seq(&f32v(pk), &kv, b * n, p, l, d),
                    concat_seq(&f32v(pv), &vv, b * n, p, l, dv),
                    p,
                )
            }
            _ => (kv, vv, 0),
        };
        let t = p + l;
        let bias = build_bias(
            node,
            (b, n, s, t),
            ab,
            kpm,
            self.causal.then_some(p),
            self.filter,
        )?;
        let scale = self.scale.unwrap_or(1.0 / (d as f32).sqrt());
        let want = if self.n_out > 3 {
            ScoresOut::Softmax
        } else {
            ScoresOut::None
        };
        let (y, sc) = attend(
            (b, n, s, t, d, dv),
            &qv,
            &kv,
            &vv,
            bias.as_deref(),
            scale,
            want,
        );
        let dt = q.dtype();
        let mut out = vec![out_t(y, vec![b, s, n * dv], dt)];
        if self.n_out > 1 {
            out.push(out_t(kv, vec![b, n, t, d], dt));
        }
        if self.n_out > 2 {
            out.push(out_t(vv, vec![b, n, t, dv], dt));
        }
        if self.n_out > 3 {
            out.push(out_t(sc, vec![b, n, s, t], dt));
        }
        Ok(out)
    }
}

fn heads_attr(ctx: &BuildContext<'_>, name: &str) -> Result<usize, EpError> {
    match attrs::opt_int(ctx.node, name)? {
        Some(v) if v > 0 => Ok(v as usize),
        _ => Err(common::bad_attr(
            ctx.node,
            name,
            "is required and must be positive",
        )),
    }
}

fn build_mha(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    Ok(Box::new(Mha {
        node: n.describe(),
        heads: heads_attr(ctx, "num_heads")?,
        scale: attrs::opt_float(n, "scale")?.filter(|&s| s != 0.0),
        filter: attrs::float(n, "mask_filter_value", -10000.0)?,
        causal: attrs::int(n, "unidirectional", 0)? != 0,
        n_out: n.outputs.len(),
    }))
}

struct MsAttention {
    node: String,
    heads: usize,
    scale: Option<f32>,
    filter: f32,
    causal: bool,
    qkv_sizes: Option<Vec<usize>>,
    n_out: usize,
}

impl CpuKernel for MsAttention {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let n = self.heads;
        let x = tensor_input(node, inputs, 0)?;
        let w = tensor_input(node, inputs, 1)?;
        common::require_float(node, "Attention", x.dtype())?;
        let bias = optional_tensor_input(node, inputs, 2)?.map(f32v);
        let mask = optional_tensor_input(node, inputs, 3)?;
        let past = optional_tensor_input(node, inputs, 4)?;
        let ab = optional_tensor_input(node, inputs, 5)?;
        if x.rank() != 3 || w.rank() != 2 || w.shape()[0] != x.shape()[2] {
            return Err(invalid(
                node,
                format!(
                    "input {:?} and weights {:?} must be [b, s, din] and [din, q+k+v]",
                    x.shape(),
                    w.shape()
                ),
            ));
        }
        let (b, s, din) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let total = w.shape()[1];
        let (hq, hk, hv) = match &self.qkv_sizes {
            Some(v) => (v[0], v[1], v[2]),
            None => (total / 3, total / 3, total / 3),
        };
        if hq + hk + hv != total || hq % n != 0 || hv % n != 0 || hq != hk {
            return Err(invalid(
                node,
                "qkv_hidden_sizes do not match the weights or num_heads",
            ));
        }
        let mut proj = vec![0f32; b * s * total];
        if let Some(bv) = &bias {
            proj.chunks_mut(total).for_each(|r| r.copy_from_slice(bv));
        }
        let beta = if bias.is_some() { 1.0 } else { 0.0 };
        common::gemm(
            b * s,
            total,
            din,
            &f32v(x),
            din,
            1,
            &f32v(w),
            total,
            1,
            &mut proj,
            total,
            1.0,
            beta,
        );
        let (d, dv) = (hq / n, hv / n);
        let split = |off: usize, width: usize, hd: usize| -> Vec<f32> {
            let mut o = Vec::with_capacity(b * s * width);
            for row in proj.chunks(total) {
                o.extend_from_slice(&row[off..off + width]);
            }
            bsh_to_bhsd(&o, b, s, n, hd)
        };
        let (qv, kv, vv) = (split(0, hq, d), split(hq, hk, d), split(hq + hk, hv, dv));
        let (kv, vv, p) = match past {
            Some(pt) => {
                let sh = pt.shape();
                if sh.len() != 5 || sh[0] != 2 || sh[1] != b || sh[2] != n || sh[4] != d || d != dv
                {
                    return Err(invalid(
                        node,
                        format!("past {sh:?} must be [2, batch, heads, past, head]"),
                    ));
                }
                let p = sh[3];
                let all = f32v(pt);
                let half = all.len() / 2;
                (
                    concat_seq(&all[..half], &kv, b * n, p, s, d),
                    concat_seq(&all[half..], &vv, b * n, p, s, dv),
                    p,
                )
            }
            None => (kv, vv, 0),
        };
        let t = p + s;
        let bias = build_bias(
            node,
            (b, n, s, t),
            ab,
            mask,
            self.causal.then_some(p),
            self.filter,
        )?;
        let scale = self.scale.unwrap_or(1.0 / (d as f32).sqrt());
        let (y, _) = attend(
            (b, n, s, t, d, dv),
            &qv,
            &kv,
            &vv,
            bias.as_deref(),
            scale,
            ScoresOut::None,
        );
        let dt = x.dtype();
        let mut out = vec![out_t(y, vec![b, s, n * dv], dt)];
        if self.n_out > 1 {
            let mut present = kv;
            present.extend(vv);
            out.push(out_t(present, vec![2, b, n, t, d], dt));
        }
        Ok(out)
    }
}

fn build_ms_attention(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    for unsupported in ["do_rotary", "past_present_share_buffer"] {
        if attrs::int(n, unsupported, 0)? != 0 {
            return Err(common::bad_attr(
                n,
                unsupported,
                "is not supported by the CPU kernel; use MultiHeadAttention or GroupQueryAttention",
            ));
        }
    }
    let sizes = attrs::opt_ints(n, "qkv_hidden_sizes")?
        .map(|v| common::usize_list(n, "qkv_hidden_sizes", &v))
        .transpose()?;
    if sizes.as_ref().is_some_and(|v| v.len() != 3) {
        return Err(common::bad_attr(
            n,
            "qkv_hidden_sizes",
            "must have 3 values",
        ));
    }
    Ok(Box::new(MsAttention {
        node: n.describe(),
        heads: heads_attr(ctx, "num_heads")?,
        scale: attrs::opt_float(n, "scale")?.filter(|&s| s != 0.0),
        filter: attrs::float(n, "mask_filter_value", -10000.0)?,
        causal: attrs::int(n, "unidirectional", 0)? != 0,
        qkv_sizes: sizes,
        n_out: n.outputs.len(),
    }))
}

struct Gqa {
    node: String,
    heads: usize,
    kv_heads: usize,
    scale: Option<f32>,
    rotary: bool,
    interleaved: bool,
    window: Option<usize>,
    softcap: f32,
    smooth: bool,
    causal: bool,
    n_out: usize,
}

impl CpuKernel for Gqa {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let (n, nk) = (self.heads, self.kv_heads);
        let q = tensor_input(node, inputs, 0)?;
        common::require_float(node, "GroupQueryAttention", q.dtype())?;
        let key = optional_tensor_input(node, inputs, 1)?;
        let value = optional_tensor_input(node, inputs, 2)?;
        let (pk, pv) = (
            optional_tensor_input(node, inputs, 3)?,
            optional_tensor_input(node, inputs, 4)?,
        );
        let seqlens = common::ints_of(node, tensor_input(node, inputs, 5)?, "seqlens_k")?;
        let total_seq = common::ints_of(
            node,
            tensor_input(node, inputs, 6)?,
            "total_sequence_length",
        )?
        .first()
        .copied()
        .unwrap_or(0)
        .max(0) as usize;
        let (cos, sin) = (
            optional_tensor_input(node, inputs, 7)?,
            optional_tensor_input(node, inputs, 8)?,
        );
        let pos_ids = optional_tensor_input(node, inputs, 9)?;
        let ab = optional_tensor_input(node, inputs, 10)?;
        let head_sink = optional_tensor_input(node, inputs, 11)?;
        if q.rank() != 3 || nk == 0 || n % nk != 0 {
            return Err(invalid(
                node,
                "query must be 3-D and num_heads a multiple of kv_num_heads",
            ));
        }
        let (b, s) = (q.shape()[0], q.shape()[1]);
        let (mut qf, mut kf, vf, d) = match key {
            Some(k) => {
                let value = value.ok_or_else(|| invalid(node, "value is required with key"))?;
                let d = q.shape()[2] / n;
                (f32v(q), f32v(k), f32v(value), d)
            }
            None => {
                let d = q.shape()[2] / (n + 2 * nk);
                let all = f32v(q);
                let w = (n + 2 * nk) * d;
                let (mut a, mut bk, mut c) = (vec![], vec![], vec![]);
                for row in all.chunks(w) {
                    a.extend_from_slice(&row[..n * d]);
                    bk.extend_from_slice(&row[n * d..(n + nk) * d]);
                    c.extend_from_slice(&row[(n + nk) * d..]);
                }
                (a, bk, c, d)
            }
        };
        if seqlens.len() != b || kf.len() != b * s * nk * d || vf.len() != b * s * nk * d {
            return Err(invalid(
                node,
                "seqlens_k, key and value must match batch, sequence and kv heads",
            ));
        }
        let p_buf = pk.map_or(0, |t| t.shape().get(2).copied().unwrap_or(0));
        let first_prompt = p_buf == 0 || total_seq == s;
        // Per batch: tokens already cached and total valid length.
        let totals: Vec<usize> = seqlens.iter().map(|&x| (x + 1).max(0) as usize).collect();
        let pasts: Vec<usize> = totals
            .iter()
            .map(|&tt| {
                if first_prompt {
                    0
                } else {
                    tt.saturating_sub(s)
                }
            })
            .collect();
        if self.rotary {
            let (cos, sin) = match (cos, sin) {
                (Some(c), Some(si)) => (f32v(c), f32v(si)),
                _ => return Err(invalid(node, "do_rotary needs cos_cache and sin_cache")),
            };
            let half = cos.len() / tensor_input(node, inputs, 7)?.shape()[0].max(1);
            let rows = cos.len() / half.max(1);
            let ids = pos_ids
                .map(|p| common::ints_of(node, p, "position_ids"))
                .transpose()?;
            let pos = |bi: usize, si: usize| -> usize {
                match &ids {
                    Some(v) if v.len() == b * s => v[bi * s + si].max(0) as usize,
                    _ => pasts[bi] + si,
                }
            };
            for bi in 0..b {
                for si in 0..s {
                    if pos(bi, si) >= rows {
                        return Err(invalid(
                            node,
                            format!(
                                "position {} is outside the rotary caches ({rows} rows)",
                                pos(bi, si)
                            ),
                        ));
                    }
                }
            }
            let cs = |bi: usize, si: usize| {
                let r = pos(bi, si);
                (
                    cos[r * half..(r + 1) * half].to_vec(),
                    sin[r * half..(r + 1) * half].to_vec(),
                )
            };
            rotate(&mut qf, (b, s, n, d), 2 * half, self.interleaved, cs);
            rotate(&mut kf, (b, s, nk, d), 2 * half, self.interleaved, cs);
        }
        // Present cache [b, nk, tp, d]: the past rows then the new ones at each batch's offset.
        // As onnxruntime, it keeps the past buffer's length when that is longer (the shared
        // max-length buffer of past_present_share_buffer, the prompt step included).
        let tp = total_seq.max(s).max(p_buf);
        let (kn, vn) = (bsh_to_bhsd(&kf, b, s, nk, d), bsh_to_bhsd(&vf, b, s, nk, d));
        let mut present_k = vec![0f32; b * nk * tp * d];
        let mut present_v = vec![0f32; b * nk * tp * d];
        let (pkv, pvv) = (pk.map(f32v), pv.map(f32v));
        for (bi, &past_b) in pasts.iter().enumerate() {
            for h in 0..nk {
                let dst = (bi * nk + h) * tp * d;
                if let (Some(pkv), Some(pvv)) = (&pkv, &pvv) {
                    let keep = past_b.min(p_buf).min(tp);
                    let src = (bi * nk + h) * p_buf * d;
                    present_k[dst..dst + keep * d].copy_from_slice(&pkv[src..src + keep * d]);
                    present_v[dst..dst + keep * d].copy_from_slice(&pvv[src..src + keep * d]);
                }
                let rows = s.min(tp.saturating_sub(past_b));
                let src = (bi * nk + h) * s * d;
                let at = dst + past_b * d;
                present_k[at..at + rows * d].copy_from_slice(&kn[src..src + rows * d]);
                present_v[at..at + rows * d].copy_from_slice(&vn[src..src + rows * d]);
            }
        }
        let qn = bsh_to_bhsd(&qf, b, s, n, d);
        let bias = match ab {
            Some(ab) => build_bias(node, (b, n, s, tp), Some(ab), None, None, 0.0)?,
            None => None,
        };
        let sink = match head_sink {
            Some(hs) => Some(f32v(hs)),
            None if self.smooth => Some(vec![0.0; n]),
            None => None,
        };
        let sd = Sdpa {
            b,
            hq: n,
            hkv: nk,
            sq: s,
            t: tp,
            d,
            dv: d,
            q: &qn,
            k: &present_k,
            v: &present_v,
            bias: bias.as_deref().map(|x| (x, [n * s * tp, s * tp, tp, 1])),
            scale: self.scale.unwrap_or(1.0 / (d as f32).sqrt()),
            softcap: self.softcap,
            offsets: Some(pasts.iter().map(|&p| p as i64).collect()),
            causal: self.causal,
            // local_window_size w: the current key and the w - 1 before it (causal only).
            left: self.window.filter(|_| self.causal).map(|w| w - 1),
            right: None,
            kv_valid: Some(&totals),
            sink,
            masked: f32::NEG_INFINITY,
        };
        let (y, _) = sd.run(ScoresOut::None);
        let dt = q.dtype();
        let mut out = vec![out_t(bhsd_to_bsh(&y, b, n, s, d), vec![b, s, n * d], dt)];
        if self.n_out > 1 {
            out.push(out_t(present_k, vec![b, nk, tp, d], dt));
        }
        if self.n_out > 2 {
            out.push(out_t(present_v, vec![b, nk, tp, d], dt));
        }
        Ok(out)
    }
}

fn build_gqa(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    for unsupported in ["kv_cache_bit_width", "sliding_window_cache", "qk_output"] {
        if attrs::int(n, unsupported, 0)? != 0 {
            return Err(common::bad_attr(
                n,
                unsupported,
                "is not supported by the CPU kernel",
            ));
        }
    }
    let window = attrs::int(n, "local_window_size", -1)?;
    Ok(Box::new(Gqa {
        node: n.describe(),
        heads: heads_attr(ctx, "num_heads")?,
        kv_heads: heads_attr(ctx, "kv_num_heads")?,
        scale: attrs::opt_float(n, "scale")?.filter(|&s| s != 0.0),
        rotary: attrs::int(n, "do_rotary", 0)? != 0,
        interleaved: attrs::int(n, "rotary_interleaved", 0)? != 0,
        window: (window > 0).then_some(window as usize),
        softcap: attrs::float(n, "softcap", 0.0)?,
        smooth: attrs::int(n, "smooth_softmax", 0)? != 0,
        causal: attrs::int(n, "causal", 1)? != 0,
        n_out: n.outputs.len(),
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("com.microsoft", "MultiHeadAttention", 1, build_mha);
    r.register("com.microsoft", "Attention", 1, build_ms_attention);
    r.register("com.microsoft", "GroupQueryAttention", 1, build_gqa);
}
