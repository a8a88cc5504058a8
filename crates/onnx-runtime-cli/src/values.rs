//! Reading inputs from files, writing outputs, random inputs and on-screen summaries.

use crate::npy;
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::{DataType, Dim, ValueType};
use onnx_runtime_session::convert::{value_from_data, value_to_data};
use onnx_runtime_session::{describe_type, describe_value, IoInfo};
use std::collections::HashMap;
use std::path::Path;

/// Reads a value from a `.npy` file or a serialized ONNX proto (`.pb`, read as the type the
/// model declares for the input).
pub fn read_value_file(path: &Path, ty: Option<&ValueType>) -> Result<Value, String> {
    let bytes = std::fs::read(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    let is_npy = path.extension().is_some_and(|e| e == "npy");
    if is_npy {
        return npy::read(&bytes)
            .map(Value::Tensor)
            .map_err(|e| format!("{}: {e}", path.display()));
    }
    let default_ty = ValueType::Tensor {
        dtype: DataType::Undefined,
        shape: None,
    };
    let ty = ty.unwrap_or(&default_ty);
    let data = onnx_runtime_loader::data::read_value(&bytes, ty)
        .map_err(|e| e.in_file(path).to_string())?;
    value_from_data(&data, Some(ty)).map_err(|e| format!("{}: {e}", path.display()))
}

/// Writes a value as `.npy` (tensors of numeric or bool type) or as an ONNX proto (`.pb`),
/// chosen by the path's extension.
pub fn write_value_file(path: &Path, name: &str, v: &Value) -> Result<(), String> {
    let bytes = if path.extension().is_some_and(|e| e == "npy") {
        match v {
            Value::Tensor(t) => npy::write(t)?,
            other => {
                return Err(format!(
                    "output '{name}' is a {}; write it as .pb",
                    other.kind_name()
                ))
            }
        }
    } else {
        onnx_runtime_loader::data::write_value(&value_to_data(v, name))
    };
    std::fs::write(path, bytes).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A file name for a value name (graph names may hold `/` or `:`).
pub fn file_stem(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "-_.".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// Deterministic pseudo-random numbers (xorshift64*).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Uniform in [0, 1).
    pub fn unit(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The concrete shape for a declared one: symbolic dimensions from `dims` by name, else 1.
pub fn concrete_shape(ty: &ValueType, dims: &HashMap<String, usize>) -> Vec<usize> {
    match ty {
        ValueType::Tensor {
            shape: Some(shape), ..
        } => shape
            .dims()
            .iter()
            .map(|d| match d {
                Dim::Static(v) => *v,
                Dim::Symbolic(name) => dims.get(name).copied().unwrap_or(1),
            })
            .collect(),
        _ => vec![],
    }
}

/// A random tensor for a declared input: floats in [-1, 1), integers in [0, 10), random
/// bools, short strings.
pub fn random_input(
    io: &IoInfo,
    dims: &HashMap<String, usize>,
    rng: &mut Rng,
) -> Result<Value, String> {
    let ty = io.ty.as_ref().ok_or_else(|| {
        format!(
            "input '{}' has no declared type; pass it with --input",
            io.name
        )
    })?;
    let ValueType::Tensor { dtype, shape } = ty else {
        return Err(format!(
            "input '{}' is a {}; random inputs are tensors only, pass it with --input",
            io.name,
            describe_type(&io.ty)
        ));
    };
    if shape.is_none() {
        return Err(format!(
            "input '{}' has no declared rank; pass it with --input",
            io.name
        ));
    }
    let shape = concrete_shape(ty, dims);
    let n: usize = shape.iter().product();
    use half::{bf16, f16};
    let t = match dtype {
        DataType::Float32 => Tensor::from_vec(
            shape,
            (0..n).map(|_| rng.unit() as f32 * 2.0 - 1.0).collect(),
        ),
        DataType::Float64 => {
            Tensor::from_vec(shape, (0..n).map(|_| rng.unit() * 2.0 - 1.0).collect())
        }
        DataType::Float16 => Tensor::from_vec(
            shape,
            (0..n)
                .map(|_| f16::from_f64(rng.unit() * 2.0 - 1.0))
                .collect(),
        ),
        DataType::BFloat16 => Tensor::from_vec(
            shape,
            (0..n)
                .map(|_| bf16::from_f64(rng.unit() * 2.0 - 1.0))
                .collect(),
        ),
        DataType::Bool => {
            let v: Vec<bool> = (0..n).map(|_| rng.next_u64() & 1 == 1).collect();
            Tensor::from_bools(shape, &v)
        }
        DataType::String => Tensor::from_strings(
            shape,
            (0..n)
                .map(|_| format!("s{}", rng.next_u64() % 100))
                .collect(),
        ),
        d if d.is_integer() && d.element_size().is_some() => {
            let v: Vec<i64> = (0..n).map(|_| (rng.next_u64() % 10) as i64).collect();
            let width = d.element_size().unwrap_or(8);
            let bytes: Vec<u8> = v
                .iter()
                .flat_map(|x| x.to_le_bytes()[..width].to_vec())
                .collect();
            Tensor::from_bytes(*d, shape, &bytes)?
        }
        d => {
            return Err(format!(
            "input '{}' is {d}; random inputs of that type are not supported, pass it with --input",
            io.name
        ))
        }
    };
    Ok(Value::Tensor(t))
}

/// One line per value: name, type, shape, first elements, min/max/mean.
pub fn summarize(name: &str, v: &Value) -> String {
    match v {
        Value::Tensor(t) => format!("{name}: {}", summarize_tensor(t)),
        Value::Sequence { items, .. } => {
            let mut s = format!("{name}: {}", describe_value(v));
            for (i, t) in items.iter().take(4).enumerate() {
                s.push_str(&format!("\n  [{i}] {}", summarize_tensor(t)));
            }
            s
        }
        Value::Optional(Some(inner)) => summarize(&format!("{name} (optional)"), inner),
        other => format!("{name}: {}", describe_value(other)),
    }
}

fn summarize_tensor(t: &Tensor) -> String {
    let mut s = format!("{} {:?}", t.dtype(), t.shape());
    if t.dtype() == DataType::String {
        let first: Vec<&String> = t.strings().iter().take(6).collect();
        s.push_str(&format!(" {first:?}"));
        return s;
    }
    if t.dtype() == DataType::Bool {
        let v = t.to_i64_vec().unwrap_or_default();
        let first: Vec<&str> = v
            .iter()
            .take(6)
            .map(|&x| if x != 0 { "true" } else { "false" })
            .collect();
        let more = if v.len() > 6 { ", ..." } else { "" };
        let n_true = v.iter().filter(|&&x| x != 0).count();
        s.push_str(&format!(
            " [{}{more}] {n_true} true of {}",
            first.join(", "),
            v.len()
        ));
        return s;
    }
    if let Some(v) = integers(t) {
        // Integers as integers (through f64 they would print as 3.000000, and lose digits
        // past 2^53).
        let first: Vec<String> = v.iter().take(6).map(|x| x.to_string()).collect();
        let more = if v.len() > 6 { ", ..." } else { "" };
        s.push_str(&format!(" [{}{more}]", first.join(", ")));
        if let (Some(min), Some(max)) = (v.iter().min(), v.iter().max()) {
            let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
            s.push_str(&format!(" min {min} max {max} mean {mean:.6}"));
        }
        return s;
    }
    if let Some(v) = t.to_f64_vec() {
        let first: Vec<String> = v.iter().take(6).map(|x| format!("{x:.6}")).collect();
        let more = if v.len() > 6 { ", ..." } else { "" };
        s.push_str(&format!(" [{}{more}]", first.join(", ")));
        if !v.is_empty() {
            let min = v.iter().copied().fold(f64::INFINITY, f64::min);
            let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            let mean = v.iter().sum::<f64>() / v.len() as f64;
            s.push_str(&format!(" min {min:.6} max {max:.6} mean {mean:.6}"));
        }
    }
    s
}

/// The elements of an integer tensor (int8..int64, uint8..uint64), exactly.
fn integers(t: &Tensor) -> Option<Vec<i128>> {
    match t.dtype() {
        DataType::Uint64 => Some(t.data::<u64>().iter().map(|&x| x as i128).collect()),
        d if d.is_integer() => t
            .to_i64_vec()
            .map(|v| v.into_iter().map(i128::from).collect()),
        _ => None,
    }
}

/// Parses `name=value` pairs.
pub fn parse_pairs(items: &[String], what: &str) -> Result<Vec<(String, String)>, String> {
    items
        .iter()
        .map(|s| {
            s.split_once('=')
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .ok_or_else(|| format!("{what} '{s}' must be NAME=VALUE"))
        })
        .collect()
}

/// `--dim name=value` options as a map.
pub fn parse_dims(items: &[String]) -> Result<HashMap<String, usize>, String> {
    parse_pairs(items, "--dim")?
        .into_iter()
        .map(|(k, v)| {
            v.parse::<usize>()
                .map(|n| (k, n))
                .map_err(|_| format!("--dim value '{v}' is not a size"))
        })
        .collect()
}
