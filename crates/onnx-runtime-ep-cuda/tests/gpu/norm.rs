//! The normalization family against the CPU provider on random inputs: LayerNormalization
//! (axes, optional bias and statistics outputs, hidden sizes around the vector and register
//! limits, strided layouts, broadcast scales), RMSNormalization / SimplifiedLayerNormalization,
//! SkipLayerNormalization / SkipSimplifiedLayerNormalization (broadcast skip, bias, the sum
//! output), BatchNormalization (ranks 2..5, opsets 7..15, training mode), InstanceNormalization,
//! GroupNormalization 18 vs 21, MeanVarianceNormalization, LpNormalization, LRN and Dropout.
//! Half types run against a float32 CPU reference on the same (upcast) values (the skip ops,
//! which round their sum to the input type, against the CPU in the same dtype). `output_types`
//! must agree with the CPU's outputs; bad shapes are errors naming the node.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider};
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

/// `n` with input `i` omitted (None).
fn omit(mut n: Node, i: usize) -> Node {
    n.inputs[i] = None;
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

/// (rtol, atol) for outputs of `dtype` against a float32 (or same-type) reference.
fn tol(dtype: DataType) -> (f64, f64) {
    match dtype {
        F64 => (1e-9, 1e-10),
        F16 => (2e-3, 2e-3),
        BF16 => (1.6e-2, 1.6e-2),
        _ => (1e-4, 1e-4),
    }
}

/// Runs `node` on the GPU with the wired inputs (`None` = omitted), checking that
/// `output_types` gives the CPU provider's output types, and compares every output with the
/// CPU provider on float32 copies of half inputs. Returns the GPU outputs.
fn check(
    ep: &onnx_runtime_ep_cuda::CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[Option<T>],
    what: &str,
) -> Vec<T> {
    let refs: Vec<Option<&T>> = inputs.iter().map(Option::as_ref).collect();
    let native = cpu_reference(node, opset, &refs)
        .unwrap_or_else(|e| panic!("{what}: CPU reference (native dtypes): {e}"));
    // The skip ops round the sum to the input type before normalizing (as ORT and the CPU
    // provider do), so their half outputs are compared with the CPU in the same dtype.
    let want = if node.op_type.starts_with("Skip") {
        native.clone()
    } else {
        let up: Vec<Option<T>> = inputs.iter().map(|t| t.as_ref().map(as_f32)).collect();
        let up_refs: Vec<Option<&T>> = up.iter().map(Option::as_ref).collect();
        cpu_reference(node, opset, &up_refs)
            .unwrap_or_else(|e| panic!("{what}: CPU reference (float32): {e}"))
    };
    let wired: Vec<T> = inputs.iter().flatten().cloned().collect();
    let shapes: Vec<Vec<usize>> = wired.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep
        .get_kernel(node, &shapes, opset)
        .unwrap_or_else(|e| panic!("{what}: get_kernel: {e}"));
    // A Dropout with a training_mode input reads it on the host.
    if !(node.op_type == "Dropout" && node.inputs.len() > 2) {
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
    let got = bound.read().unwrap();
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let (rtol, atol) = tol(g.dtype);
        assert_eq!(g.shape, w.shape, "{what}: output {k} shape");
        for i in 0..w.numel() {
            let (gv, wv) = (get(g, i), get(&want[k], i));
            let ok = if wv.is_nan() {
                gv.is_nan()
            } else {
                (gv - wv).abs() <= atol + rtol * wv.abs()
            };
            assert!(
                ok,
                "{what}: output {k} element {i} of {:?} ({}): got {gv}, want {wv}",
                w.shape, g.dtype
            );
        }
    }
    got
}

/// The error of building and asking `output_types` (or executing) for these inputs.
fn error_of(
    ep: &onnx_runtime_ep_cuda::CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[T],
    outs: &[(DataType, Vec<usize>)],
) -> EpError {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = match ep.get_kernel(node, &shapes, opset) {
        Ok(k) => k,
        Err(e) => return e,
    };
    let mut bound = Bound::new(ep, inputs, outs);
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

// ---- LayerNormalization ----

#[test]
fn layer_norm_axes_bias_and_outputs_every_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    let shape = [2usize, 3, 8];
    for dtype in FLOATS {
        for axis in [-1i64, -2, 1, 0] {
            let a = ((axis + 3) % 3) as usize;
            let norm = &shape[a..];
            let x = uniform(&mut rng, dtype, &shape, -3.0, 3.0);
            let s = uniform(&mut rng, dtype, norm, 0.5, 1.5);
            let b = uniform(&mut rng, dtype, norm, -1.0, 1.0);
            let attrs = [
                ("axis", Attribute::Int(axis)),
                ("epsilon", Attribute::Float(1e-3)),
            ];
            for (n_in, n_out) in [(3, 3), (2, 1), (3, 1), (2, 3)] {
                let n = node("LayerNormalization", n_in, n_out, &attrs);
                let mut ins = vec![Some(x.clone()), Some(s.clone())];
                if n_in == 3 {
                    ins.push(Some(b.clone()));
                }
                check(
                    &ep,
                    &n,
                    17,
                    &ins,
                    &format!("LN {dtype} axis {axis} in {n_in} out {n_out}"),
                );
            }
        }
    }
}

#[test]
fn layer_norm_hidden_sizes_around_vector_and_register_limits() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    for dtype in [F32, F16, BF16, F64] {
        for hidden in [1usize, 7, 33, 768, 1000, 4096, 5000, 40000] {
            let rows = if hidden > 4096 { 3 } else { 5 };
            let x = uniform(&mut rng, dtype, &[rows, hidden], -4.0, 4.0);
            let s = uniform(&mut rng, dtype, &[hidden], 0.5, 1.5);
            let b = uniform(&mut rng, dtype, &[hidden], -1.0, 1.0);
            let n = node("LayerNormalization", 3, 3, &[]);
            check(
                &ep,
                &n,
                17,
                &[Some(x), Some(s), Some(b)],
                &format!("LN {dtype} hidden {hidden}"),
            );
        }
    }
}

#[test]
fn layer_norm_strided_and_broadcast_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    for dtype in [F32, F16] {
        for layout in [Layout::Padded, Layout::Reversed] {
            // Padded rows keep the register path; reversed axes take the general one.
            let x = uniform(&mut rng, dtype, &[4, 3, 16], -2.0, 2.0).with_layout(layout);
            let s = uniform(&mut rng, dtype, &[3, 16], 0.5, 1.5).with_layout(layout);
            let b = uniform(&mut rng, dtype, &[3, 16], -1.0, 1.0).with_layout(layout);
            let n = node("LayerNormalization", 3, 3, &[("axis", Attribute::Int(-2))]);
            check(
                &ep,
                &n,
                17,
                &[Some(x.clone()), Some(s.clone()), Some(b.clone())],
                &format!("LN {dtype} {layout:?} axis -2"),
            );
            let n = node("LayerNormalization", 2, 1, &[]);
            let s1 = uniform(&mut rng, dtype, &[16], 0.5, 1.5);
            check(
                &ep,
                &n,
                17,
                &[Some(x), Some(s1)],
                &format!("LN {dtype} {layout:?} axis -1"),
            );
        }
        // Scale broadcast inside the normalized shape: [1, 16] and [1] against [3, 16].
        let x = uniform(&mut rng, dtype, &[4, 3, 16], -2.0, 2.0);
        for sshape in [vec![1usize, 16], vec![1], vec![3, 1]] {
            let s = uniform(&mut rng, dtype, &sshape, 0.5, 1.5);
            let b = uniform(&mut rng, dtype, &sshape, -1.0, 1.0);
            let n = node("LayerNormalization", 3, 3, &[("axis", Attribute::Int(1))]);
            check(
                &ep,
                &n,
                17,
                &[Some(x.clone()), Some(s), Some(b)],
                &format!("LN {dtype} scale {sshape:?}"),
            );
        }
        // Padded rows of 768: the row stride is not a multiple of the vector width.
        let x = uniform(&mut rng, dtype, &[6, 768], -2.0, 2.0).with_layout(Layout::Padded);
        let s = uniform(&mut rng, dtype, &[768], 0.5, 1.5);
        let n = node("LayerNormalization", 2, 3, &[]);
        check(
            &ep,
            &n,
            17,
            &[Some(x), Some(s)],
            &format!("LN {dtype} padded 768"),
        );
    }
}

#[test]
fn layer_norm_older_forms_and_mixed_precision() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    let x = uniform(&mut rng, F32, &[3, 5, 12], -2.0, 2.0);
    let s = uniform(&mut rng, F32, &[12], 0.5, 1.5);
    let b = uniform(&mut rng, F32, &[12], -1.0, 1.0);
    let ins = [Some(x), Some(s), Some(b)];
    let n = node("LayerNormalization", 3, 3, &[]);
    check(&ep, &n, 1, &ins, "LN opset 1");
    check(&ep, &contrib(n.clone()), 1, &ins, "LN com.microsoft");
    // stash_type 11 (double statistics) is accepted like the CPU provider.
    let n = node(
        "LayerNormalization",
        3,
        1,
        &[("stash_type", Attribute::Int(11))],
    );
    check(&ep, &n, 17, &ins, "LN stash_type 11");
    // float16 input with float32 scale (SimplifiedLayerNormalization in mixed precision).
    for dtype in [F16, BF16] {
        let x = uniform(&mut rng, dtype, &[4, 256], -2.0, 2.0);
        let s = uniform(&mut rng, F32, &[256], 0.5, 1.5);
        let n = contrib(node("SimplifiedLayerNormalization", 2, 2, &[]));
        check(
            &ep,
            &n,
            1,
            &[Some(x.clone()), Some(s.clone())],
            &format!("Simplified {dtype} with f32 scale"),
        );
    }
    // float32 input with half scale and bias: PyTorch's float16 exports upcast a LayerNorm's
    // input and keep its weights in float16 (BERT's 768-wide rows, and a ragged width).
    for dtype in [F16, BF16] {
        for hidden in [768usize, 37] {
            let x = uniform(&mut rng, F32, &[2, 9, hidden], -2.0, 2.0);
            let s = uniform(&mut rng, dtype, &[hidden], 0.5, 1.5);
            let b = uniform(&mut rng, dtype, &[hidden], -1.0, 1.0);
            let n = node("LayerNormalization", 3, 1, &[]);
            check(
                &ep,
                &n,
                17,
                &[Some(x), Some(s), Some(b)],
                &format!("LN f32 {hidden} with {dtype} scale and bias"),
            );
        }
    }
}

#[test]
fn rms_norm_and_simplified_every_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    for dtype in FLOATS {
        for (shape, axis) in [
            (vec![3usize, 4, 64], -1i64),
            (vec![3, 4, 64], 1),
            (vec![2, 7], -1),
            (vec![2, 2048], -1),
        ] {
            let a = ((axis + shape.len() as i64) % shape.len() as i64) as usize;
            let x = uniform(&mut rng, dtype, &shape, -3.0, 3.0);
            let s = uniform(&mut rng, dtype, &shape[a..], 0.5, 1.5);
            let attrs = [
                ("axis", Attribute::Int(axis)),
                ("epsilon", Attribute::Float(1e-4)),
            ];
            let n = node("RMSNormalization", 2, 1, &attrs);
            let ins = [Some(x), Some(s)];
            check(
                &ep,
                &n,
                23,
                &ins,
                &format!("RMS {dtype} {shape:?} axis {axis}"),
            );
            let n = node("SimplifiedLayerNormalization", 2, 2, &attrs);
            check(
                &ep,
                &contrib(n.clone()),
                1,
                &ins,
                &format!("Simplified {dtype} {shape:?}"),
            );
            check(
                &ep,
                &n,
                1,
                &ins,
                &format!("Simplified (ONNX domain) {dtype}"),
            );
        }
    }
    // A transposed input takes the general kernel.
    let x = uniform(&mut rng, F32, &[5, 6, 40], -3.0, 3.0).with_layout(Layout::Reversed);
    let s = uniform(&mut rng, F32, &[40], 0.5, 1.5);
    check(
        &ep,
        &node("RMSNormalization", 2, 1, &[]),
        23,
        &[Some(x), Some(s)],
        "RMS reversed",
    );
}

// ---- SkipLayerNormalization ----

#[test]
fn skip_layer_norm_broadcast_skip_bias_and_outputs() {
    let ep = gpu();
    let mut rng = Rng::new(6);
    let (batch, seq) = (2usize, 3usize);
    for dtype in [F32, F16, BF16] {
        for hidden in [8usize, 7, 768] {
            let shape = [batch, seq, hidden];
            let x = uniform(&mut rng, dtype, &shape, -2.0, 2.0);
            let g = uniform(&mut rng, dtype, &[hidden], 0.5, 1.5);
            let be = uniform(&mut rng, dtype, &[hidden], -1.0, 1.0);
            let bias = uniform(&mut rng, dtype, &[hidden], -0.5, 0.5);
            let skips = [
                uniform(&mut rng, dtype, &shape, -2.0, 2.0),
                uniform(&mut rng, dtype, &[seq, hidden], -2.0, 2.0),
                uniform(&mut rng, dtype, &[1, seq, hidden], -2.0, 2.0),
                uniform(&mut rng, dtype, &[batch, 1, hidden], -2.0, 2.0),
            ];
            let eps = [("epsilon", Attribute::Float(1e-5))];
            for skip in &skips {
                let what = format!("SkipLN {dtype} hidden {hidden} skip {:?}", skip.shape);
                // All inputs, all four outputs.
                let n = contrib(node("SkipLayerNormalization", 5, 4, &eps));
                check(
                    &ep,
                    &n,
                    1,
                    &[
                        Some(x.clone()),
                        Some(skip.clone()),
                        Some(g.clone()),
                        Some(be.clone()),
                        Some(bias.clone()),
                    ],
                    &what,
                );
                // No beta (omitted in the middle), bias given; output only.
                let n = omit(contrib(node("SkipLayerNormalization", 5, 1, &eps)), 3);
                check(
                    &ep,
                    &n,
                    1,
                    &[
                        Some(x.clone()),
                        Some(skip.clone()),
                        Some(g.clone()),
                        None,
                        Some(bias.clone()),
                    ],
                    &format!("{what} no beta"),
                );
                // Gamma only, with the sum output.
                let n = contrib(node("SkipLayerNormalization", 3, 4, &eps));
                check(
                    &ep,
                    &n,
                    1,
                    &[Some(x.clone()), Some(skip.clone()), Some(g.clone())],
                    &format!("{what} gamma only"),
                );
                // SkipSimplifiedLayerNormalization with bias and all outputs.
                let n = contrib(node("SkipSimplifiedLayerNormalization", 4, 4, &eps));
                check(
                    &ep,
                    &n,
                    1,
                    &[
                        Some(x.clone()),
                        Some(skip.clone()),
                        Some(g.clone()),
                        Some(bias.clone()),
                    ],
                    &format!("Simplified {what}"),
                );
                let n = contrib(node("SkipSimplifiedLayerNormalization", 3, 1, &eps));
                check(
                    &ep,
                    &n,
                    1,
                    &[Some(x.clone()), Some(skip.clone()), Some(g.clone())],
                    &format!("Simplified {what} no bias"),
                );
            }
        }
    }
    // Strided input and skip take the general kernel.
    let x = uniform(&mut rng, F32, &[2, 3, 16], -2.0, 2.0).with_layout(Layout::Reversed);
    let skip = uniform(&mut rng, F32, &[2, 3, 16], -2.0, 2.0).with_layout(Layout::Padded);
    let g = uniform(&mut rng, F32, &[16], 0.5, 1.5);
    let bias = uniform(&mut rng, F32, &[16], -0.5, 0.5);
    let n = omit(contrib(node("SkipLayerNormalization", 5, 4, &[])), 3);
    check(
        &ep,
        &n,
        1,
        &[Some(x), Some(skip), Some(g), None, Some(bias)],
        "SkipLN strided",
    );
}

#[test]
fn skip_layer_norm_refuses_double_as_a_planned_refusal() {
    let ep = gpu();
    let mut rng = Rng::new(7);
    let x = uniform(&mut rng, F64, &[2, 8], -1.0, 1.0);
    let n = contrib(node("SkipLayerNormalization", 3, 1, &[]));
    let e = error_of(
        &ep,
        &n,
        1,
        &[x.clone(), x.clone(), uniform(&mut rng, F64, &[8], 0.5, 1.0)],
        &[(F64, vec![2, 8])],
    );
    assert!(matches!(e, EpError::UnsupportedDtype { .. }), "{e}");
}

// ---- BatchNormalization ----

#[test]
fn batch_norm_inference_ranks_opsets_and_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(8);
    let shapes: [&[usize]; 5] = [
        &[4, 3],
        &[2, 3, 5],
        &[2, 3, 4, 8],
        &[1, 4, 2, 3, 5],
        &[2, 5, 16, 16],
    ];
    for dtype in FLOATS {
        for (case, shape) in shapes.iter().enumerate() {
            let ch = shape[1];
            // The last shape is contiguous with 16-byte aligned channels: the vector path.
            let layout = match case {
                1 => Layout::Reversed,
                2 => Layout::Padded,
                _ => Layout::Contiguous,
            };
            let x = uniform(&mut rng, dtype, shape, -3.0, 3.0).with_layout(layout);
            for opset in [7u64, 9, 14, 15] {
                // Opset 15 lets the parameters have their own dtypes.
                let (pt, st) = if opset == 15 {
                    (F32, F64)
                } else {
                    (dtype, dtype)
                };
                let ins = [
                    Some(x.clone()),
                    Some(uniform(&mut rng, pt, &[ch], 0.5, 1.5)),
                    Some(uniform(&mut rng, pt, &[ch], -1.0, 1.0)),
                    Some(uniform(&mut rng, st, &[ch], -0.5, 0.5)),
                    Some(uniform(&mut rng, st, &[ch], 0.5, 2.0)),
                ];
                let n = node(
                    "BatchNormalization",
                    5,
                    1,
                    &[("epsilon", Attribute::Float(1e-3))],
                );
                check(
                    &ep,
                    &n,
                    opset,
                    &ins,
                    &format!("BN {dtype} {shape:?} {layout:?} opset {opset}"),
                );
            }
        }
    }
    // Per-activation parameters (spatial = 0, opset 7): C * D values.
    let x = uniform(&mut rng, F32, &[2, 3, 4], -3.0, 3.0);
    let p = |rng: &mut Rng, lo, hi| Some(uniform(rng, F32, &[3, 4], lo, hi));
    let ins = [
        Some(x),
        p(&mut rng, 0.5, 1.5),
        p(&mut rng, -1.0, 1.0),
        p(&mut rng, -0.5, 0.5),
        p(&mut rng, 0.5, 2.0),
    ];
    let n = node(
        "BatchNormalization",
        5,
        1,
        &[("spatial", Attribute::Int(0))],
    );
    check(&ep, &n, 7, &ins, "BN per-activation");
}

#[test]
fn batch_norm_training_statistics() {
    let ep = gpu();
    let mut rng = Rng::new(9);
    for dtype in [F32, F64, F16] {
        for shape in [vec![4usize, 3], vec![2, 3, 5, 7], vec![2, 4, 64, 64]] {
            let ch = shape[1];
            let x = uniform(&mut rng, dtype, &shape, -3.0, 3.0);
            let ins = [
                Some(x),
                Some(uniform(&mut rng, dtype, &[ch], 0.5, 1.5)),
                Some(uniform(&mut rng, dtype, &[ch], -1.0, 1.0)),
                Some(uniform(&mut rng, dtype, &[ch], -0.5, 0.5)),
                Some(uniform(&mut rng, dtype, &[ch], 0.5, 2.0)),
            ];
            let n = node(
                "BatchNormalization",
                5,
                3,
                &[
                    ("training_mode", Attribute::Int(1)),
                    ("momentum", Attribute::Float(0.8)),
                ],
            );
            check(&ep, &n, 15, &ins, &format!("BN training {dtype} {shape:?}"));
            // Opset 9: five outputs (saved mean and inverse std) mean training.
            let n = node("BatchNormalization", 5, 5, &[]);
            check(
                &ep,
                &n,
                9,
                &ins,
                &format!("BN opset 9 training {dtype} {shape:?}"),
            );
        }
    }
}

// ---- InstanceNormalization, GroupNormalization, MeanVarianceNormalization ----

#[test]
fn instance_norm_every_dtype_layout_and_split() {
    let ep = gpu();
    let mut rng = Rng::new(10);
    // The last shape has few (instance, channel) groups of many elements: a split reduction.
    let shapes: [&[usize]; 4] = [
        &[2, 3, 5, 7],
        &[3, 4, 9],
        &[2, 2, 3, 4, 5],
        &[1, 2, 128, 160],
    ];
    for dtype in FLOATS {
        for (case, shape) in shapes.iter().enumerate() {
            let layout = [Layout::Contiguous, Layout::Reversed, Layout::Padded][case % 3];
            let x = uniform(&mut rng, dtype, shape, -3.0, 5.0).with_layout(layout);
            let ch = shape[1];
            let ins = [
                Some(x),
                Some(uniform(&mut rng, dtype, &[ch], 0.5, 1.5)),
                Some(uniform(&mut rng, dtype, &[ch], -1.0, 1.0)),
            ];
            for opset in [6u64, 22] {
                let n = node(
                    "InstanceNormalization",
                    3,
                    1,
                    &[("epsilon", Attribute::Float(1e-4))],
                );
                check(
                    &ep,
                    &n,
                    opset,
                    &ins,
                    &format!("InstanceNorm {dtype} {shape:?} {layout:?} opset {opset}"),
                );
            }
        }
    }
}

#[test]
fn group_norm_18_per_group_vs_21_per_channel() {
    let ep = gpu();
    let mut rng = Rng::new(11);
    let cases: [(&[usize], i64); 5] = [
        (&[2, 6, 4, 5], 3),
        (&[3, 4], 2),
        (&[2, 8, 9], 8),
        (&[1, 8, 64, 64], 2),
        (&[2, 4, 3, 3, 3], 1),
    ];
    for dtype in FLOATS {
        for (case, (shape, groups)) in cases.iter().enumerate() {
            let ch = shape[1];
            let layout = [Layout::Contiguous, Layout::Padded, Layout::Reversed][case % 3];
            let x = uniform(&mut rng, dtype, shape, -3.0, 3.0).with_layout(layout);
            let attrs = [
                ("num_groups", Attribute::Int(*groups)),
                ("epsilon", Attribute::Float(1e-5)),
            ];
            let n = node("GroupNormalization", 3, 1, &attrs);
            for (opset, count) in [(18u64, *groups as usize), (21, ch)] {
                let ins = [
                    Some(x.clone()),
                    Some(uniform(&mut rng, dtype, &[count], 0.5, 1.5)),
                    Some(uniform(&mut rng, dtype, &[count], -1.0, 1.0)),
                ];
                check(
                    &ep,
                    &n,
                    opset,
                    &ins,
                    &format!("GroupNorm {opset} {dtype} {shape:?} groups {groups} {layout:?}"),
                );
            }
        }
    }
}

#[test]
fn mean_variance_normalization_axes() {
    let ep = gpu();
    let mut rng = Rng::new(12);
    for dtype in FLOATS {
        for (case, axes) in [
            None,
            Some(vec![2i64, 3]),
            Some(vec![-3]),
            Some(vec![0, 1, 2, 3]),
            Some(vec![1, 3]),
        ]
        .into_iter()
        .enumerate()
        {
            let layout = [Layout::Contiguous, Layout::Reversed, Layout::Padded][case % 3];
            let x = uniform(&mut rng, dtype, &[2, 3, 4, 5], -2.0, 4.0).with_layout(layout);
            let attrs: Vec<(&str, Attribute)> = axes
                .iter()
                .map(|a| ("axes", Attribute::Ints(a.clone())))
                .collect();
            let n = node("MeanVarianceNormalization", 1, 1, &attrs);
            check(
                &ep,
                &n,
                13,
                &[Some(x)],
                &format!("MVN {dtype} axes {axes:?} {layout:?}"),
            );
        }
    }
    // Large groups over (N, H, W) of few channels: a split reduction.
    let x = uniform(&mut rng, F32, &[2, 3, 96, 96], -2.0, 4.0);
    check(
        &ep,
        &node("MeanVarianceNormalization", 1, 1, &[]),
        9,
        &[Some(x)],
        "MVN split",
    );
}

// ---- LpNormalization, LRN ----

#[test]
fn lp_normalization_axes_and_p() {
    let ep = gpu();
    let mut rng = Rng::new(13);
    for dtype in FLOATS {
        for p in [1i64, 2] {
            for (case, axis) in [-1i64, 0, 1, -2].into_iter().enumerate() {
                let layout = [Layout::Contiguous, Layout::Reversed, Layout::Padded][case % 3];
                let mut x = uniform(&mut rng, dtype, &[3, 5, 8], -2.0, 2.0);
                // One all-zero line along the last axis: zero norms give zero.
                for j in 0..8 {
                    let w = x.width();
                    x.bytes[j * w..(j + 1) * w].copy_from_slice(&put(dtype, 0.0));
                }
                let x = x.with_layout(layout);
                let n = node(
                    "LpNormalization",
                    1,
                    1,
                    &[("p", Attribute::Int(p)), ("axis", Attribute::Int(axis))],
                );
                check(
                    &ep,
                    &n,
                    22,
                    &[Some(x)],
                    &format!("LpNorm {dtype} p {p} axis {axis} {layout:?}"),
                );
            }
        }
        // Long rows: the vector path and the general one.
        for hidden in [1024usize, 40000] {
            let x = uniform(&mut rng, dtype, &[2, hidden], -2.0, 2.0);
            let n = node("LpNormalization", 1, 1, &[]);
            check(
                &ep,
                &n,
                1,
                &[Some(x)],
                &format!("LpNorm {dtype} hidden {hidden}"),
            );
        }
    }
}

#[test]
fn lrn_window_sizes() {
    let ep = gpu();
    let mut rng = Rng::new(14);
    for dtype in FLOATS {
        for (case, size) in [1i64, 2, 3, 5].into_iter().enumerate() {
            let layout = [Layout::Contiguous, Layout::Reversed, Layout::Padded][case % 3];
            let x = uniform(&mut rng, dtype, &[2, 6, 3, 4], -3.0, 3.0).with_layout(layout);
            let n = node(
                "LRN",
                1,
                1,
                &[
                    ("size", Attribute::Int(size)),
                    ("alpha", Attribute::Float(0.01)),
                    ("beta", Attribute::Float(0.75)),
                    ("bias", Attribute::Float(2.0)),
                ],
            );
            check(
                &ep,
                &n,
                13,
                &[Some(x)],
                &format!("LRN {dtype} size {size} {layout:?}"),
            );
        }
    }
}

// ---- Dropout ----

#[test]
fn dropout_inference_copies_and_masks() {
    let ep = gpu();
    let mut rng = Rng::new(15);
    for dtype in FLOATS {
        let x = uniform(&mut rng, dtype, &[3, 4, 5], -3.0, 3.0).with_layout(Layout::Reversed);
        for (opset, n_in, n_out) in [(7u64, 1, 2), (10, 1, 2), (12, 1, 2), (13, 1, 1), (22, 1, 2)] {
            let n = node("Dropout", n_in, n_out, &[("ratio", Attribute::Float(0.3))]);
            let got = check(
                &ep,
                &n,
                opset,
                &[Some(x.clone())],
                &format!("Dropout {dtype} {opset}"),
            );
            assert_eq!(
                got[0].bytes, x.bytes,
                "Dropout {dtype} opset {opset}: output is the input"
            );
        }
        // ratio and training_mode = false given as inputs.
        let n = node("Dropout", 3, 2, &[]);
        let ins = [
            Some(x.clone()),
            Some(from_f64s(F32, &[], &[0.25])),
            Some(T::new(DataType::Bool, &[], vec![0])),
        ];
        check(
            &ep,
            &n,
            13,
            &ins,
            &format!("Dropout {dtype} training_mode false"),
        );
    }
}

#[test]
fn dropout_training_is_refused_with_an_error() {
    let ep = gpu();
    let mut rng = Rng::new(16);
    let x = uniform(&mut rng, F32, &[4, 4], -1.0, 1.0);
    let n = node("Dropout", 3, 2, &[]);
    let e = error_of(
        &ep,
        &n,
        13,
        &[
            x.clone(),
            from_f64s(F32, &[], &[0.5]),
            T::new(DataType::Bool, &[], vec![1]),
        ],
        &[(F32, vec![4, 4]), (DataType::Bool, vec![4, 4])],
    );
    assert_names_node(&e, &n, "training_mode");
    assert!(
        matches!(e, EpError::UnsupportedOp { .. }),
        "a planned refusal, so the session runs the CPU kernel: {e}"
    );
    // Training with ratio 0 is the identity.
    let got = run(
        &ep,
        &n,
        13,
        &[
            x.clone(),
            from_f64s(F32, &[], &[0.0]),
            T::new(DataType::Bool, &[], vec![1]),
        ],
        &[(F32, vec![4, 4]), (DataType::Bool, vec![4, 4])],
    )
    .unwrap();
    assert_eq!(got[0].bytes, x.bytes);
    assert!(got[1].bytes.iter().all(|&b| b == 1));
    // Opset 6 with is_test = 0 and a mask is training: refused when built.
    let n6 = node("Dropout", 1, 2, &[]);
    let e = ep.get_kernel(&n6, &[vec![4, 4]], 6).err().expect("refused");
    assert!(matches!(e, EpError::InvalidAttribute { .. }), "{e}");
}

// ---- bad inputs ----

#[test]
fn bad_shapes_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(17);
    let x = uniform(&mut rng, F32, &[2, 6, 4], -1.0, 1.0);
    let v = |rng: &mut Rng, s: &[usize]| uniform(rng, F32, s, 0.5, 1.5);
    let out = vec![(F32, vec![2, 6, 4])];

    let n = node("LayerNormalization", 2, 1, &[]);
    let e = error_of(&ep, &n, 17, &[x.clone(), v(&mut rng, &[5])], &out);
    assert_names_node(&e, &n, "scale");
    let n = node("LayerNormalization", 2, 1, &[("axis", Attribute::Int(3))]);
    let e = error_of(&ep, &n, 17, &[x.clone(), v(&mut rng, &[4])], &out);
    assert_names_node(&e, &n, "out of range");

    let n = contrib(node("SkipLayerNormalization", 3, 1, &[]));
    let e = error_of(
        &ep,
        &n,
        1,
        &[x.clone(), v(&mut rng, &[3, 4]), v(&mut rng, &[4])],
        &out,
    );
    assert_names_node(&e, &n, "skip");

    let n = node("BatchNormalization", 5, 1, &[]);
    let ps = [
        v(&mut rng, &[5]),
        v(&mut rng, &[6]),
        v(&mut rng, &[6]),
        v(&mut rng, &[6]),
    ];
    let mut ins = vec![x.clone()];
    ins.extend(ps);
    let e = error_of(&ep, &n, 15, &ins, &out);
    assert_names_node(&e, &n, "values");

    let n = node("InstanceNormalization", 3, 1, &[]);
    let e = error_of(
        &ep,
        &n,
        22,
        &[x.clone(), v(&mut rng, &[6]), v(&mut rng, &[3])],
        &out,
    );
    assert_names_node(&e, &n, "B has 3 values");

    let n = node(
        "GroupNormalization",
        3,
        1,
        &[("num_groups", Attribute::Int(4))],
    );
    let e = error_of(
        &ep,
        &n,
        21,
        &[x.clone(), v(&mut rng, &[6]), v(&mut rng, &[6])],
        &out,
    );
    assert_names_node(&e, &n, "divisible");
    let n = node(
        "GroupNormalization",
        3,
        1,
        &[("num_groups", Attribute::Int(3))],
    );
    let e = error_of(
        &ep,
        &n,
        18,
        &[x.clone(), v(&mut rng, &[6]), v(&mut rng, &[6])],
        &out,
    );
    assert_names_node(&e, &n, "want 3");

    let n = node("MeanVarianceNormalization", 1, 1, &[]);
    let e = error_of(&ep, &n, 13, &[x.clone()], &out);
    assert_names_node(&e, &n, "out of range");
}

// ---- throughput ----

/// LayerNormalization on 64 MB float32 tensors (printed with --nocapture); the target is 70% of
/// the H200's 4.3 TB/s on read + write.
#[test]
fn layer_norm_throughput() {
    let ep = gpu();
    let mut rng = Rng::new(18);
    for (dtype, hidden) in [
        (F32, 768usize),
        (F32, 1024),
        (F32, 4096),
        (F16, 768),
        (F16, 4096),
        (BF16, 4096),
    ] {
        let bytes = 64 << 20;
        let rows = bytes / dtype.element_size().unwrap() / hidden;
        let x = uniform(&mut rng, dtype, &[rows, hidden], -2.0, 2.0);
        let s = uniform(&mut rng, dtype, &[hidden], 0.5, 1.5);
        let b = uniform(&mut rng, dtype, &[hidden], -1.0, 1.0);
        let n = node("LayerNormalization", 3, 1, &[]);
        let kernel = ep.get_kernel(&n, &[], 17).unwrap();
        let mut bound = Bound::new(
            &ep,
            &[x.clone(), s.clone(), b.clone()],
            &[(dtype, vec![rows, hidden])],
        );
        bound.execute(kernel.as_ref()).unwrap();
        ep.runtime().synchronize().unwrap();
        let runs = 20;
        let start = std::time::Instant::now();
        for _ in 0..runs {
            bound.execute(kernel.as_ref()).unwrap();
        }
        ep.runtime().synchronize().unwrap();
        let secs = start.elapsed().as_secs_f64() / runs as f64;
        let gbs = 2.0 * bytes as f64 / secs / 1e9;
        eprintln!(
            "LayerNormalization {dtype} [{rows}, {hidden}]: {:.1} us, {gbs:.0} GB/s (read + write)",
            secs * 1e6
        );
        // Spot-check rows against the CPU provider.
        let got = &bound.read().unwrap()[0];
        let sample = 8usize;
        let xs = T::new(
            dtype,
            &[sample, hidden],
            x.bytes[..dtype.storage_bytes(sample * hidden)].to_vec(),
        );
        let want = cpu_reference(
            &n,
            17,
            &[Some(&as_f32(&xs)), Some(&as_f32(&s)), Some(&as_f32(&b))],
        )
        .unwrap();
        let (rtol, atol) = tol(dtype);
        for i in 0..sample * hidden {
            let (g, w) = (get(got, i), get(&want[0], i));
            assert!(
                (g - w).abs() <= atol + rtol * w.abs(),
                "LN bench element {i}: {g} vs {w}"
            );
        }
    }
}
