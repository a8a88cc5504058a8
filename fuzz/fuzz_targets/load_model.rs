//! Any bytes given to `Model::from_bytes` give a model or an error; a model that loads is
//! written back, and writing is idempotent (encode . decode . encode == encode).
#![no_main]

use libfuzzer_sys::fuzz_target;
use onnx_runtime_loader::{LoadOptions, Model};

fuzz_target!(|data: &[u8]| {
    let faithful = LoadOptions::without_inlining();
    if let Ok(model) = Model::from_bytes_with(data, None, &faithful) {
        let bytes = model.to_bytes().expect("a loaded model encodes");
        let again = Model::from_bytes_with(&bytes, None, &faithful).expect("written model loads");
        assert_eq!(again.to_bytes().expect("encodes"), bytes, "write is not idempotent");
    }
    let _ = Model::from_bytes(data);
});
