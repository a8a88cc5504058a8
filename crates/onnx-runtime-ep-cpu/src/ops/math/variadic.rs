//! Variadic broadcasting ops: Max, Min, Sum, Mean. NaN propagates through Max and Min
//! (as numpy.maximum / numpy.minimum, the ONNX reference).

use super::common::{register_versions, NodeInfo};
use super::elementwise::{binary, unary};
use super::num::Num;
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::{dispatch_float, dispatch_numeric, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    Max,
    Min,
    Sum,
    Mean,
}

#[inline(always)]
fn max<T: Num>(x: T, y: T) -> T {
    if x > y || x.isnan() {
        x
    } else {
        y
    }
}

#[inline(always)]
fn min<T: Num>(x: T, y: T) -> T {
    if x < y || x.isnan() {
        x
    } else {
        y
    }
}

fn fold<T: Num>(info: &NodeInfo, op: Op, ts: &[&Tensor]) -> Result<Tensor, EpError> {
    let d = &info.desc;
    let mut acc = ts[0].clone();
    for t in &ts[1..] {
        acc = match op {
            Op::Max => binary::<T>(d, &acc, t, max)?,
            Op::Min => binary::<T>(d, &acc, t, min)?,
            Op::Sum | Op::Mean => binary::<T>(d, &acc, t, |x, y| x.add(y))?,
        };
    }
    if op == Op::Mean && ts.len() > 1 {
        let n = T::of_usize(ts.len());
        acc = unary::<T, T>(&acc, |x| x.div(n));
    }
    Ok(acc)
}

fn build(ctx: &BuildContext<'_>, op: Op) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    // Before opset 8 the inputs had to have equal shapes; broadcasting them is a superset.
    Ok(kernel_fn(move |inputs| {
        let mut ts = Vec::with_capacity(inputs.len());
        for i in 0..inputs.len() {
            ts.push(info.input(inputs, i)?);
        }
        let Some(first) = ts.first() else {
            return Err(info.invalid(format!("{} needs at least one input", info.op)));
        };
        for t in &ts[1..] {
            info.same_dtype(first, t)?;
        }
        let out = if matches!(op, Op::Max | Op::Min) {
            dispatch_numeric!(first.dtype(), T => fold::<T>(&info, op, &ts)?,
                d => return Err(info.bad_dtype(d, "expected a numeric type")))
        } else {
            dispatch_float!(first.dtype(), T => fold::<T>(&info, op, &ts)?,
                d => return Err(info.bad_dtype(d, "expected a float type")))
        };
        Ok(vec![Value::Tensor(out)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    register_versions(r, "", "Max", &[1, 6, 8, 12, 13], |c| build(c, Op::Max));
    register_versions(r, "", "Min", &[1, 6, 8, 12, 13], |c| build(c, Op::Min));
    register_versions(r, "", "Sum", &[1, 6, 8, 13], |c| build(c, Op::Sum));
    register_versions(r, "", "Mean", &[1, 6, 8, 13], |c| build(c, Op::Mean));
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py variadic).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("Max", 21, vec![], &[f32s(&[2, 3], &[0.7505728006362915, f64::NAN, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867]), f32s(&[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544]), f32s(&[1, 1], &[-0.19239027798175812])], DataType::Float32, &[2, 3], &[0.7505728006362915, f64::NAN, 1.782416582107544, -0.19239027798175812, 1.927370548248291, 2.2413206100463867], 1e-05);
        check("Max", 21, vec![], &[f32s(&[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544])], DataType::Float32, &[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544], 1e-05);
        check("Min", 21, vec![], &[f32s(&[2, 3], &[0.7505728006362915, f64::NAN, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867]), f32s(&[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544]), f32s(&[1, 1], &[-0.19239027798175812])], DataType::Float32, &[2, 3], &[-2.9684081077575684, f64::NAN, -0.19239027798175812, -2.9684081077575684, -1.1990022659301758, -0.19239027798175812], 1e-05);
        check("Min", 21, vec![], &[f32s(&[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544])], DataType::Float32, &[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544], 1e-05);
        check("Sum", 21, vec![], &[f32s(&[2, 3], &[0.7505728006362915, f64::NAN, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867]), f32s(&[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544]), f32s(&[1, 1], &[-0.19239027798175812])], DataType::Float32, &[2, 3], &[-2.4102256298065186, f64::NAN, 3.244140386581421, -4.809555530548096, 0.5359780192375183, 3.8313467502593994], 1e-05);
        check("Sum", 21, vec![], &[f32s(&[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544])], DataType::Float32, &[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544], 1e-05);
        check("Mean", 21, vec![], &[f32s(&[2, 3], &[0.7505728006362915, f64::NAN, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867]), f32s(&[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544]), f32s(&[1, 1], &[-0.19239027798175812])], DataType::Float32, &[2, 3], &[-0.8034085631370544, f64::NAN, 1.0813801288604736, -1.6031851768493652, 0.1786593347787857, 1.2771155834197998], 1e-05);
        check("Mean", 21, vec![], &[f32s(&[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544])], DataType::Float32, &[3], &[-2.9684081077575684, 1.927370548248291, 1.782416582107544], 1e-05);
        check("Max", 21, vec![], &[i64s(&[2, 3], &[12, -8, -7, -9, 8, -10]), i64s(&[3], &[19, -3, -1])], DataType::Int64, &[2, 3], &[19.0, -3.0, -1.0, 19.0, 8.0, -1.0], 1e-05);
        check("Min", 21, vec![], &[u8s(&[2, 3], &[100, 116, 110, 101, 199, 161]), u8s(&[3], &[158, 140, 124])], DataType::Uint8, &[2, 3], &[100.0, 116.0, 110.0, 101.0, 140.0, 124.0], 1e-05);
    }
}
