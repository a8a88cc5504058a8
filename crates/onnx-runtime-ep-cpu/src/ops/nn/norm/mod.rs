//! Normalization: BatchNormalization, InstanceNormalization, GroupNormalization, LayerNormalization and the com.microsoft norms, Dropout.

use crate::CpuRegistry;

pub(crate) mod channel_norm;
pub(crate) mod dropout;
pub(crate) mod layer_norm;

pub fn register(r: &mut CpuRegistry) {
    channel_norm::register(r);
    layer_norm::register(r);
    dropout::register(r);
}
