//! End-to-end tests of the `onnx-runtime` binary.

use onnx_runtime_ir::{static_shape, DataType, Graph, Node, NodeId};
use onnx_runtime_loader::Model;
use std::path::{Path, PathBuf};
use std::process::Command;

fn bin() -> Command {
    Command::new(env!("CARGO_BIN_EXE_onnx-runtime"))
}

/// The ONNX backend test data of the installed `onnx` wheel (scripts/check installs it).
fn backend_data() -> PathBuf {
    let out = Command::new("python3")
        .args([
            "-c",
            "import onnx, os; print(os.path.dirname(onnx.__file__))",
        ])
        .output()
        .expect("python3 must be installed (scripts/requirements-test.txt)");
    assert!(out.status.success(), "the onnx wheel must be installed");
    PathBuf::from(String::from_utf8(out.stdout).unwrap().trim()).join("backend/test/data")
}

/// A model y = Identity(x) over float32 [2, N].
fn identity_model(dir: &Path) -> PathBuf {
    let mut g = Graph::new();
    g.opset_imports.insert(String::new(), 17);
    let x = g.create_named_value(
        "x",
        DataType::Float32,
        onnx_runtime_ir::Shape(vec![
            onnx_runtime_ir::Dim::Static(2),
            onnx_runtime_ir::Dim::Symbolic("n".into()),
        ]),
    );
    let y = g.create_named_value("y", DataType::Float32, static_shape([2, 3]));
    g.add_input(x);
    g.insert_node(Node::new(NodeId(0), "Identity", vec![Some(x)], vec![y]));
    g.add_output(y);
    let path = dir.join("identity.onnx");
    Model::new(&g).save(&path).unwrap();
    path
}

fn npy_f32(shape: &[usize], values: &[f32]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape_txt = if shape.len() == 1 {
        format!("({},)", dims[0])
    } else {
        format!("({})", dims.join(", "))
    };
    let mut header = format!("{{'descr': '<f4', 'fortran_order': False, 'shape': {shape_txt}, }}");
    while (10 + header.len() + 1) % 64 != 0 {
        header.push(' ');
    }
    header.push('\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(header.as_bytes());
    for v in values {
        out.extend_from_slice(&v.to_le_bytes());
    }
    out
}

#[test]
fn run_reads_npy_inputs_and_writes_npy_outputs() {
    let dir = tempfile::tempdir().unwrap();
    let model = identity_model(dir.path());
    let values = [1.5f32, -2.0, 3.25, 4.0, 5.5, -6.75];
    let input = dir.path().join("x.npy");
    std::fs::write(&input, npy_f32(&[2, 3], &values)).unwrap();
    let out_dir = dir.path().join("out");
    let out = bin()
        .arg("run")
        .arg(&model)
        .arg("--input")
        .arg(format!("x={}", input.display()))
        .arg("--output-dir")
        .arg(&out_dir)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("output y: float [2, 3]"), "{stdout}");
    assert!(
        stdout.contains("min -6.75") && stdout.contains("max 5.5"),
        "{stdout}"
    );
    // The written file is byte-identical to what numpy would write for the same array.
    let written = std::fs::read(out_dir.join("y.npy")).unwrap();
    assert_eq!(written, npy_f32(&[2, 3], &values));
}

#[test]
fn run_with_random_inputs_honours_dims_and_names_missing_inputs() {
    let dir = tempfile::tempdir().unwrap();
    let model = identity_model(dir.path());
    let out = bin()
        .args([
            "run",
            model.to_str().unwrap(),
            "--random-inputs",
            "--dim",
            "n=5",
        ])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("output y: float [2, 5]"), "{stdout}");

    let out = bin()
        .args(["run", model.to_str().unwrap()])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(stderr.contains("x: float tensor [2, n]"), "{stderr}");
}

#[test]
fn info_lists_io_ops_and_missing_kernels() {
    let dir = tempfile::tempdir().unwrap();
    let mut g = Graph::new();
    g.opset_imports.insert(String::new(), 17);
    let x = g.create_named_value("x", DataType::Float32, static_shape([1]));
    let y = g.create_named_value("y", DataType::Float32, static_shape([1]));
    g.add_input(x);
    g.insert_node(Node::new(NodeId(0), "NoSuchOp", vec![Some(x)], vec![y]));
    g.add_output(y);
    let path = dir.path().join("m.onnx");
    Model::new(&g).save(&path).unwrap();
    let out = bin()
        .args(["info", path.to_str().unwrap()])
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{stdout}");
    for want in [
        "x: float tensor [1]",
        "1  NoSuchOp",
        "cpu: cannot run NoSuchOp (opset 17)",
        "cuda: no kernel for NoSuchOp (opset 17)",
    ] {
        assert!(stdout.contains(want), "missing {want:?} in\n{stdout}");
    }
}

#[test]
fn test_runs_backend_cases_and_guards_the_pass_list() {
    let node = backend_data().join("node");
    let dir = tempfile::tempdir().unwrap();
    let written = dir.path().join("passed.txt");
    // test_if needs only the session; test_identity only Identity.
    let out = bin()
        .arg("test")
        .arg(node.join("test_if"))
        .arg(node.join("test_identity"))
        .arg("--write-pass-list")
        .arg(&written)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("PASS test_if") && stdout.contains("PASS test_identity"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("2 passed, 0 failed"));
    assert_eq!(
        std::fs::read_to_string(&written).unwrap(),
        "test_identity\ntest_if\n"
    );

    // A case on the pass list that fails is a regression: exit status 1.
    let broken = dir.path().join("cases/test_if");
    std::fs::create_dir_all(broken.join("test_data_set_0")).unwrap();
    std::fs::copy(node.join("test_if/model.onnx"), broken.join("model.onnx")).unwrap();
    let src = node.join("test_if/test_data_set_0");
    std::fs::copy(
        src.join("input_0.pb"),
        broken.join("test_data_set_0/input_0.pb"),
    )
    .unwrap();
    // The expected output of another case: wrong values or shape.
    std::fs::copy(
        node.join("test_identity/test_data_set_0/output_0.pb"),
        broken.join("test_data_set_0/output_0.pb"),
    )
    .unwrap();
    let out = bin()
        .arg("test")
        .arg(dir.path().join("cases"))
        .arg("--pass-list")
        .arg(&written)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(1), "{stdout}");
    assert!(
        stdout.contains("FAIL test_if: test_data_set_0: output 0"),
        "{stdout}"
    );
    assert_eq!(stdout.lines().last(), Some("0 passed, 1 failed"));
}
