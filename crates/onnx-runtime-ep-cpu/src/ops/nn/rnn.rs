//! RNN, GRU (linear_before_reset) and LSTM (peepholes, input_forget): every direction,
//! sequence_lens, initial states, layout, clip and the activation list. The input
//! projections of all steps are one GEMM; each step adds `H @ R^T` (another GEMM).

use super::common::{self, bad_attr, c, invalid, Real};
use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{DataType, Node};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) enum Kind {
    Rnn,
    Gru,
    Lstm,
}

impl Kind {
    fn gates(self) -> usize {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 3,
            Kind::Lstm => 4,
        }
    }
    fn n_act(self) -> usize {
        match self {
            Kind::Rnn => 1,
            Kind::Gru => 2,
            Kind::Lstm => 3,
        }
    }
    fn name(self) -> &'static str {
        match self {
            Kind::Rnn => "RNN",
            Kind::Gru => "GRU",
            Kind::Lstm => "LSTM",
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(super) enum Act {
    Relu,
    Tanh,
    Sigmoid,
    Affine(f64, f64),
    LeakyRelu(f64),
    ThresholdedRelu(f64),
    ScaledTanh(f64, f64),
    HardSigmoid(f64, f64),
    Elu(f64),
    Softsign,
    Softplus,
}

impl Act {
    pub(super) fn apply<T: Real>(self, x: T) -> T {
        let one = T::one();
        match self {
            Act::Relu => x.max(T::zero()),
            Act::Tanh => x.tanh(),
            Act::Sigmoid => one / (one + (-x).exp()),
            Act::Affine(a, b) => c::<T>(a) * x + c(b),
            Act::LeakyRelu(a) => {
                if x >= T::zero() {
                    x
                } else {
                    c::<T>(a) * x
                }
            }
            Act::ThresholdedRelu(a) => {
                if x > c(a) {
                    x
                } else {
                    T::zero()
                }
            }
            Act::ScaledTanh(a, b) => c::<T>(a) * (c::<T>(b) * x).tanh(),
            Act::HardSigmoid(a, b) => (c::<T>(a) * x + c(b)).max(T::zero()).min(one),
            Act::Elu(a) => {
                if x >= T::zero() {
                    x
                } else {
                    c::<T>(a) * (x.exp() - one)
                }
            }
            Act::Softsign => x / (one + x.abs()),
            Act::Softplus => (one + x.exp()).ln(),
        }
    }
}

pub(super) fn parse_acts(node: &Node, kind: Kind, dirs: usize) -> Result<Vec<Act>, EpError> {
    let names = attrs::opt_strings(node, "activations")?;
    let alphas = attrs::opt_floats(node, "activation_alpha")?.unwrap_or_default();
    let betas = attrs::opt_floats(node, "activation_beta")?.unwrap_or_default();
    let defaults: &[&str] = match kind {
        Kind::Rnn => &["Tanh"],
        Kind::Gru => &["Sigmoid", "Tanh"],
        Kind::Lstm => &["Sigmoid", "Tanh", "Tanh"],
    };
    let names: Vec<String> = match names {
        Some(n) => n,
        None => (0..dirs)
            .flat_map(|_| defaults.iter().map(|s| s.to_string()))
            .collect(),
    };
    // A single direction's list serves both directions when only it is given.
    let names: Vec<String> = if names.len() == kind.n_act() && dirs == 2 {
        names.iter().chain(names.iter()).cloned().collect()
    } else {
        names
    };
    if names.len() != kind.n_act() * dirs {
        return Err(bad_attr(
            node,
            "activations",
            format!(
                "{} names given; want {} per direction",
                names.len(),
                kind.n_act()
            ),
        ));
    }
    let (mut ai, mut bi) = (0, 0);
    let next = |v: &[f32], i: &mut usize, d: f64| -> f64 {
        let r = v.get(*i).map_or(d, |&x| x as f64);
        *i += 1;
        r
    };
    names
        .iter()
        .map(|n| {
            Ok(match n.to_ascii_lowercase().as_str() {
                "relu" => Act::Relu,
                "tanh" => Act::Tanh,
                "sigmoid" => Act::Sigmoid,
                "affine" => Act::Affine(next(&alphas, &mut ai, 1.0), next(&betas, &mut bi, 0.0)),
                "leakyrelu" => Act::LeakyRelu(next(&alphas, &mut ai, 0.01)),
                "thresholdedrelu" => Act::ThresholdedRelu(next(&alphas, &mut ai, 1.0)),
                "scaledtanh" => {
                    Act::ScaledTanh(next(&alphas, &mut ai, 1.0), next(&betas, &mut bi, 1.0))
                }
                "hardsigmoid" => {
                    Act::HardSigmoid(next(&alphas, &mut ai, 0.2), next(&betas, &mut bi, 0.5))
                }
                "elu" => Act::Elu(next(&alphas, &mut ai, 1.0)),
                "softsign" => Act::Softsign,
                "softplus" => Act::Softplus,
                other => {
                    return Err(bad_attr(
                        node,
                        "activations",
                        format!("unknown activation '{other}'"),
                    ))
                }
            })
        })
        .collect()
}

struct RnnKernel {
    node: String,
    kind: Kind,
    hidden: usize,
    /// Directions: false = forward, true = reverse.
    dirs: Vec<bool>,
    acts: Vec<Act>,
    clip: Option<f64>,
    layout: bool,
    linear_before_reset: bool,
    input_forget: bool,
    n_outputs: usize,
}

struct Shapes {
    seq: usize,
    batch: usize,
    input: usize,
}

impl RnnKernel {
    fn clip<T: Real>(&self, x: T) -> T {
        match self.clip {
            Some(cl) => x.max(c(-cl)).min(c(cl)),
            None => x,
        }
    }

    /// Runs every direction; returns (Y, Y_h, Y_c) in [dir][...] layout-0 order.
    #[allow(clippy::too_many_arguments)]
    fn compute<T: Real>(
        &self,
        s: &Shapes,
        x: &[T],
        w: &[T],
        r: &[T],
        b: Option<&[T]>,
        lens: &[usize],
        h0: Option<&[T]>,
        c0: Option<&[T]>,
        p: Option<&[T]>,
    ) -> (Vec<T>, Vec<T>, Vec<T>) {
        let (h, g) = (self.hidden, self.kind.gates());
        let (seq, batch, inp) = (s.seq, s.batch, s.input);
        let nd = self.dirs.len();
        let mut y = vec![T::zero(); seq * nd * batch * h];
        let mut yh = vec![T::zero(); nd * batch * h];
        let mut yc = vec![T::zero(); nd * batch * h];
        for (d, &reverse) in self.dirs.iter().enumerate() {
            let wd = &w[d * g * h * inp..(d + 1) * g * h * inp];
            let rd = &r[d * g * h * h..(d + 1) * g * h * h];
            let acts = &self.acts[d * self.kind.n_act()..(d + 1) * self.kind.n_act()];
            // XW[t, b, :] = X[t, b] @ W^T + Wb (+ Rb where it is simply added).
            let mut xw = vec![T::zero(); seq * batch * g * h];
            common::gemm(
                seq * batch,
                g * h,
                inp,
                x,
                inp,
                1,
                wd,
                1,
                inp,
                &mut xw,
                g * h,
                T::one(),
                T::zero(),
            );
            let (wb, rb) = match b {
                Some(b) => (
                    b[d * 2 * g * h..d * 2 * g * h + g * h].to_vec(),
                    b[d * 2 * g * h + g * h..(d + 1) * 2 * g * h].to_vec(),
                ),
                None => (vec![T::zero(); g * h], vec![T::zero(); g * h]),
            };
            for row in xw.chunks_mut(g * h) {
                for (j, v) in row.iter_mut().enumerate() {
                    // GRU's hidden gate keeps Rbh apart when linear_before_reset.
                    let keep_rb = self.kind == Kind::Gru && j >= 2 * h;
                    *v += wb[j] + if keep_rb { T::zero() } else { rb[j] };
                }
            }
            let mut hs: Vec<T> = match h0 {
                Some(h0) => h0[d * batch * h..(d + 1) * batch * h].to_vec(),
                None => vec![T::zero(); batch * h],
            };
            let mut cs: Vec<T> = match c0 {
                Some(c0) => c0[d * batch * h..(d + 1) * batch * h].to_vec(),
                None => vec![T::zero(); batch * h],
            };
            let pd = p.map(|p| &p[d * 3 * h..(d + 1) * 3 * h]);
            let mut hr = vec![T::zero(); batch * g * h];
            let max_len = lens.iter().copied().max().unwrap_or(0);
            for step in 0..max_len {
                // H @ R^T for every batch row (GRU's hidden gate is redone after reset).
                common::gemm(
                    batch,
                    g * h,
                    h,
                    &hs,
                    h,
                    1,
                    rd,
                    1,
                    h,
                    &mut hr,
                    g * h,
                    T::one(),
                    T::zero(),
                );
                let prev_h = hs.clone();
                for bi in 0..batch {
                    if step >= lens[bi] {
                        continue;
                    }
                    let t = if reverse { lens[bi] - 1 - step } else { step };
                    let xr = &xw[(t * batch + bi) * g * h..(t * batch + bi + 1) * g * h];
                    let hrr = &hr[bi * g * h..(bi + 1) * g * h];
                    let hb = &mut hs[bi * h..(bi + 1) * h];
                    let cb = &mut cs[bi * h..(bi + 1) * h];
                    let ph = &prev_h[bi * h..(bi + 1) * h];
                    match self.kind {
                        Kind::Rnn => {
                            for j in 0..h {
                                hb[j] = acts[0].apply(self.clip(xr[j] + hrr[j]));
                            }
                        }
                        Kind::Gru => {
                            let rh = &rd[2 * h * h..3 * h * h];
                            let z: Vec<T> = (0..h)
                                .map(|j| acts[0].apply(self.clip(xr[j] + hrr[j])))
                                .collect();
                            let rg: Vec<T> = (0..h)
                                .map(|j| acts[0].apply(self.clip(xr[h + j] + hrr[h + j])))
                                .collect();
                            let reset: Vec<T> = if self.linear_before_reset {
                                Vec::new()
                            } else {
                                (0..h).map(|k| rg[k] * ph[k]).collect()
                            };
                            for j in 0..h {
                                let hh_pre = if self.linear_before_reset {
                                    xr[2 * h + j] + rg[j] * (hrr[2 * h + j] + rb[2 * h + j])
                                } else {
                                    // (r . H) @ Rh^T for unit j.
                                    let row = &rh[j * h..(j + 1) * h];
                                    let acc: T = row.iter().zip(&reset).map(|(&a, &b)| a * b).sum();
                                    xr[2 * h + j] + acc + rb[2 * h + j]
                                };
                                let hh = acts[1].apply(self.clip(hh_pre));
                                hb[j] = (T::one() - z[j]) * hh + z[j] * ph[j];
                            }
                        }
                        Kind::Lstm => {
                            let zero = T::zero();
                            for j in 0..h {
                                let (pi, po, pf) = match pd {
                                    Some(p) => (p[j], p[h + j], p[2 * h + j]),
                                    None => (zero, zero, zero),
                                };
                                let cp = cb[j];
                                let i = acts[0].apply(self.clip(xr[j] + hrr[j] + pi * cp));
                                let f = if self.input_forget {
                                    T::one() - i
                                } else {
                                    acts[0]
                                        .apply(self.clip(xr[2 * h + j] + hrr[2 * h + j] + pf * cp))
                                };
                                let cc = acts[1].apply(self.clip(xr[3 * h + j] + hrr[3 * h + j]));
                                let cn = f * cp + i * cc;
                                let o = acts[0].apply(self.clip(xr[h + j] + hrr[h + j] + po * cn));
                                cb[j] = cn;
                                hb[j] = o * acts[2].apply(cn);
                            }
                        }
                    }
                    let yo = ((t * nd + d) * batch + bi) * h;
                    y[yo..yo + h].copy_from_slice(hb);
                }
            }
            yh[d * batch * h..(d + 1) * batch * h].copy_from_slice(&hs);
            yc[d * batch * h..(d + 1) * batch * h].copy_from_slice(&cs);
        }
        (y, yh, yc)
    }
}

/// [a, b, rest] -> [b, a, rest] (layout 1 <-> layout 0 for the first two axes).
fn swap01<T: Copy>(v: &[T], a: usize, b: usize, rest: usize) -> Vec<T> {
    let mut out = Vec::with_capacity(v.len());
    for j in 0..b {
        for i in 0..a {
            out.extend_from_slice(&v[(i * b + j) * rest..(i * b + j + 1) * rest]);
        }
    }
    out
}

impl CpuKernel for RnnKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let op = self.kind.name();
        let x = tensor_input(node, inputs, 0)?;
        let w = tensor_input(node, inputs, 1)?;
        let r = tensor_input(node, inputs, 2)?;
        let b = optional_tensor_input(node, inputs, 3)?;
        let sl = optional_tensor_input(node, inputs, 4)?;
        let h0 = optional_tensor_input(node, inputs, 5)?;
        let c0 = if self.kind == Kind::Lstm {
            optional_tensor_input(node, inputs, 6)?
        } else {
            None
        };
        let p = if self.kind == Kind::Lstm {
            optional_tensor_input(node, inputs, 7)?
        } else {
            None
        };
        let dtype = x.dtype();
        common::require_float(node, op, dtype)?;
        if x.rank() != 3 {
            return Err(invalid(node, format!("X {:?} must be 3-D", x.shape())));
        }
        let (seq, batch) = if self.layout {
            (x.shape()[1], x.shape()[0])
        } else {
            (x.shape()[0], x.shape()[1])
        };
        let inp = x.shape()[2];
        let (h, g, nd) = (self.hidden, self.kind.gates(), self.dirs.len());
        let expect = |t: &Tensor, shape: &[usize], what: &str| -> Result<(), EpError> {
            if t.shape() != shape {
                return Err(invalid(
                    node,
                    format!("{what} is {:?}; want {shape:?}", t.shape()),
                ));
            }
            if t.dtype() != dtype {
                return Err(invalid(
                    node,
                    format!("{what} is {}; want {dtype}", t.dtype()),
                ));
            }
            Ok(())
        };
        expect(w, &[nd, g * h, inp], "W")?;
        expect(r, &[nd, g * h, h], "R")?;
        if let Some(b) = b {
            expect(b, &[nd, 2 * g * h], "B")?;
        }
        let state_shape = if self.layout {
            vec![batch, nd, h]
        } else {
            vec![nd, batch, h]
        };
        for (t, what) in [(h0, "initial_h"), (c0, "initial_c")] {
            if let Some(t) = t {
                expect(t, &state_shape, what)?;
            }
        }
        if let Some(p) = p {
            expect(p, &[nd, 3 * h], "P")?;
        }
        let lens: Vec<usize> = match sl {
            Some(t) => {
                let v = common::ints_of(node, t, "sequence_lens")?;
                if v.len() != batch || v.iter().any(|&l| l < 0 || l as usize > seq) {
                    return Err(invalid(
                        node,
                        format!("sequence_lens {v:?} must have {batch} values in 0..={seq}"),
                    ));
                }
                v.into_iter().map(|l| l as usize).collect()
            }
            None => vec![seq; batch],
        };
        let s = Shapes {
            seq,
            batch,
            input: inp,
        };
        macro_rules! go {
            ($T:ty) => {{
                let cv = |t: &Tensor| common::float_vec::<$T>(t).unwrap_or_default();
                let mut xv = cv(x);
                if self.layout {
                    xv = swap01(&xv, batch, seq, inp);
                }
                let st = |t: Option<&Tensor>| {
                    t.map(|t| {
                        let v = cv(t);
                        if self.layout {
                            swap01(&v, batch, nd, h)
                        } else {
                            v
                        }
                    })
                };
                let (h0v, c0v) = (st(h0), st(c0));
                let (bv, pv) = (b.map(cv), p.map(cv));
                let (mut y, mut yh, mut yc) = self.compute::<$T>(
                    &s,
                    &xv,
                    &cv(w),
                    &cv(r),
                    bv.as_deref(),
                    &lens,
                    h0v.as_deref(),
                    c0v.as_deref(),
                    pv.as_deref(),
                );
                let mut y_shape = vec![seq, nd, batch, h];
                if self.layout {
                    // [seq, nd, batch, h] -> [batch, seq, nd, h]
                    let mut o = vec![<$T>::default(); y.len()];
                    for t in 0..seq {
                        for d in 0..nd {
                            for bb in 0..batch {
                                let src = ((t * nd + d) * batch + bb) * h;
                                let dst = ((bb * seq + t) * nd + d) * h;
                                o[dst..dst + h].copy_from_slice(&y[src..src + h]);
                            }
                        }
                    }
                    y = o;
                    y_shape = vec![batch, seq, nd, h];
                    yh = swap01(&yh, nd, batch, h);
                    yc = swap01(&yc, nd, batch, h);
                }
                (y, y_shape, yh, yc)
            }};
        }
        let to = |v: Vec<f64>, shape: Vec<usize>| -> Tensor {
            match dtype {
                DataType::Float64 => Tensor::from_vec(shape, v),
                d => common::tensor_from_f32(d, shape, v.into_iter().map(|x| x as f32).collect()),
            }
        };
        let (y, y_shape, yh, yc) = if dtype == DataType::Float64 {
            go!(f64)
        } else {
            let (y, s, a, b) = go!(f32);
            let w = |v: Vec<f32>| v.into_iter().map(|x| x as f64).collect::<Vec<f64>>();
            (w(y), s, w(a), w(b))
        };
        let mut out = vec![Value::Tensor(to(y, y_shape))];
        if self.n_outputs > 1 {
            out.push(Value::Tensor(to(yh, state_shape.clone())));
        }
        if self.n_outputs > 2 {
            out.push(Value::Tensor(to(yc, state_shape)));
        }
        Ok(out)
    }
}

fn make(ctx: &BuildContext<'_>, kind: Kind) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let hidden = attrs::opt_int(n, "hidden_size")?
        .ok_or_else(|| bad_attr(n, "hidden_size", "is required"))?;
    if hidden < 1 {
        return Err(bad_attr(n, "hidden_size", "must be positive"));
    }
    let dirs = match attrs::string(n, "direction", "forward")?.as_str() {
        "forward" => vec![false],
        "reverse" => vec![true],
        "bidirectional" => vec![false, true],
        other => {
            return Err(bad_attr(
                n,
                "direction",
                format!("'{other}' is not forward, reverse or bidirectional"),
            ))
        }
    };
    Ok(Box::new(RnnKernel {
        node: n.describe(),
        kind,
        hidden: hidden as usize,
        acts: parse_acts(n, kind, dirs.len())?,
        dirs,
        clip: attrs::opt_float(n, "clip")?.map(|v| v as f64),
        layout: attrs::int(n, "layout", 0)? != 0,
        linear_before_reset: attrs::int(n, "linear_before_reset", 0)? != 0,
        input_forget: attrs::int(n, "input_forget", 0)? != 0,
        n_outputs: n.outputs.len(),
    }))
}

fn build_rnn(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    make(ctx, Kind::Rnn)
}
fn build_gru(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    make(ctx, Kind::Gru)
}
fn build_lstm(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    make(ctx, Kind::Lstm)
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 7, 14, 22] {
        r.register("", "RNN", since, build_rnn);
        r.register("", "LSTM", since, build_lstm);
    }
    for since in [1, 3, 7, 14, 22] {
        r.register("", "GRU", since, build_gru);
    }
}
