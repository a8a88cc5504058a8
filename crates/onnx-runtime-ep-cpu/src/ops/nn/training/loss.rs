//! Training losses usable at inference: NegativeLogLikelihoodLoss and
//! SoftmaxCrossEntropyLoss (which applies a log-softmax over axis 1, then the NLL loss).
//! Inputs are `(N, C)` or `(N, C, d1, ..., dk)` scores with `(N)` / `(N, d1, ..., dk)` class
//! indices; reduction is `none`, `sum` or `mean` (the weighted mean over non-ignored
//! elements). Math runs in f64 and the result is narrowed to the input type.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

#[derive(Clone, Copy, PartialEq)]
enum Reduction {
    None,
    Sum,
    Mean,
}

struct LossKernel {
    node: String,
    op: &'static str,
    softmax: bool,
    reduction: Reduction,
    ignore_index: Option<i64>,
    n_outputs: usize,
}

/// An f64 result as a tensor of `dtype` (a float type).
fn from_f64(dtype: DataType, shape: Vec<usize>, v: Vec<f64>) -> Tensor {
    match dtype {
        DataType::Float64 => Tensor::from_vec(shape, v),
        d => common::tensor_from_f32(d, shape, v.into_iter().map(|x| x as f32).collect()),
    }
}

impl LossKernel {
    fn compute(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let target = tensor_input(node, inputs, 1)?;
        let weight = optional_tensor_input(node, inputs, 2)?;
        common::require_float(node, self.op, x.dtype())?;
        if !matches!(target.dtype(), DataType::Int32 | DataType::Int64) {
            return Err(common::unsupported(
                node,
                self.op,
                target.dtype(),
                "int32 or int64 targets",
            ));
        }
        let shape = x.shape();
        if shape.len() < 2 {
            return Err(invalid(
                node,
                format!("input must have shape (N, C, ...), got {shape:?}"),
            ));
        }
        let (n, c) = (shape[0], shape[1]);
        let d: usize = shape[2..].iter().product();
        let mut want_target = vec![n];
        want_target.extend_from_slice(&shape[2..]);
        if target.shape() != want_target.as_slice() {
            return Err(invalid(
                node,
                format!(
                    "target shape {:?} must be {want_target:?} for input shape {shape:?}",
                    target.shape()
                ),
            ));
        }
        let w = match weight {
            Some(w) => {
                if w.shape() != [c] {
                    return Err(invalid(
                        node,
                        format!("weight shape {:?} must be [{c}]", w.shape()),
                    ));
                }
                Some(common::floats_of(node, w, "weight")?)
            }
            None => None,
        };
        let mut xv = common::floats_of(node, x, "input")?;
        if self.softmax {
            // log-softmax over axis 1.
            for i in 0..n {
                for k in 0..d {
                    let at = |j: usize| (i * c + j) * d + k;
                    let m = (0..c).map(|j| xv[at(j)]).fold(f64::NEG_INFINITY, f64::max);
                    let s: f64 = (0..c).map(|j| (xv[at(j)] - m).exp()).sum();
                    let lse = m + s.ln();
                    for j in 0..c {
                        xv[at(j)] -= lse;
                    }
                }
            }
        }
        let t = target.to_i64_vec().unwrap_or_default();
        let mut loss = vec![0.0f64; n * d];
        let mut wsum = 0.0f64;
        for i in 0..n {
            for k in 0..d {
                let cls = t[i * d + k];
                if Some(cls) == self.ignore_index {
                    continue;
                }
                if cls < 0 || cls as usize >= c {
                    return Err(invalid(
                        node,
                        format!(
                            "target value {cls} is out of range for {c} classes (and is not \
                             ignore_index {:?})",
                            self.ignore_index
                        ),
                    ));
                }
                let cls = cls as usize;
                let wt = w.as_ref().map_or(1.0, |w| w[cls]);
                loss[i * d + k] = -xv[(i * c + cls) * d + k] * wt;
                wsum += wt;
            }
        }
        let out = match self.reduction {
            Reduction::None => from_f64(x.dtype(), want_target, loss),
            Reduction::Sum => from_f64(x.dtype(), vec![], vec![loss.iter().sum()]),
            Reduction::Mean => {
                let s: f64 = loss.iter().sum();
                from_f64(x.dtype(), vec![], vec![s / wsum])
            }
        };
        let mut outs = vec![Value::Tensor(out)];
        if self.softmax && self.n_outputs > 1 {
            outs.push(Value::Tensor(from_f64(x.dtype(), shape.to_vec(), xv)));
        }
        Ok(outs)
    }
}

impl CpuKernel for LossKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        self.compute(inputs)
    }
}

fn build_with(ctx: &BuildContext<'_>, softmax: bool) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let op = if softmax {
        "SoftmaxCrossEntropyLoss"
    } else {
        "NegativeLogLikelihoodLoss"
    };
    let reduction = match attrs::string(n, "reduction", "mean")?.as_str() {
        "none" => Reduction::None,
        "sum" => Reduction::Sum,
        "mean" => Reduction::Mean,
        other => {
            return Err(common::bad_attr(
                n,
                "reduction",
                format!("'{other}' is not one of none, sum, mean"),
            ))
        }
    };
    Ok(Box::new(LossKernel {
        node: n.describe(),
        op,
        softmax,
        reduction,
        ignore_index: attrs::opt_int(n, "ignore_index")?,
        n_outputs: n.outputs.len(),
    }))
}

fn build_nll(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_with(ctx, false)
}

fn build_sce(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_with(ctx, true)
}

pub fn register(r: &mut CpuRegistry) {
    for since in [12, 13, 22] {
        r.register("", "NegativeLogLikelihoodLoss", since, build_nll);
    }
    for since in [12, 13] {
        r.register("", "SoftmaxCrossEntropyLoss", since, build_sce);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    /// float64 reference: log-softmax then weighted NLL with mean reduction.
    #[test]
    fn sce_mean_weighted_ignore_matches_reference() {
        let (n, c, d) = (3usize, 5usize, 4usize);
        let x = rand(n * c * d, 7, -3.0, 3.0);
        let t: Vec<i64> = (0..n * d).map(|i| ((i * 7 + 3) % c) as i64).collect();
        let w = rand(c, 9, 0.2, 1.5);
        let node = node(
            "SoftmaxCrossEntropyLoss",
            3,
            2,
            vec![("ignore_index", Attribute::Int(3))],
        );
        let out = run(
            build_sce,
            &node,
            13,
            &[
                Some(Tensor::from_vec(vec![n, c, d], f32s(&x))),
                Some(Tensor::from_vec(vec![n, d], t.clone())),
                Some(Tensor::from_vec(vec![c], f32s(&w))),
            ],
        )
        .unwrap();
        let (mut num, mut den) = (0.0, 0.0);
        let mut logp = vec![0.0; n * c * d];
        for i in 0..n {
            for k in 0..d {
                let xs: Vec<f64> = (0..c)
                    .map(|j| x[(i * c + j) * d + k] as f32 as f64)
                    .collect();
                let m = xs.iter().cloned().fold(f64::MIN, f64::max);
                let lse = m + xs.iter().map(|v| (v - m).exp()).sum::<f64>().ln();
                for j in 0..c {
                    logp[(i * c + j) * d + k] = xs[j] - lse;
                }
                let cls = t[i * d + k] as usize;
                if cls == 3 {
                    continue;
                }
                let wt = w[cls] as f32 as f64;
                num -= wt * (xs[cls] - lse);
                den += wt;
            }
        }
        assert_close(out[0].data::<f32>(), &[num / den], 1e-5);
        assert_close(out[1].data::<f32>(), &logp, 1e-5);
    }

    #[test]
    fn nll_none_and_errors() {
        let x = rand(2 * 3, 3, -2.0, 0.0);
        let node_none = node(
            "NegativeLogLikelihoodLoss",
            2,
            1,
            vec![("reduction", Attribute::String("none".into()))],
        );
        let xt = Tensor::from_vec(vec![2, 3], x.clone());
        let out = run(
            build_nll,
            &node_none,
            22,
            &[
                Some(xt.clone()),
                Some(Tensor::from_vec(vec![2], vec![2i32, 0])),
            ],
        )
        .unwrap();
        assert_eq!(out[0].data::<f64>(), &[-x[2], -x[3]]);
        let bad = run(
            build_nll,
            &node_none,
            22,
            &[Some(xt), Some(Tensor::from_vec(vec![2], vec![5i32, 0]))],
        );
        assert!(bad.is_err());
    }
}
