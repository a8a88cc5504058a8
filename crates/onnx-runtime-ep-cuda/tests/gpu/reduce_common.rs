//! Helpers shared by the reduction-family tests (reduce.rs, softmax.rs, topk.rs): dtype and
//! layout tables, attribute builders, random inputs, a GPU run with the kernel's own output
//! types, value comparison, and the checks against the CPU provider and of refusals.

use super::harness::*;
use onnx_runtime_ep_api::{EpError, ExecutionProvider};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

pub(super) const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];

pub(super) const NUMERIC: [DataType; 12] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
];

pub(super) const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

pub(super) fn int(v: i64) -> Attribute {
    Attribute::Int(v)
}

pub(super) fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

pub(super) fn is_half(d: DataType) -> bool {
    matches!(d, DataType::Float16 | DataType::BFloat16)
}

pub(super) fn is_unsigned(d: DataType) -> bool {
    matches!(
        d,
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 | DataType::Uint64
    )
}

/// Random values in [lo, hi) (from 0 for unsigned dtypes), with quarter fractions for floats.
pub(super) fn vals(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: i64, hi: i64) -> T {
    let lo = if is_unsigned(dtype) { lo.max(0) } else { lo };
    random_numeric(rng, dtype, shape, lo, hi.max(lo + 1))
}

/// Random integers in [lo, hi) stored as `dtype` (exact in every float type used).
pub(super) fn int_vals(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: i64, hi: i64) -> T {
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n).map(|_| rng.range(lo, hi) as f64).collect();
    from_f64s(dtype, shape, &values)
}

/// The same values as float32 (exact for half types), in the same layout.
pub(super) fn to_f32(t: &T) -> T {
    let values: Vec<f64> = (0..t.numel()).map(|i| get(t, i)).collect();
    from_f64s(DataType::Float32, &t.shape, &values).with_layout(t.layout)
}

/// Builds the kernel, asks it for its output types, runs it on outputs of those types.
pub(super) fn gpu_run(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[T],
) -> Result<Vec<T>, EpError> {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(n, &shapes, opset)?;
    let mut b = Bound::new(ep, inputs, &[]);
    let types = b.output_types(kernel.as_ref())?;
    b.set_outputs(&types);
    b.execute(kernel.as_ref())?;
    b.read()
}

/// The default tolerance of an output dtype (relative, absolute).
pub(super) fn tol(dtype: DataType) -> (f64, f64) {
    match dtype {
        DataType::Float32 => (1e-5, 1e-5),
        DataType::Float64 => (1e-12, 1e-12),
        DataType::Float16 => (2e-3, 2e-3),
        DataType::BFloat16 => (1.6e-2, 1.6e-2),
        _ => (0.0, 0.0),
    }
}

/// Element-wise comparison of values (dtypes may differ: a half result against a float32
/// reference); NaN must match NaN and infinities exactly.
pub(super) fn assert_values(got: &T, want: &T, rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    for i in 0..want.numel() {
        let (g, w) = (get(got, i), get(want, i));
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(
            ok,
            "{what}: element {i} of {:?}: got {g}, want {w}",
            want.shape
        );
    }
}

/// Runs `n` on the GPU and on the CPU provider (half inputs widened to float32 for it) and
/// compares every output with `tolerance(output dtype)`.
pub(super) fn check_with(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[T],
    tolerance: impl Fn(DataType) -> (f64, f64),
    what: &str,
) -> Vec<T> {
    let got = gpu_run(ep, n, opset, inputs).unwrap_or_else(|e| panic!("{what}: GPU: {e}"));
    let refs: Vec<T> = inputs
        .iter()
        .map(|t| {
            if is_half(t.dtype) {
                to_f32(t)
            } else {
                t.clone()
            }
        })
        .collect();
    let ref_in: Vec<Option<&T>> = refs.iter().map(Some).collect();
    let want = cpu_reference(n, opset, &ref_in).unwrap_or_else(|e| panic!("{what}: CPU: {e}"));
    assert_eq!(got.len(), want.len(), "{what}: outputs");
    for (i, (g, w)) in got.iter().zip(&want).enumerate() {
        let expect_dtype = if is_half(g.dtype) && w.dtype == DataType::Float32 {
            g.dtype
        } else {
            w.dtype
        };
        assert_eq!(g.dtype, expect_dtype, "{what}: output {i} dtype");
        // A float32 reference of a half result, rounded to the half type (overflow included).
        let w = if g.dtype != w.dtype {
            let values: Vec<f64> = (0..w.numel()).map(|j| get(w, j)).collect();
            from_f64s(g.dtype, &w.shape, &values)
        } else {
            w.clone()
        };
        let (rtol, atol) = tolerance(g.dtype);
        assert_values(g, &w, rtol, atol, &format!("{what}: output {i}"));
    }
    got
}

pub(super) fn check(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[T],
    what: &str,
) -> Vec<T> {
    check_with(ep, n, opset, inputs, tol, what)
}

/// The error of running `n` (output_types first, then execute with guessed outputs) must
/// name the node.
pub(super) fn assert_refused(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[T],
    needle: &str,
) {
    let err = gpu_run(ep, n, opset, inputs)
        .expect_err("an error")
        .to_string();
    assert!(
        err.contains(&n.name) && err.contains(needle),
        "{}: expected an error naming the node and saying '{needle}', got: {err}",
        n.op_type
    );
}
