//! RNN, GRU (linear_before_reset) and LSTM (peepholes, input_forget): every direction,
//! sequence_lens, initial states, layout, clip and the activation list. The input
//! projections of all steps are one GEMM; each step adds `H @ R^T` (another GEMM).

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, bad_attr, c, invalid, Real};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{DataType, Node};

#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum Kind {
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
pub(crate) enum Act {
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
    pub(crate) fn apply<T: Real>(self, x: T) -> T {
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

impl Act {
    /// Applies the activation to every element of `v` (vectorized sigmoid and tanh for f32).
    pub(crate) fn apply_slice<T: Real>(self, v: &mut [T]) {
        use crate::ops::math::vecmath;
        if let Some(f) = vecmath::as_f32_mut(v) {
            match self {
                Act::Sigmoid => return vecmath::map_inplace(f, vecmath::sigmoid),
                Act::Tanh => return vecmath::map_inplace(f, vecmath::tanh),
                _ => {}
            }
        }
        for x in v {
            *x = self.apply(*x);
        }
    }
}

pub(crate) fn parse_acts(node: &Node, kind: Kind, dirs: usize) -> Result<Vec<Act>, EpError> {
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

/// The `hidden_size` (required, positive) and `direction` attributes of a recurrent op;
/// the directions are false = forward, true = reverse.
pub(crate) fn hidden_and_directions(n: &Node) -> Result<(usize, Vec<bool>), EpError> {
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
    Ok((hidden as usize, dirs))
}

/// Checks that X is 3-D (sequence, batch and input axes in the op's layout).
pub(crate) fn check_x_rank(node: &str, x: &Tensor) -> Result<(), EpError> {
    if x.rank() != 3 {
        return Err(invalid(
            node,
            format!(
                "X {:?} must be 3-D [seq_length, batch_size, input_size] \
                 ([batch_size, seq_length, input_size] with layout 1)",
                x.shape()
            ),
        ));
    }
    Ok(())
}

/// Checks that input `what` has dtype `dtype` and shape `shape`.
pub(crate) fn expect_input(
    node: &str,
    t: &Tensor,
    what: &str,
    dtype: DataType,
    shape: &[usize],
) -> Result<(), EpError> {
    if t.shape() != shape || t.dtype() != dtype {
        return Err(invalid(
            node,
            format!(
                "{what} is {} {:?}; want {dtype} {shape:?}",
                t.dtype(),
                t.shape()
            ),
        ));
    }
    Ok(())
}

/// The optional sequence_lens input: `batch` lengths in 0..=seq (all `seq` when absent).
pub(crate) fn sequence_lens(
    node: &str,
    t: Option<&Tensor>,
    seq: usize,
    batch: usize,
) -> Result<Vec<usize>, EpError> {
    let Some(t) = t else {
        return Ok(vec![seq; batch]);
    };
    let v = common::ints_of(node, t, "sequence_lens")?;
    if v.len() != batch || v.iter().any(|&l| l < 0 || l as usize > seq) {
        return Err(invalid(
            node,
            format!("sequence_lens {v:?} must have {batch} values in 0..={seq}"),
        ));
    }
    Ok(v.into_iter().map(|l| l as usize).collect())
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

/// The tensors one run reads, in the compute type: X, W, R, the optional B, the sequence
/// lengths, the optional initial H and C and the optional peepholes P.
#[derive(Clone, Copy)]
struct RnnInputs<'a, T> {
    x: &'a [T],
    w: &'a [T],
    r: &'a [T],
    b: Option<&'a [T]>,
    lens: &'a [usize],
    h0: Option<&'a [T]>,
    c0: Option<&'a [T]>,
    p: Option<&'a [T]>,
}

impl RnnKernel {
    fn clip<T: Real>(&self, x: T) -> T {
        match self.clip {
            Some(cl) => x.max(c(-cl)).min(c(cl)),
            None => x,
        }
    }

    /// Runs every direction (the two of a bidirectional node in parallel when there is
    /// enough work); returns (Y, Y_h, Y_c) in [dir][...] layout-0 order.
    fn compute<T: Real>(&self, s: &Shapes, inp: RnnInputs<'_, T>) -> (Vec<T>, Vec<T>, Vec<T>) {
        let (h, g) = (self.hidden, self.kind.gates());
        let (seq, batch) = (s.seq, s.batch);
        let nd = self.dirs.len();
        let dir = |d: usize| self.direction(s, d, inp);
        let work = seq * batch * g * h * (h + s.input);
        let results: Vec<DirOut<T>> = if nd == 2 && work >= PAR_WORK {
            let (a, b) = rayon::join(|| dir(0), || dir(1));
            vec![a, b]
        } else {
            (0..nd).map(dir).collect()
        };
        if nd == 1 {
            let DirOut { y, h, c } = results.into_iter().next().expect("one direction");
            return (y, h, c);
        }
        let mut y = Vec::with_capacity(seq * nd * batch * h);
        for t in 0..seq {
            for o in &results {
                y.extend_from_slice(&o.y[t * batch * h..(t + 1) * batch * h]);
            }
        }
        let yh = results.iter().flat_map(|o| o.h.iter().copied()).collect();
        let yc = results.iter().flat_map(|o| o.c.iter().copied()).collect();
        (y, yh, yc)
    }

    /// One direction `d`: Y as [seq, batch, hidden] plus the final hidden and cell states.
    fn direction<T: Real>(&self, s: &Shapes, d: usize, inp: RnnInputs<'_, T>) -> DirOut<T> {
        let RnnInputs {
            x,
            w,
            r,
            b,
            lens,
            h0,
            c0,
            p,
        } = inp;
        let (h, g) = (self.hidden, self.kind.gates());
        let (seq, batch, inp) = (s.seq, s.batch, s.input);
        let gh = g * h;
        let reverse = self.dirs[d];
        let wd = &w[d * gh * inp..(d + 1) * gh * inp];
        let rd = &r[d * gh * h..(d + 1) * gh * h];
        let acts = &self.acts[d * self.kind.n_act()..(d + 1) * self.kind.n_act()];
        let mut y = vec![T::zero(); seq * batch * h];
        // XW[t, b, :] = X[t, b] @ W^T + Wb (+ Rb where it is simply added).
        let mut xw = vec![T::zero(); seq * batch * gh];
        common::gemm(
            seq * batch,
            gh,
            inp,
            x,
            inp,
            1,
            wd,
            1,
            inp,
            &mut xw,
            gh,
            T::one(),
            T::zero(),
        );
        let zeros = vec![T::zero(); gh];
        let (wb, rb) = match b {
            Some(b) => (
                &b[d * 2 * gh..d * 2 * gh + gh],
                &b[d * 2 * gh + gh..(d + 1) * 2 * gh],
            ),
            None => (&zeros[..], &zeros[..]),
        };
        // GRU's hidden gate keeps Rbh apart (it is added after the reset gate's product).
        let add_rb = if self.kind == Kind::Gru { 2 * h } else { gh };
        for row in xw.chunks_mut(gh) {
            for (j, v) in row.iter_mut().enumerate() {
                *v += wb[j] + if j < add_rb { rb[j] } else { T::zero() };
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
        let mut hr = vec![T::zero(); batch * gh];
        // Per-step scratch: gate values, and for GRU the reset hidden state and its product.
        let mut gates = vec![T::zero(); gh];
        let mut reset = vec![T::zero(); h];
        let mut reset_r = vec![T::zero(); h];
        let max_len = lens.iter().copied().max().unwrap_or(0);
        for step in 0..max_len {
            // H @ R^T for every batch row (GRU's hidden gate is redone after reset).
            rows_dot(&hs, batch, rd, gh, h, &mut hr);
            for bi in 0..batch {
                if step >= lens[bi] {
                    continue;
                }
                let t = if reverse { lens[bi] - 1 - step } else { step };
                let xr = &xw[(t * batch + bi) * gh..(t * batch + bi + 1) * gh];
                let hrr = &hr[bi * gh..(bi + 1) * gh];
                let hb = &mut hs[bi * h..(bi + 1) * h];
                let cb = &mut cs[bi * h..(bi + 1) * h];
                match self.kind {
                    Kind::Rnn => {
                        for j in 0..h {
                            hb[j] = self.clip(xr[j] + hrr[j]);
                        }
                        acts[0].apply_slice(hb);
                    }
                    Kind::Gru => {
                        // z and r gates.
                        for j in 0..2 * h {
                            gates[j] = self.clip(xr[j] + hrr[j]);
                        }
                        acts[0].apply_slice(&mut gates[..2 * h]);
                        let (z, rest) = gates.split_at_mut(h);
                        let (rg, hh) = rest.split_at_mut(h);
                        if self.linear_before_reset {
                            for j in 0..h {
                                hh[j] = self
                                    .clip(xr[2 * h + j] + rg[j] * (hrr[2 * h + j] + rb[2 * h + j]));
                            }
                        } else {
                            // (r . H) @ Rh^T.
                            for k in 0..h {
                                reset[k] = rg[k] * hb[k];
                            }
                            rows_dot(&reset, 1, &rd[2 * h * h..], h, h, &mut reset_r);
                            for j in 0..h {
                                hh[j] = self.clip(xr[2 * h + j] + reset_r[j] + rb[2 * h + j]);
                            }
                        }
                        acts[1].apply_slice(hh);
                        for j in 0..h {
                            hb[j] = (T::one() - z[j]) * hh[j] + z[j] * hb[j];
                        }
                    }
                    Kind::Lstm => {
                        // Gate order i, o, f, c; peepholes P = [pi, po, pf].
                        let (gi, rest) = gates.split_at_mut(h);
                        let (go, rest) = rest.split_at_mut(h);
                        let (gf, gc) = rest.split_at_mut(h);
                        for j in 0..h {
                            let (pi, pf) = match pd {
                                Some(p) => (p[j] * cb[j], p[2 * h + j] * cb[j]),
                                None => (T::zero(), T::zero()),
                            };
                            gi[j] = self.clip(xr[j] + hrr[j] + pi);
                            gf[j] = self.clip(xr[2 * h + j] + hrr[2 * h + j] + pf);
                            gc[j] = self.clip(xr[3 * h + j] + hrr[3 * h + j]);
                        }
                        acts[0].apply_slice(gi);
                        if self.input_forget {
                            for j in 0..h {
                                gf[j] = T::one() - gi[j];
                            }
                        } else {
                            acts[0].apply_slice(gf);
                        }
                        acts[1].apply_slice(gc);
                        for j in 0..h {
                            let cn = gf[j] * cb[j] + gi[j] * gc[j];
                            cb[j] = cn;
                            let po = pd.map_or(T::zero(), |p| p[h + j] * cn);
                            go[j] = self.clip(xr[h + j] + hrr[h + j] + po);
                            hb[j] = cn;
                        }
                        acts[0].apply_slice(go);
                        acts[2].apply_slice(hb);
                        for j in 0..h {
                            hb[j] = go[j] * hb[j];
                        }
                    }
                }
                let yo = (t * batch + bi) * h;
                y[yo..yo + h].copy_from_slice(hb);
            }
        }
        DirOut { y, h: hs, c: cs }
    }
}

/// One direction's outputs: Y as [seq, batch, hidden], the last H and C as [batch, hidden].
struct DirOut<T> {
    y: Vec<T>,
    h: Vec<T>,
    c: Vec<T>,
}

/// Multiply-adds (seq * batch * gates * hidden * (hidden + input)) above which the two
/// directions of a bidirectional node run on separate threads.
const PAR_WORK: usize = 1 << 20;

/// Multiply-adds per step above which one `rows_dot` splits its rows over threads.
const PAR_DOT: usize = 1 << 18;

/// `out[b, j] = a[b, :] . m[j, :]` for `rows` rows of `a` and `n` rows of `m` (each `k` long):
/// `a @ m^T`, read a row of `m` at a time, for the few batch rows a recurrent step has.
fn rows_dot<T: Real>(a: &[T], rows: usize, m: &[T], n: usize, k: usize, out: &mut [T]) {
    if rows > 4 {
        common::gemm(rows, n, k, a, k, 1, m, 1, k, out, n, T::one(), T::zero());
        return;
    }
    let one_row = |j0: usize, o: &mut [T]| {
        for (jj, v) in o.iter_mut().enumerate() {
            let j = j0 + jj;
            *v = dot(&a[..k], &m[j * k..(j + 1) * k]);
        }
    };
    if rows == 1 {
        if n * k >= PAR_DOT && rayon::current_num_threads() > 1 {
            use rayon::prelude::*;
            let per = n.div_ceil(rayon::current_num_threads() * 2).max(16);
            out[..n]
                .par_chunks_mut(per)
                .enumerate()
                .for_each(|(c, o)| one_row(c * per, o));
        } else {
            one_row(0, &mut out[..n]);
        }
        return;
    }
    for j in 0..n {
        let mr = &m[j * k..(j + 1) * k];
        for bi in 0..rows {
            out[bi * n + j] = dot(&a[bi * k..(bi + 1) * k], mr);
        }
    }
}

/// A dot product: with FMA in 32 interleaved partial sums on AVX2 machines, else in eight
/// (both vectorize).
#[inline]
fn dot<T: Real>(a: &[T], b: &[T]) -> T {
    #[cfg(target_arch = "x86_64")]
    if crate::ops::math::vecmath::has_avx2() {
        // SAFETY: the CPU has AVX2 and FMA.
        return unsafe { dot_fma(a, b) };
    }
    let mut acc = [T::zero(); 8];
    let (ca, cb) = (a.chunks_exact(8), b.chunks_exact(8));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..8 {
            acc[i] += x[i] * y[i];
        }
    }
    let mut s = ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
    for (&x, &y) in ra.iter().zip(rb) {
        s += x * y;
    }
    s
}

/// [`dot`] with fused multiply-adds (the recurrent step's GEMV is most of an LSTM's time):
/// f32 in four 8-lane accumulators, other types in 32 interleaved sums.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn dot_fma<T: Real>(a: &[T], b: &[T]) -> T {
    use std::any::TypeId;
    use std::arch::x86_64::*;
    let n = a.len().min(b.len());
    if TypeId::of::<T>() == TypeId::of::<f32>() {
        let (pa, pb) = (a.as_ptr() as *const f32, b.as_ptr() as *const f32);
        // SAFETY: T is f32; every read is below n, the shorter slice's length.
        let s = unsafe {
            let mut acc = [_mm256_setzero_ps(); 4];
            let mut i = 0;
            while i + 32 <= n {
                for (q, v) in acc.iter_mut().enumerate() {
                    let x = _mm256_loadu_ps(pa.add(i + 8 * q));
                    let y = _mm256_loadu_ps(pb.add(i + 8 * q));
                    *v = _mm256_fmadd_ps(x, y, *v);
                }
                i += 32;
            }
            while i + 8 <= n {
                acc[0] = _mm256_fmadd_ps(
                    _mm256_loadu_ps(pa.add(i)),
                    _mm256_loadu_ps(pb.add(i)),
                    acc[0],
                );
                i += 8;
            }
            let v = _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3]));
            let h = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
            let h = _mm_add_ps(h, _mm_movehl_ps(h, h));
            let h = _mm_add_ss(h, _mm_movehdup_ps(h));
            let mut s = _mm_cvtss_f32(h);
            while i < n {
                s = (*pa.add(i)).mul_add(*pb.add(i), s);
                i += 1;
            }
            s
        };
        return T::from_f32(s).expect("f32 converts to itself");
    }
    const W: usize = 32;
    let mut acc = [T::zero(); W];
    let (ca, cb) = (a[..n].chunks_exact(W), b[..n].chunks_exact(W));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for i in 0..W {
            acc[i] = x[i].mul_add(y[i], acc[i]);
        }
    }
    let mut s = T::zero();
    for (&x, &y) in ra.iter().zip(rb) {
        s = x.mul_add(y, s);
    }
    let mut w = W;
    while w > 1 {
        w /= 2;
        for i in 0..w {
            acc[i] += acc[i + w];
        }
    }
    acc[0] + s
}

/// A float input's elements as `T`: f32/f64 read in place, f16/bf16 widened once.
fn cow_data<T: Real>(t: &Tensor) -> std::borrow::Cow<'_, [T]> {
    if t.dtype() == T::DTYPE {
        std::borrow::Cow::Borrowed(t.data::<T>())
    } else {
        std::borrow::Cow::Owned(common::float_vec::<T>(t).unwrap_or_default())
    }
}

/// An initial-state input as `T` in layout 0 (`swap` = the layout-1 dims to swap).
fn state_data<T: Real>(
    t: Option<&Tensor>,
    swap: Option<(usize, usize, usize)>,
) -> Option<std::borrow::Cow<'_, [T]>> {
    let v = cow_data::<T>(t?);
    Some(match swap {
        Some((a, b, rest)) => swap01(&v, a, b, rest).into(),
        None => v,
    })
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
        check_x_rank(node, x)?;
        let (seq, batch) = if self.layout {
            (x.shape()[1], x.shape()[0])
        } else {
            (x.shape()[0], x.shape()[1])
        };
        let inp = x.shape()[2];
        let (h, g, nd) = (self.hidden, self.kind.gates(), self.dirs.len());
        let expect =
            |t: &Tensor, shape: &[usize], what: &str| expect_input(node, t, what, dtype, shape);
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
        let lens = sequence_lens(node, sl, seq, batch)?;
        let s = Shapes {
            seq,
            batch,
            input: inp,
        };
        macro_rules! go {
            ($T:ty) => {{
                // f32/f64 inputs are read in place; f16/bf16 are widened to f32 once.
                let cv = cow_data::<$T>;
                let mut xv = cv(x);
                if self.layout {
                    xv = swap01(&xv, batch, seq, inp).into();
                }
                let swap = self.layout.then_some((batch, nd, h));
                let st = |t| state_data::<$T>(t, swap);
                let (h0v, c0v) = (st(h0), st(c0));
                let (bv, pv) = (b.map(cv), p.map(cv));
                let (wv, rv) = (cv(w), cv(r));
                let (mut y, mut yh, mut yc) = self.compute::<$T>(
                    &s,
                    RnnInputs {
                        x: &xv,
                        w: &wv,
                        r: &rv,
                        b: bv.as_deref(),
                        lens: &lens,
                        h0: h0v.as_deref(),
                        c0: c0v.as_deref(),
                        p: pv.as_deref(),
                    },
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
                let to = |v: Vec<$T>, shape: Vec<usize>| -> Tensor {
                    if dtype == DataType::Float64 {
                        Tensor::from_vec(shape, v)
                    } else {
                        common::downcast(Tensor::from_vec(shape, v), dtype)
                    }
                };
                let mut out = vec![Value::Tensor(to(y, y_shape))];
                if self.n_outputs > 1 {
                    out.push(Value::Tensor(to(yh, state_shape.clone())));
                }
                if self.n_outputs > 2 {
                    out.push(Value::Tensor(to(yc, state_shape)));
                }
                out
            }};
        }
        let out = if dtype == DataType::Float64 {
            go!(f64)
        } else {
            go!(f32)
        };
        Ok(out)
    }
}

fn make(ctx: &BuildContext<'_>, kind: Kind) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let (hidden, dirs) = hidden_and_directions(n)?;
    Ok(Box::new(RnnKernel {
        node: n.describe(),
        kind,
        hidden,
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

#[cfg(test)]
#[path = "rnn_tests.rs"]
mod tests;
