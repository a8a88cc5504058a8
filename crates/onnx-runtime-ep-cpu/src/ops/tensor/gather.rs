//! Reads by index: Gather, GatherElements, GatherND.

use super::common::{int_values, invalid, move_data, one, strides_of};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::shape::normalize_axis;
use crate::{attrs, CpuRegistry, Tensor};
use onnx_runtime_ep_api::EpError;

/// Resolves a possibly negative index against `dim`.
pub fn resolve_index(node: &str, idx: i64, dim: usize, what: &str) -> Result<usize, EpError> {
    let d = dim as i64;
    let i = if idx < 0 { idx + d } else { idx };
    if i < 0 || i >= d {
        return Err(invalid(
            node,
            format!(
                "{what} {idx} is out of range for an axis of length {dim}; use -{dim}..{}",
                d - 1
            ),
        ));
    }
    Ok(i as usize)
}

/// `np.take(x, indices, axis)`.
pub fn gather_tensor(
    node: &str,
    x: &Tensor,
    indices: &Tensor,
    axis: usize,
) -> Result<Tensor, EpError> {
    let dim = x.shape()[axis];
    let idx = int_values(node, indices, "indices")?
        .into_iter()
        .map(|i| resolve_index(node, i, dim, "index"))
        .collect::<Result<Vec<_>, _>>()?;
    let outer: usize = x.shape()[..axis].iter().product();
    let inner: usize = x.shape()[axis + 1..].iter().product();
    let mut out_shape = x.shape()[..axis].to_vec();
    out_shape.extend_from_slice(indices.shape());
    out_shape.extend_from_slice(&x.shape()[axis + 1..]);
    Ok(move_data!(node, "Gather", x, out_shape, T, |src, dst| {
        if inner > 0 {
            let mut rows = dst.chunks_mut(inner);
            for o in 0..outer {
                for &i in &idx {
                    let from = (o * dim + i) * inner;
                    rows.next()
                        .expect("output sized for every row")
                        .clone_from_slice(&src[from..from + inner]);
                }
            }
        }
    }))
}

fn build_gather(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let axis = attrs::int(ctx.node, "axis", 0)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let indices = tensor_input(&node, inputs, 1)?;
        if x.rank() == 0 {
            return Err(invalid(&node, "data must have rank 1 or more"));
        }
        let a = normalize_axis(&node, axis, x.rank())?;
        one(gather_tensor(&node, x, indices, a)?)
    }))
}

/// For every element of `idx_shape` (row-major), calls `f(linear, data_offset_without_axis)`,
/// where the offset walks `data_strides` with the `axis` component left out.
pub fn for_each_elementwise(
    idx_shape: &[usize],
    data_strides: &[usize],
    axis: usize,
    mut f: impl FnMut(usize, usize),
) {
    let total: usize = idx_shape.iter().product();
    let rank = idx_shape.len();
    let mut index = vec![0usize; rank];
    let mut base = 0usize;
    for l in 0..total {
        f(l, base);
        for a in (0..rank).rev() {
            index[a] += 1;
            if a != axis {
                base += data_strides[a];
            }
            if index[a] < idx_shape[a] {
                break;
            }
            if a != axis {
                base -= data_strides[a] * idx_shape[a];
            }
            index[a] = 0;
        }
    }
}

/// Checks GatherElements/ScatterElements shapes: same rank, index dims within data dims.
pub fn check_elementwise_shapes(
    node: &str,
    data: &[usize],
    idx: &[usize],
    axis: usize,
) -> Result<(), EpError> {
    if data.len() != idx.len() || (0..data.len()).any(|a| a != axis && idx[a] > data[a]) {
        return Err(invalid(
            node,
            format!("indices shape {idx:?} does not fit data shape {data:?} (axis {axis})"),
        ));
    }
    Ok(())
}

fn build_gather_elements(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let axis = attrs::int(ctx.node, "axis", 0)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let indices = tensor_input(&node, inputs, 1)?;
        let a = normalize_axis(&node, axis, x.rank())?;
        check_elementwise_shapes(&node, x.shape(), indices.shape(), a)?;
        let dim = x.shape()[a];
        let strides = strides_of(x.shape());
        let idx = int_values(&node, indices, "indices")?;
        let mut bad = None;
        let out = move_data!(
            &node,
            "GatherElements",
            x,
            indices.shape().to_vec(),
            T,
            |src, dst| {
                for_each_elementwise(indices.shape(), &strides, a, |l, base| match resolve_index(
                    &node, idx[l], dim, "index",
                ) {
                    Ok(i) => dst[l] = src[base + i * strides[a]].clone(),
                    Err(e) => {
                        bad.get_or_insert(e);
                    }
                })
            }
        );
        match bad {
            Some(e) => Err(e),
            None => one(out),
        }
    }))
}

fn build_gather_nd(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let b = attrs::int(ctx.node, "batch_dims", 0)?;
    if b < 0 {
        return Err(EpError::invalid_attribute(
            ctx.node,
            "batch_dims",
            "must be non-negative",
        ));
    }
    let b = b as usize;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let indices = tensor_input(&node, inputs, 1)?;
        let (ds, is) = (x.shape(), indices.shape());
        let q = is.len();
        if q == 0 || q <= b || ds.len() <= b || ds[..b] != is[..b] {
            return Err(invalid(
                &node,
                format!("indices {is:?} do not fit data {ds:?} with batch_dims {b}"),
            ));
        }
        let k = is[q - 1];
        if k > ds.len() - b {
            return Err(invalid(
                &node,
                format!(
                    "index tuples of length {k} exceed data rank {} minus batch_dims {b}",
                    ds.len()
                ),
            ));
        }
        let batches: usize = ds[..b].iter().product();
        let per_batch: usize = is[b..q - 1].iter().product();
        let slice: usize = ds[b + k..].iter().product();
        let batch_stride: usize = ds[b..].iter().product();
        let strides = strides_of(&ds[b..]);
        let idx = int_values(&node, indices, "indices")?;
        let mut offsets = Vec::with_capacity(batches * per_batch);
        for (t, tuple) in idx.chunks(k.max(1)).take(batches * per_batch).enumerate() {
            let mut off = (t / per_batch.max(1)) * batch_stride;
            for (j, &v) in tuple.iter().take(k).enumerate() {
                off += resolve_index(&node, v, ds[b + j], "index")? * strides[j];
            }
            offsets.push(off);
        }
        if k == 0 {
            offsets = (0..batches * per_batch)
                .map(|t| (t / per_batch.max(1)) * batch_stride)
                .collect();
        }
        let mut out_shape = is[..q - 1].to_vec();
        out_shape.extend_from_slice(&ds[b + k..]);
        one(move_data!(
            &node,
            "GatherND",
            x,
            out_shape,
            T,
            |src, dst| {
                if slice > 0 {
                    for (row, &off) in dst.chunks_mut(slice).zip(&offsets) {
                        row.clone_from_slice(&src[off..off + slice]);
                    }
                }
            }
        ))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 11, 13] {
        r.register("", "Gather", since, build_gather);
    }
    for since in [11, 13] {
        r.register("", "GatherElements", since, build_gather_elements);
    }
    for since in [11, 12, 13] {
        r.register("", "GatherND", since, build_gather_nd);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn gather_axis1_negative() {
        // np.take(np.arange(12).reshape(3,4), [[-1, 0]], axis=1)
        let n = node("Gather", 2, 1, vec![("axis", Attribute::Int(1))]);
        let o = run(
            &n,
            13,
            &[t(&[3, 4], (0..12i64).collect()), t(&[1, 2], vec![-1i32, 0])],
        )
        .unwrap();
        assert_eq!(out::<i64>(&o, 0), (vec![3, 1, 2], vec![3, 0, 7, 4, 11, 8]));
        assert!(run(
            &n,
            13,
            &[t(&[3, 4], (0..12i64).collect()), t(&[1], vec![4i64])]
        )
        .is_err());
    }

    #[test]
    fn gather_elements_and_nd() {
        // np.take_along_axis([[1,2],[3,4]], [[0,0],[1,0]], axis=1)
        let n = node("GatherElements", 2, 1, vec![("axis", Attribute::Int(1))]);
        let o = run(
            &n,
            13,
            &[
                t(&[2, 2], vec![1f32, 2., 3., 4.]),
                t(&[2, 2], vec![0i64, 0, 1, 0]),
            ],
        )
        .unwrap();
        assert_eq!(out::<f32>(&o, 0).1, vec![1., 1., 4., 3.]);
        // GatherND batch_dims=1: data [[[0,1],[2,3]],[[4,5],[6,7]]], indices [[1],[0]] -> [[2,3],[4,5]]
        let n = node("GatherND", 2, 1, vec![("batch_dims", Attribute::Int(1))]);
        let o = run(
            &n,
            13,
            &[
                t(&[2, 2, 2], (0..8i32).collect()),
                t(&[2, 1], vec![1i64, 0]),
            ],
        )
        .unwrap();
        assert_eq!(out::<i32>(&o, 0), (vec![2, 2], vec![2, 3, 4, 5]));
    }
}
