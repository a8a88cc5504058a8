//! Integer products on the tiled kernel of gemm.cu: int32/int64/uint32/uint64 MatMul and
//! Gemm (wrapping arithmetic, as the CPU provider), MatMulInteger (uint8/int8 in any mix with
//! optional zero points, int32 out) and QLinearMatMul (per-tensor or per-row/column scales and
//! zero points, requantized with round-half-to-even and saturation). The kernel reads any
//! strides and broadcast batches, and subtracts zero points as it loads, so nothing is packed.

use super::driver::CMat;
use super::shape::{merge, product, Mat};
use crate::ops::common::*;
use crate::ops::params::MAX_RANK;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

/// Rows and columns of the kernel's output tile, and its block size (gemm.cu's IG_*).
const TILE: usize = 64;
const THREADS: u32 = 256;

/// Mirrors `IGemmParams` in gemm.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct IGemmParams {
    pub m: i64,
    pub n: i64,
    pub k: i64,
    pub batch: i64,
    pub rank: i32,
    pub has_c: i32,
    pub za_code: i32,
    pub zb_code: i32,
    pub as_code: i32,
    pub bs_code: i32,
    pub ys_code: i32,
    pub yz_code: i32,
    pub dims: [i64; MAX_RANK],
    pub sa: [i64; MAX_RANK],
    pub sb: [i64; MAX_RANK],
    pub so: [i64; MAX_RANK],
    pub sza: [i64; MAX_RANK],
    pub szb: [i64; MAX_RANK],
    pub a_rs: i64,
    pub a_cs: i64,
    pub b_rs: i64,
    pub b_cs: i64,
    pub o_rs: i64,
    pub o_cs: i64,
    pub za_rs: i64,
    pub zb_cs: i64,
    pub c_rs: i64,
    pub c_cs: i64,
    pub as_rs: i64,
    pub bs_cs: i64,
    pub alpha: u64,
    pub beta: u64,
    pub a: u64,
    pub b: u64,
    pub out: u64,
    pub za: u64,
    pub zb: u64,
    pub c: u64,
    pub a_scale: u64,
    pub b_scale: u64,
    pub y_scale: u64,
    pub y_zp: u64,
}

/// A zero point or scale as the kernel reads it: address, ONNX dtype code, strides over the
/// output's batch axes and along the rows of A (or the columns of B).
#[derive(Clone, Debug)]
pub struct Vector {
    pub ptr: CuPtr,
    pub code: i32,
    pub bstrides: Vec<i64>,
    pub stride: i64,
}

/// QLinearMatMul's requantization inputs.
pub struct Quant {
    pub a_scale: Vector,
    pub b_scale: Vector,
    pub y_scale: Vector,
    pub y_zp: Vector,
}

/// One integer product for the kernel.
pub struct IntProblem<'a> {
    pub a: &'a Mat,
    pub b: &'a Mat,
    pub out: &'a Mat,
    pub za: Option<Vector>,
    pub zb: Option<Vector>,
    /// Gemm's C broadcast over [M, N] (the output has no batch axes then).
    pub c: Option<CMat>,
    /// Gemm's alpha and beta as bit patterns of the element type.
    pub alpha: u64,
    pub beta: u64,
    pub quant: Option<Quant>,
}

/// Enqueues the tiled integer product `f` on the runtime's stream.
pub fn launch(base: &Base, f: Function, p: &IntProblem<'_>) -> EpResult<()> {
    let (m, k, n) = (p.a.rows, p.a.cols, p.b.cols);
    if m == 0 || n == 0 || p.out.batch.contains(&0) {
        return Ok(());
    }
    let batch = &p.out.batch;
    let zeros = vec![0i64; batch.len()];
    let sa = p.a.batch_strides_over(batch);
    let sb = p.b.batch_strides_over(batch);
    let sza = p.za.as_ref().map_or(zeros.clone(), |z| z.bstrides.clone());
    let szb = p.zb.as_ref().map_or(zeros.clone(), |z| z.bstrides.clone());
    let (bd, [ba, bb, bo, bza, bzb]) = merge(batch, [&sa, &sb, &p.out.bstrides, &sza, &szb]);
    base.check_rank(bd.len(), MAX_RANK)?;
    let total: usize = bd.iter().product();
    let (tiles_n, tiles_m) = (n.div_ceil(TILE), m.div_ceil(TILE));
    if tiles_m > 65535 || tiles_n > i32::MAX as usize {
        return Err(base.err(format!(
            "the integer product of {m} x {n} outputs exceeds the kernel's grid; run this \
             node on the CPU provider"
        )));
    }
    let code = |v: &Option<Vector>| v.as_ref().map_or(0, |v| v.code);
    let ptr = |v: &Option<Vector>| v.as_ref().map_or(0, |v| v.ptr);
    let q = p.quant.as_ref();
    let mut prm = IGemmParams {
        m: m as i64,
        n: n as i64,
        k: k as i64,
        batch: total as i64,
        rank: bd.len() as i32,
        has_c: p.c.is_some() as i32,
        za_code: code(&p.za),
        zb_code: code(&p.zb),
        as_code: q.map_or(0, |q| q.a_scale.code),
        bs_code: q.map_or(0, |q| q.b_scale.code),
        ys_code: q.map_or(0, |q| q.y_scale.code),
        yz_code: q.map_or(0, |q| q.y_zp.code),
        dims: fill(&bd.iter().map(|&d| d as i64).collect::<Vec<_>>()),
        sa: fill(&ba),
        sb: fill(&bb),
        so: fill(&bo),
        sza: fill(&bza),
        szb: fill(&bzb),
        a_rs: p.a.rs,
        a_cs: p.a.cs,
        b_rs: p.b.rs,
        b_cs: p.b.cs,
        o_rs: p.out.rs,
        o_cs: p.out.cs,
        za_rs: p.za.as_ref().map_or(0, |z| z.stride),
        zb_cs: p.zb.as_ref().map_or(0, |z| z.stride),
        c_rs: p.c.map_or(0, |c| c.rs),
        c_cs: p.c.map_or(0, |c| c.cs),
        as_rs: q.map_or(0, |q| q.a_scale.stride),
        bs_cs: q.map_or(0, |q| q.b_scale.stride),
        alpha: p.alpha,
        beta: p.beta,
        a: p.a.ptr,
        b: p.b.ptr,
        out: p.out.ptr,
        za: ptr(&p.za),
        zb: ptr(&p.zb),
        c: p.c.map_or(0, |c| c.ptr),
        a_scale: q.map_or(0, |q| q.a_scale.ptr),
        b_scale: q.map_or(0, |q| q.b_scale.ptr),
        y_scale: q.map_or(0, |q| q.y_scale.ptr),
        y_zp: q.map_or(0, |q| q.y_zp.ptr),
    };
    let grid = (tiles_n as u32, tiles_m as u32, total.clamp(1, 65535) as u32);
    let mut args = [arg(&mut prm)];
    // SAFETY: the kernel reads A, B, C and the vectors inside their views (guarded by m, n,
    // k) and writes the output's m x n matrices of every batch.
    unsafe { base.rt.launch_cfg(f, grid, (THREADS, 1, 1), 0, &mut args) }
}

/// The integer MatMul/Gemm kernels `igemm_{i32,i64,u32,u64}`.
pub struct IntFns(HashMap<DataType, Function>);

impl IntFns {
    pub fn load(base: &Base) -> EpResult<Self> {
        let module = base.module(&super::gemm_module())?;
        let mut fns = HashMap::new();
        for (dtype, tag) in [
            (DataType::Int32, "i32"),
            (DataType::Int64, "i64"),
            (DataType::Uint32, "u32"),
            (DataType::Uint64, "u64"),
        ] {
            fns.insert(dtype, module.function(&format!("igemm_{tag}"))?);
        }
        Ok(IntFns(fns))
    }

    pub fn get(&self, dtype: DataType) -> Option<Function> {
        self.0.get(&dtype).copied()
    }
}

/// An integer Gemm factor (alpha, beta) as the CPU provider casts it (`NumCast` from f64:
/// truncation toward zero, 0 when out of range or NaN), as a bit pattern.
pub fn int_factor(v: f64, dtype: DataType) -> u64 {
    match dtype {
        DataType::Int32 if v > -2147483649.0 && v < 2147483648.0 => v as i32 as u32 as u64,
        DataType::Uint32 if v > -1.0 && v < 4294967296.0 => v as u32 as u64,
        DataType::Int64 if (-9223372036854775808.0..9223372036854775808.0).contains(&v) => {
            v as i64 as u64
        }
        DataType::Uint64 if v > -1.0 && v < 18446744073709551616.0 => v as u64,
        _ => 0,
    }
}

fn is_q8(d: DataType) -> bool {
    matches!(d, DataType::Uint8 | DataType::Int8)
}

fn q8_tag(d: DataType) -> &'static str {
    if d == DataType::Uint8 {
        "u8"
    } else {
        "i8"
    }
}

/// The zero point of `x` (shape `x`) as strides over x's axes, in the forms MatMulInteger
/// allows: a scalar, one value per row of A / column of B (1-D), or N-D `[.., M, 1]` /
/// `[.., 1, N]` with batch axes of 1 or x's.
fn zero_point_strides(
    base: &Base,
    x: &[usize],
    zp: &TensorView<'_>,
    row: bool,
    what: &str,
) -> EpResult<Vec<i64>> {
    let r = x.len();
    if zp.numel() == 1 {
        return Ok(vec![0; r]);
    }
    let bad = || {
        let form = if row {
            "a scalar, [M] or [.., M, 1]"
        } else {
            "a scalar, [N] or [.., 1, N]"
        };
        base.err(format!(
            "{what} zero point of shape {:?} does not fit input {x:?}; want {form}",
            zp.shape
        ))
    };
    if r < 2 {
        return Err(bad());
    }
    let mut strides = vec![0i64; r];
    if zp.rank() == 1 {
        let axis = if row { r - 2 } else { r - 1 };
        if zp.shape[0] != x[axis] {
            return Err(bad());
        }
        strides[axis] = zp.strides[0] as i64;
        return Ok(strides);
    }
    if zp.rank() != r {
        return Err(bad());
    }
    let reduced = if row { r - 1 } else { r - 2 };
    for (i, (&z, &d)) in zp.shape.iter().zip(x).enumerate() {
        if !(z == 1 || (i != reduced && z == d)) {
            return Err(bad());
        }
        if z != 1 {
            strides[i] = zp.strides[i] as i64;
        }
    }
    Ok(strides)
}

/// A zero point as the kernel reads it, from its strides over x's axes (`row`: along A's
/// rows, else along B's columns), batch strides aligned to the output batch.
fn zero_point_vector(zp: &TensorView<'_>, strides: &[i64], row: bool, batch: usize) -> Vector {
    let r = strides.len();
    let mut bstrides = vec![0i64; batch];
    let stride = if r < 2 {
        0
    } else {
        let own = &strides[..r - 2];
        let lead = batch - own.len();
        bstrides[lead..].copy_from_slice(own);
        if row {
            strides[r - 2]
        } else {
            strides[r - 1]
        }
    };
    Vector {
        ptr: ptr_of(zp),
        code: zp.dtype.onnx_code(),
        bstrides,
        stride,
    }
}

// ---- MatMulInteger ----

struct MatMulIntegerKernel {
    base: Base,
    fns: HashMap<(DataType, DataType), Function>,
}

impl MatMulIntegerKernel {
    fn check(&self, inputs: &[TensorView<'_>]) -> EpResult<super::shape::Product> {
        let base = &self.base;
        let a = base.req(inputs, 0)?;
        let b = base.req(inputs, 1)?;
        for (x, what) in [(a, "A"), (b, "B")] {
            if !is_q8(x.dtype) {
                return Err(
                    base.unsupported(x.dtype, format!("MatMulInteger takes uint8 or int8 {what}"))
                );
            }
        }
        let prod = product(base, a, b, (false, false), (false, false))?;
        for (pos, x, row, what) in [(2, a, true, "A"), (3, b, false, "B")] {
            if let Some(zp) = base.input(inputs, pos) {
                if zp.dtype != x.dtype {
                    return Err(base.err(format!(
                        "{what} zero point is {} but {what} is {}; they must match",
                        zp.dtype, x.dtype
                    )));
                }
                zero_point_strides(base, x.shape, zp, row, what)?;
            }
        }
        Ok(prod)
    }
}

impl Kernel for MatMulIntegerKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        Ok(vec![(DataType::Int32, self.check(inputs)?.out_shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let prod = self.check(inputs)?;
        base.expect_outputs(outputs, &[(DataType::Int32, prod.out_shape.clone())])?;
        let out = &outputs[0];
        let a = base.req(inputs, 0)?;
        let b = base.req(inputs, 1)?;
        let f = self.fns[&(a.dtype, b.dtype)];
        let nb = prod.batch.len();
        let zp =
            |pos: usize, x: &TensorView<'_>, row: bool, what: &str| -> EpResult<Option<Vector>> {
                match base.input(inputs, pos) {
                    None => Ok(None),
                    Some(z) => {
                        let s = zero_point_strides(base, x.shape, z, row, what)?;
                        Ok(Some(zero_point_vector(z, &s, row, nb)))
                    }
                }
            };
        let om = prod.out_mat(mut_ptr_of(out), out.strides);
        launch(
            base,
            f,
            &IntProblem {
                a: &prod.a,
                b: &prod.b,
                out: &om,
                za: zp(2, a, true, "A")?,
                zb: zp(3, b, false, "B")?,
                c: None,
                alpha: 1,
                beta: 0,
                quant: None,
            },
        )
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

pub fn matmul_integer(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let module = base.module(&super::gemm_module())?;
    let mut fns = HashMap::new();
    for ta in [DataType::Uint8, DataType::Int8] {
        for tb in [DataType::Uint8, DataType::Int8] {
            let name = format!("mmint_{}_{}", q8_tag(ta), q8_tag(tb));
            fns.insert((ta, tb), module.function(&name)?);
        }
    }
    Ok(Box::new(MatMulIntegerKernel { base, fns }))
}

// ---- QLinearMatMul ----

struct QLinearMatMulKernel {
    base: Base,
    fns: HashMap<(DataType, DataType, DataType), Function>,
}

/// A per-tensor or per-row/column vector of `want` values: its element stride (0 for one
/// value).
fn vector_stride(base: &Base, v: &TensorView<'_>, want: usize, what: &str) -> EpResult<i64> {
    let n = v.numel();
    if n != 1 && n != want {
        return Err(base.err(format!("{what} has {n} values; want 1 or {want}")));
    }
    if n == 1 {
        return Ok(0);
    }
    let wide: Vec<usize> = (0..v.rank()).filter(|&i| v.shape[i] != 1).collect();
    match wide.as_slice() {
        [i] => Ok(v.strides[*i] as i64),
        _ if v.is_contiguous() => Ok(1),
        _ => Err(base.err(format!(
            "{what} of shape {:?} must be a scalar or 1-D",
            v.shape
        ))),
    }
}

fn scale_code(base: &Base, v: &TensorView<'_>, what: &str) -> EpResult<i32> {
    match v.dtype {
        DataType::Float32 | DataType::Float16 | DataType::BFloat16 | DataType::Float64 => {
            Ok(v.dtype.onnx_code())
        }
        other => Err(base.unsupported(
            other,
            format!("{what} must be float32, float16 or bfloat16"),
        )),
    }
}

impl QLinearMatMulKernel {
    fn check(&self, inputs: &[TensorView<'_>]) -> EpResult<(super::shape::Product, DataType)> {
        let base = &self.base;
        let t = |i| base.req(inputs, i);
        let (a, a_scale, a_zp, b, b_scale, b_zp, y_scale, y_zp) =
            (t(0)?, t(1)?, t(2)?, t(3)?, t(4)?, t(5)?, t(6)?, t(7)?);
        for (x, what) in [
            (a, "a"),
            (b, "b"),
            (a_zp, "a_zero_point"),
            (b_zp, "b_zero_point"),
            (y_zp, "y_zero_point"),
        ] {
            if !is_q8(x.dtype) {
                return Err(base.unsupported(
                    x.dtype,
                    format!("the CUDA QLinearMatMul takes uint8 or int8 {what}"),
                ));
            }
        }
        let prod = product(base, a, b, (false, false), (false, false))?;
        for (v, want, what) in [
            (a_scale, prod.m, "a_scale"),
            (a_zp, prod.m, "a_zero_point"),
            (b_scale, prod.n, "b_scale"),
            (b_zp, prod.n, "b_zero_point"),
        ] {
            vector_stride(base, v, want, what)?;
        }
        for (v, what) in [
            (a_scale, "a_scale"),
            (b_scale, "b_scale"),
            (y_scale, "y_scale"),
        ] {
            scale_code(base, v, what)?;
        }
        for (v, what) in [(y_scale, "y_scale"), (y_zp, "y_zero_point")] {
            if v.numel() != 1 {
                return Err(base.err(format!("{what} must be a scalar, got shape {:?}", v.shape)));
            }
        }
        Ok((prod, y_zp.dtype))
    }
}

impl Kernel for QLinearMatMulKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (prod, dtype) = self.check(inputs)?;
        Ok(vec![(dtype, prod.out_shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (prod, dtype) = self.check(inputs)?;
        base.expect_outputs(outputs, &[(dtype, prod.out_shape.clone())])?;
        let out = &outputs[0];
        let t = |i| base.req(inputs, i);
        let (a, b) = (t(0)?, t(3)?);
        let f = self.fns[&(a.dtype, b.dtype, dtype)];
        let nb = prod.batch.len();
        let vector = |v: &TensorView<'_>, want: usize, what: &str| -> EpResult<Vector> {
            Ok(Vector {
                ptr: ptr_of(v),
                code: v.dtype.onnx_code(),
                bstrides: vec![0; nb],
                stride: vector_stride(base, v, want, what)?,
            })
        };
        let (m, n) = (prod.m, prod.n);
        let za = vector(t(2)?, m, "a_zero_point")?;
        let zb = vector(t(5)?, n, "b_zero_point")?;
        let quant = Quant {
            a_scale: vector(t(1)?, m, "a_scale")?,
            b_scale: vector(t(4)?, n, "b_scale")?,
            y_scale: vector(t(6)?, 1, "y_scale")?,
            y_zp: vector(t(7)?, 1, "y_zero_point")?,
        };
        let om = prod.out_mat(mut_ptr_of(out), out.strides);
        launch(
            base,
            f,
            &IntProblem {
                a: &prod.a,
                b: &prod.b,
                out: &om,
                za: Some(za),
                zb: Some(zb),
                c: None,
                alpha: 1,
                beta: 0,
                quant: Some(quant),
            },
        )
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

pub fn qlinear_matmul(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let module = base.module(&super::gemm_module())?;
    let q8 = [DataType::Uint8, DataType::Int8];
    let mut fns = HashMap::new();
    for ta in q8 {
        for tb in q8 {
            for ty in q8 {
                let name = format!("qlmm_{}_{}_{}", q8_tag(ta), q8_tag(tb), q8_tag(ty));
                fns.insert((ta, tb, ty), module.function(&name)?);
            }
        }
    }
    Ok(Box::new(QLinearMatMulKernel { base, fns }))
}
