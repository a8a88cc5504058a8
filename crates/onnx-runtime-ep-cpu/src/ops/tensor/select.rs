//! Masks and selections: Where, Compress, NonZero, Trilu, ReverseSequence, OneHot.

use super::common::{
    checked_numel, int_values, invalid, move_data, new_out, one, repack, scalar_f64, strides_of,
    unpacked, unsupported, with_elem, Elem,
};
use super::gather::gather_tensor;
use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::shape::{broadcast_shapes, broadcast_strides, for_each_offset, normalize_axis};
use crate::{attrs, CpuRegistry, Tensor};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

fn bool_input<'a>(node: &str, t: &'a Tensor, what: &str) -> Result<&'a [u8], EpError> {
    if t.dtype() != DataType::Bool {
        return Err(invalid(
            node,
            format!("{what} must be bool, got {}", t.dtype()),
        ));
    }
    Ok(t.bytes())
}

fn build_where(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let c = tensor_input(&node, inputs, 0)?;
        let x = tensor_input(&node, inputs, 1)?;
        let y = tensor_input(&node, inputs, 2)?;
        let cond = bool_input(&node, c, "condition")?;
        if x.dtype() != y.dtype() {
            return Err(invalid(
                &node,
                format!(
                    "X is {} but Y is {}; cast them to one type",
                    x.dtype(),
                    y.dtype()
                ),
            ));
        }
        let shape = broadcast_shapes(&node, &[c.shape(), x.shape(), y.shape()])?;
        let sc = broadcast_strides(c.shape(), &shape);
        let sx = broadcast_strides(x.shape(), &shape);
        let sy = broadcast_strides(y.shape(), &shape);
        let yu = unpacked(y);
        one(move_data!(
            &node,
            "Where",
            x,
            shape.clone(),
            T,
            |xs, dst| {
                let ys = T::items(&yu);
                if c.shape() == shape.as_slice() && x.shape() == c.shape() && y.shape() == c.shape()
                {
                    for (i, d) in dst.iter_mut().enumerate() {
                        *d = if cond[i] != 0 {
                            xs[i].clone()
                        } else {
                            ys[i].clone()
                        };
                    }
                } else {
                    for_each_offset(&shape, [&sc, &sx, &sy], |i, [oc, ox, oy]| {
                        dst[i] = if cond[oc] != 0 {
                            xs[ox].clone()
                        } else {
                            ys[oy].clone()
                        };
                    });
                }
            }
        ))
    }))
}

fn build_compress(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let axis = attrs::opt_int(ctx.node, "axis")?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let c = tensor_input(&node, inputs, 1)?;
        let cond = bool_input(&node, c, "condition")?;
        let (x, a) = match axis {
            Some(a) => (x.clone(), normalize_axis(&node, a, x.rank())?),
            None => (x.reshaped(vec![x.numel()]), 0),
        };
        let dim = x.shape()[a];
        if cond.iter().skip(dim).any(|&v| v != 0) {
            return Err(invalid(
                &node,
                format!(
                    "condition selects index {} past the axis length {dim}",
                    cond.len() - 1
                ),
            ));
        }
        let idx: Vec<i64> = (0..dim.min(cond.len()))
            .filter(|&i| cond[i] != 0)
            .map(|i| i as i64)
            .collect();
        let idx = Tensor::from_vec(vec![idx.len()], idx);
        one(gather_tensor(&node, &x, &idx, a)?)
    }))
}

/// Per-element "is non-zero" over raw storage: floats ignore the sign bit so -0.0 is zero.
fn nonzero_mask(node: &str, x: &Tensor) -> Result<Vec<bool>, EpError> {
    let u = unpacked(x);
    let sign_mask: u64 = match x.dtype() {
        DataType::Float32 => 0x7fff_ffff,
        DataType::Float64 => 0x7fff_ffff_ffff_ffff,
        DataType::Float16 | DataType::BFloat16 => 0x7fff,
        DataType::Float8E4M3FN | DataType::Float8E5M2 => 0x7f,
        _ => u64::MAX,
    };
    Ok(match x.dtype() {
        DataType::String => x.strings().iter().map(|s| !s.is_empty()).collect(),
        DataType::Complex64 => u
            .data::<u64>()
            .iter()
            .map(|&v| v & 0x7fff_ffff_7fff_ffff != 0)
            .collect(),
        DataType::Complex128 => u
            .bytes()
            .chunks_exact(16)
            .map(|c| {
                let re = u64::from_le_bytes(c[..8].try_into().expect("8 bytes"));
                let im = u64::from_le_bytes(c[8..].try_into().expect("8 bytes"));
                (re | im) & 0x7fff_ffff_ffff_ffff != 0
            })
            .collect(),
        d => match u.dtype().bit_width() {
            Some(16) => u
                .data::<u16>()
                .iter()
                .map(|&v| v as u64 & sign_mask != 0)
                .collect(),
            Some(32) => u
                .data::<u32>()
                .iter()
                .map(|&v| v as u64 & sign_mask != 0)
                .collect(),
            Some(64) => u
                .data::<u64>()
                .iter()
                .map(|&v| v & sign_mask != 0)
                .collect(),
            Some(8) => u
                .bytes()
                .iter()
                .map(|&v| v as u64 & sign_mask != 0)
                .collect(),
            _ => return Err(unsupported(node, "NonZero", d, "it has no element storage")),
        },
    })
}

fn build_nonzero(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let mask = nonzero_mask(&node, x)?;
        let hits: Vec<usize> = (0..mask.len()).filter(|&i| mask[i]).collect();
        let rank = x.rank().max(1);
        let strides = strides_of(x.shape());
        let mut out = vec![0i64; rank * hits.len()];
        for (k, &l) in hits.iter().enumerate() {
            let mut rem = l;
            for a in 0..x.rank() {
                out[a * hits.len() + k] = (rem / strides[a]) as i64;
                rem %= strides[a];
            }
        }
        one(Tensor::from_vec(vec![rank, hits.len()], out))
    }))
}

fn build_trilu(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let upper = attrs::int(ctx.node, "upper", 1)? != 0;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let k = match optional_tensor_input(&node, inputs, 1)? {
            Some(t) => int_values(&node, t, "k")?.first().copied().unwrap_or(0),
            None => 0,
        };
        if x.rank() < 2 {
            return Err(invalid(
                &node,
                format!("input must be at least 2-D, got {:?}", x.shape()),
            ));
        }
        let (n, m) = (x.shape()[x.rank() - 2], x.shape()[x.rank() - 1]);
        one(move_data!(
            &node,
            "Trilu",
            x,
            x.shape().to_vec(),
            T,
            |src, dst| {
                dst.clone_from_slice(src);
                if n * m > 0 {
                    for plane in dst.chunks_mut(n * m) {
                        for i in 0..n {
                            for j in 0..m {
                                let d = j as i64 - i as i64;
                                if (upper && d < k) || (!upper && d > k) {
                                    plane[i * m + j] = T::default();
                                }
                            }
                        }
                    }
                }
            }
        ))
    }))
}

fn build_reverse_sequence(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let batch_axis = attrs::int(ctx.node, "batch_axis", 1)?;
    let time_axis = attrs::int(ctx.node, "time_axis", 0)?;
    if !matches!((batch_axis, time_axis), (0, 1) | (1, 0)) {
        return Err(EpError::invalid_attribute(
            ctx.node,
            "batch_axis",
            format!(
                "batch_axis {batch_axis} and time_axis {time_axis} must be 0 and 1 in some order"
            ),
        ));
    }
    let (ba, ta) = (batch_axis as usize, time_axis as usize);
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let lens = int_values(&node, tensor_input(&node, inputs, 1)?, "sequence_lens")?;
        if x.rank() < 2 || lens.len() != x.shape()[ba] {
            return Err(invalid(
                &node,
                format!(
                    "sequence_lens {lens:?} must have one entry per batch of {:?}",
                    x.shape()
                ),
            ));
        }
        let st = strides_of(x.shape());
        let steps = x.shape()[ta];
        let inner: usize = x.shape()[2..].iter().product();
        for &l in &lens {
            if l < 0 || l as usize > steps {
                return Err(invalid(
                    &node,
                    format!("sequence length {l} is outside 0..={steps}"),
                ));
            }
        }
        one(move_data!(
            &node,
            "ReverseSequence",
            x,
            x.shape().to_vec(),
            T,
            |src, dst| {
                dst.clone_from_slice(src);
                for (b, &l) in lens.iter().enumerate() {
                    let l = l as usize;
                    for t in 0..l {
                        let to = b * st[ba] + t * st[ta];
                        let from = b * st[ba] + (l - 1 - t) * st[ta];
                        dst[to..to + inner].clone_from_slice(&src[from..from + inner]);
                    }
                }
            }
        ))
    }))
}

fn build_one_hot(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let axis = attrs::int(ctx.node, "axis", -1)?;
    Ok(kernel_fn(move |inputs| {
        let ind = tensor_input(&node, inputs, 0)?;
        let depth = scalar_f64(&node, tensor_input(&node, inputs, 1)?, "depth")?;
        let values = tensor_input(&node, inputs, 2)?;
        if values.numel() != 2 {
            return Err(invalid(&node, "values must hold [off_value, on_value]"));
        }
        if depth < 1.0 {
            return Err(invalid(
                &node,
                format!("depth must be at least 1, got {depth}"),
            ));
        }
        let depth = depth as i64;
        let idx: Vec<i64> = ind
            .to_f64_vec()
            .ok_or_else(|| {
                invalid(
                    &node,
                    format!("indices must be numeric, got {}", ind.dtype()),
                )
            })?
            .into_iter()
            .map(|v| v as i64)
            .collect();
        let a = normalize_axis(&node, axis, ind.rank() + 1)?;
        let mut shape = ind.shape().to_vec();
        shape.insert(a, depth as usize);
        checked_numel(&node, &shape)?;
        let outer: usize = ind.shape()[..a].iter().product();
        let inner: usize = ind.shape()[a..].iter().product();
        let vu = unpacked(values);
        let mut out = new_out(values.dtype(), shape);
        with_elem!(vu.dtype(), T => {
            let v = T::items(&vu);
            let dst = T::items_mut(&mut out);
            dst.fill(v[0].clone());
            for o in 0..outer {
                for i in 0..inner {
                    let mut k = idx[o * inner + i];
                    if k < 0 {
                        k += depth;
                    }
                    if (0..depth).contains(&k) {
                        dst[(o * depth as usize + k as usize) * inner + i] = v[1].clone();
                    }
                }
            }
        }, return Err(unsupported(&node, "OneHot", values.dtype(), "it has no element storage")));
        one(repack(out, values.dtype()))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [9, 16] {
        r.register("", "Where", since, build_where);
    }
    for since in [9, 11] {
        r.register("", "Compress", since, build_compress);
        r.register("", "OneHot", since, build_one_hot);
    }
    for since in [9, 13] {
        r.register("", "NonZero", since, build_nonzero);
    }
    r.register("", "Trilu", 14, build_trilu);
    r.register("", "ReverseSequence", 10, build_reverse_sequence);
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use crate::{Tensor, Value};
    use onnx_runtime_ir::Attribute;

    #[test]
    fn where_broadcast_strings() {
        let c = Some(Value::Tensor(Tensor::from_bools(
            vec![2, 1],
            &[true, false],
        )));
        let s = |v: &[&str], sh: &[usize]| {
            Some(Value::Tensor(Tensor::from_strings(
                sh.to_vec(),
                v.iter().map(|x| x.to_string()).collect(),
            )))
        };
        let o = run(
            &node("Where", 3, 1, vec![]),
            16,
            &[c, s(&["a", "b"], &[2]), s(&["z"], &[1])],
        )
        .unwrap();
        let t = o[0].as_tensor().unwrap();
        assert_eq!(t.shape(), &[2, 2]);
        assert_eq!(t.strings(), &["a", "b", "z", "z"]);
    }

    #[test]
    fn nonzero_and_trilu() {
        // np.nonzero([[0, -0.0, 3], [4, 0, 1e-30]])
        let o = run(
            &node("NonZero", 1, 1, vec![]),
            13,
            &[t(&[2, 3], vec![0f32, -0.0, 3., 4., 0., 1e-30])],
        )
        .unwrap();
        assert_eq!(out::<i64>(&o, 0), (vec![2, 3], vec![0, 1, 1, 2, 0, 2]));
        // np.tril(arange(9).reshape(3,3), k=-1)
        let n = node("Trilu", 2, 1, vec![("upper", Attribute::Int(0))]);
        let o = run(
            &n,
            14,
            &[t(&[3, 3], (1..10i64).collect()), t(&[], vec![-1i64])],
        )
        .unwrap();
        assert_eq!(out::<i64>(&o, 0).1, vec![0, 0, 0, 4, 0, 0, 7, 8, 0]);
    }

    #[test]
    fn one_hot_negative_axis0() {
        // onnx reference one_hot(indices=[1,-1,5], depth=3, axis=0, values=[0,9])
        let n = node("OneHot", 3, 1, vec![("axis", Attribute::Int(0))]);
        let o = run(
            &n,
            11,
            &[
                t(&[3], vec![1i64, -1, 5]),
                t(&[], vec![3.0f32]),
                t(&[2], vec![0i32, 9]),
            ],
        )
        .unwrap();
        assert_eq!(
            out::<i32>(&o, 0),
            (vec![3, 3], vec![0, 0, 0, 9, 0, 0, 0, 9, 0])
        );
    }

    #[test]
    fn reverse_sequence_and_compress() {
        // ReverseSequence time_axis=0 batch_axis=1 on arange(8).reshape(4,2), lens [4, 2]
        let n = node("ReverseSequence", 2, 1, vec![]);
        let o = run(
            &n,
            10,
            &[t(&[4, 2], (0..8i32).collect()), t(&[2], vec![4i64, 2])],
        )
        .unwrap();
        assert_eq!(out::<i32>(&o, 0).1, vec![6, 3, 4, 1, 2, 5, 0, 7]);
        let n = node("Compress", 2, 1, vec![("axis", Attribute::Int(1))]);
        let c = Some(Value::Tensor(Tensor::from_bools(vec![2], &[false, true])));
        let o = run(&n, 11, &[t(&[2, 2], vec![1u8, 2, 3, 4]), c]).unwrap();
        assert_eq!(out::<u8>(&o, 0), (vec![2, 1], vec![2, 4]));
    }
}
