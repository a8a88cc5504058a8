//! Runs the `math` kernels on the ONNX backend node tests of the math ops, exported to JSON
//! by `tests/math/make_cases.py` (python3 with onnx and numpy). Set `MATH_CASES` to a prefix to
//! run a subset. Cases whose op has no CPU kernel yet are listed, not failed.

use crate::kernel::BuildContext;
use crate::{registry, Tensor, Value};
use onnx_runtime_ir::{Attribute, DataType, Node, NodeId, ValueId};
use serde_json::Value as J;
use std::collections::BTreeMap;
use std::process::Command;

fn tensor(j: &J) -> Option<Tensor> {
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

fn attribute(j: &J) -> Attribute {
    let v = &j["v"];
    match j["t"].as_str().unwrap() {
        "i" => Attribute::Int(v.as_i64().unwrap()),
        "f" => Attribute::Float(v.as_f64().unwrap() as f32),
        "s" => Attribute::String(v.as_str().unwrap().to_string()),
        "is" => Attribute::Ints(
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_i64().unwrap())
                .collect(),
        ),
        "fs" => Attribute::Floats(
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect(),
        ),
        "ss" => Attribute::Strings(
            v.as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_str().unwrap().to_string())
                .collect(),
        ),
        "t" => Attribute::Tensor(tensor(v).unwrap().to_tensor_data("attr")),
        other => panic!("attribute kind {other}"),
    }
}

/// Compares one output; `Err` says how it differs.
fn compare(got: &Tensor, want: &Tensor, rtol: f64, atol: f64) -> Result<(), String> {
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
        Ok(())
    } else if got.dtype() == DataType::String {
        if got.strings() != want.strings() {
            return Err(format!(
                "got {:?}, want {:?}",
                got.strings(),
                want.strings()
            ));
        }
        Ok(())
    } else if got.bytes() != want.bytes() {
        let i = got
            .bytes()
            .iter()
            .zip(want.bytes())
            .position(|(a, b)| a != b)
            .unwrap_or(0);
        Err(format!("bytes differ from byte {i}"))
    } else {
        Ok(())
    }
}

fn run_case(c: &J) -> Result<(), String> {
    let op = c["op"].as_str().unwrap();
    let domain = c["domain"].as_str().unwrap();
    let opset = c["opset"].as_u64().unwrap();
    let inputs: Vec<Option<Tensor>> = c["inputs"].as_array().unwrap().iter().map(tensor).collect();
    let n_out = c["n_outputs"].as_u64().unwrap() as usize;
    let mut node = Node::new(
        NodeId(0),
        op,
        (0..inputs.len())
            .map(|i| inputs[i].as_ref().map(|_| ValueId(i)))
            .collect(),
        (0..n_out).map(|i| ValueId(100 + i)).collect(),
    )
    .with_domain(domain);
    for (k, v) in c["attrs"].as_object().unwrap() {
        node.attributes.insert(k.clone(), attribute(v));
    }
    let (_, factory) = registry().lookup(domain, op, opset).ok_or("no kernel")?;
    let kernel = factory(&BuildContext::new(&node, opset)).map_err(|e| format!("build: {e}"))?;
    let vals: Vec<Option<Value>> = inputs.into_iter().map(|t| t.map(Value::Tensor)).collect();
    let refs: Vec<Option<&Value>> = vals.iter().map(|v| v.as_ref()).collect();
    let outs = kernel.run(&refs).map_err(|e| format!("run: {e}"))?;
    let (rtol, atol) = (c["rtol"].as_f64().unwrap(), c["atol"].as_f64().unwrap());
    for (i, w) in c["outputs"].as_array().unwrap().iter().enumerate() {
        let Some(want) = tensor(w) else { continue };
        let got = outs
            .get(i)
            .and_then(|v| v.as_tensor())
            .ok_or(format!("output {i} missing"))?;
        compare(got, &want, rtol, atol).map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

#[test]
fn math_backend_cases() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let out = std::env::temp_dir().join(format!("math_cases_{}.json", std::process::id()));
    let have_python = Command::new("python3")
        .args(["-c", "import onnx, numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !have_python {
        eprintln!("skipped: python3 with onnx and numpy is needed to export the backend cases");
        return;
    }
    let status = Command::new("python3")
        .arg(format!("{dir}/tests/math/make_cases.py"))
        .arg(&out)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "exporting the backend cases failed");
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let cases: Vec<J> = serde_json::from_str(&text).unwrap();
    let filter = std::env::var("MATH_CASES").unwrap_or_default();
    let mut by_op: BTreeMap<String, (usize, usize)> = BTreeMap::new();
    let mut failures = vec![];
    let mut missing = vec![];
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        if !name.starts_with(&filter) {
            continue;
        }
        let op = c["op"].as_str().unwrap().to_string();
        let e = by_op.entry(op).or_default();
        let result = std::panic::catch_unwind(|| run_case(c))
            .unwrap_or_else(|_| Err("kernel panicked".to_string()));
        match result {
            Ok(()) => e.0 += 1,
            Err(m) if m == "no kernel" => missing.push(name.to_string()),
            Err(m) => {
                e.1 += 1;
                failures.push(format!("{name}: {m}"));
            }
        }
    }
    for (op, (p, f)) in &by_op {
        eprintln!("{op:<32} {p:>4} passed {f:>4} failed");
    }
    eprintln!("no kernel yet: {missing:?}");
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    let passed: usize = by_op.values().map(|v| v.0).sum();
    eprintln!("{passed} passed, {} failed", failures.len());
    assert!(
        failures.is_empty(),
        "{} backend cases failed",
        failures.len()
    );
}
