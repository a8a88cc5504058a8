//! The pool family's MaxUnpool and AffineGrid against the CPU provider. MaxUnpool: 1-D to
//! 3-D, pads and strides, output_shape given and omitted, every float dtype (bit for bit: the
//! op moves values), strided X and indices, opsets 9 / 11 / 22, indices out of range and bad
//! shapes as errors naming the node. AffineGrid: 2-D and 3-D, align_corners, every float
//! dtype (halves against a float32 reference), strided theta, bad sizes. Every call runs on
//! the outputs `output_types` gives.

use super::harness::*;
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];
const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

// ---- MaxUnpool ----

/// Distinct random positions of the inferred shape, one per element of X.
fn unique_indices(rng: &mut Rng, shape: &[usize], total: usize) -> T {
    let n: usize = shape.iter().product();
    assert!(n <= total);
    let mut all: Vec<i64> = (0..total as i64).collect();
    for i in 0..n {
        let j = i + rng.below(total - i);
        all.swap(i, j);
    }
    i64s(shape, &all[..n])
}

struct UnpoolCase {
    x: &'static [usize],
    kernel: &'static [i64],
    strides: Option<&'static [i64]>,
    pads: Option<&'static [i64]>,
    /// Extra elements per spatial axis of output_shape beyond the inferred shape.
    grow: Option<&'static [usize]>,
}

const UNPOOL_CASES: [UnpoolCase; 5] = [
    UnpoolCase {
        x: &[2, 3, 5],
        kernel: &[2],
        strides: Some(&[2]),
        pads: None,
        grow: None,
    },
    UnpoolCase {
        x: &[1, 2, 3, 4],
        kernel: &[2, 2],
        strides: Some(&[2, 2]),
        pads: None,
        grow: Some(&[1, 2]),
    },
    UnpoolCase {
        x: &[2, 2, 4, 3],
        kernel: &[3, 3],
        strides: Some(&[2, 1]),
        pads: Some(&[1, 0, 0, 1]),
        grow: Some(&[0, 0]),
    },
    UnpoolCase {
        x: &[1, 2, 2, 3, 2],
        kernel: &[2, 2, 2],
        strides: None,
        pads: None,
        grow: Some(&[1, 0, 3]),
    },
    UnpoolCase {
        x: &[3, 4, 6, 7],
        kernel: &[2, 3],
        strides: Some(&[3, 2]),
        pads: Some(&[0, 1, 1, 0]),
        grow: None,
    },
];

fn inferred(case: &UnpoolCase) -> Vec<usize> {
    let nd = case.kernel.len();
    let mut s = case.x[..2].to_vec();
    for d in 0..nd {
        let st = case.strides.map_or(1, |v| v[d]);
        let (p0, p1) = case.pads.map_or((0, 0), |p| (p[d], p[nd + d]));
        s.push(((case.x[d + 2] as i64 - 1) * st + case.kernel[d] - p0 - p1) as usize);
    }
    s
}

fn unpool_node(case: &UnpoolCase, with_shape: bool) -> Node {
    let mut attrs = vec![("kernel_shape", ints(case.kernel))];
    if let Some(s) = case.strides {
        attrs.push(("strides", ints(s)));
    }
    if let Some(p) = case.pads {
        attrs.push(("pads", ints(p)));
    }
    node("MaxUnpool", if with_shape { 3 } else { 2 }, 1, &attrs)
}

#[test]
fn max_unpool_ranks_pads_strides_and_output_shape() {
    let ep = gpu();
    let mut rng = Rng::new(31);
    for (ci, case) in UNPOOL_CASES.iter().enumerate() {
        let inf = inferred(case);
        let total: usize = inf.iter().product();
        for (li, &layout) in LAYOUTS.iter().enumerate() {
            for opset in [9u64, 11, 22] {
                let x = uniform(&mut rng, DataType::Float32, case.x, -4.0, 4.0).with_layout(layout);
                let ind =
                    unique_indices(&mut rng, case.x, total).with_layout(LAYOUTS[(li + 1) % 3]);
                let what = format!("MaxUnpool case {ci} layout {layout:?} opset {opset}");
                let mut inputs = vec![Some(x), Some(ind)];
                let n = if let Some(grow) = case.grow {
                    let mut shape: Vec<i64> = inf.iter().map(|&d| d as i64).collect();
                    for (k, g) in grow.iter().enumerate() {
                        shape[k + 2] += *g as i64;
                    }
                    inputs.push(Some(i64s(&[shape.len()], &shape)));
                    unpool_node(case, true)
                } else {
                    unpool_node(case, false)
                };
                let want = reference(&n, opset, &inputs, &what);
                let got =
                    gpu_run(&ep, &n, opset, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_same(&got[0], &want[0], &what);
            }
        }
    }
}

#[test]
fn max_unpool_every_float_dtype_bit_exact() {
    let ep = gpu();
    let mut rng = Rng::new(32);
    let n = node(
        "MaxUnpool",
        2,
        1,
        &[("kernel_shape", ints(&[2, 2])), ("strides", ints(&[2, 2]))],
    );
    for dtype in FLOATS {
        // The large shape takes the vectorized zero fill and its tail.
        for x_shape in [[1usize, 2, 3, 4], [2, 3, 37, 41]] {
            let [b, c, h, w] = x_shape;
            let total = b * c * (2 * h) * (2 * w);
            let x = uniform(&mut rng, dtype, &x_shape, -4.0, 4.0);
            let ind = unique_indices(&mut rng, &x_shape, total);
            let inputs = vec![Some(x), Some(ind)];
            let what = format!("MaxUnpool {dtype} {x_shape:?}");
            let want = reference(&n, 22, &inputs, &what);
            let got = gpu_run(&ep, &n, 22, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_same(&got[0], &want[0], &what);
        }
    }
}

#[test]
fn max_unpool_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(33);
    let case = &UNPOOL_CASES[1];
    let inf = inferred(case);
    let total = inf.iter().product::<usize>() as i64;
    let x = uniform(&mut rng, DataType::Float32, case.x, -1.0, 1.0);
    let n = unpool_node(case, false);
    // An index past the inferred shape must not write out of bounds: a device error.
    let mut bad: Vec<i64> = (0..24).collect();
    bad[5] = total;
    expect_err(
        &ep,
        &n,
        11,
        &[Some(x.clone()), Some(i64s(case.x, &bad))],
        "out of range",
    );
    bad[5] = -1;
    expect_err(
        &ep,
        &n,
        11,
        &[Some(x.clone()), Some(i64s(case.x, &bad))],
        "out of range",
    );
    // The runtime recovers: a good call afterwards succeeds.
    let good: Vec<i64> = (0..24).collect();
    gpu_run(&ep, &n, 11, &[Some(x.clone()), Some(i64s(case.x, &good))]).unwrap();
    // Indices of another shape than X.
    expect_err(
        &ep,
        &n,
        11,
        &[Some(x.clone()), Some(i64s(&[1, 2, 4, 3], &good))],
        "same shape",
    );
    // output_shape smaller than the inferred shape, or changing N / C.
    let n3 = unpool_node(case, true);
    let small: Vec<i64> = vec![1, 2, inf[2] as i64 - 1, inf[3] as i64];
    expect_err(
        &ep,
        &n3,
        11,
        &[
            Some(x.clone()),
            Some(i64s(case.x, &good)),
            Some(i64s(&[4], &small)),
        ],
        "output_shape",
    );
    let other_c: Vec<i64> = vec![1, 3, inf[2] as i64, inf[3] as i64];
    expect_err(
        &ep,
        &n3,
        11,
        &[
            Some(x.clone()),
            Some(i64s(case.x, &good)),
            Some(i64s(&[4], &other_c)),
        ],
        "output_shape",
    );
    // X of the wrong rank for kernel_shape.
    let x3 = uniform(&mut rng, DataType::Float32, &[2, 3, 4], -1.0, 1.0);
    expect_err(
        &ep,
        &n,
        11,
        &[
            Some(x3),
            Some(i64s(&[2, 3, 4], &(0..24).collect::<Vec<_>>())),
        ],
        "rank",
    );
    // A missing kernel_shape is refused at build time.
    let no_kernel = node("MaxUnpool", 2, 1, &[]);
    assert!(ep.get_kernel(&no_kernel, &[], 11).is_err());
}

// ---- AffineGrid ----

#[test]
fn affine_grid_2d_3d_align_corners_and_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(41);
    let sizes: [&[i64]; 6] = [
        &[1, 3, 4, 5],
        &[3, 1, 7, 1],
        &[2, 2, 1, 6],
        &[2, 1, 3, 4, 5],
        &[1, 2, 1, 2, 7],
        &[2, 1, 16, 17],
    ];
    for size in sizes {
        let k = size.len() - 2;
        let n = size[0] as usize;
        for align in [None, Some(0), Some(1)] {
            for layout in LAYOUTS {
                let attrs: Vec<(&str, Attribute)> = align
                    .map(|a| vec![("align_corners", Attribute::Int(a))])
                    .unwrap_or_default();
                let node = node("AffineGrid", 2, 1, &attrs);
                let theta = uniform(&mut rng, DataType::Float32, &[n, k, k + 1], -2.0, 2.0)
                    .with_layout(layout);
                let inputs = vec![Some(theta), Some(i64s(&[size.len()], size))];
                let what = format!("AffineGrid size {size:?} align {align:?} {layout:?}");
                let want = reference(&node, 20, &inputs, &what);
                let got =
                    gpu_run(&ep, &node, 20, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
                assert_close_to(&got[0], &want[0], 1e-6, 1e-6, &what);
            }
        }
    }
}

#[test]
fn affine_grid_every_float_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(42);
    for size in [&[2i64, 3, 5, 6][..], &[1, 1, 3, 4, 2]] {
        let k = size.len() - 2;
        let n = size[0] as usize;
        for align in [0, 1] {
            let node = node(
                "AffineGrid",
                2,
                1,
                &[("align_corners", Attribute::Int(align))],
            );
            let theta32 = uniform(&mut rng, DataType::Float32, &[n, k, k + 1], -2.0, 2.0);
            for dtype in FLOATS {
                // The same values in every dtype (exact in bfloat16), so one reference serves.
                let v: Vec<f64> = (0..theta32.numel())
                    .map(|i| half::bf16::from_f64(get(&theta32, i)).to_f64())
                    .collect();
                let theta = from_f64s(dtype, &[n, k, k + 1], &v);
                let reference_in = from_f64s(
                    if dtype == DataType::Float64 {
                        DataType::Float64
                    } else {
                        DataType::Float32
                    },
                    &[n, k, k + 1],
                    &v,
                );
                let size_t = i64s(&[size.len()], size);
                let what = format!("AffineGrid {dtype} size {size:?} align {align}");
                let want = reference(
                    &node,
                    20,
                    &[Some(reference_in), Some(size_t.clone())],
                    &what,
                );
                let got = gpu_run(&ep, &node, 20, &[Some(theta), Some(size_t)])
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
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
}

#[test]
fn affine_grid_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(43);
    let n = node("AffineGrid", 2, 1, &[]);
    let theta = uniform(&mut rng, DataType::Float32, &[2, 2, 3], -1.0, 1.0);
    expect_err(
        &ep,
        &n,
        20,
        &[Some(theta.clone()), Some(i64s(&[3], &[2, 1, 4]))],
        "size",
    );
    expect_err(
        &ep,
        &n,
        20,
        &[Some(theta.clone()), Some(i64s(&[4], &[3, 1, 4, 4]))],
        "theta",
    );
    expect_err(
        &ep,
        &n,
        20,
        &[Some(theta), Some(i64s(&[5], &[2, 1, 4, 4, 4]))],
        "theta",
    );
}
