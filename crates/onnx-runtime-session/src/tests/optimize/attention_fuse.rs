//! Written-out attention -> com.microsoft MultiHeadAttention (and the residual norms ->
//! SkipLayerNormalization) on the graph PyTorch's TorchScript exporter writes for a
//! transformers BERT encoder (tests/data/tiny-bert-torchscript.onnx: 2 layers, hidden 64, 4
//! heads, sequence 16, dynamic batch, random weights; made on the GPU machine by
//! scripts/export-encoder-fixture.py). The stand-in device claims the fused ops and refuses
//! to build them, so the CPU provider's kernels run them, checked against the unfused graph.

use super::elementwise_chain::{op_list, ChainDevice};
use super::*;
use crate::optimize::optimize_for_device;
use crate::precision::Precision;
use onnx_runtime_ep_api::{DeviceKind, ExecutionProvider};
use std::sync::Arc;

const OPS: &[&str] = &["MultiHeadAttention", "SkipLayerNormalization"];

fn fixture() -> onnx_runtime_loader::Model {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/data/tiny-bert-torchscript.onnx"
    );
    onnx_runtime_loader::Model::load(path).unwrap()
}

fn device() -> Arc<dyn ExecutionProvider> {
    Arc::new(ChainDevice(DeviceKind::Cuda, OPS))
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0f32, f32::max)
}

fn count(ops: &[String], op: &str) -> usize {
    ops.iter().filter(|o| o.as_str() == op).count()
}

fn feeds(batch: usize) -> Vec<(&'static str, Value)> {
    let ids: Vec<i64> = (0..batch * 16).map(|i| (i * 37 % 512) as i64).collect();
    let mut mask = vec![1i64; batch * 16];
    if batch > 1 {
        // The second sequence is padded after 11 tokens.
        mask[16 + 11..32].fill(0);
    }
    vec![
        (
            "input_ids",
            Value::Tensor(Tensor::from_vec(vec![batch, 16], ids)),
        ),
        (
            "attention_mask",
            Value::Tensor(Tensor::from_vec(vec![batch, 16], mask)),
        ),
        (
            "token_type_ids",
            Value::Tensor(Tensor::from_vec(vec![batch, 16], vec![0i64; batch * 16])),
        ),
    ]
}

#[test]
fn an_exported_encoder_fuses_its_attention_and_residual_norms() {
    let model = fixture();
    let mut g = model.graph.clone();
    let dev = device();
    let report = optimize_for_device(
        &mut g,
        OptimizationLevel::All,
        onnx_runtime_ep_cpu::registry(),
        Some(dev.as_ref()),
    );
    let ops = op_list(&g);
    assert_eq!(
        count(&ops, "com.microsoft:MultiHeadAttention"),
        2,
        "{ops:?}\n{report:?}"
    );
    assert_eq!(
        count(&ops, "com.microsoft:SkipLayerNormalization"),
        4,
        "{ops:?}"
    );
    for gone in ["Transpose", "Softmax", "IsNaN", "MatMul"] {
        assert_eq!(count(&ops, gone), 0, "{gone} left: {ops:?}");
    }
    assert_eq!(
        count(&ops, "ai.onnx_runtime_rs.internal:MatMulBias"),
        12,
        "{ops:?}"
    );
    let mha = g
        .nodes
        .iter()
        .find(|n| n.op_type == "MultiHeadAttention")
        .unwrap();
    assert_eq!(mha.attribute("num_heads").and_then(|a| a.as_int()), Some(4));
    assert_eq!(
        mha.attribute("scale").and_then(|a| a.as_float()),
        Some(0.25)
    );
    // A CPU session keeps the graph's own attention.
    let mut plain = model.graph.clone();
    optimize_for_device(
        &mut plain,
        OptimizationLevel::All,
        onnx_runtime_ep_cpu::registry(),
        None,
    );
    assert_eq!(count(&op_list(&plain), "Softmax"), 2);
}

#[test]
fn the_fused_encoder_matches_the_unfused_one_with_padding() {
    for batch in [1, 2] {
        let f = feeds(batch);
        let graph = fixture().graph;
        let (want, got) = unfused_and_on_device(&graph, &f, device());
        let (ws, w) = out_f32(&want, 0);
        let (gs, g) = out_f32(&got, 0);
        assert_eq!(ws, [batch, 16, 64]);
        assert_eq!(ws, gs);
        let err = max_abs_diff(&w, &g);
        assert!(err < 1e-4, "batch {batch}: max |fused - unfused| {err}");
        // In half precision the fusions happen before the conversion.
        let half = run_graph(
            &graph,
            &f,
            SessionOptions {
                device: Some(device()),
                precision: Precision::Float16,
                ..Default::default()
            },
        );
        let (_, h) = out_f32(&half, 0);
        let err = max_abs_diff(&w, &h);
        assert!(err < 5e-2, "batch {batch}: max |fp16 fused - fp32| {err}");
    }
}
