//! Tree ensembles: TreeEnsemble (ai.onnx.ml 5), TreeEnsembleRegressor and
//! TreeEnsembleClassifier (ai.onnx.ml 1 and 3). Both attribute layouts build one [`Forest`].

use super::super::common::{from_f64s, invalid, one};
use super::linear::Labels;
use super::{argmax, features, score_tensor, PostTransform};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{Attribute, DataType, Node};
use std::collections::HashMap;

#[derive(Clone, Copy, Debug, PartialEq)]
enum Child {
    Node(usize),
    Leaf(usize),
}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Mode {
    Leq,
    Lt,
    Gte,
    Gt,
    Eq,
    Neq,
    Member,
}

struct TreeNode {
    feature: usize,
    mode: Mode,
    split: f64,
    set: Vec<f64>,
    missing_true: bool,
    t: Child,
    f: Child,
}

#[derive(Clone, Copy, PartialEq)]
enum Agg {
    Sum,
    Average,
    Min,
    Max,
}

struct Forest {
    nodes: Vec<TreeNode>,
    roots: Vec<Child>,
    /// (target, weight) pairs of each leaf.
    leaves: Vec<Vec<(usize, f64)>>,
    agg: Agg,
    n_targets: usize,
    features: usize,
}

impl Forest {
    fn check(&self, node: &Node) -> Result<(), EpError> {
        let bad = |m: String| EpError::invalid_attribute(node, "nodes", m);
        let ok = |c: &Child| match *c {
            Child::Node(i) => i < self.nodes.len(),
            Child::Leaf(i) => i < self.leaves.len(),
        };
        if !self.roots.iter().all(ok) || !self.nodes.iter().all(|n| ok(&n.t) && ok(&n.f)) {
            return Err(bad("a child or root index is out of range".into()));
        }
        if self
            .leaves
            .iter()
            .flatten()
            .any(|(t, _)| *t >= self.n_targets)
        {
            return Err(bad(format!(
                "a leaf target is outside 0..{}",
                self.n_targets
            )));
        }
        Ok(())
    }

    fn leaf(&self, node: &str, mut c: Child, x: &[f64]) -> Result<usize, EpError> {
        for _ in 0..=self.nodes.len() {
            match c {
                Child::Leaf(l) => return Ok(l),
                Child::Node(i) => {
                    let n = &self.nodes[i];
                    let v = x[n.feature];
                    let hit = if v.is_nan() {
                        n.missing_true
                    } else {
                        match n.mode {
                            Mode::Leq => v <= n.split,
                            Mode::Lt => v < n.split,
                            Mode::Gte => v >= n.split,
                            Mode::Gt => v > n.split,
                            Mode::Eq => v == n.split,
                            Mode::Neq => v != n.split,
                            Mode::Member => n.set.contains(&v),
                        }
                    };
                    c = if hit { n.t } else { n.f };
                }
            }
        }
        Err(invalid(node, "the tree has a cycle"))
    }

    /// Aggregated scores [n, n_targets] of the rows of `x`.
    fn predict(&self, node: &str, x: &Tensor) -> Result<(usize, Vec<f64>), EpError> {
        let v = features(node, x)?;
        let c = if x.rank() <= 1 {
            x.numel()
        } else {
            *x.shape().last().expect("rank")
        };
        let n = v.len().checked_div(c).unwrap_or(0);
        if c < self.features {
            return Err(invalid(
                node,
                format!(
                    "X has {c} features but the trees read feature {}",
                    self.features - 1
                ),
            ));
        }
        let k = self.n_targets;
        let mut out = vec![0f64; n * k];
        let mut seen = vec![false; k];
        for r in 0..n {
            let row = &v[r * c..(r + 1) * c];
            let o = &mut out[r * k..(r + 1) * k];
            seen.iter_mut().for_each(|s| *s = false);
            for &root in &self.roots {
                for &(t, w) in &self.leaves[self.leaf(node, root, row)?] {
                    o[t] = match (self.agg, seen[t]) {
                        (Agg::Sum | Agg::Average, _) => o[t] + w,
                        (_, false) => w,
                        (Agg::Min, true) => o[t].min(w),
                        (Agg::Max, true) => o[t].max(w),
                    };
                    seen[t] = true;
                }
            }
            if self.agg == Agg::Average && !self.roots.is_empty() {
                o.iter_mut().for_each(|s| *s /= self.roots.len() as f64);
            }
        }
        Ok((n, out))
    }
}

fn tensor_f64s(node: &Node, name: &str) -> Result<Option<Vec<f64>>, EpError> {
    match node.attribute(name) {
        Some(Attribute::Tensor(t)) => {
            let t = Tensor::from_tensor_data(t)
                .map_err(|e| EpError::invalid_attribute(node, name, e))?;
            Ok(Some(t.to_f64_vec().ok_or_else(|| {
                EpError::invalid_attribute(node, name, "must be numeric")
            })?))
        }
        Some(Attribute::Floats(v)) => Ok(Some(v.iter().map(|&x| x as f64).collect())),
        Some(a) => Err(EpError::invalid_attribute(
            node,
            name,
            format!("unexpected kind {:?}", a.kind()),
        )),
        None => Ok(None),
    }
}

fn usizes(node: &Node, name: &str) -> Result<Vec<usize>, EpError> {
    attrs::ints(node, name)?
        .into_iter()
        .map(|v| {
            usize::try_from(v)
                .map_err(|_| EpError::invalid_attribute(node, name, format!("negative value {v}")))
        })
        .collect()
}

fn mode_code(node: &Node, c: i64) -> Result<Mode, EpError> {
    Ok(match c {
        0 => Mode::Leq,
        1 => Mode::Lt,
        2 => Mode::Gte,
        3 => Mode::Gt,
        4 => Mode::Eq,
        5 => Mode::Neq,
        6 => Mode::Member,
        _ => {
            return Err(EpError::invalid_attribute(
                node,
                "nodes_modes",
                format!("unknown mode {c}"),
            ))
        }
    })
}

/// TreeEnsemble-5's layout: nodes and leaves in separate arrays.
fn forest_v5(node: &Node) -> Result<Forest, EpError> {
    let need = |n: &str| {
        tensor_f64s(node, n)?.ok_or_else(|| EpError::invalid_attribute(node, n, "is required"))
    };
    let splits = need("nodes_splits")?;
    let modes = need("nodes_modes")?;
    let feats = usizes(node, "nodes_featureids")?;
    let tids = usizes(node, "nodes_truenodeids")?;
    let fids = usizes(node, "nodes_falsenodeids")?;
    let tleaf = attrs::ints(node, "nodes_trueleafs")?;
    let fleaf = attrs::ints(node, "nodes_falseleafs")?;
    let missing = attrs::ints(node, "nodes_missing_value_tracks_true")?;
    let targets = usizes(node, "leaf_targetids")?;
    let weights = need("leaf_weights")?;
    let roots = usizes(node, "tree_roots")?;
    let members = tensor_f64s(node, "membership_values")?.unwrap_or_default();
    let n = splits.len();
    if [
        modes.len(),
        feats.len(),
        tids.len(),
        fids.len(),
        tleaf.len(),
        fleaf.len(),
    ]
    .iter()
    .any(|&l| l != n)
        || targets.len() != weights.len()
    {
        return Err(EpError::invalid_attribute(
            node,
            "nodes",
            "node and leaf attribute lists differ in length",
        ));
    }
    let mut sets = members.split(|v| v.is_nan()).map(|s| s.to_vec());
    let child = |leaf: i64, i: usize| {
        if leaf != 0 {
            Child::Leaf(i)
        } else {
            Child::Node(i)
        }
    };
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let mode = mode_code(node, modes[i] as i64)?;
        let set = if mode == Mode::Member {
            sets.next().ok_or_else(|| {
                EpError::invalid_attribute(node, "membership_values", "too few sets")
            })?
        } else {
            vec![]
        };
        nodes.push(TreeNode {
            feature: feats[i],
            mode,
            split: splits[i],
            set,
            missing_true: missing.get(i).is_some_and(|&m| m != 0),
            t: child(tleaf[i], tids[i]),
            f: child(fleaf[i], fids[i]),
        });
    }
    let roots = roots
        .iter()
        .map(|&r| match nodes.get(r) {
            Some(n) if n.t == n.f && matches!(n.t, Child::Leaf(_)) => Child::Leaf(r),
            _ => Child::Node(r),
        })
        .collect();
    let agg = match attrs::int(node, "aggregate_function", 1)? {
        0 => Agg::Average,
        1 => Agg::Sum,
        2 => Agg::Min,
        3 => Agg::Max,
        v => {
            return Err(EpError::invalid_attribute(
                node,
                "aggregate_function",
                format!("unknown value {v}"),
            ))
        }
    };
    let n_targets = attrs::opt_int(node, "n_targets")?
        .map(|v| v.max(0) as usize)
        .unwrap_or_else(|| targets.iter().max().map_or(1, |m| m + 1));
    let f = Forest {
        features: nodes.iter().map(|n| n.feature + 1).max().unwrap_or(0),
        nodes,
        roots,
        leaves: targets
            .iter()
            .zip(&weights)
            .map(|(&t, &w)| vec![(t, w)])
            .collect(),
        agg,
        n_targets,
    };
    f.check(node)?;
    Ok(f)
}

/// The v1/v3 layout: (tree id, node id) pairs, leaves marked `LEAF`, targets listed apart
/// under `prefix` (`target` or `class`).
fn forest_v1(node: &Node, prefix: &str, n_targets: usize) -> Result<Forest, EpError> {
    let treeids = attrs::ints(node, "nodes_treeids")?;
    let nodeids = attrs::ints(node, "nodes_nodeids")?;
    let feats = usizes(node, "nodes_featureids")?;
    let modes = attrs::opt_strings(node, "nodes_modes")?.unwrap_or_default();
    let values = match tensor_f64s(node, "nodes_values_as_tensor")? {
        Some(v) => v,
        None => tensor_f64s(node, "nodes_values")?.unwrap_or_default(),
    };
    let tids = attrs::ints(node, "nodes_truenodeids")?;
    let fids = attrs::ints(node, "nodes_falsenodeids")?;
    let missing = attrs::ints(node, "nodes_missing_value_tracks_true")?;
    let n = treeids.len();
    if [
        nodeids.len(),
        feats.len(),
        modes.len(),
        values.len(),
        tids.len(),
        fids.len(),
    ]
    .iter()
    .any(|&l| l != n)
    {
        return Err(EpError::invalid_attribute(
            node,
            "nodes",
            "node attribute lists differ in length",
        ));
    }
    let pos: HashMap<(i64, i64), usize> = (0..n).map(|i| ((treeids[i], nodeids[i]), i)).collect();
    let is_leaf: Vec<bool> = modes.iter().map(|m| m == "LEAF").collect();
    let child = |tree: i64, id: i64| -> Result<Child, EpError> {
        let p = *pos.get(&(tree, id)).ok_or_else(|| {
            EpError::invalid_attribute(
                node,
                "nodes_truenodeids",
                format!("tree {tree} has no node {id}"),
            )
        })?;
        Ok(if is_leaf[p] {
            Child::Leaf(p)
        } else {
            Child::Node(p)
        })
    };
    let mut nodes = Vec::with_capacity(n);
    for i in 0..n {
        let mode = match modes[i].as_str() {
            "BRANCH_LEQ" => Mode::Leq,
            "BRANCH_LT" => Mode::Lt,
            "BRANCH_GTE" => Mode::Gte,
            "BRANCH_GT" => Mode::Gt,
            "BRANCH_EQ" => Mode::Eq,
            "BRANCH_NEQ" => Mode::Neq,
            "LEAF" => Mode::Leq,
            m => {
                return Err(EpError::invalid_attribute(
                    node,
                    "nodes_modes",
                    format!("unknown mode {m}"),
                ))
            }
        };
        let (t, f) = if is_leaf[i] {
            (Child::Leaf(i), Child::Leaf(i))
        } else {
            (child(treeids[i], tids[i])?, child(treeids[i], fids[i])?)
        };
        nodes.push(TreeNode {
            feature: if is_leaf[i] { 0 } else { feats[i] },
            mode,
            split: values[i],
            set: vec![],
            missing_true: missing.get(i).is_some_and(|&m| m != 0),
            t,
            f,
        });
    }
    let mut roots = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for i in 0..n {
        if seen.insert(treeids[i]) {
            roots.push(if is_leaf[i] {
                Child::Leaf(i)
            } else {
                Child::Node(i)
            });
        }
    }
    let mut leaves = vec![Vec::new(); n];
    let lt = attrs::ints(node, &format!("{prefix}_treeids"))?;
    let ln = attrs::ints(node, &format!("{prefix}_nodeids"))?;
    let li = usizes(node, &format!("{prefix}_ids"))?;
    let lw = match tensor_f64s(node, &format!("{prefix}_weights_as_tensor"))? {
        Some(v) => v,
        None => tensor_f64s(node, &format!("{prefix}_weights"))?.unwrap_or_default(),
    };
    if [ln.len(), li.len(), lw.len()]
        .iter()
        .any(|&l| l != lt.len())
    {
        return Err(EpError::invalid_attribute(
            node,
            prefix,
            "leaf attribute lists differ in length",
        ));
    }
    for k in 0..lt.len() {
        let p = *pos.get(&(lt[k], ln[k])).ok_or_else(|| {
            EpError::invalid_attribute(
                node,
                prefix,
                format!("tree {} has no node {}", lt[k], ln[k]),
            )
        })?;
        leaves[p].push((li[k], lw[k]));
    }
    let agg = match attrs::string(node, "aggregate_function", "SUM")?.as_str() {
        "SUM" => Agg::Sum,
        "AVERAGE" => Agg::Average,
        "MIN" => Agg::Min,
        "MAX" => Agg::Max,
        v => {
            return Err(EpError::invalid_attribute(
                node,
                "aggregate_function",
                format!("unknown value {v}"),
            ))
        }
    };
    let f = Forest {
        features: nodes.iter().map(|n| n.feature + 1).max().unwrap_or(0),
        nodes,
        roots,
        leaves,
        agg,
        n_targets,
    };
    f.check(node)?;
    Ok(f)
}

fn base_values(node: &Node) -> Result<Vec<f64>, EpError> {
    Ok(match tensor_f64s(node, "base_values_as_tensor")? {
        Some(v) => v,
        None => tensor_f64s(node, "base_values")?.unwrap_or_default(),
    })
}

fn build_tree_ensemble(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let f = forest_v5(ctx.node)?;
    let post = PostTransform::from_node(ctx.node)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let (n, mut s) = f.predict(&node, x)?;
        post.apply_rows(&mut s, f.n_targets);
        let dt = if x.dtype().is_float() {
            x.dtype()
        } else {
            DataType::Float32
        };
        one(from_f64s(dt, vec![n, f.n_targets], &s).expect("float"))
    }))
}

fn build_regressor(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let k = attrs::int(ctx.node, "n_targets", 1)?.max(1) as usize;
    let f = forest_v1(ctx.node, "target", k)?;
    let base = base_values(ctx.node)?;
    let post = PostTransform::from_node(ctx.node)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let (n, mut s) = f.predict(&node, x)?;
        for row in s.chunks_mut(k) {
            row.iter_mut().zip(&base).for_each(|(a, b)| *a += b);
            post.apply(row);
        }
        one(score_tensor(n, k, &s))
    }))
}

fn build_classifier(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let labels = Labels::from_node(ctx.node)?;
    let class_ids = attrs::ints(ctx.node, "class_ids")?;
    let binary = !class_ids.is_empty() && class_ids.iter().all(|&c| c == class_ids[0]);
    let k = labels.len().max(1);
    let f = forest_v1(ctx.node, "class", k)?;
    let base = base_values(ctx.node)?;
    let post = PostTransform::from_node(ctx.node)?;
    let cols = if binary { 2 } else { k };
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let (n, s) = f.predict(&node, x)?;
        let mut out = vec![0f64; n * cols];
        let mut picks = Vec::with_capacity(n);
        for r in 0..n {
            let row = &mut out[r * cols..(r + 1) * cols];
            for c in 0..k {
                row[c] = s[r * k + c] + base.get(c).copied().unwrap_or(0.0);
            }
            if binary {
                row[1] = row[0];
                row[0] = if matches!(post, PostTransform::None | PostTransform::Probit) {
                    1.0 - row[1]
                } else {
                    -row[1]
                };
            }
            post.apply(row);
            let best = argmax(row);
            picks.push(Some(best.min(labels.len().saturating_sub(1))));
        }
        let z = score_tensor(n, cols, &out);
        Ok(vec![Value::Tensor(labels.tensor(&picks)), Value::Tensor(z)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("ai.onnx.ml", "TreeEnsemble", 5, build_tree_ensemble);
    for since in [1, 3, 5] {
        r.register(
            "ai.onnx.ml",
            "TreeEnsembleRegressor",
            since,
            build_regressor,
        );
        r.register(
            "ai.onnx.ml",
            "TreeEnsembleClassifier",
            since,
            build_classifier,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn regressor_two_trees() {
        // Tree 0: x0 <= 0.5 ? 1.0 : 2.0; tree 1 is a single leaf worth 10. SUM plus base 0.5.
        let s = |v: &[&str]| Attribute::Strings(v.iter().map(|x| x.to_string()).collect());
        let n = node(
            "TreeEnsembleRegressor",
            1,
            1,
            vec![
                ("nodes_treeids", Attribute::Ints(vec![0, 0, 0, 1])),
                ("nodes_nodeids", Attribute::Ints(vec![0, 1, 2, 0])),
                ("nodes_featureids", Attribute::Ints(vec![0, 0, 0, 0])),
                ("nodes_modes", s(&["BRANCH_LEQ", "LEAF", "LEAF", "LEAF"])),
                ("nodes_values", Attribute::Floats(vec![0.5, 0., 0., 0.])),
                ("nodes_truenodeids", Attribute::Ints(vec![1, 0, 0, 0])),
                ("nodes_falsenodeids", Attribute::Ints(vec![2, 0, 0, 0])),
                ("target_treeids", Attribute::Ints(vec![0, 0, 1])),
                ("target_nodeids", Attribute::Ints(vec![1, 2, 0])),
                ("target_ids", Attribute::Ints(vec![0, 0, 0])),
                ("target_weights", Attribute::Floats(vec![1.0, 2.0, 10.0])),
                ("base_values", Attribute::Floats(vec![0.5])),
            ],
        )
        .with_domain("ai.onnx.ml");
        let o = run(&n, 3, &[t(&[2, 1], vec![0.2f32, 0.9])]).unwrap();
        assert_eq!(out::<f32>(&o, 0), (vec![2, 1], vec![11.5, 12.5]));
    }
}
