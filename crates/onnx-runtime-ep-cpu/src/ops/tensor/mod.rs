//! The `tensor` op family: data movement, indexing, construction, sequences and optionals,
//! strings, detection and image sampling, and `ai.onnx.ml`. Each submodule registers its
//! kernels in [`register`].

// Element-generic bodies (`with_elem!`, `move_data!`) are expanded for Copy types and for
// String alike, so `.clone()` is needed in general; the macros' closure-like bodies read
// best in braces.
#![allow(clippy::clone_on_copy, unused_braces)]

use crate::CpuRegistry;

pub(crate) mod common;
pub(crate) mod copy;

mod bitcast;
mod concat_split;
mod construct;
mod detection;
mod gather;
mod grid;
mod identity;
#[cfg(feature = "image-decoder")]
mod image_decoder;
mod ml;
mod pad;
mod random;
mod reshape;
mod scatter;
mod select;
mod sequence;
mod slice;
mod strings;
mod tensor_scatter;
mod tfidf;
mod transpose;
mod unique;

pub use concat_split::{concat_tensors, split_tensor};
pub use gather::gather_tensor;
pub use reshape::reshape_target;
pub use slice::{expand_tensor, slice_tensor, tile_tensor};
pub use transpose::transpose_tensor;

pub fn register(r: &mut CpuRegistry) {
    identity::register(r);
    reshape::register(r);
    transpose::register(r);
    concat_split::register(r);
    slice::register(r);
    pad::register(r);
    gather::register(r);
    scatter::register(r);
    select::register(r);
    construct::register(r);
    unique::register(r);
    random::register(r);
    sequence::register(r);
    strings::register(r);
    detection::register(r);
    grid::register(r);
    ml::register(r);
    bitcast::register(r);
    tfidf::register(r);
    tensor_scatter::register(r);
    #[cfg(feature = "image-decoder")]
    image_decoder::register(r);
}
