//! Cast (and CastLike) to and from the small types against the CPU provider, bit for bit:
//! float8 e4m3fn / e4m3fnuz / e5m2 / e5m2fnuz / e8m0, float4 e2m1 and the packed int4 /
//! uint4 / int2 / uint2, from and to every numeric type and bool. Inputs mix specials (NaN of
//! both signs, infinities, signed zeros, values past each format's largest finite value,
//! subnormals, exact halfway cases, values beyond the integer ranges) with random values;
//! strided layouts for byte-aligned inputs, odd element counts for the packed types,
//! saturate 0 and 1, every e8m0 round mode, a large dense tensor (the dense fast path and the
//! grid-stride loop), and errors that name the node.

use super::harness::*;
use super::quant::{assert_bytes, bind};
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const SMALL: [DataType; 10] = [
    DataType::Float8E4M3FN,
    DataType::Float8E4M3FNUZ,
    DataType::Float8E5M2,
    DataType::Float8E5M2FNUZ,
    DataType::Float8E8M0,
    DataType::Float4E2M1,
    DataType::Int4,
    DataType::Uint4,
    DataType::Int2,
    DataType::Uint2,
];

const WIDE: [DataType; 13] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
    DataType::Bool,
];

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];

fn is_real(d: DataType) -> bool {
    matches!(
        d,
        DataType::Float32 | DataType::Float64 | DataType::Float16 | DataType::BFloat16
    )
}

fn cast_node(to: DataType, saturate: Option<i64>, round: Option<&str>) -> Node {
    let mut attrs = vec![("to", Attribute::Int(to.onnx_code() as i64))];
    if let Some(s) = saturate {
        attrs.push(("saturate", Attribute::Int(s)));
    }
    if let Some(r) = round {
        attrs.push(("round_mode", Attribute::String(r.to_string())));
    }
    node("Cast", 1, 1, &attrs)
}

/// The raw bits of element `i` (packed types: the code; others: the little-endian bytes).
fn elem_bits(t: &T, i: usize) -> u64 {
    let bits = t.dtype.bit_width().unwrap();
    if bits < 8 {
        let per = 8 / bits;
        return u64::from((t.bytes[i / per] >> ((i % per) * bits)) & ((1u8 << bits) - 1));
    }
    let w = bits / 8;
    let mut v = [0u8; 8];
    v[..w].copy_from_slice(&t.bytes[i * w..(i + 1) * w]);
    u64::from_le_bytes(v)
}

/// Element `i` of `t` in words: its bits and, for numeric types, its value.
fn describe(t: &T, i: usize) -> String {
    let bits = elem_bits(t, i);
    if t.dtype.is_sub_byte() || SMALL.contains(&t.dtype) {
        format!("{} code {bits:#x}", t.dtype)
    } else {
        format!("{} bits {bits:#x} = {}", t.dtype, get(t, i))
    }
}

/// `got` equals `want` element for element (float outputs: NaN matches any NaN), and byte
/// for byte for packed outputs (the unused high bits of the last byte included).
fn assert_exact(got: &T, want: &T, input: &T, what: &str) {
    assert_eq!(got.dtype, want.dtype, "{what}: dtype");
    assert_eq!(got.shape, want.shape, "{what}: shape");
    for i in 0..want.numel() {
        let (g, w) = (elem_bits(got, i), elem_bits(want, i));
        if g == w || (is_real(want.dtype) && get(got, i).is_nan() && get(want, i).is_nan()) {
            continue;
        }
        panic!(
            "{what}: element {i} of {:?}: input {}: got {}, want {}",
            want.shape,
            describe(input, i),
            describe(got, i),
            describe(want, i)
        );
    }
    assert_bytes(got, want, what);
}

/// Runs `node` on `inputs` on the GPU (through `output_types`) and on the CPU provider, and
/// compares the outputs bit for bit. Input 0 is the one the messages describe.
fn check(ep: &CudaExecutionProvider, node: &Node, opset: u64, inputs: &[T], what: &str) {
    check_nodes(ep, node, node, opset, inputs, what);
}

/// `check` with a different node for the CPU reference (the same op spelled otherwise).
fn check_nodes(
    ep: &CudaExecutionProvider,
    node: &Node,
    cpu_node: &Node,
    opset: u64,
    inputs: &[T],
    what: &str,
) {
    let refs: Vec<Option<&T>> = inputs.iter().map(Some).collect();
    let want = cpu_reference(cpu_node, opset, &refs)
        .unwrap_or_else(|e| panic!("{what}: the CPU reference failed: {e}"));
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep
        .get_kernel(node, &shapes, opset)
        .unwrap_or_else(|e| panic!("{what}: building the kernel: {e}"));
    let mut bound = bind(ep, inputs);
    let types = bound
        .output_types(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: output_types: {e}"));
    assert_eq!(
        types,
        vec![(want[0].dtype, want[0].shape.clone())],
        "{what}: output types"
    );
    bound.set_outputs(&types);
    bound
        .execute(kernel.as_ref())
        .unwrap_or_else(|e| panic!("{what}: execute: {e}"));
    let got = bound
        .read()
        .unwrap_or_else(|e| panic!("{what}: reading the output: {e}"));
    assert_exact(&got[0], &want[0], &inputs[0], what);
}

// ---- inputs ----

/// Values that hit the formats' corner cases.
fn specials() -> Vec<f64> {
    let p = |e: i32| 2f64.powi(e);
    vec![
        f64::NAN,
        -f64::NAN,
        f64::INFINITY,
        f64::NEG_INFINITY,
        0.0,
        -0.0,
        // Around the largest finite values (e4m3fn 448, e4m3fnuz 240, e5m2 57344, e2m1 6).
        448.0,
        -448.0,
        464.0,
        465.0,
        470.0,
        480.0,
        -500.0,
        240.0,
        247.0,
        248.0,
        256.0,
        57344.0,
        61440.0,
        -61441.0,
        65504.0,
        6.0,
        6.9,
        7.0,
        -100.0,
        1e9,
        -1e9,
        // Halfway cases (ties to even): e2m1, e5m2, e4m3.
        0.25,
        0.75,
        -1.25,
        2.5,
        3.5,
        5.0,
        1.125,
        1.375,
        1.0625,
        1.1875,
        -1.3125,
        1.0625 + p(-30),
        // Subnormals and underflow: e4m3fn 2^-9, e4m3fnuz 2^-10, e5m2 2^-16, e5m2fnuz 2^-17.
        p(-9),
        p(-10),
        -p(-10),
        3.0 * p(-11),
        p(-11),
        p(-16),
        p(-17),
        -p(-17),
        1.5 * p(-17),
        p(-18),
        p(-6),
        -1e-30,
        // float32 extremes (e8m0: exponent 0xfe, subnormals, the g/r/s bits).
        3.0e38,
        3.4e38,
        p(127),
        1.5 * p(127),
        p(-126),
        p(-127),
        1.5 * p(-127),
        1.25 * p(-127),
        1e-40,
        1.5,
        1.75,
        1.25,
        1.0 + p(-22),
        // Integer ranges (the packed integer targets wrap).
        7.9,
        -7.9,
        8.0,
        -9.0,
        15.5,
        16.0,
        2.9,
        -2.5,
        300.0,
        -129.0,
        p(63),
        -p(63),
        1e19,
        2e19,
        -1e19,
        1e30,
    ]
}

/// A random float value: specials, halfway cases (odd multiples of powers of two), random
/// float32 bit patterns, and random magnitudes.
fn random_float(rng: &mut Rng, sp: &[f64]) -> f64 {
    let sign = if rng.below(2) == 0 { 1.0 } else { -1.0 };
    match rng.below(10) {
        0..=2 => sp[rng.below(sp.len())],
        3..=5 => sign * (2 * rng.below(32) + 1) as f64 * 2f64.powi(rng.range(-30, 12) as i32),
        6 => f32::from_bits(rng.next() as u32) as f64,
        _ => {
            let m = 1.0 + rng.below(1 << 20) as f64 / (1u64 << 20) as f64;
            sign * m * 2f64.powi(rng.range(-24, 20) as i32)
        }
    }
}

/// A random input of a byte-aligned wide type (floats as above; integers small, near their
/// limits, or random bits; bool 0/1).
fn random_wide(rng: &mut Rng, dtype: DataType, shape: &[usize]) -> T {
    let n: usize = shape.iter().product();
    if is_real(dtype) {
        let sp = specials();
        let mut v: Vec<f64> = (0..n).map(|_| random_float(rng, &sp)).collect();
        if dtype == DataType::Float64 {
            // Values a float32 round trip would change (no double rounding through float32).
            for (k, x) in v.iter_mut().enumerate() {
                if k % 7 == 3 && x.is_finite() {
                    *x *= 1.0 + 2f64.powi(-40);
                }
            }
        }
        return from_f64s(dtype, shape, &v);
    }
    if dtype == DataType::Bool {
        return random_bytes(rng, dtype, shape);
    }
    let w = dtype.element_size().unwrap();
    let mut bytes = Vec::with_capacity(n * w);
    for _ in 0..n {
        let v: u64 = match rng.below(4) {
            0 => rng.range(-20, 20) as u64,
            1 => {
                // Near a power of two (limits of the narrower types, float rounding points).
                let k = rng.below(64) as u32;
                (1u64 << k).wrapping_add(rng.range(-3, 3) as u64)
            }
            _ => rng.next(),
        };
        bytes.extend_from_slice(&v.to_le_bytes()[..w]);
    }
    T::new(dtype, shape, bytes)
}

/// A random input of a small type: every code of the 8-bit ones (then random codes), random
/// bytes for the packed ones.
fn random_small(rng: &mut Rng, dtype: DataType, shape: &[usize]) -> T {
    let n: usize = shape.iter().product();
    let mut bytes = rng.bytes(dtype.storage_bytes(n));
    if !dtype.is_sub_byte() {
        for (k, b) in bytes.iter_mut().enumerate().take(256) {
            *b = k as u8;
        }
    } else if dtype.bit_width() == Some(4) && !n.is_multiple_of(2) {
        // The unused high nibble of the last byte stays zero, as a packed tensor stores it.
        *bytes.last_mut().unwrap() &= 0x0f;
    } else if dtype.bit_width() == Some(2) && !n.is_multiple_of(4) {
        *bytes.last_mut().unwrap() &= (1u8 << (2 * (n % 4))) - 1;
    }
    T::new(dtype, shape, bytes)
}

// ---- tests ----

/// Float8 targets (and float4) from every wide type, saturate 0 and 1, strided inputs.
#[test]
fn cast_wide_to_float8_and_float4() {
    let ep = gpu();
    let mut rng = Rng::new(71);
    let targets = [
        DataType::Float8E4M3FN,
        DataType::Float8E4M3FNUZ,
        DataType::Float8E5M2,
        DataType::Float8E5M2FNUZ,
        DataType::Float4E2M1,
    ];
    for (case, &from) in WIDE.iter().enumerate() {
        // 9 x 23 = 207 elements: odd, so the float4 output ends in half a byte.
        let x = random_wide(&mut rng, from, &[9, 23]).with_layout(LAYOUTS[case % 3]);
        for to in targets {
            for saturate in [None, Some(0), Some(1)] {
                let n = cast_node(to, saturate, None);
                check(
                    &ep,
                    &n,
                    25,
                    &[x.clone()],
                    &format!("Cast {from} -> {to} saturate {saturate:?}"),
                );
            }
        }
    }
}

/// Float8 e8m0 from every wide type: every round mode, saturate 0 and 1.
#[test]
fn cast_wide_to_float8e8m0_round_modes() {
    let ep = gpu();
    let mut rng = Rng::new(72);
    let to = DataType::Float8E8M0;
    for (case, &from) in WIDE.iter().enumerate() {
        let x = random_wide(&mut rng, from, &[7, 19]).with_layout(LAYOUTS[(case + 1) % 3]);
        for round in [None, Some("up"), Some("down"), Some("nearest")] {
            for saturate in [Some(0), Some(1)] {
                let n = cast_node(to, saturate, round);
                check(
                    &ep,
                    &n,
                    25,
                    &[x.clone()],
                    &format!("Cast {from} -> {to} saturate {saturate:?} round {round:?}"),
                );
            }
        }
    }
}

/// Packed int4 / uint4 / int2 / uint2 targets from every wide type: out-of-range values wrap,
/// odd element counts, strided inputs.
#[test]
fn cast_wide_to_packed_integers() {
    let ep = gpu();
    let mut rng = Rng::new(73);
    let targets = [
        DataType::Int4,
        DataType::Uint4,
        DataType::Int2,
        DataType::Uint2,
    ];
    for (case, &from) in WIDE.iter().enumerate() {
        for shape in [vec![5usize, 13], vec![3, 1, 7], vec![1], vec![6, 4]] {
            let x = random_wide(&mut rng, from, &shape).with_layout(LAYOUTS[case % 3]);
            for to in targets {
                let n = cast_node(to, None, None);
                check(
                    &ep,
                    &n,
                    25,
                    &[x.clone()],
                    &format!("Cast {from} -> {to} shape {shape:?}"),
                );
            }
        }
    }
}

/// Every small type to every type (wide and small, itself included), saturate 0 and 1;
/// float8 inputs hold every code and are strided.
#[test]
fn cast_small_to_every_type() {
    let ep = gpu();
    let mut rng = Rng::new(74);
    let targets: Vec<DataType> = WIDE.iter().chain(SMALL.iter()).copied().collect();
    for (case, &from) in SMALL.iter().enumerate() {
        let shape: &[usize] = if from.is_sub_byte() {
            &[3, 5, 7]
        } else {
            &[16, 17]
        };
        let x = random_small(&mut rng, from, shape).with_layout(LAYOUTS[case % 3]);
        for &to in &targets {
            for saturate in [Some(0), Some(1)] {
                let n = cast_node(to, saturate, None);
                check(
                    &ep,
                    &n,
                    25,
                    &[x.clone()],
                    &format!("Cast {from} -> {to} saturate {saturate:?}"),
                );
            }
        }
        // One element and empty tensors.
        for shape in [vec![1usize], vec![0], vec![2, 0, 3]] {
            let x = random_small(&mut rng, from, &shape);
            for to in [DataType::Float32, DataType::Int4, DataType::Float8E5M2] {
                let n = cast_node(to, None, None);
                check(
                    &ep,
                    &n,
                    25,
                    &[x.clone()],
                    &format!("Cast {from} -> {to} shape {shape:?}"),
                );
            }
        }
    }
}

/// Opset 19 and 21 nodes (saturate without round_mode), `to` spelled as a name (opset 1
/// style), and the defaults.
#[test]
fn cast_small_types_opsets_and_type_names() {
    let ep = gpu();
    let mut rng = Rng::new(75);
    let x = random_wide(&mut rng, DataType::Float32, &[4, 9]).with_layout(Layout::Reversed);
    for (opset, to) in [
        (19, DataType::Float8E4M3FN),
        (19, DataType::Float8E5M2FNUZ),
        (21, DataType::Int4),
        (21, DataType::Uint4),
        (23, DataType::Float4E2M1),
        (24, DataType::Float8E8M0),
    ] {
        for saturate in [None, Some(0)] {
            let n = cast_node(to, saturate, None);
            check(
                &ep,
                &n,
                opset,
                &[x.clone()],
                &format!("Cast -> {to} opset {opset} saturate {saturate:?}"),
            );
        }
        // The CPU kernel takes `to` as a code only: it is the reference for the name.
        let n = node(
            "Cast",
            1,
            1,
            &[("to", Attribute::String(to.name().to_ascii_uppercase()))],
        );
        check_nodes(
            &ep,
            &n,
            &cast_node(to, None, None),
            opset,
            &[x.clone()],
            &format!("Cast -> '{}' by name", to.name()),
        );
    }
}

/// A large dense tensor: the dense fast path, several elements per thread in the grid-stride
/// loop, and packed outputs over many bytes.
#[test]
fn cast_small_types_large_dense() {
    let ep = gpu();
    let mut rng = Rng::new(76);
    let n = (1usize << 20) + 3;
    let x = random_wide(&mut rng, DataType::Float32, &[n]);
    for to in [
        DataType::Float8E4M3FN,
        DataType::Float8E5M2,
        DataType::Float8E8M0,
        DataType::Int4,
        DataType::Uint2,
        DataType::Float4E2M1,
    ] {
        let node = cast_node(to, Some(0), None);
        check(
            &ep,
            &node,
            25,
            &[x.clone()],
            &format!("Cast f32[{n}] -> {to}"),
        );
    }
    for from in [DataType::Int4, DataType::Float8E4M3FNUZ, DataType::Uint2] {
        let x = random_small(&mut rng, from, &[n]);
        for to in [DataType::Float16, DataType::Int32, DataType::Float4E2M1] {
            let node = cast_node(to, None, None);
            check(
                &ep,
                &node,
                25,
                &[x.clone()],
                &format!("Cast {from}[{n}] -> {to}"),
            );
        }
    }
}

/// CastLike takes the small types through the same kernels, with its own saturate.
#[test]
fn cast_like_small_types() {
    let ep = gpu();
    let mut rng = Rng::new(77);
    for (case, &to) in SMALL.iter().enumerate() {
        let like = random_small(&mut rng, to, &[3]);
        for from in [DataType::Float32, DataType::Float16, DataType::Int64] {
            let x = random_wide(&mut rng, from, &[5, 7]).with_layout(LAYOUTS[case % 3]);
            for saturate in [None, Some(0)] {
                let attrs: Vec<(&str, Attribute)> = saturate
                    .map(|s| ("saturate", Attribute::Int(s)))
                    .into_iter()
                    .collect();
                let n = node("CastLike", 2, 1, &attrs);
                check(
                    &ep,
                    &n,
                    25,
                    &[x.clone(), like.clone()],
                    &format!("CastLike {from} -> {to} saturate {saturate:?}"),
                );
            }
        }
        // And back: the small type like a wide one.
        let x = random_small(&mut rng, to, &[4, 9]);
        for wide in [DataType::Float32, DataType::BFloat16, DataType::Int8] {
            let like = random_wide(&mut rng, wide, &[2]);
            let n = node("CastLike", 2, 1, &[]);
            check(
                &ep,
                &n,
                25,
                &[x.clone(), like],
                &format!("CastLike {to} -> {wide}"),
            );
        }
    }
}

/// Bad attributes are errors naming the node at build time; strings stay a planned refusal;
/// the small-type kernels can be captured.
#[test]
fn cast_small_types_errors_and_capture() {
    let ep = gpu();
    let n = cast_node(DataType::Float8E8M0, None, Some("sideways"));
    let err = ep.get_kernel(&n, &[vec![4]], 25).err().expect("an error");
    let text = err.to_string();
    assert!(
        text.contains(&n.name) && text.contains("round_mode"),
        "a bad round_mode must name the node and the attribute, got: {text}"
    );
    let n = cast_node(DataType::String, None, None);
    match ep.get_kernel(&n, &[vec![4]], 25) {
        Err(EpError::UnsupportedDtype { .. }) => {}
        Err(e) => panic!("Cast to string: expected a planned refusal, got {e}"),
        Ok(_) => panic!("Cast to string: expected a planned refusal"),
    }
    let n = node("Cast", 1, 1, &[("to", Attribute::Int(0))]);
    let err = ep.get_kernel(&n, &[vec![4]], 25).err().expect("an error");
    assert!(
        err.to_string().contains(&n.name),
        "Cast to UNDEFINED must name the node, got: {err}"
    );
    for to in [DataType::Float8E4M3FN, DataType::Int4] {
        let k = ep
            .get_kernel(&cast_node(to, None, None), &[vec![4]], 25)
            .unwrap();
        assert_eq!(
            k.capture_support(),
            CaptureSupport::Supported,
            "Cast -> {to}"
        );
    }
}
