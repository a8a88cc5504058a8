//! Device graphs and host-side shape arithmetic, tested with a stand-in provider that records
//! kernel launches during a capture and replays them: which run captures, that replays give
//! the eager run's bytes, that shapes never cost a device-to-host copy, and that whatever
//! cannot be recorded leaves the signature eager with its reason.

use super::recorder::*;
use super::*;
use crate::{CudaGraph, Session};
use std::sync::atomic::Ordering;

/// x [n,3] → Relu → Mul(r, r) → m; Shape(m) → Gather([1,0]) → Reshape(m, ·) → y [3,n];
/// outputs y and the shape `s2` (a host value).
fn shapes_graph(op: &str) -> G {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[-1, 3]);
    b.init("order", &Tensor::from_slice(vec![2], &[1i64, 0]));
    b.node(op, &["x"], &["r"]);
    b.node("Mul", &["r", "r"], &["m"]);
    b.node("Shape", &["m"], &["s"]);
    b.node("Gather", &["s", "order"], &["s2"]);
    b.node("Reshape", &["m", "s2"], &["y"]);
    b.output("y");
    b.output("s2");
    b
}

/// The exporter's `reshape`/`expand` with a -1 resolved in the graph: Shape(r) → s;
/// ConstantOfShape(Shape(s)) → ones; Where(Equal(s, -ones), ones, s) → Reshape(r, ·) → y.
fn constant_of_shape_graph() -> G {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[-1, 3]);
    b.init("minus", &Tensor::from_slice(vec![], &[-1i64]));
    b.node("Relu", &["x"], &["r"]);
    b.node("Shape", &["r"], &["s"]);
    b.node("Shape", &["s"], &["sl"]);
    let one = onnx_runtime_ir::TensorData::from_bytes(
        DataType::Int64,
        vec![1],
        1i64.to_le_bytes().to_vec(),
    );
    b.node_attrs(
        "ConstantOfShape",
        &["sl"],
        &["ones"],
        vec![("value", Attribute::Tensor(one))],
    );
    b.node("Mul", &["ones", "minus"], &["neg"]);
    b.node("Equal", &["s", "neg"], &["eq"]);
    b.node("Where", &["eq", "ones", "s"], &["fixed"]);
    b.node("Reshape", &["r", "fixed"], &["y"]);
    b.output("y");
    b
}

#[test]
fn a_shape_built_with_constant_of_shape_stays_on_the_host() {
    let (dev, counters) = Recorder::new();
    let b = constant_of_shape_graph();
    let s = session(&b, &dev, CudaGraph::Auto);
    assert_eq!(
        s.device_nodes(),
        2,
        "Relu and Reshape; the shape is made on the host"
    );
    assert!(s.host_nodes().is_empty());
    assert!(
        s.capture_report().blockers.is_empty(),
        "{:?}",
        s.capture_report().blockers
    );
    let cpu = Session::from_graph(&b.g, Default::default()).unwrap();
    for seed in 0..3 {
        let want = cpu
            .run(&[("x", f32t(&[4, 3], &rand_f32(12, seed)))])
            .unwrap();
        same(&run(&s, 4, seed), &want);
    }
    assert_eq!(counters.device_reads.load(Ordering::Relaxed), 0);
    assert!(
        counters.replays.load(Ordering::Relaxed) >= 1,
        "the third run replays"
    );
}

#[test]
fn shapes_never_cost_a_device_read() {
    let (dev, counters) = Recorder::new();
    let s = session(&shapes_graph("Relu"), &dev, CudaGraph::Off);
    assert_eq!(
        s.device_nodes(),
        3,
        "Relu, Mul and Reshape; Shape and Gather stay on the host"
    );
    assert!(
        s.host_nodes().is_empty(),
        "shape arithmetic is not a host placement"
    );
    let outs = run(&s, 2, 1);
    let want = Session::from_graph(&shapes_graph("Relu").g, Default::default())
        .unwrap()
        .run(&[("x", f32t(&[2, 3], &rand_f32(6, 1)))])
        .unwrap();
    same(&outs, &want);
    assert_eq!(counters.device_reads.load(Ordering::Relaxed), 0);
    assert_eq!(counters.uploads.load(Ordering::Relaxed), 1, "x");
    assert_eq!(
        counters.downloads.load(Ordering::Relaxed),
        1,
        "y (s2 is a host value)"
    );
}

#[test]
fn the_second_run_captures_and_later_runs_replay() {
    let (dev, counters) = Recorder::new();
    let b = shapes_graph("Relu");
    let s = session(&b, &dev, CudaGraph::Auto);
    let cpu = Session::from_graph(&b.g, Default::default()).unwrap();
    let cpu_run = |seed| {
        cpu.run(&[("x", f32t(&[4, 3], &rand_f32(12, seed)))])
            .unwrap()
    };
    assert!(s.capture_report().blockers.is_empty());

    same(&run(&s, 4, 1), &cpu_run(1));
    assert_eq!(
        counters.launches.load(Ordering::Relaxed),
        3,
        "eager warm-up"
    );
    assert_eq!(s.capture_report().signatures[0].state, "warm");

    same(&run(&s, 4, 2), &cpu_run(2));
    assert_eq!(counters.recorded.load(Ordering::Relaxed), 3, "the capture");
    assert_eq!(
        counters.launches.load(Ordering::Relaxed),
        3,
        "nothing ran eagerly"
    );
    assert_eq!(
        counters.replays.load(Ordering::Relaxed),
        1,
        "replayed for its outputs"
    );

    let (up, down) = (
        counters.uploads.load(Ordering::Relaxed),
        counters.downloads.load(Ordering::Relaxed),
    );
    for seed in 3..6 {
        same(&run(&s, 4, seed), &cpu_run(seed));
    }
    assert_eq!(counters.launches.load(Ordering::Relaxed), 3);
    assert_eq!(counters.replays.load(Ordering::Relaxed), 4);
    assert_eq!(
        counters.uploads.load(Ordering::Relaxed) - up,
        3,
        "one feed copy per run"
    );
    assert_eq!(
        counters.downloads.load(Ordering::Relaxed) - down,
        3,
        "one output copy per run"
    );
    assert_eq!(counters.device_reads.load(Ordering::Relaxed), 0);
    let report = s.capture_report();
    assert_eq!(report.signatures.len(), 1);
    assert_eq!(report.signatures[0].state, "captured");
    assert_eq!(report.signatures[0].replays, 4);
    assert_eq!(report.signatures[0].inputs, vec!["float[4, 3]".to_string()]);

    drop(s);
    assert_eq!(
        dev.live(),
        0,
        "the graph's memory is returned with the session"
    );
}

#[test]
fn each_signature_gets_its_own_graph() {
    let (dev, counters) = Recorder::new();
    let b = shapes_graph("Relu");
    let s = session(&b, &dev, CudaGraph::Auto);
    let cpu = Session::from_graph(&b.g, Default::default()).unwrap();
    for round in 0..3u64 {
        for n in [1usize, 5] {
            let x = rand_f32(n * 3, round * 10 + n as u64);
            let got = s.run(&[("x", f32t(&[n, 3], &x))]).unwrap();
            let want = cpu.run(&[("x", f32t(&[n, 3], &x))]).unwrap();
            same(&got, &want);
        }
    }
    let report = s.capture_report();
    assert_eq!(report.signatures.len(), 2);
    assert!(report.signatures.iter().all(|sig| sig.state == "captured"));
    assert_eq!(counters.replays.load(Ordering::Relaxed), 4);
}

#[test]
fn a_kernel_that_cannot_be_captured_keeps_the_signature_eager() {
    for op in ["Sign", "Neg"] {
        let (dev, counters) = Recorder::new();
        let b = shapes_graph(op);
        let s = session(&b, &dev, CudaGraph::Auto);
        let cpu = Session::from_graph(&b.g, Default::default()).unwrap();
        for seed in 0..4 {
            let x = rand_f32(6, seed);
            let got = s.run(&[("x", f32t(&[2, 3], &x))]).unwrap();
            let want = cpu.run(&[("x", f32t(&[2, 3], &x))]).unwrap();
            // The fake Sign computes Relu: compare the shapes only for it.
            if op == "Neg" {
                same(&got, &want);
            }
        }
        assert_eq!(
            counters.launches.load(Ordering::Relaxed),
            12,
            "{op}: all eager"
        );
        assert_eq!(counters.replays.load(Ordering::Relaxed), 0);
        let report = s.capture_report();
        let state = &report.signatures[0].state;
        assert!(state.starts_with("eager: "), "{op}: {state}");
        assert!(
            state.contains(op),
            "{op}: the reason names the node: {state}"
        );
        drop(s);
        assert_eq!(
            dev.live(),
            0,
            "{op}: an abandoned capture returns its memory"
        );
    }
}

#[test]
fn nodes_on_the_cpu_block_capture_and_are_named() {
    let (dev, counters) = Recorder::new();
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, 3]);
    b.node("Relu", &["x"], &["r"]);
    b.node("Softmax", &["r"], &["y"]);
    b.output("y");
    let s = session(&b, &dev, CudaGraph::Auto);
    let report = s.capture_report();
    assert_eq!(report.blockers.len(), 1, "{:?}", report.blockers);
    assert!(
        report.blockers[0].contains("Softmax"),
        "{:?}",
        report.blockers
    );
    for seed in 0..3 {
        run(&s, 2, seed);
    }
    assert_eq!(counters.launches.load(Ordering::Relaxed), 3);
    assert!(s.capture_report().signatures.is_empty());
}
