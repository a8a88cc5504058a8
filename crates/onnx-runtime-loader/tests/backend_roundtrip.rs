//! Every `model.onnx` of the ONNX backend test data loads, and round-trips through
//! `to_bytes` into an equal `Model`; every `input_*.pb` / `output_*.pb` reads as the type the
//! model declares and round-trips through `write_value`.

mod common;

use onnx_runtime_loader::data::{read_value, write_value};
use onnx_runtime_loader::{LoadOptions, Model};

#[test]
fn backend_models_load_and_round_trip() {
    let Some(data) = common::backend_data() else {
        return;
    };
    let cases = common::cases(&data);
    assert!(
        cases.len() > 1500,
        "only {} backend cases found",
        cases.len()
    );
    let faithful = LoadOptions::without_inlining();
    let mut failures = Vec::new();
    let (mut loaded, mut round_tripped, mut values) = (0, 0, 0);
    for case in &cases {
        let path = case.join("model.onnx");
        let model = match Model::load_with(&path, &faithful) {
            Ok(m) => m,
            Err(e) => {
                failures.push(format!("load: {e}"));
                continue;
            }
        };
        if let Err(e) = Model::load(&path) {
            failures.push(format!("load with inlining: {e}"));
            continue;
        }
        loaded += 1;
        let bytes = model.to_bytes().expect("encode");
        match Model::from_bytes_with(&bytes, None, &faithful) {
            Ok(again) if again == model => round_tripped += 1,
            Ok(_) => failures.push(format!("{}: round-trip differs", path.display())),
            Err(e) => failures.push(format!("{}: reload: {e}", path.display())),
        }
        values += check_test_data(case, &model, &mut failures);
    }
    println!(
        "{loaded}/{} backend models loaded, {round_tripped} round-tripped, {values} test values read",
        cases.len()
    );
    assert!(
        failures.is_empty(),
        "{} failures:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

fn check_test_data(case: &std::path::Path, model: &Model, failures: &mut Vec<String>) -> usize {
    let g = &model.graph;
    // Graph inputs that are initializers are not fed by the test data.
    let fed: Vec<_> = g
        .inputs
        .iter()
        .filter(|id| !g.initializers.contains_key(id))
        .collect();
    let mut count = 0;
    let Ok(sets) = std::fs::read_dir(case) else {
        return 0;
    };
    for set in sets.flatten().filter(|e| e.path().is_dir()) {
        for (prefix, ids) in [("input", &fed), ("output", &g.outputs.iter().collect())] {
            for (i, id) in ids.iter().enumerate() {
                let file = set.path().join(format!("{prefix}_{i}.pb"));
                let Ok(bytes) = std::fs::read(&file) else {
                    continue;
                };
                let Some(ty) = &g.value(**id).ty else {
                    continue;
                };
                match read_value(&bytes, ty) {
                    Ok(v) => {
                        let again = read_value(&write_value(&v), ty).expect("re-read");
                        if again != v {
                            failures.push(format!("{}: value round-trip differs", file.display()));
                        }
                        count += 1;
                    }
                    Err(e) => failures.push(format!("{}: {e}", file.display())),
                }
            }
        }
    }
    count
}

/// What the loader writes says what the original file says, by onnx's own reader.
#[test]
fn written_backend_models_match_the_originals_in_onnx() {
    let Some(data) = common::backend_data() else {
        return;
    };
    let dir = common::temp_dir("fidelity");
    let mut listing = String::new();
    for (i, case) in common::cases(&data).iter().enumerate() {
        let path = case.join("model.onnx");
        let model = Model::load_with(&path, &LoadOptions::without_inlining()).unwrap();
        let out = dir.join(format!("{i}.onnx"));
        model.save(&out).unwrap();
        listing.push_str(&format!("{}\t{}\n", path.display(), out.display()));
    }
    let list = dir.join("pairs.tsv");
    std::fs::write(&list, listing).unwrap();
    assert!(common::python("compare_models.py", &[&list]));
    std::fs::remove_dir_all(&dir).ok();
}
