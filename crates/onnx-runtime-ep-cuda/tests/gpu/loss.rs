//! NegativeLogLikelihoodLoss, SoftmaxCrossEntropyLoss, CumProd and BitCast against the CPU
//! provider (`cpu_reference`) on random inputs: every reduction, weights given and omitted,
//! ignore_index hit and missed, rank 2 / 3 / 4 scores, int32 and int64 targets, strided
//! layouts, half types against a float32 reference, and device-reported bad targets.

use super::harness::*;
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

/// `t`'s values stored as `dtype` (the half types' float32 reference and back).
fn as_dtype(t: &T, dtype: DataType) -> T {
    let v: Vec<f64> = (0..t.numel()).map(|i| get(t, i)).collect();
    from_f64s(dtype, &t.shape, &v).with_layout(t.layout)
}

/// Runs `n` on the GPU with `inputs` (None: optional input omitted, which must be trailing
/// or the node must not wire it), checks `output_types` against the CPU reference's outputs
/// and returns (gpu outputs, reference outputs). `reference` gives the CPU's inputs (the
/// float32 versions for half types); the reference outputs are converted to the GPU output
/// dtype.
fn run_both(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[T],
    reference: &[T],
    what: &str,
) -> (Vec<T>, Vec<T>) {
    let refs: Vec<Option<&T>> = reference.iter().map(Some).collect();
    let want = cpu_reference(n, opset, &refs).unwrap_or_else(|e| panic!("{what}: cpu: {e}"));
    // Outputs of the reference's (float32) input type go back to the GPU's input type.
    let (ref_t, gpu_t) = (reference[0].dtype, inputs[0].dtype);
    let want: Vec<T> = want
        .iter()
        .map(|w| {
            if ref_t != gpu_t && w.dtype == ref_t {
                as_dtype(w, gpu_t)
            } else {
                w.clone()
            }
        })
        .collect();
    let types: Vec<(DataType, Vec<usize>)> =
        want.iter().map(|w| (w.dtype, w.shape.clone())).collect();
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep
        .get_kernel(n, &shapes, opset)
        .unwrap_or_else(|e| panic!("{what}: build: {e}"));
    let mut bound = Bound::new(ep, inputs, &types);
    let said = bound
        .output_types(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: output_types: {e}"));
    assert_eq!(said, types, "{what}: output_types vs the CPU's outputs");
    bound
        .execute(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: execute: {e}"));
    let got = bound.read().unwrap_or_else(|e| panic!("{what}: read: {e}"));
    (got, want)
}

fn reduction(r: &str) -> (&'static str, Attribute) {
    ("reduction", Attribute::String(r.into()))
}

/// Random scores of `shape` in [-3, 3) and targets of shape (N, d1..) in [0, C), int32 when
/// `i32_targets`.
fn scores_and_targets(
    rng: &mut Rng,
    dtype: DataType,
    shape: &[usize],
    i32_targets: bool,
) -> (T, T, Vec<i64>) {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| (rng.range(-3000, 3000) as f64) / 1000.0)
        .collect();
    let x = from_f64s(dtype, shape, &v);
    let mut tshape = vec![shape[0]];
    tshape.extend_from_slice(&shape[2..]);
    let tn: usize = tshape.iter().product();
    let t: Vec<i64> = (0..tn).map(|_| rng.below(shape[1]) as i64).collect();
    let tt = if i32_targets {
        i32s(&tshape, &t.iter().map(|&v| v as i32).collect::<Vec<_>>())
    } else {
        i64s(&tshape, &t)
    };
    (x, tt, t)
}

fn weights(rng: &mut Rng, dtype: DataType, c: usize) -> T {
    let v: Vec<f64> = (0..c).map(|_| 0.25 + rng.below(8) as f64 * 0.25).collect();
    from_f64s(dtype, &[c], &v)
}

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];

/// Every reduction x weights given/omitted x ignore_index none/hit/missed on `shape`, for
/// NLL or SCE (with 1 or 2 outputs), comparing against the CPU.
#[allow(clippy::too_many_arguments)]
fn loss_matrix(
    ep: &CudaExecutionProvider,
    op: &str,
    outputs: usize,
    opset: u64,
    dtype: DataType,
    shape: &[usize],
    seed: u64,
    rtol: f64,
    atol: f64,
) {
    let mut rng = Rng::new(seed);
    let c = shape[1];
    let mut case = 0usize;
    for red in ["none", "sum", "mean"] {
        for with_w in [false, true] {
            for ignore in 0..3 {
                case += 1;
                let (x, t, tv) = scores_and_targets(&mut rng, dtype, shape, case.is_multiple_of(2));
                let x = x.with_layout(LAYOUTS[case % 3]);
                let t = t.with_layout(LAYOUTS[(case + 1) % 3]);
                let mut attrs = vec![reduction(red)];
                match ignore {
                    1 => attrs.push(("ignore_index", Attribute::Int(tv[tv.len() / 2]))),
                    2 => attrs.push(("ignore_index", Attribute::Int(-100))),
                    _ => {}
                }
                let mut inputs = vec![x, t];
                if with_w {
                    inputs.push(weights(&mut rng, dtype, c).with_layout(LAYOUTS[case % 2]));
                }
                let n = node(op, inputs.len(), outputs, &attrs);
                let reference: Vec<T> = inputs
                    .iter()
                    .map(|t| {
                        if matches!(t.dtype, DataType::Float16 | DataType::BFloat16) {
                            as_dtype(t, DataType::Float32)
                        } else {
                            t.clone()
                        }
                    })
                    .collect();
                let what = format!(
                    "{op} {dtype} {shape:?} reduction={red} weights={with_w} ignore={ignore} \
                     targets={} outputs={outputs}",
                    inputs[1].dtype
                );
                let (got, want) = run_both(ep, &n, opset, &inputs, &reference, &what);
                assert_eq!(got.len(), want.len(), "{what}: output count");
                for (k, (g, w)) in got.iter().zip(&want).enumerate() {
                    assert_close_to(g, w, rtol, atol, &format!("{what}: output {k}"));
                }
            }
        }
    }
}

#[test]
fn nll_every_reduction_weights_ignore_rank2_rank4_f32_f64() {
    let ep = gpu();
    for (i, opset) in [12u64, 13, 22].into_iter().enumerate() {
        loss_matrix(
            &ep,
            "NegativeLogLikelihoodLoss",
            1,
            opset,
            DataType::Float32,
            &[6, 5],
            1 + i as u64,
            1e-5,
            1e-5,
        );
    }
    loss_matrix(
        &ep,
        "NegativeLogLikelihoodLoss",
        1,
        22,
        DataType::Float32,
        &[2, 3, 4, 5],
        4,
        1e-5,
        1e-5,
    );
    loss_matrix(
        &ep,
        "NegativeLogLikelihoodLoss",
        1,
        13,
        DataType::Float64,
        &[3, 4, 5],
        5,
        1e-12,
        1e-12,
    );
}

#[test]
fn nll_half_types_vs_f32_reference() {
    let ep = gpu();
    loss_matrix(
        &ep,
        "NegativeLogLikelihoodLoss",
        1,
        22,
        DataType::Float16,
        &[2, 3, 4, 5],
        6,
        2e-3,
        2e-3,
    );
    loss_matrix(
        &ep,
        "NegativeLogLikelihoodLoss",
        1,
        22,
        DataType::BFloat16,
        &[5, 4],
        7,
        1e-2,
        1e-2,
    );
}

#[test]
fn sce_with_and_without_log_prob_rank2_rank4_f32_f64() {
    let ep = gpu();
    for outputs in [1, 2] {
        loss_matrix(
            &ep,
            "SoftmaxCrossEntropyLoss",
            outputs,
            13,
            DataType::Float32,
            &[6, 5],
            10 + outputs as u64,
            1e-5,
            1e-5,
        );
        loss_matrix(
            &ep,
            "SoftmaxCrossEntropyLoss",
            outputs,
            12,
            DataType::Float32,
            &[2, 3, 4, 5],
            12 + outputs as u64,
            1e-5,
            1e-5,
        );
    }
    loss_matrix(
        &ep,
        "SoftmaxCrossEntropyLoss",
        2,
        13,
        DataType::Float64,
        &[3, 4, 5],
        15,
        1e-12,
        1e-12,
    );
}

/// Many classes: the warp-per-position path (few inner positions) and the thread path (many
/// inner positions), both with log_prob.
#[test]
fn sce_many_classes_warp_and_thread_paths() {
    let ep = gpu();
    loss_matrix(
        &ep,
        "SoftmaxCrossEntropyLoss",
        2,
        13,
        DataType::Float32,
        &[7, 100],
        20,
        1e-5,
        1e-5,
    );
    loss_matrix(
        &ep,
        "SoftmaxCrossEntropyLoss",
        2,
        13,
        DataType::Float32,
        &[3, 50, 2],
        21,
        1e-5,
        1e-5,
    );
    loss_matrix(
        &ep,
        "SoftmaxCrossEntropyLoss",
        2,
        13,
        DataType::Float32,
        &[2, 40, 40],
        22,
        1e-5,
        1e-5,
    );
    loss_matrix(
        &ep,
        "SoftmaxCrossEntropyLoss",
        2,
        13,
        DataType::Float64,
        &[5, 1000],
        23,
        1e-12,
        1e-12,
    );
}

#[test]
fn sce_half_types_vs_f32_reference() {
    let ep = gpu();
    loss_matrix(
        &ep,
        "SoftmaxCrossEntropyLoss",
        2,
        13,
        DataType::Float16,
        &[2, 3, 4, 5],
        30,
        3e-3,
        3e-3,
    );
    loss_matrix(
        &ep,
        "SoftmaxCrossEntropyLoss",
        2,
        13,
        DataType::BFloat16,
        &[6, 40],
        31,
        2e-2,
        2e-2,
    );
}

/// Sum and mean over more positions than one block (and more blocks than the reducing grid
/// has, so the grid-stride loop runs) reduce exactly once on the device.
#[test]
fn loss_sum_mean_across_many_blocks() {
    let ep = gpu();
    let mut rng = Rng::new(40);
    for (op, shape) in [
        ("NegativeLogLikelihoodLoss", vec![3000usize, 7]),
        ("SoftmaxCrossEntropyLoss", vec![200_000, 3]),
        ("SoftmaxCrossEntropyLoss", vec![4, 3, 100, 50]),
    ] {
        for red in ["sum", "mean"] {
            let (x, t, _) = scores_and_targets(&mut rng, DataType::Float32, &shape, true);
            let w = weights(&mut rng, DataType::Float32, shape[1]);
            let n = node(op, 3, 1, &[reduction(red)]);
            let inputs = [x, t, w];
            let what = format!("{op} {shape:?} {red}");
            let (got, want) = run_both(&ep, &n, 13, &inputs, &inputs, &what);
            assert_close_to(&got[0], &want[0], 1e-4, 1e-4, &what);
        }
    }
}

/// A target outside [0, C) that is not ignore_index is reported (naming the node) instead of
/// read, and the error is cleared once reported.
#[test]
fn loss_out_of_range_target_is_reported_not_read() {
    let ep = gpu();
    let mut rng = Rng::new(50);
    for op in ["NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss"] {
        for (bad, red) in [(5i64, "none"), (-1, "mean"), (1 << 40, "sum")] {
            let (x, _, _) = scores_and_targets(&mut rng, DataType::Float32, &[3, 5], false);
            let t = i64s(&[3], &[0, bad, 2]);
            let n = node(
                op,
                2,
                1,
                &[reduction(red), ("ignore_index", Attribute::Int(3))],
            );
            let out = if red == "none" { vec![3] } else { vec![] };
            let err = run(
                &ep,
                &n,
                13,
                &[x.clone(), t],
                &[(DataType::Float32, out.clone())],
            )
            .expect_err("an out-of-range target must fail");
            let text = err.to_string();
            assert!(
                text.contains(&format!("test_{op}")) && text.contains("out of range"),
                "{op} target {bad}: {text}"
            );
            // The ignored class is fine, and the error word is clear again.
            let t = i32s(&[3], &[3, 4, 0]);
            run(&ep, &n, 13, &[x, t], &[(DataType::Float32, out)])
                .unwrap_or_else(|e| panic!("{op} after the error: {e}"));
        }
    }
}

#[test]
fn loss_bad_shapes_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(60);
    let (x, _, _) = scores_and_targets(&mut rng, DataType::Float32, &[3, 5, 2], true);
    let n = node("NegativeLogLikelihoodLoss", 2, 1, &[]);
    // Target shape (3, 5) instead of (3, 2).
    let t = i64s(&[3, 5], &[0; 15]);
    let e = run(&ep, &n, 13, &[x.clone(), t], &[(DataType::Float32, vec![])]).unwrap_err();
    assert!(
        e.to_string().contains("test_NegativeLogLikelihoodLoss"),
        "{e}"
    );
    // Weight of the wrong length.
    let n3 = node("SoftmaxCrossEntropyLoss", 3, 1, &[]);
    let t = i64s(&[3, 2], &[0; 6]);
    let w = weights(&mut rng, DataType::Float32, 4);
    let e = run(&ep, &n3, 13, &[x, t, w], &[(DataType::Float32, vec![])]).unwrap_err();
    assert!(
        e.to_string().contains("test_SoftmaxCrossEntropyLoss"),
        "{e}"
    );
    // Rank-1 scores.
    let x1 = from_f64s(DataType::Float32, &[4], &[1.0, 2.0, 3.0, 4.0]);
    let e = run(
        &ep,
        &n,
        13,
        &[x1, i64s(&[4], &[0; 4])],
        &[(DataType::Float32, vec![])],
    )
    .unwrap_err();
    assert!(
        e.to_string().contains("test_NegativeLogLikelihoodLoss"),
        "{e}"
    );
    // An unknown reduction fails at build time.
    let bad = node("NegativeLogLikelihoodLoss", 2, 1, &[reduction("max")]);
    assert!(ep.get_kernel(&bad, &[vec![3, 5], vec![3]], 13).is_err());
}

// ---- CumProd ----

#[test]
fn cumprod_every_dtype_exclusive_reverse_negative_axis_strided() {
    let ep = gpu();
    let mut rng = Rng::new(70);
    let dtypes = [
        DataType::Float32,
        DataType::Float64,
        DataType::Float16,
        DataType::BFloat16,
        DataType::Int32,
        DataType::Int64,
        DataType::Uint32,
        DataType::Uint64,
    ];
    let shape = [3usize, 4, 5];
    let mut case = 0usize;
    for dtype in dtypes {
        for (ex, rev) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            for axis in [-1i64, 1, -3] {
                case += 1;
                let n: usize = shape.iter().product();
                let v: Vec<f64> = (0..n)
                    .map(|_| {
                        if dtype.is_float() {
                            0.5 + rng.below(9) as f64 * 0.125
                        } else if matches!(dtype, DataType::Uint32 | DataType::Uint64) {
                            rng.range(1, 5) as f64
                        } else {
                            rng.range(-3, 4) as f64
                        }
                    })
                    .collect();
                let x = from_f64s(dtype, &shape, &v).with_layout(LAYOUTS[case % 3]);
                let a = if case.is_multiple_of(2) {
                    i64s(&[], &[axis])
                } else {
                    i32s(&[1], &[axis as i32])
                };
                let nd = node(
                    "CumProd",
                    2,
                    1,
                    &[
                        ("exclusive", Attribute::Int(ex)),
                        ("reverse", Attribute::Int(rev)),
                    ],
                );
                let reference = if matches!(dtype, DataType::Float16 | DataType::BFloat16) {
                    vec![as_dtype(&x, DataType::Float32), a.clone()]
                } else {
                    vec![x.clone(), a.clone()]
                };
                let what = format!("CumProd {dtype} exclusive={ex} reverse={rev} axis={axis}");
                let (got, want) = run_both(&ep, &nd, 26, &[x, a], &reference, &what);
                let tol = match dtype {
                    DataType::Float16 => 2e-3,
                    DataType::BFloat16 => 1e-2,
                    DataType::Float32 => 1e-6,
                    _ => 0.0,
                };
                assert_close_to(&got[0], &want[0], tol, tol, &what);
            }
        }
    }
}

#[test]
fn cumprod_integers_wrap_and_bad_axis_is_an_error() {
    let ep = gpu();
    let nd = node("CumProd", 2, 1, &[]);
    let x = i32s(&[4], &[i32::MAX, 3, 2, -7]);
    let a = i64s(&[], &[0]);
    let (got, want) = run_both(
        &ep,
        &nd,
        26,
        &[x.clone(), a.clone()],
        &[x.clone(), a],
        "wrap",
    );
    assert_same(&got[0], &want[0], "CumProd i32 wrap");
    let x64 = i64s(&[3], &[i64::MAX, 5, -3]);
    let a = i32s(&[1], &[-1]);
    let (got, want) = run_both(&ep, &nd, 26, &[x64.clone(), a.clone()], &[x64, a], "wrap64");
    assert_same(&got[0], &want[0], "CumProd i64 wrap");
    let e = run(
        &ep,
        &nd,
        26,
        &[x, i64s(&[], &[1])],
        &[(DataType::Int32, vec![4])],
    )
    .unwrap_err();
    assert!(e.to_string().contains("test_CumProd"), "{e}");
}

// ---- BitCast ----

#[test]
fn bitcast_between_same_width_types_strided() {
    let ep = gpu();
    let mut rng = Rng::new(80);
    let pairs = [
        (DataType::Float32, DataType::Int32),
        (DataType::Int32, DataType::Float32),
        (DataType::Uint32, DataType::Float32),
        (DataType::Uint8, DataType::Int8),
        (DataType::Int8, DataType::Uint8),
        (DataType::Float16, DataType::BFloat16),
        (DataType::Float16, DataType::Int16),
        (DataType::Float64, DataType::Int64),
        (DataType::Uint64, DataType::Float64),
        (DataType::Float32, DataType::Float32),
    ];
    for (case, (from, to)) in pairs.into_iter().enumerate() {
        let x = random_bytes(&mut rng, from, &[3, 4, 5]).with_layout(LAYOUTS[case % 3]);
        let nd = node(
            "BitCast",
            1,
            1,
            &[("to", Attribute::Int(to.onnx_code() as i64))],
        );
        let what = format!("BitCast {from} -> {to}");
        let (got, want) = run_both(&ep, &nd, 26, &[x.clone()], &[x], &what);
        assert_same(&got[0], &want[0], &what);
    }
}

#[test]
fn bitcast_width_mismatch_is_an_error_naming_the_node() {
    let ep = gpu();
    let x = from_f64s(DataType::Float32, &[2], &[1.5, -2.0]);
    let nd = node(
        "BitCast",
        1,
        1,
        &[("to", Attribute::Int(DataType::Int64.onnx_code() as i64))],
    );
    let e = run(&ep, &nd, 26, &[x], &[(DataType::Int64, vec![2])]).unwrap_err();
    assert!(e.to_string().contains("test_BitCast"), "{e}");
}
