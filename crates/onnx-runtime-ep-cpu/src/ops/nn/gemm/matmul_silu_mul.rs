//! `MatMulSiluMul` in the runtime's own domain ([`crate::INTERNAL_DOMAIN`]): the gated
//! feed-forward `silu(A @ Wg) * (A @ Wu)` a device session writes when both products are
//! MatMuls of the same A with constant 2-D weights of one shape (inputs: A, Wg `[K, N]`, Wu
//! `[K, N]`). Here it runs as the graph it replaces: the two products in A's type, QuickGelu's
//! kernel (alpha 1) on the gate, then the product, so a CPU fallback gives the unfused graph's
//! values exactly.

use crate::kernel::{tensor_input, BuildContext, CpuKernel};
use crate::ops::math::activation::quick_gelu_kernel;
use crate::ops::nn::common::{self, invalid};
use crate::ops::nn::gemm::matmul::{matmul_tensor, PackedWeights};
use crate::ops::nn::norm::channel_norm::recast;
use crate::{CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;

/// The op's name in [`crate::INTERNAL_DOMAIN`].
pub const OP: &str = "MatMulSiluMul";

struct SiluMul {
    node: String,
    /// The gate's and the up product's weights, packed when they are constants.
    packed: [Option<PackedWeights>; 2],
    /// com.microsoft QuickGelu with alpha 1.
    silu: Box<dyn CpuKernel>,
}

impl SiluMul {
    fn product(&self, which: usize, a: &Tensor, w: &Tensor) -> Result<Tensor, EpError> {
        if let Some(p) = &self.packed[which] {
            if let Some(out) = p.matmul(&self.node, a, w, 1.0) {
                return out;
            }
        }
        matmul_tensor(&self.node, OP, a, w, false, false, 1.0)
    }
}

impl CpuKernel for SiluMul {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let a = tensor_input(node, inputs, 0)?;
        let wg = tensor_input(node, inputs, 1)?;
        let wu = tensor_input(node, inputs, 2)?;
        if wg.rank() != 2 || wg.shape() != wu.shape() || wg.dtype() != wu.dtype() {
            return Err(invalid(
                node,
                format!(
                    "{OP} takes two 2-D weights of one shape and type, got {} {:?} and {} {:?}",
                    wg.dtype(),
                    wg.shape(),
                    wu.dtype(),
                    wu.shape()
                ),
            ));
        }
        let dtype = a.dtype();
        let g = Value::Tensor(self.product(0, a, wg)?);
        let u = self.product(1, a, wu)?;
        let s = self.silu.run(&[Some(&g)])?;
        let Some(Value::Tensor(s)) = s.first() else {
            return Err(invalid(node, "the SiLU of the gate is not a tensor"));
        };
        let not_float = || invalid(node, format!("{OP} computes float types, got {dtype}"));
        let sv = common::float_vec::<f32>(s).ok_or_else(not_float)?;
        let uv = common::float_vec::<f32>(&u).ok_or_else(not_float)?;
        // The product of two values of A's type is exact in float32 (half types) before the
        // one rounding, as Mul's.
        let y: Vec<f32> = sv.iter().zip(&uv).map(|(s, u)| s * u).collect();
        Ok(vec![Value::Tensor(recast(
            Tensor::from_vec(s.shape().to_vec(), y),
            dtype,
        ))])
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node;
    if node.inputs.len() != 3 {
        return Err(invalid(
            &node.describe(),
            format!(
                "{OP} takes 3 inputs (A, the gate's and the up product's weights), got {}",
                node.inputs.len()
            ),
        ));
    }
    Ok(Box::new(SiluMul {
        node: node.describe(),
        packed: [
            PackedWeights::from_constant(ctx, 1, false),
            PackedWeights::from_constant(ctx, 2, false),
        ],
        silu: quick_gelu_kernel(ctx, 1.0),
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register(crate::INTERNAL_DOMAIN, OP, 1, build);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::DataType;

    fn silu(x: f64) -> f64 {
        x / (1.0 + (-x).exp())
    }

    /// Against float64 math on the same values, with the weights constant (packed) or not.
    #[test]
    fn gated_product_matches_float64_math() {
        let (m, k, n) = (3, 5, 4);
        let av: Vec<f32> = (0..m * k)
            .map(|i| ((i * 7 % 11) as f32 - 5.0) / 8.0)
            .collect();
        let gv: Vec<f32> = (0..k * n)
            .map(|i| ((i * 5 % 13) as f32 - 6.0) / 9.0)
            .collect();
        let uv: Vec<f32> = (0..k * n)
            .map(|i| ((i * 3 % 7) as f32 - 3.0) / 5.0)
            .collect();
        let a = Value::Tensor(Tensor::from_vec(vec![1, m, k], av.clone()));
        let g = Value::Tensor(Tensor::from_vec(vec![k, n], gv.clone()));
        let u = Value::Tensor(Tensor::from_vec(vec![k, n], uv.clone()));
        let nd = node(OP, 3, 1, vec![]);
        for constant in [false, true] {
            let consts = [None, constant.then_some(&g), constant.then_some(&u)];
            let kernel = build(&BuildContext {
                constant_inputs: &consts,
                ..BuildContext::new(&nd, 1)
            })
            .unwrap();
            let out = kernel.run(&[Some(&a), Some(&g), Some(&u)]).unwrap();
            let t = out[0].as_tensor().unwrap();
            assert_eq!(t.shape(), [1, m, n]);
            assert_eq!(t.dtype(), DataType::Float32);
            for r in 0..m {
                for c in 0..n {
                    let dot = |w: &[f32]| -> f64 {
                        (0..k)
                            .map(|i| av[r * k + i] as f64 * w[i * n + c] as f64)
                            .sum()
                    };
                    let want = silu(dot(&gv)) * dot(&uv);
                    let got = t.data::<f32>()[r * n + c] as f64;
                    assert!((got - want).abs() < 1e-5, "({r}, {c}): {got} vs {want}");
                }
            }
        }
    }

    #[test]
    fn weights_of_two_shapes_are_an_error_naming_the_node() {
        let nd = node(OP, 3, 1, vec![]);
        let kernel = build(&BuildContext::new(&nd, 1)).unwrap();
        let a = Value::Tensor(Tensor::from_vec(vec![1, 2], vec![1f32, 2.0]));
        let g = Value::Tensor(Tensor::from_vec(vec![2, 2], vec![0f32; 4]));
        let u = Value::Tensor(Tensor::from_vec(vec![2, 3], vec![0f32; 6]));
        let err = kernel
            .run(&[Some(&a), Some(&g), Some(&u)])
            .unwrap_err()
            .to_string();
        assert!(err.contains(OP) && err.contains("one shape"), "{err}");
    }
}
