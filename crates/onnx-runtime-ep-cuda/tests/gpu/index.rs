//! Gather, GatherElements, GatherND, ScatterND, ScatterElements against Rust references.

use super::harness::*;
use onnx_runtime_ir::{Attribute, DataType};

#[test]
fn gather_negative_axis_and_indices_int32_int64() {
    let ep = gpu();
    let mut rng = Rng::new(11);
    let shape = [3, 5, 2];
    for (case, dtype) in MOVE_DTYPES.iter().enumerate() {
        let x = random_bytes(&mut rng, *dtype, &shape).with_layout(if case % 2 == 0 {
            Layout::Reversed
        } else {
            Layout::Contiguous
        });
        let idx: Vec<i64> = (0..6).map(|_| rng.range(-5, 5)).collect();
        let indices = if case % 2 == 0 {
            i64s(&[2, 3], &idx)
        } else {
            i32s(&[2, 3], &idx.iter().map(|&v| v as i32).collect::<Vec<_>>())
        };
        let n = node("Gather", 2, 1, &[("axis", Attribute::Int(-2))]);
        let out = vec![3, 2, 3, 2];
        let got = run(&ep, &n, 13, &[x.clone(), indices], &[(*dtype, out.clone())]).unwrap();
        let want = moved(&x, &out, |o| {
            let v = idx[o[1] * 3 + o[2]];
            let j = if v < 0 { v + 5 } else { v } as usize;
            lin(&shape, &[o[0], j, o[3]])
        });
        assert_same(&got[0], &want, &format!("gather {dtype}"));
    }
}

#[test]
fn gather_out_of_range_index_is_reported_not_read() {
    let ep = gpu();
    let x = random_bytes(&mut Rng::new(1), DataType::Float32, &[4, 3]);
    let n = node("Gather", 2, 1, &[("axis", Attribute::Int(0))]);
    let err = run(
        &ep,
        &n,
        13,
        &[x.clone(), i64s(&[2], &[1, 4])],
        &[(DataType::Float32, vec![2, 3])],
    )
    .unwrap_err();
    let text = err.to_string();
    assert!(
        text.contains("test_Gather") && text.contains("out of range"),
        "{text}"
    );
    // The error is cleared once reported.
    let got = run(
        &ep,
        &n,
        13,
        &[x.clone(), i64s(&[1], &[-4])],
        &[(DataType::Float32, vec![1, 3])],
    )
    .unwrap();
    assert_same(&got[0], &moved(&x, &[1, 3], |o| o[1]), "gather after error");
}

#[test]
fn gather_elements_and_gather_nd_batch_dims() {
    let ep = gpu();
    let mut rng = Rng::new(12);
    // GatherElements on axis 1 with negative indices; indices smaller than data elsewhere.
    let x = random_bytes(&mut rng, DataType::Float16, &[3, 4]).with_layout(Layout::Padded);
    let idx: Vec<i64> = (0..2 * 5).map(|_| rng.range(-4, 4)).collect();
    let n = node("GatherElements", 2, 1, &[("axis", Attribute::Int(-1))]);
    let got = run(
        &ep,
        &n,
        13,
        &[x.clone(), i64s(&[2, 5], &idx)],
        &[(DataType::Float16, vec![2, 5])],
    )
    .unwrap();
    let want = moved(&x, &[2, 5], |o| {
        let v = idx[o[0] * 5 + o[1]];
        lin(&[3, 4], &[o[0], (v.rem_euclid(4)) as usize])
    });
    assert_same(&got[0], &want, "gather_elements");
    // GatherND with batch_dims = 1: data [2, 3, 4], indices [2, 2, 1] -> out [2, 2, 4].
    let x = random_bytes(&mut rng, DataType::Int64, &[2, 3, 4]).with_layout(Layout::Reversed);
    let idx: Vec<i64> = (0..4).map(|_| rng.range(-3, 3)).collect();
    let n = node("GatherND", 2, 1, &[("batch_dims", Attribute::Int(1))]);
    let got = run(
        &ep,
        &n,
        13,
        &[x.clone(), i64s(&[2, 2, 1], &idx)],
        &[(DataType::Int64, vec![2, 2, 4])],
    )
    .unwrap();
    let want = moved(&x, &[2, 2, 4], |o| {
        let v = idx[o[0] * 2 + o[1]].rem_euclid(3) as usize;
        lin(&[2, 3, 4], &[o[0], v, o[2]])
    });
    assert_same(&got[0], &want, "gather_nd batch");
    // GatherND with full index tuples: data [3, 4], indices [5, 2] -> out [5].
    let x = random_bytes(&mut rng, DataType::Uint8, &[3, 4]);
    let idx: Vec<i64> = (0..5)
        .flat_map(|_| [rng.range(0, 3), rng.range(-4, 4)])
        .collect();
    let n = node("GatherND", 2, 1, &[]);
    let got = run(
        &ep,
        &n,
        13,
        &[x.clone(), i64s(&[5, 2], &idx)],
        &[(DataType::Uint8, vec![5])],
    )
    .unwrap();
    let want = moved(&x, &[5], |o| {
        lin(
            &[3, 4],
            &[
                idx[2 * o[0]] as usize,
                idx[2 * o[0] + 1].rem_euclid(4) as usize,
            ],
        )
    });
    assert_same(&got[0], &want, "gather_nd tuples");
}

fn reduce(op: &str, a: f64, b: f64) -> f64 {
    match op {
        "add" => a + b,
        "mul" => a * b,
        "max" => a.max(b),
        "min" => a.min(b),
        _ => b,
    }
}

#[test]
fn scatter_elements_every_reduction_and_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(13);
    for op in ["none", "add", "mul", "max", "min"] {
        for dtype in [
            DataType::Float32,
            DataType::Int32,
            DataType::Float16,
            DataType::Int8,
            DataType::Float64,
            DataType::Uint64,
        ] {
            let data = random_numeric(&mut rng, dtype, &[4, 5], 1, 4).with_layout(Layout::Reversed);
            // For "none" keep indices unique per column so the result is defined.
            let idx: Vec<i64> = if op == "none" {
                (0..3 * 5)
                    .map(|i| ((i / 5) as i64 + (i % 5) as i64) % 4 - 4 * (i % 2) as i64)
                    .collect()
            } else {
                (0..3 * 5).map(|_| rng.range(-4, 4)).collect()
            };
            let upd = random_numeric(&mut rng, dtype, &[3, 5], 1, 4);
            let attrs = [
                ("axis", Attribute::Int(0)),
                ("reduction", Attribute::String(op.into())),
            ];
            let n = node("ScatterElements", 3, 1, &attrs);
            let got = run(
                &ep,
                &n,
                18,
                &[data.clone(), i64s(&[3, 5], &idx), upd.clone()],
                &[(dtype, vec![4, 5])],
            )
            .unwrap();
            let mut want: Vec<f64> = (0..20).map(|i| get(&data, i)).collect();
            for i in 0..15 {
                let r = idx[i].rem_euclid(4) as usize;
                let t = r * 5 + i % 5;
                want[t] = reduce(op, want[t], get(&upd, i));
            }
            // Products and sums stay small integers, exact in every dtype used.
            let want: Vec<f64> = want
                .iter()
                .map(|&v| get(&from_f64s(dtype, &[], &[v]), 0))
                .collect();
            assert_close(
                &got[0],
                &want,
                4e-3,
                0.0,
                &format!("scatter_elements {op} {dtype}"),
            );
        }
    }
}

#[test]
fn scatter_nd_slices_and_reductions() {
    let ep = gpu();
    let mut rng = Rng::new(14);
    for op in ["none", "add", "mul", "max", "min"] {
        let dtype = DataType::Float32;
        let data = random_numeric(&mut rng, dtype, &[4, 3], 1, 5);
        // Two index rows that update whole rows; duplicates only when reducing.
        let idx = if op == "none" {
            vec![3i64, -4]
        } else {
            vec![1i64, 1]
        };
        let upd = random_numeric(&mut rng, dtype, &[2, 3], 1, 5).with_layout(Layout::Padded);
        let n = node(
            "ScatterND",
            3,
            1,
            &[("reduction", Attribute::String(op.into()))],
        );
        let got = run(
            &ep,
            &n,
            18,
            &[data.clone(), i64s(&[2, 1], &idx), upd.clone()],
            &[(dtype, vec![4, 3])],
        )
        .unwrap();
        let mut want: Vec<f64> = (0..12).map(|i| get(&data, i)).collect();
        for (r, &v) in idx.iter().enumerate() {
            let row = v.rem_euclid(4) as usize;
            for c in 0..3 {
                want[row * 3 + c] = reduce(op, want[row * 3 + c], get(&upd, r * 3 + c));
            }
        }
        assert_close(&got[0], &want, 1e-6, 0.0, &format!("scatter_nd {op}"));
    }
    // An index out of range is reported, and the data elsewhere is intact.
    let data = random_numeric(&mut rng, DataType::Int64, &[4], 0, 9);
    let n = node("ScatterND", 3, 1, &[]);
    let err = run(
        &ep,
        &n,
        13,
        &[
            data,
            i64s(&[1, 1], &[9]),
            random_numeric(&mut rng, DataType::Int64, &[1], 0, 9),
        ],
        &[(DataType::Int64, vec![4])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("out of range"), "{err}");
}
