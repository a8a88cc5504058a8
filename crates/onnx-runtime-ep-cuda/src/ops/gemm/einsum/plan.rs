//! The Einsum contraction planner: operands as strided views ([`Opnd`], diagonals taken
//! through their strides), the steps one set of shapes and strides needs ([`Step`]: sums of
//! indices needed nowhere later, packing copies, batched products, the final copy or sum) and
//! [`make_plan`], which contracts the operands pairwise from the left choosing the index
//! orders that need the fewest copies.

use super::equation::{invalid, Label, Resolved};
use super::{EinSumParams, SUM_THREADS};
use crate::ops::common::*;
use crate::ops::gemm::shape::merge;
use crate::ops::params::MAX_DIMS;
use onnx_runtime_ep_api::EpResult;
use onnx_runtime_ir::DataType;
use std::collections::HashMap;

/// Where an operand lives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Buf {
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
pub(super) struct MatPlan {
    pub(super) buf: Buf,
    pub(super) batch: Vec<usize>,
    pub(super) bstrides: Vec<i64>,
    pub(super) rows: usize,
    pub(super) cols: usize,
    pub(super) rs: i64,
    pub(super) cs: i64,
}

pub(super) enum Step {
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
pub(super) struct Plan {
    pub(super) temps: Vec<usize>,
    pub(super) steps: Vec<Step>,
}

/// What a plan depends on besides the equation: dtype, input shapes and strides, output
/// strides.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct PlanKey {
    pub(super) dtype: DataType,
    pub(super) inputs: Vec<(Vec<usize>, Vec<usize>)>,
    pub(super) out_strides: Vec<usize>,
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

/// Plans the contractions of `r` for the views of `key` (`sm`: the device's multiprocessors,
/// for the sum kernels' launch shapes).
pub(super) fn make_plan(node: &str, sm: usize, r: &Resolved, key: &PlanKey) -> EpResult<Plan> {
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

#[cfg(test)]
mod tests;
