//! Resize's nearest mode as one gather: the source index of every output coordinate is worked
//! out once per axis, an output row whose source row is the previous row's is a copy of it,
//! and an integer upscale of the last axis repeats each element with vector stores. Elements
//! are copied bit for bit (never converted), so every element type is exact.

use crate::ops::nn::scratch::{par_build, planes_per_task, run_simd, ChunkDone, SimdWork};
use bytemuck::Pod;
use std::mem::MaybeUninit;

/// Where each output coordinate along one axis reads: `src[j]`, or the extrapolation value
/// where `outside[j]`.
pub struct NearestAxis {
    pub src: Vec<usize>,
    pub outside: Vec<bool>,
}

impl NearestAxis {
    /// The identity map of an axis of `len`.
    pub fn identity(len: usize) -> NearestAxis {
        NearestAxis {
            src: (0..len).collect(),
            outside: vec![false; len],
        }
    }
}

/// How one output row is made from its source row.
#[derive(Clone, Copy, PartialEq, Debug)]
enum RowKind {
    /// Same length, element for element.
    Copy,
    /// Every source element repeated this many times.
    Repeat(usize),
    /// Through the last axis' map.
    Gather,
}

fn row_kind(m: &NearestAxis, in_len: usize) -> RowKind {
    let out_len = m.src.len();
    if m.outside.iter().any(|&o| o) || in_len == 0 || !out_len.is_multiple_of(in_len) {
        return RowKind::Gather;
    }
    let s = out_len / in_len;
    if m.src.iter().enumerate().any(|(j, &i)| i != j / s) {
        return RowKind::Gather;
    }
    if s == 1 {
        RowKind::Copy
    } else {
        RowKind::Repeat(s)
    }
}

/// `y[o_0, .., o_r] = x[axes[0].src[o_0], .., axes[r].src[o_r]]` (`extrap` where any axis is
/// outside) for `x` of `shape`; `axes` has one map per axis.
pub fn nearest<T: Pod + Send + Sync>(
    x: &[T],
    shape: &[usize],
    axes: &[NearestAxis],
    extrap: T,
) -> Vec<T> {
    let r = shape.len();
    assert_eq!(axes.len(), r, "one map per axis");
    if r == 0 {
        return x.to_vec();
    }
    let last = r - 1;
    let out_shape: Vec<usize> = axes.iter().map(|a| a.src.len()).collect();
    let ow = out_shape[last];
    let rows: usize = out_shape[..last].iter().product();
    if rows * ow == 0 {
        return Vec::new();
    }
    let mut stride = vec![1usize; r];
    for a in (0..last).rev() {
        stride[a] = stride[a + 1] * shape[a + 1];
    }
    let kind = row_kind(&axes[last], shape[last]);
    let per_task = planes_per_task(rows, ow);
    let parallel = per_task.is_some();
    let per_task = per_task.unwrap_or(rows);
    par_build(rows * ow, per_task * ow, parallel, |t, chunk| {
        run_simd(Rows {
            x,
            axes,
            stride: &stride,
            in_w: shape[last],
            kind,
            extrap,
            first: t * per_task,
            out: chunk,
        });
        // SAFETY: `Rows::run` writes every row of its chunk.
        unsafe { ChunkDone::new() }
    })
}

/// Output rows `first..` (as many as `out` holds) of [`nearest`].
struct Rows<'a, T> {
    x: &'a [T],
    axes: &'a [NearestAxis],
    stride: &'a [usize],
    in_w: usize,
    kind: RowKind,
    extrap: T,
    first: usize,
    out: &'a mut [MaybeUninit<T>],
}

impl<T: Pod> SimdWork for Rows<'_, T> {
    #[inline(always)]
    fn run(self) {
        let Rows {
            x,
            axes,
            stride,
            in_w,
            kind,
            extrap,
            first,
            out,
        } = self;
        let last = axes.len() - 1;
        let wmap = &axes[last];
        let ow = wmap.src.len();
        let rows = out.len() / ow;
        // Source row offset of every row of the chunk (None: extrapolated), from a multi-index
        // over the leading axes.
        let mut idx = vec![0usize; last];
        let mut rem = first;
        for a in (0..last).rev() {
            let n = axes[a].src.len();
            idx[a] = rem % n;
            rem /= n;
        }
        let src_of = |idx: &[usize]| -> Option<usize> {
            let mut off = 0;
            for (a, &i) in idx.iter().enumerate() {
                if axes[a].outside[i] {
                    return None;
                }
                off += axes[a].src[i] * stride[a];
            }
            Some(off)
        };
        let mut k = 0;
        let mut cur = src_of(&idx);
        while k < rows {
            // A run of rows reading one source row: written once, then copied.
            let src = cur;
            let mut n = 0;
            while k + n < rows && cur == src {
                n += 1;
                for a in (0..last).rev() {
                    idx[a] += 1;
                    if idx[a] < axes[a].src.len() {
                        break;
                    }
                    idx[a] = 0;
                }
                cur = if last > 0 && k + n < rows {
                    src_of(&idx)
                } else {
                    None
                };
                if last == 0 {
                    break;
                }
            }
            let run = &mut out[k * ow..(k + n) * ow];
            match src {
                None => run.iter_mut().for_each(|e| {
                    e.write(extrap);
                }),
                // Repeats are as cheap to redo from the (cached) source row as to copy, and
                // short rows would pay a memcpy call each.
                Some(off) if kind != RowKind::Gather => {
                    for row in run.chunks_exact_mut(ow) {
                        write_row(&x[off..off + in_w], row, kind, wmap, extrap);
                    }
                }
                Some(off) => {
                    let (head, tail) = run.split_at_mut(ow);
                    write_row(&x[off..off + in_w], head, kind, wmap, extrap);
                    for t in tail.chunks_exact_mut(ow) {
                        t.copy_from_slice(head);
                    }
                }
            }
            k += n;
        }
    }
}

#[inline(always)]
fn write_row<T: Pod>(
    src: &[T],
    row: &mut [MaybeUninit<T>],
    kind: RowKind,
    m: &NearestAxis,
    extrap: T,
) {
    match kind {
        RowKind::Copy => {
            for (o, &v) in row.iter_mut().zip(src) {
                o.write(v);
            }
        }
        RowKind::Repeat(2) => repeat::<T, 2>(src, row),
        RowKind::Repeat(3) => repeat::<T, 3>(src, row),
        RowKind::Repeat(4) => repeat::<T, 4>(src, row),
        RowKind::Repeat(8) => repeat::<T, 8>(src, row),
        RowKind::Repeat(s) => {
            for (o, &v) in row.chunks_exact_mut(s).zip(src) {
                o.iter_mut().for_each(|e| {
                    e.write(v);
                });
            }
        }
        RowKind::Gather => {
            for ((o, &i), &out) in row.iter_mut().zip(&m.src).zip(&m.outside) {
                o.write(if out { extrap } else { src[i] });
            }
        }
    }
}

#[inline(always)]
fn repeat<T: Pod, const S: usize>(src: &[T], row: &mut [MaybeUninit<T>]) {
    for (o, &v) in row.chunks_exact_mut(S).zip(src) {
        let o: &mut [MaybeUninit<T>; S] = o.try_into().expect("chunk of S");
        *o = [MaybeUninit::new(v); S];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Brute force: every output element from its multi-index.
    fn reference(x: &[i64], shape: &[usize], axes: &[NearestAxis], extrap: i64) -> Vec<i64> {
        let out: Vec<usize> = axes.iter().map(|a| a.src.len()).collect();
        let n: usize = out.iter().product();
        (0..n)
            .map(|mut e| {
                let mut off = 0;
                let mut outside = false;
                let mut idx = vec![0; out.len()];
                for a in (0..out.len()).rev() {
                    idx[a] = e % out[a];
                    e /= out[a];
                }
                for a in 0..out.len() {
                    outside |= axes[a].outside[idx[a]];
                    off = off * shape[a] + axes[a].src[idx[a]];
                }
                if outside {
                    extrap
                } else {
                    x[off]
                }
            })
            .collect()
    }

    fn upscale(len: usize, s: usize) -> NearestAxis {
        NearestAxis {
            src: (0..len * s).map(|j| j / s).collect(),
            outside: vec![false; len * s],
        }
    }

    fn check<T: Pod + Send + Sync + PartialEq + std::fmt::Debug>(
        conv: impl Fn(i64) -> T,
        shape: &[usize],
        axes: &[NearestAxis],
    ) {
        let n: usize = shape.iter().product();
        let x: Vec<i64> = (0..n as i64).map(|v| (v * 7919 + 13) % 251 - 120).collect();
        let want: Vec<T> = reference(&x, shape, axes, -999)
            .into_iter()
            .map(&conv)
            .collect();
        let xt: Vec<T> = x.iter().map(|&v| conv(v)).collect();
        assert_eq!(nearest(&xt, shape, axes, conv(-999)), want, "{shape:?}");
    }

    #[test]
    fn matches_brute_force() {
        let f32s = |v: i64| v as f32;
        for s in [1, 2, 3, 4, 5, 8] {
            // Odd widths leave tails past every vector width; enough planes to go parallel.
            for (c, h, w) in [(3, 5, 7), (96, 10, 13), (200, 9, 33)] {
                let axes = [
                    NearestAxis::identity(1),
                    NearestAxis::identity(c),
                    upscale(h, s),
                    upscale(w, s),
                ];
                check(f32s, &[1, c, h, w], &axes);
                check(|v| v as i8, &[1, c, h, w], &axes);
                check(|v| v as u16, &[1, c, h, w], &axes);
                check(|v| v, &[1, c, h, w], &axes);
            }
        }
        // General maps: downscale, reversed order, extrapolated coordinates on outer and last
        // axes, 1-D and 3-D.
        let odd = NearestAxis {
            src: vec![4, 0, 0, 3, 1, 2, 2],
            outside: vec![false, false, true, false, false, false, true],
        };
        let down = NearestAxis {
            src: vec![0, 2, 4],
            outside: vec![false; 3],
        };
        let ext = NearestAxis {
            src: vec![1, 1, 0, 2],
            outside: vec![true, false, false, false],
        };
        check(f32s, &[5], &[odd]);
        let odd = || NearestAxis {
            src: vec![4, 0, 0, 3, 1, 2, 2],
            outside: vec![false, false, true, false, false, false, true],
        };
        check(f32s, &[3, 5, 5], &[ext, down, odd()]);
        check(
            |v| v as u8,
            &[40, 3, 5],
            &[upscale(40, 1), upscale(3, 2), odd()],
        );
        check(
            f32s,
            &[2, 0, 3],
            &[upscale(2, 1), upscale(0, 2), upscale(3, 2)],
        );
    }
}
