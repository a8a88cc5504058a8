//! The reduction family: ReduceSum ... ReduceSumSquare (`reduce.rs`), ArgMax/ArgMin
//! (`argminmax.rs`), Softmax/LogSoftmax/Hardmax (`softmax.rs`) and TopK (`topk.rs`).
//!
//! Every kernel views its input as kept axes (one output, or one row, each) and reduced axes,
//! after dropping size-1 axes and merging neighbours that are contiguous in both the input
//! and the output ([`split_axes`]). When the reduced axes are the fast ones in memory a group
//! of threads reduces each output (vectorized loads on contiguous runs, warp-shuffle trees);
//! otherwise threads own outputs and loop over the reduced extent, which reads coalesced.
//! Few outputs over a long extent are split over blocks that write partials to a per-runtime
//! workspace, combined by a second launch, so the whole GPU works on them.

mod argminmax;
#[allow(clippy::module_inception)]
mod reduce;
mod softmax;
mod topk;

use super::common::*;
use super::params::MAX_RANK;
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CuPtr, CudaRuntime, Function, Module};
use onnx_runtime_ep_api::EpResult;
use onnx_runtime_ir::DataType;
use std::sync::{Arc, Mutex};

pub fn register(r: &mut Registry) {
    reduce::register(r);
    argminmax::register(r);
    softmax::register(r);
    topk::register(r);
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    let mut all: Vec<ModuleSpec> = reduce::Kind::ALL.iter().map(|k| k.module()).collect();
    all.push(argminmax::module());
    all.extend((0..3).map(softmax::module));
    all.push(topk::module());
    all
}

/// The reduction helpers prepended to each of the family's kernel sources.
macro_rules! with_common {
    ($file:literal) => {
        concat!(
            include_str!("../../kernels/reduce_common.cuh"),
            "\n",
            include_str!($file)
        )
    };
}
pub(crate) use with_common;

/// The numeric dtypes (every typed dtype but bool) with their kernel-name tags.
pub(crate) fn numeric() -> impl Iterator<Item = (DataType, &'static str)> {
    TYPED
        .iter()
        .filter(|t| t.0 != DataType::Bool)
        .map(|t| (t.0, t.1))
}

// ---- launch parameters, mirrored in the .cu files ----

/// `RedParams` of reduce.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RedParams {
    pub n_out: i64,
    pub n_red: i64,
    pub chunk: i64,
    pub count: i64,
    pub k_rank: i32,
    pub r_rank: i32,
    pub splits: i32,
    pub contig: i32,
    pub flags: i32,
    pub _pad: i32,
    pub k_dims: [i64; MAX_RANK],
    pub k_in: [i64; MAX_RANK],
    pub k_out: [i64; MAX_RANK],
    pub r_dims: [i64; MAX_RANK],
    pub r_in: [i64; MAX_RANK],
}

// ---- axis planning ----

/// One axis of a coalesced view: its size, input stride and output stride (elements).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Axis {
    pub dim: usize,
    pub a: i64,
    pub b: i64,
}

/// Merges neighbours that are contiguous in both layouts (the outer one spans the inner).
fn merge(axes: Vec<Axis>) -> Vec<Axis> {
    let mut out: Vec<Axis> = Vec::with_capacity(axes.len());
    for ax in axes {
        if let Some(last) = out.last_mut() {
            let d = ax.dim as i64;
            if last.a == ax.a * d && last.b == ax.b * d {
                last.dim *= ax.dim;
                last.a = ax.a;
                last.b = ax.b;
                continue;
            }
        }
        out.push(ax);
    }
    out
}

/// Splits the axes of `shape` (input strides `a`, output strides `b`) into kept and reduced
/// ones (`reduced[k]`), drops size-1 axes and merges contiguous neighbours. The reduced axes
/// are ordered by decreasing input stride (the last is the fastest); the kept ones too when
/// `sort_kept` (threads then walk the input in memory order), else they keep the tensor's
/// order (outputs in order).
pub(crate) fn split_axes(
    shape: &[usize],
    a: &[i64],
    b: &[i64],
    reduced: &[bool],
    sort_kept: bool,
) -> (Vec<Axis>, Vec<Axis>) {
    let mut kept = Vec::new();
    let mut red = Vec::new();
    for k in 0..shape.len() {
        if shape[k] == 1 {
            continue;
        }
        let ax = Axis {
            dim: shape[k],
            a: a[k],
            b: b[k],
        };
        if reduced[k] {
            red.push(ax);
        } else {
            kept.push(ax);
        }
    }
    if sort_kept {
        kept.sort_by_key(|x| std::cmp::Reverse(x.a));
    }
    red.sort_by_key(|x| std::cmp::Reverse(x.a));
    (merge(kept), merge(red))
}

/// The smallest non-zero input stride of some axes.
pub(crate) fn min_stride(axes: &[Axis]) -> Option<i64> {
    axes.iter().filter(|x| x.a != 0).map(|x| x.a.abs()).min()
}

/// Whether the reduced axes are the fast ones in memory (a group of threads per output reads
/// them) rather than the kept ones (threads per output, looping over the reduced extent).
pub(crate) fn reduced_is_fast(kept: &[Axis], red: &[Axis]) -> bool {
    match (min_stride(red), min_stride(kept)) {
        (Some(r), Some(k)) => r < k,
        (Some(_), None) => true,
        _ => false,
    }
}

pub(crate) fn product(axes: &[Axis]) -> i64 {
    axes.iter().map(|x| x.dim as i64).product()
}

/// The smallest power of two >= x (1 for x <= 1).
pub(crate) fn np2(x: i64) -> i64 {
    if x <= 1 {
        1
    } else {
        (x as u64).next_power_of_two() as i64
    }
}

pub(crate) fn ceil_div(a: i64, b: i64) -> i64 {
    (a + b - 1) / b
}

/// Fills the kept-axis arrays (dims, input strides, output strides) of a params struct.
pub(crate) fn fill_axes(
    axes: &[Axis],
    dims: &mut [i64; MAX_RANK],
    a: &mut [i64; MAX_RANK],
    b: &mut [i64; MAX_RANK],
) {
    for (k, ax) in axes.iter().enumerate() {
        dims[k] = ax.dim as i64;
        a[k] = ax.a;
        b[k] = ax.b;
    }
}

/// Threads a grid should hold to keep every multiprocessor full.
pub(crate) fn target_threads(rt: &CudaRuntime) -> i64 {
    i64::from(rt.sm_count()) * 2048
}

/// A block of `g` threads per row (a power of two) and as many rows as fill 256 threads.
pub(crate) fn group_block(g: i64) -> (u32, u32) {
    if g >= 256 {
        (g as u32, 1)
    } else {
        (g as u32, (256 / g) as u32)
    }
}

/// The (threads over outputs, threads over the reduced extent) block of a column kernel for
/// `n_out` outputs whose fastest kept axis has `inner` elements, over `n_red` elements.
pub(crate) fn tile_block(inner: i64, n_out: i64, n_red: i64) -> (i64, i64) {
    let nr = np2(n_red.max(1));
    let bx0 = np2(inner).min(32);
    let by0 = nr.min(256 / bx0);
    let bx = (256 / by0).min(np2(n_out)).max(1);
    let by = nr.min(256 / bx).max(1);
    (bx, by)
}

// ---- the split-reduction workspace ----

/// Bytes of the per-runtime workspace for split reductions' partials.
const WS_BYTES: usize = 4 << 20;
/// Bytes a partial takes at most (the largest accumulator: an (index, value) pair or a
/// (max, sum) pair of doubles).
pub(crate) const ACC_BYTES: i64 = 16;

/// Device memory for the partials of split reductions, shared by the family's kernels of one
/// runtime; the lock spans the partial and the finishing launch (work on the one stream is
/// ordered, so holding it while enqueueing is enough).
pub(crate) struct Workspace {
    pub ptr: CuPtr,
    pub bytes: usize,
    pub lock: Mutex<()>,
}

pub(crate) fn workspace(rt: &Arc<CudaRuntime>) -> EpResult<Arc<Workspace>> {
    rt.extension(|rt| {
        let (ptr, bytes) = rt.allocate(WS_BYTES, 256)?;
        Ok(Workspace {
            ptr,
            bytes,
            lock: Mutex::new(()),
        })
    })
}

// ---- the reduction launcher (reduce.rs, argminmax.rs) ----

/// The kernels of one reduction kind for one dtype.
#[derive(Clone, Copy)]
pub(crate) struct RedFns {
    pub rows: Function,
    pub tile: Function,
    pub finish: Function,
}

impl RedFns {
    pub fn load(module: &Module, tag: &str) -> EpResult<Self> {
        Ok(RedFns {
            rows: module.function(&format!("reduce_rows_{tag}"))?,
            tile: module.function(&format!("reduce_tile_{tag}"))?,
            finish: module.function(&format!("reduce_finish_{tag}"))?,
        })
    }
}

/// One reduction: the input's shape and strides, the output strides of each input axis (0
/// for reduced ones), which axes are reduced, and the kind's parameters.
pub(crate) struct Reduction<'a> {
    pub shape: &'a [usize],
    pub in_strides: Vec<i64>,
    pub out_strides: Vec<i64>,
    pub reduced: Vec<bool>,
    /// The divisor of a mean (the number of elements reduced into each output).
    pub count: i64,
    pub flags: i32,
    /// Bytes of an input element.
    pub elem: usize,
}

/// Contiguous reduced vectors a thread of the rows kernel loads at once (RED_UNROLL of
/// reduce.cu): one such round a thread at least, before a row takes more than a warp.
const PER_THREAD_VECTORS: i64 = 8;
/// The shortest run of a row a split of the rows kernel reduces.
const ROW_SPLIT_MIN: i64 = 4096;
/// Reduced elements per thread, at least, in a split of the column kernel.
const TILE_SPLIT_MIN: i64 = 16;
const MAX_SPLITS: i64 = 1024;

/// Which kernel of reduce.cu a launch runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RedKernel {
    Rows,
    Tile,
    Finish,
}

/// One planned launch: kernel, grid, block, dynamic shared bytes and parameters.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Launch<K, P> {
    pub kernel: K,
    pub grid: (u32, u32, u32),
    pub block: (u32, u32, u32),
    pub shared: u32,
    pub params: P,
}

/// The grid size for `blocks` blocks, or why it is too many.
pub(crate) fn grid_dim(blocks: i64) -> Result<u32, String> {
    if blocks > i32::MAX as i64 {
        return Err(format!(
            "{blocks} thread blocks exceed the grid limit; split the tensor"
        ));
    }
    Ok(blocks.max(1) as u32)
}

/// Plans a reduction: the launches (none for an empty output; a partial and a finishing one
/// when the reduced extent is split) for a GPU that holds `target` threads, with a workspace
/// of `cap` partials.
pub(crate) fn plan_reduction(
    r: &Reduction<'_>,
    target: i64,
    cap: i64,
) -> Result<Vec<Launch<RedKernel, RedParams>>, String> {
    let (kept, red) = split_axes(r.shape, &r.in_strides, &r.out_strides, &r.reduced, false);
    let n_out = product(&kept);
    let n_red = product(&red);
    if n_out == 0 {
        return Ok(Vec::new());
    }
    let rows = n_red > 1 && reduced_is_fast(&kept, &red);
    let kept = if rows {
        kept
    } else {
        split_axes(r.shape, &r.in_strides, &r.out_strides, &r.reduced, true).0
    };
    if kept.len().max(red.len()) > MAX_RANK {
        return Err(format!("more than {MAX_RANK} axes after merging"));
    }
    let contig = red.len() == 1 && red[0].a == 1;
    let mut p = RedParams {
        n_out,
        n_red,
        chunk: n_red,
        count: r.count,
        k_rank: kept.len() as i32,
        r_rank: red.len() as i32,
        splits: 1,
        contig: contig as i32,
        flags: r.flags,
        ..Default::default()
    };
    fill_axes(&kept, &mut p.k_dims, &mut p.k_in, &mut p.k_out);
    let mut unused = [0i64; MAX_RANK];
    fill_axes(&red, &mut p.r_dims, &mut p.r_in, &mut unused);
    let first = if rows {
        let per = PER_THREAD_VECTORS * if contig { (16 / r.elem) as i64 } else { 1 };
        // One round of loads a thread; but at most a warp a row (shuffles alone, and each
        // thread streams several rounds) while the rows fill a quarter of the GPU's threads;
        // fewer rows spread over more threads (up to a round each), then over splits.
        let full = np2(ceil_div(n_red, per)).clamp(1, 1024);
        let mut g = full.min(32);
        if n_out * g < target / 4 {
            g = full.min(np2(ceil_div(target, n_out))).max(g);
        }
        if n_out * g < target / 2 && n_red >= 2 * ROW_SPLIT_MIN && cap / n_out >= 2 {
            let want = ceil_div(target, n_out * g)
                .min(n_red / ROW_SPLIT_MIN)
                .min(cap / n_out)
                .min(MAX_SPLITS);
            if want > 1 {
                let chunk = ceil_div(ceil_div(n_red, want), 256) * 256;
                p.chunk = chunk;
                p.splits = ceil_div(n_red, chunk) as i32;
                g = np2(ceil_div(chunk, per)).clamp(32, 1024);
            }
        }
        let (bx, by) = group_block(g);
        Launch {
            kernel: RedKernel::Rows,
            grid: (
                grid_dim(ceil_div(n_out, i64::from(by)))?,
                p.splits as u32,
                1,
            ),
            block: (bx, by, 1),
            shared: 0,
            params: p,
        }
    } else {
        let inner = kept.last().map_or(1, |k| k.dim as i64);
        let (bx, by) = tile_block(inner, n_out, n_red);
        let threads = ceil_div(n_out, bx) * bx * by;
        if threads < target / 2 && n_red >= 2 * by * TILE_SPLIT_MIN && cap / n_out >= 2 {
            let want = ceil_div(target, threads)
                .min(n_red / (by * TILE_SPLIT_MIN))
                .min(cap / n_out)
                .min(MAX_SPLITS);
            if want > 1 {
                let chunk = ceil_div(n_red, want);
                p.chunk = chunk;
                p.splits = ceil_div(n_red, chunk) as i32;
            }
        }
        Launch {
            kernel: RedKernel::Tile,
            grid: (grid_dim(ceil_div(n_out, bx))?, p.splits as u32, 1),
            block: (bx as u32, by as u32, 1),
            shared: (bx * by * ACC_BYTES) as u32,
            params: p,
        }
    };
    let mut launches = vec![first];
    if first.params.splits > 1 {
        let block: (u32, u32, u32) = if p.splits >= 32 {
            (32, 8, 1)
        } else {
            (1, 256, 1)
        };
        launches.push(Launch {
            kernel: RedKernel::Finish,
            grid: (grid_dim(ceil_div(n_out, i64::from(block.1)))?, 1, 1),
            block,
            shared: 0,
            params: first.params,
        });
    }
    Ok(launches)
}

/// Plans and launches a reduction from `src` into `dst` (plus the finishing launch when the
/// reduced extent is split).
pub(crate) fn launch_reduction(
    base: &Base,
    fns: &RedFns,
    ws: &Workspace,
    r: &Reduction<'_>,
    src: CuPtr,
    dst: CuPtr,
) -> EpResult<()> {
    let cap = ws.bytes as i64 / ACC_BYTES;
    let launches = plan_reduction(r, target_threads(&base.rt), cap).map_err(|e| base.err(e))?;
    // The partials of a split reduction live in the shared workspace until the finishing
    // launch has read them.
    let _guard = (launches.len() > 1).then(|| ws.lock.lock().unwrap_or_else(|e| e.into_inner()));
    for l in launches {
        let (mut pi, mut po, mut pw, mut p) = (src, dst, ws.ptr, l.params);
        let f = match l.kernel {
            RedKernel::Rows => fns.rows,
            RedKernel::Tile => fns.tile,
            RedKernel::Finish => fns.finish,
        };
        if l.kernel == RedKernel::Finish {
            let mut args = [arg(&mut po), arg(&mut pw), arg(&mut p)];
            // SAFETY: reduce_finish reads the partials the first launch wrote (splits *
            // n_out <= cap entries of the workspace) and writes each output once.
            unsafe {
                base.rt
                    .launch_cfg(f, l.grid, l.block, l.shared, &mut args)?
            };
        } else {
            let mut args = [arg(&mut pi), arg(&mut po), arg(&mut pw), arg(&mut p)];
            // SAFETY: the kernel reads the input inside its view (offsets from its strides)
            // and writes one element per output inside the output's view, or one partial per
            // (split, output) inside the workspace.
            unsafe {
                base.rt
                    .launch_cfg(f, l.grid, l.block, l.shared, &mut args)?
            };
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ax(dim: usize, a: i64, b: i64) -> Axis {
        Axis { dim, a, b }
    }

    #[test]
    fn split_axes_merges_contiguous_neighbours() {
        // [2, 3, 4] reduced over axis 1.
        let (k, r) = split_axes(
            &[2, 3, 4],
            &[12, 4, 1],
            &[4, 0, 1],
            &[false, true, false],
            false,
        );
        assert_eq!(k, vec![ax(2, 12, 4), ax(4, 1, 1)]);
        assert_eq!(r, vec![ax(3, 4, 0)]);
        // Reduced over the two trailing axes: one contiguous run.
        let (k, r) = split_axes(
            &[2, 3, 4],
            &[12, 4, 1],
            &[1, 0, 0],
            &[false, true, true],
            false,
        );
        assert_eq!(k, vec![ax(2, 12, 1)]);
        assert_eq!(r, vec![ax(12, 1, 0)]);
        // Non-adjacent reduced axes that are not contiguous stay apart; size-1 axes vanish.
        let (k, r) = split_axes(
            &[2, 1, 3, 4],
            &[12, 12, 4, 1],
            &[0, 3, 1, 0],
            &[true, false, false, true],
            false,
        );
        assert_eq!(k, vec![ax(3, 4, 1)]);
        assert_eq!(r, vec![ax(2, 12, 0), ax(4, 1, 0)]);
        // A transposed input: kept axes sorted by input stride when asked.
        let (k, _) = split_axes(
            &[3, 5, 2],
            &[1, 3, 15],
            &[10, 2, 1],
            &[false, true, false],
            true,
        );
        assert_eq!(k, vec![ax(2, 15, 1), ax(3, 1, 10)]);
    }

    #[test]
    fn the_fast_axis_picks_the_kernel() {
        assert!(reduced_is_fast(&[ax(8, 100, 1)], &[ax(100, 1, 0)]));
        assert!(!reduced_is_fast(&[ax(100, 1, 1)], &[ax(8, 100, 0)]));
        assert!(reduced_is_fast(&[], &[ax(100, 1, 0)]));
        // Broadcast (stride 0) axes are not fast.
        assert!(!reduced_is_fast(&[ax(4, 1, 1)], &[ax(9, 0, 0)]));
    }

    #[test]
    fn block_shapes() {
        assert_eq!(tile_block(4096, 4096, 4096), (32, 8));
        assert_eq!(tile_block(3, 3, 300_000), (4, 64));
        assert_eq!(tile_block(1, 1, 1), (1, 1));
        assert_eq!(tile_block(100, 1_000_000, 1), (256, 1));
        assert_eq!(tile_block(7, 35, 300), (8, 32));
        assert_eq!(group_block(1), (1, 256));
        assert_eq!(group_block(64), (64, 4));
        assert_eq!(group_block(1024), (1024, 1));
        assert_eq!((np2(0), np2(1), np2(5), np2(1024)), (1, 1, 8, 1024));
    }

    /// A last-axis reduction of a contiguous [rows, cols] float32 tensor on an H200.
    fn last_axis(rows: usize, cols: usize) -> Vec<Launch<RedKernel, RedParams>> {
        let r = Reduction {
            shape: &[rows, cols],
            in_strides: vec![cols as i64, 1],
            out_strides: vec![1, 0],
            reduced: vec![false, true],
            count: cols as i64,
            flags: 0,
            elem: 4,
        };
        plan_reduction(&r, 132 * 2048, (WS_BYTES as i64) / ACC_BYTES).unwrap()
    }

    #[test]
    fn last_axis_rows_take_a_warp_each_until_few() {
        // [4096, 4096]: a warp a row (4 rounds of 8 vector loads a lane), one launch.
        let l = last_axis(4096, 4096);
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].kernel, RedKernel::Rows);
        assert_eq!((l[0].block, l[0].grid), ((32, 8, 1), (512, 1, 1)));
        // [16384, 1024]: a warp a row, one round a lane.
        let l = last_axis(16384, 1024);
        assert_eq!((l[0].block, l[0].grid), ((32, 8, 1), (2048, 1, 1)));
        // [256, 65536]: few rows spread over 1024 threads.
        let l = last_axis(256, 65536);
        assert_eq!(l.len(), 1);
        assert_eq!(l[0].block, (1024, 1, 1));
        // One long row: split over blocks, then finished.
        let l = last_axis(1, 1 << 24);
        assert_eq!(l.len(), 2);
        assert!(l[0].params.splits > 100);
        assert_eq!(l[1].kernel, RedKernel::Finish);
        // Short rows: fewer threads a row (8 vectors each).
        let l = last_axis(100_000, 64);
        assert_eq!(l[0].block, (2, 128, 1));
    }

    #[test]
    fn params_match_the_cuda_layout() {
        // 4 i64 + 6 i32 + 5 arrays of MAX_RANK i64 (reduce.cu's RedParams).
        assert_eq!(std::mem::size_of::<RedParams>(), 32 + 24 + 5 * 8 * MAX_RANK);
    }
}
