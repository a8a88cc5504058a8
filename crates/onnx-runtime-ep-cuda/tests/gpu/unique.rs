//! Unique against the CPU provider, all four outputs compared exactly: the onnx node-suite
//! cases (sorted and not, with and without an axis, 3-D, negative axis), every numeric dtype
//! and bool with many duplicates, every axis of a 3-D tensor, strided inputs, sorts larger
//! than one shared-memory tile, floats with NaN / -0.0 / infinities (groups keep the first
//! occurrence's bits), empty inputs, nodes with fewer outputs, and a bad axis as an error.

use super::harness::*;
use onnx_runtime_ir::{Attribute, DataType, Node};

const DTYPES: [DataType; 13] = [
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
    DataType::Bool,
];

fn unique_node(sorted: Option<i64>, axis: Option<i64>, outputs: usize) -> Node {
    let mut attrs = Vec::new();
    if let Some(s) = sorted {
        attrs.push(("sorted", Attribute::Int(s)));
    }
    if let Some(a) = axis {
        attrs.push(("axis", Attribute::Int(a)));
    }
    node("Unique", 1, outputs, &attrs)
}

/// Runs on the GPU and the CPU; every output must be identical.
fn check(n: &Node, x: T, what: &str) -> Vec<T> {
    let inputs = vec![Some(x)];
    let want = reference(n, 11, &inputs, what);
    let got = gpu_run(&gpu(), n, 11, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_eq!(got.len(), n.outputs.len(), "{what}: output count");
    let names = ["Y", "indices", "inverse_indices", "counts"];
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_same(g, w, &format!("{what}: output {k} ({})", names[k]));
    }
    got
}

#[test]
fn unique_onnx_node_suite() {
    let x = from_f64s(DataType::Float32, &[6], &[2.0, 1.0, 1.0, 3.0, 4.0, 3.0]);
    let got = check(
        &unique_node(Some(0), None, 4),
        x.clone(),
        "not_sorted_without_axis",
    );
    assert_eq!(
        (0..4).map(|i| get(&got[0], i)).collect::<Vec<_>>(),
        vec![2.0, 1.0, 3.0, 4.0]
    );
    check(&unique_node(None, None, 4), x, "sorted_without_axis");
    let x = from_f64s(
        DataType::Float32,
        &[3, 3],
        &[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0, 4.0],
    );
    check(&unique_node(Some(1), Some(0), 4), x, "sorted_with_axis");
    let x = from_f64s(
        DataType::Float32,
        &[2, 4, 2],
        &[
            1.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0, 2.0, 1.0, 0.0, 1.0,
        ],
    );
    check(&unique_node(Some(1), Some(1), 4), x, "sorted_with_axis_3d");
    let x = from_f64s(
        DataType::Float32,
        &[3, 3],
        &[1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 2.0, 3.0, 3.0],
    );
    check(
        &unique_node(Some(1), Some(-1), 4),
        x,
        "sorted_with_negative_axis",
    );
}

#[test]
fn unique_every_dtype_axis_and_order() {
    let mut rng = Rng::new(81);
    for dtype in DTYPES {
        for sorted in [None, Some(0)] {
            for axis in [None, Some(0), Some(1), Some(2), Some(-1)] {
                let what = format!("Unique {dtype} sorted {sorted:?} axis {axis:?}");
                // Few distinct values so slices repeat along every axis.
                let x = if axis.is_some() {
                    random_numeric(&mut rng, dtype, &[3, 6, 2], 0, 2)
                } else {
                    random_numeric(&mut rng, dtype, &[4, 5, 3], -3, 4)
                };
                check(&unique_node(sorted, axis, 4), x, &what);
            }
        }
    }
}

#[test]
fn unique_strided_inputs() {
    let mut rng = Rng::new(82);
    for layout in [Layout::Reversed, Layout::Padded] {
        for axis in [None, Some(0), Some(2)] {
            for sorted in [1, 0] {
                let what = format!("Unique {layout:?} axis {axis:?} sorted {sorted}");
                let x =
                    random_numeric(&mut rng, DataType::Int32, &[4, 3, 5], 0, 2).with_layout(layout);
                check(&unique_node(Some(sorted), axis, 4), x, &what);
            }
        }
    }
}

#[test]
fn unique_large_inputs_span_several_sort_tiles() {
    let mut rng = Rng::new(83);
    for (shape, axis, lo, hi) in [
        (vec![5000usize], None, -700i64, 700i64),
        (vec![3000], None, 0, 3),
        (vec![2500, 2], Some(0), 0, 40),
        (vec![2, 2049], Some(1), 0, 30),
    ] {
        for sorted in [1, 0] {
            let what = format!("Unique large {shape:?} axis {axis:?} sorted {sorted}");
            let x = random_numeric(&mut rng, DataType::Int64, &shape, lo, hi);
            check(&unique_node(Some(sorted), axis, 4), x, &what);
        }
    }
    // Every element distinct (no duplicates) and all equal.
    let v: Vec<f64> = (0..4100).map(|i| ((i * 7919) % 4100) as f64).collect();
    check(
        &unique_node(Some(0), None, 4),
        from_f64s(DataType::Float32, &[4100], &v),
        "Unique all distinct",
    );
    check(
        &unique_node(None, None, 4),
        from_f64s(DataType::Float32, &[2000], &[1.5; 2000]),
        "Unique all equal",
    );
}

#[test]
fn unique_nan_signed_zero_and_infinities() {
    let v = [
        f64::NAN,
        0.0,
        -0.0,
        1.0,
        f64::NAN,
        f64::NEG_INFINITY,
        f64::INFINITY,
        1.0,
        -0.0,
        -2.5,
    ];
    for dtype in [
        DataType::Float32,
        DataType::Float64,
        DataType::Float16,
        DataType::BFloat16,
    ] {
        for sorted in [1, 0] {
            let what = format!("Unique specials {dtype} sorted {sorted}");
            check(
                &unique_node(Some(sorted), None, 4),
                from_f64s(dtype, &[10], &v),
                &what,
            );
            // -0.0 first: its group keeps -0.0.
            let w = [-0.0, 0.0, 3.0, 0.0];
            check(
                &unique_node(Some(sorted), None, 4),
                from_f64s(dtype, &[4], &w),
                &format!("{what} (-0.0 first)"),
            );
        }
    }
}

#[test]
fn unique_empty_inputs_and_fewer_outputs() {
    let empty = from_f64s(DataType::Float32, &[0], &[]);
    let got = check(&unique_node(None, None, 4), empty, "Unique of empty");
    assert_eq!(got[0].shape, vec![0]);
    // An axis of length 0, and slices of zero elements along a non-empty axis (all equal).
    let x = from_f64s(DataType::Int64, &[2, 0], &[]);
    check(
        &unique_node(None, Some(1), 4),
        x.clone(),
        "Unique axis of length 0",
    );
    check(&unique_node(None, Some(0), 4), x, "Unique empty slices");
    // A scalar.
    check(
        &unique_node(None, None, 4),
        from_f64s(DataType::Int32, &[], &[7.0]),
        "Unique of a scalar",
    );
    let mut rng = Rng::new(84);
    for outs in 1..4 {
        for sorted in [1, 0] {
            let x = random_numeric(&mut rng, DataType::Float32, &[20], 0, 5);
            check(
                &unique_node(Some(sorted), None, outs),
                x,
                &format!("Unique with {outs} output(s), sorted {sorted}"),
            );
        }
    }
}

#[test]
fn unique_bad_axis_is_an_error_naming_the_node() {
    let ep = gpu();
    let x = from_f64s(DataType::Float32, &[2, 3], &[1.0; 6]);
    expect_err(
        &ep,
        &unique_node(None, Some(2), 4),
        11,
        &[Some(x)],
        "out of range",
    );
}
