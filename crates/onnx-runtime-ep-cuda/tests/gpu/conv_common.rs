//! Helpers shared by the convolution tests (conv.rs, conv_pointwise.rs, conv_transpose.rs,
//! conv_quant.rs): attribute builders, random inputs, nodes with omitted inputs, and the
//! check of a GPU run against the CPU provider within a norm-relative tolerance.

use super::harness::*;
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

pub(super) const F32: DataType = DataType::Float32;

/// X shape, W shape, attributes.
pub(super) type Case = (Vec<usize>, Vec<usize>, Vec<(&'static str, Attribute)>);
/// X shape, W shape, attributes, X's and W's layouts.
pub(super) type ViewCase = (
    Vec<usize>,
    Vec<usize>,
    Vec<(&'static str, Attribute)>,
    Layout,
    Layout,
);
/// Node, opset, inputs, expected output type.
pub(super) type TypesCase = (Node, u64, Vec<T>, (DataType, Vec<usize>));

pub(super) fn ints(v: &[i64]) -> Attribute {
    Attribute::Ints(v.to_vec())
}

/// Attributes from (name, ints) pairs.
/// `group` is an INT attribute in ONNX (the others here are INTS): `("group", &[g])` gives
/// `Attribute::Int(g)`.
pub(super) fn attrs(list: &[(&'static str, &[i64])]) -> Vec<(&'static str, Attribute)> {
    list.iter()
        .map(|(k, v)| match (*k, *v) {
            ("group", &[g]) => (*k, Attribute::Int(g)),
            _ => (*k, ints(v)),
        })
        .collect()
}

pub(super) fn randf(rng: &mut Rng, dtype: DataType, shape: &[usize]) -> T {
    // Multiples of 1/4 in [-2, 2): exact in float16 and bfloat16, never all zero.
    random_numeric(rng, dtype, shape, -2, 2)
}

/// `t`'s values in another dtype (same shape and layout).
pub(super) fn cast(t: &T, dtype: DataType) -> T {
    let v: Vec<f64> = (0..t.numel()).map(|i| get(t, i)).collect();
    from_f64s(dtype, &t.shape, &v).with_layout(t.layout)
}

/// A node whose input `i` is omitted where `inputs[i]` is None.
pub(super) fn node_for(op: &str, inputs: &[Option<T>], attrs: &[(&str, Attribute)]) -> Node {
    let mut n = node(op, inputs.len(), 1, attrs);
    if op == "FusedConv" {
        n.domain = "com.microsoft".into();
    }
    for (i, t) in inputs.iter().enumerate() {
        if t.is_none() {
            n.inputs[i] = None;
        }
    }
    n
}

/// The largest |got - want| must be within `rel` of max(1, max |want|); NaN must match NaN.
pub(super) fn assert_norm_close(got: &T, want: &T, rel: f64, what: &str) {
    assert_eq!(got.shape, want.shape, "{what}: shape");
    let scale = (0..want.numel())
        .map(|i| get(want, i).abs())
        .filter(|v| v.is_finite())
        .fold(1.0, f64::max);
    let mut worst = (0usize, 0.0f64);
    for i in 0..want.numel() {
        let (g, w) = (get(got, i), get(want, i));
        let d = if w.is_nan() || g.is_nan() {
            if w.is_nan() == g.is_nan() {
                0.0
            } else {
                f64::INFINITY
            }
        } else {
            (g - w).abs()
        };
        if d > worst.1 {
            worst = (i, d);
        }
    }
    let i = worst.0;
    assert!(
        worst.1 <= rel * scale,
        "{what}: element {i} of {:?}: got {}, want {} (|diff| {} > {rel} x {scale})",
        want.shape,
        get(got, i),
        get(want, i),
        worst.1
    );
}

/// Runs `node` on the GPU and on the CPU provider (on `reference` inputs, default the same)
/// and compares within `rel` of the output's largest magnitude.
pub(super) fn check(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[Option<T>],
    reference: Option<&[Option<T>]>,
    rel: f64,
    what: &str,
) -> T {
    let refs: Vec<Option<&T>> = reference
        .unwrap_or(inputs)
        .iter()
        .map(Option::as_ref)
        .collect();
    let want = cpu_reference(n, opset, &refs)
        .unwrap_or_else(|e| panic!("{what}: CPU reference: {e}"))
        .remove(0);
    let given: Vec<T> = inputs.iter().flatten().cloned().collect();
    let out_dtype = given[0].dtype;
    let out_dtype = if n.op_type == "ConvInteger" || n.op_type == "QLinearConv" {
        want.dtype
    } else {
        out_dtype
    };
    let mut got = run(ep, n, opset, &given, &[(out_dtype, want.shape.clone())])
        .unwrap_or_else(|e| panic!("{what}: {e}"));
    let got = got.remove(0);
    assert_eq!(got.dtype, out_dtype, "{what}: dtype");
    assert_norm_close(&got, &want, rel, what);
    got
}

/// float32 with FMA-only math: close to the CPU's float32 sums.
pub(super) const F32_REL: f64 = 2e-5;
