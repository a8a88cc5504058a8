//! GELU (Erf and Tanh forms) and layer normalization written out.

use super::*;
use OptimizationLevel::All;

fn scalar(b: &mut G, name: &str, v: f32) {
    b.init(name, &Tensor::scalar(v));
}

fn x_feed(shape: &[usize], seed: u64) -> Vec<(&'static str, Value)> {
    let n = shape.iter().product();
    let x: Vec<f32> = rand_f32(n, seed).iter().map(|v| v * 4.0).collect();
    vec![("x", f32t(shape, &x))]
}

/// (1 + t) * x * 0.5 in the order `tail` picks; `t` is erf(..) or tanh(..).
fn gelu_tail(b: &mut G, tail: usize) {
    scalar(b, "one", 1.0);
    scalar(b, "half", 0.5);
    b.node("Add", &["t", "one"], &["a"]);
    match tail {
        0 => {
            b.node("Mul", &["x", "a"], &["m"]);
            b.node("Mul", &["m", "half"], &["y"]);
        }
        1 => {
            b.node("Mul", &["half", "a"], &["m"]);
            b.node("Mul", &["x", "m"], &["y"]);
        }
        _ => {
            b.node("Mul", &["x", "half"], &["h"]);
            b.node("Mul", &["h", "a"], &["y"]);
        }
    }
    b.output("y");
}

#[test]
fn erf_gelu_becomes_gelu_in_every_order() {
    for (tail, by_div) in [(0, true), (1, true), (2, true), (0, false), (2, false)] {
        let mut b = G::new(13);
        b.input("x", DataType::Float32, &[2, 8]);
        if by_div {
            scalar(&mut b, "k", std::f32::consts::SQRT_2);
            b.node("Div", &["x", "k"], &["d"]);
        } else {
            scalar(&mut b, "k", std::f32::consts::FRAC_1_SQRT_2);
            b.node("Mul", &["k", "x"], &["d"]);
        }
        b.node("Erf", &["d"], &["t"]);
        gelu_tail(&mut b, tail);
        let ops = check_same(&b, All, &x_feed(&[2, 8], 60), 1e-6, 1e-5);
        assert_eq!(ops, ["com.microsoft:Gelu"], "tail {tail}, div {by_div}");
    }
}

#[test]
fn gelu_with_a_visible_intermediate_or_another_constant_stays() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, 8]);
    scalar(&mut b, "k", std::f32::consts::SQRT_2);
    b.node("Div", &["x", "k"], &["d"]);
    b.node("Erf", &["d"], &["t"]);
    gelu_tail(&mut b, 0);
    b.output("t");
    let ops = check_same(&b, All, &x_feed(&[2, 8], 61), 0.0, 0.0);
    assert_eq!(ops, ["Div", "Erf", "Add", "Mul", "Mul"]);

    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, 8]);
    scalar(&mut b, "k", 1.5);
    b.node("Div", &["x", "k"], &["d"]);
    b.node("Erf", &["d"], &["t"]);
    gelu_tail(&mut b, 1);
    let ops = check_same(&b, All, &x_feed(&[2, 8], 62), 0.0, 0.0);
    assert_eq!(ops, ["Div", "Erf", "Add", "Mul", "Mul"]);
}

#[test]
fn tanh_gelu_becomes_fast_gelu() {
    for (tail, pow) in [(0, true), (2, false)] {
        let mut b = G::new(13);
        b.input("x", DataType::Float32, &[2, 8]);
        scalar(&mut b, "c", 0.044715);
        scalar(&mut b, "k", (2.0 / std::f32::consts::PI).sqrt());
        if pow {
            scalar(&mut b, "three", 3.0);
            b.node("Pow", &["x", "three"], &["cube"]);
        } else {
            b.node("Mul", &["x", "x"], &["sq"]);
            b.node("Mul", &["sq", "x"], &["cube"]);
        }
        b.node("Mul", &["c", "cube"], &["cc"]);
        b.node("Add", &["x", "cc"], &["s"]);
        b.node("Mul", &["s", "k"], &["u"]);
        b.node("Tanh", &["u"], &["t"]);
        gelu_tail(&mut b, tail);
        let ops = check_same(&b, All, &x_feed(&[2, 8], 63), 1e-5, 1e-5);
        assert_eq!(ops, ["com.microsoft:FastGelu"], "tail {tail}, pow {pow}");
    }
}

/// Layer norm over the last axis written out, `axes` on both ReduceMeans.
fn layer_norm(opset: u64, axes: &[i64], beta: bool, square_by_mul: bool) -> G {
    let mut b = G::new(opset);
    b.input("x", DataType::Float32, &[2, 3, 8]);
    f32_init(&mut b, "gamma", &[8], 70);
    f32_init(&mut b, "beta", &[8], 71);
    scalar(&mut b, "two", 2.0);
    scalar(&mut b, "eps", 1e-5);
    let mean = |b: &mut G, i: &str, o: &str| {
        if opset >= 18 {
            b.init("axes", &Tensor::from_vec(vec![axes.len()], axes.to_vec()));
            b.node("ReduceMean", &[i, "axes"], &[o]);
        } else {
            b.node_attrs("ReduceMean", &[i], &[o], vec![("axes", ints(axes))]);
        }
    };
    mean(&mut b, "x", "mu");
    b.node("Sub", &["x", "mu"], &["d"]);
    if square_by_mul {
        b.node("Mul", &["d", "d"], &["sq"]);
    } else {
        b.node("Pow", &["d", "two"], &["sq"]);
    }
    mean(&mut b, "sq", "var");
    b.node("Add", &["var", "eps"], &["ve"]);
    b.node("Sqrt", &["ve"], &["sd"]);
    b.node("Div", &["d", "sd"], &["n"]);
    if beta {
        b.node("Mul", &["n", "gamma"], &["g"]);
        b.node("Add", &["g", "beta"], &["y"]);
    } else {
        b.node("Mul", &["gamma", "n"], &["y"]);
    }
    b.output("y");
    b
}

#[test]
fn written_out_layer_norm_becomes_layer_normalization() {
    for (opset, beta, by_mul, want) in [
        (13, true, false, "com.microsoft:LayerNormalization"),
        (17, false, true, "LayerNormalization"),
        (18, true, false, "LayerNormalization"),
    ] {
        let b = layer_norm(opset, &[-1], beta, by_mul);
        let ops = check_same(&b, All, &x_feed(&[2, 3, 8], 72), 1e-5, 1e-4);
        assert_eq!(ops, [want], "opset {opset}");
    }
}

#[test]
fn layer_norm_over_other_axes_stays() {
    let b = layer_norm(13, &[1], true, false);
    let ops = check_same(&b, All, &x_feed(&[2, 3, 8], 73), 0.0, 0.0);
    assert_eq!(ops.len(), 9);
}
