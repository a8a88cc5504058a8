//! Model-local functions: inlined at load (checked against onnxruntime running the original
//! model on random inputs) and kept for a faithful round-trip.

mod common;

use onnx_runtime_ir::{Attribute, Graph};
use onnx_runtime_loader::{LoadOptions, Model};

fn calls_function(g: &Graph, m: &Model) -> bool {
    g.nodes.iter().any(|n| {
        m.functions
            .iter()
            .any(|f| f.matches(&n.domain, &n.op_type, &n.overload))
            || n.attributes.values().any(|a| match a {
                Attribute::Graph(sub) => calls_function(sub, m),
                Attribute::Graphs(subs) => subs.iter().any(|s| calls_function(s, m)),
                _ => false,
            })
    })
}

fn has_refs(g: &Graph) -> bool {
    g.nodes.iter().any(|n| {
        n.attributes.values().any(|a| match a {
            Attribute::Ref { .. } => true,
            Attribute::Graph(sub) => has_refs(sub),
            Attribute::Graphs(subs) => subs.iter().any(has_refs),
            _ => false,
        })
    })
}

#[test]
fn inlined_functions_match_onnxruntime() {
    let dir = common::temp_dir("functions");
    if !common::python("make_function_models.py", &[&dir]) {
        return;
    }
    let mut count = 0;
    for entry in std::fs::read_dir(&dir).unwrap().flatten() {
        let path = entry.path();
        let name = path.file_stem().unwrap().to_string_lossy().to_string();
        let model = Model::load(&path).unwrap_or_else(|e| panic!("{e}"));
        assert!(!model.functions.is_empty(), "{name}: functions kept");
        assert!(
            !calls_function(&model.graph, &model),
            "{name}: a call is left"
        );
        assert!(
            !has_refs(&model.graph),
            "{name}: an attribute reference is left"
        );
        model
            .save(dir.join(format!("{name}.inlined.onnx")))
            .unwrap();

        // The faithful load keeps the calls and round-trips.
        let faithful = Model::load_with(&path, &LoadOptions::without_inlining()).unwrap();
        assert!(
            calls_function(&faithful.graph, &faithful),
            "{name}: calls kept"
        );
        let bytes = faithful.to_bytes().unwrap();
        let again = Model::from_bytes_with(&bytes, None, &LoadOptions::without_inlining()).unwrap();
        assert_eq!(again, faithful, "{name}: round-trip");
        // Inlining the written model gives the same graph as inlining the file.
        assert_eq!(
            Model::from_bytes(&bytes).unwrap().graph,
            model.graph,
            "{name}"
        );
        count += 1;
    }
    assert_eq!(count, 5);
    assert!(common::python("compare_ort.py", &[&dir]));
    std::fs::remove_dir_all(&dir).ok();
}
