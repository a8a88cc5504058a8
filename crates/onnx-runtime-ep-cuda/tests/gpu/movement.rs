//! Transpose, Concat, Split, Slice, Expand, Tile, Reshape-family, Where, Pad against Rust
//! references on random inputs of every element width, with strided inputs.

use super::harness::*;
use onnx_runtime_ir::{Attribute, DataType};

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];

#[test]
fn transpose_every_width_and_layout() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    for (case, dtype) in MOVE_DTYPES.iter().enumerate() {
        let layout = LAYOUTS[case % 3];
        let shape = [2, 3, 4, 5];
        let x = random_bytes(&mut rng, *dtype, &shape).with_layout(layout);
        for perm in [vec![3i64, 1, 0, 2], vec![-1, -2, -3, -4], vec![0, 2, 1, 3]] {
            let p: Vec<usize> = perm.iter().map(|&v| ((v + 4) % 4) as usize).collect();
            let out_shape: Vec<usize> = p.iter().map(|&k| shape[k]).collect();
            let node = node(
                "Transpose",
                1,
                1,
                &[("perm", Attribute::Ints(perm.clone()))],
            );
            let got = run(&ep, &node, 13, &[x.clone()], &[(*dtype, out_shape.clone())]).unwrap();
            let want = moved(&x, &out_shape, |o| {
                let mut i = [0usize; 4];
                for (k, &pk) in p.iter().enumerate() {
                    i[pk] = o[k];
                }
                lin(&shape, &i)
            });
            assert_same(
                &got[0],
                &want,
                &format!("transpose {dtype} {perm:?} {layout:?}"),
            );
        }
    }
}

#[test]
fn concat_strided_inputs_negative_axis() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    for (case, dtype) in MOVE_DTYPES.iter().enumerate() {
        let shapes = [[2, 3, 1], [2, 3, 4], [2, 3, 2]];
        let xs: Vec<T> = shapes
            .iter()
            .enumerate()
            .map(|(i, s)| random_bytes(&mut rng, *dtype, s).with_layout(LAYOUTS[(i + case) % 3]))
            .collect();
        let node = node("Concat", 3, 1, &[("axis", Attribute::Int(-1))]);
        let got = run(&ep, &node, 13, &xs, &[(*dtype, vec![2, 3, 7])]).unwrap();
        let mut bytes = Vec::new();
        for i in 0..6 {
            for x in &xs {
                let c = x.shape[2];
                for j in 0..c {
                    bytes.extend_from_slice(x.elem(i * c + j));
                }
            }
        }
        assert_same(
            &got[0],
            &T::new(*dtype, &[2, 3, 7], bytes),
            &format!("concat {dtype}"),
        );
    }
}

#[test]
fn split_by_input_attribute_and_num_outputs() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    let x = random_bytes(&mut rng, DataType::Float64, &[3, 7, 2]).with_layout(Layout::Reversed);
    let expect = |sizes: &[usize]| -> Vec<T> {
        let mut off = 0;
        sizes
            .iter()
            .map(|&s| {
                let o = off;
                off += s;
                moved(&x, &[3, s, 2], |i| lin(&[3, 7, 2], &[i[0], i[1] + o, i[2]]))
            })
            .collect()
    };
    let outs = |sizes: &[usize]| -> Vec<(DataType, Vec<usize>)> {
        sizes
            .iter()
            .map(|&s| (DataType::Float64, vec![3, s, 2]))
            .collect()
    };
    // Sizes from an input (opset 13).
    let n = node("Split", 2, 3, &[("axis", Attribute::Int(-2))]);
    let got = run(
        &ep,
        &n,
        13,
        &[x.clone(), i64s(&[3], &[2, 4, 1])],
        &outs(&[2, 4, 1]),
    )
    .unwrap();
    for (g, w) in got.iter().zip(expect(&[2, 4, 1])) {
        assert_same(g, &w, "split input");
    }
    // Sizes from the attribute (opset 11).
    let n = node(
        "Split",
        1,
        2,
        &[
            ("axis", Attribute::Int(1)),
            ("split", Attribute::Ints(vec![5, 2])),
        ],
    );
    let got = run(&ep, &n, 11, &[x.clone()], &outs(&[5, 2])).unwrap();
    for (g, w) in got.iter().zip(expect(&[5, 2])) {
        assert_same(g, &w, "split attribute");
    }
    // num_outputs with an uneven last chunk (opset 18): 7 -> 3, 3, 1.
    let n = node(
        "Split",
        1,
        3,
        &[
            ("axis", Attribute::Int(1)),
            ("num_outputs", Attribute::Int(3)),
        ],
    );
    let got = run(&ep, &n, 18, &[x.clone()], &outs(&[3, 3, 1])).unwrap();
    for (g, w) in got.iter().zip(expect(&[3, 3, 1])) {
        assert_same(g, &w, "split num_outputs");
    }
    // Bad sizes are an error naming the node.
    let n = node("Split", 2, 2, &[("axis", Attribute::Int(1))]);
    let err = run(&ep, &n, 13, &[x, i64s(&[2], &[3, 3])], &outs(&[3, 3])).unwrap_err();
    assert!(err.to_string().contains("test_Split"), "{err}");
}

#[test]
fn slice_random_starts_ends_steps() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    let shape = [4, 5, 6];
    for case in 0..24 {
        let dtype = MOVE_DTYPES[case % MOVE_DTYPES.len()];
        let x = random_bytes(&mut rng, dtype, &shape).with_layout(LAYOUTS[case % 3]);
        let axes: Vec<i64> = if case % 2 == 0 {
            vec![0, -1]
        } else {
            vec![2, 1, 0]
        };
        let mut starts = Vec::new();
        let mut ends = Vec::new();
        let mut steps = Vec::new();
        for _ in &axes {
            starts.push(rng.range(-8, 8));
            ends.push(if rng.below(5) == 0 {
                i64::MAX
            } else {
                rng.range(-8, 8)
            });
            let s = rng.range(1, 3);
            steps.push(if rng.below(2) == 0 { -s } else { s });
        }
        // Reference: per-axis start/len by the ONNX rules, in f64-free integer math.
        let mut start = [0i64; 3];
        let mut step = [1i64; 3];
        let mut out_shape = shape.to_vec();
        for (i, &a) in axes.iter().enumerate() {
            let k = ((a + 3) % 3) as usize;
            let d = shape[k] as i64;
            let norm = |v: i64| if v < 0 { v.saturating_add(d) } else { v };
            let (s, e) = if steps[i] > 0 {
                (norm(starts[i]).clamp(0, d), norm(ends[i]).clamp(0, d))
            } else {
                (
                    norm(starts[i]).clamp(0, d - 1),
                    norm(ends[i]).clamp(-1, d - 1),
                )
            };
            let len = ((e - s) as f64 / steps[i] as f64).ceil().max(0.0) as usize;
            start[k] = s;
            step[k] = steps[i];
            out_shape[k] = len;
        }
        let n = node("Slice", 5, 1, &[]);
        let inputs = [
            x.clone(),
            i64s(&[axes.len()], &starts),
            i64s(&[axes.len()], &ends),
            i64s(&[axes.len()], &axes),
            i64s(&[axes.len()], &steps),
        ];
        let got = run(&ep, &n, 13, &inputs, &[(dtype, out_shape.clone())]).unwrap();
        let want = moved(&x, &out_shape, |o| {
            let i: Vec<usize> = (0..3)
                .map(|k| (start[k] + o[k] as i64 * step[k]) as usize)
                .collect();
            lin(&shape, &i)
        });
        assert_same(&got[0], &want, &format!("slice case {case}"));
    }
}

#[test]
fn expand_and_tile_broadcast() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    for (case, dtype) in MOVE_DTYPES.iter().enumerate() {
        let x = random_bytes(&mut rng, *dtype, &[3, 1, 4]).with_layout(LAYOUTS[case % 3]);
        // Expand to [2, 3, 5, 4] (shape given with 1s where the input is larger).
        let n = node("Expand", 2, 1, &[]);
        let out_shape = vec![2, 3, 5, 4];
        let got = run(
            &ep,
            &n,
            13,
            &[x.clone(), i64s(&[4], &[2, 1, 5, 1])],
            &[(*dtype, out_shape.clone())],
        )
        .unwrap();
        let want = moved(&x, &out_shape, |o| lin(&[3, 1, 4], &[o[1], 0, o[3]]));
        assert_same(&got[0], &want, &format!("expand {dtype}"));
        // Tile by [2, 3, 1].
        let n = node("Tile", 2, 1, &[]);
        let out_shape = vec![6, 3, 4];
        let got = run(
            &ep,
            &n,
            13,
            &[x.clone(), i64s(&[3], &[2, 3, 1])],
            &[(*dtype, out_shape.clone())],
        )
        .unwrap();
        let want = moved(&x, &out_shape, |o| lin(&[3, 1, 4], &[o[0] % 3, 0, o[2]]));
        assert_same(&got[0], &want, &format!("tile {dtype}"));
    }
}

#[test]
fn reshape_family_copies_strided_inputs_in_order() {
    let ep = gpu();
    let mut rng = Rng::new(6);
    let x = random_bytes(&mut rng, DataType::Int32, &[2, 1, 6]).with_layout(Layout::Reversed);
    let flat = moved(&x, &[12], |o| o[0]);
    let check = |got: &T, shape: &[usize], what: &str| {
        let mut want = flat.clone();
        want.shape = shape.to_vec();
        assert_same(got, &want, what);
    };
    let n = node("Reshape", 2, 1, &[]);
    let got = run(
        &ep,
        &n,
        14,
        &[x.clone(), i64s(&[3], &[0, -1, 3])],
        &[(DataType::Int32, vec![2, 2, 3])],
    )
    .unwrap();
    check(&got[0], &[2, 2, 3], "reshape 0/-1");
    let n = node("Squeeze", 2, 1, &[]);
    let got = run(
        &ep,
        &n,
        13,
        &[x.clone(), i64s(&[1], &[-2])],
        &[(DataType::Int32, vec![2, 6])],
    )
    .unwrap();
    check(&got[0], &[2, 6], "squeeze");
    let n = node("Squeeze", 1, 1, &[("axes", Attribute::Ints(vec![1]))]);
    let got = run(&ep, &n, 11, &[x.clone()], &[(DataType::Int32, vec![2, 6])]).unwrap();
    check(&got[0], &[2, 6], "squeeze attr");
    let n = node("Unsqueeze", 2, 1, &[]);
    let got = run(
        &ep,
        &n,
        13,
        &[x.clone(), i64s(&[2], &[0, -1])],
        &[(DataType::Int32, vec![1, 2, 1, 6, 1])],
    )
    .unwrap();
    check(&got[0], &[1, 2, 1, 6, 1], "unsqueeze");
    let n = node("Flatten", 1, 1, &[("axis", Attribute::Int(-1))]);
    let got = run(&ep, &n, 13, &[x.clone()], &[(DataType::Int32, vec![2, 6])]).unwrap();
    check(&got[0], &[2, 6], "flatten");
    let n = node("Identity", 1, 1, &[]);
    let got = run(
        &ep,
        &n,
        13,
        &[x.clone()],
        &[(DataType::Int32, vec![2, 1, 6])],
    )
    .unwrap();
    check(&got[0], &[2, 1, 6], "identity");
    // A shape that does not match is an error, not a wrong answer.
    let n = node("Reshape", 2, 1, &[]);
    let err = run(
        &ep,
        &n,
        14,
        &[x, i64s(&[2], &[5, -1])],
        &[(DataType::Int32, vec![5, 2])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("cannot reshape"), "{err}");
}

#[test]
fn where_three_way_broadcast_every_width() {
    let ep = gpu();
    let mut rng = Rng::new(7);
    for (case, dtype) in MOVE_DTYPES.iter().enumerate() {
        let c = random_bytes(&mut rng, DataType::Bool, &[4, 1, 5]).with_layout(LAYOUTS[case % 3]);
        let x = random_bytes(&mut rng, *dtype, &[3, 1]);
        let y = random_bytes(&mut rng, *dtype, &[1, 3, 5]).with_layout(LAYOUTS[(case + 1) % 3]);
        let n = node("Where", 3, 1, &[]);
        let out = vec![4, 3, 5];
        let got = run(
            &ep,
            &n,
            16,
            &[c.clone(), x.clone(), y.clone()],
            &[(*dtype, out.clone())],
        )
        .unwrap();
        let w = x.width();
        let cs = onnx_runtime_ir::compute_contiguous_strides(&out);
        let mut bytes = Vec::new();
        for i in 0..60 {
            let o: Vec<usize> = (0..3).map(|k| (i / cs[k]) % out[k]).collect();
            let cond = c.bytes[lin(&[4, 1, 5], &[o[0], 0, o[2]])] != 0;
            let e = if cond {
                x.elem(o[1])
            } else {
                y.elem(lin(&[1, 3, 5], &[0, o[1], o[2]]))
            };
            bytes.extend_from_slice(&e[..w]);
        }
        assert_same(
            &got[0],
            &T::new(*dtype, &out, bytes),
            &format!("where {dtype}"),
        );
    }
}

#[test]
fn pad_all_modes_negative_pads_and_axes() {
    let ep = gpu();
    let mut rng = Rng::new(8);
    let shape = [3, 4];
    for mode in ["constant", "reflect", "edge", "wrap"] {
        for dtype in [DataType::Float32, DataType::Int64, DataType::Uint8] {
            let x = random_numeric(&mut rng, dtype, &shape, 0, 100).with_layout(Layout::Padded);
            let (b0, b1, e0, e1) = (2i64, -1i64, 1i64, 3i64);
            let out_shape = vec![3 + 2 + 1, 4 - 1 + 3];
            let value = from_f64s(dtype, &[], &[7.0]);
            let n = node("Pad", 3, 1, &[("mode", Attribute::String(mode.into()))]);
            let inputs = [x.clone(), i64s(&[4], &[b0, b1, e0, e1]), value.clone()];
            let got = run(&ep, &n, 19, &inputs, &[(dtype, out_shape.clone())]).unwrap();
            let src = |c: i64, d: i64| -> Option<i64> {
                if (0..d).contains(&c) {
                    return Some(c);
                }
                match mode {
                    "constant" => None,
                    "edge" => Some(c.clamp(0, d - 1)),
                    "wrap" => Some(c.rem_euclid(d)),
                    _ => {
                        let p = 2 * (d - 1);
                        let m = c.rem_euclid(p);
                        Some(if m >= d { p - m } else { m })
                    }
                }
            };
            let mut want = Vec::new();
            for i in 0..out_shape[0] as i64 {
                for j in 0..out_shape[1] as i64 {
                    match (src(i - b0, 3), src(j - b1, 4)) {
                        (Some(r), Some(c)) => want.push(get(&x, (r * 4 + c) as usize)),
                        _ => want.push(7.0),
                    }
                }
            }
            assert_close(&got[0], &want, 0.0, 0.0, &format!("pad {mode} {dtype}"));
        }
    }
    // Axes input (opset 18): pad only the last axis.
    let x = random_numeric(&mut rng, DataType::Float32, &[2, 3], 0, 50);
    let n = node("Pad", 4, 1, &[]);
    let inputs = [
        x.clone(),
        i64s(&[2], &[1, 2]),
        from_f64s(DataType::Float32, &[], &[-1.0]),
        i64s(&[1], &[-1]),
    ];
    let got = run(&ep, &n, 18, &inputs, &[(DataType::Float32, vec![2, 6])]).unwrap();
    let mut want = Vec::new();
    for i in 0..2 {
        want.push(-1.0);
        for j in 0..3 {
            want.push(get(&x, i * 3 + j));
        }
        want.extend([-1.0, -1.0]);
    }
    assert_close(&got[0], &want, 0.0, 0.0, "pad axes");
}

#[test]
fn omitted_optional_input_compact_or_placeholder() {
    // Slice with axes omitted but steps given: inputs [data, starts, ends, -, steps].
    let ep = gpu();
    let x = random_bytes(&mut Rng::new(9), DataType::Int16, &[5, 4]);
    let mut n = node("Slice", 5, 1, &[]);
    n.inputs[3] = None;
    let want = moved(&x, &[2, 2], |o| lin(&[5, 4], &[4 - 2 * o[0], 1 + 2 * o[1]]));
    let starts = i64s(&[2], &[-1, 1]);
    let ends = i64s(&[2], &[0, 4]);
    let steps = i64s(&[2], &[-2, 2]);
    // Only the wired inputs, in order.
    let compact = [x.clone(), starts.clone(), ends.clone(), steps.clone()];
    let got = run(&ep, &n, 13, &compact, &[(DataType::Int16, vec![2, 2])]).unwrap();
    assert_same(&got[0], &want, "compact inputs");
    // One view per node input, with a placeholder for the omitted one.
    let placeholder = i64s(&[0], &[]);
    let full = [x, starts, ends, placeholder, steps];
    let got = run(&ep, &n, 13, &full, &[(DataType::Int16, vec![2, 2])]).unwrap();
    assert_same(&got[0], &want, "placeholder inputs");
}
