//! DynamicQuantizeLSTM against a scalar transcription of onnxruntime's algorithm (dynamic
//! uint8 quantization of X and of each step's hidden state, exact integer products, f32
//! rescale, f32 gates): both directions, int8 and uint8 weights, per-direction and per-column
//! scales and zero points, peepholes, clip, input_forget, sequence_lens, initial states,
//! weights constant at build or not. The results must match bit for bit.

use super::*;
use crate::kernel::BuildContext;
use crate::ops::math::vecmath::{sigmoid, tanh};
use crate::ops::nn::common::testutil::{f32s, node, rand};
use onnx_runtime_ir::Attribute;

struct Case {
    seq: usize,
    batch: usize,
    inp: usize,
    h: usize,
    bidirectional: bool,
    signed: bool,
    per_column: bool,
    clip: Option<f32>,
    input_forget: bool,
    lens: Option<Vec<i32>>,
}

/// Quantized weights: the tensor and its values.
fn weights(shape: Vec<usize>, seed: u64, signed: bool) -> (Tensor, Vec<i64>) {
    let n: usize = shape.iter().product();
    let raw: Vec<u8> = rand(n, seed, 0.0, 256.0).iter().map(|&v| v as u8).collect();
    if signed {
        let v: Vec<i8> = raw.iter().map(|&b| b as i8).collect();
        let vals = v.iter().map(|&x| x as i64).collect();
        (Tensor::from_vec(shape, v), vals)
    } else {
        let vals = raw.iter().map(|&x| x as i64).collect();
        (Tensor::from_vec(shape, raw), vals)
    }
}

/// `x` [m, rows] quantized as a whole times `w` [rows, cols] (values, zero point and scale
/// per column), rescaled: as onnxruntime computes it.
fn product(x: &[f32], m: usize, w: &[i64], wz: &[i64], ws: &[f32], cols: usize) -> Vec<f32> {
    let rows = x.len() / m.max(1);
    let lo = x.iter().copied().fold(0.0f32, f32::min);
    let hi = x.iter().copied().fold(0.0f32, f32::max);
    let s = if hi == lo { 1.0 } else { (hi - lo) / 255.0 };
    let z = (0.0 - lo / s).clamp(0.0, 255.0).round_ties_even();
    let q: Vec<i64> = x
        .iter()
        .map(|&v| ((v / s).round_ties_even() + z).clamp(0.0, 255.0) as i64 - z as i64)
        .collect();
    let mut out = vec![0.0f32; m * cols];
    for i in 0..m {
        for j in 0..cols {
            let acc: i64 = (0..rows)
                .map(|p| q[i * rows + p] * (w[p * cols + j] - wz[j]))
                .sum();
            out[i * cols + j] = acc as i32 as f32 * (s * ws[j]);
        }
    }
    out
}

fn run_case(c: &Case, seed: u64) {
    let (seq, batch, inp, h) = (c.seq, c.batch, c.inp, c.h);
    let nd = if c.bidirectional { 2 } else { 1 };
    let g = 4 * h;
    let x = f32s(&rand(seq * batch * inp, seed, -2.0, 2.0));
    let (w, wv) = weights(vec![nd, inp, g], seed + 1, c.signed);
    let (r, rv) = weights(vec![nd, h, g], seed + 2, c.signed);
    let np = if c.per_column { nd * g } else { nd };
    let pshape = if c.per_column { vec![nd, g] } else { vec![nd] };
    let ws = f32s(&rand(np, seed + 3, 0.001, 0.01));
    let rs = f32s(&rand(np, seed + 4, 0.001, 0.01));
    let (wz, wzv) = weights(pshape.clone(), seed + 5, c.signed);
    let (rz, rzv) = weights(pshape.clone(), seed + 6, c.signed);
    let b = f32s(&rand(nd * 2 * g, seed + 7, -0.5, 0.5));
    let h0 = f32s(&rand(nd * batch * h, seed + 8, -0.5, 0.5));
    let c0 = f32s(&rand(nd * batch * h, seed + 9, -0.5, 0.5));
    let p = f32s(&rand(nd * 3 * h, seed + 10, -0.5, 0.5));
    let lens: Vec<usize> = match &c.lens {
        Some(l) => l.iter().map(|&v| v as usize).collect(),
        None => vec![seq; batch],
    };
    // The reference.
    let per = |v: &[i64], d: usize| -> Vec<i64> {
        (0..g)
            .map(|j| v[if c.per_column { d * g + j } else { d }])
            .collect()
    };
    let perf = |v: &[f32], d: usize| -> Vec<f32> {
        (0..g)
            .map(|j| v[if c.per_column { d * g + j } else { d }])
            .collect()
    };
    let clip = |v: f32| c.clip.map_or(v, |cl| v.clamp(-cl, cl));
    let mut want_y = vec![0.0f32; seq * nd * batch * h];
    let mut want_h = vec![0.0f32; nd * batch * h];
    let mut want_c = vec![0.0f32; nd * batch * h];
    for d in 0..nd {
        let reverse = d == 1;
        let wd = &wv[d * inp * g..(d + 1) * inp * g];
        let rd = &rv[d * h * g..(d + 1) * h * g];
        let xw = product(&x, seq * batch, wd, &per(&wzv, d), &perf(&ws, d), g);
        let mut hs = h0[d * batch * h..(d + 1) * batch * h].to_vec();
        let mut cs = c0[d * batch * h..(d + 1) * batch * h].to_vec();
        let max_len = lens.iter().copied().max().unwrap_or(0);
        for step in 0..max_len {
            let mut live = hs.clone();
            for (bi, &l) in lens.iter().enumerate() {
                if step > l {
                    live[bi * h..(bi + 1) * h].fill(0.0);
                }
            }
            let hr = product(&live, batch, rd, &per(&rzv, d), &perf(&rs, d), g);
            for bi in 0..batch {
                if step >= lens[bi] {
                    continue;
                }
                let t = if reverse { lens[bi] - 1 - step } else { step };
                // onnxruntime's order: (X W + H R) + P . C, then + (Wb + Rb).
                let pre = |j: usize, peep: f32| {
                    (xw[(t * batch + bi) * g + j] + hr[bi * g + j] + peep)
                        + (b[d * 2 * g + j] + b[d * 2 * g + g + j])
                };
                for j in 0..h {
                    let (pi, po, pf) = (
                        p[d * 3 * h + j],
                        p[d * 3 * h + h + j],
                        p[d * 3 * h + 2 * h + j],
                    );
                    let cp = cs[bi * h + j];
                    let i = sigmoid(clip(pre(j, pi * cp)));
                    let f = if c.input_forget {
                        1.0 - i
                    } else {
                        sigmoid(clip(pre(2 * h + j, pf * cp)))
                    };
                    let cc = tanh(clip(pre(3 * h + j, 0.0)));
                    let cn = f * cp + i * cc;
                    let o = sigmoid(clip(pre(h + j, po * cn)));
                    cs[bi * h + j] = cn;
                    hs[bi * h + j] = o * tanh(cn);
                }
                let yo = ((t * nd + d) * batch + bi) * h;
                want_y[yo..yo + h].copy_from_slice(&hs[bi * h..(bi + 1) * h]);
            }
        }
        want_h[d * batch * h..(d + 1) * batch * h].copy_from_slice(&hs);
        want_c[d * batch * h..(d + 1) * batch * h].copy_from_slice(&cs);
    }
    // The kernel.
    let mut at = vec![
        ("hidden_size", Attribute::Int(h as i64)),
        ("input_forget", Attribute::Int(c.input_forget as i64)),
    ];
    if c.bidirectional {
        at.push(("direction", Attribute::String("bidirectional".into())));
    }
    if let Some(cl) = c.clip {
        at.push(("clip", Attribute::Float(cl)));
    }
    let nd_node = node(OP, 12, 3, at);
    let t = |shape: Vec<usize>, v: &[f32]| Value::Tensor(Tensor::from_vec(shape, v.to_vec()));
    let vals: Vec<Option<Value>> = vec![
        Some(t(vec![seq, batch, inp], &x)),
        Some(Value::Tensor(w)),
        Some(Value::Tensor(r)),
        Some(t(vec![nd, 2 * g], &b)),
        c.lens
            .as_ref()
            .map(|l| Value::Tensor(Tensor::from_vec(vec![batch], l.clone()))),
        Some(t(vec![nd, batch, h], &h0)),
        Some(t(vec![nd, batch, h], &c0)),
        Some(t(vec![nd, 3 * h], &p)),
        Some(t(pshape.clone(), &ws)),
        Some(Value::Tensor(wz)),
        Some(t(pshape, &rs)),
        Some(Value::Tensor(rz)),
    ];
    let refs: Vec<Option<&Value>> = vals.iter().map(|v| v.as_ref()).collect();
    for constant in [false, true] {
        let consts: Vec<Option<&Value>> = refs
            .iter()
            .enumerate()
            .map(|(i, v)| {
                if constant && [1, 2, 8, 9, 10, 11].contains(&i) {
                    *v
                } else {
                    None
                }
            })
            .collect();
        let k = build(&BuildContext {
            constant_inputs: &consts,
            ..BuildContext::new(&nd_node, 1)
        })
        .unwrap();
        let out = k.run(&refs).unwrap();
        let got = |i: usize| out[i].as_tensor().unwrap().data::<f32>().to_vec();
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&got(0)), bits(&want_y), "Y, constant {constant}");
        assert_eq!(bits(&got(1)), bits(&want_h), "Y_h, constant {constant}");
        assert_eq!(bits(&got(2)), bits(&want_c), "Y_c, constant {constant}");
    }
}

#[test]
fn dynamic_quantize_lstm_matches_scalar_reference() {
    let base = Case {
        seq: 5,
        batch: 3,
        inp: 13,
        h: 20,
        bidirectional: true,
        signed: true,
        per_column: false,
        clip: None,
        input_forget: false,
        lens: None,
    };
    run_case(&base, 1);
    run_case(
        &Case {
            signed: false,
            per_column: true,
            lens: Some(vec![5, 2, 4]),
            ..base
        },
        20,
    );
    run_case(
        &Case {
            seq: 4,
            batch: 1,
            inp: 64,
            h: 36,
            bidirectional: false,
            clip: Some(0.7),
            input_forget: true,
            per_column: true,
            ..base
        },
        40,
    );
}
