//! `MatMulNBitsSiluMul` in the runtime's own domain ([`crate::INTERNAL_DOMAIN`]), the fused
//! gated feed-forward a device session writes for `silu(A Wg^T) * (A Wu^T)` with both products
//! com.microsoft MatMulNBits (inputs: A, B_gate, scales_gate, zero_points_gate (optional),
//! B_up, scales_up, zero_points_up (optional); the attributes K, N, bits, block_size of both).
//! Here it runs as the graph it replaces: the two products in A's type, QuickGelu's kernel on
//! the gate, then the product, so a CPU fallback gives the unfused graph's values exactly.

use super::contrib_misc::{nbits_kernel, NBits};
use crate::kernel::{BuildContext, CpuKernel};
use crate::ops::math::activation::quick_gelu_kernel;
use crate::ops::nn::common::{self, invalid};
use crate::ops::nn::norm::channel_norm::recast;
use crate::{CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;

/// The op's name in [`crate::INTERNAL_DOMAIN`].
pub const OP: &str = "MatMulNBitsSiluMul";

/// No g_idx input: a position no node has.
const NONE: usize = usize::MAX;

pub(super) struct NBitsSiluMul {
    node: String,
    gate: NBits,
    up: NBits,
    /// com.microsoft QuickGelu with alpha 1.
    silu: Box<dyn CpuKernel>,
    /// The node's input positions of (B, scales, zero points) of the gate and of the up
    /// product.
    pos: [[usize; 3]; 2],
}

fn tensor_of<'v>(node: &str, v: &'v Value, what: &str) -> Result<&'v Tensor, EpError> {
    match v {
        Value::Tensor(t) => Ok(t),
        _ => Err(invalid(node, format!("the {what} values are not a tensor"))),
    }
}

impl NBitsSiluMul {
    /// The fused product of `ctx`'s node with its weight sets at `gate` and `up` (B, scales,
    /// zero points).
    pub(super) fn new(
        ctx: &BuildContext<'_>,
        gate: [usize; 3],
        up: [usize; 3],
    ) -> Result<Self, EpError> {
        let [g0, g1, g2] = gate;
        let [u0, u1, u2] = up;
        Ok(NBitsSiluMul {
            node: ctx.node.describe(),
            gate: nbits_kernel(ctx, [g0, g1, g2, NONE])?,
            up: nbits_kernel(ctx, [u0, u1, u2, NONE])?,
            silu: quick_gelu_kernel(ctx, 1.0),
            pos: [gate, up],
        })
    }

    /// silu(A Wg^T) * (A Wu^T), the weights read from the node's `inputs`.
    pub(super) fn product(&self, a: &Value, inputs: &[Option<&Value>]) -> Result<Value, EpError> {
        let node = &self.node;
        let a_t = tensor_of(node, a, "A")?;
        let at = |i: usize| inputs.get(i).copied().flatten();
        let [[g0, g1, g2], [u0, u1, u2]] = self.pos;
        let g = self
            .gate
            .run(&[Some(a), at(g0), at(g1), at(g2), None, None])?;
        let u = self
            .up
            .run(&[Some(a), at(u0), at(u1), at(u2), None, None])?;
        let s = self.silu.run(&[Some(&g[0])])?;
        let (s, u) = (
            tensor_of(node, &s[0], "SiLU")?,
            tensor_of(node, &u[0], "up")?,
        );
        let sv = common::float_vec::<f32>(s).ok_or_else(|| invalid(node, "SiLU not float"))?;
        let uv = common::float_vec::<f32>(u).ok_or_else(|| invalid(node, "up not float"))?;
        // The product of two values of A's type is exact in float32 (half types) before the
        // one rounding, as Mul's.
        let y: Vec<f32> = sv.iter().zip(&uv).map(|(s, u)| s * u).collect();
        Ok(Value::Tensor(recast(
            Tensor::from_vec(s.shape().to_vec(), y),
            a_t.dtype(),
        )))
    }
}

impl CpuKernel for NBitsSiluMul {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let a = inputs
            .first()
            .copied()
            .flatten()
            .ok_or_else(|| invalid(&self.node, "input A is missing"))?;
        Ok(vec![self.product(a, inputs)?])
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node;
    if node.inputs.len() != 7 {
        return Err(invalid(
            &node.describe(),
            format!(
                "{OP} takes 7 inputs (A, B, scales, zero points of the gate, then of the up \
                 product), got {}",
                node.inputs.len()
            ),
        ));
    }
    Ok(Box::new(NBitsSiluMul::new(ctx, [1, 2, 3], [4, 5, 6])?))
}

pub fn register(r: &mut CpuRegistry) {
    r.register(crate::INTERNAL_DOMAIN, OP, 1, build);
}

#[cfg(test)]
mod tests {
    use crate::kernel::BuildContext;
    use crate::{Tensor, Value};
    use onnx_runtime_ir::{Attribute, DataType, Node, NodeId, ValueId};

    fn run(node: &Node, opset: u64, inputs: &[Option<&Value>]) -> Value {
        let (_, factory) = crate::registry()
            .lookup(node.normalized_domain(), &node.op_type, opset)
            .expect("registered");
        let kernel = factory(&BuildContext::new(node, opset)).expect("builds");
        kernel.run(inputs).expect("runs").remove(0)
    }

    fn op(name: &str, domain: &str, inputs: usize, attrs: &[(&str, Attribute)]) -> Node {
        let ins = (0..inputs).map(|i| Some(ValueId(i))).collect();
        let mut nd = Node::new(NodeId(0), name, ins, vec![ValueId(99)]).with_domain(domain);
        for (k, v) in attrs {
            nd.attributes.insert(k.to_string(), v.clone());
        }
        nd
    }

    /// A deterministic pseudo-random sequence in [0, 1).
    fn seq(seed: u64, n: usize) -> Vec<f32> {
        let mut x = seed;
        (0..n)
            .map(|_| {
                x = x
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                (x >> 40) as f32 / (1u64 << 24) as f32
            })
            .collect()
    }

    /// The fused kernel gives the unfused graph's values exactly: two MatMulNBits, QuickGelu
    /// (alpha 1) and Mul, in float32 and float16, with and without zero points.
    #[test]
    fn matches_the_unfused_graph() {
        let (k, n, block, m) = (64usize, 12usize, 32usize, 3usize);
        let kb = k / block;
        let attrs = [
            ("K", Attribute::Int(k as i64)),
            ("N", Attribute::Int(n as i64)),
            ("bits", Attribute::Int(4)),
            ("block_size", Attribute::Int(block as i64)),
        ];
        for dtype in [DataType::Float32, DataType::Float16] {
            let float = |shape: Vec<usize>, v: Vec<f32>| {
                let t = Tensor::from_vec(shape, v);
                Value::Tensor(crate::ops::nn::norm::channel_norm::recast(t, dtype))
            };
            let a = float(
                vec![m, k],
                seq(1, m * k).iter().map(|v| 2.0 * v - 1.0).collect(),
            );
            let bytes = |seed| {
                let v: Vec<u8> = seq(seed, n * kb * block / 2)
                    .iter()
                    .map(|v| (v * 256.0) as u8)
                    .collect();
                Value::Tensor(Tensor::from_vec(vec![n, kb, block / 2], v))
            };
            let scales = |seed| {
                float(
                    vec![n * kb],
                    seq(seed, n * kb).iter().map(|v| 0.01 + 0.05 * v).collect(),
                )
            };
            let (bg, sg, bu, su) = (bytes(2), scales(3), bytes(4), scales(5));
            let zu = Value::Tensor(Tensor::from_vec(
                vec![n],
                seq(6, n)
                    .iter()
                    .map(|v| (v * 256.0) as u8)
                    .collect::<Vec<u8>>(),
            ));
            for zp in [false, true] {
                let z = zp.then_some(&zu);
                let nbits = op("MatMulNBits", "com.microsoft", 4, &attrs);
                let g = run(&nbits, 1, &[Some(&a), Some(&bg), Some(&sg), None]);
                let u = run(&nbits, 1, &[Some(&a), Some(&bu), Some(&su), z]);
                let quick = op(
                    "QuickGelu",
                    "com.microsoft",
                    1,
                    &[("alpha", Attribute::Float(1.0))],
                );
                let s = run(&quick, 1, &[Some(&g)]);
                let want = run(&op("Mul", "", 2, &[]), 14, &[Some(&s), Some(&u)]);
                let fused = op(super::OP, crate::INTERNAL_DOMAIN, 7, &attrs);
                let got = run(
                    &fused,
                    1,
                    &[
                        Some(&a),
                        Some(&bg),
                        Some(&sg),
                        None,
                        Some(&bu),
                        Some(&su),
                        z,
                    ],
                );
                let (Value::Tensor(got), Value::Tensor(want)) = (got, want) else {
                    panic!("tensor outputs")
                };
                assert_eq!(got.dtype(), dtype);
                assert_eq!(got.shape(), &[m, n]);
                assert_eq!(got.bytes(), want.bytes(), "{dtype} zp {zp}");
                assert!(got.to_f64_vec().unwrap().iter().any(|&v| v.abs() > 1e-3));
            }
        }
    }
}
