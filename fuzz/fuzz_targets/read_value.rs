//! Any bytes given to the value readers give a value or an error; a value that reads is
//! written back and reads again to the same encoding.
#![no_main]

use libfuzzer_sys::fuzz_target;
use onnx_runtime_loader::data::{self, DataValue};

fuzz_target!(|input: &[u8]| {
    let readers: [fn(&[u8]) -> Result<DataValue, _>; 4] = [
        |b| data::read_tensor_proto(b).map(DataValue::Tensor),
        data::read_sequence_proto,
        data::read_optional_proto,
        data::read_map_proto,
    ];
    for read in readers {
        if let Ok(v) = read(input) {
            let bytes = data::write_value(&v);
            let again = read(&bytes).expect("a written value reads");
            assert_eq!(data::write_value(&again), bytes, "write is not idempotent");
        }
    }
});
