//! Identity, Dropout, same-type Cast, reshape chains and Squeeze/Unsqueeze pairs.

use super::*;
use OptimizationLevel::Basic;

#[test]
fn identity_dropout_and_same_type_cast_are_removed() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, 3]);
    b.node("Identity", &["x"], &["a"]);
    b.node_attrs("Cast", &["a"], &["c"], vec![("to", Attribute::Int(1))]);
    b.node("Dropout", &["c"], &["d"]);
    b.node("Relu", &["d"], &["r"]);
    b.node("Identity", &["r"], &["y"]);
    b.output("y");
    let ops = check_same(&b, Basic, &[("x", rand_input(&[2, 3], 1))], 0.0, 0.0);
    assert_eq!(ops, ["Relu"]);
}

#[test]
fn identity_of_a_graph_input_that_is_an_output_stays() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2]);
    b.node("Identity", &["x"], &["y"]);
    b.node("Neg", &["x"], &["z"]);
    b.output("y");
    b.output("z");
    let ops = check_same(&b, Basic, &[("x", rand_input(&[2], 2))], 0.0, 0.0);
    assert_eq!(ops, ["Identity", "Neg"]);
}

#[test]
fn cast_to_another_type_and_dropout_with_a_used_mask_stay() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[4]);
    b.node_attrs("Cast", &["x"], &["h"], vec![("to", Attribute::Int(11))]);
    b.node_attrs("Cast", &["h"], &["c"], vec![("to", Attribute::Int(1))]);
    b.node("Dropout", &["c"], &["d", "mask"]);
    b.output("d");
    b.output("mask");
    let ops = check_same(&b, Basic, &[("x", rand_input(&[4], 3))], 0.0, 0.0);
    assert_eq!(ops, ["Cast", "Cast", "Dropout"]);
}

#[test]
fn dropout_in_training_mode_stays() {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[4]);
    b.input("training", DataType::Bool, &[]);
    b.node("Dropout", &["x", "", "training"], &["d"]);
    b.node("Relu", &["d"], &["y"]);
    b.output("y");
    assert_eq!(ops_after(&b, Basic), ["Dropout", "Relu"]);
}

#[test]
fn reshape_of_a_reshape_reads_the_source() {
    let mut b = G::new(14);
    b.input("x", DataType::Float32, &[2, 3, 4]);
    b.init("s1", &Tensor::from_vec(vec![2], vec![6i64, 4]));
    b.init("s2", &Tensor::from_vec(vec![2], vec![4i64, -1]));
    b.node("Reshape", &["x", "s1"], &["a"]);
    b.node_attrs("Flatten", &["a"], &["f"], vec![("axis", Attribute::Int(1))]);
    b.node("Reshape", &["f", "s2"], &["y"]);
    b.output("y");
    let ops = check_same(&b, Basic, &[("x", rand_input(&[2, 3, 4], 4))], 0.0, 0.0);
    assert_eq!(ops, ["Reshape"]);
}

#[test]
fn reshape_that_copies_a_dimension_keeps_its_input() {
    // 0 copies the dimension of the Reshape's own input, which the inner op changed.
    let mut b = G::new(14);
    b.input("x", DataType::Float32, &[2, 3, 4]);
    b.init("s1", &Tensor::from_vec(vec![2], vec![6i64, 4]));
    b.init("s2", &Tensor::from_vec(vec![2], vec![0i64, -1]));
    b.node("Reshape", &["x", "s1"], &["a"]);
    b.node("Reshape", &["a", "s2"], &["y"]);
    b.output("y");
    let ops = check_same(&b, Basic, &[("x", rand_input(&[2, 3, 4], 5))], 0.0, 0.0);
    assert_eq!(ops, ["Reshape", "Reshape"]);
}

#[test]
fn unsqueeze_squeeze_pairs_cancel_only_on_the_same_axes() {
    for (opset, same) in [(13, true), (13, false), (11, true)] {
        let mut b = G::new(opset);
        b.input("x", DataType::Float32, &[3, 2]);
        let (ua, sa) = if same {
            (vec![0, -1], vec![-1, 0])
        } else {
            (vec![0, 1], vec![1])
        };
        if opset >= 13 {
            b.init("ua", &Tensor::from_vec(vec![ua.len()], ua.clone()));
            b.init("sa", &Tensor::from_vec(vec![sa.len()], sa.clone()));
            b.node("Unsqueeze", &["x", "ua"], &["u"]);
            b.node("Squeeze", &["u", "sa"], &["s"]);
        } else {
            b.node_attrs("Unsqueeze", &["x"], &["u"], vec![("axes", ints(&ua))]);
            b.node_attrs("Squeeze", &["u"], &["s"], vec![("axes", ints(&sa))]);
        }
        b.node("Neg", &["s"], &["y"]);
        b.output("y");
        let ops = check_same(&b, Basic, &[("x", rand_input(&[3, 2], 6))], 0.0, 0.0);
        if same {
            assert_eq!(ops, ["Neg"], "opset {opset}");
        } else {
            assert_eq!(ops, ["Unsqueeze", "Squeeze", "Neg"], "opset {opset}");
        }
    }
}

#[test]
fn a_value_a_subgraph_reads_keeps_its_producer() {
    let mut then_b = G::body();
    then_b.node("Neg", &["i"], &["t"]);
    then_b.output("t");
    let mut else_b = G::body();
    else_b.node("Identity", &["i"], &["e"]);
    else_b.output("e");
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[3]);
    b.input("cond", DataType::Bool, &[]);
    b.node("Identity", &["x"], &["i"]);
    b.node_attrs(
        "If",
        &["cond"],
        &["y"],
        vec![
            ("then_branch", Attribute::Graph(Box::new(then_b.g))),
            ("else_branch", Attribute::Graph(Box::new(else_b.g))),
        ],
    );
    b.output("y");
    for c in [true, false] {
        let feeds = [
            ("x", rand_input(&[3], 7)),
            ("cond", Value::Tensor(Tensor::from_bools(vec![], &[c]))),
        ];
        let ops = check_same(&b, Basic, &feeds, 0.0, 0.0);
        assert_eq!(ops, ["Identity", "If"]);
    }
}
