//! The `nn` op family, one folder per sub-family: matrix products (`gemm`), convolution
//! (`conv`), pooling and resampling (`pool`), normalization (`norm`), attention and the
//! `com.microsoft` transformer ops (`attention`), recurrent networks (`rnn`), quantization
//! (`quant`), signal processing (`signal`) and training-only ops (`training`). What several
//! sub-families share (attribute and dtype helpers, scratch buffers, window geometry) sits
//! at this level. Each sub-family registers its kernels in its own `register`.

use crate::CpuRegistry;

pub mod attention;
pub mod common;
pub mod conv;
pub(crate) mod cpu_cache;
pub mod gemm;
pub mod norm;
pub mod pool;
pub mod quant;
pub mod rnn;
pub(crate) mod scratch;
pub mod signal;
pub mod training;
pub mod window;

pub fn register(r: &mut CpuRegistry) {
    gemm::register(r);
    conv::register(r);
    pool::register(r);
    norm::register(r);
    attention::register(r);
    rnn::register(r);
    quant::register(r);
    signal::register(r);
    training::register(r);
}
