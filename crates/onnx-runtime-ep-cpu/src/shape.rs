//! Shape arithmetic shared by kernels: axes, broadcasting, strided iteration.

use onnx_runtime_ep_api::EpError;

/// Resolves a possibly negative `axis` against `rank`; an error naming `node` if out of range.
pub fn normalize_axis(node: &str, axis: i64, rank: usize) -> Result<usize, EpError> {
    let r = rank as i64;
    let a = if axis < 0 { axis + r } else { axis };
    if a < 0 || a >= r.max(1) && !(r == 0 && a == 0) {
        return Err(EpError::InvalidInput {
            node: node.to_string(),
            message: format!(
                "axis {axis} is out of range for rank {rank}; use -{rank}..{}",
                rank.saturating_sub(1)
            ),
        });
    }
    Ok(a as usize)
}

/// Resolves axes, rejecting duplicates.
pub fn normalize_axes(node: &str, axes: &[i64], rank: usize) -> Result<Vec<usize>, EpError> {
    let mut out = Vec::with_capacity(axes.len());
    for &a in axes {
        let a = normalize_axis(node, a, rank)?;
        if out.contains(&a) {
            return Err(EpError::InvalidInput {
                node: node.to_string(),
                message: format!("axis {a} is repeated in {axes:?}"),
            });
        }
        out.push(a);
    }
    Ok(out)
}

/// The numpy-style broadcast of `shapes`, or an error naming the node and the shapes.
pub fn broadcast_shapes(node: &str, shapes: &[&[usize]]) -> Result<Vec<usize>, EpError> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for shape in shapes {
        let offset = rank - shape.len();
        for (i, &d) in shape.iter().enumerate() {
            let o = &mut out[offset + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return Err(EpError::InvalidInput {
                    node: node.to_string(),
                    message: format!("shapes {shapes:?} cannot be broadcast together"),
                });
            }
        }
    }
    Ok(out)
}

/// Row-major strides of `shape`.
pub fn contiguous_strides(shape: &[usize]) -> Vec<usize> {
    onnx_runtime_ir::compute_contiguous_strides(shape)
}

/// Strides that read a tensor of `shape` as if broadcast to `out_shape` (0 on broadcast axes).
pub fn broadcast_strides(shape: &[usize], out_shape: &[usize]) -> Vec<usize> {
    let strides = contiguous_strides(shape);
    let offset = out_shape.len() - shape.len();
    let mut out = vec![0; out_shape.len()];
    for i in 0..shape.len() {
        out[offset + i] = if shape[i] == 1 { 0 } else { strides[i] };
    }
    out
}

/// Calls `f(out_index, offsets)` for every element of `out_shape` in row-major order, where
/// `offsets[k]` is the element offset into input `k` described by `strides[k]`.
pub fn for_each_offset<const N: usize>(
    out_shape: &[usize],
    strides: [&[usize]; N],
    mut f: impl FnMut(usize, [usize; N]),
) {
    let total: usize = out_shape.iter().product();
    if total == 0 {
        return;
    }
    let rank = out_shape.len();
    let mut index = vec![0usize; rank];
    let mut offsets = [0usize; N];
    for linear in 0..total {
        f(linear, offsets);
        // Advance the multi-index and the offsets incrementally.
        let mut axis = rank;
        while axis > 0 {
            axis -= 1;
            index[axis] += 1;
            for k in 0..N {
                offsets[k] += strides[k][axis];
            }
            if index[axis] < out_shape[axis] {
                break;
            }
            for k in 0..N {
                offsets[k] -= strides[k][axis] * out_shape[axis];
            }
            index[axis] = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn broadcasting() {
        assert_eq!(broadcast_shapes("n", &[&[2, 1], &[3]]).unwrap(), vec![2, 3]);
        assert!(broadcast_shapes("n", &[&[2], &[3]]).is_err());
        assert_eq!(broadcast_strides(&[2, 1], &[2, 3]), vec![1, 0]);
        let mut seen = vec![];
        for_each_offset(&[2, 3], [&[1, 0], &[0, 1]], |i, [a, b]| {
            seen.push((i, a, b))
        });
        assert_eq!(seen[4], (4, 1, 1));
        assert_eq!(seen.len(), 6);
    }

    #[test]
    fn axes() {
        assert_eq!(normalize_axis("n", -1, 3).unwrap(), 2);
        assert!(normalize_axis("n", 3, 3).is_err());
        assert!(normalize_axes("n", &[0, -3], 3).is_err());
    }
}
