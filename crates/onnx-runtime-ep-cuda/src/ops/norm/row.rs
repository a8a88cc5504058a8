//! Row-wise normalizations over the trailing axes: LayerNormalization (ONNX 17, the older
//! ONNX-domain form and com.microsoft), RMSNormalization (23), SimplifiedLayerNormalization,
//! SkipLayerNormalization and SkipSimplifiedLayerNormalization (com.microsoft), and
//! LpNormalization.
//!
//! Fast path: rows with unit inner stride and a uniform row stride (any padding between rows),
//! scale / bias dense over the normalized shape, skip dense per row or broadcast over leading
//! axes: the register kernels `row_reg_*` (one warp per row up to 1024 floats / 2048 halves,
//! one block per row up to 16384 floats / 32768 halves; 16-byte loads when the pointers, the
//! hidden size and the row strides allow it). Everything else (strided rows, broadcast scales,
//! longer rows) runs `row_gen_*`, which reads each row twice. LpNormalization along another
//! axis runs one thread per line (`lp_lines`).
//!
//! Statistics follow the CPU provider: float accumulation for float and half inputs (double
//! for double), Mean / InvStdDev outputs in float (double for double inputs), the skip sum
//! rounded to the input type before it is normalized.

use super::kparams::*;
use super::{acc_dtype, chan_module, require_float, row_module, FLOATS};
use crate::ops::common::*;
use crate::ops::params::MAX_RANK;
use crate::ops::Registry;
use crate::runtime::{CuPtr, CudaRuntime, Function, Module};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const F32: DataType = DataType::Float32;
const F64: DataType = DataType::Float64;
const F16: DataType = DataType::Float16;
const BF16: DataType = DataType::BFloat16;

/// (input dtype, scale dtype) pairs the row module is compiled for: the same type, float
/// scales for half inputs, or half scales for float inputs (mixed-precision exports: PyTorch's
/// float16 exports upcast a LayerNorm's input to float and keep its weights in float16).
pub(super) const ROW_VARIANTS: [(DataType, DataType); 8] = [
    (F32, F32),
    (F64, F64),
    (F16, F16),
    (BF16, BF16),
    (F16, F32),
    (BF16, F32),
    (F32, F16),
    (F32, BF16),
];

/// (threads per row, packs per thread) of the register kernels, as norm_row.cu instantiates
/// them: `row_reg_{tpr}_{items}_vec` (16-byte packs) and `row_reg_{tpr}_{items}_one`.
const REG_VEC: [(usize, usize); 8] = [
    (32, 1),
    (32, 2),
    (32, 4),
    (32, 8),
    (64, 8),
    (128, 8),
    (256, 8),
    (512, 8),
];
const REG_ONE: [(usize, usize); 9] = [
    (32, 1),
    (32, 2),
    (32, 4),
    (32, 8),
    (64, 8),
    (128, 8),
    (256, 8),
    (512, 8),
    (1024, 8),
];

/// The kernels of one row module.
struct RowFns {
    vec: Vec<Function>,
    one: Vec<Function>,
    gen32: Function,
    gen256: Function,
}

impl RowFns {
    fn load(module: &Module) -> EpResult<Self> {
        let reg = |table: &[(usize, usize)], tag: &str| -> EpResult<Vec<Function>> {
            table
                .iter()
                // SAFETY (with row_gen below): the kernels start with pdl_begin (norm_row.cu).
                .map(|(tpr, items)| {
                    let f = module.function(&format!("row_reg_{tpr}_{items}_{tag}"))?;
                    Ok(unsafe { f.overlapped() })
                })
                .collect()
        };
        Ok(RowFns {
            vec: reg(&REG_VEC, "vec")?,
            one: reg(&REG_ONE, "one")?,
            gen32: unsafe { module.function("row_gen_32")?.overlapped() },
            gen256: unsafe { module.function("row_gen_256")?.overlapped() },
        })
    }

    /// The smallest register kernel holding rows of `h` elements in packs of `v`, with its
    /// threads per row.
    fn pick(&self, h: usize, v: usize, vec: bool) -> Option<(Function, usize)> {
        let (table, fns) = if vec {
            (&REG_VEC[..], &self.vec)
        } else {
            (&REG_ONE[..], &self.one)
        };
        table
            .iter()
            .zip(fns)
            .find(|((tpr, items), _)| h <= tpr * v * items)
            .map(|((tpr, _), f)| (*f, *tpr))
    }
}

/// The row kernels of each (input, scale) dtype pair: the same-type pairs are loaded when the
/// kernel is built, the mixed pairs on first use.
struct RowTable {
    map: Mutex<HashMap<(DataType, DataType), Arc<RowFns>>>,
}

impl RowTable {
    fn new(base: &Base, preload: &[DataType]) -> EpResult<Self> {
        let table = RowTable {
            map: Mutex::new(HashMap::new()),
        };
        for &t in preload {
            table.get(base, t, t)?;
        }
        Ok(table)
    }

    fn get(&self, base: &Base, t: DataType, s: DataType) -> EpResult<Arc<RowFns>> {
        let mut map = self.map.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = map.get(&(t, s)) {
            return Ok(f.clone());
        }
        let spec = ROW_VARIANTS
            .contains(&(t, s))
            .then(|| row_module(t, s))
            .flatten()
            .ok_or_else(|| {
                base.unsupported(
                    s,
                    format!(
                        "the CUDA kernel takes scale and bias of the input's dtype ({t}), \
                         float for float16 / bfloat16 inputs, or float16 / bfloat16 for float \
                         inputs"
                    ),
                )
            })?;
        let fns = Arc::new(RowFns::load(&*base.module(&spec)?)?);
        map.insert((t, s), fns.clone());
        Ok(fns)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// LayerNormalization: X, Scale, B?; outputs Y, Mean?, InvStdDev?.
    Layer,
    /// RMSNormalization / SimplifiedLayerNormalization: X, scale; outputs Y, InvStdDev?.
    Rms,
    /// SkipLayerNormalization: input, skip, gamma, beta?, bias?; outputs output, mean?,
    /// inv_std_var?, input_skip_bias_sum?.
    SkipLayer,
    /// SkipSimplifiedLayerNormalization: input, skip, gamma, bias?; outputs as SkipLayer (the
    /// mean is zero).
    SkipRms,
    /// LpNormalization with p = 1 or 2.
    Lp(i64),
}

impl Kind {
    fn is_skip(self) -> bool {
        matches!(self, Kind::SkipLayer | Kind::SkipRms)
    }

    /// Input positions of (skip, scale, beta, skip bias).
    fn positions(self) -> (Option<usize>, Option<usize>, Option<usize>, Option<usize>) {
        match self {
            Kind::Layer => (None, Some(1), Some(2), None),
            Kind::Rms => (None, Some(1), None, None),
            Kind::SkipLayer => (Some(1), Some(2), Some(3), Some(4)),
            Kind::SkipRms => (Some(1), Some(2), None, Some(3)),
            Kind::Lp(_) => (None, None, None, None),
        }
    }

    /// Output positions of (mean, inv std, skip sum).
    fn outputs(self) -> (Option<usize>, Option<usize>, Option<usize>) {
        match self {
            Kind::Layer => (Some(1), Some(2), None),
            Kind::Rms => (None, Some(1), None),
            Kind::SkipLayer | Kind::SkipRms => (Some(1), Some(2), Some(3)),
            Kind::Lp(_) => (None, None, None),
        }
    }

    fn mode(self) -> i32 {
        match self {
            Kind::Layer | Kind::SkipLayer => MODE_LN,
            Kind::Rms | Kind::SkipRms => MODE_RMS,
            Kind::Lp(1) => MODE_L1,
            Kind::Lp(_) => MODE_L2,
        }
    }
}

/// One call's inputs, checked: dtypes, the normalized axis and the broadcast strides.
struct Plan<'v, 'a> {
    x: &'v TensorView<'a>,
    t: DataType,
    s: DataType,
    axis: usize,
    rows: usize,
    hidden: usize,
    xs: Vec<i64>,
    /// (view, strides broadcast to the normalized shape).
    scale: Option<(&'v TensorView<'a>, Vec<i64>)>,
    beta: Option<(&'v TensorView<'a>, Vec<i64>)>,
    /// (view, strides broadcast to x's shape).
    skip: Option<(&'v TensorView<'a>, Vec<i64>)>,
    /// (view, strides broadcast to [hidden]).
    sbias: Option<(&'v TensorView<'a>, Vec<i64>)>,
    stat_shape: Vec<usize>,
}

struct RowKernel {
    base: Base,
    kind: Kind,
    axis: i64,
    eps: f64,
    table: RowTable,
    /// LpNormalization along a non-last axis: `lp_lines` by dtype.
    lines: HashMap<DataType, Function>,
}

impl RowKernel {
    fn plan<'v, 'a>(&self, inputs: &'v [TensorView<'a>]) -> EpResult<Plan<'v, 'a>> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let t = x.dtype;
        require_float(base, t, "inputs")?;
        if self.kind.is_skip() && t == F64 {
            return Err(base.unsupported(
                t,
                "the com.microsoft skip normalizations take float, float16 or bfloat16",
            ));
        }
        check_view_rank(base, x.shape)?;
        let rank = x.shape.len();
        if self.kind.is_skip() && rank == 0 {
            return Err(base.err("input must have rank >= 1"));
        }
        let axis = base.axis(self.axis, rank, "axis")?;
        let norm_shape = x.shape[axis..].to_vec();
        let hidden: usize = norm_shape.iter().product();
        let rows: usize = x.shape[..axis].iter().product();
        let (skip_at, scale_at, beta_at, sbias_at) = self.kind.positions();
        let scale = match scale_at {
            Some(i) => Some(base.req(inputs, i)?),
            None => None,
        };
        let s = scale.map_or(t, |v| v.dtype);
        let opt = |at: Option<usize>| at.and_then(|i| base.input(inputs, i));
        let with = |v: Option<&'v TensorView<'a>>,
                    to: &[usize],
                    what: &str,
                    dtype: DataType|
         -> EpResult<Option<(&'v TensorView<'a>, Vec<i64>)>> {
            let Some(v) = v else { return Ok(None) };
            if v.dtype != dtype {
                return Err(base.unsupported(
                    v.dtype,
                    format!("{what} must have dtype {dtype} like the other parameters"),
                ));
            }
            let st = broadcast_strides(base, v.shape, v.strides, to, what)?;
            Ok(Some((v, st)))
        };
        let skip = match skip_at {
            Some(i) => Some(base.req(inputs, i)?),
            None => None,
        };
        let plan = Plan {
            x,
            t,
            s,
            axis,
            rows,
            hidden,
            xs: istrides(x.strides),
            scale: with(scale, &norm_shape, "scale", s)?,
            beta: with(opt(beta_at), &norm_shape, "bias", s)?,
            skip: with(skip, x.shape, "skip", t)?,
            sbias: with(opt(sbias_at), &[hidden], "skip bias", s)?,
            stat_shape: x.shape[..axis]
                .iter()
                .copied()
                .chain(std::iter::repeat_n(1, rank - axis))
                .collect(),
        };
        if plan.scale.is_some() {
            // Loads the module of a mixed pair now (a refusal here leaves the call to the
            // CPU before anything is launched).
            self.table.get(base, t, s)?;
        }
        Ok(plan)
    }

    fn types(&self, plan: &Plan<'_, '_>) -> OutputTypes {
        let (t, shape) = (plan.t, plan.x.shape.to_vec());
        let u = acc_dtype(t);
        let stat = (u, plan.stat_shape.clone());
        let mut types = vec![(t, shape.clone())];
        match self.kind {
            Kind::Layer => types.extend([stat.clone(), stat]),
            Kind::Rms => types.push(stat),
            Kind::SkipLayer | Kind::SkipRms => types.extend([stat.clone(), stat, (t, shape)]),
            Kind::Lp(_) => {}
        }
        types.truncate(self.base.outputs.max(1));
        types
    }

    /// LpNormalization along a non-last axis (or any layout): one thread per line.
    fn lp_lines(&self, plan: &Plan<'_, '_>, y: &TensorMut<'_>, p: i64) -> EpResult<()> {
        let base = &self.base;
        let x = plan.x;
        let f = *self
            .lines
            .get(&plan.t)
            .ok_or_else(|| base.unsupported(plan.t, "no LpNormalization kernel"))?;
        let ys = istrides(y.strides);
        let keep = |v: &[i64]| -> Vec<i64> {
            (0..v.len())
                .filter(|&k| k != plan.axis)
                .map(|k| v[k])
                .collect()
        };
        let dims: Vec<i64> = keep(&x.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
        let (xs, yss) = (keep(&plan.xs), keep(&ys));
        let mut lp = LpParams {
            lines: (plan.rows * x.shape[plan.axis + 1..].iter().product::<usize>()) as i64,
            len: x.shape[plan.axis] as i64,
            ax_x: plan.xs[plan.axis],
            ax_y: ys[plan.axis],
            p: p as i32,
            rank: dims.len() as i32,
            dims: fill(&dims),
            xs: fill(&xs),
            ys: fill(&yss),
        };
        let (mut px, mut py) = (ptr_of(x), mut_ptr_of(y));
        let mut args = [arg(&mut px), arg(&mut py), arg(&mut lp)];
        // SAFETY: lp_lines(x, y, LpParams) walks inside both views.
        unsafe { base.rt.launch(f, lp.lines as u64, &mut args) }
    }
}

/// The stride between consecutive rows of a tensor whose axes from `axis` on are dense with
/// unit inner stride and whose leading axes step uniformly; `None` otherwise.
fn row_stride(shape: &[usize], strides: &[i64], axis: usize) -> Option<i64> {
    let mut expect = 1i64;
    for k in (axis..shape.len()).rev() {
        if shape[k] != 1 && strides[k] != expect {
            return None;
        }
        expect *= shape[k] as i64;
    }
    let mut row = expect;
    let mut next: Option<(i64, i64)> = None;
    for k in (0..axis).rev() {
        if shape[k] == 1 {
            continue;
        }
        match next {
            None => row = strides[k],
            Some((s, d)) if strides[k] == s * d => {}
            Some(_) => return None,
        }
        next = Some((strides[k], shape[k] as i64));
    }
    Some(row)
}

/// For a skip tensor broadcast to x (strides over x's axes): `(div, mod, stride)` with the
/// skip row of row r at `((r / div) % mod) * stride`, when its rows are dense and its leading
/// axes are a uniform run between broadcast axes; `None` otherwise.
fn skip_rows(shape: &[usize], strides: &[i64], axis: usize) -> Option<(i64, i64, i64)> {
    row_stride(&shape[axis..], &strides[axis..], 0)?;
    let outer: Vec<(i64, i64)> = (0..axis)
        .filter(|&k| shape[k] != 1)
        .map(|k| (shape[k] as i64, strides[k]))
        .collect();
    let nz: Vec<usize> = (0..outer.len()).filter(|&i| outer[i].1 != 0).collect();
    let (Some(&a), Some(&b)) = (nz.first(), nz.last()) else {
        return Some((1, 1, 0));
    };
    if nz.len() != b - a + 1 {
        return None;
    }
    for i in a..b {
        if outer[i].1 != outer[i + 1].1 * outer[i + 1].0 {
            return None;
        }
    }
    let div: i64 = outer[b + 1..].iter().map(|o| o.0).product();
    let modulo: i64 = outer[a..=b].iter().map(|o| o.0).product();
    Some((div, modulo, outer[b].1))
}

/// Whether strides over `shape` are the dense row-major ones (size-1 axes ignored).
fn dense(shape: &[usize], strides: &[i64]) -> bool {
    row_stride(shape, strides, 0).is_some()
}

fn aligned(p: CuPtr) -> bool {
    p.is_multiple_of(16)
}

impl Kernel for RowKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let plan = self.plan(inputs)?;
        Ok(self.types(&plan))
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let plan = self.plan(inputs)?;
        let want = self.types(&plan);
        base.outputs_at_least(outputs, 1)?;
        let given = outputs.len().min(want.len());
        base.expect_outputs(&outputs[..given], &want[..given])?;
        let (rows, hidden) = (plan.rows, plan.hidden);
        if rows == 0 || hidden == 0 {
            return Ok(());
        }
        let x = plan.x;
        let rank = x.shape.len();
        if let Kind::Lp(p) = self.kind {
            let last = plan.axis + 1 == rank;
            let y = &outputs[0];
            let ys = istrides(y.strides);
            let fast = last
                && row_stride(x.shape, &plan.xs, plan.axis).is_some()
                && row_stride(y.shape, &ys, plan.axis).is_some();
            if !fast {
                return self.lp_lines(&plan, y, p);
            }
        }
        let (mean_at, inv_at, sum_at) = self.kind.outputs();
        let out = |at: Option<usize>| at.filter(|&i| i < given);
        let (mean_at, inv_at, sum_at) = (out(mean_at), out(inv_at), out(sum_at));
        let mut flags = 0;
        if plan.scale.is_some() {
            flags |= RF_SCALE;
        }
        if plan.beta.is_some() {
            flags |= RF_BETA;
        }
        if plan.skip.is_some() {
            flags |= RF_SKIP;
        }
        if plan.sbias.is_some() {
            flags |= RF_SBIAS;
        }
        if mean_at.is_some() {
            flags |= RF_MEAN;
        }
        if inv_at.is_some() {
            flags |= RF_INV;
        }
        if sum_at.is_some() {
            flags |= RF_SUM;
        }
        let fns = self.table.get(base, plan.t, plan.s)?;
        let ptr = |v: &Option<(&TensorView<'_>, Vec<i64>)>| v.as_ref().map_or(0, |v| ptr_of(v.0));
        let optr = |at: Option<usize>| at.map_or(0, |i| mut_ptr_of(&outputs[i]));
        let ostr = |at: Option<usize>| at.map(|i| istrides(outputs[i].strides));
        let mut ptrs: [CuPtr; 9] = [
            ptr_of(x),
            plan.skip.as_ref().map_or(0, |v| ptr_of(v.0)),
            ptr(&plan.sbias),
            ptr(&plan.scale),
            ptr(&plan.beta),
            mut_ptr_of(&outputs[0]),
            optr(mean_at),
            optr(inv_at),
            optr(sum_at),
        ];
        let ys = istrides(outputs[0].strides);
        let (mean_s, inv_s, sum_s) = (ostr(mean_at), ostr(inv_at), ostr(sum_at));

        // ---- the register kernels ----
        let fast = (|| -> Option<(RowFast, bool)> {
            let axis = plan.axis;
            let x_row = row_stride(x.shape, &plan.xs, axis)?;
            let y_row = row_stride(x.shape, &ys, axis)?;
            let sum_row = match &sum_s {
                Some(s) => row_stride(x.shape, s, axis)?,
                None => 0,
            };
            let (skip_div, skip_mod, skip_row) = match &plan.skip {
                Some((_, st)) => skip_rows(x.shape, st, axis)?,
                None => (1, 1, 0),
            };
            let norm_shape = &x.shape[axis..];
            for p in [&plan.scale, &plan.beta].into_iter().flatten() {
                if !dense(norm_shape, &p.1) {
                    return None;
                }
            }
            if let Some((_, st)) = &plan.sbias {
                if !dense(&[hidden], st) {
                    return None;
                }
            }
            let mut stat_stride = None;
            for s in [&mean_s, &inv_s].into_iter().flatten() {
                let st = row_stride(&plan.stat_shape, s, axis)?;
                if stat_stride.is_some_and(|o| o != st) {
                    return None;
                }
                stat_stride = Some(st);
            }
            let v = 16 / plan.t.element_size().unwrap_or(4);
            let strides_ok = [x_row, y_row, sum_row, skip_row]
                .iter()
                .all(|s| s % v as i64 == 0);
            let vec = hidden.is_multiple_of(v) && strides_ok && ptrs.iter().all(|&p| aligned(p));
            Some((
                RowFast {
                    rows: rows as i64,
                    hidden: hidden as i64,
                    x_row,
                    y_row,
                    sum_row,
                    skip_row,
                    skip_div,
                    skip_mod,
                    stat_stride: stat_stride.unwrap_or(0),
                    eps: self.eps,
                    mode: self.kind.mode(),
                    flags,
                },
                vec,
            ))
        })();
        if let Some((mut p, vec)) = fast {
            let v = if vec {
                16 / plan.t.element_size().unwrap_or(4)
            } else {
                1
            };
            if let Some((f, tpr)) = fns.pick(hidden, v, vec) {
                let (rpb, block) = if tpr >= 64 {
                    (1, tpr)
                } else {
                    (128 / tpr, 128)
                };
                let grid = rows.div_ceil(rpb).min(1 << 30) as u32;
                let [a0, a1, a2, a3, a4, a5, a6, a7, a8] = &mut ptrs;
                let mut args = [
                    arg(a0),
                    arg(a1),
                    arg(a2),
                    arg(a3),
                    arg(a4),
                    arg(a5),
                    arg(a6),
                    arg(a7),
                    arg(a8),
                    arg(&mut p),
                ];
                // SAFETY: row_reg_*(x, skip, sbias, scale, beta, y, mean, inv, sum, RowFast)
                // reads and writes rows inside the views whose layouts were checked above.
                return unsafe {
                    base.rt
                        .launch_cfg(f, (grid, 1, 1), (block as u32, 1, 1), 0, &mut args)
                };
            }
        }

        // ---- any layout ----
        base.check_rank(rank, MAX_RANK)?;
        let axis = plan.axis;
        let zeros = vec![0i64; rank];
        let split = |s: &[i64]| -> ([i64; MAX_RANK], [i64; MAX_RANK]) {
            (fill(&s[..axis]), fill(&s[axis..]))
        };
        let (xo, xi) = split(&plan.xs);
        let (yo, yi) = split(&ys);
        let (ko, ki) = split(plan.skip.as_ref().map_or(&zeros, |v| &v.1));
        let (uo, ui) = split(sum_s.as_ref().unwrap_or(&zeros));
        let stat = mean_s.as_ref().or(inv_s.as_ref()).unwrap_or(&zeros);
        if let (Some(m), Some(i)) = (&mean_s, &inv_s) {
            if m[..axis] != i[..axis] {
                return Err(base.err(
                    "the Mean and InvStdDev outputs have different layouts; give them the same \
                     strides",
                ));
            }
        }
        let inner_of = |v: &Option<(&TensorView<'_>, Vec<i64>)>| -> [i64; MAX_RANK] {
            fill(v.as_ref().map_or(&zeros[axis..], |v| &v.1[..]))
        };
        let mut ci = [0i64; MAX_RANK];
        if let Some((_, st)) = &plan.sbias {
            // The skip bias is broadcast to [hidden]; skip ops normalize one (last) axis.
            ci[0] = st[0];
        }
        let mut p = RowGen {
            rows: rows as i64,
            hidden: hidden as i64,
            eps: self.eps,
            mode: self.kind.mode(),
            flags,
            orank: axis as i32,
            irank: (rank - axis) as i32,
            odims: fill(
                &x.shape[..axis]
                    .iter()
                    .map(|&d| d as i64)
                    .collect::<Vec<_>>(),
            ),
            idims: fill(
                &x.shape[axis..]
                    .iter()
                    .map(|&d| d as i64)
                    .collect::<Vec<_>>(),
            ),
            xo,
            yo,
            ko,
            uo,
            so: fill(&stat[..axis]),
            xi,
            yi,
            ki,
            ui,
            gi: inner_of(&plan.scale),
            bi: inner_of(&plan.beta),
            ci,
        };
        let (f, tpr) = if hidden <= 1024 {
            (fns.gen32, 32usize)
        } else {
            (fns.gen256, 256)
        };
        let (rpb, block) = if tpr >= 64 {
            (1, tpr)
        } else {
            (128 / tpr, 128)
        };
        let grid = rows.div_ceil(rpb).min(1 << 30) as u32;
        let [a0, a1, a2, a3, a4, a5, a6, a7, a8] = &mut ptrs;
        let mut args = [
            arg(a0),
            arg(a1),
            arg(a2),
            arg(a3),
            arg(a4),
            arg(a5),
            arg(a6),
            arg(a7),
            arg(a8),
            arg(&mut p),
        ];
        // SAFETY: row_gen_*(x, skip, sbias, scale, beta, y, mean, inv, sum, RowGen) walks
        // inside every view by its strides.
        unsafe {
            base.rt
                .launch_cfg(f, (grid, 1, 1), (block as u32, 1, 1), 0, &mut args)
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, kind: Kind) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let base = Base::new(rt, node);
    if !matches!(kind, Kind::Lp(_)) {
        let stash = attr_int(node, "stash_type")?.unwrap_or(1);
        if stash != 1 && stash != 11 {
            return Err(EpError::invalid_attribute(
                node,
                "stash_type",
                format!("{stash} is not float (1) or double (11)"),
            ));
        }
    }
    let axis = if kind.is_skip() {
        -1
    } else {
        attr_int(node, "axis")?.unwrap_or(-1)
    };
    let eps = attr_float(node, "epsilon")?.unwrap_or(1e-5) as f64;
    let preload: Vec<DataType> = FLOATS
        .iter()
        .map(|f| f.0)
        .filter(|&t| !(kind.is_skip() && t == F64))
        .collect();
    let table = RowTable::new(&base, &preload)?;
    let mut lines = HashMap::new();
    if let Kind::Lp(_) = kind {
        for &(t, _, _) in &FLOATS {
            let spec = chan_module(t).expect("a float dtype");
            lines.insert(t, base.module(&spec)?.function("lp_lines")?);
        }
    }
    Ok(Box::new(RowKernel {
        base,
        kind,
        axis,
        eps,
        table,
        lines,
    }))
}

fn layer_norm(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Kind::Layer)
}

fn rms_norm(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Kind::Rms)
}

fn skip_layer_norm(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Kind::SkipLayer)
}

fn skip_rms_norm(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Kind::SkipRms)
}

/// SimplifiedLayerNormalization, or (`skip`) SkipSimplifiedLayerNormalization, for `req`.
pub(super) fn rms_kernel(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    skip: bool,
) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, if skip { Kind::SkipRms } else { Kind::Rms })
}

fn lp_norm(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let p = attr_int(node, "p")?.unwrap_or(2);
    if p != 1 && p != 2 {
        return Err(EpError::invalid_attribute(
            node,
            "p",
            format!("{p} must be 1 or 2"),
        ));
    }
    build(rt, req, Kind::Lp(p))
}

pub fn register(r: &mut Registry) {
    r.register("", "LayerNormalization", 17, layer_norm);
    // ORT's pre-17 ONNX-domain LayerNormalization (exported with opset < 17) and its contrib
    // alias, as the CPU provider registers them.
    r.register("", "LayerNormalization", 1, layer_norm);
    r.register("com.microsoft", "LayerNormalization", 1, layer_norm);
    r.register("", "RMSNormalization", 23, rms_norm);
    r.register("", "SimplifiedLayerNormalization", 1, rms_norm);
    r.register("com.microsoft", "SimplifiedLayerNormalization", 1, rms_norm);
    r.register(
        "com.microsoft",
        "SkipLayerNormalization",
        1,
        skip_layer_norm,
    );
    r.register(
        "com.microsoft",
        "SkipSimplifiedLayerNormalization",
        1,
        skip_rms_norm,
    );
    for since in [1, 22] {
        r.register("", "LpNormalization", since, lp_norm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn row_strides_of_padded_and_broadcast_layouts() {
        // Dense, padded rows, transposed.
        assert_eq!(row_stride(&[2, 3, 4], &[12, 4, 1], 2), Some(4));
        assert_eq!(row_stride(&[2, 3, 4], &[21, 7, 1], 2), Some(7));
        assert_eq!(row_stride(&[2, 3, 4], &[21, 7, 1], 1), None);
        assert_eq!(row_stride(&[2, 3, 4], &[12, 4, 1], 1), Some(12));
        assert_eq!(row_stride(&[3, 4], &[1, 3], 1), None);
        assert_eq!(row_stride(&[4], &[1], 0), Some(4));
        // Skip [seq, hidden] against [batch, seq, hidden]: row % seq.
        assert_eq!(skip_rows(&[2, 3, 4], &[0, 4, 1], 2), Some((1, 3, 4)));
        // Skip [batch, 1, hidden]: row / seq.
        assert_eq!(skip_rows(&[2, 3, 4], &[4, 0, 1], 2), Some((3, 2, 4)));
        // One skip row for all.
        assert_eq!(skip_rows(&[2, 3, 4], &[0, 0, 1], 2), Some((1, 1, 0)));
        assert_eq!(skip_rows(&[2, 3, 4], &[12, 4, 1], 2), Some((1, 6, 4)));
        // Broadcast inside a row is not a fast layout.
        assert_eq!(skip_rows(&[2, 3, 4], &[4, 0, 0], 2), None);
    }
}
