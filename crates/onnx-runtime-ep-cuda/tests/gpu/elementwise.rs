//! Element-wise ops (unary math, activations, Clip, Shrink, broadcasting binary ops,
//! comparisons, variadic folds, com.microsoft Gelu family and BiasAdd) against the CPU
//! provider on random inputs in each op's domain: every dtype the op takes, broadcast shapes
//! (scalar, row, column, per-channel, rank mismatch), strided layouts, opset variants, and
//! half types against a float32 reference. Each check also asks `output_types` first and runs
//! `execute` on outputs of exactly those types.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider, Kernel};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const F32: DataType = DataType::Float32;
const F64: DataType = DataType::Float64;
const F16: DataType = DataType::Float16;
const BF16: DataType = DataType::BFloat16;
const FLOATS: [DataType; 4] = [F32, F64, F16, BF16];
const SINTS: [DataType; 4] = [
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
];
const UINTS: [DataType; 4] = [
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
];
const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];

fn numeric() -> Vec<DataType> {
    FLOATS.iter().chain(&SINTS).chain(&UINTS).copied().collect()
}

fn is_half(d: DataType) -> bool {
    d == F16 || d == BF16
}

/// Tolerances (rtol, atol) of a float dtype against the CPU (half types: against float32).
fn tol(d: DataType) -> (f64, f64) {
    match d {
        F32 => (2e-5, 1e-6),
        F64 => (1e-11, 1e-13),
        F16 => (3e-3, 1e-3),
        BF16 => (2e-2, 1e-2),
        _ => (0.0, 0.0),
    }
}

/// Uniform values in [lo, hi), stored as `dtype`.
fn uniform(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: f64, hi: f64) -> T {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| lo + (hi - lo) * ((rng.next() >> 11) as f64 / (1u64 << 53) as f64))
        .collect();
    from_f64s(dtype, shape, &v)
}

/// Integers in [lo, hi), or quarter steps for float dtypes (ties for Round).
fn steps(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: i64, hi: i64) -> T {
    random_numeric(rng, dtype, shape, lo, hi)
}

/// `t` as float32 (the reference input for half types), same layout.
fn as_f32(t: &T) -> T {
    let v: Vec<f64> = (0..t.numel()).map(|i| get(t, i)).collect();
    from_f64s(F32, &t.shape, &v).with_layout(t.layout)
}

fn with_domain(mut n: Node, domain: &str) -> Node {
    n.domain = domain.to_string();
    n
}

/// Builds the kernel, checks `output_types` against the CPU reference's dtype and shape, runs
/// `execute` on outputs of those types and compares what it wrote with the reference (half
/// inputs are compared against the CPU run on their float32 values). `inputs[i] == None`
/// leaves input `i` omitted.
fn check_opt(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[Option<&T>],
    (rtol, atol): (f64, f64),
    what: &str,
) {
    let wired: Vec<T> = inputs.iter().flatten().map(|t| (*t).clone()).collect();
    let ref_inputs: Vec<Option<T>> = inputs
        .iter()
        .map(|t| {
            t.map(|t| {
                if is_half(t.dtype) {
                    as_f32(t)
                } else {
                    t.clone()
                }
            })
        })
        .collect();
    let refs: Vec<Option<&T>> = ref_inputs.iter().map(Option::as_ref).collect();
    let want = cpu_reference(n, opset, &refs)
        .unwrap_or_else(|e| panic!("{what}: the CPU reference failed: {e}"));
    let shapes: Vec<Vec<usize>> = wired.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep
        .get_kernel(n, &shapes, opset)
        .unwrap_or_else(|e| panic!("{what}: building the kernel: {e}"));
    assert_eq!(
        kernel.capture_support(),
        CaptureSupport::Supported,
        "{what}: element-wise kernels are capturable"
    );
    let mut bound = Bound::new(ep, &wired, &[]);
    let types = bound
        .output_types(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: output_types: {e}"));
    // Input 0 gives the output's dtype: a half X has a float32 reference.
    let half_in = inputs[0].filter(|t| is_half(t.dtype)).map(|t| t.dtype);
    let expect: Vec<(DataType, Vec<usize>)> = want
        .iter()
        .map(|w| match (w.dtype, half_in) {
            (F32, Some(h)) => (h, w.shape.clone()),
            (d, _) => (d, w.shape.clone()),
        })
        .collect();
    assert_eq!(types, expect, "{what}: output_types");
    bound.set_outputs(&types);
    bound
        .execute(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: execute: {e}"));
    let got = bound
        .read()
        .unwrap_or_else(|e| panic!("{what}: reading the output: {e}"));
    for (g, w) in got.iter().zip(&want) {
        close(g, w, rtol, atol, what);
    }
}

fn check(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[T],
    tol: (f64, f64),
    what: &str,
) {
    let opts: Vec<Option<&T>> = inputs.iter().map(Some).collect();
    check_opt(ep, n, opset, &opts, tol, what);
}

/// Element values within `atol + rtol * |want|` (any two numeric dtypes); NaN matches NaN and
/// infinities must be equal.
fn close(got: &T, want: &T, rtol: f64, atol: f64, what: &str) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    for i in 0..want.numel() {
        let (g, w) = (get(got, i), get(want, i));
        let ok = if w.is_nan() {
            g.is_nan()
        } else if w.is_infinite() || (rtol == 0.0 && atol == 0.0) {
            g == w
        } else {
            (g - w).abs() <= atol + rtol * w.abs()
        };
        assert!(
            ok,
            "{what}: element {i} of {:?} ({} output): got {g}, want {w}",
            want.shape, got.dtype
        );
    }
}

/// The kernel (or its `output_types`, or `execute`) must fail with an error naming the node
/// and containing `needle`.
fn check_err(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[T],
    out: &[(DataType, Vec<usize>)],
    needle: &str,
) {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let err: EpError = match ep.get_kernel(n, &shapes, opset) {
        Err(e) => e,
        Ok(kernel) => {
            let mut bound = Bound::new(ep, inputs, out);
            match bound.output_types(kernel.as_ref()) {
                Err(e) => e,
                Ok(_) => bound
                    .execute(kernel.as_ref())
                    .and_then(|_| bound.read().map(|_| ()))
                    .expect_err("the kernel accepted bad inputs"),
            }
        }
    };
    let msg = err.to_string();
    assert!(
        msg.contains(&n.name) && msg.contains(needle),
        "{}: expected an error naming the node and saying '{needle}', got: {msg}",
        n.op_type
    );
}

/// A unary op: (op, opset, input range, attributes).
type UnaryCase = (&'static str, u64, f64, f64, Vec<(&'static str, Attribute)>);

fn float_unary_cases() -> Vec<UnaryCase> {
    let f = Attribute::Float;
    vec![
        ("Sqrt", 13, 0.1, 10.0, vec![]),
        ("Reciprocal", 13, 0.25, 10.0, vec![]),
        ("Exp", 13, -5.0, 5.0, vec![]),
        ("Log", 13, 0.1, 10.0, vec![]),
        ("Erf", 13, -3.0, 3.0, vec![]),
        ("Sin", 22, -5.0, 5.0, vec![]),
        ("Cos", 22, -5.0, 5.0, vec![]),
        ("Tan", 22, -1.4, 1.4, vec![]),
        ("Asin", 22, -0.95, 0.95, vec![]),
        ("Acos", 22, -0.95, 0.95, vec![]),
        ("Atan", 22, -5.0, 5.0, vec![]),
        ("Sinh", 22, -5.0, 5.0, vec![]),
        ("Cosh", 22, -5.0, 5.0, vec![]),
        ("Asinh", 22, -5.0, 5.0, vec![]),
        ("Acosh", 22, 1.05, 10.0, vec![]),
        ("Atanh", 22, -0.95, 0.95, vec![]),
        ("Sigmoid", 13, -8.0, 8.0, vec![]),
        ("Tanh", 13, -5.0, 5.0, vec![]),
        ("Softplus", 22, -8.0, 8.0, vec![]),
        ("Softsign", 22, -5.0, 5.0, vec![]),
        ("HardSwish", 22, -5.0, 5.0, vec![]),
        ("Mish", 22, -5.0, 5.0, vec![]),
        ("LeakyRelu", 16, -5.0, 5.0, vec![("alpha", f(0.1))]),
        ("LeakyRelu", 16, -5.0, 5.0, vec![]),
        ("Elu", 22, -5.0, 5.0, vec![("alpha", f(0.7))]),
        ("Selu", 22, -5.0, 5.0, vec![]),
        (
            "Selu",
            6,
            -5.0,
            5.0,
            vec![("alpha", f(1.5)), ("gamma", f(1.2))],
        ),
        ("Celu", 12, -5.0, 5.0, vec![("alpha", f(1.5))]),
        (
            "HardSigmoid",
            22,
            -5.0,
            5.0,
            vec![("alpha", f(0.3)), ("beta", f(0.4))],
        ),
        ("HardSigmoid", 22, -5.0, 5.0, vec![]),
        ("ThresholdedRelu", 22, -5.0, 5.0, vec![("alpha", f(0.5))]),
        ("Gelu", 20, -5.0, 5.0, vec![]),
        (
            "Gelu",
            20,
            -5.0,
            5.0,
            vec![("approximate", Attribute::String("tanh".into()))],
        ),
        ("Swish", 24, -5.0, 5.0, vec![]),
        ("Swish", 24, -5.0, 5.0, vec![("alpha", f(0.8))]),
        (
            "Shrink",
            9,
            -5.0,
            5.0,
            vec![("lambd", f(0.7)), ("bias", f(0.2))],
        ),
    ]
}

#[test]
fn float_unary_math_and_activations_every_float_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(11);
    for (case, (op, opset, lo, hi, attrs)) in float_unary_cases().into_iter().enumerate() {
        let n = node(op, 1, 1, &attrs);
        for (k, &dtype) in FLOATS.iter().enumerate() {
            let layout = LAYOUTS[(case + k) % 3];
            // 105 elements: the vector walk ends with a scalar tail.
            let x = uniform(&mut rng, dtype, &[3, 5, 7], lo, hi).with_layout(layout);
            check(
                &ep,
                &n,
                opset,
                &[x],
                tol(dtype),
                &format!("{op} {attrs:?} {dtype} {layout:?}"),
            );
        }
    }
}

#[test]
fn rounding_and_sign_ops_on_quarter_steps() {
    let ep = gpu();
    let mut rng = Rng::new(12);
    for (op, opset) in [
        ("Floor", 13),
        ("Ceil", 13),
        ("Round", 22),
        ("Round", 11),
        ("Sign", 13),
        ("Abs", 13),
        ("Neg", 13),
        ("Relu", 14),
    ] {
        let n = node(op, 1, 1, &[]);
        for (k, &dtype) in FLOATS.iter().enumerate() {
            let x = steps(&mut rng, dtype, &[4, 64], -6, 6).with_layout(LAYOUTS[k % 3]);
            check(&ep, &n, opset, &[x], tol(dtype), &format!("{op} {dtype}"));
        }
    }
    // Halves round to even.
    let x = from_f64s(F32, &[8], &[0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, -3.49]);
    let got = run(&ep, &node("Round", 1, 1, &[]), 22, &[x], &[(F32, vec![8])]).unwrap();
    assert_close(
        &got[0],
        &[0.0, 2.0, 2.0, -0.0, -2.0, -2.0, 4.0, -3.0],
        0.0,
        0.0,
        "Round ties",
    );
}

#[test]
fn signed_and_integer_unary_ops() {
    let ep = gpu();
    let mut rng = Rng::new(13);
    let ints: Vec<DataType> = SINTS.iter().chain(&UINTS).copied().collect();
    for &dtype in &ints {
        let signed = SINTS.contains(&dtype);
        let (lo, hi) = if signed { (-100, 100) } else { (0, 200) };
        let x = steps(&mut rng, dtype, &[6, 33], lo, hi).with_layout(LAYOUTS[rng.below(3)]);
        let mut ops = vec![("Abs", 13), ("Sign", 13), ("BitwiseNot", 18)];
        if signed {
            ops.extend([("Neg", 13), ("Relu", 14)]);
        }
        for (op, opset) in ops {
            check(
                &ep,
                &node(op, 1, 1, &[]),
                opset,
                &[x.clone()],
                (0.0, 0.0),
                &format!("{op} {dtype}"),
            );
        }
        // Shrink on integers (computed in double, saturating back).
        let n = node(
            "Shrink",
            1,
            1,
            &[
                ("lambd", Attribute::Float(3.0)),
                ("bias", Attribute::Float(1.5)),
            ],
        );
        check(
            &ep,
            &n,
            9,
            &[x.clone()],
            (0.0, 0.0),
            &format!("Shrink {dtype}"),
        );
    }
    // Wrapping at the type's minimum.
    let x = from_f64s(DataType::Int8, &[3], &[-128.0, 127.0, -1.0]);
    for op in ["Abs", "Neg"] {
        check(
            &ep,
            &node(op, 1, 1, &[]),
            13,
            &[x.clone()],
            (0.0, 0.0),
            &format!("{op} i8 min"),
        );
    }
    let b = random_bytes(&mut rng, DataType::Bool, &[5, 17]).with_layout(Layout::Reversed);
    check(&ep, &node("Not", 1, 1, &[]), 1, &[b], (0.0, 0.0), "Not");
}

#[test]
fn predicates_and_special_values() {
    let ep = gpu();
    let specials = [
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        1.5,
        -2.25,
        65504.0,
        -3.0,
        7.0,
        f64::NAN,
        0.125,
    ];
    for (k, &dtype) in FLOATS.iter().enumerate() {
        let x = from_f64s(dtype, &[3, 4], &specials).with_layout(LAYOUTS[k % 3]);
        let exact = (0.0, 0.0);
        check(
            &ep,
            &node("IsNaN", 1, 1, &[]),
            20,
            &[x.clone()],
            exact,
            &format!("IsNaN {dtype}"),
        );
        for (neg, pos) in [(1, 1), (0, 1), (1, 0), (0, 0)] {
            let n = node(
                "IsInf",
                1,
                1,
                &[
                    ("detect_negative", Attribute::Int(neg)),
                    ("detect_positive", Attribute::Int(pos)),
                ],
            );
            check(
                &ep,
                &n,
                20,
                &[x.clone()],
                exact,
                &format!("IsInf {neg}{pos} {dtype}"),
            );
        }
        check(
            &ep,
            &node("IsInf", 1, 1, &[]),
            10,
            &[x.clone()],
            exact,
            &format!("IsInf default {dtype}"),
        );
        for op in ["Abs", "Neg", "Relu", "Sign", "Floor", "Ceil", "Round"] {
            let opset = if op == "Round" { 22 } else { 14 };
            check(
                &ep,
                &node(op, 1, 1, &[]),
                opset,
                &[x.clone()],
                exact,
                &format!("{op} specials {dtype}"),
            );
        }
    }
}

#[test]
fn isnan_isinf_every_float8_byte() {
    let ep = gpu();
    let bytes: Vec<u8> = (0..=255u8).collect();
    for dtype in [
        DataType::Float8E4M3FN,
        DataType::Float8E4M3FNUZ,
        DataType::Float8E5M2,
        DataType::Float8E5M2FNUZ,
    ] {
        let x = T::new(dtype, &[16, 16], bytes.clone());
        check(
            &ep,
            &node("IsNaN", 1, 1, &[]),
            20,
            &[x.clone()],
            (0.0, 0.0),
            &format!("IsNaN {dtype}"),
        );
        for (neg, pos) in [(1, 1), (0, 1), (1, 0)] {
            let n = node(
                "IsInf",
                1,
                1,
                &[
                    ("detect_negative", Attribute::Int(neg)),
                    ("detect_positive", Attribute::Int(pos)),
                ],
            );
            check(
                &ep,
                &n,
                20,
                &[x.clone()],
                (0.0, 0.0),
                &format!("IsInf {neg}{pos} {dtype}"),
            );
        }
    }
}

#[test]
fn contrib_gelu_family() {
    let ep = gpu();
    let mut rng = Rng::new(14);
    let ms = "com.microsoft";
    for &dtype in &FLOATS {
        let x = uniform(&mut rng, dtype, &[2, 3, 16], -4.0, 4.0);
        let bias = uniform(&mut rng, dtype, &[16], -1.0, 1.0);
        let t = tol(dtype);
        check(
            &ep,
            &with_domain(node("Gelu", 1, 1, &[]), ms),
            1,
            &[x.clone()],
            t,
            &format!("ms Gelu {dtype}"),
        );
        check(
            &ep,
            &with_domain(node("QuickGelu", 1, 1, &[]), ms),
            1,
            &[x.clone()],
            t,
            &format!("QuickGelu {dtype}"),
        );
        let n = with_domain(
            node("QuickGelu", 1, 1, &[("alpha", Attribute::Float(1.2))]),
            ms,
        );
        check(
            &ep,
            &n,
            1,
            &[x.clone()],
            t,
            &format!("QuickGelu alpha {dtype}"),
        );
        check(
            &ep,
            &with_domain(node("FastGelu", 1, 1, &[]), ms),
            1,
            &[x.clone()],
            t,
            &format!("FastGelu {dtype}"),
        );
        let n = with_domain(node("FastGelu", 2, 1, &[]), ms);
        check(
            &ep,
            &n,
            1,
            &[x.clone(), bias.clone()],
            t,
            &format!("FastGelu bias {dtype}"),
        );
        let n = with_domain(node("BiasGelu", 2, 1, &[]), ms);
        check(
            &ep,
            &n,
            1,
            &[x.clone().with_layout(Layout::Padded), bias],
            t,
            &format!("BiasGelu {dtype}"),
        );
    }
}

#[test]
fn clip_bounds_omitted_given_and_from_attributes() {
    let ep = gpu();
    let mut rng = Rng::new(15);
    for dtype in numeric() {
        let (lo, hi) = if UINTS.contains(&dtype) {
            (0, 100)
        } else {
            (-50, 50)
        };
        let x = steps(&mut rng, dtype, &[7, 9], lo, hi).with_layout(LAYOUTS[rng.below(3)]);
        let (mn, mx) = if UINTS.contains(&dtype) {
            (20.0, 70.0)
        } else {
            (-10.0, 20.0)
        };
        let tmin = from_f64s(dtype, &[], &[mn]);
        let tmax = from_f64s(dtype, &[1], &[mx]);
        let t = if dtype.is_float() {
            tol(dtype)
        } else {
            (0.0, 0.0)
        };
        // Opset 11+: optional inputs, each omitted or given.
        let n3 = node("Clip", 3, 1, &[]);
        let mut n_min_omitted = n3.clone();
        n_min_omitted.inputs[1] = None;
        for (what, n, ins) in [
            ("both", n3.clone(), vec![Some(&x), Some(&tmin), Some(&tmax)]),
            (
                "min only",
                node("Clip", 2, 1, &[]),
                vec![Some(&x), Some(&tmin)],
            ),
            ("max only", n_min_omitted, vec![Some(&x), None, Some(&tmax)]),
            ("none", node("Clip", 1, 1, &[]), vec![Some(&x)]),
        ] {
            check_opt(&ep, &n, 13, &ins, t, &format!("Clip 13 {what} {dtype}"));
        }
        // Opset 6: attributes.
        if dtype.is_float() {
            let f = Attribute::Float;
            for (what, attrs) in [
                ("both", vec![("min", f(-10.0)), ("max", f(20.0))]),
                ("min", vec![("min", f(-10.0))]),
                ("max", vec![("max", f(20.0))]),
                ("none", vec![]),
            ] {
                let n = node("Clip", 1, 1, &attrs);
                check(
                    &ep,
                    &n,
                    6,
                    &[x.clone()],
                    t,
                    &format!("Clip 6 {what} {dtype}"),
                );
            }
        }
    }
    // A non-scalar bound is an error naming the node.
    let x = uniform(&mut rng, F32, &[4], -1.0, 1.0);
    let bad = uniform(&mut rng, F32, &[2], -1.0, 1.0);
    check_err(
        &ep,
        &node("Clip", 2, 1, &[]),
        13,
        &[x, bad],
        &[(F32, vec![4])],
        "scalar",
    );
}

/// Broadcast pairs: same shape (vectorized, with and without a tail), scalar both ways, row,
/// column, per-channel, outer product and a rank mismatch.
const PAIRS: &[(&[usize], &[usize])] = &[
    (&[4, 64], &[4, 64]),
    (&[3, 5, 7], &[3, 5, 7]),
    (&[4, 64], &[]),
    (&[], &[6, 16]),
    (&[6, 32], &[32]),
    (&[6, 32], &[6, 1]),
    (&[2, 3, 8, 8], &[1, 3, 1, 1]),
    (&[5, 1], &[1, 8]),
    (&[2, 3, 4], &[3, 1]),
];

/// Random operands of `dtype` for an arithmetic op (no zero divisors, Pow-sized values).
fn operand(rng: &mut Rng, op: &str, dtype: DataType, shape: &[usize], second: bool) -> T {
    let unsigned = UINTS.contains(&dtype);
    if dtype.is_float() {
        let t = if second && matches!(op, "Div" | "Mod") {
            // |b| in [0.5, 4], either sign.
            let n: usize = shape.iter().product();
            let v: Vec<f64> = (0..n)
                .map(|_| {
                    let m = 0.5 + 3.5 * (rng.below(1000) as f64 / 1000.0);
                    if rng.below(2) == 0 {
                        m
                    } else {
                        -m
                    }
                })
                .collect();
            from_f64s(dtype, shape, &v)
        } else if op == "Pow" {
            if second {
                steps(rng, dtype, shape, -2, 3)
            } else {
                uniform(rng, dtype, shape, 0.2, 3.0)
            }
        } else {
            uniform(rng, dtype, shape, -8.0, 8.0)
        };
        return t;
    }
    let (lo, hi) = match (op, second, unsigned) {
        ("Pow", false, _) => (-3, 4),
        ("Pow", true, _) => (0, 6),
        ("Div" | "Mod", true, true) => (1, 30),
        ("Div" | "Mod", true, false) => (1, 30),
        (_, _, true) => (0, 250),
        _ => (-120, 120),
    };
    let mut t = steps(rng, dtype, shape, lo, hi);
    if second && matches!(op, "Div" | "Mod") && !unsigned {
        // Negative divisors too.
        let v: Vec<f64> = (0..t.numel())
            .map(|i| if i % 3 == 1 { -get(&t, i) } else { get(&t, i) })
            .collect();
        t = from_f64s(dtype, shape, &v);
    }
    t
}

#[test]
fn arithmetic_every_dtype_and_broadcast() {
    let ep = gpu();
    let mut rng = Rng::new(16);
    for op in ["Add", "Sub", "Mul", "Div"] {
        let n = node(op, 2, 1, &[]);
        for dtype in numeric() {
            for (case, (sa, sb)) in PAIRS.iter().enumerate() {
                let a = operand(&mut rng, op, dtype, sa, false).with_layout(LAYOUTS[case % 3]);
                let b = operand(&mut rng, op, dtype, sb, true).with_layout(LAYOUTS[(case / 3) % 3]);
                let t = if dtype.is_float() {
                    tol(dtype)
                } else {
                    (0.0, 0.0)
                };
                check(
                    &ep,
                    &n,
                    14,
                    &[a, b],
                    t,
                    &format!("{op} {dtype} {sa:?} {sb:?}"),
                );
            }
        }
    }
}

#[test]
fn integer_division_truncates_and_mod_takes_both_modes() {
    let ep = gpu();
    let av = [7.0, -7.0, 7.0, -7.0, 9.0, -9.0, 0.0, 5.0];
    let bv = [2.0, 2.0, -2.0, -2.0, 3.0, 4.0, -3.0, -1.0];
    for dtype in SINTS.iter().chain(&FLOATS).copied() {
        let a = from_f64s(dtype, &[8], &av);
        let b = from_f64s(dtype, &[8], &bv);
        let t = if dtype.is_float() {
            tol(dtype)
        } else {
            (0.0, 0.0)
        };
        check(
            &ep,
            &node("Div", 2, 1, &[]),
            14,
            &[a.clone(), b.clone()],
            t,
            &format!("Div signs {dtype}"),
        );
        for fmod in [0, 1] {
            let n = node("Mod", 2, 1, &[("fmod", Attribute::Int(fmod))]);
            check(
                &ep,
                &n,
                13,
                &[a.clone(), b.clone()],
                t,
                &format!("Mod fmod={fmod} {dtype}"),
            );
        }
    }
    // Random operands of every dtype, broadcast, in both modes.
    let mut rng = Rng::new(17);
    for dtype in numeric() {
        for fmod in [0, 1] {
            let n = node("Mod", 2, 1, &[("fmod", Attribute::Int(fmod))]);
            for (sa, sb) in [
                (&[6usize, 32][..], &[32usize][..]),
                (&[3, 5, 7], &[3, 5, 7]),
            ] {
                let a = operand(&mut rng, "Mod", dtype, sa, false).with_layout(Layout::Reversed);
                let b = operand(&mut rng, "Mod", dtype, sb, true);
                let t = if dtype.is_float() {
                    tol(dtype)
                } else {
                    (0.0, 0.0)
                };
                check(
                    &ep,
                    &n,
                    13,
                    &[a, b],
                    t,
                    &format!("Mod fmod={fmod} {dtype} {sa:?}"),
                );
            }
        }
    }
    // The minimum divided by -1 wraps.
    let a = from_f64s(DataType::Int32, &[2], &[i32::MIN as f64, 5.0]);
    let b = from_f64s(DataType::Int32, &[2], &[-1.0, -1.0]);
    check(
        &ep,
        &node("Div", 2, 1, &[]),
        14,
        &[a.clone(), b.clone()],
        (0.0, 0.0),
        "Div MIN/-1",
    );
    check(
        &ep,
        &node("Mod", 2, 1, &[]),
        13,
        &[a, b],
        (0.0, 0.0),
        "Mod MIN%-1",
    );
}

#[test]
fn integer_division_by_zero_is_an_error_naming_the_node() {
    let ep = gpu();
    for op in ["Div", "Mod"] {
        let a = from_f64s(DataType::Int32, &[4], &[1.0, 2.0, 3.0, 4.0]);
        let b = from_f64s(DataType::Int32, &[4], &[1.0, 0.0, 3.0, 1.0]);
        check_err(
            &ep,
            &node(op, 2, 1, &[]),
            13,
            &[a, b],
            &[(DataType::Int32, vec![4])],
            "by zero",
        );
    }
}

#[test]
fn pow_same_and_mixed_dtypes() {
    let ep = gpu();
    let mut rng = Rng::new(18);
    let n = node("Pow", 2, 1, &[]);
    // Same dtype.
    for dtype in FLOATS
        .iter()
        .copied()
        .chain([DataType::Int32, DataType::Int64])
    {
        for (sa, sb) in [
            (&[4usize, 64][..], &[4usize, 64][..]),
            (&[6, 32], &[]),
            (&[6, 32], &[32]),
        ] {
            let a = operand(&mut rng, "Pow", dtype, sa, false).with_layout(Layout::Padded);
            let b = operand(&mut rng, "Pow", dtype, sb, true);
            let t = if dtype.is_float() {
                tol(dtype)
            } else {
                (0.0, 0.0)
            };
            check(
                &ep,
                &n,
                15,
                &[a, b],
                t,
                &format!("Pow {dtype} {sa:?} {sb:?}"),
            );
        }
    }
    // Integer bases with negative exponents (1 / x^k truncates).
    let a = from_f64s(DataType::Int64, &[6], &[2.0, 1.0, -1.0, -1.0, 3.0, -2.0]);
    let b = from_f64s(DataType::Int64, &[6], &[-1.0, -3.0, -3.0, -2.0, 0.0, 3.0]);
    check(
        &ep,
        &n,
        15,
        &[a, b],
        (0.0, 0.0),
        "Pow int negative exponents",
    );
    // Mixed: every base with exponents of other dtypes.
    let exps = [
        F32,
        F64,
        F16,
        DataType::Int64,
        DataType::Int32,
        DataType::Int8,
        DataType::Uint8,
    ];
    for base in FLOATS
        .iter()
        .copied()
        .chain([DataType::Int32, DataType::Int64])
    {
        for &e in exps.iter().filter(|&&e| e != base) {
            let a = operand(&mut rng, "Pow", base, &[5, 12], false);
            let b = if e.is_float() {
                // Fractional exponents for float bases; integral ones for integer bases.
                if base.is_float() {
                    uniform(&mut rng, e, &[12], -2.0, 3.0)
                } else {
                    steps(&mut rng, e, &[12], 0, 4)
                }
            } else {
                steps(&mut rng, e, &[12], 0, 4)
            };
            let t = if base.is_float() {
                tol(base)
            } else {
                (0.0, 0.0)
            };
            check(&ep, &n, 15, &[a, b], t, &format!("Pow {base} ^ {e}"));
        }
    }
    // An integer base with a fractional float exponent goes through double and saturates.
    let a = from_f64s(DataType::Int32, &[4], &[4.0, 9.0, 2.0, 100.0]);
    let b = from_f64s(F32, &[4], &[0.5, 0.5, 1.5, 10.5]);
    check(&ep, &n, 15, &[a, b], (0.0, 0.0), "Pow int ^ fractional");
}

#[test]
fn bit_ops_logic_and_comparisons() {
    let ep = gpu();
    let mut rng = Rng::new(19);
    for dtype in UINTS {
        let bits = 8 * dtype.element_size().unwrap() as i64;
        let a = steps(&mut rng, dtype, &[6, 32], 0, 200).with_layout(Layout::Reversed);
        let b = steps(&mut rng, dtype, &[32], 0, bits + 3);
        for dir in ["LEFT", "RIGHT"] {
            let n = node(
                "BitShift",
                2,
                1,
                &[("direction", Attribute::String(dir.into()))],
            );
            check(
                &ep,
                &n,
                11,
                &[a.clone(), b.clone()],
                (0.0, 0.0),
                &format!("BitShift {dir} {dtype}"),
            );
        }
    }
    for dtype in SINTS.iter().chain(&UINTS).copied() {
        let a = random_bytes(&mut rng, dtype, &[6, 32]);
        let b = random_bytes(&mut rng, dtype, &[6, 1]).with_layout(Layout::Padded);
        for op in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"] {
            check(
                &ep,
                &node(op, 2, 1, &[]),
                18,
                &[a.clone(), b.clone()],
                (0.0, 0.0),
                &format!("{op} {dtype}"),
            );
        }
    }
    for (sa, sb) in PAIRS {
        let a = random_bytes(&mut rng, DataType::Bool, sa);
        let b = random_bytes(&mut rng, DataType::Bool, sb).with_layout(Layout::Reversed);
        for op in ["And", "Or", "Xor", "Equal"] {
            let opset = if op == "Equal" { 19 } else { 7 };
            check(
                &ep,
                &node(op, 2, 1, &[]),
                opset,
                &[a.clone(), b.clone()],
                (0.0, 0.0),
                &format!("{op} bool {sa:?} {sb:?}"),
            );
        }
    }
    for dtype in numeric() {
        for (case, (sa, sb)) in PAIRS.iter().enumerate().filter(|(c, _)| *c % 2 == 0) {
            // Few distinct values, so Equal and the ordered comparisons see ties.
            let a = steps(&mut rng, dtype, sa, 0, 4).with_layout(LAYOUTS[case % 3]);
            let b = steps(&mut rng, dtype, sb, 0, 4);
            for (op, opset) in [
                ("Equal", 19),
                ("Less", 13),
                ("Greater", 13),
                ("LessOrEqual", 16),
                ("GreaterOrEqual", 16),
            ] {
                check(
                    &ep,
                    &node(op, 2, 1, &[]),
                    opset,
                    &[a.clone(), b.clone()],
                    (0.0, 0.0),
                    &format!("{op} {dtype} {sa:?} {sb:?}"),
                );
            }
        }
    }
    // NaN compares unequal and unordered.
    let a = from_f64s(F32, &[4], &[f64::NAN, 1.0, f64::NAN, 2.0]);
    let b = from_f64s(F32, &[4], &[f64::NAN, f64::NAN, 1.0, 2.0]);
    for (op, opset) in [("Equal", 19), ("Less", 13), ("GreaterOrEqual", 16)] {
        check(
            &ep,
            &node(op, 2, 1, &[]),
            opset,
            &[a.clone(), b.clone()],
            (0.0, 0.0),
            &format!("{op} NaN"),
        );
    }
}

#[test]
fn equal_on_strings_is_refused_for_the_cpu_provider() {
    let ep = gpu();
    let n = node("Equal", 2, 1, &[]);
    let k = ep.get_kernel(&n, &[vec![2], vec![2]], 19).unwrap();
    let a = T::new(DataType::Float32, &[2], vec![0; 8]);
    let mut bound = Bound::new(&ep, &[a.clone(), a], &[]);
    // Views of strings cannot be bound here; the dtype check alone must refuse them.
    bound.inputs[0].0.dtype = DataType::String;
    bound.inputs[1].0.dtype = DataType::String;
    match bound.output_types(k.as_ref()) {
        Err(EpError::UnsupportedDtype { dtype, .. }) => assert_eq!(dtype, DataType::String),
        other => panic!("Equal on strings: expected UnsupportedDtype, got {other:?}"),
    }
}

#[test]
fn prelu_slope_broadcasts_to_x() {
    let ep = gpu();
    let mut rng = Rng::new(20);
    let n = node("PRelu", 2, 1, &[]);
    let dtypes = FLOATS.iter().copied().chain([
        DataType::Int32,
        DataType::Int64,
        DataType::Uint32,
        DataType::Uint64,
    ]);
    for dtype in dtypes {
        let x_lo = if UINTS.contains(&dtype) { 0 } else { -20 };
        for slope in [&[3usize, 1, 1][..], &[1], &[8], &[2, 3, 8, 8], &[]] {
            let x = steps(&mut rng, dtype, &[2, 3, 8, 8], x_lo, 20).with_layout(Layout::Padded);
            let s = steps(&mut rng, dtype, slope, 0, 3);
            let t = if dtype.is_float() {
                tol(dtype)
            } else {
                (0.0, 0.0)
            };
            check(
                &ep,
                &n,
                16,
                &[x, s],
                t,
                &format!("PRelu {dtype} slope {slope:?}"),
            );
        }
    }
    // Opset 6: a 1-D slope of the channel count is per channel.
    let x = uniform(&mut rng, F32, &[2, 3, 4], -2.0, 2.0);
    let s = uniform(&mut rng, F32, &[3], 0.1, 0.9);
    check(
        &ep,
        &n,
        6,
        &[x.clone(), s],
        tol(F32),
        "PRelu opset 6 per channel",
    );
    // A slope that would grow X is an error naming the node.
    let s = uniform(&mut rng, F32, &[5, 2, 3, 4], 0.1, 0.9);
    check_err(&ep, &n, 16, &[x, s], &[(F32, vec![2, 3, 4])], "slope");
}

#[test]
fn variadic_max_min_sum_mean() {
    let ep = gpu();
    let mut rng = Rng::new(21);
    let shapes: [&[usize]; 9] = [
        &[2, 3, 16],
        &[16],
        &[3, 1],
        &[],
        &[2, 3, 16],
        &[1, 1, 16],
        &[2, 1, 1],
        &[3, 16],
        &[1],
    ];
    for count in [1usize, 2, 3, 5, 9] {
        for (op, opset) in [
            ("Max", 13),
            ("Min", 13),
            ("Sum", 13),
            ("Mean", 13),
            ("Max", 8),
            ("Mean", 8),
        ] {
            let n = node(op, count, 1, &[]);
            let dtypes: Vec<DataType> = if matches!(op, "Max" | "Min") {
                numeric()
            } else {
                FLOATS.to_vec()
            };
            for (k, &dtype) in dtypes.iter().enumerate() {
                let ins: Vec<T> = (0..count)
                    .map(|i| {
                        let t = if dtype.is_float() {
                            uniform(&mut rng, dtype, shapes[i], -8.0, 8.0)
                        } else {
                            steps(&mut rng, dtype, shapes[i], 0, 100)
                        };
                        t.with_layout(LAYOUTS[(i + k) % 3])
                    })
                    .collect();
                let (r, a) = tol(dtype);
                let t = if dtype.is_float() {
                    (r * 2.0, a * count as f64)
                } else {
                    (0.0, 0.0)
                };
                check(&ep, &n, opset, &ins, t, &format!("{op} x{count} {dtype}"));
            }
        }
    }
    // NaN propagates through Max and Min wherever it is.
    let a = from_f64s(F32, &[4], &[f64::NAN, 1.0, 2.0, 3.0]);
    let b = from_f64s(F32, &[4], &[0.0, f64::NAN, 5.0, -1.0]);
    let c = from_f64s(F32, &[4], &[1.0, 1.0, f64::NAN, 0.0]);
    for op in ["Max", "Min"] {
        check(
            &ep,
            &node(op, 2, 1, &[]),
            13,
            &[a.clone(), b.clone()],
            (0.0, 0.0),
            &format!("{op} NaN x2"),
        );
        check(
            &ep,
            &node(op, 3, 1, &[]),
            13,
            &[a.clone(), b.clone(), c.clone()],
            (0.0, 0.0),
            &format!("{op} NaN x3"),
        );
    }
}

#[test]
fn bias_add_is_x_plus_bias_plus_skip() {
    let ep = gpu();
    let mut rng = Rng::new(22);
    for &dtype in &FLOATS {
        let x = uniform(&mut rng, dtype, &[2, 5, 24], -4.0, 4.0).with_layout(Layout::Padded);
        let bias = uniform(&mut rng, dtype, &[24], -1.0, 1.0);
        let skip = uniform(&mut rng, dtype, &[2, 5, 24], -4.0, 4.0);
        let n = with_domain(node("BiasAdd", 3, 1, &[]), "com.microsoft");
        // The reference: the CPU Sum of the three.
        let refs: Vec<T> = [&x, &bias, &skip]
            .iter()
            .map(|t| {
                if is_half(dtype) {
                    as_f32(t)
                } else {
                    (*t).clone()
                }
            })
            .collect();
        let want = cpu_reference(
            &node("Sum", 3, 1, &[]),
            13,
            &[Some(&refs[0]), Some(&refs[1]), Some(&refs[2])],
        )
        .unwrap();
        let got = run(&ep, &n, 1, &[x, bias, skip], &[(dtype, vec![2, 5, 24])]).unwrap();
        let (r, a) = tol(dtype);
        close(
            &got[0],
            &want[0],
            r * 2.0,
            a * 3.0,
            &format!("BiasAdd {dtype}"),
        );
    }
}

#[test]
fn legacy_broadcast_before_opset_7() {
    let ep = gpu();
    let mut rng = Rng::new(23);
    let a = uniform(&mut rng, F32, &[2, 3, 4, 5], -2.0, 2.0);
    for (b_shape, axis) in [
        (&[3usize, 4][..], Some(1)),
        (&[4, 5], None),
        (&[2], Some(0)),
        (&[5], Some(-1)),
    ] {
        let mut attrs = vec![("broadcast", Attribute::Int(1))];
        if let Some(ax) = axis {
            attrs.push(("axis", Attribute::Int(ax)));
        }
        let b = uniform(&mut rng, F32, b_shape, 0.5, 2.0);
        for op in ["Add", "Mul", "Div", "Pow", "Greater"] {
            let n = node(op, 2, 1, &attrs);
            check(
                &ep,
                &n,
                6,
                &[a.clone(), b.clone()],
                tol(F32),
                &format!("{op} legacy {b_shape:?} axis {axis:?}"),
            );
        }
    }
}

#[test]
fn shapes_that_do_not_broadcast_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(24);
    let a = uniform(&mut rng, F32, &[2, 3], -1.0, 1.0);
    let b = uniform(&mut rng, F32, &[4], -1.0, 1.0);
    for op in ["Add", "Equal", "Pow", "Max", "Sum"] {
        check_err(
            &ep,
            &node(op, 2, 1, &[]),
            13,
            &[a.clone(), b.clone()],
            &[(F32, vec![2, 3])],
            "broadcast",
        );
    }
    let c = uniform(&mut rng, F32, &[3], -1.0, 1.0);
    check_err(
        &ep,
        &node("Max", 3, 1, &[]),
        13,
        &[a.clone(), c, b.clone()],
        &[(F32, vec![2, 3])],
        "broadcast",
    );
    // Mismatched dtypes.
    let i = steps(&mut rng, DataType::Int32, &[2, 3], 0, 5);
    check_err(
        &ep,
        &node("Add", 2, 1, &[]),
        14,
        &[a, i],
        &[(F32, vec![2, 3])],
        "type",
    );
}

#[test]
fn large_tensors_take_the_vector_walk_with_a_tail() {
    let ep = gpu();
    let mut rng = Rng::new(25);
    // More elements than one launch's threads (grid-stride), not a multiple of any width.
    let n_el = (1 << 20) + 3;
    for dtype in [F32, F16, DataType::Int8] {
        let a = if dtype.is_float() {
            uniform(&mut rng, dtype, &[n_el], -4.0, 4.0)
        } else {
            steps(&mut rng, dtype, &[n_el], -50, 50)
        };
        let b = if dtype.is_float() {
            uniform(&mut rng, dtype, &[n_el], -4.0, 4.0)
        } else {
            steps(&mut rng, dtype, &[n_el], -50, 50)
        };
        let t = if dtype.is_float() {
            tol(dtype)
        } else {
            (0.0, 0.0)
        };
        check(
            &ep,
            &node("Add", 2, 1, &[]),
            14,
            &[a.clone(), b.clone()],
            t,
            &format!("Add large {dtype}"),
        );
        check(
            &ep,
            &node("Abs", 1, 1, &[]),
            13,
            &[a.clone()],
            t,
            &format!("Abs large {dtype}"),
        );
        check(
            &ep,
            &node("Max", 3, 1, &[]),
            13,
            &[a.clone(), b, a],
            t,
            &format!("Max x3 large {dtype}"),
        );
    }
    // A large row broadcast (3 axes, vectorized).
    let a = uniform(&mut rng, F16, &[64, 8, 1024], -4.0, 4.0);
    let b = uniform(&mut rng, F16, &[1, 8, 1], -4.0, 4.0);
    check(
        &ep,
        &node("Mul", 2, 1, &[]),
        14,
        &[a, b],
        tol(F16),
        "Mul per-channel large f16",
    );
}

/// Times `op` on `inputs` (bytes moved: every input and the output once) and checks sampled
/// elements against `want`. Prints microseconds and GB/s (`--nocapture`).
fn throughput(
    op: &str,
    attrs: &[(&str, Attribute)],
    inputs: Vec<T>,
    out: (DataType, Vec<usize>),
    want: impl Fn(&[&T], usize) -> f64,
) -> f64 {
    let ep = gpu();
    let n = node(op, inputs.len(), 1, attrs);
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(&n, &shapes, 14).unwrap();
    let mut b = Bound::new(&ep, &inputs, std::slice::from_ref(&out));
    b.execute(kernel.as_ref()).unwrap();
    ep.runtime().synchronize().unwrap();
    let runs = 20;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        b.execute(kernel.as_ref()).unwrap();
    }
    ep.runtime().synchronize().unwrap();
    let secs = start.elapsed().as_secs_f64() / runs as f64;
    let out_bytes = out.0.storage_bytes(out.1.iter().product());
    let bytes = (inputs.iter().map(|t| t.bytes.len()).sum::<usize>() + out_bytes) as f64;
    let gbs = bytes / secs / 1e9;
    eprintln!(
        "{op} {:?} {}: {:.1} us, {gbs:.0} GB/s",
        shapes,
        inputs[0].dtype,
        secs * 1e6
    );
    let got = &b.read().unwrap()[0];
    let refs: Vec<&T> = inputs.iter().collect();
    let mut rng = Rng::new(78);
    for _ in 0..2000 {
        let i = rng.below(got.numel());
        let (g, w) = (get(got, i), want(&refs, i));
        assert!(
            (g - w).abs() <= 1e-2 * w.abs().max(1.0),
            "{op}: element {i}: got {g}, want {w}"
        );
    }
    gbs
}

/// A large tensor of varied values, cheap to make.
fn big(dtype: DataType, shape: &[usize], seed: u64) -> T {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|i| ((i as u64 * 2654435761 + seed) % 1000) as f64 / 250.0 - 2.0)
        .collect();
    from_f64s(dtype, shape, &v)
}

#[test]
fn elementwise_throughput() {
    let n = 32 << 20;
    let a = big(F32, &[n], 1);
    let b = big(F32, &[n], 7);
    let gbs = throughput(
        "Add",
        &[],
        vec![a.clone(), b.clone()],
        (F32, vec![n]),
        |t, i| get(t[0], i) + get(t[1], i),
    );
    // HBM3e moves ~4.8 TB/s; far below half of it means the fast walk is not taken.
    assert!(
        gbs > 1500.0,
        "Add f32 same shape reaches only {gbs:.0} GB/s"
    );
    let rows = big(F32, &[8192, 4096], 3);
    let row = big(F32, &[4096], 5);
    throughput(
        "Mul",
        &[],
        vec![rows.clone(), row],
        (F32, vec![8192, 4096]),
        |t, i| get(t[0], i) * get(t[1], i % 4096),
    );
    let col = big(F32, &[8192, 1], 9);
    throughput(
        "Sub",
        &[],
        vec![rows, col],
        (F32, vec![8192, 4096]),
        |t, i| get(t[0], i) - get(t[1], i / 4096),
    );
    let x = big(F16, &[32, 256, 64, 64], 11);
    let ch = big(F16, &[1, 256, 1, 1], 13);
    throughput(
        "Add",
        &[],
        vec![x.clone(), ch],
        (F16, vec![32, 256, 64, 64]),
        |t, i| get(t[0], i) + get(t[1], (i / 4096) % 256),
    );
    throughput("Relu", &[], vec![a.clone()], (F32, vec![n]), |t, i| {
        get(t[0], i).max(0.0)
    });
    throughput(
        "Sigmoid",
        &[],
        vec![x.clone()],
        (F16, vec![32, 256, 64, 64]),
        |t, i| 1.0 / (1.0 + (-get(t[0], i)).exp()),
    );
    throughput(
        "Max",
        &[],
        vec![a.clone(), b.clone(), a],
        (F32, vec![n]),
        |t, i| get(t[0], i).max(get(t[1], i)),
    );
}

/// Element-wise kernels captured into a CUDA graph replay on new input values (Clip's bounds
/// included: they are read on the device) as an eager run does.
#[test]
fn capture_then_replay_matches_eager() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(26);
    type Case = (Node, u64, Vec<T>, Vec<(DataType, Vec<usize>)>);
    let cases: Vec<Case> = vec![
        (
            node("Add", 2, 1, &[]),
            14,
            vec![
                uniform(&mut rng, F32, &[6, 32], -2.0, 2.0),
                uniform(&mut rng, F32, &[32], -2.0, 2.0),
            ],
            vec![(F32, vec![6, 32])],
        ),
        (
            node("Clip", 3, 1, &[]),
            13,
            vec![
                uniform(&mut rng, F32, &[5, 7], -2.0, 2.0).with_layout(Layout::Reversed),
                from_f64s(F32, &[], &[-0.5]),
                from_f64s(F32, &[], &[0.5]),
            ],
            vec![(F32, vec![5, 7])],
        ),
        (
            node("Max", 3, 1, &[]),
            13,
            vec![
                uniform(&mut rng, F16, &[4, 16], -2.0, 2.0),
                uniform(&mut rng, F16, &[16], -2.0, 2.0),
                uniform(&mut rng, F16, &[4, 1], -2.0, 2.0),
            ],
            vec![(F16, vec![4, 16])],
        ),
        (
            node("Less", 2, 1, &[]),
            13,
            vec![
                steps(&mut rng, DataType::Int64, &[3, 8], 0, 4),
                steps(&mut rng, DataType::Int64, &[8], 0, 4),
            ],
            vec![(DataType::Bool, vec![3, 8])],
        ),
    ];
    let kernels: Vec<Box<dyn Kernel>> = cases
        .iter()
        .map(|(n, opset, ins, _)| {
            let shapes: Vec<Vec<usize>> = ins.iter().map(|t| t.shape.clone()).collect();
            ep.get_kernel(n, &shapes, *opset).unwrap()
        })
        .collect();
    let mut bounds: Vec<Bound<'_>> = cases
        .iter()
        .map(|(_, _, ins, outs)| Bound::new(&ep, ins, outs))
        .collect();
    let refs: Vec<&dyn Kernel> = kernels.iter().map(|k| k.as_ref()).collect();
    // Capturable without an eager warm-up run: nothing is read on the host.
    runtime.begin_graph_capture(&refs).unwrap();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    runtime.end_graph_capture().unwrap();
    for ((_, _, ins, _), b) in cases.iter().zip(bounds.iter_mut()) {
        for (i, t) in ins.iter().enumerate() {
            let fresh = if t.dtype.is_float() {
                uniform(&mut rng, t.dtype, &t.shape, -2.0, 2.0)
            } else {
                steps(&mut rng, t.dtype, &t.shape, 0, 4)
            };
            b.set_input(i, fresh.with_layout(t.layout));
        }
    }
    runtime.replay_graph().unwrap();
    let replayed: Vec<Vec<T>> = bounds.iter().map(|b| b.read().unwrap()).collect();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    for (((n, _, _, _), b), r) in cases.iter().zip(&bounds).zip(&replayed) {
        let eager = b.read().unwrap();
        for (e, g) in eager.iter().zip(r) {
            assert_same(g, e, &format!("replay vs eager: {}", n.op_type));
        }
    }
    assert!(runtime.reset_graph().unwrap());
}
