//! `onnx-runtime generate` and `info` on the tiny decoder folders of `scripts/tiny-llm.py`
//! (python3 with onnx, numpy and onnxruntime: these tests fail without them).

use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_onnx-runtime"))
}

/// Writes the tiny models (with onnxruntime's greedy reference) into `dir`.
fn tiny_models(dir: &Path) -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/tiny-llm.py");
    let out = Command::new("python3")
        .arg(&script)
        .arg(dir)
        .arg("--reference")
        .output()
        .expect("python3 must be installed (with onnx, numpy and onnxruntime)");
    assert!(
        out.status.success(),
        "{} failed:\n{}",
        script.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    dir.to_path_buf()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn generate_streams_the_greedy_tokens_onnxruntime_chooses_and_reports_timing() {
    let tmp = tempfile::tempdir().unwrap();
    let models = tiny_models(tmp.path());
    let genai = models.join("genai");
    let r: Json =
        serde_json::from_str(&std::fs::read_to_string(genai.join("reference.json")).unwrap())
            .unwrap();
    let ids: Vec<String> = r["prompt_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    let want: Vec<String> = r["tokens"].as_array().unwrap()[..10]
        .iter()
        .map(|v| v.to_string())
        .collect();
    // Without tokenizer.json the ids themselves are printed.
    std::fs::remove_file(genai.join("tokenizer.json")).unwrap();
    let out = bin()
        .args(["generate", "--max-new-tokens", "10", "--threads", "1"])
        .arg(&genai)
        .arg("--prompt-ids")
        .arg(ids.join(","))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    assert_eq!(stdout.trim(), want.join(" "));
    for line in [
        "prompt: 13 tokens in",
        "time to first token:",
        "decode: 9 tokens in",
        "tokens/s",
        "stopped: --max-new-tokens reached",
    ] {
        assert!(stderr.contains(line), "{line}: {stderr}");
    }
    // A text prompt with no tokenizer is an error that says what to do.
    let out = bin()
        .arg("generate")
        .arg(&genai)
        .args(["--prompt", "hello"])
        .output()
        .unwrap();
    let (_, stderr) = text(&out);
    assert_eq!(out.status.code(), Some(2));
    assert!(stderr.contains("--prompt-ids"), "{stderr}");
}

#[test]
fn generate_with_a_text_prompt_sampling_and_bench() {
    let tmp = tempfile::tempdir().unwrap();
    let models = tiny_models(tmp.path());
    let optimum = models.join("optimum");
    let run = |extra: &[&str]| {
        let out = bin()
            .arg("generate")
            .arg(&optimum)
            .args(["--prompt", "hello world", "--max-new-tokens", "12"])
            .args(extra)
            .output()
            .unwrap();
        let (stdout, stderr) = text(&out);
        assert!(out.status.success(), "{stderr}");
        (stdout, stderr)
    };
    let (greedy, stderr) = run(&[]);
    assert!(!greedy.trim().is_empty(), "{stderr}");
    let sampled = run(&[
        "--do-sample",
        "--temperature",
        "1.5",
        "--top-p",
        "0.95",
        "--seed",
        "3",
    ])
    .0;
    assert_eq!(
        sampled,
        run(&[
            "--do-sample",
            "--temperature",
            "1.5",
            "--top-p",
            "0.95",
            "--seed",
            "3"
        ])
        .0
    );
    let (stdout, stderr) = run(&["--bench"]);
    assert!(stdout.is_empty(), "{stdout}");
    assert!(stderr.contains("decode: 11 tokens in"), "{stderr}");
    // Out-of-range options and a missing prompt are errors.
    let out = bin()
        .arg("generate")
        .arg(&optimum)
        .args(["--prompt", "x", "--do-sample", "--temperature", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("temperature"), "{}", text(&out).1);
    let out = bin().arg("generate").arg(&optimum).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("--prompt"), "{}", text(&out).1);
}

#[test]
fn info_on_a_folder_prints_the_architecture() {
    let tmp = tempfile::tempdir().unwrap();
    let models = tiny_models(tmp.path());
    let out = bin()
        .arg("info")
        .arg(models.join("genai"))
        .output()
        .unwrap();
    let (stdout, stderr) = text(&out);
    assert!(out.status.success(), "{stderr}");
    for line in [
        "format: onnxruntime-genai",
        "layers: 2 (graph: 2",
        "attention heads: 4 (graph: 4), KV heads: 2 (graph: 2), head size: 16 (graph: 16)",
        "MatMulNBits int4 block 32 x11",
        "GroupQueryAttention x2, rotary inside the attention op",
        "KV cache: float, one buffer of 128 rows",
        "tokenizer: tokenizer.json (512 tokens)",
    ] {
        assert!(stdout.contains(line), "{line}:\n{stdout}");
    }
    let out = bin()
        .arg("info")
        .arg(models.join("optimum"))
        .output()
        .unwrap();
    let (stdout, _) = text(&out);
    assert!(stdout.contains("format: Hugging Face Optimum"), "{stdout}");
    assert!(stdout.contains("grows by one row per token"), "{stdout}");
}
