//! The `math` op family: elementwise arithmetic, activations, comparisons and logic, casts,
//! reductions, softmax, cumulative and sorting ops. Each submodule registers its kernels in
//! [`register`].

use crate::CpuRegistry;

pub(crate) mod activation;
mod argminmax;
mod binary;
mod cast;
mod common;
mod cumprod;
mod cumsum;
mod det;
mod einsum;
pub mod elementwise;
pub mod fused_elementwise;
pub mod layout;
mod logic;
pub mod num;
mod reduce;
mod small_float;
mod softmax;
mod topk;
mod unary;
mod variadic;
pub mod vecmath;

#[cfg(test)]
mod testutil;

pub fn register(r: &mut CpuRegistry) {
    activation::register(r);
    argminmax::register(r);
    cast::register(r);
    cumsum::register(r);
    det::register(r);
    einsum::register(r);
    fused_elementwise::register(r);
    reduce::register(r);
    softmax::register(r);
    topk::register(r);
    binary::register(r);
    cumprod::register(r);
    logic::register(r);
    unary::register(r);
    variadic::register(r);
}
