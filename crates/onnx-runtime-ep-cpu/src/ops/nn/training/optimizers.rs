//! The `ai.onnx.preview.training` optimizers: Adagrad, Momentum (standard and Nesterov) and
//! Adam. Inputs are `R` (learning rate), `T` (update count), then groups of equally shaped
//! tensors (X..., G..., and the optimizer's state tensors...); outputs are X_new... followed
//! by the new state tensors. Math runs in f64 and is narrowed to each tensor's type.

use crate::kernel::{tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

const DOMAIN: &str = "ai.onnx.preview.training";

#[derive(Clone, Copy)]
enum Algo {
    Adagrad {
        decay: f64,
        eps: f64,
        norm: f64,
    },
    Momentum {
        alpha: f64,
        beta: f64,
        norm: f64,
        nesterov: bool,
    },
    Adam {
        alpha: f64,
        beta: f64,
        eps: f64,
        norm: f64,
        norm_post: f64,
    },
}

impl Algo {
    fn name(&self) -> &'static str {
        match self {
            Algo::Adagrad { .. } => "Adagrad",
            Algo::Momentum { .. } => "Momentum",
            Algo::Adam { .. } => "Adam",
        }
    }

    /// Number of state tensors per optimized tensor.
    fn states(&self) -> usize {
        match self {
            Algo::Adam { .. } => 2,
            _ => 1,
        }
    }

    /// Updates one element: `x` and the states in place, given the step's `r` and `t`.
    fn step(&self, r: f64, t: i64, x: &mut f64, g: f64, s: &mut [f64; 2]) {
        match *self {
            Algo::Adagrad { decay, eps, norm } => {
                let rr = r / (1.0 + t as f64 * decay);
                let gr = norm * *x + g;
                s[0] += gr * gr;
                *x -= rr * gr / (s[0].sqrt() + eps);
            }
            Algo::Momentum {
                alpha,
                beta,
                norm,
                nesterov,
            } => {
                let gr = norm * *x + g;
                let b = if t > 0 { beta } else { 1.0 };
                s[0] = alpha * s[0] + b * gr;
                *x -= if nesterov {
                    r * (gr + alpha * s[0])
                } else {
                    r * s[0]
                };
            }
            Algo::Adam {
                alpha,
                beta,
                eps,
                norm,
                norm_post,
            } => {
                let gr = norm * *x + g;
                s[0] = alpha * s[0] + (1.0 - alpha) * gr;
                s[1] = beta * s[1] + (1.0 - beta) * gr * gr;
                let ra = if t > 0 {
                    r * (1.0 - beta.powi(t as i32)).sqrt() / (1.0 - alpha.powi(t as i32))
                } else {
                    r
                };
                *x = (1.0 - norm_post) * (*x - ra * s[0] / (s[1].sqrt() + eps));
            }
        }
    }
}

struct Optimizer {
    node: String,
    algo: Algo,
}

fn from_f64(dtype: DataType, shape: Vec<usize>, v: Vec<f64>) -> Tensor {
    match dtype {
        DataType::Float64 => Tensor::from_vec(shape, v),
        _ => Tensor::from_vec(shape, v.into_iter().map(|x| x as f32).collect::<Vec<_>>()),
    }
}

fn check_float(node: &str, op: &str, t: &Tensor) -> Result<(), EpError> {
    match t.dtype() {
        DataType::Float32 | DataType::Float64 => Ok(()),
        d => Err(common::unsupported(node, op, d, "float or double")),
    }
}

impl CpuKernel for Optimizer {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let op = self.algo.name();
        let r_t = tensor_input(node, inputs, 0)?;
        let t_t = tensor_input(node, inputs, 1)?;
        check_float(node, op, r_t)?;
        if t_t.dtype() != DataType::Int64 || t_t.numel() != 1 || r_t.numel() != 1 {
            return Err(invalid(
                node,
                "R must be a float scalar and T an int64 scalar",
            ));
        }
        let r = r_t.to_f64_vec().unwrap_or_default()[0];
        let t = t_t.data::<i64>()[0];
        let groups = 2 + self.algo.states();
        let rest = inputs.len().saturating_sub(2);
        if rest == 0 || !rest.is_multiple_of(groups) {
            return Err(invalid(
                node,
                format!(
                    "{op} takes R, T and {groups} equally long groups of tensors (X, G, state...), \
                     got {rest} tensors after T"
                ),
            ));
        }
        let k = rest / groups;
        let mut xs_out = Vec::with_capacity(k);
        let mut states_out: Vec<Vec<Value>> = vec![Vec::with_capacity(k); self.algo.states()];
        for i in 0..k {
            let x = tensor_input(node, inputs, 2 + i)?;
            check_float(node, op, x)?;
            let g = tensor_input(node, inputs, 2 + k + i)?;
            let sts: Vec<&Tensor> = (0..self.algo.states())
                .map(|s| tensor_input(node, inputs, 2 + (2 + s) * k + i))
                .collect::<Result<_, _>>()?;
            for other in std::iter::once(g).chain(sts.iter().copied()) {
                check_float(node, op, other)?;
                if other.shape() != x.shape() {
                    return Err(invalid(
                        node,
                        format!(
                            "tensor group {i}: shape {:?} differs from X's {:?}",
                            other.shape(),
                            x.shape()
                        ),
                    ));
                }
            }
            let mut xv = x.to_f64_vec().unwrap_or_default();
            let gv = g.to_f64_vec().unwrap_or_default();
            let mut sv: Vec<Vec<f64>> = sts
                .iter()
                .map(|s| s.to_f64_vec().unwrap_or_default())
                .collect();
            for e in 0..xv.len() {
                let mut st = [sv[0][e], sv.get(1).map_or(0.0, |v| v[e])];
                self.algo.step(r, t, &mut xv[e], gv[e], &mut st);
                sv[0][e] = st[0];
                if let Some(v) = sv.get_mut(1) {
                    v[e] = st[1];
                }
            }
            xs_out.push(Value::Tensor(from_f64(x.dtype(), x.shape().to_vec(), xv)));
            for (s, v) in sv.into_iter().enumerate() {
                states_out[s].push(Value::Tensor(from_f64(
                    sts[s].dtype(),
                    x.shape().to_vec(),
                    v,
                )));
            }
        }
        Ok(xs_out
            .into_iter()
            .chain(states_out.into_iter().flatten())
            .collect())
    }
}

fn f(n: &onnx_runtime_ir::Node, name: &str, default: f32) -> Result<f64, EpError> {
    Ok(attrs::float(n, name, default)? as f64)
}

fn required(n: &onnx_runtime_ir::Node, name: &str) -> Result<f64, EpError> {
    attrs::opt_float(n, name)?
        .map(|v| v as f64)
        .ok_or_else(|| EpError::invalid_attribute(n, name, "the required attribute is missing"))
}

fn build_adagrad(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let algo = Algo::Adagrad {
        decay: f(n, "decay_factor", 0.0)?,
        eps: f(n, "epsilon", 1e-6)?,
        norm: f(n, "norm_coefficient", 0.0)?,
    };
    Ok(Box::new(Optimizer {
        node: n.describe(),
        algo,
    }))
}

fn build_momentum(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let nesterov = match attrs::opt_string(n, "mode")?.as_deref() {
        Some("standard") => false,
        Some("nesterov") => true,
        other => {
            return Err(EpError::invalid_attribute(
                n,
                "mode",
                format!("{other:?} must be 'standard' or 'nesterov'"),
            ))
        }
    };
    let algo = Algo::Momentum {
        alpha: required(n, "alpha")?,
        beta: required(n, "beta")?,
        norm: required(n, "norm_coefficient")?,
        nesterov,
    };
    Ok(Box::new(Optimizer {
        node: n.describe(),
        algo,
    }))
}

fn build_adam(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let algo = Algo::Adam {
        alpha: f(n, "alpha", 0.9)?,
        beta: f(n, "beta", 0.999)?,
        eps: f(n, "epsilon", 1e-6)?,
        norm: f(n, "norm_coefficient", 0.0)?,
        norm_post: f(n, "norm_coefficient_post", 0.0)?,
    };
    Ok(Box::new(Optimizer {
        node: n.describe(),
        algo,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register(DOMAIN, "Adagrad", 1, build_adagrad);
    r.register(DOMAIN, "Momentum", 1, build_momentum);
    r.register(DOMAIN, "Adam", 1, build_adam);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    /// float64 reference: the spec's Adam pseudo code on two tensors.
    #[test]
    #[allow(clippy::needless_range_loop)]
    fn adam_two_tensors_matches_pseudocode() {
        let n = node(
            "Adam",
            10,
            6,
            vec![
                ("norm_coefficient", Attribute::Float(0.001)),
                ("alpha", Attribute::Float(0.95)),
            ],
        );
        let v: Vec<Vec<f64>> = (0..8).map(|s| rand(3, s + 20, 0.1, 1.0)).collect();
        let mut ins = vec![Some(Tensor::scalar(0.1f64)), Some(Tensor::scalar(3i64))];
        ins.extend(v.iter().map(|x| Some(Tensor::from_vec(vec![3], x.clone()))));
        let out = run(build_adam, &n, 1, &ins).unwrap();
        let (alpha, beta, eps) = (0.95f32 as f64, 0.999f32 as f64, 1e-6f32 as f64);
        for i in 0..2 {
            for e in 0..3 {
                let (x, g, vv, h) = (v[i][e], v[2 + i][e], v[4 + i][e], v[6 + i][e]);
                let gr = 0.001f32 as f64 * x + g;
                let vn = alpha * vv + (1.0 - alpha) * gr;
                let hn = beta * h + (1.0 - beta) * gr * gr;
                let ra = 0.1 * (1.0 - beta.powi(3)).sqrt() / (1.0 - alpha.powi(3));
                let xn = x - ra * vn / (hn.sqrt() + eps);
                assert!((out[i].data::<f64>()[e] - xn).abs() < 1e-12);
                assert!((out[2 + i].data::<f64>()[e] - vn).abs() < 1e-12);
                assert!((out[4 + i].data::<f64>()[e] - hn).abs() < 1e-12);
            }
        }
        assert!(run(build_adam, &n, 1, &ins[..5]).is_err());
    }
}
