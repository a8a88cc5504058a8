//! Conv + activation -> FusedConv, HardSwish patterns, SiLU -> QuickGelu.

use super::*;
use OptimizationLevel::All;

const FUSED: &str = "com.microsoft:FusedConv";

/// Conv (3 -> 4 channels, 3x3, stride 1, pad 1, bias) on x [1, 3, 6, 6] writing `c`.
fn conv(b: &mut G) {
    b.input("x", DataType::Float32, &[1, 3, 6, 6]);
    f32_init(b, "W", &[4, 3, 3, 3], 31);
    f32_init(b, "B", &[4], 32);
    b.node_attrs(
        "Conv",
        &["x", "W", "B"],
        &["c"],
        vec![("pads", ints(&[1, 1, 1, 1]))],
    );
}

fn feeds() -> Vec<(&'static str, Value)> {
    // Scaled so that the activations' bends (0, +-3, clip bounds) are all crossed.
    let x: Vec<f32> = rand_f32(108, 30).iter().map(|v| v * 4.0).collect();
    vec![("x", f32t(&[1, 3, 6, 6], &x))]
}

fn scalar(b: &mut G, name: &str, v: f32) {
    b.init(name, &Tensor::scalar(v));
}

#[test]
fn conv_then_each_activation_becomes_fused_conv() {
    let reg = fused_conv_ref::registry();
    type Build = fn(&mut G);
    let cases: Vec<(&str, u64, Build)> = vec![
        ("Relu", 13, |b| {
            b.node("Relu", &["c"], &["y"]);
        }),
        ("Sigmoid", 13, |b| {
            b.node("Sigmoid", &["c"], &["y"]);
        }),
        ("Tanh", 13, |b| {
            b.node("Tanh", &["c"], &["y"]);
        }),
        ("LeakyRelu", 13, |b| {
            b.node_attrs(
                "LeakyRelu",
                &["c"],
                &["y"],
                vec![("alpha", Attribute::Float(0.2))],
            );
        }),
        ("HardSigmoid", 13, |b| {
            b.node_attrs(
                "HardSigmoid",
                &["c"],
                &["y"],
                vec![
                    ("alpha", Attribute::Float(0.3)),
                    ("beta", Attribute::Float(0.4)),
                ],
            );
        }),
        ("Clip inputs", 13, |b| {
            scalar(b, "lo", -0.5);
            scalar(b, "hi", 1.5);
            b.node("Clip", &["c", "lo", "hi"], &["y"]);
        }),
        ("Clip max only", 12, |b| {
            scalar(b, "hi", 2.0);
            b.node("Clip", &["c", "", "hi"], &["y"]);
        }),
        ("Clip attributes", 9, |b| {
            b.node_attrs(
                "Clip",
                &["c"],
                &["y"],
                vec![
                    ("min", Attribute::Float(0.0)),
                    ("max", Attribute::Float(6.0)),
                ],
            );
        }),
        ("HardSwish", 14, |b| {
            b.node("HardSwish", &["c"], &["y"]);
        }),
        ("QuickGelu", 13, |b| {
            let id = b.node_attrs(
                "QuickGelu",
                &["c"],
                &["y"],
                vec![("alpha", Attribute::Float(1.5))],
            );
            b.g.node_mut(id).domain = "com.microsoft".into();
            b.g.opset_imports.insert("com.microsoft".into(), 1);
        }),
        // SiLU written out (YOLO's Conv -> Sigmoid -> Mul): QuickGelu first, then fused.
        ("SiLU", 13, |b| {
            b.node("Sigmoid", &["c"], &["s"]);
            b.node("Mul", &["c", "s"], &["y"]);
        }),
    ];
    for (name, opset, act) in cases {
        let mut b = G::new(opset);
        conv(&mut b);
        act(&mut b);
        b.output("y");
        let ops = check_same_with(&b, All, reg, &feeds(), 1e-5, 1e-5);
        assert_eq!(ops, [FUSED], "{name}");
    }
}

#[test]
fn batch_norm_and_written_out_hard_swish_fuse_into_one_conv() {
    // As PaddlePaddle exports it (layout_cdla): BN, Add 3, Clip 0..6, Mul x, Div 6.
    let reg = fused_conv_ref::registry();
    let mut b = G::new(13);
    conv(&mut b);
    for (i, p) in ["gamma", "beta", "mean"].iter().enumerate() {
        f32_init(&mut b, p, &[4], 40 + i as u64);
    }
    b.init(
        "var",
        &Tensor::from_vec(vec![4], vec![0.5f32, 1.5, 0.25, 2.0]),
    );
    b.node(
        "BatchNormalization",
        &["c", "gamma", "beta", "mean", "var"],
        &["n"],
    );
    b.init("three", &Tensor::from_vec(vec![1], vec![3f32]));
    scalar(&mut b, "zero", 0.0);
    scalar(&mut b, "six", 6.0);
    b.init("six1", &Tensor::from_vec(vec![1], vec![6f32]));
    b.node("Add", &["n", "three"], &["a"]);
    b.node("Clip", &["a", "zero", "six"], &["r"]);
    b.node("Mul", &["n", "r"], &["m"]);
    b.node("Div", &["m", "six1"], &["y"]);
    b.output("y");
    let ops = check_same_with(&b, All, reg, &feeds(), 1e-5, 1e-5);
    assert_eq!(ops, [FUSED]);
    // Basic folds only the BatchNormalization.
    assert_eq!(
        ops_after_with(&b, OptimizationLevel::Basic, reg),
        ["Conv", "Add", "Clip", "Mul", "Div"]
    );
}

#[test]
fn affine_then_hard_swish_as_ppocr_writes_it_fuses() {
    // PP-OCRv4: Conv, Mul a, Add b (a learnable affine), then x * Clip(x + 3) / 6 with
    // the Mul operands swapped.
    let reg = fused_conv_ref::registry();
    let mut b = G::new(12);
    conv(&mut b);
    b.init("a", &Tensor::from_vec(vec![1], vec![0.9f32]));
    b.init("bb", &Tensor::from_vec(vec![1], vec![0.5f32]));
    scalar(&mut b, "three", 3.0);
    scalar(&mut b, "zero", 0.0);
    scalar(&mut b, "six", 6.0);
    b.node("Mul", &["a", "c"], &["p"]);
    b.node("Add", &["p", "bb"], &["q"]);
    b.node("Add", &["q", "three"], &["t"]);
    b.node("Clip", &["t", "zero", "six"], &["r"]);
    b.node("Mul", &["q", "r"], &["m"]);
    b.node("Div", &["m", "six"], &["y"]);
    b.output("y");
    let ops = check_same_with(&b, All, reg, &feeds(), 1e-5, 1e-5);
    assert_eq!(ops, [FUSED]);
}

#[test]
fn activation_input_read_elsewhere_keeps_the_conv() {
    let reg = fused_conv_ref::registry();
    let mut b = G::new(13);
    conv(&mut b);
    b.node("Relu", &["c"], &["y"]);
    b.node("Neg", &["c"], &["z"]);
    b.output("y");
    b.output("z");
    let ops = check_same_with(&b, All, reg, &feeds(), 0.0, 0.0);
    assert_eq!(ops, ["Conv", "Relu", "Neg"]);
}

#[test]
fn without_a_fused_conv_kernel_conv_and_activation_stay() {
    let mut b = G::new(13);
    conv(&mut b);
    b.node("Relu", &["c"], &["y"]);
    b.output("y");
    let ops = check_same(&b, All, &feeds(), 1e-5, 1e-5);
    if onnx_runtime_ep_cpu::registry().contains("com.microsoft", "FusedConv", 1) {
        assert_eq!(ops, [FUSED]);
    } else {
        assert_eq!(ops, ["Conv", "Relu"]);
    }
}

/// x -> HardSwish written out; `form` picks the decomposition.
fn hard_swish_graph(opset: u64, form: usize) -> G {
    let mut b = G::new(opset);
    b.input("x", DataType::Float32, &[2, 5]);
    scalar(&mut b, "three", 3.0);
    scalar(&mut b, "zero", 0.0);
    scalar(&mut b, "six", 6.0);
    scalar(&mut b, "sixth", 1.0 / 6.0);
    match form {
        0 => {
            b.node("Add", &["three", "x"], &["a"]);
            b.node("Clip", &["a", "zero", "six"], &["r"]);
            b.node("Div", &["r", "six"], &["h"]);
            b.node("Mul", &["x", "h"], &["y"]);
        }
        1 => {
            b.node("Add", &["x", "three"], &["a"]);
            b.node("Clip", &["a", "zero", "six"], &["r"]);
            b.node("Mul", &["r", "x"], &["m"]);
            b.node("Mul", &["sixth", "m"], &["y"]);
        }
        _ => {
            b.node_attrs(
                "HardSigmoid",
                &["x"],
                &["h"],
                vec![
                    ("alpha", Attribute::Float(1.0 / 6.0)),
                    ("beta", Attribute::Float(0.5)),
                ],
            );
            b.node("Mul", &["h", "x"], &["y"]);
        }
    }
    b.output("y");
    b
}

#[test]
fn written_out_hard_swish_becomes_hard_swish_or_hard_sigmoid_times_x() {
    let x: Vec<f32> = rand_f32(10, 50).iter().map(|v| v * 5.0).collect();
    for form in 0..3 {
        let b = hard_swish_graph(14, form);
        let ops = check_same(&b, All, &[("x", f32t(&[2, 5], &x))], 1e-6, 1e-6);
        assert_eq!(ops, ["HardSwish"], "form {form}");
        // Opset 13 has no HardSwish: x * HardSigmoid(x) instead.
        let b = hard_swish_graph(13, form);
        let ops = check_same(&b, All, &[("x", f32t(&[2, 5], &x))], 1e-6, 1e-6);
        assert_eq!(ops, ["HardSigmoid", "Mul"], "form {form}");
    }
}

#[test]
fn silu_becomes_quick_gelu_with_alpha_one() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[3, 4]);
    b.node("Sigmoid", &["x"], &["s"]);
    b.node("Mul", &["s", "x"], &["y"]);
    b.output("y");
    let x: Vec<f32> = rand_f32(12, 51).iter().map(|v| v * 6.0).collect();
    let ops = check_same(&b, All, &[("x", f32t(&[3, 4], &x))], 1e-6, 1e-6);
    assert_eq!(ops, ["com.microsoft:QuickGelu"]);

    // The sigmoid is also an output: nothing to gain, nothing changes.
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[3, 4]);
    b.node("Sigmoid", &["x"], &["s"]);
    b.node("Mul", &["x", "s"], &["y"]);
    b.output("y");
    b.output("s");
    let ops = check_same(&b, All, &[("x", f32t(&[3, 4], &x))], 0.0, 0.0);
    assert_eq!(ops, ["Sigmoid", "Mul"]);
}

/// Conv -> BN -> Add(z) -> Relu, as ResNet blocks end; `z_dims` is z's declared shape.
fn residual(z_dims: &[i64], sum: bool, bias: bool) -> G {
    let mut b = G::new(9);
    b.input("x", DataType::Float32, &[1, 3, 6, 6]);
    b.input("z", DataType::Float32, z_dims);
    f32_init(&mut b, "W", &[4, 3, 3, 3], 33);
    let ins: &[&str] = if bias {
        f32_init(&mut b, "B", &[4], 34);
        &["x", "W", "B"]
    } else {
        &["x", "W"]
    };
    b.node_attrs("Conv", ins, &["c"], vec![("pads", ints(&[1, 1, 1, 1]))]);
    b.node(if sum { "Sum" } else { "Add" }, &["z", "c"], &["s"]);
    b.node("Relu", &["s"], &["y"]);
    b.output("y");
    b
}

#[test]
fn residual_add_then_relu_becomes_fused_conv_with_z_when_shapes_match() {
    let reg = fused_conv_ref::registry();
    let z: Vec<f32> = rand_f32(144, 35);
    let mut f = feeds();
    f.push(("z", f32t(&[1, 4, 6, 6], &z)));
    for (sum, bias) in [(false, true), (true, false)] {
        let b = residual(&[1, 4, 6, 6], sum, bias);
        let ops = check_same_with(&b, All, reg, &f, 1e-5, 1e-5);
        assert_eq!(ops, [FUSED], "sum {sum}, bias {bias}");
    }
    // z broadcasts: the Add must stay, and the Conv has no activation of its own.
    let mut f = feeds();
    f.push(("z", f32t(&[1, 4, 1, 1], &z[..4])));
    let b = residual(&[1, 4, 1, 1], false, true);
    let ops = check_same_with(&b, All, reg, &f, 0.0, 0.0);
    assert_eq!(ops, ["Conv", "Add", "Relu"]);
}
