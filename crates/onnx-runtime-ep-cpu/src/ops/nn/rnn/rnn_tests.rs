//! RNN/GRU/LSTM against a plain float64 transcription of the ONNX equations: both directions,
//! batch sizes on both sides of the small-batch path, sequence_lens, initial states, peepholes
//! and GRU's two reset modes; hidden sizes that take the threaded row products.

use super::*;
use crate::ops::nn::common::testutil::*;
use onnx_runtime_ir::Attribute;

fn sig(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

struct Case {
    kind: Kind,
    seq: usize,
    batch: usize,
    inp: usize,
    h: usize,
    nd: usize,
    lbr: bool,
    lens: Option<Vec<usize>>,
}

/// `m` (rows x k, row-major) times vector `v`.
fn mv(m: &[f64], v: &[f64], rows: usize, k: usize) -> Vec<f64> {
    (0..rows)
        .map(|j| (0..k).map(|i| m[j * k + i] * v[i]).sum())
        .collect()
}

#[allow(clippy::too_many_arguments)]
fn reference(
    c: &Case,
    x: &[f64],
    w: &[f64],
    r: &[f64],
    b: &[f64],
    h0: &[f64],
    c0: &[f64],
    p: &[f64],
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (h, g) = (c.h, c.kind.gates());
    let lens = c.lens.clone().unwrap_or(vec![c.seq; c.batch]);
    let mut y = vec![0.0; c.seq * c.nd * c.batch * h];
    let mut yh = vec![0.0; c.nd * c.batch * h];
    let mut yc = vec![0.0; c.nd * c.batch * h];
    for d in 0..c.nd {
        let wd = &w[d * g * h * c.inp..][..g * h * c.inp];
        let rd = &r[d * g * h * h..][..g * h * h];
        let (wb, rb) = (
            &b[d * 2 * g * h..][..g * h],
            &b[d * 2 * g * h + g * h..][..g * h],
        );
        for bi in 0..c.batch {
            let mut hs = h0[(d * c.batch + bi) * h..][..h].to_vec();
            let mut cs = c0[(d * c.batch + bi) * h..][..h].to_vec();
            for step in 0..lens[bi] {
                let t = if d == 1 { lens[bi] - 1 - step } else { step };
                let xt = &x[(t * c.batch + bi) * c.inp..][..c.inp];
                let xw = mv(wd, xt, g * h, c.inp);
                let hr = mv(rd, &hs, g * h, h);
                let gate = |k: usize, j: usize| xw[k * h + j] + wb[k * h + j];
                match c.kind {
                    Kind::Rnn => {
                        hs = (0..h)
                            .map(|j| (gate(0, j) + hr[j] + rb[j]).tanh())
                            .collect();
                    }
                    Kind::Gru => {
                        let z: Vec<f64> = (0..h).map(|j| sig(gate(0, j) + hr[j] + rb[j])).collect();
                        let rg: Vec<f64> = (0..h)
                            .map(|j| sig(gate(1, j) + hr[h + j] + rb[h + j]))
                            .collect();
                        let hh: Vec<f64> = if c.lbr {
                            (0..h)
                                .map(|j| {
                                    (gate(2, j) + rg[j] * (hr[2 * h + j] + rb[2 * h + j])).tanh()
                                })
                                .collect()
                        } else {
                            let rh: Vec<f64> = (0..h).map(|k| rg[k] * hs[k]).collect();
                            let prod = mv(&rd[2 * h * h..], &rh, h, h);
                            (0..h)
                                .map(|j| (gate(2, j) + prod[j] + rb[2 * h + j]).tanh())
                                .collect()
                        };
                        hs = (0..h)
                            .map(|j| (1.0 - z[j]) * hh[j] + z[j] * hs[j])
                            .collect();
                    }
                    Kind::Lstm => {
                        let pd = &p[d * 3 * h..][..3 * h];
                        let pre = |k: usize, j: usize| gate(k, j) + hr[k * h + j] + rb[k * h + j];
                        for j in 0..h {
                            let i = sig(pre(0, j) + pd[j] * cs[j]);
                            let f = sig(pre(2, j) + pd[2 * h + j] * cs[j]);
                            let cc = pre(3, j).tanh();
                            let cn = f * cs[j] + i * cc;
                            let o = sig(pre(1, j) + pd[h + j] * cn);
                            cs[j] = cn;
                            hs[j] = o * cn.tanh();
                        }
                    }
                }
                y[((t * c.nd + d) * c.batch + bi) * h..][..h].copy_from_slice(&hs);
            }
            yh[(d * c.batch + bi) * h..][..h].copy_from_slice(&hs);
            yc[(d * c.batch + bi) * h..][..h].copy_from_slice(&cs);
        }
    }
    (y, yh, yc)
}

fn check(c: Case, seed: u64) {
    let (h, g, nd) = (c.h, c.kind.gates(), c.nd);
    let s = 1.0 / (h as f64).sqrt();
    let x = rand(c.seq * c.batch * c.inp, seed, -1.0, 1.0);
    let w = rand(nd * g * h * c.inp, seed + 1, -s, s);
    let r = rand(nd * g * h * h, seed + 2, -s, s);
    let b = rand(nd * 2 * g * h, seed + 3, -0.5, 0.5);
    let h0 = rand(nd * c.batch * h, seed + 4, -1.0, 1.0);
    let c0 = rand(nd * c.batch * h, seed + 5, -1.0, 1.0);
    let p = rand(nd * 3 * h, seed + 6, -0.5, 0.5);
    let (name, factory): (&str, crate::CpuFactory) = match c.kind {
        Kind::Rnn => ("RNN", build_rnn),
        Kind::Gru => ("GRU", build_gru),
        Kind::Lstm => ("LSTM", build_lstm),
    };
    let dir = if nd == 2 { "bidirectional" } else { "forward" };
    let mut attrs = vec![
        ("hidden_size", Attribute::Int(h as i64)),
        ("direction", Attribute::String(dir.into())),
    ];
    if c.lbr {
        attrs.push(("linear_before_reset", Attribute::Int(1)));
    }
    let t = |shape: Vec<usize>, v: &[f64]| Some(Tensor::from_vec(shape, f32s(v)));
    let mut inputs = vec![
        t(vec![c.seq, c.batch, c.inp], &x),
        t(vec![nd, g * h, c.inp], &w),
        t(vec![nd, g * h, h], &r),
        t(vec![nd, 2 * g * h], &b),
        c.lens.as_ref().map(|l| {
            Tensor::from_vec(
                vec![c.batch],
                l.iter().map(|&v| v as i32).collect::<Vec<_>>(),
            )
        }),
        t(vec![nd, c.batch, h], &h0),
    ];
    let n_out = if c.kind == Kind::Lstm { 3 } else { 2 };
    if c.kind == Kind::Lstm {
        inputs.push(t(vec![nd, c.batch, h], &c0));
        inputs.push(t(vec![nd, 3 * h], &p));
    }
    let c0_used = if c.kind == Kind::Lstm {
        c0.clone()
    } else {
        vec![0.0; c0.len()]
    };
    let node = node(name, inputs.len(), n_out, attrs);
    let out = run(factory, &node, 14, &inputs).unwrap();
    let (y, yh, yc) = reference(&c, &x, &w, &r, &b, &h0, &c0_used, &p);
    assert_eq!(out[0].shape(), &[c.seq, nd, c.batch, h]);
    assert_close(out[0].data::<f32>(), &y, 2e-5);
    assert_close(out[1].data::<f32>(), &yh, 2e-5);
    if c.kind == Kind::Lstm {
        assert_close(out[2].data::<f32>(), &yc, 2e-5);
    }
}

#[test]
fn lstm_matches_float64_reference() {
    for (batch, nd, h, lens) in [
        (1, 1, 5, None),
        (3, 2, 7, Some(vec![4, 2, 0])),
        (6, 2, 4, Some(vec![1, 4, 3, 4, 2, 4])),
        (1, 2, 300, None),
    ] {
        let c = Case {
            kind: Kind::Lstm,
            seq: 4,
            batch,
            inp: 6,
            h,
            nd,
            lbr: false,
            lens,
        };
        check(c, 10 + h as u64);
    }
}

#[test]
fn gru_and_rnn_match_float64_reference() {
    for (kind, lbr, batch, nd, h) in [
        (Kind::Gru, false, 2, 2, 5),
        (Kind::Gru, true, 1, 1, 9),
        (Kind::Gru, false, 5, 1, 3),
        (Kind::Gru, true, 3, 2, 260),
        (Kind::Rnn, false, 1, 2, 6),
        (Kind::Rnn, false, 7, 1, 4),
    ] {
        let lens = if batch > 1 {
            Some((0..batch).map(|i| 3 - i % 3).collect())
        } else {
            None
        };
        let c = Case {
            kind,
            seq: 3,
            batch,
            inp: 5,
            h,
            nd,
            lbr,
            lens,
        };
        check(c, 40 + h as u64);
    }
}
