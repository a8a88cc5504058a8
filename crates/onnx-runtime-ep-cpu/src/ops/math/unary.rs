//! Unary math: Abs, Neg, Sign, Ceil, Floor, Round, Sqrt, Reciprocal, Exp, Log, the
//! trigonometric and hyperbolic functions, Erf, IsNaN, IsInf, Not and BitwiseNot.

use super::common::{register_versions, NodeInfo};
use super::elementwise::{unary, unary_as};
use super::num::{FloatElem, Int, Real};
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::{dispatch_float, dispatch_int, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

/// A float function applied in the compute type (f32 for f16/bf16, rounded once).
pub trait FloatOp: Send + Sync + 'static {
    fn f<R: Real>(&self, x: R) -> R;
    /// The f32 computation (f32, f16 and bf16 tensors): a vectorizable approximation where
    /// one exists (see `vecmath`), else `f`.
    #[inline(always)]
    fn f32(&self, x: f32) -> f32 {
        self.f(x)
    }
}

/// Applies `op` to a float tensor; other dtypes are an error naming the node.
pub fn float_map<O: FloatOp>(info: &NodeInfo, x: &Tensor, op: &O) -> Result<Tensor, EpError> {
    use half::{bf16, f16};
    Ok(match x.dtype() {
        // Always inlined: the approximations are too big for the inliner's own judgement, and
        // a call per element would keep the loop scalar.
        DataType::Float32 => super::elementwise::unary_f32(
            x,
            #[inline(always)]
            |v| op.f32(v),
        ),
        DataType::Float64 => unary::<f64, f64>(
            x,
            #[inline(always)]
            |v| op.f(v),
        ),
        DataType::Float16 => unary::<f16, f16>(
            x,
            #[inline(always)]
            |v| f16::from_f32(op.f32(v.to_f32())),
        ),
        DataType::BFloat16 => unary::<bf16, bf16>(
            x,
            #[inline(always)]
            |v| bf16::from_f32(op.f32(v.to_f32())),
        ),
        d => return Err(info.bad_dtype(d, "expected float, double, float16 or bfloat16")),
    })
}

/// A kernel applying `op` to its one float input.
pub fn float_kernel<O: FloatOp>(ctx: &BuildContext<'_>, op: O) -> Box<dyn CpuKernel> {
    let info = NodeInfo::new(ctx.node);
    kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        Ok(vec![Value::Tensor(float_map(&info, x, &op)?)])
    })
}

macro_rules! float_ops {
    ($($name:ident: |$x:ident| $e:expr $(, f32: $fast:path)?;)*) => {$(
        pub struct $name;
        impl FloatOp for $name {
            #[inline(always)]
            fn f<R: Real>(&self, $x: R) -> R { $e }
            $(
                #[inline(always)]
                fn f32(&self, x: f32) -> f32 { $fast(x) }
            )?
        }
    )*};
}

float_ops! {
    Ceil: |x| x.ceil();
    Floor: |x| x.floor();
    Round: |x| round_half_even(x);
    Sqrt: |x| x.sqrt();
    Reciprocal: |x| x.recip();
    Exp: |x| x.exp(), f32: super::vecmath::exp;
    Log: |x| x.ln();
    Sin: |x| x.sin();
    Cos: |x| x.cos();
    Tan: |x| x.tan();
    Asin: |x| x.asin();
    Acos: |x| x.acos();
    Atan: |x| x.atan();
    Sinh: |x| x.sinh();
    Cosh: |x| x.cosh();
    Asinh: |x| x.asinh();
    Acosh: |x| x.acosh();
    Atanh: |x| x.atanh();
    Erf: |x| x.erf(), f32: super::vecmath::erf;
    FAbs: |x| x.abs();
    FNeg: |x| -x;
    FSign: |x| if x > R::zero() { R::one() } else if x < R::zero() { -R::one() } else { x };
}

/// Rounds to the nearest integer, halves to even (as numpy.round).
#[inline(always)]
pub fn round_half_even<R: Real>(x: R) -> R {
    let r = x.round();
    if (x - x.trunc()).abs() == R::cst(0.5) {
        // A tie: round() went away from zero; take the even neighbour.
        let half = r / R::cst(2.0);
        if half.trunc() != half {
            return r - x.signum();
        }
    }
    r
}

/// Abs, Neg and Sign also take integers.
fn signed_kernel<O: FloatOp>(
    ctx: &BuildContext<'_>,
    op: O,
    int_f: fn(&NodeInfo, &Tensor) -> Option<Result<Tensor, EpError>>,
) -> Box<dyn CpuKernel> {
    let info = NodeInfo::new(ctx.node);
    kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let out = match int_f(&info, x) {
            Some(r) => r?,
            None => float_map(&info, x, &op)?,
        };
        Ok(vec![Value::Tensor(out)])
    })
}

fn int_abs(_: &NodeInfo, x: &Tensor) -> Option<Result<Tensor, EpError>> {
    dispatch_int!(x.dtype(), T => Some(Ok(unary::<T, T>(x, |v| v.abs_()))), _ => None)
}

fn int_neg(info: &NodeInfo, x: &Tensor) -> Option<Result<Tensor, EpError>> {
    if x.dtype().is_unsigned_int() {
        return Some(Err(info.bad_dtype(x.dtype(), "Neg takes signed types")));
    }
    dispatch_int!(x.dtype(), T => Some(Ok(unary::<T, T>(x, |v| v.neg_()))), _ => None)
}

fn int_sign(_: &NodeInfo, x: &Tensor) -> Option<Result<Tensor, EpError>> {
    dispatch_int!(x.dtype(), T => Some(Ok(unary::<T, T>(x, |v| v.signum_()))), _ => None)
}

/// Whether a float8 byte is NaN / ±inf, by format.
fn f8_class(dtype: DataType, b: u8) -> (bool, i8) {
    match dtype {
        DataType::Float8E4M3FN => (b & 0x7f == 0x7f, 0),
        DataType::Float8E4M3FNUZ | DataType::Float8E5M2FNUZ => (b == 0x80, 0),
        DataType::Float8E5M2 => {
            let m = b & 0x7f;
            let inf = if m == 0x7c {
                if b & 0x80 != 0 {
                    -1
                } else {
                    1
                }
            } else {
                0
            };
            (m > 0x7c, inf)
        }
        _ => (false, 0),
    }
}

fn is_f8(d: DataType) -> bool {
    matches!(
        d,
        DataType::Float8E4M3FN
            | DataType::Float8E4M3FNUZ
            | DataType::Float8E5M2
            | DataType::Float8E5M2FNUZ
    )
}

fn build_isnan(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let d = x.dtype();
        let out = if is_f8(d) {
            unary_as::<u8, u8>(x, DataType::Bool, |b| f8_class(d, b).0 as u8)
        } else {
            dispatch_float!(d, T => unary_as::<T, u8>(x, DataType::Bool, |v| v.up().is_nan() as u8),
                d => return Err(info.bad_dtype(d, "IsNaN takes float types")))
        };
        Ok(vec![Value::Tensor(out)])
    }))
}

fn build_isinf(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let neg = crate::attrs::int(ctx.node, "detect_negative", 1)? != 0;
    let pos = crate::attrs::int(ctx.node, "detect_positive", 1)? != 0;
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let d = x.dtype();
        let out = if is_f8(d) {
            unary_as::<u8, u8>(x, DataType::Bool, |b| {
                let s = f8_class(d, b).1;
                ((s > 0 && pos) || (s < 0 && neg)) as u8
            })
        } else {
            dispatch_float!(d, T => unary_as::<T, u8>(x, DataType::Bool, |v| {
                let v = v.up();
                (v.is_infinite() && ((v > <T as FloatElem>::C::cst(0.0) && pos)
                    || (v < <T as FloatElem>::C::cst(0.0) && neg))) as u8
            }), d => return Err(info.bad_dtype(d, "IsInf takes float types")))
        };
        Ok(vec![Value::Tensor(out)])
    }))
}

fn build_not(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        if x.dtype() != DataType::Bool {
            return Err(info.bad_dtype(x.dtype(), "Not takes bool"));
        }
        Ok(vec![Value::Tensor(unary_as::<u8, u8>(
            x,
            DataType::Bool,
            |v| (v == 0) as u8,
        ))])
    }))
}

fn build_bitwise_not(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let out = dispatch_int!(x.dtype(), T => unary::<T, T>(x, |v| v.not()),
            d => return Err(info.bad_dtype(d, "BitwiseNot takes integer types")));
        Ok(vec![Value::Tensor(out)])
    }))
}

macro_rules! float_factories {
    ($r:ident; $($op:literal => $ty:ident @ $versions:expr;)*) => {$(
        register_versions($r, "", $op, $versions, |ctx| Ok(float_kernel(ctx, $ty)));
    )*};
}

pub fn register(r: &mut CpuRegistry) {
    float_factories! { r;
        "Ceil" => Ceil @ &[1, 6, 13];
        "Floor" => Floor @ &[1, 6, 13];
        "Round" => Round @ &[11, 22];
        "Sqrt" => Sqrt @ &[1, 6, 13];
        "Reciprocal" => Reciprocal @ &[1, 6, 13];
        "Exp" => Exp @ &[1, 6, 13];
        "Log" => Log @ &[1, 6, 13];
        "Sin" => Sin @ &[7, 22];
        "Cos" => Cos @ &[7, 22];
        "Tan" => Tan @ &[7, 22];
        "Asin" => Asin @ &[7, 22];
        "Acos" => Acos @ &[7, 22];
        "Atan" => Atan @ &[7, 22];
        "Sinh" => Sinh @ &[9, 22];
        "Cosh" => Cosh @ &[9, 22];
        "Asinh" => Asinh @ &[9, 22];
        "Acosh" => Acosh @ &[9, 22];
        "Atanh" => Atanh @ &[9, 22];
        "Erf" => Erf @ &[9, 13];
    }
    register_versions(r, "", "Abs", &[1, 6, 13], |ctx| {
        Ok(signed_kernel(ctx, FAbs, int_abs))
    });
    register_versions(r, "", "Neg", &[1, 6, 13], |ctx| {
        Ok(signed_kernel(ctx, FNeg, int_neg))
    });
    register_versions(r, "", "Sign", &[9, 13], |ctx| {
        Ok(signed_kernel(ctx, FSign, int_sign))
    });
    register_versions(r, "", "IsNaN", &[9, 13, 20], build_isnan);
    register_versions(r, "", "IsInf", &[10, 20], build_isinf);
    r.register("", "Not", 1, build_not);
    r.register("", "BitwiseNot", 18, build_bitwise_not);
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py unary).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("Abs", 21, vec![], &[f32s(&[2, 3], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867])], DataType::Float32, &[2, 3], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, 1.6487568616867065, 1.1990022659301758, 2.2413206100463867], 1e-05);
        check("Neg", 21, vec![], &[f32s(&[2, 3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809])], DataType::Float32, &[2, 3], &[2.9684081077575684, -1.927370548248291, -1.782416582107544, 0.19239027798175812, 1.1818054914474487, 1.3294463157653809], 1e-05);
        check("Sign", 21, vec![], &[f32s(&[2, 3], &[-1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673])], DataType::Float32, &[2, 3], &[-1.0, -1.0, 1.0, 1.0, 1.0, 1.0], 1e-05);
        check("Ceil", 21, vec![], &[f32s(&[2, 3], &[0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654])], DataType::Float32, &[2, 3], &[1.0, 3.0, -1.0, -2.0, 1.0, -2.0], 1e-05);
        check("Floor", 21, vec![], &[f32s(&[2, 3], &[-2.7859182357788086, 0.08933292329311371, -0.2027638554573059, 2.50300669670105, 0.7753575444221497, 0.0847058817744255])], DataType::Float32, &[2, 3], &[-3.0, 0.0, -1.0, 2.0, 0.0, 0.0], 1e-05);
        check("Sqrt", 21, vec![], &[f32s(&[2, 3], &[1.5409330129623413, 0.8177932500839233, 0.13420267403125763, 0.6579661965370178, 2.1068930625915527, 0.6817594766616821])], DataType::Float32, &[2, 3], &[1.2413432598114014, 0.9043192267417908, 0.3663368225097656, 0.8111511468887329, 1.4515140056610107, 0.8256872892379761], 1e-05);
        check("Reciprocal", 21, vec![], &[f32s(&[2, 3], &[-0.7827821373939514, -2.9775946140289307, 1.9802863597869873, -2.0732336044311523, -1.3944041728973389, 2.2819929122924805])], DataType::Float32, &[2, 3], &[-1.2774946689605713, -0.335841566324234, 0.5049774646759033, -0.4823383092880249, -0.7171521782875061, 0.4382134675979614], 1e-05);
        check("Exp", 21, vec![], &[f32s(&[2, 3], &[0.05874485895037651, 2.0829014778137207, 0.8383030295372009, 1.4506256580352783, -2.451026439666748, 0.24686293303966522])], DataType::Float32, &[2, 3], &[1.0605045557022095, 8.027728080749512, 2.312439441680908, 4.265782833099365, 0.08620505779981613, 1.2800036668777466], 1e-05);
        check("Log", 21, vec![], &[f32s(&[2, 3], &[1.5725394487380981, 2.6268842220306396, 1.1476657390594482, 1.8347338438034058, 0.271829754114151, 1.2241321802139282])], DataType::Float32, &[2, 3], &[0.45269179344177246, 0.9657984375953674, 0.13773009181022644, 0.6068994402885437, -1.3025792837142944, 0.20223216712474823], 1e-05);
        check("Sin", 21, vec![], &[f32s(&[2, 3], &[-1.061781883239746, -2.098801612854004, 1.8980286121368408, -0.7233229875564575, 2.8724873065948486, 0.5399501323699951])], DataType::Float32, &[2, 3], &[-0.873225212097168, -0.8638137578964233, 0.9469355940818787, -0.6618792414665222, 0.2658690810203552, 0.5140932202339172], 1e-05);
        check("Cos", 21, vec![], &[f32s(&[2, 3], &[0.6303375363349915, 0.8279795050621033, 1.058701515197754, -2.0952718257904053, -0.3581191897392273, -1.562616229057312])], DataType::Float32, &[2, 3], &[0.8078286051750183, 0.6763653755187988, 0.49000439047813416, -0.5007590651512146, 0.9365577101707458, 0.00818000640720129], 1e-05);
        check("Tan", 21, vec![], &[f32s(&[2, 3], &[-0.5850102305412292, -2.4197754859924316, 2.8069682121276855, -1.7099757194519043, 1.0305910110473633, -1.197479486465454])], DataType::Float32, &[2, 3], &[-0.6623529195785522, 0.8802880048751831, -0.3477001190185547, 7.138518810272217, 1.6674760580062866, -2.553079128265381], 1e-05);
        check("Sinh", 21, vec![], &[f32s(&[2, 3], &[2.244462251663208, 0.9732884168624878, -2.2103052139282227, 2.070446014404297, 2.6696889400482178, 2.4235007762908936])], DataType::Float32, &[2, 3], &[4.66467809677124, 1.1343975067138672, -4.504415988922119, 3.9011144638061523, 7.183102130889893, 5.598343372344971], 1e-05);
        check("Cosh", 21, vec![], &[f32s(&[2, 3], &[0.4183148741722107, -2.1272401809692383, -1.8452190160751343, 2.567434072494507, 0.31395891308784485, -1.9166849851608276])], DataType::Float32, &[2, 3], &[1.08877694606781, 4.255420207977295, 3.2437384128570557, 6.554536819458008, 1.0496912002563477, 3.4727389812469482], 1e-05);
        check("Asinh", 21, vec![], &[f32s(&[2, 3], &[2.3043413162231445, 0.8494302034378052, 0.4181656539440155, -0.7422729730606079, -0.534268319606781, -1.563064694404602])], DataType::Float32, &[2, 3], &[1.5720081329345703, 0.7708032131195068, 0.4068484306335449, -0.6869540810585022, -0.5116504430770874, -1.2292437553405762], 1e-05);
        check("Erf", 21, vec![], &[f32s(&[2, 3], &[-2.7716562747955322, 2.257312774658203, -0.19361869990825653, 0.285811185836792, -1.0670201778411865, 1.5079494714736938])], DataType::Float32, &[2, 3], &[-0.999911367893219, 0.9985886812210083, -0.21577565371990204, 0.3139329254627228, -0.8686997890472412, 0.9670393466949463], 1e-05);
        check("Atan", 21, vec![], &[f32s(&[2, 3], &[-2.848818778991699, -0.7668883800506592, -2.8178982734680176, -2.2626473903656006, 2.802889347076416, 0.9465643763542175])], DataType::Float32, &[2, 3], &[-1.2332106828689575, -0.6542223691940308, -1.2297855615615845, -1.1546484231948853, 1.2280988693237305, 0.7579538226127625], 1e-05);
        check("Asin", 21, vec![], &[f32s(&[5], &[-0.14212390780448914, 0.047005414962768555, 0.7381622195243835, -0.30846288800239563, 0.17877614498138428])], DataType::Float32, &[5], &[-0.14260677993297577, 0.0470227412879467, 0.8303422331809998, -0.31357669830322266, 0.17974241077899933], 1e-05);
        check("Acos", 21, vec![], &[f32s(&[5], &[0.36369505524635315, -0.28628072142601013, 0.03781500458717346, 0.5251898169517517, 0.8101750612258911])], DataType::Float32, &[5], &[1.1985647678375244, 1.861139178276062, 1.5329723358154297, 1.0178581476211548, 0.6263456344604492], 1e-05);
        check("Atanh", 21, vec![], &[f32s(&[5], &[-0.6908966898918152, 0.8581703901290894, -0.9797458648681641, 0.5008954405784607, 0.6148431301116943])], DataType::Float32, &[5], &[-0.849669337272644, 1.2863606214523315, -2.291182279586792, 0.550500750541687, 0.7166711688041687], 1e-05);
        check("Acosh", 21, vec![], &[f32s(&[4], &[1.5470561981201172, 2.675614595413208, 4.2610249519348145, 1.0570847988128662])], DataType::Float32, &[4], &[1.0033754110336304, 1.6404191255569458, 2.128594160079956, 0.33630284667015076], 1e-05);
        check("Round", 21, vec![], &[f32s(&[8], &[0.5, 1.5, 2.5, -0.5, -1.5, 2.4000000953674316, -2.5999999046325684, 3.0])], DataType::Float32, &[8], &[0.0, 2.0, 2.0, -0.0, -2.0, 2.0, -3.0, 3.0], 1e-05);
        check("Round", 21, vec![], &[f16s(&[4], &[0.5, 1.5, 2.5, -2.5])], DataType::Float16, &[4], &[0.0, 2.0, 2.0, -2.0], 1e-05);
        check("Exp", 21, vec![], &[f64s(&[3], &[0.7707716871977444, 1.7581419485882046, 0.07802149693325067])], DataType::Float64, &[3], &[2.161433560990153, 5.801647613983496, 1.0811458997415173], 1e-12);
        check("Exp", 21, vec![], &[f16s(&[3], &[1.35546875, -1.6416015625, -1.80859375])], DataType::Float16, &[3], &[3.87890625, 0.1937255859375, 0.1639404296875], 0.001);
        check("Abs", 21, vec![], &[i64s(&[5], &[16, -6, -16, -13, -5])], DataType::Int64, &[5], &[16.0, 6.0, 16.0, 13.0, 5.0], 1e-05);
        check("Neg", 21, vec![], &[i8s(&[5], &[-7, -8, 17, 14, 2])], DataType::Int8, &[5], &[7.0, 8.0, -17.0, -14.0, -2.0], 1e-05);
        check("Sign", 21, vec![], &[i32s(&[5], &[19, -7, -15, -10, -17])], DataType::Int32, &[5], &[1.0, -1.0, -1.0, -1.0, -1.0], 1e-05);
        check("IsNaN", 21, vec![], &[f32s(&[3], &[1.0, f64::NAN, f64::INFINITY])], DataType::Bool, &[3], &[0.0, 1.0, 0.0], 1e-05);
        check("IsInf", 21, vec![("detect_negative", int(0))], &[f32s(&[4], &[1.0, f64::NAN, f64::INFINITY, f64::NEG_INFINITY])], DataType::Bool, &[4], &[0.0, 0.0, 1.0, 0.0], 1e-05);
        check("Not", 21, vec![], &[bools(&[2], &[1, 0])], DataType::Bool, &[2], &[0.0, 1.0], 1e-05);
        check("BitwiseNot", 18, vec![], &[u8s(&[4], &[242, 55, 113, 51])], DataType::Uint8, &[4], &[13.0, 200.0, 142.0, 204.0], 1e-05);
    }

    #[test]
    fn rejects_wrong_dtypes() {
        let r = run_op("", "Sqrt", 13, vec![], &[Some(i64s(&[1], &[4]))]);
        assert!(r.unwrap_err().to_string().contains("int64"));
        let r = run_op("", "Neg", 13, vec![], &[Some(u8s(&[1], &[4]))]);
        assert!(r.is_err());
        let r = run_op("", "Not", 1, vec![], &[Some(f32s(&[1], &[4.0]))]);
        assert!(r.is_err());
    }

    #[test]
    fn large_inputs_run_in_parallel() {
        let n = 200_000;
        let v: Vec<f64> = (0..n).map(|i| (i as f64) * 1e-4 - 10.0).collect();
        let got = run1("Exp", 13, vec![], &[f64s(&[n], &v)]);
        let want: Vec<f64> = v.iter().map(|x| x.exp()).collect();
        assert_close(&got, &want, &[n], 1e-15, 0.0);
    }

    /// The vectorized f32 paths of Exp, Erf, Sigmoid, Tanh and Gelu (odd sizes, below and
    /// above the parallel threshold) and their f16 use, against float64 math.
    #[test]
    fn fast_f32_paths_match_float64() {
        type Case = (&'static str, u64, fn(f64) -> f64);
        let ops: [Case; 5] = [
            ("Exp", 13, f64::exp),
            ("Erf", 13, libm::erf),
            ("Sigmoid", 13, |x| 1.0 / (1.0 + (-x).exp())),
            ("Tanh", 13, f64::tanh),
            ("Gelu", 20, |x| 0.5 * x * (1.0 + libm::erf(x / 2f64.sqrt()))),
        ];
        for n in [1usize, 7, 1000, 100_003] {
            let x: Vec<f64> = (0..n)
                .map(|i| ((i * 2654435761usize) % 20011) as f64 / 1000.0 - 10.0)
                .collect();
            for (op, opset, f) in ops {
                let want: Vec<f64> = x.iter().map(|&v| f(v as f32 as f64)).collect();
                let got = run1(op, opset, vec![], &[f32s(&[n], &x)]);
                assert_close(&got, &want, &[n], 3e-7, 1e-6);
                let xh: Vec<f64> = x.iter().map(|&v| half::f16::from_f64(v).to_f64()).collect();
                let want: Vec<f64> = xh.iter().map(|&v| f(v)).collect();
                let got = run1(op, opset, vec![], &[f16s(&[n], &xh)]);
                assert_close(&got, &want, &[n], 1e-3, 1e-3);
            }
        }
    }
}
