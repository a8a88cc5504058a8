//! Sigmoid, Tanh and the tanh/sigmoid GELUs against onnxruntime bit for bit:
//! `tests/activation/make_sweep.py` runs onnxruntime's CPU provider over a dense float32 sweep
//! (every 4093rd bit pattern, the neighbourhoods of the approximations' clamp and overshoot
//! points, subnormals, +-0, +-inf, NaNs) for Sigmoid, Tanh, Gelu (approximate="tanh"),
//! com.microsoft FastGelu and QuickGelu, and over all 65536 float16 patterns for Sigmoid and
//! Tanh (onnxruntime casts float16 to float32 around its float32 kernels). The CPU kernels here
//! must give the same bits, NaN payloads included, through the registered kernels (run-time
//! AVX2+FMA dispatch, thread split) and, for Sigmoid and Tanh, through the plain scalar
//! functions. Needs python3 with onnx, onnxruntime and numpy (under CI a missing module fails).

mod support;

use onnx_runtime_ep_cpu::ops::math::vecmath;
use onnx_runtime_ep_cpu::Tensor;
use onnx_runtime_ir::{Attribute, DataType};
use std::process::Command;

/// One dtype's sweep: the input bit patterns and onnxruntime's outputs, one list per op.
struct Sweep {
    x: Vec<u32>,
    outs: Vec<Vec<u32>>,
}

/// (op, domain, opset, attributes) in make_sweep.py's OPS order.
type OpSpec = (
    &'static str,
    &'static str,
    u64,
    fn() -> Vec<(String, Attribute)>,
);

const F32_OPS: [OpSpec; 5] = [
    ("Sigmoid", "", 13, Vec::new),
    ("Tanh", "", 13, Vec::new),
    ("Gelu", "", 20, || {
        vec![("approximate".into(), Attribute::String("tanh".into()))]
    }),
    ("FastGelu", "com.microsoft", 1, Vec::new),
    ("QuickGelu", "com.microsoft", 1, || {
        vec![("alpha".into(), Attribute::Float(1.702))]
    }),
];
const F16_OPS: [OpSpec; 2] = [("Sigmoid", "", 13, Vec::new), ("Tanh", "", 13, Vec::new)];

/// Reads one section (count, then the inputs and `n_ops` outputs of `width`-byte elements)
/// from `b` at `*at`.
fn section(b: &[u8], at: &mut usize, width: usize, n_ops: usize) -> Sweep {
    let n = u32::from_le_bytes(b[*at..*at + 4].try_into().unwrap()) as usize;
    *at += 4;
    let mut arr = || {
        let v = words(&b[*at..*at + n * width], width);
        *at += n * width;
        v
    };
    let x = arr();
    let outs = (0..n_ops).map(|_| arr()).collect();
    Sweep { x, outs }
}

/// Little-endian `width`-byte words as u32.
fn words(b: &[u8], width: usize) -> Vec<u32> {
    b.chunks_exact(width)
        .map(|c| {
            let mut w = [0u8; 4];
            w[..width].copy_from_slice(c);
            u32::from_le_bytes(w)
        })
        .collect()
}

/// (float32 sweep, float16 sweep, onnxruntime version), or `None` when skipped.
fn load() -> Option<(Sweep, Sweep, String)> {
    if !support::python_has("onnx, onnxruntime, numpy") {
        return None;
    }
    let out = std::env::temp_dir().join(format!("activation_sweep_{}.bin", std::process::id()));
    let status = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/activation/make_sweep.py"
        ))
        .arg(&out)
        .status()
        .expect("python3 runs");
    assert!(status.success(), "make_sweep.py failed");
    let b = std::fs::read(&out).unwrap();
    let _ = std::fs::remove_file(&out);
    let mut at = 0;
    let f32s = section(&b, &mut at, 4, F32_OPS.len());
    let f16s = section(&b, &mut at, 2, F16_OPS.len());
    let version = String::from_utf8_lossy(&b[at..]).into_owned();
    Some((f32s, f16s, version))
}

/// Distance in representable values between two finite floats of the same width (bits as
/// sign-magnitude, `sign` the sign bit).
fn ulps(a: u32, b: u32, sign: u32) -> u64 {
    let key = |v: u32| -> i64 {
        if v & sign != 0 {
            -((v & !sign) as i64)
        } else {
            v as i64
        }
    };
    (key(a) - key(b)).unsigned_abs()
}

/// Runs `spec`'s op on the sweep's inputs as a `dtype` tensor through the registered kernel.
fn run(spec: &OpSpec, dtype: DataType, x: &[u32]) -> Vec<u32> {
    let (op, domain, opset, attrs) = spec;
    let width = dtype.bit_width().unwrap() / 8;
    let bytes: Vec<u8> = x
        .iter()
        .flat_map(|v| v.to_le_bytes()[..width].to_vec())
        .collect();
    let t = Tensor::from_bytes(dtype, vec![x.len()], &bytes).unwrap();
    let outs = support::run_node(op, domain, *opset, vec![Some(t)], 1, attrs()).unwrap();
    let y = outs[0].as_tensor().unwrap();
    assert_eq!((y.dtype(), y.shape()), (dtype, &[x.len()][..]));
    words(y.bytes(), width)
}

/// Prints how `got` agrees with onnxruntime's `want` and fails on the first differing bits.
fn agree(what: &str, x: &[u32], got: &[u32], want: &[u32], sign: u32) {
    let differ: Vec<usize> = (0..x.len()).filter(|&i| got[i] != want[i]).collect();
    let worst = differ
        .iter()
        .map(|&i| ulps(got[i], want[i], sign))
        .max()
        .unwrap_or(0);
    eprintln!(
        "{what}: {} of {} bit-equal to onnxruntime (worst {worst} ulp)",
        x.len() - differ.len(),
        x.len()
    );
    if let Some(&i) = differ.first() {
        panic!(
            "{what}: input {:#x} gives {:#x}, onnxruntime {:#x} ({} inputs differ)",
            x[i],
            got[i],
            want[i],
            differ.len()
        );
    }
}

#[test]
fn activations_are_bit_equal_to_onnxruntime() {
    let Some((s32, s16, version)) = load() else {
        return;
    };
    eprintln!("reference: {version}");
    assert!(s32.x.len() > 1_000_000 && s16.x.len() == 65536);
    const SIGN32: u32 = 0x8000_0000;
    // The registered kernels (AVX2+FMA where the CPU has them, split across threads).
    for (spec, want) in F32_OPS.iter().zip(&s32.outs) {
        let got = run(spec, DataType::Float32, &s32.x);
        agree(
            &format!("{} f32 kernel", spec.0),
            &s32.x,
            &got,
            want,
            SIGN32,
        );
    }
    // The scalar functions, not compiled for AVX2 here (their FMAs are `mul_add` calls).
    let plain = |f: fn(f32) -> f32| -> Vec<u32> {
        s32.x
            .iter()
            .map(|&b| f(f32::from_bits(b)).to_bits())
            .collect()
    };
    type Scalar = fn(f32) -> f32;
    let scalar: [(&str, Scalar); 3] = [
        ("Sigmoid", vecmath::sigmoid),
        ("Tanh", vecmath::tanh),
        ("Gelu tanh", vecmath::gelu_tanh),
    ];
    for ((name, f), want) in scalar.iter().zip(&s32.outs) {
        agree(
            &format!("{name} f32 scalar"),
            &s32.x,
            &plain(*f),
            want,
            SIGN32,
        );
    }
    // float16: onnxruntime runs Cast -> float32 kernel -> Cast.
    for (spec, want) in F16_OPS.iter().zip(&s16.outs) {
        let got = run(spec, DataType::Float16, &s16.x);
        agree(
            &format!("{} f16 kernel", spec.0),
            &s16.x,
            &got,
            want,
            0x8000,
        );
    }
}
