//! Training-only ops: losses, gradients and optimizers, and the MT19937 generator training-mode Dropout draws from.

use crate::CpuRegistry;

pub(crate) mod loss;
pub(crate) mod mt19937;
pub(crate) mod optimizers;

pub fn register(r: &mut CpuRegistry) {
    optimizers::register(r);
    loss::register(r);
}
