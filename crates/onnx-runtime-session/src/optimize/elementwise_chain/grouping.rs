//! Grouping: the tables the groups grow from ([`Ctx`]), the check that a set of members can
//! be one fused node ([`Ctx::check`]: size limits, convexity, literals, dtypes, outputs with
//! the broadcast shape of all inputs) and its [`Plan`], the values each node reads, the
//! topological order the groups grow in, and the cycle check between contracted groups.

use super::members::Elem;
use crate::optimize::rewriter::Rewriter;
use onnx_runtime_ep_cpu::ops::math::fused_elementwise::{MAX_INPUTS, MAX_INSTRS, MAX_OUTPUTS};
use onnx_runtime_ir::{Attribute, DataType, Graph, Node, NodeId, ValueId};
use std::collections::{BTreeSet, HashMap};

/// Nodes a group may hold (the programs' own limit is on instructions).
const MAX_MEMBERS: usize = 64;

/// Every value `node` reads: its inputs and the outer names its subgraphs use.
pub(super) fn reads(g: &Graph, node: &Node) -> Vec<ValueId> {
    let mut reads: Vec<ValueId> = node.inputs.iter().flatten().copied().collect();
    let mut names = BTreeSet::new();
    for attr in node.attributes.values() {
        match attr {
            Attribute::Graph(sub) => crate::compile::free_names(sub, &mut names),
            Attribute::Graphs(subs) => subs
                .iter()
                .for_each(|s| crate::compile::free_names(s, &mut names)),
            _ => {}
        }
    }
    reads.extend(names.iter().filter_map(|n| g.value_by_name(n)));
    reads
}

fn broadcast(shapes: &[&[usize]]) -> Option<Vec<usize>> {
    let rank = shapes.iter().map(|s| s.len()).max().unwrap_or(0);
    let mut out = vec![1usize; rank];
    for s in shapes {
        let off = rank - s.len();
        for (i, &d) in s.iter().enumerate() {
            let o = &mut out[off + i];
            if *o == 1 {
                *o = d;
            } else if d != 1 && d != *o {
                return None;
            }
        }
    }
    Some(out)
}

/// What the fused node of a group reads and writes.
pub(super) struct Plan {
    /// Node inputs, in first-use order.
    pub(super) inputs: Vec<ValueId>,
    /// Values inlined as literals.
    pub(super) literals: HashMap<ValueId, f64>,
    /// Node outputs, in production order.
    pub(super) outputs: Vec<ValueId>,
}

/// The tables the grouping works from.
pub(super) struct Ctx {
    pub(super) elems: Vec<Option<Elem>>,
    /// The dtype of each member candidate (by node id).
    pub(super) dtype: Vec<Option<DataType>>,
    /// Topological position by node id (`usize::MAX` for dead nodes).
    pub(super) pos: Vec<usize>,
    pub(super) reads: Vec<Vec<ValueId>>,
    /// Static shapes and known ranks by value.
    pub(super) shapes: Vec<Option<Vec<usize>>>,
    pub(super) ranks: Vec<Option<usize>>,
    /// One-element constants by value (shape, value).
    pub(super) smalls: HashMap<ValueId, (Vec<usize>, f64)>,
    /// Element types by value where known.
    pub(super) vtypes: Vec<Option<DataType>>,
    /// DFS marks for the convexity check.
    pub(super) mark: Vec<u32>,
    pub(super) stamp: u32,
}

impl Ctx {
    pub(super) fn elem(&self, id: NodeId) -> &Elem {
        self.elems[id.0].as_ref().expect("a member candidate")
    }

    /// Whether `v` depends on a member of `members` (sorted by position) through nodes
    /// outside it.
    fn reaches(&mut self, rw: &Rewriter<'_>, v: ValueId, members: &[NodeId], lo: usize) -> bool {
        self.stamp += 1;
        let stamp = self.stamp;
        let mut stack = vec![v];
        while let Some(v) = stack.pop() {
            let Some(p) = rw.producer(v) else { continue };
            if members.contains(&p) {
                return true;
            }
            if self.pos[p.0] < lo || self.mark[p.0] == stamp {
                continue;
            }
            self.mark[p.0] = stamp;
            stack.extend(self.reads[p.0].iter().copied());
        }
        false
    }

    /// The plan of a group of `members` (in topological order), if it can be one node.
    pub(super) fn check(&mut self, rw: &Rewriter<'_>, members: &[NodeId]) -> Option<Plan> {
        if members.len() > MAX_MEMBERS
            || members
                .iter()
                .map(|&m| self.elem(m).instrs())
                .sum::<usize>()
                > MAX_INSTRS
        {
            return None;
        }
        let produced: HashMap<ValueId, usize> = members
            .iter()
            .enumerate()
            .map(|(i, &m)| (self.elem(m).out, i))
            .collect();
        let mut ext: Vec<ValueId> = Vec::new();
        for &m in members {
            for &v in &self.elem(m).inputs {
                if !produced.contains_key(&v) && !ext.contains(&v) {
                    ext.push(v);
                }
            }
        }
        // Convex: no outside path from a member back into the group.
        let lo = members.iter().map(|m| self.pos[m.0]).min()?;
        for &v in &ext {
            if self.reaches(rw, v, members, lo) {
                return None;
            }
        }
        // Literals: one-element constants that cannot change the output's rank.
        let max_rank = ext
            .iter()
            .filter(|v| !self.smalls.contains_key(v))
            .filter_map(|v| self.ranks[v.0])
            .max();
        let mut literals = HashMap::new();
        let mut inputs = Vec::new();
        for &v in &ext {
            match self.smalls.get(&v) {
                Some((shape, c)) if shape.is_empty() || max_rank >= Some(shape.len()) => {
                    literals.insert(v, *c);
                }
                _ => inputs.push(v),
            }
        }
        if inputs.is_empty() || inputs.len() > MAX_INPUTS {
            return None;
        }
        // Operands that must be literals (an exponent of another dtype) and inputs of the
        // group's dtype.
        let dtype = self.dtype[members[0].0]?;
        for &m in members {
            let e = self.elem(m);
            for (v, &same) in e.inputs.iter().zip(&e.same) {
                if !same && self.vtypes[v.0] != Some(dtype) && !literals.contains_key(v) {
                    return None;
                }
            }
        }
        let outputs: Vec<ValueId> = members
            .iter()
            .map(|&m| self.elem(m).out)
            .filter(|&v| rw.is_pinned(v) || rw.consumers(v).iter().any(|c| !members.contains(c)))
            .collect();
        if outputs.is_empty() || outputs.len() > MAX_OUTPUTS {
            return None;
        }
        // Every output must have the broadcast shape of all inputs: it depends on each of
        // them, or static shapes say so.
        let index: HashMap<ValueId, usize> =
            inputs.iter().enumerate().map(|(i, &v)| (v, i)).collect();
        let mut deps: HashMap<ValueId, u64> = HashMap::new();
        for &m in members {
            let e = self.elem(m);
            let mut mask = 0u64;
            for v in &e.inputs {
                mask |= match (deps.get(v), index.get(v)) {
                    (Some(&d), _) => d,
                    (None, Some(&i)) => 1 << i,
                    _ => 0,
                };
            }
            deps.insert(e.out, mask);
        }
        let full = (1u64 << inputs.len()) - 1;
        let all_depend = outputs.iter().all(|o| deps.get(o) == Some(&full));
        if !all_depend {
            let shapes: Option<Vec<&[usize]>> =
                inputs.iter().map(|v| self.shapes[v.0].as_deref()).collect();
            let want = broadcast(&shapes?)?;
            if !outputs
                .iter()
                .all(|o| self.shapes[o.0].as_deref() == Some(want.as_slice()))
            {
                return None;
            }
        }
        Some(Plan {
            inputs,
            literals,
            outputs,
        })
    }
}

/// The live nodes in a topological order (earliest file position first), or `None` on a
/// cycle (left for the compiler to report).
pub(super) fn topo(
    rw: &Rewriter<'_>,
    live: &[NodeId],
    reads: &[Vec<ValueId>],
) -> Option<Vec<NodeId>> {
    let n = rw.g.nodes.len();
    let mut indegree = vec![0usize; n];
    let mut users: Vec<Vec<NodeId>> = vec![Vec::new(); n];
    for &id in live {
        let mut deps: Vec<NodeId> = reads[id.0]
            .iter()
            .filter_map(|&v| rw.producer(v))
            .filter(|&p| p != id)
            .collect();
        deps.sort();
        deps.dedup();
        indegree[id.0] = deps.len();
        for p in deps {
            users[p.0].push(id);
        }
    }
    let mut ready: BTreeSet<NodeId> = live
        .iter()
        .copied()
        .filter(|i| indegree[i.0] == 0)
        .collect();
    let mut order = Vec::with_capacity(live.len());
    while let Some(id) = ready.pop_first() {
        order.push(id);
        for &u in &users[id.0] {
            indegree[u.0] -= 1;
            if indegree[u.0] == 0 {
                ready.insert(u);
            }
        }
    }
    (order.len() == live.len()).then_some(order)
}

/// A group on a cycle of the graph with every group contracted to one node (the smallest of
/// those left unordered), if there is one.
pub(super) fn cyclic_group(
    rw: &Rewriter<'_>,
    order: &[NodeId],
    reads: &[Vec<ValueId>],
    groups: &[Vec<NodeId>],
) -> Option<usize> {
    let n = rw.g.nodes.len();
    // Super node of each node: groups first, then single nodes.
    let mut sup: Vec<usize> = (0..n).map(|i| groups.len() + i).collect();
    for (g, members) in groups.iter().enumerate() {
        for m in members {
            sup[m.0] = g;
        }
    }
    let total = groups.len() + n;
    let mut deps: Vec<BTreeSet<usize>> = vec![BTreeSet::new(); total];
    let mut present = vec![false; total];
    for &id in order {
        let s = sup[id.0];
        present[s] = true;
        for &v in &reads[id.0] {
            if let Some(p) = rw.producer(v) {
                if sup[p.0] != s {
                    deps[s].insert(sup[p.0]);
                }
            }
        }
    }
    let mut indegree: Vec<usize> = deps.iter().map(BTreeSet::len).collect();
    let mut users: Vec<Vec<usize>> = vec![Vec::new(); total];
    for (s, d) in deps.iter().enumerate() {
        for &p in d {
            users[p].push(s);
        }
    }
    let mut ready: Vec<usize> = (0..total)
        .filter(|&s| present[s] && indegree[s] == 0)
        .collect();
    let mut done = vec![false; total];
    while let Some(s) = ready.pop() {
        done[s] = true;
        for &u in &users[s] {
            indegree[u] -= 1;
            if indegree[u] == 0 {
                ready.push(u);
            }
        }
    }
    (0..groups.len())
        .filter(|&g| !done[g])
        .min_by_key(|&g| groups[g].len())
}
