//! Unique: distinct elements or slices, sorted or in first-occurrence order, with first
//! indices, inverse indices and counts.

use super::common::{unsupported, Elem};
use super::gather::gather_tensor;
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::shape::normalize_axis;
use crate::{attrs, dispatch_numeric, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::cmp::Ordering;

/// A total order over partially ordered values: NaN after everything and equal to NaN.
#[allow(clippy::eq_op)]
fn total<T: PartialOrd>(a: &T, b: &T) -> Ordering {
    a.partial_cmp(b).unwrap_or_else(|| (a != a).cmp(&(b != b)))
}

/// Lexicographic comparison of slices `i` and `j` along the axis of length `dim`.
fn slice_cmp<T: PartialOrd>(
    v: &[T],
    outer: usize,
    dim: usize,
    inner: usize,
    i: usize,
    j: usize,
) -> Ordering {
    for o in 0..outer {
        let (a, b) = ((o * dim + i) * inner, (o * dim + j) * inner);
        for k in 0..inner {
            match total(&v[a + k], &v[b + k]) {
                Ordering::Equal => {}
                other => return other,
            }
        }
    }
    Ordering::Equal
}

/// (first index of each unique slice in output order, inverse indices, counts).
fn groups<T: PartialOrd + Sync>(
    v: &[T],
    outer: usize,
    dim: usize,
    inner: usize,
    sorted: bool,
) -> (Vec<usize>, Vec<usize>, Vec<usize>) {
    let mut perm: Vec<usize> = (0..dim).collect();
    perm.sort_by(|&i, &j| slice_cmp(v, outer, dim, inner, i, j));
    // (first index, members) per group in sorted order.
    let mut gs: Vec<(usize, Vec<usize>)> = Vec::new();
    for &i in &perm {
        match gs.last_mut() {
            Some((first, members))
                if slice_cmp(v, outer, dim, inner, *first, i) == Ordering::Equal =>
            {
                members.push(i)
            }
            _ => gs.push((i, vec![i])),
        }
    }
    if !sorted {
        gs.sort_by_key(|(first, _)| *first);
    }
    let mut inverse = vec![0usize; dim];
    for (g, (_, members)) in gs.iter().enumerate() {
        for &m in members {
            inverse[m] = g;
        }
    }
    let firsts = gs.iter().map(|(f, _)| *f).collect();
    let counts = gs.iter().map(|(_, m)| m.len()).collect();
    (firsts, inverse, counts)
}

fn build_unique(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let sorted = attrs::int(ctx.node, "sorted", 1)? != 0;
    let axis = attrs::opt_int(ctx.node, "axis")?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let (x, a) = match axis {
            Some(a) => (x.clone(), normalize_axis(&node, a, x.rank())?),
            None => (x.reshaped(vec![x.numel()]), 0),
        };
        let dim = x.shape()[a];
        let outer: usize = x.shape()[..a].iter().product();
        let inner: usize = x.shape()[a + 1..].iter().product();
        let (firsts, inverse, counts) = match x.dtype() {
            DataType::String => groups(String::items(&x), outer, dim, inner, sorted),
            DataType::Bool => groups(x.bytes(), outer, dim, inner, sorted),
            d => dispatch_numeric!(d, T => groups(x.data::<T>(), outer, dim, inner, sorted),
                other => return Err(unsupported(&node, "Unique", other, "numeric, bool and string only"))),
        };
        let idx: Vec<i64> = firsts.iter().map(|&f| f as i64).collect();
        let idx_t = Tensor::from_vec(vec![idx.len()], idx);
        let y = gather_tensor(&node, &x, &idx_t, a)?;
        let inv: Vec<i64> = inverse.iter().map(|&v| v as i64).collect();
        let cnt: Vec<i64> = counts.iter().map(|&v| v as i64).collect();
        Ok(vec![
            Value::Tensor(y),
            Value::Tensor(idx_t),
            Value::Tensor(Tensor::from_vec(vec![inv.len()], inv)),
            Value::Tensor(Tensor::from_vec(vec![cnt.len()], cnt)),
        ])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "Unique", 11, build_unique);
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn unsorted_and_sorted() {
        // np.unique([2, 1, 1, 3, 4, 3], return_index, return_inverse, return_counts)
        let x = t(&[6], vec![2f32, 1., 1., 3., 4., 3.]);
        let o = run(&node("Unique", 1, 4, vec![]), 11, std::slice::from_ref(&x)).unwrap();
        assert_eq!(out::<f32>(&o, 0).1, vec![1., 2., 3., 4.]);
        assert_eq!(out::<i64>(&o, 1).1, vec![1, 0, 3, 4]);
        assert_eq!(out::<i64>(&o, 2).1, vec![1, 0, 0, 2, 3, 2]);
        assert_eq!(out::<i64>(&o, 3).1, vec![2, 1, 2, 1]);
        let n = node("Unique", 1, 4, vec![("sorted", Attribute::Int(0))]);
        let o = run(&n, 11, &[x]).unwrap();
        assert_eq!(out::<f32>(&o, 0).1, vec![2., 1., 3., 4.]);
        assert_eq!(out::<i64>(&o, 2).1, vec![0, 1, 1, 2, 3, 2]);
    }

    #[test]
    fn along_axis() {
        // np.unique([[1,0,0],[1,0,0],[2,3,4]], axis=0)
        let n = node("Unique", 1, 4, vec![("axis", Attribute::Int(0))]);
        let o = run(&n, 11, &[t(&[3, 3], vec![1i64, 0, 0, 1, 0, 0, 2, 3, 4])]).unwrap();
        assert_eq!(out::<i64>(&o, 0), (vec![2, 3], vec![1, 0, 0, 2, 3, 4]));
        assert_eq!(out::<i64>(&o, 3).1, vec![2, 1]);
    }
}
