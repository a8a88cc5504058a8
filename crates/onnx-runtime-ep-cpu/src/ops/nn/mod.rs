//! The `nn` op family. Each submodule registers its kernels in [`register`].

use crate::CpuRegistry;

pub fn register(r: &mut CpuRegistry) {
    let _ = r;
}
