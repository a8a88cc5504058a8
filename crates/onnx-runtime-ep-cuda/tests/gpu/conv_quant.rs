//! ConvInteger and QLinearConv against the CPU provider.

use super::conv_common::*;
use super::harness::*;
use onnx_runtime_ir::DataType;

#[test]
fn conv_integer_and_qlinear_conv() {
    let ep = gpu();
    let mut rng = Rng::new(10);
    let (u8t, i8t) = (DataType::Uint8, DataType::Int8);
    let q = |rng: &mut Rng, d: DataType, s: &[usize]| {
        if d == u8t {
            random_numeric(rng, d, s, 0, 255)
        } else {
            random_numeric(rng, d, s, -128, 127)
        }
    };
    let geoms: Vec<Case> = vec![
        (
            vec![1, 3, 6, 5],
            vec![4, 3, 3, 3],
            attrs(&[("pads", &[1, 0, 1, 2]), ("strides", &[2, 1])]),
        ),
        (
            vec![2, 6, 9],
            vec![6, 2, 3],
            attrs(&[("group", &[3]), ("dilations", &[2])]),
        ),
        (
            vec![1, 2, 4, 3, 4],
            vec![2, 2, 2, 2, 3],
            attrs(&[("pads", &[1, 0, 1, 0, 1, 1])]),
        ),
    ];
    for (x, w, a) in &geoms {
        let m = w[0];
        for (xd, wd) in [(u8t, u8t), (u8t, i8t), (i8t, u8t), (i8t, i8t)] {
            // ConvInteger: zero points omitted, scalar, and per output channel.
            let xt = q(&mut rng, xd, x).with_layout(Layout::Reversed);
            let wt = q(&mut rng, wd, w);
            for zp in 0..3 {
                let inputs = match zp {
                    0 => vec![Some(xt.clone()), Some(wt.clone())],
                    1 => vec![
                        Some(xt.clone()),
                        Some(wt.clone()),
                        Some(q(&mut rng, xd, &[])),
                        Some(q(&mut rng, wd, &[1])),
                    ],
                    _ => vec![
                        Some(xt.clone()),
                        Some(wt.clone()),
                        None,
                        Some(q(&mut rng, wd, &[m])),
                    ],
                };
                let n = node_for("ConvInteger", &inputs, a);
                check(
                    &ep,
                    &n,
                    10,
                    &inputs,
                    None,
                    0.0,
                    &format!("ConvInteger {xd} {wd} zp {zp} {a:?}"),
                );
            }
            // QLinearConv: per-tensor and per-channel weight scales, bias given and omitted.
            for yd in [u8t, i8t] {
                for per_channel in [false, true] {
                    let k = if per_channel { m } else { 1 };
                    let ws: Vec<f64> = (0..k).map(|i| 0.002 + 0.001 * i as f64).collect();
                    let mut inputs = vec![
                        Some(xt.clone()),
                        Some(from_f64s(F32, &[], &[0.05])),
                        Some(q(&mut rng, xd, &[])),
                        Some(wt.clone()),
                        Some(from_f64s(F32, &[k], &ws)),
                        Some(q(&mut rng, wd, &[k])),
                        Some(from_f64s(F32, &[], &[0.3])),
                        Some(q(&mut rng, yd, &[])),
                    ];
                    if per_channel {
                        inputs.push(Some(random_numeric(
                            &mut rng,
                            DataType::Int32,
                            &[m],
                            -500,
                            500,
                        )));
                    }
                    let n = node_for("QLinearConv", &inputs, a);
                    // One unit of the output's last place for a tie rounded the other way.
                    let got = check(
                        &ep,
                        &n,
                        10,
                        &inputs,
                        None,
                        1.0 / 255.0,
                        &format!("QLinearConv {xd} {wd} {yd} per-channel {per_channel}"),
                    );
                    assert_eq!(got.dtype, yd);
                }
            }
        }
    }
}
