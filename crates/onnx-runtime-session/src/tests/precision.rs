//! float16 / bfloat16 conversion at load: the half graph runs on the CPU provider's real
//! kernels and matches the float32 run; shape arithmetic stays float32; casts appear only at
//! the edges; an attention-mask constant saturates instead of becoming -inf.

use super::*;
use crate::precision::{convert, Precision};

/// x [2, 8] → MatMul(W) → Add(b) → LayerNormalization → Div(√(dim 1 of x, as float)) →
/// Add(mask · -3.4e38) → Softmax → y; plus the float32 output `len` (shape arithmetic).
fn graph() -> G {
    let mut b = G::new(17);
    b.input("x", DataType::Float32, &[2, 8]);
    let w: Vec<f32> = rand_f32(64, 7).iter().map(|v| v * 0.5).collect();
    b.init("w", &Tensor::from_slice(vec![8, 8], &w));
    b.init("b", &Tensor::from_slice(vec![8], &rand_f32(8, 8)));
    b.init("gamma", &Tensor::from_slice(vec![8], &[1.0f32; 8]));
    b.init("beta", &Tensor::from_slice(vec![8], &[0.0f32; 8]));
    b.init("one", &Tensor::from_slice(vec![], &[1i64]));
    b.init("lowest", &Tensor::from_slice(vec![], &[f32::MIN]));
    let mask: Vec<f32> = (0..8).map(|i| if i >= 6 { 1.0 } else { 0.0 }).collect();
    b.init("mask", &Tensor::from_slice(vec![8], &mask));
    b.node("MatMul", &["x", "w"], &["h"]);
    b.node("Add", &["h", "b"], &["h2"]);
    b.node("LayerNormalization", &["h2", "gamma", "beta"], &["n"]);
    b.node("Shape", &["x"], &["s"]);
    b.node("Gather", &["s", "one"], &["d"]);
    b.node_attrs(
        "Cast",
        &["d"],
        &["df"],
        vec![("to", Attribute::Int(DataType::Float32.onnx_code() as i64))],
    );
    b.node("Sqrt", &["df"], &["len"]);
    b.node("Div", &["n", "len"], &["scaled"]);
    b.node("Mul", &["mask", "lowest"], &["bias"]);
    b.node("Add", &["scaled", "bias"], &["logits"]);
    b.node_attrs(
        "Softmax",
        &["logits"],
        &["y"],
        vec![("axis", Attribute::Int(-1))],
    );
    b.output("y");
    b.output("len");
    b
}

fn run(precision: Precision, x: &[f32]) -> Vec<(String, Value)> {
    let options = SessionOptions {
        precision,
        ..Default::default()
    };
    let s = Session::from_graph(&graph().g, options).unwrap();
    if precision != Precision::AsWritten {
        let r = s.precision_report().expect("a report");
        assert!(r.half_nodes >= 6, "{r:?}");
    }
    s.run(&[("x", f32t(&[2, 8], x))]).unwrap()
}

#[test]
fn half_runs_match_float32_within_half_precision() {
    let x = rand_f32(16, 3);
    let want = run(Precision::AsWritten, &x);
    let (_, w) = out_f32(&want, 0);
    for (p, tol) in [(Precision::Float16, 4e-3), (Precision::BFloat16, 3e-2)] {
        let got = run(p, &x);
        let y = got[0].1.as_tensor().unwrap();
        assert_eq!(
            y.dtype(),
            DataType::Float32,
            "{p:?}: outputs keep their type"
        );
        let (shape, g) = out_f32(&got, 0);
        assert_eq!(shape, vec![2, 8]);
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            assert!(a.is_finite(), "{p:?}: y[{i}] = {a}");
            assert!((a - b).abs() <= tol, "{p:?}: y[{i}] = {a}, float32 {b}");
        }
        // The masked columns get (numerically) nothing, as in float32.
        assert!(g[6] < 1e-6 && g[15] < 1e-6, "{g:?}");
        let (_, len) = out_f32(&got, 1);
        assert_eq!(
            len,
            vec![8f32.sqrt()],
            "shape arithmetic is float32 and exact"
        );
    }
}

#[test]
fn casts_only_at_the_edges_and_shapes_stay_float32() {
    let mut g = graph().g;
    let report = convert(&mut g, DataType::Float16).unwrap();
    let casts: Vec<&onnx_runtime_ir::Node> =
        g.nodes.iter().filter(|n| n.op_type == "Cast").collect();
    // The model's own Cast (shape), x to half, `len` to half for Div, y back to float32.
    assert_eq!(casts.len(), 4, "{report:?}");
    assert_eq!(report.casts, 3);
    let produced_by_cast = |v: ValueId| casts.iter().any(|c| c.outputs[0] == v);
    for c in &casts {
        assert!(
            !c.inputs[0].is_some_and(produced_by_cast),
            "a Cast reads a Cast: {}",
            c.name
        );
    }
    let dtype = |name: &str| g.value(g.value_by_name(name).unwrap()).dtype();
    assert_ne!(
        dtype("len"),
        Some(DataType::Float16),
        "shape arithmetic is not converted"
    );
    let shape_cast = g
        .nodes
        .iter()
        .find(|n| n.outputs[0] == g.value_by_name("df").unwrap());
    assert_eq!(
        shape_cast.unwrap().attribute("to"),
        Some(&Attribute::Int(DataType::Float32.onnx_code() as i64))
    );
    assert_eq!(dtype("x"), Some(DataType::Float32));
    let y = g.value_by_name("y").unwrap();
    let last = g.nodes.iter().find(|n| n.outputs[0] == y).unwrap();
    assert_eq!(last.op_type, "Cast", "y is cast back to float32");
    assert_ne!(dtype("y"), Some(DataType::Float16));
    let w = g.value_by_name("w").unwrap();
    assert_eq!(g.initializers[&w].dtype, DataType::Float16);
    // float32's lowest saturates at float16's.
    let lowest = &g.initializers[&g.value_by_name("lowest").unwrap()];
    let bits = u16::from_le_bytes([lowest.bytes()[0], lowest.bytes()[1]]);
    assert_eq!(half::f16::from_bits(bits).to_f32(), -65504.0);
    assert_eq!(report.initializers, 6, "w, b, gamma, beta, lowest, mask");
}

#[test]
fn precision_names_parse() {
    assert_eq!("fp16".parse::<Precision>().unwrap(), Precision::Float16);
    assert_eq!("bf16".parse::<Precision>().unwrap(), Precision::BFloat16);
    assert_eq!("fp32".parse::<Precision>().unwrap(), Precision::AsWritten);
    assert!("int8".parse::<Precision>().unwrap_err().contains("fp16"));
}

#[test]
fn fusions_see_the_float32_graph_before_the_conversion() {
    // MatMul then Add(b) becomes MatMulBias on the float32 constants, then converts whole.
    let mut g = graph().g;
    let (report, conv) = crate::optimize::optimize_around(
        &mut g,
        crate::OptimizationLevel::All,
        onnx_runtime_ep_cpu::registry(),
        None,
        |g| convert(g, DataType::Float16),
    )
    .unwrap();
    assert_eq!(report.applied.get("matmul_bias"), Some(&1), "{report:?}");
    let fused = g
        .nodes
        .iter()
        .find(|n| n.op_type == "MatMulBias")
        .expect("a MatMulBias");
    for k in [1, 2] {
        let v = fused.inputs[k].unwrap();
        assert_eq!(g.initializers[&v].dtype, DataType::Float16, "input {k}");
    }
    assert!(conv.half_nodes >= 5, "{conv:?}");
    // And the session runs it in half precision within half-precision error of float32.
    let x = rand_f32(16, 3);
    let want = run(Precision::AsWritten, &x);
    let got = run(Precision::Float16, &x);
    let (_, w) = out_f32(&want, 0);
    let (_, h) = out_f32(&got, 0);
    for (a, b) in w.iter().zip(&h) {
        assert!((a - b).abs() <= 2e-2, "{a} vs {b}");
    }
}
