//! Residual Add -> LayerNormalization becomes com.microsoft SkipLayerNormalization for a
//! session on a CUDA device that runs it. The stand-in device claims the op and refuses to
//! build it, so the CPU provider's SkipLayerNormalization runs the fused node and is checked
//! against the unfused graph.

use super::elementwise_chain::{op_list, optimized, ChainDevice};
use super::*;
use onnx_runtime_ep_api::{DeviceKind, ExecutionProvider};
use onnx_runtime_ir::ValueType;
use std::sync::Arc;
use OptimizationLevel::All;

const SKIP: &str = "com.microsoft:SkipLayerNormalization";
const H: usize = 8;

fn device() -> Arc<dyn ExecutionProvider> {
    Arc::new(ChainDevice(DeviceKind::Cuda, &["SkipLayerNormalization"]))
}

fn ops(b: &G, device: Option<&dyn ExecutionProvider>) -> Vec<String> {
    op_list(&optimized(b, All, device))
}

/// A float32 input of `dims` (a negative entry: the symbolic dimension `sym`).
fn input(b: &mut G, name: &str, dims: &[i64], sym: &str) {
    let shape = Shape(
        dims.iter()
            .map(|&d| {
                if d < 0 {
                    Dim::Symbolic(sym.into())
                } else {
                    Dim::Static(d as usize)
                }
            })
            .collect(),
    );
    b.input_typed(name, ValueType::tensor(DataType::Float32, shape));
}

/// y = LayerNormalization(x + r, gamma, beta) over the last axis; with `sum_out`, x + r is
/// also a graph output (a pre-norm block's residual stream).
fn block(x: &[i64], r: &[i64], r_sym: &str, sum_out: bool, axis: i64) -> G {
    let mut b = G::new(17);
    input(&mut b, "x", x, "batch");
    input(&mut b, "r", r, r_sym);
    b.init("gamma", &Tensor::from_slice(vec![H], &rand_f32(H, 3)));
    b.init("beta", &Tensor::from_slice(vec![H], &rand_f32(H, 4)));
    b.node("Add", &["x", "r"], &["s"]);
    b.node_attrs(
        "LayerNormalization",
        &["s", "gamma", "beta"],
        &["y"],
        vec![
            ("axis", Attribute::Int(axis)),
            ("epsilon", Attribute::Float(1e-3)),
        ],
    );
    b.output("y");
    if sum_out {
        b.node("Neg", &["s"], &["ns"]);
        b.output("ns");
    }
    b
}

fn check_against_unfused(b: &G, x: &[usize], r: &[usize]) {
    let n = |s: &[usize]| s.iter().product::<usize>();
    let feeds = [
        ("x", f32t(x, &rand_f32(n(x), 11))),
        ("r", f32t(r, &rand_f32(n(r), 12))),
    ];
    let (want, got) = unfused_and_on_device(&b.g, &feeds, device());
    assert_eq!(want.len(), got.len());
    for i in 0..want.len() {
        let (ws, w) = out_f32(&want, i);
        let (gs, g) = out_f32(&got, i);
        assert_eq!(ws, gs);
        assert!(w.iter().any(|v| v.abs() > 0.1), "an output worth checking");
        assert_close(&g, &w.iter().map(|&v| v as f64).collect::<Vec<_>>());
    }
}

#[test]
fn residual_add_and_layer_norm_fuse_for_a_cuda_device_and_match() {
    let b = block(&[2, 3, H as i64], &[2, 3, H as i64], "batch", false, -1);
    let dev = device();
    assert_eq!(ops(&b, Some(dev.as_ref())), [SKIP]);
    // A CPU session keeps the two kernels.
    assert_eq!(ops(&b, None), ["Add", "LayerNormalization"]);
    let g = optimized(&b, All, Some(dev.as_ref()));
    let node = &g.nodes[0];
    assert_eq!(
        node.attribute("epsilon").and_then(|a| a.as_float()),
        Some(1e-3)
    );
    check_against_unfused(&b, &[2, 3, H], &[2, 3, H]);
    // axis given as rank - 1.
    let b = block(&[2, 3, H as i64], &[2, 3, H as i64], "batch", false, 2);
    assert_eq!(ops(&b, Some(dev.as_ref())), [SKIP]);
}

#[test]
fn a_sum_read_elsewhere_becomes_the_fourth_output() {
    let b = block(&[2, 3, H as i64], &[2, 3, H as i64], "batch", true, -1);
    let dev = device();
    let g = optimized(&b, All, Some(dev.as_ref()));
    assert_eq!(op_list(&g), [SKIP, "Neg"]);
    let skip = g
        .nodes
        .iter()
        .find(|n| n.op_type == "SkipLayerNormalization")
        .unwrap();
    assert_eq!(skip.outputs.len(), 4);
    assert_eq!(g.value(skip.outputs[3]).name, "s");
    assert!(g.value(skip.outputs[1]).name.is_empty());
    check_against_unfused(&b, &[2, 3, H], &[2, 3, H]);
}

#[test]
fn symbolic_dimensions_must_be_the_same_symbol() {
    let dev = device();
    let same = block(&[-1, 3, H as i64], &[-1, 3, H as i64], "batch", false, -1);
    assert_eq!(ops(&same, Some(dev.as_ref())), [SKIP]);
    check_against_unfused(&same, &[2, 3, H], &[2, 3, H]);
    let other = block(&[-1, 3, H as i64], &[-1, 3, H as i64], "other", false, -1);
    assert_eq!(
        ops(&other, Some(dev.as_ref())),
        ["Add", "LayerNormalization"]
    );
}

#[test]
fn broadcasting_adds_and_other_axes_do_not_fuse() {
    let dev = device();
    for (x, r) in [
        (vec![2, 3, H as i64], vec![H as i64]),
        (vec![2, 3, H as i64], vec![1, 3, H as i64]),
        (vec![1, 3, H as i64], vec![2, 3, H as i64]),
    ] {
        let b = block(&x, &r, "batch", false, -1);
        assert_eq!(
            ops(&b, Some(dev.as_ref())),
            ["Add", "LayerNormalization"],
            "{x:?} + {r:?}"
        );
    }
    let b = block(&[2, 3, H as i64], &[2, 3, H as i64], "batch", false, 1);
    assert_eq!(ops(&b, Some(dev.as_ref())), ["Add", "LayerNormalization"]);
}
