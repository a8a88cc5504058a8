//! com.microsoft MatMulNBits: `Y[.., M, N] = A[.., M, K] @ dequant(B)^T (+ bias)`, B packed
//! `[N, k_blocks, blob]` with 2-, 4- or 8-bit codes in blocks of `block_size` (a power of
//! two, at least 16) along K, scales `[N * k_blocks]` of A's type, zero points packed uint8
//! like B or of A's type (default 2^(bits-1)), bias `[N]`.
//!
//! Three paths, picked per call by the row count M (every leading axis of A counts) and the
//! layout:
//! - M <= [`GEMV_MAX_M`], 4-bit codes, blocks of at least 32, K a multiple of 32, float16 or
//!   bfloat16 A with unit-stride, 16-byte aligned rows, integer zero points, sm_80+ (the LLM
//!   decode case): `nq_gemv` (`kernels/nbits_gemv.cu`) streams B once with 16-byte loads,
//!   dequantizes in registers and multiplies on tensor cores (mma m16n8k16, all 16 rows at the
//!   cost of one), so M = 1..16 cost about the same. K is split over up to 8 warps per column
//!   tile when the columns alone would not fill the GPU.
//! - Other M <= [`GEMV_MAX_M`] calls: `nbits_gemv` (`kernels/nbits.cu`), the general register
//!   GEMV (any bit width and block size, float32 A). It needs rows of B of a multiple of 16
//!   bytes at a 16-byte aligned address, integer zero points and A's rows at one stride;
//!   otherwise the GEMM path below runs, for every M.
//! - Larger M (prefill): B is dequantized (`kernels/nbits_dequant.cu`, one thread per 16 bytes
//!   of B) into a workspace of A's type, at most [`DEQUANT_BUDGET`] bytes at a time (tiles of
//!   columns), and each tile is one cuBLASLt product into its columns of Y, with the bias in
//!   the epilogue.
//!
//! Every path accumulates in float32, whatever `accuracy_level` asks (a level is accepted, none
//! lowers the precision; float32 products are true FP32 unless `ONNX_RUNTIME_CUDA_TF32=1`). The
//! tensor-core GEMV and the prefill path round each dequantized weight `(q - z) * scale` to A's
//! type once.
//! `g_idx` (act-order, deprecated in the spec) is not taken: such a node runs on the CPU
//! provider. Nothing reads the device on the host; after one eager run (which chooses the
//! cuBLASLt algorithm and sizes the workspace) a signature can be captured.

use super::{nbits_dequant_module, nbits_gemv_module, nbits_module, Workspace, FLOATS};
use crate::ops::common::*;
use crate::ops::gemm::driver::{FloatEngine, FloatProblem};
use crate::ops::gemm::shape::{Act, Mat};
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// The largest row count the GEMV path takes (larger products dequantize and run cuBLASLt).
pub const GEMV_MAX_M: usize = 16;

/// The most bytes of dequantized weights the prefill path holds at once.
pub const DEQUANT_BUDGET: usize = 64 << 20;

/// Threads of a GEMV block and columns of a column group (mirrors `NB_THREADS` / `NB_CPW`).
const GEMV_THREADS: u32 = 256;
const CPW: usize = 2;

/// Blocks per SM of a GEMV whose A fits one tile (each walks several column groups).
const GEMV_BLOCKS_PER_SM: usize = 2;

/// Shared memory the GEMV's A tile may take.
const GEMV_SMEM: usize = 40 << 10;

/// Mirrors `NbGemv` in nbits.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct NbGemv {
    a: u64,
    b: u64,
    scales: u64,
    zp: u64,
    bias: u64,
    y: u64,
    a_rs: i64,
    a_ks: i64,
    y_rs: i64,
    m: i32,
    n: i32,
    k: i32,
    kb: i32,
    block_log2: i32,
    row_bytes: i32,
    zrow: i32,
    chunks: i32,
    wpc: i32,
    tile_chunks: i32,
    _pad0: i32,
    _pad1: i32,
}

/// Threads of a tensor-core GEMV block (mirrors `NQ_THREADS`); a warp covers 8 columns.
pub(super) const NQ_THREADS: u32 = 256;

/// Warps per SM the tensor-core GEMV aims for (3 resident blocks of 8 warps) before it splits K.
const NQ_WARPS_PER_SM: usize = 24;

/// Mirrors `NqGemv` in nbits_gemv.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct NqGemv {
    pub(super) a: u64,
    pub(super) b: u64,
    pub(super) scales: u64,
    pub(super) zp: u64,
    pub(super) bias: u64,
    pub(super) y: u64,
    pub(super) a_rs: i64,
    pub(super) y_rs: i64,
    pub(super) m: i32,
    pub(super) n: i32,
    pub(super) kc: i32,
    pub(super) kb: i32,
    pub(super) row_bytes: i32,
    pub(super) zrow: i32,
    pub(super) blk_shift: i32,
    pub(super) ks: i32,
    pub(super) b2: u64,
    pub(super) scales2: u64,
    pub(super) zp2: u64,
    pub(super) skip: u64,
    pub(super) gamma: u64,
    pub(super) nbias: u64,
    pub(super) sum_out: u64,
    pub(super) sum_rs: i64,
    pub(super) eps: f32,
    pub(super) _pad: i32,
}

/// Mirrors `NbDequant` in nbits_dequant.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct NbDequant {
    b: u64,
    scales: u64,
    zp: u64,
    w: u64,
    units: i32,
    row_units: i32,
    n0: i32,
    k: i32,
    kb: i32,
    block_log2: i32,
    row_bytes: i32,
    zrow: i32,
    zp_kind: i32,
    _pad: i32,
}

/// A GEMV launch: function, grid, dynamic shared bytes and parameters (pointers unset).
type GemvLaunch = (Function, (u32, u32, u32), u32, NbGemv);

/// The zero points of a call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Zp {
    Default,
    Packed(CuPtr),
    /// Of A's type, one per block.
    Float(CuPtr),
}

/// One weight set of a call: B, scales and zero points (device addresses, checked).
#[derive(Clone, Copy, Debug)]
pub(super) struct Weights {
    pub(super) b: CuPtr,
    pub(super) scales: CuPtr,
    zp: Zp,
}

impl Weights {
    pub(super) fn zp_ptr(&self) -> CuPtr {
        match self.zp {
            Zp::Packed(z) => z,
            _ => 0,
        }
    }
}

/// Where a product goes: device address, shape and element strides.
struct Dest<'a> {
    ptr: CuPtr,
    shape: &'a [usize],
    strides: &'a [usize],
}

pub(super) struct NBitsKernel {
    base: Base,
    /// The internal MatMulNBitsSiluMul: a second weight set (inputs 4..6), no bias, and
    /// y = silu(A Wg^T) * (A Wu^T).
    glu: bool,
    /// `nq_gemv_<t>_r<r>_glu` by (dtype, row groups), for `glu`.
    nq_glu: HashMap<(DataType, usize), Function>,
    /// `nq_gemv_<t>_r<r>[_glu]_norm` by (dtype, row groups): A normalized in the prologue
    /// (the internal NormMatMulNBits).
    pub(super) nq_norm: HashMap<(DataType, usize), Function>,
    /// `nbits_silu_mul_<t>` by dtype, for `glu` calls off the tensor-core GEMV.
    silu_mul: HashMap<DataType, Function>,
    /// The two products of such a call.
    glu_ws: Workspace,
    pub(super) k: usize,
    n: usize,
    bits: usize,
    block: usize,
    /// `nbits_gemv_<t>_b<bits>_m<mr>` by (dtype, rows per block).
    gemv: HashMap<(DataType, usize), Function>,
    /// `nq_gemv_<t>_r<r>` by (dtype, row groups), when the node's layout allows it.
    nq: HashMap<(DataType, usize), Function>,
    /// `nbits_dequant_<t>_b<bits>_u<ub>` by (dtype, bytes per thread).
    dequant: HashMap<(DataType, usize), Function>,
    float: FloatEngine,
    ws: Workspace,
    warmed: AtomicBool,
    /// The wired inputs the tensor-core GEMV reads before `pdl_wait` (codes, scales, zero
    /// points of each weight set).
    weight_inputs: Vec<usize>,
    /// Every one of them is a model constant: `nq_gemv_*` launches may overlap the kernel
    /// ahead of them.
    constant_weights: bool,
}

/// What a call computes, checked.
pub(super) struct Call {
    pub(super) dtype: DataType,
    /// Rows of A (every leading axis) and the output shape.
    pub(super) m: usize,
    pub(super) out_shape: Vec<usize>,
    pub(super) w: Weights,
    /// The up product's weights (MatMulNBitsSiluMul).
    pub(super) w2: Option<Weights>,
    pub(super) bias: Option<CuPtr>,
}

impl NBitsKernel {
    /// A `nq_gemv_*` function as this node may launch it: overlapping the kernel ahead only
    /// when every weight it reads before `pdl_wait` is a model constant.
    pub(super) fn nq_function(&self, f: Function) -> Function {
        if self.constant_weights {
            f
        } else {
            f.sequential()
        }
    }

    /// Records which inputs are model constants (`Kernel::set_constant_inputs`).
    pub(super) fn set_constant(&mut self, constant: &[bool]) {
        self.constant_weights = self
            .weight_inputs
            .iter()
            .all(|&i| constant.get(i).copied().unwrap_or(false));
    }

    fn kb(&self) -> usize {
        self.k.div_ceil(self.block)
    }

    fn row_bytes(&self) -> usize {
        self.kb() * self.block * self.bits / 8
    }

    /// Bytes per row of packed zero points.
    fn zrow(&self) -> usize {
        (self.kb() * self.bits).div_ceil(8)
    }

    pub(super) fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<Call> {
        let base = &self.base;
        let (k, n) = (self.k, self.n);
        let a = base.req(inputs, 0)?;
        let dtype = a.dtype;
        if !FLOATS.iter().any(|f| f.0 == dtype) {
            return Err(base.unsupported(
                dtype,
                "MatMulNBits takes float32, float16 or bfloat16 activations",
            ));
        }
        if a.shape.last() != Some(&k) {
            return Err(base.err(format!("A {:?} must end in K={k}", a.shape)));
        }
        check_view_rank(base, a.shape)?;
        let w = self.weights(inputs, dtype, [1, 2, 3])?;
        let w2 = if self.glu {
            Some(self.weights(inputs, dtype, [4, 5, 6])?)
        } else {
            None
        };
        let bias = match base.input(inputs, 5).filter(|_| !self.glu) {
            None => None,
            Some(b) => {
                if !is_contiguous_view(b) {
                    return Err(
                        base.err("bias must be contiguous (it is a constant in exported models)")
                    );
                }
                if b.dtype != dtype || b.numel() != n {
                    return Err(base.err(format!(
                        "bias must be {dtype} with N={n} values, got {} {:?}",
                        b.dtype, b.shape
                    )));
                }
                Some(ptr_of(b))
            }
        };
        let m = a.numel() / k.max(1);
        let mut out_shape = a.shape.to_vec();
        *out_shape.last_mut().expect("rank >= 1") = n;
        Ok(Call {
            dtype,
            m: if k == 0 { 0 } else { m },
            out_shape,
            w,
            w2,
            bias,
        })
    }

    /// The weight set at inputs `pos` (B, scales, zero points), checked against the node's
    /// shapes.
    fn weights(
        &self,
        inputs: &[TensorView<'_>],
        dtype: DataType,
        pos: [usize; 3],
    ) -> EpResult<Weights> {
        let base = &self.base;
        let (n, kb) = (self.n, self.kb());
        let [pb, ps, pz] = pos;
        let b = base.req(inputs, pb)?;
        if b.dtype != DataType::Uint8 || b.numel() != n * self.row_bytes() {
            return Err(base.err(format!(
                "B must be uint8 with N*k_blocks*blob = {} bytes, got {} {:?}",
                n * self.row_bytes(),
                b.dtype,
                b.shape
            )));
        }
        let scales = base.req(inputs, ps)?;
        if scales.dtype != dtype || scales.numel() != n * kb {
            return Err(base.err(format!(
                "scales must be {dtype} with N*k_blocks = {} values, got {} {:?}",
                n * kb,
                scales.dtype,
                scales.shape
            )));
        }
        let zp = match base.input(inputs, pz) {
            None => Zp::Default,
            Some(z) if z.dtype == DataType::Uint8 => {
                if z.numel() != n * self.zrow() {
                    return Err(base.err(format!(
                        "packed zero_points has {} bytes; want N*ceil(k_blocks*bits/8) = {}",
                        z.numel(),
                        n * self.zrow()
                    )));
                }
                Zp::Packed(ptr_of(z))
            }
            Some(z) if z.dtype == dtype => {
                if z.numel() != n * kb {
                    return Err(base.err(format!(
                        "zero_points of A's type must have N*k_blocks = {} values, got {:?}",
                        n * kb,
                        z.shape
                    )));
                }
                Zp::Float(ptr_of(z))
            }
            Some(z) => {
                return Err(base.err(format!(
                    "zero_points must be uint8 (packed) or {dtype} (A's type), got {}",
                    z.dtype
                )))
            }
        };
        for (pos, what) in [(pb, "B"), (ps, "scales"), (pz, "zero_points")] {
            if let Some(v) = base.input(inputs, pos) {
                if !is_contiguous_view(v) {
                    return Err(base.err(format!(
                        "{what} must be contiguous (it is a constant in exported models)"
                    )));
                }
            }
        }
        Ok(Weights {
            b: ptr_of(b),
            scales: ptr_of(scales),
            zp,
        })
    }

    /// The GEMV launch for `m` rows, when the call qualifies: (function, grid, shared bytes,
    /// parameters without pointers).
    fn gemv_launch(
        &self,
        call: &Call,
        w: &Weights,
        a_rows: Option<(i64, i64)>,
    ) -> Option<GemvLaunch> {
        let b_ptr = w.b;
        let row_bytes = self.row_bytes();
        let (a_rs, a_ks) = a_rows?;
        if call.m == 0
            || call.m > GEMV_MAX_M
            || !row_bytes.is_multiple_of(16)
            || !b_ptr.is_multiple_of(16)
            || matches!(w.zp, Zp::Float(_))
            || self.k > i32::MAX as usize / 2
        {
            return None;
        }
        let mr = match call.m {
            1 => 1,
            2 => 2,
            _ => 4,
        };
        let f = *self.gemv.get(&(call.dtype, mr))?;
        let e = 128 / self.bits;
        let chunks = row_bytes / 16;
        let grid_x = call.m.div_ceil(mr);
        let sms = self.base.rt.sm_count().max(1) as usize;
        let blocks = |wpc: usize| self.n.div_ceil(CPW * 8 / wpc);
        let mut wpc = 1;
        while wpc < 8 && grid_x * blocks(wpc) < 2 * sms && chunks >= 64 * wpc {
            wpc *= 2;
        }
        let max_tile = GEMV_SMEM / (mr * (e + 4) * 4);
        let lanes = 32 * wpc;
        let mut tile = chunks.min(max_tile);
        if tile < chunks && tile >= lanes {
            tile = tile / lanes * lanes;
        }
        // One A tile: a block walks several column groups (A staged once for them).
        let grid_y = if tile >= chunks {
            blocks(wpc).min(GEMV_BLOCKS_PER_SM * sms)
        } else {
            blocks(wpc)
        };
        if grid_y > 65535 {
            return None;
        }
        let p = NbGemv {
            a_rs,
            a_ks,
            m: call.m as i32,
            n: self.n as i32,
            k: self.k as i32,
            kb: self.kb() as i32,
            block_log2: self.block.trailing_zeros() as i32,
            row_bytes: row_bytes as i32,
            zrow: self.zrow() as i32,
            chunks: chunks as i32,
            wpc: wpc as i32,
            tile_chunks: tile.max(1) as i32,
            ..Default::default()
        };
        let smem = (mr * tile.max(1) * (e + 4) * 4) as u32;
        Some((f, (grid_x as u32, grid_y as u32, 1), smem, p))
    }

    /// The tensor-core GEMV launch for this call, when it qualifies: (function, grid,
    /// parameters without pointers). `a_ptr` is A's address, `a_rows` its (row stride,
    /// element stride).
    pub(super) fn nq_launch(
        &self,
        call: &Call,
        a_ptr: CuPtr,
        w: &Weights,
        w2: Option<&Weights>,
        a_rows: Option<(i64, i64)>,
    ) -> Option<(Function, (u32, u32, u32), NqGemv)> {
        let (a_rs, a_ks) = a_rows?;
        let rows = if call.m > 8 { 2 } else { 1 };
        let b_ptr = w.b;
        let f = match w2 {
            None => *self.nq.get(&(call.dtype, rows))?,
            Some(w2) => {
                if !w2.b.is_multiple_of(16) || matches!(w2.zp, Zp::Float(_)) {
                    return None;
                }
                *self.nq_glu.get(&(call.dtype, rows))?
            }
        };
        let f = self.nq_function(f);
        // Rows of A are read 16 bytes at a time (the second and later ones at a_rs).
        let rows_aligned = call.m == 1 || (a_rs * 2).rem_euclid(16) == 0;
        if call.m == 0
            || call.m > GEMV_MAX_M
            || a_ks != 1
            || !a_ptr.is_multiple_of(16)
            || !rows_aligned
            || !b_ptr.is_multiple_of(16)
            || matches!(w.zp, Zp::Float(_))
        {
            return None;
        }
        let kc = self.k / 32;
        let slabs = kc.div_ceil(4);
        let tiles = self.n.div_ceil(8);
        let target = self.base.rt.sm_count().max(1) as usize * NQ_WARPS_PER_SM;
        let ks = nq_k_split(tiles, slabs, target);
        let blocks = tiles.div_ceil(8 / ks);
        if blocks > i32::MAX as usize || kc > i32::MAX as usize {
            return None;
        }
        let p = NqGemv {
            a_rs,
            m: call.m as i32,
            n: self.n as i32,
            kc: kc as i32,
            kb: self.kb() as i32,
            row_bytes: self.row_bytes() as i32,
            zrow: self.zrow() as i32,
            blk_shift: (self.block.trailing_zeros() - 5) as i32,
            ks: ks as i32,
            ..Default::default()
        };
        Some((f, (blocks as u32, 1, 1), p))
    }

    /// The prefill path: dequantize tiles of columns and multiply each with cuBLASLt.
    fn run_gemm(
        &self,
        call: &Call,
        a: &TensorView<'_>,
        wt: &Weights,
        bias: Option<CuPtr>,
        out: &Dest<'_>,
    ) -> EpResult<()> {
        let base = &self.base;
        let w = call.dtype.element_size().unwrap_or(4);
        let (k, n, kb) = (self.k, self.n, self.kb());
        let tn = (DEQUANT_BUDGET / (k * w).max(1)).clamp(1, n);
        let ws = self.ws.get(base, tn * k * w, "dequantized weights")?;
        let b = wt.b;
        let row_bytes = self.row_bytes();
        // 16 bytes of B a thread where rows allow, else 4 (a block's blob is a multiple of 4).
        let ub = if row_bytes.is_multiple_of(16) && b.is_multiple_of(16) {
            16
        } else {
            4
        };
        if !b.is_multiple_of(4) {
            return Err(base.err(format!(
                "B at {b:#x} is not 4-byte aligned (a device allocation or an aligned view is \
                 expected)"
            )));
        }
        let f = self.dequant[&(call.dtype, ub)];
        let row_units = row_bytes / ub;
        let (zp, zp_kind) = match wt.zp {
            Zp::Default => (0, 0),
            Zp::Packed(p) => (p, 1),
            Zp::Float(p) => (p, 2),
        };
        // A as a batch of [rows, K] matrices; Y likewise, with N columns.
        let am = Mat::of(ptr_of(a), a.shape, a.strides, true, false, false);
        let om = Mat::of(out.ptr, out.shape, out.strides, true, false, false);
        let mut n0 = 0;
        while n0 < n {
            let cols = tn.min(n - n0);
            // cols * row_units <= cols * K <= DEQUANT_BUDGET: 32-bit indices suffice.
            let units = cols * row_units;
            let mut p = NbDequant {
                b,
                scales: wt.scales,
                zp,
                w: ws,
                units: units as i32,
                row_units: row_units as i32,
                n0: n0 as i32,
                k: k as i32,
                kb: kb as i32,
                block_log2: self.block.trailing_zeros() as i32,
                row_bytes: self.row_bytes() as i32,
                zrow: self.zrow() as i32,
                zp_kind,
                _pad: 0,
            };
            let mut args = [arg(&mut p)];
            let grid = (units.div_ceil(DEQUANT_THREADS as usize) as u32, 1, 1);
            // SAFETY: nbits_dequant (DEQUANT_THREADS threads, one per `ub` bytes of B) reads B,
            // scales and zero points inside the checked views (columns n0..n0+cols) and writes
            // cols*K elements of the workspace.
            unsafe {
                base.rt
                    .launch_cfg(f, grid, (DEQUANT_THREADS, 1, 1), 0, &mut args)?
            };
            // W tile [cols, K] row-major is the [K, cols] right operand with unit row stride.
            let wm = Mat {
                ptr: ws,
                batch: Vec::new(),
                bstrides: Vec::new(),
                rows: k,
                cols,
                rs: 1,
                cs: k as i64,
            };
            let mut o = om.clone();
            o.ptr = om.ptr + (n0 as i64 * om.cs * w as i64) as CuPtr;
            o.cols = cols;
            self.float.run(
                base,
                &FloatProblem {
                    dtype: call.dtype,
                    a: am.clone(),
                    b: wm,
                    out: o,
                    alpha: 1.0,
                    beta: 0.0,
                    c: None,
                    bias: bias.map(|bp| (bp + (n0 * w) as CuPtr, 1)),
                    act: Act::None,
                },
            )?;
            n0 += cols;
        }
        Ok(())
    }
}

impl NBitsKernel {
    /// One product `A W^T (+ bias)` into `y` (`w2`: the tensor-core GLU kernel with the up
    /// weights, when it qualifies): the tensor-core GEMV, else the register GEMV, else the
    /// prefill path.
    fn product(
        &self,
        call: &Call,
        a: &TensorView<'_>,
        w: &Weights,
        w2: Option<&Weights>,
        y: &Dest<'_>,
    ) -> EpResult<()> {
        let base = &self.base;
        let y_rows = row_strides(y.shape, y.strides).filter(|&(_, cs)| cs == 1);
        let a_rows = row_strides(a.shape, a.strides);
        let bias = if w2.is_some() { None } else { call.bias };
        // The operand pointers and the output row stride, common to both GEMV parameter blocks.
        macro_rules! operands {
            ($p:ident, $y_rs:expr) => {
                $p.a = ptr_of(a);
                $p.b = w.b;
                $p.scales = w.scales;
                $p.zp = w.zp_ptr();
                $p.bias = bias.unwrap_or(0);
                $p.y = y.ptr;
                $p.y_rs = if call.m == 1 { self.n as i64 } else { $y_rs };
            };
        }
        if let Some((y_rs, _)) = y_rows {
            if let Some((f, grid, mut p)) = self.nq_launch(call, ptr_of(a), w, w2, a_rows) {
                operands!(p, y_rs);
                if let Some(w2) = w2 {
                    p.b2 = w2.b;
                    p.scales2 = w2.scales;
                    p.zp2 = w2.zp_ptr();
                }
                let mut args = [arg(&mut p)];
                // SAFETY: nq_gemv_* (NQ_THREADS threads, static shared memory only) reads the
                // checked views of A (M rows of K at a_rs, 16-byte aligned), B (and B2),
                // scales, zero points and bias and writes M x N outputs at the output's row
                // stride.
                return unsafe {
                    base.rt
                        .launch_cfg(f, grid, (NQ_THREADS, 1, 1), 0, &mut args)
                };
            }
        }
        if w2.is_some() {
            return Err(base.err("the fused SiLU product needs the tensor-core GEMV"));
        }
        let launch = match y_rows {
            Some(_) => self.gemv_launch(call, w, a_rows),
            None => None,
        };
        match launch {
            Some((f, grid, smem, mut p)) => {
                let (y_rs, _) = y_rows.expect("checked above");
                operands!(p, y_rs);
                let mut args = [arg(&mut p)];
                // SAFETY: nbits_gemv_* (256 threads, `smem` bytes of A tile) reads the checked
                // views of A, B, scales, zero points and bias and writes M x N outputs at the
                // output's row stride.
                unsafe {
                    base.rt
                        .launch_cfg(f, grid, (GEMV_THREADS, 1, 1), smem, &mut args)
                }
            }
            None => self.run_gemm(call, a, w, bias, y),
        }
    }

    /// MatMulNBitsSiluMul: one tensor-core GLU GEMV where it qualifies, else both products
    /// into a workspace and `nbits_silu_mul` into the (contiguous) output.
    fn silu_mul_products(
        &self,
        call: &Call,
        a: &TensorView<'_>,
        w2: &Weights,
        out: &TensorMut<'_>,
    ) -> EpResult<()> {
        let base = &self.base;
        let y = Dest {
            ptr: mut_ptr_of(out),
            shape: out.shape,
            strides: out.strides,
        };
        let y_rows = row_strides(out.shape, out.strides).filter(|&(_, cs)| cs == 1);
        if y_rows.is_some()
            && self
                .nq_launch(
                    call,
                    ptr_of(a),
                    &call.w,
                    Some(w2),
                    row_strides(a.shape, a.strides),
                )
                .is_some()
        {
            return self.product(call, a, &call.w, Some(w2), &y);
        }
        if !out.is_contiguous() {
            return Err(base.unsupported(
                call.dtype,
                "a strided MatMulNBitsSiluMul output runs on the CPU provider",
            ));
        }
        let n = out.numel();
        let width = call.dtype.element_size().unwrap_or(4);
        let ws = self
            .glu_ws
            .get(base, 2 * n * width, "gate and up products")?;
        let strides = dense_strides(out.shape);
        let (g, u) = (ws, ws + (n * width) as CuPtr);
        for (wt, ptr) in [(&call.w, g), (w2, u)] {
            let d = Dest {
                ptr,
                shape: out.shape,
                strides: &strides,
            };
            self.product(call, a, wt, None, &d)?;
        }
        let f = self.silu_mul[&call.dtype];
        let (mut gp, mut up, mut yp, mut np) = (g, u, mut_ptr_of(out), n as i64);
        let mut args = [arg(&mut gp), arg(&mut up), arg(&mut yp), arg(&mut np)];
        // SAFETY: nbits_silu_mul_T reads n elements of each product and writes n outputs.
        unsafe { base.rt.launch(f, n as u64, &mut args) }
    }
}

/// Threads of a dequantization block (the kernel's launch bound).
const DEQUANT_THREADS: u32 = 256;

/// Warps splitting K per column tile of the tensor-core GEMV (1, 2, 4 or 8): doubled while the
/// column tiles alone give fewer than `target` warps and every warp keeps at least one
/// 128-code slab.
fn nq_k_split(tiles: usize, slabs: usize, target: usize) -> usize {
    let mut ks = 1;
    while ks < 8 && tiles * ks < target && ks * 2 <= slabs {
        ks *= 2;
    }
    ks
}

/// Row-major element strides of `shape`.
fn dense_strides(shape: &[usize]) -> Vec<usize> {
    let mut st = vec![1; shape.len()];
    for i in (0..shape.len().saturating_sub(1)).rev() {
        st[i] = st[i + 1] * shape[i + 1];
    }
    st
}

/// Whether a view is dense row-major.
fn is_contiguous_view(v: &TensorView<'_>) -> bool {
    onnx_runtime_ep_api::is_contiguous(v.shape, v.strides)
}

/// A's (row stride, element stride) when every leading axis folds into one row axis.
pub(super) fn row_strides(shape: &[usize], strides: &[usize]) -> Option<(i64, i64)> {
    let r = shape.len();
    let ks = strides[r - 1] as i64;
    if r == 1 {
        return Some((0, ks));
    }
    // Drop size-1 leading axes; the rest must nest (stride[i] = stride[i+1] * shape[i+1]).
    let lead: Vec<(usize, usize)> = shape[..r - 1]
        .iter()
        .zip(&strides[..r - 1])
        .filter(|(&d, _)| d != 1)
        .map(|(&d, &s)| (d, s))
        .collect();
    match lead.last() {
        None => Some((0, ks)),
        Some(&(_, rs)) => {
            let nests = lead.windows(2).all(|w| w[0].1 == w[1].1 * w[1].0);
            nests.then_some((rs as i64, ks))
        }
    }
}

impl Kernel for NBitsKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let call = self.plan(inputs)?;
        Ok(vec![(call.dtype, call.out_shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let call = self.plan(inputs)?;
        base.expect_outputs(outputs, &[(call.dtype, call.out_shape.clone())])?;
        let out = &outputs[0];
        if out.numel() == 0 {
            return Ok(());
        }
        let a = base.req(inputs, 0)?;
        let dest = Dest {
            ptr: mut_ptr_of(out),
            shape: out.shape,
            strides: out.strides,
        };
        match &call.w2 {
            None => self.product(&call, a, &call.w, None, &dest)?,
            Some(w2) => self.silu_mul_products(&call, a, w2, out)?,
        }
        if !base.rt.is_capturing() {
            self.warmed.store(true, Ordering::Release);
        }
        Ok(())
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.set_constant(constant);
    }

    fn capture_support(&self) -> CaptureSupport {
        if self.warmed.load(Ordering::Acquire) {
            CaptureSupport::Supported
        } else {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: MatMulNBits sizes its workspace and chooses its cuBLASLt algorithm on \
                     its first eager run; run it once before capturing",
                    self.base.node
                ),
            }
        }
    }
}

fn positive(node: &onnx_runtime_ir::Node, name: &str) -> EpResult<usize> {
    match attr_int(node, name)? {
        Some(v) if v > 0 && v <= i32::MAX as i64 => Ok(v as usize),
        _ => Err(EpError::invalid_attribute(
            node,
            name,
            "is required and must be positive",
        )),
    }
}

pub fn matmul_nbits(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, false)
}

/// The internal MatMulNBitsSiluMul (the session's fusion of a gated feed-forward): inputs A,
/// then B, scales, zero points of the gate and of the up product.
pub fn matmul_nbits_silu_mul(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
) -> EpResult<Box<dyn Kernel>> {
    if req.node.inputs.len() != 7 {
        return Err(EpError::invalid_attribute(
            req.node,
            "inputs",
            format!(
                "MatMulNBitsSiluMul takes 7 inputs (A, then B, scales, zero points of each \
                 product), got {}",
                req.node.inputs.len()
            ),
        ));
    }
    build(rt, req, true)
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, glu: bool) -> EpResult<Box<dyn Kernel>> {
    Ok(Box::new(build_nbits(rt, req, glu)?))
}

/// The MatMulNBits (`glu`: MatMulNBitsSiluMul) kernel of a node.
pub(super) fn build_nbits(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    glu: bool,
) -> EpResult<NBitsKernel> {
    let nd = req.node;
    let (k, n) = (positive(nd, "K")?, positive(nd, "N")?);
    let bits = attr_int(nd, "bits")?.unwrap_or(4);
    if ![2, 4, 8].contains(&bits) {
        return Err(EpError::invalid_attribute(
            nd,
            "bits",
            format!("{bits} is not 2, 4 or 8"),
        ));
    }
    let block = positive(nd, "block_size")?;
    if block < 16 || !block.is_power_of_two() {
        return Err(EpError::invalid_attribute(
            nd,
            "block_size",
            format!("{block} must be a power of two >= 16"),
        ));
    }
    let level = attr_int(nd, "accuracy_level")?.unwrap_or(0);
    if !(0..=4).contains(&level) {
        return Err(EpError::invalid_attribute(
            nd,
            "accuracy_level",
            format!("{level} is not 0 to 4"),
        ));
    }
    if attr_int(nd, "weight_prepacked")?.unwrap_or(0) != 0 {
        return Err(EpError::invalid_attribute(
            nd,
            "weight_prepacked",
            "EP-prepacked (fpA_intB) weight layouts are not supported; export unprepacked \
             weights",
        ));
    }
    if !glu && nd.inputs.get(4).copied().flatten().is_some() {
        return Err(EpError::UnsupportedOp {
            ep: "cuda".into(),
            node: nd.describe(),
            domain_op: "com.microsoft::MatMulNBits with g_idx".into(),
            opset: req.opset,
            hint: "the CUDA kernel does not take g_idx (act-order); the CPU provider runs it"
                .into(),
        });
    }
    let base = Base::new(rt, nd);
    let module = base.module(&nbits_module())?;
    let deq_module = base.module(&nbits_dequant_module())?;
    // The tensor-core GEMV takes 4-bit codes in blocks of >= 32 with K a multiple of 32.
    let nq_module = if bits == 4 && block >= 32 && k.is_multiple_of(32) && rt.arch() >= 80 {
        Some(base.module(&nbits_gemv_module())?)
    } else {
        None
    };
    let mut gemv = HashMap::new();
    let mut nq = HashMap::new();
    let mut nq_glu = HashMap::new();
    let mut nq_norm = HashMap::new();
    let mut silu_mul = HashMap::new();
    let mut dequant = HashMap::new();
    for (dtype, tag) in FLOATS {
        if glu {
            silu_mul.insert(dtype, module.function(&format!("nbits_silu_mul_{tag}"))?);
        }
        for mr in [1, 2, 4] {
            gemv.insert(
                (dtype, mr),
                module.function(&format!("nbits_gemv_{tag}_b{bits}_m{mr}"))?,
            );
        }
        for ub in [4, 16] {
            dequant.insert(
                (dtype, ub),
                deq_module.function(&format!("nbits_dequant_{tag}_b{bits}_u{ub}"))?,
            );
        }
        if let (Some(m), DataType::Float16 | DataType::BFloat16) = (&nq_module, dtype) {
            for r in [1, 2] {
                // SAFETY (these three): nq_gemv reads only weights before pdl_wait (nbits_gemv.cu).
                nq.insert((dtype, r), unsafe {
                    m.function(&format!("nq_gemv_{tag}_r{r}"))?.overlapped()
                });
                let g = if glu { "_glu" } else { "" };
                nq_norm.insert((dtype, r), unsafe {
                    m.function(&format!("nq_gemv_{tag}_r{r}{g}_norm"))?
                        .overlapped()
                });
                if glu {
                    nq_glu.insert((dtype, r), unsafe {
                        m.function(&format!("nq_gemv_{tag}_r{r}_glu"))?.overlapped()
                    });
                }
            }
        }
    }
    let float = FloatEngine::new(&base)?;
    let last_weight = if glu { 6 } else { 3 };
    let weight_inputs = (1..=last_weight)
        .filter(|&i| nd.inputs.get(i).copied().flatten().is_some())
        .collect();
    Ok(NBitsKernel {
        ws: Workspace::new(rt),
        glu,
        nq_glu,
        nq_norm,
        silu_mul,
        glu_ws: Workspace::new(rt),
        base,
        k,
        n,
        bits: bits as usize,
        block,
        gemv,
        nq,
        dequant,
        float,
        warmed: AtomicBool::new(false),
        weight_inputs,
        constant_weights: false,
    })
}

#[cfg(test)]
mod tests {
    use super::nq_k_split;

    #[test]
    fn k_split_fills_the_gpu_and_keeps_a_slab_per_warp() {
        // 132 SMs x 24 warps = 3168 warps wanted.
        let target = 132 * 24;
        // lm_head (896 x 151936): 18992 tiles fill the GPU alone.
        assert_eq!(nq_k_split(151_936 / 8, 7, target), 1);
        // 896 x 4864: 608 tiles, 7 slabs: 4 warps (each keeps a slab).
        assert_eq!(nq_k_split(608, 7, target), 4);
        // 8960 x 1536: 192 tiles, 70 slabs: the most, 8.
        assert_eq!(nq_k_split(192, 70, target), 8);
        // 1536 x 8960: 1120 tiles, 12 slabs: 4 (4480 warps).
        assert_eq!(nq_k_split(1120, 12, target), 4);
        // One slab: no split.
        assert_eq!(nq_k_split(3, 1, target), 1);
    }
}
