//! `TensorProto` of every element type, from its typed field and from `raw_data`, reads into
//! the packed little-endian bytes numpy/onnx produce; values round-trip through the writers.

mod common;

use onnx_runtime_ir::{DataType, TensorBytes};
use onnx_runtime_loader::data::{
    read_map_proto, read_tensor_proto, write_tensor_proto, write_value, DataValue,
};

#[test]
fn every_dtype_reads_as_numpy_packs_it() {
    let dir = common::temp_dir("tensors");
    if !common::python("make_tensors.py", &[&dir]) {
        return;
    }
    let mut checked = 0;
    for dtype in DataType::ALL {
        let name = format!("{dtype:?}").to_lowercase();
        let onnx_name = match dtype {
            DataType::Float32 => "float".to_string(),
            DataType::Float64 => "double".to_string(),
            _ => name,
        };
        let typed = std::fs::read(dir.join(format!("{onnx_name}_typed.pb")))
            .unwrap_or_else(|e| panic!("{onnx_name}: {e}"));
        let t = read_tensor_proto(&typed).unwrap_or_else(|e| panic!("{onnx_name}: {e}"));
        assert_eq!(t.dtype, dtype);
        assert_eq!(t.shape, vec![3, 5]);
        assert_eq!(t.name, "t");
        if dtype == DataType::String {
            let want = std::fs::read_to_string(dir.join("string.txt")).unwrap();
            let want: Vec<&str> = want.lines().collect();
            assert_eq!(t.strings().unwrap(), want.as_slice());
        } else {
            let want = std::fs::read(dir.join(format!("{onnx_name}.bin"))).unwrap();
            assert_eq!(
                t.bytes(),
                want.as_slice(),
                "{onnx_name} from the typed field"
            );
            assert_eq!(want.len(), dtype.storage_bytes(15), "{onnx_name} packing");
            let raw = std::fs::read(dir.join(format!("{onnx_name}_raw.pb"))).unwrap();
            let r = read_tensor_proto(&raw).unwrap();
            assert_eq!(r, t, "{onnx_name} raw vs typed");
            assert!(matches!(r.data, TensorBytes::Owned(_)));
        }
        assert_eq!(read_tensor_proto(&write_tensor_proto(&t)).unwrap(), t);
        checked += 1;
    }
    assert_eq!(checked, 26);

    let m = read_map_proto(&std::fs::read(dir.join("map.pb")).unwrap()).unwrap();
    let DataValue::Map { keys, values } = &m else {
        panic!("not a map: {m:?}")
    };
    assert_eq!(keys.dtype, DataType::Int64);
    assert_eq!(keys.to_i64_vec().unwrap(), vec![3, -7, 11]);
    let DataValue::Sequence(items) = values.as_ref() else {
        panic!("map values are not a sequence")
    };
    assert_eq!(items.len(), 3);
    assert_eq!(read_map_proto(&write_value(&m)).unwrap(), m);
    std::fs::remove_dir_all(&dir).ok();
}
