//! Conv and FusedConv against float64 references.

use super::*;
use crate::ops::nn::common::testutil::*;
use half::{bf16, f16};
use onnx_runtime_ir::Attribute;

/// One convolution case: input/kernel extents and window attributes (N-d).
#[derive(Clone)]
struct Case {
    n: usize,
    c: usize,
    m: usize,
    group: usize,
    spatial: Vec<usize>,
    kernel: Vec<usize>,
    strides: Vec<usize>,
    dilations: Vec<usize>,
    /// begin pads then end pads.
    pads: Vec<usize>,
}

impl Case {
    fn d2(group: usize, c: usize, m: usize, k: usize, s: usize, p: usize, d: usize) -> Case {
        Case {
            n: 2,
            c,
            m,
            group,
            spatial: vec![7, 6],
            kernel: vec![k, k],
            strides: vec![s, s],
            dilations: vec![d, d],
            pads: vec![p; 4],
        }
    }

    fn out_spatial(&self) -> Vec<usize> {
        let r = self.spatial.len();
        (0..r)
            .map(|i| {
                let ek = (self.kernel[i] - 1) * self.dilations[i] + 1;
                (self.spatial[i] + self.pads[i] + self.pads[i + r] - ek) / self.strides[i] + 1
            })
            .collect()
    }

    fn attrs(&self) -> Vec<(&'static str, Attribute)> {
        let ints = |v: &[usize]| Attribute::Ints(v.iter().map(|&x| x as i64).collect());
        vec![
            ("group", Attribute::Int(self.group as i64)),
            ("strides", ints(&self.strides)),
            ("pads", ints(&self.pads)),
            ("dilations", ints(&self.dilations)),
        ]
    }

    fn x_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.c];
        s.extend(&self.spatial);
        s
    }

    fn w_shape(&self) -> Vec<usize> {
        let mut s = vec![self.m, self.c / self.group];
        s.extend(&self.kernel);
        s
    }

    /// Direct float64 convolution plus bias.
    fn reference(&self, x: &[f64], w: &[f64], b: &[f64]) -> Vec<f64> {
        let r = self.spatial.len();
        let out = self.out_spatial();
        let (cg, mg) = (self.c / self.group, self.m / self.group);
        let in_sz: usize = self.spatial.iter().product();
        let out_sz: usize = out.iter().product();
        let ks: usize = self.kernel.iter().product();
        let unravel = |mut i: usize, dims: &[usize]| -> Vec<usize> {
            let mut v = vec![0; dims.len()];
            for d in (0..dims.len()).rev() {
                v[d] = i % dims[d];
                i /= dims[d];
            }
            v
        };
        let mut y = vec![0.0; self.n * self.m * out_sz];
        for bn in 0..self.n {
            for mm in 0..self.m {
                let gi = mm / mg;
                for o in 0..out_sz {
                    let oi = unravel(o, &out);
                    let mut acc = b[mm];
                    for cc in 0..cg {
                        let ci = gi * cg + cc;
                        'k: for k in 0..ks {
                            let ki = unravel(k, &self.kernel);
                            let mut off = 0;
                            for d in 0..r {
                                let i = (oi[d] * self.strides[d] + ki[d] * self.dilations[d])
                                    as isize
                                    - self.pads[d] as isize;
                                if i < 0 || i >= self.spatial[d] as isize {
                                    continue 'k;
                                }
                                off = off * self.spatial[d] + i as usize;
                            }
                            acc += x[(bn * self.c + ci) * in_sz + off] * w[(mm * cg + cc) * ks + k];
                        }
                    }
                    y[(bn * self.m + mm) * out_sz + o] = acc;
                }
            }
        }
        y
    }

    fn inputs(&self, seed: u64) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
        let x = rand(self.x_shape().iter().product(), seed, -1.0, 1.0);
        let w = rand(self.w_shape().iter().product(), seed + 1, -1.0, 1.0);
        let b = rand(self.m, seed + 2, -1.0, 1.0);
        (x, w, b)
    }

    fn y_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.m];
        s.extend(self.out_spatial());
        s
    }

    /// Runs Conv in f32 and compares with the float64 reference.
    fn check(&self) {
        let (x, w, b) = self.inputs(11);
        let node = node("Conv", 3, 1, self.attrs());
        let out = run(
            build,
            &node,
            11,
            &[
                Some(Tensor::from_vec(self.x_shape(), f32s(&x))),
                Some(Tensor::from_vec(self.w_shape(), f32s(&w))),
                Some(Tensor::from_vec(vec![self.m], f32s(&b))),
            ],
        )
        .unwrap();
        assert_eq!(out[0].shape(), self.y_shape().as_slice());
        let tol = 1e-5 * (self.c / self.group * self.kernel.iter().product::<usize>()) as f64;
        assert_close(
            out[0].data::<f32>(),
            &self.reference(&x, &w, &b),
            tol.max(1e-5),
        );
    }
}

#[test]
fn general_grouped_pointwise_depthwise() {
    Case::d2(1, 3, 4, 3, 1, 1, 1).check();
    Case::d2(1, 3, 4, 3, 2, 2, 2).check();
    Case::d2(2, 4, 6, 3, 2, 1, 1).check();
    Case::d2(1, 5, 3, 1, 1, 0, 1).check();
    Case::d2(4, 4, 4, 3, 1, 1, 1).check();
    Case::d2(4, 4, 8, 3, 2, 1, 2).check();
}

#[test]
fn pointwise_strided_and_padded() {
    // 1x1 with stride (strided gather) and with padding (border zeros).
    Case::d2(1, 6, 5, 1, 2, 0, 1).check();
    Case::d2(1, 6, 5, 1, 1, 1, 1).check();
    Case::d2(3, 6, 9, 1, 3, 0, 1).check();
}

#[test]
fn depthwise_kernels_strides_and_multipliers() {
    for (k, s, p, d) in [
        (3, 1, 1, 1),
        (3, 2, 1, 1),
        (3, 2, 0, 1),
        (5, 1, 2, 1),
        (5, 2, 2, 1),
        (3, 1, 2, 2),
        (3, 3, 1, 1),
        (2, 2, 0, 1),
    ] {
        // multiplier 1 and 2
        Case::d2(6, 6, 6, k, s, p, d).check();
        Case::d2(3, 3, 6, k, s, p, d).check();
    }
    // Asymmetric pads and non-square strides.
    let mut c = Case::d2(4, 4, 4, 3, 1, 0, 1);
    c.pads = vec![0, 1, 2, 0];
    c.strides = vec![1, 2];
    c.spatial = vec![9, 11];
    c.check();
}

#[test]
fn depthwise_3x3_rows_across_vector_strips() {
    // The AVX-512 plane kernels (stride 1 and 2, dilation 1) work in strips of 16 outputs
    // with masked loads at the row ends: widths around 16 and 32, pads 0 to 2 (asymmetric
    // too), even and odd input sizes, channel multiplier 2, batch 2.
    for (h, wd) in [(5, 15), (6, 16), (4, 17), (3, 33), (9, 31), (3, 48)] {
        for (s, p) in [(1, 1), (1, 0), (1, 2), (2, 1), (2, 0), (2, 2)] {
            for (group, m) in [(3, 3), (3, 6)] {
                let mut c = Case::d2(group, 3, m, 3, s, p, 1);
                c.spatial = vec![h, wd];
                c.check();
            }
        }
        let mut c = Case::d2(2, 2, 2, 3, 2, 0, 1);
        c.spatial = vec![h, wd];
        c.pads = vec![1, 0, 0, 2];
        c.check();
        c.strides = vec![1, 1];
        c.check();
    }
}

#[test]
fn big_convs_split_over_threads() {
    // Enough work to split positions and channels into parallel blocks.
    let mut c = Case::d2(1, 16, 48, 3, 1, 1, 1);
    c.n = 1;
    c.spatial = vec![40, 45];
    c.check();
    let mut c = Case::d2(1, 64, 256, 1, 1, 0, 1);
    c.n = 3;
    c.spatial = vec![7, 7];
    c.check();
    // Big depthwise.
    let mut c = Case::d2(32, 32, 32, 3, 2, 1, 1);
    c.spatial = vec![64, 63];
    c.check();
    // A tile narrower than the output: K large.
    let mut c = Case::d2(1, 160, 16, 5, 1, 2, 1);
    c.n = 1;
    c.spatial = vec![30, 31];
    c.check();
}

#[test]
fn one_and_three_dims() {
    Case {
        n: 2,
        c: 4,
        m: 6,
        group: 2,
        spatial: vec![13],
        kernel: vec![3],
        strides: vec![2],
        dilations: vec![2],
        pads: vec![1, 2],
    }
    .check();
    Case {
        n: 1,
        c: 3,
        m: 4,
        group: 1,
        spatial: vec![5, 6, 4],
        kernel: vec![3, 2, 3],
        strides: vec![1, 2, 1],
        dilations: vec![1, 1, 2],
        pads: vec![1, 0, 1, 1, 1, 2],
    }
    .check();
    // 1-D depthwise takes the GEMM path.
    Case {
        n: 2,
        c: 4,
        m: 4,
        group: 4,
        spatial: vec![10],
        kernel: vec![3],
        strides: vec![1],
        dilations: vec![1],
        pads: vec![1, 1],
    }
    .check();
}

#[test]
fn half_and_double_inputs() {
    for case in [Case::d2(1, 3, 4, 3, 2, 1, 1), Case::d2(3, 3, 3, 3, 1, 1, 1)] {
        let (x, w, b) = case.inputs(21);
        let want = case.reference(&x, &w, &b);
        let node = node("Conv", 3, 1, case.attrs());
        let out = run(
            build,
            &node,
            22,
            &[
                Some(Tensor::from_vec(case.x_shape(), x.clone())),
                Some(Tensor::from_vec(case.w_shape(), w.clone())),
                Some(Tensor::from_vec(vec![case.m], b.clone())),
            ],
        )
        .unwrap();
        for (g, w) in out[0].data::<f64>().iter().zip(&want) {
            assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "f64: {g} vs {w}");
        }
        // f16 / bf16: inputs rounded to the type, reference on the rounded values.
        let r16 = |v: &[f64]| -> Vec<f16> { v.iter().map(|&x| f16::from_f64(x)).collect() };
        let (x16, w16, b16) = (r16(&x), r16(&w), r16(&b));
        let back = |v: &[f16]| -> Vec<f64> { v.iter().map(|x| x.to_f64()).collect() };
        let want16 = case.reference(&back(&x16), &back(&w16), &back(&b16));
        let out = run(
            build,
            &node,
            22,
            &[
                Some(Tensor::from_vec(case.x_shape(), x16)),
                Some(Tensor::from_vec(case.w_shape(), w16)),
                Some(Tensor::from_vec(vec![case.m], b16)),
            ],
        )
        .unwrap();
        let got: Vec<f32> = out[0].data::<f16>().iter().map(|v| v.to_f32()).collect();
        assert_close(&got, &want16, 2e-3);
        let rb = |v: &[f64]| -> Vec<bf16> { v.iter().map(|&x| bf16::from_f64(x)).collect() };
        let (xb, wb, bb) = (rb(&x), rb(&w), rb(&b));
        let backb = |v: &[bf16]| -> Vec<f64> { v.iter().map(|x| x.to_f64()).collect() };
        let wantb = case.reference(&backb(&xb), &backb(&wb), &backb(&bb));
        let out = run(
            build,
            &node,
            22,
            &[
                Some(Tensor::from_vec(case.x_shape(), xb)),
                Some(Tensor::from_vec(case.w_shape(), wb)),
                Some(Tensor::from_vec(vec![case.m], bb)),
            ],
        )
        .unwrap();
        let got: Vec<f32> = out[0].data::<bf16>().iter().map(|v| v.to_f32()).collect();
        assert_close(&got, &wantb, 1.6e-2);
    }
}

/// FusedConv's activations in float64.
fn activate(name: &str, p: &[f64], v: f64) -> f64 {
    match name {
        "Relu" => v.max(0.0),
        "Tanh" => v.tanh(),
        "Sigmoid" => 1.0 / (1.0 + (-v).exp()),
        "LeakyRelu" => {
            if v < 0.0 {
                v * p[0]
            } else {
                v
            }
        }
        "Clip" => v.max(p[0]).min(p[1]),
        "HardSigmoid" => (p[0] * v + p[1]).clamp(0.0, 1.0),
        "HardSwish" => v * (v / 6.0 + 0.5).clamp(0.0, 1.0),
        "QuickGelu" => v / (1.0 + (-p[0] * v).exp()),
        other => panic!("no activation {other}"),
    }
}

#[test]
fn fused_conv_activations_and_z() {
    let acts: [(&str, Vec<f64>); 8] = [
        ("Relu", vec![]),
        ("Tanh", vec![]),
        ("Sigmoid", vec![]),
        ("LeakyRelu", vec![0.1]),
        ("Clip", vec![-0.5, 0.75]),
        ("HardSigmoid", vec![0.2, 0.5]),
        ("HardSwish", vec![]),
        ("QuickGelu", vec![1.702]),
    ];
    // GEMM path, depthwise path, and a parallel-sized GEMM.
    let mut big = Case::d2(1, 8, 32, 3, 1, 1, 1);
    big.spatial = vec![33, 40];
    let cases = [
        Case::d2(1, 3, 4, 3, 2, 1, 1),
        Case::d2(4, 4, 8, 3, 1, 1, 1),
        big,
    ];
    for case in &cases {
        let (x, w, b) = case.inputs(41);
        let conv = case.reference(&x, &w, &b);
        let z = rand(conv.len(), 44, -2.0, 2.0);
        for (name, params) in &acts {
            for with_z in [false, true] {
                let mut attrs = case.attrs();
                attrs.push(("activation", Attribute::String(name.to_string())));
                if !params.is_empty() {
                    attrs.push((
                        "activation_params",
                        Attribute::Floats(params.iter().map(|&v| v as f32).collect()),
                    ));
                }
                let node = node("FusedConv", if with_z { 4 } else { 3 }, 1, attrs);
                let mut inputs = vec![
                    Some(Tensor::from_vec(case.x_shape(), f32s(&x))),
                    Some(Tensor::from_vec(case.w_shape(), f32s(&w))),
                    Some(Tensor::from_vec(vec![case.m], f32s(&b))),
                ];
                if with_z {
                    inputs.push(Some(Tensor::from_vec(case.y_shape(), f32s(&z))));
                }
                let out = run(build_fused, &node, 1, &inputs).unwrap();
                let want: Vec<f64> = conv
                    .iter()
                    .zip(&z)
                    .map(|(&v, &zv)| activate(name, params, v + if with_z { zv } else { 0.0 }))
                    .collect();
                assert_eq!(out[0].shape(), case.y_shape().as_slice());
                assert_close(out[0].data::<f32>(), &want, 1e-4);
            }
        }
    }
}

#[test]
fn fused_conv_rejects_bad_attributes_and_z() {
    let case = Case::d2(1, 3, 4, 3, 1, 1, 1);
    let mut attrs = case.attrs();
    attrs.push(("activation", Attribute::String("Gelu".into())));
    assert!(run(build_fused, &node("FusedConv", 3, 1, attrs), 1, &[]).is_err());
    let mut attrs = case.attrs();
    attrs.push(("activation", Attribute::String("LeakyRelu".into())));
    assert!(run(build_fused, &node("FusedConv", 3, 1, attrs), 1, &[]).is_err());
    let mut attrs = case.attrs();
    attrs.push(("activation", Attribute::String("Relu".into())));
    let (x, w, _) = case.inputs(1);
    let err = run(
        build_fused,
        &node("FusedConv", 4, 1, attrs),
        1,
        &[
            Some(Tensor::from_vec(case.x_shape(), f32s(&x))),
            Some(Tensor::from_vec(case.w_shape(), f32s(&w))),
            None,
            Some(Tensor::from_vec(vec![1, 4, 7, 5], vec![0f32; 140])),
        ],
    );
    assert!(err.is_err());
}
