//! Object-detection ops: RoiAlign (`roi_align`). Own NVRTC kernels (`kernels/detection.cu`),
//! semantics mirroring the CPU provider (`onnx-runtime-ep-cpu/src/ops/tensor/detection.rs`).

mod nms;
mod roi_align;

use super::Registry;
use crate::compiler::ModuleSpec;

pub fn register(r: &mut Registry) {
    roi_align::register(r);
    nms::register(r);
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![detection_module(), nms_module()]
}

/// RoiAlign by dtype.
pub(crate) fn detection_module() -> ModuleSpec {
    ModuleSpec::new("detection", include_str!("../../kernels/detection.cu")).with_half()
}

/// NonMaxSuppression (the shared sort and scan of `index_sort.cuh` included).
pub(crate) fn nms_module() -> ModuleSpec {
    ModuleSpec::new(
        "nms",
        concat!(
            include_str!("../../kernels/index_sort.cuh"),
            include_str!("../../kernels/nms.cu")
        ),
    )
    .with_half()
}
