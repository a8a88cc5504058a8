//! The internal NormMatMulNBits (an RMS norm folded into the MatMulNBits products that read
//! it) against the CPU provider's kernel (which runs the norm's kernel, then the product's:
//! the session tests check it gives the unfused graph's bytes): the one-launch path (float16 /
//! bfloat16, M <= 16, the norm in the tensor-core GEMV's prologue, with and without K splits
//! and the second row group) and the fallback (M = 20 and float32: the norm kernel into a
//! workspace, then the product), with and without skip, norm bias, product bias, the gated
//! form and the sum output.

use super::harness::*;
use super::nbits::{nbits_inputs, nbits_node, tolerances, Zp};
use onnx_runtime_ep_api::{CaptureSupport, ExecutionProvider};
use onnx_runtime_ir::{Attribute, DataType};

#[test]
fn norm_matmul_nbits_matches_cpu() {
    let ep = gpu();
    let mut rng = Rng::new(1601);
    // (block, K, N): Qwen-0.5B's hidden size, and K split over 8 warps with a ragged tile.
    let shapes = [(32, 896, 200), (128, 2048, 37)];
    let mut case = 0usize;
    for &(block, k, n) in &shapes {
        for dtype in [DataType::Float16, DataType::BFloat16, DataType::Float32] {
            for m in [1usize, 3, 12, 20] {
                for (skip, glu) in [(true, false), (false, false), (true, true), (false, true)] {
                    case += 1;
                    let nbias = skip && case.is_multiple_of(3);
                    let pbias = !glu && case.is_multiple_of(2);
                    let sum = skip && !case.is_multiple_of(4);
                    let g = nbits_inputs(&mut rng, dtype, &[m], k, n, 4, block, Zp::Packed, pbias);
                    let x = uniform(&mut rng, dtype, &[m, k], -2.0, 2.0);
                    let s = skip.then(|| uniform(&mut rng, dtype, &[m, k], -1.0, 1.0));
                    let gamma = uniform(&mut rng, dtype, &[k], 0.5, 1.5);
                    let nb = nbias.then(|| uniform(&mut rng, dtype, &[k], -0.5, 0.5));
                    let mut ins = vec![Some(x), s, Some(gamma), nb];
                    ins.extend(g[1..4].iter().cloned());
                    ins.push(g[5].clone());
                    if glu {
                        let u =
                            nbits_inputs(&mut rng, dtype, &[m], k, n, 4, block, Zp::None, false);
                        ins.extend(u[1..4].iter().cloned());
                    }
                    let wired: Vec<bool> = ins.iter().map(Option::is_some).collect();
                    let mut nd = nbits_node(k, n, 4, block, &wired);
                    nd.op_type = "NormMatMulNBits".into();
                    nd.domain = "ai.onnx_runtime_rs.internal".into();
                    nd.attributes
                        .insert("epsilon".into(), Attribute::Float(1e-6));
                    nd.attributes
                        .insert("glu".into(), Attribute::Int(glu as i64));
                    if sum {
                        nd.outputs.push(onnx_runtime_ir::ValueId(101));
                    }
                    let what = format!(
                        "NormMatMulNBits {dtype} block {block} K {k} N {n} M {m} skip {skip} \
                         glu {glu} norm bias {nbias} bias {pbias} sum {sum}"
                    );
                    let want = reference(&nd, 1, &ins, &what);
                    // gamma, the norm bias and the product's weights are initializers.
                    let constant: Vec<bool> = (0..ins.len()).map(|i| i >= 2).collect();
                    let got = gpu_run_constants(&ep, &nd, 1, &ins, &constant)
                        .unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_eq!(got.len(), want.len(), "{what}: outputs");
                    // The normalized rows reach about 2 (A's range in `tolerances` is 1); the
                    // gated form multiplies two products.
                    let (rtol, atol) = tolerances(dtype, k, 4);
                    let typical = (k as f64).sqrt() * 8.0 * 0.01;
                    let (rtol, atol) = if glu {
                        (4.0 * rtol, 2.0 * atol * typical)
                    } else {
                        (2.0 * rtol, 2.0 * atol)
                    };
                    assert_close_to(&got[0], &want[0], rtol, atol, &what);
                    if sum {
                        assert_close_to(&got[1], &want[1], 0.0, 0.0, &format!("{what}: sum"));
                    }
                }
            }
        }
    }
}

/// The one-launch path is capturable once it has run eagerly (it needs no workspace and no
/// cuBLASLt algorithm, so it does not wait on the product kernel's own first run), and not
/// before.
#[test]
fn norm_matmul_nbits_captures_after_one_eager_run() {
    let ep = gpu();
    let mut rng = Rng::new(1602);
    let (block, k, n, m) = (32, 896, 200, 1);
    let dtype = DataType::Float16;
    let g = nbits_inputs(&mut rng, dtype, &[m], k, n, 4, block, Zp::Packed, true);
    let mut ins = vec![
        uniform(&mut rng, dtype, &[m, k], -2.0, 2.0),
        uniform(&mut rng, dtype, &[m, k], -1.0, 1.0),
        uniform(&mut rng, dtype, &[k], 0.5, 1.5),
        uniform(&mut rng, dtype, &[k], -0.5, 0.5),
    ];
    ins.extend(
        g[1..4]
            .iter()
            .map(|t| t.clone().expect("B, scales, zero points")),
    );
    ins.push(g[5].clone().expect("bias"));
    let mut nd = nbits_node(k, n, 4, block, &[true; 8]);
    nd.op_type = "NormMatMulNBits".into();
    nd.domain = "ai.onnx_runtime_rs.internal".into();
    nd.attributes
        .insert("epsilon".into(), Attribute::Float(1e-6));
    let shapes: Vec<Vec<usize>> = ins.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(&nd, &shapes, 1).unwrap();
    assert!(matches!(
        kernel.capture_support(),
        CaptureSupport::Unsupported { .. }
    ));
    let mut bound = Bound::new(&ep, &ins, &[]);
    let types = bound.output_types(kernel.as_ref()).unwrap();
    bound.set_outputs(&types);
    bound.execute(kernel.as_ref()).unwrap();
    assert_eq!(kernel.capture_support(), CaptureSupport::Supported);
}
