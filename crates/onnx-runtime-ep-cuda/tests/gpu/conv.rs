//! Conv and com.microsoft FusedConv against the CPU provider on random inputs: 1-D, 2-D and
//! 3-D; groups, depthwise, dilations, strides, asymmetric pads and every auto_pad; bias and Z
//! given and omitted; every FusedConv activation; float16/bfloat16 against a float32
//! reference; float64; strided input layouts; and, for the whole family (ConvTranspose,
//! ConvInteger and QLinearConv too), bad shapes, output types and eager-vs-replay under graph
//! capture. The pointwise GEMM path and the ResNet-50 timing are in conv_pointwise.rs,
//! ConvTranspose in conv_transpose.rs, ConvInteger and QLinearConv in conv_quant.rs; shared
//! helpers in conv_common.rs.

use super::conv_common::*;
use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider, Kernel};
use onnx_runtime_ir::{Attribute, DataType, Node};

#[test]
fn conv_1d_2d_3d_with_and_without_bias_every_opset() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    let cases: Vec<Case> = vec![
        (vec![2, 4, 9], vec![6, 4, 3], attrs(&[("pads", &[1, 1])])),
        (
            vec![2, 3, 7, 8],
            vec![5, 3, 3, 3],
            attrs(&[("pads", &[1, 1, 1, 1])]),
        ),
        (vec![2, 3, 7, 8], vec![5, 3, 1, 1], vec![]),
        (
            vec![1, 2, 5, 6, 4],
            vec![4, 2, 3, 2, 3],
            attrs(&[("pads", &[1, 0, 1, 1, 0, 1]), ("kernel_shape", &[3, 2, 3])]),
        ),
    ];
    for (x, w, a) in &cases {
        for (opset, with_bias) in [(1, false), (11, true), (22, true), (22, false)] {
            let xt = randf(&mut rng, F32, x);
            let wt = randf(&mut rng, F32, w);
            let bt = with_bias.then(|| randf(&mut rng, F32, &[w[0]]));
            let mut inputs = vec![Some(xt), Some(wt)];
            if bt.is_some() {
                inputs.push(bt);
            }
            let n = node_for("Conv", &inputs, a);
            check(
                &ep,
                &n,
                opset,
                &inputs,
                None,
                F32_REL,
                &format!("Conv X {x:?} W {w:?} bias {with_bias} opset {opset}"),
            );
        }
    }
}

#[test]
fn conv_groups_depthwise_dilations_strides() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    let cases: Vec<Case> = vec![
        (
            vec![2, 4, 6, 7],
            vec![6, 2, 3, 3],
            attrs(&[
                ("group", &[2]),
                ("strides", &[2, 1]),
                ("dilations", &[1, 2]),
                ("pads", &[1, 2, 1, 2]),
            ]),
        ),
        (
            vec![1, 8, 9, 9],
            vec![8, 1, 3, 3],
            attrs(&[("group", &[8]), ("pads", &[1, 1, 1, 1])]),
        ),
        (
            vec![2, 8, 9, 9],
            vec![16, 1, 3, 3],
            attrs(&[
                ("group", &[8]),
                ("strides", &[2, 2]),
                ("pads", &[1, 1, 1, 1]),
            ]),
        ),
        (
            vec![2, 6, 15],
            vec![3, 2, 3],
            attrs(&[("group", &[3]), ("dilations", &[2]), ("strides", &[2])]),
        ),
        (
            vec![1, 4, 6, 5, 7],
            vec![4, 2, 2, 3, 2],
            attrs(&[
                ("group", &[2]),
                ("strides", &[2, 1, 2]),
                ("dilations", &[1, 2, 1]),
            ]),
        ),
        (
            vec![1, 3, 11, 10],
            vec![4, 3, 3, 3],
            attrs(&[("dilations", &[2, 2]), ("strides", &[2, 3])]),
        ),
    ];
    for (x, w, a) in &cases {
        let inputs = vec![
            Some(randf(&mut rng, F32, x)),
            Some(randf(&mut rng, F32, w)),
            Some(randf(&mut rng, F32, &[w[0]])),
        ];
        let n = node_for("Conv", &inputs, a);
        check(
            &ep,
            &n,
            11,
            &inputs,
            None,
            F32_REL,
            &format!("Conv X {x:?} W {w:?} {a:?}"),
        );
    }
}

#[test]
fn conv_asymmetric_pads_and_every_auto_pad() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    let s = |v: &str| Attribute::String(v.into());
    let cases: Vec<Case> = vec![
        (
            vec![1, 3, 7, 8],
            vec![4, 3, 3, 3],
            attrs(&[("pads", &[0, 1, 2, 0])]),
        ),
        (
            vec![2, 3, 7, 8],
            vec![4, 3, 3, 2],
            attrs(&[("pads", &[0, 1, 2, 0]), ("strides", &[2, 2])]),
        ),
        (vec![2, 3, 9], vec![2, 3, 3], attrs(&[("pads", &[2, 0])])),
        (
            vec![1, 2, 5, 4, 6],
            vec![3, 2, 3, 2, 3],
            attrs(&[("pads", &[1, 0, 2, 0, 1, 1])]),
        ),
        (
            vec![2, 3, 8, 7],
            vec![4, 3, 2, 4],
            vec![("auto_pad", s("SAME_UPPER")), ("strides", ints(&[2, 2]))],
        ),
        (
            vec![2, 3, 8, 7],
            vec![4, 3, 2, 4],
            vec![("auto_pad", s("SAME_LOWER")), ("strides", ints(&[2, 2]))],
        ),
        (
            vec![1, 3, 8, 7],
            vec![4, 3, 3, 3],
            vec![("auto_pad", s("SAME_UPPER"))],
        ),
        (
            vec![1, 3, 9],
            vec![4, 3, 4],
            vec![("auto_pad", s("SAME_LOWER")), ("dilations", ints(&[2]))],
        ),
        (
            vec![2, 3, 8, 7],
            vec![4, 3, 3, 2],
            vec![("auto_pad", s("VALID")), ("strides", ints(&[2, 1]))],
        ),
        (
            vec![2, 3, 8, 7],
            vec![4, 3, 3, 2],
            vec![("auto_pad", s("NOTSET")), ("pads", ints(&[1, 0, 1, 0]))],
        ),
    ];
    for (x, w, a) in &cases {
        for with_bias in [false, true] {
            let mut inputs = vec![Some(randf(&mut rng, F32, x)), Some(randf(&mut rng, F32, w))];
            if with_bias {
                inputs.push(Some(randf(&mut rng, F32, &[w[0]])));
            }
            let n = node_for("Conv", &inputs, a);
            check(
                &ep,
                &n,
                11,
                &inputs,
                None,
                F32_REL,
                &format!("Conv X {x:?} W {w:?} {a:?} bias {with_bias}"),
            );
        }
    }
}

#[test]
fn conv_strided_input_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    let a = attrs(&[("pads", &[1, 0, 1, 2]), ("strides", &[1, 2])]);
    for (xl, wl, bl) in [
        (Layout::Reversed, Layout::Contiguous, Layout::Contiguous),
        (Layout::Padded, Layout::Padded, Layout::Padded),
        (Layout::Contiguous, Layout::Reversed, Layout::Reversed),
    ] {
        let x = randf(&mut rng, F32, &[2, 3, 6, 7]).with_layout(xl);
        let w = randf(&mut rng, F32, &[4, 3, 3, 2]).with_layout(wl);
        // B as [M, 1]: Padded gives its values a stride of 4.
        let b = randf(&mut rng, F32, &[4, 1]).with_layout(bl);
        let inputs = vec![Some(x), Some(w), Some(b)];
        let n = node_for("Conv", &inputs, &a);
        check(
            &ep,
            &n,
            11,
            &inputs,
            None,
            F32_REL,
            &format!("Conv strided X {xl:?} W {wl:?} B {bl:?}"),
        );
        // 1-D and 3-D strided inputs too.
        let x1 = randf(&mut rng, F32, &[2, 3, 10]).with_layout(xl);
        let w1 = randf(&mut rng, F32, &[4, 3, 3]).with_layout(wl);
        let inputs = vec![Some(x1), Some(w1)];
        let n = node_for("Conv", &inputs, &attrs(&[("pads", &[1, 1])]));
        check(
            &ep,
            &n,
            11,
            &inputs,
            None,
            F32_REL,
            &format!("Conv 1-D X {xl:?} W {wl:?}"),
        );
        let x3 = randf(&mut rng, F32, &[1, 2, 4, 5, 3]).with_layout(xl);
        let w3 = randf(&mut rng, F32, &[3, 2, 2, 2, 2]).with_layout(wl);
        let inputs = vec![Some(x3), Some(w3)];
        let n = node_for("Conv", &inputs, &[]);
        check(
            &ep,
            &n,
            11,
            &inputs,
            None,
            F32_REL,
            &format!("Conv 3-D X {xl:?} W {wl:?}"),
        );
    }
}

/// float16 and bfloat16 convolutions against a float32 reference of the same values (K =
/// C * kh * kw = 504): within 1e-2 of the output's largest magnitude.
#[test]
fn conv_half_types_against_float32() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    let (x, w) = (vec![2, 56, 10, 10], vec![32, 56, 3, 3]);
    let pads = attrs(&[("pads", &[1, 1, 1, 1])]);
    let asym = attrs(&[("pads", &[1, 0, 0, 1]), ("strides", &[2, 2])]);
    for dtype in [DataType::Float16, DataType::BFloat16] {
        let xf = randf(&mut rng, F32, &x);
        let wf = randf(&mut rng, F32, &w);
        let bf = randf(&mut rng, F32, &[32]);
        let reference = vec![Some(xf.clone()), Some(wf.clone()), Some(bf.clone())];
        let inputs: Vec<Option<T>> = reference
            .iter()
            .map(|t| t.as_ref().map(|t| cast(t, dtype)))
            .collect();
        for a in [&pads, &asym] {
            let n = node_for("Conv", &inputs, a);
            check(
                &ep,
                &n,
                22,
                &inputs,
                Some(&reference),
                1e-2,
                &format!("Conv {dtype} {a:?}"),
            );
        }
        // Strided half input, no bias.
        let inputs2 = vec![
            Some(cast(&xf, dtype).with_layout(Layout::Padded)),
            Some(cast(&wf, dtype)),
        ];
        let ref2 = vec![Some(xf.clone()), Some(wf.clone())];
        let n = node_for("Conv", &inputs2, &pads);
        check(
            &ep,
            &n,
            22,
            &inputs2,
            Some(&ref2),
            1e-2,
            &format!("Conv {dtype} strided X"),
        );
        // FusedConv: bias + Relu (cuDNN's fused call), bias + Z + Relu, and Sigmoid.
        let z = randf(&mut rng, F32, &[2, 32, 10, 10]);
        for (act, with_z) in [("Relu", false), ("Relu", true), ("Sigmoid", true)] {
            let mut reference = vec![Some(xf.clone()), Some(wf.clone()), Some(bf.clone())];
            if with_z {
                reference.push(Some(z.clone()));
            }
            let inputs: Vec<Option<T>> = reference
                .iter()
                .map(|t| t.as_ref().map(|t| cast(t, dtype)))
                .collect();
            let mut a = pads.clone();
            a.push(("activation", Attribute::String(act.into())));
            let n = node_for("FusedConv", &inputs, &a);
            check(
                &ep,
                &n,
                1,
                &inputs,
                Some(&reference),
                1e-2,
                &format!("FusedConv {dtype} {act} Z {with_z}"),
            );
        }
    }
}

#[test]
fn conv_float64() {
    let ep = gpu();
    let mut rng = Rng::new(6);
    let dt = DataType::Float64;
    for (x, w, a) in [
        (
            vec![2, 3, 6, 6],
            vec![4, 3, 3, 3],
            attrs(&[("pads", &[1, 0, 2, 1]), ("strides", &[2, 1])]),
        ),
        (
            vec![1, 4, 9],
            vec![2, 2, 3],
            attrs(&[("group", &[2]), ("dilations", &[2])]),
        ),
        (
            vec![1, 2, 4, 4, 4],
            vec![2, 2, 2, 2, 2],
            attrs(&[("pads", &[1, 1, 1, 1, 1, 1])]),
        ),
    ] {
        let inputs = vec![
            Some(randf(&mut rng, dt, &x)),
            Some(randf(&mut rng, dt, &w)),
            Some(randf(&mut rng, dt, &[w[0]])),
        ];
        let n = node_for("Conv", &inputs, &a);
        check(
            &ep,
            &n,
            11,
            &inputs,
            None,
            1e-12,
            &format!("Conv f64 X {x:?} W {w:?}"),
        );
    }
}

#[test]
fn fused_conv_every_activation_with_and_without_z() {
    let ep = gpu();
    let mut rng = Rng::new(7);
    let acts: Vec<(&str, Vec<f32>)> = vec![
        ("Relu", vec![]),
        ("Tanh", vec![]),
        ("Sigmoid", vec![]),
        ("LeakyRelu", vec![0.1]),
        ("Clip", vec![-1.0, 2.5]),
        ("HardSigmoid", vec![0.2, 0.5]),
        ("HardSwish", vec![]),
        ("QuickGelu", vec![1.702]),
        ("Identity", vec![]),
    ];
    let (x, w, out) = (vec![2, 4, 6, 7], vec![5, 4, 3, 3], vec![2, 5, 6, 7]);
    for (i, (act, params)) in acts.iter().enumerate() {
        let mut a = attrs(&[("pads", &[1, 1, 1, 1])]);
        a.push(("activation", Attribute::String((*act).into())));
        if !params.is_empty() {
            a.push(("activation_params", Attribute::Floats(params.clone())));
        }
        // (bias, Z, Z's layout)
        for (with_b, with_z, zl) in [
            (true, false, Layout::Contiguous),
            (true, true, Layout::Contiguous),
            (false, true, Layout::Padded),
            (false, false, Layout::Contiguous),
        ] {
            let inputs = vec![
                Some(randf(&mut rng, F32, &x)),
                Some(randf(&mut rng, F32, &w)),
                with_b.then(|| randf(&mut rng, F32, &[5])),
                with_z.then(|| randf(&mut rng, F32, &out).with_layout(zl)),
            ];
            let inputs: Vec<Option<T>> = if with_z { inputs } else { inputs[..3].to_vec() };
            let inputs: Vec<Option<T>> = if !with_b && !with_z {
                inputs[..2].to_vec()
            } else {
                inputs
            };
            let n = node_for("FusedConv", &inputs, &a);
            let rel = if i == 0 || i == 8 { F32_REL } else { 1e-4 };
            check(
                &ep,
                &n,
                1,
                &inputs,
                None,
                rel,
                &format!("FusedConv {act} bias {with_b} Z {with_z} {zl:?}"),
            );
        }
    }
}

#[test]
fn conv_zero_input_channels_give_the_bias() {
    let ep = gpu();
    let x = T::new(F32, &[1, 0, 4, 4], Vec::new());
    let w = T::new(F32, &[3, 0, 3, 3], Vec::new());
    let b = from_f64s(F32, &[3], &[0.5, -1.0, 2.0]);
    let n = node("Conv", 3, 1, &attrs(&[("pads", &[1, 1, 1, 1])]));
    let got = run(&ep, &n, 11, &[x, w, b], &[(F32, vec![1, 3, 4, 4])]).unwrap();
    let want: Vec<f64> = (0..48).map(|i| [0.5, -1.0, 2.0][i / 16]).collect();
    let want = from_f64s(F32, &[1, 3, 4, 4], &want);
    assert_close_to(&got[0], &want, 0.0, 0.0, "Conv with C = 0");
}

fn assert_names_node(e: &EpError, op: &str, what: &str) {
    let m = e.to_string();
    assert!(
        matches!(e, EpError::InvalidInput { .. }),
        "{what}: expected an input error, got {e:?}"
    );
    assert!(m.contains(&format!("test_{op}")), "{what}: {m}");
}

#[test]
fn conv_bad_shapes_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(11);
    let f = |rng: &mut Rng, s: &[usize]| randf(rng, F32, s);
    // Channels not divisible by group.
    let n = node("Conv", 2, 1, &attrs(&[("group", &[3])]));
    let e = run(
        &ep,
        &n,
        11,
        &[f(&mut rng, &[1, 4, 5, 5]), f(&mut rng, &[6, 1, 3, 3])],
        &[(F32, vec![1, 6, 3, 3])],
    )
    .unwrap_err();
    assert_names_node(&e, "Conv", "group");
    // `group` is an INT attribute: INTS is rejected (at build time), as the CPU provider does.
    let n = node("Conv", 2, 1, &[("group", ints(&[1]))]);
    let e = run(
        &ep,
        &n,
        11,
        &[f(&mut rng, &[1, 4, 5, 5]), f(&mut rng, &[6, 4, 3, 3])],
        &[(F32, vec![1, 6, 3, 3])],
    )
    .unwrap_err();
    assert!(
        matches!(e, EpError::InvalidAttribute { ref name, .. } if name == "group"),
        "group as INTS: expected an attribute error, got {e:?}"
    );
    // W's channels do not match X's.
    let n = node("Conv", 2, 1, &[]);
    let e = run(
        &ep,
        &n,
        11,
        &[f(&mut rng, &[1, 4, 5, 5]), f(&mut rng, &[6, 3, 3, 3])],
        &[(F32, vec![1, 6, 3, 3])],
    )
    .unwrap_err();
    assert_names_node(&e, "Conv", "W/X channels");
    // B of the wrong length.
    let n = node("Conv", 3, 1, &[]);
    let e = run(
        &ep,
        &n,
        11,
        &[
            f(&mut rng, &[1, 3, 5, 5]),
            f(&mut rng, &[6, 3, 3, 3]),
            f(&mut rng, &[5]),
        ],
        &[(F32, vec![1, 6, 3, 3])],
    )
    .unwrap_err();
    assert_names_node(&e, "Conv", "bias length");
    // Kernel larger than the padded input.
    let n = node("Conv", 2, 1, &[]);
    let e = run(
        &ep,
        &n,
        11,
        &[f(&mut rng, &[1, 3, 2, 2]), f(&mut rng, &[6, 3, 3, 3])],
        &[(F32, vec![1, 6, 1, 1])],
    )
    .unwrap_err();
    assert_names_node(&e, "Conv", "kernel too large");
    // FusedConv Z of the wrong shape.
    let mut n = node(
        "FusedConv",
        4,
        1,
        &[("activation", Attribute::String("Relu".into()))],
    );
    n.domain = "com.microsoft".into();
    let e = run(
        &ep,
        &n,
        1,
        &[
            f(&mut rng, &[1, 3, 5, 5]),
            f(&mut rng, &[6, 3, 3, 3]),
            f(&mut rng, &[6]),
            f(&mut rng, &[1, 6, 3, 4]),
        ],
        &[(F32, vec![1, 6, 3, 3])],
    )
    .unwrap_err();
    assert_names_node(&e, "FusedConv", "Z shape");
    // ConvTranspose W whose first axis is not C.
    let n = node("ConvTranspose", 2, 1, &[]);
    let e = run(
        &ep,
        &n,
        11,
        &[f(&mut rng, &[1, 3, 5, 5]), f(&mut rng, &[4, 2, 3, 3])],
        &[(F32, vec![1, 2, 7, 7])],
    )
    .unwrap_err();
    assert_names_node(&e, "ConvTranspose", "ConvTranspose W");
    // Mixed dtypes.
    let n = node("Conv", 2, 1, &[]);
    let e = run(
        &ep,
        &n,
        11,
        &[
            f(&mut rng, &[1, 3, 5, 5]),
            randf(&mut rng, DataType::Float16, &[6, 3, 3, 3]),
        ],
        &[(F32, vec![1, 6, 3, 3])],
    )
    .unwrap_err();
    assert_names_node(&e, "Conv", "mixed dtypes");
    // Unknown attribute values fail at build.
    let n = node(
        "Conv",
        2,
        1,
        &[("auto_pad", Attribute::String("SAME".into()))],
    );
    assert!(ep.get_kernel(&n, &[], 11).is_err());
    let mut n = node(
        "FusedConv",
        2,
        1,
        &[("activation", Attribute::String("Gelu".into()))],
    );
    n.domain = "com.microsoft".into();
    assert!(ep.get_kernel(&n, &[], 1).is_err());
    // Four spatial axes: a refusal (the CPU provider runs it), not an error.
    let n = node("Conv", 2, 1, &[]);
    let k = ep.get_kernel(&n, &[], 11).unwrap();
    let b = Bound::new(
        &ep,
        &[
            f(&mut rng, &[1, 1, 3, 3, 3, 3]),
            f(&mut rng, &[1, 1, 2, 2, 2, 2]),
        ],
        &[],
    );
    let e = b.output_types(k.as_ref()).unwrap_err();
    assert!(matches!(e, EpError::UnsupportedDtype { .. }), "{e:?}");
    // Integer Conv is a refusal too.
    let e = run(
        &ep,
        &n,
        11,
        &[
            random_numeric(&mut rng, DataType::Int32, &[1, 1, 3, 3], 0, 5),
            random_numeric(&mut rng, DataType::Int32, &[1, 1, 2, 2], 0, 5),
        ],
        &[(DataType::Int32, vec![1, 1, 2, 2])],
    )
    .unwrap_err();
    assert!(matches!(e, EpError::UnsupportedDtype { .. }), "{e:?}");
}

#[test]
fn conv_output_types_agree_with_execute() {
    let ep = gpu();
    let mut rng = Rng::new(12);
    let cases: Vec<TypesCase> = vec![
        (
            node(
                "Conv",
                3,
                1,
                &attrs(&[("strides", &[2, 2]), ("pads", &[1, 0, 0, 1])]),
            ),
            11,
            vec![
                randf(&mut rng, F32, &[2, 3, 7, 6]),
                randf(&mut rng, F32, &[4, 3, 3, 3]),
                randf(&mut rng, F32, &[4]),
            ],
            (F32, vec![2, 4, 3, 3]),
        ),
        (
            node(
                "ConvTranspose",
                2,
                1,
                &attrs(&[("strides", &[2]), ("output_padding", &[1])]),
            ),
            11,
            vec![
                randf(&mut rng, DataType::Float16, &[1, 2, 4]),
                randf(&mut rng, DataType::Float16, &[2, 3, 3]),
            ],
            (DataType::Float16, vec![1, 3, 10]),
        ),
        (
            node("ConvInteger", 2, 1, &[]),
            10,
            vec![
                random_numeric(&mut rng, DataType::Uint8, &[1, 2, 4, 4], 0, 9),
                random_numeric(&mut rng, DataType::Int8, &[3, 2, 3, 3], -3, 3),
            ],
            (DataType::Int32, vec![1, 3, 2, 2]),
        ),
    ];
    for (n, opset, inputs, want) in cases {
        let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
        let k = ep.get_kernel(&n, &shapes, opset).unwrap();
        let mut b = Bound::new(&ep, &inputs, &[]);
        let got = b.output_types(k.as_ref()).unwrap();
        assert_eq!(got, vec![want.clone()], "{} output types", n.op_type);
        b.set_outputs(&got);
        b.execute(k.as_ref()).unwrap();
        let out = b.read().unwrap();
        assert_eq!((out[0].dtype, out[0].shape.clone()), want);
        // Outputs of another shape are refused with the node named.
        b.set_outputs(&[(want.0, vec![1])]);
        let e = b.execute(k.as_ref()).unwrap_err();
        assert!(
            e.to_string().contains(&format!("test_{}", n.op_type)),
            "{e}"
        );
    }
}

#[test]
fn conv_capture_replays_like_eager() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(13);
    let mut fused = node(
        "FusedConv",
        4,
        1,
        &[
            ("activation", Attribute::String("Relu".into())),
            ("pads", ints(&[1, 1, 1, 1])),
        ],
    );
    fused.domain = "com.microsoft".into();
    let mut leaky = node(
        "FusedConv",
        3,
        1,
        &[
            ("activation", Attribute::String("LeakyRelu".into())),
            ("activation_params", Attribute::Floats(vec![0.2])),
        ],
    );
    leaky.domain = "com.microsoft".into();
    let mut pointwise = node(
        "FusedConv",
        4,
        1,
        &[
            ("activation", Attribute::String("LeakyRelu".into())),
            ("activation_params", Attribute::Floats(vec![0.2])),
        ],
    );
    pointwise.domain = "com.microsoft".into();
    let cases: Vec<(Node, u64, Vec<T>, Vec<usize>)> = vec![
        // Asymmetric pads over a strided input: packing, cuDNN, bias epilogue.
        (
            node("Conv", 3, 1, &attrs(&[("pads", &[0, 1, 2, 0])])),
            11,
            vec![
                randf(&mut rng, F32, &[2, 3, 6, 6]).with_layout(Layout::Reversed),
                randf(&mut rng, F32, &[4, 3, 3, 3]),
                randf(&mut rng, F32, &[4]),
            ],
            // H: 6 + 0 + 2 - 3 + 1 = 6; W: 6 + 1 + 0 - 3 + 1 = 5.
            vec![2, 4, 6, 5],
        ),
        // cuDNN's fused bias + Z + ReLU.
        (
            fused,
            1,
            vec![
                randf(&mut rng, F32, &[1, 8, 8, 8]),
                randf(&mut rng, F32, &[8, 8, 3, 3]),
                randf(&mut rng, F32, &[8]),
                randf(&mut rng, F32, &[1, 8, 8, 8]),
            ],
            vec![1, 8, 8, 8],
        ),
        (
            leaky,
            1,
            vec![
                randf(&mut rng, DataType::Float16, &[1, 4, 5, 5]),
                randf(&mut rng, DataType::Float16, &[4, 4, 3, 3]),
                randf(&mut rng, DataType::Float16, &[4]),
            ],
            vec![1, 4, 3, 3],
        ),
        // Pointwise GEMM: bias, packed Z as the product's C, LeakyRelu in the epilogue.
        (
            pointwise,
            1,
            vec![
                randf(&mut rng, F32, &[2, 8, 5, 5]),
                randf(&mut rng, F32, &[6, 8, 1, 1]),
                randf(&mut rng, F32, &[6]),
                randf(&mut rng, F32, &[2, 6, 5, 5]),
            ],
            vec![2, 6, 5, 5],
        ),
        // Strided pointwise GEMM: X read at stride 2 (packed), reversed X.
        (
            node("Conv", 2, 1, &attrs(&[("strides", &[2, 2])])),
            11,
            vec![
                randf(&mut rng, DataType::Float16, &[2, 4, 6, 7]).with_layout(Layout::Reversed),
                randf(&mut rng, DataType::Float16, &[5, 4, 1, 1]),
            ],
            vec![2, 5, 3, 4],
        ),
        // A transposed convolution with a crop.
        (
            node(
                "ConvTranspose",
                3,
                1,
                &attrs(&[("strides", &[2, 2]), ("pads", &[1, 0, 0, 1])]),
            ),
            11,
            vec![
                randf(&mut rng, F32, &[1, 4, 4, 4]),
                randf(&mut rng, F32, &[4, 2, 3, 3]),
                randf(&mut rng, F32, &[2]),
            ],
            vec![1, 2, 8, 8],
        ),
    ];
    let kernels: Vec<Box<dyn Kernel>> = cases
        .iter()
        .map(|c| ep.get_kernel(&c.0, &[], c.1).unwrap())
        .collect();
    let mut bounds: Vec<Bound<'_>> = cases
        .iter()
        .map(|c| Bound::new(&ep, &c.2, &[(c.2[0].dtype, c.3.clone())]))
        .collect();
    let refs: Vec<&dyn Kernel> = kernels.iter().map(|k| k.as_ref()).collect();
    // Not capturable before the first eager run chose the algorithms.
    let err = runtime.begin_graph_capture(&refs).unwrap_err().to_string();
    assert!(err.contains("eager"), "{err}");
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
        assert_eq!(k.capture_support(), CaptureSupport::Supported);
    }
    runtime.begin_graph_capture(&refs).unwrap();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    runtime.end_graph_capture().unwrap();
    for (c, b) in cases.iter().zip(bounds.iter_mut()) {
        // New values in X (same layout).
        let x = &c.2[0];
        b.set_input(0, randf(&mut rng, x.dtype, &x.shape).with_layout(x.layout));
    }
    runtime.replay_graph().unwrap();
    let replayed: Vec<Vec<T>> = bounds.iter().map(|b| b.read().unwrap()).collect();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    for ((c, b), r) in cases.iter().zip(&bounds).zip(&replayed) {
        let eager = b.read().unwrap();
        // Some cuDNN algorithms sum in a run-dependent order: equal up to rounding.
        assert_norm_close(
            &r[0],
            &eager[0],
            1e-5,
            &format!("replay vs eager: {}", c.0.op_type),
        );
    }
    runtime.reset_graph().unwrap();
}
