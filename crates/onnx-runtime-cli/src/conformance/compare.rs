//! Output comparison as the ONNX backend test runner does it: same kind, dtype and shape;
//! numbers within `atol + rtol * |expected|` (NaN equals NaN, infinities must match);
//! strings exactly; sequences, optionals and maps element by element.

use half::{bf16, f16};
use onnx_runtime_ep_cpu::{Tensor, Value};
use onnx_runtime_ir::DataType;

#[derive(Clone, Copy, Debug)]
pub struct Tolerance {
    pub rtol: f64,
    pub atol: f64,
}

impl Default for Tolerance {
    fn default() -> Self {
        Tolerance {
            rtol: 1e-3,
            atol: 1e-7,
        }
    }
}

/// `Ok` if `got` matches `want`; otherwise what differs.
pub fn compare(got: &Value, want: &Value, tol: Tolerance) -> Result<(), String> {
    match (got, want) {
        (Value::Tensor(g), Value::Tensor(w)) => compare_tensors(g, w, tol),
        (Value::Sequence { items: g, .. }, Value::Sequence { items: w, .. }) => {
            if g.len() != w.len() {
                return Err(format!(
                    "sequence length {} != expected {}",
                    g.len(),
                    w.len()
                ));
            }
            for (i, (g, w)) in g.iter().zip(w).enumerate() {
                compare_tensors(g, w, tol).map_err(|e| format!("sequence element {i}: {e}"))?;
            }
            Ok(())
        }
        (Value::Optional(None), Value::Optional(None)) => Ok(()),
        (Value::Optional(Some(g)), Value::Optional(Some(w))) => compare(g, w, tol),
        // An optional holding a value compares with the bare value (test data may store
        // either form).
        (Value::Optional(Some(g)), w) if !matches!(w, Value::Optional(_)) => compare(g, w, tol),
        (g, Value::Optional(Some(w))) if !matches!(g, Value::Optional(_)) => compare(g, w, tol),
        (
            Value::Map {
                keys: gk,
                values: gv,
            },
            Value::Map {
                keys: wk,
                values: wv,
            },
        ) => {
            compare_tensors(gk, wk, tol).map_err(|e| format!("map keys: {e}"))?;
            compare_tensors(gv, wv, tol).map_err(|e| format!("map values: {e}"))
        }
        (Value::MapSequence(g), Value::MapSequence(w)) => {
            if g.len() != w.len() {
                return Err(format!("{} maps, expected {}", g.len(), w.len()));
            }
            for (i, ((gk, gv), (wk, wv))) in g.iter().zip(w).enumerate() {
                compare_tensors(gk, wk, tol).map_err(|e| format!("map {i} keys: {e}"))?;
                compare_tensors(gv, wv, tol).map_err(|e| format!("map {i} values: {e}"))?;
            }
            Ok(())
        }
        (g, w) => Err(format!("got a {}, expected a {}", describe(g), describe(w))),
    }
}

fn describe(v: &Value) -> String {
    match v {
        Value::Optional(None) => "empty optional".into(),
        other => other.kind_name().into(),
    }
}

/// Widens elements to f64 (complex numbers as (re, im) pairs); `None` for types compared
/// byte for byte.
fn as_f64(t: &Tensor) -> Option<Vec<f64>> {
    match t.dtype() {
        DataType::Complex64 => Some(t.data::<f32>().iter().map(|&v| v as f64).collect()),
        DataType::Complex128 => Some(t.data::<f64>().to_vec()),
        DataType::Float16 => Some(t.data::<f16>().iter().map(|v| v.to_f64()).collect()),
        DataType::BFloat16 => Some(t.data::<bf16>().iter().map(|v| v.to_f64()).collect()),
        _ => t.to_f64_vec(),
    }
}

fn compare_tensors(got: &Tensor, want: &Tensor, tol: Tolerance) -> Result<(), String> {
    if got.dtype() != want.dtype() {
        return Err(format!(
            "dtype {} != expected {}",
            got.dtype(),
            want.dtype()
        ));
    }
    if got.shape() != want.shape() {
        return Err(format!(
            "shape {:?} != expected {:?}",
            got.shape(),
            want.shape()
        ));
    }
    if got.dtype() == DataType::String {
        for (i, (g, w)) in got.strings().iter().zip(want.strings()).enumerate() {
            if g != w {
                return Err(format!("element {i}: {g:?} != expected {w:?}"));
            }
        }
        return Ok(());
    }
    // Exact integer comparison avoids f64 rounding of large 64-bit values.
    if matches!(got.dtype(), DataType::Int64 | DataType::Uint64) {
        let (g, w) = (got.bytes(), want.bytes());
        if g == w {
            return Ok(());
        }
        let (g, w) = (
            got.to_i64_vec().unwrap_or_default(),
            want.to_i64_vec().unwrap_or_default(),
        );
        let bad = g.iter().zip(&w).position(|(a, b)| a != b).unwrap_or(0);
        return Err(mismatch(
            bad,
            g[bad] as f64,
            w[bad] as f64,
            g.len(),
            count_ne(&g, &w),
        ));
    }
    let (Some(g), Some(w)) = (as_f64(got), as_f64(want)) else {
        return if got.bytes() == want.bytes() {
            Ok(())
        } else {
            let i = got
                .bytes()
                .iter()
                .zip(want.bytes())
                .position(|(a, b)| a != b)
                .unwrap_or(0);
            Err(format!("{} bytes differ from byte {i} on", got.dtype()))
        };
    };
    let mut first = None;
    let mut count = 0;
    for (i, (&a, &b)) in g.iter().zip(&w).enumerate() {
        let ok = if a.is_nan() || b.is_nan() {
            a.is_nan() && b.is_nan()
        } else if a.is_infinite() || b.is_infinite() {
            a == b
        } else {
            (a - b).abs() <= tol.atol + tol.rtol * b.abs()
        };
        if !ok {
            count += 1;
            first.get_or_insert(i);
        }
    }
    match first {
        None => Ok(()),
        Some(i) => Err(mismatch(i, g[i], w[i], g.len(), count)),
    }
}

fn count_ne(a: &[i64], b: &[i64]) -> usize {
    a.iter().zip(b).filter(|(x, y)| x != y).count()
}

fn mismatch(i: usize, got: f64, want: f64, n: usize, count: usize) -> String {
    format!("{count} of {n} values differ; first at flat index {i}: got {got}, expected {want}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(v: &[f32]) -> Value {
        Value::Tensor(Tensor::from_slice(vec![v.len()], v))
    }

    #[test]
    fn tolerances_nan_and_shapes() {
        let tol = Tolerance::default();
        assert!(compare(&f(&[1.0, f32::NAN]), &f(&[1.0005, f32::NAN]), tol).is_ok());
        assert!(compare(&f(&[1.0]), &f(&[1.002]), tol).is_err());
        assert!(compare(&f(&[f32::INFINITY]), &f(&[f32::INFINITY]), tol).is_ok());
        assert!(compare(&f(&[f32::INFINITY]), &f(&[f32::NEG_INFINITY]), tol).is_err());
        assert!(compare(&f(&[0.0]), &f(&[1e-8]), tol).is_ok());
        let err = compare(&f(&[1.0, 2.0]), &f(&[1.0]), tol).unwrap_err();
        assert!(err.contains("shape"), "{err}");
        let i = Value::Tensor(Tensor::from_vec(vec![1], vec![1i64 << 60]));
        let j = Value::Tensor(Tensor::from_vec(vec![1], vec![(1i64 << 60) + 1]));
        assert!(compare(&i, &j, tol).is_err(), "int64 is exact");
        let d = Value::Tensor(Tensor::from_vec(vec![1], vec![1i32]));
        assert!(compare(&d, &i, tol).unwrap_err().contains("dtype"));
    }

    #[test]
    fn containers() {
        let tol = Tolerance::default();
        let s = |v: &[f32]| Value::Sequence {
            dtype: DataType::Float32,
            items: vec![Tensor::from_slice(vec![v.len()], v)],
        };
        assert!(compare(&s(&[1.0]), &s(&[1.0]), tol).is_ok());
        assert!(compare(&s(&[1.0]), &s(&[2.0]), tol).is_err());
        assert!(compare(&Value::Optional(None), &Value::Optional(None), tol).is_ok());
        assert!(compare(&Value::Optional(None), &f(&[1.0]), tol).is_err());
        let strs = |v: &str| Value::Tensor(Tensor::from_strings(vec![1], vec![v.into()]));
        assert!(compare(&strs("a"), &strs("a"), tol).is_ok());
        assert!(compare(&strs("a"), &strs("b"), tol).is_err());
    }
}
