//! Chains of element-wise nodes become one internal `FusedElementwise` node, for sessions on
//! a CUDA device: a GELU or layer-norm tail written out as 6 to 10 nodes, Conv -> Sigmoid ->
//! Mul, a bias add before an activation, run as one generated kernel (one launch, one pass
//! over memory) instead of one launch per node. The CPU provider's kernel of the same op is
//! the fallback (see `onnx_runtime_ep_cpu::ops::math::fused_elementwise` for the program).
//!
//! The pass runs last, after the fusions into com.microsoft ops and MatMulBias (the device
//! runs those too), and groups the remaining element-wise nodes:
//! - members are the unary math ops and activations, the broadcasting binary arithmetic,
//!   Max/Min/Sum/Mean, PRelu, Clip with constant bounds and the com.microsoft GELUs, whose
//!   values all have one float dtype that the graph declares or that follows from its
//!   declared inputs and constants (nothing is fused where a dtype is unknown);
//! - a group is grown node by node in topological order from its producers' groups, and a
//!   merge is taken only when the group stays convex (no path leaves it and comes back, so
//!   the fused node can be placed), and every value the group hands out has the shape of the
//!   broadcast of all its inputs (each depends on every input, or static shapes prove it);
//! - one-element constants become literals in the program (rank 0 always; rank r when an
//!   input of rank >= r is known, so no rank is lost), other constants stay inputs;
//! - the outputs are the member values read outside the group, by subgraphs, or graph
//!   outputs, keeping their names; the fused node takes the place of the group's last node
//!   and the node list is put back in topological order.
//!
//! This module holds the pass entry ([`enabled`], [`fuse_chains`]: tables, group growth in
//! topological order, emission) and [`restore_topological_order`]; `members` says what each
//! candidate node computes, `dtypes` which ops carry a dtype on to the chains they feed,
//! `grouping` the group checks (convexity, limits, literals, output shapes) and the cycle
//! check between groups, `emit` the rewrite of a group into the fused node.

mod dtypes;
mod emit;
mod grouping;
mod members;

use super::rewriter::Rewriter;
use dtypes::{is_float, keeps_dtype};
use emit::emit;
use grouping::{cyclic_group, reads, topo, Ctx};
use members::{elem, small_const, Elem};
use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ep_cpu::ops::math::fused_elementwise::OP;
use onnx_runtime_ep_cpu::{CpuRegistry, INTERNAL_DOMAIN};
use onnx_runtime_ir::{DataType, Graph, Node, NodeId, ValueId};
use std::collections::HashMap;

const MS: &str = "com.microsoft";

/// Whether sessions on `device` get fused chains: a CUDA device that runs `FusedElementwise`,
/// with the CPU kernel in `registry` to fall back on.
pub(crate) fn enabled(device: Option<&dyn ExecutionProvider>, registry: &CpuRegistry) -> bool {
    super::rewriter::device_runs(device, registry, INTERNAL_DOMAIN, OP)
}

/// Fuses the chains of `rw`'s graph; true when it fused any.
pub(crate) fn fuse_chains(rw: &mut Rewriter<'_>) -> bool {
    let live = rw.live_nodes();
    let n_nodes = rw.g.nodes.len();
    let n_values = rw.g.values.len();
    let elems: Vec<Option<Elem>> = (0..n_nodes)
        .map(|i| {
            let id = NodeId(i);
            if rw.is_dead(id) {
                None
            } else {
                elem(rw, id)
            }
        })
        .collect();
    if elems.iter().flatten().count() < 2 {
        return false;
    }
    let mut reads_of = vec![Vec::new(); n_nodes];
    for &id in &live {
        reads_of[id.0] = reads(rw.g, rw.node(id));
    }
    // Topological order of the live nodes (Kahn, earliest file position first).
    let Some(order) = topo(rw, &live, &reads_of) else {
        return false;
    };
    let mut pos = vec![usize::MAX; n_nodes];
    for (i, id) in order.iter().enumerate() {
        pos[id.0] = i;
    }
    // Element types: declared, constants, then through the candidates.
    let mut vtypes: Vec<Option<DataType>> = (0..n_values)
        .map(|i| {
            let v = ValueId(i);
            if let Some(t) = rw.g.initializer(v) {
                return Some(t.dtype);
            }
            rw.g.value(v).dtype().filter(|&d| d != DataType::Undefined)
        })
        .collect();
    let mut smalls = HashMap::new();
    let mut dtype = vec![None; n_nodes];
    for &id in &order {
        let Some(e) = &elems[id.0] else {
            // Ops whose outputs have their first input's dtype (the T -> T of their type
            // constraints) carry a known dtype on to the chains they feed.
            let node = rw.node(id);
            let outs = keeps_dtype(node);
            if outs > 0 {
                if let Some(Some(x)) = node.inputs.first() {
                    let d = vtypes[x.0].or_else(|| rw.known_dtype(*x));
                    for &o in node.outputs.iter().take(outs) {
                        if vtypes[o.0].is_none() {
                            vtypes[o.0] = d;
                        }
                    }
                }
            }
            continue;
        };
        for &v in &e.inputs {
            if vtypes[v.0].is_none() {
                vtypes[v.0] = rw.known_dtype(v);
            }
            if let std::collections::hash_map::Entry::Vacant(slot) = smalls.entry(v) {
                if let Some(c) = small_const(rw, v) {
                    slot.insert(c);
                }
            }
        }
        let from_inputs = e
            .inputs
            .iter()
            .zip(&e.same)
            .find(|(_, s)| **s)
            .and_then(|(v, _)| vtypes[v.0]);
        let d = vtypes[e.out.0].or(from_inputs);
        if vtypes[e.out.0].is_none() {
            vtypes[e.out.0] = d;
        }
        let Some(d) = d.filter(|&d| is_float(d)) else {
            continue;
        };
        let typed = e
            .inputs
            .iter()
            .zip(&e.same)
            .all(|(v, &same)| match vtypes[v.0] {
                Some(t) if same => t == d,
                // Pow's exponent: its own dtype (checked against literals later).
                Some(t) => t.is_float() || t.is_integer(),
                None => false,
            });
        if typed {
            dtype[id.0] = Some(d);
        }
    }
    let mut shapes = vec![None; n_values];
    let mut ranks = vec![None; n_values];
    for i in 0..n_values {
        let v = ValueId(i);
        let s = rw
            .static_shape(v)
            .or_else(|| rw.g.initializer(v).map(|t| t.shape.clone()))
            .or_else(|| smalls.get(&v).map(|(s, _)| s.clone()));
        ranks[i] = s
            .as_ref()
            .map(Vec::len)
            .or_else(|| rw.g.value(v).shape().map(|s| s.rank()));
        shapes[i] = s;
    }
    let mut ctx = Ctx {
        elems,
        dtype,
        pos,
        reads: reads_of,
        shapes,
        ranks,
        smalls,
        vtypes,
        mark: vec![0; n_nodes],
        stamp: 0,
    };

    // Grow groups in topological order.
    let mut group_of: Vec<Option<usize>> = vec![None; n_nodes];
    let mut groups: Vec<Vec<NodeId>> = Vec::new();
    for &id in &order {
        let Some(d) = ctx.dtype[id.0] else { continue };
        let mut producers: Vec<usize> = Vec::new();
        for &v in &ctx.elem(id).inputs {
            if let Some(g) = rw.producer(v).and_then(|p| group_of[p.0]) {
                if ctx.dtype[groups[g][0].0] == Some(d) && !producers.contains(&g) {
                    producers.push(g);
                }
            }
        }
        let mut tries: Vec<Vec<usize>> = Vec::new();
        if !producers.is_empty() {
            tries.push(producers.clone());
            if producers.len() > 1 {
                let mut by_size = producers.clone();
                by_size.sort_by_key(|&g| std::cmp::Reverse(groups[g].len()));
                tries.extend(by_size.into_iter().map(|g| vec![g]));
            }
        }
        let mut joined = None;
        for t in tries {
            let mut members: Vec<NodeId> = t.iter().flat_map(|&g| groups[g].clone()).collect();
            members.push(id);
            members.sort_by_key(|m| ctx.pos[m.0]);
            if ctx.check(rw, &members).is_some() {
                joined = Some((t, members));
                break;
            }
        }
        match joined {
            Some((t, members)) => {
                let keep = t[0];
                for &g in &t[1..] {
                    groups[g].clear();
                }
                for &m in &members {
                    group_of[m.0] = Some(keep);
                }
                groups[keep] = members;
            }
            None => {
                group_of[id.0] = Some(groups.len());
                groups.push(vec![id]);
            }
        }
    }
    groups.retain(|g| g.len() >= 2);
    if groups.is_empty() {
        return false;
    }
    // Each group is convex on its own; drop groups until contracting them all leaves no
    // cycle between groups either.
    while let Some(bad) = cyclic_group(rw, &order, &ctx.reads, &groups) {
        groups.remove(bad);
    }
    let mut fused = false;
    for members in &groups {
        let Some(plan) = ctx.check(rw, members) else {
            continue;
        };
        emit(rw, &ctx, members, &plan);
        fused = true;
    }
    fused
}

/// Puts `graph`'s nodes back in a topological order (the fused nodes take their group's last
/// position, which readers of an earlier member's value may precede).
pub(crate) fn restore_topological_order(graph: &mut Graph) {
    let Ok(order) = crate::compile::topological_order(graph) else {
        return;
    };
    if order.iter().enumerate().all(|(i, id)| id.0 == i) {
        return;
    }
    let mut slots: Vec<Option<Node>> = std::mem::take(&mut graph.nodes)
        .into_iter()
        .map(Some)
        .collect();
    for id in order {
        if let Some(node) = slots[id.0].take() {
            graph.insert_node(node);
        }
    }
}
