//! Common subexpressions: a node that computes the same op of the same inputs with the same
//! attributes as an earlier one is dropped and its readers read the earlier node's outputs.
//! Exporters repeat work per layer (transformers' encoders rebuild the attention bias from
//! the mask in every layer, and the shape arithmetic of every reshape); after this, once.
//! Small constants equal by content count as the same input. Only pure nodes merge
//! ([`super::rewriter::is_pure`]), and never one whose output is a graph output or is read
//! by a subgraph.

use super::rewriter::{is_op, is_pure, Rewriter};
use onnx_runtime_ir::{Attribute, NodeId, ValueId};
use std::collections::HashMap;

/// Constants of at most this many elements are compared by content.
const SMALL: usize = 64;

/// Merges the duplicates of `rw`'s graph; true when it merged any.
pub(crate) fn merge_duplicates(rw: &mut Rewriter<'_>) -> bool {
    let mut canon: HashMap<ValueId, ValueId> = HashMap::new();
    let mut by_content: HashMap<String, ValueId> = HashMap::new();
    let mut seen: HashMap<String, NodeId> = HashMap::new();
    let mut merged = 0;
    // Initializers compared by content.
    let small: Vec<(ValueId, String)> =
        rw.g.initializers
            .iter()
            .filter(|(v, t)| t.numel() <= SMALL && !rw.is_graph_input(**v) && !rw.is_pinned(**v))
            .map(|(v, t)| (*v, format!("{:?}|{:?}|{:?}", t.dtype, t.shape, t.bytes())))
            .collect();
    for (v, key) in small {
        let rep = *by_content.entry(key).or_insert(v);
        if rep != v {
            canon.insert(v, rep);
        }
    }
    for id in rw.live_nodes() {
        let node = rw.node(id);
        if !is_pure(node) || node.outputs.is_empty() {
            continue;
        }
        let key = if is_op(node, "Constant") {
            match node.attributes.values().next() {
                Some(Attribute::Tensor(t)) if t.numel() <= SMALL => {
                    format!("const|{:?}|{:?}|{:?}", t.dtype, t.shape, t.bytes())
                }
                Some(a @ (Attribute::Int(_) | Attribute::Ints(_) | Attribute::Float(_))) => {
                    format!("const|{:?}|{a:?}", node.attributes.keys().next())
                }
                _ => continue,
            }
        } else {
            let ins: Vec<Option<usize>> = node
                .inputs
                .iter()
                .map(|i| i.map(|v| canon.get(&v).copied().unwrap_or(v).0))
                .collect();
            format!(
                "{}|{}|{:?}|{:?}|{}",
                node.normalized_domain(),
                node.op_type,
                node.attributes,
                ins,
                node.outputs.len()
            )
        };
        let outputs = node.outputs.clone();
        match seen.get(&key) {
            Some(&first) => {
                if outputs.iter().any(|&o| rw.is_pinned(o)) {
                    continue;
                }
                let reps = rw.node(first).outputs.clone();
                for (o, r) in outputs.into_iter().zip(reps) {
                    canon.insert(o, r);
                    rw.replace_uses(o, r);
                }
                rw.remove(id);
                rw.count("common_subexpression");
                merged += 1;
            }
            None => {
                seen.insert(key, id);
            }
        }
    }
    // Readers of merged initializers read the representative.
    for (&v, &rep) in &canon {
        if rw.g.initializer(v).is_some() {
            rw.replace_uses(v, rep);
        }
    }
    rw.refresh();
    merged > 0
}
