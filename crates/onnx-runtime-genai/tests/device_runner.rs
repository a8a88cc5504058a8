//! [`DeviceStepRunner`] on a stand-in device (host memory, the CPU provider's kernels, graphs
//! recorded and replayed, every copy counted; `host_device`), with the tiny decoders of
//! `scripts/tiny-llm.py`: the same logits as the host runner and onnxruntime, no KV cache
//! byte to or from the host in a decode step, and, with the shared buffer, one graph
//! replayed for every decode step after the second.
//!
//! Needs python3 with onnx, numpy and onnxruntime, as `tiny_models.rs`.

use common::{folder, reference, worst};
use host_device::{Count, Counters, HostDevice};
use onnx_runtime_genai::{DeviceStepRunner, GenerateOptions, Generation, Model, StepRunner};
use onnx_runtime_session::SessionOptions;
use std::sync::Arc;

mod common;
mod host_device;

fn on_device(kind: &str) -> (Model, HostDevice, Arc<Counters>) {
    let (dev, counters) = HostDevice::new();
    let options = SessionOptions {
        device: Some(Arc::new(dev.clone())),
        ..Default::default()
    };
    (Model::load(folder(kind), options).unwrap(), dev, counters)
}

fn greedy(model: &Model, runner: &mut dyn StepRunner, prompt: &[u32], n: usize) -> Generation {
    let options = GenerateOptions {
        max_new_tokens: n,
        keep_logits: true,
        stop_tokens: Some(vec![]),
        ..Default::default()
    };
    model
        .generate_with(runner, prompt, &options, &mut |_| {})
        .unwrap()
}

/// The device runner's 33 greedy tokens and every logit (the prompt's positions and 32
/// decode steps) equal the host runner's on a CPU session bit for bit (the same kernels), and
/// onnxruntime's within the tolerance of `tiny_models.rs`.
fn same_as_host_and_onnxruntime(kind: &str) {
    let r = reference(kind);
    let (model, _dev, counters) = on_device(kind);
    let mut runner = model.runner().unwrap();
    let ours = greedy(&model, runner.as_mut(), &r.prompt, r.tokens.len());
    assert!(
        counters.now().uploads > 0,
        "{kind}: Model::runner on a device session feeds the device"
    );
    let cpu = Model::load(folder(kind), Default::default()).unwrap();
    let mut host = cpu.host_runner().unwrap();
    let want = greedy(&cpu, &mut host, &r.prompt, r.tokens.len());
    assert_eq!(ours.tokens, want.tokens, "{kind}: tokens");
    assert_eq!(ours.tokens, r.tokens, "{kind}: onnxruntime's tokens");
    assert_eq!(
        ours.prompt_logits, want.prompt_logits,
        "{kind}: prompt logits"
    );
    assert_eq!(ours.step_logits.len(), 32);
    for (i, (a, b)) in ours.step_logits.iter().zip(&want.step_logits).enumerate() {
        assert_eq!(
            a, b,
            "{kind}: decode step {i}: logits differ from the host runner's"
        );
    }
    for (i, (a, b)) in ours.step_logits.iter().zip(&r.step_logits).enumerate() {
        let w = worst(a, b, 1e-5);
        assert!(w <= 1e-4, "{kind}: decode step {i}: {w} from onnxruntime");
    }
}

#[test]
fn genai_device_runner_matches_the_host_runner_and_onnxruntime() {
    same_as_host_and_onnxruntime("genai");
}

#[test]
fn optimum_device_runner_matches_the_host_runner_and_onnxruntime() {
    same_as_host_and_onnxruntime("optimum");
}

/// Per decode step: what crossed, and whether a graph replayed.
fn decode_steps(runner: &mut DeviceStepRunner, counters: &Counters, tokens: &[u32]) -> Vec<Count> {
    tokens
        .iter()
        .map(|&t| {
            let before = counters.now();
            runner.step(&[t]).unwrap();
            counters.now() - before
        })
        .collect()
}

#[test]
fn shared_buffer_decode_steps_move_no_cache_bytes_and_replay_one_graph() {
    let r = reference("genai");
    let (model, dev, counters) = on_device("genai");
    let mut runner = model.device_runner().unwrap();
    let (vocab, max_len) = (512usize, 128usize);
    // Key or value of one layer: [1, 2 kv heads, 128 rows, 16] f32.
    let kv_bytes = 2 * max_len * 16 * 4;
    let layers = 2;
    runner.step(&r.prompt).unwrap();
    let steps = decode_steps(&mut runner, &counters, &r.tokens[..32]);
    for (i, c) in steps.iter().enumerate() {
        // The logits [1, 1, vocab] f32, and nothing else.
        assert_eq!(
            (c.downloads, c.download_bytes),
            (1, vocab * 4),
            "decode step {i}: {c:?}"
        );
        // input_ids, the mask padded to max_length and position_ids: no cache rows (the
        // capture at step 1 also copies the host values the graph reads in advance).
        assert!(c.upload_bytes < kv_bytes, "decode step {i}: {c:?}");
        if i != 1 {
            assert!(
                c.upload_bytes <= 8 + max_len * 8 + 8,
                "decode step {i}: {c:?}"
            );
        }
        if i >= 2 {
            assert_eq!(
                (c.replays, c.launches),
                (1, 0),
                "decode step {i} replays the graph: {c:?}"
            );
            // What the session's graph still copies on the device: each past into the
            // graph's input buffer and each present out of its output buffer.
            assert!(
                c.device_copy_bytes <= 2 * 2 * layers * kv_bytes + 4096,
                "decode step {i}: {c:?}"
            );
        }
    }
    let report = model.session.capture_report();
    assert!(report.blockers.is_empty(), "{:?}", report.blockers);
    let decode: Vec<_> = report
        .signatures
        .iter()
        .filter(|s| {
            s.inputs
                .iter()
                .any(|i| i.contains(&format!("[1, {max_len}]")))
        })
        .collect();
    assert_eq!(decode.len(), 1, "one decode signature: {report:?}");
    assert_eq!(decode[0].state, "captured");
    assert_eq!(
        decode[0].replays, 31,
        "captured at decode step 2, replayed from there"
    );
    assert_eq!(runner.cached(), r.prompt.len() + 32);
    drop(runner);
    assert!(dev.live_blocks() > 0, "the graphs keep their memory");
}

/// The padded mask and the replayed graph choose onnxruntime's tokens; a second generation
/// on the same runner (its shared buffer reused, not cleared) gives the same ones.
#[test]
fn replayed_decode_steps_choose_onnxruntimes_tokens_twice() {
    let r = reference("genai");
    let (model, _dev, _counters) = on_device("genai");
    let mut runner = model.device_runner().unwrap();
    for round in 0..2 {
        let out = greedy(&model, &mut runner, &r.prompt, r.tokens.len());
        assert_eq!(out.tokens, r.tokens, "round {round}");
        for (i, (a, b)) in out.step_logits.iter().zip(&r.step_logits).enumerate() {
            let w = worst(a, b, 1e-5);
            assert!(w <= 1e-4, "round {round}, decode step {i}: {w}");
        }
    }
}

/// Greedy generation without kept logits chooses on the device (ArgMax over the logits
/// there): onnxruntime's tokens, and each later step brings back only the chosen id, 8 bytes
/// where the host choice downloads the vocabulary's logits.
#[test]
fn greedy_steps_choose_on_the_device_and_bring_back_only_the_id() {
    for kind in ["genai", "optimum"] {
        let r = reference(kind);
        let (model, _dev, counters) = on_device(kind);
        let mut runner = model.device_runner().unwrap();
        let options = GenerateOptions {
            max_new_tokens: r.tokens.len(),
            stop_tokens: Some(vec![]),
            ..Default::default()
        };
        let out = model
            .generate_with(&mut runner, &r.prompt, &options, &mut |_| {})
            .unwrap();
        assert_eq!(out.tokens, r.tokens, "{kind}: onnxruntime's tokens");
        let mut with_logits = model.device_runner().unwrap();
        let want = with_logits.step(&r.prompt).unwrap();
        let mut last = *out.tokens.last().unwrap();
        let mut fresh = model.device_runner().unwrap();
        assert_eq!(
            fresh.step_argmax(&r.prompt).unwrap(),
            onnx_runtime_genai::sampling::argmax(want.last()),
            "{kind}: the prompt step's choice"
        );
        for i in 0..3 {
            let before = counters.now();
            let id = runner.step_argmax(&[last]).unwrap();
            let c = counters.now() - before;
            assert_eq!(
                (c.downloads, c.download_bytes),
                (1, 8),
                "{kind}: step {i} after the generation: {c:?}"
            );
            last = id;
        }
    }
}

#[test]
fn a_growing_cache_stays_on_the_device() {
    let r = reference("optimum");
    let (model, _dev, counters) = on_device("optimum");
    let mut runner = model.device_runner().unwrap();
    runner.step(&r.prompt).unwrap();
    let steps = decode_steps(&mut runner, &counters, &r.tokens[..8]);
    for (i, c) in steps.iter().enumerate() {
        assert_eq!(
            (c.downloads, c.download_bytes),
            (1, 512 * 4),
            "decode step {i}: only the logits come back: {c:?}"
        );
        // ids, mask and positions only (the past grows by one row per step, on the device).
        let total = r.prompt.len() + i + 1;
        assert!(c.upload_bytes <= 8 + 8 * total + 8 + 64, "step {i}: {c:?}");
        assert_eq!(
            c.replays, 0,
            "a growing cache changes the signature every step"
        );
    }
    let cache = runner.cache();
    assert_eq!(cache.len(), 4);
    assert_eq!(cache[0].shape(), &[1, 2, r.prompt.len() + 8, 16]);
    runner.reset();
    assert_eq!(runner.cached(), 0);
    assert!(runner.cache().is_empty());
}

#[test]
fn the_device_runner_needs_a_device() {
    let cpu = Model::load(folder("genai"), Default::default()).unwrap();
    let e = cpu.device_runner().err().expect("no device").to_string();
    assert!(e.contains("needs a session with a device"), "{e}");
}

#[test]
fn max_length_caps_the_shared_buffer() {
    let r = reference("genai");
    let (dev, _counters) = HostDevice::new();
    let options = SessionOptions {
        device: Some(Arc::new(dev)),
        ..Default::default()
    };
    let mut model = Model::load(folder("genai"), options).unwrap();
    assert!(model.set_max_length(1).is_err());
    assert!(model
        .set_max_length(129)
        .unwrap_err()
        .to_string()
        .contains("128"));
    model.set_max_length(r.prompt.len() + 8).unwrap();
    let mut runner = model.device_runner().unwrap();
    assert_eq!(runner.capacity(), Some(r.prompt.len() + 8));
    let out = greedy(&model, &mut runner, &r.prompt, 32);
    assert_eq!(out.tokens, r.tokens[..8]);
    assert_eq!(runner.cache()[0].shape()[2], r.prompt.len() + 8);
}
