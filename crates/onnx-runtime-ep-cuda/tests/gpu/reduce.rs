//! The reduction family against the CPU provider on random inputs: ReduceSum ... ReduceSumSquare
//! (every dtype, axes sets, keepdims, noop_with_empty_axes, axes as input vs attribute, strided
//! layouts, empty reductions, split paths over long extents, the rows and columns kernels'
//! rounds), ArgMax/ArgMin (ties with select_last_index, NaN), errors naming the node, and
//! capture. Softmax/LogSoftmax/Hardmax and the 64 MB throughput test are in softmax.rs, TopK
//! in topk.rs; shared helpers in reduce_common.rs. Half types are checked against the CPU
//! provider's float32 result.

use super::harness::*;
use super::reduce_common::*;
use onnx_runtime_ep_api::{CaptureSupport, ExecutionProvider, Kernel};
use onnx_runtime_ir::{DataType, Node};

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
pub(super) fn axes_input_opset(op: &str) -> u64 {
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
