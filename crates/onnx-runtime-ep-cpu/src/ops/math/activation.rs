//! Activations: Relu, LeakyRelu, PRelu, Elu, Selu, Celu, Sigmoid, HardSigmoid, HardSwish,
//! Softplus, Softsign, ThresholdedRelu, Mish, Gelu, Swish, Tanh, Clip, Shrink, and the
//! `com.microsoft` Gelu, FastGelu, BiasGelu and QuickGelu.

use super::common::{register_versions, NodeInfo};
use super::elementwise::{binary, unary};
use super::num::{FloatElem, Num, Real};
use super::unary::{float_kernel, float_map, FloatOp};
use super::vecmath;
use crate::attrs;
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::{dispatch_float, dispatch_int, dispatch_numeric, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;

#[inline(always)]
fn sigmoid<R: Real>(x: R) -> R {
    if x >= R::zero() {
        R::one() / (R::one() + (-x).exp())
    } else {
        let e = x.exp();
        e / (R::one() + e)
    }
}

#[inline(always)]
fn softplus<R: Real>(x: R) -> R {
    if x > R::zero() {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

#[inline(always)]
fn gelu_erf<R: Real>(x: R) -> R {
    R::cst(0.5) * x * (R::one() + (x * R::cst(std::f64::consts::FRAC_1_SQRT_2)).erf())
}

#[inline(always)]
fn gelu_tanh<R: Real>(x: R) -> R {
    let k = R::cst((2.0 / std::f64::consts::PI).sqrt());
    R::cst(0.5) * x * (R::one() + (k * (x + R::cst(0.044715) * x * x * x)).tanh())
}

struct Sigmoid;
impl FloatOp for Sigmoid {
    fn f<R: Real>(&self, x: R) -> R {
        sigmoid(x)
    }
    #[inline(always)]
    fn f32(&self, x: f32) -> f32 {
        vecmath::sigmoid(x)
    }
}
struct Tanh;
impl FloatOp for Tanh {
    fn f<R: Real>(&self, x: R) -> R {
        x.tanh()
    }
    #[inline(always)]
    fn f32(&self, x: f32) -> f32 {
        vecmath::tanh(x)
    }
}
struct Softplus;
impl FloatOp for Softplus {
    fn f<R: Real>(&self, x: R) -> R {
        softplus(x)
    }
}
struct Softsign;
impl FloatOp for Softsign {
    fn f<R: Real>(&self, x: R) -> R {
        x / (R::one() + x.abs())
    }
}
struct Mish;
impl FloatOp for Mish {
    fn f<R: Real>(&self, x: R) -> R {
        x * softplus(x).tanh()
    }
}
struct HardSwish;
impl FloatOp for HardSwish {
    fn f<R: Real>(&self, x: R) -> R {
        let t = x / R::cst(6.0) + R::cst(0.5);
        x * t.max(R::zero()).min(R::one())
    }
}
struct GeluErf;
impl FloatOp for GeluErf {
    fn f<R: Real>(&self, x: R) -> R {
        gelu_erf(x)
    }
    #[inline(always)]
    fn f32(&self, x: f32) -> f32 {
        0.5 * x * (1.0 + vecmath::erf(x * std::f32::consts::FRAC_1_SQRT_2))
    }
}
struct GeluTanh;
impl FloatOp for GeluTanh {
    fn f<R: Real>(&self, x: R) -> R {
        gelu_tanh(x)
    }
    #[inline(always)]
    fn f32(&self, x: f32) -> f32 {
        vecmath::gelu_tanh(x)
    }
}
struct LeakyRelu(f64);
impl FloatOp for LeakyRelu {
    fn f<R: Real>(&self, x: R) -> R {
        if x < R::zero() {
            x * R::cst(self.0)
        } else {
            x
        }
    }
}
struct Elu(f64);
impl FloatOp for Elu {
    fn f<R: Real>(&self, x: R) -> R {
        if x < R::zero() {
            R::cst(self.0) * x.exp_m1()
        } else {
            x
        }
    }
}
struct Selu(f64, f64);
impl FloatOp for Selu {
    fn f<R: Real>(&self, x: R) -> R {
        let (alpha, gamma) = (R::cst(self.0), R::cst(self.1));
        if x > R::zero() {
            gamma * x
        } else {
            gamma * (alpha * x.exp() - alpha)
        }
    }
}
struct Celu(f64);
impl FloatOp for Celu {
    fn f<R: Real>(&self, x: R) -> R {
        let a = R::cst(self.0);
        x.max(R::zero()) + (a * (x / a).exp_m1()).min(R::zero())
    }
}
struct HardSigmoid(f64, f64);
impl FloatOp for HardSigmoid {
    fn f<R: Real>(&self, x: R) -> R {
        (R::cst(self.0) * x + R::cst(self.1))
            .max(R::zero())
            .min(R::one())
    }
}
struct ThresholdedRelu(f64);
impl FloatOp for ThresholdedRelu {
    fn f<R: Real>(&self, x: R) -> R {
        if x > R::cst(self.0) {
            x
        } else {
            R::zero()
        }
    }
}
/// x * sigmoid(alpha * x): Swish and com.microsoft QuickGelu.
struct Swish(f64);
impl FloatOp for Swish {
    fn f<R: Real>(&self, x: R) -> R {
        x * sigmoid(R::cst(self.0) * x)
    }
    #[inline(always)]
    fn f32(&self, x: f32) -> f32 {
        x * vecmath::sigmoid(self.0 as f32 * x)
    }
}

/// com.microsoft QuickGelu (`x * sigmoid(alpha * x)`) as a kernel of `ctx`'s node, for fused
/// kernels that must give QuickGelu's exact values.
pub(crate) fn quick_gelu_kernel(ctx: &BuildContext<'_>, alpha: f64) -> Box<dyn CpuKernel> {
    float_kernel(ctx, Swish(alpha))
}

fn build_relu(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let out = dispatch_int!(x.dtype(), T => unary::<T, T>(x, |v| {
            if v < T::num_zero() { T::num_zero() } else { v }
        }), _ => {
            dispatch_float!(x.dtype(), T => unary::<T, T>(x, |v| {
                let c = v.up();
                if c < <T as FloatElem>::C::cst(0.0) { T::num_zero() } else { v }
            }), d => return Err(info.bad_dtype(d, "Relu takes float or signed integer types")))
        });
        Ok(vec![Value::Tensor(out)])
    }))
}

/// Before opset 7 a 1-D slope of X's channel count (axis 1) holds one slope per channel;
/// the result is that slope shaped [C, 1, .., 1] for numpy broadcasting. Opset 7 and later
/// broadcast the slope as given (numpy, unidirectional).
fn legacy_channel_slope(opset: u64, x: &Tensor, slope: &Tensor) -> Option<Tensor> {
    let c = *x.shape().get(1)?;
    if opset >= 7 || slope.rank() != 1 || slope.shape()[0] != c || c == 1 {
        return None;
    }
    let mut shape = vec![c];
    shape.resize(x.rank() - 1, 1);
    Some(slope.reshaped(shape))
}

fn build_prelu(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let opset = ctx.opset;
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let slope = info.input(inputs, 1)?;
        info.same_dtype(x, slope)?;
        let legacy = legacy_channel_slope(opset, x, slope);
        let slope = legacy.as_ref().unwrap_or(slope);
        let out = dispatch_numeric!(x.dtype(), T => binary::<T>(&info.desc, x, slope, |v, s| {
            if v < T::num_zero() { v.mul(s) } else { v }
        })?, d => return Err(info.bad_dtype(d, "PRelu takes numeric types")));
        if out.shape() != x.shape() {
            return Err(info.invalid(format!(
                "slope of shape {:?} must broadcast to X's shape {:?}",
                slope.shape(),
                x.shape()
            )));
        }
        Ok(vec![Value::Tensor(out)])
    }))
}

/// Clip: bounds from attributes `min`/`max` before opset 11, from optional scalar inputs after.
fn build_clip(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let attr_bounds = if ctx.opset < 11 {
        Some((
            attrs::float(ctx.node, "min", f32::MIN)? as f64,
            attrs::float(ctx.node, "max", f32::MAX)? as f64,
        ))
    } else {
        None
    };
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let bound = |i: usize| -> Result<Option<&Tensor>, EpError> {
            let t = info.opt_input(inputs, i)?;
            if let Some(t) = t {
                info.same_dtype(x, t)?;
                if t.numel() != 1 {
                    return Err(info.invalid(format!(
                        "Clip bounds must be scalars, got shape {:?}",
                        t.shape()
                    )));
                }
            }
            Ok(t)
        };
        let out = dispatch_numeric!(x.dtype(), T => {
            let (lo, hi) = match attr_bounds {
                Some((lo, hi)) => (T::of_f64(lo), T::of_f64(hi)),
                None => (
                    bound(1)?.map_or(T::lowest(), |t| t.data::<T>()[0]),
                    bound(2)?.map_or(T::highest(), |t| t.data::<T>()[0]),
                ),
            };
            unary::<T, T>(x, |v| {
                let v = if v < lo { lo } else { v };
                if v > hi { hi } else { v }
            })
        }, d => return Err(info.bad_dtype(d, "Clip takes numeric types")));
        Ok(vec![Value::Tensor(out)])
    }))
}

fn build_shrink(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let lambd = attrs::float(ctx.node, "lambd", 0.5)? as f64;
    let bias = attrs::float(ctx.node, "bias", 0.0)? as f64;
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let out = dispatch_numeric!(x.dtype(), T => unary::<T, T>(x, |v| {
            let f = v.as_f64();
            if f < -lambd {
                T::of_f64(f + bias)
            } else if f > lambd {
                T::of_f64(f - bias)
            } else {
                T::num_zero()
            }
        }), d => return Err(info.bad_dtype(d, "Shrink takes numeric types")));
        Ok(vec![Value::Tensor(out)])
    }))
}

fn build_gelu(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    match attrs::string(ctx.node, "approximate", "none")?.as_str() {
        "none" => Ok(float_kernel(ctx, GeluErf)),
        "tanh" => Ok(float_kernel(ctx, GeluTanh)),
        other => Err(EpError::invalid_attribute(
            ctx.node,
            "approximate",
            format!("must be 'none' or 'tanh', got '{other}'"),
        )),
    }
}

/// com.microsoft FastGelu (tanh approximation) and BiasGelu (erf): gelu(X + bias).
fn bias_gelu_kernel<O: FloatOp>(ctx: &BuildContext<'_>, op: O) -> Box<dyn CpuKernel> {
    let info = NodeInfo::new(ctx.node);
    kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let out = match info.opt_input(inputs, 1)? {
            None => float_map(&info, x, &op)?,
            Some(b) => {
                info.same_dtype(x, b)?;
                if x.dtype() == onnx_runtime_ir::DataType::Float32 {
                    binary::<f32>(
                        &info.desc,
                        x,
                        b,
                        #[inline(always)]
                        |v, c| op.f32(v + c),
                    )?
                } else {
                    dispatch_float!(x.dtype(), T => binary::<T>(&info.desc, x, b, |v, c| {
                        T::down(op.f(v.up() + c.up()))
                    })?, d => return Err(info.bad_dtype(d, "expected a float type")))
                }
            }
        };
        Ok(vec![Value::Tensor(out)])
    })
}

/// SwiGLU (opset 28): `Y = Swish_alpha(A) * B` for a gate `A` and a value `B` of one shape
/// (no broadcasting).
fn build_swiglu(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let op = Swish(f64_attr(ctx, "alpha", 1.0)?);
    Ok(kernel_fn(move |inputs| {
        let a = info.input(inputs, 0)?;
        let b = info.input(inputs, 1)?;
        info.same_dtype(a, b)?;
        if a.shape() != b.shape() {
            return Err(info.invalid(format!(
                "A {:?} and B {:?} must have the same shape (SwiGLU does not broadcast)",
                a.shape(),
                b.shape()
            )));
        }
        let out = if a.dtype() == onnx_runtime_ir::DataType::Float32 {
            binary::<f32>(
                &info.desc,
                a,
                b,
                #[inline(always)]
                |g, v| op.f32(g) * v,
            )?
        } else {
            dispatch_float!(a.dtype(), T => binary::<T>(&info.desc, a, b, |g, v| {
                T::down(op.f(g.up()) * v.up())
            })?, d => return Err(info.bad_dtype(d, "SwiGLU takes float types")))
        };
        Ok(vec![Value::Tensor(out)])
    }))
}

fn f64_attr(ctx: &BuildContext<'_>, name: &str, default: f32) -> Result<f64, EpError> {
    Ok(attrs::float(ctx.node, name, default)? as f64)
}

pub fn register(r: &mut CpuRegistry) {
    register_versions(r, "", "Relu", &[1, 6, 13, 14], build_relu);
    register_versions(r, "", "LeakyRelu", &[1, 6, 16], |ctx| {
        Ok(float_kernel(ctx, LeakyRelu(f64_attr(ctx, "alpha", 0.01)?)))
    });
    register_versions(r, "", "PRelu", &[1, 6, 7, 9, 16], build_prelu);
    register_versions(r, "", "Elu", &[1, 6, 22], |ctx| {
        Ok(float_kernel(ctx, Elu(f64_attr(ctx, "alpha", 1.0)?)))
    });
    register_versions(r, "", "Selu", &[1, 6, 22], |ctx| {
        let alpha = f64_attr(ctx, "alpha", 1.673_263_2)?;
        let gamma = f64_attr(ctx, "gamma", 1.050_701)?;
        Ok(float_kernel(ctx, Selu(alpha, gamma)))
    });
    r.register("", "Celu", 12, |ctx| {
        Ok(float_kernel(ctx, Celu(f64_attr(ctx, "alpha", 1.0)?)))
    });
    register_versions(r, "", "Sigmoid", &[1, 6, 13], |ctx| {
        Ok(float_kernel(ctx, Sigmoid))
    });
    register_versions(r, "", "HardSigmoid", &[1, 6, 22], |ctx| {
        let alpha = f64_attr(ctx, "alpha", 0.2)?;
        let beta = f64_attr(ctx, "beta", 0.5)?;
        Ok(float_kernel(ctx, HardSigmoid(alpha, beta)))
    });
    register_versions(r, "", "HardSwish", &[14, 22], |ctx| {
        Ok(float_kernel(ctx, HardSwish))
    });
    register_versions(r, "", "Softplus", &[1, 22], |ctx| {
        Ok(float_kernel(ctx, Softplus))
    });
    register_versions(r, "", "Softsign", &[1, 22], |ctx| {
        Ok(float_kernel(ctx, Softsign))
    });
    register_versions(r, "", "ThresholdedRelu", &[10, 22], |ctx| {
        Ok(float_kernel(
            ctx,
            ThresholdedRelu(f64_attr(ctx, "alpha", 1.0)?),
        ))
    });
    register_versions(r, "", "Mish", &[18, 22], |ctx| Ok(float_kernel(ctx, Mish)));
    r.register("", "Gelu", 20, build_gelu);
    r.register("", "Swish", 24, |ctx| {
        Ok(float_kernel(ctx, Swish(f64_attr(ctx, "alpha", 1.0)?)))
    });
    r.register("", "SwiGLU", 28, build_swiglu);
    register_versions(r, "", "Tanh", &[1, 6, 13], |ctx| {
        Ok(float_kernel(ctx, Tanh))
    });
    register_versions(r, "", "Clip", &[1, 6, 11, 12, 13], build_clip);
    r.register("", "Shrink", 9, build_shrink);

    let ms = "com.microsoft";
    r.register(ms, "Gelu", 1, |ctx| Ok(float_kernel(ctx, GeluErf)));
    r.register(ms, "FastGelu", 1, |ctx| Ok(bias_gelu_kernel(ctx, GeluTanh)));
    r.register(ms, "BiasGelu", 1, |ctx| Ok(bias_gelu_kernel(ctx, GeluErf)));
    r.register(ms, "QuickGelu", 1, |ctx| {
        Ok(float_kernel(ctx, Swish(f64_attr(ctx, "alpha", 1.702)?)))
    });
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py activation).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("Relu", 22, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, 0.0, 0.0, 2.2413206100463867, 0.0, 1.927370548248291], 1e-05);
        check("Sigmoid", 22, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.6793034672737122, 0.9155436158180237, 0.8394463062286377, 0.16127702593803406, 0.23165278136730194, 0.9038992524147034, 0.0488736666738987, 0.8729581236839294], 1e-05);
        check("Softplus", 22, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[1.13726007938385, 2.471520185470581, 1.8291268348693848, 0.1758747696876526, 0.2635134756565094, 2.342357873916626, 0.05010838434100151, 2.0632383823394775], 1e-05);
        check("Softsign", 22, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.4287584125995636, 0.7044290900230408, 0.6232264041900635, -0.6224643588066101, -0.5452483296394348, 0.6914837956428528, -0.7480098009109497, 0.6583964824676514], 1e-05);
        check("Tanh", 22, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.6354905962944031, 0.9831244945526123, 0.929419994354248, -0.928686797618866, -0.8333500623703003, 0.9776456356048584, -0.9947330951690674, 0.9585202932357788], 1e-05);
        check("HardSwish", 22, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.4691796600818634, 2.1383142471313477, 1.283072590827942, -0.37131187319755554, -0.3599000573158264, 1.9579133987426758, -0.015629546716809273, 1.5828114748001099], 1e-05);
        check("Mish", 22, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.6105830669403076, 2.3495242595672607, 1.5709792375564575, -0.2870214283466339, -0.3088376224040985, 2.200300693511963, -0.14861775934696198, 1.8661445379257202], 1e-05);
        check("Elu", 22, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -0.8077112436294556, -0.6985051035881042, 2.2413206100463867, -0.9486149549484253, 1.927370548248291], 1e-05);
        check("Selu", 22, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.7886276245117188, 2.504117727279663, 1.7379794120788574, -1.4200365543365479, -1.228041410446167, 2.3549578189849854, -1.6677594184875488, 2.025090217590332], 1e-05);
        check("Celu", 22, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -0.8077112436294556, -0.6985051035881042, 2.2413206100463867, -0.9486149549484253, 1.927370548248291], 1e-05);
        check("Relu", 21, vec![], &[i8s(&[5], &[-15, 11, -16, -2, 12])], DataType::Int8, &[5], &[0.0, 11.0, 0.0, 0.0, 12.0], 1e-05);
        check("LeakyRelu", 21, vec![("alpha", float(0.3))], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -0.49462708830833435, -0.35970067977905273, 2.2413206100463867, -0.8905224800109863, 1.927370548248291], 1e-05);
        check("Elu", 21, vec![("alpha", float(0.5))], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -0.4038556218147278, -0.3492525517940521, 2.2413206100463867, -0.47430747747421265, 1.927370548248291], 1e-05);
        check("HardSigmoid", 21, vec![("alpha", float(0.3)), ("beta", float(0.4))], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.6251718401908875, 1.0, 0.8962342739105225, 0.0, 0.04029932618141174, 1.0, 0.0, 0.9782111644744873], 1e-05);
        check("ThresholdedRelu", 21, vec![("alpha", float(0.7))], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, 0.0, 0.0, 2.2413206100463867, 0.0, 1.927370548248291], 1e-05);
        check("Celu", 21, vec![("alpha", float(2.0))], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.1229851245880127, -0.9018290042877197, 2.2413206100463867, -1.5466346740722656, 1.927370548248291], 1e-05);
        check("Gelu", 20, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.5806019306182861, 2.362835645675659, 1.5729762315750122, -0.08177623897790909, -0.13820122182369232, 2.2132980823516846, -0.004442912060767412, 1.8753957748413086], 1e-05);
        check("Gelu", 20, vec![("approximate", string("tanh"))], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.5805328488349915, 2.3632240295410156, 1.5728178024291992, -0.08193749934434891, -0.1384146511554718, 2.213595390319824, -0.00401951652020216, 1.8754312992095947], 1e-05);
        check("PRelu", 21, vec![], &[f32s(&[2, 3, 4], &[-1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654, -2.7859182357788086, 0.08933292329311371, -0.2027638554573059, 2.50300669670105, 0.7753575444221497, 0.0847058817744255, -0.018759388476610184, -1.5149104595184326, -2.9292359352111816, -1.845587134361267, 1.1521927118301392]), f32s(&[3, 1], &[-1.796359658241272, -0.7827821373939514, -2.9775946140289307])], DataType::Float32, &[2, 3, 4], &[2.3881638050079346, 2.642054319381714, 0.5919762253761292, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, 5.086171627044678, 6.070504665374756, 0.6752375960350037, 4.915464878082275, 5.00451135635376, 0.08933292329311371, 0.3642368018627167, 2.50300669670105, 0.7753575444221497, 0.0847058817744255, 0.01468451414257288, 4.510789394378662, 8.722077369689941, 5.495410442352295, 1.1521927118301392], 1e-05);
        check("PRelu", 16, vec![], &[i32s(&[2, 3], &[-8, 4, 13, 6, -14, 1]), i32s(&[3], &[-10, 18, 15])], DataType::Int32, &[2, 3], &[80.0, 4.0, 13.0, 6.0, -252.0, 1.0], 1e-05);
        check("Clip", 13, vec![], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291]), f32s(&[], &[-1.0]), f32s(&[], &[1.5])], DataType::Float32, &[2, 4], &[0.7505728006362915, 1.5, 1.5, -1.0, -1.0, 1.5, -1.0, 1.5], 1e-05);
        check("Clip", 13, vec![], &[i64s(&[6], &[-13, 0, 17, 13, 8, 5]), i64s(&[], &[-4]), i64s(&[], &[6])], DataType::Int64, &[6], &[-4.0, 0.0, 6.0, 6.0, 6.0, 5.0], 1e-05);
        check("Clip", 6, vec![("min", float(-0.5)), ("max", float(0.5))], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.5, 0.5, 0.5, -0.5, -0.5, 0.5, -0.5, 0.5], 1e-05);
        check("Shrink", 9, vec![("lambd", float(1.0)), ("bias", float(0.5))], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.0, 1.8832828998565674, 1.1541141271591187, -1.1487568616867065, -0.6990022659301758, 1.7413206100463867, -2.4684081077575684, 1.427370548248291], 1e-05);
        check("Shrink", 9, vec![("lambd", float(2.0)), ("bias", float(1.0))], &[i8s(&[6], &[-19, 9, -2, -17, -11, 1])], DataType::Int8, &[6], &[-18.0, 8.0, 0.0, -16.0, -10.0, 0.0], 1e-05);
        check("Swish", 24, vec![("alpha", float(0.8))], &[f32s(&[2, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291])], DataType::Float32, &[2, 4], &[0.48469078540802, 2.0749807357788086, 1.306301474571228, -0.34786099195480347, -0.33216923475265503, 1.9214876890182495, -0.25267189741134644, 1.5876526832580566], 1e-05);
    }

    #[track_caller]
    fn check_ms(
        op: &str,
        attrs: Vec<(&str, onnx_runtime_ir::Attribute)>,
        inputs: &[Option<crate::Tensor>],
        shape: &[usize],
        want: &[f64],
        tol: f64,
    ) {
        let got = run_op("com.microsoft", op, 1, attrs, inputs)
            .unwrap()
            .remove(0);
        assert_close(&got, want, shape, tol, tol);
    }

    /// com.microsoft activations; expected values from onnxruntime (scripts/math_cases.py ms).
    #[test]
    #[rustfmt::skip]
    fn matches_onnxruntime_contrib_ops() {
        check_ms("Gelu", vec![], &[Some(f32s(&[2, 5], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812]))], &[2, 5], &[0.5806019306182861, 2.362835645675659, 1.5729762315750122, -0.08177623897790909, -0.1382012665271759, 2.2132980823516846, -0.004442912060767412, 1.875395655632019, 1.7158600091934204, -0.08151927590370178], 1e-05);
        check_ms("FastGelu", vec![], &[Some(f32s(&[2, 5], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812]))], &[2, 5], &[0.5805328488349915, 2.3632240295410156, 1.5728178024291992, -0.08193749934434891, -0.13841459155082703, 2.213595390319824, -0.004019693471491337, 1.8754311800003052, 1.715781331062317, -0.081519715487957], 1e-05);
        check_ms("FastGelu", vec![], &[Some(f32s(&[2, 5], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812])), Some(f32s(&[5], &[-1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976]))], &[2, 5], &[-0.14367496967315674, 0.8998274803161621, 0.1049993485212326, -0.04729614779353142, -0.14158116281032562, 0.9060484766960144, -1.5626497770426795e-05, 0.3086486756801605, 1.3463997840881348, -0.07172533869743347], 1e-05);
        check_ms("BiasGelu", vec![], &[Some(f32s(&[2, 5], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812])), Some(f32s(&[5], &[0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395]))], &[2, 5], &[0.9194391965866089, 5.3562846183776855, 3.408978223800659, -0.16474664211273193, 1.6629538536071777, 2.548983335494995, 0.0023052236065268517, 3.682918071746826, 2.5005416870117188, 2.7329843044281006], 1e-05);
        check_ms("QuickGelu", vec![], &[Some(f32s(&[2, 5], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812]))], &[2, 5], &[0.5869626402854919, 2.3427250385284424, 1.5606520175933838, -0.09396417438983917, -0.1378796249628067, 2.192979097366333, -0.01886242814362049, 1.857502818107605, 1.700554370880127, -0.08058490604162216], 1e-05);
        check_ms("QuickGelu", vec![("alpha", float(1.2))], &[Some(f32s(&[2, 5], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812]))], &[2, 5], &[0.5337253212928772, 2.254180908203125, 1.4543079137802124, -0.2002876251935959, -0.22988569736480713, 2.0987932682037354, -0.08191689103841782, 1.7537823915481567, 1.5945979356765747, -0.08513999730348587], 1e-05);
    }

    /// SwiGLU = A * sigmoid(alpha * A) * B, against float64 math; shapes must match.
    #[test]
    fn swiglu_gates_and_refuses_broadcasting() {
        let a = [0.0, 1.0, -2.0, 3.5];
        let b = [2.0, 3.0, 4.0, -1.5];
        for alpha in [1.0f64, 0.5] {
            let want: Vec<f64> = a
                .iter()
                .zip(&b)
                .map(|(&g, &v)| g / (1.0 + (-alpha * g).exp()) * v)
                .collect();
            check(
                "SwiGLU",
                28,
                vec![("alpha", float(alpha as f32))],
                &[f32s(&[2, 2], &a), f32s(&[2, 2], &b)],
                DataType::Float32,
                &[2, 2],
                &want,
                1e-6,
            );
            check(
                "SwiGLU",
                28,
                vec![("alpha", float(alpha as f32))],
                &[f64s(&[4], &a), f64s(&[4], &b)],
                DataType::Float64,
                &[4],
                &want,
                1e-12,
            );
        }
        let err = run_op(
            "",
            "SwiGLU",
            28,
            vec![],
            &[Some(f32s(&[2, 2], &a)), Some(f32s(&[2], &[1.0, 2.0]))],
        )
        .unwrap_err();
        assert!(err.to_string().contains("same shape"), "{err}");
    }
}
