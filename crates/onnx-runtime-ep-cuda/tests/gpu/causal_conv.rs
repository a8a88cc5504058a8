//! CausalConvWithState (opset 27) against the CPU provider on random inputs: float32,
//! float16 and bfloat16; with and without bias and past_state; activation none / silu /
//! swish; kernel sizes 1 to 7; lengths shorter than k - 1, decode (L = 1) and long rows;
//! batch > 1 and many channels; strided (reversed and padded) views; present_state left off;
//! bad shapes, dtypes and attributes.
//!
//! The output of half types is checked against a float32 CPU reference on the same (upcast)
//! values, within 1e-5 (float32), 4e-3 (float16) or 2e-2 (bfloat16) relative plus the same
//! absolute; present_state only moves values, so it must equal the CPU's bit for bit.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, ExecutionProvider};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const F32: DataType = DataType::Float32;
const F16: DataType = DataType::Float16;
const BF16: DataType = DataType::BFloat16;
const DTYPES: [DataType; 3] = [F32, F16, BF16];
const OPSET: u64 = 27;

fn tol(dtype: DataType) -> f64 {
    match dtype {
        F16 => 4e-3,
        BF16 => 2e-2,
        _ => 1e-5,
    }
}

fn conv_node(activation: Option<&str>, bias: bool, past: bool) -> Node {
    let attrs: Vec<(&str, Attribute)> = activation
        .map(|a| ("activation", Attribute::String(a.into())))
        .into_iter()
        .collect();
    let mut n = node("CausalConvWithState", 4, 2, &attrs);
    if !bias {
        n.inputs[2] = None;
    }
    if !past {
        n.inputs[3] = None;
    }
    n
}

/// Runs `node` on the GPU and checks it against the CPU provider (see the module doc).
fn check(ep: &CudaExecutionProvider, node: &Node, inputs: &[Option<T>], what: &str) {
    let native = reference(node, OPSET, inputs, what);
    let up: Vec<Option<T>> = inputs.iter().map(|t| t.as_ref().map(half_as_f32)).collect();
    let want = reference(node, OPSET, &up, what);
    let wired: Vec<T> = inputs.iter().flatten().cloned().collect();
    let shapes: Vec<Vec<usize>> = wired.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep
        .get_kernel(node, &shapes, OPSET)
        .unwrap_or_else(|e| panic!("{what}: get_kernel: {e}"));
    assert_eq!(
        kernel.capture_support(),
        CaptureSupport::Supported,
        "{what}"
    );
    let mut bound = Bound::new(ep, &wired, &[]);
    let types = bound.output_types(kernel.as_ref()).unwrap();
    let native_types: Vec<(DataType, Vec<usize>)> =
        native.iter().map(|t| (t.dtype, t.shape.clone())).collect();
    assert_eq!(types, native_types, "{what}: output_types vs the CPU");
    bound.set_outputs(&types);
    bound
        .execute(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: execute: {e}"));
    let got = bound.read().unwrap();
    let t = tol(got[0].dtype);
    close_values(&got[0], &want[0], t, t, &format!("{what}: output"));
    assert_same(&got[1], &native[1], &format!("{what}: present_state"));
}

/// Input (b, c, l), weight (c, 1, k), bias (c) and past_state (b, c, k - 1) as asked.
fn inputs(
    rng: &mut Rng,
    dtype: DataType,
    (b, c, l, k): (usize, usize, usize, usize),
    bias: bool,
    past: bool,
) -> Vec<Option<T>> {
    vec![
        Some(uniform(rng, dtype, &[b, c, l], -2.0, 2.0)),
        Some(uniform(rng, dtype, &[c, 1, k], -1.0, 1.0)),
        bias.then(|| uniform(rng, dtype, &[c], -1.0, 1.0)),
        past.then(|| uniform(rng, dtype, &[b, c, k - 1], -2.0, 2.0)),
    ]
}

#[test]
fn every_dtype_activation_and_optional_input() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    for dtype in DTYPES {
        for activation in [None, Some("none"), Some("silu"), Some("swish")] {
            for bias in [false, true] {
                for past in [false, true] {
                    let n = conv_node(activation, bias, past);
                    let ins = inputs(&mut rng, dtype, (2, 5, 9, 4), bias, past);
                    let what = format!("{dtype} {activation:?} bias {bias} past {past}");
                    check(&ep, &n, &ins, &what);
                }
            }
        }
    }
}

#[test]
fn kernel_sizes_lengths_and_batches() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    // (b, c, l, k): k = 1 (empty state), L < k - 1, decode, long rows, many channels.
    let shapes = [
        (1, 1, 1, 1),
        (3, 4, 6, 1),
        (2, 3, 2, 7),
        (1, 6, 1, 4),
        (4, 96, 1, 4),
        (2, 7, 301, 3),
        (3, 130, 17, 5),
        (1, 1, 0, 3),
    ];
    for dtype in DTYPES {
        for shape in shapes {
            for past in [false, true] {
                let n = conv_node(Some("silu"), true, past);
                let ins = inputs(&mut rng, dtype, shape, true, past);
                check(&ep, &n, &ins, &format!("{dtype} {shape:?} past {past}"));
            }
        }
    }
}

#[test]
fn strided_views() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    let layouts = [Layout::Reversed, Layout::Padded];
    for dtype in DTYPES {
        for shift in 0..2 {
            let n = conv_node(Some("silu"), true, true);
            let ins: Vec<Option<T>> = inputs(&mut rng, dtype, (3, 6, 10, 4), true, true)
                .into_iter()
                .enumerate()
                .map(|(i, t)| t.map(|t| t.with_layout(layouts[(i + shift) % 2])))
                .collect();
            check(&ep, &n, &ins, &format!("strided {dtype} shift {shift}"));
        }
    }
}

#[test]
fn present_state_may_be_left_off() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    let n = conv_node(None, true, true);
    let ins = inputs(&mut rng, F32, (2, 3, 5, 3), true, true);
    let want = reference(&n, OPSET, &ins, "one output");
    let wired: Vec<T> = ins.iter().flatten().cloned().collect();
    let shapes: Vec<Vec<usize>> = wired.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(&n, &shapes, OPSET).unwrap();
    let mut bound = Bound::new(&ep, &wired, &[(F32, want[0].shape.clone())]);
    bound.execute(kernel.as_ref()).unwrap();
    let got = bound.read().unwrap();
    assert_eq!(got.len(), 1);
    close_values(
        &got[0],
        &want[0],
        1e-5,
        1e-5,
        "output without present_state",
    );
}

#[test]
fn bad_inputs_and_attributes_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    let n = conv_node(None, true, true);
    let good = inputs(&mut rng, F32, (2, 3, 5, 3), true, true);
    let with = |i: usize, t: T| {
        let mut v = good.clone();
        v[i] = Some(t);
        v
    };
    let cases = [
        (
            0,
            uniform(&mut rng, F32, &[2, 3], -1.0, 1.0),
            "input must be",
        ),
        (1, uniform(&mut rng, F32, &[3, 2, 3], -1.0, 1.0), "weight"),
        (1, uniform(&mut rng, F32, &[3, 1, 0], -1.0, 1.0), "k >= 1"),
        (2, uniform(&mut rng, F32, &[4], -1.0, 1.0), "bias"),
        (
            3,
            uniform(&mut rng, F32, &[2, 3, 3], -1.0, 1.0),
            "past_state",
        ),
        (1, uniform(&mut rng, F16, &[3, 1, 3], -1.0, 1.0), "weight"),
    ];
    for (i, t, needle) in cases {
        expect_err(&ep, &n, OPSET, &with(i, t), needle);
    }
    let ints = vec![
        Some(random_numeric(&mut rng, DataType::Int32, &[2, 3, 5], -2, 2)),
        Some(random_numeric(&mut rng, DataType::Int32, &[3, 1, 3], -2, 2)),
    ];
    expect_err(
        &ep,
        &conv_node(None, false, false),
        OPSET,
        &ints,
        "bfloat16",
    );
    let bad = conv_node(Some("relu"), false, false);
    let err = ep
        .get_kernel(&bad, &[], OPSET)
        .err()
        .expect("an unknown activation is refused")
        .to_string();
    assert!(err.contains(&bad.name) && err.contains("relu"), "{err}");
}
