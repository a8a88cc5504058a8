//! The session's internal FusedElementwise (generated NVRTC kernels) against the CPU
//! provider's interpreter of the same program: every op, float32/float64/float16/bfloat16,
//! the vectorized flat walk (full-shape and single-element inputs, tails), broadcast and
//! strided inputs, several outputs, and refusals. Both sides compute half types in float32
//! and round once at the outputs, so the half references are run on the half inputs.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const F32: DataType = DataType::Float32;
const F64: DataType = DataType::Float64;
const F16: DataType = DataType::Float16;
const BF16: DataType = DataType::BFloat16;
const FLOATS: [DataType; 4] = [F32, F64, F16, BF16];
const INTERNAL: &str = "ai.onnx_runtime_rs.internal";

/// Tolerances (rtol, atol) against the CPU interpreter: f32 differs by the math library's
/// ulps; half types by one rounding of the output.
fn tol(d: DataType) -> (f64, f64) {
    match d {
        F32 => (2e-5, 2e-6),
        F64 => (1e-11, 1e-13),
        F16 => (2e-3, 1e-3),
        _ => (1.6e-2, 1e-2),
    }
}

fn fused(program: &str, n_in: usize, n_out: usize, dtype: DataType) -> Node {
    let mut n = node(
        "FusedElementwise",
        n_in,
        n_out,
        &[
            ("program", Attribute::String(program.into())),
            ("dtype", Attribute::Int(dtype.onnx_code() as i64)),
        ],
    );
    n.domain = INTERNAL.into();
    n
}

/// Uniform values in [lo, hi), stored as `dtype`.
fn uniform(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: f64, hi: f64) -> T {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| lo + (hi - lo) * ((rng.next() >> 11) as f64 / (1u64 << 53) as f64))
        .collect();
    from_f64s(dtype, shape, &v)
}

/// Builds the kernel, checks `output_types` against the CPU reference, runs `execute` and
/// compares every output.
fn check(ep: &CudaExecutionProvider, n: &Node, inputs: &[T], what: &str) {
    let dtype = inputs[0].dtype;
    let refs: Vec<Option<&T>> = inputs.iter().map(Some).collect();
    let want = cpu_reference(n, 1, &refs)
        .unwrap_or_else(|e| panic!("{what}: the CPU reference failed: {e}"));
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep
        .get_kernel(n, &shapes, 1)
        .unwrap_or_else(|e| panic!("{what}: building the kernel: {e}"));
    assert_eq!(
        kernel.capture_support(),
        CaptureSupport::Supported,
        "{what}"
    );
    let mut bound = Bound::new(ep, inputs, &[]);
    let types = bound
        .output_types(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: output_types: {e}"));
    let expect: Vec<(DataType, Vec<usize>)> =
        want.iter().map(|w| (w.dtype, w.shape.clone())).collect();
    assert_eq!(types, expect, "{what}: output_types");
    bound.set_outputs(&types);
    bound
        .execute(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: execute: {e}"));
    let got = bound
        .read()
        .unwrap_or_else(|e| panic!("{what}: reading the outputs: {e}"));
    let (rtol, atol) = tol(dtype);
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_close_to(g, w, rtol, atol, &format!("{what}, output {k}"));
    }
}

const GELU_BIAS: &str = "t0 = Add in0 in1\nt1 = Div t0 1.4142135381698608\nt2 = Erf t1\n\
                         t3 = Add t2 1.0\nt4 = Mul t0 t3\nt5 = Mul t4 0.5\nout t5\nout t0\n";

/// Bias add then GELU written out (two outputs): the bias [C] is a broadcast (strided walk);
/// with a full-shape second input the flat vector walk (with a tail) runs.
#[test]
fn gelu_chain_with_bias_every_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    for dtype in FLOATS {
        let n = fused(GELU_BIAS, 2, 2, dtype);
        let x = uniform(&mut rng, dtype, &[37, 129], -4.0, 4.0);
        let b = uniform(&mut rng, dtype, &[129], -1.0, 1.0);
        check(&ep, &n, &[x.clone(), b], &format!("{dtype} row bias"));
        let full = uniform(&mut rng, dtype, &[37, 129], -1.0, 1.0);
        check(&ep, &n, &[x, full], &format!("{dtype} flat"));
    }
}

/// Programs of up to eight independent outputs covering every op the generator knows, on
/// inputs in each op's domain (in1 is positive: Log, Sqrt, Pow's base, Celu's alpha).
fn op_programs() -> Vec<String> {
    let lines: Vec<String> = onnx_runtime_ep_cuda::ops::fused::codegen::op_names()
        .map(|op| {
            let args = match op {
                "Log" | "Sqrt" | "Reciprocal" => "in1".to_string(),
                "Pow" => "in1 in0".into(),
                "Selu" => "in0 1.6732631921768188 1.0507010221481323".into(),
                "HardSigmoid" => "in0 0.20000000298023224 0.5".into(),
                "Clip" => "in0 -1.0 1.5".into(),
                "LeakyRelu" | "Elu" | "Celu" | "ThresholdedRelu" | "Swish" | "PRelu" => {
                    "in0 in1".into()
                }
                "Add" | "Sub" | "Mul" | "Div" | "Max" | "Min" => "in0 in2".into(),
                _ => "in0".into(),
            };
            format!("{op} {args}")
        })
        .collect();
    lines
        .chunks(8)
        .map(|chunk| {
            let mut s = String::new();
            for (k, l) in chunk.iter().enumerate() {
                s.push_str(&format!("t{k} = {l}\n"));
            }
            for k in 0..chunk.len() {
                s.push_str(&format!("out t{k}\n"));
            }
            s
        })
        .collect()
}

#[test]
fn every_op_matches_the_cpu_interpreter() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    for dtype in [F32, F16] {
        for (i, p) in op_programs().iter().enumerate() {
            let n_out = p.lines().filter(|l| l.starts_with("out")).count();
            let n = fused(p, 3, n_out, dtype);
            let shape = [5, 67];
            let x = uniform(&mut rng, dtype, &shape, -3.0, 3.0);
            let pos = uniform(&mut rng, dtype, &shape, 0.25, 3.0);
            let z = uniform(&mut rng, dtype, &shape, -2.0, 2.0);
            check(&ep, &n, &[x, pos, z], &format!("{dtype} program {i}:\n{p}"));
        }
    }
}

/// Rank-mismatched broadcasts ([4, 1, 6] with [3, 1] and a scalar) and strided layouts of
/// full-shape inputs (transposed, padded rows), every dtype.
#[test]
fn broadcast_and_strided_inputs() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    let prog = "t0 = Mul in0 in1\nt1 = Sub t0 in2\nt2 = Tanh t1\nt3 = Max t2 -0.5\nout t3";
    for dtype in FLOATS {
        let n = fused(prog, 3, 1, dtype);
        let a = uniform(&mut rng, dtype, &[4, 1, 6], -2.0, 2.0);
        let b = uniform(&mut rng, dtype, &[3, 1], -2.0, 2.0);
        let s = uniform(&mut rng, dtype, &[], -1.0, 1.0);
        check(
            &ep,
            &n,
            &[a.clone(), b.clone(), s.clone()],
            &format!("{dtype} broadcast"),
        );
        for layout in [Layout::Reversed, Layout::Padded] {
            let x = uniform(&mut rng, dtype, &[6, 9, 10], -2.0, 2.0).with_layout(layout);
            let y = uniform(&mut rng, dtype, &[6, 9, 10], -2.0, 2.0);
            let c = uniform(&mut rng, dtype, &[9, 1], -2.0, 2.0).with_layout(layout);
            check(&ep, &n, &[x, y, c], &format!("{dtype} {layout:?} layout"));
        }
    }
}

/// The flat walk's edges: one element, fewer elements than a vector, a tail after full
/// vectors, single-element inputs of shape [1] and [], and the same input read twice.
#[test]
fn flat_walk_sizes_and_single_element_inputs() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    let prog = "t0 = Mul in0 in1\nt1 = Add t0 in2\nt2 = Sigmoid t1\nt3 = Mul t2 in0\n\
                out t3\nout t1";
    for dtype in [F32, F64, F16, BF16] {
        let n = fused(prog, 3, 2, dtype);
        for len in [1usize, 3, 7, 8, 4099] {
            let x = uniform(&mut rng, dtype, &[len], -3.0, 3.0);
            let s = uniform(&mut rng, dtype, &[1], -1.0, 1.0);
            let t = uniform(&mut rng, dtype, &[], -1.0, 1.0);
            check(&ep, &n, &[x, s, t], &format!("{dtype} n={len}"));
        }
    }
    // 2^20 elements, float16: many blocks of the grid-stride loop.
    let n = fused(prog, 3, 2, F16);
    let x = uniform(&mut rng, F16, &[1024, 1024], -3.0, 3.0);
    let s = uniform(&mut rng, F16, &[1024, 1024], -1.0, 1.0);
    let t = uniform(&mut rng, F16, &[1], -1.0, 1.0);
    check(&ep, &n, &[x, s, t], "f16 1M");
}

/// Special values: NaN and infinities through literals and inputs behave as on the CPU.
#[test]
fn special_values_and_literals() {
    let ep = gpu();
    let prog = "t0 = Max in0 NaN\nt1 = Min in0 inf\nt2 = Clip in0 -inf 1.0\nt3 = Relu in0\n\
                t4 = Div in0 0.0\nout t0\nout t1\nout t2\nout t3\nout t4";
    let vals = [
        f64::NAN,
        f64::INFINITY,
        -f64::INFINITY,
        0.0,
        -0.0,
        2.5,
        -2.5,
        1e-3,
    ];
    for dtype in FLOATS {
        let n = fused(prog, 1, 5, dtype);
        let x = from_f64s(dtype, &[vals.len()], &vals);
        check(&ep, &n, &[x], &format!("{dtype} special values"));
    }
}

/// Inputs of a dtype the kernel was not generated for are a planned refusal; a non-float
/// program dtype is refused at build; shapes that do not broadcast and bad programs are
/// errors naming the node.
#[test]
fn refusals_and_errors() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    let n = fused("t0 = Add in0 in1\nout t0", 2, 1, F32);
    let shapes = vec![vec![4], vec![4]];
    let kernel = ep.get_kernel(&n, &shapes, 1).unwrap();
    let h = uniform(&mut rng, F16, &[4], -1.0, 1.0);
    let bound = Bound::new(&ep, &[h.clone(), h], &[]);
    match bound.output_types(kernel.as_ref()) {
        Err(EpError::UnsupportedDtype { dtype, .. }) => assert_eq!(dtype, F16),
        other => panic!("expected a dtype refusal, got {other:?}"),
    }
    let a = uniform(&mut rng, F32, &[3], -1.0, 1.0);
    let b = uniform(&mut rng, F32, &[4], -1.0, 1.0);
    let bound = Bound::new(&ep, &[a, b], &[]);
    let err = bound.output_types(kernel.as_ref()).unwrap_err();
    assert!(err.to_string().contains("test_FusedElementwise"), "{err}");
    let ints = fused("t0 = Add in0 in1\nout t0", 2, 1, DataType::Int32);
    assert!(matches!(
        ep.get_kernel(&ints, &shapes, 1),
        Err(EpError::UnsupportedDtype { .. })
    ));
    for bad in [
        "t0 = Frob in0\nout t0",
        "t0 = Add in0 in5\nout t0",
        "t0 = Relu in0",
    ] {
        let n = fused(bad, 2, 1, F32);
        match ep.get_kernel(&n, &shapes, 1) {
            Err(EpError::InvalidAttribute { .. }) => {}
            Err(e) => panic!("{bad:?}: expected an attribute error, got {e}"),
            Ok(_) => panic!("{bad:?}: built a kernel"),
        }
    }
}
