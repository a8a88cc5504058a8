//! The `math` op family: elementwise arithmetic, activations, comparisons and logic, casts,
//! reductions, softmax, cumulative and sorting ops. Each submodule registers its kernels in
//! [`register`].

use crate::CpuRegistry;

mod activation;
mod binary;
mod common;
pub mod elementwise;
mod logic;
pub mod num;
mod unary;
mod variadic;

#[cfg(test)]
mod testutil;

pub fn register(r: &mut CpuRegistry) {
    activation::register(r);
    binary::register(r);
    logic::register(r);
    unary::register(r);
    variadic::register(r);
}
