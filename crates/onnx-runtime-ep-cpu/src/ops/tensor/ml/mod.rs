//! The `ai.onnx.ml` operators: preprocessing, encoders, linear models, support vector machines,
//! tree ensembles and ZipMap.

use super::common::{from_f64s, invalid};
use crate::{attrs, CpuRegistry, Tensor};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{DataType, Node};

mod label_encoder;
mod linear;
mod simple;
mod svm;
mod tree;
mod zipmap;

/// Numeric input elements as f64 (float, double and integer inputs).
pub(crate) fn features(node: &str, x: &Tensor) -> Result<Vec<f64>, EpError> {
    x.to_f64_vec()
        .filter(|_| x.dtype() != onnx_runtime_ir::DataType::Bool)
        .ok_or_else(|| invalid(node, format!("input must be numeric, got {}", x.dtype())))
}

/// X as rows of features: (rows, features per row, values). X is [N, C] or [C].
pub(crate) fn rows(node: &str, x: &Tensor) -> Result<(usize, usize, Vec<f64>), EpError> {
    let v = features(node, x)?;
    match *x.shape() {
        [c] => Ok((1, c, v)),
        [n, c] => Ok((n, c, v)),
        _ => Err(invalid(
            node,
            format!("X must be [N, C] or [C], got {:?}", x.shape()),
        )),
    }
}

/// An optional floats attribute as f64 (empty when absent).
pub(crate) fn f64s(node: &Node, name: &str) -> Result<Vec<f64>, EpError> {
    Ok(attrs::opt_floats(node, name)?
        .unwrap_or_default()
        .iter()
        .map(|&v| v as f64)
        .collect())
}

/// The first position of the largest value.
pub(crate) fn argmax(v: &[f64]) -> usize {
    (0..v.len()).fold(0, |b, i| if v[i] > v[b] { i } else { b })
}

/// `n` rows of `width` scores as a float tensor [n, width].
pub(crate) fn score_tensor(n: usize, width: usize, scores: &[f64]) -> Tensor {
    from_f64s(DataType::Float32, vec![n, width], scores).expect("float")
}

/// The score transforms classifiers and regressors share.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum PostTransform {
    None,
    Softmax,
    Logistic,
    SoftmaxZero,
    Probit,
}

impl PostTransform {
    pub fn parse(s: &str) -> Option<PostTransform> {
        Some(match s {
            "NONE" => PostTransform::None,
            "SOFTMAX" => PostTransform::Softmax,
            "LOGISTIC" => PostTransform::Logistic,
            "SOFTMAX_ZERO" => PostTransform::SoftmaxZero,
            "PROBIT" => PostTransform::Probit,
            _ => return None,
        })
    }

    pub fn from_node(node: &onnx_runtime_ir::Node) -> Result<PostTransform, EpError> {
        match node.attribute("post_transform") {
            Some(onnx_runtime_ir::Attribute::Int(v)) => Ok(match v {
                0 => PostTransform::None,
                1 => PostTransform::Softmax,
                2 => PostTransform::Logistic,
                3 => PostTransform::SoftmaxZero,
                4 => PostTransform::Probit,
                _ => {
                    return Err(EpError::invalid_attribute(
                        node,
                        "post_transform",
                        format!("unknown value {v}"),
                    ))
                }
            }),
            _ => {
                let s = crate::attrs::string(node, "post_transform", "NONE")?;
                Self::parse(&s).ok_or_else(|| {
                    EpError::invalid_attribute(
                        node,
                        "post_transform",
                        format!("'{s}' is not NONE, SOFTMAX, LOGISTIC, SOFTMAX_ZERO or PROBIT"),
                    )
                })
            }
        }
    }

    /// Applies the transform in place to each row of `width` scores.
    pub fn apply_rows(self, scores: &mut [f64], width: usize) {
        scores
            .chunks_mut(width.max(1))
            .for_each(|row| self.apply(row));
    }

    /// Applies the transform to one row of scores in place.
    pub fn apply(self, row: &mut [f64]) {
        match self {
            PostTransform::None => {}
            PostTransform::Logistic => row.iter_mut().for_each(|v| *v = logistic(*v)),
            PostTransform::Probit => row.iter_mut().for_each(|v| *v = probit(*v)),
            PostTransform::Softmax => {
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let mut s = 0.0;
                for v in row.iter_mut() {
                    *v = (*v - m).exp();
                    s += *v;
                }
                row.iter_mut().for_each(|v| *v /= s);
            }
            PostTransform::SoftmaxZero => {
                let m = row.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
                let e = (-m).exp();
                let mut s = 0.0;
                for v in row.iter_mut() {
                    *v = if v.abs() > 1e-7 {
                        (*v - m).exp()
                    } else {
                        *v * e
                    };
                    s += *v;
                }
                if s == 0.0 {
                    row.iter_mut().for_each(|v| *v = 0.5);
                } else {
                    row.iter_mut().for_each(|v| *v /= s);
                }
            }
        }
    }
}

pub(crate) fn logistic(v: f64) -> f64 {
    let e = 1.0 / (1.0 + (-v.abs()).exp());
    if v < 0.0 {
        1.0 - e
    } else {
        e
    }
}

/// The inverse error function approximation the ONNX ML reference uses.
fn erf_inv(x: f64) -> f64 {
    let sgn = if x < 0.0 { -1.0 } else { 1.0 };
    let x = (1.0 - x) * (1.0 + x);
    if x == 0.0 {
        return 0.0;
    }
    let log = x.ln();
    let v = 2.0 / (std::f64::consts::PI * 0.147) + 0.5 * log;
    let v2 = 1.0 / 0.147 * log;
    sgn * (-v + (v * v - v2).sqrt()).sqrt()
}

pub(crate) fn probit(v: f64) -> f64 {
    std::f64::consts::SQRT_2 * erf_inv(v * 2.0 - 1.0)
}

pub fn register(r: &mut CpuRegistry) {
    simple::register(r);
    label_encoder::register(r);
    linear::register(r);
    svm::register(r);
    tree::register(r);
    zipmap::register(r);
}
