//! Recurrent networks: RNN, GRU, LSTM and com.microsoft DynamicQuantizeLSTM.

use crate::CpuRegistry;

pub(crate) mod qlstm;
pub(crate) mod recurrent;

pub fn register(r: &mut CpuRegistry) {
    recurrent::register(r);
    qlstm::register(r);
}
