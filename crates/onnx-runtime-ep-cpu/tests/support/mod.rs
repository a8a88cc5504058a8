//! What the reference-case tests share: running a python script that writes single-node cases
//! as JSON, decoding their tensors and attributes, running one case's node on its CPU kernel,
//! comparing outputs within the case's tolerances, and the pass/fail report.
//!
//! A case is `{name, op, domain, opset, inputs, n_outputs, attrs, outputs, rtol, atol}` (plus an
//! optional `source`); a tensor is `{dtype, shape, hex}` or `{dtype, shape, strings}`, `null`
//! for an omitted input or an output the case does not check.
#![allow(dead_code)]

use onnx_runtime_ep_cpu::kernel::BuildContext;
use onnx_runtime_ep_cpu::{registry, Tensor, Value};
use onnx_runtime_ir::{Attribute, DataType, Node, NodeId, ValueId};
use serde_json::Value as J;
use std::collections::BTreeMap;
use std::process::Command;

/// The error `run_case` gives when no kernel is registered for the case's op.
pub const NO_KERNEL: &str = "no kernel";

/// Runs `tests/<script>` (a path relative to the crate's tests folder) to write the cases and
/// reads them. `None` (after printing why) when python3 cannot import `modules` (e.g.
/// "onnx, numpy"), except under CI, which installs them (scripts/requirements-test.txt): there
/// a skip would hide the test, so it fails.
pub fn load_cases(script: &str, modules: &str) -> Option<Vec<J>> {
    if !python_has(modules) {
        return None;
    }
    let stem = script.replace(['/', '.'], "_");
    let out = std::env::temp_dir().join(format!("{stem}_{}.json", std::process::id()));
    let status = Command::new("python3")
        .arg(format!("{}/tests/{script}", env!("CARGO_MANIFEST_DIR")))
        .arg(&out)
        .status()
        .expect("python3 runs");
    assert!(
        status.success(),
        "making the reference cases ({script}) failed"
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    Some(serde_json::from_str(&text).unwrap())
}

/// Whether python3 can import `modules` (e.g. "onnx, numpy"). Outside CI a missing module
/// prints why the test is skipped; under CI, which installs them
/// (scripts/requirements-test.txt), it fails: there a skip would hide the test.
pub fn python_has(modules: &str) -> bool {
    let have_python = Command::new("python3")
        .args(["-c", &format!("import {modules}")])
        .status()
        .is_ok_and(|s| s.success());
    if !have_python {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs python3 with {modules} (pip install -r scripts/requirements-test.txt)"
        );
        eprintln!("skipped: python3 with {modules} makes the reference cases");
    }
    have_python
}

/// A JSON tensor; `None` for `null` or one this runtime cannot hold.
pub fn tensor(j: &J) -> Option<Tensor> {
    if j.is_null() {
        return None;
    }
    let dtype = DataType::from_onnx(j["dtype"].as_i64()? as i32)?;
    let shape: Vec<usize> = j["shape"]
        .as_array()?
        .iter()
        .map(|v| v.as_u64().unwrap() as usize)
        .collect();
    if let Some(strings) = j["strings"].as_array() {
        let v = strings
            .iter()
            .map(|s| s.as_str().unwrap_or_default().to_string())
            .collect();
        return Some(Tensor::from_strings(shape, v));
    }
    let hex = j["hex"].as_str()?;
    let bytes: Vec<u8> = (0..hex.len() / 2)
        .map(|i| u8::from_str_radix(&hex[2 * i..2 * i + 2], 16).unwrap())
        .collect();
    Tensor::from_bytes(dtype, shape, &bytes).ok()
}

/// A JSON attribute `{t: kind, v: value}`.
pub fn attribute(j: &J) -> Attribute {
    let v = &j["v"];
    let arr = || v.as_array().unwrap().iter();
    match j["t"].as_str().unwrap() {
        "i" => Attribute::Int(v.as_i64().unwrap()),
        "f" => Attribute::Float(v.as_f64().unwrap() as f32),
        "s" => Attribute::String(v.as_str().unwrap().to_string()),
        "is" => Attribute::Ints(arr().map(|x| x.as_i64().unwrap()).collect()),
        "fs" => Attribute::Floats(arr().map(|x| x.as_f64().unwrap() as f32).collect()),
        "ss" => Attribute::Strings(arr().map(|x| x.as_str().unwrap().to_string()).collect()),
        "t" => Attribute::Tensor(tensor(v).unwrap().to_tensor_data("attr")),
        other => panic!("attribute kind {other}"),
    }
}

/// Compares one tensor: floats of 16 bits or more within `atol + rtol * |want|` (ten times
/// that for float16 and bfloat16), strings and everything else exactly.
pub fn compare(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
    if got.dtype() != want.dtype() || got.shape() != want.shape() {
        return Err(format!(
            "got {} {:?}, want {} {:?}",
            got.dtype(),
            got.shape(),
            want.dtype(),
            want.shape()
        ));
    }
    if got.dtype().is_float() && got.dtype().bit_width() >= Some(16) {
        let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
        let tol_scale = if got.dtype() == DataType::Float16 || got.dtype() == DataType::BFloat16 {
            10.0
        } else {
            1.0
        };
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            let ok = (a.is_nan() && b.is_nan())
                || a == b
                || (a - b).abs() <= tol_scale * (atol + rtol * b.abs());
            if !ok {
                return Err(format!("element {i}: got {a}, want {b}"));
            }
        }
        return Ok(());
    }
    if got.dtype() == DataType::String {
        if got.strings() != want.strings() {
            return Err(format!(
                "got {:?}, want {:?}",
                got.strings(),
                want.strings()
            ));
        }
        return Ok(());
    }
    match got
        .bytes()
        .iter()
        .zip(want.bytes())
        .position(|(a, b)| a != b)
    {
        None => Ok(()),
        Some(i) if got.numel() <= 64 => Err(format!(
            "bytes differ from byte {i}: got {:?}, want {:?}",
            got.to_f64_vec(),
            want.to_f64_vec()
        )),
        Some(i) => Err(format!("bytes differ from byte {i}")),
    }
}

/// Compares an output with an expected tensor.
pub fn compare_tensor(got: &Value, want: &J, rtol: f64, atol: f64) -> Result<(), String> {
    let want = tensor(want).ok_or("unreadable expected tensor")?;
    let got = got
        .as_tensor()
        .ok_or(format!("got a {}, want a tensor", got.kind_name()))?;
    compare(got, &want, rtol, atol)
}

/// How one output is checked against its expected JSON, with the case's (rtol, atol).
pub type Check = fn(&Value, &J, f64, f64) -> Result<(), String>;

/// Builds one node of `op` (inputs `None` where omitted, `n_out` outputs, `attrs`) on its
/// registered CPU kernel and runs it. `Err(NO_KERNEL)` when no kernel is registered for it.
pub fn run_node(
    op: &str,
    domain: &str,
    opset: u64,
    inputs: Vec<Option<Tensor>>,
    n_out: usize,
    attrs: Vec<(String, Attribute)>,
) -> Result<Vec<Value>, String> {
    let mut node = Node::new(
        NodeId(0),
        op,
        (0..inputs.len())
            .map(|i| inputs[i].as_ref().map(|_| ValueId(i)))
            .collect(),
        (0..n_out).map(|i| ValueId(100 + i)).collect(),
    )
    .with_domain(domain);
    node.attributes.extend(attrs);
    let (_, factory) = registry().lookup(domain, op, opset).ok_or(NO_KERNEL)?;
    let kernel = factory(&BuildContext::new(&node, opset)).map_err(|e| format!("build: {e}"))?;
    let vals: Vec<Option<Value>> = inputs.into_iter().map(|t| t.map(Value::Tensor)).collect();
    let refs: Vec<Option<&Value>> = vals.iter().map(|v| v.as_ref()).collect();
    kernel.run(&refs).map_err(|e| format!("run: {e}"))
}

/// Builds the case's node, runs its kernel and checks every output the case gives (not null)
/// with `check`. `Err(NO_KERNEL)` when no kernel is registered for it.
pub fn run_case(c: &J, check: Check) -> Result<(), String> {
    let inputs: Vec<Option<Tensor>> = c["inputs"].as_array().unwrap().iter().map(tensor).collect();
    let attrs: Vec<(String, Attribute)> = c["attrs"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(k, v)| (k.clone(), attribute(v)))
        .collect();
    let outs = run_node(
        c["op"].as_str().unwrap(),
        c["domain"].as_str().unwrap(),
        c["opset"].as_u64().unwrap(),
        inputs,
        c["n_outputs"].as_u64().unwrap() as usize,
        attrs,
    )?;
    let (rtol, atol) = (c["rtol"].as_f64().unwrap(), c["atol"].as_f64().unwrap());
    for (i, w) in c["outputs"].as_array().unwrap().iter().enumerate() {
        if w.is_null() {
            continue;
        }
        let got = outs.get(i).ok_or(format!("output {i} missing"))?;
        check(got, w, rtol, atol).map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

/// Which cases to run and how a missing kernel counts.
pub struct Suite {
    /// The script (relative to the tests folder) that writes the cases, and the python modules
    /// it needs (e.g. "onnx, numpy").
    pub script: &'static str,
    pub modules: &'static str,
    /// The environment variable holding a name prefix that selects a subset.
    pub filter_var: &'static str,
    /// Cases passed over whatever the filter (e.g. ones no other runtime can match).
    pub skip: fn(&str) -> bool,
    /// Whether a case whose op has no kernel fails (otherwise it is listed).
    pub missing_fails: bool,
    pub check: Check,
}

/// Makes the cases (see `load_cases`: skips outside CI without python), runs the selected ones
/// (a panicking kernel counts as a failure), prints passes and failures per op and every
/// failure, and fails the test when any case failed or none ran.
pub fn run_suite(suite: Suite) {
    let Some(cases) = load_cases(suite.script, suite.modules) else {
        return;
    };
    let filter = std::env::var(suite.filter_var).unwrap_or_default();
    let mut by_op: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let (mut failures, mut missing) = (vec![], vec![]);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        if !name.starts_with(&filter) || (suite.skip)(name) {
            continue;
        }
        let e = by_op.entry(c["op"].as_str().unwrap().into()).or_default();
        let result = std::panic::catch_unwind(|| run_case(c, suite.check))
            .unwrap_or_else(|_| Err("kernel panicked".to_string()));
        match result {
            Ok(()) => e.0 += 1,
            Err(m) if m == NO_KERNEL && !suite.missing_fails => missing.push(name.to_string()),
            Err(m) => {
                e.1 += 1;
                let source = c["source"].as_str().map(|s| format!(" ({s})"));
                failures.push(format!("{name}{}: {m}", source.unwrap_or_default()));
            }
        }
    }
    for (op, (p, f)) in &by_op {
        eprintln!("{op:<32} {p:>4} passed {f:>4} failed");
    }
    if !missing.is_empty() {
        eprintln!("no kernel yet ({}): {missing:?}", missing.len());
    }
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    let passed: usize = by_op.values().map(|v| v.0).sum();
    eprintln!("{passed} passed, {} failed", failures.len());
    assert!(passed > 0, "no case ran");
    assert!(failures.is_empty(), "{} cases failed", failures.len());
}
