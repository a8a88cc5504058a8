//! `NormMatMulNBits` in the runtime's own domain ([`crate::INTERNAL_DOMAIN`]): an LLM
//! decoder's RMS norm and the MatMulNBits product (or the fused gated pair,
//! [`super::nbits_silu_mul`]) that reads it, as a device session writes them. Inputs: x,
//! skip (optional: SkipSimplifiedLayerNormalization when present, else
//! SimplifiedLayerNormalization over the last axis), gamma, the norm's bias (optional), B,
//! scales, zero points (optional), the product's bias (optional, not with `glu`), then with
//! `glu` = 1 the up product's B, scales and zero points. Attributes: the product's (K, N,
//! bits, block_size, accuracy_level), `epsilon`, `glu`. Outputs: the product and (optional,
//! with skip) the sum x + skip (+ bias).
//!
//! Here it runs as the graph it replaces, the norm's kernel then the product's, so a CPU
//! fallback gives the unfused graph's values exactly.

use super::contrib_misc::{nbits_kernel, NBits};
use super::nbits_silu_mul::NBitsSiluMul;
use crate::kernel::{BuildContext, CpuKernel};
use crate::ops::nn::common::invalid;
use crate::ops::nn::norm::layer_norm::{build_simplified, build_skip_simplified};
use crate::{CpuRegistry, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{Attribute, Node, NodeId, ValueId};

/// The op's name in [`crate::INTERNAL_DOMAIN`].
pub const OP: &str = "NormMatMulNBits";

/// No g_idx input: a position no node has.
const NONE: usize = usize::MAX;

enum Product {
    Plain(NBits),
    Glu(NBitsSiluMul),
}

struct NormNBits {
    node: String,
    skip: bool,
    norm: Box<dyn CpuKernel>,
    product: Product,
    /// Whether the node writes the sum (its second output).
    sum: bool,
}

impl CpuKernel for NormNBits {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let at = |i: usize| inputs.get(i).copied().flatten();
        let normed = if self.skip {
            self.norm.run(&[at(0), at(1), at(2), at(3)])?
        } else {
            self.norm.run(&[at(0), at(2)])?
        };
        let mut normed = normed.into_iter();
        let a = normed
            .next()
            .ok_or_else(|| invalid(&self.node, "the norm gave no output"))?;
        let y = match &self.product {
            Product::Plain(p) => p
                .run(&[Some(&a), at(4), at(5), at(6), None, at(7)])?
                .into_iter()
                .next()
                .ok_or_else(|| invalid(&self.node, "the product gave no output"))?,
            Product::Glu(g) => g.product(&a, inputs)?,
        };
        let mut out = vec![y];
        if self.sum {
            // SkipSimplifiedLayerNormalization's outputs: output, mean, inv_std_var, sum.
            out.push(
                normed
                    .nth(2)
                    .ok_or_else(|| invalid(&self.node, "the norm gave no sum"))?,
            );
        }
        Ok(out)
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let nd = ctx.node;
    let has = |i: usize| nd.inputs.get(i).copied().flatten().is_some();
    let glu = nd.attribute("glu").and_then(|a| a.as_int()).unwrap_or(0) != 0;
    if !has(0) || !has(2) || !has(4) || !has(5) || (glu && (!has(8) || !has(9) || has(7))) {
        return Err(invalid(
            &nd.describe(),
            format!(
                "{OP} takes x, skip?, gamma, bias?, then B, scales, zero points? and bias? \
                 (or, with glu, no bias and B2, scales2, zero points 2?)"
            ),
        ));
    }
    let skip = has(1);
    if !skip && has(3) {
        return Err(invalid(
            &nd.describe(),
            format!("{OP} without skip takes no bias"),
        ));
    }
    let sum = skip && nd.outputs.len() > 1;
    let eps = nd
        .attribute("epsilon")
        .and_then(|a| a.as_float())
        .unwrap_or(1e-5);
    // The norm as its own node: inputs wired as the fused node's (ids are placeholders).
    let (op, domain, wired, outs) = if skip {
        (
            "SkipSimplifiedLayerNormalization",
            "com.microsoft",
            vec![true, true, true, has(3)],
            if sum { 4 } else { 1 },
        )
    } else {
        ("SimplifiedLayerNormalization", "", vec![true, true], 1)
    };
    let ins = wired
        .iter()
        .enumerate()
        .map(|(i, &w)| w.then_some(ValueId(i)))
        .collect();
    let mut norm_node = Node::new(
        NodeId(0),
        op,
        ins,
        (0..outs).map(|i| ValueId(100 + i)).collect(),
    )
    .with_domain(domain)
    .with_name(nd.name.clone());
    norm_node
        .attributes
        .insert("epsilon".into(), Attribute::Float(eps));
    if !skip {
        norm_node
            .attributes
            .insert("axis".into(), Attribute::Int(-1));
    }
    let nctx = BuildContext::new(&norm_node, 1);
    let norm = if skip {
        build_skip_simplified(&nctx)?
    } else {
        build_simplified(&nctx)?
    };
    let product = if glu {
        Product::Glu(NBitsSiluMul::new(ctx, [4, 5, 6], [8, 9, 10])?)
    } else {
        Product::Plain(nbits_kernel(ctx, [4, 5, 6, NONE])?)
    };
    Ok(Box::new(NormNBits {
        node: nd.describe(),
        skip,
        norm,
        product,
        sum,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register(crate::INTERNAL_DOMAIN, OP, 1, build);
}
