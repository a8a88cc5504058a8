//! Linear models of `ai.onnx.ml`: LinearClassifier and LinearRegressor.

use super::super::common::{invalid, one};
use super::{argmax, f64s, rows, score_tensor, PostTransform};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::Node;

/// Class labels of a classifier: int64s or strings.
#[derive(Clone)]
pub(crate) enum Labels {
    Ints(Vec<i64>),
    Strings(Vec<String>),
}

impl Labels {
    pub fn from_node(node: &Node) -> Result<Labels, EpError> {
        if let Some(s) = attrs::opt_strings(node, "classlabels_strings")? {
            return Ok(Labels::Strings(s));
        }
        match attrs::opt_ints(node, "classlabels_int64s")? {
            Some(v) => Ok(Labels::Ints(v)),
            None => Ok(Labels::Ints(attrs::ints(node, "classlabels_ints")?)),
        }
    }

    pub fn len(&self) -> usize {
        match self {
            Labels::Ints(v) => v.len(),
            Labels::Strings(v) => v.len(),
        }
    }

    /// The label tensor for class positions (`None` is the "no class" label: 0 or "").
    pub fn tensor(&self, picks: &[Option<usize>]) -> Tensor {
        match self {
            Labels::Ints(v) => Tensor::from_vec(
                vec![picks.len()],
                picks.iter().map(|p| p.map_or(0, |i| v[i])).collect(),
            ),
            Labels::Strings(v) => Tensor::from_strings(
                vec![picks.len()],
                picks
                    .iter()
                    .map(|p| p.map_or(String::new(), |i| v[i].clone()))
                    .collect(),
            ),
        }
    }
}

/// Scores = X · Wᵀ + b for `targets` rows of coefficients.
fn linear(
    node: &str,
    x: &Tensor,
    coef: &[f64],
    bias: &[f64],
    targets: usize,
) -> Result<(usize, Vec<f64>), EpError> {
    let (n, c, v) = rows(node, x)?;
    if coef.len() != targets * c {
        return Err(invalid(
            node,
            format!(
                "{} coefficients do not fit {targets} outputs × {c} features",
                coef.len()
            ),
        ));
    }
    if !bias.is_empty() && bias.len() != targets {
        return Err(invalid(
            node,
            format!("{} intercepts for {targets} outputs", bias.len()),
        ));
    }
    let mut out = vec![0f64; n * targets];
    for r in 0..n {
        for t in 0..targets {
            let w = &coef[t * c..(t + 1) * c];
            out[r * targets + t] = v[r * c..(r + 1) * c]
                .iter()
                .zip(w)
                .map(|(a, b)| a * b)
                .sum::<f64>()
                + bias.get(t).copied().unwrap_or(0.0);
        }
    }
    Ok((n, out))
}

fn build_classifier(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let coef = f64s(ctx.node, "coefficients")?;
    let bias = f64s(ctx.node, "intercepts")?;
    let labels = Labels::from_node(ctx.node)?;
    let post = PostTransform::from_node(ctx.node)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let c = *x.shape().last().unwrap_or(&1);
        let targets = coef.len().checked_div(c).unwrap_or(bias.len().max(1));
        let (n, mut s) = linear(&node, x, &coef, &bias, targets)?;
        let mut k = targets;
        if targets == 1 && labels.len() == 2 {
            s = s.iter().flat_map(|&v| [-v, v]).collect();
            k = 2;
        }
        let mut picks = Vec::with_capacity(n);
        for row in s.chunks_mut(k) {
            post.apply(row);
            if k > 1 {
                picks.push(Some(argmax(row)));
            } else {
                let th = if post == PostTransform::None {
                    0.0
                } else {
                    0.5
                };
                picks.push((row[0] >= th).then_some(0));
            }
        }
        if picks.iter().flatten().any(|&p| p >= labels.len()) {
            return Err(invalid(
                &node,
                format!("{k} scores but only {} class labels", labels.len()),
            ));
        }
        let z = score_tensor(n, k, &s);
        Ok(vec![Value::Tensor(labels.tensor(&picks)), Value::Tensor(z)])
    }))
}

fn build_regressor(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let coef = f64s(ctx.node, "coefficients")?;
    let bias = f64s(ctx.node, "intercepts")?;
    let targets = attrs::int(ctx.node, "targets", 1)?.max(1) as usize;
    let post = PostTransform::from_node(ctx.node)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let (n, mut s) = linear(&node, x, &coef, &bias, targets)?;
        post.apply_rows(&mut s, targets);
        one(score_tensor(n, targets, &s))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("ai.onnx.ml", "LinearClassifier", 1, build_classifier);
    r.register("ai.onnx.ml", "LinearRegressor", 1, build_regressor);
}

#[cfg(test)]
mod tests {
    use super::super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn binary_classifier_and_regressor() {
        // One coefficient row with two labels: scores [-s, s], label by the sign of s.
        let n = node(
            "LinearClassifier",
            1,
            2,
            vec![
                ("coefficients", Attribute::Floats(vec![1.0, -1.0])),
                ("intercepts", Attribute::Floats(vec![0.5])),
                ("classlabels_ints", Attribute::Ints(vec![0, 1])),
            ],
        )
        .with_domain("ai.onnx.ml");
        let o = run(&n, 1, &[t(&[2, 2], vec![1f32, 3., 2., 0.])]).unwrap();
        assert_eq!(out::<i64>(&o, 0).1, vec![0, 1]);
        assert_eq!(out::<f32>(&o, 1).1, vec![1.5, -1.5, -2.5, 2.5]);
        let n = node(
            "LinearRegressor",
            1,
            1,
            vec![
                ("coefficients", Attribute::Floats(vec![2.0, 1.0])),
                ("intercepts", Attribute::Floats(vec![1.0])),
            ],
        )
        .with_domain("ai.onnx.ml");
        let o = run(&n, 1, &[t(&[1, 2], vec![3f64, 4.])]).unwrap();
        assert_eq!(out::<f32>(&o, 0), (vec![1, 1], vec![11.0]));
    }
}
