//! CausalConvWithState (opset 27): depthwise causal 1-D convolution over
//! `concat(past_state or zeros, input)` along the last axis, with optional bias and fused
//! SiLU; `present_state` is the last k - 1 positions of that concatenation.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid};
use crate::{attrs, CpuRegistry, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

struct CausalConv {
    node: String,
    silu: bool,
}

fn require(node: &str, dtype: DataType) -> Result<(), EpError> {
    match dtype {
        DataType::Float32 | DataType::Float16 | DataType::BFloat16 => Ok(()),
        d => Err(common::unsupported(
            node,
            "CausalConvWithState",
            d,
            "float, float16 or bfloat16",
        )),
    }
}

impl CpuKernel for CausalConv {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let w = tensor_input(node, inputs, 1)?;
        let bias = optional_tensor_input(node, inputs, 2)?;
        let past = optional_tensor_input(node, inputs, 3)?;
        require(node, x.dtype())?;
        for t in [Some(w), bias, past].into_iter().flatten() {
            if t.dtype() != x.dtype() {
                return Err(invalid(
                    node,
                    format!("all inputs must be {}, got {}", x.dtype(), t.dtype()),
                ));
            }
        }
        let [b, c, l] = *x.shape() else {
            return Err(invalid(
                node,
                format!(
                    "input must be (batch, channels, length), got {:?}",
                    x.shape()
                ),
            ));
        };
        let k = match *w.shape() {
            [wc, 1, k] if wc == c && k >= 1 => k,
            _ => {
                return Err(invalid(
                    node,
                    format!("weight {:?} must be ({c}, 1, k) with k >= 1", w.shape()),
                ))
            }
        };
        if let Some(bt) = bias {
            if bt.shape() != [c] {
                return Err(invalid(
                    node,
                    format!("bias {:?} must be [{c}]", bt.shape()),
                ));
            }
        }
        if let Some(p) = past {
            if p.shape() != [b, c, k - 1] {
                return Err(invalid(
                    node,
                    format!("past_state {:?} must be [{b}, {c}, {}]", p.shape(), k - 1),
                ));
            }
        }
        let xv: Vec<f32> = common::float_vec(x).unwrap_or_default();
        let wv: Vec<f32> = common::float_vec(w).unwrap_or_default();
        let bv: Option<Vec<f32>> = bias.and_then(common::float_vec);
        let pv: Option<Vec<f32>> = past.and_then(common::float_vec);
        let plen = k - 1 + l;
        let mut y = vec![0.0f32; b * c * l];
        let mut present = vec![0.0f32; b * c * (k - 1)];
        let mut padded = vec![0.0f32; plen];
        for bc in 0..b * c {
            let ch = bc % c;
            if let Some(p) = &pv {
                padded[..k - 1].copy_from_slice(&p[bc * (k - 1)..(bc + 1) * (k - 1)]);
            } else {
                padded[..k - 1].fill(0.0);
            }
            padded[k - 1..].copy_from_slice(&xv[bc * l..(bc + 1) * l]);
            let wk = &wv[ch * k..(ch + 1) * k];
            for t in 0..l {
                let mut s = bv.as_ref().map_or(0.0, |b| b[ch]);
                for j in 0..k {
                    s += wk[j] * padded[t + j];
                }
                y[bc * l + t] = if self.silu { s / (1.0 + (-s).exp()) } else { s };
            }
            present[bc * (k - 1)..(bc + 1) * (k - 1)].copy_from_slice(&padded[plen - (k - 1)..]);
        }
        Ok(vec![
            Value::Tensor(common::tensor_from_f32(x.dtype(), vec![b, c, l], y)),
            Value::Tensor(common::tensor_from_f32(
                x.dtype(),
                vec![b, c, k - 1],
                present,
            )),
        ])
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let silu = match attrs::string(n, "activation", "none")?.as_str() {
        "none" => false,
        "silu" | "swish" => true,
        other => {
            return Err(common::bad_attr(
                n,
                "activation",
                format!("'{other}' is not none, silu or swish"),
            ))
        }
    };
    Ok(Box::new(CausalConv {
        node: n.describe(),
        silu,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "CausalConvWithState", 27, build);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use crate::Tensor;
    use onnx_runtime_ir::Attribute;

    /// float64 reference loop over concat(past, x), with SiLU, length shorter than k - 1.
    #[test]
    fn matches_loop_with_state_and_silu() {
        let (b, c, l, k) = (2usize, 3usize, 2usize, 4usize);
        let x = rand(b * c * l, 1, -1.0, 1.0);
        let w = rand(c * k, 2, -1.0, 1.0);
        let bias = rand(c, 3, -1.0, 1.0);
        let past = rand(b * c * (k - 1), 4, -1.0, 1.0);
        let n = node(
            "CausalConvWithState",
            4,
            2,
            vec![("activation", Attribute::String("silu".into()))],
        );
        let out = run(
            build,
            &n,
            27,
            &[
                Some(Tensor::from_vec(vec![b, c, l], f32s(&x))),
                Some(Tensor::from_vec(vec![c, 1, k], f32s(&w))),
                Some(Tensor::from_vec(vec![c], f32s(&bias))),
                Some(Tensor::from_vec(vec![b, c, k - 1], f32s(&past))),
            ],
        )
        .unwrap();
        let (mut y, mut st) = (vec![], vec![]);
        for bc in 0..b * c {
            let ch = bc % c;
            let mut p: Vec<f64> = past[bc * (k - 1)..(bc + 1) * (k - 1)].to_vec();
            p.extend_from_slice(&x[bc * l..(bc + 1) * l]);
            for t in 0..l {
                let s: f64 = bias[ch] + (0..k).map(|j| w[ch * k + j] * p[t + j]).sum::<f64>();
                y.push(s / (1.0 + (-s).exp()));
            }
            st.extend_from_slice(&p[p.len() - (k - 1)..]);
        }
        assert_close(out[0].data::<f32>(), &y, 1e-5);
        assert_close(out[1].data::<f32>(), &st, 1e-6);
    }
}
