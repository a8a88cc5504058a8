//! Unique (opset 11): the distinct elements (no `axis`) or slices along `axis`, `sorted`
//! (default 1) or in order of first occurrence, with the first index of each, the inverse
//! indices and the counts, for every numeric dtype and bool (strings stay on the CPU
//! provider). Semantics mirror the CPU provider (`onnx-runtime-ep-cpu/src/ops/tensor/unique.rs`):
//! floats compare by value with -0.0 equal to 0.0 and every NaN equal to every NaN and
//! greater than everything; equal slices keep the value of their first occurrence.
//!
//! The work is on the device (`kernels/unique.cu`): order-preserving keys, a sort of the
//! slice ids (`kernels/index_sort.cuh`: shared-memory bitonic tiles, then merge passes),
//! group heads and their scan. The group count decides the output shapes, so `output_types`
//! reads it back (one small copy, which synchronizes) and keeps the device state for the
//! `execute` that follows with the same inputs, which writes the four outputs. Not
//! capturable (data-dependent output shape).
//!
//! This file also holds the sort and scan launch helpers that NonMaxSuppression shares.

use crate::compiler::ModuleSpec;
use crate::ops::common::*;
use crate::ops::params::MAX_RANK;
use crate::ops::Registry;
use crate::runtime::{CuPtr, CudaRuntime, Function, Module};
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

// ---- shared sort / scan helpers (kernels/index_sort.cuh) ----

/// Ids per shared-memory sorted tile (ISORT_TILE) and the block that sorts one.
const SORT_TILE: usize = 1024;
const SORT_THREADS: u32 = 512;
/// Values per scan tile (ISORT_SCAN_TILE) and its block.
const SCAN_TILE: usize = 1024;
const SCAN_THREADS: u32 = 256;

/// The most ids the u32 sort takes (one id is the padding sentinel).
pub(crate) const MAX_SORT_IDS: usize = u32::MAX as usize - 1;

/// One device block carved into 256-byte aligned regions.
pub(crate) struct Scratch {
    pub ptr: CuPtr,
    offs: Vec<usize>,
}

impl Scratch {
    pub fn new(base: &Base, sizes: &[usize]) -> EpResult<Scratch> {
        let mut offs = Vec::with_capacity(sizes.len());
        let mut total = 0usize;
        for &s in sizes {
            offs.push(total);
            total = total
                .checked_add(s.max(1).div_ceil(256) * 256)
                .ok_or_else(|| base.err("the scratch size overflows"))?;
        }
        let (ptr, _) = base.rt.allocate(total.max(256), 256)?;
        Ok(Scratch { ptr, offs })
    }

    pub fn at(&self, region: usize) -> CuPtr {
        self.ptr + self.offs[region] as CuPtr
    }

    /// Returns the block to the cache (later reuse is ordered after the enqueued work).
    pub fn release(&self, base: &Base) {
        let _ = base.rt.free(self.ptr);
    }
}

/// Sorts `n` u32 ids at `a` (`b` is a second buffer of `n` ids for the merge passes) with
/// the module's `tiles` and `merge` kernels for comparator `cmp` (a `#[repr(C)]` mirror of
/// the kernels' comparator struct). Returns the buffer that holds the sorted ids.
pub(crate) fn sort_ids<C: Copy>(
    base: &Base,
    tiles: Function,
    merge: Function,
    a: CuPtr,
    b: CuPtr,
    n: usize,
    cmp: C,
) -> EpResult<CuPtr> {
    if n <= 1 {
        return Ok(a);
    }
    let blocks = n.div_ceil(SORT_TILE) as u32;
    let (mut pa, mut pn, mut c) = (a, n as i64, cmp);
    let mut args = [arg(&mut pa), arg(&mut pn), arg(&mut c)];
    // SAFETY: X_sort_tiles(ids, n, Cmp) sorts ids[0..n) tile by tile in place; the
    // comparator reads only the arrays its fields point at.
    unsafe {
        base.rt
            .launch_cfg(tiles, (blocks, 1, 1), (SORT_THREADS, 1, 1), 0, &mut args)?
    };
    let (mut src, mut dst) = (a, b);
    let mut width = SORT_TILE;
    while width < n {
        let (mut s, mut d, mut pn, mut w, mut c) = (src, dst, n as i64, width as i64, cmp);
        let mut args = [
            arg(&mut s),
            arg(&mut d),
            arg(&mut pn),
            arg(&mut w),
            arg(&mut c),
        ];
        // SAFETY: X_sort_merge(src, dst, n, width, Cmp) reads src[0..n) and writes each of
        // dst[0..n) once.
        unsafe { base.rt.launch(merge, n as u64, &mut args)? };
        std::mem::swap(&mut src, &mut dst);
        width *= 2;
    }
    Ok(src)
}

/// The exclusive-scan kernels of a module that includes index_sort.cuh.
pub(crate) struct ScanFns {
    tiles: Function,
    sums: Function,
    add: Function,
}

impl ScanFns {
    pub fn load(m: &Module) -> EpResult<ScanFns> {
        Ok(ScanFns {
            tiles: m.function("isort_scan_tiles")?,
            sums: m.function("isort_scan_sums")?,
            add: m.function("isort_scan_add")?,
        })
    }

    /// The i64 slots the scan of `n` values needs for its tile sums and total.
    pub fn sums_len(n: usize) -> usize {
        n.div_ceil(SCAN_TILE) + 1
    }

    /// Enqueues `out = exclusive scan of input` over `n` i64 (`sums` holds
    /// `sums_len(n)` i64). Returns the address of the total.
    pub fn run(
        &self,
        base: &Base,
        input: CuPtr,
        out: CuPtr,
        sums: CuPtr,
        n: usize,
    ) -> EpResult<CuPtr> {
        let tiles = n.div_ceil(SCAN_TILE);
        let (mut pi, mut po, mut ps, mut pn) = (input, out, sums, n as i64);
        if tiles > 0 {
            let mut args = [arg(&mut pi), arg(&mut po), arg(&mut ps), arg(&mut pn)];
            // SAFETY: isort_scan_tiles reads input[0..n), writes out[0..n) and one sum per
            // tile.
            unsafe {
                base.rt.launch_cfg(
                    self.tiles,
                    (tiles as u32, 1, 1),
                    (SCAN_THREADS, 1, 1),
                    0,
                    &mut args,
                )?
            };
        }
        let mut pt = tiles as i64;
        let mut args = [arg(&mut ps), arg(&mut pt)];
        // SAFETY: isort_scan_sums rewrites sums[0..tiles] (tiles + 1 slots).
        unsafe {
            base.rt
                .launch_cfg(self.sums, (1, 1, 1), (1024, 1, 1), 0, &mut args)?
        };
        if tiles > 1 {
            let mut args = [arg(&mut po), arg(&mut ps), arg(&mut pn)];
            // SAFETY: isort_scan_add updates out[0..n) from the tile sums.
            unsafe { base.rt.launch(self.add, n as u64, &mut args)? };
        }
        Ok(sums + (tiles * 8) as CuPtr)
    }
}

/// Reads one i64 from the device (synchronizes).
pub(crate) fn read_i64(base: &Base, ptr: CuPtr) -> EpResult<i64> {
    let mut bytes = [0u8; 8];
    // SAFETY: the caller's scratch holds an i64 at `ptr`.
    unsafe { base.rt.dtoh(&mut bytes, ptr)? };
    Ok(i64::from_ne_bytes(bytes))
}

/// The inputs of a call by address and layout: what device work `output_types` did is valid
/// for.
pub(crate) type Located = Vec<(usize, DataType, Vec<usize>, Vec<usize>)>;

pub(crate) fn located(inputs: &[TensorView<'_>]) -> Located {
    inputs
        .iter()
        .map(|v| {
            (
                v.ptr.0 as usize,
                v.dtype,
                v.shape.to_vec(),
                v.strides.to_vec(),
            )
        })
        .collect()
}

pub(crate) fn data_dependent(base: &Base) -> CaptureSupport {
    CaptureSupport::Unsupported {
        reason: format!(
            "{}: {} has a data-dependent output size (it reads a count on the host)",
            base.node, base.op
        ),
    }
}

// ---- Unique ----

pub(crate) fn unique_module() -> ModuleSpec {
    ModuleSpec::new(
        "unique",
        concat!(
            include_str!("../../kernels/index_sort.cuh"),
            include_str!("../../kernels/unique.cu")
        ),
    )
    .with_half()
}

/// Mirrors `UqParams` in unique.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct UqParams {
    n: i64,
    rank: i32,
    _pad: i32,
    dims: [i64; MAX_RANK],
    xs: [i64; MAX_RANK],
}

/// Mirrors `UqCmp` in unique.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct UqCmp {
    keys: u64,
    outer: i64,
    dim: i64,
    inner: i64,
}

/// Mirrors `UqMeta` in unique.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct UqMeta {
    u: i64,
    dim: i64,
    idx_stride: i64,
    cnt_stride: i64,
    inv_stride: i64,
    sorted: i32,
    _pad: i32,
}

/// Mirrors `UqGather` in unique.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct UqGather {
    n: i64,
    dim: i64,
    inner: i64,
    u: i64,
    xrank: i32,
    yrank: i32,
    xdims: [i64; MAX_RANK],
    xs: [i64; MAX_RANK],
    ydims: [i64; MAX_RANK],
    ys: [i64; MAX_RANK],
}

// Scratch regions.
const R_KEYS: usize = 0;
const R_IDS_A: usize = 1;
const R_IDS_B: usize = 2;
const R_HEADS: usize = 3;
const R_HSCAN: usize = 4;
const R_SUMS: usize = 5;
const R_START: usize = 6;
const R_FIRST: usize = 7;
const R_FFLAGS: usize = 8;
const R_RANK: usize = 9;
const R_SUMS2: usize = 10;
const R_FO: usize = 11;

/// How the input splits around the axis.
#[derive(Clone, Copy, Debug)]
struct Split {
    axis: Option<usize>,
    outer: usize,
    dim: usize,
    inner: usize,
}

/// The device state of one call: the sorted ids and the group count.
struct Work {
    scratch: Option<Scratch>,
    perm: CuPtr,
    u: usize,
}

struct UniqueKernel {
    base: Base,
    sorted: bool,
    axis: Option<i64>,
    keys: HashMap<DataType, Function>,
    sort_tiles: Function,
    sort_merge: Function,
    iota: Function,
    heads: Function,
    groups: Function,
    meta: Function,
    inverse: Function,
    /// uq_gather_w{1,2,4,8}.
    gather: [Function; 4],
    scan: ScanFns,
    peeked: Mutex<Option<(Located, Work)>>,
}

impl UniqueKernel {
    fn split(&self, x: &TensorView<'_>) -> EpResult<Split> {
        let base = &self.base;
        check_view_rank(base, x.shape)?;
        if !self.keys.contains_key(&x.dtype) {
            return Err(base.unsupported(
                x.dtype,
                "the CUDA Unique takes numeric types and bool (strings run on the CPU provider)",
            ));
        }
        let s = match self.axis {
            Some(a) => {
                let a = base.axis(a, x.rank(), "axis")?;
                Split {
                    axis: Some(a),
                    outer: x.shape[..a].iter().product(),
                    dim: x.shape[a],
                    inner: x.shape[a + 1..].iter().product(),
                }
            }
            None => Split {
                axis: None,
                outer: 1,
                dim: x.numel(),
                inner: 1,
            },
        };
        if s.dim > MAX_SORT_IDS {
            return Err(base.unsupported(
                x.dtype,
                format!(
                    "the CUDA Unique sorts at most {MAX_SORT_IDS} slices, got {}",
                    s.dim
                ),
            ));
        }
        Ok(s)
    }

    fn out_types(&self, x: &TensorView<'_>, s: &Split, u: usize) -> OutputTypes {
        let y = match s.axis {
            Some(a) => {
                let mut shape = x.shape.to_vec();
                shape[a] = u;
                shape
            }
            None => vec![u],
        };
        let all = vec![
            (x.dtype, y),
            (DataType::Int64, vec![u]),
            (DataType::Int64, vec![s.dim]),
            (DataType::Int64, vec![u]),
        ];
        all.into_iter()
            .take(self.base.outputs.clamp(1, 4))
            .collect()
    }

    /// Keys, sort, heads and their scan; reads the group count (synchronizes).
    fn count(&self, x: &TensorView<'_>, s: &Split) -> EpResult<Work> {
        let base = &self.base;
        if s.dim == 0 {
            return Ok(Work {
                scratch: None,
                perm: 0,
                u: 0,
            });
        }
        let n = x.numel();
        let d = s.dim;
        let sums = ScanFns::sums_len(d) * 8;
        let scratch = Scratch::new(
            base,
            &[
                n * 8,
                d * 4,
                d * 4,
                d * 8,
                d * 8,
                sums,
                d * 8,
                d * 8,
                d * 8,
                d * 8,
                sums,
                d * 8,
            ],
        )?;
        match self.count_in(x, s, &scratch) {
            Ok((perm, u)) => Ok(Work {
                scratch: Some(scratch),
                perm,
                u,
            }),
            Err(e) => {
                scratch.release(base);
                Err(e)
            }
        }
    }

    fn count_in(&self, x: &TensorView<'_>, s: &Split, sc: &Scratch) -> EpResult<(CuPtr, usize)> {
        let base = &self.base;
        let n = x.numel();
        if n > 0 {
            let mut p = UqParams {
                n: n as i64,
                rank: x.rank() as i32,
                ..Default::default()
            };
            p.dims = fill(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
            p.xs = fill(&istrides(x.strides));
            let (mut px, mut pk) = (ptr_of(x), sc.at(R_KEYS));
            let mut args = [arg(&mut px), arg(&mut pk), arg(&mut p)];
            // SAFETY: uq_keys_T(x, keys, UqParams) reads x inside its view and writes
            // keys[0..n).
            unsafe { base.rt.launch(self.keys[&x.dtype], n as u64, &mut args)? };
        }
        let cmp = UqCmp {
            keys: sc.at(R_KEYS),
            outer: s.outer as i64,
            dim: s.dim as i64,
            inner: s.inner as i64,
        };
        let (mut ids, mut pd) = (sc.at(R_IDS_A), s.dim as i64);
        let mut args = [arg(&mut ids), arg(&mut pd)];
        // SAFETY: uq_iota writes ids[0..dim).
        unsafe { base.rt.launch(self.iota, s.dim as u64, &mut args)? };
        let perm = sort_ids(
            base,
            self.sort_tiles,
            self.sort_merge,
            sc.at(R_IDS_A),
            sc.at(R_IDS_B),
            s.dim,
            cmp,
        )?;
        let (mut pp, mut ph, mut c) = (perm, sc.at(R_HEADS), cmp);
        let mut args = [arg(&mut pp), arg(&mut ph), arg(&mut c)];
        // SAFETY: uq_heads reads perm[0..dim) and the keys, writes heads[0..dim).
        unsafe { base.rt.launch(self.heads, s.dim as u64, &mut args)? };
        let total = self
            .scan
            .run(base, sc.at(R_HEADS), sc.at(R_HSCAN), sc.at(R_SUMS), s.dim)?;
        let u = read_i64(base, total)?;
        if u < 1 || u as usize > s.dim {
            return Err(base.err(format!(
                "internal: the device found {u} unique slices among {}",
                s.dim
            )));
        }
        Ok((perm, u as usize))
    }

    fn release(&self) {
        if let Some((_, w)) = self.peeked.lock().unwrap_or_else(|e| e.into_inner()).take() {
            if let Some(sc) = w.scratch {
                sc.release(&self.base);
            }
        }
    }

    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        x: &TensorView<'_>,
        s: &Split,
        w: &Work,
        sc: &Scratch,
        outputs: &[TensorMut<'_>],
    ) -> EpResult<()> {
        let base = &self.base;
        let d = s.dim;
        let u = w.u;
        let (mut pp, mut ph, mut phs) = (w.perm, sc.at(R_HEADS), sc.at(R_HSCAN));
        let (mut pst, mut pf, mut pff, mut pd) =
            (sc.at(R_START), sc.at(R_FIRST), sc.at(R_FFLAGS), d as i64);
        let mut args = [
            arg(&mut pp),
            arg(&mut ph),
            arg(&mut phs),
            arg(&mut pst),
            arg(&mut pf),
            arg(&mut pff),
            arg(&mut pd),
        ];
        // SAFETY: uq_groups reads perm, heads and their scan over [0, dim) and writes
        // start / first below the group count and fflags[0..dim) (perm is a permutation).
        unsafe { base.rt.launch(self.groups, d as u64, &mut args)? };
        if !self.sorted {
            self.scan
                .run(base, sc.at(R_FFLAGS), sc.at(R_RANK), sc.at(R_SUMS2), d)?;
        }
        let stride = |i: usize| -> i64 {
            outputs
                .get(i)
                .map_or(0, |o| o.strides.first().copied().unwrap_or(1) as i64)
        };
        let ptr = |i: usize| -> CuPtr { outputs.get(i).map_or(0, mut_ptr_of) };
        let mut m = UqMeta {
            u: u as i64,
            dim: d as i64,
            idx_stride: stride(1),
            cnt_stride: stride(3),
            inv_stride: stride(2),
            sorted: self.sorted as i32,
            _pad: 0,
        };
        let (mut pf, mut pst, mut pr, mut pfo) =
            (sc.at(R_FIRST), sc.at(R_START), sc.at(R_RANK), sc.at(R_FO));
        let (mut pidx, mut pcnt) = (ptr(1), ptr(3));
        let mut args = [
            arg(&mut pf),
            arg(&mut pst),
            arg(&mut pr),
            arg(&mut pfo),
            arg(&mut pidx),
            arg(&mut pcnt),
            arg(&mut m),
        ];
        // SAFETY: uq_meta reads the groups' first / start (and ranks) below u and writes
        // fo[0..u) and, when given, the u entries of the indices and counts outputs.
        unsafe { base.rt.launch(self.meta, u as u64, &mut args)? };
        if outputs.len() > 2 {
            let (mut pp, mut ph, mut phs, mut pf, mut pr, mut pinv) = (
                w.perm,
                sc.at(R_HEADS),
                sc.at(R_HSCAN),
                sc.at(R_FIRST),
                sc.at(R_RANK),
                ptr(2),
            );
            let mut args = [
                arg(&mut pp),
                arg(&mut ph),
                arg(&mut phs),
                arg(&mut pf),
                arg(&mut pr),
                arg(&mut pinv),
                arg(&mut m),
            ];
            // SAFETY: uq_inverse writes inverse[perm[p]] once per p < dim.
            unsafe { base.rt.launch(self.inverse, d as u64, &mut args)? };
        }
        let y = &outputs[0];
        let ny = y.numel();
        if ny > 0 {
            let mut g = UqGather {
                n: ny as i64,
                dim: d as i64,
                inner: s.inner as i64,
                u: u as i64,
                xrank: x.rank() as i32,
                yrank: y.rank() as i32,
                ..Default::default()
            };
            g.xdims = fill(&x.shape.iter().map(|&v| v as i64).collect::<Vec<_>>());
            g.xs = fill(&istrides(x.strides));
            g.ydims = fill(&y.shape.iter().map(|&v| v as i64).collect::<Vec<_>>());
            g.ys = fill(&istrides(y.strides));
            let f = match base.width(x.dtype)? {
                1 => self.gather[0],
                2 => self.gather[1],
                4 => self.gather[2],
                8 => self.gather[3],
                w => return Err(base.unsupported(x.dtype, format!("element width {w}"))),
            };
            let (mut px, mut py, mut pfo) = (ptr_of(x), mut_ptr_of(y), sc.at(R_FO));
            let mut args = [arg(&mut px), arg(&mut py), arg(&mut pfo), arg(&mut g)];
            // SAFETY: uq_gather_wW reads fo[0..u) (each below dim) and x inside its view,
            // and writes each element of Y's view once.
            unsafe { base.rt.launch(f, ny as u64, &mut args)? };
        }
        Ok(())
    }
}

impl Kernel for UniqueKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        let s = self.split(x)?;
        let w = self.count(x, &s)?;
        let u = w.u;
        let old = self
            .peeked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace((located(inputs), w));
        if let Some((_, o)) = old {
            if let Some(sc) = o.scratch {
                sc.release(&self.base);
            }
        }
        Ok(self.out_types(x, &s, u))
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        let s = self.split(x)?;
        let peeked = self.peeked.lock().unwrap_or_else(|e| e.into_inner()).take();
        let w = match peeked {
            Some((at, w)) if at == located(inputs) => w,
            other => {
                if let Some((_, o)) = other {
                    if let Some(sc) = o.scratch {
                        sc.release(base);
                    }
                }
                self.count(x, &s)?
            }
        };
        let want = self.out_types(x, &s, w.u);
        let n = outputs.len().min(want.len());
        let r = base
            .expect_outputs(&outputs[..n], &want[..n])
            .and_then(|_| match &w.scratch {
                Some(sc) => self.write(x, &s, &w, sc, &outputs[..n]),
                None => Ok(()),
            });
        if let Some(sc) = &w.scratch {
            sc.release(base);
        }
        r
    }

    fn capture_support(&self) -> CaptureSupport {
        data_dependent(&self.base)
    }
}

impl Drop for UniqueKernel {
    fn drop(&mut self) {
        self.release();
    }
}

fn unique(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let sorted = attr_int(node, "sorted")?.unwrap_or(1) != 0;
    let axis = attr_int(node, "axis")?;
    let base = Base::new(rt, node);
    let m = base.module(&unique_module())?;
    let mut keys = HashMap::new();
    for &(dtype, tag, _) in TYPED.iter() {
        keys.insert(dtype, m.function(&format!("uq_keys_{tag}"))?);
    }
    let g = |w: usize| m.function(&format!("uq_gather_w{w}"));
    Ok(Box::new(UniqueKernel {
        sorted,
        axis,
        keys,
        sort_tiles: m.function("uq_sort_tiles")?,
        sort_merge: m.function("uq_sort_merge")?,
        iota: m.function("uq_iota")?,
        heads: m.function("uq_heads")?,
        groups: m.function("uq_groups")?,
        meta: m.function("uq_meta")?,
        inverse: m.function("uq_inverse")?,
        gather: [g(1)?, g(2)?, g(4)?, g(8)?],
        scan: ScanFns::load(&m)?,
        peeked: Mutex::new(None),
        base,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "Unique", 11, unique);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layouts_match_the_kernel_structs() {
        assert_eq!(std::mem::size_of::<UqParams>(), 16 + 2 * 8 * MAX_RANK);
        assert_eq!(std::mem::size_of::<UqCmp>(), 32);
        assert_eq!(std::mem::size_of::<UqMeta>(), 48);
        assert_eq!(std::mem::size_of::<UqGather>(), 40 + 4 * 8 * MAX_RANK);
    }
}
