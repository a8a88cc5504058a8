//! Malformed and hostile models: every one is an error (never a panic, a hang or a huge
//! allocation) whose message says what is wrong.

mod common;

use onnx_runtime_loader::proto;
use onnx_runtime_loader::{LoadError, Model};
use prost::Message;

fn opset() -> Vec<proto::OperatorSetIdProto> {
    vec![proto::OperatorSetIdProto {
        domain: Some(String::new()),
        version: Some(18),
    }]
}

fn model(graph: proto::GraphProto) -> proto::ModelProto {
    proto::ModelProto {
        ir_version: Some(9),
        opset_import: opset(),
        graph: Some(graph),
        ..Default::default()
    }
}

fn node(op: &str, inputs: &[&str], outputs: &[&str]) -> proto::NodeProto {
    proto::NodeProto {
        op_type: Some(op.into()),
        input: inputs.iter().map(|s| s.to_string()).collect(),
        output: outputs.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    }
}

fn float_tensor(name: &str, dims: &[i64], raw: Vec<u8>) -> proto::TensorProto {
    proto::TensorProto {
        name: Some(name.into()),
        dims: dims.to_vec(),
        data_type: Some(1),
        raw_data: Some(raw.into()),
        ..Default::default()
    }
}

/// A graph `y = Identity(w)` with `w` the given initializer.
fn with_initializer(t: proto::TensorProto) -> proto::ModelProto {
    let name = t.name().to_string();
    model(proto::GraphProto {
        name: Some("g".into()),
        node: vec![node("Identity", &[&name], &["y"])],
        initializer: vec![t],
        output: vec![proto::ValueInfoProto {
            name: Some("y".into()),
            ..Default::default()
        }],
        ..Default::default()
    })
}

fn load_err(m: &proto::ModelProto) -> String {
    match Model::from_bytes(&m.encode_to_vec()) {
        Ok(_) => panic!("a hostile model loaded"),
        Err(e) => e.to_string(),
    }
}

fn assert_mentions(msg: &str, words: &[&str]) {
    for w in words {
        assert!(msg.contains(w), "'{msg}' does not mention '{w}'");
    }
}

#[test]
fn overflowing_and_huge_dims_are_refused_without_allocating() {
    let m = with_initializer(float_tensor("w", &[1 << 40, 1 << 40], vec![0; 4]));
    assert_mentions(&load_err(&m), &["tensor 'w'", "overflow"]);
    let m = with_initializer(float_tensor("w", &[1 << 20, 1 << 20], vec![0; 4]));
    assert_mentions(
        &load_err(&m),
        &["tensor 'w'", "raw_data has 4 bytes", "need"],
    );
    let m = with_initializer(float_tensor("w", &[3, -1], vec![0; 4]));
    assert_mentions(&load_err(&m), &["negative"]);
    let mut t = float_tensor("w", &[1 << 30], vec![]);
    t.raw_data = None;
    t.float_data = vec![1.0; 3];
    assert_mentions(
        &load_err(&with_initializer(t)),
        &["float_data holds 3 values"],
    );
    let mut t = float_tensor("w", &[2], vec![0; 8]);
    t.data_type = Some(99);
    assert_mentions(
        &load_err(&with_initializer(t)),
        &["unknown element type code 99"],
    );
}

#[test]
fn huge_sparse_initializer_is_refused() {
    let values = proto::TensorProto {
        name: Some("s".into()),
        dims: vec![0],
        data_type: Some(1),
        ..Default::default()
    };
    let indices = proto::TensorProto {
        dims: vec![0],
        data_type: Some(7),
        ..Default::default()
    };
    let mut m = with_initializer(float_tensor("w", &[1], vec![0; 4]));
    m.graph.as_mut().unwrap().sparse_initializer = vec![proto::SparseTensorProto {
        values: Some(values),
        indices: Some(indices),
        dims: vec![1 << 40],
    }];
    assert_mentions(
        &load_err(&m),
        &["sparse initializer 's'", "max_dense_sparse_bytes"],
    );
}

#[test]
fn undefined_and_duplicate_values_are_refused() {
    let mut m = with_initializer(float_tensor("w", &[1], vec![0; 4]));
    let g = m.graph.as_mut().unwrap();
    g.node.push(node("Relu", &["nowhere"], &["z"]));
    assert_mentions(
        &load_err(&m),
        &["node #1 (Relu)", "'nowhere' is not produced"],
    );
    let mut m = with_initializer(float_tensor("w", &[1], vec![0; 4]));
    m.graph
        .as_mut()
        .unwrap()
        .node
        .push(node("Relu", &["w"], &["y"]));
    assert_mentions(&load_err(&m), &["output 'y' is already defined"]);
    let mut m = with_initializer(float_tensor("w", &[1], vec![0; 4]));
    m.graph.as_mut().unwrap().node[0]
        .attribute
        .push(proto::AttributeProto {
            name: Some("a".into()),
            ..Default::default()
        });
    assert_mentions(&load_err(&m), &["attribute 'a'", "no type and no value"]);
    let mut m = with_initializer(float_tensor("w", &[1], vec![0; 4]));
    m.graph = None;
    assert_mentions(&load_err(&m), &["no graph"]);
}

/// `depth` Ifs nested in each other's then-branch.
fn nested_ifs(depth: usize) -> proto::GraphProto {
    let mut g = proto::GraphProto {
        name: Some("leaf".into()),
        node: vec![node("Identity", &["c"], &["o0"])],
        output: vec![proto::ValueInfoProto {
            name: Some("o0".into()),
            ..Default::default()
        }],
        ..Default::default()
    };
    for i in 1..=depth {
        let out = format!("o{i}");
        let mut n = node("If", &["c"], &[&out]);
        n.attribute.push(proto::AttributeProto {
            name: Some("then_branch".into()),
            r#type: Some(5),
            g: Some(g),
            ..Default::default()
        });
        g = proto::GraphProto {
            name: Some(format!("level{i}")),
            node: vec![n],
            output: vec![proto::ValueInfoProto {
                name: Some(out),
                ..Default::default()
            }],
            ..Default::default()
        };
    }
    g.input.push(proto::ValueInfoProto {
        name: Some("c".into()),
        ..Default::default()
    });
    g
}

#[test]
fn deep_nesting_is_refused_without_overflowing_the_stack() {
    assert!(Model::from_bytes(&model(nested_ifs(5)).encode_to_vec()).is_ok());
    let bytes = model(nested_ifs(2000)).encode_to_vec();
    let err = Model::from_bytes(&bytes).unwrap_err();
    assert!(matches!(err, LoadError::Decode { .. }), "{err}");
    assert_mentions(&err.to_string(), &["recursion limit"]);
    let opts = onnx_runtime_loader::LoadOptions {
        max_graph_depth: 3,
        ..Default::default()
    };
    let err = Model::from_bytes_with(&model(nested_ifs(5)).encode_to_vec(), None, &opts);
    assert_mentions(
        &err.unwrap_err().to_string(),
        &["nested more than 3 deep", "subgraph"],
    );
}

fn function(name: &str, body: Vec<proto::NodeProto>) -> proto::FunctionProto {
    proto::FunctionProto {
        name: Some(name.into()),
        domain: Some("f".into()),
        input: vec!["x".into()],
        output: vec!["y".into()],
        node: body,
        opset_import: vec![
            opset()[0].clone(),
            proto::OperatorSetIdProto {
                domain: Some("f".into()),
                version: Some(1),
            },
        ],
        ..Default::default()
    }
}

fn call(name: &str, input: &str, output: &str) -> proto::NodeProto {
    let mut n = node(name, &[input], &[output]);
    n.domain = Some("f".into());
    n
}

fn calling_model(entry: &str, functions: Vec<proto::FunctionProto>) -> proto::ModelProto {
    let mut m = model(proto::GraphProto {
        name: Some("g".into()),
        node: vec![call(entry, "x", "y")],
        input: vec![proto::ValueInfoProto {
            name: Some("x".into()),
            ..Default::default()
        }],
        output: vec![proto::ValueInfoProto {
            name: Some("y".into()),
            ..Default::default()
        }],
        ..Default::default()
    });
    m.opset_import.push(proto::OperatorSetIdProto {
        domain: Some("f".into()),
        version: Some(1),
    });
    m.functions = functions;
    m
}

#[test]
fn recursive_and_exploding_functions_are_refused() {
    let relu = || function("Twice", vec![node("Relu", &["x"], &["y"])]);
    let m = calling_model("Twice", vec![relu(), relu()]);
    assert_mentions(&load_err(&m), &["'f::Twice'", "defined twice"]);
    let m = calling_model("Loop", vec![function("Loop", vec![call("Loop", "x", "y")])]);
    assert_mentions(&load_err(&m), &["nest more than", "Loop"]);

    // f0 calls f1 twice, f1 calls f2 twice, ...: 2^40 nodes from a few kilobytes.
    let mut fs = Vec::new();
    for i in 0..40 {
        let next = format!("F{}", i + 1);
        fs.push(function(
            &format!("F{i}"),
            vec![call(&next, "x", "t"), call(&next, "t", "y")],
        ));
    }
    fs.push(function("F40", vec![node("Relu", &["x"], &["y"])]));
    let start = std::time::Instant::now();
    assert_mentions(
        &load_err(&calling_model("F0", fs.clone())),
        &["inlining", "grows"],
    );
    assert!(start.elapsed().as_secs() < 20, "took {:?}", start.elapsed());
    // Without inlining the same model loads.
    let bytes = calling_model("F0", fs).encode_to_vec();
    let opts = onnx_runtime_loader::LoadOptions::without_inlining();
    assert!(Model::from_bytes_with(&bytes, None, &opts).is_ok());
}

#[test]
fn inlining_large_attributes_many_times_is_refused() {
    // A 1 MiB constant inside a function called 200 times would copy 200 MiB.
    let mut constant = node("Constant", &[], &["y"]);
    constant.attribute.push(proto::AttributeProto {
        name: Some("value".into()),
        r#type: Some(4),
        t: Some(float_tensor("c", &[1 << 18], vec![0; 1 << 20])),
        ..Default::default()
    });
    let mut f = function("Big", vec![constant]);
    f.input.clear();
    let mut m = calling_model("Big", vec![f]);
    let g = m.graph.as_mut().unwrap();
    g.node.clear();
    g.output.clear();
    for i in 0..200 {
        let out = format!("y{i}");
        let mut n = node("Big", &[], &[&out]);
        n.domain = Some("f".into());
        g.node.push(n);
        g.output.push(proto::ValueInfoProto {
            name: Some(out),
            ..Default::default()
        });
    }
    assert_mentions(&load_err(&m), &["inlining", "grows"]);
    // Called a few times it inlines.
    let g = m.graph.as_mut().unwrap();
    g.node.truncate(3);
    g.output.truncate(3);
    let model = Model::from_bytes(&m.encode_to_vec()).unwrap();
    assert_eq!(model.graph.nodes.len(), 3);
    assert!(model.graph.nodes.iter().all(|n| n.op_type == "Constant"));
}

#[test]
fn one_call_copying_a_large_attribute_many_times_is_refused() {
    // One call passes a 1 MiB tensor that 300 body nodes refer to: 300 MiB of copies.
    let body = (0..300)
        .map(|i| {
            let mut c = node("Constant", &[], &[&format!("c{i}")]);
            c.attribute.push(proto::AttributeProto {
                name: Some("value".into()),
                ref_attr_name: Some("big".into()),
                r#type: Some(4),
                ..Default::default()
            });
            c
        })
        .chain(std::iter::once(node("Identity", &["c0"], &["y"])))
        .collect();
    let mut f = function("Fan", body);
    f.input.clear();
    f.attribute.push("big".into());
    let mut m = calling_model("Fan", vec![f]);
    let call = &mut m.graph.as_mut().unwrap().node[0];
    call.input.clear();
    call.attribute.push(proto::AttributeProto {
        name: Some("big".into()),
        r#type: Some(4),
        t: Some(float_tensor("t", &[1 << 18], vec![0; 1 << 20])),
        ..Default::default()
    });
    assert_mentions(&load_err(&m), &["inlining", "grows"]);
}

#[test]
fn many_sparse_initializers_share_one_dense_budget() {
    let mut m = with_initializer(float_tensor("w", &[1], vec![0; 4]));
    for i in 0..8 {
        m.graph
            .as_mut()
            .unwrap()
            .sparse_initializer
            .push(proto::SparseTensorProto {
                values: Some(proto::TensorProto {
                    name: Some(format!("s{i}")),
                    dims: vec![0],
                    data_type: Some(1),
                    ..Default::default()
                }),
                indices: Some(proto::TensorProto {
                    dims: vec![0],
                    data_type: Some(7),
                    ..Default::default()
                }),
                dims: vec![1 << 28],
            });
    }
    // Each is 1 GiB dense: the first fits the 1 GiB budget, the second does not.
    assert_mentions(
        &load_err(&m),
        &["sparse initializer 's1'", "max_dense_sparse_bytes"],
    );
}

#[test]
fn truncated_and_bit_flipped_backend_models_never_panic() {
    let Some(data) = common::backend_data() else {
        return;
    };
    let cases = common::cases(&data);
    let mut rng = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        rng
    };
    let (mut tried, mut refused) = (0, 0);
    for case in cases.iter().step_by(23) {
        let bytes = std::fs::read(case.join("model.onnx")).unwrap();
        let mut variants = Vec::new();
        for k in 1..40 {
            variants.push(bytes[..bytes.len() * k / 40].to_vec());
        }
        for _ in 0..60 {
            let mut b = bytes.clone();
            let bit = (next() % (b.len() as u64 * 8)) as usize;
            b[bit / 8] ^= 1 << (bit % 8);
            variants.push(b);
        }
        for v in variants {
            tried += 1;
            if Model::from_bytes(&v).is_err() {
                refused += 1;
            }
        }
    }
    println!("{tried} damaged models: {refused} refused, the rest loaded");
    assert!(refused > tried / 4);
}
