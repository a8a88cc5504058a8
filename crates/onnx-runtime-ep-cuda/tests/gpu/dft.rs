//! DFT (opsets 17 and 20) and STFT against the CPU provider: the onnx node-suite cases
//! (dft, dft_axis, dft_inverse, opset 20's axis input, stft, stft_with_window), real and
//! complex inputs, forward / inverse / one-sided (including the inverse one-sided real
//! output), dft_length padding and truncation, every axis (negative too), lengths of 1, odd,
//! prime, powers of two (the shared-memory FFT) up to 8192 and beyond (the direct sum), every
//! float dtype (compared with the CPU's output of the same dtype: a rounding step apart at
//! most), strided inputs, and bad inputs as errors naming the node.

use super::harness::*;
use onnx_runtime_ir::{Attribute, DataType, Node};

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

fn dft_node(opset: u64, inputs: [bool; 3], inverse: i64, onesided: i64, axis: Option<i64>) -> Node {
    let mut attrs = vec![
        ("inverse", Attribute::Int(inverse)),
        ("onesided", Attribute::Int(onesided)),
    ];
    if let Some(a) = axis {
        attrs.push(("axis", Attribute::Int(a)));
    }
    let count = if opset < 20 { 2 } else { 3 };
    let mut n = node("DFT", count, 1, &attrs);
    for k in 1..count {
        if !inputs[k] {
            n.inputs[k] = None;
        }
    }
    while n.inputs.last() == Some(&None) {
        n.inputs.pop();
    }
    n
}

/// Tolerances against the CPU output of the same dtype, for transforms summing `terms`
/// values of magnitude <= 1.
fn tol(dtype: DataType, terms: usize) -> (f64, f64) {
    let t = terms.max(1) as f64;
    match dtype {
        DataType::Float64 => (1e-10, 1e-12 * t),
        DataType::Float32 => (2e-6, 2e-7 * t),
        DataType::Float16 => (2e-3, 1e-3 * t.sqrt()),
        _ => (1.6e-2, 1e-2 * t.sqrt()),
    }
}

fn check(n: &Node, opset: u64, inputs: &[Option<T>], terms: usize, what: &str) -> T {
    let want = reference(n, opset, inputs, what);
    let got = gpu_run(&gpu(), n, opset, inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    let dtype = want[0].dtype;
    let (rtol, atol) = tol(dtype, terms);
    assert_close_to(&got[0], &want[0], rtol, atol, what);
    got.into_iter().next().unwrap()
}

#[test]
fn dft_onnx_node_suite() {
    let x: Vec<f64> = (0..100).map(|v| v as f64).collect();
    let real = from_f64s(DataType::Float32, &[1, 10, 10, 1], &x);
    // dft / dft_axis (opset 17 attribute), dft_opset19-style axis inputs (opset 20).
    check(
        &dft_node(17, [true, false, false], 0, 0, Some(1)),
        17,
        &[Some(real.clone())],
        100,
        "dft",
    );
    check(
        &dft_node(17, [true, false, false], 0, 0, Some(2)),
        17,
        &[Some(real.clone())],
        100,
        "dft_axis",
    );
    for axis in [1i64, 2, -2] {
        check(
            &dft_node(20, [true, false, true], 0, 0, None),
            20,
            &[Some(real.clone()), None, Some(i64s(&[], &[axis]))],
            100,
            &format!("dft opset 20 axis input {axis}"),
        );
    }
    // dft_inverse: a complex input.
    let c: Vec<f64> = (0..200).map(|v| (v % 17) as f64 - 8.0).collect();
    let cx = from_f64s(DataType::Float32, &[1, 10, 10, 2], &c);
    check(
        &dft_node(17, [true, false, false], 1, 0, Some(1)),
        17,
        &[Some(cx.clone())],
        100,
        "dft_inverse",
    );
    check(
        &dft_node(20, [true, false, false], 1, 0, None),
        20,
        &[Some(cx)],
        100,
        "dft_inverse opset 20 default axis",
    );
}

#[test]
fn dft_lengths_modes_and_padding() {
    let mut rng = Rng::new(91);
    for n in [1usize, 2, 3, 5, 7, 8, 12, 16, 31, 64, 100, 128, 257] {
        for comps in [1usize, 2] {
            for (inverse, onesided) in [(0, 0), (0, 1), (1, 0), (1, 1)] {
                for len in [
                    None,
                    Some(n),
                    Some(n + 3),
                    Some((n / 2).max(1)),
                    Some(2 * n),
                ] {
                    if inverse == 1 && onesided == 1 && len.is_none() && n == 1 {
                        continue; // length 0: an error, tested below
                    }
                    let what = format!(
                        "DFT n {n} comps {comps} inverse {inverse} onesided {onesided} len {len:?}"
                    );
                    let x = uniform(&mut rng, DataType::Float32, &[2, n, comps], -1.0, 1.0);
                    let nd = dft_node(20, [true, len.is_some(), false], inverse, onesided, None);
                    let inputs = vec![Some(x), len.map(|l| i64s(&[], &[l as i64]))];
                    let terms = len.unwrap_or(n).max(2 * n);
                    check(&nd, 20, &inputs, terms, &what);
                }
            }
        }
    }
}

#[test]
fn dft_long_transforms_fft_and_direct() {
    let mut rng = Rng::new(92);
    // Powers of two up to the FFT's limit; past it (16384) and long non-powers run direct.
    let all: &[(i64, i64)] = &[(0, 0), (0, 1), (1, 1)];
    let one: &[(i64, i64)] = &[(0, 1)];
    for (n, len, modes) in [
        (2048usize, None, all),
        (8192, None, one),
        (4096, Some(16384i64), one),
        (5000, None, one),
        (4099, Some(4097), all),
    ] {
        for &(inverse, onesided) in modes {
            let what = format!("DFT long n {n} len {len:?} inverse {inverse} onesided {onesided}");
            let x = uniform(&mut rng, DataType::Float32, &[1, n, 2], -1.0, 1.0);
            let nd = dft_node(20, [true, len.is_some(), false], inverse, onesided, None);
            let inputs = vec![Some(x), len.map(|l| i64s(&[], &[l]))];
            check(&nd, 20, &inputs, 2 * n, &what);
        }
    }
}

#[test]
fn dft_every_axis_dtype_and_layout() {
    let mut rng = Rng::new(93);
    let shape = [3usize, 8, 5, 2];
    for dtype in FLOATS {
        for axis in [0i64, 1, 2, -2, -3, -4] {
            for layout in [Layout::Contiguous, Layout::Reversed, Layout::Padded] {
                for (inverse, onesided) in [(0, 0), (1, 1)] {
                    let what = format!(
                        "DFT {dtype} axis {axis} {layout:?} inverse {inverse} onesided {onesided}"
                    );
                    let x = uniform(&mut rng, dtype, &shape, -1.0, 1.0).with_layout(layout);
                    check(
                        &dft_node(17, [true, false, false], inverse, onesided, Some(axis)),
                        17,
                        &[Some(x)],
                        16,
                        &what,
                    );
                }
            }
        }
    }
}

#[test]
fn dft_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let x = from_f64s(DataType::Float32, &[2, 4, 3], &[1.0; 24]);
    expect_err(
        &ep,
        &dft_node(17, [true, false, false], 0, 0, Some(1)),
        17,
        &[Some(x)],
        "must end in a dimension of 1",
    );
    let x = from_f64s(DataType::Float32, &[2, 4, 2], &[1.0; 16]);
    expect_err(
        &ep,
        &dft_node(17, [true, false, false], 0, 0, Some(2)),
        17,
        &[Some(x.clone())],
        "axis may not be the last",
    );
    expect_err(
        &ep,
        &dft_node(17, [true, false, false], 0, 0, Some(3)),
        17,
        &[Some(x.clone())],
        "out of range",
    );
    expect_err(
        &ep,
        &dft_node(17, [true, true, false], 0, 0, Some(1)),
        17,
        &[Some(x), Some(i64s(&[], &[0]))],
        "must be positive",
    );
    let one = from_f64s(DataType::Float32, &[2, 1, 2], &[1.0; 4]);
    expect_err(
        &ep,
        &dft_node(17, [true, false, false], 1, 1, Some(1)),
        17,
        &[Some(one)],
        "length is 0",
    );
}

fn stft_node(inputs: [bool; 4], onesided: Option<i64>) -> Node {
    let attrs: Vec<(&str, Attribute)> = onesided
        .map(|o| vec![("onesided", Attribute::Int(o))])
        .unwrap_or_default();
    let mut n = node("STFT", 4, 1, &attrs);
    for k in 0..4 {
        if !inputs[k] {
            n.inputs[k] = None;
        }
    }
    while n.inputs.last() == Some(&None) {
        n.inputs.pop();
    }
    n
}

/// A Hann window of `len` samples.
fn hann(dtype: DataType, len: usize) -> T {
    let v: Vec<f64> = (0..len)
        .map(|i| 0.5 - 0.5 * (2.0 * std::f64::consts::PI * i as f64 / len as f64).cos())
        .collect();
    from_f64s(dtype, &[len], &v)
}

#[test]
fn stft_onnx_node_suite() {
    let mut rng = Rng::new(94);
    let x = uniform(&mut rng, DataType::Float32, &[1, 128, 1], -1.0, 1.0);
    check(
        &stft_node([true, true, false, true], None),
        17,
        &[
            Some(x.clone()),
            Some(i64s(&[], &[8])),
            None,
            Some(i64s(&[], &[16])),
        ],
        16,
        "stft",
    );
    check(
        &stft_node([true, true, true, false], None),
        17,
        &[
            Some(x),
            Some(i64s(&[], &[8])),
            Some(hann(DataType::Float32, 16)),
        ],
        16,
        "stft_with_window",
    );
}

#[test]
fn stft_modes_windows_dtypes_and_layouts() {
    let mut rng = Rng::new(95);
    for dtype in FLOATS {
        for comps in [1usize, 2] {
            for (flen, step) in [(10usize, 3i64), (16, 5), (1, 1), (33, 33), (100, 7)] {
                for window in [false, true] {
                    for onesided in [None, Some(0), Some(1)] {
                        {
                            let layout = if window {
                                Layout::Padded
                            } else {
                                Layout::Reversed
                            };
                            let what = format!(
                                "STFT {dtype} comps {comps} flen {flen} step {step} window \
                                 {window} onesided {onesided:?} {layout:?}"
                            );
                            let x = uniform(&mut rng, dtype, &[2, 100, comps], -1.0, 1.0)
                                .with_layout(layout);
                            let w = window.then(|| uniform(&mut rng, dtype, &[flen], 0.0, 1.0));
                            // With a window, frame_length is sometimes left to its length.
                            let give_len = !window || flen % 2 == 0;
                            let nd = stft_node([true, true, window, give_len], onesided);
                            let inputs = vec![
                                Some(x),
                                Some(i64s(&[], &[step])),
                                w,
                                give_len.then(|| i64s(&[], &[flen as i64])),
                            ];
                            check(&nd, 17, &inputs, flen, &what);
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn stft_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let x = from_f64s(DataType::Float32, &[1, 20, 1], &[0.5; 20]);
    expect_err(
        &ep,
        &stft_node([true, true, false, true], None),
        17,
        &[
            Some(x.clone()),
            Some(i64s(&[], &[2])),
            None,
            Some(i64s(&[], &[30])),
        ],
        "must be positive and fit",
    );
    expect_err(
        &ep,
        &stft_node([true, true, true, true], None),
        17,
        &[
            Some(x.clone()),
            Some(i64s(&[], &[2])),
            Some(hann(DataType::Float32, 8)),
            Some(i64s(&[], &[10])),
        ],
        "window has 8 values",
    );
    expect_err(
        &ep,
        &stft_node([true, true, false, false], None),
        17,
        &[Some(x), Some(i64s(&[], &[2]))],
        "give frame_length or window",
    );
}
