//! Signal-processing ops: the window generators HannWindow, HammingWindow and BlackmanWindow
//! (`window`). Own NVRTC kernels (`kernels/signal.cu`), semantics mirroring the CPU provider
//! (`onnx-runtime-ep-cpu/src/ops/nn/signal/spectral.rs`).

mod dft;
mod stft;
mod window;

use super::Registry;
use crate::compiler::ModuleSpec;

pub fn register(r: &mut Registry) {
    window::register(r);
    dft::register(r);
    stft::register(r);
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![signal_module(), dft_module()]
}

/// The window generators, one kernel per numeric output type.
pub(crate) fn signal_module() -> ModuleSpec {
    ModuleSpec::new("signal", include_str!("../../kernels/signal.cu")).with_half()
}

/// DFT and STFT, one direct and one FFT kernel per float type.
pub(crate) fn dft_module() -> ModuleSpec {
    ModuleSpec::new("dft", include_str!("../../kernels/dft.cu")).with_half()
}
