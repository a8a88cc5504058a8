//! Dropout: identity with an all-true mask at inference; in training mode (opset 12+
//! `training_mode` input, or `is_test = 0` before opset 7) elements are dropped with
//! probability `ratio` and the rest scaled by 1 / (1 - ratio), from a seeded generator.

use super::common::{self, invalid};
use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::sync::atomic::{AtomicU64, Ordering};

struct DropoutKernel {
    node: String,
    opset: u64,
    ratio_attr: f64,
    training_attr: bool,
    seed: Option<i64>,
    n_outputs: usize,
    /// Advances per run so that unseeded runs differ.
    counter: AtomicU64,
}

impl CpuKernel for DropoutKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        common::require_float(node, "Dropout", x.dtype())?;
        let (ratio, training) = if self.opset >= 12 {
            let ratio = match optional_tensor_input(node, inputs, 1)? {
                Some(t) => *common::floats_of(node, t, "ratio")?
                    .first()
                    .ok_or_else(|| invalid(node, "ratio must be a scalar"))?,
                None => 0.5,
            };
            let training = match optional_tensor_input(node, inputs, 2)? {
                Some(t) => {
                    common::ints_of(node, t, "training_mode")?
                        .first()
                        .copied()
                        .unwrap_or(0)
                        != 0
                }
                None => false,
            };
            (ratio, training)
        } else {
            (self.ratio_attr, self.training_attr)
        };
        if !(0.0..=1.0).contains(&ratio) {
            return Err(invalid(node, format!("ratio {ratio} must be in [0, 1]")));
        }
        let n = x.numel();
        let (y, mask) = if !training || ratio == 0.0 {
            (x.clone(), vec![true; n])
        } else {
            let run = self.counter.fetch_add(1, Ordering::Relaxed);
            let mut s =
                (self.seed.unwrap_or(0x9E37_79B9) as u64) ^ run.wrapping_mul(0xD1B5_4A32_D192_ED03);
            let mask: Vec<bool> = (0..n)
                .map(|_| {
                    s = s
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((s >> 11) as f64 / (1u64 << 53) as f64) >= ratio
                })
                .collect();
            let scale = if ratio < 1.0 {
                1.0 / (1.0 - ratio)
            } else {
                0.0
            };
            let xv = x.to_f64_vec().unwrap_or_default();
            let yv: Vec<f64> = xv
                .iter()
                .zip(&mask)
                .map(|(&v, &m)| if m { v * scale } else { 0.0 })
                .collect();
            let y = match x.dtype() {
                DataType::Float64 => Tensor::from_vec(x.shape().to_vec(), yv),
                d => common::tensor_from_f32(
                    d,
                    x.shape().to_vec(),
                    yv.into_iter().map(|v| v as f32).collect(),
                ),
            };
            (y, mask)
        };
        let mut out = vec![Value::Tensor(y)];
        if self.n_outputs > 1 {
            let m = if self.opset >= 10 {
                Tensor::from_bools(x.shape().to_vec(), &mask)
            } else {
                let v: Vec<f32> = mask.iter().map(|&b| b as u8 as f32).collect();
                common::tensor_from_f32(x.dtype(), x.shape().to_vec(), v)
            };
            out.push(Value::Tensor(m));
        }
        Ok(out)
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    Ok(Box::new(DropoutKernel {
        node: n.describe(),
        opset: ctx.opset,
        ratio_attr: attrs::float(n, "ratio", 0.5)? as f64,
        training_attr: ctx.opset < 7 && attrs::int(n, "is_test", 0)? == 0 && n.outputs.len() > 1,
        seed: attrs::opt_int(n, "seed")?,
        n_outputs: n.outputs.len(),
        counter: AtomicU64::new(0),
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 6, 7, 10, 12, 13, 22] {
        r.register("", "Dropout", since, build);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::*;

    #[test]
    fn inference_identity_and_training_scale() {
        let x = rand(1000, 81, 0.5, 1.5);
        let xt = Tensor::from_vec(vec![1000], f32s(&x));
        let node = node("Dropout", 3, 2, vec![]);
        let out = run(build, &node, 13, &[Some(xt.clone())]).unwrap();
        assert_eq!(out[0].data::<f32>(), xt.data::<f32>());
        assert!(out[1].data::<u8>().iter().all(|&m| m == 1));
        let out = run(
            build,
            &node,
            13,
            &[
                Some(xt),
                Some(Tensor::scalar(0.25f32)),
                Some(Tensor::from_bools(vec![], &[true])),
            ],
        )
        .unwrap();
        let (y, m) = (out[0].data::<f32>(), out[1].data::<u8>());
        let kept = m.iter().filter(|&&b| b == 1).count();
        assert!((650..850).contains(&kept), "kept {kept}");
        for i in 0..1000 {
            let want = if m[i] == 1 { x[i] / 0.75 } else { 0.0 };
            assert!((y[i] as f64 - want).abs() < 1e-5);
        }
    }
}
