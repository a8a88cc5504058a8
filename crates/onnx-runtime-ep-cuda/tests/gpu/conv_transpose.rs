//! ConvTranspose against the CPU provider: shapes, pads, output_shape / output_padding,
//! strided inputs and half types.

use super::conv_common::*;
use super::harness::*;
use onnx_runtime_ir::{Attribute, DataType};

#[test]
fn conv_transpose_shapes_pads_and_output_shape() {
    let ep = gpu();
    let mut rng = Rng::new(8);
    let s = |v: &str| Attribute::String(v.into());
    let cases: Vec<Case> = vec![
        (
            vec![2, 3, 5],
            vec![3, 4, 3],
            attrs(&[
                ("strides", &[2]),
                ("output_padding", &[1]),
                ("pads", &[1, 0]),
            ]),
        ),
        (
            vec![1, 4, 5, 6],
            vec![4, 3, 3, 3],
            attrs(&[
                ("strides", &[2, 2]),
                ("pads", &[1, 1, 1, 1]),
                ("output_padding", &[1, 1]),
            ]),
        ),
        (
            vec![1, 4, 4, 4],
            vec![4, 2, 4, 4],
            attrs(&[("strides", &[2, 2]), ("pads", &[1, 1, 1, 1])]),
        ),
        (
            vec![2, 4, 4, 5],
            vec![4, 2, 3, 2],
            attrs(&[
                ("group", &[2]),
                ("strides", &[1, 2]),
                ("dilations", &[2, 1]),
            ]),
        ),
        (
            vec![1, 2, 4, 5],
            vec![2, 3, 3, 3],
            attrs(&[("strides", &[2, 2]), ("output_shape", &[10, 12])]),
        ),
        (
            vec![1, 2, 4, 5],
            vec![2, 3, 3, 3],
            attrs(&[("strides", &[2, 2]), ("output_shape", &[1, 3, 9, 11])]),
        ),
        (
            vec![1, 2, 4, 5],
            vec![2, 3, 3, 4],
            vec![("strides", ints(&[2, 2])), ("auto_pad", s("SAME_UPPER"))],
        ),
        (
            vec![1, 2, 4, 5],
            vec![2, 3, 3, 4],
            vec![("strides", ints(&[2, 2])), ("auto_pad", s("SAME_LOWER"))],
        ),
        (
            vec![1, 2, 3, 4, 3],
            vec![2, 3, 2, 3, 2],
            attrs(&[("strides", &[2, 1, 2]), ("pads", &[0, 1, 1, 1, 0, 0])]),
        ),
        (
            vec![1, 2, 6],
            vec![2, 2, 2],
            attrs(&[("dilations", &[3]), ("output_padding", &[2])]),
        ),
        (
            vec![1, 3, 5, 5],
            vec![3, 2, 3, 3],
            attrs(&[("strides", &[3, 2]), ("pads", &[2, 0, 0, 1])]),
        ),
    ];
    for (case, (x, w, a)) in cases.iter().enumerate() {
        for with_bias in [true, false] {
            let group = a
                .iter()
                .find_map(|(k, v)| match (k, v) {
                    (&"group", Attribute::Int(g)) => Some(*g as usize),
                    _ => None,
                })
                .unwrap_or(1);
            let m = w[1] * group;
            let mut inputs = vec![Some(randf(&mut rng, F32, x)), Some(randf(&mut rng, F32, w))];
            if with_bias {
                inputs.push(Some(randf(&mut rng, F32, &[m])));
            }
            let n = node_for("ConvTranspose", &inputs, a);
            let opset = [1, 11, 22][(case * 2 + with_bias as usize) % 3];
            check(
                &ep,
                &n,
                opset,
                &inputs,
                None,
                F32_REL,
                &format!("ConvTranspose X {x:?} W {w:?} {a:?} bias {with_bias} opset {opset}"),
            );
        }
    }
}

#[test]
fn conv_transpose_strided_and_half_types() {
    let ep = gpu();
    let mut rng = Rng::new(9);
    let a = attrs(&[
        ("strides", &[2, 2]),
        ("pads", &[0, 1, 1, 0]),
        ("output_padding", &[1, 0]),
    ]);
    let x = randf(&mut rng, F32, &[2, 16, 6, 5]);
    let w = randf(&mut rng, F32, &[16, 8, 3, 3]);
    let b = randf(&mut rng, F32, &[8]);
    let strided = vec![
        Some(x.clone().with_layout(Layout::Reversed)),
        Some(w.clone().with_layout(Layout::Padded)),
        Some(b.clone()),
    ];
    let n = node_for("ConvTranspose", &strided, &a);
    check(
        &ep,
        &n,
        11,
        &strided,
        None,
        F32_REL,
        "ConvTranspose strided X, W",
    );
    let reference = vec![Some(x), Some(w), Some(b)];
    for dtype in [DataType::Float16, DataType::BFloat16, DataType::Float64] {
        let inputs: Vec<Option<T>> = reference
            .iter()
            .map(|t| t.as_ref().map(|t| cast(t, dtype)))
            .collect();
        let rel = if dtype == DataType::Float64 {
            1e-12
        } else {
            1e-2
        };
        check(
            &ep,
            &n,
            22,
            &inputs,
            Some(&reference),
            rel,
            &format!("ConvTranspose {dtype}"),
        );
    }
}
