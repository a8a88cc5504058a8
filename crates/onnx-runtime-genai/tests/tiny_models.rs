//! The whole generation path on the tiny decoders of `scripts/tiny-llm.py` (both formats),
//! against onnxruntime's greedy run of the same models (`--reference`).
//!
//! Needs python3 with onnx, numpy and onnxruntime (scripts/requirements-test.txt): without
//! them these tests fail, they are not skipped.

use common::{folder, reference, worst};
use onnx_runtime_genai::{inspect, GenError, GenerateOptions, Model, SamplingOptions, StopReason};
use serde_json::Value as Json;
use std::path::Path;

mod common;

fn load(dir: &Path) -> Model {
    Model::load(dir, Default::default()).unwrap()
}

/// Greedy generation matches onnxruntime: the prompt's logits (every position) and each of
/// 32 decode steps' within |d| <= atol + rtol * |ref|, and all 33 tokens exactly.
fn matches_onnxruntime(kind: &str, atol: f64, rtol: f64) {
    let r = reference(kind);
    assert_eq!(r.step_logits.len(), 32, "the reference has 32 decode steps");
    let model = load(&folder(kind));
    let out = model
        .generate(
            &r.prompt,
            &GenerateOptions {
                max_new_tokens: r.tokens.len(),
                keep_logits: true,
                ..Default::default()
            },
            &mut |_| {},
        )
        .unwrap();
    let prompt = out.prompt_logits.as_ref().unwrap();
    assert_eq!(prompt.rows, r.prompt_logits.len());
    for (i, want) in r.prompt_logits.iter().enumerate() {
        let w = worst(prompt.row(i), want, rtol);
        assert!(
            w <= atol,
            "{kind}: prompt position {i}: error {w} over {atol}"
        );
    }
    assert_eq!(out.step_logits.len(), r.step_logits.len());
    for (i, (ours, want)) in out.step_logits.iter().zip(&r.step_logits).enumerate() {
        let w = worst(ours, want, rtol);
        assert!(w <= atol, "{kind}: decode step {i}: error {w} over {atol}");
    }
    let max_abs = |a: &[f32], b: &[f64]| {
        a.iter()
            .zip(b)
            .map(|(&x, &y)| (x as f64 - y).abs())
            .fold(0.0, f64::max)
    };
    let worst_abs = (0..prompt.rows)
        .map(|i| max_abs(prompt.row(i), &r.prompt_logits[i]))
        .chain(
            out.step_logits
                .iter()
                .zip(&r.step_logits)
                .map(|(a, b)| max_abs(a, b)),
        )
        .fold(0.0, f64::max);
    eprintln!("{kind}: largest logit difference from onnxruntime {worst_abs:.3e}");
    assert_eq!(out.tokens, r.tokens, "{kind}: greedy tokens");
    assert_eq!(out.stop, StopReason::MaxNewTokens);
    assert_eq!(out.timing.decode_steps, 32);
}

#[test]
fn genai_folder_matches_onnxruntime() {
    // MatMulNBits int4 is dequantized to the same float weights as onnxruntime's, so the
    // products differ only in summation order.
    matches_onnxruntime("genai", 1e-4, 1e-5);
}

#[test]
fn optimum_folder_matches_onnxruntime() {
    matches_onnxruntime("optimum", 1e-4, 1e-5);
}

#[test]
fn the_shared_buffer_keeps_max_length_rows_and_the_optimum_cache_grows() {
    let model = load(&folder("genai"));
    let mut runner = model.runner().unwrap();
    assert_eq!(runner.capacity(), Some(128));
    runner.step(&[1, 2, 3]).unwrap();
    runner.step(&[4]).unwrap();
    assert_eq!(runner.cached(), 4);
    let model = load(&folder("optimum"));
    let mut runner = model.runner().unwrap();
    runner.step(&[1, 2, 3]).unwrap();
    runner.step(&[4]).unwrap();
    assert_eq!(runner.cached(), 4);
    runner.reset();
    assert_eq!(runner.cached(), 0);
}

#[test]
fn sampling_with_a_seed_is_reproducible() {
    let model = load(&folder("genai"));
    let prompt = model.encode("hello world").unwrap();
    let run = |seed| {
        model
            .generate(
                &prompt,
                &GenerateOptions {
                    max_new_tokens: 24,
                    stop_tokens: Some(vec![]),
                    sampling: SamplingOptions {
                        do_sample: true,
                        temperature: 1.5,
                        top_k: 100,
                        top_p: 0.95,
                        repetition_penalty: 1.2,
                        seed,
                    },
                    ..Default::default()
                },
                &mut |_| {},
            )
            .unwrap()
            .tokens
    };
    let a = run(42);
    assert_eq!(a.len(), 24);
    assert_eq!(a, run(42));
    assert_ne!(a, run(43));
}

#[test]
fn text_prompts_stream_the_same_text_as_a_whole_decode() {
    let model = load(&folder("optimum"));
    let tok = model.tokenizer.as_ref().unwrap();
    let text = "hello there, café 你好!";
    let ids = tok.encode(text).unwrap();
    use onnx_runtime_genai::Decode;
    assert_eq!(tok.decode(&ids).unwrap(), text);
    let mut streamed = String::new();
    let mut events = 0;
    let out = model
        .generate(
            &ids,
            &GenerateOptions {
                max_new_tokens: 20,
                ..Default::default()
            },
            &mut |e| {
                events += 1;
                streamed.push_str(e.text);
            },
        )
        .unwrap();
    assert!(events >= out.tokens.len());
    let whole = tok.decode(&out.tokens).unwrap();
    assert_eq!(streamed, whole);
    assert_eq!(out.text.as_deref(), Some(whole.as_str()));
    assert!(out.timing.first_token >= out.timing.prompt);
    assert!(out.timing.decode_tokens_per_s().unwrap() > 0.0);
}

#[test]
fn generation_stops_at_a_stop_token_and_at_max_length() {
    let model = load(&folder("genai"));
    let r = reference("genai");
    let stop = r.tokens[3];
    let out = model
        .generate(
            &r.prompt,
            &GenerateOptions {
                max_new_tokens: 32,
                stop_tokens: Some(vec![stop]),
                ..Default::default()
            },
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(out.stop, StopReason::StopToken);
    assert_eq!(*out.tokens.last().unwrap(), stop);
    assert!(out.tokens.len() <= 4);
    // 120 prompt tokens in a 128-row cache: 8 new tokens end the sequence at max_length.
    let long: Vec<u32> = (0..120).map(|i| (i * 7 % 500) as u32).collect();
    let out = model
        .generate(
            &long,
            &GenerateOptions {
                max_new_tokens: 100,
                stop_tokens: Some(vec![]),
                ..Default::default()
            },
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(out.stop, StopReason::MaxLength);
    assert_eq!(out.tokens.len(), 8);
}

#[test]
fn a_prompt_longer_than_the_cache_is_an_error() {
    for kind in ["genai", "optimum"] {
        let model = load(&folder(kind));
        let long: Vec<u32> = (0..200).map(|i| (i % 500) as u32).collect();
        let e = model
            .generate(&long, &GenerateOptions::default(), &mut |_| {})
            .unwrap_err();
        assert!(
            matches!(e, GenError::PromptTooLong { prompt: 200, .. }),
            "{kind}: {e}"
        );
        assert!(e.to_string().contains("shorten the prompt"), "{e}");
        let e = model
            .generate(&[], &GenerateOptions::default(), &mut |_| {})
            .unwrap_err();
        assert!(e.to_string().contains("empty"), "{e}");
        let e = model
            .generate(&[600], &GenerateOptions::default(), &mut |_| {})
            .unwrap_err();
        assert!(e.to_string().contains("outside the vocabulary"), "{e}");
    }
}

/// A copy of a tiny folder whose `file` is rewritten by `edit`.
fn edited(kind: &str, file: &str, edit: impl FnOnce(&mut Json)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(folder(kind)).unwrap() {
        let p = entry.unwrap().path();
        std::fs::copy(&p, dir.path().join(p.file_name().unwrap())).unwrap();
    }
    let path = dir.path().join(file);
    let mut j: Json = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut j);
    std::fs::write(&path, serde_json::to_string(&j).unwrap()).unwrap();
    dir
}

fn load_err(dir: &Path) -> String {
    match Model::load(dir, Default::default()) {
        Ok(_) => panic!("{} loaded", dir.display()),
        Err(e) => e.to_string(),
    }
}

#[test]
fn a_missing_genai_config_field_is_named() {
    let d = edited("genai", "genai_config.json", |j| {
        j["model"]["decoder"]
            .as_object_mut()
            .unwrap()
            .remove("head_size");
    });
    let e = load_err(d.path());
    assert!(
        e.contains("model.decoder.head_size") && e.contains("missing"),
        "{e}"
    );
}

#[test]
fn a_config_that_does_not_match_the_graph_is_an_error() {
    let d = edited("genai", "genai_config.json", |j| {
        j["model"]["decoder"]["num_hidden_layers"] = 3.into();
    });
    let e = load_err(d.path());
    assert!(e.contains("past_key_values.2.key"), "{e}");
    let d = edited("genai", "genai_config.json", |j| {
        j["model"]["decoder"]["inputs"]["past_key_names"] = "past.%d.k".into();
    });
    let e = load_err(d.path());
    assert!(e.contains("'past.0.k'") && e.contains("its inputs"), "{e}");
    let d = edited("optimum", "config.json", |j| {
        j["num_key_value_heads"] = 4.into();
    });
    let e = load_err(d.path());
    assert!(e.contains("KV heads") && e.contains("is 2"), "{e}");
}

#[test]
fn a_text_prompt_without_tokenizer_json_is_an_error_naming_prompt_ids() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["model.onnx", "genai_config.json"] {
        std::fs::copy(folder("genai").join(f), dir.path().join(f)).unwrap();
    }
    std::fs::write(dir.path().join("tokenizer.model"), b"spm").unwrap();
    let model = load(dir.path());
    let e = model.encode("hi").unwrap_err().to_string();
    assert!(
        e.contains("tokenizer.json") && e.contains("--prompt-ids") && e.contains("SentencePiece"),
        "{e}"
    );
    // Ids still work.
    let out = model
        .generate(
            &[1, 2, 3],
            &GenerateOptions {
                max_new_tokens: 2,
                ..Default::default()
            },
            &mut |_| {},
        )
        .unwrap();
    assert_eq!(out.tokens.len(), 2);
    assert_eq!(out.text, None);
    std::fs::write(dir.path().join("tokenizer.json"), b"{\"model\": 3}").unwrap();
    let model = load(dir.path());
    let e = model.encode("hi").unwrap_err().to_string();
    assert!(
        e.contains("cannot be read as a Hugging Face tokenizer"),
        "{e}"
    );
}

#[test]
fn inspect_finds_the_architecture() {
    let i = inspect(&folder("genai")).unwrap();
    assert!(i.mismatch.is_none());
    let (cfg, arch) = (i.config, i.arch);
    assert_eq!(
        (arch.layers, arch.kv_heads, arch.head_size),
        (2, Some(2), Some(16))
    );
    assert_eq!(arch.heads, Some(4));
    assert!(arch.rotary_in_attention);
    assert_eq!(arch.quantization.nbits.get(&(4, 32)), Some(&11));
    assert_eq!(arch.kv_dtype, Some(onnx_runtime_ir::DataType::Float32));
    let lines = arch.describe(&cfg).join("\n");
    assert!(lines.contains("MatMulNBits int4 block 32 x11"), "{lines}");
    assert!(lines.contains("past_present_share_buffer"), "{lines}");
    assert!(
        lines.contains("com.microsoft::GroupQueryAttention x2"),
        "{lines}"
    );
    let i = inspect(&folder("optimum")).unwrap();
    let (cfg, arch) = (i.config, i.arch);
    assert_eq!(cfg.format, onnx_runtime_genai::Format::Optimum);
    assert_eq!(
        (arch.layers, arch.kv_heads, arch.head_size),
        (2, Some(2), Some(16))
    );
    assert!(arch.quantization.nbits.is_empty());
    assert_eq!(arch.quantization.float_weights.get("float"), Some(&15));
}
