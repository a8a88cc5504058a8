//! Einsum equations: the terms of an equation, checked when the kernel is built
//! ([`parse_equation`]), and the labels and sizes a set of input shapes gives them
//! ([`resolve_shapes`], with the CPU provider's rules and errors).

use crate::ops::common::*;
use onnx_runtime_ep_api::{EpError, EpResult};
use onnx_runtime_ir::{DataType, Node};
use std::collections::HashMap;

/// Letters are 0..52 (`a`..`z`, `A`..`Z`); ellipsis axes are `ELL + k`, k counted from the
/// left of the broadcast ellipsis (the CPU provider's numbering).
pub(super) type Label = u32;
const ELL: Label = 100;

fn letter(c: char) -> Option<Label> {
    match c {
        'a'..='z' => Some(c as u32 - 'a' as u32),
        'A'..='Z' => Some(26 + c as u32 - 'A' as u32),
        _ => None,
    }
}

/// The equation's terms, whitespace removed.
#[derive(Clone, Debug)]
pub(super) struct Equation {
    pub(super) inputs: Vec<String>,
    pub(super) output: Option<String>,
}

/// The terms of an equation (whitespace removed).
pub(super) fn split_equation(raw: &str) -> Equation {
    let eq: String = raw.chars().filter(|c| !c.is_whitespace()).collect();
    let (lhs, output) = match eq.split_once("->") {
        Some((l, r)) => (l.to_string(), Some(r.to_string())),
        None => (eq.clone(), None),
    };
    Equation {
        inputs: lhs.split(',').map(str::to_string).collect(),
        output,
    }
}

/// Parses and checks the equation: each term holds letters and at most one `...`, the output
/// names no letter twice.
pub(super) fn parse_equation(node: &Node) -> EpResult<Equation> {
    let raw = attr_string(node, "equation")?.unwrap_or_default();
    let e = split_equation(&raw);
    let bad = |m: String| EpError::invalid_attribute(node, "equation", format!("'{raw}': {m}"));
    for t in e.inputs.iter().chain(e.output.iter()) {
        let (pre, post) = t.split_once("...").unwrap_or((t.as_str(), ""));
        if let Some(c) = pre
            .chars()
            .chain(post.chars())
            .find(|&c| letter(c).is_none())
        {
            return Err(bad(format!(
                "term '{t}' holds '{c}'; a term is letters with at most one '...'"
            )));
        }
    }
    if let Some(o) = &e.output {
        let mut seen = Vec::new();
        for c in o.chars().filter(|&c| c != '.') {
            if seen.contains(&c) {
                return Err(bad(format!(
                    "the output names '{c}' twice; each output index appears once"
                )));
            }
            seen.push(c);
        }
    }
    let wired = node.inputs.len();
    if wired != e.inputs.len() {
        return Err(bad(format!(
            "the equation names {} inputs but the node has {wired}",
            e.inputs.len()
        )));
    }
    Ok(e)
}

/// An invalid-input error naming the node.
pub(super) fn invalid(node: &str, message: impl Into<String>) -> EpError {
    EpError::InvalidInput {
        node: node.to_string(),
        message: message.into(),
    }
}

/// Labels of one term for an operand of `rank` (the CPU provider's `term_labels`).
fn term_labels(node: &str, term: &str, rank: usize, ell: usize) -> EpResult<Vec<Label>> {
    let bad = |m: String| invalid(node, format!("equation term '{term}': {m}"));
    let (pre, post, has_ell) = match term.split_once("...") {
        Some((p, q)) => (p, q, true),
        None => (term, "", false),
    };
    let mut labels = Vec::new();
    for c in pre.chars() {
        labels.push(letter(c).ok_or_else(|| bad(format!("'{c}' is not a letter")))?);
    }
    if has_ell {
        let named = pre.chars().count() + post.chars().count();
        if rank < named {
            return Err(bad(format!(
                "the operand of rank {rank} has fewer than the {named} dimensions it names"
            )));
        }
        let k = rank - named;
        if k > ell {
            return Err(bad("inconsistent ellipsis".into()));
        }
        labels.extend((ell - k..ell).map(|i| ELL + i as u32));
        for c in post.chars() {
            labels.push(letter(c).ok_or_else(|| bad(format!("'{c}' is not a letter")))?);
        }
    } else if labels.len() != rank {
        return Err(bad(format!(
            "names {} dimensions but the operand has rank {rank}",
            labels.len()
        )));
    }
    Ok(labels)
}

/// Every operand's labels, each label's size, and the output's labels and shape (the CPU
/// provider's rules and errors).
pub(super) type Shapes = (
    Vec<Vec<Label>>,
    HashMap<Label, usize>,
    Vec<Label>,
    Vec<usize>,
);

pub(super) fn resolve_shapes(node: &str, eq: &Equation, shapes: &[&[usize]]) -> EpResult<Shapes> {
    // The broadcast ellipsis rank.
    let mut ell = 0;
    for (t, shape) in eq.inputs.iter().zip(shapes) {
        if t.contains("...") {
            let named = t.replace("...", "").chars().count();
            ell = ell.max(shape.len().saturating_sub(named));
        }
    }
    let mut labels = Vec::with_capacity(shapes.len());
    let mut sizes: HashMap<Label, usize> = HashMap::new();
    let mut counts: HashMap<Label, usize> = HashMap::new();
    for (t, shape) in eq.inputs.iter().zip(shapes) {
        let ls = term_labels(node, t, shape.len(), ell)?;
        for (l, &d) in ls.iter().zip(shape.iter()) {
            *counts.entry(*l).or_default() += 1;
            let s = sizes.entry(*l).or_insert(d);
            if *s == 1 {
                *s = d;
            } else if d != *s && !(d == 1 && *l >= ELL) {
                return Err(invalid(
                    node,
                    format!(
                        "dimension sizes {s} and {d} of one index in '{t}' differ (input \
                     shapes {:?})",
                        shapes
                    ),
                ));
            }
        }
        labels.push(ls);
    }
    let out: Vec<Label> = match &eq.output {
        Some(o) => {
            let rank =
                o.replace("...", "").chars().count() + if o.contains("...") { ell } else { 0 };
            let v = term_labels(node, o, rank, ell)?;
            for l in &v {
                if !sizes.contains_key(l) {
                    let name = if *l < 26 {
                        char::from(b'a' + *l as u8)
                    } else {
                        char::from(b'A' + (*l - 26) as u8)
                    };
                    return Err(invalid(
                        node,
                        format!("output index '{name}' appears in no input term"),
                    ));
                }
            }
            v
        }
        None => {
            let mut v: Vec<Label> = (0..ell as u32).map(|i| ELL + i).collect();
            let mut letters: Vec<Label> = counts
                .iter()
                .filter(|(l, &c)| **l < ELL && c == 1)
                .map(|(l, _)| *l)
                .collect();
            letters.sort_unstable();
            v.extend(letters);
            v
        }
    };
    let out_shape: Vec<usize> = out.iter().map(|l| sizes[l]).collect();
    Ok((labels, sizes, out, out_shape))
}

/// What the shapes say: every operand's labels, each label's size, the output's labels.
pub(super) struct Resolved {
    pub(super) dtype: DataType,
    pub(super) labels: Vec<Vec<Label>>,
    pub(super) sizes: HashMap<Label, usize>,
    pub(super) out: Vec<Label>,
    pub(super) out_shape: Vec<usize>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shape_errors_name_the_node() {
        for (eq, shapes) in [
            ("ij,jk->ik", vec![vec![2, 3], vec![4, 5]]),
            ("ij", vec![vec![2, 3, 4]]),
            ("ij->k", vec![vec![2, 3]]),
            ("...ij", vec![vec![2]]),
        ] {
            let e = split_equation(eq);
            let refs: Vec<&[usize]> = shapes.iter().map(|s| &s[..]).collect();
            let err = match resolve_shapes("node_x", &e, &refs) {
                Err(e) => e.to_string(),
                Ok(_) => panic!("{eq} {shapes:?} should fail"),
            };
            assert!(err.contains("node_x"), "{err}");
        }
    }
}
