//! The decode product (kernels/gemv.cu) against the CPU provider: MatMul and MatMulBias with
//! 1 to 4 rows of A (1-D A, stacked batch rows, a padded A), K from 1 to past one split, N
//! from one 16-byte group to many tiles, float32 / float16 / bfloat16; the shapes it leaves to
//! cuBLASLt next to them (5 rows, a padded or transposed B); the same bytes on a second run
//! (the split counters start again from zero) and under a captured graph.

use super::harness::*;
use onnx_runtime_ep_api::{
    CaptureSupport, DevicePtr, DevicePtrMut, ExecutionProvider, TensorMut, TensorView,
};
use onnx_runtime_ir::{Attribute, DataType, Node};

const INTERNAL: &str = "ai.onnx_runtime_rs.internal";
const FLOATS: [DataType; 3] = [DataType::Float32, DataType::Float16, DataType::BFloat16];

/// Float32 reference inputs of half-type tensors hold the same values.
fn reference_inputs(inputs: &[T]) -> Vec<T> {
    inputs.iter().map(half_as_f32).collect()
}

/// The node on the GPU against the CPU provider's float32 result on the same values, within
/// `tol` (relative and absolute) of the output's dtype.
fn check(n: &Node, opset: u64, inputs: &[T], what: &str) {
    let ep = gpu();
    let opt: Vec<Option<T>> = inputs.iter().cloned().map(Some).collect();
    // B (and a bias) as initializers: the decode product may then overlap the kernel ahead.
    let weights: Vec<bool> = (0..inputs.len()).map(|i| i > 0).collect();
    let got =
        gpu_run_constants(&ep, n, opset, &opt, &weights).unwrap_or_else(|e| panic!("{what}: {e}"));
    let f32_inputs = reference_inputs(inputs);
    let refs: Vec<Option<&T>> = f32_inputs.iter().map(Some).collect();
    let want = cpu_reference(n, opset, &refs).unwrap_or_else(|e| panic!("{what}: CPU: {e}"));
    let k = inputs[0].shape.last().copied().unwrap_or(1) as f64;
    for (g, w) in got.iter().zip(&want) {
        // Sums of K products of values in [-1, 1): float32 differs by the summation order,
        // a half type by one rounding of the output.
        let tol = match g.dtype {
            DataType::Float32 => 2e-6 * k.sqrt() + 1e-6,
            DataType::Float16 => 2e-3,
            _ => 1.6e-2,
        };
        assert_close_to(&half_as_f32(g), w, tol, tol, what);
    }
}

fn bias_node(act: &str) -> Node {
    let mut n = node(
        "MatMulBias",
        3,
        1,
        &[("activation", Attribute::String(act.into()))],
    );
    n.domain = INTERNAL.into();
    n
}

#[test]
fn decode_rows_every_float_type() {
    let mut rng = Rng::new(71);
    let mm = node("MatMul", 2, 1, &[]);
    // (A, B): 1 to 4 rows (1-D, [1, K], stacked batches), K small to several splits, N from
    // one 16-byte group to many tiles; 5 rows run on cuBLASLt.
    // Wide tiles from about 17000 columns (the head of a vocabulary), K splits for deep
    // products with few columns.
    let cases: [(&[usize], &[usize]); 12] = [
        (&[8], &[8, 8]),
        (&[1, 1], &[1, 16]),
        (&[1, 7], &[7, 24]),
        (&[1, 1, 896], &[896, 1152]),
        (&[2, 896], &[896, 64]),
        (&[3, 130], &[130, 200]),
        (&[2, 2, 300], &[300, 72]),
        (&[1, 4864], &[4864, 896]),
        (&[4, 1, 512], &[512, 520]),
        (&[5, 256], &[256, 64]),
        (&[2, 64], &[64, 17024]),
        (&[1, 5000], &[5000, 8]),
    ];
    for dtype in FLOATS {
        for (a, b) in cases {
            let x = uniform(&mut rng, dtype, a, -1.0, 1.0);
            let w = uniform(&mut rng, dtype, b, -1.0, 1.0);
            check(&mm, 13, &[x, w], &format!("{dtype} MatMul {a:?} @ {b:?}"));
        }
    }
}

#[test]
fn decode_views_the_kernel_takes_and_leaves() {
    let mut rng = Rng::new(72);
    let mm = node("MatMul", 2, 1, &[]);
    for dtype in FLOATS {
        // A padded A: rows at any stride. A padded or transposed B: cuBLASLt.
        for (la, lb) in [
            (Layout::Padded, Layout::Contiguous),
            (Layout::Contiguous, Layout::Padded),
            (Layout::Contiguous, Layout::Reversed),
        ] {
            let x = uniform(&mut rng, dtype, &[3, 200], -1.0, 1.0).with_layout(la);
            let w = uniform(&mut rng, dtype, &[200, 136], -1.0, 1.0).with_layout(lb);
            check(
                &mm,
                13,
                &[x, w],
                &format!("{dtype} MatMul A {la:?} B {lb:?}"),
            );
        }
    }
}

#[test]
fn decode_bias_and_activations() {
    let mut rng = Rng::new(73);
    for dtype in FLOATS {
        for act in ["", "Relu", "Gelu", "FastGelu", "Sigmoid"] {
            let x = uniform(&mut rng, dtype, &[1, 1, 640], -1.0, 1.0);
            let w = uniform(&mut rng, dtype, &[640, 328], -1.0, 1.0);
            let bias = uniform(&mut rng, dtype, &[328], -1.0, 1.0);
            check(
                &bias_node(act),
                1,
                &[x, w, bias],
                &format!("{dtype} MatMulBias {act:?}"),
            );
        }
    }
}

/// Two runs of one kernel, then a captured graph replayed twice on new data: the same bytes
/// as an eager run each time (the last split of a tile resets its counter, the partials add
/// in split order).
#[test]
fn decode_runs_repeat_bytes_and_capture() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(74);
    let mm = node("MatMul", 2, 1, &[]);
    let x = uniform(&mut rng, DataType::Float16, &[1, 1, 4864], -1.0, 1.0);
    let w = uniform(&mut rng, DataType::Float16, &[4864, 896], -1.0, 1.0);
    let shapes = vec![x.shape.clone(), w.shape.clone()];
    let kernel = ep.get_kernel(&mm, &shapes, 13).expect("kernel");
    let mut bound = Bound::new(&ep, &[x, w], &[]);
    let types = bound.output_types(kernel.as_ref()).expect("types");
    bound.set_outputs(&types);
    bound.execute(kernel.as_ref()).expect("first run");
    let first = bound.read().expect("read");
    bound.execute(kernel.as_ref()).expect("second run");
    assert_same(&bound.read().expect("read")[0], &first[0], "second run");
    assert_eq!(kernel.capture_support(), CaptureSupport::Supported);
    runtime
        .begin_graph_capture(&[kernel.as_ref()])
        .expect("begin capture");
    bound.execute(kernel.as_ref()).expect("captured run");
    runtime.end_graph_capture().expect("end capture");
    for replay in 0..2 {
        let fresh = uniform(&mut rng, DataType::Float16, &[1, 1, 4864], -1.0, 1.0);
        bound.set_input(0, fresh);
        runtime.replay_graph().expect("replay");
        let replayed = bound.read().expect("read");
        bound.execute(kernel.as_ref()).expect("eager run");
        let eager = bound.read().expect("read");
        assert_same(
            &replayed[0],
            &eager[0],
            &format!("replay {replay} vs eager"),
        );
    }
    assert!(runtime.reset_graph().expect("reset"));
}

/// MatMulSiluMul: one decode launch for a few rows, cuBLASLt and the element-wise pass for
/// more, both against the CPU provider's kernel (the unfused graph's values).
#[test]
fn silu_mul_decode_and_prefill_every_float_type() {
    let mut rng = Rng::new(75);
    let mut n = node("MatMulSiluMul", 3, 1, &[]);
    n.domain = INTERNAL.into();
    for dtype in FLOATS {
        for a_shape in [&[1usize, 1, 896][..], &[3, 896][..], &[1, 9, 896][..]] {
            let x = uniform(&mut rng, dtype, a_shape, -1.0, 1.0);
            let wg = uniform(&mut rng, dtype, &[896, 600], -0.2, 0.2);
            let wu = uniform(&mut rng, dtype, &[896, 600], -0.2, 0.2);
            check(
                &n,
                1,
                &[x, wg, wu],
                &format!("{dtype} MatMulSiluMul A {a_shape:?}"),
            );
        }
    }
}

/// With B a model constant, the decode product may start while the kernel ahead of it still
/// runs (programmatic dependent launch, on by default on sm_90 and newer), reading
/// B early; it must still read the rows of A that kernel writes. A Neg writes A into the
/// product's input buffer right before each product, with new values every round.
#[test]
fn decode_with_constant_weights_reads_the_rows_the_kernel_ahead_writes() {
    let ep = gpu();
    let device = ep.device_id();
    let mut rng = Rng::new(76);
    let neg = node("Neg", 1, 1, &[]);
    let mm = node("MatMul", 2, 1, &[]);
    // One split; K split across blocks (the last split adds the partials); wide tiles.
    for (dtype, k, n) in [
        (DataType::Float16, 896, 1152),
        (DataType::BFloat16, 4864, 896),
        (DataType::Float32, 512, 17024),
    ] {
        let what = format!("{dtype} [1, {k}] @ [{k}, {n}] after Neg");
        let a_shape = vec![1, k];
        let w = uniform(&mut rng, dtype, &[k, n], -1.0, 1.0);
        let stale = uniform(&mut rng, dtype, &a_shape, -1.0, 1.0);
        let neg_kernel = ep
            .get_kernel(&neg, std::slice::from_ref(&a_shape), 13)
            .expect("Neg kernel");
        let mut mm_kernel = ep
            .get_kernel(&mm, &[a_shape.clone(), vec![k, n]], 13)
            .expect("MatMul kernel");
        mm_kernel.set_constant_inputs(&[false, true]);
        let mut product = Bound::new(&ep, &[stale, w.clone()], &[]);
        let types = product.output_types(mm_kernel.as_ref()).expect("types");
        product.set_outputs(&types);
        for round in 0..3 {
            let src = uniform(&mut rng, dtype, &a_shape, -1.0, 1.0);
            let producer = Bound::new(&ep, std::slice::from_ref(&src), &[]);
            {
                let (t, buf, strides) = &producer.inputs[0];
                let view =
                    TensorView::new(DevicePtr(buf.as_ptr()), dtype, &t.shape, strides, device);
                let (_, dst, dst_strides) = &mut product.inputs[0];
                let out = TensorMut::new(
                    DevicePtrMut(dst.as_mut_ptr()),
                    dtype,
                    &a_shape,
                    dst_strides,
                    device,
                );
                neg_kernel
                    .execute(&[view], &mut [out])
                    .unwrap_or_else(|e| panic!("{what}: Neg: {e}"));
            }
            product
                .execute(mm_kernel.as_ref())
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            let got = product.read().expect("read");
            let x = cpu_reference(&neg, 13, &[Some(&half_as_f32(&src))]).expect("CPU Neg");
            let wf = half_as_f32(&w);
            let want = cpu_reference(&mm, 13, &[Some(&x[0]), Some(&wf)]).expect("CPU MatMul");
            let tol = match dtype {
                DataType::Float32 => 2e-6 * (k as f64).sqrt() + 1e-6,
                DataType::Float16 => 2e-3,
                _ => 1.6e-2,
            };
            assert_close_to(
                &half_as_f32(&got[0]),
                &want[0],
                tol,
                tol,
                &format!("{what}, round {round}"),
            );
        }
    }
}
