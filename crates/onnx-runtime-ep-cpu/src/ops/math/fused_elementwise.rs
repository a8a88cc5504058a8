//! `FusedElementwise` in the runtime's own domain ([`crate::INTERNAL_DOMAIN`]): a chain of
//! element-wise ops that the session's optimizer collapsed into one node (for an accelerator,
//! where one launch instead of ten is what makes small models fast). This CPU kernel is the
//! fallback when the device refuses the node and the reference the device kernels are tested
//! against: an interpreter over the node's program with numpy broadcasting.
//!
//! # The program
//!
//! Attribute `program` (a string) holds one instruction per line, in SSA form:
//!
//! ```text
//! t0 = Div in0 1.4142135381698608
//! t1 = Erf t0
//! t2 = Add t1 1.0
//! t3 = Mul in0 t2
//! t4 = Mul t3 0.5
//! out t4
//! ```
//!
//! Operands are `in<k>` (node input `k`), `t<k>` (a temporary defined on an earlier line) or a
//! float literal (Rust's `f64` syntax: `0.5`, `1e-5`, `inf`, `-inf`, `NaN`). Each temporary is
//! defined once. `out <operand>` lines name the node's outputs in order. Blank lines and lines
//! starting with `#` are ignored. Ops and their operands are those of [`Op`]; op attributes
//! (LeakyRelu's alpha, Clip's bounds, ...) are trailing operands, literals in practice.
//!
//! Every input has the program's dtype (float, double, float16 or bfloat16); the inputs
//! broadcast together (numpy rules) and every output has that broadcast shape and the dtype.
//! Values compute in f32 (f64 for double): half types are rounded once, at the outputs. Each
//! op has the semantics of the CPU provider's standalone kernel (the same f32 approximations
//! of exp, erf, tanh and sigmoid).
//!
//! Attribute `dtype` (int, the ONNX TensorProto code) names the dtype the optimizer saw; the
//! CPU kernel takes any float dtype, device kernels compile for that one.

use super::num::{FloatElem, Real};
use super::vecmath;
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{CpuRegistry, Tensor, Value};
use half::{bf16, f16};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use rayon::prelude::*;
use std::collections::HashMap;
use std::fmt::Write as _;

/// The op's name in [`crate::INTERNAL_DOMAIN`].
pub const OP: &str = "FusedElementwise";
/// Most inputs a program reads (device kernels pass their addresses by value).
pub const MAX_INPUTS: usize = 16;
/// Most outputs a program writes.
pub const MAX_OUTPUTS: usize = 8;
/// Most instructions in a program.
pub const MAX_INSTRS: usize = 96;

macro_rules! ops {
    ($($name:ident $arity:literal),* $(,)?) => {
        /// The instructions of a program, with their operand counts (trailing operands are the
        /// op's attributes).
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub enum Op { $($name),* }

        impl Op {
            /// Every op.
            pub const ALL: &'static [Op] = &[$(Op::$name),*];

            /// The name programs spell it with.
            pub fn name(self) -> &'static str {
                match self { $(Op::$name => stringify!($name)),* }
            }

            /// How many operands it takes.
            pub fn arity(self) -> usize {
                match self { $(Op::$name => $arity),* }
            }
        }
    };
}

ops! {
    // x
    Relu 1, Sigmoid 1, Tanh 1, Exp 1, Log 1, Erf 1, Neg 1, Abs 1, Sqrt 1, Reciprocal 1,
    Softplus 1, Softsign 1, Mish 1, HardSwish 1, Floor 1, Ceil 1, Round 1, Sign 1, Sin 1, Cos 1,
    // 0.5 x (1 + erf(x / sqrt 2)); the tanh approximation
    Gelu 1, GeluTanh 1,
    // x alpha
    LeakyRelu 2, Elu 2, Celu 2, ThresholdedRelu 2,
    // x * sigmoid(alpha x): Swish, com.microsoft QuickGelu
    Swish 2,
    // x alpha gamma
    Selu 3,
    // x alpha beta
    HardSigmoid 3,
    // x lo hi: (x < lo ? lo : x), then (> hi ? hi : .); NaN stays NaN
    Clip 3,
    // a b
    Add 2, Sub 2, Mul 2, Div 2, Pow 2, Max 2, Min 2,
    // x slope: x < 0 ? x * slope : x
    PRelu 2,
}

impl Op {
    pub fn from_name(name: &str) -> Option<Op> {
        Op::ALL.iter().copied().find(|o| o.name() == name)
    }
}

/// An instruction operand.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Operand {
    /// Node input `k`.
    Input(usize),
    /// Temporary `k` (defined by an earlier instruction).
    Temp(usize),
    /// A literal, converted to the compute type where it is used.
    Lit(f64),
}

impl std::fmt::Display for Operand {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Operand::Input(k) => write!(f, "in{k}"),
            Operand::Temp(k) => write!(f, "t{k}"),
            // `{:?}` of an f64 round-trips through `str::parse` (`1.0`, `1e-5`, `inf`, `NaN`).
            Operand::Lit(v) => write!(f, "{v:?}"),
        }
    }
}

/// `dst = op args...`.
#[derive(Clone, Debug, PartialEq)]
pub struct Instr {
    pub dst: usize,
    pub op: Op,
    pub args: Vec<Operand>,
}

/// A parsed program: temporaries are numbered densely in definition order.
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Program {
    pub instrs: Vec<Instr>,
    pub outputs: Vec<Operand>,
}

fn parse_operand(tok: &str, temps: &HashMap<usize, usize>) -> Result<Operand, String> {
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    if let Some(k) = tok.strip_prefix("in").filter(|s| digits(s)) {
        let k: usize = k.parse().map_err(|_| format!("bad input '{tok}'"))?;
        return Ok(Operand::Input(k));
    }
    if let Some(k) = tok.strip_prefix('t').filter(|s| digits(s)) {
        let k: usize = k.parse().map_err(|_| format!("bad temporary '{tok}'"))?;
        return temps
            .get(&k)
            .map(|&d| Operand::Temp(d))
            .ok_or_else(|| format!("temporary '{tok}' is read before it is defined"));
    }
    tok.parse::<f64>()
        .map(Operand::Lit)
        .map_err(|_| format!("'{tok}' is not an input (in<k>), a temporary (t<k>) or a number"))
}

impl Program {
    /// Parses and checks a program (see the module docs for the syntax).
    pub fn parse(text: &str) -> Result<Program, String> {
        let mut temps: HashMap<usize, usize> = HashMap::new();
        let mut prog = Program::default();
        for (no, raw) in text.lines().enumerate() {
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |m: String| format!("line {}: {m} (in '{line}')", no + 1);
            let toks: Vec<&str> = line.split_whitespace().collect();
            if toks[0] == "out" {
                if toks.len() != 2 {
                    return Err(at("'out' takes one operand".into()));
                }
                prog.outputs
                    .push(parse_operand(toks[1], &temps).map_err(at)?);
                continue;
            }
            if !prog.outputs.is_empty() {
                return Err(at("instructions must come before the 'out' lines".into()));
            }
            if toks.len() < 3 || toks[1] != "=" {
                return Err(at(
                    "expected 't<k> = <Op> <operands>' or 'out <operand>'".into()
                ));
            }
            let k = toks[0]
                .strip_prefix('t')
                .and_then(|s| s.parse::<usize>().ok())
                .ok_or_else(|| at(format!("'{}' is not a temporary (t<k>)", toks[0])))?;
            let op = Op::from_name(toks[2]).ok_or_else(|| {
                at(format!(
                    "unknown op '{}'; known: {}",
                    toks[2],
                    Op::ALL
                        .iter()
                        .map(|o| o.name())
                        .collect::<Vec<_>>()
                        .join(", ")
                ))
            })?;
            let args: Vec<Operand> = toks[3..]
                .iter()
                .map(|t| parse_operand(t, &temps))
                .collect::<Result<_, _>>()
                .map_err(at)?;
            if args.len() != op.arity() {
                return Err(at(format!(
                    "{} takes {} operand(s), got {}",
                    op.name(),
                    op.arity(),
                    args.len()
                )));
            }
            let dst = temps.len();
            if temps.insert(k, dst).is_some() {
                return Err(at(format!("t{k} is defined twice")));
            }
            prog.instrs.push(Instr { dst, op, args });
        }
        if prog.outputs.is_empty() {
            return Err("the program has no 'out' line".into());
        }
        if prog.instrs.len() > MAX_INSTRS {
            return Err(format!(
                "the program has {} instructions; at most {MAX_INSTRS} are supported",
                prog.instrs.len()
            ));
        }
        if prog.outputs.len() > MAX_OUTPUTS {
            return Err(format!(
                "the program has {} outputs; at most {MAX_OUTPUTS} are supported",
                prog.outputs.len()
            ));
        }
        if prog.n_inputs() > MAX_INPUTS {
            return Err(format!(
                "the program reads {} inputs; at most {MAX_INPUTS} are supported",
                prog.n_inputs()
            ));
        }
        Ok(prog)
    }

    /// The text form ([`Program::parse`] reads it back).
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for i in &self.instrs {
            let _ = write!(s, "t{} = {}", i.dst, i.op.name());
            for a in &i.args {
                let _ = write!(s, " {a}");
            }
            s.push('\n');
        }
        for o in &self.outputs {
            let _ = writeln!(s, "out {o}");
        }
        s
    }

    /// How many node inputs the program reads (one past the highest `in<k>`).
    pub fn n_inputs(&self) -> usize {
        let all = self
            .instrs
            .iter()
            .flat_map(|i| i.args.iter())
            .chain(&self.outputs);
        all.filter_map(|o| match o {
            Operand::Input(k) => Some(k + 1),
            _ => None,
        })
        .max()
        .unwrap_or(0)
    }

    pub fn n_temps(&self) -> usize {
        self.instrs.len()
    }
}

// ---- the interpreter ----

/// The compute types: f32 takes the CPU's vectorizable approximations, as the standalone
/// kernels do; f64 the exact functions.
trait Lane: Real {
    fn l_exp(self) -> Self;
    fn l_erf(self) -> Self;
    fn l_tanh(self) -> Self;
    fn l_sigmoid(self) -> Self;
}

impl Lane for f32 {
    #[inline(always)]
    fn l_exp(self) -> f32 {
        vecmath::exp(self)
    }
    #[inline(always)]
    fn l_erf(self) -> f32 {
        vecmath::erf(self)
    }
    #[inline(always)]
    fn l_tanh(self) -> f32 {
        vecmath::tanh(self)
    }
    #[inline(always)]
    fn l_sigmoid(self) -> f32 {
        vecmath::sigmoid(self)
    }
}

impl Lane for f64 {
    #[inline(always)]
    fn l_exp(self) -> f64 {
        self.exp()
    }
    #[inline(always)]
    fn l_erf(self) -> f64 {
        Real::erf(self)
    }
    #[inline(always)]
    fn l_tanh(self) -> f64 {
        self.tanh()
    }
    #[inline(always)]
    fn l_sigmoid(self) -> f64 {
        sigmoid(self)
    }
}

#[inline(always)]
fn sigmoid<R: Real>(x: R) -> R {
    if x >= R::zero() {
        R::one() / (R::one() + (-x).exp())
    } else {
        let e = x.exp();
        e / (R::one() + e)
    }
}

#[inline(always)]
fn softplus<R: Real>(x: R) -> R {
    if x > R::zero() {
        x + (-x).exp().ln_1p()
    } else {
        x.exp().ln_1p()
    }
}

/// Rounds halves to even (numpy.round), as the standalone Round does.
#[inline(always)]
fn round_half_even<R: Real>(x: R) -> R {
    let r = x.round();
    if (x - x.trunc()).abs() == R::cst(0.5) {
        let half = r / R::cst(2.0);
        if half.trunc() != half {
            return r - x.signum();
        }
    }
    r
}

#[inline(always)]
fn map1<R: Copy>(d: &mut [R], a: &[R], f: impl Fn(R) -> R) {
    vecmath::with_avx2(
        #[inline(always)]
        || {
            for (o, &x) in d.iter_mut().zip(a) {
                *o = f(x);
            }
        },
    )
}

#[inline(always)]
fn map2<R: Copy>(d: &mut [R], a: &[R], b: &[R], f: impl Fn(R, R) -> R) {
    vecmath::with_avx2(
        #[inline(always)]
        || {
            for ((o, &x), &y) in d.iter_mut().zip(a).zip(b) {
                *o = f(x, y);
            }
        },
    )
}

#[inline(always)]
fn map3<R: Copy>(d: &mut [R], a: &[R], b: &[R], c: &[R], f: impl Fn(R, R, R) -> R) {
    for (((o, &x), &y), &z) in d.iter_mut().zip(a).zip(b).zip(c) {
        *o = f(x, y, z);
    }
}

/// One instruction over a block: `d = op(s...)`.
fn eval<R: Lane>(op: Op, d: &mut [R], s: &[&[R]]) {
    let z = R::zero();
    let one = R::one();
    match op {
        Op::Relu => map1(d, s[0], |x| if x < z { z } else { x }),
        Op::Sigmoid => map1(d, s[0], |x| x.l_sigmoid()),
        Op::Tanh => map1(d, s[0], |x| x.l_tanh()),
        Op::Exp => map1(d, s[0], |x| x.l_exp()),
        Op::Log => map1(d, s[0], |x| x.ln()),
        Op::Erf => map1(d, s[0], |x| x.l_erf()),
        Op::Neg => map1(d, s[0], |x| -x),
        Op::Abs => map1(d, s[0], |x| x.abs()),
        Op::Sqrt => map1(d, s[0], |x| x.sqrt()),
        Op::Reciprocal => map1(d, s[0], |x| x.recip()),
        Op::Softplus => map1(d, s[0], softplus),
        Op::Softsign => map1(d, s[0], |x| x / (one + x.abs())),
        Op::Mish => map1(d, s[0], |x| x * softplus(x).tanh()),
        Op::HardSwish => map1(d, s[0], |x| {
            let t = x / R::cst(6.0) + R::cst(0.5);
            x * t.max(z).min(one)
        }),
        Op::Floor => map1(d, s[0], |x| x.floor()),
        Op::Ceil => map1(d, s[0], |x| x.ceil()),
        Op::Round => map1(d, s[0], round_half_even),
        Op::Sign => map1(d, s[0], |x| {
            if x > z {
                one
            } else if x < z {
                -one
            } else {
                x
            }
        }),
        Op::Sin => map1(d, s[0], |x| x.sin()),
        Op::Cos => map1(d, s[0], |x| x.cos()),
        Op::Gelu => map1(d, s[0], |x| {
            R::cst(0.5) * x * (one + (x * R::cst(std::f64::consts::FRAC_1_SQRT_2)).l_erf())
        }),
        Op::GeluTanh => map1(d, s[0], |x| {
            let k = R::cst((2.0 / std::f64::consts::PI).sqrt());
            R::cst(0.5) * x * (one + (k * (x + R::cst(0.044715) * x * x * x)).l_tanh())
        }),
        Op::LeakyRelu => map2(d, s[0], s[1], |x, a| if x < z { x * a } else { x }),
        Op::Elu => map2(d, s[0], s[1], |x, a| if x < z { a * x.exp_m1() } else { x }),
        Op::Celu => map2(d, s[0], s[1], |x, a| {
            x.max(z) + (a * (x / a).exp_m1()).min(z)
        }),
        Op::ThresholdedRelu => map2(d, s[0], s[1], |x, a| if x > a { x } else { z }),
        Op::Swish => map2(d, s[0], s[1], |x, a| x * (a * x).l_sigmoid()),
        Op::Selu => map3(d, s[0], s[1], s[2], |x, a, g| {
            if x > z {
                g * x
            } else {
                g * (a * x.exp() - a)
            }
        }),
        Op::HardSigmoid => map3(d, s[0], s[1], s[2], |x, a, b| (a * x + b).max(z).min(one)),
        Op::Clip => map3(d, s[0], s[1], s[2], |x, lo, hi| {
            let v = if x < lo { lo } else { x };
            if v > hi {
                hi
            } else {
                v
            }
        }),
        Op::Add => map2(d, s[0], s[1], |a, b| a + b),
        Op::Sub => map2(d, s[0], s[1], |a, b| a - b),
        Op::Mul => map2(d, s[0], s[1], |a, b| a * b),
        Op::Div => map2(d, s[0], s[1], |a, b| a / b),
        Op::Pow => map2(d, s[0], s[1], |a, b| a.powf(b)),
        // NaN propagates (numpy.maximum / numpy.minimum), as the standalone Max and Min.
        Op::Max => map2(
            d,
            s[0],
            s[1],
            |a, b| if a > b || a.is_nan() { a } else { b },
        ),
        Op::Min => map2(
            d,
            s[0],
            s[1],
            |a, b| if a < b || a.is_nan() { a } else { b },
        ),
        Op::PRelu => map2(d, s[0], s[1], |x, a| if x < z { x * a } else { x }),
    }
}

/// Elements per register block, and per parallel task.
const BLOCK: usize = 512;
const TASK: usize = 64 * BLOCK;

/// The program compiled to register slots: inputs first, then literals, then temporaries.
#[derive(Clone, Debug)]
struct Compiled {
    n_inputs: usize,
    literals: Vec<f64>,
    /// (op, destination slot, source slots).
    code: Vec<(Op, usize, Vec<usize>)>,
    outputs: Vec<usize>,
    slots: usize,
}

impl Compiled {
    fn new(p: &Program, n_inputs: usize) -> Compiled {
        let mut literals: Vec<f64> = Vec::new();
        let lit_slot = |v: f64, literals: &mut Vec<f64>| -> usize {
            match literals.iter().position(|l| l.to_bits() == v.to_bits()) {
                Some(i) => i,
                None => {
                    literals.push(v);
                    literals.len() - 1
                }
            }
        };
        // Literal slots are numbered after the inputs; temporaries after every literal, so
        // collect the literals first.
        for o in p
            .instrs
            .iter()
            .flat_map(|i| i.args.iter())
            .chain(&p.outputs)
        {
            if let Operand::Lit(v) = o {
                lit_slot(*v, &mut literals);
            }
        }
        let temp0 = n_inputs + literals.len();
        let slot = |o: &Operand, literals: &mut Vec<f64>| match *o {
            Operand::Input(k) => k,
            Operand::Lit(v) => n_inputs + lit_slot(v, literals),
            Operand::Temp(t) => temp0 + t,
        };
        let code = p
            .instrs
            .iter()
            .map(|i| {
                let srcs = i.args.iter().map(|a| slot(a, &mut literals)).collect();
                (i.op, temp0 + i.dst, srcs)
            })
            .collect();
        let outputs = p.outputs.iter().map(|o| slot(o, &mut literals)).collect();
        Compiled {
            n_inputs,
            slots: temp0 + p.n_temps(),
            literals,
            code,
            outputs,
        }
    }
}

/// How an input is read along the output's elements.
enum Access<'a, T> {
    /// One element for all.
    Scalar(T),
    /// Contiguous with the output's shape.
    Full(&'a [T]),
    /// Broadcast: element strides along the output's axes.
    Strided(&'a [T], Vec<usize>),
}

/// Fills the registers of every strided input with its elements `start..start + len` at once.
// `e` indexes one register per input.
#[allow(clippy::needless_range_loop)]
fn gather_strided<T: FloatElem>(
    out_shape: &[usize],
    start: usize,
    inputs: &[(&[T], &[usize], usize)],
    regs: &mut [Vec<T::C>],
    len: usize,
) {
    let rank = out_shape.len();
    let mut idx = vec![0usize; rank];
    let mut rem = start;
    for k in (0..rank).rev() {
        idx[k] = rem % out_shape[k];
        rem /= out_shape[k];
    }
    let mut offs: Vec<usize> = inputs
        .iter()
        .map(|(_, st, _)| idx.iter().zip(st.iter()).map(|(i, s)| i * s).sum())
        .collect();
    for e in 0..len {
        for (j, (data, _, slot)) in inputs.iter().enumerate() {
            regs[*slot][e] = data[offs[j]].up();
        }
        // Advance the multi-index (and every offset) by one element.
        for k in (0..rank).rev() {
            idx[k] += 1;
            if idx[k] < out_shape[k] {
                for (j, (_, st, _)) in inputs.iter().enumerate() {
                    offs[j] += st[k];
                }
                break;
            }
            for (j, (_, st, _)) in inputs.iter().enumerate() {
                offs[j] -= st[k] * (out_shape[k] - 1);
            }
            idx[k] = 0;
        }
    }
}

/// Runs the program over elements `start..` of the outputs, `outs[k]` being output k's part.
fn run_task<T: FloatElem>(
    c: &Compiled,
    out_shape: &[usize],
    access: &[Access<'_, T>],
    start: usize,
    outs: &mut [&mut [T]],
) where
    T::C: Lane,
{
    let total = outs.first().map_or(0, |o| o.len());
    let mut regs: Vec<Vec<T::C>> = vec![vec![T::C::cst(0.0); BLOCK]; c.slots];
    for (i, &v) in c.literals.iter().enumerate() {
        regs[c.n_inputs + i].fill(T::C::cst(v));
    }
    for (k, a) in access.iter().enumerate() {
        if let Access::Scalar(v) = a {
            regs[k].fill(v.up());
        }
    }
    let strided: Vec<(&[T], &[usize], usize)> = access
        .iter()
        .enumerate()
        .filter_map(|(k, a)| match a {
            Access::Strided(d, st) => Some((*d, st.as_slice(), k)),
            _ => None,
        })
        .collect();
    let mut b0 = 0;
    while b0 < total {
        let len = BLOCK.min(total - b0);
        let at = start + b0;
        for (k, a) in access.iter().enumerate() {
            if let Access::Full(d) = a {
                for (r, x) in regs[k][..len].iter_mut().zip(&d[at..at + len]) {
                    *r = x.up();
                }
            }
        }
        if !strided.is_empty() {
            gather_strided(out_shape, at, &strided, &mut regs, len);
        }
        for (op, dst, srcs) in &c.code {
            let mut d = std::mem::take(&mut regs[*dst]);
            {
                let s: Vec<&[T::C]> = srcs.iter().map(|&j| &regs[j][..len]).collect();
                eval(*op, &mut d[..len], &s);
            }
            regs[*dst] = d;
        }
        for (o, &slot) in outs.iter_mut().zip(&c.outputs) {
            for (y, &r) in o[b0..b0 + len].iter_mut().zip(&regs[slot][..len]) {
                *y = T::down(r);
            }
        }
        b0 += len;
    }
}

fn run_typed<T: FloatElem>(
    desc: &str,
    c: &Compiled,
    inputs: &[&Tensor],
    n_out: usize,
) -> Result<Vec<Value>, EpError>
where
    T::C: Lane,
{
    let shapes: Vec<&[usize]> = inputs.iter().map(|t| t.shape()).collect();
    let out_shape = crate::shape::broadcast_shapes(desc, &shapes)?;
    let n: usize = out_shape.iter().product();
    let access: Vec<Access<'_, T>> = inputs
        .iter()
        .map(|t| {
            let d = t.data::<T>();
            if t.numel() == 1 {
                Access::Scalar(d[0])
            } else if t.numel() == n {
                Access::Full(d)
            } else {
                Access::Strided(d, crate::shape::broadcast_strides(t.shape(), &out_shape))
            }
        })
        .collect();
    let dtype = inputs[0].dtype();
    let mut outs: Vec<Tensor> = (0..n_out)
        .map(|_| Tensor::zeros(dtype, out_shape.clone()))
        .collect();
    if n > 0 {
        let ntasks = n.div_ceil(TASK);
        let mut per_task: Vec<Vec<&mut [T]>> =
            (0..ntasks).map(|_| Vec::with_capacity(n_out)).collect();
        for o in outs.iter_mut() {
            for (i, chunk) in o.data_mut::<T>().chunks_mut(TASK).enumerate() {
                per_task[i].push(chunk);
            }
        }
        let body = |(i, mut parts): (usize, Vec<&mut [T]>)| {
            run_task(c, &out_shape, &access, i * TASK, &mut parts)
        };
        if ntasks > 1 {
            per_task.into_par_iter().enumerate().for_each(body);
        } else {
            per_task.into_iter().enumerate().for_each(body);
        }
    }
    Ok(outs.into_iter().map(Value::Tensor).collect())
}

fn invalid(desc: &str, message: String) -> EpError {
    EpError::InvalidInput {
        node: desc.to_string(),
        message,
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node;
    let desc = node.describe();
    let text = crate::attrs::opt_string(node, "program")?.ok_or_else(|| {
        EpError::invalid_attribute(node, "program", "the program attribute is required")
    })?;
    let prog = Program::parse(&text).map_err(|e| EpError::invalid_attribute(node, "program", e))?;
    let n_inputs = node.inputs.len();
    if prog.n_inputs() > n_inputs {
        return Err(EpError::invalid_attribute(
            node,
            "program",
            format!(
                "the program reads in{} but the node has {n_inputs} input(s)",
                prog.n_inputs() - 1
            ),
        ));
    }
    if n_inputs == 0 {
        return Err(invalid(&desc, format!("{OP} needs at least one input")));
    }
    if prog.outputs.len() != node.outputs.len() {
        return Err(EpError::invalid_attribute(
            node,
            "program",
            format!(
                "the program has {} 'out' line(s) but the node has {} output(s)",
                prog.outputs.len(),
                node.outputs.len()
            ),
        ));
    }
    let compiled = Compiled::new(&prog, n_inputs);
    let n_out = prog.outputs.len();
    Ok(kernel_fn(move |inputs| {
        let ts: Vec<&Tensor> = (0..n_inputs)
            .map(|i| tensor_input(&desc, inputs, i))
            .collect::<Result<_, _>>()?;
        let dtype = ts[0].dtype();
        if let Some(t) = ts.iter().find(|t| t.dtype() != dtype) {
            return Err(invalid(
                &desc,
                format!(
                    "every input must have one dtype, got {dtype} and {}",
                    t.dtype()
                ),
            ));
        }
        match dtype {
            DataType::Float32 => run_typed::<f32>(&desc, &compiled, &ts, n_out),
            DataType::Float64 => run_typed::<f64>(&desc, &compiled, &ts, n_out),
            DataType::Float16 => run_typed::<f16>(&desc, &compiled, &ts, n_out),
            DataType::BFloat16 => run_typed::<bf16>(&desc, &compiled, &ts, n_out),
            d => Err(EpError::UnsupportedDtype {
                node: desc.clone(),
                op: OP.into(),
                dtype: d,
                detail: "FusedElementwise computes float, double, float16 and bfloat16".into(),
                hint: "run the graph with optimization below 'all' to keep the unfused nodes"
                    .into(),
            }),
        }
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register(crate::INTERNAL_DOMAIN, OP, 1, build);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::math::testutil::*;
    use onnx_runtime_ir::{Attribute, Node, NodeId, ValueId};

    type MakeTensor = fn(&[usize], &[f64]) -> Tensor;
    /// (standalone op, fused instruction, the standalone op's attributes).
    type UnaryCase = (&'static str, &'static str, Vec<(&'static str, Attribute)>);

    fn fused(program: &str, n_in: usize, n_out: usize) -> Node {
        let mut n = Node::new(
            NodeId(0),
            OP,
            (0..n_in).map(|i| Some(ValueId(i))).collect(),
            (0..n_out).map(|i| ValueId(100 + i)).collect(),
        )
        .with_domain(crate::INTERNAL_DOMAIN);
        n.attributes
            .insert("program".into(), Attribute::String(program.into()));
        n
    }

    fn run(program: &str, n_out: usize, inputs: &[Tensor]) -> Result<Vec<Tensor>, EpError> {
        let node = fused(program, inputs.len(), n_out);
        let kernel = build(&BuildContext::new(&node, 1))?;
        let values: Vec<Value> = inputs.iter().cloned().map(Value::Tensor).collect();
        let refs: Vec<Option<&Value>> = values.iter().map(Some).collect();
        Ok(kernel
            .run(&refs)?
            .into_iter()
            .map(|v| v.into_tensor().unwrap())
            .collect())
    }

    /// Deterministic values in [-3, 3).
    fn vals(n: usize, seed: u64) -> Vec<f64> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                ((s >> 11) as f64 / (1u64 << 53) as f64) * 6.0 - 3.0
            })
            .collect()
    }

    /// GELU with the f32 rounding of sqrt(2) the programs carry.
    fn gelu(x: f64) -> f64 {
        0.5 * x * (1.0 + libm::erf(x / 1.4142135381698608))
    }

    #[test]
    fn programs_round_trip_through_text() {
        let text = "t0 = Div in0 1.4142135381698608\nt1 = Erf t0\nt2 = Add t1 1.0\n\
                    t3 = Mul in0 t2\nt4 = Clip t3 -inf 6.0\nt5 = Mul t4 1e-5\nout t5\nout t1\n";
        let p = Program::parse(text).unwrap();
        assert_eq!(p.instrs.len(), 6);
        assert_eq!(p.n_inputs(), 1);
        assert_eq!(p.to_text(), text);
        assert_eq!(Program::parse(&p.to_text()).unwrap(), p);
        let nan = Program::parse("t0 = Max in1 NaN\nout t0").unwrap();
        assert!(matches!(nan.instrs[0].args[1], Operand::Lit(v) if v.is_nan()));
        assert_eq!(nan.n_inputs(), 2);
    }

    #[test]
    fn bad_programs_are_errors_naming_the_line() {
        for (text, want) in [
            ("t0 = Frobnicate in0\nout t0", "unknown op"),
            ("t0 = Add in0\nout t0", "takes 2 operand"),
            ("t0 = Relu t1\nout t0", "before it is defined"),
            ("t0 = Relu in0\nt0 = Relu in0\nout t0", "defined twice"),
            ("t0 = Relu in0", "no 'out'"),
            ("t0 = Relu zz\nout t0", "not an input"),
            ("out in0\nt0 = Relu in0", "before the 'out'"),
        ] {
            let err = Program::parse(text).unwrap_err();
            assert!(err.contains(want), "{text:?}: {err}");
        }
        // The node must have the inputs and outputs the program names.
        let t = f32s(&[2], &[1.0, 2.0]);
        let err = run("t0 = Add in0 in1\nout t0", 1, std::slice::from_ref(&t)).unwrap_err();
        assert!(err.to_string().contains("in1"), "{err}");
        let err = run("t0 = Relu in0\nout t0", 2, std::slice::from_ref(&t)).unwrap_err();
        assert!(err.to_string().contains("output"), "{err}");
        // Shapes that do not broadcast.
        let u = f32s(&[3], &[1.0, 2.0, 3.0]);
        let err = run("t0 = Add in0 in1\nout t0", 1, &[t, u]).unwrap_err();
        assert!(err.to_string().contains("broadcast"), "{err}");
    }

    /// GELU written out, with a broadcast bias added first, against f64 math; every dtype.
    #[test]
    fn gelu_chain_with_broadcast_bias_matches_float64() {
        let prog = "t0 = Add in0 in1\nt1 = Div t0 1.4142135381698608\nt2 = Erf t1\n\
                    t3 = Add t2 1.0\nt4 = Mul t0 t3\nt5 = Mul t4 0.5\nout t5\nout t0\n";
        let (r, c) = (70, 33);
        let x = vals(r * c, 1);
        let b = vals(c, 2);
        let cases: [(MakeTensor, f64); 4] =
            [(f32s, 1e-5), (f64s, 1e-12), (f16s, 4e-3), (bf16s, 3e-2)];
        for (mk, tol) in cases {
            let xt = mk(&[r, c], &x);
            let bt = mk(&[c], &b);
            // The reference from the rounded inputs.
            let xr = xt.to_f64_vec().unwrap();
            let br = bt.to_f64_vec().unwrap();
            let pre_r: Vec<f64> = (0..r * c).map(|i| xr[i] + br[i % c]).collect();
            let want_r: Vec<f64> = pre_r.iter().map(|&v| gelu(v)).collect();
            let out = run(prog, 2, &[xt, bt]).unwrap();
            assert_eq!(out[0].dtype(), out[1].dtype());
            assert_close(&out[0], &want_r, &[r, c], tol, tol);
            assert_close(&out[1], &pre_r, &[r, c], tol, tol);
        }
    }

    /// Every op against the standalone CPU kernel of the op it stands for, on a strided
    /// broadcast ([4, 1, 5] with [3, 1]) for the binary ones.
    #[test]
    fn each_op_matches_the_standalone_kernel() {
        let x = vals(60, 3);
        let y: Vec<f64> = vals(60, 4).iter().map(|v| v.abs() + 0.25).collect();
        let xt = f32s(&[3, 4, 5], &x);
        let pos = f32s(&[3, 4, 5], &y);
        let unary: &[UnaryCase] = &[
            ("Relu", "Relu in0", vec![]),
            ("Sigmoid", "Sigmoid in0", vec![]),
            ("Tanh", "Tanh in0", vec![]),
            ("Exp", "Exp in0", vec![]),
            ("Erf", "Erf in0", vec![]),
            ("Neg", "Neg in0", vec![]),
            ("Abs", "Abs in0", vec![]),
            ("Softplus", "Softplus in0", vec![]),
            ("Softsign", "Softsign in0", vec![]),
            ("HardSwish", "HardSwish in0", vec![]),
            ("Floor", "Floor in0", vec![]),
            ("Ceil", "Ceil in0", vec![]),
            ("Round", "Round in0", vec![]),
            ("Sign", "Sign in0", vec![]),
            ("Sin", "Sin in0", vec![]),
            ("Cos", "Cos in0", vec![]),
            (
                "LeakyRelu",
                "LeakyRelu in0 0.10000000149011612",
                vec![("alpha", float(0.1))],
            ),
            ("Elu", "Elu in0 0.5", vec![("alpha", float(0.5))]),
            ("Celu", "Celu in0 2.0", vec![("alpha", float(2.0))]),
            (
                "ThresholdedRelu",
                "ThresholdedRelu in0 0.5",
                vec![("alpha", float(0.5))],
            ),
            (
                "HardSigmoid",
                "HardSigmoid in0 0.30000001192092896 0.4000000059604645",
                vec![("alpha", float(0.3)), ("beta", float(0.4))],
            ),
            (
                "Selu",
                "Selu in0 1.6732631921768188 1.0507010221481323",
                vec![],
            ),
        ];
        for (op, body, attrs) in unary {
            let opset = 22;
            let want = run1(op, opset, attrs.clone(), std::slice::from_ref(&xt));
            let got = run(
                &format!("t0 = {body}\nout t0"),
                1,
                std::slice::from_ref(&xt),
            )
            .unwrap()
            .remove(0);
            assert_close(&got, &want.to_f64_vec().unwrap(), &[3, 4, 5], 1e-6, 1e-6);
        }
        for (op, body) in [
            ("Log", "Log in0"),
            ("Sqrt", "Sqrt in0"),
            ("Reciprocal", "Reciprocal in0"),
        ] {
            let want = run1(op, 13, vec![], std::slice::from_ref(&pos));
            let got = run(
                &format!("t0 = {body}\nout t0"),
                1,
                std::slice::from_ref(&pos),
            )
            .unwrap()
            .remove(0);
            assert_close(&got, &want.to_f64_vec().unwrap(), &[3, 4, 5], 1e-6, 1e-6);
        }
        let mish = run1("Mish", 18, vec![], std::slice::from_ref(&xt));
        let got = run("t0 = Mish in0\nout t0", 1, std::slice::from_ref(&xt)).unwrap();
        assert_close(&got[0], &mish.to_f64_vec().unwrap(), &[3, 4, 5], 1e-6, 1e-6);
        // Binary ops with broadcasting: [4, 1, 5] against [3, 1].
        let a = f32s(&[4, 1, 5], &x[..20]);
        let b = f32s(&[3, 1], &[0.5, -1.25, 2.0]);
        let bp = f32s(&[3, 1], &[0.5, 1.25, 2.0]);
        let apos = f32s(&[4, 1, 5], &y[..20]);
        for (op, base, exp) in [
            ("Add", &a, &b),
            ("Sub", &a, &b),
            ("Mul", &a, &b),
            ("Div", &a, &b),
            ("Max", &a, &b),
            ("Min", &a, &b),
            ("Pow", &apos, &bp),
        ] {
            let want = run1(op, 13, vec![], &[base.clone(), exp.clone()]);
            let got = run(
                &format!("t0 = {op} in0 in1\nout t0"),
                1,
                &[base.clone(), exp.clone()],
            )
            .unwrap()
            .remove(0);
            assert_close(&got, &want.to_f64_vec().unwrap(), &[4, 3, 5], 1e-6, 1e-6);
        }
        let slope = f32s(&[5], &[0.1, -0.2, 0.3, 0.4, 2.0]);
        let want = run1("PRelu", 16, vec![], &[xt.clone(), slope.clone()]);
        let got = run("t0 = PRelu in0 in1\nout t0", 1, &[xt.clone(), slope]).unwrap();
        assert_close(&got[0], &want.to_f64_vec().unwrap(), &[3, 4, 5], 1e-6, 1e-6);
        let lo = f32s(&[], &[-0.5]);
        let hi = f32s(&[], &[1.5]);
        let want = run1("Clip", 13, vec![], &[xt.clone(), lo, hi]);
        let got = run(
            "t0 = Clip in0 -0.5 1.5\nout t0",
            1,
            std::slice::from_ref(&xt),
        )
        .unwrap();
        assert_close(&got[0], &want.to_f64_vec().unwrap(), &[3, 4, 5], 0.0, 0.0);
    }

    /// NaN propagates through Max/Min/Clip/Relu as in the standalone kernels.
    #[test]
    fn nan_semantics_follow_the_standalone_kernels() {
        let x = f32s(&[4], &[f64::NAN, 1.0, -2.0, f64::INFINITY]);
        let out = run(
            "t0 = Max in0 0.0\nt1 = Min in0 0.0\nt2 = Clip in0 -1.0 1.0\nt3 = Relu in0\n\
             out t0\nout t1\nout t2\nout t3",
            4,
            std::slice::from_ref(&x),
        )
        .unwrap();
        let v = |t: &Tensor| t.to_f64_vec().unwrap();
        assert!(v(&out[0])[0].is_nan() && v(&out[1])[0].is_nan());
        assert!(v(&out[2])[0].is_nan() && v(&out[3])[0].is_nan());
        assert_eq!(&v(&out[0])[1..], &[1.0, 0.0, f64::INFINITY]);
        assert_eq!(&v(&out[1])[1..], &[0.0, -2.0, 0.0]);
        assert_eq!(&v(&out[2])[1..], &[1.0, -1.0, 1.0]);
    }

    /// A large strided broadcast (several parallel tasks, partial blocks) against a per-element
    /// evaluation, and a scalar input, and empty tensors.
    #[test]
    fn large_broadcasts_cover_every_element() {
        let (n, c, w) = (37, 29, 71);
        let a = vals(n * c * w, 5);
        let b = vals(c, 6);
        let s = 0.75;
        let prog = "t0 = Mul in0 in1\nt1 = Sub t0 in2\nt2 = Tanh t1\nout t2";
        let at = f32s(&[n, c, w], &a);
        let bt = f32s(&[c, 1], &b);
        let st = f32s(&[1], &[s]);
        let got = run(prog, 1, &[at, bt, st]).unwrap().remove(0);
        assert_eq!(got.shape(), &[n, c, w]);
        let af: Vec<f32> = a.iter().map(|&v| v as f32).collect();
        let want: Vec<f64> = (0..n * c * w)
            .map(|i| {
                let ch = (i / w) % c;
                ((af[i] * b[ch] as f32 - s as f32) as f64).tanh()
            })
            .collect();
        assert_close(&got, &want, &[n, c, w], 1e-6, 1e-6);
        let e = run(
            prog,
            1,
            &[
                f32s(&[0, 3], &[]),
                f32s(&[3], &[1.0, 2.0, 3.0]),
                f32s(&[], &[1.0]),
            ],
        )
        .unwrap();
        assert_eq!(e[0].shape(), &[0, 3]);
        // Mixed dtypes and integer inputs are errors.
        let err = run(
            "t0 = Add in0 in1\nout t0",
            1,
            &[f32s(&[1], &[1.0]), f64s(&[1], &[1.0])],
        )
        .unwrap_err();
        assert!(err.to_string().contains("dtype"), "{err}");
        let err = run("t0 = Relu in0\nout t0", 1, &[i64s(&[1], &[1])]).unwrap_err();
        assert!(matches!(err, EpError::UnsupportedDtype { .. }), "{err}");
    }
}
