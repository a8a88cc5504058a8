//! Signal processing: DFT, STFT, the window functions and MelWeightMatrix.

use crate::CpuRegistry;

pub(crate) mod spectral;

pub fn register(r: &mut CpuRegistry) {
    spectral::register(r);
}
