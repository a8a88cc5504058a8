//! com.microsoft MultiHeadAttention and Attention on the shared core, with the semantics of
//! the CPU provider (onnxruntime's CPU kernels): masks add `mask_filter_value` (default
//! -10000) rather than -inf, and `unidirectional` gives keys after past + i that value too.
//!
//! MultiHeadAttention: query [B, S, N*H] with key / value [B, L, N*H] (+ the packed bias
//! [Q | K | V] added as they are read), key / value already in BNSH [B, N, L, H] (no bias),
//! packed KV key [B, L, N, 2, H] or packed QKV query [B, S, N, 3, H]; key_padding_mask of
//! lengths [B], [B, T] or [B, S, T]; attention_bias [B|1, N|1, S, T]; past_key / past_value
//! [B, N, P, H] concatenated into present_key / present_value; the optional 4th output holds
//! the softmax probabilities.
//!
//! Attention: input [B, S, D_in] projected by weights [D_in, Q+K+V] (+ bias) with our own
//! tiled GEMM kernel into a workspace the kernel keeps, then attention over the Q, K and V
//! column blocks in place (strided views, no transposes); mask_index as MultiHeadAttention's
//! key padding mask, attention_bias, unidirectional, past [2, B, N, P, H] and present
//! [2, B, N, T, H].

use super::sdpa::{mask_strides, width_of, KeyPadding, Mask, Problem, Scratch, Sdpa, Sink, View4};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{DataType, Node};
use std::sync::Arc;

fn heads_attr(node: &Node, name: &str) -> EpResult<usize> {
    match attr_int(node, name)? {
        Some(v) if v > 0 => Ok(v as usize),
        _ => Err(EpError::invalid_attribute(
            node,
            name,
            "is required and must be positive",
        )),
    }
}

/// The key padding mask (MultiHeadAttention's key_padding_mask, Attention's mask_index):
/// [b] lengths, [b, t] or [b, s, t] with zeros masking.
fn key_padding(
    base: &Base,
    m: &TensorView<'_>,
    (b, s, t): (usize, usize, usize),
    what: &str,
) -> EpResult<KeyPadding> {
    if !(m.dtype.is_integer() || m.dtype.is_float() || m.dtype == DataType::Bool) {
        return Err(base.unsupported(m.dtype, format!("{what} must be numeric")));
    }
    let (ptr, code) = (ptr_of(m), m.dtype.onnx_code());
    let st = istrides(m.strides);
    match m.shape {
        [x] if *x == b => Ok(KeyPadding::Lengths {
            ptr,
            code,
            sb: st[0],
        }),
        [x, y] if *x == b && *y == t => Ok(KeyPadding::PerBatch {
            ptr,
            code,
            sb: st[0],
            st: st[1],
        }),
        [x, y, z] if *x == b && *y == s && *z == t => Ok(KeyPadding::PerQuery {
            ptr,
            code,
            sb: st[0],
            ss: st[1],
            st: st[2],
        }),
        other => Err(base.err(format!(
            "{what} {other:?} must be [batch], [batch, total_seq] or [batch, seq, total_seq] \
             with batch {b}, seq {s} and total_seq {t}"
        ))),
    }
}

/// attention_bias [b|1, n|1, s, t] as an additive mask.
fn attention_bias(
    base: &Base,
    ab: &TensorView<'_>,
    (b, n, s, t): (usize, usize, usize, usize),
) -> EpResult<Mask> {
    if !ab.dtype.is_float() {
        return Err(base.unsupported(ab.dtype, "attention_bias must be a float tensor"));
    }
    let sh = ab.shape;
    if sh.len() != 4 || !(sh[3] == t || sh[3] == 1) {
        return Err(base.err(format!(
            "attention_bias {sh:?} must broadcast to [{b}, {n}, {s}, {t}]"
        )));
    }
    let mut strides = mask_strides(base, sh, ab.strides, [b, n, s], "attention_bias")?;
    if sh[3] == 1 {
        strides[3] = 0;
    }
    Ok(Mask::Additive {
        ptr: ptr_of(ab),
        code: ab.dtype.onnx_code(),
        strides,
        len: t,
    })
}

/// A 1-D bias of at least `need` elements with unit stride.
fn bias_ptr(base: &Base, bias: &TensorView<'_>, dtype: DataType, need: usize) -> EpResult<CuPtrT> {
    base.same_dtype(dtype, bias.dtype, "bias")?;
    if bias.rank() != 1 || bias.shape[0] < need {
        return Err(base.err(format!(
            "bias {:?} must be 1-D with at least {need} values",
            bias.shape
        )));
    }
    if bias.shape[0] > 1 && bias.strides[0] != 1 {
        return Err(base.unsupported(dtype, "the CUDA kernel reads the bias with unit stride"));
    }
    Ok(ptr_of(bias))
}

type CuPtrT = crate::runtime::CuPtr;

// ---- MultiHeadAttention ----

#[derive(Clone, Copy, Debug, PartialEq)]
enum KvLayout {
    /// From the packed QKV query.
    PackedQkv,
    /// key [b, l, n, 2, d].
    PackedKv,
    /// key [b, n, l, d], value [b, n, l, dv].
    Bnsh,
    /// key [b, l, n*d], value [b, l, n*dv] (+ bias).
    Bsh,
}

struct MhaPlan {
    dtype: DataType,
    b: usize,
    n: usize,
    s: usize,
    l: usize,
    p: usize,
    d: usize,
    dv: usize,
    kv: KvLayout,
}

struct MhaKernel {
    base: Base,
    sdpa: Sdpa,
    heads: usize,
    scale: Option<f32>,
    filter: f32,
    causal: bool,
}

impl MhaKernel {
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<MhaPlan> {
        let base = &self.base;
        let n = self.heads;
        let q = base.req(inputs, 0)?;
        let dtype = q.dtype;
        self.sdpa.check(base, dtype, 0, 0)?;
        let key = base.input(inputs, 1);
        let value = base.input(inputs, 2);
        let b = q.shape.first().copied().unwrap_or(0);
        let (s, d, l, dv, kv);
        if q.rank() == 5 {
            let sh = q.shape;
            if sh[2] != n || sh[3] != 3 {
                return Err(base.err(format!(
                    "packed QKV {sh:?} must be [batch, seq, num_heads = {n}, 3, head]"
                )));
            }
            s = sh[1];
            d = sh[4];
            l = s;
            dv = d;
            kv = KvLayout::PackedQkv;
        } else {
            if q.rank() != 3 || q.shape[2] % n != 0 {
                return Err(base.err(format!(
                    "query {:?} must be [batch, seq, num_heads * head] with num_heads {n}",
                    q.shape
                )));
            }
            s = q.shape[1];
            let hid = q.shape[2];
            d = hid / n;
            let key = key.ok_or_else(|| base.err("key is required unless query is packed QKV"))?;
            base.same_dtype(dtype, key.dtype, "key")?;
            match key.rank() {
                5 => {
                    let sh = key.shape;
                    if sh[0] != b || sh[2] != n || sh[3] != 2 || sh[4] != d {
                        return Err(base.err(format!(
                            "packed KV {sh:?} must be [{b}, kv_seq, {n}, 2, {d}]"
                        )));
                    }
                    l = sh[1];
                    dv = d;
                    kv = KvLayout::PackedKv;
                }
                4 => {
                    let value =
                        value.ok_or_else(|| base.err("value is required with a 4-D key"))?;
                    base.same_dtype(dtype, value.dtype, "value")?;
                    let (ks, vs) = (key.shape, value.shape);
                    if value.rank() != 4
                        || ks[0] != b
                        || ks[1] != n
                        || ks[3] != d
                        || vs[0] != b
                        || vs[1] != n
                        || vs[2] != ks[2]
                    {
                        return Err(base.err(format!(
                            "BNSH key {ks:?} / value {vs:?} must be [{b}, {n}, kv_seq, {d}] / \
                             [{b}, {n}, kv_seq, head_v]"
                        )));
                    }
                    l = ks[2];
                    dv = vs[3];
                    kv = KvLayout::Bnsh;
                }
                3 => {
                    let value = value.ok_or_else(|| base.err("value is required"))?;
                    base.same_dtype(dtype, value.dtype, "value")?;
                    let (ks, vs) = (key.shape, value.shape);
                    if ks[0] != b
                        || ks[2] != hid
                        || value.rank() != 3
                        || vs[0] != b
                        || vs[1] != ks[1]
                        || vs[2] % n != 0
                    {
                        return Err(base.err(format!(
                            "key {ks:?} / value {vs:?} must be [{b}, kv_seq, {hid}] / [{b}, \
                             kv_seq, num_heads * head_v]"
                        )));
                    }
                    l = ks[1];
                    dv = vs[2] / n;
                    kv = KvLayout::Bsh;
                }
                _ => {
                    return Err(base.err(format!(
                        "key {:?} must be 3-D, 4-D (BNSH) or 5-D (packed KV)",
                        key.shape
                    )))
                }
            }
            if let Some(bias) = base.input(inputs, 3) {
                let need = if kv == KvLayout::Bsh {
                    2 * hid + n * dv
                } else {
                    hid
                };
                bias_ptr(base, bias, dtype, need)?;
            }
        }
        let p = match (base.input(inputs, 6), base.input(inputs, 7)) {
            (Some(pk), Some(pv)) => {
                let p = pk.shape.get(2).copied().unwrap_or(0);
                if pk.shape != [b, n, p, d] || pv.shape != [b, n, p, dv] {
                    return Err(base.err(format!(
                        "past_key {:?} / past_value {:?} must be [{b}, {n}, past, {d}] / [{b}, \
                         {n}, past, {dv}]",
                        pk.shape, pv.shape
                    )));
                }
                base.same_dtype(dtype, pk.dtype, "past_key")?;
                base.same_dtype(dtype, pv.dtype, "past_value")?;
                p
            }
            _ => 0,
        };
        let t = p + l;
        if let Some(m) = base.input(inputs, 4) {
            key_padding(base, m, (b, s, t), "key_padding_mask")?;
        }
        if let Some(ab) = base.input(inputs, 5) {
            attention_bias(base, ab, (b, n, s, t))?;
        }
        self.sdpa.check(base, dtype, d, dv)?;
        Ok(MhaPlan {
            dtype,
            b,
            n,
            s,
            l,
            p,
            d,
            dv,
            kv,
        })
    }

    fn types(&self, p: &MhaPlan) -> OutputTypes {
        let t = p.p + p.l;
        [
            vec![p.b, p.s, p.n * p.dv],
            vec![p.b, p.n, t, p.d],
            vec![p.b, p.n, t, p.dv],
            vec![p.b, p.n, p.s, t],
        ]
        .into_iter()
        .take(self.base.outputs.clamp(1, 4))
        .map(|s| (p.dtype, s))
        .collect()
    }
}

impl Kernel for MhaKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let plan = self.plan(inputs)?;
        Ok(self.types(&plan))
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let plan = self.plan(inputs)?;
        base.expect_outputs(outputs, &self.types(&plan))?;
        let w = width_of(plan.dtype);
        let (n, d, dv) = (plan.n, plan.d, plan.dv);
        let hid = n * d;
        let q = base.req(inputs, 0)?;
        let bias = base.input(inputs, 3).map(ptr_of);
        let off = |p: CuPtrT, elems: usize| p + (elems * w) as CuPtrT;
        let (qv, kv, vv);
        if plan.kv == KvLayout::PackedQkv {
            let st = istrides(q.strides);
            qv = View4::new(ptr_of(q), [st[0], st[2], st[1], st[4]]);
            kv = qv.offset(st[3], w);
            vv = qv.offset(2 * st[3], w);
        } else {
            let mut v4 = View4::bsh(ptr_of(q), q.strides, d);
            v4.bias = bias.map(|p| (p, d as i64));
            qv = v4;
            let key = base.req(inputs, 1)?;
            match plan.kv {
                KvLayout::PackedKv => {
                    let st = istrides(key.strides);
                    kv = View4::new(ptr_of(key), [st[0], st[2], st[1], st[4]]);
                    vv = kv.offset(st[3], w);
                }
                KvLayout::Bnsh => {
                    let value = base.req(inputs, 2)?;
                    kv = View4::bhsd(ptr_of(key), key.strides);
                    vv = View4::bhsd(ptr_of(value), value.strides);
                }
                _ => {
                    let value = base.req(inputs, 2)?;
                    let mut k4 = View4::bsh(ptr_of(key), key.strides, d);
                    k4.bias = bias.map(|p| (off(p, hid), d as i64));
                    let mut v4 = View4::bsh(ptr_of(value), value.strides, dv);
                    v4.bias = bias.map(|p| (off(p, 2 * hid), dv as i64));
                    kv = k4;
                    vv = v4;
                }
            }
        }
        let past_kv = match (base.input(inputs, 6), base.input(inputs, 7)) {
            (Some(pk), Some(pv)) if plan.p > 0 => Some((
                View4::bhsd(ptr_of(pk), pk.strides),
                View4::bhsd(ptr_of(pv), pv.strides),
            )),
            _ => None,
        };
        let t = plan.p + plan.l;
        let kpm = match base.input(inputs, 4) {
            Some(m) => Some(key_padding(
                base,
                m,
                (plan.b, plan.s, t),
                "key_padding_mask",
            )?),
            None => None,
        };
        let mask = match base.input(inputs, 5) {
            Some(ab) => Some(attention_bias(base, ab, (plan.b, n, plan.s, t))?),
            None => None,
        };
        let out = &outputs[0];
        let problem = Problem {
            dtype: plan.dtype,
            b: plan.b,
            hq: n,
            hkv: n,
            sq: plan.s,
            skv: plan.l,
            past: plan.p,
            d,
            dv,
            q: qv,
            k: kv,
            v: vv,
            past_kv,
            out: View4::bsh(mut_ptr_of(out), out.strides, dv),
            mask,
            kpm,
            nonpad: None,
            scale: self.scale.map_or(1.0 / (d as f32).sqrt(), |s| s) as f64,
            softcap: 0.0,
            filter: self.filter as f64,
            causal: false,
            left: -1,
            right: -1,
            contrib_causal: self.causal,
            seqlens: None,
            sink: Sink::None,
        };
        let dims = |width| (plan.b, n, plan.p, plan.l, width);
        if outputs.len() > 1 {
            let o = &outputs[1];
            let present = View4::bhsd(mut_ptr_of(o), o.strides);
            self.sdpa
                .concat(base, plan.dtype, past_kv.map(|p| p.0), kv, dims(d), present)?;
        }
        if outputs.len() > 2 {
            let o = &outputs[2];
            let present = View4::bhsd(mut_ptr_of(o), o.strides);
            self.sdpa.concat(
                base,
                plan.dtype,
                past_kv.map(|p| p.1),
                vv,
                dims(dv),
                present,
            )?;
        }
        if outputs.len() > 3 {
            let o = &outputs[3];
            let s = istrides(o.strides);
            self.sdpa
                .scores(base, &problem, mut_ptr_of(o), [s[0], s[1], s[2], s[3]], 2)?;
        }
        self.sdpa.run(base, &problem)
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn multi_head_attention(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let base = Base::new(rt, node);
    let sdpa = Sdpa::load(&base)?;
    Ok(Box::new(MhaKernel {
        heads: heads_attr(node, "num_heads")?,
        scale: attr_float(node, "scale")?.filter(|&s| s != 0.0),
        filter: attr_float(node, "mask_filter_value")?.unwrap_or(-10000.0),
        causal: attr_int(node, "unidirectional")?.unwrap_or(0) != 0,
        base,
        sdpa,
    }))
}

// ---- Attention (fused projection) ----

struct MsPlan {
    dtype: DataType,
    b: usize,
    s: usize,
    din: usize,
    n: usize,
    p: usize,
    hq: usize,
    hk: usize,
    hv: usize,
}

impl MsPlan {
    fn total(&self) -> usize {
        self.hq + self.hk + self.hv
    }
}

struct MsAttentionKernel {
    base: Base,
    sdpa: Sdpa,
    proj: Scratch,
    heads: usize,
    scale: Option<f32>,
    filter: f32,
    causal: bool,
    sizes: Option<[usize; 3]>,
}

impl MsAttentionKernel {
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<MsPlan> {
        let base = &self.base;
        let n = self.heads;
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let dtype = x.dtype;
        self.sdpa.check(base, dtype, 0, 0)?;
        base.same_dtype(dtype, w.dtype, "weights")?;
        if x.rank() != 3 || w.rank() != 2 || w.shape[0] != x.shape[2] {
            return Err(base.err(format!(
                "input {:?} and weights {:?} must be [b, s, din] and [din, q+k+v]",
                x.shape, w.shape
            )));
        }
        let (b, s, din) = (x.shape[0], x.shape[1], x.shape[2]);
        let total = w.shape[1];
        let [hq, hk, hv] = self.sizes.unwrap_or([total / 3; 3]);
        if hq + hk + hv != total || hq % n != 0 || hv % n != 0 || hq != hk {
            return Err(base.err(format!(
                "qkv_hidden_sizes ({hq}, {hk}, {hv}) do not match the weights' {total} columns \
                 or num_heads {n} (Q and K sizes must be equal and divide by num_heads)"
            )));
        }
        if let Some(bias) = base.input(inputs, 2) {
            bias_ptr(base, bias, dtype, total)?;
        }
        let (d, dv) = (hq / n, hv / n);
        let p = match base.input(inputs, 4) {
            Some(pt) => {
                let sh = pt.shape;
                if sh.len() != 5 || sh[0] != 2 || sh[1] != b || sh[2] != n || sh[4] != d || d != dv
                {
                    return Err(base.err(format!(
                        "past {sh:?} must be [2, batch {b}, heads {n}, past, head {d}] (with \
                         equal Q/K and V head sizes)"
                    )));
                }
                base.same_dtype(dtype, pt.dtype, "past")?;
                sh[3]
            }
            None => 0,
        };
        let t = p + s;
        if let Some(m) = base.input(inputs, 3) {
            key_padding(base, m, (b, s, t), "mask_index")?;
        }
        if let Some(ab) = base.input(inputs, 5) {
            attention_bias(base, ab, (b, n, s, t))?;
        }
        self.sdpa.check(base, dtype, d, dv)?;
        Ok(MsPlan {
            dtype,
            b,
            s,
            din,
            n,
            p,
            hq,
            hk,
            hv,
        })
    }

    fn types(&self, p: &MsPlan) -> OutputTypes {
        let (d, dv) = (p.hq / p.n, p.hv / p.n);
        [vec![p.b, p.s, p.n * dv], vec![2, p.b, p.n, p.p + p.s, d]]
            .into_iter()
            .take(self.base.outputs.clamp(1, 2))
            .map(|s| (p.dtype, s))
            .collect()
    }
}

impl Kernel for MsAttentionKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let plan = self.plan(inputs)?;
        Ok(self.types(&plan))
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let plan = self.plan(inputs)?;
        base.expect_outputs(outputs, &self.types(&plan))?;
        let wd = width_of(plan.dtype);
        let (b, s, n) = (plan.b, plan.s, plan.n);
        let (d, dv) = (plan.hq / n, plan.hv / n);
        let total = plan.total();
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let m = b * s;
        let y = self
            .proj
            .get(base, (m * total * wd).max(1), "Q/K/V projection")?;
        let xs = istrides(x.strides);
        let ws = istrides(w.strides);
        let bias = base.input(inputs, 2).map(|bv| (ptr_of(bv), 1i64));
        self.sdpa.proj(
            base,
            plan.dtype,
            (ptr_of(x), [xs[0], xs[1], xs[2]]),
            (ptr_of(w), [ws[0], ws[1]]),
            bias,
            y,
            (m, total, plan.din, s),
        )?;
        let row = (s * total) as i64;
        let tot = total as i64;
        let qv = View4::new(y, [row, d as i64, tot, 1]);
        let kv = View4::new(y, [row, d as i64, tot, 1]).offset(plan.hq as i64, wd);
        let vv = View4::new(y, [row, dv as i64, tot, 1]).offset((plan.hq + plan.hk) as i64, wd);
        let past_kv = match base.input(inputs, 4) {
            Some(pt) if plan.p > 0 => {
                let st = istrides(pt.strides);
                let k4 = View4::new(ptr_of(pt), [st[1], st[2], st[3], st[4]]);
                Some((k4, k4.offset(st[0], wd)))
            }
            _ => None,
        };
        let t = plan.p + s;
        let kpm = match base.input(inputs, 3) {
            Some(mi) => Some(key_padding(base, mi, (b, s, t), "mask_index")?),
            None => None,
        };
        let mask = match base.input(inputs, 5) {
            Some(ab) => Some(attention_bias(base, ab, (b, n, s, t))?),
            None => None,
        };
        if outputs.len() > 1 {
            let o = &outputs[1];
            let st = istrides(o.strides);
            let k4 = View4::new(mut_ptr_of(o), [st[1], st[2], st[3], st[4]]);
            let v4 = k4.offset(st[0], wd);
            let dims = (b, n, plan.p, s, d);
            self.sdpa
                .concat(base, plan.dtype, past_kv.map(|p| p.0), kv, dims, k4)?;
            self.sdpa
                .concat(base, plan.dtype, past_kv.map(|p| p.1), vv, dims, v4)?;
        }
        let out = &outputs[0];
        let problem = Problem {
            dtype: plan.dtype,
            b,
            hq: n,
            hkv: n,
            sq: s,
            skv: s,
            past: plan.p,
            d,
            dv,
            q: qv,
            k: kv,
            v: vv,
            past_kv,
            out: View4::bsh(mut_ptr_of(out), out.strides, dv),
            mask,
            kpm,
            nonpad: None,
            scale: self.scale.map_or(1.0 / (d as f32).sqrt(), |s| s) as f64,
            softcap: 0.0,
            filter: self.filter as f64,
            causal: false,
            left: -1,
            right: -1,
            contrib_causal: self.causal,
            seqlens: None,
            sink: Sink::None,
        };
        self.sdpa.run(base, &problem)
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn ms_attention(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    for unsupported in ["do_rotary", "past_present_share_buffer"] {
        if attr_int(node, unsupported)?.unwrap_or(0) != 0 {
            return Err(EpError::invalid_attribute(
                node,
                unsupported,
                "is not supported (as on the CPU provider); use MultiHeadAttention or \
                 GroupQueryAttention",
            ));
        }
    }
    let sizes = match attr_ints(node, "qkv_hidden_sizes")? {
        None => None,
        Some(v) if v.len() == 3 && v.iter().all(|&x| x >= 0) => {
            Some([v[0] as usize, v[1] as usize, v[2] as usize])
        }
        Some(_) => {
            return Err(EpError::invalid_attribute(
                node,
                "qkv_hidden_sizes",
                "must have 3 nonnegative values",
            ))
        }
    };
    let base = Base::new(rt, node);
    let sdpa = Sdpa::load(&base)?;
    Ok(Box::new(MsAttentionKernel {
        proj: Scratch::new(rt),
        heads: heads_attr(node, "num_heads")?,
        scale: attr_float(node, "scale")?.filter(|&s| s != 0.0),
        filter: attr_float(node, "mask_filter_value")?.unwrap_or(-10000.0),
        causal: attr_int(node, "unidirectional")?.unwrap_or(0) != 0,
        sizes,
        base,
        sdpa,
    }))
}

pub fn register(r: &mut Registry) {
    r.register(
        "com.microsoft",
        "MultiHeadAttention",
        1,
        multi_head_attention,
    );
    r.register("com.microsoft", "Attention", 1, ms_attention);
}
