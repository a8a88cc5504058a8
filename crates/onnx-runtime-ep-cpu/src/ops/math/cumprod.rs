//! CumProd (opset 26): the running product along the `axis` input, optionally exclusive
//! (starting from 1) and/or reversed. Integers wrap on overflow; floats multiply in f64
//! (f32 for the half types) and are narrowed to the input type.

use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid};
use crate::shape::normalize_axis;
use crate::{attrs, CpuRegistry, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

/// The running product of `v` (viewed as `outer x len x inner`) with `one` as the identity.
fn scan<T: Copy>(
    v: &mut [T],
    (outer, len, inner): (usize, usize, usize),
    exclusive: bool,
    reverse: bool,
    one: T,
    mul: impl Fn(T, T) -> T,
) {
    for o in 0..outer {
        for i in 0..inner {
            let mut acc = one;
            for step in 0..len {
                let k = if reverse { len - 1 - step } else { step };
                let at = (o * len + k) * inner + i;
                let x = v[at];
                if exclusive {
                    v[at] = acc;
                    acc = mul(acc, x);
                } else {
                    acc = mul(acc, x);
                    v[at] = acc;
                }
            }
        }
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let exclusive = attrs::int(n, "exclusive", 0)? != 0;
    let reverse = attrs::int(n, "reverse", 0)? != 0;
    let node = n.describe();
    Ok(kernel_fn(move |inputs: &[Option<&Value>]| {
        let x = tensor_input(&node, inputs, 0)?;
        let a = tensor_input(&node, inputs, 1)?;
        if !matches!(a.dtype(), DataType::Int32 | DataType::Int64) || a.numel() != 1 {
            return Err(invalid(
                &node,
                format!(
                    "axis must be a one-element int32/int64 tensor, got {} {:?}",
                    a.dtype(),
                    a.shape()
                ),
            ));
        }
        let axis = a.to_i64_vec().unwrap_or_default()[0];
        let shape = x.shape().to_vec();
        let ax = normalize_axis(&node, axis, shape.len())?;
        let dims = (
            shape[..ax].iter().product::<usize>(),
            shape.get(ax).copied().unwrap_or(1),
            shape.iter().skip(ax + 1).product::<usize>(),
        );
        let mut out = x.clone();
        macro_rules! native {
            ($t:ty, $one:expr, $mul:expr) => {{
                scan(out.data_mut::<$t>(), dims, exclusive, reverse, $one, $mul)
            }};
        }
        match x.dtype() {
            DataType::Float32 => native!(f32, 1.0, |a, b| a * b),
            DataType::Float64 => native!(f64, 1.0, |a, b| a * b),
            DataType::Int32 => native!(i32, 1, i32::wrapping_mul),
            DataType::Int64 => native!(i64, 1, i64::wrapping_mul),
            DataType::Uint32 => native!(u32, 1, u32::wrapping_mul),
            DataType::Uint64 => native!(u64, 1, u64::wrapping_mul),
            DataType::Float16 | DataType::BFloat16 => {
                let mut v: Vec<f32> = common::float_vec(x).unwrap_or_default();
                scan(&mut v, dims, exclusive, reverse, 1.0, |a, b| a * b);
                out = common::tensor_from_f32(x.dtype(), shape, v);
            }
            other => {
                return Err(common::unsupported(
                    &node,
                    "CumProd",
                    other,
                    "uint32, uint64, int32, int64, float16, float, double or bfloat16",
                ))
            }
        }
        Ok(vec![Value::Tensor(out)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "CumProd", 26, build);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use crate::Tensor;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn exclusive_reverse_axis_matches_loops() {
        let x = rand(2 * 3 * 4, 11, 0.5, 1.5);
        for (ex, rev) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let n = node(
                "CumProd",
                2,
                1,
                vec![
                    ("exclusive", Attribute::Int(ex)),
                    ("reverse", Attribute::Int(rev)),
                ],
            );
            let out = run(
                build,
                &n,
                26,
                &[
                    Some(Tensor::from_vec(vec![2, 3, 4], x.clone())),
                    Some(Tensor::scalar(-2i32)),
                ],
            )
            .unwrap();
            let mut want = vec![0.0; 24];
            for o in 0..2 {
                for i in 0..4 {
                    for k in 0..3 {
                        let range: Vec<usize> = if rev == 1 {
                            (k + ex as usize..3).collect()
                        } else {
                            (0..k + 1 - ex as usize).collect()
                        };
                        want[(o * 3 + k) * 4 + i] =
                            range.iter().map(|&j| x[(o * 3 + j) * 4 + i]).product();
                    }
                }
            }
            let got: Vec<f32> = out[0].data::<f64>().iter().map(|&v| v as f32).collect();
            assert_close(&got, &want, 1e-6);
        }
        let n = node("CumProd", 2, 1, vec![]);
        let ints = Tensor::from_vec(vec![3], vec![i32::MAX, 3, 2]);
        let out = run(build, &n, 26, &[Some(ints), Some(Tensor::scalar(0i64))]).unwrap();
        assert_eq!(
            out[0].data::<i32>(),
            &[i32::MAX, i32::MAX.wrapping_mul(3), i32::MAX.wrapping_mul(6)]
        );
    }
}
