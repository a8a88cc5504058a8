//! Sliding-window geometry shared by Conv, ConvTranspose and the pools: kernel, strides,
//! dilations, pads (explicit or auto_pad) and the output extent.

use crate::attrs;
use crate::ops::nn::common::{bad_attr, invalid, usize_list};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::Node;

#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub enum AutoPad {
    #[default]
    NotSet,
    SameUpper,
    SameLower,
    Valid,
}

/// Window attributes as written on the node (kernel may come from the weights); the default
/// is a node that sets none of them.
#[derive(Clone, Debug, Default)]
pub struct WindowAttrs {
    pub kernel: Option<Vec<usize>>,
    pub strides: Option<Vec<usize>>,
    pub dilations: Option<Vec<usize>>,
    pub pads: Option<Vec<usize>>,
    pub auto_pad: AutoPad,
    pub ceil_mode: bool,
}

/// The resolved geometry for one input.
#[derive(Clone, Debug, PartialEq)]
pub struct Window {
    pub input: Vec<usize>,
    pub kernel: Vec<usize>,
    pub strides: Vec<usize>,
    pub dilations: Vec<usize>,
    pub pad_begin: Vec<usize>,
    pub pad_end: Vec<usize>,
    pub output: Vec<usize>,
}

impl WindowAttrs {
    pub fn parse(node: &Node) -> Result<Self, EpError> {
        let list = |name: &str| -> Result<Option<Vec<usize>>, EpError> {
            match attrs::opt_ints(node, name)? {
                Some(v) => Ok(Some(usize_list(node, name, &v)?)),
                None => Ok(None),
            }
        };
        let auto_pad = match attrs::string(node, "auto_pad", "NOTSET")?.as_str() {
            "NOTSET" | "" => AutoPad::NotSet,
            "SAME_UPPER" => AutoPad::SameUpper,
            "SAME_LOWER" => AutoPad::SameLower,
            "VALID" => AutoPad::Valid,
            other => {
                return Err(bad_attr(
                    node,
                    "auto_pad",
                    format!("'{other}' is not NOTSET, SAME_UPPER, SAME_LOWER or VALID"),
                ))
            }
        };
        let w = WindowAttrs {
            kernel: list("kernel_shape")?,
            strides: list("strides")?,
            dilations: list("dilations")?,
            pads: list("pads")?,
            auto_pad,
            ceil_mode: attrs::int(node, "ceil_mode", 0)? != 0,
        };
        if w.strides.as_ref().is_some_and(|s| s.contains(&0)) {
            return Err(bad_attr(node, "strides", "strides must be positive"));
        }
        if w.dilations.as_ref().is_some_and(|s| s.contains(&0)) {
            return Err(bad_attr(node, "dilations", "dilations must be positive"));
        }
        Ok(w)
    }

    /// Resolves the window over `input` spatial dims with `kernel` (from the attribute or
    /// the weights).
    pub fn resolve(
        &self,
        node: &str,
        input: &[usize],
        kernel: &[usize],
    ) -> Result<Window, EpError> {
        let r = input.len();
        let check = |name: &str, v: &Option<Vec<usize>>, len: usize| -> Result<(), EpError> {
            match v {
                Some(v) if v.len() != len => Err(invalid(
                    node,
                    format!(
                        "{name} has {} values but the input has {r} spatial dims",
                        v.len()
                    ),
                )),
                _ => Ok(()),
            }
        };
        if kernel.len() != r {
            return Err(invalid(
                node,
                format!("kernel {kernel:?} does not match {r} spatial dims of the input"),
            ));
        }
        check("strides", &self.strides, r)?;
        check("dilations", &self.dilations, r)?;
        check("pads", &self.pads, 2 * r)?;
        let strides = self.strides.clone().unwrap_or_else(|| vec![1; r]);
        let dilations = self.dilations.clone().unwrap_or_else(|| vec![1; r]);
        let mut pad_begin = vec![0; r];
        let mut pad_end = vec![0; r];
        let mut output = vec![0; r];
        for i in 0..r {
            let ek = (kernel[i].max(1) - 1) * dilations[i] + 1;
            let s = strides[i];
            match self.auto_pad {
                AutoPad::NotSet => {
                    if let Some(p) = &self.pads {
                        pad_begin[i] = p[i];
                        pad_end[i] = p[i + r];
                    }
                    let span = input[i] + pad_begin[i] + pad_end[i];
                    if span < ek {
                        return Err(invalid(
                            node,
                            format!(
                                "padded input extent {span} on spatial axis {i} is smaller than the dilated kernel {ek}"
                            ),
                        ));
                    }
                    output[i] = if self.ceil_mode {
                        let mut o = (span - ek).div_ceil(s) + 1;
                        // The last window must start inside the input or its begin pad.
                        if (o - 1) * s >= input[i] + pad_begin[i] {
                            o -= 1;
                        }
                        o
                    } else {
                        (span - ek) / s + 1
                    };
                }
                AutoPad::Valid => {
                    if input[i] < ek {
                        return Err(invalid(
                            node,
                            format!("input extent {} on spatial axis {i} is smaller than the dilated kernel {ek}", input[i]),
                        ));
                    }
                    output[i] = if self.ceil_mode {
                        (input[i] - ek).div_ceil(s) + 1
                    } else {
                        (input[i] - ek) / s + 1
                    };
                }
                AutoPad::SameUpper | AutoPad::SameLower => {
                    output[i] = input[i].div_ceil(s);
                    let total = ((output[i].max(1) - 1) * s + ek).saturating_sub(input[i]);
                    let small = total / 2;
                    if self.auto_pad == AutoPad::SameUpper {
                        pad_begin[i] = small;
                        pad_end[i] = total - small;
                    } else {
                        pad_begin[i] = total - small;
                        pad_end[i] = small;
                    }
                }
            }
        }
        Ok(Window {
            input: input.to_vec(),
            kernel: kernel.to_vec(),
            strides,
            dilations,
            pad_begin,
            pad_end,
            output,
        })
    }
}

impl Window {
    pub fn kernel_size(&self) -> usize {
        self.kernel.iter().product()
    }

    /// Whether the window is 1x1 (any rank), stride 1 and unpadded: each output position
    /// reads exactly its own input position, so the unfolded input is the input itself.
    pub fn is_pointwise(&self) -> bool {
        self.kernel_size() == 1
            && self.strides.iter().all(|&s| s == 1)
            && self.pad_begin.iter().chain(&self.pad_end).all(|&p| p == 0)
    }

    pub fn output_size(&self) -> usize {
        self.output.iter().product()
    }

    pub fn input_size(&self) -> usize {
        self.input.iter().product()
    }
}

/// Unfolds one image `x` of `channels` planes (spatial extent `w.input`) into `col`, a
/// `[channels * kernel_size, output_size]` row-major matrix (zeros where the window hangs
/// over the padding).
pub fn im2col<T: Copy + Default>(x: &[T], channels: usize, w: &Window, col: &mut [T]) {
    im2col_tile(x, channels, w, 0, w.output_size(), col);
}

/// Columns `n0..n0 + ncols` of [`im2col`]'s matrix (output positions in row-major order)
/// into `col`, a `[channels * kernel_size, ncols]` row-major matrix. Every element of `col`
/// is written.
pub fn im2col_tile<T: Copy + Default>(
    x: &[T],
    channels: usize,
    w: &Window,
    n0: usize,
    ncols: usize,
    col: &mut [T],
) {
    if ncols == 0 || w.kernel_size() == 0 {
        return;
    }
    check_tile(w, n0, ncols);
    assert_eq!(
        col.len(),
        channels * w.kernel_size() * ncols,
        "im2col_tile: col size"
    );
    for (row, dst) in col.chunks_exact_mut(ncols).enumerate() {
        im2col_row(x, w, row, n0, dst);
    }
}

fn check_tile(w: &Window, n0: usize, ncols: usize) {
    assert!(
        w.input.len() <= 8 && n0 + ncols <= w.output_size(),
        "im2col: bad tile"
    );
}

/// Row `row` (channel `row / kernel_size`, kernel tap `row % kernel_size`) of [`im2col`]'s
/// matrix at output positions `n0..n0 + dst.len()`.
#[inline]
fn im2col_row<T: Copy + Default>(x: &[T], w: &Window, row: usize, n0: usize, dst: &mut [T]) {
    let ks = w.kernel_size();
    let in_size = w.input_size();
    let r = w.input.len();
    let last = r - 1;
    let (ow, iw) = (w.output[last], w.input[last]);
    let sw = w.strides[last] as isize;
    let end = n0 + dst.len();
    let c = row / ks;
    let mut kr = row % ks;
    let mut kidx = [0usize; 8];
    for d in (0..r).rev() {
        kidx[d] = kr % w.kernel[d];
        kr /= w.kernel[d];
    }
    let xc = &x[c * in_size..(c + 1) * in_size];
    let kx_off = (kidx[last] * w.dilations[last]) as isize - w.pad_begin[last] as isize;
    let (mut o, mut pos) = (n0, 0);
    while o < end {
        let (mut outer, ox0) = (o / ow, o % ow);
        let len = (ow - ox0).min(end - o);
        // Input offset of the outer dims' row, or None if it falls in the padding.
        let mut base = Some(0usize);
        let mut stride_acc = iw;
        for d in (0..last).rev() {
            let od = outer % w.output[d];
            outer /= w.output[d];
            let i =
                (od * w.strides[d] + kidx[d] * w.dilations[d]) as isize - w.pad_begin[d] as isize;
            if i < 0 || i >= w.input[d] as isize {
                base = None;
                break;
            }
            base = base.map(|b| b + i as usize * stride_acc);
            stride_acc *= w.input[d];
        }
        let seg = &mut dst[pos..pos + len];
        match base {
            None => seg.fill(T::default()),
            Some(b) => {
                let line = &xc[b..b + iw];
                let first = ox0 as isize * sw + kx_off;
                if sw == 1 && first >= 0 && first as usize + len <= iw {
                    seg.copy_from_slice(&line[first as usize..first as usize + len]);
                } else {
                    // Positions j whose input column first + j * sw lies in the row.
                    let lo = if first >= 0 {
                        0
                    } else {
                        ((-first) as usize).div_ceil(sw as usize)
                    };
                    let last_in = iw as isize - 1 - first;
                    let hi = if last_in < 0 {
                        0
                    } else {
                        (last_in as usize / sw as usize + 1).min(len)
                    };
                    let lo = lo.min(hi);
                    seg[..lo].fill(T::default());
                    seg[hi..].fill(T::default());
                    let start = first + lo as isize * sw;
                    for (j, v) in seg[lo..hi].iter_mut().enumerate() {
                        *v = line[(start + j as isize * sw) as usize];
                    }
                }
            }
        }
        o += len;
        pos += len;
    }
}

/// Lays out one input row for a stride-`sw` window: the row padded with `pad_begin` values
/// of `pad` on the left (and `pad` past its end), split into `sw` phases of `plen` elements,
/// phase `p` holding padded columns `p, p + sw, p + 2 sw, ...`. Then padded column
/// `o * sw + t` is `dst[(t % sw) * plen + o + t / sw]`, a contiguous run in `o`.
pub fn row_phases<T: Copy>(
    row: &[T],
    pad_begin: usize,
    sw: usize,
    plen: usize,
    pad: T,
    dst: &mut [T],
) {
    debug_assert_eq!(dst.len(), sw * plen);
    if sw == 1 {
        let lead = pad_begin.min(plen);
        dst[..lead].fill(pad);
        let n = row.len().min(plen - lead);
        dst[lead..lead + n].copy_from_slice(&row[..n]);
        dst[lead + n..].fill(pad);
        return;
    }
    for (p, phase) in dst.chunks_exact_mut(plen).enumerate() {
        // Phase elements j whose padded column p + j * sw is a row element: lo..hi.
        let lo = pad_begin.saturating_sub(p).div_ceil(sw).min(plen);
        let hi = (pad_begin + row.len())
            .saturating_sub(p)
            .div_ceil(sw)
            .clamp(lo, plen);
        phase[..lo].fill(pad);
        phase[hi..].fill(pad);
        if lo < hi {
            let first = p + lo * sw - pad_begin;
            if sw == 2 {
                for (v, pair) in phase[lo..hi].iter_mut().zip(row[first..].chunks(2)) {
                    *v = pair[0];
                }
            } else {
                for (v, &s) in phase[lo..hi]
                    .iter_mut()
                    .zip(row[first..].iter().step_by(sw))
                {
                    *v = s;
                }
            }
        }
    }
}

/// The inverse scatter of [`im2col`]: adds each `col` entry into the image position its
/// window covers (ConvTranspose, Col2Im). `img` has `channels` planes of extent `w.input`.
pub fn col2im<T: Copy + std::ops::AddAssign + Send + Sync>(
    col: &[T],
    channels: usize,
    w: &Window,
    img: &mut [T],
) {
    use rayon::prelude::*;
    let ks = w.kernel_size();
    let out_size = w.output_size();
    let in_size = w.input_size();
    let r = w.input.len();
    if r == 2 {
        img.par_chunks_mut(in_size.max(1))
            .take(channels)
            .enumerate()
            .for_each(|(c, plane)| col2im_plane_2d(&col[c * ks * out_size..], w, plane));
        return;
    }
    img.par_chunks_mut(in_size.max(1))
        .take(channels)
        .enumerate()
        .for_each(|(c, plane)| {
            let mut kidx = [0usize; 8];
            let mut oidx = [0usize; 8];
            for k in 0..ks {
                let mut kr = k;
                for d in (0..r).rev() {
                    kidx[d] = kr % w.kernel[d];
                    kr /= w.kernel[d];
                }
                let src = &col[(c * ks + k) * out_size..(c * ks + k + 1) * out_size];
                for (o, &v) in src.iter().enumerate() {
                    let mut rem = o;
                    for d in (0..r).rev() {
                        oidx[d] = rem % w.output[d];
                        rem /= w.output[d];
                    }
                    let mut off = 0usize;
                    let mut inside = true;
                    for d in 0..r {
                        let i = (oidx[d] * w.strides[d] + kidx[d] * w.dilations[d]) as isize
                            - w.pad_begin[d] as isize;
                        if i < 0 || i >= w.input[d] as isize {
                            inside = false;
                            break;
                        }
                        off = off * w.input[d] + i as usize;
                    }
                    if inside {
                        plane[off] += v;
                    }
                }
            }
        });
}

/// [`col2im`] of one channel of a 2-D window: `col` holds the channel's `kernel_size` rows
/// of `output_size` columns. Per tap and column row, the image columns it reaches are one
/// strided run worked out once.
fn col2im_plane_2d<T: Copy + std::ops::AddAssign>(col: &[T], w: &Window, plane: &mut [T]) {
    let (ih, iw) = (w.input[0] as isize, w.input[1] as isize);
    let (oh, ow) = (w.output[0], w.output[1]);
    let (kh, kw) = (w.kernel[0], w.kernel[1]);
    let (sh, sw) = (w.strides[0] as isize, w.strides[1] as isize);
    for ky in 0..kh {
        let off_y = (ky * w.dilations[0]) as isize - w.pad_begin[0] as isize;
        for kx in 0..kw {
            let off_x = (kx * w.dilations[1]) as isize - w.pad_begin[1] as isize;
            // Columns ox with 0 <= ox * sw + off_x < iw.
            let lo = if off_x >= 0 {
                0
            } else {
                (-off_x + sw - 1) / sw
            };
            let hi = if iw - off_x <= 0 {
                0
            } else {
                ((iw - off_x + sw - 1) / sw).min(ow as isize)
            };
            if lo >= hi {
                continue;
            }
            let (lo, hi) = (lo as usize, hi as usize);
            let rows = &col[(ky * kw + kx) * oh * ow..];
            for oy in 0..oh {
                let iy = oy as isize * sh + off_y;
                if iy < 0 || iy >= ih {
                    continue;
                }
                let src = &rows[oy * ow + lo..oy * ow + hi];
                let start = (iy * iw + lo as isize * sw + off_x) as usize;
                let dst = &mut plane[start..];
                if sw == 1 {
                    for (d, &v) in dst.iter_mut().zip(src) {
                        *d += v;
                    }
                } else {
                    for (d, &v) in dst.iter_mut().step_by(sw as usize).zip(src) {
                        *d += v;
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(pads: Option<Vec<usize>>, auto_pad: AutoPad, ceil: bool) -> WindowAttrs {
        WindowAttrs {
            kernel: None,
            strides: Some(vec![2, 2]),
            dilations: None,
            pads,
            auto_pad,
            ceil_mode: ceil,
        }
    }

    #[test]
    fn output_extents() {
        let w = attrs(Some(vec![1, 1, 1, 1]), AutoPad::NotSet, false)
            .resolve("n", &[5, 6], &[3, 3])
            .unwrap();
        assert_eq!(w.output, vec![3, 3]);
        let w = attrs(None, AutoPad::SameUpper, false)
            .resolve("n", &[5, 6], &[3, 3])
            .unwrap();
        assert_eq!(w.output, vec![3, 3]);
        assert_eq!(
            (w.pad_begin.clone(), w.pad_end.clone()),
            (vec![1, 0], vec![1, 1])
        );
        let w = attrs(None, AutoPad::NotSet, true)
            .resolve("n", &[6, 6], &[3, 3])
            .unwrap();
        assert_eq!(w.output, vec![3, 3]);
        assert!(attrs(None, AutoPad::NotSet, false)
            .resolve("n", &[2, 2], &[3, 3])
            .is_err());
    }

    #[test]
    fn im2col_then_col2im_counts_coverage() {
        let w = attrs(Some(vec![1, 1, 1, 1]), AutoPad::NotSet, false)
            .resolve("n", &[4, 5], &[3, 3])
            .unwrap();
        let x = vec![1.0f32; 20];
        let mut col = vec![0.0; 9 * w.output_size()];
        im2col(&x, 1, &w, &mut col);
        let mut img = vec![0.0; 20];
        col2im(&col, 1, &w, &mut img);
        // Each pixel is counted once per window covering it; brute-force that count.
        for y in 0..4 {
            for x in 0..5 {
                let mut n = 0;
                for oy in 0..w.output[0] {
                    for ox in 0..w.output[1] {
                        let (y0, x0) = (oy as isize * 2 - 1, ox as isize * 2 - 1);
                        if (y0..y0 + 3).contains(&(y as isize))
                            && (x0..x0 + 3).contains(&(x as isize))
                        {
                            n += 1;
                        }
                    }
                }
                assert_eq!(img[y * 5 + x], n as f32, "pixel {y},{x}");
            }
        }
    }
}
