//! Direct 2-D f32 convolution for AVX2/FMA machines, without im2col.
//!
//! The zero-padded input of each (image, group) is laid out once as stride-phase planes:
//! plane `(ci, rh, rw)` holds padded rows `i * sh + rh` and columns `j * sw + rw`. A padded
//! row is `gap = max(left, right pad)` zeros then the input row, so each row's right padding
//! is the next row's left padding (one spare zero row closes the plane). In that layout every
//! kernel tap of output position `(oh, ow)` sits at `oh * wph + ow` plus a fixed offset per
//! (channel, tap), whatever the stride or dilation, so sixteen consecutive output positions
//! of one tap are sixteen consecutive floats. A 6x16 register tile (output channels
//! x positions) then accumulates over (channel, tap) with one offset lookup, two vector loads
//! and six broadcasts of pre-packed weights per step: the same arithmetic density as the GEMM
//! micro-kernel, with no unfolded copy of the input. Positions run over the plane's width, so
//! tiles never break at row ends; the few columns past the output's width are computed and
//! dropped when the tile is copied out and finished (bias, Z, activation). A block's last
//! tile is 8 positions wide when 8 cover it, so that small maps (7 x 7, 13 x 13) compute few
//! positions they drop.

use crate::ops::nn::conv::conv_act::{Activation, Epilogue};
use crate::ops::nn::conv::conv_gemm::Blocking;
use crate::ops::nn::conv::conv_op::ConvGeom;
use crate::ops::nn::gemm::sgemm::AlignedBuf;
use crate::ops::nn::scratch::{build_vec, with_scratch, SharedMut};
use kernel::{Post, Start};
use std::mem::MaybeUninit;

/// Output channels per register tile.
const MR: usize = 6;
/// Output positions per register tile (two 8-lane vectors), and per half tile.
const NR: usize = 16;
const HALF: usize = NR / 2;
/// (channel, tap) steps per pass over a tile, so that the input lines a tile reads stay in L1.
const KC_STEPS: usize = 256;
/// Largest block of positions and of channels one task computes.
const NT_MAX: usize = 256;
const MT_MAX: usize = 96;
/// Multiply-adds below which a convolution runs on the calling thread.
const PARALLEL_MACS: usize = 1 << 20;
/// Input channels (per group) up to which pointwise convolutions run here: with so shallow
/// a product the GEMM's packing and separate epilogue pass cost more than the planes' copy.
const POINTWISE_DIRECT_MAX_C: usize = 16;
/// Input values from which the planes are laid out in parallel.
const PARALLEL_FILL: usize = 1 << 15;

/// Conv weights `[m, cg, kh, kw]` packed per group into panels of [`MR`] output channels,
/// (channel, tap)-major: `panel[k * MR + r]`; rows past the group's channels are zero.
pub struct DirectWeights {
    data: AlignedBuf,
    /// Output channels of the whole convolution, per group, and (channel, tap) depth.
    m: usize,
    mg: usize,
    k: usize,
}

impl DirectWeights {
    /// Packs `w` (`m * k` values, `k = cg * kh * kw`) for `group` groups.
    pub fn pack(w: &[f32], m: usize, group: usize, k: usize) -> DirectWeights {
        assert!(
            group > 0 && m.is_multiple_of(group) && w.len() == m * k,
            "pack: weight size"
        );
        let mg = m / group;
        let panels = mg.div_ceil(MR);
        let mut data = AlignedBuf::zeroed(group * panels * k * MR);
        let dst = data.as_mut_slice();
        for gi in 0..group {
            for p in 0..panels {
                let panel = &mut dst[(gi * panels + p) * k * MR..][..k * MR];
                for r in 0..MR.min(mg - p * MR) {
                    let src = &w[(gi * mg + p * MR + r) * k..][..k];
                    for (kk, &v) in src.iter().enumerate() {
                        panel[kk * MR + r] = v;
                    }
                }
            }
        }
        DirectWeights { data, m, mg, k }
    }

    /// Whether these are the packed weights of geometry `g`.
    pub fn fits(&self, g: &ConvGeom) -> bool {
        self.m == g.m && self.mg == g.m / g.group && self.k == (g.c / g.group) * kernel_taps(g)
    }

    /// Panel `p` of group `gi`: `k * MR` values.
    fn panel(&self, gi: usize, p: usize) -> &[f32] {
        let panels = self.mg.div_ceil(MR);
        &self.data.as_slice()[(gi * panels + p) * self.k * MR..][..self.k * MR]
    }
}

fn kernel_taps(g: &ConvGeom) -> usize {
    g.win.kernel.iter().product()
}

/// Whether the direct kernel runs `g` on this machine (and should: 1x1 stride-1 unpadded
/// convolutions of more than a few channels are a plain GEMM on the input, and depthwise
/// ones have their own kernel).
#[cfg(test)]
fn supports(g: &ConvGeom) -> bool {
    plan(g).is_some()
}

/// The plane layout of `g` when the direct kernel should run it: 2-D, not depthwise, not a
/// plain GEMM of some depth, every tap inside the planes, and AVX2/FMA present.
fn plan(g: &ConvGeom) -> Option<Planes> {
    let w = &g.win;
    let suitable = w.input.len() == 2
        && g.c != g.group
        && (g.c / g.group <= POINTWISE_DIRECT_MAX_C || !w.is_pointwise())
        && kernel::available();
    if suitable {
        Planes::new(g)
    } else {
        None
    }
}

/// The f32 convolution on the direct kernel when it suits `g` (with `packed`, the weights
/// packed at build, or `w` packed now); None when the caller should take another path.
pub fn try_conv(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    packed: Option<&DirectWeights>,
    ep: &Epilogue<f32>,
) -> Option<Vec<f32>> {
    let planes = plan(g)?;
    let fresh;
    let wp = match packed {
        Some(d) if d.fits(g) => d,
        _ => {
            fresh = DirectWeights::pack(w, g.m, g.group, w.len() / g.m.max(1));
            &fresh
        }
    };
    let len = g.n * g.m * g.win.output_size();
    // SAFETY: `run` writes every element of the output it is given.
    Some(unsafe { build_vec(len, |out| run(g, &planes, x, wp, ep, out)) })
}

/// The stride-phase plane layout of one (image, group).
struct Planes {
    sh: usize,
    sw: usize,
    hph: usize,
    wph: usize,
    /// Zero columns before each padded row minus the left padding (`gap - left pad`).
    shift: usize,
    /// Plane index of phase `(rh, rw)` (`rh * sw + rw`), for the phases some tap reads.
    phase: Vec<Option<usize>>,
    /// Floats per input channel (its used phases) and per (image, group) with slack.
    per_ch: usize,
    per_unit: usize,
}

impl Planes {
    fn new(g: &ConvGeom) -> Option<Planes> {
        let w = &g.win;
        let (sh, sw) = (w.strides[0], w.strides[1]);
        let (dh, dw) = (w.dilations[0], w.dilations[1]);
        let (kh, kw) = (w.kernel[0], w.kernel[1]);
        if sh == 0 || sw == 0 || kh == 0 || kw == 0 {
            return None;
        }
        let hp = w.input[0] + w.pad_begin[0] + w.pad_end[0];
        let (pl, pr) = (w.pad_begin[1], w.pad_end[1]);
        let gap = pl.max(pr);
        let shift = gap - pl;
        let (ho, wo) = (w.output[0], w.output[1]);
        // A padded row shares its right padding with the next row's left one; whole rows in
        // every column phase, and at least one position per output column.
        let wp = (gap + w.input[1]).max(wo * sw).next_multiple_of(sw);
        let (hph, wph) = (hp.div_ceil(sh), wp / sw);
        // Every tap of every output position must fall inside the planes: rows inside the
        // padded height, columns at most into the next row's gap.
        let qh_max = (kh - 1) * dh / sh;
        if ho == 0 || wo == 0 || ho + qh_max > hph {
            return None;
        }
        if (wo - 1) * sw + (kw - 1) * dw + shift >= wp + gap {
            return None;
        }
        let mut phase = vec![None; sh * sw];
        let mut used = 0;
        for i in 0..kh {
            for j in 0..kw {
                let idx = (i * dh % sh) * sw + (j * dw + shift) % sw;
                if phase[idx].is_none() {
                    phase[idx] = Some(used);
                    used += 1;
                }
            }
        }
        // Each plane ends with a zero row, which the last row's right taps reach into.
        let per_ch = used * (hph + 1) * wph;
        let cg = g.c / g.group;
        // Tiles read up to NR - 1 positions past the last one, plus the largest column tap.
        let per_unit = cg * per_ch + wph + NR;
        Some(Planes {
            sh,
            sw,
            hph,
            wph,
            shift,
            phase,
            per_ch,
            per_unit,
        })
    }

    /// Offset of each (channel, tap) step from a position's plane index.
    fn offsets(&self, g: &ConvGeom) -> Vec<usize> {
        let w = &g.win;
        let (kh, kw) = (w.kernel[0], w.kernel[1]);
        let (dh, dw) = (w.dilations[0], w.dilations[1]);
        let plane = (self.hph + 1) * self.wph;
        let mut offs = Vec::with_capacity(g.c / g.group * kh * kw);
        for ci in 0..g.c / g.group {
            for i in 0..kh {
                for j in 0..kw {
                    let (ph, pw) = (i * dh, j * dw + self.shift);
                    let idx = self.phase[(ph % self.sh) * self.sw + pw % self.sw]
                        .expect("every tap's phase is laid out");
                    offs.push(
                        ci * self.per_ch + idx * plane + (ph / self.sh) * self.wph + pw / self.sw,
                    );
                }
            }
        }
        offs
    }

    /// Writes the planes of one input channel `x` (`h * w` values) into `dst` (`per_ch`).
    fn fill_channel(&self, g: &ConvGeom, x: &[f32], dst: &mut [MaybeUninit<f32>]) {
        let win = &g.win;
        let (h, w) = (win.input[0], win.input[1]);
        // Zero columns before each row's values.
        let (pt, gap) = (win.pad_begin[0], win.pad_begin[1] + self.shift);
        let plane = (self.hph + 1) * self.wph;
        for (idx, slot) in self.phase.iter().enumerate() {
            let Some(slot) = *slot else { continue };
            let (rh, rw) = (idx / self.sw, idx % self.sw);
            let dplane = &mut dst[slot * plane..][..plane];
            for (i, drow) in dplane.chunks_exact_mut(self.wph).enumerate() {
                let y = (i * self.sh + rh).wrapping_sub(pt);
                if y >= h || i == self.hph {
                    drow.fill(MaybeUninit::new(0.0));
                    continue;
                }
                let src = &x[y * w..][..w];
                if self.sw == 1 {
                    // Columns j read x[j + rw - gap]: zeros, the row, zeros.
                    let lead = gap.saturating_sub(rw).min(self.wph);
                    let start = (lead + rw).saturating_sub(gap);
                    let len = (self.wph - lead).min(w.saturating_sub(start));
                    drow[..lead].fill(MaybeUninit::new(0.0));
                    for (d, &s) in drow[lead..lead + len].iter_mut().zip(&src[start..]) {
                        *d = MaybeUninit::new(s);
                    }
                    drow[lead + len..].fill(MaybeUninit::new(0.0));
                } else {
                    // Columns j read x[j * sw + rw - gap]: zeros, every sw-th value, zeros.
                    let lead = gap.saturating_sub(rw).div_ceil(self.sw).min(self.wph);
                    let start = (lead * self.sw + rw).saturating_sub(gap);
                    let len = (self.wph - lead).min(w.saturating_sub(start).div_ceil(self.sw));
                    drow[..lead].fill(MaybeUninit::new(0.0));
                    let dst = &mut drow[lead..lead + len];
                    if self.sw == 2 {
                        // Pairs, so that the even/odd split vectorizes.
                        let pairs = src[start..].chunks_exact(2);
                        let odd_tail = dst.len() > pairs.len();
                        let (body, tail) = dst.split_at_mut(pairs.len().min(dst.len()));
                        for (d, pair) in body.iter_mut().zip(pairs) {
                            *d = MaybeUninit::new(pair[0]);
                        }
                        if odd_tail {
                            tail[0] = MaybeUninit::new(src[w - 1]);
                        }
                    } else {
                        for (d, &s) in dst.iter_mut().zip(src[start..].iter().step_by(self.sw)) {
                            *d = MaybeUninit::new(s);
                        }
                    }
                    drow[lead + len..].fill(MaybeUninit::new(0.0));
                }
            }
        }
    }
}

fn blocking(units: usize, mg: usize, nj: usize, k: usize, threads: usize) -> Blocking {
    let macs = units
        .saturating_mul(mg)
        .saturating_mul(nj)
        .saturating_mul(k);
    let parallel = threads > 1 && macs >= PARALLEL_MACS;
    let mut parts_n = nj.div_ceil(NT_MAX);
    let mut parts_m = mg.div_ceil(MT_MAX);
    let want = 2 * threads;
    if parallel && units * parts_n * parts_m < want {
        let per_unit = want.div_ceil(units);
        parts_n = parts_n.max(per_unit.div_ceil(parts_m).min((nj / 64).max(1)));
        if units * parts_n * parts_m < want {
            parts_m = parts_m.max(want.div_ceil(units * parts_n).min((mg / 12).max(1)));
        }
    }
    let nt = nj.div_ceil(parts_n).div_ceil(NR) * NR;
    let mt = mg.div_ceil(parts_m).div_ceil(MR) * MR;
    Blocking {
        nt,
        parts_n: nj.div_ceil(nt),
        mt,
        parts_m: mg.div_ceil(mt),
        parallel,
    }
}

/// How the epilogue splits: the bias always starts the accumulators; without Z, Relu, Clip
/// and LeakyRelu run in registers and other activations once per row of a task's block; with
/// Z, Z and the activation run on the output segments.
struct Finish {
    post: Post,
    rows: Activation,
}

impl Finish {
    fn plan(ep: &Epilogue<f32>) -> Finish {
        if ep.z.is_some() {
            return Finish {
                post: Post::None,
                rows: Activation::None,
            };
        }
        let post = match ep.act {
            Activation::Relu => Post::Clamp(0.0, f32::INFINITY),
            Activation::Clip { min, max } => Post::Clamp(min as f32, max as f32),
            Activation::LeakyRelu { alpha } => Post::Leaky(alpha as f32),
            _ => Post::None,
        };
        Finish {
            post,
            rows: if post == Post::None {
                ep.act
            } else {
                Activation::None
            },
        }
    }
}

/// Writes every element of `out` (`[n, m, ho, wo]`) with the convolution of `x` by the
/// packed weights `wp`, finished by `ep`. Panics unless `supports` and
/// [`DirectWeights::fits`] hold. (The runtime enters through [`try_conv`].)
#[cfg(test)]
fn direct_conv(
    g: &ConvGeom,
    x: &[f32],
    wp: &DirectWeights,
    ep: &Epilogue<f32>,
    out: &mut [MaybeUninit<f32>],
) {
    let planes = plan(g).expect("direct_conv: unsupported geometry");
    run(g, &planes, x, wp, ep, out)
}

fn run(
    g: &ConvGeom,
    planes: &Planes,
    x: &[f32],
    wp: &DirectWeights,
    ep: &Epilogue<f32>,
    out: &mut [MaybeUninit<f32>],
) {
    assert!(
        wp.fits(g),
        "direct_conv: weights packed for another geometry"
    );
    let win = &g.win;
    let (cg, mg) = (g.c / g.group, g.m / g.group);
    let (ho, wo) = (win.output[0], win.output[1]);
    let in_sz = win.input[0] * win.input[1];
    let units = g.n * g.group;
    assert_eq!(out.len(), g.n * g.m * ho * wo, "direct_conv: output size");
    assert_eq!(x.len(), g.n * g.c * in_sz, "direct_conv: input size");
    let threads = rayon::current_num_threads();
    let taps = kernel_taps(g);
    let k = cg * taps;
    let nj = ho * planes.wph;
    let bl = blocking(units, mg, nj, k, threads);

    // The planes of every (image, group), with zeroed slack after each.
    // Large inputs lay out their channels in parallel.
    let big = bl.parallel && x.len() >= PARALLEL_FILL;
    // SAFETY: each unit's closure call writes its whole chunk (the channel planes and the
    // slack).
    let buf: Vec<f32> = unsafe {
        build_vec(units * planes.per_unit, |dst| {
            for (u, chunk) in dst.chunks_mut(planes.per_unit).enumerate() {
                let xs = &x[u * cg * in_sz..][..cg * in_sz];
                let (chans, slack) = chunk.split_at_mut(cg * planes.per_ch);
                let fill = |(ci, d): (usize, &mut [MaybeUninit<f32>])| {
                    planes.fill_channel(g, &xs[ci * in_sz..][..in_sz], d)
                };
                if big {
                    use rayon::prelude::*;
                    chans
                        .par_chunks_exact_mut(planes.per_ch)
                        .enumerate()
                        .for_each(fill);
                } else {
                    chans
                        .chunks_exact_mut(planes.per_ch)
                        .enumerate()
                        .for_each(fill);
                }
                slack.fill(MaybeUninit::new(0.0));
            }
        })
    };
    let offs = planes.offsets(g);
    let cc = (KC_STEPS / taps).max(1);
    let per_unit_tasks = bl.parts_n * bl.parts_m;
    let outp = SharedMut(out.as_mut_ptr() as *mut f32);
    let fin = Finish::plan(ep);
    let task = |t: usize| {
        let (unit, rest) = (t / per_unit_tasks, t % per_unit_tasks);
        let (pn, pm) = (rest / bl.parts_m, rest % bl.parts_m);
        let (b, gi) = (unit / g.group, unit % g.group);
        let j0 = pn * bl.nt;
        let ncols = bl.nt.min(nj - j0);
        // Tiles of NR positions, the last one half as wide when that covers the block.
        let ldc = ncols.div_ceil(HALF) * HALF;
        let m0 = pm * bl.mt;
        let rows = bl.mt.min(mg - m0);
        let panels = rows.div_ceil(MR);
        let base = &buf[unit * planes.per_unit..][..planes.per_unit];
        with_scratch(panels * MR * ldc, |y: &mut [f32]| {
            for c0 in (0..cg).step_by(cc) {
                let (k0, kc) = (c0 * taps, cc.min(cg - c0) * taps);
                let last = c0 + cc >= cg;
                let post = if last { fin.post } else { Post::None };
                for p in 0..panels {
                    let a = &wp.panel(gi, m0 / MR + p)[k0 * MR..][..kc * MR];
                    let start = if c0 == 0 {
                        let mut v = [0.0; MR];
                        if let Some(bias) = ep.bias {
                            let ch = gi * mg + m0 + p * MR;
                            let n = MR.min(mg - (m0 + p * MR));
                            v[..n].copy_from_slice(&bias[ch..ch + n]);
                        }
                        Start::Rows(v)
                    } else {
                        Start::Load
                    };
                    for jt in (0..ldc).step_by(NR) {
                        let half = ldc - jt == HALF;
                        // Reads: base[offs[k] + j0 + jt + 0..NR], inside the unit's planes plus
                        // slack (Planes::new bounds every tap; the slack covers the tile tail).
                        let bpos = j0 + jt;
                        debug_assert!(offs[k0..k0 + kc]
                            .iter()
                            .all(|&o| o + bpos + NR <= base.len()));
                        let c = &mut y[p * MR * ldc + jt..];
                        let (b, o) = (base.as_ptr().wrapping_add(bpos), &offs[k0..k0 + kc]);
                        // SAFETY: `a` holds kc * MR values; every B read is in `base` (above);
                        // C rows p*MR..p*MR+MR of width NR (HALF for a half tile, which ends
                        // the row) at column jt lie inside `y`.
                        unsafe {
                            if half {
                                kernel::tile::<1>(a, b, o, c.as_mut_ptr(), ldc, &start, post)
                            } else {
                                kernel::tile::<2>(a, b, o, c.as_mut_ptr(), ldc, &start, post)
                            }
                        };
                    }
                }
            }
            for r in 0..rows {
                let ch = gi * mg + m0 + r;
                let obase = (b * g.m + ch) * ho * wo;
                let yrow = &mut y[r * ldc..][..ncols];
                fin.rows.apply(yrow);
                let (mut j, end) = (j0, j0 + ncols);
                while j < end {
                    let (oh, ow) = (j / planes.wph, j % planes.wph);
                    let row_end = ((oh + 1) * planes.wph).min(end);
                    if ow < wo {
                        let seg = (oh * planes.wph + wo).min(row_end) - j;
                        let off = obase + oh * wo + ow;
                        // SAFETY: (ch, oh, ow..ow+seg) is inside `out` and belongs to this
                        // task only: tasks own disjoint (unit, position, channel) blocks.
                        let dst = unsafe {
                            let p = outp.get().add(off);
                            std::ptr::copy_nonoverlapping(yrow.as_ptr().add(j - j0), p, seg);
                            std::slice::from_raw_parts_mut(p, seg)
                        };
                        if let Some(z) = ep.z {
                            dst.iter_mut()
                                .zip(&z[off..off + seg])
                                .for_each(|(v, &zv)| *v += zv);
                            ep.act.apply(dst);
                        }
                    }
                    j = row_end;
                }
            }
        });
    };
    let tasks = units * per_unit_tasks;
    if bl.parallel && tasks > 1 {
        use rayon::prelude::*;
        (0..tasks).into_par_iter().for_each(task);
    } else {
        (0..tasks).for_each(task);
    }
}

/// The 6x16 tile: `C[r][0..16] = post(start[r] + sum_k a[k * 6 + r] * B[offs[k]..][..16])`.
mod kernel {
    use super::{MR, NR};

    /// What the accumulators start from.
    #[derive(Clone, Copy)]
    pub enum Start {
        /// The tile's current values in C (a later depth pass).
        Load,
        /// One value per row (the bias; zeros without one).
        Rows([f32; MR]),
    }

    /// An activation applied in registers before the store (the last depth pass only).
    #[derive(Clone, Copy, PartialEq)]
    pub enum Post {
        None,
        /// `min(hi, max(lo, x))`, NaN kept (Relu is `(0, inf)`).
        Clamp(f32, f32),
        /// `x < 0 ? x * alpha : x`.
        Leaky(f32),
    }

    pub fn available() -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma")
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            false
        }
    }

    /// `V` vectors of 8 positions per row (2: a full tile of `NR`, 1: a half tile).
    ///
    /// # Safety
    /// [`available`] is true; `b.add(o)` is valid for `8 * V` reads for every `o` in `offs`;
    /// `a.len() >= offs.len() * MR`; `c.add(r * ldc)` is valid for `8 * V` reads and writes
    /// for `r < MR`.
    #[inline]
    pub unsafe fn tile<const V: usize>(
        a: &[f32],
        b: *const f32,
        offs: &[usize],
        c: *mut f32,
        ldc: usize,
        start: &Start,
        post: Post,
    ) {
        debug_assert!(a.len() >= offs.len() * MR && (V == 1 || V * 8 == NR));
        #[cfg(target_arch = "x86_64")]
        // SAFETY: the caller's contract.
        unsafe {
            avx2::<V>(a.as_ptr(), b, offs, c, ldc, start, post)
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = (a, b, offs, c, ldc, start, post);
            unreachable!("direct convolution needs AVX2")
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn avx2<const V: usize>(
        a: *const f32,
        b: *const f32,
        offs: &[usize],
        c: *mut f32,
        ldc: usize,
        start: &Start,
        post: Post,
    ) {
        use std::arch::x86_64::*;
        // SAFETY (whole body): the reads and writes `tile` documents.
        unsafe {
            let mut acc = [[_mm256_setzero_ps(); V]; MR];
            match start {
                Start::Load => {
                    for (r, line) in acc.iter_mut().enumerate() {
                        let p = c.add(r * ldc);
                        for (q, v) in line.iter_mut().enumerate() {
                            *v = _mm256_loadu_ps(p.add(8 * q));
                        }
                    }
                }
                Start::Rows(v) => {
                    for (line, &x) in acc.iter_mut().zip(v) {
                        *line = [_mm256_set1_ps(x); V];
                    }
                }
            }
            let mut a = a;
            for &o in offs {
                let bp = b.add(o);
                let mut bv = [_mm256_setzero_ps(); V];
                for (q, v) in bv.iter_mut().enumerate() {
                    *v = _mm256_loadu_ps(bp.add(8 * q));
                }
                for (r, line) in acc.iter_mut().enumerate() {
                    let av = _mm256_broadcast_ss(&*a.add(r));
                    for (l, &bq) in line.iter_mut().zip(&bv) {
                        *l = _mm256_fmadd_ps(av, bq, *l);
                    }
                }
                a = a.add(MR);
            }
            let fin = |v: __m256| match post {
                Post::None => v,
                // max/min return their second operand when either is NaN: NaN stays.
                Post::Clamp(lo, hi) => {
                    _mm256_min_ps(_mm256_set1_ps(hi), _mm256_max_ps(_mm256_set1_ps(lo), v))
                }
                Post::Leaky(alpha) => {
                    let neg = _mm256_cmp_ps::<_CMP_LT_OQ>(v, _mm256_setzero_ps());
                    _mm256_blendv_ps(v, _mm256_mul_ps(v, _mm256_set1_ps(alpha)), neg)
                }
            };
            for (r, line) in acc.iter().enumerate() {
                let p = c.add(r * ldc);
                for (q, &v) in line.iter().enumerate() {
                    _mm256_storeu_ps(p.add(8 * q), fin(v));
                }
            }
        }
    }
}

#[cfg(test)]
#[path = "conv_direct_tests.rs"]
mod tests;
