//! Helpers shared by the tensor-family kernels: element access over every storage kind
//! (fixed-width bytes and strings), sub-byte unpacking, error constructors and readers for
//! shape-like inputs.

use crate::{Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::borrow::Cow;

/// The storage type of an element for data movement: unsigned integers of the element's
/// width (`[u64; 2]` for complex128) or `String`.
pub trait Elem: Clone + Send + Sync + Default + PartialEq + std::fmt::Debug + 'static {
    fn items(t: &Tensor) -> &[Self];
    fn items_mut(t: &mut Tensor) -> &mut [Self];
}

macro_rules! pod_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            fn items(t: &Tensor) -> &[Self] {
                bytemuck::cast_slice(t.bytes())
            }
            fn items_mut(t: &mut Tensor) -> &mut [Self] {
                bytemuck::cast_slice_mut(t.bytes_mut())
            }
        }
    )*};
}
pod_elem!(u8, u16, u32, u64, [u64; 2]);

impl Elem for String {
    fn items(t: &Tensor) -> &[Self] {
        t.strings()
    }
    fn items_mut(t: &mut Tensor) -> &mut [Self] {
        t.strings_mut()
    }
}

/// Runs `$body` with `$T` bound to the [`Elem`] type that stores `$dtype` (strings included);
/// `$fallback` for sub-byte and undefined types (unpack sub-byte tensors first).
macro_rules! with_elem {
    ($dtype:expr, $T:ident => $body:expr, $fallback:expr) => {{
        let __d: onnx_runtime_ir::DataType = $dtype;
        if __d == onnx_runtime_ir::DataType::String {
            type $T = String;
            $body
        } else {
            match __d.bit_width() {
                Some(8) => {
                    type $T = u8;
                    $body
                }
                Some(16) => {
                    type $T = u16;
                    $body
                }
                Some(32) => {
                    type $T = u32;
                    $body
                }
                Some(64) => {
                    type $T = u64;
                    $body
                }
                Some(128) => {
                    type $T = [u64; 2];
                    $body
                }
                _ => $fallback,
            }
        }
    }};
}
pub(crate) use with_elem;

/// Moves the elements of tensor `$x` (sub-byte types unpacked first and repacked after) into
/// a fresh output of `$shape`: `$body` sees `$src: &[$T]` and `$dst: &mut [$T]`. Evaluates to
/// the output tensor; returns an unsupported-dtype error from the caller for undefined types.
macro_rules! move_data {
    ($node:expr, $op:expr, $x:expr, $shape:expr, $T:ident, |$src:ident, $dst:ident| $body:expr) => {{
        use $crate::ops::tensor::common::Elem as _;
        let __x: &$crate::Tensor = $x;
        let __u = $crate::ops::tensor::common::unpacked(__x);
        let mut __out = $crate::ops::tensor::common::new_out(__x.dtype(), $shape);
        $crate::ops::tensor::common::with_elem!(__u.dtype(), $T => {
            let $src: &[$T] = $T::items(&__u);
            let $dst: &mut [$T] = $T::items_mut(&mut __out);
            $body
        }, return Err($crate::ops::tensor::common::unsupported(
            $node, $op, __x.dtype(), "it has no element storage")));
        $crate::ops::tensor::common::repack(__out, __x.dtype())
    }};
}
pub(crate) use move_data;

/// An invalid-input error for the node described by `node`.
pub fn invalid(node: &str, message: impl Into<String>) -> EpError {
    EpError::InvalidInput {
        node: node.to_string(),
        message: message.into(),
    }
}

/// An unsupported-dtype error for `op`.
pub fn unsupported(node: &str, op: &str, dtype: DataType, detail: impl Into<String>) -> EpError {
    EpError::UnsupportedDtype {
        node: node.to_string(),
        op: op.to_string(),
        dtype,
        detail: detail.into(),
        hint: "cast the input to a supported type, or run this node on another execution provider"
            .into(),
    }
}

/// Sub-byte tensors unpacked to one byte per element (the element's bits in the low bits,
/// dtype `Uint8`); other tensors borrowed as they are.
pub fn unpacked(t: &Tensor) -> Cow<'_, Tensor> {
    let Some(bits) = t.dtype().bit_width().filter(|b| *b < 8) else {
        return Cow::Borrowed(t);
    };
    let n = t.numel();
    let per = 8 / bits;
    let mask = (1u8 << bits) - 1;
    let src = t.bytes();
    let vals: Vec<u8> = (0..n)
        .map(|i| (src[i / per] >> ((i % per) * bits)) & mask)
        .collect();
    Cow::Owned(Tensor::from_vec(t.shape().to_vec(), vals))
}

/// Packs a one-byte-per-element tensor back into sub-byte `dtype` (no-op for other types).
pub fn repack(t: Tensor, dtype: DataType) -> Tensor {
    let Some(bits) = dtype.bit_width().filter(|b| *b < 8) else {
        return t;
    };
    let per = 8 / bits;
    let mask = (1u8 << bits) - 1;
    let mut out = Tensor::zeros(dtype, t.shape().to_vec());
    let dst = out.bytes_mut();
    for (i, &v) in t.bytes().iter().enumerate() {
        dst[i / per] |= (v & mask) << ((i % per) * bits);
    }
    out
}

/// Integer elements of `t` as i64; an error naming `what` if `t` is not an integer tensor.
pub fn int_values(node: &str, t: &Tensor, what: &str) -> Result<Vec<i64>, EpError> {
    if t.dtype() == DataType::Bool {
        return Err(invalid(node, format!("{what} must be integers, got bool")));
    }
    t.to_i64_vec()
        .ok_or_else(|| invalid(node, format!("{what} must be integers, got {}", t.dtype())))
}

/// Optional integer input `index` (omitted, empty optional or an integer tensor).
pub fn opt_ints_input(
    node: &str,
    inputs: &[Option<&Value>],
    index: usize,
    what: &str,
) -> Result<Option<Vec<i64>>, EpError> {
    match crate::kernel::optional_tensor_input(node, inputs, index)? {
        None => Ok(None),
        Some(t) => int_values(node, t, what).map(Some),
    }
}

/// A scalar (or one-element) numeric input as f64.
pub fn scalar_f64(node: &str, t: &Tensor, what: &str) -> Result<f64, EpError> {
    if t.numel() != 1 {
        return Err(invalid(
            node,
            format!("{what} must hold one element, got shape {:?}", t.shape()),
        ));
    }
    t.to_f64_vec()
        .map(|v| v[0])
        .ok_or_else(|| invalid(node, format!("{what} must be numeric, got {}", t.dtype())))
}

/// Converts a non-negative i64 dimension to usize with an error naming `what`.
pub fn to_dim(node: &str, v: i64, what: &str) -> Result<usize, EpError> {
    usize::try_from(v).map_err(|_| invalid(node, format!("{what} must be non-negative, got {v}")))
}

/// The product of dims, with an error on overflow (guards allocations from hostile shapes).
pub fn checked_numel(node: &str, shape: &[usize]) -> Result<usize, EpError> {
    shape
        .iter()
        .try_fold(1usize, |a, &d| a.checked_mul(d))
        .filter(|n| *n <= (1usize << 40))
        .ok_or_else(|| invalid(node, format!("output shape {shape:?} is too large")))
}

/// Row-major strides.
pub fn strides_of(shape: &[usize]) -> Vec<usize> {
    let mut s = vec![1usize; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * shape[i + 1];
    }
    s
}

/// A fresh output tensor of `dtype` and `shape` (sub-byte types as one byte per element).
pub fn new_out(dtype: DataType, shape: Vec<usize>) -> Tensor {
    let d = if dtype.is_sub_byte() {
        DataType::Uint8
    } else {
        dtype
    };
    Tensor::zeros(d, shape)
}

/// A tensor of numeric or bool `dtype` holding `vals` converted like a C cast (saturating for
/// out-of-range integers); `None` for other types.
pub fn from_f64s(dtype: DataType, shape: Vec<usize>, vals: &[f64]) -> Option<Tensor> {
    if dtype == DataType::Bool {
        let b: Vec<bool> = vals.iter().map(|&v| v != 0.0).collect();
        return Some(Tensor::from_bools(shape, &b));
    }
    crate::dispatch_numeric!(dtype, T => {
        let v: Vec<T> = vals
            .iter()
            .map(|&x| <T as num_traits::NumCast>::from(x).unwrap_or_else(|| {
                let c = if x.is_nan() { 0.0 } else { x };
                <T as num_traits::NumCast>::from(c).unwrap_or_else(|| {
                    if c > 0.0 { <T as num_traits::Bounded>::max_value() } else { <T as num_traits::Bounded>::min_value() }
                })
            }))
            .collect();
        Some(Tensor::from_vec(shape, v))
    }, _ => None)
}

/// The single tensor output of a kernel.
pub fn one(t: Tensor) -> Result<Vec<Value>, EpError> {
    Ok(vec![Value::Tensor(t)])
}

#[cfg(test)]
pub mod testutil {
    //! Building nodes and running kernels in unit tests.

    use crate::kernel::BuildContext;
    use crate::{Tensor, Value};
    use onnx_runtime_ir::Node;

    pub use crate::testutil::node;

    /// Builds the registered kernel for `node` at `opset` and runs it.
    pub fn run(
        node: &Node,
        opset: u64,
        inputs: &[Option<Value>],
    ) -> Result<Vec<Value>, onnx_runtime_ep_api::EpError> {
        let (_, f) = crate::registry()
            .lookup(&node.domain, &node.op_type, opset)
            .expect("kernel registered");
        let k = f(&BuildContext::new(node, opset))?;
        let refs: Vec<Option<&Value>> = inputs.iter().map(|v| v.as_ref()).collect();
        k.run(&refs)
    }

    pub fn t<T: crate::Element>(shape: &[usize], v: Vec<T>) -> Option<Value> {
        Some(Value::Tensor(Tensor::from_vec(shape.to_vec(), v)))
    }

    pub fn out<T: crate::Element>(v: &[Value], i: usize) -> (Vec<usize>, Vec<T>) {
        let t = v[i].as_tensor().expect("tensor output");
        (t.shape().to_vec(), t.data::<T>().to_vec())
    }

    /// Deterministic pseudo-random f32 values in [-1, 1) for inputs.
    pub fn rand_f32(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
            })
            .collect()
    }
}
