//! LinearAttention (opset 27): recurrent linear attention over packed (B, T, H*D) inputs with
//! a (B, H_kv, d_k, d_v) state, run token by token in f32. Update rules: `linear`, `gated`
//! (state decayed by exp(decay)), `delta` and `gated_delta` (the write is
//! beta * (v - S^T k)). Query heads share KV heads in groups (GQA).

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

struct LinearAttention {
    node: String,
    hq: usize,
    hkv: usize,
    scale: f32,
    gating: bool,
    delta: bool,
}

fn floats(node: &str, t: &Tensor) -> Result<Vec<f32>, EpError> {
    match t.dtype() {
        DataType::Float32 | DataType::Float16 | DataType::BFloat16 => {
            Ok(common::float_vec(t).unwrap_or_default())
        }
        d => Err(common::unsupported(
            node,
            "LinearAttention",
            d,
            "float, float16 or bfloat16",
        )),
    }
}

impl CpuKernel for LinearAttention {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let q = tensor_input(node, inputs, 0)?;
        let k = tensor_input(node, inputs, 1)?;
        let v = tensor_input(node, inputs, 2)?;
        let past = optional_tensor_input(node, inputs, 3)?;
        let decay = optional_tensor_input(node, inputs, 4)?;
        let beta = optional_tensor_input(node, inputs, 5)?;
        let (hq, hkv) = (self.hq, self.hkv);
        for (name, t) in [("query", q), ("key", k), ("value", v)] {
            if t.rank() != 3 {
                return Err(invalid(
                    node,
                    format!("{name} must be (B, T, H*D), got {:?}", t.shape()),
                ));
            }
        }
        let (b, t) = (q.shape()[0], q.shape()[1]);
        if q.shape()[2] % hq != 0 || v.shape()[2] % hkv != 0 {
            return Err(invalid(
                node,
                "query/value last dims must divide by their head counts",
            ));
        }
        let (dk, dv) = (q.shape()[2] / hq, v.shape()[2] / hkv);
        if k.shape() != [b, t, hkv * dk] || v.shape()[..2] != [b, t] {
            return Err(invalid(
                node,
                format!(
                    "key {:?} / value {:?} do not match query {:?}",
                    k.shape(),
                    v.shape(),
                    q.shape()
                ),
            ));
        }
        if self.gating != decay.is_some() || self.delta != beta.is_some() {
            return Err(invalid(
                node,
                "decay is required exactly for gated rules and beta exactly for delta rules",
            ));
        }
        let dec = match decay {
            Some(d) if d.shape() == [b, t, hkv] => Some((floats(node, d)?, false)),
            Some(d) if d.shape() == [b, t, hkv * dk] => Some((floats(node, d)?, true)),
            Some(d) => {
                return Err(invalid(
                    node,
                    format!(
                        "decay {:?} must be [{b}, {t}, {hkv}] or [{b}, {t}, {}]",
                        d.shape(),
                        hkv * dk
                    ),
                ))
            }
            None => None,
        };
        let bet = match beta {
            Some(x) if x.shape() == [b, t, hkv] || x.shape() == [b, t, 1] => {
                Some((floats(node, x)?, x.shape()[2]))
            }
            Some(x) => {
                return Err(invalid(
                    node,
                    format!(
                        "beta {:?} must be [{b}, {t}, {hkv}] or [{b}, {t}, 1]",
                        x.shape()
                    ),
                ))
            }
            None => None,
        };
        let (qv, kv, vv) = (floats(node, q)?, floats(node, k)?, floats(node, v)?);
        let ssz = dk * dv;
        let mut state = match past {
            Some(p) if p.shape() == [b, hkv, dk, dv] => floats(node, p)?,
            Some(p) => {
                return Err(invalid(
                    node,
                    format!(
                        "past_state {:?} must be [{b}, {hkv}, {dk}, {dv}]",
                        p.shape()
                    ),
                ))
            }
            None => vec![0.0; b * hkv * ssz],
        };
        let state_dtype = past.map_or(q.dtype(), |p| p.dtype());
        let scale = if self.scale == 0.0 {
            1.0 / (dk as f32).sqrt()
        } else {
            self.scale
        };
        let group = hq / hkv;
        let mut out = vec![0.0f32; b * t * hq * dv];
        let mut upd = vec![0.0f32; dv];
        for bi in 0..b {
            for ti in 0..t {
                let row = bi * t + ti;
                for h in 0..hkv {
                    let s = &mut state[(bi * hkv + h) * ssz..][..ssz];
                    let kt = &kv[(row * hkv + h) * dk..][..dk];
                    let vt = &vv[(row * hkv + h) * dv..][..dv];
                    if let Some((g, per_key)) = &dec {
                        for i in 0..dk {
                            let e = if *per_key {
                                g[(row * hkv + h) * dk + i]
                            } else {
                                g[row * hkv + h]
                            }
                            .exp();
                            s[i * dv..(i + 1) * dv].iter_mut().for_each(|x| *x *= e);
                        }
                    }
                    upd.copy_from_slice(vt);
                    if let Some((bt, last)) = &bet {
                        let bval = bt[row * last + if *last == 1 { 0 } else { h }];
                        for (m, u) in upd.iter_mut().enumerate() {
                            let retrieved: f32 = (0..dk).map(|i| s[i * dv + m] * kt[i]).sum();
                            *u = bval * (*u - retrieved);
                        }
                    }
                    for i in 0..dk {
                        for m in 0..dv {
                            s[i * dv + m] += kt[i] * upd[m];
                        }
                    }
                    for hh in h * group..(h + 1) * group {
                        let qt = &qv[(row * hq + hh) * dk..][..dk];
                        let o = &mut out[(row * hq + hh) * dv..][..dv];
                        for (m, om) in o.iter_mut().enumerate() {
                            *om = scale * (0..dk).map(|i| qt[i] * s[i * dv + m]).sum::<f32>();
                        }
                    }
                }
            }
        }
        Ok(vec![
            Value::Tensor(common::tensor_from_f32(q.dtype(), vec![b, t, hq * dv], out)),
            Value::Tensor(common::tensor_from_f32(
                state_dtype,
                vec![b, hkv, dk, dv],
                state,
            )),
        ])
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let hq = attrs::int(n, "q_num_heads", 0)?;
    let hkv = attrs::int(n, "kv_num_heads", 0)?;
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        return Err(common::bad_attr(
            n,
            "q_num_heads",
            format!("q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv}); both are required"),
        ));
    }
    let (gating, delta) = match attrs::string(n, "update_rule", "gated_delta")?.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(common::bad_attr(
                n,
                "update_rule",
                format!("'{other}' is not linear, gated, delta or gated_delta"),
            ))
        }
    };
    Ok(Box::new(LinearAttention {
        node: n.describe(),
        hq: hq as usize,
        hkv: hkv as usize,
        scale: attrs::float(n, "scale", 0.0)?,
        gating,
        delta,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "LinearAttention", 27, build);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    /// float64 reference of the gated_delta recurrence with GQA (4 query heads, 2 KV heads).
    #[test]
    fn gated_delta_gqa_matches_recurrence() {
        let (b, t, hq, hkv, dk, dv) = (1usize, 3usize, 4usize, 2usize, 2usize, 3usize);
        let q = rand(b * t * hq * dk, 1, -1.0, 1.0);
        let k = rand(b * t * hkv * dk, 2, -1.0, 1.0);
        let v = rand(b * t * hkv * dv, 3, -1.0, 1.0);
        let g = rand(b * t * hkv, 4, -0.5, 0.0);
        let be = rand(b * t * hkv, 5, 0.0, 1.0);
        let n = node(
            "LinearAttention",
            6,
            2,
            vec![
                ("q_num_heads", Attribute::Int(4)),
                ("kv_num_heads", Attribute::Int(2)),
            ],
        );
        let ten = |s: Vec<usize>, v: &[f64]| Some(Tensor::from_vec(s, f32s(v)));
        let out = run(
            build,
            &n,
            27,
            &[
                ten(vec![b, t, hq * dk], &q),
                ten(vec![b, t, hkv * dk], &k),
                ten(vec![b, t, hkv * dv], &v),
                None,
                ten(vec![b, t, hkv], &g),
                ten(vec![b, t, hkv], &be),
            ],
        )
        .unwrap();
        let mut s = vec![vec![0.0f64; dk * dv]; hkv];
        let mut want = vec![0.0; t * hq * dv];
        for ti in 0..t {
            for h in 0..hkv {
                let e = g[ti * hkv + h].exp();
                s[h].iter_mut().for_each(|x| *x *= e);
                for m in 0..dv {
                    let r: f64 = (0..dk)
                        .map(|i| s[h][i * dv + m] * k[(ti * hkv + h) * dk + i])
                        .sum();
                    let u = be[ti * hkv + h] * (v[(ti * hkv + h) * dv + m] - r);
                    for i in 0..dk {
                        s[h][i * dv + m] += k[(ti * hkv + h) * dk + i] * u;
                    }
                }
                for hh in 2 * h..2 * h + 2 {
                    for m in 0..dv {
                        want[(ti * hq + hh) * dv + m] = (0..dk)
                            .map(|i| q[(ti * hq + hh) * dk + i] * s[h][i * dv + m])
                            .sum::<f64>()
                            / (dk as f64).sqrt();
                    }
                }
            }
        }
        assert_close(out[0].data::<f32>(), &want, 1e-5);
        assert_close(out[1].data::<f32>(), &s.concat(), 1e-5);
    }
}
