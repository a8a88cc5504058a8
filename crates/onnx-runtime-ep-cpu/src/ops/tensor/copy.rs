//! Strided and table-driven copies: the engines behind Transpose, Slice, Expand, Pad,
//! CenterCropPad, DepthToSpace and SpaceToDepth.

use super::common::Elem;
use rayon::prelude::*;

/// Output elements above which copies are split across threads.
const PARALLEL_MIN: usize = 1 << 16;
/// Destination rows per (parallel) block of the blocked 2-D transpose.
const TILE: usize = 64;
/// Edge of the tiles the blocked transpose moves through a buffer.
const MICRO: usize = 8;

/// Drops size-1 axes and merges adjacent axes that are contiguous in the source.
fn simplify(shape: &[usize], strides: &[isize]) -> (Vec<usize>, Vec<isize>) {
    let mut s: Vec<usize> = Vec::with_capacity(shape.len());
    let mut st: Vec<isize> = Vec::with_capacity(shape.len());
    for (&d, &t) in shape.iter().zip(strides) {
        if d == 1 {
            continue;
        }
        if let (Some(&ld), Some(&lt)) = (s.last(), st.last()) {
            if lt == t * d as isize {
                *s.last_mut().unwrap() = ld * d;
                *st.last_mut().unwrap() = t;
                continue;
            }
        }
        s.push(d);
        st.push(t);
    }
    (s, st)
}

/// Source offset of row `row` (row-major over `outer`).
fn row_offset(outer: &[usize], strides: &[isize], mut row: usize) -> isize {
    let mut off = 0isize;
    for i in (0..outer.len()).rev() {
        off += (row % outer[i]) as isize * strides[i];
        row /= outer[i];
    }
    off
}

/// Advances an odometer over `outer`, keeping `off` in step.
fn advance(index: &mut [usize], outer: &[usize], strides: &[isize], off: &mut isize) {
    for i in (0..outer.len()).rev() {
        index[i] += 1;
        *off += strides[i];
        if index[i] < outer[i] {
            return;
        }
        *off -= strides[i] * outer[i] as isize;
        index[i] = 0;
    }
}

/// Copies the strided view of `src` (first element at `offset`, per-axis element `strides`,
/// which may be zero or negative) into `dst`, row-major over `shape`. The caller guarantees
/// every addressed element lies inside `src`.
pub fn copy_strided<T: Elem>(
    src: &[T],
    offset: usize,
    shape: &[usize],
    strides: &[isize],
    dst: &mut [T],
) {
    let total: usize = shape.iter().product();
    debug_assert_eq!(dst.len(), total);
    if total == 0 {
        return;
    }
    let (shape, strides) = simplify(shape, strides);
    let r = shape.len();
    if r == 0 {
        dst[0] = src[offset].clone();
        return;
    }
    // Blocked 2-D transpose: the last axis strides through the source, the one before is
    // contiguous there.
    if r >= 2 && strides[r - 2] == 1 && strides[r - 1] != 0 && shape[r - 1] >= 4 {
        let (rows, cols, cs) = (shape[r - 2], shape[r - 1], strides[r - 1]);
        let plane = rows * cols;
        let outer = &shape[..r - 2];
        let ost = &strides[..r - 2];
        // One block of TILE destination rows, moved as MICRO×MICRO tiles through a small
        // buffer: each tile reads MICRO source runs and writes MICRO destination runs, so
        // the cache lines in flight stay within the cache's associativity even when both
        // strides are powers of two.
        let block = |base: isize, i0: usize, rows_blk: &mut [T]| {
            let n_i = rows_blk.len() / cols;
            let mut tmp = vec![T::default(); MICRO * MICRO];
            for j0 in (0..cols).step_by(MICRO) {
                let nj = MICRO.min(cols - j0);
                for ib in (0..n_i).step_by(MICRO) {
                    let ni = MICRO.min(n_i - ib);
                    for jj in 0..nj {
                        let s0 = (base + (i0 + ib) as isize + (j0 + jj) as isize * cs) as usize;
                        for (ii, v) in src[s0..s0 + ni].iter().enumerate() {
                            tmp[ii * MICRO + jj] = v.clone();
                        }
                    }
                    for ii in 0..ni {
                        let d0 = (ib + ii) * cols + j0;
                        rows_blk[d0..d0 + nj].clone_from_slice(&tmp[ii * MICRO..ii * MICRO + nj]);
                    }
                }
            }
        };
        for (p, chunk) in dst.chunks_mut(plane).enumerate() {
            let base = offset as isize + row_offset(outer, ost, p);
            if total >= PARALLEL_MIN {
                chunk
                    .par_chunks_mut(TILE * cols)
                    .enumerate()
                    .for_each(|(q, blk)| block(base, q * TILE, blk));
            } else {
                for (q, blk) in chunk.chunks_mut(TILE * cols).enumerate() {
                    block(base, q * TILE, blk);
                }
            }
        }
        return;
    }
    let inner = shape[r - 1];
    let is = strides[r - 1];
    let outer = &shape[..r - 1];
    let ost = &strides[..r - 1];
    let rows_total = total / inner;
    let copy_rows = |first_row: usize, chunk: &mut [T]| {
        let mut index = vec![0usize; outer.len()];
        let mut rem = first_row;
        for i in (0..outer.len()).rev() {
            index[i] = rem % outer[i];
            rem /= outer[i];
        }
        let mut off = offset as isize + row_offset(outer, ost, first_row);
        for row in chunk.chunks_mut(inner) {
            let b = off as usize;
            if is == 1 {
                row.clone_from_slice(&src[b..b + inner]);
            } else if is == 0 {
                row.fill(src[b].clone());
            } else {
                for (j, d) in row.iter_mut().enumerate() {
                    *d = src[(off + j as isize * is) as usize].clone();
                }
            }
            advance(&mut index, outer, ost, &mut off);
        }
    };
    if total >= PARALLEL_MIN && rows_total > 1 {
        let rows_per = rows_total.div_ceil(rayon::current_num_threads() * 4).max(1);
        dst.par_chunks_mut(rows_per * inner)
            .enumerate()
            .for_each(|(c, chunk)| copy_rows(c * rows_per, chunk));
    } else {
        copy_rows(0, dst);
    }
}

/// Transposes `src` of `shape` by `perm` into `dst`.
pub fn transpose<T: Elem>(src: &[T], shape: &[usize], perm: &[usize], dst: &mut [T]) {
    let strides = super::common::strides_of(shape);
    let out_shape: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
    let out_strides: Vec<isize> = perm.iter().map(|&p| strides[p] as isize).collect();
    copy_strided(src, 0, &out_shape, &out_strides, dst);
}

/// One run of an index table along the last axis: `len` elements from `start` on, or a fill.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Run {
    Copy { start: usize, len: usize },
    Single(usize),
    Fill(usize),
}

fn runs(table: &[Option<usize>]) -> Vec<Run> {
    let mut out: Vec<Run> = Vec::new();
    for &e in table {
        match (out.last_mut(), e) {
            (Some(Run::Fill(n)), None) => *n += 1,
            (_, None) => out.push(Run::Fill(1)),
            (Some(Run::Copy { start, len }), Some(s)) if *start + *len == s => *len += 1,
            (Some(last @ Run::Single(_)), Some(s)) => {
                let Run::Single(p) = *last else {
                    unreachable!()
                };
                if p + 1 == s {
                    *last = Run::Copy { start: p, len: 2 };
                } else {
                    out.push(Run::Single(s));
                }
            }
            (_, Some(s)) => out.push(Run::Single(s)),
        }
    }
    out
}

/// Builds an output of `tables.len()` axes where `tables[a][o]` is the input index along axis
/// `a` for output index `o`, or `None` where the output takes `fill` (Pad, CenterCropPad,
/// Slice). `src` is row-major over `in_shape`. Contiguous runs of the last axis are copied as
/// slices.
pub fn gather_tables<T: Elem>(
    src: &[T],
    in_shape: &[usize],
    tables: &[Vec<Option<usize>>],
    fill: &T,
    dst: &mut [T],
) {
    let out_shape: Vec<usize> = tables.iter().map(|t| t.len()).collect();
    let total: usize = out_shape.iter().product();
    debug_assert_eq!(dst.len(), total);
    if total == 0 {
        return;
    }
    let r = tables.len();
    if r == 0 {
        dst[0] = src[0].clone();
        return;
    }
    let strides = super::common::strides_of(in_shape);
    let last = runs(&tables[r - 1]);
    let inner = out_shape[r - 1];
    let fill_row = |row: &mut [T], base: Option<usize>| {
        let Some(base) = base else {
            row.fill(fill.clone());
            return;
        };
        let mut o = 0;
        for run in &last {
            match *run {
                Run::Copy { start, len } => {
                    row[o..o + len].clone_from_slice(&src[base + start..base + start + len]);
                    o += len;
                }
                Run::Single(s) => {
                    row[o] = src[base + s].clone();
                    o += 1;
                }
                Run::Fill(n) => {
                    row[o..o + n].fill(fill.clone());
                    o += n;
                }
            }
        }
    };
    let outer = &out_shape[..r - 1];
    let row_base = |mut row: usize| -> Option<usize> {
        let mut base = 0usize;
        for a in (0..r - 1).rev() {
            let i = row % outer[a];
            row /= outer[a];
            base += tables[a][i]? * strides[a];
        }
        Some(base)
    };
    if total >= PARALLEL_MIN {
        dst.par_chunks_mut(inner)
            .enumerate()
            .for_each(|(k, row)| fill_row(row, row_base(k)));
    } else {
        for (k, row) in dst.chunks_mut(inner).enumerate() {
            fill_row(row, row_base(k));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strided_matches_naive() {
        // A 3-D permutation checked against index arithmetic.
        let shape = [3usize, 5, 7];
        let src: Vec<u32> = (0..105).collect();
        for perm in [
            [0, 1, 2],
            [2, 1, 0],
            [1, 0, 2],
            [0, 2, 1],
            [2, 0, 1],
            [1, 2, 0],
        ] {
            let mut got = vec![0u32; 105];
            transpose(&src, &shape, &perm, &mut got);
            let os: Vec<usize> = perm.iter().map(|&p| shape[p]).collect();
            let mut k = 0;
            for a in 0..os[0] {
                for b in 0..os[1] {
                    for c in 0..os[2] {
                        let mut idx = [0usize; 3];
                        idx[perm[0]] = a;
                        idx[perm[1]] = b;
                        idx[perm[2]] = c;
                        assert_eq!(got[k], (idx[0] * 35 + idx[1] * 7 + idx[2]) as u32);
                        k += 1;
                    }
                }
            }
        }
    }

    #[test]
    fn tables_runs() {
        assert_eq!(
            runs(&[None, Some(0), Some(1), Some(3), None]),
            vec![
                Run::Fill(1),
                Run::Copy { start: 0, len: 2 },
                Run::Single(3),
                Run::Fill(1)
            ]
        );
        let src: Vec<u8> = (0..6).collect();
        let mut out = vec![0u8; 6];
        gather_tables(
            &src,
            &[2, 3],
            &[vec![Some(1), None], vec![Some(2), Some(0), None]],
            &9,
            &mut out,
        );
        assert_eq!(out, vec![5, 3, 9, 9, 9, 9]);
    }
}
