//! com.microsoft MatMulNBits, the internal MatMulNBitsSiluMul and GatherBlockQuantized against
//! the CPU provider on random inputs, the capture of a warmed MatMulNBits, and (ignored by default) the MatMulNBits
//! timing on the Qwen2.5 projection shapes: `cargo test --features gpu-tests --test gpu
//! nbits_timing -- --ignored --nocapture`.

use super::harness::*;
use onnx_runtime_ep_api::{
    CaptureSupport, DeviceBuffer, DevicePtr, DevicePtrMut, EpError, ExecutionProvider, Kernel,
    TensorMut, TensorView,
};
use onnx_runtime_ep_cuda::runtime::cuptr;
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{compute_contiguous_strides, Attribute, DataType, Node};

const FLOATS: [DataType; 3] = [DataType::Float32, DataType::Float16, DataType::BFloat16];

/// Zero points of a case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Zp {
    None,
    Packed,
    Float,
}

pub(super) fn nbits_node(k: usize, n: usize, bits: usize, block: usize, wired: &[bool]) -> Node {
    let mut nd = node(
        "MatMulNBits",
        wired.len(),
        1,
        &[
            ("K", Attribute::Int(k as i64)),
            ("N", Attribute::Int(n as i64)),
            ("bits", Attribute::Int(bits as i64)),
            ("block_size", Attribute::Int(block as i64)),
            ("accuracy_level", Attribute::Int(4)),
        ],
    )
    .with_domain("com.microsoft");
    for (slot, &w) in nd.inputs.iter_mut().zip(wired) {
        if !w {
            *slot = None;
        }
    }
    nd
}

/// Random MatMulNBits inputs: A `[a_lead.., K]`, B, scales, zero points, (no g_idx), bias.
#[allow(clippy::too_many_arguments)]
pub(super) fn nbits_inputs(
    rng: &mut Rng,
    dtype: DataType,
    a_lead: &[usize],
    k: usize,
    n: usize,
    bits: usize,
    block: usize,
    zp: Zp,
    bias: bool,
) -> Vec<Option<T>> {
    let kb = k.div_ceil(block);
    let blob = block * bits / 8;
    let mut a_shape = a_lead.to_vec();
    a_shape.push(k);
    let a = uniform(rng, dtype, &a_shape, -1.0, 1.0);
    let b = random_bytes(rng, DataType::Uint8, &[n, kb, blob]);
    let scales = uniform(rng, dtype, &[n * kb], 0.005, 0.05);
    let zp = match zp {
        Zp::None => None,
        Zp::Packed => Some(random_bytes(
            rng,
            DataType::Uint8,
            &[n * (kb * bits).div_ceil(8)],
        )),
        Zp::Float => Some(uniform(
            rng,
            dtype,
            &[n * kb],
            0.0,
            (1 << bits) as f64 - 1.0,
        )),
    };
    let bias = bias.then(|| uniform(rng, dtype, &[n], -1.0, 1.0));
    vec![Some(a), Some(b), Some(scales), zp, None, bias]
}

/// Tolerances for a product over K terms (q - z) * scale * a: codes spread over 2^bits values,
/// scales in [0.005, 0.05), A in [-1, 1), so a typical output is about
/// sqrt(K) * 2^(bits-1) / sqrt(3) * 0.03 * 0.58.
pub(super) fn tolerances(dtype: DataType, k: usize, bits: usize) -> (f64, f64) {
    let typical = (k as f64).sqrt() * (1u32 << (bits - 1)) as f64 * 0.01;
    match dtype {
        DataType::Float32 => (1e-4, 1e-4 * typical),
        DataType::Float16 => (4e-3, 4e-3 * typical),
        _ => (2e-2, 2e-2 * typical),
    }
}

fn check_nbits(
    ep: &onnx_runtime_ep_cuda::CudaExecutionProvider,
    ins: Vec<Option<T>>,
    k: usize,
    n: usize,
    bits: usize,
    block: usize,
    what: &str,
) {
    let wired: Vec<bool> = ins.iter().map(Option::is_some).collect();
    let nd = nbits_node(k, n, bits, block, &wired);
    let dtype = ins[0].as_ref().unwrap().dtype;
    let want = reference(&nd, 1, &ins, what);
    // The weights as a session marks initializers: the tensor-core GEMV may then overlap the
    // kernel ahead of it (programmatic dependent launch, on by default on sm_90+).
    let weights: Vec<bool> = (0..ins.len()).map(|i| i > 0).collect();
    let got =
        gpu_run_constants(ep, &nd, 1, &ins, &weights).unwrap_or_else(|e| panic!("{what}: {e}"));
    let (rtol, atol) = tolerances(dtype, k, bits);
    assert_close_to(&got[0], &want[0], rtol, atol, what);
}

#[test]
fn matmul_nbits_matches_cpu() {
    let ep = gpu();
    let mut rng = Rng::new(1501);
    // (bits, block, K, N): K a multiple of the block and not (padded last block), rows of B of
    // 16-byte multiples (the GEMV) and not (4-bit block 16 with odd k_blocks: the GEMM path).
    let shapes = [
        (4, 32, 256, 64),
        (4, 16, 80, 37),
        (4, 64, 200, 33),
        (4, 128, 384, 40),
        (8, 16, 96, 19),
        (8, 32, 100, 48),
        (8, 128, 256, 24),
        (2, 16, 128, 20),
        (2, 64, 150, 36),
    ];
    let mut case = 0usize;
    for &(bits, block, k, n) in &shapes {
        for dtype in FLOATS {
            for zp in [Zp::None, Zp::Packed, Zp::Float] {
                for lead in [&[1][..], &[3], &[17], &[128], &[2, 3, 5]] {
                    case += 1;
                    // Every combination of the rest would be slow; bias on every other case.
                    let bias = case.is_multiple_of(2);
                    let ins = nbits_inputs(&mut rng, dtype, lead, k, n, bits, block, zp, bias);
                    let what = format!(
                        "MatMulNBits {dtype} bits {bits} block {block} K {k} N {n} A {lead:?} \
                         zp {zp:?} bias {bias}"
                    );
                    check_nbits(&ep, ins, k, n, bits, block, &what);
                }
            }
        }
    }
}

/// The 4-bit tensor-core GEMV (float16 / bfloat16 A, blocks >= 32, K a multiple of 32) over
/// every row count it takes, K splits across warps, partial slabs (K not a multiple of 128),
/// padded last blocks and ragged column tiles; M = 17 checks the prefill dequantization of the
/// same layouts.
#[test]
fn matmul_nbits_tensor_core_gemv_matches_cpu() {
    let ep = gpu();
    let mut rng = Rng::new(1507);
    // (block, K, N): K = 96 (3 chunks: one partial slab), K = 160 with block 64 (padded last
    // block), K = 2048 with N = 24 (3 column tiles: K split over 8 warps), N = 37 (a ragged
    // tile), K = 896 (Qwen's hidden size, 7 slabs).
    let shapes = [
        (32, 96, 37),
        (64, 160, 16),
        (128, 2048, 24),
        (32, 896, 200),
        (128, 384, 9),
    ];
    for &(block, k, n) in &shapes {
        for dtype in [DataType::Float16, DataType::BFloat16] {
            for zp in [Zp::None, Zp::Packed, Zp::Float] {
                for m in [1usize, 2, 5, 8, 9, 16, 17] {
                    let bias = (m + k).is_multiple_of(2);
                    let ins = nbits_inputs(&mut rng, dtype, &[m], k, n, 4, block, zp, bias);
                    let what = format!(
                        "MatMulNBits {dtype} bits 4 block {block} K {k} N {n} M {m} zp {zp:?} \
                         bias {bias}"
                    );
                    check_nbits(&ep, ins, k, n, 4, block, &what);
                }
            }
        }
    }
}

/// The internal MatMulNBitsSiluMul (the session's fusion of a gated feed-forward): the CPU
/// provider's kernel against the unfused graph it replaces (two MatMulNBits, QuickGelu with
/// alpha 1 rounded to A's type, Mul), then the CUDA kernel against the CPU one: the tensor-core
/// GLU GEMV (float16 / bfloat16, M <= 16, with and without K splits), and the fallback of two
/// products and `nbits_silu_mul` (float32 A, M = 17 through the prefill path, 8-bit codes).
#[test]
fn matmul_nbits_silu_mul_matches_cpu_and_the_unfused_graph() {
    let ep = gpu();
    let mut rng = Rng::new(1509);
    // (bits, block, K, N): Qwen's hidden size with 8 column tiles, a ragged tile with K split
    // over 8 warps, a padded last block, 8-bit codes (the register GEMV).
    let shapes = [
        (4, 32, 896, 64),
        (4, 128, 2048, 37),
        (4, 64, 160, 24),
        (8, 32, 128, 20),
    ];
    for &(bits, block, k, n) in &shapes {
        for dtype in FLOATS {
            for (m, zp_g, zp_u) in [
                (1, Zp::None, Zp::None),
                (3, Zp::Packed, Zp::None),
                (9, Zp::Packed, Zp::Packed),
                (17, Zp::None, Zp::Float),
            ] {
                let g = nbits_inputs(&mut rng, dtype, &[m], k, n, bits, block, zp_g, false);
                let u = nbits_inputs(&mut rng, dtype, &[m], k, n, bits, block, zp_u, false);
                let mut ins: Vec<Option<T>> = g[..4].to_vec();
                ins.extend(u[1..4].iter().cloned());
                let what = format!(
                    "MatMulNBitsSiluMul {dtype} bits {bits} block {block} K {k} N {n} M {m} \
                     zp {zp_g:?}/{zp_u:?}"
                );
                // The unfused graph on the CPU provider.
                let mut ui = u.clone();
                ui[0] = g[0].clone();
                let wired = |v: &[Option<T>]| v.iter().map(Option::is_some).collect::<Vec<_>>();
                let gy = reference(&nbits_node(k, n, bits, block, &wired(&g)), 1, &g, &what);
                let uy = reference(&nbits_node(k, n, bits, block, &wired(&ui)), 1, &ui, &what);
                let quick = node("QuickGelu", 1, 1, &[("alpha", Attribute::Float(1.0))])
                    .with_domain("com.microsoft");
                let sy = reference(&quick, 1, &[Some(gy[0].clone())], &what);
                let mul = node("Mul", 2, 1, &[]);
                let unfused =
                    reference(&mul, 14, &[Some(sy[0].clone()), Some(uy[0].clone())], &what);
                let fused = silu_mul_node(k, n, bits, block, &wired(&ins));
                let cpu = reference(&fused, 1, &ins, &what);
                assert_close_to(
                    &cpu[0],
                    &unfused[0],
                    0.0,
                    0.0,
                    &format!("{what}: CPU fused"),
                );
                let weights: Vec<bool> = (0..ins.len()).map(|i| i > 0).collect();
                let got = gpu_run_constants(&ep, &fused, 1, &ins, &weights)
                    .unwrap_or_else(|e| panic!("{what}: {e}"));
                // Rounding differences in either product are amplified by the other (values
                // up to ~|typical| each).
                let (rtol, atol) = tolerances(dtype, k, bits);
                let typical = (k as f64).sqrt() * (1u32 << (bits - 1)) as f64 * 0.01;
                assert_close_to(&got[0], &cpu[0], 2.0 * rtol, atol * typical.max(1.0), &what);
            }
        }
    }
}

fn silu_mul_node(k: usize, n: usize, bits: usize, block: usize, wired: &[bool]) -> Node {
    let mut nd = nbits_node(k, n, bits, block, wired);
    nd.op_type = "MatMulNBitsSiluMul".into();
    nd.domain = "ai.onnx_runtime_rs.internal".into();
    nd
}

#[test]
fn matmul_nbits_rejects_bad_inputs_and_g_idx() {
    let ep = gpu();
    let mut rng = Rng::new(1502);
    // g_idx is the CPU provider's: the CUDA kernel refuses the node at build.
    let nd = nbits_node(64, 8, 4, 32, &[true, true, true, false, true]);
    let err = ep.get_kernel(&nd, &[], 1).err().expect("g_idx refused");
    assert!(err.to_string().contains("g_idx"), "{err}");
    // Scales of the wrong count.
    let mut ins = nbits_inputs(
        &mut rng,
        DataType::Float16,
        &[2],
        64,
        8,
        4,
        32,
        Zp::None,
        false,
    );
    ins[2] = Some(uniform(&mut rng, DataType::Float16, &[15], 0.01, 0.1));
    let nd = nbits_node(64, 8, 4, 32, &[true, true, true]);
    expect_err(&ep, &nd, 1, &ins[..3], "scales");
    // A whose last axis is not K.
    let mut ins = nbits_inputs(
        &mut rng,
        DataType::Float32,
        &[2],
        64,
        8,
        4,
        32,
        Zp::None,
        false,
    );
    ins[0] = Some(uniform(&mut rng, DataType::Float32, &[2, 63], -1.0, 1.0));
    expect_err(&ep, &nd, 1, &ins[..3], "K=64");
    // A block size that is not a power of two.
    let bad = node(
        "MatMulNBits",
        3,
        1,
        &[
            ("K", Attribute::Int(64)),
            ("N", Attribute::Int(8)),
            ("block_size", Attribute::Int(24)),
        ],
    )
    .with_domain("com.microsoft");
    let err = ep.get_kernel(&bad, &[], 1).err().expect("block 24 refused");
    assert!(err.to_string().contains("block_size"), "{err}");
}

#[test]
fn matmul_nbits_captures_after_a_warm_run() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(1503);
    // One decode (GEMV) and one prefill (dequantize + cuBLASLt) node.
    let cases = [(1usize, 896usize, 4864usize), (40, 896, 600)];
    let mut kernels = Vec::new();
    let mut bounds = Vec::new();
    let mut inputs = Vec::new();
    for &(m, k, n) in &cases {
        let ins = nbits_inputs(
            &mut rng,
            DataType::Float16,
            &[m],
            k,
            n,
            4,
            32,
            Zp::Packed,
            true,
        );
        let nd = nbits_node(k, n, 4, 32, &[true, true, true, true, false, true]);
        let kernel = ep.get_kernel(&nd, &[], 1).unwrap();
        let wired: Vec<T> = ins.iter().flatten().cloned().collect();
        let mut bound = Bound::new(&ep, &wired, &[]);
        let types = bound.output_types(kernel.as_ref()).unwrap();
        bound.set_outputs(&types);
        assert!(matches!(
            kernel.capture_support(),
            CaptureSupport::Unsupported { .. }
        ));
        bound.execute(kernel.as_ref()).unwrap();
        assert_eq!(kernel.capture_support(), CaptureSupport::Supported);
        kernels.push(kernel);
        bounds.push(bound);
        inputs.push((nd, ins));
    }
    let refs: Vec<&dyn Kernel> = kernels.iter().map(|k| k.as_ref()).collect();
    runtime.begin_graph_capture(&refs).unwrap();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    runtime.end_graph_capture().unwrap();
    // New activations, then one replay: the outputs follow them.
    for ((nd, ins), b) in inputs.iter_mut().zip(bounds.iter_mut()) {
        let a = ins[0].as_ref().unwrap();
        let fresh = uniform(&mut rng, a.dtype, &a.shape, -1.0, 1.0);
        b.set_input(0, fresh.clone());
        ins[0] = Some(fresh);
        let _ = nd;
    }
    runtime.replay_graph().unwrap();
    for ((nd, ins), b) in inputs.iter().zip(&bounds) {
        let want = reference(nd, 1, ins, "capture reference");
        let k = ins[0].as_ref().unwrap().shape[1];
        let (rtol, atol) = tolerances(DataType::Float16, k, 4);
        assert_close_to(
            &b.read().unwrap()[0],
            &want[0],
            rtol,
            atol,
            "replayed MatMulNBits",
        );
    }
    assert!(runtime.reset_graph().unwrap());
}

// ---- GatherBlockQuantized ----

/// `gpu_run` for inputs of any dtype, 4-bit ones included (the harness's layouts need whole
/// bytes per element): contiguous device copies of the wired inputs, outputs as the kernel
/// reports them.
fn gpu_run_packed(
    ep: &CudaExecutionProvider,
    nd: &Node,
    inputs: &[Option<T>],
) -> Result<Vec<T>, EpError> {
    let kernel = ep.get_kernel(nd, &[], 1)?;
    let device = ep.device_id();
    let upload = |bytes: &[u8]| -> DeviceBuffer {
        let buf = ep.allocate(bytes.len().max(1), 256).unwrap();
        unsafe { ep.runtime().htod(bytes, cuptr(buf.as_ptr())).unwrap() };
        buf
    };
    let wired: Vec<&T> = inputs.iter().flatten().collect();
    let bufs: Vec<DeviceBuffer> = wired.iter().map(|t| upload(&t.bytes)).collect();
    let strides: Vec<Vec<usize>> = wired
        .iter()
        .map(|t| compute_contiguous_strides(&t.shape))
        .collect();
    let views: Vec<TensorView<'_>> = wired
        .iter()
        .zip(&bufs)
        .zip(&strides)
        .map(|((t, b), s)| TensorView::new(DevicePtr(b.as_ptr()), t.dtype, &t.shape, s, device))
        .collect();
    let result = (|| {
        let types = kernel.output_types(&views)?;
        let mut out_bufs: Vec<DeviceBuffer> = types
            .iter()
            .map(|(d, s)| upload(&vec![0u8; d.storage_bytes(s.iter().product())]))
            .collect();
        let out_strides: Vec<Vec<usize>> = types
            .iter()
            .map(|(_, s)| compute_contiguous_strides(s))
            .collect();
        {
            let mut outs: Vec<TensorMut<'_>> = out_bufs
                .iter_mut()
                .zip(&types)
                .zip(&out_strides)
                .map(|((b, (d, s)), st)| {
                    TensorMut::new(DevicePtrMut(b.as_mut_ptr()), *d, s, st, device)
                })
                .collect();
            kernel.execute(&views, &mut outs)?;
        }
        let mut got = Vec::new();
        for ((d, s), b) in types.iter().zip(&out_bufs) {
            let mut bytes = vec![0u8; d.storage_bytes(s.iter().product())];
            unsafe { ep.runtime().dtoh(&mut bytes, cuptr(b.as_ptr()))? };
            got.push(T::new(*d, s, bytes));
        }
        for b in out_bufs {
            let _ = ep.deallocate(b);
        }
        Ok(got)
    })();
    drop(views);
    for b in bufs {
        let _ = ep.deallocate(b);
    }
    result
}

fn gbq_node(attrs: &[(&str, i64)], n_inputs: usize) -> Node {
    let attrs: Vec<(&str, Attribute)> =
        attrs.iter().map(|&(k, v)| (k, Attribute::Int(v))).collect();
    node("GatherBlockQuantized", n_inputs, 1, &attrs).with_domain("com.microsoft")
}

fn indices(rng: &mut Rng, dtype: DataType, shape: &[usize], dim: usize) -> T {
    let n: usize = shape.iter().product();
    let v: Vec<i64> = (0..n)
        .map(|_| rng.range(-(dim as i64), dim as i64))
        .collect();
    if dtype == DataType::Int32 {
        i32s(shape, &v.iter().map(|&x| x as i32).collect::<Vec<_>>())
    } else {
        i64s(shape, &v)
    }
}

#[test]
fn gather_block_quantized_matches_cpu() {
    let ep = gpu();
    let mut rng = Rng::new(1504);
    // uint8 tables of 2/4/8-bit codes: [vocab, dim * bits / 8], quantized along the last axis.
    for bits in [4usize, 8, 2] {
        for block in [16usize, 32, 64, 128] {
            for dtype in FLOATS {
                for with_zp in [false, true] {
                    let (vocab, dim) = (37usize, 96usize);
                    let kb = dim.div_ceil(block);
                    let data = random_bytes(&mut rng, DataType::Uint8, &[vocab, dim * bits / 8]);
                    let scales = uniform(&mut rng, dtype, &[vocab, kb], 0.01, 0.2);
                    let idt = if with_zp {
                        DataType::Int32
                    } else {
                        DataType::Int64
                    };
                    let idx = indices(&mut rng, idt, &[2, 3], vocab);
                    let mut ins = vec![Some(data), Some(idx), Some(scales)];
                    if with_zp {
                        let zrow = (kb * bits).div_ceil(8);
                        ins.push(Some(random_bytes(
                            &mut rng,
                            DataType::Uint8,
                            &[vocab, zrow],
                        )));
                    }
                    let nd = gbq_node(
                        &[("bits", bits as i64), ("block_size", block as i64)],
                        ins.len(),
                    );
                    let what = format!("GBQ uint8 bits {bits} block {block} {dtype} zp {with_zp}");
                    let want = reference(&nd, 1, &ins, &what);
                    let got = gpu_run(&ep, &nd, 1, &ins).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_close_to(&got[0], &want[0], 1e-6, 0.0, &what);
                }
            }
        }
    }
    // int4 / uint4 tables on several gather and quantize axes.
    let layouts: [(&[usize], i64, i64, usize); 5] = [
        (&[33, 80], 0, 1, 16),
        (&[64, 20], 1, 0, 16),
        (&[4, 50, 6], 1, 1, 16),
        (&[4, 7, 130], -2, 2, 64),
        (&[3, 5, 7, 40], 0, 3, 128),
    ];
    for dt in [DataType::Int4, DataType::Uint4] {
        for &(shape, g, q, block) in &layouts {
            for dtype in FLOATS {
                for with_zp in [false, true] {
                    let r = shape.len() as i64;
                    let (ga, qa) = (((g + r) % r) as usize, ((q + r) % r) as usize);
                    let mut s_shape = shape.to_vec();
                    s_shape[qa] = shape[qa].div_ceil(block);
                    let data = random_bytes(&mut rng, dt, shape);
                    let scales = uniform(&mut rng, dtype, &s_shape, 0.01, 0.2);
                    let idx = indices(&mut rng, DataType::Int64, &[3], shape[ga]);
                    let mut ins = vec![Some(data), Some(idx), Some(scales)];
                    if with_zp {
                        ins.push(Some(random_bytes(&mut rng, dt, &s_shape)));
                    }
                    let nd = gbq_node(
                        &[
                            ("gather_axis", g),
                            ("quantize_axis", q),
                            ("block_size", block as i64),
                        ],
                        ins.len(),
                    );
                    let what = format!("GBQ {dt} {shape:?} g {g} q {q} {dtype} zp {with_zp}");
                    let want = reference(&nd, 1, &ins, &what);
                    let got =
                        gpu_run_packed(&ep, &nd, &ins).unwrap_or_else(|e| panic!("{what}: {e}"));
                    assert_close_to(&got[0], &want[0], 1e-6, 0.0, &what);
                }
            }
        }
    }
}

#[test]
fn gather_block_quantized_reports_bad_indices() {
    let ep = gpu();
    let mut rng = Rng::new(1505);
    let data = random_bytes(&mut rng, DataType::Uint8, &[6, 16]);
    let scales = uniform(&mut rng, DataType::Float32, &[6, 1], 0.01, 0.2);
    let nd = gbq_node(&[("bits", 4), ("block_size", 32)], 3);
    let ins = vec![Some(data), Some(i64s(&[2], &[1, 6])), Some(scales)];
    expect_err(&ep, &nd, 1, &ins, "out of range");
}

// ---- timing ----

/// Device time of one MatMulNBits call: the mean of a captured graph of `reps` calls that
/// cycle through enough copies of the weights (>= 256 MiB in all) that none is read from L2.
/// Returns (eager seconds, graph seconds, bytes moved: weights, scales, zero points, A, Y).
fn time_nbits(m: usize, k: usize, n: usize) -> (f64, f64, f64) {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(1506);
    let (bits, block) = (4, 32);
    let ins = nbits_inputs(
        &mut rng,
        DataType::Float16,
        &[m],
        k,
        n,
        bits,
        block,
        Zp::Packed,
        false,
    );
    let nd = nbits_node(k, n, bits, block, &[true, true, true, true]);
    let wired: Vec<T> = ins.iter().flatten().cloned().collect();
    let weight_bytes: usize = wired[1..].iter().map(|t| t.bytes.len()).sum();
    let bytes = weight_bytes + wired[0].bytes.len() + m * n * 2;
    let copies = (256usize << 20).div_ceil(weight_bytes).clamp(2, 64);
    let kernel = ep.get_kernel(&nd, &[], 1).unwrap();
    let mut bounds: Vec<Bound<'_>> = (0..copies)
        .map(|_| {
            let mut b = Bound::new(&ep, &wired, &[]);
            let types = b.output_types(kernel.as_ref()).unwrap();
            b.set_outputs(&types);
            b
        })
        .collect();
    for b in bounds.iter_mut() {
        b.execute(kernel.as_ref()).unwrap();
    }
    runtime.synchronize().unwrap();
    // Eager: launch overhead included.
    let runs = 200;
    let start = std::time::Instant::now();
    for i in 0..runs {
        bounds[i % copies].execute(kernel.as_ref()).unwrap();
    }
    runtime.synchronize().unwrap();
    let eager = start.elapsed().as_secs_f64() / runs as f64;
    // Captured: device time per call.
    let reps = copies.max(32).div_ceil(copies) * copies;
    runtime.begin_graph_capture(&[kernel.as_ref()]).unwrap();
    for i in 0..reps {
        bounds[i % copies].execute(kernel.as_ref()).unwrap();
    }
    runtime.end_graph_capture().unwrap();
    runtime.replay_graph().unwrap();
    runtime.synchronize().unwrap();
    let replays = 10;
    let start = std::time::Instant::now();
    for _ in 0..replays {
        runtime.replay_graph().unwrap();
    }
    runtime.synchronize().unwrap();
    let graph = start.elapsed().as_secs_f64() / (replays * reps) as f64;
    assert!(runtime.reset_graph().unwrap());
    // The timed result is right.
    let want = reference(&nd, 1, &ins, "timing reference");
    let (rtol, atol) = tolerances(DataType::Float16, k, 4);
    assert_close_to(
        &bounds[0].read().unwrap()[0],
        &want[0],
        rtol,
        atol,
        "timed MatMulNBits",
    );
    (eager, graph, bytes as f64)
}

#[test]
#[ignore = "timing: run on the GPU machine with --ignored --nocapture"]
fn nbits_timing() {
    // Qwen2.5-0.5B (hidden 896, MLP 4864, vocab 151936) and 1.5B (hidden 1536, MLP 8960).
    let shapes = [
        (896, 4864),
        (4864, 896),
        (896, 1152),
        (1536, 8960),
        (8960, 1536),
        (896, 151936),
    ];
    for m in [1usize, 4, 16, 17] {
        for &(k, n) in &shapes {
            let (eager, graph, bytes) = time_nbits(m, k, n);
            eprintln!(
                "MatMulNBits f16 int4 block 32 zp M={m:<3} K={k:<5} N={n:<6}: {:7.1} us eager, \
                 {:7.1} us in a graph, {:6.0} GB/s ({:4.1}% of 4.3 TB/s; M > 16 includes the \
                 cuBLASLt product)",
                eager * 1e6,
                graph * 1e6,
                bytes / graph / 1e9,
                100.0 * bytes / graph / 4.3e12
            );
        }
    }
}
