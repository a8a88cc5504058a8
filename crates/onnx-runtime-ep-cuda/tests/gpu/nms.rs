//! NonMaxSuppression against the CPU provider: the onnx node-suite cases (centre-point boxes,
//! flipped coordinates, identical boxes, output limits, IoU and score thresholds, two batches,
//! two classes), random boxes with tied scores over several batches and classes (sorts of
//! more than one shared-memory tile and greedy passes over several staged chunks), every
//! float dtype, strided boxes and scores, omitted optional inputs, and the edge cases (no
//! boxes, every score under the threshold, max_output_boxes_per_class 0). Outputs are
//! compared exactly (int64 rows in the CPU's order).

use super::harness::*;
use onnx_runtime_ir::{Attribute, DataType, Node};

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

/// A NonMaxSuppression node with the optional inputs 2..5 wired as `present` says.
fn nms_node(present: [bool; 3], center: Option<i64>) -> Node {
    let mut attrs = Vec::new();
    if let Some(c) = center {
        attrs.push(("center_point_box", Attribute::Int(c)));
    }
    let mut n = node("NonMaxSuppression", 5, 1, &attrs);
    for (k, &p) in present.iter().enumerate() {
        if !p {
            n.inputs[2 + k] = None;
        }
    }
    while n.inputs.last() == Some(&None) {
        n.inputs.pop();
    }
    n
}

fn f32s(shape: &[usize], v: &[f64]) -> T {
    from_f64s(DataType::Float32, shape, v)
}

/// Runs on the GPU and on the CPU; asserts the same rows.
fn check(n: &Node, opset: u64, inputs: &[Option<T>], what: &str) -> T {
    let want = reference(n, opset, inputs, what);
    let got = gpu_run(&gpu(), n, opset, inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (g, w) = (&got[0], &want[0]);
    assert_eq!(
        g.shape,
        w.shape,
        "{what}: selected-row count differs (got {:?}, want {:?}):\n got {:?}\nwant {:?}",
        g.shape,
        w.shape,
        rows(g),
        rows(w)
    );
    assert_eq!(rows(g), rows(w), "{what}: rows differ");
    got.into_iter().next().unwrap()
}

fn rows(t: &T) -> Vec<[i64; 3]> {
    (0..t.numel() / 3)
        .map(|r| {
            [
                get(t, r * 3) as i64,
                get(t, r * 3 + 1) as i64,
                get(t, r * 3 + 2) as i64,
            ]
        })
        .collect()
}

const SUITE_BOXES: [f64; 24] = [
    0.0, 0.0, 1.0, 1.0, 0.0, 0.1, 1.0, 1.1, 0.0, -0.1, 1.0, 0.9, 0.0, 10.0, 1.0, 11.0, 0.0, 10.1,
    1.0, 11.1, 0.0, 100.0, 1.0, 101.0,
];
const SUITE_SCORES: [f64; 6] = [0.9, 0.75, 0.6, 0.95, 0.5, 0.3];

fn scalars(max_out: i64, iou: f64, score: Option<f64>) -> Vec<Option<T>> {
    vec![
        Some(i64s(&[1], &[max_out])),
        Some(f32s(&[1], &[iou])),
        score.map(|s| f32s(&[1], &[s])),
    ]
}

fn inputs(boxes: T, scores: T, rest: Vec<Option<T>>) -> Vec<Option<T>> {
    // Positional: an omitted input stays a None (gpu_run drops it, the CPU reference
    // reads it as omitted).
    let mut v = vec![Some(boxes), Some(scores)];
    v.extend(rest);
    v
}

#[test]
fn nms_onnx_node_suite() {
    let boxes = || f32s(&[1, 6, 4], &SUITE_BOXES);
    let scores = || f32s(&[1, 1, 6], &SUITE_SCORES);
    let all = nms_node([true; 3], None);
    // suppress_by_IOU: the documented answer, then the CPU's.
    let got = check(
        &all,
        11,
        &inputs(boxes(), scores(), scalars(3, 0.5, Some(0.0))),
        "suppress_by_IOU",
    );
    assert_eq!(rows(&got), vec![[0, 0, 3], [0, 0, 0], [0, 0, 5]]);
    check(
        &all,
        11,
        &inputs(boxes(), scores(), scalars(3, 0.5, Some(0.4))),
        "suppress_by_IOU_and_scores",
    );
    check(
        &all,
        11,
        &inputs(boxes(), scores(), scalars(2, 0.5, Some(0.0))),
        "limit_output_size",
    );
    check(
        &all,
        10,
        &inputs(
            f32s(&[1, 1, 4], &[0.0, 0.0, 1.0, 1.0]),
            f32s(&[1, 1, 1], &[0.9]),
            scalars(3, 0.5, Some(0.0)),
        ),
        "single_box",
    );
    let ident: Vec<f64> = (0..10).flat_map(|_| [0.0, 0.0, 1.0, 1.0]).collect();
    check(
        &all,
        11,
        &inputs(
            f32s(&[1, 10, 4], &ident),
            f32s(&[1, 1, 10], &[0.9; 10]),
            scalars(3, 0.5, Some(0.0)),
        ),
        "identical_boxes",
    );
    let flipped = [
        1.0, 1.0, 0.0, 0.0, 0.0, 0.1, 1.0, 1.1, 0.0, 0.9, 1.0, -0.1, 0.0, 10.0, 1.0, 11.0, 1.0,
        10.1, 0.0, 11.1, 1.0, 101.0, 0.0, 100.0,
    ];
    check(
        &all,
        11,
        &inputs(
            f32s(&[1, 6, 4], &flipped),
            scores(),
            scalars(3, 0.5, Some(0.0)),
        ),
        "flipped_coordinates",
    );
    let centers = [
        0.5, 0.5, 1.0, 1.0, 0.5, 0.6, 1.0, 1.0, 0.5, 0.4, 1.0, 1.0, 0.5, 10.5, 1.0, 1.0, 0.5, 10.6,
        1.0, 1.0, 0.5, 100.5, 1.0, 1.0,
    ];
    check(
        &nms_node([true; 3], Some(1)),
        11,
        &inputs(
            f32s(&[1, 6, 4], &centers),
            scores(),
            scalars(3, 0.5, Some(0.0)),
        ),
        "center_point_box_format",
    );
    let two: Vec<f64> = SUITE_BOXES.iter().chain(&SUITE_BOXES).copied().collect();
    let two_s: Vec<f64> = SUITE_SCORES.iter().chain(&SUITE_SCORES).copied().collect();
    check(
        &all,
        11,
        &inputs(
            f32s(&[2, 6, 4], &two),
            f32s(&[2, 1, 6], &two_s),
            scalars(2, 0.5, Some(0.0)),
        ),
        "two_batches",
    );
    check(
        &all,
        11,
        &inputs(
            boxes(),
            f32s(&[1, 2, 6], &two_s),
            scalars(2, 0.5, Some(0.0)),
        ),
        "two_classes",
    );
}

/// `count` random corner boxes (some flipped) on a 20 x 20 field, so many overlap.
fn random_boxes(rng: &mut Rng, count: usize, center: bool) -> Vec<f64> {
    let u = |rng: &mut Rng| (rng.next() >> 11) as f64 / (1u64 << 53) as f64;
    let mut v = Vec::with_capacity(count * 4);
    for _ in 0..count {
        let (a, b) = (u(rng) * 20.0, u(rng) * 20.0);
        let (w, h) = (0.5 + u(rng) * 6.0, 0.5 + u(rng) * 6.0);
        if center {
            v.extend_from_slice(&[a, b, w, h]);
        } else if rng.below(4) == 0 {
            v.extend_from_slice(&[a + h, b + w, a, b]);
        } else {
            v.extend_from_slice(&[a, b, a + h, b + w]);
        }
    }
    v
}

/// Scores on a coarse grid (many ties, broken by box index).
fn random_scores(rng: &mut Rng, count: usize) -> Vec<f64> {
    (0..count).map(|_| rng.below(32) as f64 / 32.0).collect()
}

#[test]
fn nms_random_batches_classes_thresholds_and_ties() {
    let mut rng = Rng::new(71);
    for &(b, c, n) in &[
        (1usize, 1usize, 37usize),
        (2, 3, 50),
        (2, 2, 700),
        (1, 2, 2100),
    ] {
        for center in [0i64, 1] {
            for &(max_out, iou, score) in &[
                (5i64, 0.5, Some(0.3)),
                (1000, 0.3, None),
                (3, 0.0, Some(0.9)),
                (i32::MAX as i64, 0.7, Some(-1.0)),
            ] {
                let what = format!(
                    "NMS b{b} c{c} n{n} center {center} max {max_out} iou {iou} score {score:?}"
                );
                let bx = f32s(&[b, n, 4], &random_boxes(&mut rng, b * n, center == 1));
                let sc = f32s(&[b, c, n], &random_scores(&mut rng, b * c * n));
                let present = [true, true, score.is_some()];
                check(
                    &nms_node(present, Some(center)),
                    11,
                    &inputs(bx, sc, scalars(max_out, iou, score)),
                    &what,
                );
            }
        }
    }
}

#[test]
fn nms_every_float_dtype_and_strided_inputs() {
    let mut rng = Rng::new(72);
    let (b, c, n) = (2usize, 2usize, 40usize);
    let bv = random_boxes(&mut rng, b * n, false);
    let sv = random_scores(&mut rng, b * c * n);
    for dtype in FLOATS {
        for layout in [Layout::Contiguous, Layout::Reversed, Layout::Padded] {
            let what = format!("NMS {dtype} {layout:?}");
            let bx = from_f64s(dtype, &[b, n, 4], &bv).with_layout(layout);
            let sc = from_f64s(dtype, &[b, c, n], &sv).with_layout(layout);
            // Thresholds of another float type than the boxes.
            let rest = vec![
                Some(i64s(&[1], &[6])),
                Some(from_f64s(DataType::Float64, &[1], &[0.4])),
                Some(from_f64s(DataType::Float32, &[], &[0.2])),
            ];
            check(&nms_node([true; 3], None), 11, &inputs(bx, sc, rest), &what);
        }
    }
}

#[test]
fn nms_edge_cases() {
    let mut rng = Rng::new(73);
    let all = nms_node([true; 3], None);
    // No boxes.
    let got = check(
        &all,
        11,
        &inputs(
            f32s(&[1, 0, 4], &[]),
            f32s(&[1, 3, 0], &[]),
            scalars(3, 0.5, Some(0.0)),
        ),
        "no boxes",
    );
    assert_eq!(got.shape, vec![0, 3]);
    let bx = || f32s(&[1, 20, 4], &random_boxes(&mut Rng::new(5), 20, false));
    let sc = f32s(&[1, 2, 20], &random_scores(&mut rng, 40));
    // Every score under the threshold.
    let got = check(
        &all,
        11,
        &inputs(bx(), sc.clone(), scalars(3, 0.5, Some(2.0))),
        "all scores under the threshold",
    );
    assert_eq!(got.shape, vec![0, 3]);
    // max_output_boxes_per_class 0, and omitted (also 0).
    let got = check(
        &all,
        11,
        &inputs(bx(), sc.clone(), scalars(0, 0.5, Some(0.0))),
        "max_output_boxes_per_class 0",
    );
    assert_eq!(got.shape, vec![0, 3]);
    let got = check(
        &nms_node([false, true, true], None),
        11,
        &[
            Some(bx()),
            Some(sc.clone()),
            None,
            Some(f32s(&[1], &[0.5])),
            Some(f32s(&[1], &[0.0])),
        ],
        "max_output_boxes_per_class omitted",
    );
    assert_eq!(got.shape, vec![0, 3]);
    // Only max_output_boxes_per_class: iou_threshold 0 (any overlap suppresses), no
    // score threshold.
    check(
        &nms_node([true, false, false], None),
        11,
        &[Some(bx()), Some(sc.clone()), Some(i64s(&[1], &[100]))],
        "iou and score thresholds omitted",
    );
    // int32 max_output_boxes_per_class is accepted.
    check(
        &all,
        11,
        &inputs(
            bx(),
            sc.clone(),
            vec![
                Some(i32s(&[1], &[4])),
                Some(f32s(&[1], &[0.5])),
                Some(f32s(&[1], &[0.1])),
            ],
        ),
        "int32 max_output_boxes_per_class",
    );
    // NaN scores are filtered by a score threshold and sort first without one.
    let mut sv = random_scores(&mut rng, 40);
    sv[3] = f64::NAN;
    sv[27] = f64::NAN;
    for score in [None, Some(0.1)] {
        check(
            &nms_node([true, true, score.is_some()], None),
            11,
            &inputs(bx(), f32s(&[1, 2, 20], &sv), scalars(5, 0.5, score)),
            &format!("NaN scores, score threshold {score:?}"),
        );
    }
}

#[test]
fn nms_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let all = nms_node([true; 3], None);
    expect_err(
        &ep,
        &all,
        11,
        &inputs(
            f32s(&[1, 6, 3], &[0.0; 18]),
            f32s(&[1, 1, 6], &SUITE_SCORES),
            scalars(3, 0.5, Some(0.0)),
        ),
        "must be [batches, boxes, 4]",
    );
    expect_err(
        &ep,
        &all,
        11,
        &inputs(
            f32s(&[1, 6, 4], &SUITE_BOXES),
            f32s(&[1, 1, 5], &SUITE_SCORES[..5]),
            scalars(3, 0.5, Some(0.0)),
        ),
        "must be [batches, boxes, 4]",
    );
    expect_err(
        &ep,
        &nms_node([true, true, false], None),
        11,
        &inputs(
            f32s(&[1, 6, 4], &SUITE_BOXES),
            f32s(&[1, 1, 6], &SUITE_SCORES),
            vec![Some(i64s(&[1], &[3])), Some(f32s(&[2], &[0.5, 0.5])), None],
        ),
        "iou_threshold must hold one element",
    );
}
