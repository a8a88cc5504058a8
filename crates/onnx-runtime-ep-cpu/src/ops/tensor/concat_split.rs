//! Joining and cutting along one axis: Concat, Split (and the helpers the sequence ops share).

use super::common::{
    invalid, new_out, opt_ints_input, repack, unpacked, unsupported, with_elem, Elem,
};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::shape::normalize_axis;
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;

/// Concatenates `parts` along `axis` (already normalized against their common rank).
pub fn concat_tensors(node: &str, parts: &[&Tensor], axis: usize) -> Result<Tensor, EpError> {
    let first = parts
        .first()
        .ok_or_else(|| invalid(node, "Concat needs at least one input"))?;
    let dtype = first.dtype();
    let rank = first.rank();
    let mut out_shape = first.shape().to_vec();
    out_shape[axis] = 0;
    for p in parts {
        if p.dtype() != dtype {
            return Err(invalid(
                node,
                format!(
                    "inputs mix {dtype} and {}; cast them to one type",
                    p.dtype()
                ),
            ));
        }
        let ok =
            p.rank() == rank && (0..rank).all(|a| a == axis || p.shape()[a] == first.shape()[a]);
        if !ok {
            return Err(invalid(
                node,
                format!(
                    "shapes {:?} and {:?} differ outside axis {axis}",
                    first.shape(),
                    p.shape()
                ),
            ));
        }
        out_shape[axis] += p.shape()[axis];
    }
    let outer: usize = out_shape[..axis].iter().product();
    let inner: usize = out_shape[axis + 1..].iter().product();
    if let Some(t) = concat_whole_bytes(parts, axis, outer, inner, &out_shape) {
        return Ok(t);
    }
    let out_row = out_shape[axis] * inner;
    let unpacked: Vec<_> = parts.iter().map(|p| unpacked(p)).collect();
    let mut out = new_out(dtype, out_shape);
    with_elem!(unpacked[0].dtype(), T => {
        let dst = T::items_mut(&mut out);
        let mut col = 0;
        for p in &unpacked {
            let src = T::items(p);
            let len = p.shape()[axis] * inner;
            if len > 0 {
                for o in 0..outer {
                    dst[o * out_row + col..o * out_row + col + len]
                        .clone_from_slice(&src[o * len..(o + 1) * len]);
                }
            }
            col += len;
        }
    }, return Err(unsupported(node, "Concat", dtype, "it has no element storage")));
    Ok(repack(out, dtype))
}

/// Output bytes from which Concat copies in parallel, and the largest piece one task copies.
const PARALLEL_BYTES: usize = 1 << 18;
const PIECE_BYTES: usize = 1 << 16;

/// [`concat_tensors`] for element types of whole bytes: each output row appended from the
/// parts' contiguous blocks into uninitialised storage (no zero-fill first), large outputs
/// in pieces on several threads. None for strings and sub-byte types.
fn concat_whole_bytes(
    parts: &[&Tensor],
    axis: usize,
    outer: usize,
    inner: usize,
    out_shape: &[usize],
) -> Option<Tensor> {
    let dtype = parts[0].dtype();
    Some(crate::dispatch_width!(dtype, T => {
        let total = outer * out_shape[axis] * inner;
        // The source blocks in output order: they tile the output exactly.
        let blocks = (0..outer).flat_map(|o| {
            parts.iter().map(move |p| {
                let len = p.shape()[axis] * inner;
                &p.data::<T>()[o * len..(o + 1) * len]
            })
        });
        let mut v: Vec<T> = Vec::with_capacity(total);
        let size = std::mem::size_of::<T>().max(1);
        if total * size >= PARALLEL_BYTES && rayon::current_num_threads() > 1 {
            use rayon::prelude::*;
            let piece = (PIECE_BYTES / size).max(1);
            let mut rest = &mut v.spare_capacity_mut()[..total];
            let mut jobs = Vec::new();
            for src in blocks.flat_map(|b| b.chunks(piece)) {
                let (dst, tail) = rest.split_at_mut(src.len());
                jobs.push((dst, src));
                rest = tail;
            }
            jobs.into_par_iter().for_each(|(dst, src)| {
                for (d, &s) in dst.iter_mut().zip(src) {
                    d.write(s);
                }
            });
            // SAFETY: the jobs' destinations tile the first `total` slots (the blocks' lengths
            // sum to `total`) and each was written in full above.
            unsafe { v.set_len(total) };
        } else {
            for b in blocks {
                v.extend_from_slice(b);
            }
        }
        Tensor::from_vec(out_shape.to_vec(), v).with_dtype(dtype)
    }, _ => return None))
}

/// Cuts `x` along `axis` into pieces of `sizes` (which sum to the axis length).
pub fn split_tensor(
    node: &str,
    x: &Tensor,
    axis: usize,
    sizes: &[usize],
) -> Result<Vec<Tensor>, EpError> {
    let dim = x.shape()[axis];
    if sizes.iter().sum::<usize>() != dim {
        return Err(invalid(
            node,
            format!("split sizes {sizes:?} do not sum to the axis length {dim}"),
        ));
    }
    let outer: usize = x.shape()[..axis].iter().product();
    let inner: usize = x.shape()[axis + 1..].iter().product();
    let u = unpacked(x);
    let mut outs = Vec::with_capacity(sizes.len());
    let mut start = 0;
    for &s in sizes {
        let mut shape = x.shape().to_vec();
        shape[axis] = s;
        let mut out = new_out(x.dtype(), shape);
        with_elem!(u.dtype(), T => {
            let src = T::items(&u);
            let dst = T::items_mut(&mut out);
            let len = s * inner;
            if len > 0 {
                for o in 0..outer {
                    let from = o * dim * inner + start * inner;
                    dst[o * len..(o + 1) * len].clone_from_slice(&src[from..from + len]);
                }
            }
        }, return Err(unsupported(node, "Split", x.dtype(), "it has no element storage")));
        outs.push(repack(out, x.dtype()));
        start += s;
    }
    Ok(outs)
}

fn build_concat(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let axis = match attrs::opt_int(ctx.node, "axis")? {
        Some(a) => a,
        None if ctx.opset < 4 => 1,
        None => {
            return Err(EpError::invalid_attribute(
                ctx.node,
                "axis",
                "is required from opset 4 on",
            ))
        }
    };
    Ok(kernel_fn(move |inputs| {
        let parts = (0..inputs.len())
            .map(|i| tensor_input(&node, inputs, i))
            .collect::<Result<Vec<_>, _>>()?;
        let rank = parts.first().map_or(0, |p| p.rank());
        if rank == 0 {
            return Err(invalid(&node, "Concat inputs must have rank 1 or more"));
        }
        let a = normalize_axis(&node, axis, rank)?;
        Ok(vec![Value::Tensor(concat_tensors(&node, &parts, a)?)])
    }))
}

/// Sizes of `n` near-equal pieces of `dim` (ceil division, the last one smaller).
pub fn even_sizes(
    node: &str,
    dim: usize,
    n: usize,
    uneven_ok: bool,
) -> Result<Vec<usize>, EpError> {
    if n == 0 {
        return Err(invalid(node, "Split needs at least one output"));
    }
    if dim.is_multiple_of(n) {
        return Ok(vec![dim / n; n]);
    }
    if !uneven_ok {
        return Err(invalid(
            node,
            format!("axis length {dim} cannot be split evenly into {n} outputs; give 'split'"),
        ));
    }
    let chunk = dim.div_ceil(n);
    Ok((0..n)
        .map(|i| chunk.min(dim.saturating_sub(i * chunk)))
        .collect())
}

fn build_split(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let axis = attrs::int(ctx.node, "axis", 0)?;
    let attr_split = if ctx.opset < 13 {
        attrs::opt_ints(ctx.node, "split")?
    } else {
        None
    };
    let num_outputs = if ctx.opset >= 18 {
        attrs::opt_int(ctx.node, "num_outputs")?
    } else {
        None
    };
    let split_input = ctx.opset >= 13 || ctx.opset < 2;
    let n_out = ctx.node.outputs.len();
    if let Some(n) = num_outputs {
        if n as usize != n_out {
            return Err(EpError::invalid_attribute(
                ctx.node,
                "num_outputs",
                format!("is {n} but the node has {n_out} outputs"),
            ));
        }
    }
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let a = normalize_axis(&node, axis, x.rank())?;
        let dim = x.shape()[a];
        let given = if split_input {
            opt_ints_input(&node, inputs, 1, "split")?.or_else(|| attr_split.clone())
        } else {
            attr_split.clone()
        };
        let sizes = match given {
            Some(s) => {
                if s.len() != n_out {
                    return Err(invalid(
                        &node,
                        format!("split {s:?} has {} entries for {n_out} outputs", s.len()),
                    ));
                }
                s.iter()
                    .map(|&v| super::common::to_dim(&node, v, "split sizes"))
                    .collect::<Result<Vec<_>, _>>()?
            }
            None => even_sizes(&node, dim, n_out, num_outputs.is_some())?,
        };
        Ok(split_tensor(&node, x, a, &sizes)?
            .into_iter()
            .map(Value::Tensor)
            .collect())
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 4, 11, 13] {
        r.register("", "Concat", since, build_concat);
    }
    for since in [1, 2, 11, 13, 18] {
        r.register("", "Split", since, build_split);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use crate::{Tensor, Value};
    use onnx_runtime_ir::Attribute;

    #[test]
    fn concat_axis_and_strings() {
        // np.concatenate([a, b], axis=-1) for a=[[1,2],[3,4]], b=[[5],[6]]
        let n = node("Concat", 2, 1, vec![("axis", Attribute::Int(-1))]);
        let o = run(
            &n,
            13,
            &[
                t(&[2, 2], vec![1.5f64, 2., 3., 4.]),
                t(&[2, 1], vec![5.0f64, 6.]),
            ],
        )
        .unwrap();
        assert_eq!(
            out::<f64>(&o, 0),
            (vec![2, 3], vec![1.5, 2., 5., 3., 4., 6.])
        );
        let s = |v: &[&str]| {
            Some(Value::Tensor(Tensor::from_strings(
                vec![v.len()],
                v.iter().map(|x| x.to_string()).collect(),
            )))
        };
        let n = node("Concat", 2, 1, vec![("axis", Attribute::Int(0))]);
        let o = run(&n, 13, &[s(&["a"]), s(&["b", "c"])]).unwrap();
        assert_eq!(o[0].as_tensor().unwrap().strings(), &["a", "b", "c"]);
        assert!(run(&n, 13, &[t(&[2], vec![1i32, 2]), t(&[1, 1], vec![1i32])]).is_err());
    }

    #[test]
    fn large_concat_copies_in_pieces() {
        // Big enough for the parallel path: 3 outer rows, parts of 70001 and 40000 values
        // per row (pieces do not divide them), against an index-by-index expectation.
        let (outer, a_len, b_len) = (3usize, 70_001usize, 40_000usize);
        let a: Vec<f32> = (0..outer * a_len).map(|i| i as f32).collect();
        let b: Vec<f32> = (0..outer * b_len).map(|i| -(i as f32)).collect();
        let n = node("Concat", 2, 1, vec![("axis", Attribute::Int(1))]);
        let o = run(
            &n,
            13,
            &[t(&[outer, a_len], a.clone()), t(&[outer, b_len], b.clone())],
        )
        .unwrap();
        let (shape, got) = out::<f32>(&o, 0);
        assert_eq!(shape, vec![outer, a_len + b_len]);
        let mut want = Vec::with_capacity(got.len());
        for r in 0..outer {
            want.extend_from_slice(&a[r * a_len..(r + 1) * a_len]);
            want.extend_from_slice(&b[r * b_len..(r + 1) * b_len]);
        }
        assert!(
            got == want,
            "parallel concat differs from the row-by-row copy"
        );
    }

    #[test]
    fn split_forms() {
        let x = t(&[7], (0..7i64).collect());
        let n = node("Split", 1, 4, vec![("num_outputs", Attribute::Int(4))]);
        let o = run(&n, 18, std::slice::from_ref(&x)).unwrap();
        let lens: Vec<usize> = o.iter().map(|v| v.as_tensor().unwrap().numel()).collect();
        assert_eq!(lens, vec![2, 2, 2, 1]);
        let n = node("Split", 2, 2, vec![]);
        let o = run(&n, 13, &[x.clone(), t(&[2], vec![3i64, 4])]).unwrap();
        assert_eq!(out::<i64>(&o, 1).1, vec![3, 4, 5, 6]);
        let n = node("Split", 1, 2, vec![("split", Attribute::Ints(vec![5, 2]))]);
        let o = run(&n, 11, std::slice::from_ref(&x)).unwrap();
        assert_eq!(out::<i64>(&o, 1).1, vec![5, 6]);
        assert!(run(&node("Split", 1, 2, vec![]), 13, &[x]).is_err());
    }
}
