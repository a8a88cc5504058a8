//! com.microsoft DynamicQuantizeLSTM: an LSTM (gates i, o, f, c; peepholes, input_forget,
//! clip, activation list, sequence_lens, initial states, every direction) whose W
//! [dirs, input, 4H] and R [dirs, H, 4H] are 8-bit integers (uint8 or int8) with a scale and
//! zero point per direction ([dirs]) or per gate column ([dirs, 4H]).
//!
//! Numerics follow onnxruntime's CPU kernel: the activations entering each product are
//! quantized dynamically to uint8 (DynamicQuantizeLinear's scale and zero point, over all of
//! X once, and over the hidden state of every batch row at each step), the product is exact
//! in integers (the 8-bit GEMM of [`crate::ops::nn::gemm::igemm`]), and the result is
//! `acc * (x_scale * w_scale[column])` in f32. Weights are packed once, at build time when
//! they are initializers; the two directions of a bidirectional LSTM run in parallel.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{invalid, unsupported};
use crate::ops::nn::gemm::igemm::{igemm, PackedB8, RowsA, Zero};
use crate::ops::nn::quant::matmul_integer::widen;
use crate::ops::nn::quant::quantize::{dynamic_u8_params, quantize_u8};
use crate::ops::nn::rnn::recurrent::{
    check_x_rank, expect_input, hidden_and_directions, parse_acts, sequence_lens, Act, Kind,
};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::sync::Arc;

const OP: &str = "DynamicQuantizeLSTM";

/// One direction's quantized weight matrix [rows, cols], packed for the integer GEMM.
struct QMatrix {
    rows: usize,
    cols: usize,
    packed: PackedB8,
    /// One zero point per column (source domain).
    zp: Vec<i32>,
    /// One scale per column.
    scale: Vec<f32>,
}

impl QMatrix {
    /// `x` [m, rows] quantized to uint8 as a whole, times this matrix: [m, cols] in f32.
    fn product(&self, x: &[f32], m: usize) -> Vec<f32> {
        let (x_scale, x_zp) = dynamic_u8_params(x);
        let mut xq = vec![0u8; x.len()];
        quantize_u8(x, x_scale, x_zp, &mut xq);
        let ra = RowsA::new(&xq, false, m, self.rows, self.rows);
        let mut acc = vec![0i32; m * self.cols];
        igemm(
            &ra,
            Zero::All(x_zp as i32),
            &self.packed,
            Zero::Each(&self.zp),
            &mut acc,
            self.cols,
        );
        let mult: Vec<f32> = self.scale.iter().map(|&s| x_scale * s).collect();
        acc.chunks(self.cols)
            .flat_map(|row| row.iter().zip(&mult).map(|(&a, &s)| a as f32 * s))
            .collect()
    }
}

/// W or R for every direction, from the quantized tensor, its scale and zero point.
fn prepare(
    node: &str,
    what: &str,
    q: &Tensor,
    scale: &Tensor,
    zp: Option<&Tensor>,
    dims: [usize; 3],
) -> Result<Vec<QMatrix>, EpError> {
    let [nd, rows, cols] = dims;
    if q.shape() != dims {
        return Err(invalid(
            node,
            format!(
                "{what} is {:?}; want {dims:?} ([directions, inputs, 4 * hidden_size])",
                q.shape()
            ),
        ));
    }
    if !matches!(q.dtype(), DataType::Uint8 | DataType::Int8) {
        return Err(unsupported(
            node,
            OP,
            q.dtype(),
            &format!("uint8 or int8 {what}"),
        ));
    }
    let signed = q.dtype() == DataType::Int8;
    if scale.dtype() != DataType::Float32 {
        return Err(unsupported(
            node,
            OP,
            scale.dtype(),
            &format!("float {what}_scale"),
        ));
    }
    let sv = scale.data::<f32>();
    let per_column = match sv.len() {
        n if n == nd => false,
        n if n == nd * cols => true,
        _ => {
            return Err(invalid(
                node,
                format!(
                "{what}_scale is {:?}; want [{nd}] (per direction) or [{nd}, {cols}] (per column)",
                scale.shape()
            ),
            ))
        }
    };
    let zv: Vec<i32> = match zp {
        Some(z) => {
            if z.dtype() != q.dtype() || z.numel() != sv.len() {
                return Err(invalid(
                    node,
                    format!(
                        "{what}_zero_point is {} {:?}; want {} with {what}_scale's shape {:?}",
                        z.dtype(),
                        z.shape(),
                        q.dtype(),
                        scale.shape()
                    ),
                ));
            }
            widen(node, OP, z, what)?
                .into_iter()
                .map(|v| v as i32)
                .collect()
        }
        None => vec![0; sv.len()],
    };
    let bytes = q.bytes();
    Ok((0..nd)
        .map(|d| {
            let at = |j: usize| if per_column { d * cols + j } else { d };
            QMatrix {
                rows,
                cols,
                packed: PackedB8::new(
                    &bytes[d * rows * cols..(d + 1) * rows * cols],
                    signed,
                    rows,
                    cols,
                    cols,
                ),
                zp: (0..cols).map(|j| zv[at(j)]).collect(),
                scale: (0..cols).map(|j| sv[at(j)]).collect(),
            }
        })
        .collect())
}

struct Weights {
    w: Vec<QMatrix>,
    r: Vec<QMatrix>,
}

struct QLstmKernel {
    node: String,
    hidden: usize,
    /// Directions: false = forward, true = reverse.
    dirs: Vec<bool>,
    acts: Vec<Act>,
    clip: Option<f32>,
    input_forget: bool,
    n_outputs: usize,
    /// Prepared at build time when W, R and their parameters are initializers.
    weights: Option<Arc<Weights>>,
}

/// The weight inputs (W, R, W_scale, W_zero_point, R_scale, R_zero_point) from `get`.
fn weights_from<'a>(
    node: &str,
    get: impl Fn(usize) -> Option<&'a Tensor>,
    input: usize,
    hidden: usize,
    nd: usize,
) -> Result<Weights, EpError> {
    let need = |i: usize, what: &str| {
        get(i).ok_or_else(|| invalid(node, format!("required input {what} is missing")))
    };
    let g = 4 * hidden;
    Ok(Weights {
        w: prepare(
            node,
            "W",
            need(1, "W")?,
            need(8, "W_scale")?,
            get(9),
            [nd, input, g],
        )?,
        r: prepare(
            node,
            "R",
            need(2, "R")?,
            need(10, "R_scale")?,
            get(11),
            [nd, hidden, g],
        )?,
    })
}

impl QLstmKernel {
    /// Runs every direction (the two of a bidirectional LSTM in parallel); returns
    /// (Y [seq, dirs, batch, H], Y_h, Y_c [dirs, batch, H]).
    #[allow(clippy::too_many_arguments)]
    fn compute(
        &self,
        wt: &Weights,
        x: &[f32],
        (seq, batch): (usize, usize),
        b: Option<&[f32]>,
        lens: &[usize],
        h0: Option<&[f32]>,
        c0: Option<&[f32]>,
        p: Option<&[f32]>,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let h = self.hidden;
        let nd = self.dirs.len();
        let run = |d: usize| self.direction(d, wt, x, (seq, batch), b, lens, h0, c0, p);
        let per_dir: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = if nd == 2 {
            let (f, r) = rayon::join(|| run(0), || run(1));
            vec![f, r]
        } else {
            (0..nd).map(run).collect()
        };
        let mut y = vec![0.0f32; seq * nd * batch * h];
        let mut yh = Vec::with_capacity(nd * batch * h);
        let mut yc = Vec::with_capacity(nd * batch * h);
        for (d, (yd, hs, cs)) in per_dir.into_iter().enumerate() {
            for t in 0..seq {
                let yo = (t * nd + d) * batch * h;
                y[yo..yo + batch * h].copy_from_slice(&yd[t * batch * h..(t + 1) * batch * h]);
            }
            yh.extend_from_slice(&hs);
            yc.extend_from_slice(&cs);
        }
        (y, yh, yc)
    }

    /// Direction `d`: (its Y [seq, batch, H], Y_h, Y_c [batch, H]).
    #[allow(clippy::too_many_arguments)]
    fn direction(
        &self,
        d: usize,
        wt: &Weights,
        x: &[f32],
        (seq, batch): (usize, usize),
        b: Option<&[f32]>,
        lens: &[usize],
        h0: Option<&[f32]>,
        c0: Option<&[f32]>,
        p: Option<&[f32]>,
    ) -> (Vec<f32>, Vec<f32>, Vec<f32>) {
        let h = self.hidden;
        let g = 4 * h;
        let reverse = self.dirs[d];
        let mut y = vec![0.0f32; seq * batch * h];
        let acts = &self.acts[d * 3..d * 3 + 3];
        let xw = wt.w[d].product(x, seq * batch);
        // Wb + Rb, added once per gate.
        let bias: Vec<f32> = match b {
            Some(b) => (0..g)
                .map(|j| b[d * 2 * g + j] + b[d * 2 * g + g + j])
                .collect(),
            None => vec![0.0; g],
        };
        let slice = |v: Option<&[f32]>| match v {
            Some(v) => v[d * batch * h..(d + 1) * batch * h].to_vec(),
            None => vec![0.0; batch * h],
        };
        let (mut hs, mut cs) = (slice(h0), slice(c0));
        let pd = p.map(|p| &p[d * 3 * h..(d + 1) * 3 * h]);
        let max_len = lens.iter().copied().max().unwrap_or(0);
        let (mut gates, mut th) = (vec![0.0f32; g], vec![0.0f32; h]);
        for step in 0..max_len {
            // The product reads the previous step's output rows, as onnxruntime does: a
            // row whose sequence ended before that step enters it (and the quantization
            // range) as zeros.
            let hr = if lens.iter().all(|&l| step <= l) {
                wt.r[d].product(&hs, batch)
            } else {
                let mut live = hs.clone();
                for (bi, &l) in lens.iter().enumerate() {
                    if step > l {
                        live[bi * h..(bi + 1) * h].fill(0.0);
                    }
                }
                wt.r[d].product(&live, batch)
            };
            for bi in 0..batch {
                if step >= lens[bi] {
                    continue;
                }
                let t = if reverse { lens[bi] - 1 - step } else { step };
                let xr = &xw[(t * batch + bi) * g..(t * batch + bi + 1) * g];
                let hrr = &hr[bi * g..(bi + 1) * g];
                let hb = &mut hs[bi * h..(bi + 1) * h];
                let cb = &mut cs[bi * h..(bi + 1) * h];
                self.gates(acts, xr, hrr, &bias, pd, (&mut gates, &mut th), hb, cb);
                let yo = (t * batch + bi) * h;
                y[yo..yo + h].copy_from_slice(hb);
            }
        }
        (y, hs, cs)
    }

    /// One batch row's cell update from its gate inputs `xr` (X W) and `hrr` (H R): the
    /// same f32 operations, in the same order, as onnxruntime's per-element loop, run as
    /// vectorizable passes over the gates (`gates`, `th`: scratch of 4H and H floats).
    #[allow(clippy::too_many_arguments)]
    fn gates(
        &self,
        acts: &[Act],
        xr: &[f32],
        hrr: &[f32],
        bias: &[f32],
        peep: Option<&[f32]>,
        (gates, th): (&mut [f32], &mut [f32]),
        hb: &mut [f32],
        cb: &mut [f32],
    ) {
        let h = self.hidden;
        crate::ops::math::vecmath::with_avx2(|| {
            // onnxruntime's order: (X W + H R) + P . C, then + (Wb + Rb), then clip.
            for ((o, &x), &r) in gates.iter_mut().zip(xr).zip(hrr) {
                *o = x + r;
            }
            let (bi, rest) = bias.split_at(h);
            let (bo, rest) = rest.split_at(h);
            let (bf, bc) = rest.split_at(h);
            let add = |v: &mut [f32], b: &[f32]| v.iter_mut().zip(b).for_each(|(x, &b)| *x += b);
            let (gi, rest) = gates.split_at_mut(h);
            let (go, rest) = rest.split_at_mut(h);
            let (gf, gc) = rest.split_at_mut(h);
            let zeros;
            let p = match peep {
                Some(p) => p,
                None => {
                    zeros = vec![0.0f32; 3 * h];
                    &zeros
                }
            };
            let (pi, po, pf) = (&p[..h], &p[h..2 * h], &p[2 * h..3 * h]);
            let clip = |v: &mut [f32]| {
                if let Some(cl) = self.clip {
                    v.iter_mut().for_each(|x| *x = x.clamp(-cl, cl));
                }
            };
            for ((i, &p), &c) in gi.iter_mut().zip(pi).zip(cb.iter()) {
                *i += p * c;
            }
            add(gi, bi);
            clip(gi);
            acts[0].apply_slice(gi);
            if self.input_forget {
                for (f, &i) in gf.iter_mut().zip(gi.iter()) {
                    *f = 1.0 - i;
                }
            } else {
                for ((f, &p), &c) in gf.iter_mut().zip(pf).zip(cb.iter()) {
                    *f += p * c;
                }
                add(gf, bf);
                clip(gf);
                acts[0].apply_slice(gf);
            }
            add(gc, bc);
            clip(gc);
            acts[1].apply_slice(gc);
            for (((c, &f), &i), &cc) in cb.iter_mut().zip(gf.iter()).zip(gi.iter()).zip(gc.iter()) {
                *c = f * *c + i * cc;
            }
            for ((o, &p), &c) in go.iter_mut().zip(po).zip(cb.iter()) {
                *o += p * c;
            }
            add(go, bo);
            clip(go);
            acts[0].apply_slice(go);
            th.copy_from_slice(cb);
            acts[2].apply_slice(th);
            for ((o, &gv), &t) in hb.iter_mut().zip(go.iter()).zip(th.iter()) {
                *o = gv * t;
            }
        })
    }
}

impl CpuKernel for QLstmKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        if x.dtype() != DataType::Float32 {
            return Err(unsupported(node, OP, x.dtype(), "float X"));
        }
        check_x_rank(node, x)?;
        let (seq, batch, inp) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        let (h, nd) = (self.hidden, self.dirs.len());
        let prepared;
        let wt: &Weights = match &self.weights {
            Some(w) => w,
            None => {
                let get = |i: usize| optional_tensor_input(node, inputs, i).ok().flatten();
                prepared = weights_from(node, get, inp, h, nd)?;
                &prepared
            }
        };
        if wt.w[0].rows != inp {
            return Err(invalid(
                node,
                format!("X has input_size {inp} but W is for {}", wt.w[0].rows),
            ));
        }
        let float_input = |i: usize, what: &str, shape: &[usize]| -> Result<_, EpError> {
            let Some(t) = optional_tensor_input(node, inputs, i)? else {
                return Ok(None);
            };
            expect_input(node, t, what, DataType::Float32, shape)?;
            Ok(Some(t.data::<f32>()))
        };
        let b = float_input(3, "B", &[nd, 8 * h])?;
        let h0 = float_input(5, "initial_h", &[nd, batch, h])?;
        let c0 = float_input(6, "initial_c", &[nd, batch, h])?;
        let p = float_input(7, "P", &[nd, 3 * h])?;
        let lens = sequence_lens(node, optional_tensor_input(node, inputs, 4)?, seq, batch)?;
        let (y, yh, yc) = self.compute(wt, x.data::<f32>(), (seq, batch), b, &lens, h0, c0, p);
        let state = vec![nd, batch, h];
        let mut out = vec![Value::Tensor(Tensor::from_vec(vec![seq, nd, batch, h], y))];
        if self.n_outputs > 1 {
            out.push(Value::Tensor(Tensor::from_vec(state.clone(), yh)));
        }
        if self.n_outputs > 2 {
            out.push(Value::Tensor(Tensor::from_vec(state, yc)));
        }
        Ok(out)
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let (hidden, dirs) = hidden_and_directions(n)?;
    let constant = |i: usize| ctx.constant(i).and_then(Value::as_tensor);
    let all_constant = [1, 2, 8, 10].iter().all(|&i| constant(i).is_some())
        && [9, 11]
            .iter()
            .all(|&i| n.inputs.get(i).copied().flatten().is_none() || constant(i).is_some());
    let weights = match (all_constant, constant(1)) {
        (true, Some(w)) if w.rank() == 3 => Some(Arc::new(weights_from(
            &node,
            constant,
            w.shape()[1],
            hidden,
            dirs.len(),
        )?)),
        _ => None,
    };
    Ok(Box::new(QLstmKernel {
        node,
        hidden,
        acts: parse_acts(n, Kind::Lstm, dirs.len())?,
        dirs,
        clip: attrs::opt_float(n, "clip")?,
        input_forget: attrs::int(n, "input_forget", 0)? != 0,
        n_outputs: n.outputs.len(),
        weights,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("com.microsoft", OP, 1, build);
}

#[cfg(test)]
#[path = "qlstm_tests.rs"]
mod tests;
