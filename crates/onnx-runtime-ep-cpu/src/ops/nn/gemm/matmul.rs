//! MatMul (numpy semantics: 1-D promotion, broadcast batch dims) and
//! com.microsoft FusedMatMul. Float products run on the SIMD GEMM; f16/bf16 in f32.

use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid, unsupported, Real};
use crate::ops::nn::gemm::sgemm::{gemm_packed_b, PackedB};
use crate::ops::nn::scratch::build_vec;
use crate::shape::broadcast_shapes;
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

/// The shapes of a batched product after 1-D promotion.
pub struct MatmulPlan {
    pub batch: Vec<usize>,
    pub m: usize,
    pub k: usize,
    pub n: usize,
    /// The output shape with promoted axes removed again.
    pub out_shape: Vec<usize>,
    /// Per output batch index: the batch offsets into a and b (in matrices).
    pub a_batch_strides: Vec<usize>,
    pub b_batch_strides: Vec<usize>,
}

/// Plans `a @ b` (with optional transposes of the last two axes of each operand).
pub fn plan(
    node: &str,
    a: &[usize],
    b: &[usize],
    trans_a: bool,
    trans_b: bool,
) -> Result<MatmulPlan, EpError> {
    if a.is_empty() || b.is_empty() {
        return Err(invalid(node, "MatMul inputs must have rank >= 1"));
    }
    let a_vec = a.len() == 1;
    let b_vec = b.len() == 1;
    let a2: Vec<usize> = if a_vec { vec![1, a[0]] } else { a.to_vec() };
    let b2: Vec<usize> = if b_vec { vec![b[0], 1] } else { b.to_vec() };
    let (ar, br) = (a2.len(), b2.len());
    let (m, ka) = if trans_a {
        (a2[ar - 1], a2[ar - 2])
    } else {
        (a2[ar - 2], a2[ar - 1])
    };
    let (kb, n) = if trans_b {
        (b2[br - 1], b2[br - 2])
    } else {
        (b2[br - 2], b2[br - 1])
    };
    if ka != kb {
        return Err(invalid(
            node,
            format!("inner dimensions differ: {a:?} @ {b:?} (K {ka} vs {kb})"),
        ));
    }
    let batch = broadcast_shapes(node, &[&a2[..ar - 2], &b2[..br - 2]])?;
    let a_batch_strides = batch_strides(&a2[..ar - 2], &batch);
    let b_batch_strides = batch_strides(&b2[..br - 2], &batch);
    let mut out_shape = batch.clone();
    if !a_vec {
        out_shape.push(m);
    }
    if !b_vec {
        out_shape.push(n);
    }
    Ok(MatmulPlan {
        batch,
        m,
        k: ka,
        n,
        out_shape,
        a_batch_strides,
        b_batch_strides,
    })
}

/// Matrix-index strides of a batch shape broadcast to `out`.
fn batch_strides(shape: &[usize], out: &[usize]) -> Vec<usize> {
    crate::shape::broadcast_strides(shape, out)
}

impl MatmulPlan {
    pub fn batch_count(&self) -> usize {
        self.batch.iter().product()
    }

    /// (a matrix index, b matrix index) of output batch `i`.
    pub fn batch_offsets(&self, i: usize) -> (usize, usize) {
        let mut rem = i;
        let (mut oa, mut ob) = (0, 0);
        for d in (0..self.batch.len()).rev() {
            let idx = rem % self.batch[d];
            rem /= self.batch[d];
            oa += idx * self.a_batch_strides[d];
            ob += idx * self.b_batch_strides[d];
        }
        (oa, ob)
    }

    /// Whether every output batch reads the same b matrix (weights), with a's batches
    /// contiguous and in order, so the whole product is one tall GEMM.
    fn folds_batch(&self, a_numel_matrices: usize) -> bool {
        self.b_batch_strides.iter().all(|&s| s == 0) && a_numel_matrices == self.batch_count()
    }
}

/// The float product `alpha * op(a) @ op(b)` over planned batches.
pub fn matmul_float<T: Real>(
    p: &MatmulPlan,
    a: &[T],
    b: &[T],
    trans_a: bool,
    trans_b: bool,
    alpha: T,
) -> Vec<T> {
    let (m, n, k) = (p.m, p.n, p.k);
    let batches = p.batch_count();
    let mut out = vec![T::zero(); batches * m * n];
    let (a_rs, a_cs) = if trans_a { (1, m) } else { (k, 1) };
    let (b_rs, b_cs) = if trans_b { (1, k) } else { (n, 1) };
    if !trans_a && p.folds_batch(a.len() / (m * k).max(1)) {
        common::gemm(
            batches * m,
            n,
            k,
            a,
            a_rs,
            a_cs,
            b,
            b_rs,
            b_cs,
            &mut out,
            n,
            alpha,
            T::zero(),
        );
        return out;
    }
    for i in 0..batches {
        let (ia, ib) = p.batch_offsets(i);
        common::gemm(
            m,
            n,
            k,
            &a[ia * m * k..(ia + 1) * m * k],
            a_rs,
            a_cs,
            &b[ib * k * n..(ib + 1) * k * n],
            b_rs,
            b_cs,
            &mut out[i * m * n..(i + 1) * m * n],
            n,
            alpha,
            T::zero(),
        );
    }
    out
}

/// Integer products with wrapping arithmetic (int32/int64/uint32/uint64 MatMul).
fn matmul_int<T>(p: &MatmulPlan, a: &[T], b: &[T]) -> Vec<T>
where
    T: Copy + num_traits::WrappingAdd + num_traits::WrappingMul + num_traits::Zero,
{
    let (m, n, k) = (p.m, p.n, p.k);
    let mut out = vec![T::zero(); p.batch_count() * m * n];
    for (bi, o) in out.chunks_mut((m * n).max(1)).enumerate() {
        let (ia, ib) = p.batch_offsets(bi);
        let a = &a[ia * m * k..];
        let b = &b[ib * k * n..];
        for i in 0..m {
            for kk in 0..k {
                let av = a[i * k + kk];
                for j in 0..n {
                    o[i * n + j] = o[i * n + j].wrapping_add(&av.wrapping_mul(&b[kk * n + j]));
                }
            }
        }
    }
    out
}

/// `alpha * op(a) @ op(b)` for any float or integer type MatMul allows.
pub fn matmul_tensor(
    node: &str,
    op: &str,
    a: &Tensor,
    b: &Tensor,
    trans_a: bool,
    trans_b: bool,
    alpha: f32,
) -> Result<Tensor, EpError> {
    if a.dtype() != b.dtype() {
        return Err(invalid(
            node,
            format!(
                "A is {} but B is {}; both must have one type",
                a.dtype(),
                b.dtype()
            ),
        ));
    }
    let p = plan(node, a.shape(), b.shape(), trans_a, trans_b)?;
    let dtype = a.dtype();
    match dtype {
        DataType::Float64 => {
            let out = matmul_float::<f64>(&p, a.data(), b.data(), trans_a, trans_b, alpha as f64);
            Ok(Tensor::from_vec(p.out_shape, out))
        }
        DataType::Float32 | DataType::Float16 | DataType::BFloat16 => {
            let (ua, ub) = (common::upcast(a), common::upcast(b));
            let out = matmul_float::<f32>(&p, ua.data(), ub.data(), trans_a, trans_b, alpha);
            Ok(common::tensor_from_f32(dtype, p.out_shape, out))
        }
        DataType::Int32 | DataType::Int64 | DataType::Uint32 | DataType::Uint64
            if !trans_a && !trans_b && alpha == 1.0 =>
        {
            crate::dispatch_int!(dtype, T => {
                let out = matmul_int::<T>(&p, a.data(), b.data());
                Ok(Tensor::from_vec(p.out_shape, out))
            }, other => Err(unsupported(node, op, other, "float types, int32, int64, uint32, uint64")))
        }
        other => Err(unsupported(
            node,
            op,
            other,
            "float, double, float16, bfloat16, int32, int64, uint32 or uint64",
        )),
    }
}

/// A constant 2-D float B (weights), packed into GEMM panels once when the kernel is built.
pub struct PackedWeights {
    shape: Vec<usize>,
    dtype: DataType,
    packed: PackedB,
}

impl PackedWeights {
    /// Packs input `index` of the node when it is a constant 2-D f32, f16 or bf16 tensor
    /// (`trans`: the product uses its transpose).
    pub fn from_constant(ctx: &BuildContext<'_>, index: usize, trans: bool) -> Option<Self> {
        let Some(Value::Tensor(t)) = ctx.constant(index) else {
            return None;
        };
        let float = matches!(
            t.dtype(),
            DataType::Float32 | DataType::Float16 | DataType::BFloat16
        );
        if !float || t.rank() != 2 {
            return None;
        }
        let (r, c) = (t.shape()[0], t.shape()[1]);
        let (k, n, rs, cs) = if trans { (c, r, 1, c) } else { (r, c, c, 1) };
        let ub = common::upcast(t);
        Some(PackedWeights {
            shape: t.shape().to_vec(),
            dtype: t.dtype(),
            packed: PackedB::new(ub.data(), k, n, rs, cs),
        })
    }

    /// `alpha * a @ B` on the packed panels when `b` is the tensor these were packed from
    /// (same shape and type) and `a` is not transposed; None when the general path applies.
    pub fn matmul(
        &self,
        node: &str,
        a: &Tensor,
        b: &Tensor,
        alpha: f32,
    ) -> Option<Result<Tensor, EpError>> {
        let finish = |_: usize, _: usize, row: &mut [f32]| {
            if alpha != 1.0 {
                row.iter_mut().for_each(|v| *v *= alpha);
            }
        };
        self.matmul_with(node, a, b, &finish)
    }

    /// `a @ B` as [`PackedWeights::matmul`], each finished row segment of the flattened
    /// `[rows, n]` product passed to `finish(row, column0, segment)` while it is in cache.
    pub fn matmul_with(
        &self,
        node: &str,
        a: &Tensor,
        b: &Tensor,
        finish: &(dyn Fn(usize, usize, &mut [f32]) + Sync),
    ) -> Option<Result<Tensor, EpError>> {
        if a.dtype() != self.dtype || b.dtype() != self.dtype || b.shape() != self.shape {
            return None;
        }
        let p = match plan(
            node,
            a.shape(),
            &[self.packed.k, self.packed.n],
            false,
            false,
        ) {
            Ok(p) => p,
            Err(e) => return Some(Err(e)),
        };
        let rows = p.batch_count() * p.m;
        let ua = common::upcast(a);
        // SAFETY: gemm_packed_b writes every element of the rows x n output.
        let out = unsafe {
            build_vec(rows * self.packed.n, |c| {
                gemm_packed_b(rows, ua.data(), self.packed.k, 1, &self.packed, c, finish)
            })
        };
        Some(Ok(common::tensor_from_f32(self.dtype, p.out_shape, out)))
    }
}

impl PackedWeights {
    /// `op(a) @ B`, each finished row segment passed to `finish(row, column0, segment)`,
    /// for a 2-D `a` (`[m, k]`, or `[k, m]` with `trans_a`) when `b` is the tensor these
    /// were packed from (same shape and type) and `a` has its type and depth; else None.
    /// Returns the row-major `m x n` product and `m`.
    pub fn product_2d(
        &self,
        a: &Tensor,
        b: &Tensor,
        trans_a: bool,
        finish: &(dyn Fn(usize, usize, &mut [f32]) + Sync),
    ) -> Option<(Vec<f32>, usize)> {
        if a.dtype() != self.dtype || b.dtype() != self.dtype || b.shape() != self.shape {
            return None;
        }
        let &[r, c] = a.shape() else { return None };
        let (m, k, rs, cs) = if trans_a { (c, r, 1, c) } else { (r, c, c, 1) };
        if k != self.packed.k {
            return None;
        }
        let ua = common::upcast(a);
        // SAFETY: gemm_packed_b writes every element of the m x n output.
        let out = unsafe {
            build_vec(m * self.packed.n, |out| {
                gemm_packed_b(m, ua.data(), rs, cs, &self.packed, out, finish)
            })
        };
        Some((out, m))
    }
}

fn build_matmul(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let weights = PackedWeights::from_constant(ctx, 1, false);
    Ok(kernel_fn(move |inputs| {
        let a = tensor_input(&node, inputs, 0)?;
        let b = tensor_input(&node, inputs, 1)?;
        if let Some(out) = weights.as_ref().and_then(|w| w.matmul(&node, a, b, 1.0)) {
            return Ok(vec![Value::Tensor(out?)]);
        }
        Ok(vec![Value::Tensor(matmul_tensor(
            &node, "MatMul", a, b, false, false, 1.0,
        )?)])
    }))
}

fn build_fused_matmul(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let alpha = attrs::float(n, "alpha", 1.0)?;
    let ta = attrs::int(n, "transA", 0)? != 0;
    let tb = attrs::int(n, "transB", 0)? != 0;
    for name in ["transBatchA", "transBatchB"] {
        if attrs::int(n, name, 0)? != 0 {
            return Err(common::bad_attr(
                n,
                name,
                "batch transposition is not supported; transpose the input with a Transpose node",
            ));
        }
    }
    let weights = PackedWeights::from_constant(ctx, 1, tb);
    Ok(kernel_fn(move |inputs| {
        let a = tensor_input(&node, inputs, 0)?;
        let b = tensor_input(&node, inputs, 1)?;
        // Transposes apply to rank >= 2 operands only.
        let ta = ta && a.rank() >= 2;
        let tb = tb && b.rank() >= 2;
        if !ta {
            if let Some(out) = weights.as_ref().and_then(|w| w.matmul(&node, a, b, alpha)) {
                return Ok(vec![Value::Tensor(out?)]);
            }
        }
        Ok(vec![Value::Tensor(matmul_tensor(
            &node,
            "FusedMatMul",
            a,
            b,
            ta,
            tb,
            alpha,
        )?)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 9, 13] {
        r.register("", "MatMul", since, build_matmul);
    }
    r.register("com.microsoft", "FusedMatMul", 1, build_fused_matmul);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;

    fn reference(a: &[f64], b: &[f64], m: usize, k: usize, n: usize) -> Vec<f64> {
        let mut out = vec![0.0; m * n];
        for i in 0..m {
            for j in 0..n {
                out[i * n + j] = (0..k).map(|p| a[i * k + p] * b[p * n + j]).sum();
            }
        }
        out
    }

    #[test]
    fn broadcast_batches_and_vectors() {
        let node = node("MatMul", 2, 1, vec![]);
        let (m, k, n) = (5, 7, 3);
        let a = rand(2 * m * k, 1, -1.0, 1.0);
        let b = rand(k * n, 2, -1.0, 1.0);
        let out = run(
            build_matmul,
            &node,
            13,
            &[
                Some(Tensor::from_vec(vec![2, m, k], f32s(&a))),
                Some(Tensor::from_vec(vec![k, n], f32s(&b))),
            ],
        )
        .unwrap();
        assert_eq!(out[0].shape(), &[2, m, n]);
        let mut want = reference(&a[..m * k], &b, m, k, n);
        want.extend(reference(&a[m * k..], &b, m, k, n));
        assert_close(out[0].data::<f32>(), &want, 1e-5);

        // 1-D @ 3-D: [k] @ [2, k, n] -> [2, n]
        let b3 = rand(2 * k * n, 3, -1.0, 1.0);
        let v = rand(k, 4, -1.0, 1.0);
        let out = run(
            build_matmul,
            &node,
            13,
            &[
                Some(Tensor::from_vec(vec![k], f32s(&v))),
                Some(Tensor::from_vec(vec![2, k, n], f32s(&b3))),
            ],
        )
        .unwrap();
        assert_eq!(out[0].shape(), &[2, n]);
        let mut want = reference(&v, &b3[..k * n], 1, k, n);
        want.extend(reference(&v, &b3[k * n..], 1, k, n));
        assert_close(out[0].data::<f32>(), &want, 1e-5);
    }

    #[test]
    fn integer_and_errors() {
        let node = node("MatMul", 2, 1, vec![]);
        let a = Tensor::from_vec(vec![2, 2], vec![1i64, 2, 3, 4]);
        let b = Tensor::from_vec(vec![2, 1], vec![5i64, 6]);
        let out = run(build_matmul, &node, 13, &[Some(a.clone()), Some(b)]).unwrap();
        assert_eq!(out[0].data::<i64>(), &[17, 39]);
        let bad = Tensor::from_vec(vec![3, 1], vec![1i64, 2, 3]);
        assert!(run(build_matmul, &node, 13, &[Some(a), Some(bad)]).is_err());
    }
}
