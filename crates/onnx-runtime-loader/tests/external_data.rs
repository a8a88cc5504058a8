//! External data: read from the model's folder through a memory map, and refused when its
//! location leaves the folder (absolute, `..`, symbolic link) or its range leaves the file.

mod common;

use onnx_runtime_ir::TensorBytes;
use onnx_runtime_loader::proto::{self, tensor_proto::DataLocation};
use onnx_runtime_loader::{ExternalDataOptions, Model};
use prost::Message;
use std::path::Path;

fn entry(k: &str, v: &str) -> proto::StringStringEntryProto {
    proto::StringStringEntryProto {
        key: Some(k.into()),
        value: Some(v.into()),
    }
}

/// `y = Identity(w)`, `w` a float[4] stored externally with the given entries.
fn model_bytes(external: &[(&str, &str)]) -> Vec<u8> {
    let w = proto::TensorProto {
        name: Some("w".into()),
        dims: vec![4],
        data_type: Some(1),
        data_location: Some(DataLocation::External as i32),
        external_data: external.iter().map(|(k, v)| entry(k, v)).collect(),
        ..Default::default()
    };
    let g = proto::GraphProto {
        name: Some("g".into()),
        node: vec![proto::NodeProto {
            op_type: Some("Identity".into()),
            input: vec!["w".into()],
            output: vec!["y".into()],
            ..Default::default()
        }],
        initializer: vec![w],
        output: vec![proto::ValueInfoProto {
            name: Some("y".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    proto::ModelProto {
        ir_version: Some(9),
        opset_import: vec![proto::OperatorSetIdProto {
            domain: Some(String::new()),
            version: Some(18),
        }],
        graph: Some(g),
        ..Default::default()
    }
    .encode_to_vec()
}

fn floats() -> Vec<u8> {
    [1.5f32, -2.0, 3.25, 7.0]
        .iter()
        .flat_map(|v| v.to_le_bytes())
        .collect()
}

fn write_model(dir: &Path, external: &[(&str, &str)]) -> std::path::PathBuf {
    let path = dir.join("model.onnx");
    std::fs::write(&path, model_bytes(external)).unwrap();
    path
}

fn err(path: &Path) -> String {
    Model::load(path).map(|_| ()).unwrap_err().to_string()
}

#[test]
fn external_data_is_mapped_from_the_model_folder() {
    let dir = common::temp_dir("ext-ok");
    let mut data = vec![0xAAu8; 100];
    data.extend(floats());
    std::fs::create_dir_all(dir.join("data")).unwrap();
    std::fs::write(dir.join("data/w.bin"), &data).unwrap();
    let path = write_model(
        &dir,
        &[
            ("location", "data/w.bin"),
            ("offset", "100"),
            ("length", "16"),
        ],
    );
    let m = Model::load(&path).unwrap();
    let id = m.graph.value_by_name("w").unwrap();
    let t = m.graph.initializer(id).unwrap();
    assert!(
        matches!(t.data, TensorBytes::Shared(_)),
        "not borrowed from the map"
    );
    assert_eq!(t.bytes(), floats().as_slice());
    // Without a length, the data runs to the end of the file.
    write_model(&dir, &[("location", "./data/w.bin"), ("offset", "100")]);
    assert_eq!(Model::load(&path).unwrap(), m);
    // Bytes need a folder; with one they load; written out, the data is inline.
    let bytes = std::fs::read(&path).unwrap();
    let e = Model::from_bytes(&bytes).unwrap_err().to_string();
    assert!(
        e.contains("without a folder") && e.contains("tensor 'w'"),
        "{e}"
    );
    assert_eq!(Model::from_bytes_in_dir(&bytes, &dir).unwrap(), m);
    assert_eq!(Model::from_bytes(&m.to_bytes().unwrap()).unwrap(), m);
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn external_data_outside_the_folder_is_refused() {
    let root = common::temp_dir("ext-escape");
    let dir = root.join("model");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(root.join("secret.bin"), floats()).unwrap();
    let secret = root.join("secret.bin");

    let path = write_model(&dir, &[("location", "../secret.bin")]);
    assert!(err(&path).contains("contains '..'"), "{}", err(&path));
    write_model(&dir, &[("location", "data/../../secret.bin")]);
    assert!(err(&path).contains("contains '..'"));
    write_model(&dir, &[("location", secret.to_str().unwrap())]);
    assert!(err(&path).contains("absolute"), "{}", err(&path));
    #[cfg(unix)]
    {
        std::os::unix::fs::symlink(&secret, dir.join("link.bin")).unwrap();
        write_model(&dir, &[("location", "link.bin")]);
        let e = err(&path);
        assert!(e.contains("outside the model's folder"), "{e}");
        std::os::unix::fs::symlink(&root, dir.join("up")).unwrap();
        write_model(&dir, &[("location", "up/secret.bin")]);
        assert!(err(&path).contains("outside the model's folder"));
        // A link that stays inside the folder is fine.
        std::fs::write(dir.join("real.bin"), floats()).unwrap();
        std::os::unix::fs::symlink(dir.join("real.bin"), dir.join("inside.bin")).unwrap();
        write_model(&dir, &[("location", "inside.bin")]);
        assert!(Model::load(&path).is_ok());
    }
    std::fs::remove_dir_all(&root).ok();
}

#[test]
fn external_ranges_beyond_the_file_are_refused() {
    let dir = common::temp_dir("ext-range");
    std::fs::write(dir.join("w.bin"), floats()).unwrap();
    let path = write_model(&dir, &[("location", "w.bin"), ("offset", "64")]);
    assert!(err(&path).contains("beyond the end"), "{}", err(&path));
    write_model(
        &dir,
        &[("location", "w.bin"), ("offset", "8"), ("length", "16")],
    );
    assert!(err(&path).contains("beyond the end"), "{}", err(&path));
    write_model(&dir, &[("location", "w.bin"), ("length", "8")]);
    assert!(err(&path).contains("need 16 bytes"), "{}", err(&path));
    write_model(&dir, &[("location", "w.bin"), ("offset", "-1")]);
    assert!(
        err(&path).contains("not a non-negative integer"),
        "{}",
        err(&path)
    );
    write_model(&dir, &[("location", "missing.bin")]);
    assert!(err(&path).contains("cannot open"), "{}", err(&path));
    write_model(&dir, &[("offset", "0")]);
    assert!(
        err(&path).contains("'location' key is missing"),
        "{}",
        err(&path)
    );
    write_model(
        &dir,
        &[
            ("location", "w.bin"),
            ("offset", "18446744073709551615"),
            ("length", "16"),
        ],
    );
    assert!(err(&path).contains("beyond the end"), "{}", err(&path));
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn onnx_external_data_files_load_like_inline_ones() {
    let dir = common::temp_dir("ext-onnx");
    if !common::python("make_external.py", &[&dir]) {
        return;
    }
    let inline = Model::load(dir.join("inline.onnx")).unwrap();
    let external = Model::load(dir.join("external/model.onnx")).unwrap();
    assert_eq!(external.graph, inline.graph);
    let shared = external
        .graph
        .initializers
        .values()
        .filter(|t| matches!(t.data, TensorBytes::Shared(_)))
        .count();
    assert_eq!(shared, 3);
    // Inline tensors of 4 KiB and more borrow the mapped model file too.
    let w1 = inline.graph.value_by_name("w1").unwrap();
    assert!(matches!(
        inline.graph.initializer(w1).unwrap().data,
        TensorBytes::Shared(_)
    ));
    // Saving over the file the model borrows from replaces it safely.
    let path = dir.join("inline.onnx");
    let before = std::fs::read(&path).unwrap();
    inline.save(&path).unwrap();
    assert_eq!(Model::load(&path).unwrap(), inline);
    assert_eq!(inline.to_bytes().unwrap(), std::fs::read(&path).unwrap());
    assert!(!before.is_empty());

    // Written with external data: the tensors go to the data file, and onnxruntime computes
    // the same outputs from it.
    let out = dir.join("saved");
    std::fs::create_dir_all(&out).unwrap();
    let mut opts = ExternalDataOptions::new("weights/all.bin");
    opts.threshold = 64;
    std::fs::create_dir_all(out.join("weights")).unwrap();
    inline
        .save_with_external_data(out.join("m.onnx"), &opts)
        .unwrap();
    let saved = Model::load(out.join("m.onnx")).unwrap();
    assert_eq!(saved.graph, inline.graph);
    for t in saved.graph.initializers.values() {
        assert!(
            matches!(t.data, TensorBytes::Shared(_)),
            "{} inline",
            t.name
        );
    }
    assert!(common::python("run_same.py", &[&path, &out.join("m.onnx")]));
    // Saving over the files the model borrows from.
    saved
        .save_with_external_data(out.join("m.onnx"), &opts)
        .unwrap();
    assert_eq!(Model::load(out.join("m.onnx")).unwrap(), saved);
    let escape =
        saved.save_with_external_data(out.join("m.onnx"), &ExternalDataOptions::new("../x.bin"));
    assert!(escape
        .unwrap_err()
        .to_string()
        .contains("inside the model's folder"));
    std::fs::remove_dir_all(&dir).ok();
}
