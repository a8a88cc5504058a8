//! CastLike, EyeLike, CumProd (the loss family registers it), ReverseSequence, CenterCropPad, Compress and NonZero against
//! the CPU provider: several dtypes and element widths, strided layouts, negative axes,
//! empty and all-false selections, multi-tile scans, and errors naming the node.

use super::harness::*;
use super::quant::{check_against_cpu, gpu_error};
use onnx_runtime_ep_api::{CaptureSupport, ExecutionProvider};
use onnx_runtime_ir::{Attribute, DataType};

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];

fn int(v: i64) -> Attribute {
    Attribute::Int(v)
}

// ---- CastLike ----

#[test]
fn cast_like_takes_the_second_inputs_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(21);
    let n = node("CastLike", 2, 1, &[]);
    let targets = [
        DataType::Float32,
        DataType::Float64,
        DataType::Float16,
        DataType::BFloat16,
        DataType::Int8,
        DataType::Int32,
        DataType::Int64,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Bool,
    ];
    for (case, from) in [
        DataType::Float32,
        DataType::Int64,
        DataType::Float16,
        DataType::Uint8,
    ]
    .iter()
    .enumerate()
    {
        // In-range values (out-of-range float-to-integer casts are undefined in the spec).
        let x = random_numeric(&mut rng, *from, &[3, 4, 5], 0, 100).with_layout(LAYOUTS[case % 3]);
        for to in targets {
            let like = random_numeric(&mut rng, to, &[2], 0, 2);
            let rtol = match to {
                DataType::Float16 => 1e-3,
                DataType::BFloat16 => 1e-2,
                _ => 0.0,
            };
            for opset in [15, 21] {
                check_against_cpu(
                    &ep,
                    &n,
                    opset,
                    &[x.clone(), like.clone()],
                    rtol,
                    &format!("CastLike {from} -> {to} opset {opset}"),
                );
            }
        }
    }
    // One kernel serves several target dtypes; after a run it can be captured.
    let k = ep.get_kernel(&n, &[], 19).unwrap();
    assert!(matches!(
        k.capture_support(),
        CaptureSupport::Unsupported { .. }
    ));
    let x = random_numeric(&mut rng, DataType::Float32, &[6], 0, 50);
    for to in [DataType::Int32, DataType::Float16] {
        let like = random_numeric(&mut rng, to, &[1], 0, 2);
        let mut b = Bound::new(&ep, &[x.clone(), like], &[(to, vec![6])]);
        b.execute(k.as_ref()).unwrap();
        let got = b.read().unwrap();
        let want = cpu_reference(&n, 19, &[Some(&x), Some(&b.inputs[1].0)]).unwrap();
        assert_close_to(
            &got[0],
            &want[0],
            1e-3,
            0.0,
            &format!("CastLike reused kernel -> {to}"),
        );
    }
    assert_eq!(k.capture_support(), CaptureSupport::Supported);
}

// ---- EyeLike ----

#[test]
fn eye_like_offsets_shapes_and_dtypes() {
    let ep = gpu();
    let mut rng = Rng::new(22);
    for (rows, cols) in [(3usize, 5usize), (5, 3), (4, 4), (1, 7)] {
        for k in [-10i64, -2, -1, 0, 1, 3] {
            // The input's dtype.
            for dtype in [
                DataType::Float32,
                DataType::Int64,
                DataType::Float16,
                DataType::Bool,
            ] {
                let x = random_numeric(&mut rng, dtype, &[rows, cols], 0, 3);
                let n = node("EyeLike", 1, 1, &[("k", int(k))]);
                check_against_cpu(
                    &ep,
                    &n,
                    9,
                    &[x],
                    0.0,
                    &format!("EyeLike {dtype} {rows}x{cols} k {k}"),
                );
            }
            // The dtype attribute.
            for dtype in [
                DataType::Float64,
                DataType::Int32,
                DataType::Uint8,
                DataType::BFloat16,
            ] {
                let x = random_numeric(&mut rng, DataType::Float32, &[rows, cols], 0, 3);
                let n = node(
                    "EyeLike",
                    1,
                    1,
                    &[("k", int(k)), ("dtype", int(dtype.onnx_code() as i64))],
                );
                check_against_cpu(
                    &ep,
                    &n,
                    22,
                    &[x],
                    0.0,
                    &format!("EyeLike dtype {dtype} {rows}x{cols} k {k}"),
                );
            }
        }
    }
    let x = random_numeric(&mut rng, DataType::Float32, &[2, 3, 4], 0, 3);
    let err = gpu_error(
        &ep,
        &node("EyeLike", 1, 1, &[]),
        9,
        &[x],
        &[(DataType::Float32, vec![2, 3])],
    );
    assert!(err.contains("test_EyeLike") && err.contains("2-D"), "{err}");
}

// ---- CumProd ----

#[test]
fn cumprod_every_dtype_axis_exclusive_reverse() {
    let ep = gpu();
    let mut rng = Rng::new(23);
    let shape = [3, 4, 5];
    let dtypes = [
        (DataType::Float32, 1e-5),
        (DataType::Float64, 1e-12),
        (DataType::Float16, 1e-3),
        (DataType::BFloat16, 1e-2),
        (DataType::Int32, 0.0),
        (DataType::Int64, 0.0),
        (DataType::Uint32, 0.0),
        (DataType::Uint64, 0.0),
    ];
    for (case, (dtype, rtol)) in dtypes.iter().enumerate() {
        let x = if dtype.is_float() {
            // Factors near 1 so products stay in range.
            let v: Vec<f64> = (0..60).map(|_| 0.5 + rng.below(9) as f64 * 0.125).collect();
            from_f64s(*dtype, &shape, &v)
        } else if dtype.is_signed_int() {
            random_numeric(&mut rng, *dtype, &shape, -3, 4)
        } else {
            // Large factors: the products wrap, as the CPU provider's do.
            random_numeric(&mut rng, *dtype, &shape, 0, 70000)
        }
        .with_layout(LAYOUTS[case % 3]);
        for (axis, axis_dtype) in [
            (0i64, DataType::Int64),
            (-1, DataType::Int32),
            (1, DataType::Int64),
        ] {
            for (exclusive, reverse) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
                let n = node(
                    "CumProd",
                    2,
                    1,
                    &[("exclusive", int(exclusive)), ("reverse", int(reverse))],
                );
                let a = from_f64s(axis_dtype, &[], &[axis as f64]);
                check_against_cpu(
                    &ep,
                    &n,
                    26,
                    &[x.clone(), a],
                    *rtol,
                    &format!("CumProd {dtype} axis {axis} exclusive {exclusive} reverse {reverse}"),
                );
            }
        }
    }
}

// ---- ReverseSequence ----

#[test]
fn reverse_sequence_batch_axis_0_and_1() {
    let ep = gpu();
    let mut rng = Rng::new(24);
    let (steps, batch) = (6usize, 4usize);
    for (case, dtype) in MOVE_DTYPES.iter().enumerate() {
        for (batch_axis, time_axis) in [(1i64, 0i64), (0, 1)] {
            let shape = if batch_axis == 1 {
                vec![steps, batch, 3]
            } else {
                vec![batch, steps, 3]
            };
            let x = random_bytes(&mut rng, *dtype, &shape).with_layout(LAYOUTS[case % 3]);
            let lens: Vec<i64> = (0..batch).map(|b| [0, 1, steps as i64, 3][b % 4]).collect();
            let n = node(
                "ReverseSequence",
                2,
                1,
                &[
                    ("batch_axis", int(batch_axis)),
                    ("time_axis", int(time_axis)),
                ],
            );
            check_against_cpu(
                &ep,
                &n,
                10,
                &[x.clone(), i64s(&[batch], &lens)],
                0.0,
                &format!("ReverseSequence {dtype} batch_axis {batch_axis}"),
            );
        }
    }
    // Rank 2 and int32 lengths.
    let x = random_numeric(&mut rng, DataType::Float32, &[5, 3], 0, 100);
    let n = node("ReverseSequence", 2, 1, &[]);
    let lens = i32s(&[3], &[5, 2, 4]);
    let want = cpu_reference(&n, 10, &[Some(&x), Some(&i64s(&[3], &[5, 2, 4]))]).unwrap();
    let got = run(
        &ep,
        &n,
        10,
        &[x.clone(), lens],
        &[(DataType::Float32, vec![5, 3])],
    )
    .unwrap();
    assert_same(&got[0], &want[0], "ReverseSequence int32 lengths");
    // A length past the time axis is a device error naming the node.
    let err = run(
        &ep,
        &n,
        10,
        &[x, i64s(&[3], &[1, 9, 2])],
        &[(DataType::Float32, vec![5, 3])],
    )
    .unwrap_err()
    .to_string();
    assert!(err.contains("test_ReverseSequence"), "{err}");
    // Bad attributes fail the build.
    let bad = node("ReverseSequence", 2, 1, &[("batch_axis", int(2))]);
    assert!(ep.get_kernel(&bad, &[], 10).is_err());
}

// ---- CenterCropPad ----

#[test]
fn center_crop_pad_crops_and_pads_with_axes() {
    let ep = gpu();
    let mut rng = Rng::new(25);
    for (case, dtype) in MOVE_DTYPES.iter().enumerate() {
        let x = random_bytes(&mut rng, *dtype, &[5, 6, 3]).with_layout(LAYOUTS[case % 3]);
        for (axes, shape) in [
            (None, vec![3i64, 9, 3]),
            (None, vec![8, 2, 1]),
            (Some(vec![-2i64, 0]), vec![7, 4]),
            (Some(vec![1]), vec![6]),
        ] {
            let attrs: Vec<(&str, Attribute)> = match &axes {
                Some(a) => vec![("axes", Attribute::Ints(a.clone()))],
                None => vec![],
            };
            let n = node("CenterCropPad", 2, 1, &attrs);
            check_against_cpu(
                &ep,
                &n,
                18,
                &[x.clone(), i64s(&[shape.len()], &shape)],
                0.0,
                &format!("CenterCropPad {dtype} axes {axes:?} shape {shape:?}"),
            );
        }
    }
}

// ---- Compress ----

#[test]
fn compress_with_and_without_axis() {
    let ep = gpu();
    let mut rng = Rng::new(26);
    let shape = [4, 7, 3];
    for (case, dtype) in MOVE_DTYPES.iter().enumerate() {
        let x = random_bytes(&mut rng, *dtype, &shape).with_layout(LAYOUTS[case % 3]);
        for axis in [Some(0i64), Some(1), Some(-1), None] {
            let dim = match axis {
                Some(a) => shape[((a + 3) % 3) as usize],
                None => 84,
            };
            // A full condition, a shorter one, all false.
            for (len, all_false) in [
                (dim, false),
                (dim.saturating_sub(2).max(1), false),
                (dim, true),
            ] {
                let c: Vec<f64> = (0..len)
                    .map(|_| if all_false { 0.0 } else { rng.below(2) as f64 })
                    .collect();
                let cond = from_f64s(DataType::Bool, &[len], &c);
                let attrs: Vec<(&str, Attribute)> =
                    axis.map(|a| vec![("axis", int(a))]).unwrap_or_default();
                let n = node("Compress", 2, 1, &attrs);
                check_against_cpu(
                    &ep,
                    &n,
                    11,
                    &[x.clone(), cond],
                    0.0,
                    &format!("Compress {dtype} axis {axis:?} len {len} all_false {all_false}"),
                );
            }
        }
    }
    // A long flattening condition spans several scan tiles; execute without output_types.
    let x = random_numeric(&mut rng, DataType::Float32, &[100, 123], 0, 100);
    let c: Vec<f64> = (0..12300)
        .map(|_| (rng.below(3) == 0) as u8 as f64)
        .collect();
    let cond = from_f64s(DataType::Bool, &[12300], &c).with_layout(Layout::Padded);
    let n = node("Compress", 2, 1, &[]);
    let want = cpu_reference(&n, 11, &[Some(&x), Some(&cond)]).unwrap();
    let got = run(
        &ep,
        &n,
        11,
        &[x.clone(), cond.clone()],
        &[(DataType::Float32, want[0].shape.clone())],
    )
    .unwrap();
    assert_same(&got[0], &want[0], "Compress long condition, execute only");
    check_against_cpu(
        &ep,
        &n,
        11,
        &[x.clone(), cond],
        0.0,
        "Compress long condition",
    );
    // True entries past the axis are an error naming the node.
    let cond = from_f64s(DataType::Bool, &[5], &[0.0, 1.0, 0.0, 0.0, 1.0]);
    let n = node("Compress", 2, 1, &[("axis", int(1))]);
    let x = random_numeric(&mut rng, DataType::Float32, &[2, 4], 0, 9);
    let err = gpu_error(&ep, &n, 11, &[x, cond], &[(DataType::Float32, vec![2, 2])]);
    assert!(
        err.contains("test_Compress") && err.contains("past the axis"),
        "{err}"
    );
    let k = ep.get_kernel(&n, &[], 11).unwrap();
    assert!(
        matches!(k.capture_support(), CaptureSupport::Unsupported { reason } if reason.contains("data-dependent"))
    );
}

// ---- NonZero ----

#[test]
fn nonzero_ranks_1_to_4_all_false_and_scalars() {
    let ep = gpu();
    let mut rng = Rng::new(27);
    let n = node("NonZero", 1, 1, &[]);
    let dtypes = [
        DataType::Float32,
        DataType::Bool,
        DataType::Int16,
        DataType::Float64,
        DataType::Uint8,
        DataType::Float16,
        DataType::Int64,
    ];
    for (case, shape) in [vec![13usize], vec![4, 6], vec![3, 1, 5], vec![2, 3, 4, 5]]
        .iter()
        .enumerate()
    {
        for (k, dtype) in dtypes.iter().enumerate() {
            let layout = LAYOUTS[(case + k) % 3];
            let x = random_numeric(&mut rng, *dtype, shape, -1, 2).with_layout(layout);
            check_against_cpu(
                &ep,
                &n,
                13,
                &[x],
                0.0,
                &format!("NonZero {dtype} {shape:?} {layout:?}"),
            );
            let zeros =
                from_f64s(*dtype, shape, &vec![0.0; shape.iter().product()]).with_layout(layout);
            check_against_cpu(
                &ep,
                &n,
                9,
                &[zeros],
                0.0,
                &format!("NonZero all false {dtype} {shape:?}"),
            );
        }
    }
    // Scalars (output [1, count]) and an empty tensor.
    for v in [0.0, 2.5] {
        check_against_cpu(
            &ep,
            &n,
            13,
            &[from_f64s(DataType::Float32, &[], &[v])],
            0.0,
            &format!("NonZero scalar {v}"),
        );
    }
    check_against_cpu(
        &ep,
        &n,
        13,
        &[from_f64s(DataType::Float32, &[3, 0], &[])],
        0.0,
        "NonZero empty",
    );
    // -0.0 is zero, NaN and infinities are not.
    let x = from_f64s(
        DataType::Float32,
        &[6],
        &[-0.0, 0.0, f64::NAN, f64::INFINITY, -1e-30, 0.0],
    );
    check_against_cpu(&ep, &n, 13, &[x], 0.0, "NonZero signed zeros and NaN");
    for dtype in [DataType::Float16, DataType::BFloat16, DataType::Float64] {
        let x = from_f64s(dtype, &[4], &[-0.0, 1.0, -0.0, f64::NAN]);
        check_against_cpu(&ep, &n, 13, &[x], 0.0, &format!("NonZero -0.0 {dtype}"));
    }
    let x = random_bytes(&mut rng, DataType::Complex128, &[3, 3]);
    check_against_cpu(&ep, &n, 13, &[x], 0.0, "NonZero complex128");
}

#[test]
fn nonzero_large_sparse_multi_tile() {
    let ep = gpu();
    let mut rng = Rng::new(28);
    let n = node("NonZero", 1, 1, &[]);
    let shape = [64, 128, 130];
    let total: usize = shape.iter().product();
    let v: Vec<f64> = (0..total)
        .map(|_| {
            if rng.below(37) == 0 {
                1.0 + rng.below(5) as f64
            } else {
                0.0
            }
        })
        .collect();
    let x = from_f64s(DataType::Float32, &shape, &v);
    check_against_cpu(&ep, &n, 13, &[x.clone()], 0.0, "NonZero large sparse");
    // Execute without output_types (the output shape resolved elsewhere).
    let want = cpu_reference(&n, 13, &[Some(&x)]).unwrap();
    let got = run(
        &ep,
        &n,
        13,
        &[x.clone().with_layout(Layout::Reversed)],
        &[(DataType::Int64, want[0].shape.clone())],
    )
    .unwrap();
    assert_same(
        &got[0],
        &want[0],
        "NonZero large sparse strided, execute only",
    );
    let k = ep.get_kernel(&n, &[], 13).unwrap();
    assert!(
        matches!(k.capture_support(), CaptureSupport::Unsupported { reason } if reason.contains("data-dependent"))
    );
}

// ---- Col2Im ----

#[test]
fn col2im_strides_dilations_pads_and_dtypes() {
    let ep = gpu();
    let mut rng = Rng::new(29);
    // (image, block, strides, dilations, pads)
    type Geometry = (Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>, Vec<i64>);
    let geometries: Vec<Geometry> = vec![
        (
            vec![5, 5],
            vec![2, 2],
            vec![1, 1],
            vec![1, 1],
            vec![0, 0, 0, 0],
        ),
        (
            vec![5, 6],
            vec![2, 3],
            vec![2, 1],
            vec![1, 2],
            vec![1, 0, 0, 1],
        ),
        (vec![9], vec![3], vec![2], vec![1], vec![1, 2]),
        (
            vec![4, 3, 5],
            vec![2, 1, 3],
            vec![1, 2, 1],
            vec![1, 1, 2],
            vec![0, 1, 1, 1, 0, 1],
        ),
    ];
    for (case, (image, block, strides, dilations, pads)) in geometries.iter().enumerate() {
        let r = image.len();
        let l: i64 = (0..r)
            .map(|d| {
                let ek = (block[d] - 1) * dilations[d] + 1;
                (image[d] + pads[d] + pads[d + r] - ek) / strides[d] + 1
            })
            .product();
        let ks: i64 = block.iter().product();
        let attrs = [
            ("strides", Attribute::Ints(strides.clone())),
            ("dilations", Attribute::Ints(dilations.clone())),
            ("pads", Attribute::Ints(pads.clone())),
        ];
        let n = node("Col2Im", 3, 1, &attrs);
        for (dtype, rtol) in [
            (DataType::Float32, 1e-6),
            (DataType::Float64, 1e-12),
            (DataType::Float16, 1e-3),
            (DataType::BFloat16, 1e-2),
        ] {
            let x = random_numeric(&mut rng, dtype, &[2, 3 * ks as usize, l as usize], -8, 8)
                .with_layout(LAYOUTS[case % 3]);
            check_against_cpu(
                &ep,
                &n,
                18,
                &[x, i64s(&[r], image), i64s(&[r], block)],
                rtol,
                &format!("Col2Im {dtype} image {image:?} block {block:?}"),
            );
        }
    }
    // Columns that do not match the blocks are an error naming the node.
    let x = random_numeric(&mut rng, DataType::Float32, &[1, 4, 5], -8, 8);
    let err = gpu_error(
        &ep,
        &node("Col2Im", 3, 1, &[]),
        18,
        &[x, i64s(&[2], &[3, 3]), i64s(&[2], &[2, 2])],
        &[(DataType::Float32, vec![1, 1, 3, 3])],
    );
    assert!(
        err.contains("test_Col2Im") && err.contains("blocks"),
        "{err}"
    );
}

// ---- graph capture ----

#[test]
fn tensor_misc_kernels_replay_under_graph_capture() {
    use super::quant::{assert_bytes, bind};
    use onnx_runtime_ep_api::Kernel;
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(30);
    let f32s = |rng: &mut Rng, s: &[usize]| random_numeric(rng, DataType::Float32, s, -5, 5);
    // (node, opset, inputs; input 0 gets new values before replay)
    let cases = vec![
        (
            node("EyeLike", 1, 1, &[("k", int(1))]),
            9,
            vec![f32s(&mut rng, &[3, 4])],
        ),
        (
            node("ReverseSequence", 2, 1, &[]),
            10,
            vec![f32s(&mut rng, &[4, 3, 2]), i64s(&[3], &[4, 1, 2])],
        ),
        (
            node("CumProd", 2, 1, &[]),
            26,
            vec![f32s(&mut rng, &[3, 4]), i64s(&[], &[1])],
        ),
        (
            node("CenterCropPad", 2, 1, &[]),
            18,
            vec![f32s(&mut rng, &[3, 4]), i64s(&[2], &[5, 2])],
        ),
        (
            node("Col2Im", 3, 1, &[]),
            18,
            vec![
                f32s(&mut rng, &[1, 4, 4]),
                i64s(&[2], &[3, 3]),
                i64s(&[2], &[2, 2]),
            ],
        ),
        (
            node("CastLike", 2, 1, &[]),
            15,
            vec![
                f32s(&mut rng, &[5]),
                random_numeric(&mut rng, DataType::Float16, &[1], 0, 2),
            ],
        ),
    ];
    let kernels: Vec<Box<dyn Kernel>> = cases
        .iter()
        .map(|(n, opset, inputs)| {
            let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
            ep.get_kernel(n, &shapes, *opset).unwrap()
        })
        .collect();
    let mut bounds: Vec<Bound<'_>> = Vec::new();
    for (k, (_, _, inputs)) in kernels.iter().zip(&cases) {
        let mut b = bind(&ep, inputs);
        let types = b.output_types(k.as_ref()).unwrap();
        b.set_outputs(&types);
        // Warm: the host-read inputs are read once eagerly.
        b.execute(k.as_ref()).unwrap();
        assert_eq!(k.capture_support(), CaptureSupport::Supported);
        bounds.push(b);
    }
    let refs: Vec<&dyn Kernel> = kernels.iter().map(|k| k.as_ref()).collect();
    runtime.begin_graph_capture(&refs).unwrap();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    runtime.end_graph_capture().unwrap();
    for ((_, _, inputs), b) in cases.iter().zip(bounds.iter_mut()) {
        let t = &inputs[0];
        b.set_input(0, random_numeric(&mut rng, t.dtype, &t.shape, -5, 5));
    }
    runtime.replay_graph().unwrap();
    let replayed: Vec<Vec<T>> = bounds.iter().map(|b| b.read().unwrap()).collect();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    for ((c, b), r) in cases.iter().zip(&bounds).zip(&replayed) {
        for (e, g) in b.read().unwrap().iter().zip(r) {
            assert_bytes(g, e, &format!("replay vs eager: {}", c.0.op_type));
        }
    }
    assert!(runtime.reset_graph().unwrap());
}
