//! MatMul with constant weights -> Add(bias) [-> activation] into the internal MatMulBias.

use super::*;
use onnx_runtime_ep_cpu::INTERNAL_DOMAIN;
use OptimizationLevel::All;

fn fused() -> String {
    format!("{INTERNAL_DOMAIN}:MatMulBias")
}

/// x [2, 5, 8] @ W [8, 12] + bias (of `bias_shape`, on the side `bias_first` says).
fn matmul_add(opset: u64, bias_shape: &[usize], bias_first: bool) -> G {
    let mut b = G::new(opset);
    b.input("x", DataType::Float32, &[2, 5, 8]);
    f32_init(&mut b, "w", &[8, 12], 70);
    f32_init(&mut b, "bias", bias_shape, 71);
    b.node("MatMul", &["x", "w"], &["mm"]);
    let ins = if bias_first {
        ["bias", "mm"]
    } else {
        ["mm", "bias"]
    };
    b.node("Add", &ins, &["s"]);
    b
}

fn feeds() -> Vec<(&'static str, Value)> {
    vec![("x", rand_input(&[2, 5, 8], 72))]
}

#[test]
fn matmul_bias_and_each_gelu_become_one_node() {
    // com.microsoft Gelu and FastGelu, ONNX Gelu (opset 20) in both forms.
    for (domain, op, approximate) in [
        ("com.microsoft", "Gelu", None),
        ("com.microsoft", "FastGelu", None),
        ("", "Gelu", None),
        ("", "Gelu", Some("tanh")),
    ] {
        let mut b = matmul_add(20, &[12], true);
        b.g.opset_imports.insert("com.microsoft".into(), 1);
        let attrs = approximate
            .map(|a| vec![("approximate", Attribute::String(a.into()))])
            .unwrap_or_default();
        let id = b.node_attrs(op, &["s"], &["y"], attrs);
        b.g.node_mut(id).domain = domain.into();
        b.output("y");
        let ops = check_same(&b, All, &feeds(), 1e-5, 1e-5);
        assert_eq!(ops, [fused()], "{domain}:{op} {approximate:?}");
    }
}

#[test]
fn matmul_bias_with_relu_or_alone_or_a_row_bias() {
    let mut b = matmul_add(13, &[12], false);
    b.node("Relu", &["s"], &["y"]);
    b.output("y");
    assert_eq!(check_same(&b, All, &feeds(), 1e-5, 1e-5), [fused()]);

    let mut b = matmul_add(13, &[12], true);
    b.output("s");
    assert_eq!(check_same(&b, All, &feeds(), 1e-5, 1e-5), [fused()]);

    // [1, 12] cannot widen a rank-3 product.
    let mut b = matmul_add(13, &[1, 12], false);
    b.output("s");
    assert_eq!(check_same(&b, All, &feeds(), 1e-5, 1e-5), [fused()]);
}

#[test]
fn matmul_add_stays_when_it_is_not_a_bias_or_the_product_is_seen() {
    // A full-shape addend is not a bias.
    let mut b = matmul_add(13, &[5, 12], false);
    b.output("s");
    assert_eq!(check_same(&b, All, &feeds(), 0.0, 0.0), ["MatMul", "Add"]);

    // The product itself is a graph output.
    let mut b = matmul_add(13, &[12], false);
    b.output("s");
    b.output("mm");
    assert_eq!(check_same(&b, All, &feeds(), 0.0, 0.0), ["MatMul", "Add"]);

    // Weights fed at run time.
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, 5, 8]);
    b.input("w", DataType::Float32, &[8, 12]);
    f32_init(&mut b, "bias", &[12], 73);
    b.node("MatMul", &["x", "w"], &["mm"]);
    b.node("Add", &["mm", "bias"], &["s"]);
    b.output("s");
    let mut f = feeds();
    f.push(("w", rand_input(&[8, 12], 74)));
    assert_eq!(check_same(&b, All, &f, 0.0, 0.0), ["MatMul", "Add"]);
}
