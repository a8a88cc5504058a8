//! Shared pieces of the `nn` kernels: the compute element trait, float up/down casts for
//! half types, the GEMM entry point and small error helpers.

use crate::{Element, Tensor};
use half::{bf16, f16};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{DataType, Node};
use std::borrow::Cow;

/// The element types floating-point kernels compute in: f32 (also for f16/bf16) and f64.
pub trait Real:
    num_traits::Float
    + num_traits::FromPrimitive
    + num_traits::ToPrimitive
    + Element
    + Send
    + Sync
    + std::iter::Sum
    + std::ops::AddAssign
    + std::ops::SubAssign
    + std::ops::MulAssign
    + std::ops::DivAssign
    + 'static
{
    fn from_f64c(v: f64) -> Self;
    fn to_f64c(self) -> f64;
}

impl Real for f32 {
    #[inline]
    fn from_f64c(v: f64) -> Self {
        v as f32
    }
    #[inline]
    fn to_f64c(self) -> f64 {
        self as f64
    }
}

impl Real for f64 {
    #[inline]
    fn from_f64c(v: f64) -> Self {
        v
    }
    #[inline]
    fn to_f64c(self) -> f64 {
        self
    }
}

/// `v` as `T` (a constant or an attribute value).
#[inline]
pub fn c<T: Real>(v: f64) -> T {
    T::from_f64c(v)
}

/// The dtype a float kernel computes `dtype` in: f64 stays f64, every other float is f32.
pub fn compute_dtype(dtype: DataType) -> DataType {
    if dtype == DataType::Float64 {
        DataType::Float64
    } else {
        DataType::Float32
    }
}

/// A float tensor in its compute type: f16/bf16 widened to f32, f32/f64 borrowed.
pub fn upcast(t: &Tensor) -> Cow<'_, Tensor> {
    match t.dtype() {
        DataType::Float16 => Cow::Owned(Tensor::from_vec(
            t.shape().to_vec(),
            t.data::<f16>().iter().map(|v| v.to_f32()).collect(),
        )),
        DataType::BFloat16 => Cow::Owned(Tensor::from_vec(
            t.shape().to_vec(),
            t.data::<bf16>().iter().map(|v| v.to_f32()).collect(),
        )),
        _ => Cow::Borrowed(t),
    }
}

/// A compute-type tensor narrowed back to `dtype` (f16/bf16), or returned as is.
pub fn downcast(t: Tensor, dtype: DataType) -> Tensor {
    match dtype {
        DataType::Float16 => Tensor::from_vec(
            t.shape().to_vec(),
            t.data::<f32>().iter().map(|&v| f16::from_f32(v)).collect(),
        ),
        DataType::BFloat16 => Tensor::from_vec(
            t.shape().to_vec(),
            t.data::<f32>().iter().map(|&v| bf16::from_f32(v)).collect(),
        ),
        _ => t,
    }
}

/// A float tensor's elements as `T` (converting whatever float type it holds).
pub fn float_vec<T: Real>(t: &Tensor) -> Option<Vec<T>> {
    if t.dtype() == T::DTYPE {
        return Some(t.data::<T>().to_vec());
    }
    Some(
        t.to_f64_vec()?
            .into_iter()
            .map(T::from_f64c)
            .collect::<Vec<_>>(),
    )
}

/// Values of `dtype`'s storage type from f32 values.
pub fn tensor_from_f32(dtype: DataType, shape: Vec<usize>, v: Vec<f32>) -> Tensor {
    downcast(Tensor::from_vec(shape, v), dtype)
}

/// Errors unless `dtype` is a float type the kernel computes (f32, f64, f16, bf16).
pub fn require_float(node: &str, op: &str, dtype: DataType) -> Result<(), EpError> {
    match dtype {
        DataType::Float32 | DataType::Float64 | DataType::Float16 | DataType::BFloat16 => Ok(()),
        other => Err(unsupported(
            node,
            op,
            other,
            "float, double, float16 or bfloat16",
        )),
    }
}

pub fn unsupported(node: &str, op: &str, dtype: DataType, allowed: &str) -> EpError {
    EpError::UnsupportedDtype {
        node: node.to_string(),
        op: op.to_string(),
        dtype,
        detail: format!("{op} takes {allowed}"),
        hint: "cast the input to a supported type, or run this node on another execution provider"
            .into(),
    }
}

pub fn invalid(node: &str, message: impl Into<String>) -> EpError {
    EpError::InvalidInput {
        node: node.to_string(),
        message: message.into(),
    }
}

pub fn bad_attr(node: &Node, name: &str, message: impl Into<String>) -> EpError {
    EpError::invalid_attribute(node, name, message)
}

/// An int attribute list as `usize`s, rejecting negatives.
pub fn usize_list(node: &Node, name: &str, v: &[i64]) -> Result<Vec<usize>, EpError> {
    v.iter()
        .map(|&x| {
            usize::try_from(x)
                .map_err(|_| bad_attr(node, name, format!("{x} must not be negative")))
        })
        .collect()
}

/// Sum of `f(x)` over `x` in eight interleaved partial sums: vectorizes, and the partials
/// keep the rounding error of long f32 rows small.
#[inline]
pub fn lane_sum<T: Real>(x: &[T], f: impl Fn(T) -> T) -> T {
    let mut acc = [T::zero(); 8];
    let chunks = x.chunks_exact(8);
    let rest = chunks.remainder();
    for ch in chunks {
        for i in 0..8 {
            acc[i] += f(ch[i]);
        }
    }
    let mut s = acc.iter().fold(T::zero(), |a, &b| a + b);
    for &v in rest {
        s += f(v);
    }
    s
}

/// Minimum m*n*k before GEMM spreads over threads.
const PARALLEL_FLOPS: usize = 1 << 17;

/// How a GEMM of `m * n * k` multiply-adds should use threads: inline when small (a thread
/// hand-off costs more than it saves).
pub fn gemm_parallelism(m: usize, n: usize, k: usize) -> gemm::Parallelism {
    if m.saturating_mul(n).saturating_mul(k) >= PARALLEL_FLOPS && rayon::current_num_threads() > 1 {
        gemm::Parallelism::Rayon(0)
    } else {
        gemm::Parallelism::None
    }
}

/// `c = alpha * a @ b + beta * c` for an `m x k` matrix `a` (row stride `a_rs`, column stride
/// `a_cs`), a `k x n` matrix `b` (`b_rs`, `b_cs`) and a row-major `m x n` block of `c` with row
/// stride `ldc`. With `beta == 0`, `c` is not read. Strides are in elements.
#[allow(clippy::too_many_arguments)]
pub fn gemm<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    a_rs: usize,
    a_cs: usize,
    b: &[T],
    b_rs: usize,
    b_cs: usize,
    c: &mut [T],
    ldc: usize,
    alpha: T,
    beta: T,
) {
    if m == 0 || n == 0 {
        return;
    }
    assert!((m - 1) * ldc + n <= c.len(), "gemm: c too short");
    if k == 0 {
        for i in 0..m {
            for v in &mut c[i * ldc..i * ldc + n] {
                *v = if beta == T::zero() {
                    T::zero()
                } else {
                    *v * beta
                };
            }
        }
        return;
    }
    let par = gemm_parallelism(m, n, k);
    // SAFETY: `c` is a unique borrow covering every element of the block (asserted above),
    // so it is initialised, writable and does not alias `a` or `b`.
    unsafe {
        gemm_raw(
            m,
            n,
            k,
            a,
            (a_rs, a_cs),
            b,
            (b_rs, b_cs),
            c.as_mut_ptr(),
            ldc,
            alpha,
            beta,
            par,
        )
    };
}

/// [`gemm`] into a raw row-major block `c` (row stride `ldc`). With `beta == 0`, `c` is only
/// written, so it may point at uninitialised memory. Panics if `a` or `b` are too short for
/// their strides.
///
/// # Safety
/// `c` must be valid for writes (and, when `beta != 0`, initialised reads) of every element
/// `c[i * ldc + j]`, `i < m`, `j < n`, and no other live reference may access that block.
#[allow(clippy::too_many_arguments)]
pub unsafe fn gemm_raw<T: Real>(
    m: usize,
    n: usize,
    k: usize,
    a: &[T],
    (a_rs, a_cs): (usize, usize),
    b: &[T],
    (b_rs, b_cs): (usize, usize),
    c: *mut T,
    ldc: usize,
    alpha: T,
    beta: T,
    par: gemm::Parallelism,
) {
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        for i in 0..m {
            for j in 0..n {
                // SAFETY: in the block the caller vouches for.
                unsafe {
                    let p = c.add(i * ldc + j);
                    let v = if beta == T::zero() {
                        T::zero()
                    } else {
                        p.read() * beta
                    };
                    p.write(v);
                }
            }
        }
        return;
    }
    // Every element the strides reach must lie inside the slices.
    assert!(
        (m - 1) * a_rs + (k - 1) * a_cs < a.len(),
        "gemm: a too short"
    );
    assert!(
        (k - 1) * b_rs + (n - 1) * b_cs < b.len(),
        "gemm: b too short"
    );
    // SAFETY: the asserts keep every read of `a` and `b` in bounds; the caller vouches for
    // `c`, which is a distinct block from the shared borrows `a` and `b`.
    unsafe {
        gemm::gemm(
            m,
            n,
            k,
            c,
            1,
            ldc as isize,
            beta != T::zero(),
            a.as_ptr(),
            a_cs as isize,
            a_rs as isize,
            b.as_ptr(),
            b_cs as isize,
            b_rs as isize,
            beta,
            alpha,
            false,
            false,
            false,
            par,
        );
    }
}

/// Row-major `c[m x n] = a[m x k] @ b[k x n]` (contiguous operands).
pub fn matmul_rm<T: Real>(m: usize, n: usize, k: usize, a: &[T], b: &[T], c: &mut [T]) {
    gemm(m, n, k, a, k, 1, b, n, 1, c, n, T::one(), T::zero());
}

/// Reads an optional tensor input as i64s (shape-like inputs: pads, sizes, axes).
pub fn ints_of(node: &str, t: &Tensor, what: &str) -> Result<Vec<i64>, EpError> {
    t.to_i64_vec().ok_or_else(|| {
        invalid(
            node,
            format!("{what} must be an integer tensor, got {}", t.dtype()),
        )
    })
}

/// Reads a float tensor (any float or integer type) as f64s.
pub fn floats_of(node: &str, t: &Tensor, what: &str) -> Result<Vec<f64>, EpError> {
    t.to_f64_vec().ok_or_else(|| {
        invalid(
            node,
            format!("{what} must be a numeric tensor, got {}", t.dtype()),
        )
    })
}

#[cfg(test)]
pub mod testutil {
    //! Helpers for the family's unit tests: nodes with attributes, a tiny deterministic RNG,
    //! float64 reference loops.
    use crate::kernel::BuildContext;
    use crate::{Tensor, Value};
    use onnx_runtime_ir::Node;

    pub use crate::testutil::node;

    pub fn run(
        factory: crate::CpuFactory,
        node: &Node,
        opset: u64,
        inputs: &[Option<Tensor>],
    ) -> Result<Vec<Tensor>, onnx_runtime_ep_api::EpError> {
        let k = factory(&BuildContext::new(node, opset))?;
        let vals: Vec<Option<Value>> = inputs
            .iter()
            .map(|t| t.clone().map(Value::Tensor))
            .collect();
        let refs: Vec<Option<&Value>> = vals.iter().map(|v| v.as_ref()).collect();
        Ok(k.run(&refs)?
            .into_iter()
            .map(|v| v.into_tensor().unwrap())
            .collect())
    }

    /// Deterministic uniform values in [lo, hi).
    pub fn rand(n: usize, seed: u64, lo: f64, hi: f64) -> Vec<f64> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                lo + (hi - lo) * ((s >> 11) as f64 / (1u64 << 53) as f64)
            })
            .collect()
    }

    pub fn f32s(v: &[f64]) -> Vec<f32> {
        v.iter().map(|&x| x as f32).collect()
    }

    pub fn assert_close(got: &[f32], want: &[f64], tol: f64) {
        assert_eq!(got.len(), want.len(), "length");
        for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
            assert!(
                ((g as f64) - w).abs() <= tol * (1.0 + w.abs()),
                "element {i}: got {g}, want {w}"
            );
        }
    }
}
