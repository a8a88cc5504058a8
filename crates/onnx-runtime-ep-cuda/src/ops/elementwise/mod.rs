//! Element-wise ops: unary math and activations (`unary`), broadcasting binary arithmetic,
//! comparisons and logic (`binary`), and the variadic folds Max/Min/Sum/Mean and
//! com.microsoft BiasAdd (`variadic`).
//!
//! One NVRTC module per op (functor), holding a kernel per dtype the op takes (`ew_<tag>`),
//! so a model compiles only the ops it uses and each module stays small. Every launch picks
//! one of two walks (see `kernels/elementwise.cuh`): a vectorized fast walk (contiguous
//! output, at most 3 coalesced axes along which each input's innermost stride is 0 or 1:
//! same-shape, scalar, row, column and per-channel broadcasts) and a general strided walk.

mod binary;
mod unary;
mod variadic;

use super::common::*;
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CuPtr, Function};
use onnx_runtime_ep_api::EpResult;
use onnx_runtime_ir::DataType;

/// Axes of a strided walk (`EW_RANK` in the kernels).
pub const EW_RANK: usize = 8;
/// Inputs one variadic launch folds (`EW_MAXIN`).
pub const EW_MAXIN: usize = 8;

// `ModuleSpec::source` is a `&'static str`: the shared header and each body, joined at compile
// time.
const UNARY_FULL: &str = concat!(
    include_str!("../../kernels/elementwise.cuh"),
    "\n",
    include_str!("../../kernels/elementwise_unary.cu")
);
const BINARY_FULL: &str = concat!(
    include_str!("../../kernels/elementwise.cuh"),
    "\n",
    include_str!("../../kernels/elementwise_binary.cu")
);
const VARIADIC_FULL: &str = concat!(
    include_str!("../../kernels/elementwise.cuh"),
    "\n",
    include_str!("../../kernels/elementwise_variadic.cu")
);

/// Launch metadata of an element-wise walk over `K` operands (inputs, then the output last),
/// mirroring `EwParams<K>` in `kernels/elementwise.cuh`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct EwParams<const K: usize> {
    pub n: i64,
    pub rank: i32,
    pub mode: i32,
    pub narrow: i32,
    pub code: i32,
    pub dims: [i64; EW_RANK],
    pub st: [[i64; EW_RANK]; K],
    pub a: f64,
    pub b: f64,
    pub c: f64,
    pub flags: i64,
    pub err: u64,
    pub id: u32,
    pub _pad: u32,
}

impl<const K: usize> EwParams<K> {
    fn zeroed() -> Self {
        EwParams {
            n: 0,
            rank: 0,
            mode: 0,
            narrow: 0,
            code: 0,
            dims: [0; EW_RANK],
            st: [[0; EW_RANK]; K],
            a: 0.0,
            b: 0.0,
            c: 0.0,
            flags: 0,
            err: 0,
            id: 0,
            _pad: 0,
        }
    }
}

/// The dtype lists of the kernels' `EW_TYPES` (`kernels/elementwise.cuh`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Types {
    Floats,
    /// Floats and signed integers.
    Signed,
    Numeric,
    NumericBool,
    Ints,
    UInts,
    Bool,
    /// Pow's bases: floats, int32, int64.
    PowBases,
    /// PRelu: floats, int32, int64, uint32, uint64.
    PRelu,
    /// IsNaN / IsInf: floats and the float8 formats.
    IsNaN,
}

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];
const SINTS: [DataType; 4] = [
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
];
const UINTS: [DataType; 4] = [
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
];
const FLOAT8: [DataType; 4] = [
    DataType::Float8E4M3FN,
    DataType::Float8E4M3FNUZ,
    DataType::Float8E5M2,
    DataType::Float8E5M2FNUZ,
];

impl Types {
    fn macro_name(self) -> &'static str {
        match self {
            Types::Floats => "EW_FLOATS",
            Types::Signed => "EW_SIGNED",
            Types::Numeric => "EW_NUMERIC",
            Types::NumericBool => "EW_NUMERIC_BOOL",
            Types::Ints => "EW_INTS",
            Types::UInts => "EW_UINTS",
            Types::Bool => "EW_BOOL",
            Types::PowBases => "EW_POW_BASES",
            Types::PRelu => "EW_PRELU_TYPES",
            Types::IsNaN => "EW_ISNAN_TYPES",
        }
    }

    /// Every dtype of the list (each float8 format maps to the one `f8` kernel).
    pub fn dtypes(self) -> Vec<DataType> {
        let mut v = Vec::new();
        match self {
            Types::Floats => v.extend(FLOATS),
            Types::Signed => {
                v.extend(FLOATS);
                v.extend(SINTS);
            }
            Types::Numeric | Types::NumericBool => {
                v.extend(FLOATS);
                v.extend(SINTS);
                v.extend(UINTS);
                if self == Types::NumericBool {
                    v.push(DataType::Bool);
                }
            }
            Types::Ints => {
                v.extend(SINTS);
                v.extend(UINTS);
            }
            Types::UInts => v.extend(UINTS),
            Types::Bool => v.push(DataType::Bool),
            Types::PowBases => {
                v.extend(FLOATS);
                v.extend([DataType::Int32, DataType::Int64]);
            }
            Types::PRelu => {
                v.extend(FLOATS);
                v.extend([
                    DataType::Int32,
                    DataType::Int64,
                    DataType::Uint32,
                    DataType::Uint64,
                ]);
            }
            Types::IsNaN => {
                v.extend(FLOATS);
                v.extend(FLOAT8);
            }
        }
        v
    }

    /// Words for error messages.
    pub fn describe(self) -> &'static str {
        match self {
            Types::Floats => "float, double, float16 and bfloat16",
            Types::Signed => "float types and signed integers",
            Types::Numeric => "numeric types",
            Types::NumericBool => "numeric types and bool",
            Types::Ints => "integer types",
            Types::UInts => "unsigned integer types",
            Types::Bool => "bool",
            Types::PowBases => "float types, int32 and int64",
            Types::PRelu => "float types, int32, int64, uint32 and uint64",
            Types::IsNaN => "float types and float8",
        }
    }
}

/// The kernel-name tag of `dtype` in a module (`f8` for the float8 formats).
fn tag(dtype: DataType) -> Option<&'static str> {
    if FLOAT8.contains(&dtype) {
        return Some("f8");
    }
    type_tag(dtype)
}

/// Which source an element-wise module is built from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Unary,
    Binary,
    Variadic,
}

/// The module of functor `op` (a struct of the kernel source) for the dtypes of `types`.
pub fn ew_module(source: Source, op: &str, types: Types) -> ModuleSpec {
    let (prefix, src) = match source {
        Source::Unary => ("ew_u", UNARY_FULL),
        Source::Binary => ("ew_b", BINARY_FULL),
        Source::Variadic => ("ew_v", VARIADIC_FULL),
    };
    let mut spec = ModuleSpec::new(format!("{prefix}_{op}"), src)
        .define("EW_OP", op)
        .define("EW_TYPES", types.macro_name())
        .with_half();
    if op == "Pow" {
        spec = spec.define("EW_POW", "1");
    }
    spec
}

/// The kernels of one module by input dtype.
#[derive(Clone, Debug, Default)]
pub struct Fns(Vec<(DataType, Function)>);

impl Fns {
    /// Loads `<prefix><tag>` for each dtype of `dtypes` from the module of (`source`, `op`,
    /// `types`).
    pub fn load(
        base: &Base,
        source: Source,
        op: &str,
        types: Types,
        dtypes: &[DataType],
        prefix: &str,
    ) -> EpResult<Fns> {
        let module = base.module(&ew_module(source, op, types))?;
        let mut v = Vec::with_capacity(dtypes.len());
        for &d in dtypes {
            let Some(t) = tag(d) else { continue };
            v.push((d, module.function(&format!("{prefix}{t}"))?));
        }
        Ok(Fns(v))
    }

    pub fn get(&self, dtype: DataType) -> Option<Function> {
        self.0.iter().find(|(d, _)| *d == dtype).map(|(_, f)| *f)
    }
}

/// One operand of a walk: its shape (inputs broadcast to the output's), element strides,
/// device address and element size in bytes.
pub struct Operand<'a> {
    pub shape: &'a [usize],
    pub strides: Vec<usize>,
    pub ptr: CuPtr,
    pub size: usize,
}

impl<'a> Operand<'a> {
    pub fn of(v: &onnx_runtime_ep_api::TensorView<'a>) -> Operand<'a> {
        Operand {
            shape: v.shape,
            strides: v.strides.to_vec(),
            ptr: ptr_of(v),
            size: v.dtype.element_size().unwrap_or(1),
        }
    }
}

/// Drops size-1 axes and merges adjacent axes that are contiguous in every operand.
pub fn coalesce_n(dims: &[usize], st: &[Vec<i64>]) -> (Vec<usize>, Vec<Vec<i64>>) {
    let mut d: Vec<usize> = Vec::new();
    let mut s: Vec<Vec<i64>> = vec![Vec::new(); st.len()];
    for k in 0..dims.len() {
        if dims[k] == 1 {
            continue;
        }
        if !d.is_empty() {
            let last = d.len() - 1;
            let merge = st
                .iter()
                .zip(&s)
                .all(|(full, merged)| merged[last] == full[k] * dims[k] as i64);
            if merge {
                d[last] *= dims[k];
                for (full, merged) in st.iter().zip(s.iter_mut()) {
                    merged[last] = full[k];
                }
                continue;
            }
        }
        d.push(dims[k]);
        for (full, merged) in st.iter().zip(s.iter_mut()) {
            merged.push(full[k]);
        }
    }
    (d, s)
}

/// A planned launch: its parameters and how many threads it needs.
pub struct Plan<const K: usize> {
    pub p: EwParams<K>,
    pub threads: u64,
}

impl<const K: usize> Plan<K> {
    /// Keeps the fast walk only when it is one axis along which the first `inputs` operands
    /// are all contiguous (the only fast walk the unary and variadic kernels have); otherwise
    /// the same walk goes strided.
    pub fn flat_or_strided(mut self, inputs: usize) -> Self {
        let p = &mut self.p;
        if p.mode == 1 {
            let flat = p.dims[0] == 1 && p.dims[1] == 1 && (0..inputs).all(|k| p.st[k][2] == 1);
            if !flat {
                // Mode 0 reads the same three axes and strides.
                p.mode = 0;
                self.threads = p.n as u64;
            }
        }
        self
    }
}

/// Plans the walk of `inputs` (broadcast to `out_shape`) into `out`, with `v` elements per
/// vector in the fast walk (the kernel's compile-time width for these dtypes). Operand k of
/// `inputs` takes slot k; the output takes slot `K - 1`.
pub fn plan<const K: usize>(
    base: &Base,
    out_shape: &[usize],
    inputs: &[Operand<'_>],
    out: &Operand<'_>,
    v: usize,
) -> EpResult<Plan<K>> {
    let mut plan = plan_walk::<K>(out_shape, inputs, out, v).map_err(|e| base.err(e))?;
    plan.p.err = base.rt.err_ptr();
    plan.p.id = base.id;
    Ok(plan)
}

/// Element strides that read `shape` / `strides` broadcast (right-aligned) to `out`.
fn broadcast_to(
    shape: &[usize],
    strides: &[usize],
    out: &[usize],
    k: usize,
) -> Result<Vec<i64>, String> {
    let bad = || format!("input {k} of shape {shape:?} cannot broadcast to {out:?}");
    if shape.len() > out.len() {
        return Err(bad());
    }
    let lead = out.len() - shape.len();
    let mut r = vec![0i64; out.len()];
    for (j, (&d, &s)) in shape.iter().zip(strides).enumerate() {
        if d == out[lead + j] {
            r[lead + j] = if d == 1 { 0 } else { s as i64 };
        } else if d != 1 {
            return Err(bad());
        }
    }
    Ok(r)
}

/// [`plan`] without the device error word (no runtime needed).
fn plan_walk<const K: usize>(
    out_shape: &[usize],
    inputs: &[Operand<'_>],
    out: &Operand<'_>,
    v: usize,
) -> Result<Plan<K>, String> {
    debug_assert!(inputs.len() < K);
    let n = out_shape
        .iter()
        .try_fold(1usize, |n, &d| n.checked_mul(d))
        .ok_or_else(|| format!("shape {out_shape:?} has more elements than fit in memory"))?;
    let mut strides = Vec::with_capacity(inputs.len() + 1);
    for (k, o) in inputs.iter().enumerate() {
        strides.push(broadcast_to(o.shape, &o.strides, out_shape, k)?);
    }
    strides.push(istrides(&out.strides));
    let (dims, st) = coalesce_n(out_shape, &strides);
    let mut p = EwParams::<K>::zeroed();
    p.n = n as i64;
    p.narrow = (n <= u32::MAX as usize) as i32;
    let rank = dims.len();
    let out_st = &st[inputs.len()];
    // The output must be contiguous along the walk.
    let mut expect = 1i64;
    let mut out_contiguous = true;
    for k in (0..rank).rev() {
        out_contiguous &= out_st[k] == expect;
        expect *= dims[k] as i64;
    }
    if rank <= 3 && out_contiguous {
        // The walk padded to three axes [D0, D1, D2] (leading 1s, stride 0).
        let pad = 3 - rank;
        let pad3 = |x: &[i64]| -> [i64; 3] {
            let mut r = [0i64; 3];
            r[pad..].copy_from_slice(x);
            r
        };
        let d3 = {
            let mut r = [1i64; 3];
            for (slot, &d) in r[pad..].iter_mut().zip(&dims) {
                *slot = d as i64;
            }
            r
        };
        let vv = v as i64;
        let one_axis = d3[0] == 1 && d3[1] == 1;
        let aligned = |ptr: CuPtr, size: usize| (ptr as usize).is_multiple_of(v * size);
        let mut ok = v == 1 || one_axis || d3[2] % vv == 0;
        ok &= aligned(out.ptr, out.size);
        for (o, s) in inputs.iter().zip(&st) {
            let s3 = pad3(s);
            ok &= match s3[2] {
                0 => true,
                1 => aligned(o.ptr, o.size) && s3[0] % vv == 0 && s3[1] % vv == 0,
                _ => false,
            };
        }
        if ok {
            p.mode = 1;
            p.rank = 3;
            p.dims[..3].copy_from_slice(&d3);
            for (k, s) in st.iter().enumerate().take(inputs.len()) {
                p.st[k][..3].copy_from_slice(&pad3(s));
            }
            p.st[K - 1][..3].copy_from_slice(&pad3(out_st));
            let nv = n / v;
            let tail = n - nv * v;
            return Ok(Plan {
                p,
                threads: nv.max(tail).max(1) as u64,
            });
        }
    }
    if rank > EW_RANK {
        return Err(format!(
            "the walk has {rank} axes after merging; the CUDA element-wise kernels take at most \
             {EW_RANK}; run this node on the CPU provider"
        ));
    }
    p.mode = 0;
    p.rank = rank as i32;
    for (slot, &d) in p.dims.iter_mut().zip(&dims) {
        *slot = d as i64;
    }
    for (k, s) in st.iter().enumerate().take(inputs.len()) {
        p.st[k][..rank].copy_from_slice(s);
    }
    p.st[K - 1][..rank].copy_from_slice(out_st);
    Ok(Plan {
        p,
        threads: n as u64,
    })
}

/// Elements per vector of the fast walk: 16 bytes of the widest operand, at most `maxv`
/// (`VecWidth` in the kernels).
pub fn vec_width(sizes: &[usize], maxv: usize) -> usize {
    let widest = sizes.iter().copied().max().unwrap_or(1).max(1);
    (16 / widest).clamp(1, maxv)
}

pub fn register(r: &mut Registry) {
    unary::register(r);
    binary::register(r);
    variadic::register(r);
}

/// The NVRTC modules this family compiles (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    let mut all = Vec::new();
    all.extend(unary::modules());
    all.extend(binary::modules());
    all.extend(variadic::modules());
    all
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coalesce_n_merges_axes_contiguous_in_every_operand() {
        // [2, 3, 4] + [4] (row broadcast): the two leading axes merge.
        let a = vec![12, 4, 1];
        let b = vec![0, 0, 1];
        let o = vec![12, 4, 1];
        let (d, s) = coalesce_n(&[2, 3, 4], &[a, b, o]);
        assert_eq!(d, vec![6, 4]);
        assert_eq!(s, vec![vec![4, 1], vec![0, 1], vec![4, 1]]);
        // NCHW + per-channel [1, C, 1, 1]: H and W merge, N and C stay.
        let a = vec![60, 20, 5, 1];
        let b = vec![0, 1, 0, 0];
        let (d, s) = coalesce_n(&[2, 3, 4, 5], &[a.clone(), b, a]);
        assert_eq!(d, vec![2, 3, 20]);
        assert_eq!(s[1], vec![0, 1, 0]);
        // Size-1 axes vanish; all-contiguous becomes one axis.
        let c = vec![4, 4, 1];
        let (d, _) = coalesce_n(&[3, 1, 4], &[c.clone(), c]);
        assert_eq!(d, vec![12]);
    }

    #[test]
    fn vec_width_follows_the_widest_operand() {
        assert_eq!(vec_width(&[4, 4, 4], 16), 4);
        assert_eq!(vec_width(&[2, 2, 2], 16), 8);
        assert_eq!(vec_width(&[4, 4, 1], 16), 4);
        assert_eq!(vec_width(&[1, 1, 1], 16), 16);
        assert_eq!(vec_width(&[1, 1, 1], 4), 4);
        assert_eq!(vec_width(&[8], 16), 2);
    }

    #[test]
    fn params_match_the_kernel_layout() {
        // n, rank, mode, narrow, code, dims[8], st[K][8], a, b, c, flags, err, id, pad.
        assert_eq!(
            std::mem::size_of::<EwParams<2>>(),
            24 + 64 + 2 * 64 + 24 + 8 + 8 + 8
        );
        assert_eq!(
            std::mem::size_of::<EwParams<9>>(),
            24 + 64 + 9 * 64 + 24 + 8 + 8 + 8
        );
    }

    /// Strides of `shape` stored in `layout`: 0 contiguous, 1 axes reversed, 2 rows padded.
    fn layout_strides(shape: &[usize], layout: usize) -> Vec<usize> {
        let rank = shape.len();
        let mut st = vec![0usize; rank];
        let mut acc = 1usize;
        let order: Vec<usize> = if layout == 1 {
            (0..rank).collect()
        } else {
            (0..rank).rev().collect()
        };
        for (pos, &k) in order.iter().enumerate() {
            st[k] = acc;
            acc *= shape[k] + if layout == 2 && pos == 0 { 3 } else { 0 };
        }
        st
    }

    /// What the kernels' walks visit: (output offset, input offsets) per element, following
    /// `kernels/elementwise.cuh` (mode 1: vectors of `v` with a 1-axis tail; mode 0: strided).
    fn visits<const K: usize>(plan: &Plan<K>, nin: usize, v: usize) -> Vec<(i64, Vec<i64>)> {
        let p = &plan.p;
        let n = p.n;
        let mut out = Vec::new();
        if p.mode == 1 {
            let vv = v as i64;
            let nv = n / vv;
            for vi in 0..nv {
                let i = vi * vv;
                let (i0, i1, i2) = if p.dims[0] == 1 && p.dims[1] == 1 {
                    (0, 0, i)
                } else {
                    let t = i / p.dims[2];
                    (t / p.dims[1], t % p.dims[1], i % p.dims[2])
                };
                for j in 0..vv {
                    let ins = (0..nin)
                        .map(|k| {
                            let base = i0 * p.st[k][0] + i1 * p.st[k][1] + i2 * p.st[k][2];
                            base + if p.st[k][2] == 0 { 0 } else { j }
                        })
                        .collect();
                    out.push((i + j, ins));
                }
            }
            let tail = n - nv * vv;
            assert!(plan.threads as i64 >= tail, "too few threads for the tail");
            for t in nv * vv..n {
                out.push((t, (0..nin).map(|k| t * p.st[k][2]).collect()));
            }
        } else {
            assert_eq!(plan.threads as i64, n);
            for i in 0..n {
                let mut off = [0i64; K];
                let mut r = i;
                for d in (0..p.rank as usize).rev() {
                    let c = r % p.dims[d];
                    r /= p.dims[d];
                    for (k, o) in off.iter_mut().enumerate() {
                        *o += c * p.st[k][d];
                    }
                }
                out.push((off[K - 1], off[..nin].to_vec()));
            }
        }
        out
    }

    #[test]
    fn planned_walks_visit_every_element_at_its_broadcast_offsets() {
        let pairs: &[(&[usize], &[usize])] = &[
            (&[4, 64], &[4, 64]),
            (&[3, 5, 7], &[3, 5, 7]),
            (&[4, 64], &[]),
            (&[], &[6, 16]),
            (&[6, 32], &[32]),
            (&[6, 32], &[6, 1]),
            (&[2, 3, 8, 8], &[1, 3, 1, 1]),
            (&[5, 1], &[1, 8]),
            (&[2, 3, 4], &[3, 1]),
            (&[2, 1, 3, 1, 5], &[4, 1, 1, 5]),
            (&[7], &[1]),
            (&[], &[]),
            (&[3, 0], &[3, 1]),
        ];
        let mut fast = 0;
        for &(sa, sb) in pairs {
            let shape = broadcast_shapes_plain(sa, sb);
            let n: usize = shape.iter().product();
            for la in 0..3 {
                for lb in 0..3 {
                    for &(v, size) in &[(1usize, 8usize), (4, 4), (8, 2), (16, 1)] {
                        for misalign in [0u64, size as u64] {
                            let (sta, stb) = (layout_strides(sa, la), layout_strides(sb, lb));
                            let a = Operand {
                                shape: sa,
                                strides: sta.clone(),
                                ptr: 1 << 20,
                                size,
                            };
                            let b = Operand {
                                shape: sb,
                                strides: stb.clone(),
                                ptr: (1 << 21) + misalign,
                                size,
                            };
                            let o = Operand {
                                shape: &shape,
                                strides: layout_strides(&shape, 0),
                                ptr: 1 << 22,
                                size,
                            };
                            let plan = plan_walk::<3>(&shape, &[a, b], &o, v).unwrap();
                            assert_eq!(plan.p.n as usize, n);
                            if plan.p.mode == 1 {
                                fast += 1;
                            }
                            let ba = broadcast_to(sa, &sta, &shape, 0).unwrap();
                            let bb = broadcast_to(sb, &stb, &shape, 1).unwrap();
                            let mut seen = vec![false; n];
                            let vis = visits(&plan, 2, v);
                            assert_eq!(vis.len(), n, "{sa:?} {sb:?} v{v}");
                            for (oi, ins) in vis {
                                let oi = oi as usize;
                                assert!(!seen[oi], "{sa:?} {sb:?}: element {oi} visited twice");
                                seen[oi] = true;
                                // The multi-index of output element oi (contiguous output).
                                let mut rem = oi;
                                let mut want = [0i64; 2];
                                for k in (0..shape.len()).rev() {
                                    let c = (rem % shape[k]) as i64;
                                    rem /= shape[k];
                                    want[0] += c * ba[k];
                                    want[1] += c * bb[k];
                                }
                                assert_eq!(
                                    ins,
                                    want.to_vec(),
                                    "{sa:?} {sb:?} layouts {la}/{lb} v{v}: element {oi}"
                                );
                            }
                            // Vector loads of contiguous operands are aligned.
                            if plan.p.mode == 1 && v > 1 {
                                assert!(
                                    misalign == 0 || plan.p.st[1][2] == 0,
                                    "{sa:?} {sb:?}: a misaligned operand took the vector walk"
                                );
                            }
                        }
                    }
                }
            }
        }
        assert!(fast > 50, "the fast walk was planned only {fast} times");
    }

    fn broadcast_shapes_plain(a: &[usize], b: &[usize]) -> Vec<usize> {
        let rank = a.len().max(b.len());
        (0..rank)
            .map(|k| {
                let da = if k + a.len() >= rank {
                    a[k + a.len() - rank]
                } else {
                    1
                };
                let db = if k + b.len() >= rank {
                    b[k + b.len() - rank]
                } else {
                    1
                };
                if da == 1 {
                    db
                } else {
                    da
                }
            })
            .collect()
    }

    #[test]
    fn flat_walks_keep_only_contiguous_one_axis_plans() {
        let shape = [6usize, 32];
        let st = layout_strides(&shape, 0);
        let o = Operand {
            shape: &shape,
            strides: st.clone(),
            ptr: 1 << 22,
            size: 4,
        };
        let x = Operand {
            shape: &shape,
            strides: st.clone(),
            ptr: 1 << 20,
            size: 4,
        };
        let plan = plan_walk::<2>(&shape, &[x], &o, 4)
            .unwrap()
            .flat_or_strided(1);
        assert_eq!(plan.p.mode, 1);
        // A padded input keeps 2 axes: strided.
        let xp = Operand {
            shape: &shape,
            strides: layout_strides(&shape, 2),
            ptr: 1 << 20,
            size: 4,
        };
        let plan = plan_walk::<2>(&shape, &[xp], &o, 4)
            .unwrap()
            .flat_or_strided(1);
        assert_eq!(plan.p.mode, 0);
        assert_eq!(plan.threads, 192);
        let vis = visits(&plan, 1, 4);
        assert_eq!(vis[33], (33, vec![36]));
        // A row broadcast input (inner stride 1 but 2 axes) goes strided in unary/variadic.
        let row = [32usize];
        let r = Operand {
            shape: &row,
            strides: vec![1],
            ptr: 1 << 20,
            size: 4,
        };
        let plan = plan_walk::<2>(&shape, &[r], &o, 4)
            .unwrap()
            .flat_or_strided(1);
        assert_eq!(plan.p.mode, 0);
        assert_eq!(visits(&plan, 1, 4)[40], (40, vec![8]));
    }
}
