//! `onnx-runtime info`: what a model is made of and what each provider cannot run.

use onnx_runtime_ir::{Attribute, Graph};
use onnx_runtime_loader::Model;
use onnx_runtime_session::{describe_type, unsupported_ops, SessionOptions};
use std::collections::BTreeMap;
use std::path::Path;

fn count_ops(graph: &Graph, counts: &mut BTreeMap<String, usize>) {
    for node in &graph.nodes {
        let key = if node.normalized_domain().is_empty() {
            node.op_type.clone()
        } else {
            format!("{}::{}", node.domain, node.op_type)
        };
        *counts.entry(key).or_default() += 1;
        for attr in node.attributes.values() {
            match attr {
                Attribute::Graph(g) => count_ops(g, counts),
                Attribute::Graphs(gs) => gs.iter().for_each(|g| count_ops(g, counts)),
                _ => {}
            }
        }
    }
}

pub fn info(path: &Path) -> Result<(), String> {
    let model = Model::load(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let g = &model.graph;
    println!("model: {}", path.display());
    println!(
        "producer: {} {} (IR version {})",
        model.producer_name, model.producer_version, model.ir_version
    );
    let opsets: Vec<String> = g
        .opset_imports
        .iter()
        .map(|(d, v)| format!("{}={v}", if d.is_empty() { "ai.onnx" } else { d }))
        .collect();
    println!("opsets: {}", opsets.join(", "));
    println!("inputs:");
    for &v in &g.inputs {
        let value = g.value(v);
        let init = if g.initializer(v).is_some() {
            " (has an initializer)"
        } else {
            ""
        };
        println!("  {}: {}{init}", value.name, describe_type(&value.ty));
    }
    println!("outputs:");
    for &v in &g.outputs {
        let value = g.value(v);
        println!("  {}: {}", value.name, describe_type(&value.ty));
    }
    println!("initializers: {}", g.initializers.len());
    let mut counts = BTreeMap::new();
    count_ops(g, &mut counts);
    let total: usize = counts.values().sum();
    println!("nodes: {total} ({} op types)", counts.len());
    let mut by_count: Vec<(&String, &usize)> = counts.iter().collect();
    by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
    for (op, n) in by_count {
        println!("  {n:6}  {op}");
    }
    let missing = unsupported_ops(g, &SessionOptions::default()).map_err(|e| e.to_string())?;
    if missing.is_empty() {
        println!("cpu: runs every op");
    } else {
        let names: Vec<String> = missing.iter().map(|m| m.to_string()).collect();
        println!("cpu: cannot run {}", names.join(", "));
    }
    println!("cuda: not built");
    Ok(())
}
