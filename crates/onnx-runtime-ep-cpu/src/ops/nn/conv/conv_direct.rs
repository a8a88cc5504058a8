//! Direct 2-D f32 convolution for AVX2/FMA and AVX-512 machines, without im2col.
//!
//! The zero-padded input of each (image, group) is laid out once as stride-phase planes:
//! plane `(ci, rh, rw)` holds padded rows `i * sh + rh` and columns `j * sw + rw`. A padded
//! row is `gap = max(left, right pad)` zeros then the input row, so each row's right padding
//! is the next row's left padding (one spare zero row closes the plane). In that layout every
//! kernel tap of output position `(oh, ow)` sits at `oh * wph + ow` plus a fixed offset per
//! (channel, tap), whatever the stride or dilation, so sixteen consecutive output positions
//! of one tap are sixteen consecutive floats. A register tile (output channels x positions:
//! 6 x 16 on AVX2, 8 x 48 on AVX-512, see [`super::conv_direct_kernel`]) then accumulates over
//! (channel, tap) with one offset lookup, a few vector loads and broadcasts of pre-packed
//! weights per step: the arithmetic density of a GEMM micro-kernel, with no unfolded copy of
//! the input. Positions run over the plane's width, so tiles never break at row ends; the few
//! columns past the output's width are computed and dropped when the tile is copied out and
//! finished (bias, Z, activation). A block's last tile is only as wide as it needs (in steps
//! of 8 or 16 positions), so that small maps (7 x 7, 13 x 13) compute few positions they drop.
//!
//! On AVX-512 pointwise convolutions (1x1, stride 1, unpadded) run here too, reading the input
//! in place: channel `ci` of position `j` is `x[ci * h * w + j]`, and the tiles' masked loads
//! stop at each channel's end. The weights are constant, so this is a GEMM whose constant
//! operand is packed once per session and whose other operand is never copied.

use crate::ops::nn::conv::conv_act::{Activation, Epilogue};
use crate::ops::nn::conv::conv_direct_kernel::{self as kernel, Isa, Post, Start, NR_MAX};
use crate::ops::nn::conv::conv_gemm::Blocking;
use crate::ops::nn::conv::conv_op::ConvGeom;
use crate::ops::nn::gemm::sgemm::AlignedBuf;
use crate::ops::nn::scratch::{build_vec, with_scratch, SharedMut};
use std::mem::MaybeUninit;
use std::sync::OnceLock;

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

/// Conv weights `[m, cg, kh, kw]` packed per group into panels of `mr` output channels (the
/// tile's rows), (channel, tap)-major and cut into depth passes of `step` (channel, tap)
/// steps (the passes the tiles make): a group's passes lie one after another, and in each pass
/// its panels one after another, so that the weights a block reads in one pass are one
/// sequential stream. Element `(row r, depth k0 + kk)` of panel `p` in the pass at `k0` (depth
/// `kc`) sits at `k0 * panels * mr + p * kc * mr + kk * mr + r` from the group's start; rows
/// past the group's channels are zero.
pub struct DirectWeights {
    data: AlignedBuf,
    isa: Isa,
    /// Output channels of the whole convolution, per group, (channel, tap) depth and steps
    /// per pass.
    m: usize,
    mg: usize,
    k: usize,
    step: usize,
}

/// (channel, tap) steps per depth pass on `isa` for kernels of `taps` taps: whole channels.
fn pass_steps(isa: Isa, taps: usize) -> usize {
    (isa.kc_steps() / taps.max(1)).max(1) * taps.max(1)
}

impl DirectWeights {
    /// Packs `w` (`m * k` values, `k = cg * taps`, `taps = kh * kw`) for `group` groups, for
    /// the tiles of `isa`.
    pub fn pack_on(
        isa: Isa,
        w: &[f32],
        m: usize,
        group: usize,
        k: usize,
        taps: usize,
    ) -> DirectWeights {
        let mr = isa.mr();
        assert!(
            group > 0 && m.is_multiple_of(group) && w.len() == m * k,
            "pack: weight size"
        );
        let mg = m / group;
        let panels = mg.div_ceil(mr);
        let step = pass_steps(isa, taps);
        let mut data = AlignedBuf::zeroed(group * panels * k * mr);
        let dst = data.as_mut_slice();
        for gi in 0..group {
            let gdst = &mut dst[gi * panels * k * mr..][..panels * k * mr];
            for k0 in (0..k).step_by(step) {
                let kc = step.min(k - k0);
                for p in 0..panels {
                    let panel = &mut gdst[k0 * panels * mr + p * kc * mr..][..kc * mr];
                    for r in 0..mr.min(mg - p * mr) {
                        let src = &w[(gi * mg + p * mr + r) * k + k0..][..kc];
                        for (kk, &v) in src.iter().enumerate() {
                            panel[kk * mr + r] = v;
                        }
                    }
                }
            }
        }
        DirectWeights {
            data,
            isa,
            m,
            mg,
            k,
            step,
        }
    }

    /// Whether these are the packed weights of geometry `g` for the tiles of `isa`.
    pub fn fits(&self, g: &ConvGeom, isa: Isa) -> bool {
        let taps = kernel_taps(g);
        self.isa == isa
            && self.m == g.m
            && self.mg == g.m / g.group
            && self.k == (g.c / g.group) * taps
            && self.step == pass_steps(isa, taps)
    }

    /// Panel `p` of group `gi` in the pass at depth `k0` (a multiple of the pass step) of
    /// depth `kc`: `kc * mr` values.
    fn pass_panel(&self, gi: usize, k0: usize, kc: usize, p: usize) -> &[f32] {
        let mr = self.isa.mr();
        let panels = self.mg.div_ceil(mr);
        debug_assert!(k0.is_multiple_of(self.step) && kc == self.step.min(self.k - k0));
        let off = gi * panels * self.k * mr + k0 * panels * mr + p * kc * mr;
        &self.data.as_slice()[off..][..kc * mr]
    }
}

fn kernel_taps(g: &ConvGeom) -> usize {
    g.win.kernel.iter().product()
}

/// Whether the direct kernel on `isa` runs `g` (and should: depthwise convolutions have
/// their own kernel, and without masked loads 1x1 stride-1 unpadded convolutions of more than
/// a few channels are a plain GEMM on the input).
#[cfg(test)]
fn supports(g: &ConvGeom, isa: Isa) -> bool {
    plan(g, isa).is_some()
}

/// The input layout of `g` when the direct kernel on `isa` should run it: 2-D, not
/// depthwise, every tap inside the planes; pointwise convolutions read the input in place
/// where the tiles mask their loads, and otherwise only for few input channels.
fn plan(g: &ConvGeom, isa: Isa) -> Option<Planes> {
    let w = &g.win;
    if w.input.len() != 2 || g.c == g.group {
        return None;
    }
    match (w.is_pointwise(), isa.masked()) {
        (true, true) => Planes::in_place(g),
        (true, false) if g.c / g.group > POINTWISE_DIRECT_MAX_C => None,
        _ => Planes::new(g),
    }
}

/// The f32 convolution on the direct kernel when it suits `g` (with `packed`, constant weights
/// packed there at the first call, else `w` packed now); None when the caller should take
/// another path.
pub fn try_conv(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    packed: Option<&OnceLock<DirectWeights>>,
    ep: &Epilogue<f32>,
) -> Option<Vec<f32>> {
    let isa = Isa::detect()?;
    let planes = plan(g, isa)?;
    let pack = || {
        let k = w.len() / g.m.max(1);
        DirectWeights::pack_on(isa, w, g.m, g.group, k, kernel_taps(g))
    };
    let fresh;
    let wp = match packed.map(|cell| cell.get_or_init(pack)) {
        Some(d) if d.fits(g, isa) => d,
        _ => {
            fresh = pack();
            &fresh
        }
    };
    let len = g.n * g.m * g.win.output_size();
    // SAFETY: `run` writes every element of the output it is given.
    Some(unsafe { build_vec(len, |out| run(g, isa, &planes, x, wp, ep, out)) })
}

/// The stride-phase plane layout of one (image, group), or the input itself (`in_place`).
struct Planes {
    /// The tiles read the input as it is (a pointwise convolution): one plane per channel,
    /// `h * w` apart, no padding and no slack.
    in_place: bool,
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
    /// The input itself as the planes of a pointwise convolution.
    fn in_place(g: &ConvGeom) -> Option<Planes> {
        let w = &g.win;
        let (h, wd) = (w.input[0], w.input[1]);
        if h == 0 || wd == 0 {
            return None;
        }
        let per_ch = h * wd;
        Some(Planes {
            in_place: true,
            sh: 1,
            sw: 1,
            hph: h,
            wph: wd,
            shift: 0,
            phase: vec![Some(0)],
            per_ch,
            per_unit: g.c / g.group * per_ch,
        })
    }

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
        // Tiles read up to NR_MAX - 1 positions past the last one, plus the largest column
        // tap.
        let per_unit = cg * per_ch + wph + NR_MAX;
        Some(Planes {
            in_place: false,
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

fn blocking(units: usize, mg: usize, nj: usize, k: usize, threads: usize, isa: Isa) -> Blocking {
    let macs = units
        .saturating_mul(mg)
        .saturating_mul(nj)
        .saturating_mul(k);
    let parallel = threads > 1 && macs >= PARALLEL_MACS;
    let mut parts_n = nj.div_ceil(NT_MAX);
    let mut parts_m = mg.div_ceil(MT_MAX);
    let want = 2 * threads;
    if parallel && units * parts_n * parts_m < want {
        // Output channels first, in blocks of at least four panels: more position blocks
        // would add a narrow tail tile each (a 256-channel 14 x 14 map cut in two runs tiles
        // of 48, 48 and 16 positions twice, against 48 x 4 and 32 once).
        let per_unit = want.div_ceil(units);
        let panels = mg.div_ceil(isa.mr());
        parts_m = parts_m.max(per_unit.div_ceil(parts_n).min((panels / 4).max(1)));
        if units * parts_n * parts_m < want {
            parts_n = parts_n.max(want.div_ceil(units * parts_m).min((nj / 64).max(1)));
        }
    }
    if parallel {
        // Equal blocks in a number of tasks that the threads share evenly (11 blocks on two
        // threads leave one idle for a twelfth of the time), while blocks keep a few tiles.
        let others = units * parts_m;
        let step = threads / gcd(threads, others);
        let even = parts_n.next_multiple_of(step);
        if others * parts_n < 16 * threads && even * isa.nr() <= nj {
            parts_n = even;
        }
    }
    // Blocks in whole tail-tile steps: a block's last tile may be narrower than a full one.
    let nt = nj.div_ceil(parts_n).next_multiple_of(isa.quantum());
    let mt = mg.div_ceil(parts_m).next_multiple_of(isa.mr());
    Blocking {
        nt,
        parts_n: nj.div_ceil(nt),
        mt,
        parts_m: mg.div_ceil(mt),
        parallel,
    }
}

fn gcd(a: usize, b: usize) -> usize {
    if b == 0 {
        a
    } else {
        gcd(b, a % b)
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
/// packed weights `wp` on the tiles of `isa` (which this CPU must run), finished by `ep`.
/// Panics unless `supports` and [`DirectWeights::fits`] hold. (The runtime enters through
/// [`try_conv`].)
#[cfg(test)]
fn direct_conv(
    g: &ConvGeom,
    isa: Isa,
    x: &[f32],
    wp: &DirectWeights,
    ep: &Epilogue<f32>,
    out: &mut [MaybeUninit<f32>],
) {
    assert!(
        Isa::all().contains(&isa),
        "direct_conv: {isa:?} not on this CPU"
    );
    let planes = plan(g, isa).expect("direct_conv: unsupported geometry");
    run(g, isa, &planes, x, wp, ep, out)
}

fn run(
    g: &ConvGeom,
    isa: Isa,
    planes: &Planes,
    x: &[f32],
    wp: &DirectWeights,
    ep: &Epilogue<f32>,
    out: &mut [MaybeUninit<f32>],
) {
    assert!(
        wp.fits(g, isa),
        "direct_conv: weights packed for another geometry or tile"
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
    let bl = blocking(units, mg, nj, k, threads, isa);
    let (mr, nr, quantum) = (isa.mr(), isa.nr(), isa.quantum());

    // The planes of every (image, group), with zeroed slack after each (none when the tiles
    // read the input in place). Large inputs lay out their channels in parallel.
    let big = bl.parallel && x.len() >= PARALLEL_FILL;
    let planes_len = if planes.in_place {
        0
    } else {
        units * planes.per_unit
    };
    // SAFETY: each unit's closure call writes its whole chunk (the channel planes and the
    // slack).
    let buf: Vec<f32> = unsafe {
        build_vec(planes_len, |dst| {
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
    let cc = wp.step / taps;
    let per_unit_tasks = bl.parts_n * bl.parts_m;
    let outp = SharedMut(out.as_mut_ptr() as *mut f32);
    let fin = Finish::plan(ep);
    let task = |t: usize| {
        let (unit, rest) = (t / per_unit_tasks, t % per_unit_tasks);
        let (pn, pm) = (rest / bl.parts_m, rest % bl.parts_m);
        let (b, gi) = (unit / g.group, unit % g.group);
        let j0 = pn * bl.nt;
        let ncols = bl.nt.min(nj - j0);
        // Tiles of nr positions, the last one only as wide as it needs (quantum steps).
        let ldc = ncols.next_multiple_of(quantum);
        let m0 = pm * bl.mt;
        let rows = bl.mt.min(mg - m0);
        let panels = rows.div_ceil(mr);
        let base = if planes.in_place {
            &x[unit * planes.per_unit..][..planes.per_unit]
        } else {
            &buf[unit * planes.per_unit..][..planes.per_unit]
        };
        // In place, the whole panels' tiles run straight on the output rows (`nj` apart)
        // and only a last partial panel on a scratch block; otherwise every panel runs on
        // the scratch block, copied out row by row.
        let full = if planes.in_place { rows / mr * mr } else { 0 };
        let scratch_len = (panels - full / mr) * mr * ldc;
        with_scratch(scratch_len, |y: &mut [f32]| {
            let first = (b * g.m + gi * mg + m0) * nj + j0;
            let (out0, y0) = (outp.get().wrapping_add(first), y.as_mut_ptr());
            for c0 in (0..cg).step_by(cc) {
                let (k0, kc) = (c0 * taps, cc.min(cg - c0) * taps);
                let last = c0 + cc >= cg;
                let post = if last { fin.post } else { Post::None };
                // Tiles outer, panels inner: a tile's input lines stay in L1 while the
                // weight panels (a fraction of a line per step) stream from L2.
                for jt in (0..ldc).step_by(nr) {
                    let width = nr.min(ldc - jt);
                    // Reads: base[offs[k] + j0 + jt..][..width], inside the unit's planes
                    // plus slack (Planes::new bounds every tap; the slack covers the tile
                    // tail); in place, loads stop at the channel's last position.
                    let bpos = j0 + jt;
                    let valid = if planes.in_place {
                        nj - bpos
                    } else {
                        usize::MAX
                    };
                    debug_assert!(offs[k0..k0 + kc]
                        .iter()
                        .all(|&o| o + bpos + width.min(valid) <= base.len()));
                    let (b, o) = (base.as_ptr().wrapping_add(bpos), &offs[k0..k0 + kc]);
                    for p in 0..panels {
                        let a = wp.pass_panel(gi, k0, kc, m0 / mr + p);
                        let start = if c0 == 0 {
                            let mut v = [0.0; kernel::MR_MAX];
                            if let Some(bias) = ep.bias {
                                let ch = gi * mg + m0 + p * mr;
                                let n = mr.min(mg - (m0 + p * mr));
                                v[..n].copy_from_slice(&bias[ch..ch + n]);
                            }
                            Start::Rows(v)
                        } else {
                            Start::Load
                        };
                        let (c, cld) = if p * mr < full {
                            (out0.wrapping_add(p * mr * nj + jt), nj)
                        } else {
                            (y0.wrapping_add((p * mr - full) * ldc + jt), ldc)
                        };
                        // SAFETY: `a` holds kc * mr values; every B read is in `base` (above).
                        // C rows p*mr..p*mr+mr of `width` at column jt lie inside `y` (the
                        // last tile ends the row), or, straight on the output, are this task's
                        // output channels (the panel ends within `rows`) and positions
                        // (the tile stops at the block's end or, masked, at nj). `isa` runs
                        // here (detected or asserted).
                        unsafe { kernel::tile(isa, width, valid, a, b, o, c, cld, &start, post) };
                    }
                }
            }
            for r in 0..full {
                let off = (b * g.m + gi * mg + m0 + r) * nj + j0;
                // SAFETY: this task's output row segment, written by the tiles above.
                let dst = unsafe { std::slice::from_raw_parts_mut(outp.get().add(off), ncols) };
                fin.rows.apply(dst);
                if let Some(z) = ep.z {
                    dst.iter_mut()
                        .zip(&z[off..off + ncols])
                        .for_each(|(v, &zv)| *v += zv);
                    ep.act.apply(dst);
                }
            }
            for r in full..rows {
                let ch = gi * mg + m0 + r;
                let obase = (b * g.m + ch) * ho * wo;
                let yrow = &mut y[(r - full) * ldc..][..ncols];
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

#[cfg(test)]
#[path = "conv_direct_tests.rs"]
mod tests;
