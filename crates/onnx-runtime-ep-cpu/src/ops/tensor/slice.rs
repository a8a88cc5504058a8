//! Views and repetitions: Slice, Tile, Expand.

use super::common::{
    checked_numel, int_values, invalid, move_data, one, opt_ints_input, strides_of, to_dim,
};
use super::copy;
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::shape::{broadcast_shapes, broadcast_strides, normalize_axes};
use crate::{attrs, CpuRegistry, Tensor};
use onnx_runtime_ep_api::EpError;

/// Clamped (start, count) of one sliced axis, following the ONNX rules.
fn slice_axis(dim: usize, start: i64, end: i64, step: i64) -> (i64, usize) {
    if dim == 0 {
        return (0, 0);
    }
    let d = dim as i64;
    let fix = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
    let (s, e) = (fix(start), fix(end));
    if step > 0 {
        let s = s.clamp(0, d);
        let e = e.clamp(0, d);
        let n = if e > s { (e - s + step - 1) / step } else { 0 };
        (s, n as usize)
    } else {
        let s = s.clamp(0, (d - 1).max(0));
        let e = e.clamp(-1, d - 1);
        let n = if s > e {
            (s - e + (-step) - 1) / (-step)
        } else {
            0
        };
        (s, n as usize)
    }
}

/// Slices `x` by per-axis starts/ends/steps (`axes` may be negative; `steps` default to 1).
pub fn slice_tensor(
    node: &str,
    x: &Tensor,
    starts: &[i64],
    ends: &[i64],
    axes: Option<&[i64]>,
    steps: Option<&[i64]>,
) -> Result<Tensor, EpError> {
    let rank = x.rank();
    if starts.len() != ends.len() {
        return Err(invalid(
            node,
            format!("starts {starts:?} and ends {ends:?} differ in length"),
        ));
    }
    let default_axes: Vec<i64> = (0..starts.len() as i64).collect();
    let axes = normalize_axes(node, axes.unwrap_or(&default_axes), rank)?;
    if axes.len() != starts.len() || steps.is_some_and(|s| s.len() != starts.len()) {
        return Err(invalid(
            node,
            "starts, ends, axes and steps must have the same length",
        ));
    }
    let in_strides = strides_of(x.shape());
    let mut shape = x.shape().to_vec();
    let mut strides: Vec<isize> = in_strides.iter().map(|&s| s as isize).collect();
    let mut offset = 0usize;
    for (i, &a) in axes.iter().enumerate() {
        let step = steps.map_or(1, |s| s[i]);
        if step == 0 {
            return Err(invalid(node, format!("step for axis {a} is 0")));
        }
        let (s, n) = slice_axis(x.shape()[a], starts[i], ends[i], step);
        shape[a] = n;
        if n > 0 {
            offset += s as usize * in_strides[a];
        }
        strides[a] = step as isize * in_strides[a] as isize;
    }
    if shape.iter().product::<usize>() == 0 {
        offset = 0;
    }
    Ok(move_data!(
        node,
        "Slice",
        x,
        shape.clone(),
        T,
        |src, dst| { copy::copy_strided(src, offset, &shape, &strides, dst) }
    ))
}

fn build_slice(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    if ctx.opset < 10 {
        let starts = attrs::ints(ctx.node, "starts")?;
        let ends = attrs::ints(ctx.node, "ends")?;
        let axes = attrs::opt_ints(ctx.node, "axes")?;
        return Ok(kernel_fn(move |inputs| {
            let x = tensor_input(&node, inputs, 0)?;
            one(slice_tensor(
                &node,
                x,
                &starts,
                &ends,
                axes.as_deref(),
                None,
            )?)
        }));
    }
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let starts = int_values(&node, tensor_input(&node, inputs, 1)?, "starts")?;
        let ends = int_values(&node, tensor_input(&node, inputs, 2)?, "ends")?;
        let axes = opt_ints_input(&node, inputs, 3, "axes")?;
        let steps = opt_ints_input(&node, inputs, 4, "steps")?;
        one(slice_tensor(
            &node,
            x,
            &starts,
            &ends,
            axes.as_deref(),
            steps.as_deref(),
        )?)
    }))
}

/// `x` repeated `repeats[a]` times along each axis.
pub fn tile_tensor(node: &str, x: &Tensor, repeats: &[usize]) -> Result<Tensor, EpError> {
    let out_shape: Vec<usize> = x.shape().iter().zip(repeats).map(|(d, r)| d * r).collect();
    checked_numel(node, &out_shape)?;
    let tables: Vec<Vec<Option<usize>>> = x
        .shape()
        .iter()
        .zip(&out_shape)
        .map(|(&d, &o)| (0..o).map(|i| Some(i % d)).collect())
        .collect();
    Ok(move_data!(node, "Tile", x, out_shape, T, |src, dst| {
        copy::gather_tables(src, x.shape(), &tables, &T::default(), dst)
    }))
}

fn build_tile(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let v1 = ctx.opset < 6;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let reps = int_values(&node, tensor_input(&node, inputs, 1)?, "repeats")?;
        let reps = if v1 {
            // Tile-1: a scalar count and an axis input.
            let axis = int_values(&node, tensor_input(&node, inputs, 2)?, "axis")?;
            let a = crate::shape::normalize_axis(&node, axis[0], x.rank())?;
            let mut r = vec![1i64; x.rank()];
            r[a] = reps[0];
            r
        } else {
            reps
        };
        if reps.len() != x.rank() {
            return Err(invalid(
                &node,
                format!(
                    "repeats {reps:?} must have one entry per input axis ({})",
                    x.rank()
                ),
            ));
        }
        let reps = reps
            .iter()
            .map(|&r| to_dim(&node, r, "repeats"))
            .collect::<Result<Vec<_>, _>>()?;
        one(tile_tensor(&node, x, &reps)?)
    }))
}

/// `x` broadcast to `shape` (numpy rules, both ways).
pub fn expand_tensor(node: &str, x: &Tensor, shape: &[usize]) -> Result<Tensor, EpError> {
    let out_shape = broadcast_shapes(node, &[x.shape(), shape])?;
    checked_numel(node, &out_shape)?;
    let strides: Vec<isize> = broadcast_strides(x.shape(), &out_shape)
        .into_iter()
        .map(|s| s as isize)
        .collect();
    Ok(move_data!(
        node,
        "Expand",
        x,
        out_shape.clone(),
        T,
        |src, dst| { copy::copy_strided(src, 0, &out_shape, &strides, dst) }
    ))
}

fn build_expand(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let shape = int_values(&node, tensor_input(&node, inputs, 1)?, "shape")?;
        let shape = shape
            .iter()
            .map(|&d| to_dim(&node, d, "shape"))
            .collect::<Result<Vec<_>, _>>()?;
        one(expand_tensor(&node, x, &shape)?)
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 10, 11, 13] {
        r.register("", "Slice", since, build_slice);
    }
    for since in [1, 6, 13] {
        r.register("", "Tile", since, build_tile);
    }
    for since in [8, 13] {
        r.register("", "Expand", since, build_expand);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::slice_axis;

    #[test]
    fn clamping() {
        assert_eq!(slice_axis(10, 0, i64::MAX, 1), (0, 10));
        assert_eq!(slice_axis(10, -1, i64::MIN, -1), (9, 10));
        assert_eq!(slice_axis(10, 20, 0, -3), (9, 3));
        assert_eq!(slice_axis(10, 5, 2, 1), (5, 0));
        assert_eq!(slice_axis(0, 0, 5, -1), (0, 0));
    }

    #[test]
    fn slice_steps() {
        // x = np.arange(20).reshape(4,5); x[3:0:-2, 1::3]
        let n = node("Slice", 5, 1, vec![]);
        let x = t(&[4, 5], (0..20i32).collect());
        let o = run(
            &n,
            13,
            &[
                x,
                t(&[2], vec![3i64, 1]),
                t(&[2], vec![0i64, 100]),
                t(&[2], vec![0i64, -1]),
                t(&[2], vec![-2i64, 3]),
            ],
        )
        .unwrap();
        assert_eq!(out::<i32>(&o, 0), (vec![2, 2], vec![16, 19, 6, 9]));
    }

    #[test]
    fn tile_and_expand() {
        // np.tile([[1,2],[3,4]], (2,3))[1]
        let x = t(&[2, 2], vec![1u16, 2, 3, 4]);
        let o = run(
            &node("Tile", 2, 1, vec![]),
            13,
            &[x.clone(), t(&[2], vec![2i64, 3])],
        )
        .unwrap();
        let (s, v) = out::<u16>(&o, 0);
        assert_eq!(s, vec![4, 6]);
        assert_eq!(&v[6..12], &[3, 4, 3, 4, 3, 4]);
        // np.broadcast_to([[1],[2]], (2,2,3))
        let x = t(&[2, 1], vec![1u16, 2]);
        let o = run(
            &node("Expand", 2, 1, vec![]),
            13,
            &[x, t(&[3], vec![2i64, 1, 3])],
        )
        .unwrap();
        let (s, v) = out::<u16>(&o, 0);
        assert_eq!(s, vec![2, 2, 3]);
        assert_eq!(v, vec![1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2]);
    }
}
