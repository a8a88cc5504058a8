//! The `FusedElementwise` interpreter: a program compiled to register slots ([`Compiled`]),
//! the per-op block evaluation (the standalone kernels' semantics and f32 approximations), and
//! the element loop that reads broadcast inputs block by block and runs tasks in parallel.

use super::program::{Op, Operand, Program};
use crate::ops::math::num::{FloatElem, Real};
use crate::ops::math::vecmath;
use crate::{Tensor, Value};
use onnx_runtime_ep_api::EpError;
use rayon::prelude::*;

/// The compute types: f32 takes the CPU's vectorizable approximations, as the standalone
/// kernels do; f64 the exact functions.
pub(super) trait Lane: Real {
    fn l_exp(self) -> Self;
    fn l_erf(self) -> Self;
    fn l_tanh(self) -> Self;
    fn l_sigmoid(self) -> Self;
    fn l_gelu_tanh(self) -> Self;
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
    #[inline(always)]
    fn l_gelu_tanh(self) -> f32 {
        vecmath::gelu_tanh(self)
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
    #[inline(always)]
    fn l_gelu_tanh(self) -> f64 {
        let k = (2.0 / std::f64::consts::PI).sqrt();
        0.5 * self * (1.0 + (k * (self + 0.044715 * self * self * self)).tanh())
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
        Op::GeluTanh => map1(d, s[0], |x| x.l_gelu_tanh()),
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
pub(super) struct Compiled {
    n_inputs: usize,
    literals: Vec<f64>,
    /// (op, destination slot, source slots).
    code: Vec<(Op, usize, Vec<usize>)>,
    outputs: Vec<usize>,
    slots: usize,
}

impl Compiled {
    pub(super) fn new(p: &Program, n_inputs: usize) -> Compiled {
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

pub(super) fn run_typed<T: FloatElem>(
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
