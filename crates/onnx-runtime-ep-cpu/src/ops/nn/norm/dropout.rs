//! Dropout: identity with an all-true mask at inference; in training mode (opset 12+
//! `training_mode` input, or `is_test = 0` before opset 7) elements are dropped with
//! probability `ratio` and the rest scaled by 1 / (1 - ratio), from a seeded generator.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid};
use crate::ops::nn::training::mt19937::Mt19937;
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

struct DropoutKernel {
    node: String,
    opset: u64,
    ratio_attr: f64,
    training_attr: bool,
    n_outputs: usize,
    /// The mask stream: MT19937 from the `seed` attribute (numpy's `RandomState(seed)`, as the
    /// ONNX reference draws it), or from a fresh seed per kernel. It advances across runs.
    rng: Mutex<Mt19937>,
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
            // Kept where the uniform draw reaches the ratio, as `uniform(0, 1) >= ratio`.
            let mask: Vec<bool> = {
                let mut rng = self.rng.lock().unwrap_or_else(|e| e.into_inner());
                (0..n).map(|_| rng.next_f64() >= ratio).collect()
            };
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

/// The `seed` attribute as numpy takes it (its low 32 bits), or a fresh seed per kernel.
fn seed_of(n: &onnx_runtime_ir::Node) -> Result<u32, EpError> {
    static FRESH: AtomicU64 = AtomicU64::new(0x5EED_D809);
    Ok(match attrs::opt_int(n, "seed")? {
        Some(s) => s as u32,
        None => {
            let clock = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos() as u64);
            let k = FRESH.fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::Relaxed);
            ((clock ^ k) ^ ((clock ^ k) >> 32)) as u32
        }
    })
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    Ok(Box::new(DropoutKernel {
        node: n.describe(),
        opset: ctx.opset,
        ratio_attr: attrs::float(n, "ratio", 0.5)? as f64,
        training_attr: ctx.opset < 7 && attrs::int(n, "is_test", 0)? == 0 && n.outputs.len() > 1,
        n_outputs: n.outputs.len(),
        rng: Mutex::new(Mt19937::new(seed_of(n)?)),
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 6, 7, 10, 12, 13, 22] {
        r.register("", "Dropout", since, build);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;

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

    /// With `seed = 7` and ratio 0.4 the first run keeps what numpy's
    /// `np.random.seed(7); np.random.uniform(0, 1, 8) >= 0.4` keeps (printed by numpy 2), the
    /// ONNX reference's rule; a second run continues the stream.
    #[test]
    fn seeded_training_mask_follows_numpy() {
        use onnx_runtime_ir::Attribute;
        let keep = [false, true, true, true, true, true, true, false];
        let x: Vec<f32> = (1..=8).map(|v| v as f32).collect();
        let node = node("Dropout", 3, 2, vec![("seed", Attribute::Int(7))]);
        let k = build(&BuildContext::new(&node, 13)).unwrap();
        let inputs = [
            Value::Tensor(Tensor::from_vec(vec![8], x.clone())),
            Value::Tensor(Tensor::scalar(0.4f32)),
            Value::Tensor(Tensor::from_bools(vec![], &[true])),
        ];
        let refs: Vec<Option<&Value>> = inputs.iter().map(Some).collect();
        let out = k.run(&refs).unwrap();
        let (y, m) = (
            out[0].as_tensor().unwrap().data::<f32>().to_vec(),
            out[1].as_tensor().unwrap().data::<u8>().to_vec(),
        );
        for i in 0..8 {
            assert_eq!(m[i] == 1, keep[i], "mask element {i}");
            let want = if keep[i] { x[i] as f64 / 0.6 } else { 0.0 };
            assert!((y[i] as f64 - want).abs() < 1e-5, "element {i}");
        }
        let again = k.run(&refs).unwrap();
        assert_ne!(
            again[1].as_tensor().unwrap().data::<u8>(),
            &m[..],
            "a second run draws anew"
        );
    }
}
