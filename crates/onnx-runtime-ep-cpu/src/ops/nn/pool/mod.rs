//! Pooling and resampling: MaxPool, AveragePool, LpPool, the global pools, MaxUnpool, Resize.

use crate::CpuRegistry;

pub(crate) mod lp_unpool;
pub(crate) mod pool2d;
pub(crate) mod pool2d_fast;
pub(crate) mod pool_op;
pub(crate) mod resize;
pub(crate) mod resize_nearest;

pub fn register(r: &mut CpuRegistry) {
    pool_op::register(r);
    lp_unpool::register(r);
    resize::register(r);
}
