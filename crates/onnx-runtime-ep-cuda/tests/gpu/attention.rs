//! The attention family against the CPU provider on random inputs: ONNX Attention 23 / 24 / 25
//! (3-D and 4-D inputs, GQA, causal, bool and float masks broadcast over batch and heads and
//! shorter than the keys, softcap, custom scale, past / present for decode (split-K) and
//! prompts, nonpad_kv_seqlen, sliding windows, the qk_matmul_output modes, head sizes 32 to
//! 256 and odd ones, sequence lengths off the tiles, strided layouts), com.microsoft
//! MultiHeadAttention (separate / packed / BNSH key and value, bias, key padding masks,
//! attention_bias, past / present, unidirectional, the probabilities output) and Attention
//! (fused projection, mask_index, past / present), GroupQueryAttention (prompt and decode
//! with a shared past buffer, rotary, packed QKV, local window, softcap, smooth softmax and
//! head sinks) and both RotaryEmbeddings (partial, interleaved, position_ids / offsets /
//! per-position caches, 3-D and 4-D).
//!
//! Half types run against a float32 CPU reference on the same (upcast) values, with a
//! tolerance relative to the largest |output|: 5e-3 for float16, 2e-2 for bfloat16.
//! `output_types` must agree with the CPU's outputs; bad shapes are errors naming the node.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const F32: DataType = DataType::Float32;
const F64: DataType = DataType::Float64;
const F16: DataType = DataType::Float16;
const BF16: DataType = DataType::BFloat16;
const FLOATS: [DataType; 4] = [F32, F64, F16, BF16];

/// Continuous uniform values in [lo, hi) stored as `dtype`.
fn uniform(rng: &mut Rng, dtype: DataType, shape: &[usize], lo: f64, hi: f64) -> T {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| lo + (hi - lo) * ((rng.next() >> 11) as f64 / (1u64 << 53) as f64))
        .collect();
    from_f64s(dtype, shape, &v)
}

fn contrib(mut n: Node) -> Node {
    n.domain = "com.microsoft".into();
    n
}

/// `n` with inputs `omit` left out (None).
fn omit(mut n: Node, omit: &[usize]) -> Node {
    for &i in omit {
        n.inputs[i] = None;
    }
    n
}

/// The same values as float32 (half types), else the tensor itself.
fn as_f32(t: &T) -> T {
    if t.dtype == F16 || t.dtype == BF16 {
        let v: Vec<f64> = (0..t.numel()).map(|i| get(t, i)).collect();
        from_f64s(F32, &t.shape, &v)
    } else {
        t.clone()
    }
}

/// Tolerance relative to the largest |value| of an output of `dtype`.
fn tol(dtype: DataType) -> f64 {
    match dtype {
        F64 => 1e-9,
        F16 => 5e-3,
        BF16 => 2e-2,
        _ => 2e-5,
    }
}

/// Runs `node` on the GPU with the given inputs (`None` = omitted; the node must have those
/// inputs set to None too), checks `output_types` against the CPU's outputs and compares
/// every output with the CPU provider on float32 copies of half inputs. Returns the outputs.
fn check(
    ep: &CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[Option<T>],
    what: &str,
) -> Vec<T> {
    let refs: Vec<Option<&T>> = inputs.iter().map(Option::as_ref).collect();
    let native = cpu_reference(node, opset, &refs)
        .unwrap_or_else(|e| panic!("{what}: CPU reference (native dtypes): {e}"));
    let up: Vec<Option<T>> = inputs.iter().map(|t| t.as_ref().map(as_f32)).collect();
    let up_refs: Vec<Option<&T>> = up.iter().map(Option::as_ref).collect();
    let want = cpu_reference(node, opset, &up_refs)
        .unwrap_or_else(|e| panic!("{what}: CPU reference (float32): {e}"));
    let wired: Vec<T> = inputs.iter().flatten().cloned().collect();
    let shapes: Vec<Vec<usize>> = wired.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep
        .get_kernel(node, &shapes, opset)
        .unwrap_or_else(|e| panic!("{what}: get_kernel: {e}"));
    // GroupQueryAttention reads total_sequence_length on the host: capturable once warmed.
    if node.op_type != "GroupQueryAttention" {
        assert_eq!(
            kernel.capture_support(),
            CaptureSupport::Supported,
            "{what}: capture support"
        );
    }
    let mut bound = Bound::new(ep, &wired, &[]);
    let types = bound
        .output_types(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: output_types: {e}"));
    let native_types: Vec<(DataType, Vec<usize>)> =
        native.iter().map(|t| (t.dtype, t.shape.clone())).collect();
    assert_eq!(
        types, native_types,
        "{what}: output_types vs the CPU outputs"
    );
    bound.set_outputs(&types);
    bound
        .execute(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: execute: {e}"));
    let got = bound
        .read()
        .unwrap_or_else(|e| panic!("{what}: reading the outputs: {e}"));
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        assert_eq!(g.shape, w.shape, "{what}: output {k} shape");
        let scale = (0..w.numel())
            .map(|i| get(w, i))
            .filter(|v| v.is_finite())
            .fold(0.0f64, |m, v| m.max(v.abs()))
            .max(1e-3);
        let bound = tol(g.dtype) * scale;
        let mut worst = (0usize, 0.0f64);
        for i in 0..w.numel() {
            let (gv, wv) = (get(g, i), get(w, i));
            if wv.is_infinite() || wv.is_nan() {
                assert!(
                    gv == wv || (wv.is_nan() && gv.is_nan()),
                    "{what}: output {k} element {i} of {:?}: got {gv}, want {wv}",
                    w.shape
                );
                continue;
            }
            let err = (gv - wv).abs();
            if err.is_nan() || err > worst.1 {
                worst = (i, err);
            }
        }
        let (i, err) = worst;
        assert!(
            err <= bound,
            "{what}: output {k} ({}) of {:?}: element {i} got {}, want {} (error {err:.3e} > \
             {bound:.3e} = {} x max |want| {scale:.3e})",
            g.dtype,
            w.shape,
            get(g, i),
            get(w, i),
            tol(g.dtype)
        );
    }
    got
}

/// The error of building and asking `output_types` (or executing) for these inputs.
fn error_of(ep: &CudaExecutionProvider, node: &Node, opset: u64, inputs: &[T]) -> EpError {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = match ep.get_kernel(node, &shapes, opset) {
        Ok(k) => k,
        Err(e) => return e,
    };
    let mut bound = Bound::new(ep, inputs, &[]);
    if let Err(e) = bound.output_types(kernel.as_ref()) {
        return e;
    }
    bound
        .execute(kernel.as_ref())
        .expect_err("expected an error")
}

fn assert_names_node(e: &EpError, node: &Node, needle: &str) {
    let msg = e.to_string();
    assert!(
        msg.contains(&node.name) && msg.contains(needle),
        "expected an error naming {} and saying '{needle}', got: {msg}",
        node.name
    );
}

fn int(v: i64) -> Attribute {
    Attribute::Int(v)
}

// ---- ONNX Attention ----

/// 4-D Q [b, hq, sq, d], K [b, hkv, skv, d], V [b, hkv, skv, dv].
fn qkv4(
    rng: &mut Rng,
    dtype: DataType,
    (b, hq, hkv, sq, skv, d, dv): (usize, usize, usize, usize, usize, usize, usize),
) -> (T, T, T) {
    (
        uniform(rng, dtype, &[b, hq, sq, d], -1.0, 1.0),
        uniform(rng, dtype, &[b, hkv, skv, d], -1.0, 1.0),
        uniform(rng, dtype, &[b, hkv, skv, dv], -1.0, 1.0),
    )
}

#[test]
fn attention_4d_every_dtype_off_tile_lengths() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    for dtype in FLOATS {
        let (q, k, v) = qkv4(&mut rng, dtype, (2, 3, 3, 77, 129, 64, 64));
        let n = node("Attention", 3, 1, &[]);
        check(
            &ep,
            &n,
            23,
            &[Some(q), Some(k), Some(v)],
            &format!("4-D {dtype}"),
        );
    }
}

#[test]
fn attention_3d_gqa_heads_8_over_2() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    for dtype in [F32, F16, BF16] {
        let (b, sq, skv, d) = (2, 33, 65, 64);
        let q = uniform(&mut rng, dtype, &[b, sq, 8 * d], -1.0, 1.0);
        let k = uniform(&mut rng, dtype, &[b, skv, 2 * d], -1.0, 1.0);
        let v = uniform(&mut rng, dtype, &[b, skv, 2 * d], -1.0, 1.0);
        let n = node(
            "Attention",
            3,
            1,
            &[("q_num_heads", int(8)), ("kv_num_heads", int(2))],
        );
        check(
            &ep,
            &n,
            23,
            &[Some(q), Some(k), Some(v)],
            &format!("3-D GQA {dtype}"),
        );
    }
}

#[test]
fn attention_causal_prompt_and_cross_lengths() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    for dtype in [F32, F16, BF16] {
        for (sq, skv) in [(129, 129), (16, 80), (70, 40)] {
            let (q, k, v) = qkv4(&mut rng, dtype, (1, 4, 2, sq, skv, 64, 64));
            let n = node("Attention", 3, 1, &[("is_causal", int(1))]);
            check(
                &ep,
                &n,
                23,
                &[Some(q), Some(k), Some(v)],
                &format!("causal {dtype} sq {sq} skv {skv}"),
            );
        }
    }
}

#[test]
fn attention_bool_and_float_masks_broadcast() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    let (b, h, sq, skv, d) = (2, 4, 37, 70, 32);
    for dtype in [F32, F16, BF16] {
        let (q, k, v) = qkv4(&mut rng, dtype, (b, h, h, sq, skv, d, d));
        // Each row keeps at least its first key.
        let mut keep: Vec<f64> = (0..sq * skv)
            .map(|_| (rng.below(3) != 0) as u8 as f64)
            .collect();
        for i in 0..sq {
            keep[i * skv] = 1.0;
        }
        let masks = [
            ("bool [sq, t]", from_f64s(DataType::Bool, &[sq, skv], &keep)),
            (
                "float [b, 1, sq, t]",
                uniform(&mut rng, dtype, &[b, 1, sq, skv], -2.0, 2.0),
            ),
            (
                "float [h, 1, t] over queries",
                uniform(&mut rng, dtype, &[h, 1, skv], -2.0, 2.0),
            ),
            (
                "float [1, 1, sq, t - 6] (padded keys hidden)",
                uniform(&mut rng, dtype, &[1, 1, sq, skv - 6], -2.0, 2.0),
            ),
            (
                "float32 mask [t]",
                uniform(&mut rng, F32, &[skv], -1.0, 1.0),
            ),
        ];
        for (what, m) in masks {
            for causal in [0, 1] {
                let n = node("Attention", 4, 1, &[("is_causal", int(causal))]);
                check(
                    &ep,
                    &n,
                    23,
                    &[
                        Some(q.clone()),
                        Some(k.clone()),
                        Some(v.clone()),
                        Some(m.clone()),
                    ],
                    &format!("{dtype} mask {what} causal {causal}"),
                );
            }
        }
    }
}

#[test]
fn attention_fully_masked_rows_are_zero() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    let (sq, skv, d) = (5, 9, 16);
    let (q, k, v) = qkv4(&mut rng, F32, (1, 2, 2, sq, skv, d, d));
    let mut keep = vec![1.0; sq * skv];
    for j in 0..skv {
        keep[2 * skv + j] = 0.0; // row 2 sees nothing
    }
    let m = from_f64s(DataType::Bool, &[sq, skv], &keep);
    let n = node("Attention", 4, 1, &[]);
    let got = check(
        &ep,
        &n,
        23,
        &[Some(q), Some(k), Some(v), Some(m)],
        "fully masked row",
    );
    for h in 0..2 {
        for c in 0..d {
            assert_eq!(get(&got[0], (h * sq + 2) * d + c), 0.0, "head {h} row 2");
        }
    }
}

#[test]
fn attention_softcap_and_custom_scale() {
    let ep = gpu();
    let mut rng = Rng::new(6);
    for dtype in [F32, F16, BF16, F64] {
        let (q, k, v) = qkv4(&mut rng, dtype, (2, 2, 2, 20, 45, 64, 64));
        let q = from_f64s(
            dtype,
            &q.shape,
            &(0..q.numel()).map(|i| 4.0 * get(&q, i)).collect::<Vec<_>>(),
        );
        let n = node(
            "Attention",
            3,
            1,
            &[
                ("softcap", Attribute::Float(3.0)),
                ("scale", Attribute::Float(0.3)),
                ("is_causal", int(1)),
            ],
        );
        check(
            &ep,
            &n,
            23,
            &[Some(q), Some(k), Some(v)],
            &format!("softcap {dtype}"),
        );
    }
}

#[test]
fn attention_head_sizes_and_value_head_size() {
    let ep = gpu();
    let mut rng = Rng::new(7);
    for dtype in [F16, BF16, F32] {
        for (d, dv) in [
            (128, 128),
            (40, 40),
            (32, 32),
            (80, 80),
            (96, 96),
            (256, 256),
            (64, 40),
            (8, 8),
        ] {
            let (q, k, v) = qkv4(&mut rng, dtype, (1, 2, 2, 21, 67, d, dv));
            let n = node("Attention", 3, 1, &[]);
            check(
                &ep,
                &n,
                23,
                &[Some(q), Some(k), Some(v)],
                &format!("{dtype} head {d} value head {dv}"),
            );
        }
    }
}

#[test]
fn attention_decode_with_past_splits_keys() {
    let ep = gpu();
    let mut rng = Rng::new(8);
    for dtype in [F32, F16, BF16] {
        for (past, sq) in [(700usize, 1usize), (100, 1), (50, 7), (0, 1)] {
            let (b, hq, hkv, d) = (2, 8, 2, 64);
            let (q, k, v) = qkv4(&mut rng, dtype, (b, hq, hkv, sq, sq, d, d));
            let pk = uniform(&mut rng, dtype, &[b, hkv, past, d], -1.0, 1.0);
            let pv = uniform(&mut rng, dtype, &[b, hkv, past, d], -1.0, 1.0);
            for causal in [0, 1] {
                let n = node("Attention", 6, 3, &[("is_causal", int(causal))]);
                let n = omit(n, &[3]);
                check(
                    &ep,
                    &n,
                    23,
                    &[
                        Some(q.clone()),
                        Some(k.clone()),
                        Some(v.clone()),
                        None,
                        Some(pk.clone()),
                        Some(pv.clone()),
                    ],
                    &format!("{dtype} past {past} sq {sq} causal {causal}"),
                );
            }
        }
    }
}

#[test]
fn attention_3d_decode_with_mask_and_past() {
    let ep = gpu();
    let mut rng = Rng::new(9);
    let (b, sq, past, d) = (2usize, 1usize, 300usize, 128usize);
    let t = past + sq;
    for dtype in [F16, F32] {
        let q = uniform(&mut rng, dtype, &[b, sq, 8 * d], -1.0, 1.0);
        let k = uniform(&mut rng, dtype, &[b, sq, 2 * d], -1.0, 1.0);
        let v = uniform(&mut rng, dtype, &[b, sq, 2 * d], -1.0, 1.0);
        let pk = uniform(&mut rng, dtype, &[b, 2, past, d], -1.0, 1.0);
        let pv = uniform(&mut rng, dtype, &[b, 2, past, d], -1.0, 1.0);
        let m = uniform(&mut rng, dtype, &[b, 1, 1, t], -1.0, 1.0);
        let n = node(
            "Attention",
            6,
            3,
            &[("q_num_heads", int(8)), ("kv_num_heads", int(2))],
        );
        check(
            &ep,
            &n,
            23,
            &[Some(q), Some(k), Some(v), Some(m), Some(pk), Some(pv)],
            &format!("3-D decode {dtype}"),
        );
    }
}

#[test]
fn attention_nonpad_kv_seqlen_opset_24() {
    let ep = gpu();
    let mut rng = Rng::new(10);
    for dtype in [F32, F16] {
        let (b, sq, cache, d) = (2usize, 3usize, 96usize, 64usize);
        let (q, k, v) = qkv4(&mut rng, dtype, (b, 4, 2, sq, cache, d, d));
        let nonpad = i64s(&[b], &[50, 96]);
        for causal in [0, 1] {
            let n = omit(
                node("Attention", 7, 1, &[("is_causal", int(causal))]),
                &[3, 4, 5],
            );
            check(
                &ep,
                &n,
                24,
                &[
                    Some(q.clone()),
                    Some(k.clone()),
                    Some(v.clone()),
                    None,
                    None,
                    None,
                    Some(nonpad.clone()),
                ],
                &format!("{dtype} nonpad causal {causal}"),
            );
        }
    }
}

#[test]
fn attention_sliding_windows_opset_25() {
    let ep = gpu();
    let mut rng = Rng::new(11);
    let (q, k, v) = qkv4(&mut rng, F16, (1, 2, 2, 40, 100, 64, 64));
    for (causal, left, right) in [(1, 16, -1), (0, 5, 7), (0, -1, 0)] {
        let n = node(
            "Attention",
            3,
            1,
            &[
                ("is_causal", int(causal)),
                ("left_window_size", int(left)),
                ("right_window_size", int(right)),
            ],
        );
        check(
            &ep,
            &n,
            25,
            &[Some(q.clone()), Some(k.clone()), Some(v.clone())],
            &format!("window causal {causal} left {left} right {right}"),
        );
    }
}

#[test]
fn attention_qk_matmul_output_modes() {
    let ep = gpu();
    let mut rng = Rng::new(12);
    for dtype in [F32, F16] {
        let (q, k, v) = qkv4(&mut rng, dtype, (1, 2, 1, 9, 13, 32, 32));
        let m = uniform(&mut rng, dtype, &[9, 13], -1.0, 1.0);
        for mode in 0..4 {
            let n = node(
                "Attention",
                4,
                4,
                &[
                    ("qk_matmul_output_mode", int(mode)),
                    ("is_causal", int(1)),
                    ("softcap", Attribute::Float(2.0)),
                ],
            );
            check(
                &ep,
                &n,
                23,
                &[
                    Some(q.clone()),
                    Some(k.clone()),
                    Some(v.clone()),
                    Some(m.clone()),
                ],
                &format!("{dtype} qk mode {mode}"),
            );
        }
    }
}

#[test]
fn attention_strided_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(13);
    for dtype in [F16, F32] {
        for layout in [Layout::Reversed, Layout::Padded] {
            let (q, k, v) = qkv4(&mut rng, dtype, (2, 2, 2, 19, 33, 64, 64));
            let n = node("Attention", 3, 1, &[]);
            check(
                &ep,
                &n,
                23,
                &[
                    Some(q.with_layout(layout)),
                    Some(k.with_layout(layout)),
                    Some(v),
                ],
                &format!("{dtype} {layout:?}"),
            );
        }
    }
}

#[test]
fn attention_bad_shapes_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(14);
    // 6 query heads over 4 kv heads.
    let (q, k, v) = qkv4(&mut rng, F32, (1, 6, 4, 4, 4, 8, 8));
    let n = node("Attention", 3, 1, &[]);
    let e = error_of(&ep, &n, 23, &[q, k, v]);
    assert_names_node(&e, &n, "head");
    // A mask that does not broadcast over the queries.
    let (q, k, v) = qkv4(&mut rng, F32, (1, 2, 2, 4, 6, 8, 8));
    let m = uniform(&mut rng, F32, &[3, 6], -1.0, 1.0);
    let n = node("Attention", 4, 1, &[]);
    let e = error_of(&ep, &n, 23, &[q.clone(), k.clone(), v.clone(), m]);
    assert_names_node(&e, &n, "attn_mask");
    // A mask longer than the keys.
    let m = uniform(&mut rng, F32, &[4, 7], -1.0, 1.0);
    let e = error_of(&ep, &n, 23, &[q.clone(), k.clone(), v.clone(), m]);
    assert_names_node(&e, &n, "attn_mask");
    // 3-D without head counts.
    let q3 = uniform(&mut rng, F32, &[1, 4, 16], -1.0, 1.0);
    let n = node("Attention", 3, 1, &[]);
    let e = error_of(&ep, &n, 23, &[q3.clone(), q3.clone(), q3]);
    assert_names_node(&e, &n, "q_num_heads");
    // Head size above the kernels' limit: a planned refusal (the CPU kernel runs).
    let (q, k, v) = qkv4(&mut rng, F32, (1, 1, 1, 2, 2, 320, 320));
    let n = node("Attention", 3, 1, &[]);
    let e = error_of(&ep, &n, 23, &[q, k, v]);
    assert!(matches!(e, EpError::UnsupportedDtype { .. }), "{e}");
}

// ---- com.microsoft MultiHeadAttention ----

#[test]
fn mha_separate_qkv_with_bias_masks_and_past() {
    let ep = gpu();
    let mut rng = Rng::new(20);
    let (b, s, l, nh, d, p) = (2usize, 9usize, 9usize, 4usize, 32usize, 12usize);
    let hid = nh * d;
    let t = p + l;
    for dtype in [F32, F16] {
        let q = uniform(&mut rng, dtype, &[b, s, hid], -1.0, 1.0);
        let k = uniform(&mut rng, dtype, &[b, l, hid], -1.0, 1.0);
        let v = uniform(&mut rng, dtype, &[b, l, hid], -1.0, 1.0);
        let bias = uniform(&mut rng, dtype, &[3 * hid], -0.5, 0.5);
        let kpm = i32s(&[b], &[15, 21]);
        let ab = uniform(&mut rng, dtype, &[1, nh, s, t], -1.0, 1.0);
        let pk = uniform(&mut rng, dtype, &[b, nh, p, d], -1.0, 1.0);
        let pv = uniform(&mut rng, dtype, &[b, nh, p, d], -1.0, 1.0);
        for causal in [0, 1] {
            let n = contrib(node(
                "MultiHeadAttention",
                8,
                4,
                &[
                    ("num_heads", int(nh as i64)),
                    ("unidirectional", int(causal)),
                ],
            ));
            check(
                &ep,
                &n,
                1,
                &[
                    Some(q.clone()),
                    Some(k.clone()),
                    Some(v.clone()),
                    Some(bias.clone()),
                    Some(kpm.clone()),
                    Some(ab.clone()),
                    Some(pk.clone()),
                    Some(pv.clone()),
                ],
                &format!("MHA {dtype} causal {causal}"),
            );
        }
    }
}

#[test]
fn mha_key_padding_mask_forms() {
    let ep = gpu();
    let mut rng = Rng::new(21);
    let (b, s, l, nh, d) = (2usize, 5usize, 70usize, 2usize, 64usize);
    let hid = nh * d;
    let q = uniform(&mut rng, F16, &[b, s, hid], -1.0, 1.0);
    let k = uniform(&mut rng, F16, &[b, l, hid], -1.0, 1.0);
    let v = uniform(&mut rng, F16, &[b, l, hid], -1.0, 1.0);
    let per_batch: Vec<i32> = (0..b * l).map(|i| (i % 3 != 1) as i32).collect();
    let per_query: Vec<i32> = (0..b * s * l).map(|i| (i % 5 != 2) as i32).collect();
    let masks = [
        i32s(&[b], &[40, 70]),
        i32s(&[b, l], &per_batch),
        i32s(&[b, s, l], &per_query),
    ];
    for m in masks {
        let n = omit(
            contrib(node(
                "MultiHeadAttention",
                5,
                1,
                &[("num_heads", int(nh as i64))],
            )),
            &[3],
        );
        check(
            &ep,
            &n,
            1,
            &[
                Some(q.clone()),
                Some(k.clone()),
                Some(v.clone()),
                None,
                Some(m.clone()),
            ],
            &format!("MHA key padding {:?}", m.shape),
        );
    }
}

#[test]
fn mha_packed_and_bnsh_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(22);
    let (b, s, l, nh, d) = (2usize, 11usize, 23usize, 3usize, 32usize);
    for dtype in [F32, BF16] {
        // Packed QKV [b, s, n, 3, d].
        let qkv = uniform(&mut rng, dtype, &[b, s, nh, 3, d], -1.0, 1.0);
        let n = contrib(node(
            "MultiHeadAttention",
            1,
            1,
            &[("num_heads", int(nh as i64))],
        ));
        check(&ep, &n, 1, &[Some(qkv)], &format!("{dtype} packed QKV"));
        // Packed KV [b, l, n, 2, d] with a query bias.
        let q = uniform(&mut rng, dtype, &[b, s, nh * d], -1.0, 1.0);
        let kv = uniform(&mut rng, dtype, &[b, l, nh, 2, d], -1.0, 1.0);
        let bias = uniform(&mut rng, dtype, &[3 * nh * d], -0.5, 0.5);
        let n = omit(
            contrib(node(
                "MultiHeadAttention",
                4,
                1,
                &[("num_heads", int(nh as i64))],
            )),
            &[2],
        );
        check(
            &ep,
            &n,
            1,
            &[Some(q.clone()), Some(kv), None, Some(bias)],
            &format!("{dtype} packed KV"),
        );
        // BNSH key and value, 4 outputs (probabilities).
        let k = uniform(&mut rng, dtype, &[b, nh, l, d], -1.0, 1.0);
        let v = uniform(&mut rng, dtype, &[b, nh, l, 16], -1.0, 1.0);
        let n = omit(
            contrib(node(
                "MultiHeadAttention",
                3,
                4,
                &[
                    ("num_heads", int(nh as i64)),
                    ("scale", Attribute::Float(0.2)),
                ],
            )),
            &[],
        );
        check(
            &ep,
            &n,
            1,
            &[Some(q), Some(k), Some(v)],
            &format!("{dtype} BNSH key/value"),
        );
    }
}

#[test]
fn mha_bad_shapes_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(23);
    let q = uniform(&mut rng, F32, &[1, 4, 30], -1.0, 1.0);
    let n = contrib(node("MultiHeadAttention", 3, 1, &[("num_heads", int(4))]));
    let e = error_of(&ep, &n, 1, &[q.clone(), q.clone(), q.clone()]);
    assert_names_node(&e, &n, "num_heads");
    let q = uniform(&mut rng, F32, &[1, 4, 32], -1.0, 1.0);
    let m = i32s(&[3], &[1, 2, 3]);
    let n = omit(
        contrib(node("MultiHeadAttention", 5, 1, &[("num_heads", int(4))])),
        &[3],
    );
    let e = error_of(&ep, &n, 1, &[q.clone(), q.clone(), q, m]);
    assert_names_node(&e, &n, "key_padding_mask");
}

// ---- com.microsoft Attention ----

#[test]
fn ms_attention_projection_mask_and_past() {
    let ep = gpu();
    let mut rng = Rng::new(30);
    let (b, s, din, nh, d, p) = (2usize, 7usize, 48usize, 4usize, 16usize, 5usize);
    let hid = nh * d;
    let t = p + s;
    for dtype in [F32, F16] {
        let x = uniform(&mut rng, dtype, &[b, s, din], -1.0, 1.0);
        let w = uniform(&mut rng, dtype, &[din, 3 * hid], -0.3, 0.3);
        let bias = uniform(&mut rng, dtype, &[3 * hid], -0.3, 0.3);
        let mask: Vec<i32> = (0..b * t).map(|i| (i % 4 != 3) as i32).collect();
        let mask = i32s(&[b, t], &mask);
        let past = uniform(&mut rng, dtype, &[2, b, nh, p, d], -1.0, 1.0);
        for causal in [0, 1] {
            let n = contrib(node(
                "Attention",
                5,
                2,
                &[
                    ("num_heads", int(nh as i64)),
                    ("unidirectional", int(causal)),
                ],
            ));
            check(
                &ep,
                &n,
                1,
                &[
                    Some(x.clone()),
                    Some(w.clone()),
                    Some(bias.clone()),
                    Some(mask.clone()),
                    Some(past.clone()),
                ],
                &format!("Attention {dtype} causal {causal}"),
            );
        }
        // No bias, qkv_hidden_sizes with a different V size, lengths mask, attention_bias.
        let w2 = uniform(&mut rng, dtype, &[din, 2 * hid + 2 * nh * 8], -0.3, 0.3);
        let ab = uniform(&mut rng, dtype, &[b, 1, s, s], -1.0, 1.0);
        let n = omit(
            contrib(node(
                "Attention",
                6,
                1,
                &[
                    ("num_heads", int(nh as i64)),
                    (
                        "qkv_hidden_sizes",
                        Attribute::Ints(vec![hid as i64, hid as i64, (2 * nh * 8) as i64]),
                    ),
                ],
            )),
            &[2, 4],
        );
        check(
            &ep,
            &n,
            1,
            &[
                Some(x.clone()),
                Some(w2),
                None,
                Some(i32s(&[b], &[3, 7])),
                None,
                Some(ab),
            ],
            &format!("Attention {dtype} qkv_hidden_sizes"),
        );
    }
}

// ---- RotaryEmbedding ----

#[test]
fn rotary_onnx_positions_partial_and_interleaved() {
    let ep = gpu();
    let mut rng = Rng::new(40);
    let (b, h, s, d) = (2usize, 3usize, 5usize, 16usize);
    for dtype in [F32, F16, BF16, F64] {
        for (rot, interleaved) in [(0usize, 0i64), (0, 1), (8, 0), (8, 1)] {
            let r = if rot == 0 { d } else { rot };
            let x = uniform(&mut rng, dtype, &[b, h, s, d], -2.0, 2.0);
            let cos = uniform(&mut rng, dtype, &[20, r / 2], -1.0, 1.0);
            let sin = uniform(&mut rng, dtype, &[20, r / 2], -1.0, 1.0);
            let ids: Vec<i64> = (0..b * s).map(|i| ((i * 7) % 20) as i64).collect();
            let pos = i64s(&[b, s], &ids);
            let n = node(
                "RotaryEmbedding",
                4,
                1,
                &[
                    ("rotary_embedding_dim", int(rot as i64)),
                    ("interleaved", int(interleaved)),
                ],
            );
            check(
                &ep,
                &n,
                23,
                &[Some(x.clone()), Some(cos), Some(sin), Some(pos)],
                &format!("rotary {dtype} rot {rot} interleaved {interleaved}"),
            );
            // 3-D input without position_ids: caches per (batch, position).
            let x3 = uniform(&mut rng, dtype, &[b, s, h * d], -2.0, 2.0);
            let cos = uniform(&mut rng, dtype, &[b, s, r / 2], -1.0, 1.0);
            let sin = uniform(&mut rng, dtype, &[b, s, r / 2], -1.0, 1.0);
            let n = node(
                "RotaryEmbedding",
                3,
                1,
                &[
                    ("rotary_embedding_dim", int(rot as i64)),
                    ("interleaved", int(interleaved)),
                    ("num_heads", int(h as i64)),
                ],
            );
            check(
                &ep,
                &n,
                23,
                &[Some(x3.with_layout(Layout::Padded)), Some(cos), Some(sin)],
                &format!("rotary 3-D {dtype} rot {rot} interleaved {interleaved}"),
            );
        }
    }
}

#[test]
fn rotary_microsoft_offsets_and_ids() {
    let ep = gpu();
    let mut rng = Rng::new(41);
    let (b, s, h, d) = (2usize, 6usize, 4usize, 32usize);
    for dtype in [F32, F16] {
        let cos = uniform(&mut rng, dtype, &[64, d / 2], -1.0, 1.0);
        let sin = uniform(&mut rng, dtype, &[64, d / 2], -1.0, 1.0);
        let x = uniform(&mut rng, dtype, &[b, s, h * d], -2.0, 2.0);
        for interleaved in [0, 1] {
            for pos in [
                i64s(&[1], &[9]),
                i64s(
                    &[b, s],
                    &(0..(b * s) as i64)
                        .map(|i| (i * 5) % 64)
                        .collect::<Vec<_>>(),
                ),
            ] {
                let n = contrib(node(
                    "RotaryEmbedding",
                    4,
                    1,
                    &[
                        ("interleaved", int(interleaved)),
                        ("num_heads", int(h as i64)),
                    ],
                ));
                check(
                    &ep,
                    &n,
                    1,
                    &[
                        Some(x.clone()),
                        Some(pos.clone()),
                        Some(cos.clone()),
                        Some(sin.clone()),
                    ],
                    &format!(
                        "ms rotary {dtype} interleaved {interleaved} pos {:?}",
                        pos.shape
                    ),
                );
            }
        }
        // 4-D input, partial rotation (caches narrower than the head).
        let x4 = uniform(&mut rng, dtype, &[b, h, s, d], -2.0, 2.0);
        let cos = uniform(&mut rng, dtype, &[16, 8], -1.0, 1.0);
        let sin = uniform(&mut rng, dtype, &[16, 8], -1.0, 1.0);
        let n = contrib(node("RotaryEmbedding", 4, 1, &[]));
        check(
            &ep,
            &n,
            1,
            &[Some(x4), Some(i64s(&[1], &[3])), Some(cos), Some(sin)],
            &format!("ms rotary 4-D partial {dtype}"),
        );
    }
}

#[test]
fn rotary_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(42);
    let x = uniform(&mut rng, F32, &[1, 2, 3, 8], -1.0, 1.0);
    let cos = uniform(&mut rng, F32, &[10, 3], -1.0, 1.0);
    let n = node("RotaryEmbedding", 4, 1, &[]);
    let e = error_of(
        &ep,
        &n,
        23,
        &[x.clone(), cos.clone(), cos, i64s(&[1, 3], &[0, 1, 2])],
    );
    assert_names_node(&e, &n, "rotary_dim");
    // A position outside the caches is reported by the device at the next synchronization.
    let cos = uniform(&mut rng, F32, &[10, 4], -1.0, 1.0);
    let shapes: Vec<Vec<usize>> = vec![
        x.shape.clone(),
        cos.shape.clone(),
        cos.shape.clone(),
        vec![1, 3],
    ];
    let kernel = ep.get_kernel(&n, &shapes, 23).unwrap();
    let mut bound = Bound::new(
        &ep,
        &[x.clone(), cos.clone(), cos, i64s(&[1, 3], &[0, 12, 2])],
        &[],
    );
    let types = bound.output_types(kernel.as_ref()).unwrap();
    bound.set_outputs(&types);
    bound.execute(kernel.as_ref()).unwrap();
    let e = bound.read().expect_err("an out-of-range position");
    assert_names_node(&e, &n, "out of range");
}

// ---- com.microsoft GroupQueryAttention ----

/// A GroupQueryAttention node with `n_in` inputs (those in `omitted` left out).
fn gqa_node(n_in: usize, n_out: usize, omitted: &[usize], attrs: &[(&str, Attribute)]) -> Node {
    let mut a = vec![("num_heads", int(8)), ("kv_num_heads", int(2))];
    a.extend(attrs.iter().cloned());
    omit(
        contrib(node("GroupQueryAttention", n_in, n_out, &a)),
        omitted,
    )
}

#[test]
fn gqa_prompt_with_rotary() {
    let ep = gpu();
    let mut rng = Rng::new(50);
    let (b, s, d) = (2usize, 19usize, 64usize);
    for dtype in [F16, F32, BF16] {
        let q = uniform(&mut rng, dtype, &[b, s, 8 * d], -1.0, 1.0);
        let k = uniform(&mut rng, dtype, &[b, s, 2 * d], -1.0, 1.0);
        let v = uniform(&mut rng, dtype, &[b, s, 2 * d], -1.0, 1.0);
        let cos = uniform(&mut rng, dtype, &[64, d / 2], -1.0, 1.0);
        let sin = uniform(&mut rng, dtype, &[64, d / 2], -1.0, 1.0);
        let seqlens = i32s(&[b], &[18, 12]);
        let total = i32s(&[1], &[s as i32]);
        for interleaved in [0, 1] {
            let n = gqa_node(
                9,
                3,
                &[3, 4],
                &[
                    ("do_rotary", int(1)),
                    ("rotary_interleaved", int(interleaved)),
                ],
            );
            check(
                &ep,
                &n,
                1,
                &[
                    Some(q.clone()),
                    Some(k.clone()),
                    Some(v.clone()),
                    None,
                    None,
                    Some(seqlens.clone()),
                    Some(total.clone()),
                    Some(cos.clone()),
                    Some(sin.clone()),
                ],
                &format!("GQA prompt {dtype} rotary interleaved {interleaved}"),
            );
        }
    }
}

#[test]
fn gqa_decode_with_shared_past_buffer() {
    let ep = gpu();
    let mut rng = Rng::new(51);
    // Head size 128, and 16 (the tiny generate models' head size).
    for (b, d, pbuf, dtype, s) in [
        (2usize, 128usize, 300usize, F16, 1usize),
        (2, 128, 300, F16, 3),
        (2, 128, 300, F32, 1),
        (2, 128, 300, F32, 3),
        (1, 16, 128, F16, 1),
        (1, 16, 128, F32, 1),
    ] {
        {
            let q = uniform(&mut rng, dtype, &[b, s, 8 * d], -1.0, 1.0);
            let k = uniform(&mut rng, dtype, &[b, s, 2 * d], -1.0, 1.0);
            let v = uniform(&mut rng, dtype, &[b, s, 2 * d], -1.0, 1.0);
            let pk = uniform(&mut rng, dtype, &[b, 2, pbuf, d], -1.0, 1.0);
            let pv = uniform(&mut rng, dtype, &[b, 2, pbuf, d], -1.0, 1.0);
            // Valid keys (after this step): 120 and the whole buffer.
            let seqlens = i32s(&[b], &[119, pbuf as i32 - 1][..b]);
            let total = i32s(&[1], &[pbuf as i32]);
            let n = gqa_node(7, 3, &[], &[]);
            check(
                &ep,
                &n,
                1,
                &[
                    Some(q),
                    Some(k),
                    Some(v),
                    Some(pk),
                    Some(pv),
                    Some(seqlens),
                    Some(total),
                ],
                &format!("GQA decode {dtype} s {s}"),
            );
        }
    }
}

/// The decode kernel with many (batch x kv head) blocks, so the keys are not split and one
/// block walks several 64-key chunks with its online softmax (t = 300), and with a split of
/// few blocks over a long cache (t = 5000: 64 splits of 79 keys, two chunks each; 17000 for
/// the one-pass kernel's two passes a split); head sizes 64, 128 and 256, float16, bfloat16
/// and float32, a window and a softcap.
#[test]
fn gqa_decode_kernel_long_chunks() {
    let ep = gpu();
    let mut rng = Rng::new(57);
    for (b, kvh, d, pbuf, dtype, attrs) in [
        (8usize, 32usize, 64usize, 300usize, F16, vec![]),
        (
            8,
            32,
            64,
            300,
            BF16,
            vec![("softcap", Attribute::Float(20.0))],
        ),
        (1, 1, 256, 5000, F16, vec![]),
        (1, 2, 64, 5000, F32, vec![("local_window_size", int(700))]),
        // The one-pass kernel's 64 splits of 266 keys: two passes a split.
        (1, 1, 128, 17000, BF16, vec![]),
    ] {
        let q = uniform(&mut rng, dtype, &[b, 1, 4 * kvh * d], -1.0, 1.0);
        let k = uniform(&mut rng, dtype, &[b, 1, kvh * d], -1.0, 1.0);
        let v = uniform(&mut rng, dtype, &[b, 1, kvh * d], -1.0, 1.0);
        let pk = uniform(&mut rng, dtype, &[b, kvh, pbuf, d], -1.0, 1.0);
        let pv = uniform(&mut rng, dtype, &[b, kvh, pbuf, d], -1.0, 1.0);
        let lens: Vec<i32> = (0..b).map(|i| (pbuf - 1 - 37 * i) as i32).collect();
        let seqlens = i32s(&[b], &lens);
        let total = i32s(&[1], &[pbuf as i32]);
        let mut a = vec![
            ("num_heads", int((4 * kvh) as i64)),
            ("kv_num_heads", int(kvh as i64)),
        ];
        a.extend(attrs.iter().cloned());
        let n = contrib(node("GroupQueryAttention", 7, 3, &a));
        check(
            &ep,
            &n,
            1,
            &[
                Some(q),
                Some(k),
                Some(v),
                Some(pk),
                Some(pv),
                Some(seqlens),
                Some(total),
            ],
            &format!("GQA decode kernel b {b} kv heads {kvh} d {d} t {pbuf} {dtype}"),
        );
    }
}

/// The prompt step of a shared max-length buffer (onnxruntime-genai's
/// past_present_share_buffer): total_sequence_length is the prompt's length, the past buffer
/// is longer, and the presents keep the buffer's length (the CPU provider's and onnxruntime's
/// shapes), with the prompt's rows first and zeros after them.
#[test]
fn gqa_prompt_into_a_shared_past_buffer() {
    let ep = gpu();
    let mut rng = Rng::new(53);
    let (b, s, d, pbuf) = (2usize, 7usize, 64usize, 40usize);
    for dtype in [F16, F32] {
        let q = uniform(&mut rng, dtype, &[b, s, 8 * d], -1.0, 1.0);
        let k = uniform(&mut rng, dtype, &[b, s, 2 * d], -1.0, 1.0);
        let v = uniform(&mut rng, dtype, &[b, s, 2 * d], -1.0, 1.0);
        // Whatever the buffer holds is not read by a first prompt.
        let pk = uniform(&mut rng, dtype, &[b, 2, pbuf, d], -1.0, 1.0);
        let pv = uniform(&mut rng, dtype, &[b, 2, pbuf, d], -1.0, 1.0);
        let seqlens = i32s(&[b], &[6, 4]);
        let total = i32s(&[1], &[s as i32]);
        let n = gqa_node(7, 3, &[], &[]);
        check(
            &ep,
            &n,
            1,
            &[
                Some(q),
                Some(k),
                Some(v),
                Some(pk),
                Some(pv),
                Some(seqlens),
                Some(total),
            ],
            &format!("GQA prompt {dtype} into a {pbuf}-row shared buffer"),
        );
    }
}

/// (what, attributes, with head sinks).
type Case = (&'static str, Vec<(&'static str, Attribute)>, bool);

#[test]
fn gqa_packed_window_softcap_and_sinks() {
    let ep = gpu();
    let mut rng = Rng::new(52);
    let (b, s, d) = (1usize, 70usize, 64usize);
    for dtype in [F16, F32] {
        let qkv = uniform(&mut rng, dtype, &[b, s, 12 * d], -2.0, 2.0);
        let seqlens = i32s(&[b], &[69]);
        let total = i32s(&[1], &[s as i32]);
        let sinks = uniform(&mut rng, F32, &[8], -1.0, 1.0);
        let cases: [Case; 3] = [
            ("window 16", vec![("local_window_size", int(16))], false),
            (
                "softcap + smooth",
                vec![
                    ("softcap", Attribute::Float(1.5)),
                    ("smooth_softmax", int(1)),
                ],
                false,
            ),
            ("head sinks", vec![], true),
        ];
        for (what, attrs, with_sink) in cases {
            let (n_in, omitted): (usize, Vec<usize>) = if with_sink {
                (12, vec![1, 2, 3, 4, 7, 8, 9, 10])
            } else {
                (7, vec![1, 2, 3, 4])
            };
            let n = gqa_node(n_in, 3, &omitted, &attrs);
            let mut ins = vec![
                Some(qkv.clone()),
                None,
                None,
                None,
                None,
                Some(seqlens.clone()),
                Some(total.clone()),
            ];
            if with_sink {
                ins.extend([None, None, None, None, Some(sinks.clone())]);
            }
            check(&ep, &n, 1, &ins, &format!("GQA packed {dtype} {what}"));
        }
    }
}

// ---- graph capture ----

/// Decode with split-K (a workspace), MultiHeadAttention with a key padding mask and
/// GroupQueryAttention (a host read) warm eagerly, capture, and replay on new queries exactly
/// as an eager run does.
#[test]
fn attention_replays_under_capture() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(60);
    let (b, d, past) = (2usize, 64usize, 500usize);
    let decode = (
        omit(node("Attention", 6, 3, &[]), &[3]),
        23u64,
        vec![
            uniform(&mut rng, F16, &[b, 8, 1, d], -1.0, 1.0),
            uniform(&mut rng, F16, &[b, 2, 1, d], -1.0, 1.0),
            uniform(&mut rng, F16, &[b, 2, 1, d], -1.0, 1.0),
            uniform(&mut rng, F16, &[b, 2, past, d], -1.0, 1.0),
            uniform(&mut rng, F16, &[b, 2, past, d], -1.0, 1.0),
        ],
    );
    let mha = (
        omit(
            contrib(node("MultiHeadAttention", 5, 1, &[("num_heads", int(2))])),
            &[3],
        ),
        1u64,
        vec![
            uniform(&mut rng, F32, &[b, 5, 2 * d], -1.0, 1.0),
            uniform(&mut rng, F32, &[b, 9, 2 * d], -1.0, 1.0),
            uniform(&mut rng, F32, &[b, 9, 2 * d], -1.0, 1.0),
            i32s(&[b], &[4, 9]),
        ],
    );
    let gqa = (
        gqa_node(7, 3, &[3, 4], &[]),
        1u64,
        vec![
            uniform(&mut rng, BF16, &[b, 6, 8 * d], -1.0, 1.0),
            uniform(&mut rng, BF16, &[b, 6, 2 * d], -1.0, 1.0),
            uniform(&mut rng, BF16, &[b, 6, 2 * d], -1.0, 1.0),
            i32s(&[b], &[5, 3]),
            i32s(&[1], &[6]),
        ],
    );
    let cases = [decode, mha, gqa];
    let kernels: Vec<_> = cases
        .iter()
        .map(|(n, opset, ins)| {
            let shapes: Vec<Vec<usize>> = ins.iter().map(|t| t.shape.clone()).collect();
            ep.get_kernel(n, &shapes, *opset).unwrap()
        })
        .collect();
    let mut bounds: Vec<Bound<'_>> = cases
        .iter()
        .zip(&kernels)
        .map(|((_, _, ins), k)| {
            let mut bound = Bound::new(&ep, ins, &[]);
            let types = bound.output_types(k.as_ref()).unwrap();
            bound.set_outputs(&types);
            bound
        })
        .collect();
    for (k, bound) in kernels.iter().zip(bounds.iter_mut()) {
        bound.execute(k.as_ref()).unwrap();
        assert_eq!(k.capture_support(), CaptureSupport::Supported);
    }
    let refs: Vec<&dyn onnx_runtime_ep_api::Kernel> = kernels.iter().map(|k| k.as_ref()).collect();
    runtime.begin_graph_capture(&refs).unwrap();
    for (k, bound) in kernels.iter().zip(bounds.iter_mut()) {
        bound.execute(k.as_ref()).unwrap();
    }
    runtime.end_graph_capture().unwrap();
    for ((_, _, ins), bound) in cases.iter().zip(bounds.iter_mut()) {
        let q = &ins[0];
        bound.set_input(0, uniform(&mut rng, q.dtype, &q.shape, -1.0, 1.0));
    }
    runtime.replay_graph().unwrap();
    let replayed: Vec<Vec<T>> = bounds.iter().map(|b| b.read().unwrap()).collect();
    for (k, bound) in kernels.iter().zip(bounds.iter_mut()) {
        bound.execute(k.as_ref()).unwrap();
    }
    for (((n, _, _), bound), r) in cases.iter().zip(&bounds).zip(&replayed) {
        for (e, g) in bound.read().unwrap().iter().zip(r) {
            assert_same(g, e, &format!("replay vs eager: {}", n.op_type));
        }
    }
    assert!(runtime.reset_graph().unwrap());
}
