//! Finding the ONNX backend test data shipped with the `onnx` Python package.

use std::path::PathBuf;
use std::process::Command;

/// The five folders of backend test cases (each case: `model.onnx` + `test_data_set_*`).
pub const SUITES: [&str; 5] = [
    "node",
    "pytorch-converted",
    "pytorch-operator",
    "simple",
    "light",
];

/// `onnx/backend/test/data`, or `None` (after saying why) when the package is missing. With
/// `CI=true` a missing package fails the test instead.
pub fn backend_data() -> Option<PathBuf> {
    let out = Command::new("python3")
        .args(["-c", "import onnx,os;print(os.path.dirname(onnx.__file__))"])
        .output();
    let dir = match out {
        Ok(o) if o.status.success() => {
            PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()).join("backend/test/data")
        }
        _ => PathBuf::new(),
    };
    if dir.join("node").is_dir() {
        return Some(dir);
    }
    let msg = "the ONNX backend test data was not found: install the onnx wheel \
               (pip install -r scripts/requirements-test.txt)";
    if std::env::var("CI").is_ok_and(|v| v == "true") {
        panic!("{msg}");
    }
    eprintln!("SKIPPED: {msg}");
    None
}

/// Every case folder (holding `model.onnx`) of every suite, sorted.
pub fn cases(data: &std::path::Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for suite in SUITES {
        let Ok(entries) = std::fs::read_dir(data.join(suite)) else {
            continue;
        };
        for e in entries.flatten() {
            if e.path().join("model.onnx").is_file() {
                out.push(e.path());
            }
        }
    }
    out.sort();
    out
}
