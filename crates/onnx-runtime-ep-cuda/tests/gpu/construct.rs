//! Cast, CumSum, Range, ConstantOfShape, Shape, Size, OneHot, Trilu against Rust references.

use super::harness::*;
use onnx_runtime_ir::{Attribute, DataType, TensorData};

const NUMERIC: [DataType; 13] = [
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

#[test]
fn cast_every_pair_of_numeric_types() {
    let ep = gpu();
    let mut rng = Rng::new(21);
    for (i, &from) in NUMERIC.iter().enumerate() {
        // Values in [0, 100) fit every target; floats carry quarter fractions (truncated
        // toward zero for integer targets).
        let x = random_numeric(&mut rng, from, &[3, 7], 0, 100).with_layout(if i % 2 == 0 {
            Layout::Reversed
        } else {
            Layout::Contiguous
        });
        for &to in &NUMERIC {
            let n = node(
                "Cast",
                1,
                1,
                &[("to", Attribute::Int(to.onnx_code() as i64))],
            );
            let got = run(&ep, &n, 19, &[x.clone()], &[(to, vec![3, 7])]).unwrap();
            let want = T::new(
                to,
                &[3, 7],
                (0..21).flat_map(|k| put(to, get(&x, k))).collect(),
            );
            assert_same(&got[0], &want, &format!("cast {from} -> {to}"));
        }
    }
    // Negative values into signed types, NaN to bool.
    // Negative values, NaN and out-of-range values: truncation, NaN to 0 and saturation,
    // as Rust's `as` does.
    let x = from_f64s(
        DataType::Float32,
        &[6],
        &[-3.75, -0.5, f64::NAN, 0.0, 1e20, -1e20],
    );
    for to in [
        DataType::Int8,
        DataType::Int32,
        DataType::Int64,
        DataType::Uint8,
        DataType::Uint64,
        DataType::Bool,
    ] {
        let n = node(
            "Cast",
            1,
            1,
            &[("to", Attribute::Int(to.onnx_code() as i64))],
        );
        let got = run(&ep, &n, 13, &[x.clone()], &[(to, vec![6])]).unwrap();
        let want = T::new(to, &[6], (0..6).flat_map(|k| put(to, get(&x, k))).collect());
        assert_same(&got[0], &want, &format!("cast negative -> {to}"));
    }
}

#[test]
fn cumsum_exclusive_reverse_dtypes() {
    let ep = gpu();
    let mut rng = Rng::new(22);
    for dtype in [
        DataType::Float32,
        DataType::Int64,
        DataType::Float16,
        DataType::Uint32,
        DataType::Float64,
    ] {
        for (exclusive, reverse) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
            let x = random_numeric(&mut rng, dtype, &[3, 4, 5], 0, 8).with_layout(Layout::Reversed);
            let axis = -2i64;
            let n = node(
                "CumSum",
                2,
                1,
                &[
                    ("exclusive", Attribute::Int(exclusive)),
                    ("reverse", Attribute::Int(reverse)),
                ],
            );
            let got = run(
                &ep,
                &n,
                14,
                &[x.clone(), i64s(&[], &[axis])],
                &[(dtype, vec![3, 4, 5])],
            )
            .unwrap();
            let mut want = vec![0.0; 60];
            for a in 0..3 {
                for c in 0..5 {
                    let mut acc = 0.0;
                    let order: Vec<usize> = if reverse == 1 {
                        (0..4).rev().collect()
                    } else {
                        (0..4).collect()
                    };
                    for b in order {
                        let v = get(&x, lin(&[3, 4, 5], &[a, b, c]));
                        if exclusive == 1 {
                            want[lin(&[3, 4, 5], &[a, b, c])] = acc;
                            acc += v;
                        } else {
                            acc += v;
                            want[lin(&[3, 4, 5], &[a, b, c])] = acc;
                        }
                    }
                }
            }
            assert_close(
                &got[0],
                &want,
                2e-3,
                0.0,
                &format!("cumsum {dtype} ex={exclusive} rev={reverse}"),
            );
        }
    }
}

#[test]
fn range_constant_of_shape_shape_size() {
    let ep = gpu();
    for (dtype, start, limit, delta) in [
        (DataType::Float32, 1.5f64, 9.0, 0.75),
        (DataType::Int64, 10.0, -7.0, -3.0),
        (DataType::Int32, 0.0, 17.0, 4.0),
        (DataType::Int16, -5.0, 5.0, 2.0),
        (DataType::Float64, -1.0, 1.0, 0.125),
    ] {
        let count = ((limit - start) / delta).ceil().max(0.0) as usize;
        let n = node("Range", 3, 1, &[]);
        let inputs = [start, limit, delta].map(|v| from_f64s(dtype, &[], &[v]));
        let got = run(&ep, &n, 11, &inputs, &[(dtype, vec![count])]).unwrap();
        let want: Vec<f64> = (0..count).map(|i| start + i as f64 * delta).collect();
        assert_close(&got[0], &want, 1e-6, 1e-6, &format!("range {dtype}"));
    }
    // ConstantOfShape with an int64 and a float16 value, and the default float 0.
    for (value, dtype, v) in [
        (
            Some(TensorData::from_bytes(
                DataType::Int64,
                vec![1],
                (-42i64).to_ne_bytes().to_vec(),
            )),
            DataType::Int64,
            -42.0,
        ),
        (
            Some(TensorData::from_bytes(
                DataType::Float16,
                vec![1],
                half::f16::from_f32(2.5).to_ne_bytes().to_vec(),
            )),
            DataType::Float16,
            2.5,
        ),
        (None, DataType::Float32, 0.0),
    ] {
        let attrs: Vec<(&str, Attribute)> = value
            .map(|t| ("value", Attribute::Tensor(t)))
            .into_iter()
            .collect();
        let n = node("ConstantOfShape", 1, 1, &attrs);
        let got = run(&ep, &n, 20, &[i64s(&[2], &[3, 5])], &[(dtype, vec![3, 5])]).unwrap();
        assert_close(
            &got[0],
            &[v; 15],
            0.0,
            0.0,
            &format!("constant_of_shape {dtype}"),
        );
    }
    let x = random_bytes(&mut Rng::new(3), DataType::Uint8, &[2, 3, 4, 5]);
    for (start, end, want) in [
        (None, None, vec![2, 3, 4, 5]),
        (Some(1), Some(-1), vec![3, 4]),
        (Some(-10), Some(2), vec![2, 3]),
        (Some(3), Some(1), vec![]),
    ] {
        let mut attrs = Vec::new();
        if let Some(s) = start {
            attrs.push(("start", Attribute::Int(s)));
        }
        if let Some(e) = end {
            attrs.push(("end", Attribute::Int(e)));
        }
        let n = node("Shape", 1, 1, &attrs);
        let got = run(
            &ep,
            &n,
            15,
            &[x.clone()],
            &[(DataType::Int64, vec![want.len()])],
        )
        .unwrap();
        assert_close(
            &got[0],
            &want.iter().map(|&v| v as f64).collect::<Vec<_>>(),
            0.0,
            0.0,
            "shape",
        );
    }
    let n = node("Size", 1, 1, &[]);
    let got = run(&ep, &n, 13, &[x], &[(DataType::Int64, vec![])]).unwrap();
    assert_close(&got[0], &[120.0], 0.0, 0.0, "size");
}

#[test]
fn one_hot_axes_negative_and_float_indices() {
    let ep = gpu();
    let depth = 5usize;
    for (idx_dtype, axis) in [
        (DataType::Int64, -1i64),
        (DataType::Float32, 0),
        (DataType::Int32, 1),
    ] {
        let idx = from_f64s(idx_dtype, &[2, 3], &[0.0, -1.0, 4.0, 7.0, -5.0, 2.0]);
        let values = from_f64s(DataType::Float16, &[2], &[-2.0, 3.0]);
        let n = node("OneHot", 3, 1, &[("axis", Attribute::Int(axis))]);
        let a = if axis < 0 {
            (axis + 3) as usize
        } else {
            axis as usize
        };
        let mut out = vec![2, 3];
        out.insert(a, depth);
        let got = run(
            &ep,
            &n,
            11,
            &[idx.clone(), i64s(&[], &[depth as i64]), values],
            &[(DataType::Float16, out.clone())],
        )
        .unwrap();
        let cs = onnx_runtime_ir::compute_contiguous_strides(&out);
        let want: Vec<f64> = (0..30)
            .map(|i| {
                let o: Vec<usize> = (0..3).map(|k| (i / cs[k]) % out[k]).collect();
                let mut rest = o.clone();
                let pos = rest.remove(a);
                let v = get(&idx, rest[0] * 3 + rest[1]) as i64;
                let v = if v < 0 { v + depth as i64 } else { v };
                if v == pos as i64 {
                    3.0
                } else {
                    -2.0
                }
            })
            .collect();
        assert_close(
            &got[0],
            &want,
            0.0,
            0.0,
            &format!("one_hot {idx_dtype} axis {axis}"),
        );
    }
}

#[test]
fn trilu_upper_lower_with_k() {
    let ep = gpu();
    let mut rng = Rng::new(24);
    for upper in [0, 1] {
        for k in [None, Some(-1i64), Some(2)] {
            let x =
                random_bytes(&mut rng, DataType::Float64, &[2, 4, 5]).with_layout(Layout::Padded);
            let mut inputs = vec![x.clone()];
            if let Some(k) = k {
                inputs.push(i64s(&[], &[k]));
            }
            let n = node(
                "Trilu",
                inputs.len(),
                1,
                &[("upper", Attribute::Int(upper))],
            );
            let got = run(&ep, &n, 14, &inputs, &[(DataType::Float64, vec![2, 4, 5])]).unwrap();
            let kk = k.unwrap_or(0);
            let mut bytes = Vec::new();
            for i in 0..40 {
                let (r, c) = ((i / 5) % 4, i % 5);
                let keep = if upper == 1 {
                    c as i64 - r as i64 >= kk
                } else {
                    c as i64 - r as i64 <= kk
                };
                if keep {
                    bytes.extend_from_slice(x.elem(i));
                } else {
                    bytes.extend_from_slice(&[0u8; 8]);
                }
            }
            assert_same(
                &got[0],
                &T::new(DataType::Float64, &[2, 4, 5], bytes),
                &format!("trilu upper={upper} k={k:?}"),
            );
        }
    }
}
