//! Pooling and resampling against the CPU provider on random inputs: MaxPool (Indices, both
//! storage orders, ceil_mode, dilations, auto_pad, 1-D to 4-D, int8/uint8), AveragePool,
//! LpPool, the global pools (warp, block and split-block paths), Resize and Upsample (every
//! mode, nearest_mode and coordinate transformation, antialias, axes, aspect policies, crops,
//! scales vs sizes, integer dtypes), DepthToSpace / SpaceToDepth, GridSample; f16/bf16 against
//! a float32 reference; strided input layouts; bad inputs as errors naming the node. Every
//! call also checks that `output_types` gives what the CPU provider produces.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];

fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

fn s(v: &str) -> Attribute {
    Attribute::String(v.to_string())
}

fn f32s(shape: &[usize], v: &[f32]) -> T {
    from_f64s(
        DataType::Float32,
        shape,
        &v.iter().map(|&x| x as f64).collect::<Vec<_>>(),
    )
}

/// `t` with its values re-stored as `dtype` (f32 reference inputs of half tests).
fn recast(t: &T, dtype: DataType) -> T {
    let v: Vec<f64> = (0..t.numel()).map(|i| get(t, i)).collect();
    from_f64s(dtype, &t.shape, &v).with_layout(t.layout)
}

/// `node` with the listed inputs omitted.
fn omit(mut n: Node, positions: &[usize]) -> Node {
    for &p in positions {
        n.inputs[p] = None;
    }
    n
}

/// Every output within `atol + rtol * |want|` of `want` (compared as f64; dtypes may differ,
/// so a half output can be checked against a float32 reference).
fn close_values(got: &T, want: &T, rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    for i in 0..want.numel() {
        let (g, w) = (get(got, i), get(want, i));
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(
            ok,
            "{what}: element {i} of {:?}: got {g}, want {w}",
            want.shape
        );
    }
}

/// Runs on the GPU and compares every output with the CPU provider's (same dtypes and
/// shapes; values within the tolerance, bit for bit with [`EXACT`]).
fn check(
    ep: &CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[Option<T>],
    (rtol, atol): (f64, f64),
    what: &str,
) -> Vec<T> {
    let want = reference(node, opset, inputs, what);
    let got = gpu_run(ep, node, opset, inputs).unwrap_or_else(|e| panic!("{what}: GPU: {e}"));
    assert_eq!(got.len(), want.len(), "{what}: output count");
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.dtype, w.dtype, "{what}: output {k} dtype");
        if (rtol, atol) == EXACT {
            assert_same(g, w, &format!("{what}: output {k}"));
        } else {
            close_values(g, w, rtol, atol, &format!("{what}: output {k}"));
        }
    }
    got
}

/// A half-type run of `node` against the CPU provider's float32 result on the same values.
fn check_half(
    ep: &CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[Option<T>],
    half: DataType,
    what: &str,
) {
    // Inputs 0 (and the grid of GridSample) carry the data; other inputs stay as they are.
    let as_half: Vec<Option<T>> = inputs
        .iter()
        .enumerate()
        .map(|(i, t)| {
            t.as_ref().map(|t| {
                if i == 0 || (node.op_type == "GridSample" && i == 1) {
                    recast(t, half)
                } else {
                    t.clone()
                }
            })
        })
        .collect();
    let as_f32: Vec<Option<T>> = as_half
        .iter()
        .map(|t| {
            t.as_ref().map(|t| {
                if t.dtype == half {
                    recast(t, DataType::Float32)
                } else {
                    t.clone()
                }
            })
        })
        .collect();
    let want = reference(node, opset, &as_f32, what);
    let got =
        gpu_run(ep, node, opset, &as_half).unwrap_or_else(|e| panic!("{what} {half}: GPU: {e}"));
    let (rtol, atol) = if half == DataType::Float16 {
        (2e-3, 2e-3)
    } else {
        (1e-2, 1e-2)
    };
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        if w.dtype == DataType::Int64 {
            assert_same(g, w, &format!("{what} {half}: output {k}"));
        } else {
            assert_eq!(g.dtype, half, "{what}: output {k} dtype");
            close_values(g, w, rtol, atol, &format!("{what} {half}: output {k}"));
        }
    }
}

const F32_TOL: (f64, f64) = (1e-5, 1e-5);
const F64_TOL: (f64, f64) = (1e-12, 1e-12);
const EXACT: (f64, f64) = (0.0, 0.0);

fn tol(dtype: DataType) -> (f64, f64) {
    match dtype {
        DataType::Float64 => F64_TOL,
        DataType::Float32 => F32_TOL,
        _ => EXACT,
    }
}

// ---- MaxPool ----

#[test]
fn maxpool_2d_3x3_stride2_pads_with_indices_both_storage_orders() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    for (case, dtype) in [DataType::Float32, DataType::Float64]
        .into_iter()
        .enumerate()
    {
        for storage_order in [0, 1] {
            let layout = LAYOUTS[(case + storage_order as usize) % 3];
            let x = uniform(&mut rng, dtype, &[2, 3, 13, 14], -5.0, 5.0).with_layout(layout);
            let n = node(
                "MaxPool",
                1,
                2,
                &[
                    ("kernel_shape", ints(&[3, 3])),
                    ("strides", ints(&[2, 2])),
                    ("pads", ints(&[1, 1, 1, 1])),
                    ("storage_order", Attribute::Int(storage_order)),
                ],
            );
            let got = check(
                &ep,
                &n,
                12,
                &[Some(x)],
                EXACT,
                &format!("maxpool 3x3/2 {dtype} storage_order {storage_order} {layout:?}"),
            );
            assert_eq!(got[0].shape, vec![2, 3, 7, 7]);
            // One output (no Indices) takes the same path without writing indices.
            let x = uniform(&mut rng, dtype, &[1, 4, 9, 9], -5.0, 5.0);
            let n = node(
                "MaxPool",
                1,
                1,
                &[("kernel_shape", ints(&[3, 3])), ("strides", ints(&[2, 2]))],
            );
            check(&ep, &n, 12, &[Some(x)], EXACT, "maxpool without indices");
        }
    }
}

#[test]
fn maxpool_ceil_mode_dilations_and_auto_pad() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    let x = uniform(&mut rng, DataType::Float32, &[2, 2, 12, 11], -3.0, 3.0);
    let cases: Vec<(&str, Vec<(&str, Attribute)>)> = vec![
        // The 4th window along H would start in the end pad: ceil_mode drops it.
        (
            "ceil drop",
            vec![
                ("kernel_shape", ints(&[2, 3])),
                ("strides", ints(&[2, 2])),
                ("pads", ints(&[0, 0, 1, 1])),
                ("ceil_mode", Attribute::Int(1)),
            ],
        ),
        (
            "ceil 3x3/2",
            vec![
                ("kernel_shape", ints(&[3, 3])),
                ("strides", ints(&[2, 2])),
                ("ceil_mode", Attribute::Int(1)),
            ],
        ),
        (
            "dilations",
            vec![
                ("kernel_shape", ints(&[3, 2])),
                ("strides", ints(&[1, 2])),
                ("dilations", ints(&[2, 3])),
                ("pads", ints(&[2, 1, 1, 2])),
            ],
        ),
        (
            "dilations ceil",
            vec![
                ("kernel_shape", ints(&[2, 2])),
                ("strides", ints(&[3, 3])),
                ("dilations", ints(&[2, 2])),
                ("ceil_mode", Attribute::Int(1)),
            ],
        ),
        (
            "same_upper",
            vec![
                ("kernel_shape", ints(&[3, 3])),
                ("strides", ints(&[2, 2])),
                ("auto_pad", s("SAME_UPPER")),
            ],
        ),
        (
            "same_lower",
            vec![
                ("kernel_shape", ints(&[4, 4])),
                ("strides", ints(&[3, 2])),
                ("auto_pad", s("SAME_LOWER")),
            ],
        ),
        (
            "valid",
            vec![
                ("kernel_shape", ints(&[3, 5])),
                ("strides", ints(&[2, 1])),
                ("auto_pad", s("VALID")),
            ],
        ),
    ];
    for (what, attrs) in cases {
        for opset in [10, 12] {
            let n = node("MaxPool", 1, 2, &attrs);
            check(
                &ep,
                &n,
                opset,
                &[Some(x.clone())],
                EXACT,
                &format!("maxpool {what} opset {opset}"),
            );
        }
    }
    // Opset 8 (no dilations or ceil_mode) with Indices.
    let n = node(
        "MaxPool",
        1,
        2,
        &[("kernel_shape", ints(&[2, 2])), ("strides", ints(&[2, 2]))],
    );
    check(&ep, &n, 8, &[Some(x)], EXACT, "maxpool opset 8");
}

#[test]
fn maxpool_1d_3d_and_4d_with_indices() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    // (shape, kernel_shape, strides, pads)
    type Case = (Vec<usize>, Vec<i64>, Vec<i64>, Vec<i64>);
    let cases: Vec<Case> = vec![
        (vec![2, 3, 17], vec![3], vec![2], vec![1, 1]),
        (
            vec![1, 2, 5, 6, 7],
            vec![2, 3, 2],
            vec![1, 2, 2],
            vec![0, 1, 1, 1, 1, 0],
        ),
        (
            vec![1, 2, 3, 4, 5, 6],
            vec![2, 2, 2, 3],
            vec![1, 2, 1, 2],
            vec![0; 8],
        ),
    ];
    for (case, (shape, k, st, pads)) in cases.into_iter().enumerate() {
        for storage_order in [0, 1] {
            let layout = LAYOUTS[case % 3];
            let x = uniform(&mut rng, DataType::Float32, &shape, -2.0, 2.0).with_layout(layout);
            let n = node(
                "MaxPool",
                1,
                2,
                &[
                    ("kernel_shape", ints(&k)),
                    ("strides", ints(&st)),
                    ("pads", ints(&pads)),
                    ("storage_order", Attribute::Int(storage_order)),
                ],
            );
            check(
                &ep,
                &n,
                12,
                &[Some(x)],
                EXACT,
                &format!("maxpool {shape:?} k {k:?} storage_order {storage_order}"),
            );
        }
    }
}

#[test]
fn maxpool_int8_uint8_and_half_types() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    let attrs = [
        ("kernel_shape", ints(&[3, 3])),
        ("strides", ints(&[2, 2])),
        ("pads", ints(&[1, 0, 1, 0])),
    ];
    for dtype in [DataType::Int8, DataType::Uint8] {
        let x =
            random_numeric(&mut rng, dtype, &[2, 3, 10, 9], -100, 100).with_layout(Layout::Padded);
        let n = node("MaxPool", 1, 2, &attrs);
        check(
            &ep,
            &n,
            12,
            &[Some(x.clone())],
            EXACT,
            &format!("maxpool {dtype}"),
        );
        let n = node("GlobalMaxPool", 1, 1, &[]);
        check(
            &ep,
            &n,
            1,
            &[Some(x)],
            EXACT,
            &format!("globalmaxpool {dtype}"),
        );
    }
    for half in [DataType::Float16, DataType::BFloat16] {
        let x = uniform(&mut rng, DataType::Float32, &[2, 3, 10, 9], -4.0, 4.0);
        let n = node("MaxPool", 1, 2, &attrs);
        check_half(&ep, &n, 22, &[Some(x)], half, "maxpool");
    }
}

// ---- AveragePool, LpPool ----

#[test]
fn averagepool_count_include_pad_and_ceil_mode() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    let geometries: Vec<Vec<(&str, Attribute)>> = vec![
        vec![
            ("kernel_shape", ints(&[3, 3])),
            ("strides", ints(&[2, 2])),
            ("pads", ints(&[1, 1, 1, 1])),
        ],
        vec![
            ("kernel_shape", ints(&[3, 2])),
            ("strides", ints(&[2, 2])),
            ("pads", ints(&[1, 0, 1, 1])),
            ("ceil_mode", Attribute::Int(1)),
        ],
        vec![
            ("kernel_shape", ints(&[5, 5])),
            ("strides", ints(&[1, 1])),
            ("auto_pad", s("SAME_UPPER")),
        ],
    ];
    for (g, attrs) in geometries.iter().enumerate() {
        for include in [0, 1] {
            let mut a = attrs.clone();
            a.push(("count_include_pad", Attribute::Int(include)));
            let n = node("AveragePool", 1, 1, &a);
            for (k, dtype) in [DataType::Float32, DataType::Float64]
                .into_iter()
                .enumerate()
            {
                let x = uniform(&mut rng, dtype, &[2, 3, 11, 10], -3.0, 3.0)
                    .with_layout(LAYOUTS[(g + k + include as usize) % 3]);
                check(
                    &ep,
                    &n,
                    11,
                    &[Some(x)],
                    tol(dtype),
                    &format!("averagepool {g} include_pad {include} {dtype}"),
                );
            }
            let x = uniform(&mut rng, DataType::Float32, &[1, 2, 11, 10], -3.0, 3.0);
            check_half(
                &ep,
                &n,
                19,
                &[Some(x.clone())],
                DataType::Float16,
                "averagepool",
            );
            check_half(&ep, &n, 19, &[Some(x)], DataType::BFloat16, "averagepool");
        }
    }
    // Opset 19 dilations, 1-D and 3-D.
    let n = node(
        "AveragePool",
        1,
        1,
        &[
            ("kernel_shape", ints(&[2, 3])),
            ("dilations", ints(&[2, 2])),
            ("pads", ints(&[1, 1, 1, 1])),
            ("count_include_pad", Attribute::Int(1)),
        ],
    );
    let x = uniform(&mut rng, DataType::Float32, &[1, 2, 9, 9], -1.0, 1.0);
    check(&ep, &n, 19, &[Some(x)], F32_TOL, "averagepool dilations");
    let n = node(
        "AveragePool",
        1,
        1,
        &[("kernel_shape", ints(&[4])), ("strides", ints(&[3]))],
    );
    let x = uniform(&mut rng, DataType::Float32, &[2, 2, 20], -1.0, 1.0);
    check(&ep, &n, 11, &[Some(x)], F32_TOL, "averagepool 1-D");
    let n = node(
        "AveragePool",
        1,
        1,
        &[
            ("kernel_shape", ints(&[2, 2, 2])),
            ("strides", ints(&[2, 2, 2])),
            ("ceil_mode", Attribute::Int(1)),
        ],
    );
    let x = uniform(&mut rng, DataType::Float32, &[1, 3, 5, 6, 7], -1.0, 1.0)
        .with_layout(Layout::Reversed);
    check(&ep, &n, 11, &[Some(x)], F32_TOL, "averagepool 3-D ceil");
}

#[test]
fn lppool_p1_p2_p3_and_global_lp() {
    let ep = gpu();
    let mut rng = Rng::new(6);
    for p in [1i64, 2, 3] {
        let n = node(
            "LpPool",
            1,
            1,
            &[
                ("kernel_shape", ints(&[3, 3])),
                ("strides", ints(&[2, 1])),
                ("pads", ints(&[1, 1, 0, 1])),
                ("p", Attribute::Int(p)),
            ],
        );
        let x = uniform(&mut rng, DataType::Float32, &[2, 3, 9, 8], -2.0, 2.0);
        check(
            &ep,
            &n,
            11,
            &[Some(x.clone())],
            (1e-4, 1e-5),
            &format!("lppool p={p}"),
        );
        check_half(&ep, &n, 18, &[Some(x)], DataType::Float16, "lppool");
        let x = uniform(&mut rng, DataType::Float64, &[1, 2, 7, 7], -2.0, 2.0)
            .with_layout(Layout::Reversed);
        check(
            &ep,
            &n,
            11,
            &[Some(x)],
            (1e-10, 1e-10),
            &format!("lppool p={p} f64"),
        );
        let n = node("GlobalLpPool", 1, 1, &[("p", Attribute::Int(p))]);
        let x = uniform(&mut rng, DataType::Float32, &[2, 5, 6, 7], -2.0, 2.0);
        check(
            &ep,
            &n,
            2,
            &[Some(x)],
            (1e-4, 1e-5),
            &format!("globallppool p={p}"),
        );
    }
    // Opset 18: ceil_mode and dilations.
    let n = node(
        "LpPool",
        1,
        1,
        &[
            ("kernel_shape", ints(&[2, 2])),
            ("strides", ints(&[2, 2])),
            ("dilations", ints(&[2, 1])),
            ("ceil_mode", Attribute::Int(1)),
            ("p", Attribute::Int(2)),
        ],
    );
    let x = uniform(&mut rng, DataType::Float32, &[1, 2, 10, 9], -2.0, 2.0);
    check(&ep, &n, 18, &[Some(x)], (1e-4, 1e-5), "lppool opset 18");
}

// ---- global pools ----

#[test]
fn global_pools_7x7_56x56_1x1_and_split_planes() {
    let ep = gpu();
    let mut rng = Rng::new(7);
    // (shape, what): 7x7 with many planes (warp per plane), 56x56 with few planes (block per
    // plane), 1x1, 256x256 with two planes (split into parts + finish), 3-D.
    let shapes: Vec<(Vec<usize>, &str)> = vec![
        (vec![2, 64, 7, 7], "7x7"),
        (vec![1, 8, 56, 56], "56x56"),
        (vec![3, 5, 1, 1], "1x1"),
        (vec![1, 2, 256, 256], "256x256 split"),
        (vec![2, 3, 4, 5, 6], "3-D"),
    ];
    for (case, (shape, what)) in shapes.into_iter().enumerate() {
        for op in ["GlobalAveragePool", "GlobalMaxPool"] {
            let n = node(op, 1, 1, &[]);
            for (k, dtype) in [DataType::Float32, DataType::Float64]
                .into_iter()
                .enumerate()
            {
                let layout = LAYOUTS[(case + k) % 3];
                let x = uniform(&mut rng, dtype, &shape, -1.0, 3.0).with_layout(layout);
                let t = if op == "GlobalMaxPool" {
                    EXACT
                } else if dtype == DataType::Float32 {
                    (1e-5, 1e-6)
                } else {
                    F64_TOL
                };
                check(
                    &ep,
                    &n,
                    1,
                    &[Some(x)],
                    t,
                    &format!("{op} {what} {dtype} {layout:?}"),
                );
            }
            let x = uniform(&mut rng, DataType::Float32, &shape, -1.0, 3.0);
            check_half(&ep, &n, 22, &[Some(x.clone())], DataType::Float16, op);
            check_half(&ep, &n, 22, &[Some(x)], DataType::BFloat16, op);
        }
    }
}

// ---- Resize / Upsample ----

const CTMS: [&str; 6] = [
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
    "tf_half_pixel_for_nn",
];

fn resize_node(attrs: &[(&str, Attribute)]) -> Node {
    node("Resize", 4, 1, attrs)
}

/// Resize inputs (X, roi, scales, sizes) with roi and one of scales/sizes omitted.
fn with_scales(x: T, scales: &[f32]) -> Vec<Option<T>> {
    vec![Some(x), None, Some(f32s(&[scales.len()], scales)), None]
}

fn with_sizes(x: T, sizes: &[i64]) -> Vec<Option<T>> {
    vec![Some(x), None, None, Some(i64s(&[sizes.len()], sizes))]
}

#[test]
fn resize_nearest_every_nearest_mode_and_coordinate_mode() {
    let ep = gpu();
    let mut rng = Rng::new(8);
    let x = uniform(&mut rng, DataType::Float32, &[2, 3, 7, 9], -1.0, 1.0);
    for nm in ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"] {
        for ctm in CTMS {
            for scales in [
                [1.0f32, 1.0, 2.0, 3.0],
                [1.0, 1.0, 0.5, 0.6],
                [1.0, 1.0, 1.7, 0.8],
            ] {
                let n = omit(
                    resize_node(&[
                        ("mode", s("nearest")),
                        ("nearest_mode", s(nm)),
                        ("coordinate_transformation_mode", s(ctm)),
                    ]),
                    &[1, 3],
                );
                check(
                    &ep,
                    &n,
                    19,
                    &with_scales(x.clone(), &scales),
                    EXACT,
                    &format!("resize nearest {nm} {ctm} {scales:?}"),
                );
            }
        }
    }
}

#[test]
fn resize_linear_and_cubic_every_coordinate_mode() {
    let ep = gpu();
    let mut rng = Rng::new(9);
    let x = uniform(&mut rng, DataType::Float32, &[1, 2, 8, 7], -1.0, 1.0);
    for mode in ["linear", "cubic"] {
        for ctm in CTMS {
            for scales in [[1.0f32, 1.0, 2.0, 2.5], [1.0, 1.0, 0.5, 0.6]] {
                let n = omit(
                    resize_node(&[
                        ("mode", s(mode)),
                        ("coordinate_transformation_mode", s(ctm)),
                    ]),
                    &[1, 3],
                );
                check(
                    &ep,
                    &n,
                    19,
                    &with_scales(x.clone(), &scales),
                    F32_TOL,
                    &format!("resize {mode} {ctm} {scales:?}"),
                );
            }
        }
    }
    // cubic_coeff_a and exclude_outside; one resized axis; three resized axes.
    let n = omit(
        resize_node(&[
            ("mode", s("cubic")),
            ("cubic_coeff_a", Attribute::Float(-0.5)),
            ("exclude_outside", Attribute::Int(1)),
        ]),
        &[1, 3],
    );
    check(
        &ep,
        &n,
        13,
        &with_scales(x.clone(), &[1.0, 1.0, 1.5, 0.7]),
        F32_TOL,
        "resize cubic a=-0.5 exclude_outside",
    );
    let n = omit(resize_node(&[("mode", s("linear"))]), &[1, 3]);
    check(
        &ep,
        &n,
        13,
        &with_scales(x.clone(), &[1.0, 1.0, 1.0, 3.0]),
        F32_TOL,
        "resize linear one axis",
    );
    check(
        &ep,
        &n,
        13,
        &with_scales(x.clone(), &[1.0, 2.0, 1.5, 0.5]),
        F32_TOL,
        "resize linear three axes",
    );
    let x5 = uniform(&mut rng, DataType::Float32, &[1, 2, 3, 4, 5], -1.0, 1.0);
    check(
        &ep,
        &n,
        13,
        &with_scales(x5, &[1.0, 1.0, 2.0, 1.5, 0.6]),
        F32_TOL,
        "resize trilinear",
    );
    // Identity (every axis's plan is the identity): a plain copy.
    check(
        &ep,
        &n,
        13,
        &with_scales(x, &[1.0, 1.0, 1.0, 1.0]),
        EXACT,
        "resize identity",
    );
}

#[test]
fn resize_antialias_axes_and_aspect_policies() {
    let ep = gpu();
    let mut rng = Rng::new(10);
    let x = uniform(&mut rng, DataType::Float32, &[1, 2, 16, 12], -1.0, 1.0);
    for mode in ["linear", "cubic"] {
        for scales in [[1.0f32, 1.0, 0.25, 0.5], [1.0, 1.0, 0.6, 1.5]] {
            let n = omit(
                resize_node(&[("mode", s(mode)), ("antialias", Attribute::Int(1))]),
                &[1, 3],
            );
            check(
                &ep,
                &n,
                18,
                &with_scales(x.clone(), &scales),
                F32_TOL,
                &format!("resize {mode} antialias {scales:?}"),
            );
        }
    }
    // axes with scales of that length, negative axes.
    let n = omit(
        resize_node(&[("mode", s("linear")), ("axes", ints(&[2, 3]))]),
        &[1, 3],
    );
    check(
        &ep,
        &n,
        18,
        &with_scales(x.clone(), &[2.0, 0.5]),
        F32_TOL,
        "resize axes [2, 3]",
    );
    let n = omit(
        resize_node(&[("mode", s("nearest")), ("axes", ints(&[-1]))]),
        &[1, 2],
    );
    check(
        &ep,
        &n,
        18,
        &with_sizes(x.clone(), &[30]),
        EXACT,
        "resize axes [-1] sizes",
    );
    for policy in ["stretch", "not_larger", "not_smaller"] {
        let n = omit(
            resize_node(&[
                ("mode", s("linear")),
                ("axes", ints(&[2, 3])),
                ("keep_aspect_ratio_policy", s(policy)),
            ]),
            &[1, 2],
        );
        check(
            &ep,
            &n,
            18,
            &with_sizes(x.clone(), &[20, 30]),
            F32_TOL,
            &format!("resize aspect {policy}"),
        );
    }
}

#[test]
fn resize_tf_crop_and_resize_with_roi_and_extrapolation() {
    let ep = gpu();
    let mut rng = Rng::new(11);
    let x = uniform(&mut rng, DataType::Float32, &[1, 2, 9, 8], -1.0, 1.0);
    for mode in ["nearest", "linear", "cubic"] {
        let n = node(
            "Resize",
            4,
            1,
            &[
                ("mode", s(mode)),
                ("coordinate_transformation_mode", s("tf_crop_and_resize")),
                ("extrapolation_value", Attribute::Float(-7.5)),
            ],
        );
        // The roi reaches outside the input on both resized axes.
        let roi = f32s(&[8], &[0.0, 0.0, -0.2, 0.3, 1.0, 1.0, 0.9, 1.25]);
        let with_scales = omit(n.clone(), &[3]);
        check(
            &ep,
            &with_scales,
            13,
            &[
                Some(x.clone()),
                Some(roi.clone()),
                Some(f32s(&[4], &[1.0, 1.0, 1.5, 2.0])),
                None,
            ],
            F32_TOL,
            &format!("resize tf_crop_and_resize {mode} scales"),
        );
        let with_sizes = omit(n, &[2]);
        check(
            &ep,
            &with_sizes,
            13,
            &[
                Some(x.clone()),
                Some(roi),
                None,
                Some(i64s(&[4], &[1, 2, 5, 11])),
            ],
            F32_TOL,
            &format!("resize tf_crop_and_resize {mode} sizes"),
        );
    }
}

#[test]
fn resize_opsets_sizes_vs_scales_and_upsample() {
    let ep = gpu();
    let mut rng = Rng::new(12);
    let x = uniform(&mut rng, DataType::Float32, &[2, 3, 5, 6], -1.0, 1.0);
    // Resize-10: (X, scales), nearest rounds by the resize direction, asymmetric.
    for mode in ["nearest", "linear"] {
        let n = node("Resize", 2, 1, &[("mode", s(mode))]);
        for scales in [[1.0f32, 1.0, 2.0, 3.0], [1.0, 1.0, 0.6, 0.5]] {
            check(
                &ep,
                &n,
                10,
                &[Some(x.clone()), Some(f32s(&[4], &scales))],
                F32_TOL,
                &format!("resize-10 {mode} {scales:?}"),
            );
        }
    }
    // Resize-11: roi wired (unused), scales given; then sizes with an empty scales input.
    let n = node("Resize", 4, 1, &[("mode", s("linear"))]);
    let roi = f32s(&[0], &[]);
    check(
        &ep,
        &omit(n.clone(), &[3]),
        11,
        &[
            Some(x.clone()),
            Some(roi.clone()),
            Some(f32s(&[4], &[1.0, 1.0, 1.5, 1.5])),
            None,
        ],
        F32_TOL,
        "resize-11 scales",
    );
    check(
        &ep,
        &n,
        11,
        &[
            Some(x.clone()),
            Some(roi),
            Some(f32s(&[0], &[])),
            Some(i64s(&[4], &[2, 3, 8, 4])),
        ],
        F32_TOL,
        "resize-11 sizes with empty scales",
    );
    // Upsample-7 (scales attribute) and Upsample-9 (scales input).
    for mode in ["nearest", "linear"] {
        let n = node(
            "Upsample",
            1,
            1,
            &[
                ("mode", s(mode)),
                ("scales", Attribute::Floats(vec![1.0, 1.0, 2.0, 3.0])),
            ],
        );
        check(
            &ep,
            &n,
            7,
            &[Some(x.clone())],
            F32_TOL,
            &format!("upsample-7 {mode}"),
        );
        let n = node("Upsample", 2, 1, &[("mode", s(mode))]);
        check(
            &ep,
            &n,
            9,
            &[Some(x.clone()), Some(f32s(&[4], &[1.0, 1.0, 2.5, 2.0]))],
            F32_TOL,
            &format!("upsample-9 {mode}"),
        );
    }
}

#[test]
fn resize_dtypes_and_strided_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(13);
    let scales = [1.0f32, 1.0, 1.75, 0.6];
    for mode in ["nearest", "linear", "cubic"] {
        let n = omit(resize_node(&[("mode", s(mode))]), &[1, 3]);
        for (k, dtype) in [
            DataType::Float64,
            DataType::Int8,
            DataType::Uint8,
            DataType::Int16,
            DataType::Uint16,
            DataType::Int32,
            DataType::Int64,
            DataType::Uint64,
        ]
        .into_iter()
        .enumerate()
        {
            let x = if dtype.is_float() {
                uniform(&mut rng, dtype, &[2, 2, 6, 7], -3.0, 3.0)
            } else {
                random_numeric(&mut rng, dtype, &[2, 2, 6, 7], 0, 100)
            }
            .with_layout(LAYOUTS[k % 3]);
            // Integers round half to even after the weighted sum; a sum that lands on .5
            // may round either way by one ulp of float64.
            let t = if mode == "nearest" {
                EXACT
            } else if dtype.is_float() {
                F64_TOL
            } else {
                (0.0, 1.0)
            };
            check(
                &ep,
                &n,
                19,
                &with_scales(x, &scales),
                t,
                &format!("resize {mode} {dtype}"),
            );
        }
        for layout in LAYOUTS {
            let x =
                uniform(&mut rng, DataType::Float32, &[2, 3, 6, 7], -3.0, 3.0).with_layout(layout);
            check(
                &ep,
                &n,
                19,
                &with_scales(x, &scales),
                F32_TOL,
                &format!("resize {mode} {layout:?}"),
            );
        }
        for half in [DataType::Float16, DataType::BFloat16] {
            let x = uniform(&mut rng, DataType::Float32, &[1, 3, 6, 7], -3.0, 3.0);
            check_half(&ep, &n, 19, &with_scales(x, &scales), half, mode);
        }
    }
}

#[test]
fn resize_nearest_vector_path_every_width() {
    // Innermost output extents that are multiples of 16 take the 16-byte-store kernel.
    let ep = gpu();
    let mut rng = Rng::new(20);
    for (k, dtype) in [
        DataType::Uint8,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Int64,
    ]
    .into_iter()
    .enumerate()
    {
        let layout = LAYOUTS[k % 3];
        let x = random_numeric(&mut rng, dtype, &[2, 3, 8, 16], 0, 100).with_layout(layout);
        for scales in [
            [1.0f32, 1.0, 2.0, 2.0],
            [1.0, 1.0, 0.5, 4.0],
            [1.0, 2.0, 1.0, 1.0],
        ] {
            let n = omit(resize_node(&[("mode", s("nearest"))]), &[1, 3]);
            check(
                &ep,
                &n,
                19,
                &with_scales(x.clone(), &scales),
                EXACT,
                &format!("resize nearest {dtype} {scales:?} {layout:?}"),
            );
        }
        // With crop coordinates outside the input (the extrapolation value).
        let n = node(
            "Resize",
            4,
            1,
            &[
                ("mode", s("nearest")),
                ("coordinate_transformation_mode", s("tf_crop_and_resize")),
                ("extrapolation_value", Attribute::Float(3.0)),
            ],
        );
        let roi = f32s(&[8], &[0.0, 0.0, -0.2, 0.3, 1.0, 1.0, 0.9, 1.25]);
        check(
            &ep,
            &omit(n, &[2]),
            13,
            &[Some(x), Some(roi), None, Some(i64s(&[4], &[2, 3, 8, 32]))],
            EXACT,
            &format!("resize nearest crop {dtype}"),
        );
    }
}

#[test]
fn resize_reuses_tables_across_shapes_and_becomes_capturable() {
    let ep = gpu();
    let mut rng = Rng::new(14);
    let n = omit(resize_node(&[("mode", s("linear"))]), &[1, 3]);
    let scales = f32s(&[4], &[1.0, 1.0, 2.0, 2.0]);
    let kernel = ep.get_kernel(&n, &[vec![1, 2, 4, 4], vec![4]], 19).unwrap();
    assert!(
        matches!(kernel.capture_support(), CaptureSupport::Unsupported { .. }),
        "Resize reads its scales on the host: not capturable before an eager run"
    );
    for shape in [[1, 2, 4, 4], [1, 2, 5, 3], [1, 2, 4, 4]] {
        let x = uniform(&mut rng, DataType::Float32, &shape, -1.0, 1.0);
        let mut bound = Bound::new(&ep, &[x.clone(), scales.clone()], &[]);
        let types = bound.output_types(kernel.as_ref()).unwrap();
        assert_eq!(
            types,
            vec![(DataType::Float32, vec![1, 2, 2 * shape[2], 2 * shape[3]])]
        );
        bound.set_outputs(&types);
        bound.execute(kernel.as_ref()).unwrap();
        let got = bound.read().unwrap();
        let want = reference(
            &n,
            19,
            &[Some(x), None, Some(scales.clone()), None],
            "resize",
        );
        close_values(&got[0], &want[0], 1e-5, 1e-5, &format!("resize {shape:?}"));
    }
    assert_eq!(kernel.capture_support(), CaptureSupport::Supported);
}

// ---- DepthToSpace / SpaceToDepth ----

#[test]
fn depth_to_space_and_space_to_depth_modes_dtypes_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(15);
    let dtypes = [
        DataType::Float32,
        DataType::Uint8,
        DataType::Int64,
        DataType::Float16,
        DataType::Bool,
    ];
    for (case, dtype) in dtypes.into_iter().enumerate() {
        for b in [2i64, 3] {
            let layout = LAYOUTS[(case + b as usize) % 3];
            for mode in ["DCR", "CRD"] {
                let bu = b as usize;
                let x = random_bytes(&mut rng, dtype, &[2, 2 * bu * bu, 3, 4]).with_layout(layout);
                let n = node(
                    "DepthToSpace",
                    1,
                    1,
                    &[("blocksize", Attribute::Int(b)), ("mode", s(mode))],
                );
                check(
                    &ep,
                    &n,
                    13,
                    &[Some(x)],
                    EXACT,
                    &format!("depthtospace {mode} b={b} {dtype} {layout:?}"),
                );
                let x = random_bytes(&mut rng, dtype, &[2, 3, 2 * bu, 3 * bu]).with_layout(layout);
                let n = node(
                    "SpaceToDepth",
                    1,
                    1,
                    &[("blocksize", Attribute::Int(b)), ("mode", s(mode))],
                );
                check(
                    &ep,
                    &n,
                    13,
                    &[Some(x)],
                    EXACT,
                    &format!("spacetodepth {mode} b={b} {dtype} {layout:?}"),
                );
            }
        }
    }
    // DepthToSpace-1 (DCR only).
    let x = random_bytes(&mut rng, DataType::Float32, &[1, 8, 2, 3]);
    let n = node("DepthToSpace", 1, 1, &[("blocksize", Attribute::Int(2))]);
    check(&ep, &n, 1, &[Some(x)], EXACT, "depthtospace-1");
}

// ---- GridSample ----

#[test]
fn grid_sample_modes_padding_and_align_corners() {
    let ep = gpu();
    let mut rng = Rng::new(16);
    let x = uniform(&mut rng, DataType::Float32, &[2, 3, 5, 6], -1.0, 1.0);
    // Points inside and outside [-1, 1] exercise every padding mode.
    let grid = uniform(&mut rng, DataType::Float32, &[2, 4, 7, 2], -1.3, 1.3);
    for (mode16, mode20) in [
        ("bilinear", "linear"),
        ("nearest", "nearest"),
        ("bicubic", "cubic"),
    ] {
        for padding in ["zeros", "border", "reflection"] {
            for align in [0, 1] {
                let attrs = |mode: &str| {
                    vec![
                        ("mode", s(mode)),
                        ("padding_mode", s(padding)),
                        ("align_corners", Attribute::Int(align)),
                    ]
                };
                let what = format!("gridsample {mode16} {padding} align {align}");
                let n = node("GridSample", 2, 1, &attrs(mode16));
                let layout = LAYOUTS[align as usize + 1];
                check(
                    &ep,
                    &n,
                    16,
                    &[Some(x.clone().with_layout(layout)), Some(grid.clone())],
                    F32_TOL,
                    &what,
                );
                let n = node("GridSample", 2, 1, &attrs(mode20));
                check(
                    &ep,
                    &n,
                    20,
                    &[
                        Some(x.clone()),
                        Some(grid.clone().with_layout(Layout::Reversed)),
                    ],
                    F32_TOL,
                    &format!("{what} opset 20"),
                );
            }
        }
    }
    // float64 X with a float32 grid; half types against float32.
    let n = node("GridSample", 2, 1, &[("mode", s("bicubic"))]);
    let x64 = recast(&x, DataType::Float64);
    check(
        &ep,
        &n,
        16,
        &[Some(x64), Some(grid.clone())],
        F64_TOL,
        "gridsample f64",
    );
    for half in [DataType::Float16, DataType::BFloat16] {
        check_half(
            &ep,
            &n,
            16,
            &[Some(x.clone()), Some(grid.clone())],
            half,
            "gridsample",
        );
    }
}

#[test]
fn grid_sample_1d_3d_and_4d_at_opset_20() {
    let ep = gpu();
    let mut rng = Rng::new(17);
    let cases: Vec<(Vec<usize>, Vec<usize>, Vec<&str>)> = vec![
        (
            vec![2, 3, 9],
            vec![2, 11, 1],
            vec!["linear", "nearest", "cubic"],
        ),
        (
            vec![1, 2, 4, 5, 6],
            vec![1, 3, 2, 4, 3],
            vec!["linear", "nearest", "cubic"],
        ),
        (
            vec![1, 2, 3, 3, 4, 4],
            vec![1, 2, 2, 3, 2, 4],
            vec!["linear", "nearest"],
        ),
    ];
    for (xs, gs, modes) in cases {
        let x = uniform(&mut rng, DataType::Float32, &xs, -1.0, 1.0);
        let grid = uniform(&mut rng, DataType::Float32, &gs, -1.2, 1.2);
        for mode in modes {
            for padding in ["zeros", "border", "reflection"] {
                let n = node(
                    "GridSample",
                    2,
                    1,
                    &[("mode", s(mode)), ("padding_mode", s(padding))],
                );
                check(
                    &ep,
                    &n,
                    20,
                    &[Some(x.clone()), Some(grid.clone())],
                    F32_TOL,
                    &format!("gridsample {xs:?} {mode} {padding}"),
                );
            }
        }
    }
}

// ---- bad inputs ----

#[test]
fn bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(18);
    let x = uniform(&mut rng, DataType::Float32, &[1, 2, 3, 3], -1.0, 1.0);
    // A kernel larger than the padded input.
    let n = node("MaxPool", 1, 1, &[("kernel_shape", ints(&[5, 5]))]);
    expect_err(
        &ep,
        &n,
        12,
        &[Some(x.clone())],
        "smaller than the dilated kernel",
    );
    let n = node(
        "AveragePool",
        1,
        1,
        &[("kernel_shape", ints(&[3, 3])), ("strides", ints(&[1]))],
    );
    expect_err(&ep, &n, 11, &[Some(x.clone())], "strides has 1 values");
    // A pool of a 2-D input.
    let n = node("GlobalAveragePool", 1, 1, &[]);
    let flat = uniform(&mut rng, DataType::Float32, &[4, 5], -1.0, 1.0);
    expect_err(&ep, &n, 1, &[Some(flat)], "must be [N, C, spatial...]");
    // Wrong scales length; both scales and sizes; none.
    let n = omit(resize_node(&[("mode", s("linear"))]), &[1, 3]);
    expect_err(
        &ep,
        &n,
        19,
        &with_scales(x.clone(), &[1.0, 2.0]),
        "scales has 2 values",
    );
    let n = omit(resize_node(&[]), &[1]);
    expect_err(
        &ep,
        &n,
        19,
        &[
            Some(x.clone()),
            None,
            Some(f32s(&[4], &[1.0, 1.0, 2.0, 2.0])),
            Some(i64s(&[4], &[1, 2, 6, 6])),
        ],
        "not both",
    );
    // tf_crop_and_resize without roi.
    let n = omit(
        resize_node(&[("coordinate_transformation_mode", s("tf_crop_and_resize"))]),
        &[1, 3],
    );
    expect_err(
        &ep,
        &n,
        13,
        &with_scales(x.clone(), &[1.0, 1.0, 2.0, 2.0]),
        "needs the roi",
    );
    // DepthToSpace channels not divisible; GridSample grid not matching X.
    let n = node("DepthToSpace", 1, 1, &[("blocksize", Attribute::Int(2))]);
    expect_err(&ep, &n, 13, &[Some(x.clone())], "not divisible");
    let n = node("GridSample", 2, 1, &[]);
    let grid = uniform(&mut rng, DataType::Float32, &[1, 4, 4, 3], -1.0, 1.0);
    expect_err(&ep, &n, 16, &[Some(x.clone()), Some(grid)], "do not match");
    // Unknown attribute values are refused when the kernel is built.
    let n = resize_node(&[("mode", s("bilinear-ish"))]);
    let err = ep
        .get_kernel(&n, &[vec![1, 2, 3, 3]], 19)
        .err()
        .expect("an unknown mode is an error")
        .to_string();
    assert!(err.contains(&n.name) && err.contains("mode"), "{err}");
    // Integer inputs to AveragePool are a dtype refusal (the CPU provider's too).
    let xi = random_numeric(&mut rng, DataType::Int32, &[1, 2, 3, 3], 0, 9);
    let n = node("AveragePool", 1, 1, &[("kernel_shape", ints(&[2, 2]))]);
    assert!(matches!(
        gpu_run(&ep, &n, 19, &[Some(xi)]),
        Err(EpError::UnsupportedDtype { .. })
    ));
}

// ---- throughput ----

/// Average time of `runs` executions of a bound kernel (after one warm-up run).
fn time_it(ep: &CudaExecutionProvider, n: &Node, opset: u64, inputs: &[T]) -> (f64, Vec<T>) {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(n, &shapes, opset).unwrap();
    let mut b = Bound::new(ep, inputs, &[]);
    let types = b.output_types(kernel.as_ref()).unwrap();
    b.set_outputs(&types);
    b.execute(kernel.as_ref()).unwrap();
    ep.runtime().synchronize().unwrap();
    let runs = 20;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        b.execute(kernel.as_ref()).unwrap();
    }
    ep.runtime().synchronize().unwrap();
    (
        start.elapsed().as_secs_f64() / runs as f64,
        b.read().unwrap(),
    )
}

#[test]
fn pool_and_resize_throughput() {
    let ep = gpu();
    let mut rng = Rng::new(19);
    let x = uniform(&mut rng, DataType::Float32, &[8, 64, 112, 112], -1.0, 1.0);
    let cases: Vec<(Node, u64, Vec<T>, &str)> = vec![
        (
            node(
                "MaxPool",
                1,
                1,
                &[
                    ("kernel_shape", ints(&[3, 3])),
                    ("strides", ints(&[2, 2])),
                    ("pads", ints(&[1, 1, 1, 1])),
                ],
            ),
            12,
            vec![x.clone()],
            "MaxPool 3x3/2",
        ),
        (
            node("GlobalAveragePool", 1, 1, &[]),
            1,
            vec![x.clone()],
            "GlobalAveragePool",
        ),
        (
            node("GlobalAveragePool", 1, 1, &[]),
            1,
            vec![uniform(
                &mut rng,
                DataType::Float32,
                &[1, 4, 1024, 1024],
                -1.0,
                1.0,
            )],
            "GlobalAveragePool few planes",
        ),
        (
            omit(resize_node(&[("mode", s("nearest"))]), &[1, 3]),
            19,
            vec![
                uniform(&mut rng, DataType::Float32, &[2, 256, 80, 80], -1.0, 1.0),
                f32s(&[4], &[1.0, 1.0, 2.0, 2.0]),
            ],
            "Resize nearest 2x",
        ),
        (
            omit(resize_node(&[("mode", s("linear"))]), &[1, 3]),
            19,
            vec![
                uniform(&mut rng, DataType::Float32, &[2, 256, 80, 80], -1.0, 1.0),
                f32s(&[4], &[1.0, 1.0, 2.0, 2.0]),
            ],
            "Resize linear 2x",
        ),
    ];
    for (n, opset, inputs, what) in cases {
        let (secs, got) = time_it(&ep, &n, opset, &inputs);
        let bytes = 4.0 * (inputs[0].numel() + got[0].numel()) as f64;
        eprintln!(
            "{what} {:?} -> {:?}: {:.1} us, {:.0} GB/s (read + write)",
            inputs[0].shape,
            got[0].shape,
            secs * 1e6,
            bytes / secs / 1e9
        );
        // Spot checks against the CPU provider on the full result.
        let mut refs: Vec<Option<T>> = inputs.into_iter().map(Some).collect();
        if n.op_type == "Resize" {
            refs = vec![refs[0].take(), None, refs[1].take(), None];
        }
        let want = reference(&n, opset, &refs, what);
        let t = if n.op_type == "MaxPool" || what.contains("nearest") {
            EXACT
        } else {
            (1e-4, 1e-5)
        };
        let mut r = Rng::new(3);
        for _ in 0..20_000 {
            let i = r.below(want[0].numel());
            let (g, w) = (get(&got[0], i), get(&want[0], i));
            assert!(
                (g - w).abs() <= t.1 + t.0 * w.abs(),
                "{what}: element {i}: got {g}, want {w}"
            );
        }
    }
}
