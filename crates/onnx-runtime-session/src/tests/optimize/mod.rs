//! Graph optimizations: each rewrite on small graphs, run with the real CPU kernels with
//! optimization off and on (the unoptimized run is the reference), plus the node list the
//! optimizer leaves.

mod activation;
mod attention_fuse;
mod conv_fold;
mod cse;
mod elementwise_chain;
mod fused_conv_ref;
mod matmul_fuse;
mod matmul_glu;
mod nbits_glu;
mod noop;
mod norm_nbits;
mod skip_norm;
mod transformer;

use super::*;
use crate::{optimize, OptimizationLevel};

/// The op types left after optimizing `b` at `level` (`domain:Op` outside the default
/// domain), in order.
pub(crate) fn ops_after(b: &G, level: OptimizationLevel) -> Vec<String> {
    ops_after_with(b, level, onnx_runtime_ep_cpu::registry())
}

pub(crate) fn ops_after_with(
    b: &G,
    level: OptimizationLevel,
    registry: &onnx_runtime_ep_cpu::CpuRegistry,
) -> Vec<String> {
    let mut g = b.g.clone();
    optimize(&mut g, level, registry);
    g.nodes
        .iter()
        .map(|n| {
            if n.domain.is_empty() {
                n.op_type.clone()
            } else {
                format!("{}:{}", n.domain, n.op_type)
            }
        })
        .collect()
}

/// A run's named outputs.
pub(crate) type Outputs = Vec<(String, Value)>;

/// Runs `g` on `feeds` in a session built with `options`.
pub(crate) fn run_graph(g: &Graph, feeds: &[(&str, Value)], options: SessionOptions) -> Outputs {
    Session::from_graph(g, options).unwrap().run(feeds).unwrap()
}

/// Runs `g` on `feeds` unoptimized on the CPU (the reference) and optimized for `device`
/// (the fused nodes its stand-in refuses run on the CPU kernels): (reference, optimized).
pub(crate) fn unfused_and_on_device(
    g: &Graph,
    feeds: &[(&str, Value)],
    device: std::sync::Arc<dyn onnx_runtime_ep_api::ExecutionProvider>,
) -> (Outputs, Outputs) {
    let want = run_graph(
        g,
        feeds,
        SessionOptions {
            optimization: OptimizationLevel::None,
            ..Default::default()
        },
    );
    let got = run_graph(
        g,
        feeds,
        SessionOptions {
            device: Some(device),
            ..Default::default()
        },
    );
    (want, got)
}

/// Runs `b` unoptimized and at `level` on `feeds`; every output must agree within
/// `atol + rtol * |reference|`. Returns the optimized op list.
pub(crate) fn check_same(
    b: &G,
    level: OptimizationLevel,
    feeds: &[(&str, Value)],
    atol: f64,
    rtol: f64,
) -> Vec<String> {
    check_same_with(b, level, onnx_runtime_ep_cpu::registry(), feeds, atol, rtol)
}

/// [`check_same`] with the kernels of `registry` (both runs).
pub(crate) fn check_same_with(
    b: &G,
    level: OptimizationLevel,
    registry: &'static onnx_runtime_ep_cpu::CpuRegistry,
    feeds: &[(&str, Value)],
    atol: f64,
    rtol: f64,
) -> Vec<String> {
    let options = |optimization| SessionOptions {
        registry: Some(registry),
        optimization,
        ..Default::default()
    };
    let want = Session::from_graph(&b.g, options(OptimizationLevel::None))
        .unwrap()
        .run(feeds)
        .unwrap();
    let got = Session::from_graph(&b.g, options(level))
        .unwrap()
        .run(feeds)
        .unwrap();
    assert_eq!(want.len(), got.len());
    for ((wn, w), (gn, g)) in want.iter().zip(&got) {
        assert_eq!(wn, gn);
        let (w, g) = (w.as_tensor().unwrap(), g.as_tensor().unwrap());
        assert_eq!(w.shape(), g.shape(), "output {wn}: shape");
        assert_eq!(w.dtype(), g.dtype(), "output {wn}: dtype");
        let (w, g) = (w.to_f64_vec().unwrap(), g.to_f64_vec().unwrap());
        for (i, (a, b)) in w.iter().zip(&g).enumerate() {
            assert!(
                (a - b).abs() <= atol + rtol * a.abs(),
                "output {wn}[{i}]: optimized {b}, unoptimized {a}"
            );
        }
    }
    ops_after_with(b, level, registry)
}

pub(crate) fn f32_init(b: &mut G, name: &str, shape: &[usize], seed: u64) {
    let n = shape.iter().product();
    b.init(name, &Tensor::from_vec(shape.to_vec(), rand_f32(n, seed)));
}

pub(crate) fn rand_input(shape: &[usize], seed: u64) -> Value {
    f32t(shape, &rand_f32(shape.iter().product(), seed))
}

pub(crate) fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}
