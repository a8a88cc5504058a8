//! Logic and comparisons: And, Or, Xor (bool), Equal, Less, LessOrEqual, Greater,
//! GreaterOrEqual (bool output; Equal also compares bools and strings).

use super::binary::{align_legacy, legacy_broadcast};
use super::common::{register_versions, NodeInfo};
use super::elementwise::{binary_as, filled_vec, tensor_as, Broadcast};
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::{dispatch_numeric, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Op {
    And,
    Or,
    Xor,
    Eq,
    Lt,
    Le,
    Gt,
    Ge,
}

fn compare<T: crate::Element + PartialOrd>(
    d: &str,
    op: Op,
    a: &Tensor,
    b: &Tensor,
) -> Result<Tensor, EpError> {
    let out = DataType::Bool;
    match op {
        Op::Eq => binary_as::<T, T, u8>(d, a, b, out, |x, y| (x == y) as u8),
        Op::Lt => binary_as::<T, T, u8>(d, a, b, out, |x, y| (x < y) as u8),
        Op::Le => binary_as::<T, T, u8>(d, a, b, out, |x, y| (x <= y) as u8),
        Op::Gt => binary_as::<T, T, u8>(d, a, b, out, |x, y| (x > y) as u8),
        Op::Ge => binary_as::<T, T, u8>(d, a, b, out, |x, y| (x >= y) as u8),
        Op::And => binary_as::<u8, u8, u8>(d, a, b, out, |x, y| (x != 0 && y != 0) as u8),
        Op::Or => binary_as::<u8, u8, u8>(d, a, b, out, |x, y| (x != 0 || y != 0) as u8),
        Op::Xor => binary_as::<u8, u8, u8>(d, a, b, out, |x, y| ((x != 0) != (y != 0)) as u8),
    }
}

fn strings_equal(info: &NodeInfo, a: &Tensor, b: &Tensor) -> Result<Tensor, EpError> {
    let shape = crate::shape::broadcast_shapes(&info.desc, &[a.shape(), b.shape()])?;
    let plan = Broadcast::new(a.shape(), b.shape(), &shape);
    let ra: Vec<&String> = a.strings().iter().collect();
    let rb: Vec<&String> = b.strings().iter().collect();
    let n = shape.iter().product();
    let v = filled_vec(n, |d| plan.run(&ra, &rb, d, |x, y| (x == y) as u8));
    Ok(tensor_as(DataType::Bool, shape, v))
}

fn build(ctx: &BuildContext<'_>, op: Op) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let legacy = legacy_broadcast(ctx.node, ctx.opset)?;
    Ok(kernel_fn(move |inputs| {
        let a = info.input(inputs, 0)?;
        let b = info.input(inputs, 1)?;
        let b = match legacy {
            Some(axis) => std::borrow::Cow::Owned(align_legacy(&info, a, b, axis)?),
            None => std::borrow::Cow::Borrowed(b),
        };
        info.same_dtype(a, &b)?;
        let logical = matches!(op, Op::And | Op::Or | Op::Xor);
        let out = match a.dtype() {
            DataType::Bool if logical || op == Op::Eq => compare::<u8>(&info.desc, op, a, &b)?,
            d if logical => return Err(info.bad_dtype(d, "logical ops take bool")),
            DataType::String if op == Op::Eq => strings_equal(&info, a, &b)?,
            d => dispatch_numeric!(d, T => compare::<T>(&info.desc, op, a, &b)?,
                d => return Err(info.bad_dtype(d, "comparisons take numeric types"))),
        };
        Ok(vec![Value::Tensor(out)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    register_versions(r, "", "And", &[1, 7], |c| build(c, Op::And));
    register_versions(r, "", "Or", &[1, 7], |c| build(c, Op::Or));
    register_versions(r, "", "Xor", &[1, 7], |c| build(c, Op::Xor));
    register_versions(r, "", "Equal", &[1, 7, 11, 13, 19], |c| build(c, Op::Eq));
    register_versions(r, "", "Less", &[1, 7, 9, 13], |c| build(c, Op::Lt));
    register_versions(r, "", "LessOrEqual", &[12, 16], |c| build(c, Op::Le));
    register_versions(r, "", "Greater", &[1, 7, 9, 13], |c| build(c, Op::Gt));
    register_versions(r, "", "GreaterOrEqual", &[12, 16], |c| build(c, Op::Ge));
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py logic).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("Equal", 21, vec![], &[i64s(&[2, 3], &[2, 1, 2, 2, 1, 2]), i64s(&[3], &[2, 0, 0])], DataType::Bool, &[2, 3], &[1.0, 0.0, 0.0, 1.0, 0.0, 0.0], 1e-05);
        check("Equal", 21, vec![], &[f32s(&[2, 2], &[2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544]), f32s(&[2, 1], &[-0.19239027798175812, -1.1818054914474487])], DataType::Bool, &[2, 2], &[0.0, 0.0, 0.0, 0.0], 1e-05);
        check("Less", 21, vec![], &[i64s(&[2, 3], &[2, 1, 2, 2, 1, 2]), i64s(&[3], &[2, 0, 0])], DataType::Bool, &[2, 3], &[0.0, 0.0, 0.0, 0.0, 0.0, 0.0], 1e-05);
        check("Less", 21, vec![], &[f32s(&[2, 2], &[-1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976]), f32s(&[2, 1], &[0.3209841251373291, 2.973001718521118])], DataType::Bool, &[2, 2], &[1.0, 1.0, 1.0, 1.0], 1e-05);
        check("LessOrEqual", 21, vec![], &[i64s(&[2, 3], &[2, 1, 2, 2, 1, 2]), i64s(&[3], &[2, 0, 0])], DataType::Bool, &[2, 3], &[1.0, 0.0, 0.0, 1.0, 0.0, 0.0], 1e-05);
        check("LessOrEqual", 21, vec![], &[f32s(&[2, 2], &[1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326]), f32s(&[2, 1], &[-2.0387277603149414, 0.6752375960350037])], DataType::Bool, &[2, 2], &[0.0, 0.0, 0.0, 1.0], 1e-05);
        check("Greater", 21, vec![], &[i64s(&[2, 3], &[2, 1, 2, 2, 1, 2]), i64s(&[3], &[2, 0, 0])], DataType::Bool, &[2, 3], &[0.0, 1.0, 1.0, 0.0, 1.0, 1.0], 1e-05);
        check("Greater", 21, vec![], &[f32s(&[2, 2], &[-2.7363479137420654, -2.7859182357788086, 0.08933292329311371, -0.2027638554573059]), f32s(&[2, 1], &[2.50300669670105, 0.7753575444221497])], DataType::Bool, &[2, 2], &[0.0, 0.0, 0.0, 0.0], 1e-05);
        check("GreaterOrEqual", 21, vec![], &[i64s(&[2, 3], &[2, 1, 2, 2, 1, 2]), i64s(&[3], &[2, 0, 0])], DataType::Bool, &[2, 3], &[1.0, 1.0, 1.0, 1.0, 1.0, 1.0], 1e-05);
        check("GreaterOrEqual", 21, vec![], &[f32s(&[2, 2], &[0.0847058817744255, -0.018759388476610184, -1.5149104595184326, -2.9292359352111816]), f32s(&[2, 1], &[-1.845587134361267, 1.1521927118301392])], DataType::Bool, &[2, 2], &[1.0, 1.0, 0.0, 0.0], 1e-05);
        check("And", 21, vec![], &[bools(&[2, 3], &[0, 1, 0, 1, 0, 0]), bools(&[3], &[0, 1, 1])], DataType::Bool, &[2, 3], &[0.0, 1.0, 0.0, 0.0, 0.0, 0.0], 1e-05);
        check("Or", 21, vec![], &[bools(&[2, 3], &[0, 1, 0, 1, 0, 0]), bools(&[3], &[0, 1, 1])], DataType::Bool, &[2, 3], &[0.0, 1.0, 1.0, 1.0, 1.0, 1.0], 1e-05);
        check("Xor", 21, vec![], &[bools(&[2, 3], &[0, 1, 0, 1, 0, 0]), bools(&[3], &[0, 1, 1])], DataType::Bool, &[2, 3], &[0.0, 0.0, 1.0, 1.0, 1.0, 1.0], 1e-05);
    }
}
