//! RoiAlign against the CPU provider: avg and max modes, half_pixel and output_half_pixel,
//! fixed and adaptive sampling ratios, spatial scales, rois inside and outside the map, every
//! float dtype (halves against a float32 reference), int64 and int32 batch indices, strided
//! X and rois, opsets 10 / 16 / 22 (default coordinate mode), and bad inputs (a batch index
//! out of range, bad shapes) as errors naming the node. Every call runs on the outputs
//! `output_types` gives.

use super::harness::*;
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType};

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];
const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

fn s(v: &str) -> Attribute {
    Attribute::String(v.to_string())
}

/// `count` random boxes (x1, y1, x2, y2) over a map of `h` x `w` (some past its borders).
fn boxes(rng: &mut Rng, count: usize, h: usize, w: usize) -> Vec<f64> {
    let mut v = Vec::with_capacity(count * 4);
    for _ in 0..count {
        let u = |rng: &mut Rng| (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
        let x1 = -2.0 + u(rng) * (w as f64 + 2.0);
        let y1 = -2.0 + u(rng) * (h as f64 + 2.0);
        let x2 = x1 + u(rng) * (w as f64);
        let y2 = y1 + u(rng) * (h as f64);
        v.extend_from_slice(&[x1, y1, x2, y2]);
    }
    v
}

fn batch_indices(rng: &mut Rng, dtype: DataType, count: usize, n: usize) -> T {
    let v: Vec<f64> = (0..count).map(|_| rng.below(n) as f64).collect();
    from_f64s(dtype, &[count], &v)
}

#[test]
fn roi_align_modes_coordinates_and_sampling() {
    let ep = gpu();
    let mut rng = Rng::new(51);
    let (n, c, h, w) = (2usize, 3usize, 10usize, 12usize);
    let rois = 5usize;
    for opset in [10u64, 16, 22] {
        for mode in [None, Some("avg"), Some("max")] {
            for ctm in [None, Some("half_pixel"), Some("output_half_pixel")] {
                if opset < 16 && ctm.is_some() {
                    continue;
                }
                for (ratio, scale, out) in [
                    (None, None, None),
                    (Some(2), Some(0.5f32), Some((3i64, 4i64))),
                    (Some(0), Some(1.0), Some((2, 2))),
                    (Some(1), Some(2.0), Some((5, 3))),
                ] {
                    let mut attrs = Vec::new();
                    if let Some(m) = mode {
                        attrs.push(("mode", s(m)));
                    }
                    if let Some(t) = ctm {
                        attrs.push(("coordinate_transformation_mode", s(t)));
                    }
                    if let Some(r) = ratio {
                        attrs.push(("sampling_ratio", Attribute::Int(r)));
                    }
                    if let Some(sc) = scale {
                        attrs.push(("spatial_scale", Attribute::Float(sc)));
                    }
                    if let Some((oh, ow)) = out {
                        attrs.push(("output_height", Attribute::Int(oh)));
                        attrs.push(("output_width", Attribute::Int(ow)));
                    }
                    let node = node("RoiAlign", 3, 1, &attrs);
                    let x = uniform(&mut rng, DataType::Float32, &[n, c, h, w], -3.0, 3.0);
                    let r = from_f64s(DataType::Float32, &[rois, 4], &boxes(&mut rng, rois, h, w));
                    let b = batch_indices(&mut rng, DataType::Int64, rois, n);
                    let inputs = vec![Some(x), Some(r), Some(b)];
                    let what = format!(
                        "RoiAlign opset {opset} mode {mode:?} ctm {ctm:?} ratio {ratio:?} \
                         scale {scale:?} out {out:?}"
                    );
                    let want = reference(&node, opset, &inputs, &what);
                    let got = gpu_run(&ep, &node, opset, &inputs)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_close_to(&got[0], &want[0], 1e-5, 1e-5, &what);
                }
            }
        }
    }
}

#[test]
fn roi_align_strided_inputs_and_int32_batch() {
    let ep = gpu();
    let mut rng = Rng::new(52);
    let (n, c, h, w) = (3usize, 4usize, 9usize, 7usize);
    let rois = 6usize;
    for (li, &layout) in LAYOUTS.iter().enumerate() {
        for mode in ["avg", "max"] {
            let node = node(
                "RoiAlign",
                3,
                1,
                &[
                    ("mode", s(mode)),
                    ("output_height", Attribute::Int(3)),
                    ("output_width", Attribute::Int(2)),
                    ("sampling_ratio", Attribute::Int(0)),
                ],
            );
            let x =
                uniform(&mut rng, DataType::Float32, &[n, c, h, w], -3.0, 3.0).with_layout(layout);
            let r = from_f64s(DataType::Float32, &[rois, 4], &boxes(&mut rng, rois, h, w))
                .with_layout(LAYOUTS[(li + 1) % 3]);
            let b = batch_indices(&mut rng, DataType::Int32, rois, n)
                .with_layout(LAYOUTS[(li + 2) % 3]);
            let inputs = vec![Some(x), Some(r), Some(b)];
            let what = format!("RoiAlign {mode} X {layout:?}");
            let want = reference(&node, 16, &inputs, &what);
            let got = gpu_run(&ep, &node, 16, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_close_to(&got[0], &want[0], 1e-5, 1e-5, &what);
        }
    }
}

#[test]
fn roi_align_every_float_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(53);
    let (n, c, h, w) = (2usize, 2usize, 8usize, 8usize);
    let rois = 4usize;
    for mode in ["avg", "max"] {
        let node = node(
            "RoiAlign",
            3,
            1,
            &[
                ("mode", s(mode)),
                ("output_height", Attribute::Int(2)),
                ("output_width", Attribute::Int(3)),
                ("sampling_ratio", Attribute::Int(2)),
            ],
        );
        // Values exact in bfloat16, so the same inputs serve every dtype.
        let q = |t: T| {
            let v: Vec<f64> = (0..t.numel())
                .map(|i| half::bf16::from_f64(get(&t, i)).to_f64())
                .collect();
            v
        };
        let xv = q(uniform(
            &mut rng,
            DataType::Float32,
            &[n, c, h, w],
            -3.0,
            3.0,
        ));
        let rv = q(from_f64s(
            DataType::Float32,
            &[rois, 4],
            &boxes(&mut rng, rois, h, w),
        ));
        let b = batch_indices(&mut rng, DataType::Int64, rois, n);
        for dtype in FLOATS {
            let wide = if dtype == DataType::Float64 {
                DataType::Float64
            } else {
                DataType::Float32
            };
            let what = format!("RoiAlign {mode} {dtype}");
            let want = reference(
                &node,
                22,
                &[
                    Some(from_f64s(wide, &[n, c, h, w], &xv)),
                    Some(from_f64s(wide, &[rois, 4], &rv)),
                    Some(b.clone()),
                ],
                &what,
            );
            let inputs = vec![
                Some(from_f64s(dtype, &[n, c, h, w], &xv)),
                Some(from_f64s(dtype, &[rois, 4], &rv)),
                Some(b.clone()),
            ];
            let got = gpu_run(&ep, &node, 22, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(got[0].dtype, dtype, "{what}: dtype");
            let (rtol, atol) = match dtype {
                DataType::Float64 => (1e-12, 1e-12),
                DataType::Float32 => (1e-6, 1e-6),
                DataType::Float16 => (1e-3, 2e-3),
                _ => (1e-2, 2e-2),
            };
            close_values(&got[0], &want[0], rtol, atol, &what);
        }
    }
}

#[test]
fn roi_align_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(54);
    let nd = node("RoiAlign", 3, 1, &[]);
    let x = uniform(&mut rng, DataType::Float32, &[2, 2, 5, 5], -1.0, 1.0);
    let r = from_f64s(DataType::Float32, &[2, 4], &boxes(&mut rng, 2, 5, 5));
    // A batch index out of range is a device error, not an out-of-bounds read.
    expect_err(
        &ep,
        &nd,
        16,
        &[Some(x.clone()), Some(r.clone()), Some(i64s(&[2], &[0, 2]))],
        "out of range",
    );
    expect_err(
        &ep,
        &nd,
        16,
        &[Some(x.clone()), Some(r.clone()), Some(i64s(&[2], &[-1, 0]))],
        "out of range",
    );
    // The runtime recovers.
    gpu_run(
        &ep,
        &nd,
        16,
        &[Some(x.clone()), Some(r.clone()), Some(i64s(&[2], &[1, 0]))],
    )
    .unwrap();
    // rois of the wrong shape, X not 4-D.
    let r3 = from_f64s(DataType::Float32, &[2, 3], &[0.0; 6]);
    expect_err(
        &ep,
        &nd,
        16,
        &[Some(x.clone()), Some(r3), Some(i64s(&[2], &[0, 1]))],
        "rois",
    );
    let x3 = uniform(&mut rng, DataType::Float32, &[2, 5, 5], -1.0, 1.0);
    expect_err(
        &ep,
        &nd,
        16,
        &[Some(x3), Some(r), Some(i64s(&[2], &[0, 1]))],
        "4-D",
    );
    // Unknown attribute values are refused at build time.
    let bad = node("RoiAlign", 3, 1, &[("mode", s("median"))]);
    assert!(ep.get_kernel(&bad, &[], 16).is_err());
    let bad = node("RoiAlign", 3, 1, &[("output_height", Attribute::Int(0))]);
    assert!(ep.get_kernel(&bad, &[], 16).is_err());
}
