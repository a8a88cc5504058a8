//! MatMulInteger (opset 10): (A - a_zero_point) @ (B - b_zero_point) in int32, numpy matmul
//! semantics, uint8/int8 operands in any mix. Zero points are a scalar, one per row of A /
//! column of B (1-D), or N-D per batch and row ([.., M, 1]) / column ([.., 1, N]).
//! With a 2-D B (packed once at build when it is constant) and zero points that are scalars,
//! per row or per column, the product runs on the exact 8-bit GEMM
//! ([`crate::ops::nn::gemm::igemm`]); other forms (batched B, N-D zero points) on the f64 GEMM,
//! exact for 8-bit operands (|sums| < 2^53).

use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{invalid, unsupported};
use crate::ops::nn::gemm::igemm::{igemm, PackedB8, RowsA, Zero};
use crate::ops::nn::gemm::matmul::{matmul_float, plan};
use crate::shape::{broadcast_strides, for_each_offset};
use crate::{CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::sync::Arc;

const OP: &str = "MatMulInteger";

/// 8-bit integer values as f64 (`op`'s input `what`: uint8 or int8).
pub(crate) fn widen(node: &str, op: &str, t: &Tensor, what: &str) -> Result<Vec<f64>, EpError> {
    match t.dtype() {
        DataType::Uint8 => Ok(t.data::<u8>().iter().map(|&v| v as f64).collect()),
        DataType::Int8 => Ok(t.data::<i8>().iter().map(|&v| v as f64).collect()),
        other => Err(unsupported(
            node,
            op,
            other,
            &format!("uint8 or int8 {what}"),
        )),
    }
}

/// The zero point's shape aligned to `x` (same rank), checked against the forms the spec
/// allows. `row` says whether the zero point varies along rows (A) or columns (B).
fn aligned_zp_shape(
    node: &str,
    x: &[usize],
    zp: &[usize],
    row: bool,
    what: &str,
) -> Result<Vec<usize>, EpError> {
    let numel: usize = zp.iter().product();
    if numel == 1 {
        return Ok(vec![1; x.len()]);
    }
    let bad = || {
        let form = if row {
            "a scalar, [M] or [.., M, 1]"
        } else {
            "a scalar, [N] or [.., 1, N]"
        };
        invalid(
            node,
            format!("{what} zero point of shape {zp:?} does not fit input {x:?}; want {form}"),
        )
    };
    if x.len() < 2 {
        return Err(bad());
    }
    let r = x.len();
    let mut shape = vec![1; r];
    if zp.len() == 1 {
        // One value per row (M) of A, or per column (N) of B.
        let (axis, want) = if row {
            (r - 2, x[r - 2])
        } else {
            (r - 1, x[r - 1])
        };
        if zp[0] != want {
            return Err(bad());
        }
        shape[axis] = want;
        return Ok(shape);
    }
    if zp.len() != r {
        return Err(bad());
    }
    let reduced = if row { r - 1 } else { r - 2 };
    for (i, (&z, &d)) in zp.iter().zip(x).enumerate() {
        // Each dim is 1 or x's, and the reduced one (K) must be 1.
        let fits = z == 1 || (i != reduced && z == d);
        if !fits {
            return Err(bad());
        }
    }
    Ok(zp.to_vec())
}

/// `x - zp` with the zero point broadcast over x.
fn centered(
    node: &str,
    x: &Tensor,
    zp: Option<&Tensor>,
    row: bool,
    what: &str,
) -> Result<Vec<f64>, EpError> {
    let mut v = widen(node, OP, x, what)?;
    let Some(zp) = zp else { return Ok(v) };
    if zp.dtype() != x.dtype() {
        return Err(invalid(
            node,
            format!(
                "{what} zero point is {} but {what} is {}; they must match",
                zp.dtype(),
                x.dtype()
            ),
        ));
    }
    let z = widen(node, OP, zp, what)?;
    let shape = aligned_zp_shape(node, x.shape(), zp.shape(), row, what)?;
    if z.len() == 1 {
        v.iter_mut().for_each(|e| *e -= z[0]);
        return Ok(v);
    }
    let strides = broadcast_strides(&shape, x.shape());
    for_each_offset(x.shape(), [&strides], |i, [o]| v[i] -= z[o]);
    Ok(v)
}

/// (A - a_zp) @ (B - b_zp) as int32 (wrapping where the int32 accumulation overflows).
pub fn matmul_integer(
    node: &str,
    a: &Tensor,
    b: &Tensor,
    a_zp: Option<&Tensor>,
    b_zp: Option<&Tensor>,
) -> Result<Tensor, EpError> {
    let p = plan(node, a.shape(), b.shape(), false, false)?;
    let af = centered(node, a, a_zp, true, "A")?;
    let bf = centered(node, b, b_zp, false, "B")?;
    let out = matmul_float::<f64>(&p, &af, &bf, false, false, 1.0);
    Ok(Tensor::from_vec(
        p.out_shape,
        out.into_iter().map(|v| v as i64 as i32).collect(),
    ))
}

/// The zero point's values as i32 when it is a scalar or `len` values (1-D) of `x`'s type.
fn zp_values(zp: Option<&Tensor>, x: &Tensor, len: usize) -> Option<Vec<i32>> {
    let Some(z) = zp else {
        return Some(vec![0]);
    };
    if z.dtype() != x.dtype() || !(z.numel() == 1 || z.rank() == 1 && z.numel() == len) {
        return None;
    }
    Some(match z.dtype() {
        DataType::Uint8 => z.data::<u8>().iter().map(|&v| v as i32).collect(),
        _ => z.data::<i8>().iter().map(|&v| v as i32).collect(),
    })
}

fn is_8bit(t: &Tensor) -> bool {
    matches!(t.dtype(), DataType::Uint8 | DataType::Int8)
}

/// `b` [K, N] packed for the integer GEMM.
fn pack_b(b: &Tensor) -> PackedB8 {
    let (k, n) = (b.shape()[0], b.shape()[1]);
    PackedB8::new(b.bytes(), b.dtype() == DataType::Int8, k, n, n)
}

/// The product on the integer GEMM when B is 2-D and the zero points are scalars, per row
/// of A or per column of B; `None` for the other forms.
fn matmul_integer_fast(
    node: &str,
    a: &Tensor,
    b: &Tensor,
    packed: Option<&PackedB8>,
    a_zp: Option<&Tensor>,
    b_zp: Option<&Tensor>,
) -> Result<Option<Tensor>, EpError> {
    if b.rank() != 2 || a.rank() == 0 || !is_8bit(a) || !is_8bit(b) {
        return Ok(None);
    }
    let p = plan(node, a.shape(), b.shape(), false, false)?;
    let (m, k, n) = (p.m, p.k, p.n);
    let za = match zp_values(a_zp, a, m) {
        // Per-row values only where A has rows (rank >= 2).
        Some(z) if z.len() == 1 || a.rank() >= 2 => z,
        _ => return Ok(None),
    };
    let Some(zb) = zp_values(b_zp, b, n) else {
        return Ok(None);
    };
    let rows = a.numel() / k.max(1);
    let ra = RowsA::new(a.bytes(), a.dtype() == DataType::Int8, rows, k, k);
    let own;
    let pb = match packed {
        Some(pb) => pb,
        None => {
            own = pack_b(b);
            &own
        }
    };
    // Per-row zero points repeat over A's batch.
    let za_rows: Vec<i32>;
    let za = if za.len() == 1 {
        Zero::All(za[0])
    } else {
        za_rows = (0..rows).map(|i| za[i % m]).collect();
        Zero::Each(&za_rows)
    };
    let zb = if zb.len() == 1 {
        Zero::All(zb[0])
    } else {
        Zero::Each(&zb)
    };
    let mut out = vec![0i32; rows * n];
    igemm(&ra, za, pb, zb, &mut out, n);
    Ok(Some(Tensor::from_vec(p.out_shape, out)))
}

pub(crate) fn build_matmul_integer(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    // A constant 2-D B is packed once here.
    let packed: Option<Arc<PackedB8>> = ctx
        .constant(1)
        .and_then(Value::as_tensor)
        .filter(|b| b.rank() == 2 && is_8bit(b))
        .map(|b| Arc::new(pack_b(b)));
    Ok(kernel_fn(move |inputs| {
        let a = tensor_input(&node, inputs, 0)?;
        let b = tensor_input(&node, inputs, 1)?;
        let a_zp = optional_tensor_input(&node, inputs, 2)?;
        let b_zp = optional_tensor_input(&node, inputs, 3)?;
        let pb = packed
            .as_deref()
            .filter(|pb| [pb.k, pb.n] == b.shape()[..] && b.rank() == 2);
        if let Some(t) = matmul_integer_fast(&node, a, b, pb, a_zp, b_zp)? {
            return Ok(vec![Value::Tensor(t)]);
        }
        Ok(vec![Value::Tensor(matmul_integer(
            &node, a, b, a_zp, b_zp,
        )?)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", OP, 10, build_matmul_integer);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;

    /// Float64 reference: [batch, m, k] @ [batch, k, n] with explicit zero points per element.
    fn reference(a: &[f64], b: &[f64], batch: usize, m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0.0; batch * m * n];
        for s in 0..batch {
            for i in 0..m {
                for j in 0..n {
                    out[(s * m + i) * n + j] = (0..k)
                        .map(|p| a[(s * m + i) * k + p] * b[(s * k + p) * n + j])
                        .sum();
                }
            }
        }
        out
    }

    fn ints(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
        rand(n, seed, lo, hi).iter().map(|v| v.floor()).collect()
    }

    #[test]
    fn batched_zero_points_per_row_and_column() {
        // A [2, 3, 4] uint8 with zp [2, 3, 1]; B [2, 4, 5] int8 with zp [2, 1, 5].
        let (s, m, k, n) = (2, 3, 4, 5);
        let a = ints(s * m * k, 11, 0.0, 256.0);
        let b = ints(s * k * n, 12, -128.0, 128.0);
        let azp = ints(s * m, 13, 0.0, 256.0);
        let bzp = ints(s * n, 14, -128.0, 128.0);
        let node = node(OP, 4, 1, vec![]);
        let out = run(
            build_matmul_integer,
            &node,
            10,
            &[
                Some(Tensor::from_vec(
                    vec![s, m, k],
                    a.iter().map(|&v| v as u8).collect(),
                )),
                Some(Tensor::from_vec(
                    vec![s, k, n],
                    b.iter().map(|&v| v as i8).collect(),
                )),
                Some(Tensor::from_vec(
                    vec![s, m, 1],
                    azp.iter().map(|&v| v as u8).collect(),
                )),
                Some(Tensor::from_vec(
                    vec![s, 1, n],
                    bzp.iter().map(|&v| v as i8).collect(),
                )),
            ],
        )
        .unwrap();
        let ac: Vec<f64> = a.iter().enumerate().map(|(i, &v)| v - azp[i / k]).collect();
        let bc: Vec<f64> = b
            .iter()
            .enumerate()
            .map(|(i, &v)| v - bzp[(i / (k * n)) * n + i % n])
            .collect();
        let want = reference(&ac, &bc, s, m, k, n);
        let got: Vec<f64> = out[0].data::<i32>().iter().map(|&v| v as f64).collect();
        assert_eq!(out[0].shape(), &[s, m, n]);
        assert_eq!(got, want);
    }

    #[test]
    fn rejects_misshapen_zero_points_and_types() {
        let node = node(OP, 4, 1, vec![]);
        let a = Tensor::from_vec(vec![2, 3], vec![1u8; 6]);
        let b = Tensor::from_vec(vec![3, 2], vec![1u8; 6]);
        let bad_zp = Tensor::from_vec(vec![3], vec![0u8; 3]);
        assert!(run(
            build_matmul_integer,
            &node,
            10,
            &[Some(a.clone()), Some(b.clone()), Some(bad_zp), None]
        )
        .is_err());
        let wrong_type = Tensor::scalar(0i8);
        assert!(run(
            build_matmul_integer,
            &node,
            10,
            &[Some(a.clone()), Some(b), Some(wrong_type), None]
        )
        .is_err());
        let floats = Tensor::from_vec(vec![3, 2], vec![1.0f32; 6]);
        assert!(run(build_matmul_integer, &node, 10, &[Some(a), Some(floats)]).is_err());
    }
}
