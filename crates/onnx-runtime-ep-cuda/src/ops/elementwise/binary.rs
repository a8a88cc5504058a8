//! Broadcasting binary ops: Add, Sub, Mul, Div, Pow (exponent of any numeric dtype), Mod,
//! BitShift, BitwiseAnd/Or/Xor, And/Or/Xor, the comparisons (bool outputs), PRelu (slope
//! broadcast unidirectionally), the two-input forms of Max/Min/Sum/Mean, and com.microsoft
//! FastGelu / BiasGelu with a bias. Opsets before 7 broadcast B as the `broadcast` / `axis`
//! attributes say (as the CPU provider does).

use super::{plan, vec_width, Fns, Operand, Plan, Source, Types};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{DataType, Node};
use std::sync::Arc;

/// How an op's second operand broadcasts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Shape {
    /// Numpy broadcasting, both ways.
    Numpy,
    /// Numpy, or before opset 7 (with `broadcast=1`) B aligned with A at `axis`.
    Legacy,
    /// PRelu: the slope broadcasts to X (one way); before opset 7 a 1-D slope of X's channel
    /// count is per channel.
    Slope,
}

struct Def {
    op: &'static str,
    since: &'static [u64],
    functor: &'static str,
    types: Types,
    bool_out: bool,
    shape: Shape,
}

const fn def(
    op: &'static str,
    since: &'static [u64],
    functor: &'static str,
    types: Types,
    shape: Shape,
) -> Def {
    Def {
        op,
        since,
        functor,
        types,
        bool_out: false,
        shape,
    }
}

const fn compare(op: &'static str, since: &'static [u64], types: Types, shape: Shape) -> Def {
    Def {
        op,
        since,
        functor: op,
        types,
        bool_out: true,
        shape,
    }
}

const ARITH: &[u64] = &[1, 6, 7, 13, 14];
const N: Types = Types::Numeric;

const DEFS: &[Def] = &[
    def("Add", ARITH, "Add", N, Shape::Legacy),
    def("Sub", ARITH, "Sub", N, Shape::Legacy),
    def("Mul", ARITH, "Mul", N, Shape::Legacy),
    def("Div", ARITH, "Div", N, Shape::Legacy),
    def(
        "Pow",
        &[1, 7, 12, 13, 15],
        "Pow",
        Types::PowBases,
        Shape::Legacy,
    ),
    def("Mod", &[10, 13], "Mod", N, Shape::Numpy),
    def("BitShift", &[11], "BitShift", Types::UInts, Shape::Numpy),
    def("BitwiseAnd", &[18], "BitwiseAnd", Types::Ints, Shape::Numpy),
    def("BitwiseOr", &[18], "BitwiseOr", Types::Ints, Shape::Numpy),
    def("BitwiseXor", &[18], "BitwiseXor", Types::Ints, Shape::Numpy),
    compare("And", &[1, 7], Types::Bool, Shape::Legacy),
    compare("Or", &[1, 7], Types::Bool, Shape::Legacy),
    compare("Xor", &[1, 7], Types::Bool, Shape::Legacy),
    compare(
        "Equal",
        &[1, 7, 11, 13, 19],
        Types::NumericBool,
        Shape::Legacy,
    ),
    compare("Less", &[1, 7, 9, 13], N, Shape::Legacy),
    compare("Greater", &[1, 7, 9, 13], N, Shape::Legacy),
    compare("LessOrEqual", &[12, 16], N, Shape::Numpy),
    compare("GreaterOrEqual", &[12, 16], N, Shape::Numpy),
    def(
        "PRelu",
        &[1, 6, 7, 9, 16],
        "PRelu",
        Types::PRelu,
        Shape::Slope,
    ),
];

/// Functors only reached through other ops (two-input Max/Min/Mean, FastGelu / BiasGelu with
/// a bias).
const EXTRA: &[(&str, Types)] = &[
    ("BMax", Types::Numeric),
    ("BMin", Types::Numeric),
    ("Mean2", Types::Floats),
    ("BiasGeluTanh", Types::Floats),
    ("BiasGeluErf", Types::Floats),
];

pub fn modules() -> Vec<crate::compiler::ModuleSpec> {
    DEFS.iter()
        .map(|d| (d.functor, d.types))
        .chain(EXTRA.iter().copied())
        .map(|(f, t)| super::ew_module(Source::Binary, f, t))
        .collect()
}

/// Elements per vector at most (`maxv` of the functor in the kernels).
fn max_vec(functor: &str, dtype: DataType) -> usize {
    match functor {
        "Mod" => 4,
        "Div" | "Pow" if !dtype.is_float() => 4,
        _ => 16,
    }
}

pub struct BinaryKernel {
    base: Base,
    functor: &'static str,
    fns: Fns,
    /// Pow: the kernels for an exponent of another dtype.
    mixed: Option<Fns>,
    types: Types,
    bool_out: bool,
    flags: i64,
    shape: Shape,
    /// Legacy broadcasting (opset < 7 and `broadcast=1`): the axis B aligns at, if given.
    legacy: Option<Option<i64>>,
    opset: u64,
}

/// What one call resolves to.
struct Resolved {
    f: Function,
    /// The exponent's ONNX dtype code for mixed Pow, else 0.
    code: i32,
    mixed: bool,
    b_shape: Vec<usize>,
    b_strides: Vec<usize>,
    out: (DataType, Vec<usize>),
}

impl BinaryKernel {
    #[allow(clippy::too_many_arguments)]
    pub fn build(
        rt: &Arc<CudaRuntime>,
        node: &Node,
        opset: u64,
        functor: &'static str,
        types: Types,
        dtypes: &[DataType],
        bool_out: bool,
        flags: i64,
    ) -> EpResult<BinaryKernel> {
        let base = Base::new(rt, node);
        let fns = Fns::load(&base, Source::Binary, functor, types, dtypes, "ew_")?;
        let mixed = if functor == "Pow" {
            Some(Fns::load(
                &base,
                Source::Binary,
                functor,
                types,
                dtypes,
                "ew_mixed_",
            )?)
        } else {
            None
        };
        Ok(BinaryKernel {
            base,
            functor,
            fns,
            mixed,
            types,
            bool_out,
            flags,
            shape: Shape::Numpy,
            legacy: None,
            opset,
        })
    }

    fn resolve(&self, inputs: &[TensorView<'_>]) -> EpResult<Resolved> {
        let base = &self.base;
        let a = base.req(inputs, 0)?;
        let b = base.req(inputs, 1)?;
        let refuse = |d: DataType| {
            base.unsupported(
                d,
                format!("the CUDA {} takes {}", base.op, self.types.describe()),
            )
        };
        let (f, code, mixed) = if a.dtype == b.dtype {
            (
                self.fns.get(a.dtype).ok_or_else(|| refuse(a.dtype))?,
                0,
                false,
            )
        } else if let Some(m) = &self.mixed {
            if !(b.dtype.is_float() || b.dtype.is_integer()) || type_tag(b.dtype).is_none() {
                return Err(base.unsupported(b.dtype, "the exponent must be numeric"));
            }
            (
                m.get(a.dtype).ok_or_else(|| refuse(a.dtype))?,
                b.dtype.onnx_code(),
                true,
            )
        } else {
            return Err(base.err(format!(
                "inputs must have the same type, got {} and {}",
                a.dtype, b.dtype
            )));
        };
        let (b_shape, b_strides) = self.b_layout(a, b)?;
        let shape = broadcast_shapes(base, &[a.shape, &b_shape])?;
        if self.shape == Shape::Slope && shape != a.shape {
            return Err(base.err(format!(
                "slope of shape {:?} must broadcast to X's shape {:?}",
                b.shape, a.shape
            )));
        }
        check_view_rank(base, &shape)?;
        let dtype = if self.bool_out {
            DataType::Bool
        } else {
            a.dtype
        };
        Ok(Resolved {
            f,
            code,
            mixed,
            b_shape,
            b_strides,
            out: (dtype, shape),
        })
    }

    /// B's shape and strides after legacy (pre-opset-7) alignment.
    fn b_layout(
        &self,
        a: &TensorView<'_>,
        b: &TensorView<'_>,
    ) -> EpResult<(Vec<usize>, Vec<usize>)> {
        let (mut shape, mut strides) = (b.shape.to_vec(), b.strides.to_vec());
        match (self.shape, self.legacy) {
            (Shape::Legacy, Some(Some(axis))) => {
                let (ra, rb) = (a.shape.len() as i64, b.shape.len());
                let ax = if axis < 0 { axis + ra } else { axis };
                if ax < 0 || ax as usize + rb > a.shape.len() {
                    return Err(self.base.err(format!(
                        "legacy broadcast of B {:?} into A {:?} at axis {axis} is out of range",
                        b.shape, a.shape
                    )));
                }
                let rank = a.shape.len() - ax as usize;
                shape.resize(rank, 1);
                strides.resize(rank, 0);
            }
            (Shape::Slope, _) if self.opset < 7 => {
                let c = a.shape.get(1).copied().unwrap_or(0);
                if b.shape.len() == 1 && b.shape[0] == c && c != 1 {
                    shape.resize(a.shape.len() - 1, 1);
                    strides.resize(a.shape.len() - 1, 0);
                }
            }
            _ => {}
        }
        Ok((shape, strides))
    }
}

impl Kernel for BinaryKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        Ok(vec![self.resolve(inputs)?.out])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let r = self.resolve(inputs)?;
        base.expect_outputs(outputs, std::slice::from_ref(&r.out))?;
        let (a, b) = (base.req(inputs, 0)?, base.req(inputs, 1)?);
        let out = &outputs[0];
        let ao = Operand::of(a);
        let bo = Operand {
            shape: &r.b_shape,
            strides: r.b_strides.clone(),
            ptr: ptr_of(b),
            size: b.dtype.element_size().unwrap_or(1),
        };
        let oo = Operand {
            shape: out.shape,
            strides: out.strides.to_vec(),
            ptr: mut_ptr_of(out),
            size: out.dtype.element_size().unwrap_or(1),
        };
        let v = if r.mixed {
            vec_width(&[ao.size], 4)
        } else {
            vec_width(&[ao.size, oo.size], max_vec(self.functor, a.dtype))
        };
        let Plan { mut p, threads } = plan::<3>(base, out.shape, &[ao, bo], &oo, v)?;
        if p.n == 0 {
            return Ok(());
        }
        p.flags = self.flags;
        p.code = r.code;
        let (mut pa, mut pb, mut po) = (ptr_of(a), ptr_of(b), mut_ptr_of(out));
        let mut args = [arg(&mut pa), arg(&mut pb), arg(&mut po), arg(&mut p)];
        // SAFETY: ew_<tag>(a, b, out, EwParams<3>) walks the output's elements and reads each
        // input at its broadcast offsets, all inside the views.
        unsafe { base.rt.launch(r.f, threads, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

/// A binary kernel of `functor` over `types` (FastGelu / BiasGelu with a bias, two-input
/// Max / Min / Sum / Mean).
pub fn build_functor(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    functor: &'static str,
    types: Types,
) -> EpResult<Box<dyn Kernel>> {
    Ok(Box::new(BinaryKernel::build(
        rt,
        req.node,
        req.opset,
        functor,
        types,
        &types.dtypes(),
        false,
        0,
    )?))
}

/// The binary kernel of `functor` whose module holds `module_types`, loading only `dtypes`.
pub fn build_subset(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    functor: &'static str,
    module_types: Types,
    dtypes: Types,
) -> EpResult<Box<dyn Kernel>> {
    let mut k = BinaryKernel::build(
        rt,
        req.node,
        req.opset,
        functor,
        module_types,
        &dtypes.dtypes(),
        false,
        0,
    )?;
    k.types = dtypes;
    Ok(Box::new(k))
}

fn from_table(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let d = DEFS
        .iter()
        .find(|d| d.op == node.op_type)
        .ok_or_else(|| EpError::unsupported_op("cuda", node, req.opset))?;
    let flags = match d.op {
        "Mod" => (attr_int(node, "fmod")?.unwrap_or(0) != 0) as i64,
        "BitShift" => match attr_string(node, "direction")?.as_deref().unwrap_or("") {
            "LEFT" => 0,
            "RIGHT" => 1,
            other => {
                return Err(EpError::invalid_attribute(
                    node,
                    "direction",
                    format!("must be 'LEFT' or 'RIGHT', got '{other}'"),
                ))
            }
        },
        _ => 0,
    };
    let mut k = BinaryKernel::build(
        rt,
        node,
        req.opset,
        d.functor,
        d.types,
        &d.types.dtypes(),
        d.bool_out,
        flags,
    )?;
    k.shape = d.shape;
    if d.shape == Shape::Legacy && req.opset < 7 && attr_int(node, "broadcast")?.unwrap_or(0) != 0 {
        k.legacy = Some(attr_int(node, "axis")?);
    }
    Ok(Box::new(k))
}

pub fn register(r: &mut Registry) {
    for d in DEFS {
        for &since in d.since {
            r.register("", d.op, since, from_table);
        }
    }
}
