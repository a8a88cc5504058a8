//! com.microsoft GroupQueryAttention with the CPU provider's semantics: query [B, S, N*H]
//! with key / value [B, S, Nk*H] or packed QKV [B, S, (N + 2 Nk) * H], past_key / past_value
//! [B, Nk, P, H], seqlens_k [B] (valid keys - 1 per batch, read on the device) and
//! total_sequence_length (read on the host: it sets the present length), optional rotary
//! embedding of Q and K (cos / sin caches, position_ids or the per-batch past length),
//! local_window_size, softcap, attention_bias, head_sink / smooth_softmax.
//!
//! present_key / present_value [B, Nk, T, H] hold, per batch, the kept past rows, the new rows
//! after them (keys rotated) and zeros beyond; one launch (gqa_prep in rotary.cu) writes both
//! and the rotated queries. The attention then reads the keys from the present caches with
//! per-batch query offsets and valid-key counts. Without present outputs
//! the caches go to a workspace the kernel keeps.

use super::rotary::{gqa_prep_functions, rows_view, CacheView, GqaPrepParams, RotaryParams};
use super::sdpa::{
    i32_of, mask_strides, width_of, Mask, Problem, Scratch, Sdpa, SeqLens, Sink, View4,
};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{DataType, Node};
use std::collections::HashMap;
use std::sync::Arc;

struct GqaKernel {
    base: Base,
    sdpa: Sdpa,
    prep: HashMap<DataType, Function>,
    host: HostReads,
    heads: usize,
    kv_heads: usize,
    scale: Option<f32>,
    do_rotary: bool,
    interleaved: bool,
    window: Option<usize>,
    softcap: f32,
    smooth: bool,
    causal: bool,
    q_rot: Scratch,
    present_k: Scratch,
    present_v: Scratch,
}

/// A rotary cache as (rows, row stride, column stride).
type CacheRows = (usize, i64, i64);

struct Plan {
    dtype: DataType,
    b: usize,
    s: usize,
    d: usize,
    packed: bool,
    pbuf: usize,
    first_prompt: bool,
    /// Keys the attention reads per batch row (the mask's last axis).
    keys: usize,
    /// The present caches' length: `keys`, or the past buffer's when that is longer (the
    /// shared max-length buffer of past_present_share_buffer, the prompt step included), as
    /// onnxruntime and the CPU provider do.
    tp: usize,
    /// Rotary: (cos, sin) caches as (rows, row stride, column stride), half width.
    rot: Option<(CacheRows, CacheRows, usize)>,
}

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

impl GqaKernel {
    fn plan(&self, inputs: &[TensorView<'_>], total_seq: usize) -> EpResult<Plan> {
        let base = &self.base;
        let (n, nk) = (self.heads, self.kv_heads);
        let q = base.req(inputs, 0)?;
        let dtype = q.dtype;
        self.sdpa.check(base, dtype, 0, 0)?;
        if q.rank() != 3 || !n.is_multiple_of(nk) {
            return Err(base.err(format!(
                "query {:?} must be 3-D and num_heads {n} a multiple of kv_num_heads {nk}",
                q.shape
            )));
        }
        let (b, s) = (q.shape[0], q.shape[1]);
        let (d, packed) = match base.input(inputs, 1) {
            Some(k) => {
                let v = base
                    .input(inputs, 2)
                    .ok_or_else(|| base.err("value is required with key"))?;
                base.same_dtype(dtype, k.dtype, "key")?;
                base.same_dtype(dtype, v.dtype, "value")?;
                if q.shape[2] % n != 0 {
                    return Err(base.err(format!(
                        "query hidden size {} must divide by num_heads {n}",
                        q.shape[2]
                    )));
                }
                let d = q.shape[2] / n;
                let want = [b, s, nk * d];
                if k.shape != want || v.shape != want {
                    return Err(base.err(format!(
                        "key {:?} and value {:?} must be {want:?} (batch, sequence, kv heads x \
                         head size)",
                        k.shape, v.shape
                    )));
                }
                (d, false)
            }
            None => {
                let w = n + 2 * nk;
                if q.shape[2] % w != 0 {
                    return Err(base.err(format!(
                        "packed QKV hidden size {} must divide by num_heads + 2 x kv_num_heads \
                         = {w}",
                        q.shape[2]
                    )));
                }
                (q.shape[2] / w, true)
            }
        };
        let seqlens = base.req(inputs, 5)?;
        if seqlens.numel() != b || !seqlens.dtype.is_integer() {
            return Err(base.err(format!(
                "seqlens_k {:?} ({}) must hold one integer per batch ({b})",
                seqlens.shape, seqlens.dtype
            )));
        }
        let pbuf = match (base.input(inputs, 3), base.input(inputs, 4)) {
            (Some(pk), Some(pv)) => {
                let p = pk.shape.get(2).copied().unwrap_or(0);
                let want = [b, nk, p, d];
                if pk.shape != want || pv.shape != want {
                    return Err(base.err(format!(
                        "past_key {:?} / past_value {:?} must be [{b}, {nk}, past, {d}]",
                        pk.shape, pv.shape
                    )));
                }
                base.same_dtype(dtype, pk.dtype, "past_key")?;
                base.same_dtype(dtype, pv.dtype, "past_value")?;
                p
            }
            (None, None) => 0,
            _ => return Err(base.err("past_key and past_value go together")),
        };
        let first_prompt = pbuf == 0 || total_seq == s;
        let keys = if first_prompt {
            total_seq.max(s)
        } else {
            pbuf.max(total_seq)
        };
        let tp = keys.max(pbuf);
        let rot = if self.do_rotary {
            let (Some(cos), Some(sin)) = (base.input(inputs, 7), base.input(inputs, 8)) else {
                return Err(base.err("do_rotary needs cos_cache and sin_cache"));
            };
            base.same_dtype(dtype, cos.dtype, "cos_cache")?;
            base.same_dtype(dtype, sin.dtype, "sin_cache")?;
            let half = cos.shape.last().copied().unwrap_or(0);
            if cos.rank() != 2 || sin.shape != cos.shape || half == 0 || 2 * half > d {
                return Err(base.err(format!(
                    "cos_cache {:?} / sin_cache {:?} must be [max_seq, rotary_dim / 2] with \
                     rotary_dim at most the head size {d}",
                    cos.shape, sin.shape
                )));
            }
            let view = |t: &TensorView<'_>| {
                rows_view(t.shape, t.strides).ok_or_else(|| {
                    base.unsupported(dtype, "the rotary caches need rows of one stride")
                })
            };
            Some((view(cos)?, view(sin)?, half))
        } else {
            None
        };
        if let Some(ab) = base.input(inputs, 10) {
            attention_bias_mask(base, ab, (b, n, s, keys))?;
        }
        if let Some(hs) = base.input(inputs, 11) {
            if hs.numel() != n || !hs.dtype.is_float() {
                return Err(base.err(format!(
                    "head_sink {:?} must hold one float per query head ({n})",
                    hs.shape
                )));
            }
            if n > 1 && !hs.is_contiguous() {
                return Err(base.unsupported(
                    hs.dtype,
                    "the CUDA GroupQueryAttention reads head_sink contiguously",
                ));
            }
        }
        self.sdpa.check(base, dtype, d, d)?;
        Ok(Plan {
            dtype,
            b,
            s,
            d,
            packed,
            pbuf,
            first_prompt,
            keys,
            tp,
            rot,
        })
    }

    fn types(&self, p: &Plan) -> OutputTypes {
        let present = vec![p.b, self.kv_heads, p.tp, p.d];
        [vec![p.b, p.s, self.heads * p.d], present.clone(), present]
            .into_iter()
            .take(self.base.outputs.clamp(1, 3))
            .map(|s| (p.dtype, s))
            .collect()
    }

    fn total_seq(&self, values: &HostValues) -> EpResult<usize> {
        let v = values
            .get(6)
            .and_then(|v| v.as_ref())
            .and_then(|v| v.first().copied())
            .ok_or_else(|| self.base.err("total_sequence_length must hold one value"))?;
        Ok(v.max(0) as usize)
    }

    /// The rotary parameters that rotate the queries `x` (a [b, s, heads, d] view) into the
    /// contiguous `y`; without rotary, only the positions' fields (n = 0: nothing rotates).
    fn rotary_params(
        &self,
        plan: &Plan,
        inputs: &[TensorView<'_>],
        x: View4,
        heads: usize,
        y: CuPtr,
    ) -> EpResult<RotaryParams> {
        let base = &self.base;
        let (b, s, d) = (plan.b, plan.s, plan.d);
        let seqlens = base.req(inputs, 5)?;
        let Some(((rows, crow, ccol), (_, srow, scol), half)) = plan.rot else {
            return Ok(RotaryParams {
                err: base.rt.err_ptr(),
                b: b as i32,
                s: s as i32,
                id: base.id as i32,
                seqlens: ptr_of(seqlens),
                seqlens_code: seqlens.dtype.onnx_code(),
                first_prompt: plan.first_prompt as i32,
                ..Default::default()
            });
        };
        let n = b * s * heads * d;
        let cos = base.req(inputs, 7)?;
        let sin = base.req(inputs, 8)?;
        let ids = base.input(inputs, 9).filter(|p| p.numel() == b * s);
        let [xb, xh, xs, xd] = x.strides;
        let mut p = RotaryParams {
            x: x.ptr,
            y,
            cos: ptr_of(cos),
            sin: ptr_of(sin),
            pos: ids.map_or(0, ptr_of),
            xb,
            xs,
            xh,
            xd,
            yb: (s * heads * d) as i64,
            ys: (heads * d) as i64,
            yh: d as i64,
            yd: 1,
            cp: crow,
            cc: ccol,
            np: srow,
            nc: scol,
            n: n as i64,
            err: base.rt.err_ptr(),
            b: b as i32,
            s: s as i32,
            h: heads as i32,
            d: d as i32,
            rot: (2 * half) as i32,
            interleaved: self.interleaved as i32,
            pos_mode: if ids.is_some() { 4 } else { 3 },
            rows: rows.min(i32::MAX as usize) as i32,
            pos_code: ids.map_or(7, |p| p.dtype.onnx_code()),
            id: base.id as i32,
            seqlens: ptr_of(seqlens),
            seqlens_code: seqlens.dtype.onnx_code(),
            first_prompt: plan.first_prompt as i32,
            ..Default::default()
        };
        if let Some(ids) = ids {
            let st = istrides(ids.strides);
            (p.pb, p.ps) = match ids.shape {
                [_, _] => (st[0], st[1]),
                _ if ids.is_contiguous() => (s as i64, 1),
                _ => {
                    return Err(base.unsupported(
                        plan.dtype,
                        "position_ids of this layout runs on the CPU provider",
                    ))
                }
            };
        }
        Ok(p)
    }

    /// One launch: the rotated queries (`rot`, when the node rotates) and both present caches
    /// from the past buffers and the new keys (rotated) and values `cur`.
    fn prepare(
        &self,
        plan: &Plan,
        inputs: &[TensorView<'_>],
        rot: RotaryParams,
        cur: (View4, View4),
        out: (View4, View4),
    ) -> EpResult<()> {
        let base = &self.base;
        let (b, tp, d) = (plan.b, plan.tp, plan.d);
        if out.0.strides != out.1.strides {
            return Err(base.unsupported(
                plan.dtype,
                "present_key and present_value of different layouts run on the CPU provider",
            ));
        }
        let view = |v: View4| CacheView {
            ptr: v.ptr,
            strides: v.strides,
        };
        let past = |i: usize| match (plan.pbuf, base.input(inputs, i)) {
            (1.., Some(t)) => view(View4::bhsd(ptr_of(t), t.strides)),
            _ => CacheView::default(),
        };
        let (past_k, past_v) = (past(3), past(4));
        // A shared past/present buffer bound in place (the session wrote present into the
        // past's memory): the kept rows are already there, so only the new rows are written
        // and a step moves no cache bytes. Rows past the new ones keep what they held; no
        // attention reads them (each batch reads its seqlens_k + 1 keys).
        let in_place = plan.pbuf == tp
            && past_k.ptr == out.0.ptr
            && past_v.ptr == out.1.ptr
            && past_k.strides == out.0.strides
            && past_v.strides == out.1.strides;
        let rows = if in_place { plan.s } else { tp };
        let npres = b * self.kv_heads * rows * d;
        if rot.n == 0 && npres == 0 {
            return Ok(());
        }
        let mut p = GqaPrepParams {
            rot,
            past_k,
            past_v,
            cur_k: view(cur.0),
            cur_v: view(cur.1),
            out_k: out.0.ptr,
            out_v: out.1.ptr,
            out: out.0.strides,
            npres: npres as i64,
            kv_heads: i32_of(base, self.kv_heads, "kv heads")?,
            pbuf: i32_of(base, plan.pbuf, "past length")?,
            tp: i32_of(base, tp, "present length")?,
            width: i32_of(base, d, "head size")?,
            rotate_k: plan.rot.is_some() as i32,
            in_place: in_place as i32,
        };
        let total = rot.n as u64 + 2 * npres as u64;
        let f = self.prep[&plan.dtype];
        let mut args = [arg(&mut p)];
        // SAFETY: gqa_prep_T(GqaPrepParams) reads the queries, new keys / values, past caches
        // and rotary caches inside their views (positions are range-checked on the device) and
        // writes the contiguous rotated queries and the [b, kv heads, tp, d] present caches.
        unsafe { base.rt.launch(f, total, &mut args) }
    }
}

/// attention_bias [b|1, n|1, s, t] as an additive mask.
fn attention_bias_mask(
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
    let strides = mask_strides(base, sh, ab.strides, [b, n, s], "attention_bias")?;
    Ok(Mask::Additive {
        ptr: ptr_of(ab),
        code: ab.dtype.onnx_code(),
        strides,
        len: t,
    })
}

impl Kernel for GqaKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let values = self.host.peek(&self.base, inputs)?;
        let plan = self.plan(inputs, self.total_seq(&values)?)?;
        Ok(self.types(&plan))
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let values = self.host.values(base, inputs, outputs)?;
        let plan = self.plan(inputs, self.total_seq(&values)?)?;
        base.expect_outputs(outputs, &self.types(&plan))?;
        let w = width_of(plan.dtype);
        let (b, s, d, tp) = (plan.b, plan.s, plan.d, plan.tp);
        let (n, nk) = (self.heads, self.kv_heads);
        let q = base.req(inputs, 0)?;
        let mut qv = View4::bsh(ptr_of(q), q.strides, d);
        let (kv, vv) = if plan.packed {
            let step = (d * q.strides[2]) as i64;
            (
                qv.offset(n as i64 * step, w),
                qv.offset((n + nk) as i64 * step, w),
            )
        } else {
            let (k, v) = (base.req(inputs, 1)?, base.req(inputs, 2)?);
            (
                View4::bsh(ptr_of(k), k.strides, d),
                View4::bsh(ptr_of(v), v.strides, d),
            )
        };
        let yq = match plan.rot {
            Some(_) => self
                .q_rot
                .get(base, (b * s * n * d * w).max(1), "rotated queries")?,
            None => 0,
        };
        let rot = self.rotary_params(&plan, inputs, qv, n, yq)?;
        if plan.rot.is_some() {
            qv = View4::new(yq, [(s * n * d) as i64, d as i64, (n * d) as i64, 1]);
        }
        let seqlens_view = base.req(inputs, 5)?;
        let seqlens = SeqLens {
            ptr: ptr_of(seqlens_view),
            code: seqlens_view.dtype.onnx_code(),
            first_prompt: plan.first_prompt,
        };
        let cache = [(nk * tp * d) as i64, (tp * d) as i64, d as i64, 1];
        let present_view = |idx: usize, scratch: &Scratch| -> EpResult<View4> {
            match outputs.get(idx) {
                Some(o) => Ok(View4::bhsd(mut_ptr_of(o), o.strides)),
                None => Ok(View4::new(
                    scratch.get(base, (b * nk * tp * d * w).max(1), "present cache")?,
                    cache,
                )),
            }
        };
        let pk_out = present_view(1, &self.present_k)?;
        let pv_out = present_view(2, &self.present_v)?;
        self.prepare(&plan, inputs, rot, (kv, vv), (pk_out, pv_out))?;
        let mask = match base.input(inputs, 10) {
            Some(ab) => Some(attention_bias_mask(base, ab, (b, n, s, plan.keys))?),
            None => None,
        };
        let sink = match base.input(inputs, 11) {
            Some(hs) => Sink::Values(ptr_of(hs), hs.dtype.onnx_code()),
            None if self.smooth => Sink::Zero,
            None => Sink::None,
        };
        let out = &outputs[0];
        let problem = Problem {
            dtype: plan.dtype,
            b,
            hq: n,
            hkv: nk,
            sq: s,
            skv: plan.keys,
            past: 0,
            d,
            dv: d,
            q: qv,
            k: pk_out,
            v: pv_out,
            past_kv: None,
            out: View4::bsh(mut_ptr_of(out), out.strides, d),
            mask,
            kpm: None,
            nonpad: None,
            scale: self.scale.map_or(1.0 / (d as f32).sqrt(), |s| s) as f64,
            softcap: self.softcap as f64,
            filter: 0.0,
            causal: self.causal,
            left: match self.window {
                Some(wnd) if self.causal => wnd as i64 - 1,
                _ => -1,
            },
            right: -1,
            contrib_causal: false,
            seqlens: Some(seqlens),
            sink,
        };
        self.sdpa.run(base, &problem)
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }

    /// present_key / present_value in the memory of past_key / past_value: the shared
    /// max-length buffer then gets only the new rows (see `prepare`).
    fn in_place_input(&self, output: usize) -> Option<usize> {
        match output {
            1 => Some(3),
            2 => Some(4),
            _ => None,
        }
    }
}

fn group_query_attention(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    for unsupported in ["kv_cache_bit_width", "sliding_window_cache", "qk_output"] {
        if attr_int(node, unsupported)?.unwrap_or(0) != 0 {
            return Err(EpError::invalid_attribute(
                node,
                unsupported,
                "is not supported (as on the CPU provider)",
            ));
        }
    }
    let window = attr_int(node, "local_window_size")?.unwrap_or(-1);
    let base = Base::new(rt, node);
    let sdpa = Sdpa::load(&base)?;
    let prep = gqa_prep_functions(&base)?;
    let host = HostReads::new(&base, &[6], "total_sequence_length");
    Ok(Box::new(GqaKernel {
        heads: heads_attr(node, "num_heads")?,
        kv_heads: heads_attr(node, "kv_num_heads")?,
        scale: attr_float(node, "scale")?.filter(|&s| s != 0.0),
        do_rotary: attr_int(node, "do_rotary")?.unwrap_or(0) != 0,
        interleaved: attr_int(node, "rotary_interleaved")?.unwrap_or(0) != 0,
        window: (window > 0).then_some(window as usize),
        softcap: attr_float(node, "softcap")?.unwrap_or(0.0),
        smooth: attr_int(node, "smooth_softmax")?.unwrap_or(0) != 0,
        causal: attr_int(node, "causal")?.unwrap_or(1) != 0,
        q_rot: Scratch::new(rt),
        present_k: Scratch::new(rt),
        present_v: Scratch::new(rt),
        host,
        base,
        sdpa,
        prep,
    }))
}

pub fn register(r: &mut Registry) {
    r.register(
        "com.microsoft",
        "GroupQueryAttention",
        1,
        group_query_attention,
    );
}
