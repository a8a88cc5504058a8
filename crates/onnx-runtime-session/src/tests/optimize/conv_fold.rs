//! BatchNormalization and per-channel Mul/Add folded into Conv.

use super::*;
use OptimizationLevel::Basic;

/// Conv (3 -> 4 channels, 3x3, pad 1) on x [1, 3, 5, 5], with a bias when `bias`.
fn conv(b: &mut G, bias: bool) {
    b.input("x", DataType::Float32, &[1, 3, 5, 5]);
    f32_init(b, "W", &[4, 3, 3, 3], 11);
    let ins: &[&str] = if bias {
        f32_init(b, "B", &[4], 12);
        &["x", "W", "B"]
    } else {
        &["x", "W"]
    };
    b.node_attrs(
        "Conv",
        ins,
        &["c"],
        vec![
            ("pads", ints(&[1, 1, 1, 1])),
            ("kernel_shape", ints(&[3, 3])),
        ],
    );
}

fn batch_norm(b: &mut G, x: &str, y: &str) {
    f32_init(b, "gamma", &[4], 13);
    f32_init(b, "beta", &[4], 14);
    f32_init(b, "mean", &[4], 15);
    let var: Vec<f32> = rand_f32(4, 16).iter().map(|v| v.abs() + 0.1).collect();
    b.init("var", &Tensor::from_vec(vec![4], var));
    b.node_attrs(
        "BatchNormalization",
        &[x, "gamma", "beta", "mean", "var"],
        &[y],
        vec![("epsilon", Attribute::Float(1e-3))],
    );
}

fn feeds() -> Vec<(&'static str, Value)> {
    vec![("x", rand_input(&[1, 3, 5, 5], 10))]
}

#[test]
fn batch_norm_folds_into_conv_with_and_without_bias() {
    for (opset, bias) in [(15, true), (9, false), (7, true)] {
        let mut b = G::new(opset);
        conv(&mut b, bias);
        batch_norm(&mut b, "c", "n");
        b.node("Relu", &["n"], &["y"]);
        b.output("y");
        let ops = check_same(&b, Basic, &feeds(), 1e-5, 1e-5);
        assert_eq!(ops, ["Conv", "Relu"], "opset {opset}");
    }
}

#[test]
fn batch_norm_output_that_is_a_graph_output_folds_too() {
    let mut b = G::new(13);
    conv(&mut b, true);
    batch_norm(&mut b, "c", "y");
    b.output("y");
    assert_eq!(check_same(&b, Basic, &feeds(), 1e-5, 1e-5), ["Conv"]);
}

#[test]
fn batch_norm_stays_when_conv_output_is_seen_elsewhere_or_stats_can_be_fed() {
    // The Conv output is also a graph output.
    let mut b = G::new(13);
    conv(&mut b, true);
    batch_norm(&mut b, "c", "y");
    b.output("c");
    b.output("y");
    assert_eq!(
        check_same(&b, Basic, &feeds(), 0.0, 0.0),
        ["Conv", "BatchNormalization"]
    );
    // The mean is an initializer that is also an input (a caller may override it).
    let mut b = G::new(13);
    conv(&mut b, true);
    batch_norm(&mut b, "c", "y");
    let mean = b.v("mean");
    b.g.add_input(mean);
    b.output("y");
    assert_eq!(
        check_same(&b, Basic, &feeds(), 0.0, 0.0),
        ["Conv", "BatchNormalization"]
    );
    // Training mode (opset 14+) keeps the batch statistics.
    let mut b = G::new(15);
    conv(&mut b, true);
    batch_norm(&mut b, "c", "y");
    let bn = b.g.nodes.len() - 1;
    b.g.nodes[bn]
        .attributes
        .insert("training_mode".into(), Attribute::Int(1));
    b.output("y");
    assert_eq!(ops_after(&b, Basic), ["Conv", "BatchNormalization"]);
}

#[test]
fn per_channel_mul_and_add_fold_into_conv() {
    let mut b = G::new(13);
    conv(&mut b, false);
    f32_init(&mut b, "m", &[4, 1, 1], 20);
    f32_init(&mut b, "a", &[1, 4, 1, 1], 21);
    b.init("s", &Tensor::from_vec(vec![1], vec![0.75f32]));
    b.node("Mul", &["m", "c"], &["p"]);
    b.node("Add", &["p", "a"], &["q"]);
    b.node("Mul", &["q", "s"], &["y"]);
    b.output("y");
    assert_eq!(check_same(&b, Basic, &feeds(), 1e-5, 1e-5), ["Conv"]);
}

#[test]
fn mul_that_varies_along_space_or_broadcasts_up_stays() {
    // Varies along the width: not a per-channel map.
    let mut b = G::new(13);
    conv(&mut b, true);
    f32_init(&mut b, "m", &[1, 1, 5], 22);
    b.node("Mul", &["c", "m"], &["y"]);
    b.output("y");
    assert_eq!(check_same(&b, Basic, &feeds(), 0.0, 0.0), ["Conv", "Mul"]);
    // Rank 5: broadcasting would change the output shape.
    let mut b = G::new(13);
    conv(&mut b, true);
    f32_init(&mut b, "m", &[2, 1, 4, 1, 1], 23);
    b.node("Add", &["c", "m"], &["y"]);
    b.output("y");
    assert_eq!(check_same(&b, Basic, &feeds(), 0.0, 0.0), ["Conv", "Add"]);
    // The Conv output has a second reader.
    let mut b = G::new(13);
    conv(&mut b, true);
    b.init("s", &Tensor::scalar(2.0f32));
    b.node("Mul", &["c", "s"], &["p"]);
    b.node("Add", &["p", "c"], &["y"]);
    b.output("y");
    assert_eq!(
        check_same(&b, Basic, &feeds(), 0.0, 0.0),
        ["Conv", "Mul", "Add"]
    );
}

/// x * a + b feeding a Conv with `pads`.
fn affine_then_conv(pads: &[i64], group: i64) -> G {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[1, 4, 5, 5]);
    b.init("a", &Tensor::from_vec(vec![1], vec![0.6f32]));
    b.init("b", &Tensor::scalar(-0.3f32));
    f32_init(&mut b, "W", &[6, (4 / group) as usize, 3, 3], 24);
    f32_init(&mut b, "B", &[6], 25);
    b.node("Mul", &["a", "x"], &["p"]);
    b.node("Add", &["p", "b"], &["q"]);
    b.node_attrs(
        "Conv",
        &["q", "W", "B"],
        &["y"],
        vec![("pads", ints(pads)), ("group", Attribute::Int(group))],
    );
    b.output("y");
    b
}

#[test]
fn scalar_affine_before_an_unpadded_conv_folds_into_it() {
    let x = vec![("x", rand_input(&[1, 4, 5, 5], 26))];
    for group in [1, 2] {
        let b = affine_then_conv(&[0, 0, 0, 0], group);
        assert_eq!(
            check_same(&b, Basic, &x, 1e-5, 1e-5),
            ["Conv"],
            "group {group}"
        );
    }
    // With padding the border windows would see b where the Conv pads zeros.
    let b = affine_then_conv(&[1, 1, 1, 1], 1);
    assert_eq!(check_same(&b, Basic, &x, 0.0, 0.0), ["Mul", "Add", "Conv"]);
}

/// BatchNormalization on x [1, 4, 5, 5] (no Conv before it) -> Mul by Unsqueeze(m [4]) ->
/// Add Reshape(a [4]) -> Relu: the DenseNet pre-activation chain.
fn batch_norm_affine_relu(b: &mut G) {
    b.input("x", DataType::Float32, &[1, 4, 5, 5]);
    batch_norm(b, "x", "n");
    f32_init(b, "m", &[4], 30);
    f32_init(b, "a", &[4], 31);
    b.init("axes", &Tensor::from_vec(vec![2], vec![1i64, 2]));
    b.init("shape", &Tensor::from_vec(vec![3], vec![-1i64, 1, 1]));
    b.node("Unsqueeze", &["m", "axes"], &["m3"]);
    b.node("Reshape", &["a", "shape"], &["a3"]);
    b.node("Mul", &["n", "m3"], &["p"]);
    b.node("Add", &["a3", "p"], &["q"]);
    b.node("Relu", &["q"], &["y"]);
    b.output("y");
}

#[test]
fn per_channel_mul_and_add_through_shape_ops_fold_into_batch_norm() {
    let mut b = G::new(13);
    batch_norm_affine_relu(&mut b);
    let x = vec![("x", rand_input(&[1, 4, 5, 5], 32))];
    let ops = check_same(&b, Basic, &x, 1e-5, 1e-5);
    // The shape ops stay (their outputs are no longer read), the Mul and Add are gone.
    assert_eq!(
        ops.iter().filter(|o| *o == "Mul" || *o == "Add").count(),
        0,
        "{ops:?}"
    );
    assert!(ops.contains(&"BatchNormalization".to_string()));
}

#[test]
fn mul_after_batch_norm_whose_output_is_also_read_stays() {
    let mut b = G::new(13);
    batch_norm_affine_relu(&mut b);
    // A second reader of the BatchNormalization output keeps it as it is.
    b.output("n");
    let x = vec![("x", rand_input(&[1, 4, 5, 5], 33))];
    let ops = check_same(&b, Basic, &x, 1e-5, 1e-5);
    assert!(
        ops.contains(&"Mul".to_string()) && ops.contains(&"Add".to_string()),
        "{ops:?}"
    );
}
