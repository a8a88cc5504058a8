//! Gated MatMulNBits feed-forwards -> the internal MatMulNBitsSiluMul, for sessions on a CUDA
//! device that runs it. The stand-in device claims the op and refuses to build it, so the CPU
//! provider's kernel runs the fused node and is checked against the unfused graph.

use super::elementwise_chain::{op_list, optimized, ChainDevice};
use super::*;
use onnx_runtime_ep_api::{DeviceKind, ExecutionProvider};
use std::sync::Arc;
use OptimizationLevel::All;

const FUSED: &str = "ai.onnx_runtime_rs.internal:MatMulNBitsSiluMul";
const OPS: &[&str] = &["MatMulNBitsSiluMul", "FusedElementwise"];
pub(super) const K: usize = 64;
pub(super) const N: usize = 24;
const BLOCK: usize = 32;

fn device() -> Arc<dyn ExecutionProvider> {
    Arc::new(ChainDevice(DeviceKind::Cuda, OPS))
}

fn ops(b: &G, device: Option<&dyn ExecutionProvider>) -> Vec<String> {
    op_list(&optimized(b, All, device))
}

/// MatMulNBits(a, weights `w`) -> `y`, 4-bit, with zero points when `zp`.
pub(super) fn nbits(b: &mut G, a: &str, w: &str, y: &str, zp: bool, seed: u64) {
    let kb = K / BLOCK;
    let codes: Vec<u8> = rand_f32(N * kb * BLOCK / 2, seed)
        .iter()
        .map(|v| ((v + 1.0) * 127.0) as u8)
        .collect();
    let (bn, sn, zn) = (format!("{w}_b"), format!("{w}_s"), format!("{w}_z"));
    b.init(&bn, &Tensor::from_vec(vec![N, kb, BLOCK / 2], codes));
    let scales: Vec<f32> = rand_f32(N * kb, seed + 1)
        .iter()
        .map(|v| 0.03 + 0.02 * v)
        .collect();
    b.init(&sn, &Tensor::from_vec(vec![N * kb], scales));
    if zp {
        let z: Vec<u8> = rand_f32(N, seed + 2)
            .iter()
            .map(|v| ((v + 1.0) * 100.0) as u8)
            .collect();
        b.init(&zn, &Tensor::from_vec(vec![N], z));
    }
    let ins: Vec<&str> = if zp {
        vec![a, &bn, &sn, &zn]
    } else {
        vec![a, &bn, &sn]
    };
    let attrs = vec![
        ("K", Attribute::Int(K as i64)),
        ("N", Attribute::Int(N as i64)),
        ("bits", Attribute::Int(4)),
        ("block_size", Attribute::Int(BLOCK as i64)),
    ];
    let id = b.node_attrs("MatMulNBits", &ins, &[y], attrs);
    b.g.node_mut(id).domain = "com.microsoft".into();
}

/// The feed-forward of an LLM layer as the onnxruntime-genai builder writes it: gate and up
/// products of x, SiLU as Sigmoid and Mul, the product.
fn feed_forward(up_of: &str) -> G {
    let mut b = G::new(17);
    b.g.opset_imports.insert("com.microsoft".into(), 1);
    b.input("x", DataType::Float32, &[2, K as i64]);
    b.input("x2", DataType::Float32, &[2, K as i64]);
    nbits(&mut b, "x", "gate", "g", false, 11);
    nbits(&mut b, up_of, "up", "u", true, 21);
    b.node("Sigmoid", &["g"], &["sg"]);
    b.node("Mul", &["g", "sg"], &["silu"]);
    b.node("Mul", &["silu", "u"], &["y"]);
    b.output("y");
    b
}

#[test]
fn gated_nbits_products_fuse_for_a_cuda_device_and_match() {
    let b = feed_forward("x");
    let dev = device();
    assert_eq!(ops(&b, Some(dev.as_ref())), [FUSED]);
    // Without the device (or with one that does not run the op) the products stay.
    let plain = [
        "com.microsoft:MatMulNBits",
        "com.microsoft:MatMulNBits",
        "com.microsoft:QuickGelu",
        "Mul",
    ];
    assert_eq!(ops(&b, None), plain);
    let other = ChainDevice(DeviceKind::Cuda, &["FusedElementwise"]);
    assert_eq!(ops(&b, Some(&other))[..2], plain[..2]);

    let feeds = [
        ("x", rand_input(&[2, K], 5)),
        ("x2", rand_input(&[2, K], 6)),
    ];
    let (want, got) = unfused_and_on_device(&b.g, &feeds, device());
    let (_, w) = out_f32(&want, 0);
    let (shape, g) = out_f32(&got, 0);
    assert_eq!(shape, [2, N]);
    assert!(w.iter().any(|v| v.abs() > 1e-2), "a product worth checking");
    // QuickGelu and Sigmoid-then-Mul round differently by an ulp or so.
    assert_close(&g, &w.iter().map(|&v| v as f64).collect::<Vec<_>>());
}

#[test]
fn products_of_different_inputs_do_not_fuse() {
    let b = feed_forward("x2");
    let dev = device();
    assert!(!ops(&b, Some(dev.as_ref())).iter().any(|o| o == FUSED));
}

#[test]
fn an_up_product_read_elsewhere_does_not_fuse() {
    let mut b = feed_forward("x");
    b.output("u");
    let dev = device();
    assert!(!ops(&b, Some(dev.as_ref())).iter().any(|o| o == FUSED));
}
