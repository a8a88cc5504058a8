//! What the generation tests share: the tiny decoders of `scripts/tiny-llm.py`, written
//! once per test binary with onnxruntime's greedy reference (`--reference`), and the logit
//! comparison.
#![allow(dead_code)]

use serde_json::Value as Json;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The models, written once per test binary.
pub fn models() -> &'static Path {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../scripts/tiny-llm.py");
        let out = Command::new("python3")
            .arg(&script)
            .arg(dir.path())
            .arg("--reference")
            .output()
            .expect("python3 must be installed (with onnx, numpy and onnxruntime)");
        assert!(
            out.status.success(),
            "{} failed (are onnx, numpy and onnxruntime installed? scripts/requirements-test.txt):\n{}",
            script.display(),
            String::from_utf8_lossy(&out.stderr)
        );
        dir
    })
    .path()
}

pub fn folder(kind: &str) -> PathBuf {
    models().join(kind)
}

pub struct Reference {
    pub prompt: Vec<u32>,
    pub prompt_logits: Vec<Vec<f64>>,
    pub step_logits: Vec<Vec<f64>>,
    pub tokens: Vec<u32>,
}

pub fn reference(kind: &str) -> Reference {
    let text = std::fs::read_to_string(folder(kind).join("reference.json")).unwrap();
    let j: Json = serde_json::from_str(&text).unwrap();
    let ids = |v: &Json| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let rows = |v: &Json| -> Vec<Vec<f64>> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|r| {
                r.as_array()
                    .unwrap()
                    .iter()
                    .map(|x| x.as_f64().unwrap())
                    .collect()
            })
            .collect()
    };
    Reference {
        prompt: ids(&j["prompt_ids"]),
        prompt_logits: rows(&j["prompt_logits"]),
        step_logits: rows(&j["step_logits"]),
        tokens: ids(&j["tokens"]),
    }
}

/// Largest |ours - theirs| - rtol * |theirs| over a row; <= atol passes.
pub fn worst(ours: &[f32], theirs: &[f64], rtol: f64) -> f64 {
    assert_eq!(ours.len(), theirs.len());
    ours.iter()
        .zip(theirs)
        .map(|(&a, &b)| (a as f64 - b).abs() - rtol * b.abs())
        .fold(f64::NEG_INFINITY, f64::max)
}
