//! Pointwise f32 convolutions (1x1, stride 1, unpadded, one group) over small maps, computed
//! transposed: `Y^T = X^T W^T`, output positions as the GEMM's rows and output channels as
//! its vector columns, the input read in place.
//!
//! The direct kernel ([`super::conv_direct`]) puts positions in the vector lanes: a 7 x 7 map
//! (49 positions) runs as tiles of 48 and 16 positions, so a quarter of its multiply-adds fall
//! on lanes it drops, and the 16-wide tail tile does one vector load per 8 multiply-adds.
//! ResNet-50's last stage (1x1 convolutions of 512 to 2048 channels at 7 x 7) reached 72
//! GFLOP/s a core that way against about 105 for ONNX Runtime, whose NCHWc layout puts
//! channels in the lanes. Here the channels (hundreds, multiples of 16) fill the lanes and the
//! positions are broadcasts, so only the last row panel pads (49 -> 52 rows). The weights are
//! packed once as the GEMM's constant B panels; each finished row segment (one position, a
//! run of channels) gets the bias, Z and the activation while it is in cache and is stored
//! transposed into the NCHW output. (3x3 convolutions at 7 x 7 lose lanes the same way, but
//! unfolding their input for this path cost what the fuller lanes gained: measured, not
//! kept.)

use crate::ops::nn::conv::conv_act::Epilogue;
use crate::ops::nn::conv::conv_op::ConvGeom;
use crate::ops::nn::gemm::sgemm::{self, PackedB};
use crate::ops::nn::gemm::sgemm_wide;
use crate::ops::nn::scratch::{build_vec, SharedMut};
use std::sync::OnceLock;

/// Output positions up to which a pointwise convolution runs transposed (at 28 x 28 the
/// direct kernel's lanes are full and the transposed stores cost more: 1.31 against 1.08 ms
/// for 128 -> 512 channels).
const MAX_POSITIONS: usize = 256;
/// Output channels from which it does (two B panels: a whole wide tile's columns).
const MIN_CHANNELS: usize = 32;

/// The weights `[m, c, 1, 1]` of a pointwise convolution, packed as the `c x m` B operand.
pub struct SmallMapWeights {
    b: PackedB,
}

impl SmallMapWeights {
    /// Packs `w` (`m * c` values, output channel-major).
    pub fn pack(w: &[f32], m: usize, c: usize) -> SmallMapWeights {
        assert_eq!(w.len(), m * c, "SmallMapWeights::pack: weight size");
        SmallMapWeights {
            b: PackedB::new(w, c, m, 1, c),
        }
    }

    fn fits(&self, g: &ConvGeom) -> bool {
        self.b.k == g.c && self.b.n == g.m
    }
}

/// Whether `g` runs transposed on this CPU: a 2-D pointwise convolution of one group over at
/// most [`MAX_POSITIONS`] positions into at least [`MIN_CHANNELS`] channels, on AVX-512F.
pub fn applies(g: &ConvGeom) -> bool {
    g.group == 1
        && g.win.input.len() == 2
        && g.win.is_pointwise()
        && g.win.output_size() <= MAX_POSITIONS
        && g.m >= MIN_CHANNELS
        && g.c > 1
        && sgemm_wide::available()
}

/// The convolution of `x` by `w` (`[m, c, 1, 1]`) finished by `ep`, when [`applies`] holds;
/// None otherwise. With `packed` (constant weights) they are packed there at the first call,
/// else now.
pub fn try_conv(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    packed: Option<&OnceLock<SmallMapWeights>>,
    ep: &Epilogue<f32>,
) -> Option<Vec<f32>> {
    if !applies(g) {
        return None;
    }
    let pack = || SmallMapWeights::pack(w, g.m, g.c);
    let fresh;
    let wp = match packed.map(|cell| cell.get_or_init(pack)) {
        Some(p) if p.fits(g) => p,
        _ => {
            fresh = pack();
            &fresh
        }
    };
    let (c, m, np) = (g.c, g.m, g.win.output_size());
    assert_eq!(x.len(), g.n * c * np, "small_maps: input size");
    let len = g.n * m * np;
    let fill = |out: &mut [std::mem::MaybeUninit<f32>]| {
        let outp = SharedMut(out.as_mut_ptr() as *mut f32);
        // C^T, which the GEMM writes and `finish` moves on from: only written and read
        // back inside each finished segment. (Not the thread's scratch: the GEMM packs
        // its A there.)
        let mut ct: Vec<f32> = Vec::with_capacity(np * m);
        for b in 0..g.n {
            let xb = &x[b * c * np..][..c * np];
            let base = b * m * np;
            // Row `pos` of C^T holds every channel of position `pos`; a segment starts at
            // channel `ch0`.
            let finish = |pos: usize, ch0: usize, seg: &mut [f32]| {
                let n = seg.len();
                if let Some(bias) = ep.bias {
                    seg.iter_mut()
                        .zip(&bias[ch0..ch0 + n])
                        .for_each(|(v, &bv)| *v += bv);
                }
                if let Some(z) = ep.z {
                    for (i, v) in seg.iter_mut().enumerate() {
                        *v += z[base + (ch0 + i) * np + pos];
                    }
                }
                ep.act.apply(seg);
                let o = outp.get().wrapping_add(base + ch0 * np + pos);
                for (i, &v) in seg.iter().enumerate() {
                    // SAFETY: (channel ch0 + i, position pos) of image b lies inside
                    // `out`; the GEMM's tasks finish disjoint (position, channel) blocks.
                    unsafe { o.add(i * np).write(v) };
                }
            };
            sgemm::gemm_packed_b(
                np,
                xb,
                1,
                np,
                &wp.b,
                &mut ct.spare_capacity_mut()[..np * m],
                &finish,
            );
        }
    };
    // SAFETY: `fill` writes every element: each image's np x m outputs, each by the finished
    // row segment that holds it.
    Some(unsafe { build_vec(len, fill) })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::{assert_close, f32s, rand};
    use crate::ops::nn::conv::conv_act::Activation;
    use crate::ops::nn::conv::conv_op::conv_fused;
    use crate::ops::nn::window::WindowAttrs;

    /// Against the float64 im2col path on ragged shapes (positions not a multiple of the
    /// panel rows, channels not a multiple of the panel width), batch 2, with bias, Z and an
    /// activation.
    #[test]
    fn matches_the_float64_convolution() {
        if !sgemm_wide::available() {
            eprintln!("skipped: this CPU has no AVX-512F (the transposed path needs it)");
            return;
        }
        // (input channels, output channels, map height, map width, Z)
        for &(c, m, h, w, with_z) in &[
            (512, 2048, 7, 7, false),
            (2048, 512, 7, 7, true),
            (37, 45, 5, 3, true),
            (300, 64, 14, 14, false),
            (64, 33, 1, 1, true),
        ] {
            let n = 2;
            let g = ConvGeom::new(
                "t",
                &WindowAttrs::default(),
                1,
                &[n, c, h, w],
                &[m, c, 1, 1],
            )
            .unwrap();
            assert!(applies(&g), "{:?}", g.win);
            let x = rand(n * c * h * w, 1, -1.0, 1.0);
            let wt = rand(m * c, 2, -0.1, 0.1);
            let bias = rand(m, 3, -1.0, 1.0);
            let z = rand(n * m * g.win.output_size(), 4, -1.0, 1.0);
            let (bf, zf) = (f32s(&bias), f32s(&z));
            let ep = Epilogue {
                bias: Some(&bf[..]),
                z: with_z.then_some(&zf[..]),
                act: Activation::Relu,
            };
            let (xf, wf) = (f32s(&x), f32s(&wt));
            let got = try_conv(&g, &xf, &wf, Some(&OnceLock::new()), &ep).unwrap();
            let ep64 = Epilogue {
                bias: Some(&bias[..]),
                z: with_z.then_some(&z[..]),
                act: Activation::Relu,
            };
            let want = conv_fused::<f64>(&g, &x, &wt, &ep64);
            assert_close(&got, &want, 1e-5 * (c as f64).sqrt());
        }
    }
}
