//! Pointwise convolutions (kernel 1, no pads, one group) on the cuBLASLt GEMM path: every
//! dtype and rank, strided views and strides, FusedConv's bias / Z / activations in the
//! epilogue, constant strided weights packed once; and a ResNet-50 timing (ignored by
//! default: `--ignored conv_bench --nocapture`).

use super::conv_common::*;
use super::harness::*;
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType};

/// Pointwise convolutions (kernel 1, no pads, one group) run as one cuBLASLt GEMM per call:
/// 1-D, 2-D and 3-D, batch 1 and > 1, with and without a bias, every float dtype (half types
/// against a float32 reference of the same values).
#[test]
fn conv_pointwise_gemm_every_dtype_and_rank() {
    let ep = gpu();
    let mut rng = Rng::new(21);
    let cases: Vec<Case> = vec![
        (vec![2, 5, 7], vec![6, 5, 1], vec![]),
        (vec![1, 8, 5, 6], vec![4, 8, 1, 1], vec![]),
        (
            vec![3, 16, 5, 6],
            vec![24, 16, 1, 1],
            attrs(&[("kernel_shape", &[1, 1]), ("dilations", &[2, 3])]),
        ),
        (vec![2, 4, 3, 2, 5], vec![5, 4, 1, 1, 1], vec![]),
        // One input channel, one output channel, one position.
        (vec![2, 1, 4, 4], vec![3, 1, 1, 1], vec![]),
        (vec![2, 6, 4, 4], vec![1, 6, 1, 1], vec![]),
        (vec![3, 6, 1, 1], vec![5, 6, 1, 1], vec![]),
        // Odd sizes (no 16-byte vectors in the epilogue).
        (vec![2, 7, 3, 5], vec![9, 7, 1, 1], vec![]),
    ];
    for (x, w, a) in &cases {
        for with_bias in [false, true] {
            let xf = randf(&mut rng, F32, x);
            let wf = randf(&mut rng, F32, w);
            let mut reference = vec![Some(xf), Some(wf)];
            if with_bias {
                reference.push(Some(randf(&mut rng, F32, &[w[0]])));
            }
            let n = node_for("Conv", &reference, a);
            let what = format!("pointwise Conv X {x:?} W {w:?} bias {with_bias}");
            check(
                &ep,
                &n,
                11,
                &reference,
                None,
                F32_REL,
                &format!("{what} f32"),
            );
            for (dtype, rel) in [
                (DataType::Float64, 1e-12),
                (DataType::Float16, 1e-2),
                (DataType::BFloat16, 2e-2),
            ] {
                let inputs: Vec<Option<T>> = reference
                    .iter()
                    .map(|t| t.as_ref().map(|t| cast(t, dtype)))
                    .collect();
                check(
                    &ep,
                    &n,
                    22,
                    &inputs,
                    Some(&reference),
                    rel,
                    &format!("{what} {dtype}"),
                );
            }
        }
    }
}

/// Pointwise convolutions over strided views: transposed (reversed) X and W read in place
/// as transposed GEMM operands, padded rows read with a leading dimension, spatial axes that
/// do not merge packed first; strides 2 and 3 (X read at the stride, packed), SAME padding
/// that resolves to none.
#[test]
fn conv_pointwise_gemm_strided_views_and_strides() {
    let ep = gpu();
    let mut rng = Rng::new(22);
    let cases: Vec<ViewCase> = vec![
        // N = 1, 1-D reversed: X is channels-last (a transposed A), W [M, C, 1] reversed (a
        // transposed B).
        (
            vec![1, 6, 9],
            vec![4, 6, 1],
            vec![],
            Layout::Reversed,
            Layout::Reversed,
        ),
        (
            vec![3, 6, 9],
            vec![4, 6, 1],
            vec![],
            Layout::Padded,
            Layout::Contiguous,
        ),
        (
            vec![2, 5, 4, 6],
            vec![3, 5, 1, 1],
            vec![],
            Layout::Reversed,
            Layout::Padded,
        ),
        (
            vec![2, 5, 4, 6],
            vec![3, 5, 1, 1],
            vec![],
            Layout::Padded,
            Layout::Reversed,
        ),
        (
            vec![2, 5, 9, 8],
            vec![7, 5, 1, 1],
            attrs(&[("strides", &[2, 2])]),
            Layout::Contiguous,
            Layout::Contiguous,
        ),
        (
            vec![2, 4, 10],
            vec![3, 4, 1],
            attrs(&[("strides", &[3])]),
            Layout::Padded,
            Layout::Contiguous,
        ),
        (
            vec![1, 3, 5, 4, 6],
            vec![2, 3, 1, 1, 1],
            attrs(&[("strides", &[2, 1, 3])]),
            Layout::Reversed,
            Layout::Contiguous,
        ),
    ];
    for (x, w, a, xl, wl) in &cases {
        let mut a = a.clone();
        for auto in [None, Some("SAME_UPPER")] {
            if let Some(auto) = auto {
                a.push(("auto_pad", Attribute::String(auto.into())));
            }
            let inputs = vec![
                Some(randf(&mut rng, F32, x).with_layout(*xl)),
                Some(randf(&mut rng, F32, w).with_layout(*wl)),
                Some(randf(&mut rng, F32, &[w[0]])),
            ];
            let n = node_for("Conv", &inputs, &a);
            let what = format!("pointwise Conv X {x:?} {xl:?} W {w:?} {wl:?} {a:?}");
            check(&ep, &n, 11, &inputs, None, F32_REL, &what);
            let half: Vec<Option<T>> = inputs
                .iter()
                .map(|t| t.as_ref().map(|t| cast(t, DataType::Float16)))
                .collect();
            check(
                &ep,
                &n,
                11,
                &half,
                Some(&inputs),
                1e-2,
                &format!("{what} f16"),
            );
        }
    }
}

/// FusedConv on the pointwise GEMM: bias, Z (packed: added by the product; padded: by the
/// epilogue) and activations in the one epilogue pass.
#[test]
fn fused_conv_pointwise_bias_z_and_activations() {
    let ep = gpu();
    let mut rng = Rng::new(23);
    let acts: Vec<(&str, Vec<f32>)> = vec![
        ("Relu", vec![]),
        ("Sigmoid", vec![]),
        ("LeakyRelu", vec![0.1]),
        ("HardSwish", vec![]),
        ("Identity", vec![]),
    ];
    let (x, w, out) = (vec![2, 12, 5, 6], vec![8, 12, 1, 1], vec![2, 8, 5, 6]);
    for (act, params) in &acts {
        let mut a = vec![("activation", Attribute::String((*act).into()))];
        if !params.is_empty() {
            a.push(("activation_params", Attribute::Floats(params.clone())));
        }
        for (with_b, with_z, zl) in [
            (true, false, Layout::Contiguous),
            (true, true, Layout::Contiguous),
            (false, true, Layout::Contiguous),
            (true, true, Layout::Padded),
        ] {
            let mut inputs = vec![
                Some(randf(&mut rng, F32, &x)),
                Some(randf(&mut rng, F32, &w)),
                with_b.then(|| randf(&mut rng, F32, &[8])),
            ];
            if with_z {
                inputs.push(Some(randf(&mut rng, F32, &out).with_layout(zl)));
            } else if !with_b {
                inputs.truncate(2);
            }
            let n = node_for("FusedConv", &inputs, &a);
            let what = format!("pointwise FusedConv {act} bias {with_b} Z {with_z} {zl:?}");
            check(&ep, &n, 1, &inputs, None, 1e-4, &what);
            let half: Vec<Option<T>> = inputs
                .iter()
                .map(|t| t.as_ref().map(|t| cast(t, DataType::BFloat16)))
                .collect();
            check(
                &ep,
                &n,
                1,
                &half,
                Some(&inputs),
                2e-2,
                &format!("{what} bf16"),
            );
        }
    }
}

/// A constant W that needs packing is packed once: later runs (same address) reuse it and
/// give the same result.
#[test]
fn conv_constant_strided_weights_are_packed_once() {
    let ep = gpu();
    let mut rng = Rng::new(24);
    for (x, w, a) in [
        (vec![2, 6, 5, 5], vec![4, 6, 1, 1], vec![]),
        (
            vec![2, 3, 6, 6],
            vec![4, 3, 3, 3],
            attrs(&[("pads", &[1, 1, 1, 1])]),
        ),
    ] {
        let xt = randf(&mut rng, F32, &x);
        let wt = randf(&mut rng, F32, &w).with_layout(Layout::Reversed);
        let n = node("Conv", 2, 1, &a);
        let want = cpu_reference(&n, 11, &[Some(&xt), Some(&wt)])
            .unwrap()
            .remove(0);
        let mut kernel = ep.get_kernel(&n, &[], 11).unwrap();
        kernel.set_constant_inputs(&[false, true]);
        let mut b = Bound::new(&ep, &[xt.clone(), wt], &[(F32, want.shape.clone())]);
        for run in 0..3 {
            b.execute(kernel.as_ref()).unwrap();
            let got = b.read().unwrap().remove(0);
            assert_norm_close(&got, &want, F32_REL, &format!("constant W {w:?} run {run}"));
        }
    }
}

/// ResNet-50's convolution shapes at batch 1 and 32 in float32 and float16: time per call,
/// TFLOP/s and the path each shape's first run chose (cuBLASLt GEMM, a legacy cuDNN
/// algorithm or a cuDNN graph engine), with a markdown table of all of them at the end
/// (compare with `torch.nn.functional.conv2d` on the same shapes, NCHW, with
/// `torch.backends.cudnn.allow_tf32 = False` for float32). `ONNX_RUNTIME_CUDA_CONV_BACKEND=0`
/// gives the legacy-only numbers for an A/B comparison.
#[test]
#[ignore]
fn conv_bench_resnet50_layers() {
    // The provider prints each shape's choice (GEMM or cuDNN algorithm, with the timings of
    // the proposals) when its first run makes it.
    std::env::set_var("ONNX_RUNTIME_CUDA_CONV_LOG", "1");
    let ep = gpu();
    let mut rng = Rng::new(14);
    let mut table = Vec::new();
    // (C, H, M, k, stride, pad)
    let layers: [(usize, usize, usize, usize, usize, usize); 13] = [
        (3, 224, 64, 7, 2, 3),
        (64, 56, 64, 1, 1, 0),
        (64, 56, 64, 3, 1, 1),
        (64, 56, 256, 1, 1, 0),
        (128, 56, 128, 3, 2, 1),
        (128, 28, 128, 3, 1, 1),
        (256, 14, 256, 3, 1, 1),
        (1024, 14, 256, 1, 1, 0),
        (512, 7, 512, 3, 1, 1),
        (2048, 7, 512, 1, 1, 0),
        // The downsampling projections (1x1 stride 2).
        (256, 56, 512, 1, 2, 0),
        (512, 28, 1024, 1, 2, 0),
        (1024, 14, 2048, 1, 2, 0),
    ];
    for dtype in [F32, DataType::Float16] {
        for batch in [1usize, 32] {
            for &(c, h, m, k, s, p) in &layers {
                let p = p as i64;
                let s_ = s as i64;
                let n = node(
                    "Conv",
                    2,
                    1,
                    &attrs(&[("pads", &[p, p, p, p]), ("strides", &[s_, s_])]),
                );
                let o = (h + 2 * p as usize - k) / s + 1;
                let x = randf(&mut rng, dtype, &[batch, c, h, h]);
                let w = randf(&mut rng, dtype, &[m, c, k, k]);
                let kernel = ep.get_kernel(&n, &[], 11).unwrap();
                let mut b = Bound::new(&ep, &[x, w], &[(dtype, vec![batch, m, o, o])]);
                b.execute(kernel.as_ref()).unwrap();
                ep.runtime().synchronize().unwrap();
                let runs = 20;
                let start = std::time::Instant::now();
                for _ in 0..runs {
                    b.execute(kernel.as_ref()).unwrap();
                }
                ep.runtime().synchronize().unwrap();
                let secs = start.elapsed().as_secs_f64() / runs as f64;
                let flops = 2.0 * (batch * m * o * o * c * k * k) as f64;
                let path = onnx_runtime_ep_cuda::ops::conv_chosen_path(
                    dtype,
                    &[batch, c, h, h],
                    &[m, c, k, k],
                )
                .unwrap_or_else(|| "(not recorded)".into());
                eprintln!(
                    "conv {dtype} N={batch} C={c} H={h} M={m} k={k} s={s}: {:.1} us, {:.1} TFLOP/s, \
                     path: {path}",
                    secs * 1e6,
                    flops / secs / 1e12
                );
                table.push(format!(
                    "| N{batch} C{c} {h}x{h} M{m} {k}x{k}/{s} | {dtype} | {path} | {:.1} | {:.1} |",
                    secs * 1e6,
                    flops / secs / 1e12
                ));
            }
        }
    }
    eprintln!(
        "\nONNX_RUNTIME_CUDA_CONV_BACKEND={:?}\n| layer | dtype | path | us | TFLOP/s |\n\
         | --- | --- | --- | --- | --- |",
        std::env::var("ONNX_RUNTIME_CUDA_CONV_BACKEND").unwrap_or_default()
    );
    for row in &table {
        eprintln!("{row}");
    }
}
