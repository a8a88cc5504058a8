//! ai.onnx.preview::FlexAttention (opset 1): rank-4 scaled dot-product attention with GQA
//! and optional `score_mod` (after Q·K^T·scale) and `prob_mod` (after softmax) subgraphs.
//! Scores and softmax run in f64; the tensors handed to the modifiers, and the rounding
//! between stages, use `softmax_precision` (f32 for non-double inputs by default).

use crate::kernel::{tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::attention::subgraph::Subgraph;
use crate::ops::nn::common::{self, invalid};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{Attribute, DataType};

struct Flex {
    node: String,
    scale: Option<f32>,
    precision: Option<DataType>,
    score_mod: Option<Subgraph>,
    prob_mod: Option<Subgraph>,
}

fn to_prec(dtype: DataType, shape: Vec<usize>, v: Vec<f64>) -> Tensor {
    match dtype {
        DataType::Float64 => Tensor::from_vec(shape, v),
        d => common::tensor_from_f32(d, shape, v.into_iter().map(|x| x as f32).collect()),
    }
}

impl Flex {
    /// Rounds `v` through `prec` (or, with a modifier, runs it) and returns f64 values.
    fn stage(
        &self,
        m: Option<&Subgraph>,
        prec: DataType,
        shape: &[usize],
        v: Vec<f64>,
    ) -> Result<Vec<f64>, EpError> {
        let t = to_prec(prec, shape.to_vec(), v);
        let t = match m {
            Some(g) => {
                let out = g.run(t)?;
                if out.shape() != shape {
                    return Err(invalid(
                        &self.node,
                        format!(
                            "modifier returned shape {:?}, expected {shape:?}",
                            out.shape()
                        ),
                    ));
                }
                out
            }
            None => t,
        };
        common::floats_of(&self.node, &t, "modifier output")
    }
}

impl CpuKernel for Flex {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let q = tensor_input(node, inputs, 0)?;
        let k = tensor_input(node, inputs, 1)?;
        let v = tensor_input(node, inputs, 2)?;
        common::require_float(node, "FlexAttention", q.dtype())?;
        if k.dtype() != q.dtype() || v.dtype() != q.dtype() {
            return Err(invalid(node, "Q, K and V must share one float type"));
        }
        let (&[b, hq, l, e], &[bk, hkv, s, ek], &[bv, hv, sv, ev]) =
            (q.shape(), k.shape(), v.shape())
        else {
            return Err(invalid(
                node,
                format!(
                    "Q {:?}, K {:?}, V {:?} must be rank 4",
                    q.shape(),
                    k.shape(),
                    v.shape()
                ),
            ));
        };
        if bk != b || bv != b || hv != hkv || sv != s || ek != e || hkv == 0 || hq % hkv != 0 {
            return Err(invalid(
                node,
                format!("Q {:?}, K {:?}, V {:?} are inconsistent (q heads must be a multiple of kv heads)", q.shape(), k.shape(), v.shape()),
            ));
        }
        let prec = self.precision.unwrap_or(if q.dtype() == DataType::Float64 {
            DataType::Float64
        } else {
            DataType::Float32
        });
        let scale = self.scale.map_or(1.0 / (e as f64).sqrt(), |s| s as f64);
        let (qv, kv, vv) = (
            common::floats_of(node, q, "Q")?,
            common::floats_of(node, k, "K")?,
            common::floats_of(node, v, "V")?,
        );
        let group = hq / hkv;
        let mut scores = vec![0.0f64; b * hq * l * s];
        for bi in 0..b {
            for h in 0..hq {
                let kh = bi * hkv + h / group;
                for i in 0..l {
                    let qr = &qv[((bi * hq + h) * l + i) * e..][..e];
                    for j in 0..s {
                        let kr = &kv[(kh * s + j) * e..][..e];
                        let d: f64 = qr.iter().zip(kr).map(|(a, c)| a * c).sum();
                        scores[((bi * hq + h) * l + i) * s + j] = d * scale;
                    }
                }
            }
        }
        let shape = [b, hq, l, s];
        let mut p = self.stage(self.score_mod.as_ref(), prec, &shape, scores)?;
        for row in p.chunks_mut(s.max(1)) {
            let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let mut sum = 0.0;
            for x in row.iter_mut() {
                *x = (*x - m).exp();
                sum += *x;
            }
            row.iter_mut().for_each(|x| *x /= sum);
        }
        let p = self.stage(self.prob_mod.as_ref(), prec, &shape, p)?;
        let mut y = vec![0.0f64; b * hq * l * ev];
        for bi in 0..b {
            for h in 0..hq {
                let kh = bi * hkv + h / group;
                for i in 0..l {
                    let pr = &p[((bi * hq + h) * l + i) * s..][..s];
                    let yr = &mut y[((bi * hq + h) * l + i) * ev..][..ev];
                    for (j, &pj) in pr.iter().enumerate() {
                        let vr = &vv[(kh * s + j) * ev..][..ev];
                        yr.iter_mut().zip(vr).for_each(|(o, x)| *o += pj * x);
                    }
                }
            }
        }
        Ok(vec![Value::Tensor(to_prec(
            q.dtype(),
            vec![b, hq, l, ev],
            y,
        ))])
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let precision = match attrs::opt_int(n, "softmax_precision")? {
        None => None,
        Some(code) => match i32::try_from(code).ok().and_then(DataType::from_onnx) {
            Some(
                d
                @ (DataType::Float32 | DataType::Float64 | DataType::Float16 | DataType::BFloat16),
            ) => Some(d),
            _ => {
                return Err(common::bad_attr(
                    n,
                    "softmax_precision",
                    format!("{code} is not float, double, float16 or bfloat16"),
                ))
            }
        },
    };
    let sub = |name: &str| -> Result<Option<Subgraph>, EpError> {
        match n.attribute(name) {
            None => Ok(None),
            Some(Attribute::Graph(g)) => Subgraph::build(&node, name, g, 26).map(Some),
            Some(_) => Err(common::bad_attr(n, name, "must be a graph")),
        }
    };
    Ok(Box::new(Flex {
        node: node.clone(),
        scale: attrs::opt_float(n, "scale")?,
        precision,
        score_mod: sub("score_mod")?,
        prob_mod: sub("prob_mod")?,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("ai.onnx.preview", "FlexAttention", 1, build);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;

    /// float64 reference: softmax(Q K^T / sqrt(E)) V with 2 query heads sharing 1 KV head.
    #[test]
    fn gqa_matches_reference() {
        let (b, hq, l, e, s, ev) = (1usize, 2usize, 3usize, 4usize, 5usize, 2usize);
        let q = rand(b * hq * l * e, 1, -1.0, 1.0);
        let k = rand(s * e, 2, -1.0, 1.0);
        let v = rand(s * ev, 3, -1.0, 1.0);
        let nd = node("FlexAttention", 3, 1, vec![]);
        let out = run(
            build,
            &nd,
            1,
            &[
                Some(Tensor::from_vec(vec![b, hq, l, e], q.clone())),
                Some(Tensor::from_vec(vec![b, 1, s, e], k.clone())),
                Some(Tensor::from_vec(vec![b, 1, s, ev], v.clone())),
            ],
        )
        .unwrap();
        let mut want = vec![];
        for row in 0..hq * l {
            let sc: Vec<f64> = (0..s)
                .map(|j| (0..e).map(|d| q[row * e + d] * k[j * e + d]).sum::<f64>() / 2.0)
                .collect();
            let m = sc.iter().cloned().fold(f64::MIN, f64::max);
            let z: f64 = sc.iter().map(|x| (x - m).exp()).sum();
            for c in 0..ev {
                want.push(
                    (0..s)
                        .map(|j| (sc[j] - m).exp() / z * v[j * ev + c])
                        .sum::<f64>(),
                );
            }
        }
        let got: Vec<f32> = out[0].data::<f64>().iter().map(|&x| x as f32).collect();
        assert_close(&got, &want, 1e-6);
    }
}
