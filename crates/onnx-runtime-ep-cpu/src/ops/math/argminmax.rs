//! ArgMax and ArgMin (int64 indices; `select_last_index` from opset 12). NaN counts as the
//! extreme value, as numpy.argmax does.

use super::common::{register_versions, NodeInfo};
use super::layout::{par_blocks, AxisView};
use super::num::Num;
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::{attrs, dispatch_numeric, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

struct Arg {
    info: NodeInfo,
    max: bool,
    axis: i64,
    keepdims: bool,
    last: bool,
}

/// Whether `v` should replace the current best `b` (strictly better; ties keep the first).
#[inline(always)]
fn better<T: Num>(max: bool, v: T, b: T) -> bool {
    if b.isnan() {
        return false;
    }
    v.isnan() || if max { v > b } else { v < b }
}

fn arg<T: Num>(a: &Arg, x: &Tensor, v: AxisView, out: &mut [i64]) {
    let d = x.data::<T>();
    let (len, inner) = (v.len, v.inner);
    par_blocks(out, inner, d.len(), |o, ob| {
        let base = o * len * inner;
        for (i, slot) in ob.iter_mut().enumerate() {
            let mut best = d[base + i];
            let mut bi = 0usize;
            for r in 1..len {
                let e = d[base + r * inner + i];
                let take = better(a.max, e, best) || (a.last && !better(a.max, best, e));
                if take {
                    best = e;
                    bi = r;
                }
            }
            *slot = bi as i64;
        }
    });
}

impl Arg {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Tensor, EpError> {
        let x = self.info.input(inputs, 0)?;
        let axis = crate::shape::normalize_axis(&self.info.desc, self.axis, x.rank())?;
        let mut shape = x.shape().to_vec();
        if x.rank() == 0 {
            return Ok(Tensor::scalar(0i64));
        }
        if shape[axis] == 0 {
            return Err(self.info.invalid(format!(
                "cannot take {} over axis {axis} of size 0",
                self.info.op
            )));
        }
        let v = AxisView::new(&shape, axis, axis + 1);
        if self.keepdims {
            shape[axis] = 1;
        } else {
            shape.remove(axis);
        }
        let mut out = Tensor::zeros(DataType::Int64, shape);
        let o = out.data_mut::<i64>();
        if x.dtype() == DataType::Bool {
            arg::<u8>(self, x, v, o);
        } else {
            dispatch_numeric!(x.dtype(), T => arg::<T>(self, x, v, o),
                d => return Err(self.info.bad_dtype(d, "expected a numeric type")));
        }
        Ok(out)
    }
}

fn build(ctx: &BuildContext<'_>, max: bool) -> Result<Box<dyn CpuKernel>, EpError> {
    let a = Arg {
        info: NodeInfo::new(ctx.node),
        max,
        axis: attrs::int(ctx.node, "axis", 0)?,
        keepdims: attrs::int(ctx.node, "keepdims", 1)? != 0,
        last: attrs::int(ctx.node, "select_last_index", 0)? != 0,
    };
    Ok(kernel_fn(move |inputs| {
        Ok(vec![Value::Tensor(a.run(inputs)?)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    register_versions(r, "", "ArgMax", &[1, 11, 12, 13], |c| build(c, true));
    register_versions(r, "", "ArgMin", &[1, 11, 12, 13], |c| build(c, false));
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py argminmax).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("ArgMax", 13, vec![], &[f32s(&[3, 4, 2], &[0.7505728006362915, 2.3832828998565674, -1.1990022659301758, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654])], DataType::Int64, &[1, 4, 2], &[2.0, 0.0, 2.0, 2.0, 0.0, 0.0, 2.0, 0.0], 1e-05);
        check("ArgMax", 13, vec![("axis", int(1)), ("keepdims", int(0))], &[f32s(&[3, 4, 2], &[0.7505728006362915, 2.3832828998565674, -1.1990022659301758, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654])], DataType::Int64, &[3, 2], &[0.0, 0.0, 0.0, 3.0, 0.0, 1.0], 1e-05);
        check("ArgMax", 13, vec![("axis", int(-2)), ("select_last_index", int(1))], &[f32s(&[3, 4, 2], &[0.7505728006362915, 2.3832828998565674, -1.1990022659301758, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654])], DataType::Int64, &[3, 1, 2], &[0.0, 0.0, 0.0, 3.0, 0.0, 1.0], 1e-05);
        check("ArgMax", 13, vec![("axis", int(0)), ("select_last_index", int(1))], &[i64s(&[4, 3], &[1, 0, 0, 1, 2, 1, 2, 2, 2, 1, 1, 1])], DataType::Int64, &[1, 3], &[2.0, 2.0, 2.0], 1e-05);
        check("ArgMin", 13, vec![], &[f32s(&[3, 4, 2], &[0.7505728006362915, 2.3832828998565674, -1.1990022659301758, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654])], DataType::Int64, &[1, 4, 2], &[0.0, 1.0, 0.0, 0.0, 2.0, 2.0, 0.0, 2.0], 1e-05);
        check("ArgMin", 13, vec![("axis", int(1)), ("keepdims", int(0))], &[f32s(&[3, 4, 2], &[0.7505728006362915, 2.3832828998565674, -1.1990022659301758, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654])], DataType::Int64, &[3, 2], &[3.0, 1.0, 2.0, 1.0, 2.0, 3.0], 1e-05);
        check("ArgMin", 13, vec![("axis", int(-2)), ("select_last_index", int(1))], &[f32s(&[3, 4, 2], &[0.7505728006362915, 2.3832828998565674, -1.1990022659301758, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809, -1.4707825183868408, -0.3295421600341797, 0.027289554476737976, 0.3209841251373291, 2.973001718521118, 1.7559715509414673, 0.7330753803253174, 2.93376088142395, -1.7081477642059326, -2.0387277603149414, 0.6752375960350037, -2.7363479137420654])], DataType::Int64, &[3, 1, 2], &[3.0, 1.0, 2.0, 1.0, 2.0, 3.0], 1e-05);
        check("ArgMin", 13, vec![("axis", int(0)), ("select_last_index", int(1))], &[i64s(&[4, 3], &[0, 1, 1, 0, 2, 0, 0, 0, 2, 2, 2, 0])], DataType::Int64, &[1, 3], &[2.0, 2.0, 3.0], 1e-05);
    }
}
