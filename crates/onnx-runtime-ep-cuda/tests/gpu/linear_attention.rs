//! LinearAttention (opset 27) against the CPU provider on random inputs: the four update rules
//! in float32, float16 and bfloat16; per-head and per-key decay; per-head and per-token beta;
//! with and without past_state (also of another dtype than the inputs); GQA and MQA; the
//! default and an explicit scale; decode (T = 1), empty prompts (T = 0) and long prompts; odd
//! head sizes and every row variant of the kernel (d_k up to 1000); batch > 1; strided
//! (reversed and padded) views; present_state left off; bad shapes, dtypes and attributes.
//!
//! Half types run against a float32 CPU reference on the same (upcast) values, with a
//! tolerance relative to the largest |output|: 2e-4 for float32 (the sums run in another
//! order), 5e-3 for float16, 2e-2 for bfloat16. `output_types` must agree with the CPU's
//! outputs on the native dtypes. Keys are L2-normalized per head, as the spec asks of the
//! delta rules (it keeps the recurrence stable over long prompts).

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
        F16 => 5e-3,
        BF16 => 2e-2,
        _ => 2e-4,
    }
}

/// Every element of `got` within `tol(got.dtype) x max |want|` of `want`.
fn close_scaled(got: &T, want: &T, what: &str) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    let scale = (0..want.numel())
        .map(|i| get(want, i).abs())
        .fold(0.0f64, f64::max)
        .max(1e-3);
    close_values(got, want, 0.0, tol(got.dtype) * scale, what);
}

/// Runs `node` on the GPU, checks capture support and `output_types` against the CPU's
/// outputs on the native dtypes, and every output against the CPU on float32 copies of half
/// inputs.
fn check(ep: &CudaExecutionProvider, node: &Node, inputs: &[Option<T>], what: &str) -> Vec<T> {
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
    let types = bound
        .output_types(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: output_types: {e}"));
    let native_types: Vec<(DataType, Vec<usize>)> =
        native.iter().map(|t| (t.dtype, t.shape.clone())).collect();
    assert_eq!(types, native_types, "{what}: output_types vs the CPU");
    bound.set_outputs(&types);
    bound
        .execute(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: execute: {e}"));
    let got = bound.read().unwrap();
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        close_scaled(g, w, &format!("{what}: output {k} ({})", g.dtype));
    }
    got
}

/// One problem: sizes, rule and the optional-input variants.
#[derive(Clone, Copy, Debug)]
struct Case {
    b: usize,
    t: usize,
    hq: usize,
    hkv: usize,
    dk: usize,
    dv: usize,
    rule: &'static str,
    past: bool,
    /// Per-key (B, T, H_kv * d_k) rather than per-head decay.
    per_key: bool,
    /// One beta per token (B, T, 1) rather than per head.
    beta_scalar: bool,
    scale: Option<f32>,
}

const BASE: Case = Case {
    b: 2,
    t: 5,
    hq: 4,
    hkv: 2,
    dk: 8,
    dv: 8,
    rule: "gated_delta",
    past: true,
    per_key: true,
    beta_scalar: false,
    scale: None,
};

fn gated(rule: &str) -> bool {
    rule.starts_with("gated")
}

fn delta(rule: &str) -> bool {
    rule.ends_with("delta")
}

fn la_node(c: &Case) -> Node {
    let mut attrs = vec![
        ("q_num_heads", Attribute::Int(c.hq as i64)),
        ("kv_num_heads", Attribute::Int(c.hkv as i64)),
        ("update_rule", Attribute::String(c.rule.into())),
    ];
    if let Some(s) = c.scale {
        attrs.push(("scale", Attribute::Float(s)));
    }
    let mut n = node("LinearAttention", 6, 2, &attrs);
    if !c.past {
        n.inputs[3] = None;
    }
    if !gated(c.rule) {
        n.inputs[4] = None;
    }
    if !delta(c.rule) {
        n.inputs[5] = None;
    }
    n
}

/// Keys L2-normalized per (batch, time, head).
fn keys(rng: &mut Rng, dtype: DataType, c: &Case) -> T {
    let n = c.b * c.t * c.hkv;
    let mut v: Vec<f64> = Vec::with_capacity(n * c.dk);
    for _ in 0..n {
        let row: Vec<f64> = (0..c.dk)
            .map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
            .collect();
        let norm = row.iter().map(|x| x * x).sum::<f64>().sqrt().max(1e-6);
        v.extend(row.iter().map(|x| x / norm));
    }
    from_f64s(dtype, &[c.b, c.t, c.hkv * c.dk], &v)
}

/// The six inputs of `c` (omitted ones None), in `dtype` with past_state in `state`.
fn inputs(rng: &mut Rng, dtype: DataType, state: DataType, c: &Case) -> Vec<Option<T>> {
    let q = uniform(rng, dtype, &[c.b, c.t, c.hq * c.dk], -1.0, 1.0);
    let k = keys(rng, dtype, c);
    let v = uniform(rng, dtype, &[c.b, c.t, c.hkv * c.dv], -1.0, 1.0);
    let past = c
        .past
        .then(|| uniform(rng, state, &[c.b, c.hkv, c.dk, c.dv], -0.5, 0.5));
    let decay_width = if c.per_key { c.hkv * c.dk } else { c.hkv };
    let decay = gated(c.rule).then(|| uniform(rng, dtype, &[c.b, c.t, decay_width], -0.7, 0.0));
    let beta_width = if c.beta_scalar { 1 } else { c.hkv };
    let beta = delta(c.rule).then(|| uniform(rng, dtype, &[c.b, c.t, beta_width], 0.0, 1.0));
    vec![Some(q), Some(k), Some(v), past, decay, beta]
}

fn run_case(ep: &CudaExecutionProvider, rng: &mut Rng, dtype: DataType, c: Case) -> Vec<T> {
    let ins = inputs(rng, dtype, dtype, &c);
    check(ep, &la_node(&c), &ins, &format!("{dtype} {c:?}"))
}

#[test]
fn every_rule_dtype_and_optional_input() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    for dtype in DTYPES {
        for rule in ["linear", "gated", "delta", "gated_delta"] {
            for past in [false, true] {
                for per_key in [false, true] {
                    if per_key && !gated(rule) {
                        continue;
                    }
                    for beta_scalar in [false, true] {
                        if beta_scalar && !delta(rule) {
                            continue;
                        }
                        let c = Case {
                            rule,
                            past,
                            per_key,
                            beta_scalar,
                            ..BASE
                        };
                        run_case(&ep, &mut rng, dtype, c);
                    }
                }
            }
        }
    }
}

#[test]
fn gqa_mqa_scale_and_odd_sizes() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    let cases = [
        // MQA: one KV head for 6 query heads.
        Case {
            hq: 6,
            hkv: 1,
            ..BASE
        },
        // Equal heads, explicit scale, odd head sizes and batch 3.
        Case {
            b: 3,
            t: 7,
            hq: 3,
            hkv: 3,
            dk: 5,
            dv: 7,
            scale: Some(0.3),
            ..BASE
        },
        // d_v wider than one block's columns; d_k = 1.
        Case {
            b: 1,
            hq: 2,
            hkv: 1,
            dk: 1,
            dv: 300,
            rule: "gated",
            ..BASE
        },
        // Decode: one token with a past state.
        Case {
            t: 1,
            dk: 64,
            dv: 64,
            ..BASE
        },
    ];
    for dtype in DTYPES {
        for c in cases {
            run_case(&ep, &mut rng, dtype, c);
        }
    }
}

#[test]
fn every_row_variant_and_long_prompts() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    // d_k 100 and 128 take 4 rows per lane, 200 takes 8, 500 16 and 1000 32.
    for (dk, dv, t) in [
        (128, 128, 64),
        (100, 33, 40),
        (200, 16, 9),
        (500, 12, 5),
        (1000, 9, 3),
    ] {
        for dtype in DTYPES {
            let c = Case {
                b: 2,
                t,
                hq: 2,
                hkv: 1,
                dk,
                dv,
                ..BASE
            };
            run_case(&ep, &mut rng, dtype, c);
        }
    }
    // A longer prompt in float32 (the state is float32 throughout).
    let c = Case {
        b: 1,
        t: 300,
        dk: 32,
        dv: 32,
        ..BASE
    };
    run_case(&ep, &mut rng, F32, c);
}

#[test]
fn state_dtype_follows_past_state() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    for dtype in DTYPES {
        for state in DTYPES {
            let ins = inputs(&mut rng, dtype, state, &BASE);
            let got = check(
                &ep,
                &la_node(&BASE),
                &ins,
                &format!("{dtype} state {state}"),
            );
            assert_eq!(got[1].dtype, state);
        }
    }
}

#[test]
fn empty_prompt_passes_the_state_through() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    for dtype in DTYPES {
        for past in [false, true] {
            let c = Case { t: 0, past, ..BASE };
            let got = run_case(&ep, &mut rng, dtype, c);
            assert_eq!(got[0].numel(), 0);
        }
    }
}

#[test]
fn strided_inputs_and_states() {
    let ep = gpu();
    let mut rng = Rng::new(6);
    let layouts = [Layout::Reversed, Layout::Padded];
    for dtype in DTYPES {
        for (i, rule) in ["gated_delta", "delta", "gated"].into_iter().enumerate() {
            let c = Case {
                b: 3,
                t: 6,
                dk: 9,
                dv: 10,
                rule,
                per_key: i == 0,
                beta_scalar: i == 1,
                ..BASE
            };
            let ins: Vec<Option<T>> = inputs(&mut rng, dtype, dtype, &c)
                .into_iter()
                .enumerate()
                .map(|(k, t)| t.map(|t| t.with_layout(layouts[(k + i) % 2])))
                .collect();
            check(&ep, &la_node(&c), &ins, &format!("strided {dtype} {rule}"));
        }
    }
}

#[test]
fn present_state_may_be_left_off() {
    let ep = gpu();
    let mut rng = Rng::new(7);
    let c = BASE;
    let ins = inputs(&mut rng, F32, F32, &c);
    let n = la_node(&c);
    let want = reference(&n, OPSET, &ins, "one output");
    let wired: Vec<T> = ins.iter().flatten().cloned().collect();
    let shapes: Vec<Vec<usize>> = wired.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(&n, &shapes, OPSET).unwrap();
    let mut bound = Bound::new(&ep, &wired, &[(F32, want[0].shape.clone())]);
    bound.execute(kernel.as_ref()).unwrap();
    let got = bound.read().unwrap();
    assert_eq!(got.len(), 1);
    close_scaled(&got[0], &want[0], "output without present_state");
}

#[test]
fn bad_inputs_and_attributes_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(8);
    let n = la_node(&BASE);
    let good = inputs(&mut rng, F32, F32, &BASE);
    let with = |i: usize, t: Option<T>| {
        let mut v = good.clone();
        v[i] = t;
        v
    };
    let key = uniform(&mut rng, F32, &[2, 5, 2 * 7], -1.0, 1.0);
    expect_err(&ep, &n, OPSET, &with(1, Some(key)), "do not match query");
    let past = uniform(&mut rng, F32, &[2, 2, 8, 9], -1.0, 1.0);
    expect_err(&ep, &n, OPSET, &with(3, Some(past)), "past_state");
    let decay = uniform(&mut rng, F32, &[2, 5, 3], -1.0, 0.0);
    expect_err(&ep, &n, OPSET, &with(4, Some(decay)), "decay");
    let beta = uniform(&mut rng, F32, &[2, 5, 4], 0.0, 1.0);
    expect_err(&ep, &n, OPSET, &with(5, Some(beta)), "beta");
    let half_key = uniform(&mut rng, F16, &[2, 5, 16], -1.0, 1.0);
    expect_err(&ep, &n, OPSET, &with(1, Some(half_key)), "key");
    let ints = random_numeric(&mut rng, DataType::Int32, &[2, 5, 32], -2, 2);
    expect_err(&ep, &n, OPSET, &with(0, Some(ints)), "float16");
    let rank2 = uniform(&mut rng, F32, &[10, 32], -1.0, 1.0);
    expect_err(&ep, &n, OPSET, &with(0, Some(rank2)), "query");
    // The linear rule given a decay input.
    let linear = Case {
        rule: "linear",
        ..BASE
    };
    let mut n_linear = la_node(&linear);
    n_linear.inputs[4] = Some(onnx_runtime_ir::ValueId(4));
    let ins = inputs(&mut rng, F32, F32, &BASE);
    let ins = vec![
        ins[0].clone(),
        ins[1].clone(),
        ins[2].clone(),
        ins[3].clone(),
        ins[4].clone(),
    ];
    expect_err(&ep, &n_linear, OPSET, &ins, "update_rule");
    // Attributes, refused when the kernel is built.
    for (attrs, needle) in [
        (
            vec![
                ("q_num_heads", Attribute::Int(3)),
                ("kv_num_heads", Attribute::Int(2)),
            ],
            "multiple",
        ),
        (vec![("kv_num_heads", Attribute::Int(2))], "required"),
        (
            vec![
                ("q_num_heads", Attribute::Int(2)),
                ("kv_num_heads", Attribute::Int(2)),
                ("update_rule", Attribute::String("mamba".into())),
            ],
            "mamba",
        ),
    ] {
        let bad = node("LinearAttention", 3, 2, &attrs);
        let err = ep
            .get_kernel(&bad, &[], OPSET)
            .err()
            .unwrap_or_else(|| panic!("expected an error saying {needle}"))
            .to_string();
        assert!(
            err.contains(&bad.name) && err.contains(needle),
            "expected an error naming the node and saying '{needle}', got: {err}"
        );
    }
}
