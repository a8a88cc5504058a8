//! Det against the CPU provider: single matrices and batches of one to three batch dims,
//! orders 0 to 170 (shared-memory and global-scratch paths), singular matrices and pivot
//! ties, every float dtype (halves against a float32 reference), strided (transposed and
//! padded) inputs, opsets 11 / 22, bad shapes as errors naming the node. Every call runs on
//! the outputs `output_types` gives.

use super::harness::*;
use onnx_runtime_ir::DataType;

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];
const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

#[test]
fn det_batches_orders_and_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(61);
    let n = node("Det", 1, 1, &[]);
    let shapes: [&[usize]; 9] = [
        &[1, 1],
        &[2, 2],
        &[3, 3],
        &[2, 4, 4],
        &[2, 3, 5, 5],
        &[2, 1, 2, 9, 9],
        &[3, 30, 30],
        &[2, 0, 0],
        &[0, 3, 3],
    ];
    for shape in shapes {
        for layout in LAYOUTS {
            for opset in [11u64, 22] {
                for dtype in [DataType::Float32, DataType::Float64] {
                    let x = uniform(&mut rng, dtype, shape, -2.0, 2.0).with_layout(layout);
                    let inputs = vec![Some(x)];
                    let what = format!("Det {dtype} {shape:?} {layout:?} opset {opset}");
                    let want = reference(&n, opset, &inputs, &what);
                    let got =
                        gpu_run(&ep, &n, opset, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
                    // The same pivots and operations as the CPU, in double.
                    let (rtol, atol) = if dtype == DataType::Float64 {
                        (1e-10, 1e-12)
                    } else {
                        (1e-6, 1e-6)
                    };
                    assert_close_to(&got[0], &want[0], rtol, atol, &what);
                }
            }
        }
    }
}

#[test]
fn det_large_orders_take_the_scratch_path() {
    let ep = gpu();
    let mut rng = Rng::new(62);
    let n = node("Det", 1, 1, &[]);
    // 100: shared memory in double (80 KiB); 170: past the shared limit, global scratch.
    for shape in [&[2usize, 100, 100][..], &[3, 170, 170]] {
        for dtype in [DataType::Float64, DataType::Float32] {
            let x = uniform(&mut rng, dtype, shape, -1.0, 1.0);
            let inputs = vec![Some(x)];
            let what = format!("Det {dtype} {shape:?}");
            let want = reference(&n, 22, &inputs, &what);
            let got = gpu_run(&ep, &n, 22, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
            let rtol = if dtype == DataType::Float64 {
                1e-9
            } else {
                1e-5
            };
            assert_close_to(&got[0], &want[0], rtol, 0.0, &what);
        }
    }
}

#[test]
fn det_singular_ties_and_special_matrices() {
    let ep = gpu();
    let n = node("Det", 1, 1, &[]);
    #[rustfmt::skip]
    let mats: Vec<f64> = vec![
        // Singular: equal rows.
        1.0, 2.0, 3.0,   1.0, 2.0, 3.0,   4.0, 5.0, 6.0,
        // Singular: zero column.
        0.0, 2.0, 3.0,   0.0, 5.0, 6.0,   0.0, 8.0, 9.0,
        // Pivot ties (|-2| == |2|), needs swaps.
        0.0, 1.0, 2.0,   2.0, 0.0, 1.0,   -2.0, 1.0, 0.0,
        // Permutation matrix: determinant -1.
        0.0, 1.0, 0.0,   1.0, 0.0, 0.0,   0.0, 0.0, 1.0,
        // Diagonal.
        2.0, 0.0, 0.0,   0.0, -3.0, 0.0,   0.0, 0.0, 0.5,
        // Infinity and NaN propagate as on the CPU.
        f64::INFINITY, 1.0, 0.0,   1.0, 1.0, 0.0,   0.0, 0.0, 1.0,
        f64::NAN, 1.0, 0.0,   1.0, 1.0, 0.0,   0.0, 0.0, 1.0,
    ];
    for dtype in [DataType::Float32, DataType::Float64] {
        let x = from_f64s(dtype, &[7, 3, 3], &mats);
        let inputs = vec![Some(x)];
        let what = format!("Det special {dtype}");
        let want = reference(&n, 11, &inputs, &what);
        let got = gpu_run(&ep, &n, 11, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
        assert_close_to(&got[0], &want[0], 1e-12, 1e-12, &what);
    }
}

#[test]
fn det_every_float_dtype() {
    let ep = gpu();
    let mut rng = Rng::new(63);
    let n = node("Det", 1, 1, &[]);
    for shape in [&[4usize, 3, 3][..], &[2, 2, 5, 5]] {
        // Values exact in bfloat16, so the same inputs serve every dtype.
        let x32 = uniform(&mut rng, DataType::Float32, shape, -1.5, 1.5);
        let v: Vec<f64> = (0..x32.numel())
            .map(|i| half::bf16::from_f64(get(&x32, i)).to_f64())
            .collect();
        for dtype in FLOATS {
            let wide = if dtype == DataType::Float64 {
                DataType::Float64
            } else {
                DataType::Float32
            };
            let what = format!("Det {dtype} {shape:?}");
            let want = reference(&n, 22, &[Some(from_f64s(wide, shape, &v))], &what);
            let got = gpu_run(&ep, &n, 22, &[Some(from_f64s(dtype, shape, &v))])
                .unwrap_or_else(|e| panic!("{what}: {e}"));
            assert_eq!(got[0].dtype, dtype, "{what}: dtype");
            let (rtol, atol) = match dtype {
                DataType::Float64 => (1e-12, 1e-12),
                DataType::Float32 => (1e-6, 1e-6),
                // Halves work in float32 and round the result to 11 / 8 bits.
                DataType::Float16 => (2e-3, 2e-3),
                _ => (1e-2, 1e-2),
            };
            close_values(&got[0], &want[0], rtol, atol, &what);
        }
    }
}

#[test]
fn det_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(64);
    let n = node("Det", 1, 1, &[]);
    let x = uniform(&mut rng, DataType::Float32, &[2, 3, 4], -1.0, 1.0);
    expect_err(&ep, &n, 11, &[Some(x)], "square");
    let x = uniform(&mut rng, DataType::Float32, &[4], -1.0, 1.0);
    expect_err(&ep, &n, 11, &[Some(x)], "square");
    let x = from_f64s(DataType::Int32, &[2, 2], &[1.0, 2.0, 3.0, 4.0]);
    expect_err(&ep, &n, 11, &[Some(x)], "Det");
}
