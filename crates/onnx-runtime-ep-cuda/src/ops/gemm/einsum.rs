//! Einsum (opset 12): every equation the CPU provider accepts (explicit or implicit output,
//! `...` with broadcasting, repeated indices within one operand, indices summed in one operand
//! only, scalars, any number of operands) for float32, float16, bfloat16, float64 and the 8- to
//! 64-bit integer types.
//!
//! The equation is parsed and checked when the kernel is built; the first call with a set of
//! shapes and strides makes a plan (kept until the shapes change), which every later call
//! replays with its own addresses. As on the CPU provider, operands are contracted pairwise
//! from the left:
//! - a repeated index within one operand is a diagonal, read through a strided view (the
//!   strides of the repeated axes added up), never copied;
//! - indices that appear in one operand of a pair only and are needed nowhere later are summed
//!   out first (`einsum_sum_*` of kernels/einsum.cu);
//! - each pairwise contraction is a batched `[batch, M, K] x [batch, K, N]` product on the
//!   float product driver (cuBLASLt) or the integer GEMM kernel. The index groups M, K and N are
//!   ordered so that each merges into one stride of the operands' own views (a transposed
//!   operand is a transpose flag, a broadcast batch a zero stride); only an operand whose
//!   groups cannot merge is copied into a contiguous block first, and the last product writes
//!   straight into the output when its layout allows;
//! - the output is the last product, or one strided copy / sum of what is left into it.
//!
//! Floats accumulate in float32 (float64 for float64); integer products and sums wrap.

use super::driver::{FloatEngine, FloatProblem};
use super::integer::{self, IntProblem};
use super::shape::{merge, Act, Mat};
use crate::compiler::ModuleSpec;
use crate::ops::common::*;
use crate::ops::params::MAX_DIMS;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{DataType, Node};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The reduction kernels.
pub(crate) fn einsum_module() -> ModuleSpec {
    ModuleSpec::new("einsum", include_str!("../../kernels/einsum.cu")).with_half()
}

/// Threads per block of `einsum_sum_*` (EIN_THREADS).
const SUM_THREADS: u32 = 256;

/// Mirrors `EinSumParams` in einsum.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct EinSumParams {
    n_out: i64,
    n_red: i64,
    rank_k: i32,
    rank_r: i32,
    g: i32,
    lane_major: i32,
    dims_k: [i64; MAX_DIMS],
    sk_in: [i64; MAX_DIMS],
    sk_out: [i64; MAX_DIMS],
    dims_r: [i64; MAX_DIMS],
    sr_in: [i64; MAX_DIMS],
    src: u64,
    dst: u64,
}

/// Letters are 0..52 (`a`..`z`, `A`..`Z`); ellipsis axes are `ELL + k`, k counted from the
/// left of the broadcast ellipsis (the CPU provider's numbering).
type Label = u32;
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
struct Equation {
    inputs: Vec<String>,
    output: Option<String>,
}

/// The terms of an equation (whitespace removed).
fn split_equation(raw: &str) -> Equation {
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
fn parse_equation(node: &Node) -> EpResult<Equation> {
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

/// Labels of one term for an operand of `rank` (the CPU provider's `term_labels`).
/// An invalid-input error naming the node.
fn invalid(node: &str, message: impl Into<String>) -> EpError {
    EpError::InvalidInput {
        node: node.to_string(),
        message: message.into(),
    }
}

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
type Shapes = (
    Vec<Vec<Label>>,
    HashMap<Label, usize>,
    Vec<Label>,
    Vec<usize>,
);

fn resolve_shapes(node: &str, eq: &Equation, shapes: &[&[usize]]) -> EpResult<Shapes> {
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
struct Resolved {
    dtype: DataType,
    labels: Vec<Vec<Label>>,
    sizes: HashMap<Label, usize>,
    out: Vec<Label>,
    out_shape: Vec<usize>,
}

/// The dtypes the kernel takes.
fn supported(d: DataType) -> bool {
    use DataType::*;
    matches!(
        d,
        Float32
            | Float16
            | BFloat16
            | Float64
            | Int8
            | Int16
            | Int32
            | Int64
            | Uint8
            | Uint16
            | Uint32
            | Uint64
    )
}

fn is_float(d: DataType) -> bool {
    matches!(
        d,
        DataType::Float32 | DataType::Float16 | DataType::BFloat16 | DataType::Float64
    )
}

/// Where an operand lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Buf {
    In(usize),
    Tmp(usize),
    Out,
}

/// An operand as a strided view: its labels (distinct after diagonals), its own sizes (1 where
/// it broadcasts to a larger label size) and element strides.
#[derive(Clone, Debug)]
struct Opnd {
    buf: Buf,
    labels: Vec<Label>,
    dims: Vec<usize>,
    strides: Vec<i64>,
}

impl Opnd {
    fn has(&self, l: Label) -> bool {
        self.labels.contains(&l)
    }

    /// The stride of label `l` read at the label's full size: 0 where the operand broadcasts
    /// (its own size 1) or lacks the label.
    fn bstride(&self, l: Label) -> i64 {
        match self.labels.iter().position(|&x| x == l) {
            Some(a) if self.dims[a] != 1 => self.strides[a],
            _ => 0,
        }
    }

    /// Takes diagonals until no label repeats (the CPU provider's rule: the size is the smaller
    /// of the two, the stride their sum).
    fn diagonals(mut self) -> Opnd {
        loop {
            let dup = (0..self.labels.len()).find_map(|j| {
                (0..j)
                    .find(|&i| self.labels[i] == self.labels[j])
                    .map(|i| (i, j))
            });
            let Some((i, j)) = dup else { return self };
            self.strides[i] += self.strides[j];
            self.dims[i] = self.dims[i].min(self.dims[j]);
            self.labels.remove(j);
            self.dims.remove(j);
            self.strides.remove(j);
        }
    }
}

/// A batched matrix of a product: `batch` axes, then one merged row and one column group.
#[derive(Clone, Debug)]
struct MatPlan {
    buf: Buf,
    batch: Vec<usize>,
    bstrides: Vec<i64>,
    rows: usize,
    cols: usize,
    rs: i64,
    cs: i64,
}

enum Step {
    /// `dst = sum(src)` over the reduced axes (params without addresses).
    Sum {
        src: Buf,
        dst: Buf,
        p: Box<EinSumParams>,
        blocks: u32,
    },
    /// A strided copy (a pack, or the output).
    Copy {
        src: Buf,
        dst: Buf,
        dims: Vec<usize>,
        s_src: Vec<i64>,
        s_dst: Vec<i64>,
    },
    /// `out = a @ b`, batched.
    Gemm {
        a: MatPlan,
        b: MatPlan,
        out: MatPlan,
    },
}

/// The steps of one set of shapes and strides, and the temporary blocks (element counts) they
/// use.
struct Plan {
    temps: Vec<usize>,
    steps: Vec<Step>,
}

/// What a plan depends on besides the equation: dtype, input shapes and strides, output
/// strides.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PlanKey {
    dtype: DataType,
    inputs: Vec<(Vec<usize>, Vec<usize>)>,
    out_strides: Vec<usize>,
}

/// Builds a plan.
struct Planner<'a> {
    node: &'a str,
    sizes: &'a HashMap<Label, usize>,
    sm: usize,
    temps: Vec<usize>,
    steps: Vec<Step>,
}

/// Labels ordered by their stride in `x`, outermost first (a stable sort: ties keep order).
fn by_stride(x: &Opnd, labels: &[Label]) -> Vec<Label> {
    let mut v = labels.to_vec();
    v.sort_by_key(|&l| std::cmp::Reverse(x.bstride(l)));
    v
}

impl Planner<'_> {
    fn size(&self, l: Label) -> usize {
        self.sizes[&l]
    }

    fn numel(&self, labels: &[Label]) -> usize {
        labels.iter().map(|&l| self.size(l)).product()
    }

    fn temp(&mut self, numel: usize) -> Buf {
        self.temps.push(numel);
        Buf::Tmp(self.temps.len() - 1)
    }

    /// The labels `ls` of `x` (at their full sizes) as one axis: its size and stride, or
    /// `None` when they do not merge in this order.
    fn group(&self, x: &Opnd, ls: &[Label]) -> Option<(usize, i64)> {
        if ls.iter().any(|&l| self.size(l) == 0) {
            return Some((0, 1));
        }
        let mut size = 1usize;
        let mut stride: Option<i64> = None;
        for &l in ls {
            let d = self.size(l);
            if d == 1 {
                continue;
            }
            let s = x.bstride(l);
            if let Some(prev) = stride {
                if prev != s * d as i64 {
                    return None;
                }
            }
            stride = Some(s);
            size *= d;
        }
        Some((size, stride.unwrap_or(1)))
    }

    /// `x` as a batch of `rows x cols` matrices (groups that merge, checked by the caller).
    fn mat(&self, x: &Opnd, batch: &[Label], rows: &[Label], cols: &[Label]) -> EpResult<MatPlan> {
        let internal = || invalid(self.node, "internal: an Einsum index group does not merge");
        let (r, rs) = self.group(x, rows).ok_or_else(internal)?;
        let (c, cs) = self.group(x, cols).ok_or_else(internal)?;
        Ok(MatPlan {
            buf: x.buf,
            batch: batch.iter().map(|&l| self.size(l)).collect(),
            bstrides: batch.iter().map(|&l| x.bstride(l)).collect(),
            rows: r,
            cols: c,
            rs,
            cs,
        })
    }

    /// Sums `x` over the labels `drop` selects, into a contiguous temporary block.
    fn sum_out(&mut self, x: Opnd, drop: impl Fn(Label) -> bool) -> EpResult<Opnd> {
        let (kept, red): (Vec<usize>, Vec<usize>) =
            (0..x.labels.len()).partition(|&a| !drop(x.labels[a]));
        if red.is_empty() {
            return Ok(x);
        }
        let dims: Vec<usize> = kept.iter().map(|&a| x.dims[a]).collect();
        let strides = contiguous(&dims);
        let dst = self.temp(dims.iter().product());
        self.sum(
            x.buf,
            dst,
            &dims,
            &kept.iter().map(|&a| x.strides[a]).collect::<Vec<_>>(),
            &strides,
            &red.iter().map(|&a| x.dims[a]).collect::<Vec<_>>(),
            &red.iter().map(|&a| x.strides[a]).collect::<Vec<_>>(),
        )?;
        Ok(Opnd {
            buf: dst,
            labels: kept.iter().map(|&a| x.labels[a]).collect(),
            dims,
            strides,
        })
    }

    /// Plans one `einsum_sum` launch: kept axes `dims_k` (source and destination strides),
    /// reduced axes `dims_r` (source strides).
    #[allow(clippy::too_many_arguments)]
    fn sum(
        &mut self,
        src: Buf,
        dst: Buf,
        dims_k: &[usize],
        sk_in: &[i64],
        sk_out: &[i64],
        dims_r: &[usize],
        sr_in: &[i64],
    ) -> EpResult<()> {
        let n_out: usize = dims_k.iter().product();
        let n_red: usize = dims_r.iter().product();
        let (dk, [ki, ko]) = merge(dims_k, [sk_in, sk_out]);
        // Reduced axes innermost-last by stride, so contiguous runs merge.
        let mut order: Vec<usize> = (0..dims_r.len()).collect();
        order.sort_by_key(|&a| std::cmp::Reverse(sr_in[a]));
        let rd: Vec<usize> = order.iter().map(|&a| dims_r[a]).collect();
        let rs: Vec<i64> = order.iter().map(|&a| sr_in[a]).collect();
        let (dr, [ri]) = merge(&rd, [&rs]);
        if dk.len() > MAX_DIMS || dr.len() > MAX_DIMS {
            return Err(invalid(
                self.node,
                format!(
                    "the Einsum sum needs {} kept and {} summed axes after merging; the limit is \
                 {MAX_DIMS} each",
                    dk.len(),
                    dr.len()
                ),
            ));
        }
        // Is the smallest source stride on a summed axis (coalesced along the sum)?
        let min_k = ki
            .iter()
            .map(|s| s.unsigned_abs())
            .min()
            .unwrap_or(u64::MAX);
        let min_r = ri
            .iter()
            .map(|s| s.unsigned_abs())
            .min()
            .unwrap_or(u64::MAX);
        // Adjacent threads own adjacent outputs only when a warp's worth of them exists.
        let lane_major = min_r < min_k || n_out < 32;
        // Enough threads in flight to cover the machine, never more lanes than terms; across
        // outputs at most 8 lanes, so a warp still reads 32 neighbouring outputs.
        let cap = if lane_major { SUM_THREADS as usize } else { 8 };
        let want = self.sm * 2048;
        let mut g = 1usize;
        if n_red > 8 {
            if lane_major {
                g = n_red.next_power_of_two().min(32);
            }
            while g < cap && n_out.saturating_mul(g) < want && g * 2 <= n_red {
                g *= 2;
            }
        }
        let per = SUM_THREADS as usize / g;
        let blocks = n_out.div_ceil(per).clamp(1, self.sm * 32) as u32;
        let p = EinSumParams {
            n_out: n_out as i64,
            n_red: n_red as i64,
            rank_k: dk.len() as i32,
            rank_r: dr.len() as i32,
            g: g as i32,
            lane_major: lane_major as i32,
            dims_k: fill(&dk.iter().map(|&d| d as i64).collect::<Vec<_>>()),
            sk_in: fill(&ki),
            sk_out: fill(&ko),
            dims_r: fill(&dr.iter().map(|&d| d as i64).collect::<Vec<_>>()),
            sr_in: fill(&ri),
            src: 0,
            dst: 0,
        };
        self.steps.push(Step::Sum {
            src,
            dst,
            p: Box::new(p),
            blocks,
        });
        Ok(())
    }

    /// Copies `x` (read at full label sizes) into a contiguous block ordered by `labels`.
    fn pack(&mut self, x: &Opnd, labels: &[Label]) -> Opnd {
        let dims: Vec<usize> = labels.iter().map(|&l| self.size(l)).collect();
        let strides = contiguous(&dims);
        let dst = self.temp(dims.iter().product());
        self.steps.push(Step::Copy {
            src: x.buf,
            dst,
            dims: dims.clone(),
            s_src: labels.iter().map(|&l| x.bstride(l)).collect(),
            s_dst: strides.clone(),
        });
        Opnd {
            buf: dst,
            labels: labels.to_vec(),
            dims,
            strides,
        }
    }

    /// Contracts `a` and `b` (labels summed in one of them only already gone), keeping the
    /// labels `keep` selects; `out` is the output when this is the last product.
    fn contract(
        &mut self,
        a: Opnd,
        b: Opnd,
        keep: &dyn Fn(Label) -> bool,
        out: Option<&Opnd>,
    ) -> EpResult<Opnd> {
        let batch: Vec<Label> = a
            .labels
            .iter()
            .copied()
            .filter(|&l| b.has(l) && keep(l))
            .collect();
        let inner: Vec<Label> = a
            .labels
            .iter()
            .copied()
            .filter(|&l| b.has(l) && !keep(l))
            .collect();
        let left: Vec<Label> = a.labels.iter().copied().filter(|&l| !b.has(l)).collect();
        let right: Vec<Label> = b.labels.iter().copied().filter(|&l| !a.has(l)).collect();

        // Candidate orders of each group: the one that merges in each operand holding it.
        let mut lefts = vec![by_stride(&a, &left)];
        let inners = [by_stride(&a, &inner), by_stride(&b, &inner)];
        let mut rights = vec![by_stride(&b, &right)];
        let batch = match out {
            Some(o) => {
                lefts.push(by_stride(o, &left));
                rights.push(by_stride(o, &right));
                by_stride(o, &batch)
            }
            None => by_stride(&a, &batch),
        };
        let (nb, m, k, n) = (
            self.numel(&batch),
            self.numel(&left),
            self.numel(&inner),
            self.numel(&right),
        );
        // The cheapest choice: copies of A, B, or of the product into the output.
        let mut best: Option<(usize, usize, usize, usize)> = None;
        for (li, lo) in lefts.iter().enumerate() {
            for (ii, io) in inners.iter().enumerate() {
                for (ri, ro) in rights.iter().enumerate() {
                    let pack_a = self.group(&a, lo).is_none() || self.group(&a, io).is_none();
                    let pack_b = self.group(&b, io).is_none() || self.group(&b, ro).is_none();
                    let via_temp = match out {
                        Some(o) => self.group(o, lo).is_none() || self.group(o, ro).is_none(),
                        None => false,
                    };
                    let cost = usize::from(pack_a) * nb * m * k
                        + usize::from(pack_b) * nb * k * n
                        + usize::from(via_temp) * nb * m * n;
                    if best.is_none_or(|(c, ..)| cost < c) {
                        best = Some((cost, li, ii, ri));
                    }
                }
            }
        }
        let (_, li, ii, ri) =
            best.ok_or_else(|| invalid(self.node, "internal: no Einsum order"))?;
        let (lo, io, ro) = (lefts[li].clone(), inners[ii].clone(), rights[ri].clone());
        let a = if self.group(&a, &lo).is_some() && self.group(&a, &io).is_some() {
            a
        } else {
            self.pack(&a, &[&batch[..], &lo[..], &io[..]].concat())
        };
        let b = if self.group(&b, &io).is_some() && self.group(&b, &ro).is_some() {
            b
        } else {
            self.pack(&b, &[&batch[..], &io[..], &ro[..]].concat())
        };
        let target = match out {
            Some(o) if self.group(o, &lo).is_some() && self.group(o, &ro).is_some() => o.clone(),
            _ => {
                let labels = [&batch[..], &lo[..], &ro[..]].concat();
                let dims: Vec<usize> = labels.iter().map(|&l| self.size(l)).collect();
                let strides = contiguous(&dims);
                Opnd {
                    buf: self.temp(dims.iter().product()),
                    labels,
                    dims,
                    strides,
                }
            }
        };
        let step = Step::Gemm {
            a: self.mat(&a, &batch, &lo, &io)?,
            b: self.mat(&b, &batch, &io, &ro)?,
            out: self.mat(&target, &batch, &lo, &ro)?,
        };
        self.steps.push(step);
        Ok(target)
    }

    /// Writes what is left into the output: a copy, or a sum over labels it drops.
    fn finish(&mut self, acc: Opnd, out: &Opnd) -> EpResult<()> {
        if acc.buf == Buf::Out {
            return Ok(());
        }
        let dims: Vec<usize> = out.labels.iter().map(|&l| self.size(l)).collect();
        let s_src: Vec<i64> = out.labels.iter().map(|&l| acc.bstride(l)).collect();
        let red: Vec<usize> = (0..acc.labels.len())
            .filter(|&a| !out.has(acc.labels[a]))
            .collect();
        if red.is_empty() {
            self.steps.push(Step::Copy {
                src: acc.buf,
                dst: Buf::Out,
                dims,
                s_src,
                s_dst: out.strides.clone(),
            });
            return Ok(());
        }
        self.sum(
            acc.buf,
            Buf::Out,
            &dims,
            &s_src,
            &out.strides,
            &red.iter().map(|&a| acc.dims[a]).collect::<Vec<_>>(),
            &red.iter().map(|&a| acc.strides[a]).collect::<Vec<_>>(),
        )
    }
}

struct EinsumKernel {
    base: Base,
    eq: Equation,
    float: FloatEngine,
    /// `igemm_{i8,i16,i32,i64,u8,u16,u32,u64}`.
    igemm: HashMap<DataType, Function>,
    /// `einsum_sum_<tag>` by dtype.
    sums: HashMap<DataType, Function>,
    copy: WidthFns,
    plan: Mutex<Option<(PlanKey, Arc<Plan>)>>,
    warmed: AtomicBool,
}

impl EinsumKernel {
    /// Labels, sizes and the output, with every check of the CPU provider.
    fn resolve(&self, inputs: &[TensorView<'_>]) -> EpResult<Resolved> {
        let base = &self.base;
        let eq = &self.eq;
        let mut views = Vec::with_capacity(eq.inputs.len());
        for i in 0..eq.inputs.len() {
            views.push(base.req(inputs, i)?);
        }
        if inputs.len() > views.len() {
            return Err(base.err(format!(
                "the equation names {} inputs but the node has {}",
                views.len(),
                inputs.len()
            )));
        }
        let dtype = views[0].dtype;
        for v in &views {
            if v.dtype != dtype {
                return Err(base.err(format!(
                    "inputs mix {dtype} and {}; all must have one type",
                    v.dtype
                )));
            }
        }
        if !supported(dtype) {
            return Err(base.unsupported(
                dtype,
                "the CUDA Einsum takes float32, float16, bfloat16, float64 and 8- to 64-bit \
                 integers",
            ));
        }
        let shapes: Vec<&[usize]> = views.iter().map(|v| v.shape).collect();
        let (labels, sizes, out, out_shape) = resolve_shapes(&base.node, eq, &shapes)?;
        checked_numel(base, &out_shape)?;
        Ok(Resolved {
            dtype,
            labels,
            sizes,
            out,
            out_shape,
        })
    }

    /// The plan for these views (the cached one when the shapes and strides repeat).
    fn plan(
        &self,
        r: &Resolved,
        inputs: &[TensorView<'_>],
        out_strides: &[usize],
    ) -> EpResult<Arc<Plan>> {
        let n = r.labels.len();
        let key = PlanKey {
            dtype: r.dtype,
            inputs: inputs[..n]
                .iter()
                .map(|v| (v.shape.to_vec(), v.strides.to_vec()))
                .collect(),
            out_strides: out_strides.to_vec(),
        };
        let mut slot = self.plan.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, p)) = slot.as_ref() {
            if *k == key {
                return Ok(p.clone());
            }
        }
        let sm = self.base.rt.sm_count().max(1) as usize;
        let plan = Arc::new(make_plan(&self.base.node, sm, r, &key)?);
        *slot = Some((key, plan.clone()));
        Ok(plan)
    }
}

/// Plans the contractions of `r` for the views of `key` (`sm`: the device's multiprocessors,
/// for the sum kernels' launch shapes).
fn make_plan(node: &str, sm: usize, r: &Resolved, key: &PlanKey) -> EpResult<Plan> {
    let mut pl = Planner {
        node,
        sizes: &r.sizes,
        sm,
        temps: Vec::new(),
        steps: Vec::new(),
    };
    let out = Opnd {
        buf: Buf::Out,
        labels: r.out.clone(),
        dims: r.out_shape.clone(),
        strides: istrides(&key.out_strides),
    };
    let mut ops: Vec<Opnd> = key
        .inputs
        .iter()
        .zip(&r.labels)
        .enumerate()
        .map(|(i, ((shape, strides), labels))| {
            Opnd {
                buf: Buf::In(i),
                labels: labels.clone(),
                dims: shape.clone(),
                strides: istrides(strides),
            }
            .diagonals()
        })
        .collect();
    let mut acc = ops.remove(0);
    while !ops.is_empty() {
        let b = ops.remove(0);
        let rest: Vec<Label> = ops.iter().flat_map(|o| o.labels.clone()).collect();
        let keep = |l: Label| r.out.contains(&l) || rest.contains(&l);
        let (al, bl) = (acc.labels.clone(), b.labels.clone());
        let a = pl.sum_out(acc, |l| !keep(l) && !bl.contains(&l))?;
        let b = pl.sum_out(b, |l| !keep(l) && !al.contains(&l))?;
        let last = ops.is_empty();
        acc = pl.contract(a, b, &keep, last.then_some(&out))?;
    }
    pl.finish(acc, &out)?;
    Ok(Plan {
        temps: pl.temps,
        steps: pl.steps,
    })
}

/// Temporary blocks of one call, returned to the cache once its work is enqueued (the stream
/// orders any later reuse after it).
struct Temps<'a> {
    rt: &'a CudaRuntime,
    blocks: Vec<CuPtr>,
}

impl Drop for Temps<'_> {
    fn drop(&mut self) {
        for &p in &self.blocks {
            let _ = self.rt.free(p);
        }
    }
}

impl Kernel for EinsumKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let r = self.resolve(inputs)?;
        Ok(vec![(r.dtype, r.out_shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let r = self.resolve(inputs)?;
        base.expect_outputs(outputs, &[(r.dtype, r.out_shape.clone())])?;
        let out = &outputs[0];
        let plan = self.plan(&r, inputs, out.strides)?;
        let dtype = r.dtype;
        let w = base.width(dtype)?;
        let rt = &*base.rt;
        let mut temps = Temps {
            rt,
            blocks: Vec::with_capacity(plan.temps.len()),
        };
        for &numel in &plan.temps {
            let (ptr, _) = rt.allocate(numel.saturating_mul(w).max(1), 256)?;
            temps.blocks.push(ptr);
        }
        let out_ptr = mut_ptr_of(out);
        let ptr = |b: Buf| match b {
            Buf::In(i) => ptr_of(&inputs[i]),
            Buf::Tmp(j) => temps.blocks[j],
            Buf::Out => out_ptr,
        };
        let mat = |m: &MatPlan| Mat {
            ptr: ptr(m.buf),
            batch: m.batch.clone(),
            bstrides: m.bstrides.clone(),
            rows: m.rows,
            cols: m.cols,
            rs: m.rs,
            cs: m.cs,
        };
        for step in &plan.steps {
            match step {
                Step::Sum {
                    src,
                    dst,
                    p,
                    blocks,
                } => {
                    if p.n_out == 0 {
                        continue;
                    }
                    let f = *self
                        .sums
                        .get(&dtype)
                        .ok_or_else(|| base.unsupported(dtype, "no Einsum sum kernel"))?;
                    let mut prm = EinSumParams {
                        src: ptr(*src),
                        dst: ptr(*dst),
                        ..**p
                    };
                    let mut args = [arg(&mut prm)];
                    // SAFETY: einsum_sum_T(EinSumParams) reads the source view and writes the
                    // destination view the plan describes, both inside their blocks.
                    unsafe {
                        rt.launch_cfg(f, (*blocks, 1, 1), (SUM_THREADS, 1, 1), 0, &mut args)?
                    };
                }
                Step::Copy {
                    src,
                    dst,
                    dims,
                    s_src,
                    s_dst,
                } => copy_strided(
                    base,
                    &self.copy,
                    w,
                    ptr(*src),
                    ptr(*dst),
                    dims,
                    s_src,
                    s_dst,
                    0,
                    0,
                )?,
                Step::Gemm { a, b, out } => {
                    let (am, bm, om) = (mat(a), mat(b), mat(out));
                    if is_float(dtype) {
                        self.float.run(
                            base,
                            &FloatProblem {
                                dtype,
                                a: am,
                                b: bm,
                                out: om,
                                alpha: 1.0,
                                beta: 0.0,
                                c: None,
                                bias: None,
                                act: Act::None,
                            },
                        )?;
                    } else {
                        let f = *self
                            .igemm
                            .get(&dtype)
                            .ok_or_else(|| base.unsupported(dtype, "no integer product kernel"))?;
                        integer::launch(
                            base,
                            f,
                            &IntProblem {
                                a: &am,
                                b: &bm,
                                out: &om,
                                za: None,
                                zb: None,
                                c: None,
                                alpha: 1,
                                beta: 0,
                                quant: None,
                            },
                        )?;
                    }
                }
            }
        }
        drop(temps);
        self.warmed.store(true, Ordering::Release);
        Ok(())
    }

    fn capture_support(&self) -> CaptureSupport {
        if self.warmed.load(Ordering::Acquire) {
            CaptureSupport::Supported
        } else {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: the Einsum plan, its temporary blocks and the cuBLASLt algorithm are \
                     made on the first run; run it once eagerly before capturing",
                    self.base.node
                ),
            }
        }
    }
}

pub fn einsum(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let eq = parse_equation(node)?;
    let base = Base::new(rt, node);
    let float = FloatEngine::new(&base)?;
    let gemm = base.module(&super::gemm_module())?;
    let mut igemm = HashMap::new();
    for (dtype, tag) in [
        (DataType::Int8, "i8"),
        (DataType::Int16, "i16"),
        (DataType::Int32, "i32"),
        (DataType::Int64, "i64"),
        (DataType::Uint8, "u8"),
        (DataType::Uint16, "u16"),
        (DataType::Uint32, "u32"),
        (DataType::Uint64, "u64"),
    ] {
        igemm.insert(dtype, gemm.function(&format!("igemm_{tag}"))?);
    }
    let module = base.module(&einsum_module())?;
    let mut sums = HashMap::new();
    for (dtype, tag, _) in TYPED.iter().filter(|t| supported(t.0)) {
        sums.insert(*dtype, module.function(&format!("einsum_sum_{tag}"))?);
    }
    let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
    Ok(Box::new(EinsumKernel {
        base,
        eq,
        float,
        igemm,
        sums,
        copy,
        plan: Mutex::new(None),
        warmed: AtomicBool::new(false),
    }))
}

#[cfg(test)]
mod tests {
    //! Plans executed by a host model of their steps (the sum kernel's walk, strided copies,
    //! batched products read through the planned views) against a direct summation over every
    //! index, for transposed / padded input views and every kind of equation.
    use super::*;

    /// Element strides of a layout: 0 contiguous, 1 axes reversed, 2 innermost rows padded
    /// by 3; and the elements the storage spans.
    fn layout(shape: &[usize], kind: usize) -> (Vec<usize>, usize) {
        let rank = shape.len();
        let (storage, order): (Vec<usize>, Vec<usize>) = match kind {
            1 => (
                shape.iter().rev().copied().collect(),
                (0..rank).rev().collect(),
            ),
            2 => {
                let mut s = shape.to_vec();
                if let Some(l) = s.last_mut() {
                    *l += 3;
                }
                (s, (0..rank).collect())
            }
            _ => (shape.to_vec(), (0..rank).collect()),
        };
        let ss = onnx_runtime_ir::compute_contiguous_strides(&storage);
        let mut strides = vec![0; rank];
        for (k, &axis) in order.iter().enumerate() {
            strides[axis] = ss[k];
        }
        (strides, storage.iter().product::<usize>().max(1))
    }

    /// Calls `f(offset_a, offset_b)` over a row-major walk of `dims`.
    fn walk(dims: &[usize], a: &[i64], b: &[i64], mut f: impl FnMut(i64, i64)) {
        let n: usize = dims.iter().product();
        for i in 0..n {
            let (mut rem, mut oa, mut ob) = (i, 0i64, 0i64);
            for d in (0..dims.len()).rev() {
                let x = (rem % dims[d]) as i64;
                rem /= dims[d];
                oa += x * a[d];
                ob += x * b[d];
            }
            f(oa, ob);
        }
    }

    /// Runs `plan` on host buffers: inputs, then temporaries, then the output.
    fn simulate(plan: &Plan, inputs: &[Vec<f64>], out_len: usize) -> Vec<f64> {
        let n_in = inputs.len();
        let mut bufs: Vec<Vec<f64>> = inputs.to_vec();
        bufs.extend(plan.temps.iter().map(|&n| vec![f64::NAN; n]));
        bufs.push(vec![f64::NAN; out_len]);
        let out_idx = bufs.len() - 1;
        let idx = |b: Buf| match b {
            Buf::In(i) => i,
            Buf::Tmp(j) => n_in + j,
            Buf::Out => out_idx,
        };
        for step in &plan.steps {
            match step {
                Step::Sum { src, dst, p, .. } => {
                    assert!(p.g >= 1 && 256 % p.g == 0, "lanes {}", p.g);
                    let s = bufs[idx(*src)].clone();
                    let d = &mut bufs[idx(*dst)];
                    let (rk, rr) = (p.rank_k as usize, p.rank_r as usize);
                    let dk: Vec<usize> = p.dims_k[..rk].iter().map(|&x| x as usize).collect();
                    let dr: Vec<usize> = p.dims_r[..rr].iter().map(|&x| x as usize).collect();
                    assert_eq!(dk.iter().product::<usize>() as i64, p.n_out);
                    assert_eq!(dr.iter().product::<usize>() as i64, p.n_red);
                    let zeros = vec![0i64; rr];
                    walk(&dk, &p.sk_in[..rk], &p.sk_out[..rk], |oi, oo| {
                        let mut acc = 0.0;
                        walk(&dr, &p.sr_in[..rr], &zeros, |off, _| {
                            acc += s[(oi + off) as usize];
                        });
                        d[oo as usize] = acc;
                    });
                }
                Step::Copy {
                    src,
                    dst,
                    dims,
                    s_src,
                    s_dst,
                } => {
                    let s = bufs[idx(*src)].clone();
                    let d = &mut bufs[idx(*dst)];
                    walk(dims, s_src, s_dst, |a, b| d[b as usize] = s[a as usize]);
                }
                Step::Gemm { a, b, out } => {
                    assert_eq!((a.rows, a.cols, b.cols), (out.rows, b.rows, out.cols));
                    assert_eq!((&a.batch, &b.batch), (&out.batch, &out.batch));
                    let (sa, sb) = (bufs[idx(a.buf)].clone(), bufs[idx(b.buf)].clone());
                    let d = &mut bufs[idx(out.buf)];
                    let nb: usize = out.batch.iter().product();
                    for bi in 0..nb {
                        let (mut rem, mut oa, mut ob, mut oo) = (bi, 0i64, 0i64, 0i64);
                        for k in (0..out.batch.len()).rev() {
                            let x = (rem % out.batch[k]) as i64;
                            rem /= out.batch[k];
                            oa += x * a.bstrides[k];
                            ob += x * b.bstrides[k];
                            oo += x * out.bstrides[k];
                        }
                        for i in 0..out.rows as i64 {
                            for j in 0..out.cols as i64 {
                                let v: f64 = (0..a.cols as i64)
                                    .map(|p| {
                                        sa[(oa + i * a.rs + p * a.cs) as usize]
                                            * sb[(ob + p * b.rs + j * b.cs) as usize]
                                    })
                                    .sum();
                                d[(oo + i * out.rs + j * out.cs) as usize] = v;
                            }
                        }
                    }
                }
            }
        }
        bufs.pop().unwrap()
    }

    /// Plans `eq` for inputs of `shapes` in layouts `kinds`, simulates it and compares with a
    /// direct sum over every index assignment.
    fn case(eq: &str, shapes: &[&[usize]], kinds: &[usize]) {
        let e = split_equation(eq);
        let what = format!("'{eq}' {shapes:?} layouts {kinds:?}");
        let (labels, sizes, out, out_shape) =
            resolve_shapes("test", &e, shapes).unwrap_or_else(|err| panic!("{what}: {err}"));
        let mut views = Vec::new();
        let mut data = Vec::new();
        for (i, shape) in shapes.iter().enumerate() {
            let (strides, span) = layout(shape, kinds[i % kinds.len()]);
            let buf: Vec<f64> = (0..span)
                .map(|x| ((x * 7919 + i * 31) % 11) as f64 - 5.0)
                .collect();
            views.push((shape.to_vec(), strides));
            data.push(buf);
        }
        let out_strides = onnx_runtime_ir::compute_contiguous_strides(&out_shape).to_vec();
        let r = Resolved {
            dtype: DataType::Float32,
            labels: labels.clone(),
            sizes: sizes.clone(),
            out: out.clone(),
            out_shape: out_shape.clone(),
        };
        let key = PlanKey {
            dtype: DataType::Float32,
            inputs: views.clone(),
            out_strides,
        };
        let plan = make_plan("test", 132, &r, &key).unwrap_or_else(|err| panic!("{what}: {err}"));
        let out_len: usize = out_shape.iter().product();
        let got = simulate(&plan, &data, out_len.max(1));
        // Direct: every assignment of every label.
        let all: Vec<Label> = {
            let mut v: Vec<Label> = sizes.keys().copied().collect();
            v.sort_unstable();
            v
        };
        let dims: Vec<usize> = all.iter().map(|l| sizes[l]).collect();
        let mut want = vec![0.0; out_len];
        let total: usize = dims.iter().product();
        for t in 0..total {
            let mut rem = t;
            let mut val: HashMap<Label, usize> = HashMap::new();
            for k in (0..all.len()).rev() {
                val.insert(all[k], rem % dims[k]);
                rem /= dims[k];
            }
            let mut prod = 1.0;
            for (i, (shape, strides)) in views.iter().enumerate() {
                let mut off = 0;
                for (a, l) in labels[i].iter().enumerate() {
                    let x = if shape[a] == 1 { 0 } else { val[l] };
                    off += x * strides[a];
                }
                prod *= data[i][off];
            }
            let o: usize = out.iter().fold(0, |acc, l| acc * sizes[l] + val[l]);
            want[o] += prod;
        }
        for (i, w) in want.iter().enumerate() {
            assert_eq!(got[i], *w, "{what}: output element {i} of {out_shape:?}");
        }
    }

    #[test]
    fn plans_match_a_direct_sum() {
        let cases: &[(&str, &[&[usize]])] = &[
            ("ij,jk->ik", &[&[3, 4], &[4, 5]]),
            ("ij,kj->ik", &[&[3, 4], &[5, 4]]),
            ("ji,jk->ik", &[&[4, 3], &[4, 5]]),
            ("ij,jk->ki", &[&[3, 4], &[4, 5]]),
            ("bij,bjk->bik", &[&[2, 3, 4], &[2, 4, 5]]),
            ("bij,bkj->bik", &[&[2, 3, 4], &[2, 5, 4]]),
            ("ibj,bjk->bik", &[&[3, 2, 4], &[2, 4, 5]]),
            ("bij,jk->bik", &[&[2, 3, 4], &[4, 5]]),
            ("ij,bjk->bik", &[&[3, 4], &[2, 4, 5]]),
            ("bij,bjk->kbi", &[&[2, 3, 4], &[2, 4, 5]]),
            ("...ij,...jk->...ik", &[&[2, 1, 3, 4], &[5, 4, 2]]),
            ("ab,bc,cd->ad", &[&[2, 3], &[3, 4], &[4, 2]]),
            ("i,j->ij", &[&[3], &[4]]),
            ("i,i", &[&[5], &[5]]),
            ("ij,ij->", &[&[3, 4], &[3, 4]]),
            ("ij,ij->ij", &[&[3, 4], &[3, 4]]),
            ("ij,ij->ji", &[&[3, 4], &[3, 4]]),
            ("ii->i", &[&[3, 3]]),
            ("ii", &[&[3, 3]]),
            ("aba->b", &[&[2, 3, 2]]),
            ("...ii->...i", &[&[3, 5, 5]]),
            ("bii,bij->bj", &[&[2, 3, 3], &[2, 3, 4]]),
            ("ij->i", &[&[3, 4]]),
            ("ij->j", &[&[3, 4]]),
            ("ij->", &[&[3, 4]]),
            ("ijk->ki", &[&[3, 4, 5]]),
            ("ijk->j", &[&[3, 4, 5]]),
            ("ij,jk", &[&[3, 4], &[4, 5]]),
            ("ba", &[&[3, 4]]),
            ("ij,ij", &[&[3, 4], &[3, 4]]),
            ("...k", &[&[2, 3, 4]]),
            ("->", &[&[]]),
            (",i->i", &[&[], &[4]]),
            ("i,->i", &[&[4], &[]]),
            ("bij", &[&[2, 3, 4]]),
            ("ijk->kji", &[&[2, 3, 4]]),
            ("ijx,jk->ik", &[&[2, 3, 4], &[3, 5]]),
            ("ij,jky->ik", &[&[2, 3], &[3, 4, 2]]),
            ("abc,cd,de->abe", &[&[2, 3, 4], &[4, 2], &[2, 3]]),
            ("bn,anm,bm->ba", &[&[2, 3], &[4, 3, 5], &[2, 5]]),
            ("abcd,cdbe->ae", &[&[2, 3, 4, 2], &[4, 2, 3, 5]]),
            ("ij,jk->ik", &[&[2, 1], &[3, 4]]),
            ("...i,...i->...", &[&[3, 1, 4], &[5, 4]]),
            ("i...,i...->...", &[&[4, 2, 3], &[4, 3]]),
            ("...ij->j", &[&[2, 3, 4, 5]]),
            ("ij,jk,kl,lm->mi", &[&[2, 3], &[3, 2], &[2, 4], &[4, 3]]),
            ("ij,jk->ik", &[&[3, 0], &[0, 4]]),
            ("ij,jk->ik", &[&[0, 4], &[4, 5]]),
            ("ij->i", &[&[3, 0]]),
        ];
        for (eq, shapes) in cases {
            for kinds in [[0, 0], [1, 0], [0, 1], [2, 1], [1, 2]] {
                case(eq, shapes, &kinds);
            }
        }
    }

    #[test]
    fn sums_pick_lanes_by_layout() {
        let e = split_equation("ij->i");
        let shapes: [&[usize]; 1] = [&[64, 4096]];
        let (labels, sizes, out, out_shape) = resolve_shapes("t", &e, &shapes).unwrap();
        let r = Resolved {
            dtype: DataType::Float32,
            labels,
            sizes,
            out,
            out_shape,
        };
        let plan_of = |strides: Vec<usize>| {
            let key = PlanKey {
                dtype: DataType::Float32,
                inputs: vec![(vec![64, 4096], strides)],
                out_strides: vec![1],
            };
            make_plan("t", 132, &r, &key).unwrap()
        };
        // Rows summed along the contiguous axis: adjacent lanes share an output.
        match &plan_of(vec![4096, 1]).steps[..] {
            [Step::Sum { p, .. }] => assert!(p.lane_major == 1 && p.g >= 32, "{p:?}"),
            _ => panic!("one sum"),
        }
        // Summed along a strided axis with outputs contiguous: adjacent outputs per warp.
        match &plan_of(vec![1, 64]).steps[..] {
            [Step::Sum { p, .. }] => assert!(p.lane_major == 0 && p.g <= 8, "{p:?}"),
            _ => panic!("one sum"),
        }
    }

    #[test]
    fn direct_products_need_no_copies() {
        // A batched product, a transposed operand and an output transposed through its
        // strides run as one product and nothing else.
        for (eq, shapes) in [
            ("bij,bjk->bik", [&[2usize, 3, 4][..], &[2, 4, 5][..]]),
            ("ij,kj->ik", [&[3, 4][..], &[5, 4][..]]),
            ("ij,jk->ki", [&[3, 4][..], &[4, 5][..]]),
            ("ibj,bjk->bik", [&[3, 2, 4][..], &[2, 4, 5][..]]),
        ] {
            let e = split_equation(eq);
            let (labels, sizes, out, out_shape) = resolve_shapes("t", &e, &shapes).unwrap();
            let out_strides = onnx_runtime_ir::compute_contiguous_strides(&out_shape).to_vec();
            let r = Resolved {
                dtype: DataType::Float32,
                labels,
                sizes,
                out,
                out_shape,
            };
            let key = PlanKey {
                dtype: DataType::Float32,
                inputs: shapes
                    .iter()
                    .map(|s| {
                        (
                            s.to_vec(),
                            onnx_runtime_ir::compute_contiguous_strides(s).to_vec(),
                        )
                    })
                    .collect(),
                out_strides,
            };
            let plan = make_plan("t", 132, &r, &key).unwrap();
            assert!(
                plan.temps.is_empty() && matches!(&plan.steps[..], [Step::Gemm { .. }]),
                "{eq}: {} steps, {} temps",
                plan.steps.len(),
                plan.temps.len()
            );
        }
    }

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
