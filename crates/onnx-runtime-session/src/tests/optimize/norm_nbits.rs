//! RMS norms folded into the MatMulNBits products that read them (the internal
//! NormMatMulNBits), for sessions on a CUDA device that runs it. The stand-in device claims
//! the ops and refuses to build them, so the CPU provider's kernels run the fused nodes: they
//! compute the graph they replace, so the outputs are the unfused graph's bytes.

use super::elementwise_chain::{op_list, optimized, ChainDevice};
use super::nbits_glu::{nbits, K, N};
use super::*;
use onnx_runtime_ep_api::{DeviceKind, ExecutionProvider};
use std::sync::Arc;
use OptimizationLevel::All;

const FUSED: &str = "ai.onnx_runtime_rs.internal:NormMatMulNBits";
const OPS: &[&str] = &["NormMatMulNBits", "MatMulNBitsSiluMul", "FusedElementwise"];

fn device() -> Arc<dyn ExecutionProvider> {
    Arc::new(ChainDevice(DeviceKind::Cuda, OPS))
}

fn ops(b: &G, device: Option<&dyn ExecutionProvider>) -> Vec<String> {
    op_list(&optimized(b, All, device))
}

fn eps() -> (&'static str, Attribute) {
    ("epsilon", Attribute::Float(1e-5))
}

/// An attention-then-feed-forward slice of a decoder as the onnxruntime-genai builder writes
/// it: SkipSimplifiedLayerNormalization of (x, residual) read by two products (the residual
/// sum read by the last Add), then SimplifiedLayerNormalization of their sum read by a gated
/// pair.
fn decoder_slice() -> G {
    let mut b = G::new(17);
    b.g.opset_imports.insert("com.microsoft".into(), 1);
    b.input("x", DataType::Float32, &[3, K as i64]);
    b.input("res", DataType::Float32, &[3, K as i64]);
    f32_init(&mut b, "g1", &[K], 41);
    f32_init(&mut b, "g2", &[N], 42);
    let id = b.node_attrs(
        "SkipSimplifiedLayerNormalization",
        &["x", "res", "g1"],
        &["h", "", "", "sum"],
        vec![eps()],
    );
    b.g.node_mut(id).domain = "com.microsoft".into();
    nbits(&mut b, "h", "q", "q", true, 51);
    nbits(&mut b, "h", "k", "k", false, 61);
    b.node("Add", &["q", "k"], &["qk"]);
    b.node_attrs(
        "SimplifiedLayerNormalization",
        &["qk", "g2"],
        &["h2"],
        vec![eps(), ("axis", Attribute::Int(-1))],
    );
    b
}

#[test]
fn norms_fold_into_their_products_and_give_the_same_bytes() {
    let mut b = decoder_slice();
    b.output("qk");
    b.output("sum");
    let dev = device();
    let got = ops(&b, Some(dev.as_ref()));
    assert_eq!(got, [FUSED, FUSED, "Add"]);
    // Without the device the graph stays as written.
    assert_eq!(
        ops(&b, None)[0],
        "com.microsoft:SkipSimplifiedLayerNormalization"
    );
    let feeds = [
        ("x", rand_input(&[3, K], 5)),
        ("res", rand_input(&[3, K], 6)),
    ];
    let (want, got) = unfused_and_on_device(&b.g, &feeds, device());
    assert_eq!(want.len(), 2);
    for ((wn, w), (gn, g)) in want.iter().zip(&got) {
        assert_eq!(wn, gn);
        let (w, g) = (w.as_tensor().unwrap(), g.as_tensor().unwrap());
        assert_eq!(w.shape(), g.shape(), "{wn}");
        assert_eq!(
            w.bytes(),
            g.bytes(),
            "{wn}: the fused nodes compute the same values"
        );
    }
    let (_, v) = out_f32(&got, 0);
    assert!(v.iter().any(|v| v.abs() > 1e-2), "a product worth checking");
}

#[test]
fn a_norm_read_by_a_gated_pair_folds_into_it() {
    // Products of the second norm (N wide): their K is N here, so build them with K = N.
    let mut b = G::new(17);
    b.g.opset_imports.insert("com.microsoft".into(), 1);
    b.input("x", DataType::Float32, &[2, K as i64]);
    f32_init(&mut b, "g", &[K], 7);
    b.node_attrs(
        "SimplifiedLayerNormalization",
        &["x", "g"],
        &["h"],
        vec![eps(), ("axis", Attribute::Int(-1))],
    );
    nbits(&mut b, "h", "gate", "gt", false, 11);
    nbits(&mut b, "h", "up", "u", true, 21);
    b.node("Sigmoid", &["gt"], &["sg"]);
    b.node("Mul", &["gt", "sg"], &["silu"]);
    b.node("Mul", &["silu", "u"], &["y"]);
    b.output("y");
    let dev = device();
    assert_eq!(ops(&b, Some(dev.as_ref())), [FUSED]);
    let feeds = [("x", rand_input(&[2, K], 9))];
    let (want, got) = unfused_and_on_device(&b.g, &feeds, device());
    let (shape, g) = out_f32(&got, 0);
    assert_eq!(shape, [2, N]);
    let (_, w) = out_f32(&want, 0);
    // QuickGelu and Sigmoid-then-Mul round differently by an ulp or so (as nbits_glu's).
    assert_close(&g, &w.iter().map(|&v| v as f64).collect::<Vec<_>>());
}

#[test]
fn a_norm_read_by_another_op_stays() {
    let mut b = decoder_slice();
    b.node("Relu", &["h"], &["r"]);
    b.output("r");
    b.output("qk");
    let dev = device();
    let got = ops(&b, Some(dev.as_ref()));
    assert_eq!(got[0], "com.microsoft:SkipSimplifiedLayerNormalization");
    assert!(!got.iter().any(|o| o == FUSED));
}

#[test]
fn a_norm_whose_statistics_are_read_stays() {
    let mut b = G::new(17);
    b.g.opset_imports.insert("com.microsoft".into(), 1);
    b.input("x", DataType::Float32, &[2, K as i64]);
    f32_init(&mut b, "g", &[K], 7);
    b.node_attrs(
        "SimplifiedLayerNormalization",
        &["x", "g"],
        &["h", "inv"],
        vec![eps(), ("axis", Attribute::Int(-1))],
    );
    nbits(&mut b, "h", "q", "q", true, 51);
    b.output("q");
    b.output("inv");
    let dev = device();
    assert!(!ops(&b, Some(dev.as_ref())).iter().any(|o| o == FUSED));
}
