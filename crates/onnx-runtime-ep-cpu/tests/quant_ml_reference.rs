//! Runs the CPU kernels of the quantization ops (DynamicQuantizeLinear, MatMulInteger,
//! com.microsoft DynamicQuantizeLSTM), PRelu and the ai.onnx.ml ops (SVMClassifier,
//! SVMRegressor, ZipMap) on the cases of `tests/quant_ml/make_cases.py`: seeded random
//! single-node models whose expected outputs come from onnxruntime (CPU) or float64 numpy math
//! (each case names its source and tolerance). Needs python3 with onnx, onnxruntime and numpy.
//! Set `QUANT_ML_CASES` to a name prefix to run a subset.

use onnx_runtime_ep_cpu::kernel::BuildContext;
use onnx_runtime_ep_cpu::{registry, Tensor, Value};
use onnx_runtime_ir::{Attribute, DataType, Node, NodeId, ValueId};
use serde_json::Value as J;
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
    let arr = || v.as_array().unwrap().iter();
    match j["t"].as_str().unwrap() {
        "i" => Attribute::Int(v.as_i64().unwrap()),
        "f" => Attribute::Float(v.as_f64().unwrap() as f32),
        "s" => Attribute::String(v.as_str().unwrap().to_string()),
        "is" => Attribute::Ints(arr().map(|x| x.as_i64().unwrap()).collect()),
        "fs" => Attribute::Floats(arr().map(|x| x.as_f64().unwrap() as f32).collect()),
        "ss" => Attribute::Strings(arr().map(|x| x.as_str().unwrap().to_string()).collect()),
        other => panic!("attribute kind {other}"),
    }
}

/// Compares one tensor: floats within `atol + rtol * |want|`, everything else exactly.
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
    if got.dtype().is_float() {
        let (g, w) = (got.to_f64_vec().unwrap(), want.to_f64_vec().unwrap());
        for (i, (a, b)) in g.iter().zip(&w).enumerate() {
            let ok = (a.is_nan() && b.is_nan()) || a == b || (a - b).abs() <= atol + rtol * b.abs();
            if !ok {
                return Err(format!("element {i}: got {a}, want {b}"));
            }
        }
        return Ok(());
    }
    if got.dtype() == DataType::String {
        return if got.strings() == want.strings() {
            Ok(())
        } else {
            Err(format!(
                "got {:?}, want {:?}",
                got.strings(),
                want.strings()
            ))
        };
    }
    match got
        .bytes()
        .iter()
        .zip(want.bytes())
        .position(|(a, b)| a != b)
    {
        None => Ok(()),
        Some(i) => Err(format!(
            "bytes differ from byte {i}: got {:?}, want {:?}",
            got.to_f64_vec(),
            want.to_f64_vec()
        )),
    }
}

/// Expected map keys: strings, or an int64 tensor.
fn keys_tensor(j: &J) -> Tensor {
    match j["strings"].as_array() {
        Some(s) => Tensor::from_strings(
            vec![s.len()],
            s.iter().map(|v| v.as_str().unwrap().to_string()).collect(),
        ),
        None => tensor(j).unwrap(),
    }
}

fn compare_value(got: &Value, want: &J, rtol: f64, atol: f64) -> Result<(), String> {
    let Some(maps) = want["seq_maps"].as_array() else {
        let want = tensor(want).ok_or("unreadable expected tensor")?;
        let got = got
            .as_tensor()
            .ok_or(format!("got a {}, want a tensor", got.kind_name()))?;
        return compare(got, &want, rtol, atol);
    };
    let items = got.as_map_sequence().ok_or(format!(
        "got a {}, want a sequence of maps",
        got.kind_name()
    ))?;
    if items.len() != maps.len() {
        return Err(format!("{} maps, want {}", items.len(), maps.len()));
    }
    for (i, ((keys, values), m)) in items.iter().zip(maps).enumerate() {
        let (mut g, mut w) = (
            entries(keys, values)?,
            entries(&keys_tensor(&m["keys"]), &tensor(&m["values"]).unwrap())?,
        );
        // Maps are unordered (onnxruntime hands them out sorted by key).
        g.sort_by(|a, b| a.0.cmp(&b.0));
        w.sort_by(|a, b| a.0.cmp(&b.0));
        if g.iter().map(|e| &e.0).ne(w.iter().map(|e| &e.0)) {
            return Err(format!("map {i}: keys {g:?}, want {w:?}"));
        }
        for ((k, a), (_, b)) in g.iter().zip(&w) {
            if (a - b).abs() > atol + rtol * b.abs() {
                return Err(format!("map {i} key {k}: got {a}, want {b}"));
            }
        }
    }
    Ok(())
}

/// A map's (key, value) pairs; int64 keys as sortable zero-padded text.
fn entries(keys: &Tensor, values: &Tensor) -> Result<Vec<(String, f64)>, String> {
    let k: Vec<String> = if keys.dtype() == DataType::String {
        keys.strings().to_vec()
    } else {
        let ints = keys
            .to_i64_vec()
            .ok_or("keys are neither strings nor integers")?;
        ints.iter().map(|v| format!("{:+021}", v)).collect()
    };
    let v = values.to_f64_vec().ok_or("values are not numeric")?;
    if k.len() != v.len() {
        return Err(format!("{} keys but {} values", k.len(), v.len()));
    }
    Ok(k.into_iter().zip(v).collect())
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
    let (_, factory) = registry()
        .lookup(domain, op, opset)
        .ok_or(format!("no kernel for {domain}::{op} opset {opset}"))?;
    let kernel = factory(&BuildContext::new(&node, opset)).map_err(|e| format!("build: {e}"))?;
    let vals: Vec<Option<Value>> = inputs.into_iter().map(|t| t.map(Value::Tensor)).collect();
    let refs: Vec<Option<&Value>> = vals.iter().map(|v| v.as_ref()).collect();
    let outs = kernel.run(&refs).map_err(|e| format!("run: {e}"))?;
    let (rtol, atol) = (c["rtol"].as_f64().unwrap(), c["atol"].as_f64().unwrap());
    for (i, w) in c["outputs"].as_array().unwrap().iter().enumerate() {
        let got = outs.get(i).ok_or(format!("output {i} missing"))?;
        compare_value(got, w, rtol, atol).map_err(|e| format!("output {i}: {e}"))?;
    }
    Ok(())
}

#[test]
fn quant_ml_reference_cases() {
    let dir = env!("CARGO_MANIFEST_DIR");
    let out = std::env::temp_dir().join(format!("quant_ml_cases_{}.json", std::process::id()));
    let have_python = Command::new("python3")
        .args(["-c", "import onnx, onnxruntime, numpy"])
        .status()
        .is_ok_and(|s| s.success());
    if !have_python {
        // CI installs them (scripts/requirements-test.txt): there a skip would hide the test.
        assert!(
            std::env::var_os("CI").is_none(),
            "CI needs python3 with onnx, onnxruntime and numpy (pip install -r scripts/requirements-test.txt)"
        );
        eprintln!("skipped: python3 with onnx, onnxruntime and numpy makes the reference cases");
        return;
    }
    let status = Command::new("python3")
        .arg(format!("{dir}/tests/quant_ml/make_cases.py"))
        .arg(&out)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "making the reference cases failed");
    let text = std::fs::read_to_string(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let cases: Vec<J> = serde_json::from_str(&text).unwrap();
    let filter = std::env::var("QUANT_ML_CASES").unwrap_or_default();
    let (mut passed, mut failures) = (0, vec![]);
    for c in &cases {
        let name = c["name"].as_str().unwrap();
        if !name.starts_with(&filter) {
            continue;
        }
        match run_case(c) {
            Ok(()) => passed += 1,
            Err(m) => failures.push(format!("{name} ({}): {m}", c["source"])),
        }
    }
    for f in &failures {
        eprintln!("FAIL {f}");
    }
    eprintln!("{passed} passed, {} failed", failures.len());
    assert!(passed > 0, "no case ran");
    assert!(failures.is_empty(), "{} cases failed", failures.len());
}
