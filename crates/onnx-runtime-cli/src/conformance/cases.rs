//! Finding backend test cases on disk and running one.
//!
//! Two layouts: the standard one (a folder with `model.onnx` and `test_data_set_*/input_*.pb`,
//! `output_*.pb`), and the `light` one (`light_NAME.onnx` beside `light_NAME_output_*.pb`,
//! whose input is `arange(n) / n` as float32, as the ONNX backend runner generates it).

use super::compare::{compare, Tolerance};
use crate::values::read_value_file;
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::ValueType;
use onnx_runtime_session::{Session, SessionOptions};
use std::path::{Path, PathBuf};

pub struct Case {
    pub name: String,
    pub model: PathBuf,
    pub data: CaseData,
    pub tol: Tolerance,
}

pub enum CaseData {
    /// `test_data_set_*` folders.
    DataSets(Vec<PathBuf>),
    /// Expected output files of a `light` model.
    Light(Vec<PathBuf>),
}

fn sorted_entries(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|r| r.filter_map(|e| e.ok().map(|e| e.path())).collect())
        .unwrap_or_default();
    v.sort();
    v
}

/// Numbered files `PREFIX_<i>.pb` in `dir`, in index order.
fn numbered(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    let mut v: Vec<(usize, PathBuf)> = sorted_entries(dir)
        .into_iter()
        .filter_map(|p| {
            let name = p.file_name()?.to_str()?;
            let idx = name
                .strip_prefix(prefix)?
                .strip_suffix(".pb")?
                .parse()
                .ok()?;
            Some((idx, p))
        })
        .collect();
    v.sort();
    v.into_iter().map(|(_, p)| p).collect()
}

/// A case folder's tolerance: `data.json` (`rtol`, `atol`) beside the model if present, or
/// in `../real/test_NAME/` for light models.
fn tolerance(json: &Path) -> Tolerance {
    let mut tol = Tolerance::default();
    if let Ok(text) = std::fs::read_to_string(json) {
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&text) {
            if let Some(r) = v.get("rtol").and_then(|x| x.as_f64()) {
                tol.rtol = r;
            }
            if let Some(a) = v.get("atol").and_then(|x| x.as_f64()) {
                tol.atol = a;
            }
        }
    }
    tol
}

/// Every case under `path`: a case folder, a folder of case folders, or a light folder.
pub fn discover(path: &Path, out: &mut Vec<Case>) -> Result<(), String> {
    if !path.is_dir() {
        return Err(format!("{} is not a folder", path.display()));
    }
    let model = path.join("model.onnx");
    if model.is_file() {
        let sets: Vec<PathBuf> = sorted_entries(path)
            .into_iter()
            .filter(|p| {
                p.is_dir()
                    && p.file_name()
                        .and_then(|n| n.to_str())
                        .is_some_and(|n| n.starts_with("test_data_set_"))
            })
            .collect();
        out.push(Case {
            name: path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default(),
            model,
            data: CaseData::DataSets(sets),
            tol: tolerance(&path.join("data.json")),
        });
        return Ok(());
    }
    for entry in sorted_entries(path) {
        if entry.is_dir() {
            discover(&entry, out)?;
        } else if let Some(stem) = entry
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(|n| n.strip_suffix(".onnx"))
        {
            let expected = numbered(path, &format!("{stem}_output_"));
            if expected.is_empty() {
                continue;
            }
            let short = stem.strip_prefix("light_").unwrap_or(stem);
            let json = path.join(format!("../real/test_{short}/data.json"));
            out.push(Case {
                name: stem.to_string(),
                model: entry.clone(),
                data: CaseData::Light(expected),
                tol: tolerance(&json),
            });
        }
    }
    Ok(())
}

/// `arange(n).reshape(shape) / n` as float32, symbolic dims 1: the ONNX runner's dummy input.
fn dummy_input(ty: &Option<ValueType>) -> Result<Value, String> {
    let shape = match ty {
        Some(t @ ValueType::Tensor { .. }) => crate::values::concrete_shape(t, &Default::default()),
        _ => return Err("light models take tensor inputs".into()),
    };
    let n: usize = shape.iter().product();
    let v: Vec<f32> = (0..n).map(|i| (i as f64 / n as f64) as f32).collect();
    Ok(Value::Tensor(Tensor::from_vec(shape, v)))
}

/// Where a passing case's nodes ran, with an accelerator.
#[derive(Clone, Debug, Default)]
pub struct DeviceUse {
    /// Node calls that ran on the device.
    pub calls: usize,
    /// Device node calls whose kernel refused the inputs at run time (the CPU ran them).
    pub refused: usize,
    /// The ops of the main graph's nodes placed on the host, each once.
    pub host_ops: Vec<String>,
}

impl DeviceUse {
    /// Every node that ran (folded constants excepted) ran on the device.
    pub fn all_on_device(&self) -> bool {
        self.host_ops.is_empty() && self.refused == 0
    }
}

/// Runs one case; `Ok` says where its nodes ran, `Err` says why the case failed.
pub fn run_case(case: &Case, options: &SessionOptions) -> Result<DeviceUse, String> {
    let model = onnx_runtime_loader::Model::load(&case.model).map_err(|e| format!("load: {e}"))?;
    let session = Session::from_model(model, options.clone()).map_err(|e| e.to_string())?;
    let required: Vec<_> = session.required_inputs().cloned().collect();
    let outputs = session.outputs().to_vec();
    let mut datasets: Vec<(Vec<Value>, Vec<PathBuf>, String)> = Vec::new();
    match &case.data {
        CaseData::DataSets(sets) => {
            if sets.is_empty() {
                return Err("no test_data_set_* folder".into());
            }
            for set in sets {
                let inputs = numbered(set, "input_")
                    .iter()
                    .enumerate()
                    .map(|(i, p)| {
                        let ty = required.get(i).and_then(|io| io.ty.as_ref());
                        read_value_file(p, ty)
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let set_name = set
                    .file_name()
                    .map(|n| n.to_string_lossy().into_owned())
                    .unwrap_or_default();
                datasets.push((inputs, numbered(set, "output_"), set_name));
            }
        }
        CaseData::Light(expected) => {
            let inputs = required
                .iter()
                .map(|io| dummy_input(&io.ty))
                .collect::<Result<Vec<_>, _>>()?;
            datasets.push((inputs, expected.clone(), String::new()));
        }
    }
    for (inputs, expected, set_name) in datasets {
        let at = if set_name.is_empty() {
            String::new()
        } else {
            format!("{set_name}: ")
        };
        if inputs.len() > required.len() {
            return Err(format!(
                "{at}{} input files but the model takes {} inputs",
                inputs.len(),
                required.len()
            ));
        }
        let feeds: Vec<(&str, Value)> = required
            .iter()
            .zip(inputs)
            .map(|(io, v)| (io.name.as_str(), v))
            .collect();
        let got = session.run(&feeds).map_err(|e| format!("{at}{e}"))?;
        if expected.len() > got.len() {
            return Err(format!(
                "{at}{} expected outputs, the model gave {}",
                expected.len(),
                got.len()
            ));
        }
        for (i, path) in expected.iter().enumerate() {
            let want = read_value_file(path, outputs[i].ty.as_ref())?;
            compare(&got[i].1, &want, case.tol)
                .map_err(|e| format!("{at}output {i} '{}': {e}", got[i].0))?;
        }
    }
    let (calls, refused) = session.device_calls();
    let mut host_ops: Vec<String> = session.host_nodes().iter().map(|h| h.op.clone()).collect();
    host_ops.sort();
    host_ops.dedup();
    Ok(DeviceUse {
        calls,
        refused,
        host_ops,
    })
}
