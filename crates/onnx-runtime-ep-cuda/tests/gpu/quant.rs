//! QuantizeLinear, DequantizeLinear and DynamicQuantizeLinear against the CPU provider: every
//! quantized type (packed 4/2-bit and float8 included), per tensor / per axis / blocked, with
//! and without zero points, negative axes, float16/bfloat16/double/int32 inputs, ties and
//! saturation, strided layouts, dense tensors large enough for the vector paths, and
//! eager-vs-replay under graph capture. Also the helpers the tensor_misc tests share: binding
//! inputs of any dtype (packed ones dense) and comparing against `cpu_reference` through
//! `output_types`.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, DeviceBuffer, ExecutionProvider, Kernel};
use onnx_runtime_ep_cuda::runtime::cuptr;
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{compute_contiguous_strides, Attribute, DataType, Node};

/// Device storage and element strides of `t` in its layout (packed types: always dense).
fn upload(ep: &CudaExecutionProvider, t: &T, rng: &mut Rng) -> (DeviceBuffer, Vec<usize>) {
    let rank = t.shape.len();
    let (storage, strides) = if t.dtype.is_sub_byte() || t.layout == Layout::Contiguous {
        (t.bytes.clone(), compute_contiguous_strides(&t.shape))
    } else {
        let w = t.width();
        let (storage_shape, order): (Vec<usize>, Vec<usize>) = match t.layout {
            Layout::Reversed => (
                t.shape.iter().rev().copied().collect(),
                (0..rank).rev().collect(),
            ),
            _ => {
                let mut s = t.shape.clone();
                if let Some(last) = s.last_mut() {
                    *last += 3;
                }
                (s, (0..rank).collect())
            }
        };
        let sstrides = compute_contiguous_strides(&storage_shape);
        let mut strides = vec![0usize; rank];
        for (k, &axis) in order.iter().enumerate() {
            strides[axis] = sstrides[k];
        }
        let total: usize = storage_shape.iter().product::<usize>().max(1);
        let mut storage = rng.bytes(total * w);
        let cs = compute_contiguous_strides(&t.shape);
        for i in 0..t.numel() {
            let off: usize = (0..rank)
                .map(|k| (i / cs[k]) % t.shape[k] * strides[k])
                .sum();
            storage[off * w..(off + 1) * w].copy_from_slice(t.elem(i));
        }
        (storage, strides)
    };
    let buf = ep.allocate(storage.len().max(1), 256).unwrap();
    unsafe { ep.runtime().htod(&storage, cuptr(buf.as_ptr())).unwrap() };
    (buf, strides)
}

/// Binds inputs of any dtype (the harness's `Bound::new` takes byte-aligned ones only).
pub fn bind<'e>(ep: &'e CudaExecutionProvider, inputs: &[T]) -> Bound<'e> {
    let mut rng = Rng::new(99);
    Bound {
        ep,
        inputs: inputs
            .iter()
            .map(|t| {
                let (buf, strides) = upload(ep, t, &mut rng);
                (t.clone(), buf, strides)
            })
            .collect(),
        outputs: Vec::new(),
    }
}

fn is_real(d: DataType) -> bool {
    matches!(
        d,
        DataType::Float32 | DataType::Float64 | DataType::Float16 | DataType::BFloat16
    )
}

/// Byte-exact equality (any dtype, packed included), naming the first differing byte.
pub fn assert_bytes(got: &T, want: &T, what: &str) {
    assert_eq!(got.dtype, want.dtype, "{what}: dtype");
    assert_eq!(got.shape, want.shape, "{what}: shape");
    if let Some(i) = (0..want.bytes.len()).find(|&i| got.bytes[i] != want.bytes[i]) {
        panic!(
            "{what}: byte {i} (of {}) differs: got {:#04x}, want {:#04x} (shape {:?}, dtype {})",
            want.bytes.len(),
            got.bytes[i],
            want.bytes[i],
            want.shape,
            want.dtype
        );
    }
}

/// Runs `node` on the GPU through `output_types` (checked against the CPU provider's output
/// types) and `execute`, and compares every output with the CPU provider's: float outputs
/// within `rtol` (NaN matching NaN), others byte for byte. Returns the GPU outputs.
pub fn check_against_cpu(
    ep: &CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[T],
    rtol: f64,
    what: &str,
) -> Vec<T> {
    let refs: Vec<Option<&T>> = inputs.iter().map(Some).collect();
    let want = cpu_reference(node, opset, &refs)
        .unwrap_or_else(|e| panic!("{what}: the CPU reference failed: {e}"));
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep
        .get_kernel(node, &shapes, opset)
        .unwrap_or_else(|e| panic!("{what}: building the kernel: {e}"));
    let mut bound = bind(ep, inputs);
    let types = bound
        .output_types(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: output_types: {e}"));
    let want_types: Vec<(DataType, Vec<usize>)> =
        want.iter().map(|t| (t.dtype, t.shape.clone())).collect();
    assert_eq!(types, want_types, "{what}: output types");
    bound.set_outputs(&types);
    bound
        .execute(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: execute: {e}"));
    let got = bound
        .read()
        .unwrap_or_else(|e| panic!("{what}: reading the outputs: {e}"));
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        let what = format!("{what}: output {k}");
        if is_real(w.dtype) {
            assert_close_to(g, w, rtol, 0.0, &what);
        } else {
            assert_bytes(g, w, &what);
        }
    }
    got
}

/// The error the GPU kernel gives for `inputs` (from output_types, else from execute on the
/// given output types).
pub fn gpu_error(
    ep: &CudaExecutionProvider,
    node: &Node,
    opset: u64,
    inputs: &[T],
    outs: &[(DataType, Vec<usize>)],
) -> String {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = match ep.get_kernel(node, &shapes, opset) {
        Ok(k) => k,
        Err(e) => return e.to_string(),
    };
    let mut bound = bind(ep, inputs);
    if let Err(e) = bound.output_types(kernel.as_ref()) {
        return e.to_string();
    }
    bound.set_outputs(outs);
    match bound.execute(kernel.as_ref()).and_then(|_| bound.read()) {
        Err(e) => e.to_string(),
        Ok(_) => panic!("{}: expected an error", node.op_type),
    }
}

pub fn f32s(rng: &mut Rng, shape: &[usize], lo: i64, hi: i64) -> T {
    random_numeric(rng, DataType::Float32, shape, lo, hi)
}

fn scalar(dtype: DataType, v: f64) -> T {
    from_f64s(dtype, &[], &[v])
}

/// Random elements of a quantized type (every code, packed types two or four to a byte).
fn random_q(rng: &mut Rng, dtype: DataType, shape: &[usize]) -> T {
    let n: usize = shape.iter().product();
    T::new(dtype, shape, rng.bytes(dtype.storage_bytes(n)))
}

/// Random positive scales (powers of two and not) in `dtype`.
fn scales(rng: &mut Rng, dtype: DataType, shape: &[usize]) -> T {
    let n: usize = shape.iter().product();
    let choices = [0.5, 0.25, 2.0, 0.3, 1.7, 0.0625, 3.0, 0.1];
    let v: Vec<f64> = (0..n).map(|_| choices[rng.below(choices.len())]).collect();
    from_f64s(dtype, shape, &v)
}

type Attrs<'a> = Vec<(&'a str, Attribute)>;
/// A node, its opset, its inputs and its outputs' types.
type CaptureCase = (Node, u64, Vec<T>, Vec<(DataType, Vec<usize>)>);

fn q_node(op: &str, n_in: usize, attrs: &[(&str, Attribute)]) -> Node {
    node(op, n_in, 1, attrs)
}

fn int(v: i64) -> Attribute {
    Attribute::Int(v)
}

const INT_Q: [DataType; 4] = [
    DataType::Uint8,
    DataType::Int8,
    DataType::Uint16,
    DataType::Int16,
];

const FLOAT8: [DataType; 4] = [
    DataType::Float8E4M3FN,
    DataType::Float8E4M3FNUZ,
    DataType::Float8E5M2,
    DataType::Float8E5M2FNUZ,
];

const PACKED: [DataType; 5] = [
    DataType::Uint4,
    DataType::Int4,
    DataType::Uint2,
    DataType::Int2,
    DataType::Float4E2M1,
];

/// A zero point of `dtype`: random for integer types, zero codes for minifloats.
fn zero_point(rng: &mut Rng, dtype: DataType, shape: &[usize]) -> T {
    let n: usize = shape.iter().product();
    if dtype.is_float() {
        return T::new(dtype, shape, vec![0u8; dtype.storage_bytes(n)]);
    }
    let (lo, hi) = match dtype {
        DataType::Uint8 => (0, 256),
        DataType::Int8 => (-128, 128),
        DataType::Uint16 => (0, 65536),
        DataType::Int16 => (-32768, 32768),
        _ => return random_q(rng, dtype, shape),
    };
    // Mostly near the middle of the range, so outputs do not all saturate.
    let v: Vec<f64> = (0..n)
        .map(|_| {
            let mid = (lo + hi) / 2;
            (mid + rng.range(-20, 20)).clamp(lo, hi - 1) as f64
        })
        .collect();
    from_f64s(dtype, shape, &v)
}

// ---- QuantizeLinear ----

#[test]
fn quantize_per_tensor_integer_types_ties_and_saturation() {
    let ep = gpu();
    let mut rng = Rng::new(1);
    // x / 0.5 lands on .5 ties (x has quarter fractions); +-600 saturates the 8-bit types.
    for (case, q) in INT_Q.iter().enumerate() {
        let layout = [Layout::Contiguous, Layout::Reversed, Layout::Padded][case % 3];
        let x = f32s(&mut rng, &[5, 7, 9], -600, 600).with_layout(layout);
        for s in [0.5, 0.3, 4.0] {
            let zp = zero_point(&mut rng, *q, &[]);
            let what = format!("QuantizeLinear {q} scale {s} {layout:?}");
            check_against_cpu(
                &ep,
                &q_node("QuantizeLinear", 3, &[]),
                13,
                &[x.clone(), scalar(DataType::Float32, s), zp],
                0.0,
                &what,
            );
        }
    }
    // No zero point: uint8 (opset 10 and 19), or output_dtype (opset 21).
    let x = f32s(&mut rng, &[1000], -100, 400);
    for opset in [10, 19] {
        check_against_cpu(
            &ep,
            &q_node("QuantizeLinear", 2, &[]),
            opset,
            &[x.clone(), scalar(DataType::Float32, 0.5)],
            0.0,
            &format!("QuantizeLinear default uint8 opset {opset}"),
        );
    }
    for q in INT_Q {
        let n = q_node(
            "QuantizeLinear",
            2,
            &[("output_dtype", int(q.onnx_code() as i64))],
        );
        check_against_cpu(
            &ep,
            &n,
            21,
            &[x.clone(), scalar(DataType::Float32, 0.25)],
            0.0,
            &format!("QuantizeLinear output_dtype {q}"),
        );
    }
}

#[test]
fn quantize_per_axis_and_blocked_with_negative_axes() {
    let ep = gpu();
    let mut rng = Rng::new(2);
    let shape = [4, 6, 16];
    for layout in [Layout::Contiguous, Layout::Reversed] {
        let x = f32s(&mut rng, &shape, -200, 200).with_layout(layout);
        // Per axis, every axis, positive and negative.
        for axis in [0i64, 1, 2, -1, -3] {
            let a = ((axis + 3) % 3) as usize;
            for (zp_given, q) in [
                (true, DataType::Int8),
                (false, DataType::Uint8),
                (true, DataType::Int16),
            ] {
                let s = scales(&mut rng, DataType::Float32, &[shape[a]]);
                let mut inputs = vec![x.clone(), s];
                if zp_given {
                    inputs.push(zero_point(&mut rng, q, &[shape[a]]));
                }
                let n = q_node("QuantizeLinear", inputs.len(), &[("axis", int(axis))]);
                check_against_cpu(
                    &ep,
                    &n,
                    13,
                    &inputs,
                    0.0,
                    &format!("QuantizeLinear per axis {axis} {q} zp={zp_given} {layout:?}"),
                );
            }
        }
        // Blocked (opset 21): blocks of 8 along the last axis (one scale per chunk), 3 along
        // axis 1 (a ragged last block), 2 along axis 0.
        for (axis, block) in [(-1i64, 8usize), (2, 5), (1, 4), (-2, 3), (0, 2)] {
            let a = ((axis + 3) % 3) as usize;
            let mut sshape = shape.to_vec();
            sshape[a] = shape[a].div_ceil(block);
            for q in [DataType::Uint8, DataType::Int4, DataType::Float8E4M3FN] {
                let inputs = vec![
                    x.clone(),
                    scales(&mut rng, DataType::Float32, &sshape),
                    zero_point(&mut rng, q, &sshape),
                ];
                let n = q_node(
                    "QuantizeLinear",
                    3,
                    &[("axis", int(axis)), ("block_size", int(block as i64))],
                );
                check_against_cpu(
                    &ep,
                    &n,
                    21,
                    &inputs,
                    0.0,
                    &format!("QuantizeLinear blocked axis {axis} block {block} {q} {layout:?}"),
                );
            }
        }
    }
}

#[test]
fn quantize_half_double_and_int32_inputs() {
    let ep = gpu();
    let mut rng = Rng::new(3);
    for xd in [
        DataType::Float16,
        DataType::BFloat16,
        DataType::Float64,
        DataType::Int32,
    ] {
        for sd in [DataType::Float32, xd] {
            if sd == DataType::Int32 || sd == DataType::Float64 && xd != DataType::Float64 {
                continue;
            }
            // Dense (vector path), then strided.
            for layout in [Layout::Contiguous, Layout::Padded] {
                let x = random_numeric(&mut rng, xd, &[3, 40], -150, 150).with_layout(layout);
                let s = scales(&mut rng, sd, &[40]);
                let zp = zero_point(&mut rng, DataType::Int8, &[40]);
                let n = q_node("QuantizeLinear", 3, &[("axis", int(-1))]);
                check_against_cpu(
                    &ep,
                    &n,
                    21,
                    &[x.clone(), s, zp],
                    0.0,
                    &format!("QuantizeLinear x {xd} scale {sd} {layout:?}"),
                );
                let n = q_node("QuantizeLinear", 2, &[]);
                check_against_cpu(
                    &ep,
                    &n,
                    21,
                    &[x, scalar(sd, 0.5)],
                    0.0,
                    &format!("QuantizeLinear per tensor x {xd} scale {sd} {layout:?}"),
                );
            }
        }
    }
}

/// Values across float8's range: tiny and subnormal, midpoints between codes, the largest
/// finite values and past them, zeros, infinities and NaN.
fn float8_probe(rng: &mut Rng, n: usize) -> Vec<f64> {
    let mut v = vec![
        0.0,
        -0.0,
        f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        1e9,
        -1e9,
        448.0,
        464.0,
        480.0,
        240.0,
        248.0,
        57344.0,
        61440.0,
        -57344.0,
        1.0625,
        1.1875,
        -1.0625,
        0.5,
        6.0,
        7.0,
        5.0,
        0.25,
        0.75,
        2.0f64.powi(-9),
        2.0f64.powi(-10),
        3.0 * 2.0f64.powi(-11),
        2.0f64.powi(-16),
        2.0f64.powi(-17),
        1.5 * 2.0f64.powi(-17),
    ];
    while v.len() < n {
        let m = 1.0 + (rng.below(1 << 12) as f64) / 4096.0;
        let e = rng.range(-20, 18) as i32;
        let s = if rng.below(2) == 0 { 1.0 } else { -1.0 };
        v.push(s * m * 2.0f64.powi(e));
    }
    v
}

#[test]
fn quantize_float8_saturate_and_not() {
    let ep = gpu();
    let mut rng = Rng::new(4);
    let vals = float8_probe(&mut rng, 203);
    let x = from_f64s(DataType::Float32, &[vals.len()], &vals);
    for q in FLOAT8 {
        for saturate in [1, 0] {
            // The type from the zero point (opset 19) and from output_dtype (opset 21).
            let n = q_node("QuantizeLinear", 3, &[("saturate", int(saturate))]);
            check_against_cpu(
                &ep,
                &n,
                19,
                &[
                    x.clone(),
                    scalar(DataType::Float32, 1.0),
                    zero_point(&mut rng, q, &[]),
                ],
                0.0,
                &format!("QuantizeLinear {q} saturate {saturate}"),
            );
            let n = q_node(
                "QuantizeLinear",
                2,
                &[
                    ("saturate", int(saturate)),
                    ("output_dtype", int(q.onnx_code() as i64)),
                ],
            );
            check_against_cpu(
                &ep,
                &n,
                21,
                &[x.clone(), scalar(DataType::Float32, 0.5)],
                0.0,
                &format!("QuantizeLinear {q} output_dtype saturate {saturate}"),
            );
        }
    }
    // float16 input, per-axis float8 with a bfloat16 scale.
    let x = from_f64s(
        DataType::Float16,
        &[8, 6],
        &float8_probe(&mut rng, 48)[..48],
    );
    let n = q_node("QuantizeLinear", 3, &[("axis", int(0))]);
    check_against_cpu(
        &ep,
        &n,
        21,
        &[
            x,
            scales(&mut rng, DataType::BFloat16, &[8]),
            zero_point(&mut rng, DataType::Float8E5M2, &[8]),
        ],
        0.0,
        "QuantizeLinear float16 -> e5m2 per axis",
    );
}

#[test]
fn quantize_packed_4_and_2_bit_outputs() {
    let ep = gpu();
    let mut rng = Rng::new(5);
    for q in PACKED {
        let opset = if matches!(q, DataType::Uint2 | DataType::Int2) {
            25
        } else {
            21
        };
        // Odd lengths leave a half-filled last byte; 64 elements take the vector path.
        for len in [1usize, 7, 13, 64, 1003] {
            let x = f32s(&mut rng, &[len], -12, 12);
            let n = q_node("QuantizeLinear", 3, &[]);
            check_against_cpu(
                &ep,
                &n,
                opset,
                &[
                    x.clone(),
                    scalar(DataType::Float32, 0.5),
                    zero_point(&mut rng, q, &[]),
                ],
                0.0,
                &format!("QuantizeLinear {q} len {len} with zero point"),
            );
            let n = q_node(
                "QuantizeLinear",
                2,
                &[("output_dtype", int(q.onnx_code() as i64))],
            );
            check_against_cpu(
                &ep,
                &n,
                opset,
                &[x, scalar(DataType::Float32, 1.5)],
                0.0,
                &format!("QuantizeLinear {q} len {len} output_dtype"),
            );
        }
        // Per axis from a strided input, and blocked along the last axis.
        let x = f32s(&mut rng, &[6, 10], -20, 20).with_layout(Layout::Reversed);
        let n = q_node("QuantizeLinear", 3, &[("axis", int(1))]);
        check_against_cpu(
            &ep,
            &n,
            opset,
            &[
                x.clone(),
                scales(&mut rng, DataType::Float32, &[10]),
                zero_point(&mut rng, q, &[10]),
            ],
            0.0,
            &format!("QuantizeLinear {q} per axis strided"),
        );
        let n = q_node(
            "QuantizeLinear",
            3,
            &[("axis", int(-1)), ("block_size", int(4))],
        );
        check_against_cpu(
            &ep,
            &n,
            opset,
            &[
                x,
                scales(&mut rng, DataType::Float32, &[6, 3]),
                zero_point(&mut rng, q, &[6, 3]),
            ],
            0.0,
            &format!("QuantizeLinear {q} blocked strided"),
        );
    }
}

#[test]
fn quantize_large_dense_vector_paths() {
    let ep = gpu();
    let mut rng = Rng::new(6);
    // Per tensor (one scale per chunk), per axis with inner 16 (uniform chunks) and with
    // inner 1 (a scale per element), blocked with blocks of 32 along the last axis.
    let x = f32s(&mut rng, &[64, 1030], -300, 300);
    let cases: Vec<(Attrs, Vec<usize>)> = vec![
        (vec![], vec![]),
        (vec![("axis", int(1))], vec![1030]),
        (vec![("axis", int(0))], vec![64]),
        (
            vec![("axis", int(1)), ("block_size", int(32))],
            vec![64, 33],
        ),
    ];
    for (attrs, sshape) in &cases {
        for q in [
            DataType::Uint8,
            DataType::Int16,
            DataType::Int4,
            DataType::Float8E4M3FN,
        ] {
            let n = q_node("QuantizeLinear", 3, attrs);
            check_against_cpu(
                &ep,
                &n,
                21,
                &[
                    x.clone(),
                    scales(&mut rng, DataType::Float32, sshape),
                    zero_point(&mut rng, q, sshape),
                ],
                0.0,
                &format!("QuantizeLinear large {q} {attrs:?}"),
            );
        }
    }
    // Blocks of 32 along a last axis of 256: one scale per chunk.
    let x = f32s(&mut rng, &[16, 256], -300, 300);
    let n = q_node(
        "QuantizeLinear",
        3,
        &[("axis", int(-1)), ("block_size", int(32))],
    );
    check_against_cpu(
        &ep,
        &n,
        21,
        &[
            x,
            scales(&mut rng, DataType::Float32, &[16, 8]),
            zero_point(&mut rng, DataType::Int8, &[16, 8]),
        ],
        0.0,
        "QuantizeLinear blocked uniform chunks",
    );
    let x = f32s(&mut rng, &[16, 8, 24], -300, 300);
    let n = q_node("QuantizeLinear", 3, &[("axis", int(1))]);
    check_against_cpu(
        &ep,
        &n,
        13,
        &[
            x,
            scales(&mut rng, DataType::Float32, &[8]),
            zero_point(&mut rng, DataType::Uint8, &[8]),
        ],
        0.0,
        "QuantizeLinear per axis inner 24",
    );
}

#[test]
fn quantize_bad_shapes_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(7);
    let x = f32s(&mut rng, &[2, 3, 4], -5, 5);
    let outs = vec![(DataType::Uint8, vec![2, 3, 4])];
    // Per-axis scale of the wrong length.
    let n = q_node("QuantizeLinear", 2, &[("axis", int(1))]);
    let err = gpu_error(
        &ep,
        &n,
        13,
        &[x.clone(), scales(&mut rng, DataType::Float32, &[4])],
        &outs,
    );
    assert!(
        err.contains("test_QuantizeLinear") && err.contains("scale"),
        "{err}"
    );
    // Axis out of range.
    let n = q_node("QuantizeLinear", 2, &[("axis", int(3))]);
    let err = gpu_error(
        &ep,
        &n,
        13,
        &[x.clone(), scales(&mut rng, DataType::Float32, &[4])],
        &outs,
    );
    assert!(
        err.contains("test_QuantizeLinear") && err.contains("out of range"),
        "{err}"
    );
    // Blocked scale of the wrong shape.
    let n = q_node(
        "QuantizeLinear",
        2,
        &[("axis", int(2)), ("block_size", int(3))],
    );
    let err = gpu_error(
        &ep,
        &n,
        21,
        &[x.clone(), scales(&mut rng, DataType::Float32, &[2, 3, 1])],
        &outs,
    );
    assert!(
        err.contains("test_QuantizeLinear") && err.contains("blocked"),
        "{err}"
    );
    // A zero point that does not match the scale.
    let n = q_node("QuantizeLinear", 3, &[("axis", int(1))]);
    let err = gpu_error(
        &ep,
        &n,
        13,
        &[
            x,
            scales(&mut rng, DataType::Float32, &[3]),
            zero_point(&mut rng, DataType::Uint8, &[2]),
        ],
        &outs,
    );
    assert!(
        err.contains("test_QuantizeLinear") && err.contains("zero point"),
        "{err}"
    );
}

// ---- DequantizeLinear ----

#[test]
fn dequantize_integer_types_every_granularity() {
    let ep = gpu();
    let mut rng = Rng::new(8);
    let shape = [3, 8, 10];
    for (case, q) in INT_Q.iter().chain([DataType::Int32].iter()).enumerate() {
        let layout = [Layout::Contiguous, Layout::Reversed, Layout::Padded][case % 3];
        let x = random_q(&mut rng, *q, &shape).with_layout(layout);
        // Per tensor, with and without a zero point.
        check_against_cpu(
            &ep,
            &q_node("DequantizeLinear", 3, &[]),
            13,
            &[
                x.clone(),
                scalar(DataType::Float32, 0.3),
                zero_point(&mut rng, *q, &[]),
            ],
            1e-6,
            &format!("DequantizeLinear {q} per tensor {layout:?}"),
        );
        check_against_cpu(
            &ep,
            &q_node("DequantizeLinear", 2, &[]),
            10,
            &[x.clone(), scalar(DataType::Float32, 0.3)],
            1e-6,
            &format!("DequantizeLinear {q} per tensor no zero point {layout:?}"),
        );
        // Per axis on each axis (negative too).
        for axis in [0i64, -2, 2] {
            let a = ((axis + 3) % 3) as usize;
            check_against_cpu(
                &ep,
                &q_node("DequantizeLinear", 3, &[("axis", int(axis))]),
                13,
                &[
                    x.clone(),
                    scales(&mut rng, DataType::Float32, &[shape[a]]),
                    zero_point(&mut rng, *q, &[shape[a]]),
                ],
                1e-6,
                &format!("DequantizeLinear {q} axis {axis} {layout:?}"),
            );
        }
        // Blocked along the last axis (ragged) and along axis 1.
        for (axis, block, sshape) in [(-1i64, 4i64, [3, 8, 3]), (1, 8, [3, 1, 10])] {
            check_against_cpu(
                &ep,
                &q_node(
                    "DequantizeLinear",
                    3,
                    &[("axis", int(axis)), ("block_size", int(block))],
                ),
                21,
                &[
                    x.clone(),
                    scales(&mut rng, DataType::Float32, &sshape),
                    zero_point(&mut rng, *q, &sshape),
                ],
                1e-6,
                &format!("DequantizeLinear {q} blocked axis {axis} {layout:?}"),
            );
        }
    }
}

#[test]
fn dequantize_output_types_from_scale_and_attribute() {
    let ep = gpu();
    let mut rng = Rng::new(9);
    let x = random_q(&mut rng, DataType::Int8, &[4, 36]);
    // The output takes the scale's type: float16, bfloat16, double.
    for (sd, rtol) in [
        (DataType::Float16, 1e-3),
        (DataType::BFloat16, 1e-2),
        (DataType::Float64, 1e-12),
    ] {
        for layout in [Layout::Contiguous, Layout::Reversed] {
            check_against_cpu(
                &ep,
                &q_node("DequantizeLinear", 3, &[("axis", int(1))]),
                21,
                &[
                    x.clone().with_layout(layout),
                    scales(&mut rng, sd, &[36]),
                    zero_point(&mut rng, DataType::Int8, &[36]),
                ],
                rtol,
                &format!("DequantizeLinear scale {sd} {layout:?}"),
            );
        }
    }
    // output_dtype overrides the scale's type (opset 23); float8e8m0 scales give float.
    for od in [DataType::Float16, DataType::BFloat16, DataType::Float32] {
        check_against_cpu(
            &ep,
            &q_node(
                "DequantizeLinear",
                2,
                &[("output_dtype", int(od.onnx_code() as i64))],
            ),
            23,
            &[x.clone(), scalar(DataType::Float32, 0.7)],
            1e-2,
            &format!("DequantizeLinear output_dtype {od}"),
        );
    }
    let e8m0 = T::new(DataType::Float8E8M0, &[4], vec![127, 120, 130, 0]);
    check_against_cpu(
        &ep,
        &q_node("DequantizeLinear", 2, &[("axis", int(0))]),
        25,
        &[x, e8m0],
        0.0,
        "DequantizeLinear float8e8m0 scale",
    );
}

#[test]
fn dequantize_float8_and_packed_inputs() {
    let ep = gpu();
    let mut rng = Rng::new(10);
    // Every float8 code (NaN and infinities included), per tensor and per axis.
    let codes: Vec<u8> = (0..=255u8).collect();
    for q in FLOAT8 {
        let x = T::new(q, &[16, 16], codes.clone());
        check_against_cpu(
            &ep,
            &q_node("DequantizeLinear", 2, &[]),
            19,
            &[x.clone(), scalar(DataType::Float32, 2.0)],
            0.0,
            &format!("DequantizeLinear {q} every code"),
        );
        check_against_cpu(
            &ep,
            &q_node("DequantizeLinear", 3, &[("axis", int(-1))]),
            21,
            &[
                x.with_layout(Layout::Reversed),
                scales(&mut rng, DataType::Float32, &[16]),
                zero_point(&mut rng, q, &[16]),
            ],
            0.0,
            &format!("DequantizeLinear {q} per axis strided"),
        );
    }
    for q in PACKED {
        let opset = if matches!(q, DataType::Uint2 | DataType::Int2) {
            25
        } else {
            21
        };
        for len in [1usize, 5, 64, 999] {
            let x = random_q(&mut rng, q, &[len]);
            check_against_cpu(
                &ep,
                &q_node("DequantizeLinear", 3, &[]),
                opset,
                &[
                    x.clone(),
                    scalar(DataType::Float32, 0.5),
                    zero_point(&mut rng, q, &[]),
                ],
                0.0,
                &format!("DequantizeLinear {q} len {len}"),
            );
        }
        let x = random_q(&mut rng, q, &[6, 12]);
        check_against_cpu(
            &ep,
            &q_node(
                "DequantizeLinear",
                3,
                &[("axis", int(1)), ("block_size", int(5))],
            ),
            opset,
            &[
                x.clone(),
                scales(&mut rng, DataType::Float16, &[6, 3]),
                zero_point(&mut rng, q, &[6, 3]),
            ],
            1e-3,
            &format!("DequantizeLinear {q} blocked float16"),
        );
        check_against_cpu(
            &ep,
            &q_node("DequantizeLinear", 3, &[("axis", int(0))]),
            opset,
            &[
                x,
                scales(&mut rng, DataType::Float32, &[6]),
                zero_point(&mut rng, q, &[6]),
            ],
            0.0,
            &format!("DequantizeLinear {q} per axis"),
        );
    }
}

#[test]
fn dequantize_large_dense_vector_paths() {
    let ep = gpu();
    let mut rng = Rng::new(11);
    for q in [
        DataType::Uint8,
        DataType::Int32,
        DataType::Int4,
        DataType::Float8E5M2,
    ] {
        let x = random_q(&mut rng, q, &[48, 1024]);
        for (attrs, sshape) in [
            (vec![], vec![]),
            (vec![("axis", int(1))], vec![1024]),
            (vec![("axis", int(0))], vec![48]),
            (
                vec![("axis", int(-1)), ("block_size", int(64))],
                vec![48, 16],
            ),
        ] {
            for sd in [DataType::Float32, DataType::Float16] {
                check_against_cpu(
                    &ep,
                    &q_node("DequantizeLinear", 3, &attrs),
                    21,
                    &[
                        x.clone(),
                        scales(&mut rng, sd, &sshape),
                        zero_point(&mut rng, q, &sshape),
                    ],
                    1e-3,
                    &format!("DequantizeLinear large {q} scale {sd} {attrs:?}"),
                );
            }
        }
    }
}

#[test]
fn dequantize_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(12);
    let x = random_q(&mut rng, DataType::Uint8, &[2, 3]);
    let outs = vec![(DataType::Float32, vec![2, 3])];
    let n = q_node("DequantizeLinear", 3, &[]);
    let err = gpu_error(
        &ep,
        &n,
        13,
        &[
            x.clone(),
            scalar(DataType::Float32, 1.0),
            scalar(DataType::Int8, 1.0),
        ],
        &outs,
    );
    assert!(
        err.contains("test_DequantizeLinear") && err.contains("zero point"),
        "{err}"
    );
    let n = q_node("DequantizeLinear", 2, &[("axis", int(-3))]);
    let err = gpu_error(
        &ep,
        &n,
        13,
        &[x, scales(&mut rng, DataType::Float32, &[3])],
        &outs,
    );
    assert!(
        err.contains("test_DequantizeLinear") && err.contains("out of range"),
        "{err}"
    );
}

// ---- DynamicQuantizeLinear ----

#[test]
fn dynamic_quantize_positive_negative_mixed_and_large() {
    let ep = gpu();
    let mut rng = Rng::new(13);
    let n = node("DynamicQuantizeLinear", 1, 3, &[]);
    for (lo, hi) in [(1, 90), (-90, -1), (-40, 70), (0, 1)] {
        for (shape, layout) in [
            (vec![7usize], Layout::Contiguous),
            (vec![3, 5, 11], Layout::Reversed),
            (vec![33, 65], Layout::Padded),
            (vec![1 << 20], Layout::Contiguous),
            (vec![1025, 1023], Layout::Contiguous),
        ] {
            let x = f32s(&mut rng, &shape, lo, hi).with_layout(layout);
            check_against_cpu(
                &ep,
                &n,
                11,
                &[x],
                0.0,
                &format!("DynamicQuantizeLinear [{lo}, {hi}) {shape:?} {layout:?}"),
            );
        }
    }
    // All zeros: scale 1, zero point 0; an empty tensor writes the scalars too.
    for shape in [vec![9usize], vec![0]] {
        let x = from_f64s(DataType::Float32, &shape, &vec![0.0; shape[0]]);
        check_against_cpu(
            &ep,
            &n,
            11,
            &[x],
            0.0,
            &format!("DynamicQuantizeLinear zeros {shape:?}"),
        );
    }
}

// ---- graph capture ----

#[test]
fn quant_kernels_replay_under_graph_capture() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(14);
    let cases: Vec<CaptureCase> = vec![
        (
            q_node("QuantizeLinear", 3, &[("axis", int(1))]),
            13,
            vec![
                f32s(&mut rng, &[4, 24], -50, 50),
                scales(&mut rng, DataType::Float32, &[24]),
                zero_point(&mut rng, DataType::Int8, &[24]),
            ],
            vec![(DataType::Int8, vec![4, 24])],
        ),
        (
            q_node("DequantizeLinear", 2, &[]),
            13,
            vec![
                random_q(&mut rng, DataType::Uint8, &[4, 24]),
                scalar(DataType::Float32, 0.5),
            ],
            vec![(DataType::Float32, vec![4, 24])],
        ),
        (
            node("DynamicQuantizeLinear", 1, 3, &[]),
            11,
            vec![f32s(&mut rng, &[3000], -50, 50)],
            vec![
                (DataType::Uint8, vec![3000]),
                (DataType::Float32, vec![]),
                (DataType::Uint8, vec![]),
            ],
        ),
    ];
    let kernels: Vec<Box<dyn Kernel>> = cases
        .iter()
        .map(|(n, opset, inputs, _)| {
            let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
            ep.get_kernel(n, &shapes, *opset).unwrap()
        })
        .collect();
    let mut bounds: Vec<Bound<'_>> = cases
        .iter()
        .map(|(_, _, inputs, outs)| {
            let mut b = bind(&ep, inputs);
            b.set_outputs(outs);
            b
        })
        .collect();
    for k in &kernels {
        assert_eq!(k.capture_support(), CaptureSupport::Supported);
    }
    let refs: Vec<&dyn Kernel> = kernels.iter().map(|k| k.as_ref()).collect();
    runtime.begin_graph_capture(&refs).unwrap();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    runtime.end_graph_capture().unwrap();
    // New data, replay, compare with an eager run on the same data.
    bounds[0].set_input(0, f32s(&mut rng, &[4, 24], -50, 50));
    bounds[1].set_input(0, random_q(&mut rng, DataType::Uint8, &[4, 24]));
    bounds[2].set_input(0, f32s(&mut rng, &[3000], -80, 20));
    runtime.replay_graph().unwrap();
    let replayed: Vec<Vec<T>> = bounds.iter().map(|b| b.read().unwrap()).collect();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    for ((c, b), r) in cases.iter().zip(&bounds).zip(&replayed) {
        for (e, g) in b.read().unwrap().iter().zip(r) {
            assert_bytes(g, e, &format!("replay vs eager: {}", c.0.op_type));
        }
    }
    assert!(runtime.reset_graph().unwrap());
}

// ---- throughput ----

/// Times `node` on `inputs` (20 runs after a warm-up), prints microseconds and GB/s of the
/// bytes read and written, and checks the result against the CPU provider.
fn throughput(ep: &CudaExecutionProvider, node: &Node, opset: u64, inputs: &[T], what: &str) {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(node, &shapes, opset).unwrap();
    let mut b = bind(ep, inputs);
    let types = b.output_types(kernel.as_ref()).unwrap();
    b.set_outputs(&types);
    b.execute(kernel.as_ref()).unwrap();
    ep.runtime().synchronize().unwrap();
    let runs = 20;
    let start = std::time::Instant::now();
    for _ in 0..runs {
        b.execute(kernel.as_ref()).unwrap();
    }
    ep.runtime().synchronize().unwrap();
    let secs = start.elapsed().as_secs_f64() / runs as f64;
    let bytes: usize = inputs.iter().map(|t| t.bytes.len()).sum::<usize>()
        + types
            .iter()
            .map(|(d, s)| d.storage_bytes(s.iter().product()))
            .sum::<usize>();
    eprintln!(
        "{what}: {:.1} us, {:.0} GB/s (read + write)",
        secs * 1e6,
        bytes as f64 / secs / 1e9
    );
    let got = b.read().unwrap();
    let refs: Vec<Option<&T>> = inputs.iter().map(Some).collect();
    let want = cpu_reference(node, opset, &refs).unwrap();
    for (k, (g, w)) in got.iter().zip(&want).enumerate() {
        if is_real(w.dtype) {
            assert_close_to(g, w, 1e-6, 0.0, &format!("{what}: output {k}"));
        } else {
            assert_bytes(g, w, &format!("{what}: output {k}"));
        }
    }
}

#[test]
fn quant_kernels_throughput() {
    let ep = gpu();
    let mut rng = Rng::new(15);
    let (rows, cols) = (4096usize, 4096usize);
    let x = f32s(&mut rng, &[rows, cols], -300, 300);
    throughput(
        &ep,
        &q_node("QuantizeLinear", 3, &[]),
        13,
        &[
            x.clone(),
            scalar(DataType::Float32, 0.5),
            zero_point(&mut rng, DataType::Uint8, &[]),
        ],
        "QuantizeLinear f32 -> u8 per tensor [4096, 4096]",
    );
    throughput(
        &ep,
        &q_node("QuantizeLinear", 3, &[("axis", int(1))]),
        13,
        &[
            x.clone(),
            scales(&mut rng, DataType::Float32, &[cols]),
            zero_point(&mut rng, DataType::Int8, &[cols]),
        ],
        "QuantizeLinear f32 -> i8 per axis 1 [4096, 4096]",
    );
    throughput(
        &ep,
        &q_node(
            "QuantizeLinear",
            3,
            &[("axis", int(1)), ("block_size", int(32))],
        ),
        21,
        &[
            x.clone(),
            scales(&mut rng, DataType::Float32, &[rows, cols / 32]),
            zero_point(&mut rng, DataType::Int4, &[rows, cols / 32]),
        ],
        "QuantizeLinear f32 -> int4 blocked 32 [4096, 4096]",
    );
    let q = random_q(&mut rng, DataType::Uint8, &[rows, cols]);
    throughput(
        &ep,
        &q_node("DequantizeLinear", 3, &[("axis", int(0))]),
        13,
        &[
            q,
            scales(&mut rng, DataType::Float32, &[rows]),
            zero_point(&mut rng, DataType::Uint8, &[rows]),
        ],
        "DequantizeLinear u8 -> f32 per axis 0 [4096, 4096]",
    );
    let q = random_q(&mut rng, DataType::Int4, &[rows, cols]);
    throughput(
        &ep,
        &q_node(
            "DequantizeLinear",
            3,
            &[("axis", int(1)), ("block_size", int(64))],
        ),
        21,
        &[
            q,
            scales(&mut rng, DataType::Float16, &[rows, cols / 64]),
            zero_point(&mut rng, DataType::Int4, &[rows, cols / 64]),
        ],
        "DequantizeLinear int4 -> f16 blocked 64 [4096, 4096]",
    );
    throughput(
        &ep,
        &node("DynamicQuantizeLinear", 1, 3, &[]),
        11,
        &[x],
        "DynamicQuantizeLinear f32 [4096, 4096]",
    );
}
