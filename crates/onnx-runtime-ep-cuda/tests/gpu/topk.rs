//! TopK against the CPU provider: largest/smallest, k = 1 / k = row length, ties, NaN and
//! signed zeros, opsets, and the shared-memory sort, radix select and global sort paths.

use super::harness::*;
use super::reduce_common::*;
use onnx_runtime_ir::DataType;

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
