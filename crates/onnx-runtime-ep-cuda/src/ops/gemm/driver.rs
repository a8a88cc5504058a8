//! The float product driver: maps one batched row-major product (any operand strides, batch
//! broadcasting, an optional bias, Gemm's C, an activation) onto cuBLASLt calls with cached
//! plans, packing only operands no BLAS layout can describe, and runs the epilogue kernel for
//! what cuBLASLt cannot fuse.

use super::blas::{BlasState, BlasType, Epi, LayoutKey, Plan, PlanKey};
use super::shape::{alignment, major, merge, Act, Major, Mat};
use crate::ops::common::*;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::EpResult;
use onnx_runtime_ir::DataType;
use std::collections::hash_map::Entry;
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// Plans a kernel keeps (one per distinct problem it has run).
const MAX_PLANS: usize = 256;

/// Axes of the epilogue kernel's walk (output rank 8 plus the promoted matrix axes).
pub const EPI_RANK: usize = 10;

/// Mirrors `EpiParams` in gemm.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct EpiParams {
    pub n: i64,
    pub rank: i32,
    pub act: i32,
    pub dims: [i64; EPI_RANK],
    pub so: [i64; EPI_RANK],
    pub sc: [i64; EPI_RANK],
    pub bias_stride: i64,
    pub zero_first: i32,
    pub has_c: i32,
    pub has_bias: i32,
    pub _pad: i32,
    pub alpha: f64,
    pub beta: f64,
    pub p0: f64,
    pub p1: f64,
    pub out: u64,
    pub c: u64,
    pub bias: u64,
}

/// Gemm's C broadcast over the `[M, N]` output: strides are 0 along broadcast axes.
#[derive(Clone, Copy, Debug)]
pub struct CMat {
    pub ptr: CuPtr,
    pub rs: i64,
    pub cs: i64,
}

/// One float product `out = act(alpha * op(A) @ op(B) + beta * C + bias)`.
pub struct FloatProblem {
    pub dtype: DataType,
    pub a: Mat,
    pub b: Mat,
    /// The output, batched over the broadcast batch shape.
    pub out: Mat,
    pub alpha: f64,
    pub beta: f64,
    /// Gemm's C (only when beta != 0; the output has no batch axes then).
    pub c: Option<CMat>,
    /// A bias vector over the output's columns: address and element stride.
    pub bias: Option<(CuPtr, i64)>,
    pub act: Act,
}

/// Temporary device blocks of one call, returned to the cache when the call has enqueued its
/// work (the stream orders any later reuse after it).
struct Temps<'a> {
    rt: &'a CudaRuntime,
    blocks: Vec<CuPtr>,
}

impl Temps<'_> {
    fn alloc(&mut self, bytes: usize) -> EpResult<CuPtr> {
        let (ptr, _) = self.rt.allocate(bytes.max(1), 256)?;
        self.blocks.push(ptr);
        Ok(ptr)
    }
}

impl Drop for Temps<'_> {
    fn drop(&mut self) {
        for &p in &self.blocks {
            let _ = self.rt.free(p);
        }
    }
}

/// A float product kernel's cuBLASLt state, plans and helper kernels.
pub struct FloatEngine {
    blas: Arc<BlasState>,
    plans: Mutex<HashMap<PlanKey, Plan>>,
    /// `gemm_epilogue_{f32,f64,f16,bf16}` and `gemm_epilogue_rows_*` (vectorized rows).
    epilogue: HashMap<DataType, (Function, Function)>,
    copy: WidthFns,
}

/// One library operand: a column-major `rows x cols` matrix with leading dimension `ld`,
/// transposed by the call when `trans`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Side {
    pub trans: bool,
    pub rows: usize,
    pub cols: usize,
    pub ld: i64,
}

impl FloatEngine {
    pub fn new(base: &Base) -> EpResult<Self> {
        let blas = BlasState::of(&base.rt)?;
        let module = base.module(&super::gemm_module())?;
        let mut epilogue = HashMap::new();
        for (dtype, tag) in [
            (DataType::Float32, "f32"),
            (DataType::Float64, "f64"),
            (DataType::Float16, "f16"),
            (DataType::BFloat16, "bf16"),
        ] {
            epilogue.insert(
                dtype,
                (
                    module.function(&format!("gemm_epilogue_{tag}"))?,
                    module.function(&format!("gemm_epilogue_rows_{tag}"))?,
                ),
            );
        }
        let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
        Ok(FloatEngine {
            blas,
            plans: Mutex::new(HashMap::new()),
            epilogue,
            copy,
        })
    }

    /// Whether a product has run (its algorithm chosen), so the next can be captured.
    pub fn warmed(&self) -> bool {
        !self
            .plans
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_empty()
    }

    /// Enqueues the product on the runtime's stream.
    pub fn run(&self, base: &Base, p: &FloatProblem) -> EpResult<()> {
        let ty = BlasType::of(p.dtype, base.rt.tf32()).ok_or_else(|| {
            base.unsupported(
                p.dtype,
                "the CUDA float product takes float32, float16, bfloat16 and float64",
            )
        })?;
        let w = p.dtype.element_size().unwrap_or(4);
        let (m, k, n) = (p.a.rows, p.a.cols, p.b.cols);
        if m == 0 || n == 0 || p.out.batch.contains(&0) {
            return Ok(());
        }
        let rt = &*base.rt;
        let mut temps = Temps {
            rt,
            blocks: Vec::new(),
        };
        // Where the product goes: the output, or a contiguous block copied to it at the end.
        let target = match major(m, n, p.out.rs, p.out.cs) {
            Some(_) => p.out.clone(),
            None => {
                let ptr = temps.alloc(p.out.numel() * w)?;
                contiguous_mat(ptr, &p.out)
            }
        };
        let bias = p.bias;
        let c = p.c.filter(|_| p.beta != 0.0);
        if k == 0 || p.a.batch.contains(&0) || p.b.batch.contains(&0) {
            // No products to sum: the output is beta * C + bias, activated.
            self.epilogue(
                base,
                p.dtype,
                &target,
                true,
                1.0,
                c.map(|c| (c, p.beta)),
                bias,
                p.act,
            )?;
            return self.finish(base, &target, &p.out, w);
        }
        let a = match major(p.a.rows, p.a.cols, p.a.rs, p.a.cs) {
            Some(_) => p.a.clone(),
            None => self.pack(base, &mut temps, &p.a, w)?,
        };
        let b = match major(p.b.rows, p.b.cols, p.b.rs, p.b.cs) {
            Some(_) => p.b.clone(),
            None => self.pack(base, &mut temps, &p.b, w)?,
        };

        let calls = plan_calls(&a, &b, &target)
            .ok_or_else(|| base.err("internal: an operand has no BLAS layout after packing"))?;
        let count = calls.count;
        if count > i32::MAX as usize {
            return Err(base.err(format!(
                "{count} batched matrices exceed cuBLASLt's batch count limit"
            )));
        }
        let [stride_a, stride_b, stride_o] = calls.stride;
        let (la, lb, swap) = (&calls.la, &calls.lb, calls.swap);
        let (d_rows, d_cols, d_ld) = (calls.d.rows, calls.d.cols, calls.d.ld);
        let row_out = swap;

        // The epilogue: cuBLASLt's bias (+ ReLU / tanh-GELU) where it applies exactly.
        let fusable = |ptr: CuPtr, stride: i64| {
            row_out && ty != BlasType::F64 && (n == 1 || stride == 1) && ptr.is_multiple_of(16)
        };
        let mut epi = Epi::None;
        let mut fused_bias: Option<CuPtr> = None;
        let mut post_bias = bias;
        let mut post_act = p.act;
        let mut beta = 0.0;
        let mut c_direct: Option<(CuPtr, i64)> = None;
        let mut prefill = None;
        if let Some((bp, bs)) = bias {
            if fusable(bp, bs) {
                epi = match p.act {
                    Act::Relu => Epi::ReluBias,
                    Act::FastGelu => Epi::GeluBias,
                    _ => Epi::Bias,
                };
                if epi != Epi::Bias {
                    post_act = Act::None;
                }
                fused_bias = Some(bp);
                post_bias = None;
            }
        }
        if let Some(c) = c {
            let row_vector = (m == 1 || c.rs == 0) && (n == 1 || c.cs == 1);
            let c_major = major(m, n, c.rs, c.cs);
            if p.beta == 1.0 && row_vector && epi == Epi::None && post_bias.is_none() {
                if fusable(c.ptr, 1) && p.act == Act::None {
                    epi = Epi::Bias;
                    fused_bias = Some(c.ptr);
                } else {
                    post_bias = Some((c.ptr, c.cs));
                }
            } else if count == 1
                && calls.outer.len() == 1
                && c_major.map(is_row) == Some(row_out)
                && c.rs != 0
                && c.cs != 0
            {
                let ld = match c_major {
                    Some(Major::Row(l) | Major::Col(l)) => l,
                    None => unreachable!("checked above"),
                };
                c_direct = Some((c.ptr, ld));
                beta = p.beta;
            } else {
                prefill = Some(c);
                beta = p.beta;
            }
        }

        let layout = |rows: usize, cols: usize, ld: i64, stride: i64| LayoutKey {
            rows: rows as u64,
            cols: cols as u64,
            ld,
            batch: count as i32,
            stride: if count > 1 { stride } else { 0 },
        };
        let (pa, pb, sa_lib, sb_lib) = if swap {
            (b.ptr, a.ptr, stride_b, stride_a)
        } else {
            (a.ptr, b.ptr, stride_a, stride_b)
        };
        let (oa_lib, ob_lib) = if swap { (1, 0) } else { (0, 1) };
        // What the library may assume of each operand's address: the base, every batch and
        // every outer-loop offset (the library accounts for leading dimensions itself).
        let offsets = |ptr: CuPtr, batch_stride: i64, which: usize| {
            let mut o: Vec<i64> = calls.outer.iter().map(|c| c[which] * w as i64).collect();
            if count > 1 {
                o.push(batch_stride * w as i64);
            }
            alignment(ptr, &o)
        };
        let d_layout = layout(d_rows, d_cols, d_ld, stride_o);
        let c_layout = match c_direct {
            Some((_, ld)) => layout(d_rows, d_cols, ld, 0),
            None => d_layout,
        };
        let key = PlanKey {
            ty,
            trans_a: la.trans,
            trans_b: lb.trans,
            a: layout(la.rows, la.cols, la.ld, sa_lib),
            b: layout(lb.rows, lb.cols, lb.ld, sb_lib),
            c: c_layout,
            d: d_layout,
            epi,
            align: [
                offsets(pa, sa_lib, oa_lib),
                offsets(pb, sb_lib, ob_lib),
                match c_direct {
                    Some((cp, _)) => alignment(cp, &[]),
                    None => offsets(target.ptr, stride_o, 2),
                },
                offsets(target.ptr, stride_o, 2),
                fused_bias.map_or(256, |bp| alignment(bp, &[])),
            ],
        };

        if let Some(c) = prefill {
            // The output starts as C (broadcast); the product adds to it with beta.
            self.epilogue(
                base,
                p.dtype,
                &target,
                true,
                1.0,
                Some((c, 1.0)),
                None,
                Act::None,
            )?;
        }
        {
            let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
            if plans.len() >= MAX_PLANS && !plans.contains_key(&key) {
                // Shapes that keep changing (a growing sequence): start over rather than grow.
                plans.clear();
            }
            let plan: &Plan = match plans.entry(key) {
                Entry::Occupied(e) => e.into_mut(),
                Entry::Vacant(v) => v.insert(
                    Plan::new(&self.blas, &key, fused_bias.unwrap_or(0))
                        .map_err(|e| base.err(format!("cuBLASLt cannot run this product: {e}")))?,
                ),
            };
            if !plan.fused && epi != Epi::None {
                // No algorithm with the epilogue: the kernel below adds the bias.
                post_bias = match (bias, fused_bias) {
                    (Some(b), Some(_)) => Some(b),
                    (_, Some(cp)) => Some((cp, 1)),
                    (b, None) => b,
                };
                post_act = p.act;
            }
            let (alpha32, beta32) = (p.alpha as f32, beta as f32);
            let (alpha64, beta64) = (p.alpha, beta);
            let (alpha_ptr, beta_ptr): (*const c_void, *const c_void) = if ty.double_scale() {
                (
                    &alpha64 as *const f64 as *const c_void,
                    &beta64 as *const f64 as *const c_void,
                )
            } else {
                (
                    &alpha32 as *const f32 as *const c_void,
                    &beta32 as *const f32 as *const c_void,
                )
            };
            rt.bind_thread()?;
            for &[oa, ob, oo] in &calls.outer {
                let at = |ptr: CuPtr, off: i64| (ptr as i64 + off * w as i64) as CuPtr;
                let (a_ptr, b_ptr) = (at(a.ptr, oa), at(b.ptr, ob));
                let d_ptr = at(target.ptr, oo);
                let (lib_a, lib_b) = if swap { (b_ptr, a_ptr) } else { (a_ptr, b_ptr) };
                let c_ptr = c_direct.map_or(d_ptr, |(cp, _)| cp);
                // SAFETY: the layouts describe the views the addresses point into; alpha and
                // beta live until the call returns (cuBLASLt reads host scalars at enqueue).
                unsafe {
                    plan.run(
                        &self.blas,
                        rt,
                        alpha_ptr,
                        beta_ptr,
                        [lib_a, lib_b, c_ptr, d_ptr],
                        fused_bias.filter(|_| plan.fused),
                    )?
                };
            }
        }
        if post_bias.is_some() || post_act != Act::None {
            self.epilogue(
                base, p.dtype, &target, false, 1.0, None, post_bias, post_act,
            )?;
        }
        self.finish(base, &target, &p.out, w)
    }

    /// Copies a temporary target to the output (no-op when the product wrote the output).
    fn finish(&self, base: &Base, target: &Mat, out: &Mat, w: usize) -> EpResult<()> {
        if target.ptr == out.ptr {
            return Ok(());
        }
        let (dims, src) = target.walk();
        let (_, dst) = out.walk();
        copy_strided(
            base, &self.copy, w, target.ptr, out.ptr, &dims, &src, &dst, 0, 0,
        )
    }

    /// Copies an operand no BLAS layout describes into a contiguous temporary block.
    fn pack(&self, base: &Base, temps: &mut Temps<'_>, mat: &Mat, w: usize) -> EpResult<Mat> {
        let ptr = temps.alloc(mat.numel() * w)?;
        let packed = contiguous_mat(ptr, mat);
        let (dims, src) = mat.walk();
        let (_, dst) = packed.walk();
        copy_strided(base, &self.copy, w, mat.ptr, ptr, &dims, &src, &dst, 0, 0)?;
        Ok(packed)
    }

    /// `target = act((zero_first ? 0 : alpha * target) + beta * C + bias)` over the whole
    /// (batched) target.
    #[allow(clippy::too_many_arguments)]
    fn epilogue(
        &self,
        base: &Base,
        dtype: DataType,
        target: &Mat,
        zero_first: bool,
        alpha: f64,
        c: Option<(CMat, f64)>,
        bias: Option<(CuPtr, i64)>,
        act: Act,
    ) -> EpResult<()> {
        let (f, rows_fn) = *self.epilogue.get(&dtype).ok_or_else(|| {
            base.unsupported(dtype, "the CUDA product epilogue takes float types")
        })?;
        let (dims, so) = target.walk();
        let n: usize = dims.iter().product();
        if n == 0 {
            return Ok(());
        }
        let mut sc = vec![0i64; dims.len()];
        if let Some((cm, _)) = &c {
            let r = dims.len();
            sc[r - 2] = cm.rs;
            sc[r - 1] = cm.cs;
        }
        // Merge the leading axes; the last (columns) stays, it indexes the bias.
        let last = dims.len() - 1;
        let (mut d, [mut o, mut s]) = merge(&dims[..last], [&so[..last], &sc[..last]]);
        d.push(dims[last]);
        o.push(so[last]);
        s.push(sc[last]);
        if d.len() > EPI_RANK {
            return Err(base.err(format!(
                "the output needs {} axes; the product epilogue takes {EPI_RANK}",
                d.len()
            )));
        }
        let (code, p0, p1) = act.code();
        if c.is_none() {
            if let Some(prm) = rows_params(&d, &o, target.ptr, bias, dtype, code, (p0, p1)) {
                let mut prm = EpiRows {
                    zero_first: zero_first as i32,
                    alpha,
                    ..prm
                };
                let vectors = (prm.rows * (prm.cols / vector_of(dtype))) as u64;
                let mut args = [arg(&mut prm)];
                // SAFETY: gemm_epilogue_rows_T(EpiRows) reads and writes `rows` rows of
                // `cols` elements `ld` apart inside the target and `cols` bias entries;
                // rows_params checked the alignment its 16-byte accesses need.
                return unsafe { base.rt.launch(rows_fn, vectors, &mut args) };
            }
        }
        let mut prm = EpiParams {
            n: n as i64,
            rank: d.len() as i32,
            act: code,
            dims: fill(&d.iter().map(|&x| x as i64).collect::<Vec<_>>()),
            so: fill(&o),
            sc: fill(&s),
            bias_stride: bias.map_or(0, |(_, s)| s),
            zero_first: zero_first as i32,
            has_c: c.is_some() as i32,
            has_bias: bias.is_some() as i32,
            alpha,
            beta: c.map_or(0.0, |(_, b)| b),
            p0,
            p1,
            out: target.ptr,
            c: c.map_or(0, |(cm, _)| cm.ptr),
            bias: bias.map_or(0, |(b, _)| b),
            ..Default::default()
        };
        let mut args = [arg(&mut prm)];
        // SAFETY: gemm_epilogue_T(EpiParams) walks inside the target, C and bias views.
        unsafe { base.rt.launch(f, n as u64, &mut args) }
    }
}

/// Elements in the epilogue's 16-byte vectors.
fn vector_of(dtype: DataType) -> i64 {
    16 / dtype.element_size().unwrap_or(16).max(1) as i64
}

/// Mirrors `EpiRows` in kernels/gemm.cu.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct EpiRows {
    rows: i64,
    cols: i64,
    ld: i64,
    bias_stride: i64,
    act: i32,
    zero_first: i32,
    has_bias: i32,
    _pad: i32,
    alpha: f64,
    p0: f64,
    p1: f64,
    out: u64,
    bias: u64,
}

/// The vectorized epilogue's parameters when the merged target (`dims`, `strides`) is rows
/// of unit-stride columns whose vectors are 16-byte aligned, and so is a contiguous bias.
fn rows_params(
    dims: &[usize],
    strides: &[i64],
    out: u64,
    bias: Option<(CuPtr, i64)>,
    dtype: DataType,
    act: i32,
    (p0, p1): (f64, f64),
) -> Option<EpiRows> {
    let v = vector_of(dtype);
    let (rows, ld, cols) = match (dims, strides) {
        ([c], [1]) => (1, *c as i64, *c as i64),
        ([r, c], [ld, 1]) => (*r as i64, *ld, *c as i64),
        _ => return None,
    };
    let aligned = |p: u64| p.is_multiple_of(16);
    if cols % v != 0 || ld % v != 0 || !aligned(out) {
        return None;
    }
    if let Some((b, stride)) = bias {
        if stride != 1 || !aligned(b) {
            return None;
        }
    }
    Some(EpiRows {
        rows,
        cols,
        ld,
        bias_stride: bias.map_or(0, |(_, s)| s),
        act,
        has_bias: bias.is_some() as i32,
        p0,
        p1,
        out,
        bias: bias.map_or(0, |(b, _)| b),
        ..Default::default()
    })
}

/// How one batched product maps onto library calls.
#[derive(Debug)]
pub(super) struct Calls {
    pub la: Side,
    pub lb: Side,
    pub d: Side,
    /// The library's A is our B (row-major output: D = out^T = B^T A^T); else D = out = A B.
    pub swap: bool,
    /// Matrices per call (strided batch).
    pub count: usize,
    /// Batch strides (elements) of our A, our B and the output within a call.
    pub stride: [i64; 3],
    /// Element offsets of our A, our B and the output, one entry per call.
    pub outer: Vec<[i64; 3]>,
}

/// Plans the library calls of `target = a @ b` (operands with BLAS layouts): one tall product
/// when every batch reads the same B and A's batches stack as rows, else a strided batch over
/// the innermost merged batch axis and one call per index of the others. `None` when an
/// operand has no BLAS layout.
pub(super) fn plan_calls(a: &Mat, b: &Mat, target: &Mat) -> Option<Calls> {
    let (m, k, n) = (a.rows, a.cols, b.cols);
    let batch = target.batch.clone();
    let mut sa = a.batch_strides_over(&batch);
    let mut sb = b.batch_strides_over(&batch);
    let mut so = target.bstrides.clone();
    let mut bdims = batch.clone();
    let (mut rows, mut a_rs, mut o_rs) = (m, a.rs, target.rs);
    if !bdims.is_empty() && sb.iter().all(|&s| s == 0) {
        let mut dims = bdims.clone();
        dims.push(m);
        let (mut fa, mut fo) = (sa.clone(), so.clone());
        fa.push(a.rs);
        fo.push(target.rs);
        let (d, [fa, fo]) = merge(&dims, [&fa, &fo]);
        if d.len() <= 1 {
            let tall: usize = dims.iter().product();
            let (ars, ors) = match d.len() {
                1 => (fa[0], fo[0]),
                _ => (a.rs, target.rs),
            };
            let same_out = major(tall, n, ors, target.cs).map(is_row)
                == major(m, n, target.rs, target.cs).map(is_row);
            if major(tall, k, ars, a.cs).is_some() && same_out {
                (rows, a_rs, o_rs) = (tall, ars, ors);
                bdims.clear();
                sa.clear();
                sb.clear();
                so.clear();
            }
        }
    }
    let (bd, [ba, bb, bo]) = merge(&bdims, [&sa, &sb, &so]);
    let (count, stride) = match bd.last() {
        Some(&d) => {
            let l = bd.len() - 1;
            (d, [ba[l], bb[l], bo[l]])
        }
        None => (1, [0, 0, 0]),
    };
    let outer_dims = &bd[..bd.len().saturating_sub(1)];
    let mut outer = Vec::with_capacity(outer_dims.iter().product());
    for idx in 0..outer_dims.iter().product::<usize>() {
        let mut off = [0i64; 3];
        let mut rem = idx;
        for d in (0..outer_dims.len()).rev() {
            let x = (rem % outer_dims[d]) as i64;
            rem /= outer_dims[d];
            off[0] += x * ba[d];
            off[1] += x * bb[d];
            off[2] += x * bo[d];
        }
        outer.push(off);
    }
    let ma = major(rows, k, a_rs, a.cs)?;
    let mb = major(k, n, b.rs, b.cs)?;
    let mo = major(rows, n, o_rs, target.cs)?;
    let d = |rows, cols, ld| Side {
        trans: false,
        rows,
        cols,
        ld,
    };
    let (la, lb, d, swap) = match mo {
        Major::Row(ldo) => (side_t(mb, k, n), side_t(ma, rows, k), d(n, rows, ldo), true),
        Major::Col(ldo) => (side(ma, rows, k), side(mb, k, n), d(rows, n, ldo), false),
    };
    Some(Calls {
        la,
        lb,
        d,
        swap,
        count,
        stride,
        outer,
    })
}

fn is_row(m: Major) -> bool {
    matches!(m, Major::Row(_))
}

/// A contiguous matrix stack of `like`'s shape at `ptr`.
fn contiguous_mat(ptr: CuPtr, like: &Mat) -> Mat {
    let (dims, _) = like.walk();
    let strides = contiguous(&dims);
    let r = like.batch.len();
    Mat {
        ptr,
        batch: like.batch.clone(),
        bstrides: strides[..r].to_vec(),
        rows: like.rows,
        cols: like.cols,
        rs: strides[r],
        cs: strides[r + 1],
    }
}

/// The library operand for `X` (`rows x cols`) itself.
fn side(m: Major, rows: usize, cols: usize) -> Side {
    match m {
        Major::Col(ld) => Side {
            trans: false,
            rows,
            cols,
            ld,
        },
        Major::Row(ld) => Side {
            trans: true,
            rows: cols,
            cols: rows,
            ld,
        },
    }
}

/// The library operand for `X^T`, where `X` is `rows x cols`.
fn side_t(m: Major, rows: usize, cols: usize) -> Side {
    match m {
        Major::Row(ld) => Side {
            trans: false,
            rows: cols,
            cols: rows,
            ld,
        },
        Major::Col(ld) => Side {
            trans: true,
            rows,
            cols,
            ld,
        },
    }
}

#[cfg(test)]
mod tests {
    //! `plan_calls` against a host model of cuBLASLt's column-major strided-batched GEMM, for
    //! vectors, transposed / padded / column-major views, broadcast and folded batches.
    use super::super::shape::Product;
    use super::*;

    /// Elements a view of `shape` with `strides` spans.
    fn span(shape: &[usize], strides: &[usize]) -> usize {
        1 + shape
            .iter()
            .zip(strides)
            .map(|(&d, &s)| d.saturating_sub(1) * s)
            .sum::<usize>()
    }

    /// What cuBLASLt computes for `calls` (alpha 1, beta 0) on host buffers.
    fn simulate(c: &Calls, a: &[f64], b: &[f64], out: &mut [f64]) {
        let (abuf, bbuf) = if c.swap { (b, a) } else { (a, b) };
        let (sa, sb, sd) = if c.swap {
            (c.stride[1], c.stride[0], c.stride[2])
        } else {
            (c.stride[0], c.stride[1], c.stride[2])
        };
        let (m, ka) = if c.la.trans {
            (c.la.cols, c.la.rows)
        } else {
            (c.la.rows, c.la.cols)
        };
        let (kb, n) = if c.lb.trans {
            (c.lb.cols, c.lb.rows)
        } else {
            (c.lb.rows, c.lb.cols)
        };
        assert_eq!(ka, kb, "inner dimensions of {c:?}");
        assert_eq!((m, n), (c.d.rows, c.d.cols), "D of {c:?}");
        for l in [&c.la, &c.lb, &c.d] {
            assert!(l.ld >= l.rows.max(1) as i64, "leading dimension of {c:?}");
        }
        assert!(c.count >= 1);
        for off in &c.outer {
            let (oa, ob) = if c.swap {
                (off[1], off[0])
            } else {
                (off[0], off[1])
            };
            for i in 0..c.count as i64 {
                for r in 0..m as i64 {
                    for col in 0..n as i64 {
                        let mut s = 0.0;
                        for p in 0..ka as i64 {
                            let av = if c.la.trans {
                                abuf[(oa + i * sa + p + r * c.la.ld) as usize]
                            } else {
                                abuf[(oa + i * sa + r + p * c.la.ld) as usize]
                            };
                            let bv = if c.lb.trans {
                                bbuf[(ob + i * sb + col + p * c.lb.ld) as usize]
                            } else {
                                bbuf[(ob + i * sb + p + col * c.lb.ld) as usize]
                            };
                            s += av * bv;
                        }
                        out[(off[2] + i * sd + r + col * c.d.ld) as usize] = s;
                    }
                }
            }
        }
    }

    /// Plans `a @ b` (views given by shape and strides), simulates the calls, and compares
    /// with a direct product; `out_strides` None is a contiguous output.
    fn case(
        a_shape: &[usize],
        a_strides: &[usize],
        b_shape: &[usize],
        b_strides: &[usize],
        out_strides: Option<&[usize]>,
    ) {
        let am = Mat::of(0, a_shape, a_strides, true, false, false);
        let bm = Mat::of(0, b_shape, b_strides, false, false, false);
        let r = am.batch.len().max(bm.batch.len());
        let pad = |b: &[usize]| {
            let mut v = vec![1; r - b.len()];
            v.extend_from_slice(b);
            v
        };
        let batch: Vec<usize> = pad(&am.batch)
            .iter()
            .zip(pad(&bm.batch))
            .map(|(&x, y)| x.max(y))
            .collect();
        let (a_vec, b_vec) = (a_shape.len() == 1, b_shape.len() == 1);
        let mut out_shape = batch.clone();
        if !a_vec {
            out_shape.push(am.rows);
        }
        if !b_vec {
            out_shape.push(bm.cols);
        }
        let contiguous: Vec<usize> =
            onnx_runtime_ir::compute_contiguous_strides(&out_shape).to_vec();
        let os = out_strides.unwrap_or(&contiguous).to_vec();
        let prod = Product {
            m: am.rows,
            n: bm.cols,
            a: am.clone(),
            b: bm.clone(),
            batch: batch.clone(),
            out_shape: out_shape.clone(),
            a_vec,
            b_vec,
        };
        let om = prod.out_mat(0, &os);
        let what = format!("{a_shape:?}/{a_strides:?} @ {b_shape:?}/{b_strides:?} -> {os:?}");
        let calls = plan_calls(&am, &bm, &om).unwrap_or_else(|| panic!("{what}: no plan"));
        let abuf: Vec<f64> = (0..span(a_shape, a_strides))
            .map(|i| ((i * 7919) % 23) as f64 - 11.0)
            .collect();
        let bbuf: Vec<f64> = (0..span(b_shape, b_strides))
            .map(|i| ((i * 104729) % 19) as f64 - 9.0)
            .collect();
        let mut got = vec![f64::NAN; span(&out_shape, &os)];
        simulate(&calls, &abuf, &bbuf, &mut got);
        // Direct product over the output's logical elements.
        let (sa, sb) = (am.batch_strides_over(&batch), bm.batch_strides_over(&batch));
        let nb: usize = batch.iter().product();
        for bi in 0..nb {
            let (mut rem, mut oa, mut ob, mut oo) = (bi, 0i64, 0i64, 0i64);
            for d in (0..batch.len()).rev() {
                let x = (rem % batch[d]) as i64;
                rem /= batch[d];
                oa += x * sa[d];
                ob += x * sb[d];
                oo += x * om.bstrides[d];
            }
            for i in 0..am.rows as i64 {
                for j in 0..bm.cols as i64 {
                    let want: f64 = (0..am.cols as i64)
                        .map(|p| {
                            abuf[(oa + i * am.rs + p * am.cs) as usize]
                                * bbuf[(ob + p * bm.rs + j * bm.cs) as usize]
                        })
                        .sum();
                    let g = got[(oo + i * om.rs + j * om.cs) as usize];
                    assert_eq!(g, want, "{what}: batch {bi} ({i}, {j}); calls {calls:?}");
                }
            }
        }
    }

    #[test]
    fn calls_cover_layouts_vectors_and_batches() {
        // Contiguous, transposed A / B, padded rows, column-major output.
        case(&[3, 4], &[4, 1], &[4, 5], &[5, 1], None);
        case(&[3, 4], &[1, 3], &[4, 5], &[5, 1], None);
        case(&[3, 4], &[4, 1], &[4, 5], &[1, 4], None);
        case(&[3, 4], &[7, 1], &[4, 5], &[9, 1], Some(&[8, 1]));
        case(&[3, 4], &[1, 3], &[4, 5], &[1, 4], Some(&[1, 3]));
        case(&[3, 4], &[4, 1], &[4, 5], &[5, 1], Some(&[1, 3]));
        // Vectors.
        case(&[4], &[1], &[4], &[1], None);
        case(&[4], &[2], &[4, 5], &[5, 1], None);
        case(&[3, 4], &[4, 1], &[4], &[3], None);
        case(&[4], &[1], &[2, 4, 5], &[20, 5, 1], None);
        case(&[2, 3, 4], &[12, 4, 1], &[4], &[1], None);
        case(&[1, 4], &[4, 1], &[4, 1], &[1, 1], None);
        // Batches: broadcast A or B, folded, looped, interleaved.
        case(
            &[2, 1, 3, 4],
            &[12, 12, 4, 1],
            &[5, 4, 6],
            &[24, 6, 1],
            None,
        );
        case(&[2, 3, 4], &[12, 4, 1], &[4, 5], &[5, 1], None);
        case(&[2, 3, 4], &[12, 4, 1], &[1, 4, 5], &[20, 5, 1], None);
        case(&[3, 4], &[4, 1], &[2, 4, 5], &[20, 5, 1], None);
        case(&[2, 3, 4], &[12, 4, 1], &[2, 4, 5], &[20, 5, 1], None);
        case(&[2, 3, 4], &[4, 8, 1], &[2, 4, 5], &[20, 5, 1], None);
        case(&[2, 3, 4], &[4, 8, 1], &[4, 5], &[5, 1], None);
        case(&[2, 3, 3, 4], &[36, 12, 4, 1], &[3, 4, 2], &[8, 2, 1], None);
        case(&[2, 3, 4], &[12, 1, 3], &[4, 5], &[5, 1], None);
        case(
            &[2, 3, 4],
            &[12, 1, 3],
            &[2, 4, 5],
            &[20, 1, 4],
            Some(&[15, 1, 3]),
        );
        case(&[2, 1, 4], &[4, 4, 1], &[4, 5], &[1, 4], None);
        // A batched output with padded rows.
        case(
            &[2, 3, 4],
            &[12, 4, 1],
            &[4, 5],
            &[5, 1],
            Some(&[30, 10, 1]),
        );
    }
}
