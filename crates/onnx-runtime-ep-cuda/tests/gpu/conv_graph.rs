//! Conv through cuDNN's backend (graph) API as well as the legacy one: float16 and bfloat16
//! 3x3 / 5x5 / padded 1x1 / strided / asymmetrically padded / grouped / depthwise / dilated /
//! 1-D / 3-D convolutions at batch 1 and 8, with and without a bias, against the CPU
//! provider on the same values in float32; float32 with full-mantissa values (catches TF32);
//! FusedConv's epilogue behind a graph plan; new buffers on a planned shape (the variant pack
//! is rebuilt); and capture replay.
//!
//! Which path a shape takes is timed on its first run, so run this file three times to cover
//! both APIs (the lead's batch does):
//!
//!     .gpu/cuda-gpu-tests conv_graph --test-threads=4
//!     ONNX_RUNTIME_CUDA_CONV_BACKEND=force .gpu/cuda-gpu-tests conv_graph --test-threads=4
//!     ONNX_RUNTIME_CUDA_CONV_BACKEND=0 .gpu/cuda-gpu-tests conv_graph --test-threads=4
//!
//! Under `force` the backend API runs every shape it builds for, and
//! `conv_graph_force_mode_takes_graph_engines` checks the ResNet-style half shapes took it.

use super::conv_common::*;
use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, ExecutionProvider, Kernel};
use onnx_runtime_ep_cuda::ops::conv_chosen_path;
use onnx_runtime_ir::{Attribute, DataType};

const HALVES: [(DataType, f64); 2] = [(DataType::Float16, 1e-2), (DataType::BFloat16, 2e-2)];

fn backend_env() -> String {
    std::env::var("ONNX_RUNTIME_CUDA_CONV_BACKEND").unwrap_or_default()
}

fn path_of(dtype: DataType, x: &[usize], w: &[usize]) -> String {
    conv_chosen_path(dtype, x, w).unwrap_or_else(|| "(no path recorded)".into())
}

/// X shape (without the batch), W shape, attributes.
type Window = (Vec<usize>, Vec<usize>, Vec<(&'static str, Attribute)>);

fn windows() -> Vec<(&'static str, Window)> {
    vec![
        (
            "3x3 pad 1",
            (
                vec![16, 12, 12],
                vec![24, 16, 3, 3],
                attrs(&[("pads", &[1, 1, 1, 1])]),
            ),
        ),
        (
            "5x5 pad 2",
            (
                vec![8, 11, 13],
                vec![16, 8, 5, 5],
                attrs(&[("pads", &[2, 2, 2, 2])]),
            ),
        ),
        (
            // Padded, so not the pointwise GEMM: a 1x1 window on cuDNN.
            "1x1 pad 1",
            (
                vec![32, 7, 7],
                vec![16, 32, 1, 1],
                attrs(&[("pads", &[1, 1, 1, 1])]),
            ),
        ),
        (
            "3x3 stride 2",
            (
                vec![16, 15, 14],
                vec![32, 16, 3, 3],
                attrs(&[("pads", &[1, 1, 1, 1]), ("strides", &[2, 2])]),
            ),
        ),
        (
            "3x3 asymmetric pads",
            (
                vec![8, 9, 10],
                vec![8, 8, 3, 3],
                attrs(&[("pads", &[0, 1, 2, 0])]),
            ),
        ),
        (
            "3x3 group 4",
            (
                vec![16, 10, 10],
                vec![32, 4, 3, 3],
                attrs(&[("pads", &[1, 1, 1, 1]), ("group", &[4])]),
            ),
        ),
        (
            "3x3 depthwise",
            (
                vec![32, 10, 10],
                vec![32, 1, 3, 3],
                attrs(&[("pads", &[1, 1, 1, 1]), ("group", &[32])]),
            ),
        ),
        (
            "3x3 dilation 2",
            (
                vec![16, 13, 12],
                vec![16, 16, 3, 3],
                attrs(&[("pads", &[2, 2, 2, 2]), ("dilations", &[2, 2])]),
            ),
        ),
        (
            "1-D k3",
            (vec![16, 20], vec![24, 16, 3], attrs(&[("pads", &[1, 1])])),
        ),
        (
            "3-D 3x3x3",
            (
                vec![8, 5, 6, 6],
                vec![8, 8, 3, 3, 3],
                attrs(&[("pads", &[1, 1, 1, 1, 1, 1])]),
            ),
        ),
    ]
}

/// Every window at batch 1 and 8, with and without a bias, in `dtype` against the CPU
/// provider's float32 result on the same (exactly representable) values.
fn every_window(dtype: DataType, rel: f64, seed: u64) {
    let ep = gpu();
    let mut rng = Rng::new(seed);
    for (name, (xs, w, a)) in windows() {
        for batch in [1usize, 8] {
            let mut x = vec![batch];
            x.extend(&xs);
            for with_bias in [false, true] {
                let xf = randf(&mut rng, F32, &x);
                let wf = randf(&mut rng, F32, &w);
                let mut reference = vec![Some(xf), Some(wf)];
                if with_bias {
                    reference.push(Some(randf(&mut rng, F32, &[w[0]])));
                }
                let inputs: Vec<Option<T>> = reference
                    .iter()
                    .map(|t| t.as_ref().map(|t| cast(t, dtype)))
                    .collect();
                let n = node_for("Conv", &inputs, &a);
                check(
                    &ep,
                    &n,
                    11,
                    &inputs,
                    Some(&reference),
                    rel,
                    &format!(
                        "Conv {dtype} {name} X {x:?} W {w:?} bias {with_bias} (path: {})",
                        path_of(dtype, &x, &w)
                    ),
                );
            }
        }
    }
}

#[test]
fn conv_graph_float16_every_window_batch_1_and_8() {
    every_window(HALVES[0].0, HALVES[0].1, 41);
}

#[test]
fn conv_graph_bfloat16_every_window_batch_1_and_8() {
    every_window(HALVES[1].0, HALVES[1].1, 47);
}

/// float32 takes graph engines only without TF32: full-mantissa values over 64 input
/// channels differ from the CPU's float32 sums by ~1e-3 relative under TF32, far beyond the
/// FP32 tolerance.
#[test]
fn conv_graph_float32_stays_true_fp32() {
    let ep = gpu();
    let mut rng = Rng::new(42);
    for (x, w, a) in [
        (
            vec![1, 64, 14, 14],
            vec![64, 64, 3, 3],
            attrs(&[("pads", &[1, 1, 1, 1])]),
        ),
        (
            vec![2, 32, 9, 9],
            vec![48, 32, 3, 3],
            attrs(&[("pads", &[1, 1, 1, 1]), ("strides", &[2, 2])]),
        ),
        (
            vec![1, 64, 8, 8],
            vec![64, 8, 3, 3],
            attrs(&[("pads", &[1, 1, 1, 1]), ("group", &[8])]),
        ),
    ] {
        let inputs = vec![
            Some(uniform(&mut rng, F32, &x, -1.0, 1.0)),
            Some(uniform(&mut rng, F32, &w, -1.0, 1.0)),
            Some(uniform(&mut rng, F32, &[w[0]], -1.0, 1.0)),
        ];
        let n = node_for("Conv", &inputs, &a);
        check(
            &ep,
            &n,
            11,
            &inputs,
            None,
            F32_REL,
            &format!(
                "Conv float32 X {x:?} W {w:?} (path: {})",
                path_of(F32, &x, &w)
            ),
        );
    }
}

/// FusedConv behind whichever path wins: the bias, Z and activation epilogue (or cuDNN's
/// fused call on the legacy path) over half inputs.
#[test]
fn conv_graph_fused_conv_epilogue_half() {
    let ep = gpu();
    let mut rng = Rng::new(43);
    let (x, w) = (vec![2, 32, 14, 14], vec![32, 32, 3, 3]);
    for (dtype, rel) in HALVES {
        for (act, params, with_z) in [
            ("Relu", vec![], false),
            ("Relu", vec![], true),
            ("LeakyRelu", vec![0.1f32], true),
            ("HardSwish", vec![], false),
        ] {
            let mut reference = vec![
                Some(randf(&mut rng, F32, &x)),
                Some(randf(&mut rng, F32, &w)),
                Some(randf(&mut rng, F32, &[32])),
            ];
            if with_z {
                reference.push(Some(randf(&mut rng, F32, &[2, 32, 14, 14])));
            }
            let inputs: Vec<Option<T>> = reference
                .iter()
                .map(|t| t.as_ref().map(|t| cast(t, dtype)))
                .collect();
            let mut a = attrs(&[("pads", &[1, 1, 1, 1])]);
            a.push(("activation", Attribute::String(act.into())));
            if !params.is_empty() {
                a.push(("activation_params", Attribute::Floats(params)));
            }
            let n = node_for("FusedConv", &inputs, &a);
            check(
                &ep,
                &n,
                1,
                &inputs,
                Some(&reference),
                rel,
                &format!(
                    "FusedConv {dtype} {act} Z {with_z} (path: {})",
                    path_of(dtype, &x, &w)
                ),
            );
        }
    }
}

/// One kernel, one planned shape, three sets of buffers: each call's pointers reach cuDNN
/// (the graph path rebuilds its variant pack when they change), and a strided X (packed
/// first) gives the same result.
#[test]
fn conv_graph_new_buffers_on_a_planned_shape() {
    let ep = gpu();
    let mut rng = Rng::new(44);
    let (x, w) = (vec![1, 64, 20, 20], vec![64, 64, 3, 3]);
    for (dtype, rel) in HALVES {
        let n = node("Conv", 3, 1, &attrs(&[("pads", &[1, 1, 1, 1])]));
        let kernel = ep.get_kernel(&n, &[], 11).unwrap();
        for (round, layout) in [
            Layout::Contiguous,
            Layout::Contiguous,
            Layout::Padded,
            Layout::Contiguous,
        ]
        .into_iter()
        .enumerate()
        {
            let xf = randf(&mut rng, F32, &x);
            let wf = randf(&mut rng, F32, &w);
            let bf = randf(&mut rng, F32, &[64]);
            let want = cpu_reference(&n, 11, &[Some(&xf), Some(&wf), Some(&bf)])
                .unwrap()
                .remove(0);
            let inputs = [
                cast(&xf, dtype).with_layout(layout),
                cast(&wf, dtype),
                cast(&bf, dtype),
            ];
            let mut b = Bound::new(&ep, &inputs, &[(dtype, want.shape.clone())]);
            b.execute(kernel.as_ref()).unwrap();
            let got = b.read().unwrap().remove(0);
            assert_norm_close(
                &got,
                &want,
                rel,
                &format!(
                    "{dtype} round {round} ({layout:?} X; path: {})",
                    path_of(dtype, &x, &w)
                ),
            );
        }
    }
}

type CaptureCase = (
    Vec<usize>,
    Vec<usize>,
    Vec<(&'static str, Attribute)>,
    DataType,
    Vec<usize>,
);

/// Half convolutions replay under graph capture like they run eagerly (the chosen plan, its
/// workspace and variant pack are fixed by the first eager run).
#[test]
fn conv_graph_capture_replays_like_eager() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(45);
    // X, W, attributes, dtype, Y.
    let cases: Vec<CaptureCase> = vec![
        (
            vec![1, 32, 16, 16],
            vec![32, 32, 3, 3],
            attrs(&[("pads", &[1, 1, 1, 1])]),
            DataType::Float16,
            vec![1, 32, 16, 16],
        ),
        (
            vec![4, 16, 12, 12],
            vec![32, 16, 3, 3],
            attrs(&[("pads", &[1, 1, 1, 1]), ("strides", &[2, 2])]),
            DataType::BFloat16,
            vec![4, 32, 6, 6],
        ),
        (
            vec![2, 16, 10, 10],
            vec![16, 4, 3, 3],
            attrs(&[("pads", &[1, 1, 1, 1]), ("group", &[4])]),
            DataType::Float16,
            vec![2, 16, 10, 10],
        ),
    ];
    let nodes: Vec<_> = cases.iter().map(|c| node("Conv", 3, 1, &c.2)).collect();
    let kernels: Vec<Box<dyn Kernel>> = nodes
        .iter()
        .map(|n| ep.get_kernel(n, &[], 11).unwrap())
        .collect();
    let mut bounds: Vec<Bound<'_>> = cases
        .iter()
        .map(|c| {
            let inputs = [
                randf(&mut rng, c.3, &c.0),
                randf(&mut rng, c.3, &c.1),
                randf(&mut rng, c.3, &[c.1[0]]),
            ];
            Bound::new(&ep, &inputs, &[(c.3, c.4.clone())])
        })
        .collect();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
        assert_eq!(k.capture_support(), CaptureSupport::Supported);
    }
    let refs: Vec<&dyn Kernel> = kernels.iter().map(|k| k.as_ref()).collect();
    runtime.begin_graph_capture(&refs).unwrap();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    runtime.end_graph_capture().unwrap();
    for (c, b) in cases.iter().zip(bounds.iter_mut()) {
        b.set_input(0, randf(&mut rng, c.3, &c.0));
    }
    runtime.replay_graph().unwrap();
    let replayed: Vec<Vec<T>> = bounds.iter().map(|b| b.read().unwrap()).collect();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    for ((c, b), r) in cases.iter().zip(&bounds).zip(&replayed) {
        let eager = b.read().unwrap();
        assert_norm_close(
            &r[0],
            &eager[0],
            1e-3,
            &format!(
                "replay vs eager: {} X {:?} W {:?} (path: {})",
                c.3,
                c.0,
                c.1,
                path_of(c.3, &c.0, &c.1)
            ),
        );
    }
    runtime.reset_graph().unwrap();
}

/// Under `ONNX_RUNTIME_CUDA_CONV_BACKEND=force` the ResNet-style half 3x3 shapes must take a
/// graph engine (the backend API builds for them on any cuDNN 9); under `0` the legacy API;
/// by default either (printed).
#[test]
fn conv_graph_force_mode_takes_graph_engines() {
    let ep = gpu();
    let mut rng = Rng::new(46);
    let env = backend_env();
    for dtype in [DataType::Float16, DataType::BFloat16] {
        for (x, w) in [
            (vec![1usize, 64, 56, 56], vec![64usize, 64, 3, 3]),
            (vec![8, 128, 28, 28], vec![128, 128, 3, 3]),
        ] {
            let inputs = vec![
                Some(randf(&mut rng, dtype, &x)),
                Some(randf(&mut rng, dtype, &w)),
            ];
            let n = node_for("Conv", &inputs, &attrs(&[("pads", &[1, 1, 1, 1])]));
            let reference: Vec<Option<T>> = inputs
                .iter()
                .map(|t| t.as_ref().map(|t| cast(t, F32)))
                .collect();
            let what = format!("Conv {dtype} X {x:?} W {w:?}");
            check(&ep, &n, 11, &inputs, Some(&reference), 1e-2, &what);
            let path = path_of(dtype, &x, &w);
            eprintln!("{what}: {path} (ONNX_RUNTIME_CUDA_CONV_BACKEND={env:?})");
            match env.trim() {
                "force" | "2" => assert!(
                    path.contains("graph engine"),
                    "{what}: under ONNX_RUNTIME_CUDA_CONV_BACKEND=force the backend API must \
                     run this shape, but the path is {path:?} (rerun with \
                     ONNX_RUNTIME_CUDA_CONV_LOG=1 for why)"
                ),
                "0" | "off" => assert!(
                    !path.contains("graph engine"),
                    "{what}: the backend API is off but the path is {path:?}"
                ),
                _ => {}
            }
        }
    }
}
