//! Matrix products against the CPU provider: MatMul (vectors, batch broadcasting, transposed
//! and padded views, every dtype), Gemm (transposes, every C broadcast, alpha/beta, integer
//! types, opsets 1 and 6 with `broadcast`), FusedMatMul (alpha, transposes, batch
//! transposes), MatMulBias with each activation, MatMulInteger and QLinearMatMul exactly;
//! errors naming the node; capture after a warm run.
//! Every run asks `output_types` first and executes on outputs of exactly those types.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider, Kernel};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const INTERNAL: &str = "ai.onnx_runtime_rs.internal";

/// Uniform values in [-1, 1) stored as `dtype`.
fn uniform(rng: &mut Rng, dtype: DataType, shape: &[usize]) -> T {
    let n: usize = shape.iter().product();
    let v: Vec<f64> = (0..n)
        .map(|_| (rng.next() >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0)
        .collect();
    from_f64s(dtype, shape, &v)
}

/// The same logical values as `dtype` (exact when `t`'s values fit), same layout.
fn as_dtype(t: &T, dtype: DataType) -> T {
    let v: Vec<f64> = (0..t.numel()).map(|i| get(t, i)).collect();
    from_f64s(dtype, &t.shape, &v).with_layout(t.layout)
}

fn ms_node(op: &str, n_in: usize, attrs: &[(&str, Attribute)], domain: &str) -> Node {
    let mut n = node(op, n_in, 1, attrs);
    n.domain = domain.to_string();
    n
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

/// The CPU provider's outputs for the same node and inputs.
fn cpu(n: &Node, opset: u64, inputs: &[T]) -> Vec<T> {
    let refs: Vec<Option<&T>> = inputs.iter().map(Some).collect();
    cpu_reference(n, opset, &refs).unwrap_or_else(|e| panic!("CPU reference {}: {e}", n.op_type))
}

/// GPU against CPU within `rtol`/`atol`.
fn check(ep: &CudaExecutionProvider, n: &Node, opset: u64, inputs: &[T], tol: f64, what: &str) {
    let got = run_resolved(ep, n, opset, inputs)
        .unwrap_or_else(|e| panic!("{what}: the CUDA kernel failed: {e}"));
    let want = cpu(n, opset, inputs);
    assert_eq!(got.len(), want.len(), "{what}: outputs");
    for (g, w) in got.iter().zip(&want) {
        assert_close_to(g, w, tol, tol, what);
    }
}

/// GPU against CPU bit for bit (integer products).
fn check_exact(ep: &CudaExecutionProvider, n: &Node, opset: u64, inputs: &[T], what: &str) {
    let got = run_resolved(ep, n, opset, inputs)
        .unwrap_or_else(|e| panic!("{what}: the CUDA kernel failed: {e}"));
    let want = cpu(n, opset, inputs);
    for (g, w) in got.iter().zip(&want) {
        assert_same(g, w, what);
    }
}

/// A half-type run against the CPU's float32 result on the same (exactly converted) values.
fn check_half(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[T],
    tol: f64,
    what: &str,
) {
    let got = run_resolved(ep, n, opset, inputs)
        .unwrap_or_else(|e| panic!("{what}: the CUDA kernel failed: {e}"));
    let f32_inputs: Vec<T> = inputs
        .iter()
        .map(|t| as_dtype(t, DataType::Float32))
        .collect();
    let want = cpu(n, opset, &f32_inputs);
    for (g, w) in got.iter().zip(&want) {
        assert_close_to(&as_dtype(g, DataType::Float32), w, tol, tol, what);
    }
}

#[test]
fn matmul_vectors_promote_and_squeeze() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    let n = node("MatMul", 2, 1, &[]);
    let cases: [(&[usize], &[usize]); 6] = [
        (&[7], &[7]),
        (&[5], &[5, 3]),
        (&[5], &[2, 5, 3]),
        (&[4, 5], &[5]),
        (&[2, 3, 5], &[5]),
        (&[1, 5], &[5, 1]),
    ];
    for (a, b) in cases {
        let x = uniform(&mut rng, DataType::Float32, a);
        let y = uniform(&mut rng, DataType::Float32, b);
        check(&ep, &n, 13, &[x, y], 1e-5, &format!("matmul {a:?} @ {b:?}"));
    }
}

#[test]
fn matmul_batch_broadcasting() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    let n = node("MatMul", 2, 1, &[]);
    let cases: [(&[usize], &[usize]); 7] = [
        // Not one stride: a loop over the outer batch axis.
        (&[2, 1, 3, 4], &[5, 4, 6]),
        // B broadcast: one tall product.
        (&[2, 3, 4], &[4, 5]),
        (&[2, 3, 4], &[1, 4, 5]),
        // A broadcast: batch stride 0.
        (&[3, 4], &[2, 4, 5]),
        (&[1, 3, 4], &[2, 4, 5]),
        // Plain batches and a rank-4 broadcast.
        (&[2, 3, 4], &[2, 4, 5]),
        (&[2, 3, 3, 4], &[3, 4, 2]),
    ];
    for (a, b) in cases {
        let x = uniform(&mut rng, DataType::Float32, a);
        let y = uniform(&mut rng, DataType::Float32, b);
        check(&ep, &n, 13, &[x, y], 1e-5, &format!("matmul {a:?} @ {b:?}"));
    }
    // Opset 1 and 9 register the same semantics.
    let x = uniform(&mut rng, DataType::Float32, &[3, 4]);
    let y = uniform(&mut rng, DataType::Float32, &[4, 2]);
    for opset in [1, 9] {
        check(
            &ep,
            &n,
            opset,
            &[x.clone(), y.clone()],
            1e-5,
            &format!("opset {opset}"),
        );
    }
}

#[test]
fn matmul_transposed_padded_and_packed_views() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    let n = node("MatMul", 2, 1, &[]);
    let layouts = [Layout::Contiguous, Layout::Reversed, Layout::Padded];
    for la in layouts {
        for lb in layouts {
            // 2-D: a reversed view is a transpose flag, a padded one a leading dimension.
            let x = uniform(&mut rng, DataType::Float32, &[9, 17]).with_layout(la);
            let y = uniform(&mut rng, DataType::Float32, &[17, 6]).with_layout(lb);
            check(&ep, &n, 13, &[x, y], 1e-5, &format!("2-D {la:?} @ {lb:?}"));
            // 3-D: a reversed batch has no unit-stride matrix axis and is packed.
            let x = uniform(&mut rng, DataType::Float32, &[2, 5, 7]).with_layout(la);
            let y = uniform(&mut rng, DataType::Float32, &[2, 7, 3]).with_layout(lb);
            check(&ep, &n, 13, &[x, y], 1e-5, &format!("3-D {la:?} @ {lb:?}"));
        }
    }
    // Vectors with strides.
    let x = uniform(&mut rng, DataType::Float32, &[6]).with_layout(Layout::Padded);
    let y = uniform(&mut rng, DataType::Float32, &[6, 4]).with_layout(Layout::Reversed);
    check(
        &ep,
        &n,
        13,
        &[x, y],
        1e-5,
        "padded vector @ transposed matrix",
    );
}

#[test]
fn matmul_float_dtypes() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    let n = node("MatMul", 2, 1, &[]);
    // float64 against the CPU's float64.
    let x = uniform(&mut rng, DataType::Float64, &[2, 33, 256]);
    let y = uniform(&mut rng, DataType::Float64, &[256, 40]).with_layout(Layout::Reversed);
    check(&ep, &n, 13, &[x, y], 1e-12, "float64");
    // Half types against the float32 result on the same values, K = 256.
    for (dtype, tol) in [(DataType::Float16, 1e-2), (DataType::BFloat16, 2e-2)] {
        for lb in [Layout::Contiguous, Layout::Reversed, Layout::Padded] {
            let x = uniform(&mut rng, dtype, &[3, 31, 256]);
            let y = uniform(&mut rng, dtype, &[256, 24]).with_layout(lb);
            check_half(&ep, &n, 13, &[x, y], tol, &format!("{dtype} {lb:?}"));
        }
        let x = uniform(&mut rng, dtype, &[2, 1, 8, 256]);
        let y = uniform(&mut rng, dtype, &[3, 256, 5]);
        check_half(&ep, &n, 13, &[x, y], tol, &format!("{dtype} broadcast"));
    }
}

#[test]
fn matmul_integer_types_wrap() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    let n = node("MatMul", 2, 1, &[]);
    for (dtype, lo, hi) in [
        (DataType::Int32, -50, 50),
        // Large values: the int32 sums wrap as on the CPU.
        (DataType::Int32, -(1 << 20), 1 << 20),
        (DataType::Int64, -(1 << 40), 1 << 40),
        (DataType::Uint32, 0, 1 << 20),
        (DataType::Uint64, 0, 1 << 40),
    ] {
        for (a, b, la) in [
            (&[70usize, 33][..], &[33usize, 65][..], Layout::Contiguous),
            (&[2, 1, 3, 4][..], &[5, 4, 6][..], Layout::Reversed),
            (&[7][..], &[3, 7, 2][..], Layout::Padded),
        ] {
            let x = random_numeric(&mut rng, dtype, a, lo, hi).with_layout(la);
            let y = random_numeric(&mut rng, dtype, b, lo, hi);
            check_exact(
                &ep,
                &n,
                13,
                &[x, y],
                &format!("{dtype} {a:?} @ {b:?} {la:?}"),
            );
        }
    }
}

#[test]
fn matmul_empty_and_k_zero() {
    let ep = gpu();
    let mut rng = Rng::new(6);
    let n = node("MatMul", 2, 1, &[]);
    // K = 0: zeros.
    let x = uniform(&mut rng, DataType::Float32, &[3, 0]);
    let y = uniform(&mut rng, DataType::Float32, &[0, 4]);
    let got = run_resolved(&ep, &n, 13, &[x, y]).unwrap();
    assert_close(&got[0], &[0.0; 12], 0.0, 0.0, "K = 0");
    // M = 0: an empty output.
    let x = uniform(&mut rng, DataType::Float32, &[2, 0, 5]);
    let y = uniform(&mut rng, DataType::Float32, &[5, 4]);
    let got = run_resolved(&ep, &n, 13, &[x, y]).unwrap();
    assert_eq!(got[0].shape, vec![2, 0, 4]);
}

fn gemm_node(ta: i64, tb: i64, alpha: f32, beta: f32) -> Node {
    node(
        "Gemm",
        3,
        1,
        &[
            ("transA", Attribute::Int(ta)),
            ("transB", Attribute::Int(tb)),
            ("alpha", Attribute::Float(alpha)),
            ("beta", Attribute::Float(beta)),
        ],
    )
}

#[test]
fn gemm_transposes_and_every_c_broadcast() {
    let ep = gpu();
    let mut rng = Rng::new(7);
    let (m, k, n) = (13, 19, 11);
    let c_shapes: [&[usize]; 7] = [&[], &[1], &[n], &[1, n], &[m, 1], &[m, n], &[1, 1]];
    for ta in [0, 1] {
        for tb in [0, 1] {
            let a_shape = if ta == 1 { [k, m] } else { [m, k] };
            let b_shape = if tb == 1 { [n, k] } else { [k, n] };
            let a = uniform(&mut rng, DataType::Float32, &a_shape);
            let b = uniform(&mut rng, DataType::Float32, &b_shape).with_layout(Layout::Padded);
            // No C (opset 11+).
            let nd = gemm_node(ta, tb, 0.5, 1.0);
            let mut two = nd.clone();
            two.inputs.truncate(2);
            check(
                &ep,
                &two,
                13,
                &[a.clone(), b.clone()],
                1e-5,
                &format!("{ta}{tb} no C"),
            );
            for c_shape in c_shapes {
                for (alpha, beta) in [(1.0, 1.0), (0.5, -2.0), (1.5, 0.0)] {
                    let nd = gemm_node(ta, tb, alpha, beta);
                    let c = uniform(&mut rng, DataType::Float32, c_shape);
                    check(
                        &ep,
                        &nd,
                        13,
                        &[a.clone(), b.clone(), c],
                        1e-5,
                        &format!("trans {ta}{tb} C {c_shape:?} alpha {alpha} beta {beta}"),
                    );
                }
            }
        }
    }
    // Opset 7 and 9 (C required), and a transposed full C.
    let a = uniform(&mut rng, DataType::Float32, &[m, k]).with_layout(Layout::Reversed);
    let b = uniform(&mut rng, DataType::Float32, &[k, n]);
    let c = uniform(&mut rng, DataType::Float32, &[m, n]).with_layout(Layout::Reversed);
    for opset in [7, 9, 11] {
        let nd = gemm_node(0, 0, 1.0, 0.75);
        check(
            &ep,
            &nd,
            opset,
            &[a.clone(), b.clone(), c.clone()],
            1e-5,
            "opset variants",
        );
    }
    let mut two = gemm_node(0, 0, 1.0, 1.0);
    two.inputs.truncate(2);
    let err = run_resolved(&ep, &two, 9, &[a, b]).unwrap_err().to_string();
    assert!(
        err.contains("test_Gemm") && err.contains("missing"),
        "{err}"
    );
}

/// Gemm of opsets 1 and 6 (C required, the `broadcast` attribute) as the pytorch-converted
/// models use it: Linear (transB, a row C), addmm (C broadcast or full), mm (beta 0).
#[test]
fn gemm_opsets_1_and_6_with_broadcast() {
    let ep = gpu();
    let mut rng = Rng::new(15);
    let old = |tb: i64, beta: f32, broadcast: Option<i64>| {
        let mut attrs = vec![
            ("alpha", Attribute::Float(1.0)),
            ("beta", Attribute::Float(beta)),
            ("transB", Attribute::Int(tb)),
        ];
        if let Some(b) = broadcast {
            attrs.push(("broadcast", Attribute::Int(b)));
        }
        node("Gemm", 3, 1, &attrs)
    };
    for opset in [1, 6] {
        // test_Linear: A [4, 10], B [8, 10] (transB), C [8].
        let a = uniform(&mut rng, DataType::Float32, &[4, 10]);
        let b = uniform(&mut rng, DataType::Float32, &[8, 10]);
        let c = uniform(&mut rng, DataType::Float32, &[8]);
        check(
            &ep,
            &old(1, 1.0, Some(1)),
            opset,
            &[a, b, c],
            1e-5,
            "Linear",
        );
        // test_operator_addmm: a broadcast row C, then a full C without the attribute.
        let a = uniform(&mut rng, DataType::Float32, &[2, 3]);
        let b = uniform(&mut rng, DataType::Float32, &[3, 4]);
        let c = uniform(&mut rng, DataType::Float32, &[4]);
        let full = uniform(&mut rng, DataType::Float32, &[2, 4]).with_layout(Layout::Reversed);
        check(
            &ep,
            &old(0, 1.0, Some(1)),
            opset,
            &[a.clone(), b.clone(), c],
            1e-5,
            "addmm broadcast",
        );
        check(
            &ep,
            &old(0, 1.0, None),
            opset,
            &[a.clone(), b.clone(), full.clone()],
            1e-5,
            "addmm full C",
        );
        // broadcast = 0 with a full C, and (as on the CPU provider) with a row C.
        check(
            &ep,
            &old(0, 0.5, Some(0)),
            opset,
            &[a.clone(), b.clone(), full],
            1e-5,
            "broadcast 0",
        );
        let row = uniform(&mut rng, DataType::Float32, &[4]);
        check(
            &ep,
            &old(0, 0.5, Some(0)),
            opset,
            &[a.clone(), b.clone(), row],
            1e-5,
            "broadcast 0, row C",
        );
        // test_operator_mm: beta 0 with a one-element C.
        let zero = from_f64s(DataType::Float32, &[1], &[0.0]);
        check(
            &ep,
            &old(0, 0.0, Some(1)),
            opset,
            &[a.clone(), b.clone(), zero],
            1e-5,
            "mm",
        );
        // float64 and C required.
        let a64 = uniform(&mut rng, DataType::Float64, &[5, 7]);
        let b64 = uniform(&mut rng, DataType::Float64, &[7, 3]);
        let c64 = uniform(&mut rng, DataType::Float64, &[5, 1]);
        check(
            &ep,
            &old(0, 2.0, Some(1)),
            opset,
            &[a64, b64, c64],
            1e-12,
            "float64",
        );
        let mut two = old(0, 1.0, Some(1));
        two.inputs.truncate(2);
        let err = run_resolved(&ep, &two, opset, &[a, b])
            .unwrap_err()
            .to_string();
        assert!(err.contains("test_Gemm"), "opset {opset}: {err}");
    }
}

#[test]
fn gemm_dtypes() {
    let ep = gpu();
    let mut rng = Rng::new(8);
    let nd = gemm_node(1, 0, 0.5, 2.0);
    for dtype in [DataType::Float64, DataType::Float16, DataType::BFloat16] {
        for c_shape in [&[24usize][..], &[40, 1][..], &[40, 24][..]] {
            let a = uniform(&mut rng, dtype, &[256, 40]);
            let b = uniform(&mut rng, dtype, &[256, 24]);
            let c = uniform(&mut rng, dtype, c_shape);
            let what = format!("Gemm {dtype} C {c_shape:?}");
            match dtype {
                DataType::Float64 => check(&ep, &nd, 13, &[a, b, c], 1e-12, &what),
                DataType::Float16 => check_half(&ep, &nd, 13, &[a, b, c], 1e-2, &what),
                _ => check_half(&ep, &nd, 13, &[a, b, c], 2e-2, &what),
            }
        }
        // beta = 1 with a row C: the bias epilogue.
        let nd1 = gemm_node(0, 1, 1.0, 1.0);
        let a = uniform(&mut rng, dtype, &[17, 64]);
        let b = uniform(&mut rng, dtype, &[8, 64]);
        let c = uniform(&mut rng, dtype, &[8]);
        let what = format!("Gemm {dtype} bias");
        if dtype == DataType::Float64 {
            check(&ep, &nd1, 13, &[a, b, c], 1e-12, &what);
        } else {
            check_half(&ep, &nd1, 13, &[a, b, c], 2e-2, &what);
        }
    }
    // Integer Gemm: wrapping, alpha/beta cast to the element type.
    for dtype in [
        DataType::Int32,
        DataType::Int64,
        DataType::Uint32,
        DataType::Uint64,
    ] {
        for (ta, tb) in [(0, 0), (1, 1)] {
            let nd = gemm_node(ta, tb, 3.0, 2.0);
            let a = random_numeric(&mut rng, dtype, &[9, 9], 0, 100);
            let b = random_numeric(&mut rng, dtype, &[9, 9], 0, 100);
            let c = random_numeric(&mut rng, dtype, &[1, 9], 0, 100);
            check_exact(
                &ep,
                &nd,
                13,
                &[a.clone(), b.clone(), c],
                &format!("Gemm {dtype}"),
            );
            let mut two = nd.clone();
            two.inputs.truncate(2);
            check_exact(&ep, &two, 13, &[a, b], &format!("Gemm {dtype} no C"));
        }
    }
}

#[test]
fn fused_matmul_alpha_transposes_and_batch_transposes() {
    let ep = gpu();
    let mut rng = Rng::new(9);
    for (ta, tb) in [(0, 0), (1, 0), (0, 1), (1, 1)] {
        let nd = ms_node(
            "FusedMatMul",
            2,
            &[
                ("alpha", Attribute::Float(0.25)),
                ("transA", Attribute::Int(ta)),
                ("transB", Attribute::Int(tb)),
            ],
            "com.microsoft",
        );
        let a_shape: &[usize] = if ta == 1 { &[2, 6, 5] } else { &[2, 5, 6] };
        let b_shape: &[usize] = if tb == 1 { &[4, 6] } else { &[6, 4] };
        let a = uniform(&mut rng, DataType::Float32, a_shape).with_layout(Layout::Padded);
        let b = uniform(&mut rng, DataType::Float32, b_shape);
        check(
            &ep,
            &nd,
            1,
            &[a, b],
            1e-5,
            &format!("FusedMatMul trans {ta}{tb}"),
        );
    }
    for dtype in [DataType::Float16, DataType::Float64] {
        let nd = ms_node(
            "FusedMatMul",
            2,
            &[("alpha", Attribute::Float(2.0))],
            "com.microsoft",
        );
        let a = uniform(&mut rng, dtype, &[3, 64]);
        let b = uniform(&mut rng, dtype, &[64, 5]);
        if dtype == DataType::Float64 {
            check(&ep, &nd, 1, &[a, b], 1e-12, "FusedMatMul f64");
        } else {
            check_half(&ep, &nd, 1, &[a, b], 1e-2, "FusedMatMul f16");
        }
    }
    // transBatchA / transBatchB: A [M, b, K] and B [K, b, N] read as [b, M, K] and [b, K, N];
    // compared with MatMul on the transposed values (the CPU provider refuses batch
    // transposes).
    let (m, bt, k, n) = (3, 4, 5, 2);
    let a = uniform(&mut rng, DataType::Float32, &[m, bt, k]);
    let b = uniform(&mut rng, DataType::Float32, &[k, bt, n]);
    let permute = |t: &T, d: [usize; 3]| {
        // [d0, d1, d2] -> [d1, d0, d2]
        moved(t, &[d[1], d[0], d[2]], |o| lin(&d, &[o[1], o[0], o[2]]))
    };
    let at = permute(&a, [m, bt, k]);
    let btt = permute(&b, [k, bt, n]);
    let nd = ms_node(
        "FusedMatMul",
        2,
        &[
            ("transBatchA", Attribute::Int(1)),
            ("transBatchB", Attribute::Int(1)),
            ("alpha", Attribute::Float(1.5)),
        ],
        "com.microsoft",
    );
    let got = run_resolved(&ep, &nd, 1, &[a, b]).unwrap();
    let plain = ms_node(
        "FusedMatMul",
        2,
        &[("alpha", Attribute::Float(1.5))],
        "com.microsoft",
    );
    let want = cpu(&plain, 1, &[at, btt]);
    assert_close_to(&got[0], &want[0], 1e-5, 1e-5, "transBatchA/B");
    // transBatchA with transA: A [K, b, M].
    let a = uniform(&mut rng, DataType::Float32, &[k, bt, m]);
    let b = uniform(&mut rng, DataType::Float32, &[bt, k, n]);
    let at = permute(&a, [k, bt, m]);
    let nd = ms_node(
        "FusedMatMul",
        2,
        &[
            ("transBatchA", Attribute::Int(1)),
            ("transA", Attribute::Int(1)),
        ],
        "com.microsoft",
    );
    let got = run_resolved(&ep, &nd, 1, &[a, b.clone()]).unwrap();
    let plain = ms_node(
        "FusedMatMul",
        2,
        &[("transA", Attribute::Int(1))],
        "com.microsoft",
    );
    let want = cpu(&plain, 1, &[at, b]);
    assert_close_to(&got[0], &want[0], 1e-5, 1e-5, "transBatchA + transA");
}

fn bias_node(act: &str, params: &[f32]) -> Node {
    let mut attrs = vec![("activation", Attribute::String(act.into()))];
    if !params.is_empty() {
        attrs.push(("activation_params", Attribute::Floats(params.to_vec())));
    }
    ms_node("MatMulBias", 3, &attrs, INTERNAL)
}

#[test]
fn matmul_bias_every_activation() {
    let ep = gpu();
    let mut rng = Rng::new(10);
    let acts: [(&str, &[f32]); 12] = [
        ("", &[]),
        ("Relu", &[]),
        ("Tanh", &[]),
        ("Sigmoid", &[]),
        ("LeakyRelu", &[0.1]),
        ("Clip", &[-0.5, 0.75]),
        ("HardSigmoid", &[0.2, 0.5]),
        ("HardSwish", &[]),
        ("QuickGelu", &[1.702]),
        ("Gelu", &[]),
        ("FastGelu", &[]),
        ("Identity", &[]),
    ];
    for (act, params) in acts {
        let nd = bias_node(act, params);
        for a_shape in [&[2usize, 5, 48][..], &[48][..], &[7, 48][..]] {
            let a = uniform(&mut rng, DataType::Float32, a_shape);
            let b = uniform(&mut rng, DataType::Float32, &[48, 24]);
            let bias = uniform(&mut rng, DataType::Float32, &[24]);
            check(
                &ep,
                &nd,
                1,
                &[a, b, bias],
                1e-4,
                &format!("MatMulBias {act} A {a_shape:?}"),
            );
        }
        // A transposed weight view and a padded A.
        let a = uniform(&mut rng, DataType::Float32, &[6, 32]).with_layout(Layout::Padded);
        let b = uniform(&mut rng, DataType::Float32, &[32, 16]).with_layout(Layout::Reversed);
        let bias = uniform(&mut rng, DataType::Float32, &[16]);
        check(
            &ep,
            &nd,
            1,
            &[a, b, bias],
            1e-4,
            &format!("MatMulBias {act} strided"),
        );
        // Widths of whole 16-byte vectors (the vectorized epilogue) and not (the strided one).
        for (dtype, tol) in [(DataType::Float16, 1e-2), (DataType::BFloat16, 3e-2)] {
            for (a_shape, k, n) in [(&[2usize, 9, 64][..], 64, 40), (&[3, 20][..], 20, 12)] {
                let a = uniform(&mut rng, dtype, a_shape);
                let b = uniform(&mut rng, dtype, &[k, n]);
                let bias = uniform(&mut rng, dtype, &[n]);
                check_half(
                    &ep,
                    &nd,
                    1,
                    &[a, b, bias],
                    tol,
                    &format!("MatMulBias {act} {dtype} A {a_shape:?} N {n}"),
                );
            }
        }
        let a = uniform(&mut rng, DataType::Float64, &[5, 16]);
        let b = uniform(&mut rng, DataType::Float64, &[16, 8]);
        let bias = uniform(&mut rng, DataType::Float64, &[8]);
        check(
            &ep,
            &nd,
            1,
            &[a, b, bias],
            1e-12,
            &format!("MatMulBias {act} f64"),
        );
    }
    // An unknown activation is an error at build time naming the node.
    let nd = bias_node("Softmax", &[]);
    let err = ep
        .get_kernel(&nd, &[], 1)
        .err()
        .expect("refused")
        .to_string();
    assert!(
        err.contains("Softmax") && err.contains("test_MatMulBias"),
        "{err}"
    );
}

#[test]
fn matmul_integer_zero_points() {
    let ep = gpu();
    let mut rng = Rng::new(11);
    let q8 = [DataType::Uint8, DataType::Int8];
    let range = |d: DataType| {
        if d == DataType::Uint8 {
            (0, 256)
        } else {
            (-128, 128)
        }
    };
    let n4 = node("MatMulInteger", 4, 1, &[]);
    let mut n2 = n4.clone();
    n2.inputs.truncate(2);
    for ta in q8 {
        for tb in q8 {
            let (alo, ahi) = range(ta);
            let (blo, bhi) = range(tb);
            let (m, k, n) = (19, 37, 23);
            let a = random_numeric(&mut rng, ta, &[m, k], alo, ahi).with_layout(Layout::Reversed);
            let b = random_numeric(&mut rng, tb, &[k, n], blo, bhi);
            let what = format!("MatMulInteger {ta} x {tb}");
            check_exact(
                &ep,
                &n2,
                10,
                &[a.clone(), b.clone()],
                &format!("{what} no zp"),
            );
            // Scalar zero points.
            let za = random_numeric(&mut rng, ta, &[], alo, ahi);
            let zb = random_numeric(&mut rng, tb, &[1], blo, bhi);
            check_exact(
                &ep,
                &n4,
                10,
                &[a.clone(), b.clone(), za, zb],
                &format!("{what} scalar"),
            );
            // Per row of A, per column of B.
            let za = random_numeric(&mut rng, ta, &[m], alo, ahi);
            let zb = random_numeric(&mut rng, tb, &[n], blo, bhi);
            check_exact(
                &ep,
                &n4,
                10,
                &[a, b, za, zb],
                &format!("{what} per row/column"),
            );
            // Batched with N-D zero points [b, M, 1] and [b, 1, N].
            let a = random_numeric(&mut rng, ta, &[2, 5, 8], alo, ahi);
            let b = random_numeric(&mut rng, tb, &[2, 8, 6], blo, bhi).with_layout(Layout::Padded);
            let za = random_numeric(&mut rng, ta, &[2, 5, 1], alo, ahi);
            let zb = random_numeric(&mut rng, tb, &[2, 1, 6], blo, bhi);
            check_exact(&ep, &n4, 10, &[a, b, za, zb], &format!("{what} batched"));
        }
    }
    // Only A's zero point (B's trailing zero point omitted).
    let mut n3 = n4.clone();
    n3.inputs.truncate(3);
    let a = random_numeric(&mut rng, DataType::Uint8, &[4, 6], 0, 256);
    let b = random_numeric(&mut rng, DataType::Int8, &[6, 3], -128, 128);
    let za = random_numeric(&mut rng, DataType::Uint8, &[], 0, 256);
    check_exact(
        &ep,
        &n3,
        10,
        &[a.clone(), b.clone(), za],
        "A zero point only",
    );
    // A zero point of the wrong form is an error naming the node.
    let bad = random_numeric(&mut rng, DataType::Uint8, &[6], 0, 256);
    let err = run_resolved(&ep, &n3, 10, &[a, b, bad])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test_MatMulInteger") && err.contains("zero point"),
        "{err}"
    );
}

#[test]
fn qlinear_matmul_per_tensor_and_per_row_column() {
    let ep = gpu();
    let mut rng = Rng::new(12);
    let q8 = [DataType::Uint8, DataType::Int8];
    let range = |d: DataType| {
        if d == DataType::Uint8 {
            (0, 256)
        } else {
            (-128, 128)
        }
    };
    let nd = node("QLinearMatMul", 8, 1, &[]);
    let scales = |rng: &mut Rng, n: usize, lo: f64, hi: f64| {
        let v: Vec<f64> = (0..n)
            .map(|_| lo + (hi - lo) * (rng.below(1000) as f64 / 1000.0))
            .collect();
        from_f64s(DataType::Float32, &[n], &v)
    };
    for ta in q8 {
        for tb in q8 {
            for ty in q8 {
                let (alo, ahi) = range(ta);
                let (blo, bhi) = range(tb);
                let (ylo, yhi) = range(ty);
                let (m, k, n) = (9, 33, 13);
                for per_axis in [false, true] {
                    for batched in [false, true] {
                        let a_shape: &[usize] = if batched { &[2, m, k] } else { &[m, k] };
                        let a = random_numeric(&mut rng, ta, a_shape, alo, ahi);
                        let b = random_numeric(&mut rng, tb, &[k, n], blo, bhi)
                            .with_layout(Layout::Reversed);
                        let (am, bn) = if per_axis { (m, n) } else { (1, 1) };
                        let a_scale = scales(&mut rng, am, 0.01, 0.05);
                        let a_zp = random_numeric(&mut rng, ta, &[am], alo, ahi);
                        let b_scale = scales(&mut rng, bn, 0.01, 0.05);
                        let b_zp = random_numeric(&mut rng, tb, &[bn], blo, bhi);
                        let y_scale = from_f64s(DataType::Float32, &[], &[1.5]);
                        let y_zp = random_numeric(&mut rng, ty, &[], ylo, yhi);
                        check_exact(
                            &ep,
                            &nd,
                            if per_axis { 21 } else { 10 },
                            &[a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp],
                            &format!(
                                "QLinearMatMul {ta} x {tb} -> {ty} per-axis {per_axis} \
                                 batched {batched}"
                            ),
                        );
                    }
                }
            }
        }
    }
}

#[test]
fn shape_errors_name_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(13);
    let x = uniform(&mut rng, DataType::Float32, &[3, 4]);
    let y = uniform(&mut rng, DataType::Float32, &[5, 2]);
    for (nd, opset) in [
        (node("MatMul", 2, 1, &[]), 13),
        (ms_node("FusedMatMul", 2, &[], "com.microsoft"), 1),
        (
            {
                let mut g = gemm_node(0, 0, 1.0, 1.0);
                g.inputs.truncate(2);
                g
            },
            13,
        ),
    ] {
        let err = run_resolved(&ep, &nd, opset, &[x.clone(), y.clone()])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&nd.name) && err.contains("inner dimensions differ"),
            "{}: {err}",
            nd.op_type
        );
    }
    // Batch axes that do not broadcast.
    let n = node("MatMul", 2, 1, &[]);
    let a = uniform(&mut rng, DataType::Float32, &[2, 3, 4]);
    let b = uniform(&mut rng, DataType::Float32, &[3, 4, 5]);
    let err = run_resolved(&ep, &n, 13, &[a, b]).unwrap_err().to_string();
    assert!(
        err.contains("test_MatMul") && err.contains("broadcast"),
        "{err}"
    );
    // Mixed dtypes.
    let a = uniform(&mut rng, DataType::Float32, &[2, 3]);
    let b = uniform(&mut rng, DataType::Float16, &[3, 2]);
    let err = run_resolved(&ep, &n, 13, &[a, b]).unwrap_err().to_string();
    assert!(
        err.contains("test_MatMul") && err.contains("one type"),
        "{err}"
    );
    // Gemm's C that does not broadcast.
    let nd = gemm_node(0, 0, 1.0, 1.0);
    let a = uniform(&mut rng, DataType::Float32, &[3, 4]);
    let b = uniform(&mut rng, DataType::Float32, &[4, 5]);
    let c = uniform(&mut rng, DataType::Float32, &[3, 4]);
    let err = run_resolved(&ep, &nd, 13, &[a, b, c])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test_Gemm") && err.contains("does not broadcast"),
        "{err}"
    );
    // MatMulBias with a bias of the wrong width.
    let nd = bias_node("Relu", &[]);
    let a = uniform(&mut rng, DataType::Float32, &[3, 4]);
    let b = uniform(&mut rng, DataType::Float32, &[4, 5]);
    let bias = uniform(&mut rng, DataType::Float32, &[4]);
    let err = run_resolved(&ep, &nd, 1, &[a, b, bias])
        .unwrap_err()
        .to_string();
    assert!(
        err.contains("test_MatMulBias") && err.contains("bias"),
        "{err}"
    );
    // A dtype MatMul does not take is a planned refusal (the CPU provider runs it).
    let a = random_numeric(&mut rng, DataType::Int8, &[2, 2], 0, 5);
    let err = run_resolved(&ep, &n, 13, &[a.clone(), a]).unwrap_err();
    assert!(matches!(err, EpError::UnsupportedDtype { .. }), "{err}");
}

#[test]
fn capture_after_a_warm_run_replays_the_product() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(14);
    let nd = bias_node("Gelu", &[]);
    let inputs = [
        uniform(&mut rng, DataType::Float32, &[4, 64]),
        uniform(&mut rng, DataType::Float32, &[64, 32]),
        uniform(&mut rng, DataType::Float32, &[32]),
    ];
    let kernel = ep.get_kernel(&nd, &[], 1).unwrap();
    assert!(matches!(
        kernel.capture_support(),
        CaptureSupport::Unsupported { .. }
    ));
    let mut b = Bound::new(&ep, &inputs, &[(DataType::Float32, vec![4, 32])]);
    b.execute(kernel.as_ref()).unwrap();
    assert_eq!(kernel.capture_support(), CaptureSupport::Supported);
    let refs: [&dyn Kernel; 1] = [kernel.as_ref()];
    runtime.begin_graph_capture(&refs).unwrap();
    b.execute(kernel.as_ref()).unwrap();
    runtime.end_graph_capture().unwrap();
    let fresh = uniform(&mut rng, DataType::Float32, &[4, 64]);
    b.set_input(0, fresh.clone());
    runtime.replay_graph().unwrap();
    let replayed = b.read().unwrap();
    let want = cpu(&nd, 1, &[fresh, inputs[1].clone(), inputs[2].clone()]);
    assert_close_to(&replayed[0], &want[0], 1e-5, 1e-5, "replayed MatMulBias");
    runtime.reset_graph().unwrap();
}
