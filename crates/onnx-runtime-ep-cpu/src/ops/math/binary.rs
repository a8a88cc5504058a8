//! Broadcasting arithmetic: Add, Sub, Mul, Div, Pow, Mod, BitShift, BitwiseAnd/Or/Xor.

use super::common::{register_versions, NodeInfo};
use super::elementwise::{binary, binary_as};
use super::num::{FloatElem, Int, Num, Real};
use crate::attrs;
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::{dispatch_float, dispatch_int, dispatch_numeric, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::Node;

/// Before opset 7, binary ops broadcast only when `broadcast=1`, and then B aligns with A
/// starting at `axis` (default: B's dims are A's trailing dims). Returns the axis to align
/// at, if legacy broadcasting applies.
pub fn legacy_broadcast(node: &Node, opset: u64) -> Result<Option<Option<i64>>, EpError> {
    if opset >= 7 || attrs::int(node, "broadcast", 0)? == 0 {
        return Ok(None);
    }
    Ok(Some(attrs::opt_int(node, "axis")?))
}

/// B reshaped so that numpy broadcasting reproduces legacy axis-aligned broadcasting.
pub fn align_legacy(
    info: &NodeInfo,
    a: &Tensor,
    b: &Tensor,
    axis: Option<i64>,
) -> Result<Tensor, EpError> {
    let (ra, rb) = (a.rank(), b.rank());
    let axis = match axis {
        None => return Ok(b.clone()),
        Some(ax) if ax < 0 => ax + ra as i64,
        Some(ax) => ax,
    };
    if axis < 0 || axis as usize + rb > ra {
        return Err(info.invalid(format!(
            "legacy broadcast of B {:?} into A {:?} at axis {axis} is out of range",
            b.shape(),
            a.shape()
        )));
    }
    let mut shape = b.shape().to_vec();
    shape.resize(ra - axis as usize, 1);
    Ok(b.reshaped(shape))
}

/// The two operands of a binary op, with legacy broadcasting applied.
fn operands<'a>(
    info: &NodeInfo,
    legacy: Option<Option<i64>>,
    inputs: &[Option<&'a Value>],
) -> Result<(&'a Tensor, std::borrow::Cow<'a, Tensor>), EpError> {
    let a = info.input(inputs, 0)?;
    let b = info.input(inputs, 1)?;
    let b = match legacy {
        Some(axis) => std::borrow::Cow::Owned(align_legacy(info, a, b, axis)?),
        None => std::borrow::Cow::Borrowed(b),
    };
    Ok((a, b))
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Arith {
    Add,
    Sub,
    Mul,
    Div,
}

fn arith<T: Num>(info: &NodeInfo, op: Arith, a: &Tensor, b: &Tensor) -> Result<Tensor, EpError> {
    let d = &info.desc;
    match op {
        Arith::Add => binary::<T>(d, a, b, |x, y| x.add(y)),
        Arith::Sub => binary::<T>(d, a, b, |x, y| x.sub(y)),
        Arith::Mul => binary::<T>(d, a, b, |x, y| x.mul(y)),
        Arith::Div => {
            if !T::IS_FLOAT && b.data::<T>().iter().any(|&v| v == T::num_zero()) {
                return Err(info.invalid(format!(
                    "integer division by zero ({} divisor has a zero element)",
                    b.dtype()
                )));
            }
            binary::<T>(d, a, b, |x, y| x.div(y))
        }
    }
}

fn build_arith(ctx: &BuildContext<'_>, op: Arith) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let legacy = legacy_broadcast(ctx.node, ctx.opset)?;
    Ok(kernel_fn(move |inputs| {
        let (a, b) = operands(&info, legacy, inputs)?;
        info.same_dtype(a, &b)?;
        let out = dispatch_numeric!(a.dtype(), T => arith::<T>(&info, op, a, &b)?,
            d => return Err(info.bad_dtype(d, "expected a numeric type")));
        Ok(vec![Value::Tensor(out)])
    }))
}

/// Pow: the exponent may have another numeric type; the result has the base's type.
fn build_pow(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let legacy = legacy_broadcast(ctx.node, ctx.opset)?;
    Ok(kernel_fn(move |inputs| {
        let (a, b) = operands(&info, legacy, inputs)?;
        let d = &info.desc;
        let out = if a.dtype() == b.dtype() {
            dispatch_float!(a.dtype(), T => binary::<T>(d, a, &b, |x, y| T::down(x.up().powf(y.up())))?,
                _ => dispatch_int!(a.dtype(), T => binary::<T>(d, a, &b, |x, y| x.pow_i(y.to_i64()))?,
                    dt => return Err(info.bad_dtype(dt, "Pow takes numeric types"))))
        } else {
            // Mixed types: widen the exponent to f64 (exact for integers up to 2^53).
            let e = b
                .to_f64_vec()
                .ok_or_else(|| info.bad_dtype(b.dtype(), "the exponent must be numeric"))?;
            let e = Tensor::from_vec(b.shape().to_vec(), e);
            dispatch_float!(a.dtype(), T => binary_as::<T, f64, T>(d, a, &e, a.dtype(), |x, y| {
                T::down(<T as FloatElem>::C::cst(Real::to_f64(x.up()).powf(y)))
            })?, _ => dispatch_int!(a.dtype(), T => binary_as::<T, f64, T>(d, a, &e, a.dtype(), |x, y| {
                if y.fract() == 0.0 && y.abs() < 9.0e15 {
                    x.pow_i(y as i64)
                } else {
                    T::of_f64(x.as_f64().powf(y))
                }
            })?, dt => return Err(info.bad_dtype(dt, "Pow takes numeric types"))))
        };
        Ok(vec![Value::Tensor(out)])
    }))
}

/// Python-style modulus (result has the divisor's sign) for integers.
#[inline(always)]
fn int_mod<T: Int>(x: T, y: T) -> T {
    let r = x.rem_trunc(y);
    if r != T::num_zero() && ((r < T::num_zero()) != (y < T::num_zero())) {
        r.add(y)
    } else {
        r
    }
}

fn build_mod(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let fmod = attrs::int(ctx.node, "fmod", 0)? != 0;
    Ok(kernel_fn(move |inputs| {
        let (a, b) = operands(&info, None, inputs)?;
        info.same_dtype(a, &b)?;
        let d = &info.desc;
        let out = dispatch_int!(a.dtype(), T => {
            if b.data::<T>().iter().any(|&v| v == T::num_zero()) {
                return Err(info.invalid("integer modulus by zero"));
            }
            if fmod {
                binary::<T>(d, a, &b, |x, y| x.rem_trunc(y))?
            } else {
                binary::<T>(d, a, &b, int_mod)?
            }
        }, _ => dispatch_float!(a.dtype(), T => binary::<T>(d, a, &b, |x, y| {
            let (x, y) = (x.up(), y.up());
            let r = x % y;
            if !fmod && r != <T as FloatElem>::C::cst(0.0) && ((r < <T as FloatElem>::C::cst(0.0)) != (y < <T as FloatElem>::C::cst(0.0))) {
                T::down(r + y)
            } else {
                T::down(r)
            }
        })?, dt => return Err(info.bad_dtype(dt, "Mod takes numeric types"))));
        Ok(vec![Value::Tensor(out)])
    }))
}

#[derive(Clone, Copy)]
enum Bits {
    And,
    Or,
    Xor,
    Shl,
    Shr,
}

/// Bitwise ops; `signed_shift`: BitShift also takes signed integers (opset 28: arithmetic
/// right shifts, and out-of-range shift amounts give the sign fill).
fn build_bits(
    ctx: &BuildContext<'_>,
    op: Bits,
    signed_shift: bool,
) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let op = if matches!(op, Bits::Shl) {
        match attrs::string(ctx.node, "direction", "")?.as_str() {
            "LEFT" => Bits::Shl,
            "RIGHT" => Bits::Shr,
            other => {
                return Err(EpError::invalid_attribute(
                    ctx.node,
                    "direction",
                    format!("must be 'LEFT' or 'RIGHT', got '{other}'"),
                ))
            }
        }
    } else {
        op
    };
    Ok(kernel_fn(move |inputs| {
        let (a, b) = operands(&info, None, inputs)?;
        info.same_dtype(a, &b)?;
        let shift = matches!(op, Bits::Shl | Bits::Shr);
        if shift && !signed_shift && !a.dtype().is_unsigned_int() {
            return Err(info.bad_dtype(
                a.dtype(),
                "BitShift before opset 28 takes unsigned integer types",
            ));
        }
        let d = &info.desc;
        let out = dispatch_int!(a.dtype(), T => match op {
            Bits::And => binary::<T>(d, a, &b, |x, y| x.and(y))?,
            Bits::Or => binary::<T>(d, a, &b, |x, y| x.or(y))?,
            Bits::Xor => binary::<T>(d, a, &b, |x, y| x.xor(y))?,
            Bits::Shl => binary::<T>(d, a, &b, |x, y| x.shl(y))?,
            Bits::Shr => binary::<T>(d, a, &b, |x, y| x.shr(y))?,
        }, dt => return Err(info.bad_dtype(dt, "expected an integer type")));
        Ok(vec![Value::Tensor(out)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    let v = &[1, 6, 7, 13, 14];
    register_versions(r, "", "Add", v, |c| build_arith(c, Arith::Add));
    register_versions(r, "", "Sub", v, |c| build_arith(c, Arith::Sub));
    register_versions(r, "", "Mul", v, |c| build_arith(c, Arith::Mul));
    register_versions(r, "", "Div", v, |c| build_arith(c, Arith::Div));
    register_versions(r, "", "Pow", &[1, 7, 12, 13, 15], build_pow);
    register_versions(r, "", "Mod", &[10, 13], build_mod);
    r.register("", "BitShift", 11, |c| build_bits(c, Bits::Shl, false));
    r.register("", "BitShift", 28, |c| build_bits(c, Bits::Shl, true));
    r.register("", "BitwiseAnd", 18, |c| build_bits(c, Bits::And, false));
    r.register("", "BitwiseOr", 18, |c| build_bits(c, Bits::Or, false));
    r.register("", "BitwiseXor", 18, |c| build_bits(c, Bits::Xor, false));
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py binary).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("Add", 21, vec![], &[f32s(&[2, 3, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654]), f32s(&[3, 1], &[-2.7859182357788086, 0.08933292329311371, -0.2027638554573059])], DataType::Float32, &[2, 3, 4], &[-2.0353455543518066, -0.4026353359222412, -1.13180410861969, -4.434675216674805, -1.1096693277359009, 2.330653429031372, -2.879075288772583, 2.0167033672332764, 1.5796527862548828, -0.39515411853790283, -1.3845694065093994, -1.532210111618042, -4.25670051574707, -3.1154603958129883, -2.7586286067962646, -2.4649341106414795, 3.0623345375061035, 1.8453044891357422, 0.8224083185195923, 3.0230937004089355, -1.9109115600585938, -2.2414915561676025, 0.47247374057769775, -2.9391117095947266], 1e-05);
        check("Add", 21, vec![], &[i64s(&[2, 3], &[12, 16, 12, 5, -3, 0]), i64s(&[3], &[3, 4, 4])], DataType::Int64, &[2, 3], &[15.0, 20.0, 16.0, 8.0, 1.0, 4.0], 1e-05);
        check("Sub", 21, vec![], &[f32s(&[2, 3, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654]), f32s(&[3, 1], &[-2.7859182357788086, 0.08933292329311371, -0.2027638554573059])], DataType::Float32, &[2, 3, 4], &[3.5364909172058105, 5.169200897216797, 4.440032482147217, 1.137161374092102, -1.2883352041244507, 2.1519877910614014, -3.0577409267425537, 1.8380376100540161, 1.985180377960205, 0.01037357747554779, -0.9790416359901428, -1.1266825199127197, 1.3151357173919678, 2.456376075744629, 2.8132078647613525, 3.1069023609161377, 2.883668899536133, 1.6666386127471924, 0.6437424421310425, 2.844428062438965, -1.5053839683532715, -1.8359639644622803, 0.8780014514923096, -2.5335841178894043], 1e-05);
        check("Sub", 21, vec![], &[i64s(&[2, 3], &[-11, 19, -20, -17, -13, 18]), i64s(&[3], &[6, 8, 2])], DataType::Int64, &[2, 3], &[-17.0, 11.0, -22.0, -23.0, -21.0, 16.0], 1e-05);
        check("Mul", 21, vec![], &[f32s(&[2, 3, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654]), f32s(&[3, 1], &[-2.7859182357788086, 0.08933292329311371, -0.2027638554573059])], DataType::Float32, &[2, 3, 4], &[-2.091034412384033, -6.639631271362305, -4.608226776123047, 4.593301773071289, -0.10711038112640381, 0.20022372901439667, -0.26517656445503235, 0.17217764258384705, -0.36140966415405273, 0.03900979459285736, 0.2396274358034134, 0.2695636749267578, 4.097479820251465, 0.9180775284767151, -0.07602646946907043, -0.8942355513572693, 0.2655869424343109, 0.15686607360839844, 0.06548776477575302, 0.26208144426345825, 0.34635064005851746, 0.41338029503822327, -0.13691377639770508, 0.5548324584960938], 1e-05);
        check("Mul", 21, vec![], &[i64s(&[2, 3], &[8, -6, -1, -20, 4, 13]), i64s(&[3], &[6, 2, 5])], DataType::Int64, &[2, 3], &[48.0, -12.0, -5.0, -120.0, 8.0, 65.0], 1e-05);
        check("Div", 21, vec![], &[f32s(&[2, 3, 4], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654]), f32s(&[3, 1], &[-2.7859182357788086, 0.08933292329311371, -0.2027638554573059])], DataType::Float32, &[2, 3, 4], &[-0.2694166600704193, -0.8554748296737671, -0.5937410593032837, 0.59181809425354, -13.42172908782959, 25.08952522277832, -33.22860336303711, 21.57514190673828, -8.790602684020996, 0.9488391280174255, 5.828482151031494, 6.556623935699463, 0.5279345512390137, 0.11828852444887161, -0.009795533493161201, -0.11521663516759872, 33.28002166748047, 19.6564884185791, 8.20610523223877, 32.84075927734375, 8.424321174621582, 10.05469036102295, -3.330167531967163, 13.495244979858398], 1e-05);
        check("Div", 21, vec![], &[i64s(&[2, 3], &[-10, 18, 15, -13, 0, 17]), i64s(&[3], &[7, 6, 6])], DataType::Int64, &[2, 3], &[-1.0, 3.0, 2.0, -1.0, 0.0, 2.0], 1e-05);
        check("Div", 21, vec![], &[i32s(&[6], &[-19, 9, -2, -17, -11, 1]), i32s(&[6], &[3, -3, 4, -4, 7, 2])], DataType::Int32, &[6], &[-6.0, -3.0, 0.0, 4.0, -1.0, 0.0], 1e-05);
        check("Add", 21, vec![], &[f16s(&[4], &[0.046630859375, 2.228515625, -0.83251953125, 0.5888671875]), f16s(&[1], &[-2.64453125])], DataType::Float16, &[4], &[-2.59765625, -0.416015625, -3.4765625, -2.0546875], 0.001);
        check("Pow", 21, vec![], &[f32s(&[2, 3], &[1.2241321802139282, 1.0368053913116455, 0.5355792045593262, 2.4673805236816406, 1.2003939151763916, 2.938368797302246]), f32s(&[3], &[0.35996678471565247, 0.42022502422332764, 0.5519863367080688])], DataType::Float32, &[2, 3], &[1.0755119323730469, 1.015304684638977, 0.708458423614502, 1.3841781616210938, 1.079776406288147, 1.8129602670669556], 1e-05);
        check("Pow", 15, vec![], &[f32s(&[4], &[2.0617055892944336, 0.5372852683067322, 1.3769090175628662, 0.7947354912757874]), i64s(&[4], &[2, -1, 0, 3])], DataType::Float32, &[4], &[4.250629901885986, 1.8612086772918701, 1.0, 0.5019584894180298], 1e-05);
        check("Pow", 15, vec![], &[i64s(&[4], &[-4, -1, 2, -4]), i64s(&[4], &[2, 1, 0, 3])], DataType::Int64, &[4], &[16.0, -1.0, 1.0, -64.0], 1e-05);
        check("Pow", 15, vec![], &[i32s(&[4], &[-1, 3, 3, -3]), f32s(&[4], &[2.0, 1.0, 0.5, 3.0])], DataType::Int32, &[4], &[1.0, 3.0, 1.0, -27.0], 1e-05);
        check("Mod", 21, vec![], &[i64s(&[8], &[-20, 6, -20, -8, -1, 14, -17, 6]), i64s(&[8], &[4, -1, 6, -6, 3, -6, 4, -6])], DataType::Int64, &[8], &[0.0, 0.0, 4.0, -2.0, 2.0, -4.0, 3.0, 0.0], 1e-05);
        check("Mod", 21, vec![("fmod", int(1))], &[i32s(&[8], &[18, 2, -9, -15, 2, -13, 10, 17]), i32s(&[8], &[2, -4, 1, -2, 3, -6, 6, -4])], DataType::Int32, &[8], &[0.0, 2.0, 0.0, -1.0, 2.0, -1.0, 4.0, 1.0], 1e-05);
        check("Mod", 21, vec![("fmod", int(1))], &[f32s(&[6], &[0.4181656539440155, -0.7422729730606079, -0.534268319606781, -1.563064694404602, -2.7716562747955322, 2.257312774658203]), f32s(&[6], &[1.2015953063964844, 1.3214528560638428, 0.9832449555397034, 1.626987338066101, 0.5377953052520752, 1.05827796459198])], DataType::Float32, &[6], &[0.4181656539440155, -0.7422729730606079, -0.534268319606781, -1.563064694404602, -0.08267974853515625, 0.14075684547424316], 1e-05);
        check("BitShift", 21, vec![("direction", string("LEFT"))], &[u8s(&[4], &[160, 6, 181, 24]), u8s(&[4], &[1, 2, 3, 0])], DataType::Uint8, &[4], &[64.0, 24.0, 168.0, 24.0], 1e-05);
        check("BitShift", 21, vec![("direction", string("RIGHT"))], &[u32s(&[4], &[831, 1934, 217, 1315]), u32s(&[4], &[1, 2, 3, 0])], DataType::Uint32, &[4], &[415.0, 483.0, 27.0, 1315.0], 1e-05);
        check("BitwiseAnd", 18, vec![], &[i32s(&[2, 3], &[45, -15, -85, 4, -14, 74]), i32s(&[3], &[36, -32, -89])], DataType::Int32, &[2, 3], &[36.0, -32.0, -93.0, 4.0, -32.0, 2.0], 1e-05);
        check("BitwiseOr", 18, vec![], &[i32s(&[2, 3], &[18, -45, 36, 72, -29, 80]), i32s(&[3], &[3, 6, 53])], DataType::Int32, &[2, 3], &[19.0, -41.0, 53.0, 75.0, -25.0, 117.0], 1e-05);
        check("BitwiseXor", 18, vec![], &[i32s(&[2, 3], &[57, 81, 99, -70, -18, 86]), i32s(&[3], &[-39, -99, 15])], DataType::Int32, &[2, 3], &[-32.0, -52.0, 108.0, 99.0, 115.0, 89.0], 1e-05);
    }

    #[test]
    fn integer_division_by_zero_is_an_error() {
        let r = run_op(
            "",
            "Div",
            14,
            vec![],
            &[Some(i64s(&[2], &[1, 2])), Some(i64s(&[2], &[1, 0]))],
        );
        assert!(r.unwrap_err().to_string().contains("division by zero"));
        let r = run_op(
            "",
            "Mod",
            13,
            vec![],
            &[Some(i32s(&[1], &[1])), Some(i32s(&[1], &[0]))],
        );
        assert!(r.is_err());
    }

    #[test]
    fn legacy_broadcast_aligns_at_axis() {
        // Opset 6: B of shape [3] broadcast into A [2, 3, 4] at axis 1.
        let a: Vec<f64> = (0..24).map(|v| v as f64).collect();
        let got = run1(
            "Add",
            6,
            vec![("broadcast", int(1)), ("axis", int(1))],
            &[f32s(&[2, 3, 4], &a), f32s(&[3], &[100.0, 200.0, 300.0])],
        );
        let want: Vec<f64> = (0..24)
            .map(|v| v as f64 + 100.0 * (1 + (v / 4) % 3) as f64)
            .collect();
        assert_close(&got, &want, &[2, 3, 4], 0.0, 0.0);
    }

    #[test]
    fn shapes_that_do_not_broadcast_are_an_error() {
        let r = run_op(
            "",
            "Add",
            14,
            vec![],
            &[
                Some(f32s(&[2], &[1.0, 2.0])),
                Some(f32s(&[3], &[1.0, 2.0, 3.0])),
            ],
        );
        assert!(r.unwrap_err().to_string().contains("broadcast"));
    }

    /// Opset 28 BitShift on signed types: arithmetic right shifts, bits shifted past the sign
    /// bit dropped, and shift amounts that are negative or at least the width giving the sign
    /// fill (hand-derived from the spec's text).
    #[test]
    fn signed_bit_shift_from_opset_28() {
        let right = vec![("direction", string("RIGHT"))];
        let left = vec![("direction", string("LEFT"))];
        let x = i8s(&[5], &[-16, 7, -1, 100, -128]);
        let y = i8s(&[5], &[2, 1, 9, -1, 7]);
        check(
            "BitShift",
            28,
            right.clone(),
            &[x.clone(), y.clone()],
            DataType::Int8,
            &[5],
            &[-4.0, 3.0, -1.0, 0.0, -1.0],
            0.0,
        );
        let x = i8s(&[5], &[1, -3, 64, 5, -1]);
        let y = i8s(&[5], &[3, 2, 1, 8, -2]);
        check(
            "BitShift",
            28,
            left.clone(),
            &[x.clone(), y],
            DataType::Int8,
            &[5],
            &[8.0, -12.0, -128.0, 0.0, 0.0],
            0.0,
        );
        let x = i64s(&[3], &[-5, 1 << 40, -(1 << 62)]);
        let y = i64s(&[3], &[1, 23, 64]);
        check(
            "BitShift",
            28,
            right,
            &[x, y],
            DataType::Int64,
            &[3],
            &[-3.0, 131072.0, -1.0],
            0.0,
        );
        // Before opset 28 signed inputs are refused with a clear error.
        let err = run_op(
            "",
            "BitShift",
            21,
            left,
            &[Some(i8s(&[1], &[1])), Some(i8s(&[1], &[1]))],
        )
        .unwrap_err();
        assert!(err.to_string().contains("unsigned"), "{err}");
    }
}
