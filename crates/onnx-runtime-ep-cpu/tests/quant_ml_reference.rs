//! Runs the CPU kernels of the quantization ops (DynamicQuantizeLinear, MatMulInteger,
//! com.microsoft DynamicQuantizeLSTM), PRelu and the ai.onnx.ml ops (SVMClassifier,
//! SVMRegressor, ZipMap) on the cases of `tests/quant_ml/make_cases.py`: seeded random
//! single-node models whose expected outputs come from onnxruntime (CPU) or float64 numpy math
//! (each case names its source and tolerance). Needs python3 with onnx, onnxruntime and numpy.
//! Set `QUANT_ML_CASES` to a name prefix to run a subset.

mod support;

use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::DataType;
use serde_json::Value as J;
use support::tensor;

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
        return support::compare_tensor(got, want, rtol, atol);
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

#[test]
fn quant_ml_reference_cases() {
    support::run_suite(support::Suite {
        script: "quant_ml/make_cases.py",
        modules: "onnx, onnxruntime, numpy",
        filter_var: "QUANT_ML_CASES",
        skip: |_| false,
        missing_fails: true,
        check: compare_value,
    });
}
