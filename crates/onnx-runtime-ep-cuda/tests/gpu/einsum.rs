//! Einsum against the CPU provider: the ONNX backend cases (float64), products that map onto
//! batched GEMMs with transposed / padded / reversed input views, diagonals, sums in one
//! operand, implicit outputs, ellipsis broadcasting, scalars, three and more operands, every
//! dtype (half types against float32, integers bit for bit with wrapping), large sums that
//! take each reduction layout, empty tensors, errors naming the node, and capture after a
//! warm run. Every run asks `output_types` first and executes on outputs of exactly those
//! types.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider, Kernel};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];

fn einsum(eq: &str, n_in: usize) -> Node {
    node(
        "Einsum",
        n_in,
        1,
        &[("equation", Attribute::String(eq.into()))],
    )
}

/// Uniform values in [-1, 1) stored as `dtype`.
fn uniform(rng: &mut Rng, dtype: DataType, shape: &[usize]) -> T {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
        .collect();
    from_f64s(dtype, shape, &v)
}

/// The same logical values as `dtype`, same layout.
fn as_dtype(t: &T, dtype: DataType) -> T {
    let v: Vec<f64> = (0..t.numel()).map(|i| get(t, i)).collect();
    from_f64s(dtype, &t.shape, &v).with_layout(t.layout)
}

/// Builds the kernel, asks `output_types`, executes on outputs of those types, reads them.
fn run_resolved(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[T],
) -> Result<Vec<T>, EpError> {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(n, &shapes, opset)?;
    let mut bound = Bound::new(ep, inputs, &[]);
    let types = bound.output_types(kernel.as_ref())?;
    bound.set_outputs(&types);
    bound.execute(kernel.as_ref())?;
    bound.read()
}

fn cpu(n: &Node, inputs: &[T]) -> Vec<T> {
    let refs: Vec<Option<&T>> = inputs.iter().map(Some).collect();
    cpu_reference(n, 12, &refs).unwrap_or_else(|e| panic!("CPU reference Einsum: {e}"))
}

/// GPU against CPU within `tol` (relative and absolute).
fn check(ep: &CudaExecutionProvider, eq: &str, inputs: &[T], tol: f64, what: &str) {
    let n = einsum(eq, inputs.len());
    let what = format!("'{eq}' {what}");
    let got = run_resolved(ep, &n, 12, inputs)
        .unwrap_or_else(|e| panic!("{what}: the CUDA kernel failed: {e}"));
    let want = cpu(&n, inputs);
    assert_eq!(got.len(), 1, "{what}: outputs");
    assert_close_to(&got[0], &want[0], tol, tol, &what);
}

/// GPU against CPU bit for bit.
fn check_exact(ep: &CudaExecutionProvider, eq: &str, inputs: &[T], what: &str) {
    let n = einsum(eq, inputs.len());
    let what = format!("'{eq}' {what}");
    let got = run_resolved(ep, &n, 12, inputs)
        .unwrap_or_else(|e| panic!("{what}: the CUDA kernel failed: {e}"));
    let want = cpu(&n, inputs);
    assert_same(&got[0], &want[0], &what);
}

/// A half-type run against the CPU's float32 result on the same values.
fn check_half(ep: &CudaExecutionProvider, eq: &str, inputs: &[T], tol: f64, what: &str) {
    let n = einsum(eq, inputs.len());
    let what = format!("'{eq}' {what}");
    let got = run_resolved(ep, &n, 12, inputs)
        .unwrap_or_else(|e| panic!("{what}: the CUDA kernel failed: {e}"));
    let f32_inputs: Vec<T> = inputs
        .iter()
        .map(|t| as_dtype(t, DataType::Float32))
        .collect();
    let want = cpu(&n, &f32_inputs);
    assert_close_to(
        &as_dtype(&got[0], DataType::Float32),
        &want[0],
        tol,
        tol,
        &what,
    );
}

/// Random inputs of `shapes` in float32, the i-th in layout `layouts[i % len]`.
fn inputs_of(rng: &mut Rng, dtype: DataType, shapes: &[&[usize]], layouts: &[Layout]) -> Vec<T> {
    shapes
        .iter()
        .enumerate()
        .map(|(i, s)| uniform(rng, dtype, s).with_layout(layouts[i % layouts.len()]))
        .collect()
}

/// Equations of every kind with small shapes (all run per layout and dtype below).
const CASES: &[(&str, &[&[usize]])] = &[
    // Products.
    ("ij,jk->ik", &[&[5, 7], &[7, 6]]),
    ("ij,kj->ik", &[&[5, 7], &[6, 7]]),
    ("ji,jk->ik", &[&[7, 5], &[7, 6]]),
    ("ij,jk->ki", &[&[5, 7], &[7, 6]]),
    ("bij,bjk->bik", &[&[3, 4, 5], &[3, 5, 6]]),
    ("bij,bkj->bik", &[&[3, 4, 5], &[3, 6, 5]]),
    ("ibj,bjk->bik", &[&[4, 3, 5], &[3, 5, 6]]),
    ("bij,jk->bik", &[&[3, 4, 5], &[5, 6]]),
    ("ij,bjk->bik", &[&[4, 5], &[3, 5, 6]]),
    ("bij,bjk->kbi", &[&[3, 4, 5], &[3, 5, 6]]),
    ("abcd,cdbe->ae", &[&[2, 3, 4, 2], &[4, 2, 3, 5]]),
    ("i,j->ij", &[&[5], &[6]]),
    ("i,i", &[&[9], &[9]]),
    ("ij,ij->", &[&[4, 5], &[4, 5]]),
    ("ij,ij->ij", &[&[4, 5], &[4, 5]]),
    ("ij,ij->ji", &[&[4, 5], &[4, 5]]),
    ("ijx,jk->ik", &[&[3, 4, 5], &[4, 6]]),
    ("ij,jky->ik", &[&[3, 4], &[4, 5, 2]]),
    // Diagonals.
    ("ii->i", &[&[5, 5]]),
    ("ii", &[&[5, 5]]),
    ("aba->b", &[&[3, 4, 3]]),
    ("...ii->...i", &[&[3, 5, 5]]),
    ("bii,bij->bj", &[&[2, 4, 4], &[2, 4, 3]]),
    // Sums, transposes, implicit outputs.
    ("ij->i", &[&[5, 7]]),
    ("ij->j", &[&[5, 7]]),
    ("ij->", &[&[5, 7]]),
    ("ijk->ki", &[&[3, 4, 5]]),
    ("ijk->j", &[&[3, 4, 5]]),
    ("ijk->kji", &[&[3, 4, 5]]),
    ("ij,jk", &[&[4, 5], &[5, 3]]),
    ("ba", &[&[4, 5]]),
    ("ij,ij", &[&[4, 5], &[4, 5]]),
    ("...k", &[&[2, 3, 4]]),
    ("bij", &[&[2, 3, 4]]),
    // Ellipsis broadcasting and scalars.
    ("...ij,...jk->...ik", &[&[2, 1, 3, 4], &[5, 4, 2]]),
    ("...i,...i->...", &[&[3, 1, 4], &[5, 4]]),
    ("i...,i...->...", &[&[4, 2, 3], &[4, 3]]),
    ("...ij->j", &[&[2, 3, 4, 5]]),
    ("ij,jk->ik", &[&[4, 1], &[3, 5]]),
    ("->", &[&[]]),
    (",i->i", &[&[], &[6]]),
    ("i,->i", &[&[6], &[]]),
    // Three and more operands.
    ("ab,bc,cd->ad", &[&[3, 4], &[4, 5], &[5, 2]]),
    ("abc,cd,de->abe", &[&[2, 3, 4], &[4, 3], &[3, 5]]),
    ("bn,anm,bm->ba", &[&[2, 3], &[4, 3, 5], &[2, 5]]),
    ("ij,jk,kl,lm->mi", &[&[2, 3], &[3, 4], &[4, 2], &[2, 5]]),
];

#[test]
fn einsum_onnx_backend_cases_float64() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    let cases: [(&str, &[&[usize]]); 6] = [
        ("...ii ->...i", &[&[3, 5, 5]]),
        ("bij, bjk -> bik", &[&[5, 2, 3], &[5, 3, 4]]),
        ("i,i", &[&[5], &[5]]),
        ("->", &[&[]]),
        ("ij->i", &[&[3, 4]]),
        ("ij->ji", &[&[3, 4]]),
    ];
    for (eq, shapes) in cases {
        let inputs = inputs_of(&mut rng, DataType::Float64, shapes, &[Layout::Contiguous]);
        check(&ep, eq, &inputs, 1e-12, "float64");
    }
}

#[test]
fn einsum_every_equation_kind_float32_over_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    for (eq, shapes) in CASES {
        for layouts in [
            [Layout::Contiguous, Layout::Contiguous],
            [Layout::Reversed, Layout::Contiguous],
            [Layout::Contiguous, Layout::Reversed],
            [Layout::Padded, Layout::Reversed],
            [Layout::Reversed, Layout::Padded],
        ] {
            let inputs = inputs_of(&mut rng, DataType::Float32, shapes, &layouts);
            check(&ep, eq, &inputs, 1e-5, &format!("{shapes:?} {layouts:?}"));
        }
    }
}

#[test]
fn einsum_every_equation_kind_float64() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    for (eq, shapes) in CASES {
        let inputs = inputs_of(
            &mut rng,
            DataType::Float64,
            shapes,
            &[Layout::Padded, Layout::Reversed],
        );
        check(&ep, eq, &inputs, 1e-12, &format!("float64 {shapes:?}"));
    }
}

#[test]
fn einsum_half_types_against_float32() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    for (dtype, tol) in [(DataType::Float16, 1e-2), (DataType::BFloat16, 3e-2)] {
        for (eq, shapes) in CASES {
            let inputs = inputs_of(
                &mut rng,
                dtype,
                shapes,
                &[Layout::Contiguous, Layout::Padded],
            );
            check_half(&ep, eq, &inputs, tol, &format!("{dtype} {shapes:?}"));
        }
        // A longer contraction (K = 256) and a long sum.
        let inputs = inputs_of(&mut rng, dtype, &[&[3, 31, 256], &[3, 256, 24]], &LAYOUTS);
        check_half(&ep, "bij,bjk->bik", &inputs, tol, &format!("{dtype} K 256"));
        let inputs = inputs_of(&mut rng, dtype, &[&[7, 1000]], &[Layout::Contiguous]);
        check_half(
            &ep,
            "ij->i",
            &inputs,
            tol * 2.0,
            &format!("{dtype} long sum"),
        );
    }
}

#[test]
fn einsum_integer_types_bit_for_bit() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    for (dtype, lo, hi) in [
        (DataType::Int32, -50, 50),
        // Large values: products and sums wrap as on the CPU provider.
        (DataType::Int32, -(1 << 20), 1 << 20),
        (DataType::Int64, -(1 << 40), 1 << 40),
        (DataType::Uint32, 0, 1 << 20),
        (DataType::Uint64, 0, 1 << 40),
        (DataType::Int8, -100, 100),
        (DataType::Uint8, 0, 250),
        (DataType::Int16, -3000, 3000),
        (DataType::Uint16, 0, 60000),
    ] {
        for (i, (eq, shapes)) in CASES.iter().enumerate() {
            let inputs: Vec<T> = shapes
                .iter()
                .enumerate()
                .map(|(k, s)| {
                    random_numeric(&mut rng, dtype, s, lo, hi).with_layout(LAYOUTS[(i + k) % 3])
                })
                .collect();
            check_exact(
                &ep,
                eq,
                &inputs,
                &format!("{dtype} [{lo}, {hi}) {shapes:?}"),
            );
        }
    }
}

#[test]
fn einsum_large_sums_take_every_reduction_layout() {
    let ep = gpu();
    let mut rng = Rng::new(6);
    // Summed along the contiguous axis (lanes per output), along a strided axis (outputs per
    // warp), few outputs with a long sum (a block per output), everything to a scalar, and a
    // sum over two non-adjacent axes.
    let cases: [(&str, &[usize], Layout); 7] = [
        ("ij->i", &[300, 5000], Layout::Contiguous),
        ("ij->j", &[5000, 300], Layout::Contiguous),
        ("ij->i", &[3, 200_000], Layout::Contiguous),
        ("ij->j", &[200_000, 3], Layout::Contiguous),
        ("ij->", &[1000, 1000], Layout::Padded),
        ("ijk->j", &[64, 300, 64], Layout::Contiguous),
        ("ij->i", &[3000, 500], Layout::Reversed),
    ];
    for (eq, shape, layout) in cases {
        let x = random_numeric(&mut rng, DataType::Int32, shape, -50, 50).with_layout(layout);
        check_exact(&ep, eq, &[x], &format!("int32 {shape:?} {layout:?}"));
        let x = random_numeric(&mut rng, DataType::Int64, shape, -50, 50).with_layout(layout);
        check_exact(&ep, eq, &[x], &format!("int64 {shape:?} {layout:?}"));
        let x = uniform(&mut rng, DataType::Float32, shape).with_layout(layout);
        check(
            &ep,
            eq,
            &[x],
            2e-3,
            &format!("float32 {shape:?} {layout:?}"),
        );
        let x = uniform(&mut rng, DataType::Float64, shape).with_layout(layout);
        check(
            &ep,
            eq,
            &[x],
            1e-10,
            &format!("float64 {shape:?} {layout:?}"),
        );
    }
}

#[test]
fn einsum_larger_products() {
    let ep = gpu();
    let mut rng = Rng::new(7);
    for (eq, shapes) in [
        ("bij,bjk->bik", [&[8usize, 128, 256][..], &[8, 256, 64][..]]),
        (
            "bhqd,bhkd->bhqk",
            [&[2, 4, 64, 32][..], &[2, 4, 48, 32][..]],
        ),
        ("ij,kj->ki", [&[200, 300][..], &[100, 300][..]]),
        ("abcd,cdbe->ae", [&[16, 8, 12, 4][..], &[12, 4, 8, 20][..]]),
    ] {
        for layout in LAYOUTS {
            let inputs = inputs_of(&mut rng, DataType::Float32, &shapes, &[layout]);
            check(&ep, eq, &inputs, 1e-4, &format!("{shapes:?} {layout:?}"));
        }
        let inputs = inputs_of(&mut rng, DataType::Float64, &shapes, &[Layout::Contiguous]);
        check(&ep, eq, &inputs, 1e-11, &format!("float64 {shapes:?}"));
        let inputs: Vec<T> = shapes
            .iter()
            .map(|s| random_numeric(&mut rng, DataType::Int32, s, -20, 20))
            .collect();
        check_exact(&ep, eq, &inputs, &format!("int32 {shapes:?}"));
    }
}

#[test]
fn einsum_empty_tensors() {
    let ep = gpu();
    let mut rng = Rng::new(8);
    // K = 0: zeros; M = 0: an empty output; a sum over an empty axis: zeros.
    for (eq, shapes) in [
        ("ij,jk->ik", [&[3usize, 0][..], &[0, 4][..]]),
        ("ij,jk->ik", [&[0, 4][..], &[4, 5][..]]),
        ("bij,bjk->bik", [&[0, 2, 3][..], &[0, 3, 4][..]]),
    ] {
        let inputs = inputs_of(&mut rng, DataType::Float32, &shapes, &[Layout::Contiguous]);
        check(&ep, eq, &inputs, 0.0, &format!("{shapes:?}"));
    }
    for (eq, shape) in [("ij->i", &[3usize, 0][..]), ("ij->j", &[0, 4][..])] {
        let x = uniform(&mut rng, DataType::Float32, shape);
        check(&ep, eq, &[x], 0.0, &format!("{shape:?}"));
        let x = random_numeric(&mut rng, DataType::Int64, shape, 0, 5);
        check_exact(&ep, eq, &[x], &format!("int64 {shape:?}"));
    }
}

#[test]
fn einsum_errors_name_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(9);
    // Bad equations fail at build.
    for (eq, n_in, what) in [
        ("ij,jk->ik", 1, "names 2 inputs"),
        ("i!->i", 1, "'!'"),
        ("i..j->i", 1, "'.'"),
        ("i->ii", 1, "twice"),
    ] {
        let err = ep
            .get_kernel(&einsum(eq, n_in), &[], 12)
            .err()
            .unwrap_or_else(|| panic!("'{eq}' should not build"))
            .to_string();
        assert!(
            err.contains("test_Einsum") && err.contains(what),
            "{eq}: {err}"
        );
    }
    // Shapes that do not fit the equation fail at run time.
    let f = |s: &[usize]| uniform(&mut Rng::new(3), DataType::Float32, s);
    for (eq, inputs, what) in [
        ("ij,jk->ik", vec![f(&[2, 3]), f(&[4, 5])], "differ"),
        ("ij", vec![f(&[2, 3, 4])], "rank"),
        ("ij->k", vec![f(&[2, 3])], "no input"),
        ("...ij", vec![f(&[2])], "rank 1"),
    ] {
        let err = run_resolved(&ep, &einsum(eq, inputs.len()), 12, &inputs)
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("test_Einsum") && err.contains(what),
            "{eq}: {err}"
        );
    }
    // Mixed dtypes.
    let a = uniform(&mut rng, DataType::Float32, &[2, 3]);
    let b = uniform(&mut rng, DataType::Float64, &[3, 2]);
    let err = run_resolved(&ep, &einsum("ij,jk", 2), 12, &[a, b])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test_Einsum") && err.contains("one type"),
        "{err}"
    );
    // A dtype the kernel does not take is a planned refusal.
    let x = random_numeric(&mut rng, DataType::Bool, &[2, 2], 0, 2);
    let err = run_resolved(&ep, &einsum("ij->i", 1), 12, &[x]).unwrap_err();
    assert!(matches!(err, EpError::UnsupportedDtype { .. }), "{err}");
}

#[test]
fn einsum_capture_after_a_warm_run_replays() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(10);
    // A sum in one operand into a temporary block, then the product into the output.
    let eq = "ijx,kj->k";
    let nd = einsum(eq, 2);
    let inputs = [
        uniform(&mut rng, DataType::Float32, &[6, 5, 4]),
        uniform(&mut rng, DataType::Float32, &[3, 5]).with_layout(Layout::Reversed),
    ];
    let kernel = ep.get_kernel(&nd, &[], 12).unwrap();
    assert!(matches!(
        kernel.capture_support(),
        CaptureSupport::Unsupported { .. }
    ));
    let mut b = Bound::new(&ep, &inputs, &[(DataType::Float32, vec![3])]);
    b.execute(kernel.as_ref()).unwrap();
    assert_eq!(kernel.capture_support(), CaptureSupport::Supported);
    let refs: [&dyn Kernel; 1] = [kernel.as_ref()];
    runtime.begin_graph_capture(&refs).unwrap();
    b.execute(kernel.as_ref()).unwrap();
    runtime.end_graph_capture().unwrap();
    let fresh = uniform(&mut rng, DataType::Float32, &[6, 5, 4]);
    b.set_input(0, fresh.clone());
    runtime.replay_graph().unwrap();
    let replayed = b.read().unwrap();
    let want = cpu(&nd, &[fresh, inputs[1].clone()]);
    assert_close_to(&replayed[0], &want[0], 1e-5, 1e-5, "replayed Einsum");
    runtime.reset_graph().unwrap();
}
