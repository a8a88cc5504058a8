//! ConvInteger and MatMulInteger on the integer GEMM against naive i64 references: random
//! shapes with tails, every uint8/int8 mix, scalar and per-channel zero points, padding,
//! strides, dilations, groups, batches, constant weights (packed at build) or not.

use crate::kernel::BuildContext;
use crate::ops::nn::common::testutil::{node, rand};
use crate::ops::nn::quant::conv_integer::build_conv_integer;
use crate::{Tensor, Value};
use onnx_runtime_ir::Attribute;

/// Random bytes as a uint8 or int8 tensor, and their values.
fn bytes_tensor(shape: Vec<usize>, seed: u64, signed: bool) -> (Tensor, Vec<i64>) {
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

struct Case {
    n: usize,
    c: usize,
    m: usize,
    group: usize,
    input: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// Begin pads then end pads, as the attribute.
    pads: Vec<usize>,
}

/// Naive ConvInteger: the padding holds the x zero point (contributes nothing).
fn reference(cs: &Case, x: &[i64], xz: i64, w: &[i64], wz: &[i64]) -> (Vec<usize>, Vec<i64>) {
    let r = cs.input.len();
    let out: Vec<usize> = (0..r)
        .map(|d| {
            (cs.input[d] + cs.pads[d] + cs.pads[r + d] - cs.dilations[d] * (cs.kernel[d] - 1) - 1)
                / cs.strides[d]
                + 1
        })
        .collect();
    let (cg, mg) = (cs.c / cs.group, cs.m / cs.group);
    let osz: usize = out.iter().product();
    let isz: usize = cs.input.iter().product();
    let ksz: usize = cs.kernel.iter().product();
    let mut y = vec![0i64; cs.n * cs.m * osz];
    let unravel = |mut i: usize, dims: &[usize]| {
        let mut v = vec![0; dims.len()];
        for d in (0..dims.len()).rev() {
            v[d] = i % dims[d];
            i /= dims[d];
        }
        v
    };
    for n in 0..cs.n {
        for m in 0..cs.m {
            let g = m / mg;
            let z = wz[if wz.len() == 1 { 0 } else { m }];
            for o in 0..osz {
                let oi = unravel(o, &out);
                let mut acc = 0;
                for ci in 0..cg {
                    let c = g * cg + ci;
                    for kk in 0..ksz {
                        let ki = unravel(kk, &cs.kernel);
                        let mut off = 0usize;
                        let mut inside = true;
                        for d in 0..r {
                            let p = (oi[d] * cs.strides[d] + ki[d] * cs.dilations[d]) as isize
                                - cs.pads[d] as isize;
                            if p < 0 || p >= cs.input[d] as isize {
                                inside = false;
                                break;
                            }
                            off = off * cs.input[d] + p as usize;
                        }
                        if !inside {
                            continue;
                        }
                        let xv = x[(n * cs.c + c) * isz + off] - xz;
                        let wv = w[(m * cg + ci) * ksz + kk] - z;
                        acc += xv * wv;
                    }
                }
                y[(n * cs.m + m) * osz + o] = acc;
            }
        }
    }
    let mut shape = vec![cs.n, cs.m];
    shape.extend(out);
    (shape, y)
}

fn run_conv(cs: &Case, seed: u64, x_signed: bool, w_signed: bool, per_channel: bool) {
    let mut xs = vec![cs.n, cs.c];
    xs.extend(&cs.input);
    let mut ws = vec![cs.m, cs.c / cs.group];
    ws.extend(&cs.kernel);
    let (x, xv) = bytes_tensor(xs, seed, x_signed);
    let (w, wv) = bytes_tensor(ws, seed + 1, w_signed);
    let (xz, xzv) = bytes_tensor(vec![], seed + 2, x_signed);
    let (wz, wzv) = bytes_tensor(
        if per_channel { vec![cs.m] } else { vec![] },
        seed + 3,
        w_signed,
    );
    let (want_shape, want) = reference(cs, &xv, xzv[0], &wv, &wzv);
    let ints = |v: &[usize]| Attribute::Ints(v.iter().map(|&x| x as i64).collect());
    let nd = node(
        "ConvInteger",
        4,
        1,
        vec![
            ("kernel_shape", ints(&cs.kernel)),
            ("strides", ints(&cs.strides)),
            ("dilations", ints(&cs.dilations)),
            ("pads", ints(&cs.pads)),
            ("group", Attribute::Int(cs.group as i64)),
        ],
    );
    let vals = [x, w, xz, wz].map(Value::Tensor);
    for constant_w in [false, true] {
        let consts = [None, constant_w.then_some(&vals[1]), None, None];
        let k = build_conv_integer(&BuildContext {
            constant_inputs: &consts,
            ..BuildContext::new(&nd, 10)
        })
        .unwrap();
        let out = k.run(&vals.iter().map(Some).collect::<Vec<_>>()).unwrap();
        let t = out[0].as_tensor().unwrap();
        assert_eq!(t.shape(), &want_shape[..]);
        let got: Vec<i64> = t.data::<i32>().iter().map(|&v| v as i64).collect();
        assert_eq!(
            got, want,
            "x {:?} k {:?} s {:?} d {:?} p {:?} g {} signed {x_signed}/{w_signed} per-channel {per_channel} constant {constant_w}",
            cs.input, cs.kernel, cs.strides, cs.dilations, cs.pads, cs.group
        );
    }
}

#[test]
fn conv_integer_matches_naive_reference() {
    let case = |n,
                c,
                m,
                group,
                input: &[usize],
                kernel: &[usize],
                s: &[usize],
                d: &[usize],
                p: &[usize]| Case {
        n,
        c,
        m,
        group,
        input: input.to_vec(),
        kernel: kernel.to_vec(),
        strides: s.to_vec(),
        dilations: d.to_vec(),
        pads: p.to_vec(),
    };
    let cases = [
        // The OCR model's shapes (scaled down): 3x3 pad 1, strides 1 and 2, 1x1 pointwise.
        case(
            1,
            1,
            24,
            1,
            &[16, 20],
            &[3, 3],
            &[2, 2],
            &[1, 1],
            &[1, 1, 1, 1],
        ),
        case(
            1,
            24,
            24,
            1,
            &[8, 10],
            &[3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1, 1, 1],
        ),
        case(
            1,
            24,
            48,
            1,
            &[8, 10],
            &[1, 1],
            &[1, 1],
            &[1, 1],
            &[0, 0, 0, 0],
        ),
        // Tails: odd channel counts, K not a multiple of 4, pixels not a multiple of 16.
        case(
            2,
            3,
            5,
            1,
            &[7, 9],
            &[3, 2],
            &[1, 1],
            &[1, 1],
            &[1, 0, 2, 1],
        ),
        case(
            3,
            6,
            9,
            3,
            &[5, 11],
            &[2, 3],
            &[2, 3],
            &[2, 1],
            &[0, 2, 1, 0],
        ),
        case(
            2,
            4,
            4,
            4,
            &[6, 6],
            &[3, 3],
            &[1, 1],
            &[1, 1],
            &[1, 1, 1, 1],
        ),
        case(
            1,
            8,
            34,
            2,
            &[9, 13],
            &[3, 3],
            &[1, 2],
            &[2, 2],
            &[2, 2, 2, 2],
        ),
        case(
            1,
            5,
            40,
            1,
            &[4, 4],
            &[5, 5],
            &[1, 1],
            &[1, 1],
            &[2, 2, 2, 2],
        ),
        // 1-D and 3-D (the generic kernel).
        case(2, 4, 6, 2, &[19], &[3], &[2], &[2], &[1, 3]),
        case(
            1,
            2,
            3,
            1,
            &[3, 4, 5],
            &[2, 2, 3],
            &[1, 2, 1],
            &[1, 1, 1],
            &[0, 1, 1, 1, 0, 1],
        ),
    ];
    for (i, cs) in cases.iter().enumerate() {
        for (xs, ws) in [(false, false), (false, true), (true, false), (true, true)] {
            for per_channel in [false, true] {
                run_conv(cs, 100 + 7 * i as u64, xs, ws, per_channel);
            }
        }
    }
}

#[test]
fn matmul_integer_fast_path_matches_naive_reference() {
    let factory = crate::ops::nn::quant::matmul_integer::build_matmul_integer;
    for &(ref ashape, k, n) in &[
        (vec![3usize, 5], 5usize, 17usize),
        (vec![2, 7, 33], 33, 40),
        (vec![40, 1, 64], 64, 70),
        (vec![6], 6, 9),
    ] {
        let m_total: usize = ashape.iter().product::<usize>() / k;
        let m = if ashape.len() >= 2 {
            ashape[ashape.len() - 2]
        } else {
            1
        };
        for (sa, sb) in [(false, false), (false, true), (true, false), (true, true)] {
            for per in [false, true] {
                let per = per && ashape.len() >= 2;
                let (a, av) = bytes_tensor(ashape.clone(), 7 + k as u64, sa);
                let (b, bv) = bytes_tensor(vec![k, n], 8 + n as u64, sb);
                let (az, azv) = bytes_tensor(if per { vec![m] } else { vec![] }, 9, sa);
                let (bz, bzv) = bytes_tensor(if per { vec![n] } else { vec![1] }, 10, sb);
                let mut want = vec![0i64; m_total * n];
                for i in 0..m_total {
                    let za = azv[if per { i % m } else { 0 }];
                    for j in 0..n {
                        let zb = bzv[if per { j } else { 0 }];
                        want[i * n + j] = (0..k)
                            .map(|p| (av[i * k + p] - za) * (bv[p * n + j] - zb))
                            .sum();
                    }
                }
                let nd = node("MatMulInteger", 4, 1, vec![]);
                let vals = [a, b, az, bz].map(Value::Tensor);
                for constant_b in [false, true] {
                    let consts = [None, constant_b.then_some(&vals[1]), None, None];
                    let kern = factory(&BuildContext {
                        constant_inputs: &consts,
                        ..BuildContext::new(&nd, 10)
                    })
                    .unwrap();
                    let out = kern
                        .run(&vals.iter().map(Some).collect::<Vec<_>>())
                        .unwrap();
                    let got: Vec<i64> = out[0]
                        .as_tensor()
                        .unwrap()
                        .data::<i32>()
                        .iter()
                        .map(|&v| v as i64)
                        .collect();
                    assert_eq!(got, want, "{ashape:?} x [{k}, {n}] {sa}/{sb} per {per}");
                }
            }
        }
    }
}
