//! com.microsoft DynamicQuantizeLSTM: an LSTM (gates i, o, f, c; peepholes, input_forget,
//! clip, activation list, sequence_lens, initial states, every direction) whose W
//! [dirs, input, 4H] and R [dirs, H, 4H] are 8-bit integers (uint8 or int8) with a scale and
//! zero point per direction ([dirs]) or per gate column ([dirs, 4H]).
//!
//! Numerics follow onnxruntime's CPU kernel: the activations entering each product are
//! quantized dynamically to uint8 (DynamicQuantizeLinear's scale and zero point, over all of
//! X once, and over the hidden state of every batch row at each step), the product is exact
//! in integers, and the result is `acc * (x_scale * w_scale[column])` in f32. Weights are
//! widened once, at build time when they are initializers.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid, unsupported};
use crate::ops::nn::quant::matmul_integer::widen;
use crate::ops::nn::quant::quantize::dynamic_u8_params;
use crate::ops::nn::rnn::recurrent::{
    check_x_rank, expect_input, hidden_and_directions, parse_acts, sequence_lens, Act, Kind,
};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::sync::Arc;

const OP: &str = "DynamicQuantizeLSTM";

/// One direction's quantized weight matrix [rows, cols], widened to `q - zero_point`.
struct QMatrix {
    rows: usize,
    cols: usize,
    centered: Vec<f64>,
    /// One scale per column.
    scale: Vec<f32>,
}

impl QMatrix {
    /// `x` [m, rows] quantized to uint8 as a whole, times this matrix: [m, cols] in f32.
    fn product(&self, x: &[f32], m: usize) -> Vec<f32> {
        let (x_scale, x_zp) = dynamic_u8_params(x);
        let xq: Vec<f64> = x
            .iter()
            .map(|&v| {
                ((v / x_scale).round_ties_even() + x_zp).clamp(0.0, 255.0) as f64 - x_zp as f64
            })
            .collect();
        let mut acc = vec![0.0f64; m * self.cols];
        common::gemm(
            m,
            self.cols,
            self.rows,
            &xq,
            self.rows,
            1,
            &self.centered,
            self.cols,
            1,
            &mut acc,
            self.cols,
            1.0,
            0.0,
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
    let qv = widen(node, OP, q, what)?;
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
    let zv = match zp {
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
        }
        None => vec![0.0; sv.len()],
    };
    Ok((0..nd)
        .map(|d| {
            let param = |v: &[f64], j: usize| if per_column { v[d * cols + j] } else { v[d] };
            let scale: Vec<f32> = (0..cols)
                .map(|j| if per_column { sv[d * cols + j] } else { sv[d] })
                .collect();
            let zps: Vec<f64> = (0..cols).map(|j| param(&zv, j)).collect();
            let centered = qv[d * rows * cols..(d + 1) * rows * cols]
                .chunks(cols)
                .flat_map(|row| row.iter().zip(&zps).map(|(&v, &z)| v - z))
                .collect();
            QMatrix {
                rows,
                cols,
                centered,
                scale,
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
    fn clip(&self, x: f32) -> f32 {
        match self.clip {
            Some(cl) => x.clamp(-cl, cl),
            None => x,
        }
    }

    /// Runs every direction; returns (Y [seq, dirs, batch, H], Y_h, Y_c [dirs, batch, H]).
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
        let g = 4 * h;
        let nd = self.dirs.len();
        let mut y = vec![0.0f32; seq * nd * batch * h];
        let mut yh = vec![0.0f32; nd * batch * h];
        let mut yc = vec![0.0f32; nd * batch * h];
        for (d, &reverse) in self.dirs.iter().enumerate() {
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
                // Compiled for AVX2+FMA where the CPU has them, so the gates' FMAs are
                // single instructions (the results are the same either way).
                crate::ops::math::vecmath::with_avx2(|| {
                    for bi in 0..batch {
                        if step >= lens[bi] {
                            continue;
                        }
                        let t = if reverse { lens[bi] - 1 - step } else { step };
                        let xr = &xw[(t * batch + bi) * g..(t * batch + bi + 1) * g];
                        let hrr = &hr[bi * g..(bi + 1) * g];
                        let pre = |j: usize| xr[j] + hrr[j] + bias[j];
                        let hb = &mut hs[bi * h..(bi + 1) * h];
                        let cb = &mut cs[bi * h..(bi + 1) * h];
                        for j in 0..h {
                            let (pi, po, pf) = match pd {
                                Some(p) => (p[j], p[h + j], p[2 * h + j]),
                                None => (0.0, 0.0, 0.0),
                            };
                            let cp = cb[j];
                            let i = acts[0].apply_f32(self.clip(pre(j) + pi * cp));
                            let f = if self.input_forget {
                                1.0 - i
                            } else {
                                acts[0].apply_f32(self.clip(pre(2 * h + j) + pf * cp))
                            };
                            let cc = acts[1].apply_f32(self.clip(pre(3 * h + j)));
                            let cn = f * cp + i * cc;
                            let o = acts[0].apply_f32(self.clip(pre(h + j) + po * cn));
                            cb[j] = cn;
                            hb[j] = o * acts[2].apply_f32(cn);
                        }
                        let yo = ((t * nd + d) * batch + bi) * h;
                        y[yo..yo + h].copy_from_slice(hb);
                    }
                });
            }
            yh[d * batch * h..(d + 1) * batch * h].copy_from_slice(&hs);
            yc[d * batch * h..(d + 1) * batch * h].copy_from_slice(&cs);
        }
        (y, yh, yc)
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
