//! Softmax/LogSoftmax/Hardmax against the CPU provider (opset 11 vs 13 semantics, register /
//! loop / column paths, every register variant, special values, errors naming the node), and
//! the throughput of ReduceSum and Softmax on 64 MB tensors. Half types are checked against
//! the CPU provider's float32 result.

use super::harness::*;
use super::reduce::axes_input_opset;
use super::reduce_common::*;
use onnx_runtime_ep_api::{ExecutionProvider, Kernel};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType};

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
