//! NonZero and Compress: outputs whose shape depends on the data. Both count their set flags
//! on the device (a per-tile count, then a one-block scan into offsets and a total) and read
//! the total (and Compress's "set past the axis" count) back with one small copy in
//! `output_types`, which synchronizes; `execute` reuses that scan when it follows with the same
//! inputs, then writes every set element's rank-ordered result (NonZero its coordinates,
//! Compress its index, which a gather then follows). Neither can be captured.

use super::super::common::*;
use super::super::params::MAX_RANK;
use super::super::Registry;
use super::move_module;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::sync::{Arc, Mutex};

/// Elements per tile of the count and write kernels (SEL_TILE in tensor_misc.cu).
const TILE: usize = 256 * 16;

/// Mirrors `FlagParams` in tensor_misc.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct FlagParams {
    n: i64,
    limit: i64,
    rank: i32,
    dense: i32,
    mode: i32,
    id: u32,
    mask: u64,
    dims: [i64; MAX_RANK],
    strides: [i64; MAX_RANK],
}

/// Mirrors `CompressParams` in tensor_misc.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct CompressParams {
    n: i64,
    rank: i32,
    axis: i32,
    flat: i32,
    _pad: i32,
    out_dims: [i64; MAX_RANK],
    x_dims: [i64; MAX_RANK],
    xs: [i64; MAX_RANK],
    os: [i64; MAX_RANK],
}

/// The inputs of a call by address and layout: what a scan made by `output_types` is valid
/// for.
type Located = Vec<(usize, DataType, Vec<usize>, Vec<usize>)>;

fn located(inputs: &[TensorView<'_>]) -> Located {
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

/// A device scratch of the counts (`2 tiles + 2` i64: per-tile counts turned into offsets,
/// per-tile counts past the limit, the total, the past-the-limit total) and, for Compress,
/// the selected indices after them.
struct Scan {
    ptr: CuPtr,
    tiles: usize,
}

impl Scan {
    fn totals_ptr(&self) -> CuPtr {
        self.ptr + (2 * self.tiles * 8) as CuPtr
    }

    fn sel_ptr(&self) -> CuPtr {
        self.ptr + ((2 * self.tiles + 2) * 8) as CuPtr
    }
}

/// The count, scan and write kernels, and the scan `output_types` left for `execute`.
struct Selector {
    count: WidthFns,
    write: WidthFns,
    scan: Function,
    peeked: Mutex<Option<(Located, Scan)>>,
}

impl Selector {
    fn load(base: &Base) -> EpResult<Self> {
        let m = base.module(&move_module())?;
        Ok(Selector {
            count: WidthFns::load(&m, "sel_count", "")?,
            write: WidthFns::load(&m, "sel_write", "")?,
            scan: m.function("sel_scan")?,
            peeked: Mutex::new(None),
        })
    }

    /// Allocates a scratch for `p.n` flags (plus `extra` i64 slots) and enqueues the count and
    /// the scan.
    fn count(
        &self,
        base: &Base,
        x: CuPtr,
        width: usize,
        p: &FlagParams,
        extra: usize,
    ) -> EpResult<Scan> {
        let tiles = (p.n as usize).div_ceil(TILE);
        let bytes = (2 * tiles + 2 + extra) * 8;
        let (ptr, _) = base.rt.allocate(bytes, 256)?;
        let scan = Scan { ptr, tiles };
        let mut p = *p;
        let (mut px, mut pc, mut pt) = (x, ptr, tiles as i64);
        if tiles > 0 {
            let mut args = [arg(&mut px), arg(&mut pc), arg(&mut pt), arg(&mut p)];
            // SAFETY: sel_count_wW reads the flags inside x's view and writes 2 counts per
            // tile into the scratch.
            let r = unsafe {
                base.rt.launch_cfg(
                    self.count.get(width),
                    (tiles as u32, 1, 1),
                    (256, 1, 1),
                    0,
                    &mut args,
                )
            };
            if let Err(e) = r {
                let _ = base.rt.free(ptr);
                return Err(e);
            }
        }
        let mut args = [arg(&mut pc), arg(&mut pt)];
        // SAFETY: sel_scan rewrites the tiles' counts and writes the two totals, all inside
        // the scratch.
        let r = unsafe {
            base.rt
                .launch_cfg(self.scan, (1, 1, 1), (1024, 1, 1), 0, &mut args)
        };
        if let Err(e) = r {
            let _ = base.rt.free(ptr);
            return Err(e);
        }
        Ok(scan)
    }

    /// Reads the scan's two totals (synchronizes).
    fn totals(&self, base: &Base, scan: &Scan) -> EpResult<(usize, usize)> {
        let mut bytes = [0u8; 16];
        // SAFETY: the scratch holds the two totals after the tiles' counts.
        unsafe { base.rt.dtoh(&mut bytes, scan.totals_ptr())? };
        let total = i64::from_ne_bytes(bytes[..8].try_into().expect("8 bytes"));
        let beyond = i64::from_ne_bytes(bytes[8..].try_into().expect("8 bytes"));
        Ok((total.max(0) as usize, beyond.max(0) as usize))
    }

    /// Counts in `output_types`: the totals, with the scan kept for the `execute` that follows.
    fn peek(
        &self,
        base: &Base,
        inputs: &[TensorView<'_>],
        x: CuPtr,
        width: usize,
        p: &FlagParams,
        extra: usize,
    ) -> EpResult<(usize, usize)> {
        let scan = self.count(base, x, width, p, extra)?;
        let totals = match self.totals(base, &scan) {
            Ok(t) => t,
            Err(e) => {
                let _ = base.rt.free(scan.ptr);
                return Err(e);
            }
        };
        let old = self
            .peeked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace((located(inputs), scan));
        if let Some((_, s)) = old {
            let _ = base.rt.free(s.ptr);
        }
        Ok(totals)
    }

    /// The scan for `execute`: the one `output_types` made for these very inputs, or a new one.
    fn take(
        &self,
        base: &Base,
        inputs: &[TensorView<'_>],
        x: CuPtr,
        width: usize,
        p: &FlagParams,
        extra: usize,
    ) -> EpResult<Scan> {
        let peeked = self.peeked.lock().unwrap_or_else(|e| e.into_inner()).take();
        match peeked {
            Some((at, scan)) if at == located(inputs) => Ok(scan),
            other => {
                if let Some((_, s)) = other {
                    let _ = base.rt.free(s.ptr);
                }
                self.count(base, x, width, p, extra)
            }
        }
    }

    /// Enqueues the write of every set element's result.
    #[allow(clippy::too_many_arguments)]
    fn write(
        &self,
        base: &Base,
        scan: &Scan,
        x: CuPtr,
        width: usize,
        p: &FlagParams,
        out: CuPtr,
        total: usize,
        os: (i64, i64),
    ) -> EpResult<()> {
        if scan.tiles == 0 || total == 0 {
            return Ok(());
        }
        let mut p = *p;
        let (mut px, mut pc, mut po, mut pe) = (x, scan.ptr, out, base.rt.err_ptr());
        let (mut pt, mut os0, mut os1) = (total as i64, os.0, os.1);
        let mut args = [
            arg(&mut px),
            arg(&mut pc),
            arg(&mut po),
            arg(&mut pe),
            arg(&mut pt),
            arg(&mut os0),
            arg(&mut os1),
            arg(&mut p),
        ];
        // SAFETY: sel_write_wW reads the flags and the tiles' offsets and writes ranks below
        // `total` only: out[axis * os0 + rank * os1] (NonZero, inside the [rank, total]
        // output) or sel[rank] (Compress, inside the scratch).
        unsafe {
            base.rt.launch_cfg(
                self.write.get(width),
                (scan.tiles as u32, 1, 1),
                (256, 1, 1),
                0,
                &mut args,
            )
        }
    }

    fn release(&self, base: &Base) {
        if let Some((_, s)) = self.peeked.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = base.rt.free(s.ptr);
        }
    }
}

fn data_dependent(base: &Base) -> CaptureSupport {
    CaptureSupport::Unsupported {
        reason: format!(
            "{}: {} has a data-dependent output shape (it reads a count on the host)",
            base.node, base.op
        ),
    }
}

/// Flags over a tensor: element i is set when its bits outside the sign bit of float types
/// are not all zero (so -0.0 is zero and NaN is not).
fn flags_of(base: &Base, v: &TensorView<'_>, limit: usize) -> EpResult<(FlagParams, usize)> {
    check_view_rank(base, v.shape)?;
    let width = match v.dtype {
        DataType::String => None,
        d => d.element_size().filter(|w| matches!(w, 1 | 2 | 4 | 8 | 16)),
    }
    .ok_or_else(|| {
        base.unsupported(
            v.dtype,
            "the CUDA provider reads elements of 1, 2, 4, 8 or 16 bytes here (not strings or \
             packed 4/2-bit types)",
        )
    })?;
    let mask: u64 = match v.dtype {
        DataType::Float32 => 0x7fff_ffff,
        DataType::Float64 | DataType::Complex128 => 0x7fff_ffff_ffff_ffff,
        DataType::Float16 | DataType::BFloat16 => 0x7fff,
        DataType::Float8E4M3FN | DataType::Float8E5M2 => 0x7f,
        DataType::Complex64 => 0x7fff_ffff_7fff_ffff,
        _ => u64::MAX,
    };
    let mut p = FlagParams {
        n: v.numel() as i64,
        limit: limit as i64,
        rank: v.rank() as i32,
        dense: v.is_contiguous() as i32,
        id: base.id,
        mask,
        ..Default::default()
    };
    p.dims = fill(&v.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
    p.strides = fill(&istrides(v.strides));
    Ok((p, width))
}

// ---- NonZero ----

struct NonZeroKernel {
    base: Base,
    sel: Selector,
}

impl Kernel for NonZeroKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let (p, width) = flags_of(base, x, x.numel())?;
        let (total, _) = self.sel.peek(base, inputs, ptr_of(x), width, &p, 0)?;
        Ok(vec![(DataType::Int64, vec![x.rank().max(1), total])])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        let (p, width) = flags_of(base, x, x.numel())?;
        let out = &outputs[0];
        let rank = x.rank().max(1);
        if out.dtype != DataType::Int64 || out.rank() != 2 || out.shape[0] != rank {
            return Err(base.err(format!(
                "the output must be int64 of shape [{rank}, count], got {} {:?}",
                out.dtype, out.shape
            )));
        }
        let total = out.shape[1];
        let scan = self.sel.take(base, inputs, ptr_of(x), width, &p, 0)?;
        let os = (out.strides[0] as i64, out.strides[1] as i64);
        let r = self.sel.write(
            base,
            &scan,
            ptr_of(x),
            width,
            &p,
            mut_ptr_of(out),
            total,
            os,
        );
        // The scratch goes back to the cache; its reuse is ordered after this work.
        let _ = base.rt.free(scan.ptr);
        r
    }

    fn capture_support(&self) -> CaptureSupport {
        data_dependent(&self.base)
    }
}

impl Drop for NonZeroKernel {
    fn drop(&mut self) {
        self.sel.release(&self.base);
    }
}

fn nonzero(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let sel = Selector::load(&base)?;
    Ok(Box::new(NonZeroKernel { base, sel }))
}

// ---- Compress ----

struct CompressKernel {
    base: Base,
    axis: Option<i64>,
    sel: Selector,
    gather: WidthFns,
}

impl CompressKernel {
    /// The axis (None: x flattened), its length, the condition's flags and x's width.
    fn plan(
        &self,
        inputs: &[TensorView<'_>],
    ) -> EpResult<(Option<usize>, usize, FlagParams, usize)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let c = base.req(inputs, 1)?;
        check_view_rank(base, x.shape)?;
        let width = base.width(x.dtype)?;
        if c.dtype != DataType::Bool {
            return Err(base.err(format!("condition must be bool, got {}", c.dtype)));
        }
        let (axis, dim) = match self.axis {
            Some(a) => {
                let a = base.axis(a, x.rank(), "axis")?;
                (Some(a), x.shape[a])
            }
            None => (None, x.numel()),
        };
        let (p, _) = flags_of(base, c, dim.min(c.numel()))?;
        Ok((axis, dim, p, width))
    }

    fn out_shape(x: &TensorView<'_>, axis: Option<usize>, count: usize) -> Vec<usize> {
        match axis {
            Some(a) => {
                let mut s = x.shape.to_vec();
                s[a] = count;
                s
            }
            None => vec![count],
        }
    }
}

impl Kernel for CompressKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let (axis, dim, p, _) = self.plan(inputs)?;
        let x = base.req(inputs, 0)?;
        let c = base.req(inputs, 1)?;
        let (total, beyond) = self
            .sel
            .peek(base, inputs, ptr_of(c), 1, &p, p.limit as usize)?;
        if beyond > 0 {
            return Err(base.err(format!(
                "condition of length {} selects {beyond} index(es) past the axis length {dim}",
                c.numel()
            )));
        }
        Ok(vec![(x.dtype, Self::out_shape(x, axis, total))])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let (axis, _, p, width) = self.plan(inputs)?;
        let x = base.req(inputs, 0)?;
        let c = base.req(inputs, 1)?;
        let out = &outputs[0];
        let total = match axis {
            Some(a) if out.rank() == x.rank() => out.shape[a],
            None if out.rank() == 1 => out.shape[0],
            _ => {
                return Err(base.err(format!(
                    "output {:?} does not have the rank Compress gives for {:?}",
                    out.shape, x.shape
                )))
            }
        };
        base.expect_outputs(outputs, &[(x.dtype, Self::out_shape(x, axis, total))])?;
        if total > p.limit as usize {
            return Err(base.err(format!(
                "the output selects {total} entries of an axis of {}",
                p.limit
            )));
        }
        let scan = self
            .sel
            .take(base, inputs, ptr_of(c), 1, &p, p.limit as usize)?;
        let r = self.gather(&scan, &p, x, c, out, axis, total, width);
        // The scratch goes back to the cache; its reuse is ordered after this work.
        let _ = base.rt.free(scan.ptr);
        r
    }

    fn capture_support(&self) -> CaptureSupport {
        data_dependent(&self.base)
    }
}

impl CompressKernel {
    /// Writes the selected indices into the scratch, then gathers x along the axis (or
    /// flattened) by them.
    #[allow(clippy::too_many_arguments)]
    fn gather(
        &self,
        scan: &Scan,
        p: &FlagParams,
        x: &TensorView<'_>,
        c: &TensorView<'_>,
        out: &TensorMut<'_>,
        axis: Option<usize>,
        total: usize,
        width: usize,
    ) -> EpResult<()> {
        let base = &self.base;
        let n = out.numel();
        if total == 0 || n == 0 {
            return Ok(());
        }
        let mut wp = *p;
        wp.mode = 1;
        self.sel
            .write(base, scan, ptr_of(c), 1, &wp, scan.sel_ptr(), total, (0, 1))?;
        let mut g = CompressParams {
            n: n as i64,
            ..Default::default()
        };
        match axis {
            Some(a) => {
                g.rank = x.rank() as i32;
                g.axis = a as i32;
                g.out_dims = fill(&out.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
                g.xs = fill(&istrides(x.strides));
                g.os = fill(&istrides(out.strides));
            }
            None => {
                g.flat = 1;
                g.axis = -1;
                g.os[0] = out.strides[0] as i64;
                if x.is_contiguous() {
                    g.rank = 1;
                    g.x_dims[0] = x.numel() as i64;
                    g.xs[0] = 1;
                } else {
                    g.rank = x.rank() as i32;
                    g.x_dims = fill(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
                    g.xs = fill(&istrides(x.strides));
                }
            }
        }
        let (mut px, mut po, mut ps) = (ptr_of(x), mut_ptr_of(out), scan.sel_ptr());
        let mut args = [arg(&mut px), arg(&mut po), arg(&mut ps), arg(&mut g)];
        // SAFETY: compress_gather_wW reads sel[0..total) (written above, each below the axis
        // length) and x inside its view, and writes each output element once.
        unsafe { base.rt.launch(self.gather.get(width), n as u64, &mut args) }
    }
}

impl Drop for CompressKernel {
    fn drop(&mut self) {
        self.sel.release(&self.base);
    }
}

fn compress(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let sel = Selector::load(&base)?;
    let gather = WidthFns::load(&*base.module(&move_module())?, "compress_gather", "")?;
    Ok(Box::new(CompressKernel {
        axis: attr_int(req.node, "axis")?,
        base,
        sel,
        gather,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "NonZero", 9, nonzero);
    r.register("", "Compress", 9, compress);
}
