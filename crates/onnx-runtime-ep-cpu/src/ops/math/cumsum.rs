//! CumSum: running sums along the axis given as input 1, optionally exclusive and reversed.

use super::common::{register_versions, NodeInfo};
use super::layout::{par_blocks, AxisView};
use super::num::Num;
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::{attrs, dispatch_numeric, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;

fn cumsum<T: Num>(x: &Tensor, v: AxisView, exclusive: bool, reverse: bool) -> Tensor {
    let mut out = Tensor::zeros(x.dtype(), x.shape().to_vec());
    let d = x.data::<T>();
    let (len, inner) = (v.len, v.inner);
    let block = len * inner;
    par_blocks(out.data_mut::<T>(), block, d.len(), |o, ob| {
        let xb = &d[o * block..(o + 1) * block];
        let mut acc = vec![T::num_zero(); inner];
        for step in 0..len {
            let r = if reverse { len - 1 - step } else { step };
            let (xr, or) = (&xb[r * inner..][..inner], &mut ob[r * inner..][..inner]);
            for ((a, o), &e) in acc.iter_mut().zip(or.iter_mut()).zip(xr) {
                if exclusive {
                    *o = *a;
                    *a = a.add(e);
                } else {
                    *a = a.add(e);
                    *o = *a;
                }
            }
        }
    });
    out
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let exclusive = attrs::int(ctx.node, "exclusive", 0)? != 0;
    let reverse = attrs::int(ctx.node, "reverse", 0)? != 0;
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let axis_t = info.input(inputs, 1)?;
        let axis = info.ints_input(axis_t, "axis")?;
        if axis.len() != 1 {
            return Err(info.invalid(format!("axis must hold one value, got {}", axis.len())));
        }
        let a = crate::shape::normalize_axis(&info.desc, axis[0], x.rank())?;
        let v = if x.rank() == 0 {
            AxisView {
                outer: 1,
                len: 1,
                inner: 1,
            }
        } else {
            AxisView::new(x.shape(), a, a + 1)
        };
        let out = dispatch_numeric!(x.dtype(), T => cumsum::<T>(x, v, exclusive, reverse),
            d => return Err(info.bad_dtype(d, "expected a numeric type")));
        Ok(vec![Value::Tensor(out)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    register_versions(r, "", "CumSum", &[11, 14], build);
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py cumsum).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("CumSum", 14, vec![], &[f32s(&[2, 3, 2], &[0.7505728006362915, 2.3832828998565674, 1.6541141271591187, -1.6487568616867065, -1.1990022659301758, 2.2413206100463867, -2.9684081077575684, 1.927370548248291, 1.782416582107544, -0.19239027798175812, -1.1818054914474487, -1.3294463157653809]), i64s(&[], &[1])], DataType::Float32, &[2, 3, 2], &[0.7505728006362915, 2.3832828998565674, 2.40468692779541, 0.7345260381698608, 1.2056846618652344, 2.975846767425537, -2.9684081077575684, 1.927370548248291, -1.1859915256500244, 1.7349802255630493, -2.3677968978881836, 0.40553390979766846], 1e-05);
        check("CumSum", 14, vec![("exclusive", int(1)), ("reverse", int(1))], &[i64s(&[2, 3], &[8, -10, 19, -3, -1, 0]), i32s(&[], &[-1])], DataType::Int64, &[2, 3], &[9.0, 19.0, 0.0, -1.0, 0.0, 0.0], 1e-05);
        check("CumSum", 14, vec![("reverse", int(1))], &[f64s(&[4], &[0.320984112446955, 2.973001700606356, 1.7559715152825186, 0.7330753766469762]), i64s(&[], &[0])], DataType::Float64, &[4], &[5.783032704982806, 5.462048592535851, 2.489046891929495, 0.7330753766469762], 1e-12);
    }
}
