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

/// A model y = Add(x, w) with x int64 [n] and w an int64 [1] initializer that is also a graph
/// input (a default a run may override).
fn add_model_with_default(dir: &Path) -> PathBuf {
    let mut g = Graph::new();
    g.opset_imports.insert(String::new(), 17);
    let x = g.create_named_value(
        "x",
        DataType::Int64,
        onnx_runtime_ir::Shape(vec![onnx_runtime_ir::Dim::Symbolic("n".into())]),
    );
    let w = g.create_named_value("w", DataType::Int64, static_shape([1]));
    let y = g.create_named_value(
        "y",
        DataType::Int64,
        onnx_runtime_ir::Shape(vec![onnx_runtime_ir::Dim::Symbolic("n".into())]),
    );
    g.add_input(x);
    g.add_input(w);
    g.add_initializer(
        w,
        onnx_runtime_ir::TensorData::from_bytes(
            DataType::Int64,
            vec![1],
            7i64.to_le_bytes().into(),
        ),
    );
    g.insert_node(Node::new(NodeId(0), "Add", vec![Some(x), Some(w)], vec![y]));
    g.add_output(y);
    let path = dir.join("add.onnx");
    Model::new(&g).save(&path).unwrap();
    path
}

fn output(cmd: &mut Command) -> (Option<i32>, String, String) {
    let out = cmd.output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn info_lists_the_inputs_to_feed_first_and_folds_inputs_with_initializers() {
    let dir = tempfile::tempdir().unwrap();
    let model = add_model_with_default(dir.path());
    let (code, stdout, stderr) = output(bin().arg("info").arg(&model));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let inputs: Vec<&str> = stdout
        .lines()
        .skip_while(|l| *l != "inputs:")
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .collect();
    assert_eq!(
        inputs,
        [
            "  x: int64 tensor [n]",
            "  + 1 input has an initializer, defaults that --input NAME=FILE may override: w"
        ],
        "{stdout}"
    );
}

#[test]
fn info_takes_no_run_options() {
    let dir = tempfile::tempdir().unwrap();
    let model = identity_model(dir.path());
    for flag in [&["--threads", "2"][..], &["--no-spin"]] {
        let (code, stdout, stderr) = output(bin().arg("info").arg(&model).args(flag));
        assert_eq!(code, Some(2), "{flag:?}: {stdout}{stderr}");
        assert!(
            stderr.contains(&format!("unexpected argument '{}'", flag[0])),
            "{stderr}"
        );
    }
    let (_, help, _) = output(bin().args(["info", "--help"]));
    assert!(
        !help.contains("--threads") && !help.contains("--no-spin"),
        "{help}"
    );
}

#[test]
fn help_describes_every_argument() {
    let (_, run, _) = output(bin().args(["run", "--help"]));
    let (_, bench, _) = output(bin().args(["bench", "--help"]));
    let (_, info, _) = output(bin().args(["info", "--help"]));
    for (help, args) in [
        (
            &run,
            &["<MODEL>", "--format", "--dim", "--threads", "--ep"][..],
        ),
        (&bench, &["<MODEL>", "--warmup", "--iterations", "--dim"]),
        (&info, &["<MODEL>"]),
    ] {
        for arg in args {
            // clap prints `  ARG  help text`, or the text on the next line, further indented,
            // when it lays the help out long; an argument without help is alone on its line.
            let lines: Vec<&str> = help.lines().collect();
            let at = lines
                .iter()
                .position(|l| l.trim_start().starts_with(arg))
                .unwrap_or_else(|| panic!("no {arg} in\n{help}"));
            let line = lines[at].trim_start();
            let same_line = line.split_once("  ").map(|(_, t)| t.trim());
            let next_line = lines
                .get(at + 1)
                .filter(|l| l.starts_with("          "))
                .map(|l| l.trim());
            let text = same_line.or(next_line).unwrap_or("");
            // Not just clap's `[default: ...]`.
            assert!(
                text.len() > 10 && !text.starts_with('['),
                "{arg} has no help text: {line:?}\n{help}"
            );
        }
    }
}

#[test]
fn run_rejects_a_dim_the_model_does_not_have() {
    let dir = tempfile::tempdir().unwrap();
    let model = identity_model(dir.path());
    let (code, stdout, stderr) =
        output(
            bin()
                .arg("run")
                .arg(&model)
                .args(["--random-inputs", "--dim", "batch=4"]),
        );
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert_eq!(
        stderr.trim(),
        "error: --dim batch: the model has no symbolic dimension of that name; its inputs' \
         symbolic dimensions are n"
    );
    assert!(stdout.is_empty(), "{stdout}");
}

#[test]
fn run_summarises_inputs_only_once_accepted_and_integers_as_integers() {
    let dir = tempfile::tempdir().unwrap();
    let model = add_model_with_default(dir.path());
    let (code, stdout, stderr) = output(bin().arg("run").arg(&model).args([
        "--random-inputs",
        "--dim",
        "n=3",
        "--seed",
        "1",
    ]));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let input = stdout.lines().find(|l| l.starts_with("input  x:")).unwrap();
    let out = stdout.lines().find(|l| l.starts_with("output y:")).unwrap();
    // Random integers are in [0, 10); the output adds 7.
    for line in [input, out] {
        assert!(line.contains("int64 [3] ["), "{line}");
        assert!(
            !line.contains(".000000,"),
            "integers printed as floats: {line}"
        );
        assert!(line.contains(" mean "), "{line}");
    }

    // An input of the wrong shape is refused before anything about it is printed.
    let identity = identity_model(dir.path());
    let y = dir.path().join("wrong.npy");
    std::fs::write(&y, npy_f32(&[3], &[1.0, 2.0, 3.0])).unwrap();
    let (code, stdout, stderr) = output(
        bin()
            .arg("run")
            .arg(&identity)
            .arg("--input")
            .arg(format!("x={}", y.display())),
    );
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("input 'x': expected float tensor [2, n]"),
        "{stderr}"
    );
    assert!(stdout.is_empty(), "printed before the error: {stdout}");
}

#[test]
fn load_errors_name_the_file_once() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.onnx");
    std::fs::write(&text, "this is not a model\n").unwrap();
    let name = text.display().to_string();
    for cmd in ["run", "info", "bench"] {
        let (code, _, stderr) = output(bin().arg(cmd).arg(&text));
        assert_eq!(code, Some(2), "{cmd}: {stderr}");
        assert_eq!(stderr.matches(&name).count(), 1, "{cmd}: {stderr}");
        assert!(
            stderr.starts_with(&format!("error: {name}: not a valid ONNX protobuf")),
            "{cmd}: {stderr}"
        );
    }
    let missing = dir.path().join("missing.onnx");
    let (_, _, stderr) = output(bin().arg("run").arg(&missing));
    assert_eq!(stderr.matches("missing.onnx").count(), 1, "{stderr}");

    // A text file given as a .pb input: the message names it, with no empty field.
    let model = identity_model(dir.path());
    let pb = dir.path().join("x.pb");
    std::fs::write(&pb, "hello\n").unwrap();
    let (code, _, stderr) = output(
        bin()
            .arg("run")
            .arg(&model)
            .arg("--input")
            .arg(format!("x={}", pb.display())),
    );
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.starts_with(&format!(
            "error: {}: not a valid ONNX protobuf",
            pb.display()
        )),
        "{stderr}"
    );
    assert!(!stderr.contains(": :"), "{stderr}");
}

#[test]
fn test_refuses_a_filter_that_matches_nothing_and_folders_without_cases() {
    let node = backend_data().join("node");
    let (code, stdout, stderr) = output(
        bin()
            .arg("test")
            .arg(node.join("test_identity"))
            .args(["--filter", "no_such_case"]),
    );
    assert_eq!(code, Some(2), "{stdout}{stderr}");
    assert!(
        stderr.contains("--filter 'no_such_case' matches none of the 1 cases"),
        "{stderr}"
    );
    assert!(!stdout.contains("0 passed"), "{stdout}");

    let empty = tempfile::tempdir().unwrap();
    let (code, _, stderr) = output(bin().arg("test").arg(empty.path()));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("no test cases"), "{stderr}");
}

#[test]
fn pass_lists_keep_cases_off_with_a_reason() {
    let node = backend_data().join("node");
    let dir = tempfile::tempdir().unwrap();
    let list = dir.path().join("list.txt");
    let header = "# a comment\n# off: test_identity: kept off on purpose\n";
    std::fs::write(&list, format!("{header}test_if\n")).unwrap();
    let run = |extra: &[&str]| {
        output(
            bin()
                .arg("test")
                .arg(node.join("test_if"))
                .arg(node.join("test_identity"))
                .args(extra),
        )
    };
    // Checking: the case kept off passes, and is neither a regression nor suggested.
    let (code, stdout, stderr) = run(&["--pass-list", list.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert!(
        stderr.contains("1 cases the pass list keeps off"),
        "{stderr}"
    );
    assert!(!stderr.contains("does not name"), "{stderr}");
    // Rewriting keeps the comments and leaves the case off.
    let (code, stdout, stderr) = run(&["--write-pass-list", list.to_str().unwrap()]);
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    assert_eq!(
        std::fs::read_to_string(&list).unwrap(),
        format!("{header}test_if\n")
    );
}

#[test]
fn info_with_ep_cuda_reports_placement_or_why_not() {
    // With a GPU the session is built there and the placement printed; without one the
    // line says why and points at the registry line. Either way the command succeeds.
    let dir = tempfile::tempdir().unwrap();
    let model = identity_model(dir.path());
    let (code, stdout, stderr) = output(bin().arg("info").arg(&model).args(["--ep", "cuda"]));
    assert_eq!(code, Some(0), "{stdout}{stderr}");
    let line = stdout
        .lines()
        .find(|l| l.starts_with("cuda placement:"))
        .unwrap_or_else(|| panic!("no placement line in\n{stdout}"));
    assert!(
        line.contains("nodes on the device") || line.contains("not known here"),
        "{line}"
    );
    let (_, help, _) = output(bin().args(["info", "--help"]));
    assert!(help.contains("--ep"), "{help}");
}
