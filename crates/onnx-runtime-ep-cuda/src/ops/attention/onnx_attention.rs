//! ONNX Attention (opsets 23, 24 and 25): Q, K, V as 3-D (B, S, heads * head_size, with the
//! q_num_heads / kv_num_heads attributes) or 4-D (B, heads, S, head_size) tensors, grouped
//! query attention (kv heads dividing the query heads), an additive or boolean attn_mask
//! broadcast over [B, q_heads, S_q, total] (its key axis may be shorter: missing keys are
//! hidden), is_causal, scale, softcap, past_key / past_value concatenated into present_key /
//! present_value, the optional 4th output (qk_matmul_output_mode), nonpad_kv_seqlen (24) and
//! the sliding windows left_window_size / right_window_size (25). float, double, float16,
//! bfloat16; every output has Q's dtype (as the CPU provider writes them).
//!
//! The present outputs are written by one concat kernel each; the attention reads the keys
//! from the past and new tensors directly. The 4th output is a separate (unfused) pass.

use super::sdpa::{mask_strides, Mask, Problem, Sdpa, Sink, View4};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::sync::Arc;

struct AttentionKernel {
    base: Base,
    sdpa: Sdpa,
    scale: Option<f32>,
    causal: bool,
    q_heads: Option<usize>,
    kv_heads: Option<usize>,
    softcap: f32,
    qk_mode: i64,
    left: i64,
    right: i64,
}

/// The shapes of one call.
struct Plan {
    dtype: DataType,
    three_d: bool,
    b: usize,
    hq: usize,
    hkv: usize,
    sq: usize,
    skv: usize,
    past: usize,
    d: usize,
    dv: usize,
}

impl Plan {
    fn t(&self) -> usize {
        self.past + self.skv
    }
}

impl AttentionKernel {
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<Plan> {
        let base = &self.base;
        let q = base.req(inputs, 0)?;
        let k = base.req(inputs, 1)?;
        let v = base.req(inputs, 2)?;
        let dtype = q.dtype;
        self.sdpa.check(base, dtype, 0, 0)?;
        if k.dtype != dtype {
            return Err(base.err(format!("K has dtype {} but Q has {dtype}", k.dtype)));
        }
        if v.dtype != dtype {
            return Err(base.unsupported(
                v.dtype,
                format!("the CUDA Attention takes V of Q's dtype ({dtype})"),
            ));
        }
        let rank = q.rank();
        if k.rank() != rank || v.rank() != rank || !(rank == 3 || rank == 4) {
            return Err(base.err(format!(
                "Q {:?}, K {:?} and V {:?} must all be 3-D or all 4-D",
                q.shape, k.shape, v.shape
            )));
        }
        let b = q.shape[0];
        let (hq, hkv, sq, skv, d, dk, dv);
        if rank == 3 {
            let (Some(qh), Some(kh)) = (self.q_heads, self.kv_heads) else {
                return Err(base.err(
                    "3-D inputs need the q_num_heads and kv_num_heads attributes".to_string(),
                ));
            };
            hq = qh;
            hkv = kh;
            if q.shape[2] % hq != 0 || k.shape[2] % hkv != 0 || v.shape[2] % hkv != 0 {
                return Err(base.err(format!(
                    "hidden sizes Q {}, K {}, V {} must divide by the head counts ({hq} query, \
                     {hkv} kv heads)",
                    q.shape[2], k.shape[2], v.shape[2]
                )));
            }
            sq = q.shape[1];
            skv = k.shape[1];
            d = q.shape[2] / hq;
            dk = k.shape[2] / hkv;
            dv = v.shape[2] / hkv;
            if v.shape[1] != skv {
                return Err(base.err(format!(
                    "K {:?} and V {:?} must have the same sequence length",
                    k.shape, v.shape
                )));
            }
        } else {
            hq = q.shape[1];
            hkv = k.shape[1];
            sq = q.shape[2];
            skv = k.shape[2];
            d = q.shape[3];
            dk = k.shape[3];
            dv = v.shape[3];
            if v.shape[1] != hkv || v.shape[2] != skv {
                return Err(base.err(format!(
                    "K {:?} and V {:?} must agree on kv heads and sequence length",
                    k.shape, v.shape
                )));
            }
        }
        if dk != d || hkv == 0 || hq % hkv != 0 || k.shape[0] != b || v.shape[0] != b {
            return Err(base.err(format!(
                "Q {:?}, K {:?}, V {:?} do not agree on batch, head size or head grouping (the \
                 {hq} query heads must be a multiple of the {hkv} kv heads)",
                q.shape, k.shape, v.shape
            )));
        }
        let past = match (base.input(inputs, 4), base.input(inputs, 5)) {
            (Some(pk), Some(pv)) => {
                let p = pk.shape.get(2).copied().unwrap_or(0);
                if pk.shape != [b, hkv, p, d] || pv.shape != [b, hkv, p, dv] {
                    return Err(base.err(format!(
                        "past_key {:?} / past_value {:?} must be [batch, kv_heads, past, \
                         head_size] = [{b}, {hkv}, past, {d}] / [{b}, {hkv}, past, {dv}]",
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
        let t = past + skv;
        if let Some(n) = base.input(inputs, 6) {
            if past > 0 {
                return Err(base.err(
                    "nonpad_kv_seqlen describes an external cache; it cannot be combined with \
                     past_key/past_value",
                ));
            }
            if n.numel() != b {
                return Err(base.err(format!(
                    "nonpad_kv_seqlen {:?} must have one value per batch ({b})",
                    n.shape
                )));
            }
            if n.dtype != DataType::Int64 {
                return Err(base.unsupported(
                    n.dtype,
                    "the CUDA Attention reads nonpad_kv_seqlen as int64",
                ));
            }
        }
        if let Some(m) = base.input(inputs, 3) {
            if m.dtype != DataType::Bool && !m.dtype.is_float() && !m.dtype.is_integer() {
                return Err(base.unsupported(m.dtype, "attn_mask must be bool or numeric"));
            }
            let ms = m.shape;
            if ms.is_empty() || ms.len() > 4 || ms[ms.len() - 1] > t {
                return Err(base.err(format!(
                    "attn_mask {ms:?} does not broadcast to [{b}, {hq}, {sq}, {t}] (its last \
                     axis may be at most the {t} keys)"
                )));
            }
            mask_strides(base, ms, m.strides, [b, hq, sq], "attn_mask")?;
        }
        self.sdpa.check(base, dtype, d, dv)?;
        Ok(Plan {
            dtype,
            three_d: rank == 3,
            b,
            hq,
            hkv,
            sq,
            skv,
            past,
            d,
            dv,
        })
    }

    fn types(&self, p: &Plan) -> OutputTypes {
        let y = if p.three_d {
            vec![p.b, p.sq, p.hq * p.dv]
        } else {
            vec![p.b, p.hq, p.sq, p.dv]
        };
        let t = p.t();
        let all = [
            y,
            vec![p.b, p.hkv, t, p.d],
            vec![p.b, p.hkv, t, p.dv],
            vec![p.b, p.hq, p.sq, t],
        ];
        all.into_iter()
            .take(self.base.outputs.clamp(1, 4))
            .map(|s| (p.dtype, s))
            .collect()
    }
}

impl Kernel for AttentionKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let plan = self.plan(inputs)?;
        Ok(self.types(&plan))
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let plan = self.plan(inputs)?;
        base.expect_outputs(outputs, &self.types(&plan))?;
        let (q, k, v) = (
            base.req(inputs, 0)?,
            base.req(inputs, 1)?,
            base.req(inputs, 2)?,
        );
        let (qv, kv, vv) = if plan.three_d {
            (
                View4::bsh(ptr_of(q), q.strides, plan.d),
                View4::bsh(ptr_of(k), k.strides, plan.d),
                View4::bsh(ptr_of(v), v.strides, plan.dv),
            )
        } else {
            (
                View4::bhsd(ptr_of(q), q.strides),
                View4::bhsd(ptr_of(k), k.strides),
                View4::bhsd(ptr_of(v), v.strides),
            )
        };
        let past_kv = match (base.input(inputs, 4), base.input(inputs, 5)) {
            (Some(pk), Some(pv)) if plan.past > 0 => Some((
                View4::bhsd(ptr_of(pk), pk.strides),
                View4::bhsd(ptr_of(pv), pv.strides),
            )),
            _ => None,
        };
        let mask = match base.input(inputs, 3) {
            Some(m) => {
                let strides = mask_strides(
                    base,
                    m.shape,
                    m.strides,
                    [plan.b, plan.hq, plan.sq],
                    "attn_mask",
                )?;
                let len = m.shape[m.shape.len() - 1];
                Some(if m.dtype == DataType::Bool {
                    Mask::Bool {
                        ptr: ptr_of(m),
                        strides,
                        len,
                    }
                } else {
                    Mask::Additive {
                        ptr: ptr_of(m),
                        code: m.dtype.onnx_code(),
                        strides,
                        len,
                    }
                })
            }
            None => None,
        };
        let out = &outputs[0];
        let ov = if plan.three_d {
            View4::bsh(mut_ptr_of(out), out.strides, plan.dv)
        } else {
            View4::bhsd(mut_ptr_of(out), out.strides)
        };
        let problem = Problem {
            dtype: plan.dtype,
            b: plan.b,
            hq: plan.hq,
            hkv: plan.hkv,
            sq: plan.sq,
            skv: plan.skv,
            past: plan.past,
            d: plan.d,
            dv: plan.dv,
            q: qv,
            k: kv,
            v: vv,
            past_kv,
            out: ov,
            mask,
            kpm: None,
            nonpad: base.input(inputs, 6).map(ptr_of),
            scale: self
                .scale
                .map_or(1.0 / (plan.d as f64).sqrt(), |s| s as f64),
            softcap: self.softcap as f64,
            filter: 0.0,
            causal: self.causal,
            left: self.left,
            right: self.right,
            contrib_causal: false,
            seqlens: None,
            sink: Sink::None,
        };
        let dims = |width| (plan.b, plan.hkv, plan.past, plan.skv, width);
        if outputs.len() > 1 {
            let o = &outputs[1];
            let present = View4::bhsd(mut_ptr_of(o), o.strides);
            self.sdpa.concat(
                base,
                plan.dtype,
                past_kv.map(|p| p.0),
                kv,
                dims(plan.d),
                present,
            )?;
        }
        if outputs.len() > 2 {
            let o = &outputs[2];
            let present = View4::bhsd(mut_ptr_of(o), o.strides);
            self.sdpa.concat(
                base,
                plan.dtype,
                past_kv.map(|p| p.1),
                vv,
                dims(plan.dv),
                present,
            )?;
        }
        if outputs.len() > 3 {
            let o = &outputs[3];
            let mode = match self.qk_mode {
                0 | 1 => 0,
                2 => 1,
                _ => 2,
            };
            let s = istrides(o.strides);
            self.sdpa.scores(
                base,
                &problem,
                mut_ptr_of(o),
                [s[0], s[1], s[2], s[3]],
                mode,
            )?;
        }
        self.sdpa.run(base, &problem)
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn attention(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let heads = |name: &str| -> EpResult<Option<usize>> {
        match attr_int(node, name)? {
            Some(v) if v < 1 => Err(EpError::invalid_attribute(node, name, "must be positive")),
            v => Ok(v.map(|v| v as usize)),
        }
    };
    let window = |name: &str| -> EpResult<i64> {
        match attr_int(node, name)?.unwrap_or(-1) {
            v if v < -1 => Err(EpError::invalid_attribute(
                node,
                name,
                format!("{v} is neither -1 (unbounded) nor a nonnegative window"),
            )),
            v => Ok(v),
        }
    };
    let base = Base::new(rt, node);
    let sdpa = Sdpa::load(&base)?;
    Ok(Box::new(AttentionKernel {
        left: window("left_window_size")?,
        right: window("right_window_size")?,
        scale: attr_float(node, "scale")?,
        causal: attr_int(node, "is_causal")?.unwrap_or(0) != 0,
        q_heads: heads("q_num_heads")?,
        kv_heads: heads("kv_num_heads")?,
        softcap: attr_float(node, "softcap")?.unwrap_or(0.0),
        qk_mode: attr_int(node, "qk_matmul_output_mode")?.unwrap_or(0),
        base,
        sdpa,
    }))
}

pub fn register(r: &mut Registry) {
    for since in [23, 24, 25] {
        r.register("", "Attention", since, attention);
    }
}
