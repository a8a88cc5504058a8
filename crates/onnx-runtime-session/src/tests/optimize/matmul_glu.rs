//! Gated MatMul feed-forwards with constant float weights (the float16 exports) -> the
//! internal MatMulSiluMul, for sessions on a CUDA device that runs it. The stand-in device
//! claims the op and refuses to build it, so the CPU provider's kernel runs the fused node and
//! is checked against the unfused graph.

use super::elementwise_chain::{op_list, optimized, ChainDevice};
use super::*;
use onnx_runtime_ep_api::{DeviceKind, ExecutionProvider};
use std::sync::Arc;
use OptimizationLevel::All;

const FUSED: &str = "ai.onnx_runtime_rs.internal:MatMulSiluMul";
const OPS: &[&str] = &["MatMulSiluMul", "FusedElementwise"];
const K: usize = 48;
const N: usize = 40;

fn device() -> Arc<dyn ExecutionProvider> {
    Arc::new(ChainDevice(DeviceKind::Cuda, OPS))
}

fn ops(b: &G, device: Option<&dyn ExecutionProvider>) -> Vec<String> {
    op_list(&optimized(b, All, device))
}

/// Gate and up products of x (the up one of `up_of`, its weight `up_n` columns wide), SiLU as
/// Sigmoid and Mul, the product.
fn feed_forward(up_of: &str, up_n: usize) -> G {
    let mut b = G::new(17);
    b.g.opset_imports.insert("com.microsoft".into(), 1);
    b.input("x", DataType::Float32, &[1, 2, K as i64]);
    b.input("x2", DataType::Float32, &[1, 2, K as i64]);
    b.init("wg", &Tensor::from_vec(vec![K, N], rand_f32(K * N, 31)));
    b.init(
        "wu",
        &Tensor::from_vec(vec![K, up_n], rand_f32(K * up_n, 32)),
    );
    b.node("MatMul", &["x", "wg"], &["g"]);
    b.node("MatMul", &[up_of, "wu"], &["u"]);
    b.node("Sigmoid", &["g"], &["sg"]);
    b.node("Mul", &["g", "sg"], &["silu"]);
    b.node("Mul", &["silu", "u"], &["y"]);
    b.output("y");
    b
}

#[test]
fn gated_matmuls_fuse_for_a_cuda_device_and_match() {
    let b = feed_forward("x", N);
    let dev = device();
    assert_eq!(ops(&b, Some(dev.as_ref())), [FUSED]);
    // Without the device (or with one that does not run the op) the products stay.
    let plain = ["MatMul", "MatMul", "com.microsoft:QuickGelu", "Mul"];
    assert_eq!(ops(&b, None), plain);
    let other = ChainDevice(DeviceKind::Cuda, &["FusedElementwise"]);
    assert_eq!(ops(&b, Some(&other))[..2], plain[..2]);

    let feeds = [
        ("x", rand_input(&[1, 2, K], 5)),
        ("x2", rand_input(&[1, 2, K], 6)),
    ];
    let (want, got) = unfused_and_on_device(&b.g, &feeds, device());
    let (_, w) = out_f32(&want, 0);
    let (shape, g) = out_f32(&got, 0);
    assert_eq!(shape, [1, 2, N]);
    assert!(w.iter().any(|v| v.abs() > 1e-2), "a product worth checking");
    // QuickGelu and Sigmoid-then-Mul round differently by an ulp or so.
    assert_close(&g, &w.iter().map(|&v| v as f64).collect::<Vec<_>>());
}

#[test]
fn matmuls_of_other_inputs_or_shapes_or_read_elsewhere_do_not_fuse() {
    let dev = device();
    let fused = |b: &G| ops(b, Some(dev.as_ref())).iter().any(|o| o == FUSED);
    assert!(!fused(&feed_forward("x2", N)), "different inputs");
    assert!(!fused(&feed_forward("x", 1)), "weights of two shapes");
    let mut b = feed_forward("x", N);
    b.output("u");
    assert!(!fused(&b), "the up product read elsewhere");
}
