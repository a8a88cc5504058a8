//! Convolution as tiled im2col + GEMM. The output of each (image, group) is cut into blocks
//! of output channels x output positions; a block unfolds only its own columns into a
//! per-thread scratch (1x1 stride-1 convolutions read the input in place), runs one
//! single-threaded GEMM straight into the never-zeroed output, and applies the bias and
//! activation while the block is in cache. Blocks run in parallel when the work is big
//! enough to pay for the hand-offs.

use crate::ops::nn::common::{gemm_raw, Real};
use crate::ops::nn::conv::conv_act::Epilogue;
use crate::ops::nn::conv::conv_op::ConvGeom;
use crate::ops::nn::scratch::{with_scratch, SharedMut};
use crate::ops::nn::window::im2col_tile;
use std::mem::MaybeUninit;

/// Largest im2col tile (bytes) a block unfolds.
const TILE_BYTES: usize = 512 << 10;
/// Multiply-adds below which a convolution runs on the calling thread.
const PARALLEL_MACS: usize = 1 << 20;

/// How the output of one (image, group) is cut into blocks (also used by the direct kernel).
#[derive(Debug, PartialEq)]
pub(crate) struct Blocking {
    /// Output positions per block and the number of column blocks.
    pub nt: usize,
    pub parts_n: usize,
    /// Output channels per block and the number of row blocks.
    pub mt: usize,
    pub parts_m: usize,
    pub parallel: bool,
}

fn blocking(
    units: usize,
    mg: usize,
    n_sp: usize,
    kk: usize,
    elem: usize,
    in_place: bool,
    threads: usize,
) -> Blocking {
    let macs = units
        .saturating_mul(mg)
        .saturating_mul(n_sp)
        .saturating_mul(kk);
    let max_cols = if in_place {
        n_sp
    } else {
        (TILE_BYTES / (kk * elem).max(1)).max(16)
    };
    let mut parts_n = n_sp.div_ceil(max_cols.max(1)).max(1);
    let mut parts_m = 1;
    let parallel = threads > 1 && macs >= PARALLEL_MACS;
    if parallel {
        let want = 2 * threads;
        if units * parts_n < want {
            // Split positions while blocks stay at least 64 wide, then channels (32 high).
            let per_unit = want.div_ceil(units);
            parts_n = parts_n.max(per_unit.min((n_sp / 64).max(1)));
            if units * parts_n < want {
                parts_m = want.div_ceil(units * parts_n).min((mg / 32).max(1));
            }
        }
    }
    let round = |v: usize, q: usize| v.div_ceil(q) * q;
    let nt = round(n_sp.div_ceil(parts_n), 16).min(n_sp).max(1);
    let mt = round(mg.div_ceil(parts_m), 8).min(mg).max(1);
    Blocking {
        nt,
        parts_n: n_sp.div_ceil(nt),
        mt,
        parts_m: mg.div_ceil(mt),
        parallel,
    }
}

/// Writes every element of `out` (`[n, m, output...]`) with the convolution of `x` by `w`,
/// finished by `ep`.
pub fn gemm_conv<T: Real>(
    g: &ConvGeom,
    x: &[T],
    w: &[T],
    ep: &Epilogue<T>,
    out: &mut [MaybeUninit<T>],
) {
    let win = &g.win;
    let (cg, mg) = (g.c / g.group, g.m / g.group);
    let kk = cg * win.kernel_size();
    let (in_sz, n_sp) = (win.input_size(), win.output_size());
    assert_eq!(out.len(), g.n * g.m * n_sp, "gemm_conv: output size");
    if out.is_empty() {
        return;
    }
    let in_place = win.is_pointwise();
    let units = g.n * g.group;
    let bl = blocking(
        units,
        mg,
        n_sp,
        kk,
        std::mem::size_of::<T>(),
        in_place,
        rayon::current_num_threads(),
    );
    let per_unit = bl.parts_n * bl.parts_m;
    let outp = SharedMut(out.as_mut_ptr() as *mut T);
    let task = |t: usize| {
        let (unit, rest) = (t / per_unit, t % per_unit);
        let (pn, pm) = (rest / bl.parts_m, rest % bl.parts_m);
        let (b, gi) = (unit / g.group, unit % g.group);
        let n0 = pn * bl.nt;
        let ncols = bl.nt.min(n_sp - n0);
        let m0 = pm * bl.mt;
        let rows = bl.mt.min(mg - m0);
        let ch0 = gi * mg + m0;
        let xg = &x[(b * g.c + gi * cg) * in_sz..(b * g.c + (gi + 1) * cg) * in_sz];
        let wb = &w[ch0 * kk..(ch0 + rows) * kk];
        let obase = (b * g.m + ch0) * n_sp + n0;
        let run = |src: &[T], src_rs: usize| {
            // SAFETY: block (rows x ncols at `obase`, row stride n_sp) lies inside `out`
            // (b < n, ch0 + rows <= m, n0 + ncols <= n_sp) and no other task writes it: tasks
            // differ in image, group, channel block or column block. With beta = 0 the GEMM
            // only writes it.
            unsafe {
                gemm_raw(
                    rows,
                    ncols,
                    kk,
                    wb,
                    (kk, 1),
                    src,
                    (src_rs, 1),
                    outp.get().add(obase),
                    n_sp,
                    T::one(),
                    T::zero(),
                    gemm::Parallelism::None,
                );
            }
            if !ep.is_noop() {
                for r in 0..rows {
                    let off = obase + r * n_sp;
                    // SAFETY: this task's own row segment, just written by the GEMM.
                    let row = unsafe { std::slice::from_raw_parts_mut(outp.get().add(off), ncols) };
                    ep.finish_gemm_row(row, ch0 + r, off);
                }
            }
        };
        if in_place {
            run(&xg[n0..], n_sp);
        } else {
            with_scratch(kk * ncols, |col: &mut [T]| {
                im2col_tile(xg, cg, win, n0, ncols, col);
                run(col, ncols);
            });
        }
    };
    let tasks = units * per_unit;
    if bl.parallel && tasks > 1 {
        use rayon::prelude::*;
        (0..tasks).into_par_iter().for_each(task);
    } else {
        (0..tasks).for_each(task);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn blocks_cover_and_split_for_threads() {
        // Small work stays on one thread in one block per unit.
        let b = blocking(1, 8, 100, 27, 4, false, 2);
        assert_eq!((b.parts_n, b.parts_m, b.parallel), (1, 1, false));
        // One big image splits its positions.
        let b = blocking(1, 64, 12544, 147, 4, false, 2);
        assert!(b.parallel && b.parts_n * b.parts_m >= 4);
        assert!(b.nt * b.parts_n >= 12544 && b.mt * b.parts_m >= 64);
        // Few positions and many channels split the channels.
        let b = blocking(1, 2048, 49, 512, 4, true, 2);
        assert!(b.parts_m >= 4 && b.mt * b.parts_m >= 2048);
        // Huge K caps the tile.
        let b = blocking(1, 64, 3136, 4608, 4, false, 1);
        assert!(b.nt * 4608 * 4 <= TILE_BYTES + 16 * 4608 * 4);
    }
}
