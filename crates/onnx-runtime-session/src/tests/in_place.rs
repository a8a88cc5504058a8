//! Outputs written into a device feed's memory (`OutputOn::Into`, a decoder's KV cache updated
//! in place), on the recording stand-in device: a producer that can write in place moves no
//! byte, eager and replayed; one that cannot is copied in; a later reader of the feed keeps
//! its old bytes; misuse is a clear error.

use super::recorder::*;
use super::*;
use crate::{CudaGraph, DeviceValue, Input, Output, OutputOn};
use std::sync::atomic::Ordering;

fn t(v: &[f32]) -> Tensor {
    match f32t(&[4, 3], v) {
        Value::Tensor(t) => t,
        _ => unreachable!(),
    }
}

fn floats(v: &DeviceValue) -> Vec<f32> {
    v.to_host().unwrap().data::<f32>().to_vec()
}

/// cache [4, 3], x [4, 3] -> `op`(cache, x) = next; with `reader`, also Mul(next, cache) = m,
/// which reads the cache after its producer.
fn graph(op: &str, reader: bool) -> G {
    let mut b = G::new(13);
    b.input("cache", DataType::Float32, &[4, 3]);
    b.input("x", DataType::Float32, &[4, 3]);
    b.node(op, &["cache", "x"], &["next"]);
    b.output("next");
    if reader {
        b.node("Mul", &["next", "cache"], &["m"]);
        b.output("m");
    }
    b
}

/// One step: x uploaded, then the graph's op (cache, x) written into the cache (and m on the
/// device when `m`).
fn step(s: &Session, cache: &DeviceValue, xv: &[f32], m: bool) -> Vec<(String, Output)> {
    let x = s.to_device(&t(xv)).unwrap();
    let mut outputs = vec![("next", OutputOn::Into("cache"))];
    if m {
        outputs.push(("m", OutputOn::Device));
    }
    s.run_bound(
        &[("cache", Input::Device(cache)), ("x", Input::Device(&x))],
        &outputs,
    )
    .unwrap()
}

fn device_copies(c: &Counters) -> usize {
    c.device_copies.load(Ordering::Relaxed)
}

#[test]
fn an_output_written_in_place_moves_no_cache_bytes_eager_and_replayed() {
    for mode in [CudaGraph::Off, CudaGraph::Auto] {
        let (dev, counters) = Recorder::new();
        let s = session(&graph("Add", false), &dev, mode);
        let cache = s.to_device(&t(&[0.0; 12])).unwrap();
        let mut want = vec![0f32; 12];
        for step in 0..6u64 {
            let xv = rand_f32(12, step);
            let x = s.to_device(&t(&xv)).unwrap();
            let before = device_copies(&counters);
            let (up, down) = (
                counters.uploads.load(Ordering::Relaxed),
                counters.downloads.load(Ordering::Relaxed),
            );
            let out = s
                .run_bound(
                    &[("cache", Input::Device(&cache)), ("x", Input::Device(&x))],
                    &[("next", OutputOn::Into("cache"))],
                )
                .unwrap();
            let copies = device_copies(&counters) - before;
            assert_eq!(
                counters.uploads.load(Ordering::Relaxed),
                up,
                "{mode:?} {step}"
            );
            assert_eq!(
                counters.downloads.load(Ordering::Relaxed),
                down,
                "{mode:?} {step}"
            );
            let next = out[0].1.as_device().expect("on the device");
            assert_eq!(
                next.data_ptr(),
                cache.data_ptr(),
                "the output is the feed's memory"
            );
            // Eager: nothing is copied. A replay copies x into the graph's buffer only: the
            // cache is the graph's own buffer and the output is written there.
            let want_copies = if mode == CudaGraph::Auto && step >= 2 {
                1
            } else {
                0
            };
            if mode == CudaGraph::Off || step != 1 {
                assert_eq!(copies, want_copies, "{mode:?} step {step}: device copies");
            }
            for (w, x) in want.iter_mut().zip(&xv) {
                *w += x;
            }
            assert_eq!(floats(&cache), want, "{mode:?} step {step}");
        }
        if mode == CudaGraph::Auto {
            assert!(counters.replays.load(Ordering::Relaxed) >= 4);
            let report = s.capture_report();
            let sig = report.signatures.last().unwrap();
            assert_eq!(sig.state, "captured");
            assert!(
                sig.inputs[0].ends_with("(written in place)"),
                "{:?}",
                sig.inputs
            );
            assert_eq!(
                sig.inputs_summary(),
                "float[4, 3] (written in place) float[4, 3]"
            );
        }
    }
}

#[test]
fn a_new_buffer_gets_its_own_graph_and_the_old_one_stays_valid() {
    let (dev, _) = Recorder::new();
    let s = session(&graph("Add", false), &dev, CudaGraph::Auto);
    for (k, start) in [0f32, 100.0].into_iter().enumerate() {
        let cache = s.to_device(&t(&[start; 12])).unwrap();
        for n in 0..4 {
            step(&s, &cache, &[1.0; 12], false);
            let want = vec![start + n as f32 + 1.0; 12];
            assert_eq!(floats(&cache), want, "buffer {k}");
        }
    }
    let captured = s
        .capture_report()
        .signatures
        .iter()
        .filter(|s| s.state == "captured")
        .count();
    assert_eq!(captured, 2, "one graph per buffer address");
}

#[test]
fn a_producer_that_cannot_write_in_place_is_copied_in() {
    for mode in [CudaGraph::Off, CudaGraph::Auto] {
        let (dev, _) = Recorder::new();
        let s = session(&graph("Mul", false), &dev, mode);
        let cache = s.to_device(&t(&[1.0; 12])).unwrap();
        let mut want = vec![1f32; 12];
        for n in 0..4u64 {
            let xv = rand_f32(12, n + 7);
            let out = step(&s, &cache, &xv, false);
            assert_eq!(out[0].1.as_device().unwrap().data_ptr(), cache.data_ptr());
            for (w, x) in want.iter_mut().zip(&xv) {
                *w *= x;
            }
            assert_eq!(floats(&cache), want, "{mode:?} step {n}");
        }
    }
}

#[test]
fn a_later_reader_of_the_feed_sees_its_old_bytes() {
    for mode in [CudaGraph::Off, CudaGraph::Auto] {
        let (dev, _) = Recorder::new();
        let s = session(&graph("Add", true), &dev, mode);
        let cache = s.to_device(&t(&[2.0; 12])).unwrap();
        let mut old = vec![2f32; 12];
        for n in 0..4u64 {
            let xv = rand_f32(12, n + 3);
            let out = step(&s, &cache, &xv, true);
            let next: Vec<f32> = old.iter().zip(&xv).map(|(c, x)| c + x).collect();
            let m: Vec<f32> = next.iter().zip(&old).map(|(n, c)| n * c).collect();
            assert_eq!(
                floats(out[1].1.as_device().unwrap()),
                m,
                "{mode:?} step {n}"
            );
            assert_eq!(floats(&cache), next, "{mode:?} step {n}");
            old = next;
        }
    }
}

#[test]
fn writing_into_an_input_misused_is_a_clear_error() {
    let (dev, _) = Recorder::new();
    let s = session(&graph("Add", false), &dev, CudaGraph::Off);
    let cache = s.to_device(&t(&[0.0; 12])).unwrap();
    let x = Value::Tensor(t(&[1.0; 12]));
    let host_cache = Value::Tensor(t(&[0.0; 12]));
    let err = |inputs: &[(&str, Input<'_>)], outputs: &[(&str, OutputOn)]| {
        s.run_bound(inputs, outputs).unwrap_err().to_string()
    };
    let e = err(
        &[("cache", Input::Host(&host_cache)), ("x", Input::Host(&x))],
        &[("next", OutputOn::Into("cache"))],
    );
    assert!(e.contains("not bound to a device value"), "{e}");
    let e = err(
        &[("cache", Input::Device(&cache)), ("x", Input::Host(&x))],
        &[("next", OutputOn::Into("cash"))],
    );
    assert!(e.contains("cash"), "{e}");

    // An output of another shape than the input it is written into.
    let mut b = G::new(13);
    b.input("cache", DataType::Float32, &[2, 6]);
    b.input("x", DataType::Float32, &[4, 3]);
    b.node("Relu", &["x"], &["r"]);
    b.output("r");
    b.node("Reshape", &["cache", "shape"], &["c2"]);
    b.init("shape", &Tensor::from_slice(vec![2], &[4i64, 3]));
    b.output("c2");
    let s2 = session(&b, &dev, CudaGraph::Off);
    let wide = s2
        .to_device(&match f32t(&[2, 6], &[0.0; 12]) {
            Value::Tensor(t) => t,
            _ => unreachable!(),
        })
        .unwrap();
    let e = s2
        .run_bound(
            &[("cache", Input::Device(&wide)), ("x", Input::Host(&x))],
            &[("r", OutputOn::Into("cache"))],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("cannot go into the memory"), "{e}");
    let e = s2
        .run_bound(
            &[("cache", Input::Device(&wide)), ("x", Input::Host(&x))],
            &[
                ("r", OutputOn::Into("cache")),
                ("c2", OutputOn::Into("cache")),
            ],
        )
        .unwrap_err()
        .to_string();
    assert!(e.contains("two outputs"), "{e}");
}

#[test]
fn a_signatures_inputs_fold_runs_of_equal_entries() {
    let sig = crate::capture::SignatureReport {
        inputs: ["int64[1, 1]", "c", "c", "c", "-", "c"]
            .map(String::from)
            .to_vec(),
        state: "warm".into(),
        replays: 0,
        graph_bytes: 0,
    };
    assert_eq!(sig.inputs_summary(), "int64[1, 1] 3 x c - c");
}
