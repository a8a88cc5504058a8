//! Linear algebra: Det (`det`). Own NVRTC kernels (`kernels/linalg.cu`), semantics
//! mirroring the CPU provider (`onnx-runtime-ep-cpu/src/ops/math/det.rs`).

mod det;

use super::Registry;
use crate::compiler::ModuleSpec;

pub fn register(r: &mut Registry) {
    det::register(r);
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![linalg_module()]
}

/// Det by dtype.
pub(crate) fn linalg_module() -> ModuleSpec {
    ModuleSpec::new("linalg", include_str!("../../kernels/linalg.cu")).with_half()
}
