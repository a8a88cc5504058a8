//! Finding the ONNX backend test data shipped with the `onnx` Python package.
#![allow(dead_code)] // each test binary uses a part

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

/// Runs `python3 tests/python/<script> <args>`; `false` (after saying why) when Python or
/// its packages are missing outside CI. Panics when the script itself fails.
pub fn python(script: &str, args: &[&std::path::Path]) -> bool {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/python")
        .join(script);
    let out = Command::new("python3").arg(&path).args(args).output();
    match out {
        Ok(o) if o.status.success() => {
            print!("{}", String::from_utf8_lossy(&o.stdout));
            true
        }
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            if err.contains("ModuleNotFoundError")
                && !std::env::var("CI").is_ok_and(|v| v == "true")
            {
                eprintln!("SKIPPED: {script} needs Python packages: {err}");
                return false;
            }
            panic!(
                "{script} failed:\n{}\n{err}",
                String::from_utf8_lossy(&o.stdout)
            );
        }
        Err(e) => {
            if std::env::var("CI").is_ok_and(|v| v == "true") {
                panic!("cannot run python3: {e}");
            }
            eprintln!("SKIPPED: cannot run python3: {e}");
            false
        }
    }
}

/// A fresh, empty folder under the system temp folder for one test.
pub fn temp_dir(test: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("onnx-loader-{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create temp dir");
    dir
}
