//! The direct kernel against a float64 loop, on geometries that cross its tile, depth-pass and
//! task boundaries, with every stride phase layout, dilation, asymmetric pads and groups.

use super::*;
use crate::ops::nn::common::testutil::{assert_close, f32s, rand};
use crate::ops::nn::conv::conv_act::Activation;
use crate::ops::nn::window::{AutoPad, WindowAttrs};

struct Case {
    n: usize,
    c: usize,
    m: usize,
    group: usize,
    hw: [usize; 2],
    k: [usize; 2],
    s: [usize; 2],
    d: [usize; 2],
    /// top, left, bottom, right.
    pads: [usize; 4],
}

impl Case {
    fn new(c: usize, m: usize, hw: [usize; 2], k: usize, s: usize, p: usize) -> Case {
        Case {
            n: 1,
            c,
            m,
            group: 1,
            hw,
            k: [k, k],
            s: [s, s],
            d: [1, 1],
            pads: [p; 4],
        }
    }

    fn geom(&self) -> ConvGeom {
        let wa = WindowAttrs {
            kernel: None,
            strides: Some(self.s.to_vec()),
            dilations: Some(self.d.to_vec()),
            pads: Some(self.pads.to_vec()),
            auto_pad: AutoPad::NotSet,
            ceil_mode: false,
        };
        let x = [self.n, self.c, self.hw[0], self.hw[1]];
        let w = [self.m, self.c / self.group, self.k[0], self.k[1]];
        ConvGeom::new("test", &wa, self.group, &x, &w).unwrap()
    }

    /// Float64 convolution plus bias and Z (when given), before the activation.
    fn reference(&self, g: &ConvGeom, x: &[f64], w: &[f64], b: &[f64], z: &[f64]) -> Vec<f64> {
        let (ho, wo) = (g.win.output[0], g.win.output[1]);
        let (cg, mg) = (self.c / self.group, self.m / self.group);
        let [h, wd] = self.hw;
        let mut y = vec![0.0; self.n * self.m * ho * wo];
        for bn in 0..self.n {
            for (mm, &bias) in b.iter().enumerate() {
                let gi = mm / mg;
                for oh in 0..ho {
                    for ow in 0..wo {
                        let mut acc = 0.0;
                        for cc in 0..cg {
                            for i in 0..self.k[0] {
                                for j in 0..self.k[1] {
                                    let yy = (oh * self.s[0] + i * self.d[0]) as isize
                                        - self.pads[0] as isize;
                                    let xx = (ow * self.s[1] + j * self.d[1]) as isize
                                        - self.pads[1] as isize;
                                    if yy < 0 || xx < 0 || yy >= h as isize || xx >= wd as isize {
                                        continue;
                                    }
                                    let xi = ((bn * self.c + gi * cg + cc) * h + yy as usize) * wd
                                        + xx as usize;
                                    let wi = ((mm * cg + cc) * self.k[0] + i) * self.k[1] + j;
                                    acc += x[xi] * w[wi];
                                }
                            }
                        }
                        let o = ((bn * self.m + mm) * ho + oh) * wo + ow;
                        y[o] = acc + bias + z.get(o).copied().unwrap_or(0.0);
                    }
                }
            }
        }
        y
    }

    /// Checks the direct kernel on every tile family this CPU runs.
    fn check(&self) {
        let g = self.geom();
        if Isa::detect().is_none() {
            assert!(try_conv(&g, &[], &[], None, &Epilogue::bias_only(None)).is_none());
            return;
        }
        for isa in Isa::all() {
            self.check_on(&g, isa);
        }
    }

    fn check_on(&self, g: &ConvGeom, isa: Isa) {
        assert!(supports(g, isa), "direct kernel should take {:?}", g.win);
        let x = rand(self.n * self.c * self.hw[0] * self.hw[1], 3, -1.0, 1.0);
        let kk = self.c / self.group * self.k[0] * self.k[1];
        let w = rand(self.m * kk, 4, -1.0, 1.0);
        let b = rand(self.m, 5, -1.0, 1.0);
        let z = rand(self.n * self.m * g.win.output_size(), 6, -1.0, 1.0);
        let (bf, zf) = (f32s(&b), f32s(&z));
        let taps = self.k[0] * self.k[1];
        let wp = DirectWeights::pack_on(isa, &f32s(&w), self.m, self.group, kk, taps);
        assert!(wp.fits(g, isa));
        let xf = f32s(&x);
        for (act, f) in activations() {
            for with_z in [false, true] {
                let ep = Epilogue {
                    bias: Some(&bf),
                    z: with_z.then_some(zf.as_slice()),
                    act,
                };
                // SAFETY: direct_conv writes the whole output.
                let got =
                    unsafe { build_vec(z.len(), |out| direct_conv(g, isa, &xf, &wp, &ep, out)) };
                let zr: &[f64] = if with_z { &z } else { &[] };
                let want: Vec<f64> = self
                    .reference(g, &x, &w, &b, zr)
                    .into_iter()
                    .map(f)
                    .collect();
                assert_close(&got, &want, 1e-5 * kk as f64);
            }
        }
    }
}

/// An activation's float64 definition.
type Reference = fn(f64) -> f64;

/// Activations with their float64 definitions: those applied in registers (Relu, Clip,
/// LeakyRelu), one applied per row (HardSwish) and none.
fn activations() -> Vec<(Activation, Reference)> {
    vec![
        (Activation::None, |v| v),
        (Activation::Relu, |v| v.max(0.0)),
        (
            Activation::Clip {
                min: -0.5,
                max: 1.5,
            },
            |v| v.clamp(-0.5, 1.5),
        ),
        (Activation::LeakyRelu { alpha: 0.1 }, |v| {
            if v < 0.0 {
                0.1 * v
            } else {
                v
            }
        }),
        (Activation::HardSwish, |v| {
            v * (v / 6.0 + 0.5).clamp(0.0, 1.0)
        }),
        (Activation::QuickGelu { alpha: 1.0 }, |v| {
            v / (1.0 + (-v).exp())
        }),
    ]
}

#[test]
fn stride_one_tiles_rows_and_depth_passes() {
    // Widths below, at and above one 16-wide tile; channels past one depth pass (256 steps).
    Case::new(3, 5, [7, 6], 3, 1, 1).check();
    Case::new(16, 64, [13, 16], 3, 1, 1).check();
    Case::new(40, 13, [9, 21], 3, 1, 1).check();
    Case::new(64, 8, [5, 5], 3, 1, 0).check();
    Case::new(7, 7, [11, 12], 5, 1, 2).check();
    // Pointwise on few channels, one task and parallel blocks.
    Case::new(16, 40, [9, 11], 1, 1, 0).check();
    Case::new(16, 64, [55, 55], 1, 1, 0).check();
    // Small maps end their blocks on a half tile (13 x 14 and 7 x 8 positions).
    Case::new(24, 20, [13, 13], 3, 1, 1).check();
    Case::new(9, 30, [7, 7], 3, 1, 1).check();
    // The left padding exceeds the right one, and the reverse (each row's gap is the larger).
    let mut c = Case::new(5, 7, [9, 10], 3, 1, 0);
    c.pads = [1, 2, 0, 0];
    c.check();
    c.pads = [0, 0, 1, 2];
    c.check();
}

#[test]
fn strides_dilations_and_phases() {
    Case::new(3, 8, [15, 16], 3, 2, 0).check();
    Case::new(6, 12, [17, 14], 3, 2, 1).check();
    Case::new(4, 6, [19, 20], 7, 2, 3).check();
    // 1x1 with stride 2 lays out only the one phase it reads.
    Case::new(12, 10, [14, 15], 1, 2, 0).check();
    // Padded 1x1.
    Case::new(5, 4, [6, 7], 1, 1, 1).check();
    let mut c = Case::new(5, 9, [16, 18], 3, 3, 2);
    c.s = [3, 2];
    c.d = [2, 3];
    c.check();
    let mut c = Case::new(4, 6, [12, 13], 2, 1, 0);
    c.d = [2, 2];
    c.pads = [0, 1, 2, 0];
    c.check();
}

#[test]
fn groups_batches_and_parallel_blocks() {
    let mut c = Case::new(8, 12, [10, 11], 3, 1, 1);
    c.group = 2;
    c.n = 3;
    c.check();
    let mut c = Case::new(12, 9, [9, 8], 3, 2, 1);
    c.group = 3;
    c.n = 2;
    c.check();
    // Enough work to split positions and channels over threads.
    Case::new(32, 100, [40, 37], 3, 1, 1).check();
    Case::new(300, 20, [12, 12], 3, 1, 1).check();
}

#[test]
fn pointwise_in_place_on_masked_tiles() {
    // Deep pointwise products read in place on AVX-512 (the other family declines them):
    // positions ending inside a vector (7 x 7 = 49, 5 x 9 = 45), past one depth pass (300
    // channels), tails of every width, groups and batches.
    for c in [
        Case::new(17, 8, [5, 5], 1, 1, 0),
        Case::new(64, 24, [7, 7], 1, 1, 0),
        Case::new(300, 20, [5, 9], 1, 1, 0),
        Case::new(40, 72, [28, 28], 1, 1, 0),
        Case::new(33, 13, [4, 4], 1, 1, 0),
    ] {
        let g = c.geom();
        for isa in Isa::all() {
            if isa.masked() {
                c.check_on(&g, isa);
            } else {
                assert!(!supports(&g, isa));
            }
        }
    }
    // Groups and batches: 6 channels per group (a scratch block), 8 and 16 per group (whole
    // panels, stored straight to the output), 28 per group (three whole panels straight to
    // the output, a partial one through the scratch block: ShuffleNet's group 4).
    for (m, group) in [(18, 3), (16, 2), (32, 2), (112, 4)] {
        let mut c = Case::new(24, m, [6, 7], 1, 1, 0);
        c.group = group;
        c.n = 2;
        for isa in Isa::all().into_iter().filter(|i| i.masked()) {
            c.check_on(&c.geom(), isa);
        }
    }
}

#[test]
fn blocks_cover_and_spread_evenly() {
    for isa in [Isa::Avx2, Isa::Avx512] {
        for &(units, mg, nj, k, threads) in &[
            (1, 64, 3192, 576, 2),
            (1, 64, 3136, 256, 2),
            (1, 512, 56, 4608, 2),
            (2, 24, 100, 9, 4),
            (1, 64, 3136, 256, 16),
            (1, 8, 50, 3, 2),
        ] {
            let b = blocking(units, mg, nj, k, threads, isa);
            assert!(
                b.nt * b.parts_n >= nj && b.nt * (b.parts_n - 1) < nj,
                "{b:?}"
            );
            assert!(
                b.mt * b.parts_m >= mg && b.mt * (b.parts_m - 1) < mg,
                "{b:?}"
            );
            assert!(b.nt.is_multiple_of(isa.quantum()) && b.mt.is_multiple_of(isa.mr()));
            // Two threads share the ResNet-like shapes evenly (more threads: best effort, as
            // the tail-tile rounding may merge blocks).
            let tasks = units * b.parts_n * b.parts_m;
            if b.parallel && threads == 2 {
                assert!(tasks.is_multiple_of(threads), "{tasks} tasks: {b:?}");
            }
        }
    }
}

#[test]
fn unsuitable_geometries_are_declined() {
    // Without masked loads, 1x1 stride 1 without pads is a GEMM on the input (but for very
    // few input channels); depthwise has its own kernel on every family.
    let deep = Case::new(17, 8, [5, 5], 1, 1, 0).geom();
    let shallow = Case::new(16, 8, [5, 5], 1, 1, 0).geom();
    let mut c = Case::new(4, 4, [5, 5], 3, 1, 1);
    c.group = 4;
    let depthwise = c.geom();
    for isa in [Isa::Avx2, Isa::Avx512] {
        assert_eq!(supports(&deep, isa), isa.masked());
        assert!(supports(&shallow, isa));
        assert!(!supports(&depthwise, isa));
    }
}
