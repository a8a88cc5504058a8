//! The `tensor` op family. Each submodule registers its kernels in [`register`].

use crate::CpuRegistry;

mod identity;

pub fn register(r: &mut CpuRegistry) {
    identity::register(r);
}
