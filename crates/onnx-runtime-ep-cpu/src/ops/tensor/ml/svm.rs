//! Support vector machines of `ai.onnx.ml`: SVMClassifier (one-vs-one voting over support
//! vectors, or a linear model per class; optional Platt probabilities coupled pairwise) and
//! SVMRegressor. Kernels: LINEAR, POLY, RBF, SIGMOID. Math in f64, scores out as float.

use super::super::common::{invalid, one};
use super::linear::Labels;
use super::{argmax, f64s, logistic, probit, rows, score_tensor, PostTransform};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::Node;

#[derive(Clone, Copy, PartialEq)]
enum KernelType {
    Linear,
    Poly,
    Rbf,
    Sigmoid,
}

/// The kernel function with its parameters [gamma, coef0, degree].
#[derive(Clone, Copy)]
struct SvmKernel {
    kind: KernelType,
    gamma: f64,
    coef0: f64,
    degree: i32,
}

impl SvmKernel {
    fn from_node(node: &Node, has_vectors: bool) -> Result<SvmKernel, EpError> {
        let params = f64s(node, "kernel_params")?;
        let (gamma, coef0, degree) = match params[..] {
            [g, c, d, ..] => (g, c, d as i32),
            _ => (0.0, 0.0, 0),
        };
        let name = attrs::string(node, "kernel_type", "LINEAR")?;
        let kind = match (has_vectors, name.as_str()) {
            // Without support vectors the model is linear whatever the kernel says.
            (false, _) | (_, "LINEAR") => KernelType::Linear,
            (_, "POLY") => KernelType::Poly,
            (_, "RBF") => KernelType::Rbf,
            (_, "SIGMOID") => KernelType::Sigmoid,
            (_, k) => {
                return Err(EpError::invalid_attribute(
                    node,
                    "kernel_type",
                    format!("'{k}' is not LINEAR, POLY, RBF or SIGMOID"),
                ))
            }
        };
        Ok(SvmKernel {
            kind,
            gamma,
            coef0,
            degree,
        })
    }

    fn eval(&self, a: &[f64], b: &[f64]) -> f64 {
        let dot = || a.iter().zip(b).map(|(p, q)| p * q).sum::<f64>();
        match self.kind {
            KernelType::Linear => dot(),
            KernelType::Poly => (dot() * self.gamma + self.coef0).powi(self.degree),
            KernelType::Sigmoid => (dot() * self.gamma + self.coef0).tanh(),
            KernelType::Rbf => {
                let d2: f64 = a.iter().zip(b).map(|(p, q)| (p - q) * (p - q)).sum();
                (-self.gamma * d2).exp()
            }
        }
    }
}

/// Platt's sigmoid for one pairwise decision value: 1 / (1 + exp(score * a + b)).
fn platt(score: f64, a: f64, b: f64) -> f64 {
    1.0 - logistic(score * a + b)
}

/// Couples pairwise probabilities r[i][j] (class i over class j) into class probabilities
/// by minimising Σ_i Σ_{j≠i} (r_ji p_i - r_ij p_j)² subject to Σ p = 1 (Wu, Lin and Weng
/// 2004, method 2), iterated as libsvm does.
fn couple(k: usize, r: &[f64]) -> Vec<f64> {
    let at = |i: usize, j: usize| r[i * k + j];
    let mut q = vec![0.0; k * k];
    for t in 0..k {
        for j in 0..k {
            if j != t {
                q[t * k + t] += at(j, t) * at(j, t);
                q[t * k + j] = -at(j, t) * at(t, j);
            }
        }
    }
    let mut p = vec![1.0 / k as f64; k];
    let mut qp = vec![0.0; k];
    let eps = 0.005 / k as f64;
    for _ in 0..k.max(100) {
        for t in 0..k {
            qp[t] = (0..k).map(|j| q[t * k + j] * p[j]).sum();
        }
        let mut pqp: f64 = (0..k).map(|t| p[t] * qp[t]).sum();
        if qp.iter().all(|&v| (v - pqp).abs() < eps) {
            break;
        }
        for t in 0..k {
            let qtt = q[t * k + t];
            let diff = (pqp - qp[t]) / qtt;
            p[t] += diff;
            pqp = (pqp + diff * (diff * qtt + 2.0 * qp[t])) / ((1.0 + diff) * (1.0 + diff));
            for j in 0..k {
                qp[j] = (qp[j] + diff * q[t * k + j]) / (1.0 + diff);
                p[j] /= 1.0 + diff;
            }
        }
    }
    p
}

/// The scores written for one row. A single decision value (two classes, no probabilities)
/// becomes two columns the way onnxruntime writes them: [-s, s] without a transform,
/// [1 - logistic(s), logistic(s)] for LOGISTIC, [1 - s, s] for the softmaxes.
fn final_scores(scores: &[f64], post: PostTransform) -> Vec<f64> {
    if let [s] = *scores {
        return match post {
            PostTransform::None => vec![-s, s],
            PostTransform::Logistic => {
                let l = logistic(s);
                vec![1.0 - l, l]
            }
            PostTransform::Softmax | PostTransform::SoftmaxZero => vec![1.0 - s, s],
            PostTransform::Probit => vec![probit(s)],
        };
    }
    let mut out = scores.to_vec();
    post.apply(&mut out);
    out
}

struct Classifier {
    node: String,
    labels: Labels,
    kernel: SvmKernel,
    /// Support vectors [count, C] and per-class counts (empty for the linear form).
    vectors: Vec<f64>,
    per_class: Vec<usize>,
    coef: Vec<f64>,
    rho: Vec<f64>,
    prob_a: Vec<f64>,
    prob_b: Vec<f64>,
    post: PostTransform,
}

impl Classifier {
    fn classes(&self) -> usize {
        self.labels.len().max(1)
    }

    /// (decision values, votes) for one row with support vectors; one value per class pair.
    fn one_vs_one(&self, row: &[f64], c: usize) -> (Vec<f64>, Vec<f64>) {
        let k = self.classes();
        let total: usize = self.per_class.iter().sum();
        let kern: Vec<f64> = (0..total)
            .map(|j| self.kernel.eval(row, &self.vectors[j * c..(j + 1) * c]))
            .collect();
        let start: Vec<usize> = self
            .per_class
            .iter()
            .scan(0, |s, &n| {
                let v = *s;
                *s += n;
                Some(v)
            })
            .collect();
        let coef = |class_row: usize, from: usize, n: usize| -> f64 {
            (from..from + n)
                .map(|v| self.coef[class_row * total + v] * kern[v])
                .sum()
        };
        let (mut scores, mut votes) = (Vec::new(), vec![0.0; k]);
        for i in 0..k {
            for j in i + 1..k {
                let s1 = coef(j - 1, start[i], self.per_class[i]);
                let s2 = coef(i, start[j], self.per_class[j]);
                let s = self.rho[scores.len()] + s1 + s2;
                votes[if s > 0.0 { i } else { j }] += 1.0;
                scores.push(s);
            }
        }
        (scores, votes)
    }

    fn check(&self, c: usize) -> Result<(), EpError> {
        let k = self.classes();
        let total: usize = self.per_class.iter().sum();
        let (want_coef, want_rho) = if total == 0 {
            (k * c, 1)
        } else {
            ((k - 1) * total, k * (k - 1) / 2)
        };
        let ok = self.coef.len() == want_coef
            && self.rho.len() >= want_rho
            && (total == 0 || (self.vectors.len() == total * c && self.per_class.len() == k))
            && (self.prob_a.is_empty()
                || (self.prob_a.len() >= k * (k - 1) / 2
                    && self.prob_b.len() >= self.prob_a.len()));
        if ok {
            return Ok(());
        }
        Err(invalid(
            &self.node,
            format!(
                "the model does not fit {c} features and {k} classes: {} coefficients (want \
                 {want_coef}), {} rho (want {want_rho}), {} support vector values, \
                 vectors_per_class {:?}, {} prob_a",
                self.coef.len(),
                self.rho.len(),
                self.vectors.len(),
                self.per_class,
                self.prob_a.len()
            ),
        ))
    }

    fn run_rows(&self, x: &Tensor) -> Result<Vec<Value>, EpError> {
        let (n, c, v) = rows(&self.node, x)?;
        self.check(c)?;
        let k = self.classes();
        let svc = !self.per_class.is_empty();
        let have_proba = !self.prob_a.is_empty();
        let all_positive = self.coef.iter().all(|&w| w >= 0.0);
        let mut picks = Vec::with_capacity(n);
        let mut out = Vec::new();
        let mut width = 0;
        for r in 0..n {
            let row = &v[r * c..(r + 1) * c];
            // The winning class: most votes (support vectors) or the highest score (linear).
            let (scores, best, max_weight) = if svc {
                let (mut s, votes) = self.one_vs_one(row, c);
                if have_proba {
                    s = self.probabilities(&s);
                }
                (s, argmax(&votes), 0.0)
            } else {
                let s: Vec<f64> = (0..k)
                    .map(|j| self.kernel.eval(row, &self.coef[j * c..(j + 1) * c]) + self.rho[0])
                    .collect();
                let b = argmax(&s);
                let w = s[b];
                (s, b, w)
            };
            // Two classes: onnxruntime's rule, which favours the second label on a positive
            // winning score.
            picks.push(if k == 2 && !have_proba {
                if (all_positive && max_weight >= 0.5) || (max_weight > 0.0 && !all_positive) {
                    1
                } else {
                    best
                }
            } else {
                best
            });
            let row_scores = final_scores(&scores, self.post);
            width = row_scores.len();
            out.extend(row_scores);
        }
        let labels = self.label_tensor(&picks)?;
        let z = score_tensor(n, width, &out);
        Ok(vec![Value::Tensor(labels), Value::Tensor(z)])
    }

    /// Class probabilities from the pairwise decision values (Platt, then coupling).
    fn probabilities(&self, scores: &[f64]) -> Vec<f64> {
        let k = self.classes();
        let mut pair = vec![0.0; k * k];
        let mut idx = 0;
        for i in 0..k {
            for j in i + 1..k {
                let p =
                    platt(scores[idx], self.prob_a[idx], self.prob_b[idx]).clamp(1e-7, 1.0 - 1e-7);
                pair[i * k + j] = p;
                pair[j * k + i] = 1.0 - p;
                idx += 1;
            }
        }
        couple(k, &pair)
    }

    fn label_tensor(&self, picks: &[usize]) -> Result<Tensor, EpError> {
        if let Some(&bad) = picks.iter().find(|&&i| i >= self.labels.len()) {
            return Err(invalid(
                &self.node,
                format!(
                    "class {bad} has no label ({} labels given)",
                    self.labels.len()
                ),
            ));
        }
        Ok(self
            .labels
            .tensor(&picks.iter().map(|&i| Some(i)).collect::<Vec<_>>()))
    }
}

fn build_classifier(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let per_class: Vec<usize> = attrs::opt_ints(n, "vectors_per_class")?
        .unwrap_or_default()
        .iter()
        .map(|&v| v.max(0) as usize)
        .collect();
    let has_vectors = per_class.iter().sum::<usize>() > 0;
    let model = Classifier {
        node: n.describe(),
        labels: Labels::from_node(n)?,
        kernel: SvmKernel::from_node(n, has_vectors)?,
        vectors: f64s(n, "support_vectors")?,
        per_class: if has_vectors { per_class } else { Vec::new() },
        coef: f64s(n, "coefficients")?,
        rho: f64s(n, "rho")?,
        prob_a: f64s(n, "prob_a")?,
        prob_b: f64s(n, "prob_b")?,
        post: PostTransform::from_node(n)?,
    };
    if model.rho.is_empty() {
        return Err(EpError::invalid_attribute(n, "rho", "is required"));
    }
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&model.node, inputs, 0)?;
        model.run_rows(x)
    }))
}

/// SVMRegressor: Σ coef_j · K(x, sv_j) + rho (or a linear model without support vectors);
/// `one_class` maps the sign to ±1.
fn build_regressor(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let n_sv = attrs::int(ctx.node, "n_supports", 0)?.max(0) as usize;
    let kernel = SvmKernel::from_node(ctx.node, n_sv > 0)?;
    let coef = f64s(ctx.node, "coefficients")?;
    let one_class = attrs::int(ctx.node, "one_class", 0)? != 0;
    let rho = f64s(ctx.node, "rho")?.first().copied().unwrap_or(0.0);
    let sv = f64s(ctx.node, "support_vectors")?;
    let post = PostTransform::from_node(ctx.node)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let (n, c, v) = rows(&node, x)?;
        if (n_sv > 0 && (sv.len() != n_sv * c || coef.len() != n_sv))
            || (n_sv == 0 && coef.len() != c)
        {
            return Err(invalid(
                &node,
                format!(
                    "{} support vector values and {} coefficients do not fit {n_sv} support \
                     vectors of {c} features",
                    sv.len(),
                    coef.len()
                ),
            ));
        }
        let mut out = Vec::with_capacity(n);
        for r in 0..n {
            let row = &v[r * c..(r + 1) * c];
            let mut s = if n_sv > 0 {
                (0..n_sv)
                    .map(|j| coef[j] * kernel.eval(row, &sv[j * c..(j + 1) * c]))
                    .sum::<f64>()
            } else {
                kernel.eval(row, &coef)
            } + rho;
            if one_class {
                s = if s > 0.0 { 1.0 } else { -1.0 };
            }
            out.push(s);
        }
        post.apply_rows(&mut out, 1);
        one(score_tensor(n, 1, &out))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("ai.onnx.ml", "SVMClassifier", 1, build_classifier);
    r.register("ai.onnx.ml", "SVMRegressor", 1, build_regressor);
}

#[cfg(test)]
mod tests {
    use super::super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn svm_regressor_rbf() {
        // 0.5·exp(-0.1·|x - sv0|²) - 1.5·exp(-0.1·|x - sv1|²) + 0.25, checked in float64.
        let n = node(
            "SVMRegressor",
            1,
            1,
            vec![
                ("coefficients", Attribute::Floats(vec![0.5, -1.5])),
                ("kernel_params", Attribute::Floats(vec![0.1, 0.0, 3.0])),
                ("kernel_type", Attribute::String("RBF".into())),
                ("n_supports", Attribute::Int(2)),
                ("rho", Attribute::Floats(vec![0.25])),
                (
                    "support_vectors",
                    Attribute::Floats(vec![1.0, 0.0, 0.0, 2.0]),
                ),
            ],
        )
        .with_domain("ai.onnx.ml");
        let x = rand_f32(4, 5);
        let o = run(&n, 1, &[t(&[2, 2], x.clone())]).unwrap();
        let g = |a: f64, b: f64| (-0.1 * (a * a + b * b)).exp();
        for r in 0..2 {
            let (a, b) = (x[2 * r] as f64, x[2 * r + 1] as f64);
            let want = 0.5 * g(a - 1.0, b) - 1.5 * g(a, b - 2.0) + 0.25;
            assert!((out::<f32>(&o, 0).1[r] as f64 - want).abs() < 1e-6);
        }
    }
}
