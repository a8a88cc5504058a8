//! Slicing one index out of an axis and stacking tensors along a new axis: what Scan and
//! Loop need to iterate over and collect tensors of any element type.

use onnx_runtime_ep_cpu::Tensor;
use onnx_runtime_ir::DataType;

/// Bytes per element, or an error for types packed several to a byte.
fn width(dtype: DataType) -> Result<usize, String> {
    if dtype == DataType::String {
        return Ok(1);
    }
    dtype.element_size().ok_or_else(|| {
        format!("{dtype} tensors cannot be sliced per element; their elements are packed")
    })
}

/// `t` with `axis` removed, keeping index `index` along it.
pub(crate) fn take(t: &Tensor, axis: usize, index: usize) -> Result<Tensor, String> {
    let shape = t.shape();
    if axis >= shape.len() || index >= shape[axis] {
        return Err(format!(
            "index {index} along axis {axis} is outside shape {shape:?}"
        ));
    }
    let outer: usize = shape[..axis].iter().product();
    let n = shape[axis];
    let inner: usize = shape[axis + 1..].iter().product();
    let mut out_shape = shape.to_vec();
    out_shape.remove(axis);
    let mut out = Tensor::zeros(t.dtype(), out_shape);
    if t.dtype() == DataType::String {
        let src = t.strings();
        let dst = out.strings_mut();
        for o in 0..outer {
            let from = (o * n + index) * inner;
            dst[o * inner..(o + 1) * inner].clone_from_slice(&src[from..from + inner]);
        }
        return Ok(out);
    }
    let chunk = inner * width(t.dtype())?;
    let src = t.bytes();
    let dst = out.bytes_mut();
    for o in 0..outer {
        let from = (o * n + index) * chunk;
        dst[o * chunk..(o + 1) * chunk].copy_from_slice(&src[from..from + chunk]);
    }
    Ok(out)
}

/// Stacks `items` (same dtype and shape) along a new axis `axis` of the result.
pub(crate) fn stack(items: &[Tensor], axis: usize) -> Result<Tensor, String> {
    let first = items
        .first()
        .ok_or_else(|| "nothing to stack".to_string())?;
    for (i, t) in items.iter().enumerate() {
        if t.shape() != first.shape() || t.dtype() != first.dtype() {
            return Err(format!(
                "iteration {i} produced {} {:?} but iteration 0 produced {} {:?}; every iteration must produce the same type and shape",
                t.dtype(),
                t.shape(),
                first.dtype(),
                first.shape()
            ));
        }
    }
    let shape = first.shape();
    if axis > shape.len() {
        return Err(format!("axis {axis} is outside rank {}", shape.len() + 1));
    }
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis..].iter().product();
    let mut out_shape = shape.to_vec();
    out_shape.insert(axis, items.len());
    let mut out = Tensor::zeros(first.dtype(), out_shape);
    let k = items.len();
    if first.dtype() == DataType::String {
        let dst = out.strings_mut();
        for (j, t) in items.iter().enumerate() {
            let src = t.strings();
            for o in 0..outer {
                let to = (o * k + j) * inner;
                dst[to..to + inner].clone_from_slice(&src[o * inner..(o + 1) * inner]);
            }
        }
        return Ok(out);
    }
    let chunk = inner * width(first.dtype())?;
    let dst = out.bytes_mut();
    for (j, t) in items.iter().enumerate() {
        let src = t.bytes();
        for o in 0..outer {
            let to = (o * k + j) * chunk;
            dst[to..to + chunk].copy_from_slice(&src[o * chunk..(o + 1) * chunk]);
        }
    }
    Ok(out)
}

/// A normalised axis for a tensor of `rank` (negative counts from the end).
pub(crate) fn normalize_axis(axis: i64, rank: usize) -> Result<usize, String> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r {
        return Err(format!("axis {axis} is outside rank {rank}"));
    }
    Ok(a as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn take_and_stack_round_trip_on_every_axis() {
        let data: Vec<i32> = (0..24).collect();
        let t = Tensor::from_vec(vec![2, 3, 4], data.clone());
        for axis in 0..3 {
            let n = t.shape()[axis];
            let parts: Vec<Tensor> = (0..n).map(|i| take(&t, axis, i).unwrap()).collect();
            let back = stack(&parts, axis).unwrap();
            assert_eq!(back.shape(), t.shape());
            assert_eq!(back.data::<i32>(), &data[..]);
        }
        // Hand-checked: element [i, 1, k] of the 2x3x4 iota is 12 i + 4 + k.
        let mid = take(&t, 1, 1).unwrap();
        assert_eq!(mid.data::<i32>(), &[4, 5, 6, 7, 16, 17, 18, 19]);
    }

    #[test]
    fn strings_and_errors() {
        let t = Tensor::from_strings(
            vec![2, 2],
            vec!["a".into(), "b".into(), "c".into(), "d".into()],
        );
        let col = take(&t, 1, 1).unwrap();
        assert_eq!(col.strings(), &["b".to_string(), "d".to_string()]);
        assert!(take(&t, 1, 2).is_err());
        let a = Tensor::from_vec(vec![2], vec![1f32, 2.]);
        let b = Tensor::from_vec(vec![3], vec![1f32, 2., 3.]);
        assert!(stack(&[a, b], 0)
            .unwrap_err()
            .contains("same type and shape"));
        assert_eq!(normalize_axis(-1, 3), Ok(2));
        assert!(normalize_axis(3, 3).is_err());
    }
}
