//! `MatMulBias` in the runtime's own domain ([`crate::INTERNAL_DOMAIN`]): `act(A @ B + bias)`,
//! what the session's optimizer makes of MatMul -> Add(bias) [-> activation] when B is a
//! constant 2-D float matrix and the bias a constant vector of B's width. The bias and the
//! activation run on each finished row segment of the product while it is in cache, inside
//! the product's parallel tasks, instead of as two more passes over the output.
//!
//! Inputs: A (any rank, MatMul's numpy semantics with a 2-D B), B `[K, N]`, bias `[N]`.
//! Attributes: `activation` (empty, Relu, Tanh, Sigmoid, LeakyRelu, Clip, HardSigmoid,
//! HardSwish, Gelu or FastGelu) and `activation_params`, as com.microsoft FusedConv has them.

use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::ops::math::vecmath;
use crate::ops::nn::common::{self, invalid, Real};
use crate::ops::nn::conv::conv_act::Activation;
use crate::ops::nn::gemm::matmul::{matmul_tensor, PackedWeights};
use crate::{CpuRegistry, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

/// The op's name in [`crate::INTERNAL_DOMAIN`].
pub const OP: &str = "MatMulBias";

/// Adds `bias` to `row` (a segment starting at column `c0`) and applies `act`.
#[inline]
fn finish_segment<T: Real>(row: &mut [T], bias: &[T], c0: usize, act: Activation) {
    vecmath::with_avx2(
        #[inline(always)]
        || {
            for (v, &b) in row.iter_mut().zip(&bias[c0..]) {
                *v += b;
            }
        },
    );
    act.apply(row);
}

/// Bias and activation over every row of a finished row-major product of width `bias.len()`.
fn finish_all<T: Real>(data: &mut [T], bias: &[T], act: Activation) {
    if bias.is_empty() {
        return;
    }
    for row in data.chunks_exact_mut(bias.len()) {
        finish_segment(row, bias, 0, act);
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let act = Activation::parse_any(ctx.node)?;
    let weights = PackedWeights::from_constant(ctx, 1, false);
    Ok(kernel_fn(move |inputs| {
        let a = tensor_input(&node, inputs, 0)?;
        let b = tensor_input(&node, inputs, 1)?;
        let bias = tensor_input(&node, inputs, 2)?;
        let &[_, n] = b.shape() else {
            return Err(invalid(
                &node,
                format!("{OP} takes a 2-D B, got shape {:?}", b.shape()),
            ));
        };
        if bias.shape() != [n] || bias.dtype() != a.dtype() {
            return Err(invalid(
                &node,
                format!(
                    "the bias must be a 1-D {:?} tensor of B's {n} columns, got {:?} {:?}",
                    a.dtype(),
                    bias.dtype(),
                    bias.shape()
                ),
            ));
        }
        let ubias = common::upcast(bias);
        if let (Some(w), DataType::Float32 | DataType::Float16 | DataType::BFloat16) =
            (weights.as_ref(), ubias.dtype())
        {
            let bv = ubias.data::<f32>();
            let finish = |_: usize, c0: usize, row: &mut [f32]| finish_segment(row, bv, c0, act);
            if let Some(out) = w.matmul_with(&node, a, b, &finish) {
                return Ok(vec![Value::Tensor(out?)]);
            }
        }
        // General path: the product, then one pass of bias and activation.
        let mut out = matmul_tensor(&node, OP, a, b, false, false, 1.0)?;
        match out.dtype() {
            DataType::Float64 => finish_all(out.data_mut::<f64>(), bias.data::<f64>(), act),
            DataType::Float32 => finish_all(out.data_mut::<f32>(), ubias.data::<f32>(), act),
            DataType::Float16 | DataType::BFloat16 => {
                let dtype = out.dtype();
                let mut up = common::upcast(&out).into_owned();
                finish_all(up.data_mut::<f32>(), ubias.data::<f32>(), act);
                out = common::downcast(up, dtype);
            }
            d => {
                return Err(invalid(
                    &node,
                    format!("{OP} computes float types only, got {d:?}"),
                ))
            }
        }
        Ok(vec![Value::Tensor(out)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register(crate::INTERNAL_DOMAIN, OP, 1, build);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use crate::Tensor;
    use onnx_runtime_ir::Attribute;

    fn gelu(x: f64) -> f64 {
        0.5 * x * (1.0 + libm::erf(x / 2f64.sqrt()))
    }

    fn fast_gelu(x: f64) -> f64 {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * x * (1.0 + (k * (x + 0.044715 * x * x * x)).tanh())
    }

    /// Runs the op with B constant at build (the packed path) or not (the general path).
    fn run_op(
        attrs: Vec<(&str, Attribute)>,
        a: Tensor,
        b: Tensor,
        bias: Tensor,
        constant_b: bool,
    ) -> Result<Tensor, EpError> {
        let node = node(OP, 3, 1, attrs);
        let (a, b, bias) = (Value::Tensor(a), Value::Tensor(b), Value::Tensor(bias));
        let consts = [None, constant_b.then_some(&b), Some(&bias)];
        let kernel = build(&BuildContext {
            constant_inputs: &consts,
            ..BuildContext::new(&node, 1)
        })?;
        let out = kernel.run(&[Some(&a), Some(&b), Some(&bias)])?;
        Ok(out[0].as_tensor().unwrap().clone())
    }

    /// `act(A @ B + bias)` against float64 for a batched A, every GELU form and Relu, on the
    /// packed path and the general one.
    #[test]
    fn matches_float64_with_each_activation() {
        let (batch, m, k, n) = (2, 16, 70, 45);
        let a = rand(batch * m * k, 1, -2.0, 2.0);
        let b = rand(k * n, 2, -0.5, 0.5);
        let bias = rand(n, 3, -1.0, 1.0);
        let mut pre = vec![0.0; batch * m * n];
        for r in 0..batch * m {
            for j in 0..n {
                let dot: f64 = (0..k).map(|p| a[r * k + p] * b[p * n + j]).sum();
                pre[r * n + j] = dot + bias[j];
            }
        }
        type Reference = fn(f64) -> f64;
        let cases: [(&str, Reference); 4] = [
            ("", |x| x),
            ("Relu", |x| x.max(0.0)),
            ("Gelu", gelu),
            ("FastGelu", fast_gelu),
        ];
        for (name, f) in cases {
            let want: Vec<f64> = pre.iter().map(|&x| f(x)).collect();
            for constant_b in [true, false] {
                let got = run_op(
                    vec![("activation", Attribute::String(name.into()))],
                    Tensor::from_vec(vec![batch, m, k], f32s(&a)),
                    Tensor::from_vec(vec![k, n], f32s(&b)),
                    Tensor::from_vec(vec![n], f32s(&bias)),
                    constant_b,
                )
                .unwrap();
                assert_eq!(got.shape(), &[batch, m, n], "{name}");
                assert_close(got.data::<f32>(), &want, 1e-5);
            }
        }
    }

    /// A bias of the wrong width and an unknown activation are errors, not panics.
    #[test]
    fn rejects_bad_bias_and_activation() {
        let t = |shape: Vec<usize>| {
            let n = shape.iter().product();
            Tensor::from_vec(shape, vec![1.0f32; n])
        };
        let err = run_op(vec![], t(vec![2, 3]), t(vec![3, 4]), t(vec![3]), true).unwrap_err();
        assert!(err.to_string().contains("bias"), "{err}");
        let attrs = vec![("activation", Attribute::String("Softmax".into()))];
        let err = run_op(attrs, t(vec![2, 3]), t(vec![3, 4]), t(vec![4]), true).unwrap_err();
        assert!(err.to_string().contains("Softmax"), "{err}");
    }
}
