//! The reduction family against the CPU provider on random inputs: ReduceSum ... ReduceSumSquare
//! (every dtype, axes sets, keepdims, noop_with_empty_axes, axes as input vs attribute, strided
//! layouts, empty reductions, split paths over long extents), ArgMax/ArgMin (ties with
//! select_last_index, NaN), Softmax/LogSoftmax/Hardmax (opset 11 vs 13 semantics, register /
//! loop / column paths, special values), TopK (largest/smallest, k = 1 / k = row length, ties,
//! NaN, the shared-memory sort, radix select and global sort paths), errors naming the node,
//! capture, and the throughput of ReduceSum and Softmax on 64 MB tensors. Half types are
//! checked against the CPU provider's float32 result.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider, Kernel};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];

const NUMERIC: [DataType; 12] = [
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

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

fn int(v: i64) -> Attribute {
    Attribute::Int(v)
}

fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

fn is_half(d: DataType) -> bool {
    matches!(d, DataType::Float16 | DataType::BFloat16)
}

fn is_unsigned(d: DataType) -> bool {
    matches!(
        d,
        DataType::Uint8 | DataType::Uint16 | DataType::Uint32 | DataType::Uint64
    )
}

/// Random values in [lo, hi) (from 0 for unsigned dtypes), with quarter fractions for floats.
fn vals(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: i64, hi: i64) -> T {
    let lo = if is_unsigned(dtype) { lo.max(0) } else { lo };
    random_numeric(rng, dtype, shape, lo, hi.max(lo + 1))
}

/// Random integers in [lo, hi) stored as `dtype` (exact in every float type used).
fn int_vals(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: i64, hi: i64) -> T {
    let n: usize = shape.iter().product();
    let values: Vec<f64> = (0..n).map(|_| rng.range(lo, hi) as f64).collect();
    from_f64s(dtype, shape, &values)
}

/// The same values as float32 (exact for half types), in the same layout.
fn to_f32(t: &T) -> T {
    let values: Vec<f64> = (0..t.numel()).map(|i| get(t, i)).collect();
    from_f64s(DataType::Float32, &t.shape, &values).with_layout(t.layout)
}

/// Builds the kernel, asks it for its output types, runs it on outputs of those types.
fn gpu_run(
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
fn tol(dtype: DataType) -> (f64, f64) {
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
fn assert_values(got: &T, want: &T, rtol: f64, atol: f64, what: &str) {
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
fn check_with(
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

fn check(ep: &CudaExecutionProvider, n: &Node, opset: u64, inputs: &[T], what: &str) -> Vec<T> {
    check_with(ep, n, opset, inputs, tol, what)
}

/// The error of running `n` (output_types first, then execute with guessed outputs) must
/// name the node.
fn assert_refused(ep: &CudaExecutionProvider, n: &Node, opset: u64, inputs: &[T], needle: &str) {
    let err = gpu_run(ep, n, opset, inputs)
        .expect_err("an error")
        .to_string();
    assert!(
        err.contains(&n.name) && err.contains(needle),
        "{}: expected an error naming the node and saying '{needle}', got: {err}",
        n.op_type
    );
}

// ---- Reduce* ----

const REDUCE_OPS: [&str; 10] = [
    "ReduceSum",
    "ReduceMean",
    "ReduceMax",
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceLogSum",
    "ReduceLogSumExp",
    "ReduceSumSquare",
];

/// The opset where the axes became an input.
fn axes_input_opset(op: &str) -> u64 {
    if op == "ReduceSum" {
        13
    } else {
        18
    }
}

/// A range of values that keeps `op` finite and meaningful in every dtype.
fn reduce_range(op: &str) -> (i64, i64) {
    match op {
        "ReduceLogSum" => (1, 6),
        "ReduceProd" => (-3, 4),
        _ => (-8, 8),
    }
}

/// Integer results of logs and roots truncate: allow one unit for rounding differences.
fn reduce_tol(op: &str) -> impl Fn(DataType) -> (f64, f64) + '_ {
    move |d| {
        if d.is_integer() && matches!(op, "ReduceLogSum" | "ReduceLogSumExp" | "ReduceL2") {
            (0.0, 1.0)
        } else {
            tol(d)
        }
    }
}

/// Every dtype with axes as input: one axis with keepdims, two (one negative) without,
/// on rotating layouts.
fn reduce_every_dtype(op: &str) {
    let ep = gpu();
    let mut rng = Rng::new(op.len() as u64 * 31 + 7);
    let opset = axes_input_opset(op);
    let (lo, hi) = reduce_range(op);
    let cases: [(&[i64], i64); 3] = [(&[1], 1), (&[-1, 0], 0), (&[0, 1, 2], 1)];
    for (c, dtype) in NUMERIC.iter().enumerate() {
        for (a, (axes, keep)) in cases.iter().enumerate() {
            let x = vals(&mut rng, *dtype, &[3, 4, 5], lo, hi).with_layout(LAYOUTS[(c + a) % 3]);
            let n = node(op, 2, 1, &[("keepdims", int(*keep))]);
            let axes_t = i64s(&[axes.len()], axes);
            check_with(
                &ep,
                &n,
                opset,
                &[x, axes_t],
                reduce_tol(op),
                &format!("{op} {dtype} axes {axes:?} keepdims {keep}"),
            );
        }
    }
}

#[test]
fn reduce_sum_every_dtype() {
    reduce_every_dtype("ReduceSum");
}

#[test]
fn reduce_mean_every_dtype() {
    reduce_every_dtype("ReduceMean");
}

#[test]
fn reduce_max_every_dtype() {
    reduce_every_dtype("ReduceMax");
}

#[test]
fn reduce_min_every_dtype() {
    reduce_every_dtype("ReduceMin");
}

#[test]
fn reduce_prod_every_dtype() {
    reduce_every_dtype("ReduceProd");
}

#[test]
fn reduce_l1_every_dtype() {
    reduce_every_dtype("ReduceL1");
}

#[test]
fn reduce_l2_every_dtype() {
    reduce_every_dtype("ReduceL2");
}

#[test]
fn reduce_log_sum_every_dtype() {
    reduce_every_dtype("ReduceLogSum");
}

#[test]
fn reduce_log_sum_exp_every_dtype() {
    reduce_every_dtype("ReduceLogSumExp");
}

#[test]
fn reduce_sum_square_every_dtype() {
    reduce_every_dtype("ReduceSumSquare");
}

#[test]
fn reduce_axes_sets_keepdims_noop_and_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(11);
    // None: the axes input omitted.
    let axes_sets: [Option<&[i64]>; 8] = [
        Some(&[1]),
        Some(&[0, 2]),
        Some(&[-1]),
        Some(&[3, 1]),
        Some(&[0, 1, 2, 3]),
        Some(&[-4, -2]),
        Some(&[]),
        None,
    ];
    let mut case = 0;
    for op in ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceLogSumExp"] {
        let opset = axes_input_opset(op);
        for axes in axes_sets {
            for keep in [0, 1] {
                for noop in [0, 1] {
                    case += 1;
                    let layout = LAYOUTS[case % 3];
                    let x =
                        vals(&mut rng, DataType::Float32, &[3, 4, 5, 6], -8, 8).with_layout(layout);
                    let attrs = [("keepdims", int(keep)), ("noop_with_empty_axes", int(noop))];
                    let (n, inputs) = match axes {
                        Some(a) => (node(op, 2, 1, &attrs), vec![x, i64s(&[a.len()], a)]),
                        None => (node(op, 1, 1, &attrs), vec![x]),
                    };
                    check(
                        &ep,
                        &n,
                        opset,
                        &inputs,
                        &format!("{op} axes {axes:?} keepdims {keep} noop {noop} {layout:?}"),
                    );
                }
            }
        }
    }
}

#[test]
fn reduce_axes_attribute_before_input_opsets() {
    let ep = gpu();
    let mut rng = Rng::new(12);
    let x = vals(&mut rng, DataType::Float32, &[4, 3, 5], -8, 8).with_layout(Layout::Reversed);
    for (op, attr_opset, input_opset) in [("ReduceMean", 13, 18), ("ReduceSum", 11, 13)] {
        // The attribute (older opset) and the input (newer opset) give the same result.
        let by_attr = node(op, 1, 1, &[("axes", ints(&[2, 0])), ("keepdims", int(0))]);
        let a = check(
            &ep,
            &by_attr,
            attr_opset,
            &[x.clone()],
            &format!("{op} attr"),
        );
        let by_input = node(op, 2, 1, &[("keepdims", int(0))]);
        let b = check(
            &ep,
            &by_input,
            input_opset,
            &[x.clone(), i64s(&[2], &[2, 0])],
            &format!("{op} input"),
        );
        assert_values(&a[0], &b[0], 0.0, 0.0, &format!("{op}: attribute vs input"));
        assert_eq!(a[0].shape, vec![3]);
        // No axes attribute: everything is reduced.
        let all = node(op, 1, 1, &[]);
        let c = check(
            &ep,
            &all,
            attr_opset,
            &[x.clone()],
            &format!("{op} no attr"),
        );
        assert_eq!(c[0].shape, vec![1, 1, 1]);
    }
    // ReduceMax at opset 13 (attribute) on int8 and uint8 (added in 12).
    for dtype in [DataType::Int8, DataType::Uint8] {
        let x = vals(&mut rng, dtype, &[5, 6], -100, 100);
        let n = node("ReduceMax", 1, 1, &[("axes", ints(&[-1]))]);
        check(&ep, &n, 13, &[x], &format!("ReduceMax-13 {dtype}"));
    }
}

/// (op, dtype, shape, axes, layout)
type SplitCase = (&'static str, DataType, Vec<usize>, Vec<i64>, Layout);

/// Long reductions take the split paths (partials in the workspace, then a finishing launch);
/// integer-valued inputs make float sums exact, so they must match the CPU exactly.
#[test]
fn reduce_split_paths_over_long_extents() {
    let ep = gpu();
    let mut rng = Rng::new(13);
    let exact = |_: DataType| (0.0, 0.0);
    let cases: Vec<SplitCase> = vec![
        // Rows: few outputs over a long contiguous run.
        (
            "ReduceSum",
            DataType::Float32,
            vec![2, 300_000],
            vec![-1],
            Layout::Contiguous,
        ),
        (
            "ReduceSum",
            DataType::Float32,
            vec![2, 300_001],
            vec![1],
            Layout::Padded,
        ),
        (
            "ReduceMax",
            DataType::Float16,
            vec![1 << 20],
            vec![0],
            Layout::Contiguous,
        ),
        (
            "ReduceSum",
            DataType::Int64,
            vec![1 << 21],
            vec![0],
            Layout::Contiguous,
        ),
        (
            "ReduceMin",
            DataType::Int32,
            vec![3, 200_000],
            vec![1],
            Layout::Contiguous,
        ),
        // Columns: the kept axis is the fast one.
        (
            "ReduceSum",
            DataType::Float32,
            vec![300_000, 3],
            vec![0],
            Layout::Contiguous,
        ),
        (
            "ReduceMax",
            DataType::Float32,
            vec![100_000, 40],
            vec![0],
            Layout::Contiguous,
        ),
        (
            "ReduceSum",
            DataType::Float32,
            vec![5, 70_000, 3],
            vec![0, 1],
            Layout::Contiguous,
        ),
        // Strided: a transposed input reduced over its (then slow) last axis.
        (
            "ReduceSum",
            DataType::Float32,
            vec![3000, 200],
            vec![1],
            Layout::Reversed,
        ),
        (
            "ReduceSum",
            DataType::Float32,
            vec![200, 3000],
            vec![1],
            Layout::Reversed,
        ),
        (
            "ReduceMax",
            DataType::Float64,
            vec![64, 50_000],
            vec![1],
            Layout::Contiguous,
        ),
    ];
    for (op, dtype, shape, axes, layout) in cases {
        let x = int_vals(&mut rng, dtype, &shape, -20, 20).with_layout(layout);
        let n = node(op, 2, 1, &[("keepdims", int(0))]);
        check_with(
            &ep,
            &n,
            axes_input_opset(op),
            &[x, i64s(&[axes.len()], &axes)],
            exact,
            &format!("{op} {dtype} {shape:?} axes {axes:?} {layout:?}"),
        );
    }
    // A long mean and log-sum-exp in float (not exact): a tolerance.
    let x = vals(&mut rng, DataType::Float32, &[4, 250_000], -8, 8);
    for op in ["ReduceMean", "ReduceLogSumExp", "ReduceL2"] {
        let n = node(op, 2, 1, &[]);
        check_with(
            &ep,
            &n,
            18,
            &[x.clone(), i64s(&[1], &[1])],
            |_| (1e-4, 1e-4),
            &format!("{op} long rows"),
        );
    }
}

#[test]
fn reduce_empty_axis_gives_the_identity() {
    let ep = gpu();
    for op in REDUCE_OPS {
        for dtype in [DataType::Float32, DataType::Int32, DataType::Float16] {
            let x = T::new(dtype, &[3, 0, 2], Vec::new());
            let n = node(op, 2, 1, &[]);
            let got = check(
                &ep,
                &n,
                axes_input_opset(op),
                &[x.clone(), i64s(&[1], &[1])],
                &format!("{op} {dtype} empty axis"),
            );
            assert_eq!(got[0].shape, vec![3, 1, 2]);
            // Reducing a non-empty axis of an empty tensor gives an empty output.
            let got = check(
                &ep,
                &n,
                axes_input_opset(op),
                &[x, i64s(&[1], &[2])],
                &format!("{op} {dtype} empty output"),
            );
            assert_eq!(got[0].shape, vec![3, 0, 1]);
        }
    }
}

#[test]
fn reduce_max_min_bool_opset_20() {
    let ep = gpu();
    let mut rng = Rng::new(14);
    for op in ["ReduceMax", "ReduceMin"] {
        for (axes, layout) in [
            (vec![1i64], Layout::Contiguous),
            (vec![0], Layout::Reversed),
        ] {
            let x = random_bytes(&mut rng, DataType::Bool, &[6, 9]).with_layout(layout);
            let n = node(op, 2, 1, &[]);
            check(
                &ep,
                &n,
                20,
                &[x, i64s(&[1], &axes)],
                &format!("{op} bool {axes:?}"),
            );
        }
    }
}

#[test]
fn reduce_scalar_input() {
    let ep = gpu();
    let x = from_f64s(DataType::Float32, &[], &[-2.5]);
    for op in REDUCE_OPS {
        if op == "ReduceLogSum" {
            continue;
        }
        let n = node(op, 1, 1, &[]);
        let got = check(&ep, &n, 18, &[x.clone()], &format!("{op} scalar"));
        assert!(got[0].shape.is_empty());
    }
}

#[test]
fn reduce_errors_name_the_node() {
    let ep = gpu();
    let x = vals(&mut Rng::new(15), DataType::Float32, &[2, 3, 4], -5, 5);
    let n = node("ReduceSum", 2, 1, &[]);
    assert_refused(&ep, &n, 13, &[x.clone(), i64s(&[1], &[3])], "out of range");
    assert_refused(&ep, &n, 13, &[x.clone(), i64s(&[1], &[-4])], "out of range");
    assert_refused(&ep, &n, 13, &[x.clone(), i64s(&[2], &[1, -2])], "repeated");
    let n = node("ReduceMean", 1, 1, &[("axes", ints(&[7]))]);
    assert_refused(&ep, &n, 13, &[x.clone()], "out of range");
    // The execute path too (outputs guessed by the caller).
    let n = node("ReduceMax", 2, 1, &[]);
    let err = run(
        &ep,
        &n,
        18,
        &[x, i64s(&[1], &[5])],
        &[(DataType::Float32, vec![2, 3, 4])],
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("test_ReduceMax") && err.contains("out of range"),
        "{err}"
    );
}

// ---- ArgMax / ArgMin ----

#[test]
fn argmax_argmin_every_dtype_with_ties() {
    let ep = gpu();
    let mut rng = Rng::new(21);
    let mut case = 0;
    for op in ["ArgMax", "ArgMin"] {
        for dtype in NUMERIC {
            for axis in [0i64, 1, -1] {
                for keep in [0, 1] {
                    for last in [0, 1] {
                        case += 1;
                        // Few distinct values: many ties.
                        let x = int_vals(&mut rng, dtype, &[4, 5, 6], 0, 3)
                            .with_layout(LAYOUTS[case % 3]);
                        let n = node(
                            op,
                            1,
                            1,
                            &[
                                ("axis", int(axis)),
                                ("keepdims", int(keep)),
                                ("select_last_index", int(last)),
                            ],
                        );
                        check(
                            &ep,
                            &n,
                            13,
                            &[x],
                            &format!("{op} {dtype} axis {axis} keepdims {keep} last {last}"),
                        );
                    }
                }
            }
        }
    }
    // bool, and opset 11 (no select_last_index).
    let x = random_bytes(&mut rng, DataType::Bool, &[5, 7]);
    for op in ["ArgMax", "ArgMin"] {
        let n = node(op, 1, 1, &[("axis", int(1))]);
        check(&ep, &n, 11, &[x.clone()], &format!("{op} bool"));
    }
}

#[test]
fn argmax_nan_scalar_and_errors() {
    let ep = gpu();
    let nan = f64::NAN;
    let x = from_f64s(
        DataType::Float32,
        &[3, 5],
        &[
            1.0, nan, 3.0, nan, 3.0, 2.0, 2.0, 1.0, 0.0, 2.0, nan, nan, nan, 1.0, 5.0,
        ],
    );
    for op in ["ArgMax", "ArgMin"] {
        for last in [0, 1] {
            let n = node(
                op,
                1,
                1,
                &[("axis", int(1)), ("select_last_index", int(last))],
            );
            check(&ep, &n, 13, &[x.clone()], &format!("{op} NaN last {last}"));
        }
    }
    // A scalar input gives index 0.
    let s = from_f64s(DataType::Float32, &[], &[4.0]);
    let got = check(&ep, &node("ArgMax", 1, 1, &[]), 13, &[s], "ArgMax scalar");
    assert!(got[0].shape.is_empty());
    // Errors: axis out of range, empty axis.
    let n = node("ArgMax", 1, 1, &[("axis", int(2))]);
    assert_refused(&ep, &n, 13, &[x.clone()], "out of range");
    let n = node("ArgMin", 1, 1, &[("axis", int(-3))]);
    assert_refused(&ep, &n, 13, &[x], "out of range");
    let e = T::new(DataType::Float32, &[2, 0], Vec::new());
    let n = node("ArgMax", 1, 1, &[("axis", int(1))]);
    assert_refused(&ep, &n, 13, &[e], "size 0");
}

#[test]
fn argmax_long_rows_and_columns() {
    let ep = gpu();
    let mut rng = Rng::new(22);
    let cases: [(DataType, &[usize], i64, Layout); 5] = [
        (DataType::Float32, &[3, 100_000], 1, Layout::Contiguous),
        (DataType::Float16, &[2, 70_001], -1, Layout::Padded),
        (DataType::Int64, &[100_000, 2], 0, Layout::Contiguous),
        (DataType::Float32, &[1, 1 << 20], 1, Layout::Contiguous),
        (DataType::Uint8, &[500, 700], 0, Layout::Reversed),
    ];
    for (dtype, shape, axis, layout) in cases {
        // Values in [0, 50): the maximum repeats, so select_last_index matters.
        let x = int_vals(&mut rng, dtype, shape, 0, 50).with_layout(layout);
        for op in ["ArgMax", "ArgMin"] {
            for last in [0, 1] {
                let n = node(
                    op,
                    1,
                    1,
                    &[("axis", int(axis)), ("select_last_index", int(last))],
                );
                check(
                    &ep,
                    &n,
                    13,
                    &[x.clone()],
                    &format!("{op} {dtype} {shape:?} axis {axis} last {last} {layout:?}"),
                );
            }
        }
    }
}

// ---- Softmax / LogSoftmax / Hardmax ----

const SOFT_OPS: [&str; 3] = ["Softmax", "LogSoftmax", "Hardmax"];

#[test]
fn softmax_family_opset_11_vs_13_every_float_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(31);
    // (opset, shape, axis attribute)
    let cases: [(u64, &[usize], Option<i64>); 9] = [
        (11, &[2, 3, 4], None),
        (11, &[2, 3, 4], Some(2)),
        (11, &[2, 3, 4, 5], Some(2)),
        (11, &[2, 3, 4, 5], Some(-3)),
        (11, &[2, 3, 4, 5], Some(0)),
        (1, &[3, 5, 2], Some(1)),
        (13, &[2, 3, 4, 5], None),
        (13, &[2, 3, 4, 5], Some(1)),
        (13, &[3, 4, 5], Some(-3)),
    ];
    let mut case = 0;
    for op in SOFT_OPS {
        for dtype in FLOATS {
            for (opset, shape, axis) in cases {
                case += 1;
                let layout = LAYOUTS[case % 3];
                let x = vals(&mut rng, dtype, shape, -8, 8).with_layout(layout);
                let attrs: Vec<(&str, Attribute)> =
                    axis.map(|a| vec![("axis", int(a))]).unwrap_or_default();
                let n = node(op, 1, 1, &attrs);
                check(
                    &ep,
                    &n,
                    opset,
                    &[x],
                    &format!("{op}-{opset} {dtype} {shape:?} axis {axis:?} {layout:?}"),
                );
            }
        }
    }
    // Opset 11 and 13 differ on a rank-3 input with axis 1: 2-D coercion vs one axis.
    let x = vals(&mut rng, DataType::Float32, &[2, 3, 4], -8, 8);
    let n = node("Softmax", 1, 1, &[("axis", int(1))]);
    let a = check(&ep, &n, 11, &[x.clone()], "Softmax-11 rank 3");
    let b = check(&ep, &n, 13, &[x], "Softmax-13 rank 3");
    let sum11: f64 = (0..12).map(|i| get(&a[0], i)).sum();
    let sum13: f64 = (0..3).map(|i| get(&b[0], i * 4)).sum();
    assert!(
        (sum11 - 1.0).abs() < 1e-5,
        "opset 11 normalizes the 12 trailing elements"
    );
    assert!(
        (sum13 - 1.0).abs() < 1e-5,
        "opset 13 normalizes along axis 1"
    );
}

/// Row lengths across the register (vector and scalar), loop and column paths, and the
/// special values: -inf entries, a NaN, +inf, an all -inf row.
#[test]
fn softmax_row_lengths_paths_and_special_values() {
    let ep = gpu();
    let mut rng = Rng::new(32);
    let soft_tol = |d: DataType| match d {
        DataType::Float32 => (1e-4, 1e-6),
        other => tol(other),
    };
    let shapes: [(&[usize], i64, Layout); 13] = [
        (&[2, 1], -1, Layout::Contiguous),
        (&[5, 7], -1, Layout::Contiguous),
        (&[3, 33], -1, Layout::Padded),
        (&[4, 1000], -1, Layout::Contiguous),
        (&[3, 1001], -1, Layout::Contiguous),
        (&[2, 4096], -1, Layout::Contiguous),
        (&[2, 32768], -1, Layout::Contiguous),
        (&[2, 40000], -1, Layout::Contiguous),
        (&[3, 9000], -1, Layout::Padded),
        (&[3000, 3], 0, Layout::Contiguous),
        (&[5, 300, 7], 1, Layout::Contiguous),
        (&[40, 50], 0, Layout::Reversed),
        (&[64, 20], -1, Layout::Reversed),
    ];
    for op in SOFT_OPS {
        for (shape, axis, layout) in shapes {
            for dtype in [DataType::Float32, DataType::Float64] {
                let x = vals(&mut rng, dtype, shape, -8, 8).with_layout(layout);
                let n = node(op, 1, 1, &[("axis", int(axis))]);
                check_with(
                    &ep,
                    &n,
                    13,
                    &[x],
                    soft_tol,
                    &format!("{op} {dtype} {shape:?} axis {axis} {layout:?}"),
                );
            }
        }
        // Half types on a register row and a loop row against float32.
        for shape in [&[4usize, 1000][..], &[2, 40000]] {
            for dtype in [DataType::Float16, DataType::BFloat16] {
                let x = vals(&mut rng, dtype, shape, -8, 8);
                let n = node(op, 1, 1, &[]);
                check(&ep, &n, 13, &[x], &format!("{op} {dtype} {shape:?}"));
            }
        }
        // Special values, on a short row (register path) and a long one (loop path).
        let (inf, nan) = (f64::INFINITY, f64::NAN);
        for len in [8usize, 40000] {
            let mut rows: Vec<Vec<f64>> = Vec::new();
            let base: Vec<f64> = (0..len).map(|i| ((i * 37) % 11) as f64 - 5.0).collect();
            let mut with = |edits: &[(usize, f64)]| {
                let mut r = base.clone();
                for &(i, v) in edits {
                    r[i] = v;
                }
                rows.push(r);
            };
            with(&[(1, -inf), (5, -inf)]);
            with(&[(3, nan)]);
            with(&[(2, inf)]);
            with(&[]);
            rows.push(vec![-inf; len]);
            let flat: Vec<f64> = rows.concat();
            let x = from_f64s(DataType::Float32, &[rows.len(), len], &flat);
            let n = node(op, 1, 1, &[]);
            check_with(
                &ep,
                &n,
                13,
                &[x],
                soft_tol,
                &format!("{op} special values len {len}"),
            );
        }
    }
}

/// A row axis followed by unit axes (the [1, 1000, 1, 1] output of a global pool, as in
/// light_squeezenet): opset 1 and 11 (2-D coercion at axis 1) and 13 (axis 1 alone) all
/// normalize one row of 1000 contiguous elements; a constant row gives 1 / 1000 everywhere.
#[test]
fn softmax_row_followed_by_unit_axes() {
    let ep = gpu();
    let mut rng = Rng::new(34);
    for op in SOFT_OPS {
        for opset in [1u64, 11, 13] {
            for shape in [&[1usize, 1000, 1, 1][..], &[2, 5, 1, 1]] {
                for dtype in FLOATS {
                    for layout in LAYOUTS {
                        let x = vals(&mut rng, dtype, shape, -8, 8).with_layout(layout);
                        let n = node(op, 1, 1, &[("axis", int(1))]);
                        check(
                            &ep,
                            &n,
                            opset,
                            &[x],
                            &format!("{op}-{opset} {dtype} {shape:?} axis 1 {layout:?}"),
                        );
                    }
                }
            }
        }
    }
    let x = from_f64s(DataType::Float32, &[1, 1000, 1, 1], &[3.25; 1000]);
    for opset in [1u64, 11, 13] {
        let n = node("Softmax", 1, 1, &[("axis", int(1))]);
        let got = check(
            &ep,
            &n,
            opset,
            &[x.clone()],
            "Softmax constant [1, 1000, 1, 1]",
        );
        for i in 0..1000 {
            let g = get(&got[0], i);
            assert!(
                (g - 1e-3).abs() < 1e-7,
                "Softmax-{opset} constant [1, 1000, 1, 1]: element {i}: got {g}, want 0.001"
            );
        }
    }
}

/// Every register kernel variant (vectors or scalars a thread, a sub-warp / warp / block
/// group a row) and the vector loop, for every float dtype: row lengths around each
/// variant's capacity, contiguous (16-byte vectors) and padded (scalar, unaligned rows).
#[test]
fn softmax_register_variants_every_float_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(35);
    let soft_tol = |d: DataType| match d {
        DataType::Float32 => (1e-4, 1e-6),
        other => tol(other),
    };
    let lens = [
        3usize, 8, 64, 72, 200, 256, 400, 1000, 1024, 1032, 2048, 4096, 5000, 8192, 16384, 20000,
        36000,
    ];
    for op in ["Softmax", "LogSoftmax"] {
        let n = node(op, 1, 1, &[]);
        for dtype in FLOATS {
            for &len in &lens {
                for layout in [Layout::Contiguous, Layout::Padded] {
                    let rows = if len > 4096 { 2 } else { 5 };
                    let x = vals(&mut rng, dtype, &[rows, len], -8, 8).with_layout(layout);
                    check_with(
                        &ep,
                        &n,
                        13,
                        &[x],
                        soft_tol,
                        &format!("{op} {dtype} [{rows}, {len}] {layout:?}"),
                    );
                }
            }
        }
        // A row of NaN (the vector loop and the register kernels) is NaN throughout.
        for len in [1000usize, 40000] {
            let mut v = vec![f64::NAN; len];
            v.extend((0..len).map(|i| (i % 7) as f64));
            let x = from_f64s(DataType::Float32, &[2, len], &v);
            check_with(
                &ep,
                &n,
                13,
                &[x],
                soft_tol,
                &format!("{op} NaN row len {len}"),
            );
        }
    }
}

/// The rows kernel's rounds of vector loads (full, predicated last round, unaligned head and
/// tail) and the column kernel's unrolled rounds, over lengths around the round sizes, for
/// several kinds and dtypes; integer-valued inputs keep float sums exact.
#[test]
fn reduce_rows_and_columns_rounds_and_remainders() {
    let ep = gpu();
    let mut rng = Rng::new(14);
    let exact = |_: DataType| (0.0, 0.0);
    let lens = [
        1usize, 7, 31, 32, 33, 100, 255, 256, 257, 1000, 1023, 4099, 9000,
    ];
    for dtype in [
        DataType::Float32,
        DataType::Float16,
        DataType::Float64,
        DataType::Int32,
        DataType::Uint8,
    ] {
        for &len in &lens {
            for layout in [Layout::Contiguous, Layout::Padded] {
                let x = int_vals(&mut rng, dtype, &[6, len], 0, 8).with_layout(layout);
                for (op, axis) in [("ReduceSum", 1i64), ("ReduceMax", 1), ("ReduceSum", 0)] {
                    let n = node(op, 2, 1, &[("keepdims", int(0))]);
                    check_with(
                        &ep,
                        &n,
                        axes_input_opset(op),
                        &[x.clone(), i64s(&[1], &[axis])],
                        exact,
                        &format!("{op} {dtype} [6, {len}] axis {axis} {layout:?}"),
                    );
                }
                // Columns: the reduced axis is the slow one.
                let c = int_vals(&mut rng, dtype, &[len, 5], 0, 8).with_layout(layout);
                let n = node("ReduceSum", 2, 1, &[("keepdims", int(1))]);
                check_with(
                    &ep,
                    &n,
                    13,
                    &[c, i64s(&[1], &[0])],
                    exact,
                    &format!("ReduceSum {dtype} [{len}, 5] axis 0 {layout:?}"),
                );
            }
        }
    }
    // Wide accumulators (arg pairs, max-sums) and ties, over the same rounds.
    for &len in &lens {
        let x = int_vals(&mut rng, DataType::Float32, &[4, len], -3, 3);
        for last in [0, 1] {
            let n = node(
                "ArgMax",
                1,
                1,
                &[("axis", int(1)), ("select_last_index", int(last))],
            );
            check(
                &ep,
                &n,
                13,
                &[x.clone()],
                &format!("ArgMax len {len} last {last}"),
            );
        }
        for dtype in [DataType::Float32, DataType::Float64, DataType::Int32] {
            let x = int_vals(&mut rng, dtype, &[4, len], -5, 5);
            let n = node("ReduceLogSumExp", 2, 1, &[]);
            check_with(
                &ep,
                &n,
                18,
                &[x, i64s(&[1], &[-1])],
                reduce_tol("ReduceLogSumExp"),
                &format!("ReduceLogSumExp {dtype} len {len}"),
            );
        }
    }
    // A NaN row: every thread of its group sees only NaN (the partial must still carry it).
    let mut v = vec![f64::NAN; 3000];
    v.extend((0..3000).map(|i| (i % 5) as f64));
    let x = from_f64s(DataType::Float32, &[2, 3000], &v);
    let n = node("ReduceLogSumExp", 2, 1, &[]);
    check(
        &ep,
        &n,
        18,
        &[x, i64s(&[1], &[1])],
        "ReduceLogSumExp NaN row",
    );
}

#[test]
fn softmax_errors_name_the_node() {
    let ep = gpu();
    let x = vals(&mut Rng::new(33), DataType::Float32, &[2, 3, 4], -5, 5);
    let n = node("Softmax", 1, 1, &[("axis", int(3))]);
    assert_refused(&ep, &n, 13, &[x.clone()], "out of range");
    let n = node("LogSoftmax", 1, 1, &[("axis", int(4))]);
    assert_refused(&ep, &n, 11, &[x.clone()], "out of range");
    // Opset 11 accepts axis == rank (rows of one element).
    let n = node("Softmax", 1, 1, &[("axis", int(3))]);
    check(&ep, &n, 11, &[x], "Softmax-11 axis == rank");
}

// ---- TopK ----

#[test]
fn topk_every_dtype_largest_smallest_k_bounds() {
    let ep = gpu();
    let mut rng = Rng::new(41);
    // (shape, axis, k)
    let cases: [(&[usize], i64, i64); 6] = [
        (&[3, 7], -1, 1),
        (&[3, 7], -1, 3),
        (&[3, 7], 1, 7),
        (&[3, 7], 0, 2),
        (&[2, 5, 4], 1, 5),
        (&[2, 5, 4], -3, 1),
    ];
    let mut case = 0;
    for dtype in NUMERIC {
        for (shape, axis, k) in cases {
            for largest in [1, 0] {
                case += 1;
                let layout = LAYOUTS[case % 3];
                // Values in [0, 4): ties go to the lower index.
                let x = int_vals(&mut rng, dtype, shape, 0, 4).with_layout(layout);
                let n = node(
                    "TopK",
                    2,
                    2,
                    &[
                        ("axis", int(axis)),
                        ("largest", int(largest)),
                        ("sorted", int(1)),
                    ],
                );
                check(
                    &ep,
                    &n,
                    11,
                    &[x, i64s(&[1], &[k])],
                    &format!(
                        "TopK {dtype} {shape:?} axis {axis} k {k} largest {largest} {layout:?}"
                    ),
                );
            }
        }
    }
}

#[test]
fn topk_opsets_sorted_and_errors() {
    let ep = gpu();
    let mut rng = Rng::new(42);
    let x = vals(&mut rng, DataType::Float32, &[4, 9], -5, 5);
    // Opset 1: k is an attribute.
    let n = node("TopK", 1, 2, &[("k", int(3))]);
    check(&ep, &n, 1, &[x.clone()], "TopK-1");
    // Opset 10: K as input (largest only).
    let n = node("TopK", 2, 2, &[("axis", int(0))]);
    check(&ep, &n, 10, &[x.clone(), i64s(&[1], &[2])], "TopK-10");
    // sorted = 0 (the order is then unspecified; both providers sort).
    let n = node("TopK", 2, 2, &[("sorted", int(0)), ("largest", int(0))]);
    check(&ep, &n, 11, &[x.clone(), i64s(&[1], &[4])], "TopK sorted=0");
    // k = 0: empty outputs.
    let n = node("TopK", 2, 2, &[]);
    let got = check(&ep, &n, 11, &[x.clone(), i64s(&[1], &[0])], "TopK k=0");
    assert_eq!(got[0].shape, vec![4, 0]);
    // Errors: k above the axis length, negative k, axis out of range.
    assert_refused(&ep, &n, 11, &[x.clone(), i64s(&[1], &[10])], "out of range");
    assert_refused(&ep, &n, 11, &[x.clone(), i64s(&[1], &[-1])], "out of range");
    let n = node("TopK", 2, 2, &[("axis", int(2))]);
    assert_refused(&ep, &n, 11, &[x, i64s(&[1], &[1])], "out of range");
}

#[test]
fn topk_nan_and_signed_zeros() {
    let ep = gpu();
    let (nan, inf) = (f64::NAN, f64::INFINITY);
    for len in [10usize, 20000] {
        let mut v: Vec<f64> = (0..len).map(|i| ((i * 13) % 7) as f64 - 3.0).collect();
        v[1] = nan;
        v[4] = -0.0;
        v[5] = 0.0;
        v[len - 2] = nan;
        v[6] = -inf;
        v[7] = inf;
        for dtype in [DataType::Float32, DataType::Float16, DataType::Float64] {
            let x = from_f64s(dtype, &[1, len], &v);
            for largest in [1, 0] {
                for k in [1i64, 3, len as i64] {
                    let n = node("TopK", 2, 2, &[("largest", int(largest))]);
                    check(
                        &ep,
                        &n,
                        11,
                        &[x.clone(), i64s(&[1], &[k])],
                        &format!("TopK NaN {dtype} len {len} k {k} largest {largest}"),
                    );
                }
            }
        }
    }
}

/// (dtype, shape, axis, the k to try, layout)
type LongTopK = (DataType, &'static [usize], i64, &'static [i64], Layout);

/// Rows longer than the shared-memory sort: radix select with the winners sorted in shared
/// memory (k <= 16384) or in global memory (k above).
#[test]
fn topk_long_rows_radix_select_and_global_sort() {
    let ep = gpu();
    let mut rng = Rng::new(43);
    let cases: [LongTopK; 7] = [
        (
            DataType::Float32,
            &[2, 20000],
            -1,
            &[1, 5, 100, 16384, 20000],
            Layout::Contiguous,
        ),
        (DataType::Int32, &[1, 100_000], 1, &[50], Layout::Contiguous),
        (
            DataType::Float16,
            &[3, 30000],
            -1,
            &[10, 17000],
            Layout::Padded,
        ),
        (DataType::Uint8, &[2, 20000], -1, &[300], Layout::Contiguous),
        (
            DataType::Float64,
            &[2, 17000],
            -1,
            &[17000, 7],
            Layout::Contiguous,
        ),
        (
            DataType::Int64,
            &[17000, 2],
            0,
            &[3, 16385],
            Layout::Contiguous,
        ),
        (DataType::BFloat16, &[20000, 3], 0, &[4], Layout::Reversed),
    ];
    for (dtype, shape, axis, ks, layout) in cases {
        // Few distinct values: long runs of ties around the k-th value.
        let x = int_vals(&mut rng, dtype, shape, -100, 100).with_layout(layout);
        for &k in ks {
            for largest in [1, 0] {
                let n = node(
                    "TopK",
                    2,
                    2,
                    &[("axis", int(axis)), ("largest", int(largest))],
                );
                check(
                    &ep,
                    &n,
                    11,
                    &[x.clone(), i64s(&[1], &[k])],
                    &format!("TopK {dtype} {shape:?} k {k} largest {largest} {layout:?}"),
                );
            }
        }
    }
}

// ---- capture ----

#[test]
fn reductions_capture_after_warming_and_replay() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(51);
    let x = vals(&mut rng, DataType::Float32, &[6, 40], -8, 8);
    let cases: Vec<(Node, u64, Vec<T>, bool)> = vec![
        // (node, opset, inputs, reads on the host)
        (
            node("ReduceSum", 2, 1, &[]),
            13,
            vec![x.clone(), i64s(&[1], &[1])],
            true,
        ),
        (
            node("ReduceMean", 1, 1, &[("axes", ints(&[0]))]),
            13,
            vec![x.clone()],
            false,
        ),
        (
            node("ArgMax", 1, 1, &[("axis", int(1))]),
            13,
            vec![x.clone()],
            false,
        ),
        (node("Softmax", 1, 1, &[]), 13, vec![x.clone()], false),
        (
            node("TopK", 2, 2, &[]),
            11,
            vec![x.clone(), i64s(&[1], &[3])],
            true,
        ),
        // A split reduction: partials and the finishing launch in the graph.
        (
            node("ReduceSum", 2, 1, &[]),
            13,
            vec![
                vals(&mut rng, DataType::Float32, &[1, 200_000], -8, 8),
                i64s(&[1], &[1]),
            ],
            true,
        ),
    ];
    let mut kernels: Vec<Box<dyn Kernel>> = Vec::new();
    let mut bounds = Vec::new();
    for (n, opset, inputs, host) in &cases {
        let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
        let k = ep.get_kernel(n, &shapes, *opset).unwrap();
        let supported = k.capture_support() == CaptureSupport::Supported;
        assert_eq!(
            supported, !host,
            "{}: capture support before warming",
            n.op_type
        );
        let mut b = Bound::new(&ep, inputs, &[]);
        let types = b.output_types(k.as_ref()).unwrap();
        b.set_outputs(&types);
        b.execute(k.as_ref()).unwrap();
        assert_eq!(
            k.capture_support(),
            CaptureSupport::Supported,
            "{}",
            n.op_type
        );
        kernels.push(k);
        bounds.push(b);
    }
    let refs: Vec<&dyn Kernel> = kernels.iter().map(|k| k.as_ref()).collect();
    runtime.begin_graph_capture(&refs).unwrap();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    runtime.end_graph_capture().unwrap();
    // New data; replay; the outputs are the CPU provider's for the new data.
    for ((_, _, inputs, _), b) in cases.iter().zip(bounds.iter_mut()) {
        let t = &inputs[0];
        b.set_input(0, vals(&mut rng, t.dtype, &t.shape, -8, 8));
    }
    runtime.replay_graph().unwrap();
    for ((n, opset, _, _), b) in cases.iter().zip(&bounds) {
        let got = b.read().unwrap();
        let ins: Vec<Option<&T>> = b.inputs.iter().map(|(t, _, _)| Some(t)).collect();
        let want = cpu_reference(n, *opset, &ins).unwrap();
        for (g, w) in got.iter().zip(&want) {
            assert_values(g, w, 1e-4, 1e-4, &format!("{} replayed", n.op_type));
        }
    }
    runtime.reset_graph().unwrap();
}

// ---- throughput ----

/// Times `runs` executions of a kernel on bound inputs; returns seconds per run.
fn time_kernel(ep: &CudaExecutionProvider, kernel: &dyn Kernel, b: &mut Bound<'_>) -> f64 {
    b.execute(kernel).unwrap();
    ep.runtime().synchronize().unwrap();
    let runs = 20;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        b.execute(kernel).unwrap();
    }
    ep.runtime().synchronize().unwrap();
    start.elapsed().as_secs_f64() / runs as f64
}

/// A [rows, cols] float32 tensor of a cheap deterministic pattern (values in [-5, 5)).
fn pattern(rows: usize, cols: usize) -> T {
    let n = rows * cols;
    let mut bytes = Vec::with_capacity(n * 4);
    for i in 0..n {
        let v = ((i * 7919) % 1000) as f32 / 100.0 - 5.0;
        bytes.extend_from_slice(&v.to_ne_bytes());
    }
    T::new(DataType::Float32, &[rows, cols], bytes)
}

#[test]
fn reduce_sum_and_softmax_throughput_64mb() {
    let ep = gpu();
    let row =
        |x: &T, r: usize, c: usize| -> Vec<f64> { (0..c).map(|j| get(x, r * c + j)).collect() };
    // ReduceSum over the last axis: [4096, 4096] and [16384, 1024], and everything.
    for (rows, cols) in [(4096usize, 4096usize), (16384, 1024), (1, 1 << 24)] {
        let x = pattern(rows, cols);
        let n = node("ReduceSum", 2, 1, &[("keepdims", int(0))]);
        let inputs = [x.clone(), i64s(&[1], &[1])];
        let mut kernel = ep.get_kernel(&n, &[x.shape.clone(), vec![1]], 13).unwrap();
        // The axes are an initializer: read once, not on every run.
        kernel.set_constant_inputs(&[false, true]);
        let mut b = Bound::new(&ep, &inputs, &[(DataType::Float32, vec![rows])]);
        let secs = time_kernel(&ep, kernel.as_ref(), &mut b);
        let gbs = (4 * rows * cols) as f64 / secs / 1e9;
        eprintln!(
            "ReduceSum [{rows}, {cols}] -> [{rows}] f32: {:.1} us, {gbs:.0} GB/s",
            secs * 1e6
        );
        let got = &b.read().unwrap()[0];
        for r in [0, rows / 2, rows - 1] {
            let want: f64 = row(&x, r, cols).iter().sum();
            let g = get(got, r);
            assert!(
                (g - want).abs() <= 1e-3 * (cols as f64).sqrt() * 5.0 + 1e-4 * want.abs(),
                "ReduceSum row {r}: got {g}, want {want}"
            );
        }
    }
    // ReduceMax over the last axis and ReduceSum over the first (the column kernel).
    for (op, axis) in [("ReduceMax", 1i64), ("ReduceSum", 0)] {
        let (rows, cols) = (4096usize, 4096usize);
        let x = pattern(rows, cols);
        let n = node(op, 2, 1, &[("keepdims", int(0))]);
        let inputs = [x.clone(), i64s(&[1], &[axis])];
        let opset = axes_input_opset(op);
        let mut kernel = ep
            .get_kernel(&n, &[x.shape.clone(), vec![1]], opset)
            .unwrap();
        kernel.set_constant_inputs(&[false, true]);
        let mut b = Bound::new(&ep, &inputs, &[(DataType::Float32, vec![4096])]);
        let secs = time_kernel(&ep, kernel.as_ref(), &mut b);
        let gbs = (4 * rows * cols) as f64 / secs / 1e9;
        eprintln!(
            "{op} [{rows}, {cols}] axis {axis} f32: {:.1} us, {gbs:.0} GB/s",
            secs * 1e6
        );
        let got = &b.read().unwrap()[0];
        for o in [0, 2047, 4095] {
            let v: Vec<f64> = if axis == 1 {
                row(&x, o, cols)
            } else {
                (0..rows).map(|r| get(&x, r * cols + o)).collect()
            };
            let want = if op == "ReduceMax" {
                v.iter().cloned().fold(f64::NEG_INFINITY, f64::max)
            } else {
                v.iter().sum()
            };
            let g = get(got, o);
            assert!(
                (g - want).abs() <= 1e-2 + 1e-4 * want.abs(),
                "{op} axis {axis} output {o}: got {g}, want {want}"
            );
        }
    }
    // LogSoftmax over the last axis.
    {
        let (rows, cols) = (16384usize, 1024usize);
        let x = pattern(rows, cols);
        let n = node("LogSoftmax", 1, 1, &[]);
        let kernel = ep.get_kernel(&n, &[x.shape.clone()], 13).unwrap();
        let mut b = Bound::new(&ep, &[x.clone()], &[(DataType::Float32, vec![rows, cols])]);
        let secs = time_kernel(&ep, kernel.as_ref(), &mut b);
        let gbs = (8 * rows * cols) as f64 / secs / 1e9;
        eprintln!(
            "LogSoftmax [{rows}, {cols}] f32: {:.1} us, {gbs:.0} GB/s (read + write)",
            secs * 1e6
        );
        let got = &b.read().unwrap()[0];
        for r in [0, rows - 1] {
            let v = row(&x, r, cols);
            let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let ls = v.iter().map(|a| (a - m).exp()).sum::<f64>().ln();
            for j in [0, cols / 3, cols - 1] {
                let want = v[j] - m - ls;
                let g = get(got, r * cols + j);
                assert!(
                    (g - want).abs() <= 1e-4 * (1.0 + want.abs()),
                    "LogSoftmax [{r}, {j}]: got {g}, want {want}"
                );
            }
        }
    }
    // Softmax over the last axis.
    for (rows, cols) in [
        (16384usize, 1024usize),
        (4096, 4096),
        (512, 32768),
        (256, 65536),
    ] {
        let x = pattern(rows, cols);
        let n = node("Softmax", 1, 1, &[]);
        let kernel = ep.get_kernel(&n, &[x.shape.clone()], 13).unwrap();
        let mut b = Bound::new(&ep, &[x.clone()], &[(DataType::Float32, vec![rows, cols])]);
        let secs = time_kernel(&ep, kernel.as_ref(), &mut b);
        let gbs = (8 * rows * cols) as f64 / secs / 1e9;
        eprintln!(
            "Softmax [{rows}, {cols}] f32: {:.1} us, {gbs:.0} GB/s (read + write)",
            secs * 1e6
        );
        let got = &b.read().unwrap()[0];
        for r in [0, rows - 1] {
            let v = row(&x, r, cols);
            let m = v.iter().cloned().fold(f64::NEG_INFINITY, f64::max);
            let s: f64 = v.iter().map(|a| (a - m).exp()).sum();
            for j in [0, cols / 3, cols - 1] {
                let want = (v[j] - m).exp() / s;
                let g = get(got, r * cols + j);
                assert!(
                    (g - want).abs() <= 1e-6 + 1e-4 * want,
                    "Softmax [{r}, {j}]: got {g}, want {want}"
                );
            }
        }
    }
}
