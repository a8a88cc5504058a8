//! Graph optimizations applied when a session is built, before kernels are chosen: no-op
//! removal, constant affine maps folded into Conv weights, and (at [`OptimizationLevel::All`])
//! chains of element-wise ops fused into single `com.microsoft` kernels, and MatMul with its
//! bias and activation into the CPU provider's internal `MatMulBias`. For a session on a CUDA
//! device ([`optimize_for_device`]) gated MatMulNBits pairs (LLM feed-forwards) become the
//! internal `MatMulNBitsSiluMul`, RMS norms fold into the MatMulNBits products that read them
//! (`NormMatMulNBits`), and the remaining chains of element-wise nodes then become internal
//! `FusedElementwise` nodes, one generated kernel each.
//!
//! Every rewrite fires only when it computes the same function: its constants are
//! constants (initializers that are not graph inputs, `Constant`/`ConstantOfShape` nodes,
//! and Identity/Unsqueeze/Squeeze/Reshape/Flatten of those), the values it
//! removes have no other reader and are neither graph outputs nor read by a subgraph, and
//! the element types are the ones the fused kernel implements. Subgraphs of If/Loop/Scan
//! are optimized the same way, on their own.

mod activation;
mod attention_fuse;
mod conv_fold;
mod cse;
mod elementwise_chain;
mod matmul_fuse;
mod nbits_glu;
mod noop;
mod norm_nbits;
mod rewriter;
mod shapes;
mod skip_norm;
mod sym_shapes;
mod transformer;

use onnx_runtime_ep_api::ExecutionProvider;
use onnx_runtime_ep_cpu::CpuRegistry;
use onnx_runtime_ir::{Attribute, Graph, NodeId};
use rewriter::Rewriter;
use std::collections::{BTreeMap, BTreeSet};

/// How much a session rewrites a graph before running it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum OptimizationLevel {
    /// Run the graph as written.
    None,
    /// Rewrites within standard ONNX ops: no-op nodes removed, BatchNormalization and
    /// per-channel Mul/Add folded into a preceding Conv, per-channel Mul/Add folded into a
    /// preceding BatchNormalization.
    Basic,
    /// Basic, then fusions into `com.microsoft` ops where the kernel exists (FusedConv,
    /// Gelu, QuickGelu, LayerNormalization, ...).
    #[default]
    All,
}

impl std::str::FromStr for OptimizationLevel {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "none" | "off" | "0" => Ok(OptimizationLevel::None),
            "basic" | "1" => Ok(OptimizationLevel::Basic),
            "all" | "extended" | "2" => Ok(OptimizationLevel::All),
            other => Err(format!(
                "unknown optimization level '{other}': use none, basic or all"
            )),
        }
    }
}

/// What [`optimize`] did: rewrites applied by name, and the node count before and after
/// (subgraphs included).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OptimizeReport {
    pub applied: BTreeMap<&'static str, usize>,
    pub nodes_before: usize,
    pub nodes_after: usize,
}

type Pass = fn(&mut Rewriter<'_>, NodeId) -> bool;

/// Pass groups in order; each runs to a fixed point before the next starts.
fn groups(level: OptimizationLevel, device: Passes) -> Vec<Vec<Pass>> {
    let mut g: Vec<Vec<Pass>> = Vec::new();
    if device.standard && level >= OptimizationLevel::Basic {
        g.push(vec![noop::remove_noop]);
        g.push(vec![
            conv_fold::fold_batch_norm,
            conv_fold::fold_mul_add,
            conv_fold::fold_input_affine,
            conv_fold::fold_mul_add_into_batch_norm,
        ]);
    }
    if device.standard && level >= OptimizationLevel::All {
        g.push(vec![
            activation::fuse_hard_swish,
            activation::fuse_silu,
            transformer::fuse_gelu,
            transformer::fuse_fast_gelu,
            transformer::fuse_layer_norm,
        ]);
        g.push(vec![
            activation::fuse_conv_activation,
            matmul_fuse::fuse_matmul_bias,
        ]);
    }
    if level >= OptimizationLevel::All {
        if device.attention {
            g.push(vec![attention_fuse::fuse_attention]);
        }
        if device.nbits_glu {
            g.push(vec![nbits_glu::fuse_nbits_silu_mul]);
        }
        if device.matmul_glu {
            g.push(vec![nbits_glu::fuse_matmul_silu_mul]);
        }
        if device.norm_nbits {
            g.push(vec![norm_nbits::fuse_norm_nbits]);
        }
        if device.skip_norm {
            g.push(vec![skip_norm::fuse_skip_layer_norm]);
        }
    }
    g
}

/// Which rewrites a sweep runs: the standard ones, and the device-only ones a session's
/// provider takes.
#[derive(Clone, Copy, Debug, Default)]
struct Passes {
    /// The rewrites every session gets (no-op removal, folds, fusions into standard and
    /// `com.microsoft` ops, MatMulBias).
    standard: bool,
    /// Element-wise chains into `FusedElementwise` nodes.
    chains: bool,
    /// Gated MatMulNBits pairs into `MatMulNBitsSiluMul`.
    nbits_glu: bool,
    /// Gated MatMul pairs with constant float weights into `MatMulSiluMul`.
    matmul_glu: bool,
    /// RMS norms into the MatMulNBits products that read them (`NormMatMulNBits`).
    norm_nbits: bool,
    /// Residual Add then LayerNormalization into `com.microsoft` SkipLayerNormalization.
    skip_norm: bool,
    /// Written-out scaled dot-product attention into `com.microsoft` MultiHeadAttention
    /// (its patterns read float32 constants: before a precision conversion).
    attention: bool,
}

impl Passes {
    fn for_device(
        level: OptimizationLevel,
        registry: &CpuRegistry,
        device: Option<&dyn ExecutionProvider>,
    ) -> Self {
        let all = level >= OptimizationLevel::All;
        Passes {
            standard: false,
            chains: all && elementwise_chain::enabled(device, registry),
            nbits_glu: all && nbits_glu::enabled(device, registry),
            matmul_glu: all && nbits_glu::float_enabled(device, registry),
            norm_nbits: all && norm_nbits::enabled(device, registry),
            skip_norm: all && skip_norm::enabled(device, registry),
            attention: all && attention_fuse::enabled(device, registry),
        }
    }

    /// The rewrites that read the graph as written: the standard ones and the attention
    /// fusion.
    fn first_stage(self) -> Self {
        Passes {
            standard: true,
            attention: self.attention,
            ..Default::default()
        }
    }

    /// The device-only rewrites that see converted types.
    fn second_stage(self) -> Self {
        Passes {
            standard: false,
            attention: false,
            ..self
        }
    }
}

/// Optimizes `graph` in place for `registry`'s kernels (fusions whose kernel is missing are
/// skipped).
pub fn optimize(
    graph: &mut Graph,
    level: OptimizationLevel,
    registry: &CpuRegistry,
) -> OptimizeReport {
    optimize_for_device(graph, level, registry, None)
}

/// [`optimize`] for a session that runs on `device` (`SessionOptions::device`): on a CUDA
/// device that runs them, at [`OptimizationLevel::All`], chains of element-wise nodes are
/// then fused last into internal `FusedElementwise` nodes (one generated kernel each).
pub fn optimize_for_device(
    graph: &mut Graph,
    level: OptimizationLevel,
    registry: &CpuRegistry,
    device: Option<&dyn ExecutionProvider>,
) -> OptimizeReport {
    let passes = Passes {
        standard: true,
        ..Passes::for_device(level, registry, device)
    };
    run_passes(graph, level, registry, passes)
}

/// [`optimize_for_device`] around a rewrite of the graph's types (the precision
/// conversion): the standard rewrites first, on the graph as written (their patterns read
/// float32 constants), then `convert`, then the device-only ones (element-wise chains are
/// generated for the converted types). Returns both reports; an error of `convert` stops it.
pub(crate) fn optimize_around<R, E>(
    graph: &mut Graph,
    level: OptimizationLevel,
    registry: &CpuRegistry,
    device: Option<&dyn ExecutionProvider>,
    convert: impl FnOnce(&mut Graph) -> Result<R, E>,
) -> Result<(OptimizeReport, R), E> {
    let passes = Passes::for_device(level, registry, device);
    let first = run_passes(graph, level, registry, passes.first_stage());
    let converted = convert(graph)?;
    let second = run_passes(graph, level, registry, passes.second_stage());
    let mut report = first;
    for (k, v) in second.applied {
        *report.applied.entry(k).or_default() += v;
    }
    report.nodes_after = second.nodes_after;
    Ok((report, converted))
}

fn run_passes(
    graph: &mut Graph,
    level: OptimizationLevel,
    registry: &CpuRegistry,
    passes: Passes,
) -> OptimizeReport {
    let mut report = OptimizeReport {
        nodes_before: count_nodes(graph),
        ..Default::default()
    };
    if level == OptimizationLevel::None {
        report.nodes_after = report.nodes_before;
        return report;
    }
    let opset = graph.opset("").unwrap_or(1);
    let mut domains = BTreeSet::new();
    optimize_graph(
        graph,
        level,
        registry,
        opset,
        passes,
        &mut report.applied,
        &mut domains,
    );
    for d in domains {
        if graph.opset(d).is_none() {
            graph.opset_imports.insert(d.into(), 1);
        }
    }
    report.nodes_after = count_nodes(graph);
    report
}

/// Optimizes `graph` and its subgraphs, adding to `domains` those of the nodes it wrote.
fn optimize_graph(
    graph: &mut Graph,
    level: OptimizationLevel,
    registry: &CpuRegistry,
    opset: u64,
    passes: Passes,
    applied: &mut BTreeMap<&'static str, usize>,
    domains: &mut BTreeSet<&'static str>,
) {
    for node in &mut graph.nodes {
        for attr in node.attributes.values_mut() {
            match attr {
                Attribute::Graph(g) => {
                    optimize_graph(g, level, registry, opset, passes, applied, domains);
                }
                Attribute::Graphs(gs) => {
                    for g in gs {
                        optimize_graph(g, level, registry, opset, passes, applied, domains);
                    }
                }
                _ => {}
            }
        }
    }
    let Some(mut rw) = Rewriter::new(graph, registry, opset) else {
        return;
    };
    for group in groups(level, passes) {
        // Each sweep visits every live node; a rewrite refreshes the use lists. Rewrites
        // only ever remove nodes, so this ends; the bound is a guard.
        for _ in 0..16 {
            let mut changed = false;
            for id in rw.live_nodes() {
                if rw.is_dead(id) {
                    continue;
                }
                for pass in &group {
                    if pass(&mut rw, id) {
                        changed = true;
                        // Rewrites only remove nodes or move an output to a node whose old
                        // output lost its readers, so no value gains a second producer.
                        let consistent = rw.refresh();
                        debug_assert!(consistent, "a rewrite produced a value twice");
                        break;
                    }
                }
            }
            if !changed {
                break;
            }
        }
    }
    // Duplicates merge once the rewrites of the graph as written are done (fusions may
    // have made more nodes alike).
    if passes.standard && level >= OptimizationLevel::All {
        cse::merge_duplicates(&mut rw);
    }
    // Last, for a device: element-wise chains into one node each.
    let fused = passes.chains && elementwise_chain::fuse_chains(&mut rw);
    let (done, added) = rw.finish();
    if fused {
        elementwise_chain::restore_topological_order(graph);
    }
    for (k, v) in done {
        *applied.entry(k).or_default() += v;
    }
    domains.extend(added);
}

fn count_nodes(graph: &Graph) -> usize {
    graph
        .nodes
        .iter()
        .map(|n| {
            1 + n
                .attributes
                .values()
                .map(|a| match a {
                    Attribute::Graph(g) => count_nodes(g),
                    Attribute::Graphs(gs) => gs.iter().map(count_nodes).sum(),
                    _ => 0,
                })
                .sum::<usize>()
        })
        .sum()
}
