//! TopK: the k largest (or smallest) elements along an axis and their int64 indices. Ties
//! go to the lower index; NaN ranks above every number. K is an attribute before opset 10
//! and input 1 after.

use super::common::{register_versions, NodeInfo};
use super::layout::{par_blocks, AxisView};
use super::num::Num;
use crate::kernel::{kernel_fn, BuildContext, CpuKernel};
use crate::{attrs, dispatch_numeric, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::cmp::Ordering;

/// Total order with NaN above everything.
#[inline(always)]
fn cmp<T: Num>(a: T, b: T) -> Ordering {
    match (a.isnan(), b.isnan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        _ => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

fn topk<T: Num>(
    x: &Tensor,
    v: AxisView,
    k: usize,
    largest: bool,
    shape: &[usize],
) -> (Tensor, Tensor) {
    let d = x.data::<T>();
    let (len, inner) = (v.len, v.inner);
    let mut values = Tensor::zeros(x.dtype(), shape.to_vec());
    let mut idx = vec![0i64; v.outer * k * inner];
    par_blocks(&mut idx, k * inner, d.len(), |o, ob| {
        let base = o * len * inner;
        let mut order: Vec<usize> = Vec::with_capacity(len);
        for i in 0..inner {
            order.clear();
            order.extend(0..len);
            let key = |r: usize| d[base + r * inner + i];
            let by = |a: &usize, b: &usize| {
                let c = cmp(key(*a), key(*b));
                let c = if largest { c.reverse() } else { c };
                c.then(a.cmp(b))
            };
            if k < len {
                order.select_nth_unstable_by(k, by);
                order.truncate(k);
            }
            order.sort_unstable_by(by);
            for (j, &r) in order.iter().enumerate() {
                ob[j * inner + i] = r as i64;
            }
        }
    });
    let vd = values.data_mut::<T>();
    for (n, (slot, &r)) in vd.iter_mut().zip(&idx).enumerate() {
        let (o, rest) = (n / (k * inner), n % (k * inner));
        let i = rest % inner;
        *slot = d[o * len * inner + r as usize * inner + i];
    }
    (values, Tensor::from_vec(shape.to_vec(), idx))
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let info = NodeInfo::new(ctx.node);
    let axis = attrs::int(ctx.node, "axis", -1)?;
    let largest = attrs::int(ctx.node, "largest", 1)? != 0;
    let k_attr = if ctx.opset < 10 {
        Some(attrs::int(ctx.node, "k", -1)?)
    } else {
        None
    };
    Ok(kernel_fn(move |inputs| {
        let x = info.input(inputs, 0)?;
        let k = match k_attr {
            Some(k) => k,
            None => {
                let kt = info.ints_input(info.input(inputs, 1)?, "K")?;
                if kt.len() != 1 {
                    return Err(info.invalid(format!("K must hold one value, got {kt:?}")));
                }
                kt[0]
            }
        };
        let a = crate::shape::normalize_axis(&info.desc, axis, x.rank())?;
        if x.rank() == 0 {
            return Err(info.invalid("TopK needs an input of rank 1 or more"));
        }
        let len = x.shape()[a];
        if k < 0 || k as usize > len {
            return Err(info.invalid(format!(
                "K = {k} is out of range for axis {a} of size {len}"
            )));
        }
        let k = k as usize;
        let v = AxisView::new(x.shape(), a, a + 1);
        let mut shape = x.shape().to_vec();
        shape[a] = k;
        let (vals, idx) = if x.dtype() == DataType::Bool {
            return Err(info.bad_dtype(x.dtype(), "TopK takes numeric types"));
        } else {
            dispatch_numeric!(x.dtype(), T => topk::<T>(x, v, k, largest, &shape),
                d => return Err(info.bad_dtype(d, "TopK takes numeric types")))
        };
        Ok(vec![Value::Tensor(vals), Value::Tensor(idx)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    register_versions(r, "", "TopK", &[1, 10, 11, 24], build);
}

#[cfg(test)]
mod tests {
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::DataType;

    /// Expected values from the ONNX reference implementation (scripts/math_cases.py topk).
    #[test]
    #[rustfmt::skip]
    fn matches_onnx_reference() {
        check("TopK", 11, vec![("largest", int(0))], &[f32s(&[3, 5], &[3.0, 2.0, 2.0, 3.0, 2.0, 3.0, 3.0, 0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 0.0, 1.0]), i64s(&[1], &[3])], DataType::Float32, &[3, 3], &[2.0, 2.0, 2.0, 0.0, 0.0, 1.0, 0.0, 1.0, 1.0], 1e-05);
        check("TopK", 11, vec![("axis", int(0)), ("largest", int(0))], &[f32s(&[3, 5], &[3.0, 2.0, 2.0, 3.0, 2.0, 3.0, 3.0, 0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 0.0, 1.0]), i64s(&[1], &[2])], DataType::Float32, &[2, 5], &[1.0, 2.0, 0.0, 0.0, 1.0, 3.0, 3.0, 2.0, 0.0, 1.0], 1e-05);
        check_output("TopK", 11, vec![("largest", int(0))], &[f32s(&[3, 5], &[3.0, 2.0, 2.0, 3.0, 2.0, 3.0, 3.0, 0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 0.0, 1.0]), i64s(&[1], &[3])], 1, DataType::Int64, &[3, 3], &[1.0, 2.0, 4.0, 2.0, 3.0, 4.0, 3.0, 0.0, 4.0], 1e-05);
        check_output("TopK", 11, vec![("axis", int(0)), ("largest", int(0))], &[f32s(&[3, 5], &[3.0, 2.0, 2.0, 3.0, 2.0, 3.0, 3.0, 0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 0.0, 1.0]), i64s(&[1], &[2])], 1, DataType::Int64, &[2, 5], &[2.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 0.0, 2.0, 2.0], 1e-05);
        check("TopK", 11, vec![("largest", int(1))], &[f32s(&[3, 5], &[3.0, 2.0, 2.0, 3.0, 2.0, 3.0, 3.0, 0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 0.0, 1.0]), i64s(&[1], &[3])], DataType::Float32, &[3, 3], &[3.0, 3.0, 2.0, 3.0, 3.0, 1.0, 3.0, 3.0, 1.0], 1e-05);
        check("TopK", 11, vec![("axis", int(0)), ("largest", int(1))], &[f32s(&[3, 5], &[3.0, 2.0, 2.0, 3.0, 2.0, 3.0, 3.0, 0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 0.0, 1.0]), i64s(&[1], &[2])], DataType::Float32, &[2, 5], &[3.0, 3.0, 3.0, 3.0, 2.0, 3.0, 3.0, 2.0, 0.0, 1.0], 1e-05);
        check_output("TopK", 11, vec![("largest", int(1))], &[f32s(&[3, 5], &[3.0, 2.0, 2.0, 3.0, 2.0, 3.0, 3.0, 0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 0.0, 1.0]), i64s(&[1], &[3])], 1, DataType::Int64, &[3, 3], &[0.0, 3.0, 1.0, 0.0, 1.0, 4.0, 1.0, 2.0, 0.0], 1e-05);
        check_output("TopK", 11, vec![("axis", int(0)), ("largest", int(1))], &[f32s(&[3, 5], &[3.0, 2.0, 2.0, 3.0, 2.0, 3.0, 3.0, 0.0, 0.0, 1.0, 1.0, 3.0, 3.0, 0.0, 1.0]), i64s(&[1], &[2])], 1, DataType::Int64, &[2, 5], &[0.0, 1.0, 2.0, 0.0, 0.0, 1.0, 2.0, 0.0, 1.0, 1.0], 1e-05);
        check_output("TopK", 11, vec![], &[i64s(&[2, 4], &[12, -15, 11, -16, -2, 12, -8, -7]), i64s(&[1], &[4])], 1, DataType::Int64, &[2, 4], &[0.0, 2.0, 1.0, 3.0, 1.0, 0.0, 3.0, 2.0], 1e-05);
    }
}
