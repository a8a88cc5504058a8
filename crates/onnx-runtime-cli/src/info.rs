//! `onnx-runtime info`: what a model is made of and what each provider cannot run.

use onnx_runtime_ir::{Attribute, Graph};
use onnx_runtime_loader::Model;
use onnx_runtime_session::{
    describe_type, optimize, unsupported_ops, OptimizationLevel, Session, SessionOptions,
};
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

/// `info MODEL [--ep cuda]`: `cuda_options` holds the session options (optimization level) a CUDA
/// placement report builds its session with.
pub fn info(
    path: &Path,
    level: OptimizationLevel,
    cuda_options: Option<SessionOptions>,
) -> Result<(), String> {
    if path.is_dir() {
        return crate::generate::info_folder(path);
    }
    let model = Model::load(path).map_err(|e| e.to_string())?;
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
    // The inputs a caller feeds first; initializers that are also listed as inputs (every
    // weight, in models of IR version 3) folded into one line.
    println!("inputs:");
    let mut with_init = Vec::new();
    for &v in &g.inputs {
        let value = g.value(v);
        if g.initializer(v).is_some() {
            with_init.push(value.name.as_str());
        } else {
            println!("  {}: {}", value.name, describe_type(&value.ty));
        }
    }
    if !with_init.is_empty() {
        println!(
            "  {}",
            folded_initializers(&with_init, model.ir_version, level)
        );
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
    if level != OptimizationLevel::None {
        let mut optimized = g.clone();
        if model.ir_version < 4 {
            // As Session::from_model: initializers listed as inputs are constants here.
            let inits = &optimized.initializers;
            let keep: Vec<_> = optimized
                .inputs
                .iter()
                .copied()
                .filter(|v| !inits.contains_key(v))
                .collect();
            optimized.inputs = keep;
        }
        let report = optimize(&mut optimized, level, onnx_runtime_ep_cpu::registry());
        println!(
            "after --optimize {level:?}: {} nodes (from {})",
            report.nodes_after, report.nodes_before
        );
        for (pass, n) in &report.applied {
            println!("  {n:6}  {pass}");
        }
        let mut after = BTreeMap::new();
        count_ops(&optimized, &mut after);
        let mut by_count: Vec<(&String, &usize)> = after.iter().collect();
        by_count.sort_by(|a, b| b.1.cmp(a.1).then(a.0.cmp(b.0)));
        let ops: Vec<String> = by_count.iter().map(|(op, n)| format!("{op} {n}")).collect();
        println!("  ops: {}", ops.join(", "));
    }
    let missing = unsupported_ops(g, &SessionOptions::default()).map_err(|e| e.to_string())?;
    if missing.is_empty() {
        println!("cpu: runs every op");
    } else {
        let names: Vec<String> = missing.iter().map(|m| m.to_string()).collect();
        println!("cpu: cannot run {}", names.join(", "));
    }
    let cuda = cuda_missing(g);
    if cuda.is_empty() {
        println!("cuda: has a kernel for every op");
    } else {
        println!(
            "cuda: no kernel for {} (these would run on the CPU)",
            cuda.join(", ")
        );
    }
    if let Some(options) = cuda_options {
        cuda_placement(path, g, options)?;
    }
    Ok(())
}

/// Ops whose output shape depends on their input values: on the device they copy a count to
/// the host (one synchronization per call), and a CUDA graph cannot capture them.
const DATA_DEPENDENT: &[&str] = &["NonZero", "Compress", "Unique", "NonMaxSuppression"];

/// Builds a session on GPU 0 and prints where its nodes run: the nodes placed on the CPU
/// grouped by op and reason, then the device ops that synchronize.
fn cuda_placement(path: &Path, graph: &Graph, options: SessionOptions) -> Result<(), String> {
    let device = match crate::cuda_provider() {
        Ok(d) => d,
        Err(e) => {
            println!("cuda placement: not known here ({e}); the line above is from the registry");
            return Ok(());
        }
    };
    let session = Session::from_file(
        path,
        SessionOptions {
            device: Some(device),
            ..options
        },
    )
    .map_err(|e| e.to_string())?;
    let hosts = session.host_nodes();
    println!(
        "cuda placement: {} nodes on the device, {} on the CPU",
        session.device_nodes(),
        hosts.len()
    );
    // (op, reason) -> node names, in graph order of first appearance.
    let mut groups: Vec<((String, String), Vec<String>)> = Vec::new();
    for h in hosts {
        let key = (h.op.clone(), h.reason.clone());
        match groups.iter_mut().find(|(k, _)| *k == key) {
            Some((_, nodes)) => nodes.push(h.node.clone()),
            None => groups.push((key, vec![h.node.clone()])),
        }
    }
    for ((op, reason), nodes) in &groups {
        const SHOWN: usize = 3;
        let mut list = nodes[..nodes.len().min(SHOWN)].join(", ");
        if nodes.len() > SHOWN {
            list.push_str(&format!(", ... ({} more)", nodes.len() - SHOWN));
        }
        println!("  {:6}  {op}: {reason} [{list}]", nodes.len());
    }
    let on_host: std::collections::BTreeSet<&str> = hosts.iter().map(|h| h.node.as_str()).collect();
    let mut syncing: BTreeMap<&str, usize> = BTreeMap::new();
    for node in &graph.nodes {
        let shown = node.describe();
        if node.normalized_domain().is_empty()
            && DATA_DEPENDENT.contains(&node.op_type.as_str())
            && !on_host.contains(shown.as_str())
        {
            *syncing.entry(node.op_type.as_str()).or_default() += 1;
        }
    }
    let blockers = &session.capture_report().blockers;
    if blockers.is_empty() {
        println!("  cuda graph: every node can be recorded (runs replay from the third on)");
    } else {
        crate::bench::print_capture(&session.capture_report());
    }
    if !syncing.is_empty() {
        let list: Vec<String> = syncing.iter().map(|(op, n)| format!("{op} {n}")).collect();
        println!(
            "  device ops whose output shape depends on their values (each call copies a count \
             to the host, and a CUDA graph cannot capture them): {}",
            list.join(", ")
        );
    }
    Ok(())
}

/// One line for the inputs that have an initializer: how many, whether a run may feed them,
/// and the first few names.
fn folded_initializers(names: &[&str], ir_version: i64, level: OptimizationLevel) -> String {
    const SHOWN: usize = 3;
    // As Session::from_model: with IR version < 4 and optimization on, they are constants.
    let role = if ir_version < 4 && level != OptimizationLevel::None {
        format!(
            "constants here (IR version {ir_version} with --optimize {}; with --optimize none, \
             --input NAME=FILE may override them)",
            format!("{level:?}").to_lowercase()
        )
    } else {
        "defaults that --input NAME=FILE may override".to_string()
    };
    let mut list = names[..names.len().min(SHOWN)].join(", ");
    if names.len() > SHOWN {
        list.push_str(&format!(", ... ({} more)", names.len() - SHOWN));
    }
    let n = names.len();
    let what = if n == 1 { "input has" } else { "inputs have" };
    format!("+ {n} {what} an initializer, {role}: {list}")
}

/// Ops of `graph` (and its subgraphs) the CUDA provider has no kernel for, from its registry
/// (no GPU needed).
fn cuda_missing(graph: &Graph) -> Vec<String> {
    let registry = onnx_runtime_ep_cuda::ops::registry();
    let mut missing = std::collections::BTreeSet::new();
    fn walk(
        graph: &Graph,
        opsets: &BTreeMap<String, u64>,
        registry: &onnx_runtime_ep_cuda::ops::Registry,
        out: &mut std::collections::BTreeSet<String>,
    ) {
        for node in &graph.nodes {
            let domain = node.normalized_domain();
            let opset = opsets.get(domain).copied().unwrap_or(0);
            if !registry.contains(domain, &node.op_type, opset) {
                out.insert(if domain.is_empty() {
                    format!("{} (opset {opset})", node.op_type)
                } else {
                    format!("{domain}::{} (opset {opset})", node.op_type)
                });
            }
            for attr in node.attributes.values() {
                match attr {
                    Attribute::Graph(g) => walk(g, opsets, registry, out),
                    Attribute::Graphs(gs) => gs.iter().for_each(|g| walk(g, opsets, registry, out)),
                    _ => {}
                }
            }
        }
    }
    let opsets: BTreeMap<String, u64> = graph
        .opset_imports
        .iter()
        .map(|(d, v)| {
            (
                if d == "ai.onnx" {
                    String::new()
                } else {
                    d.clone()
                },
                *v,
            )
        })
        .collect();
    walk(graph, &opsets, &registry, &mut missing);
    missing.into_iter().collect()
}
