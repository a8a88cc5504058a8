//! Common subexpressions merge: same op, inputs and attributes; small constants equal by
//! content are the same input; graph outputs and attribute differences keep their nodes.

use super::*;

fn two_branches(same_attr: bool, second_is_output: bool) -> G {
    let mut b = G::new(17);
    b.input("x", DataType::Float32, &[2, 3]);
    b.init("c1", &Tensor::from_slice(vec![1], &[0.5f32]));
    b.init("c2", &Tensor::from_slice(vec![1], &[0.5f32]));
    b.node("Mul", &["x", "c1"], &["a"]);
    b.node("Mul", &["x", "c2"], &["b"]);
    b.node_attrs(
        "Softmax",
        &["a"],
        &["sa"],
        vec![("axis", Attribute::Int(-1))],
    );
    let axis = if same_attr { -1 } else { 0 };
    b.node_attrs(
        "Softmax",
        &["b"],
        &["sb"],
        vec![("axis", Attribute::Int(axis))],
    );
    b.node("Add", &["sa", "sb"], &["y"]);
    b.output("y");
    if second_is_output {
        b.output("sb");
    }
    b
}

fn check_same_results(b: &G) {
    let x = f32t(&[2, 3], &rand_f32(6, 9));
    let run = |level| {
        Session::from_graph(
            &b.g,
            SessionOptions {
                optimization: level,
                ..Default::default()
            },
        )
        .unwrap()
        .run(&[("x", x.clone())])
        .unwrap()
    };
    let (want, got) = (run(OptimizationLevel::None), run(OptimizationLevel::All));
    for i in 0..want.len() {
        assert_eq!(out_f32(&want, i), out_f32(&got, i));
    }
}

#[test]
fn duplicate_nodes_merge_and_equal_constants_count_as_one() {
    let b = two_branches(true, false);
    assert_eq!(
        ops_after(&b, OptimizationLevel::All),
        ["Mul", "Softmax", "Add"]
    );
    check_same_results(&b);
}

#[test]
fn different_attributes_and_graph_outputs_are_kept() {
    let b = two_branches(false, false);
    assert_eq!(
        ops_after(&b, OptimizationLevel::All),
        ["Mul", "Softmax", "Softmax", "Add"]
    );
    check_same_results(&b);
    // The second Softmax is a graph output: it stays (its Mul input still merges).
    let b = two_branches(true, true);
    assert_eq!(
        ops_after(&b, OptimizationLevel::All),
        ["Mul", "Softmax", "Softmax", "Add"]
    );
    check_same_results(&b);
}
