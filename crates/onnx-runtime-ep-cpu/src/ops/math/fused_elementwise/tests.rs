//! Tests of the `FusedElementwise` kernel: bad programs and nodes, every op against its
//! standalone CPU kernel, every float dtype against f64 math, NaN semantics and large strided
//! broadcasts. (The program's round trip through text is tested in `program.rs`.)

use super::*;
use crate::ops::math::testutil::*;
use crate::Value;
use onnx_runtime_ir::{Attribute, Node, NodeId, ValueId};

type MakeTensor = fn(&[usize], &[f64]) -> Tensor;
/// (standalone op, fused instruction, the standalone op's attributes).
type UnaryCase = (&'static str, &'static str, Vec<(&'static str, Attribute)>);

fn fused(program: &str, n_in: usize, n_out: usize) -> Node {
    let mut n = Node::new(
        NodeId(0),
        OP,
        (0..n_in).map(|i| Some(ValueId(i))).collect(),
        (0..n_out).map(|i| ValueId(100 + i)).collect(),
    )
    .with_domain(crate::INTERNAL_DOMAIN);
    n.attributes
        .insert("program".into(), Attribute::String(program.into()));
    n
}

fn run(program: &str, n_out: usize, inputs: &[Tensor]) -> Result<Vec<Tensor>, EpError> {
    let node = fused(program, inputs.len(), n_out);
    let kernel = build(&BuildContext::new(&node, 1))?;
    let values: Vec<Value> = inputs.iter().cloned().map(Value::Tensor).collect();
    let refs: Vec<Option<&Value>> = values.iter().map(Some).collect();
    Ok(kernel
        .run(&refs)?
        .into_iter()
        .map(|v| v.into_tensor().unwrap())
        .collect())
}

/// Deterministic values in [-3, 3).
fn vals(n: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            ((s >> 11) as f64 / (1u64 << 53) as f64) * 6.0 - 3.0
        })
        .collect()
}

/// GELU with the f32 rounding of sqrt(2) the programs carry.
fn gelu(x: f64) -> f64 {
    0.5 * x * (1.0 + libm::erf(x / 1.4142135381698608))
}

#[test]
fn bad_programs_are_errors_naming_the_line() {
    for (text, want) in [
        ("t0 = Frobnicate in0\nout t0", "unknown op"),
        ("t0 = Add in0\nout t0", "takes 2 operand"),
        ("t0 = Relu t1\nout t0", "before it is defined"),
        ("t0 = Relu in0\nt0 = Relu in0\nout t0", "defined twice"),
        ("t0 = Relu in0", "no 'out'"),
        ("t0 = Relu zz\nout t0", "not an input"),
        ("out in0\nt0 = Relu in0", "before the 'out'"),
    ] {
        let err = Program::parse(text).unwrap_err();
        assert!(err.contains(want), "{text:?}: {err}");
    }
    // The node must have the inputs and outputs the program names.
    let t = f32s(&[2], &[1.0, 2.0]);
    let err = run("t0 = Add in0 in1\nout t0", 1, std::slice::from_ref(&t)).unwrap_err();
    assert!(err.to_string().contains("in1"), "{err}");
    let err = run("t0 = Relu in0\nout t0", 2, std::slice::from_ref(&t)).unwrap_err();
    assert!(err.to_string().contains("output"), "{err}");
    // Shapes that do not broadcast.
    let u = f32s(&[3], &[1.0, 2.0, 3.0]);
    let err = run("t0 = Add in0 in1\nout t0", 1, &[t, u]).unwrap_err();
    assert!(err.to_string().contains("broadcast"), "{err}");
}

/// GELU written out, with a broadcast bias added first, against f64 math; every dtype.
#[test]
fn gelu_chain_with_broadcast_bias_matches_float64() {
    let prog = "t0 = Add in0 in1\nt1 = Div t0 1.4142135381698608\nt2 = Erf t1\n\
                t3 = Add t2 1.0\nt4 = Mul t0 t3\nt5 = Mul t4 0.5\nout t5\nout t0\n";
    let (r, c) = (70, 33);
    let x = vals(r * c, 1);
    let b = vals(c, 2);
    let cases: [(MakeTensor, f64); 4] = [(f32s, 1e-5), (f64s, 1e-12), (f16s, 4e-3), (bf16s, 3e-2)];
    for (mk, tol) in cases {
        let xt = mk(&[r, c], &x);
        let bt = mk(&[c], &b);
        // The reference from the rounded inputs.
        let xr = xt.to_f64_vec().unwrap();
        let br = bt.to_f64_vec().unwrap();
        let pre_r: Vec<f64> = (0..r * c).map(|i| xr[i] + br[i % c]).collect();
        let want_r: Vec<f64> = pre_r.iter().map(|&v| gelu(v)).collect();
        let out = run(prog, 2, &[xt, bt]).unwrap();
        assert_eq!(out[0].dtype(), out[1].dtype());
        assert_close(&out[0], &want_r, &[r, c], tol, tol);
        assert_close(&out[1], &pre_r, &[r, c], tol, tol);
    }
}

/// Every op against the standalone CPU kernel of the op it stands for, on a strided
/// broadcast ([4, 1, 5] with [3, 1]) for the binary ones.
#[test]
fn each_op_matches_the_standalone_kernel() {
    let x = vals(60, 3);
    let y: Vec<f64> = vals(60, 4).iter().map(|v| v.abs() + 0.25).collect();
    let xt = f32s(&[3, 4, 5], &x);
    let pos = f32s(&[3, 4, 5], &y);
    let unary: &[UnaryCase] = &[
        ("Relu", "Relu in0", vec![]),
        ("Sigmoid", "Sigmoid in0", vec![]),
        ("Tanh", "Tanh in0", vec![]),
        ("Exp", "Exp in0", vec![]),
        ("Erf", "Erf in0", vec![]),
        ("Neg", "Neg in0", vec![]),
        ("Abs", "Abs in0", vec![]),
        ("Softplus", "Softplus in0", vec![]),
        ("Softsign", "Softsign in0", vec![]),
        ("HardSwish", "HardSwish in0", vec![]),
        ("Floor", "Floor in0", vec![]),
        ("Ceil", "Ceil in0", vec![]),
        ("Round", "Round in0", vec![]),
        ("Sign", "Sign in0", vec![]),
        ("Sin", "Sin in0", vec![]),
        ("Cos", "Cos in0", vec![]),
        (
            "LeakyRelu",
            "LeakyRelu in0 0.10000000149011612",
            vec![("alpha", float(0.1))],
        ),
        ("Elu", "Elu in0 0.5", vec![("alpha", float(0.5))]),
        ("Celu", "Celu in0 2.0", vec![("alpha", float(2.0))]),
        (
            "ThresholdedRelu",
            "ThresholdedRelu in0 0.5",
            vec![("alpha", float(0.5))],
        ),
        (
            "HardSigmoid",
            "HardSigmoid in0 0.30000001192092896 0.4000000059604645",
            vec![("alpha", float(0.3)), ("beta", float(0.4))],
        ),
        (
            "Selu",
            "Selu in0 1.6732631921768188 1.0507010221481323",
            vec![],
        ),
    ];
    for (op, body, attrs) in unary {
        let opset = 22;
        let want = run1(op, opset, attrs.clone(), std::slice::from_ref(&xt));
        let got = run(
            &format!("t0 = {body}\nout t0"),
            1,
            std::slice::from_ref(&xt),
        )
        .unwrap()
        .remove(0);
        assert_close(&got, &want.to_f64_vec().unwrap(), &[3, 4, 5], 1e-6, 1e-6);
    }
    for (op, body) in [
        ("Log", "Log in0"),
        ("Sqrt", "Sqrt in0"),
        ("Reciprocal", "Reciprocal in0"),
    ] {
        let want = run1(op, 13, vec![], std::slice::from_ref(&pos));
        let got = run(
            &format!("t0 = {body}\nout t0"),
            1,
            std::slice::from_ref(&pos),
        )
        .unwrap()
        .remove(0);
        assert_close(&got, &want.to_f64_vec().unwrap(), &[3, 4, 5], 1e-6, 1e-6);
    }
    let mish = run1("Mish", 18, vec![], std::slice::from_ref(&xt));
    let got = run("t0 = Mish in0\nout t0", 1, std::slice::from_ref(&xt)).unwrap();
    assert_close(&got[0], &mish.to_f64_vec().unwrap(), &[3, 4, 5], 1e-6, 1e-6);
    // Binary ops with broadcasting: [4, 1, 5] against [3, 1].
    let a = f32s(&[4, 1, 5], &x[..20]);
    let b = f32s(&[3, 1], &[0.5, -1.25, 2.0]);
    let bp = f32s(&[3, 1], &[0.5, 1.25, 2.0]);
    let apos = f32s(&[4, 1, 5], &y[..20]);
    for (op, base, exp) in [
        ("Add", &a, &b),
        ("Sub", &a, &b),
        ("Mul", &a, &b),
        ("Div", &a, &b),
        ("Max", &a, &b),
        ("Min", &a, &b),
        ("Pow", &apos, &bp),
    ] {
        let want = run1(op, 13, vec![], &[base.clone(), exp.clone()]);
        let got = run(
            &format!("t0 = {op} in0 in1\nout t0"),
            1,
            &[base.clone(), exp.clone()],
        )
        .unwrap()
        .remove(0);
        assert_close(&got, &want.to_f64_vec().unwrap(), &[4, 3, 5], 1e-6, 1e-6);
    }
    let slope = f32s(&[5], &[0.1, -0.2, 0.3, 0.4, 2.0]);
    let want = run1("PRelu", 16, vec![], &[xt.clone(), slope.clone()]);
    let got = run("t0 = PRelu in0 in1\nout t0", 1, &[xt.clone(), slope]).unwrap();
    assert_close(&got[0], &want.to_f64_vec().unwrap(), &[3, 4, 5], 1e-6, 1e-6);
    let lo = f32s(&[], &[-0.5]);
    let hi = f32s(&[], &[1.5]);
    let want = run1("Clip", 13, vec![], &[xt.clone(), lo, hi]);
    let got = run(
        "t0 = Clip in0 -0.5 1.5\nout t0",
        1,
        std::slice::from_ref(&xt),
    )
    .unwrap();
    assert_close(&got[0], &want.to_f64_vec().unwrap(), &[3, 4, 5], 0.0, 0.0);
}

/// NaN propagates through Max/Min/Clip/Relu as in the standalone kernels.
#[test]
fn nan_semantics_follow_the_standalone_kernels() {
    let x = f32s(&[4], &[f64::NAN, 1.0, -2.0, f64::INFINITY]);
    let out = run(
        "t0 = Max in0 0.0\nt1 = Min in0 0.0\nt2 = Clip in0 -1.0 1.0\nt3 = Relu in0\n\
         out t0\nout t1\nout t2\nout t3",
        4,
        std::slice::from_ref(&x),
    )
    .unwrap();
    let v = |t: &Tensor| t.to_f64_vec().unwrap();
    assert!(v(&out[0])[0].is_nan() && v(&out[1])[0].is_nan());
    assert!(v(&out[2])[0].is_nan() && v(&out[3])[0].is_nan());
    assert_eq!(&v(&out[0])[1..], &[1.0, 0.0, f64::INFINITY]);
    assert_eq!(&v(&out[1])[1..], &[0.0, -2.0, 0.0]);
    assert_eq!(&v(&out[2])[1..], &[1.0, -1.0, 1.0]);
}

/// A large strided broadcast (several parallel tasks, partial blocks) against a per-element
/// evaluation, and a scalar input, and empty tensors.
#[test]
fn large_broadcasts_cover_every_element() {
    let (n, c, w) = (37, 29, 71);
    let a = vals(n * c * w, 5);
    let b = vals(c, 6);
    let s = 0.75;
    let prog = "t0 = Mul in0 in1\nt1 = Sub t0 in2\nt2 = Tanh t1\nout t2";
    let at = f32s(&[n, c, w], &a);
    let bt = f32s(&[c, 1], &b);
    let st = f32s(&[1], &[s]);
    let got = run(prog, 1, &[at, bt, st]).unwrap().remove(0);
    assert_eq!(got.shape(), &[n, c, w]);
    let af: Vec<f32> = a.iter().map(|&v| v as f32).collect();
    let want: Vec<f64> = (0..n * c * w)
        .map(|i| {
            let ch = (i / w) % c;
            ((af[i] * b[ch] as f32 - s as f32) as f64).tanh()
        })
        .collect();
    assert_close(&got, &want, &[n, c, w], 1e-6, 1e-6);
    let e = run(
        prog,
        1,
        &[
            f32s(&[0, 3], &[]),
            f32s(&[3], &[1.0, 2.0, 3.0]),
            f32s(&[], &[1.0]),
        ],
    )
    .unwrap();
    assert_eq!(e[0].shape(), &[0, 3]);
    // Mixed dtypes and integer inputs are errors.
    let err = run(
        "t0 = Add in0 in1\nout t0",
        1,
        &[f32s(&[1], &[1.0]), f64s(&[1], &[1.0])],
    )
    .unwrap_err();
    assert!(err.to_string().contains("dtype"), "{err}");
    let err = run("t0 = Relu in0\nout t0", 1, &[i64s(&[1], &[1])]).unwrap_err();
    assert!(matches!(err, EpError::UnsupportedDtype { .. }), "{err}");
}
