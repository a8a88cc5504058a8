//! Unary element-wise ops: math (Abs .. Atanh, Erf), predicates (IsNaN, IsInf, Not,
//! BitwiseNot), activations (Relu .. Swish, Gelu, com.microsoft Gelu / QuickGelu / FastGelu
//! without bias), Shrink and Clip (bounds from attributes before opset 11, from optional
//! scalar inputs read on the device from 11 on, so no host read is needed).

use super::{binary, plan, vec_width, Fns, Operand, Plan, Source, Types};
use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{DataType, Node};
use std::sync::Arc;

/// What a node's attributes select: the kernel functor and its parameters.
#[derive(Clone, Copy, Debug)]
pub struct Pick {
    pub functor: &'static str,
    pub a: f64,
    pub b: f64,
    pub flags: i64,
}

impl Pick {
    fn plain(functor: &'static str) -> Pick {
        Pick {
            functor,
            a: 0.0,
            b: 0.0,
            flags: 0,
        }
    }
}

/// A float attribute (f32 in ONNX) as the CPU provider reads it: its f32 value widened.
fn fattr(node: &Node, name: &str, default: f32) -> EpResult<f64> {
    Ok(attr_float(node, name)?.unwrap_or(default) as f64)
}

type PickFn = fn(&Node, u64) -> EpResult<Pick>;

/// One unary op: (domain, op, since-versions, functor, dtypes, bool output, attributes).
struct Def {
    domain: &'static str,
    op: &'static str,
    since: &'static [u64],
    functor: &'static str,
    types: Types,
    bool_out: bool,
    pick: Option<PickFn>,
}

const fn def(op: &'static str, since: &'static [u64], functor: &'static str, types: Types) -> Def {
    Def {
        domain: "",
        op,
        since,
        functor,
        types,
        bool_out: false,
        pick: None,
    }
}

const fn with(mut d: Def, pick: PickFn) -> Def {
    d.pick = Some(pick);
    d
}

const fn predicate(mut d: Def) -> Def {
    d.bool_out = true;
    d
}

const fn ms(mut d: Def) -> Def {
    d.domain = "com.microsoft";
    d
}

const F: Types = Types::Floats;

fn alpha(default: f32) -> impl Fn(&Node, &'static str) -> EpResult<Pick> {
    move |node, functor| {
        Ok(Pick {
            a: fattr(node, "alpha", default)?,
            ..Pick::plain(functor)
        })
    }
}

const DEFS: &[Def] = &[
    def("Abs", &[1, 6, 13], "Abs", Types::Numeric),
    def("Neg", &[1, 6, 13], "Neg", Types::Signed),
    def("Sign", &[9, 13], "Sign", Types::Numeric),
    def("Floor", &[1, 6, 13], "Floor", F),
    def("Ceil", &[1, 6, 13], "Ceil", F),
    def("Round", &[11, 22], "Round", F),
    def("Reciprocal", &[1, 6, 13], "Reciprocal", F),
    def("Sqrt", &[1, 6, 13], "Sqrt", F),
    def("Exp", &[1, 6, 13], "Exp", F),
    def("Log", &[1, 6, 13], "Log", F),
    def("Erf", &[9, 13], "Erf", F),
    def("Sin", &[7, 22], "Sin", F),
    def("Cos", &[7, 22], "Cos", F),
    def("Tan", &[7, 22], "Tan", F),
    def("Asin", &[7, 22], "Asin", F),
    def("Acos", &[7, 22], "Acos", F),
    def("Atan", &[7, 22], "Atan", F),
    def("Sinh", &[9, 22], "Sinh", F),
    def("Cosh", &[9, 22], "Cosh", F),
    def("Asinh", &[9, 22], "Asinh", F),
    def("Acosh", &[9, 22], "Acosh", F),
    def("Atanh", &[9, 22], "Atanh", F),
    predicate(def("IsNaN", &[9, 13, 20], "IsNaN", Types::IsNaN)),
    predicate(with(
        def("IsInf", &[10, 20], "IsInf", Types::IsNaN),
        |node, _| {
            let neg = attr_int(node, "detect_negative")?.unwrap_or(1) != 0;
            let pos = attr_int(node, "detect_positive")?.unwrap_or(1) != 0;
            Ok(Pick {
                flags: pos as i64 | ((neg as i64) << 1),
                ..Pick::plain("IsInf")
            })
        },
    )),
    def("Not", &[1], "Not", Types::Bool),
    def("BitwiseNot", &[18], "BitwiseNot", Types::Ints),
    // Activations.
    def("Relu", &[1, 6, 13, 14], "Relu", Types::Signed),
    with(def("LeakyRelu", &[1, 6, 16], "LeakyRelu", F), |n, _| {
        alpha(0.01)(n, "LeakyRelu")
    }),
    with(def("Elu", &[1, 6, 22], "Elu", F), |n, _| {
        alpha(1.0)(n, "Elu")
    }),
    with(def("Selu", &[1, 6, 22], "Selu", F), |n, _| {
        Ok(Pick {
            a: fattr(n, "alpha", 1.673_263_2)?,
            b: fattr(n, "gamma", 1.050_701)?,
            ..Pick::plain("Selu")
        })
    }),
    with(def("Celu", &[12], "Celu", F), |n, _| alpha(1.0)(n, "Celu")),
    def("Sigmoid", &[1, 6, 13], "Sigmoid", F),
    with(def("HardSigmoid", &[1, 6, 22], "HardSigmoid", F), |n, _| {
        Ok(Pick {
            a: fattr(n, "alpha", 0.2)?,
            b: fattr(n, "beta", 0.5)?,
            ..Pick::plain("HardSigmoid")
        })
    }),
    def("HardSwish", &[14, 22], "HardSwish", F),
    def("Softplus", &[1, 22], "Softplus", F),
    def("Softsign", &[1, 22], "Softsign", F),
    def("Tanh", &[1, 6, 13], "Tanh", F),
    with(
        def("Gelu", &[20], "GeluErf", F),
        |n, _| match attr_string(n, "approximate")?.as_deref().unwrap_or("none") {
            "none" => Ok(Pick::plain("GeluErf")),
            "tanh" => Ok(Pick::plain("GeluTanh")),
            other => Err(EpError::invalid_attribute(
                n,
                "approximate",
                format!("must be 'none' or 'tanh', got '{other}'"),
            )),
        },
    ),
    def("Mish", &[18, 22], "Mish", F),
    with(
        def("ThresholdedRelu", &[10, 22], "ThresholdedRelu", F),
        |n, _| alpha(1.0)(n, "ThresholdedRelu"),
    ),
    with(def("Shrink", &[9], "Shrink", Types::Numeric), |n, _| {
        Ok(Pick {
            a: fattr(n, "lambd", 0.5)?,
            b: fattr(n, "bias", 0.0)?,
            ..Pick::plain("Shrink")
        })
    }),
    with(def("Swish", &[24], "Swish", F), |n, _| {
        alpha(1.0)(n, "Swish")
    }),
    ms(def("Gelu", &[1], "GeluErf", F)),
    ms(with(def("QuickGelu", &[1], "Swish", F), |n, _| {
        alpha(1.702)(n, "Swish")
    })),
];

/// Every (functor, dtypes) module the unary ops use.
pub fn modules() -> Vec<crate::compiler::ModuleSpec> {
    let mut seen: Vec<(&str, Types)> = Vec::new();
    for d in DEFS {
        seen.push((d.functor, d.types));
    }
    seen.push(("GeluTanh", F));
    seen.push(("Clip", Types::Numeric));
    seen.sort_by_key(|(f, _)| *f);
    seen.dedup();
    seen.into_iter()
        .map(|(f, t)| super::ew_module(Source::Unary, f, t))
        .collect()
}

/// Clip's bounds: attributes (opset < 11) or optional inputs 1 and 2.
#[derive(Clone, Copy, Debug)]
enum Bounds {
    None,
    Attrs,
    Inputs,
}

pub struct UnaryKernel {
    base: Base,
    fns: Fns,
    types: Types,
    bool_out: bool,
    pick: Pick,
    bounds: Bounds,
}

impl UnaryKernel {
    pub fn build(
        rt: &Arc<CudaRuntime>,
        node: &Node,
        functor: &'static str,
        types: Types,
        bool_out: bool,
        pick: Pick,
    ) -> EpResult<UnaryKernel> {
        let base = Base::new(rt, node);
        let fns = Fns::load(&base, Source::Unary, functor, types, &types.dtypes(), "ew_")?;
        Ok(UnaryKernel {
            base,
            fns,
            types,
            bool_out,
            pick,
            bounds: Bounds::None,
        })
    }

    fn function(&self, dtype: DataType) -> EpResult<crate::runtime::Function> {
        self.fns.get(dtype).ok_or_else(|| {
            self.base.unsupported(
                dtype,
                format!("the CUDA {} takes {}", self.base.op, self.types.describe()),
            )
        })
    }

    /// Clip's bound input `pos` (a one-element tensor of X's dtype), if wired.
    fn bound<'a, 'b>(
        &self,
        inputs: &'b [TensorView<'a>],
        pos: usize,
        x: DataType,
    ) -> EpResult<Option<&'b TensorView<'a>>> {
        if !matches!(self.bounds, Bounds::Inputs) {
            return Ok(None);
        }
        let Some(t) = self.base.input(inputs, pos) else {
            return Ok(None);
        };
        let what = if pos == 1 { "min" } else { "max" };
        self.base.same_dtype(x, t.dtype, what)?;
        if t.numel() != 1 {
            return Err(self.base.err(format!(
                "Clip bounds must be scalars (one element); {what} has shape {:?}",
                t.shape
            )));
        }
        Ok(Some(t))
    }
}

impl Kernel for UnaryKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        self.function(x.dtype)?;
        self.bound(inputs, 1, x.dtype)?;
        self.bound(inputs, 2, x.dtype)?;
        check_view_rank(&self.base, x.shape)?;
        let dtype = if self.bool_out {
            DataType::Bool
        } else {
            x.dtype
        };
        Ok(vec![(dtype, x.shape.to_vec())])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.expect_outputs(outputs, &self.output_types(inputs)?)?;
        let x = base.req(inputs, 0)?;
        let f = self.function(x.dtype)?;
        let out = &outputs[0];
        let xo = Operand::of(x);
        let oo = Operand {
            shape: out.shape,
            strides: out.strides.to_vec(),
            ptr: mut_ptr_of(out),
            size: out.dtype.element_size().unwrap_or(1),
        };
        let v = vec_width(&[xo.size, oo.size], 16);
        let Plan { mut p, threads } = plan::<2>(base, out.shape, &[xo], &oo, v)?.flat_or_strided(1);
        if p.n == 0 {
            return Ok(());
        }
        p.a = self.pick.a;
        p.b = self.pick.b;
        p.flags = self.pick.flags;
        p.code = x.dtype.onnx_code();
        let (mut lo, mut hi): (u64, u64) = (0, 0);
        if let Bounds::Inputs = self.bounds {
            lo = self.bound(inputs, 1, x.dtype)?.map_or(0, ptr_of);
            hi = self.bound(inputs, 2, x.dtype)?.map_or(0, ptr_of);
        }
        let (mut px, mut py) = (ptr_of(x), mut_ptr_of(out));
        let mut args = [
            arg(&mut px),
            arg(&mut py),
            arg(&mut lo),
            arg(&mut hi),
            arg(&mut p),
        ];
        // SAFETY: ew_<tag>(x, y, lo, hi, EwParams<2>) reads x and the bounds and writes y
        // inside their views (the plan's walk covers exactly the output's elements).
        unsafe { base.rt.launch(f, threads, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build_def(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, d: &Def) -> EpResult<Box<dyn Kernel>> {
    let pick = match d.pick {
        Some(f) => f(req.node, req.opset)?,
        None => Pick::plain(d.functor),
    };
    Ok(Box::new(UnaryKernel::build(
        rt,
        req.node,
        pick.functor,
        d.types,
        d.bool_out,
        pick,
    )?))
}

/// The factory of every op of `DEFS`: finds the node's entry by domain and op.
fn from_table(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let domain = node.normalized_domain();
    let d = DEFS
        .iter()
        .find(|d| d.op == node.op_type && d.domain == domain)
        .ok_or_else(|| EpError::unsupported_op("cuda", node, req.opset))?;
    build_def(rt, req, d)
}

fn clip(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let mut pick = Pick::plain("Clip");
    let bounds = if req.opset < 11 {
        // Opsets 1 and 6: attributes (absent means unbounded).
        if let Some(lo) = attr_float(node, "min")? {
            pick.a = lo as f64;
            pick.flags |= 1;
        }
        if let Some(hi) = attr_float(node, "max")? {
            pick.b = hi as f64;
            pick.flags |= 2;
        }
        Bounds::Attrs
    } else {
        Bounds::Inputs
    };
    let mut k = UnaryKernel::build(rt, node, "Clip", Types::Numeric, false, pick)?;
    k.bounds = bounds;
    Ok(Box::new(k))
}

/// com.microsoft FastGelu (tanh) with an optional bias, BiasGelu (erf): gelu(X + bias).
fn fast_gelu(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    bias_gelu_or_plain(rt, req, "BiasGeluTanh", "GeluTanh")
}

fn bias_gelu(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    bias_gelu_or_plain(rt, req, "BiasGeluErf", "GeluErf")
}

fn bias_gelu_or_plain(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
    with_bias: &'static str,
    plain: &'static str,
) -> EpResult<Box<dyn Kernel>> {
    if req.node.inputs.get(1).is_some_and(Option::is_some) {
        return binary::build_functor(rt, req, with_bias, F);
    }
    Ok(Box::new(UnaryKernel::build(
        rt,
        req.node,
        plain,
        F,
        false,
        Pick::plain(plain),
    )?))
}

pub fn register(r: &mut Registry) {
    for d in DEFS {
        for &since in d.since {
            r.register(d.domain, d.op, since, from_table);
        }
    }
    for since in [1, 6, 11, 12, 13] {
        r.register("", "Clip", since, clip);
    }
    r.register("com.microsoft", "FastGelu", 1, fast_gelu);
    r.register("com.microsoft", "BiasGelu", 1, bias_gelu);
}
