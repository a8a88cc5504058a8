//! The decode product `gemv_*` (kernels/gemv.cu): at most [`MAX_ROWS`] rows of A times a
//! row-major 2-D B of float32, float16 or bfloat16, read at memory bandwidth where cuBLASLt's
//! M = 1 kernels leave most multiprocessors idle. MatMul, FusedMatMul (alpha 1, B not
//! transposed), MatMulBias and the internal MatMulSiluMul take it when their operands fit
//! ([`GemvOperands::of`]); everything else stays on cuBLASLt.
//!
//! The kernel splits K so that about four blocks per multiprocessor run; with several splits
//! the last one of a column tile to finish adds the float32 partials in split order, so the
//! bytes of a run do not depend on the order blocks finish in.

use super::shape::{alignment, merge, Act, Mat, Product};
use crate::ops::common::*;
use crate::ops::scratch::Scratch;
use crate::runtime::{CuPtr, Function};
use onnx_runtime_ep_api::EpResult;
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::OnceLock;

/// Rows of A the kernel takes (its `m1`, `m2`, `m4` variants).
pub const MAX_ROWS: usize = 4;
const THREADS: usize = 256;
/// Rows of B in flight per thread (GV_U; half of it for _glu, which reads two weights).
const ROWS_IN_FLIGHT: usize = 8;
/// The column groups of a tile the kernels are compiled for (16 bytes of a row each).
const GROUPS: [usize; 2] = [2, 8];

/// Mirrors `GemvParams` in kernels/gemv.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct GemvParams {
    a: u64,
    b: u64,
    b2: u64,
    bias: u64,
    y: u64,
    part: u64,
    count: u64,
    a_rs: i64,
    b_rs: i64,
    y_rs: i64,
    m: i32,
    n: i32,
    k: i32,
    kchunk: i32,
    splits: i32,
    act: i32,
    p0: f32,
    p1: f32,
}

/// One product the kernel can run: `rows` rows of A (`a_rs` apart, unit column stride), B's
/// K rows of N (`b_rs` apart), Y's rows `y_rs` apart.
#[derive(Clone, Copy, Debug)]
pub struct GemvOperands {
    pub dtype: DataType,
    pub a: CuPtr,
    pub a_rs: i64,
    pub rows: usize,
    pub k: usize,
    pub n: usize,
    pub b: CuPtr,
    pub b_rs: i64,
    pub y: CuPtr,
    pub y_rs: i64,
}

/// The fewest columns a product takes the decode kernel with (`DEFAULT_MIN_N`), or None when
/// it is off: `ONNX_RUNTIME_CUDA_GEMV=0` leaves every product to cuBLASLt, `=1` takes every
/// eligible one, `=N` those of at least N columns (to compare the paths on one machine).
fn min_columns() -> Option<usize> {
    static MIN: OnceLock<Option<usize>> = OnceLock::new();
    *MIN.get_or_init(
        || match std::env::var("ONNX_RUNTIME_CUDA_GEMV").as_deref() {
            Ok("0") => None,
            Ok(v) => v.parse().ok().or(Some(DEFAULT_MIN_N)),
            Err(_) => Some(DEFAULT_MIN_N),
        },
    )
}

/// Every eligible product. Measured on an H100 (docs/benchmarks/2026-12-07-gpu-session-21.md):
/// a replayed 0.5B float16 decode step takes the same device time on this kernel as on
/// cuBLASLt (1.54 ms either way, Nsight Compute's graph mode), and an int4 export (whose
/// float products are few) gains end to end.
const DEFAULT_MIN_N: usize = 1;

fn elem_bytes(dtype: DataType) -> Option<usize> {
    match dtype {
        DataType::Float32 => Some(4),
        DataType::Float16 | DataType::BFloat16 => Some(2),
        _ => None,
    }
}

/// The (rows, row stride) of a batch of `rows x cols` matrices of A and of the output read
/// as one stack of rows, when both can be: unit column strides, batch axes that merge.
fn stacked_rows(a: &Mat, a_bstrides: &[i64], om: &Mat) -> Option<(usize, i64, i64)> {
    if (a.cols > 1 && a.cs != 1) || (om.cols > 1 && om.cs != 1) {
        return None;
    }
    let mut dims = om.batch.clone();
    dims.push(a.rows);
    let mut sa = a_bstrides.to_vec();
    sa.push(a.rs);
    let mut so = om.bstrides.clone();
    so.push(om.rs);
    let (d, [sa, so]) = merge(&dims, [&sa, &so]);
    match d.len() {
        0 => Some((1, 0, 0)),
        1 => Some((d[0], sa[0], so[0])),
        _ => None,
    }
}

impl GemvOperands {
    /// The operands of `prod` (output `out`) when the kernel takes them: a float32 / float16
    /// / bfloat16 product of at most [`MAX_ROWS`] rows, B 2-D (no batch), row-major with
    /// 16-byte aligned rows and N a multiple of 16 bytes' worth of elements, A's and the
    /// output's rows one stack with unit column strides.
    pub fn of(dtype: DataType, prod: &Product, out: &Mat) -> Option<GemvOperands> {
        let min_n = min_columns()?;
        let es = elem_bytes(dtype)?;
        let (b, a) = (&prod.b, &prod.a);
        let (k, n) = (b.rows, b.cols);
        if n < min_n {
            return None;
        }
        if k == 0 || n == 0 || b.batch.iter().any(|&d| d != 1) {
            return None;
        }
        if k > i32::MAX as usize || n > i32::MAX as usize || n % (16 / es) != 0 {
            return None;
        }
        if n > 1 && b.cs != 1 {
            return None;
        }
        let b_rs = if k == 1 { n as i64 } else { b.rs };
        if b_rs < n as i64 || alignment(b.ptr, &[b_rs * es as i64]) < 16 {
            return None;
        }
        let a_bs = a.batch_strides_over(&prod.batch);
        let (rows, a_rs, y_rs) = stacked_rows(a, &a_bs, out)?;
        if rows == 0 || rows > MAX_ROWS {
            return None;
        }
        Some(GemvOperands {
            dtype,
            a: a.ptr,
            a_rs,
            rows,
            k,
            n,
            b: b.ptr,
            b_rs,
            y: out.ptr,
            y_rs,
        })
    }
}

/// The launch of an `n`-column, depth-`k` product with `v` columns per 16 bytes on `sms`
/// multiprocessors: (column groups of a tile, tiles, splits of K, rows per split). Wide tiles
/// (128 bytes of a row) when they alone give two blocks per multiprocessor, else narrow ones
/// (32 bytes). K is split only when a thread would otherwise wait on more than two rounds of
/// loads and the tiles leave the device short of blocks; each split then still reads at least
/// one round.
fn grid(n: usize, k: usize, v: usize, glu: bool, sms: usize) -> (usize, usize, usize, usize) {
    let target = 2 * sms;
    let cg = if n.div_ceil(8 * v) >= target { 8 } else { 2 };
    let tiles = n.div_ceil(cg * v);
    let lanes = THREADS / cg;
    let round = lanes
        * if glu {
            ROWS_IN_FLIGHT / 2
        } else {
            ROWS_IN_FLIGHT
        };
    let rounds = k.div_ceil(round);
    let mut splits = 1;
    if rounds > 2 && tiles < target {
        splits = target.div_ceil(tiles).min(rounds).min(65535);
    }
    let kchunk = k.div_ceil(splits).next_multiple_of(lanes);
    (cg, tiles, k.div_ceil(kchunk), kchunk)
}

/// The `gemv_*` functions (loaded on first use) and the split workspace of one kernel.
pub struct Gemv {
    fns: OnceLock<HashMap<(DataType, usize, usize, bool), Function>>,
    part: Scratch,
    counters: Scratch,
    /// B (and B2) are model constants: the launch may overlap the kernel ahead of it (the
    /// kernel reads only them before `pdl_wait`).
    constant_weights: bool,
}

impl Gemv {
    pub fn new(base: &Base) -> Gemv {
        Gemv {
            fns: OnceLock::new(),
            part: Scratch::new(&base.rt),
            counters: Scratch::new(&base.rt),
            constant_weights: false,
        }
    }

    /// Whether every weight the kernel reads (B, and B2 for glu) is a model constant, which
    /// no kernel of a run writes (`Kernel::set_constant_inputs`); only then do launches
    /// overlap the kernel ahead of them.
    pub fn set_constant_weights(&mut self, constant: bool) {
        self.constant_weights = constant;
    }

    fn function(
        &self,
        base: &Base,
        dtype: DataType,
        mr: usize,
        cg: usize,
        glu: bool,
    ) -> EpResult<Function> {
        if self.fns.get().is_none() {
            let module = base.module(&super::gemv_module())?;
            let mut fns = HashMap::new();
            for (dt, tag) in [
                (DataType::Float32, "f32"),
                (DataType::Float16, "f16"),
                (DataType::BFloat16, "bf16"),
            ] {
                for r in [1, 2, 4] {
                    for cg in GROUPS {
                        let name = format!("gemv_{tag}_m{r}_c{cg}");
                        fns.insert((dt, r, cg, false), module.function(&name)?);
                        fns.insert((dt, r, cg, true), module.function(&format!("{name}_glu"))?);
                    }
                }
            }
            let _ = self.fns.set(fns);
        }
        let fns = self.fns.get().expect("set above");
        fns.get(&(dtype, mr, cg, glu)).copied().ok_or_else(|| {
            base.unsupported(
                dtype,
                "the decode product takes float32, float16 or bfloat16",
            )
        })
    }

    /// `act(A B + bias)`, or with `glu = Some(B2)`, `silu(A B) * (A B2)` (B2 of B's shape and
    /// row stride). `bias` is N contiguous elements.
    pub fn run(
        &self,
        base: &Base,
        op: &GemvOperands,
        bias: Option<CuPtr>,
        act: Act,
        glu: Option<CuPtr>,
    ) -> EpResult<()> {
        let es = elem_bytes(op.dtype).unwrap_or(2);
        let ns = if glu.is_some() { 2 } else { 1 };
        let mr = op.rows.next_power_of_two();
        let (cg, tiles, splits, kchunk) = grid(
            op.n,
            op.k,
            16 / es,
            glu.is_some(),
            base.rt.sm_count() as usize,
        );
        // SAFETY: gemv_* read only B and B2 before pdl_wait (kernels/gemv.cu), and
        // `constant_weights` says that no kernel writes them.
        let f = unsafe {
            self.function(base, op.dtype, mr, cg, glu.is_some())?
                .overlapped_if(self.constant_weights)
        };
        let (code, p0, p1) = act.code();
        let mut p = GemvParams {
            a: op.a,
            b: op.b,
            b2: glu.unwrap_or(0),
            bias: bias.unwrap_or(0),
            y: op.y,
            a_rs: op.a_rs,
            b_rs: op.b_rs,
            y_rs: op.y_rs,
            m: op.rows as i32,
            n: op.n as i32,
            k: op.k as i32,
            kchunk: kchunk as i32,
            splits: splits as i32,
            act: code,
            p0: p0 as f32,
            p1: p1 as f32,
            ..Default::default()
        };
        if splits > 1 {
            let bytes = splits * op.rows * ns * op.n * 4;
            p.part = self.part.get(base, bytes, "split partial sums")?;
            p.count = self
                .counters
                .get_zeroed(base, 4 * tiles, "split counters")?;
        }
        let mut args = [arg(&mut p)];
        // SAFETY: gemv_* take one GemvParams by value; A's `rows` rows of K, B's (and B2's) K
        // rows of N, the bias's N elements and Y's rows lie inside their tensors (checked by
        // `GemvOperands::of` and the caller), `part` holds splits x rows x ns x N floats and
        // `count` one counter per tile.
        unsafe {
            base.rt.launch_cfg(
                f,
                (tiles as u32, splits as u32, 1),
                (THREADS as u32, 1, 1),
                0,
                &mut args,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::grid;

    #[test]
    fn decode_shapes_get_one_round_of_loads_or_few_splits() {
        // Qwen2.5-0.5B float16 on 132 multiprocessors: QKV, o_proj and gate/up read all of K
        // in one round without splits; down splits K; the head takes wide tiles.
        assert_eq!(grid(1152, 896, 8, false, 132), (2, 72, 1, 896));
        assert_eq!(grid(896, 896, 8, false, 132), (2, 56, 1, 896));
        assert_eq!(grid(4864, 896, 8, true, 132), (2, 304, 1, 896));
        assert_eq!(grid(896, 4864, 8, false, 132), (2, 56, 5, 1024));
        assert_eq!(grid(151936, 896, 8, false, 132), (8, 2374, 1, 896));
        // Every split holds rows; the splits cover K.
        for (n, k) in [(8, 1), (24, 7), (64, 100_000), (520, 512)] {
            let (cg, _, splits, kchunk) = grid(n, k, 8, false, 132);
            assert!(kchunk % (256 / cg) == 0 && (splits - 1) * kchunk < k && splits * kchunk >= k);
        }
    }
}
