//! CPU kernels, grouped by op family:
//! - [`math`]: elementwise arithmetic, activations, comparisons and logic, casts, reductions,
//!   softmax, cumulative and sorting ops;
//! - [`nn`]: matrix products, convolution, pooling, normalization, resize, recurrent,
//!   quantization, signal processing and the `com.microsoft` transformer ops;
//! - [`tensor`]: movement, indexing, construction, sequences, optionals, strings, `ai.onnx.ml`.
//!
//! Each family's `register` adds its kernels, keyed by (domain, op, since-version).

use crate::CpuRegistry;

pub mod math;
pub mod nn;
pub mod tensor;

/// Registers every CPU kernel.
pub fn register_all(r: &mut CpuRegistry) {
    math::register(r);
    nn::register(r);
    tensor::register(r);
}
