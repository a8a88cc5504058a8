//! Conv (1-D/2-D/3-D and beyond): im2col + GEMM per image and group, 1x1 convolutions as a
//! direct GEMM, and a direct kernel for 2-D depthwise (one input channel per group).

use super::common::{self, invalid, Real};
use super::window::{im2col, Window, WindowAttrs};
use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use rayon::prelude::*;

/// Geometry of one convolution call.
pub struct ConvGeom {
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub group: usize,
    pub win: Window,
}

impl ConvGeom {
    pub fn new(
        node: &str,
        wa: &WindowAttrs,
        group: usize,
        x: &[usize],
        w: &[usize],
    ) -> Result<ConvGeom, EpError> {
        if x.len() < 3 || x.len() > 10 || w.len() != x.len() {
            return Err(invalid(
                node,
                format!("X {x:?} and W {w:?} must have one rank between 3 and 10"),
            ));
        }
        let (n, c, m) = (x[0], x[1], w[0]);
        if group == 0 || c % group != 0 || m % group != 0 || w[1] * group != c {
            return Err(invalid(
                node,
                format!("X has {c} channels and W is {w:?}: with group={group} W's dim 1 must be C/group and M divisible by group"),
            ));
        }
        let kernel = &w[2..];
        if let Some(k) = &wa.kernel {
            if k.as_slice() != kernel {
                return Err(invalid(
                    node,
                    format!("kernel_shape {k:?} does not match W's spatial dims {kernel:?}"),
                ));
            }
        }
        let win = wa.resolve(node, &x[2..], kernel)?;
        Ok(ConvGeom {
            n,
            c,
            m,
            group,
            win,
        })
    }

    pub fn out_shape(&self) -> Vec<usize> {
        let mut s = vec![self.n, self.m];
        s.extend(&self.win.output);
        s
    }
}

/// The convolution over compute-type slices; `bias` has `m` values.
pub fn conv_compute<T: Real>(g: &ConvGeom, x: &[T], w: &[T], bias: Option<&[T]>) -> Vec<T> {
    let win = &g.win;
    let (cg, mg) = (g.c / g.group, g.m / g.group);
    let ks = win.kernel_size();
    let (in_sz, out_sz) = (win.input_size(), win.output_size());
    let mut out = vec![T::zero(); g.n * g.m * out_sz];
    if out.is_empty() {
        return out;
    }
    if cg == 1 && win.input.len() == 2 {
        depthwise2d(g, x, w, &mut out);
    } else {
        let pointwise = ks == 1
            && win.strides.iter().all(|&s| s == 1)
            && win.pad_begin.iter().chain(&win.pad_end).all(|&p| p == 0);
        let mut col = if pointwise {
            Vec::new()
        } else {
            vec![T::zero(); cg * ks * out_sz]
        };
        for b in 0..g.n {
            for gi in 0..g.group {
                let xg = &x[(b * g.c + gi * cg) * in_sz..(b * g.c + (gi + 1) * cg) * in_sz];
                let src: &[T] = if pointwise {
                    xg
                } else {
                    im2col(xg, cg, win, &mut col);
                    &col
                };
                let wg = &w[gi * mg * cg * ks..(gi + 1) * mg * cg * ks];
                let o = &mut out[(b * g.m + gi * mg) * out_sz..(b * g.m + (gi + 1) * mg) * out_sz];
                common::matmul_rm(mg, out_sz, cg * ks, wg, src, o);
            }
        }
    }
    if let Some(bias) = bias {
        out.par_chunks_mut(out_sz)
            .enumerate()
            .for_each(|(i, plane)| {
                let bv = bias[i % g.m];
                plane.iter_mut().for_each(|v| *v += bv);
            });
    }
    out
}

/// 2-D convolution with one input channel per group: each output plane is a sum of shifted,
/// scaled input rows; planes run in parallel.
fn depthwise2d<T: Real>(g: &ConvGeom, x: &[T], w: &[T], out: &mut [T]) {
    let win = &g.win;
    let mg = g.m / g.group;
    let (ih, iw) = (win.input[0], win.input[1]);
    let (oh, ow) = (win.output[0], win.output[1]);
    let (kh, kw) = (win.kernel[0], win.kernel[1]);
    let (sh, sw) = (win.strides[0], win.strides[1]);
    let (dh, dw) = (win.dilations[0], win.dilations[1]);
    let (pt, pl) = (win.pad_begin[0] as isize, win.pad_begin[1] as isize);
    out.par_chunks_mut(oh * ow)
        .enumerate()
        .for_each(|(plane, o)| {
            let (b, m) = (plane / g.m, plane % g.m);
            let ci = m / mg;
            let xp = &x[(b * g.c + ci) * ih * iw..(b * g.c + ci + 1) * ih * iw];
            let wk = &w[m * kh * kw..(m + 1) * kh * kw];
            for ky in 0..kh {
                for kx in 0..kw {
                    let wv = wk[ky * kw + kx];
                    // Output columns whose input column lies inside the row.
                    let off = kx as isize * dw as isize - pl;
                    let lo = if off >= 0 {
                        0
                    } else {
                        ((-off) as usize).div_ceil(sw)
                    };
                    let hi_num = iw as isize - 1 - off;
                    if hi_num < 0 {
                        continue;
                    }
                    let hi = (hi_num as usize / sw + 1).min(ow);
                    if lo >= hi {
                        continue;
                    }
                    for oy in 0..oh {
                        let iy = (oy * sh + ky * dh) as isize - pt;
                        if iy < 0 || iy >= ih as isize {
                            continue;
                        }
                        let row = &xp[iy as usize * iw..(iy as usize + 1) * iw];
                        let orow = &mut o[oy * ow..(oy + 1) * ow];
                        if sw == 1 {
                            let start = (lo as isize + off) as usize;
                            for (ov, &xv) in
                                orow[lo..hi].iter_mut().zip(&row[start..start + hi - lo])
                            {
                                *ov += wv * xv;
                            }
                        } else {
                            for (ox, ov) in orow.iter_mut().enumerate().take(hi).skip(lo) {
                                *ov += wv * row[(ox as isize * sw as isize + off) as usize];
                            }
                        }
                    }
                }
            }
        });
}

struct ConvKernel {
    node: String,
    wa: WindowAttrs,
    group: usize,
    /// The weights in f32 when they are a constant f16/bf16 tensor (converted once).
    packed_w: Option<Tensor>,
}

impl CpuKernel for ConvKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let w = tensor_input(node, inputs, 1)?;
        let bias = optional_tensor_input(node, inputs, 2)?;
        let dtype = x.dtype();
        common::require_float(node, "Conv", dtype)?;
        for t in std::iter::once(w).chain(bias) {
            if t.dtype() != dtype {
                return Err(invalid(
                    node,
                    format!("inputs mix {dtype} and {}", t.dtype()),
                ));
            }
        }
        let g = ConvGeom::new(node, &self.wa, self.group, x.shape(), w.shape())?;
        if let Some(b) = bias {
            if b.numel() != g.m {
                return Err(invalid(
                    node,
                    format!("B has {} values; want M={}", b.numel(), g.m),
                ));
            }
        }
        let out = if dtype == DataType::Float64 {
            let y = conv_compute::<f64>(&g, x.data(), w.data(), bias.map(|b| b.data()));
            Tensor::from_vec(g.out_shape(), y)
        } else {
            let ux = common::upcast(x);
            let uw = match &self.packed_w {
                Some(p) => std::borrow::Cow::Borrowed(p),
                None => common::upcast(w),
            };
            let ub = bias.map(common::upcast);
            let y = conv_compute::<f32>(&g, ux.data(), uw.data(), ub.as_ref().map(|b| b.data()));
            common::tensor_from_f32(dtype, g.out_shape(), y)
        };
        Ok(vec![Value::Tensor(out)])
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let group = attrs::int(n, "group", 1)?;
    if group < 1 {
        return Err(common::bad_attr(
            n,
            "group",
            format!("{group} must be >= 1"),
        ));
    }
    let packed_w = match ctx.constant(1) {
        Some(Value::Tensor(t)) if matches!(t.dtype(), DataType::Float16 | DataType::BFloat16) => {
            Some(common::upcast(t).into_owned())
        }
        _ => None,
    };
    Ok(Box::new(ConvKernel {
        node: n.describe(),
        wa: WindowAttrs::parse(n)?,
        group: group as usize,
        packed_w,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 11, 22] {
        r.register("", "Conv", since, build);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::*;
    use onnx_runtime_ir::Attribute;

    /// Direct float64 2-D convolution.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        x: &[f64],
        w: &[f64],
        b: &[f64],
        (n, c, h, wd): (usize, usize, usize, usize),
        (m, kh, kw): (usize, usize, usize),
        group: usize,
        s: usize,
        p: usize,
        d: usize,
    ) -> (Vec<f64>, usize, usize) {
        let oh = (h + 2 * p - ((kh - 1) * d + 1)) / s + 1;
        let ow = (wd + 2 * p - ((kw - 1) * d + 1)) / s + 1;
        let (cg, mg) = (c / group, m / group);
        let mut out = vec![0.0; n * m * oh * ow];
        for bn in 0..n {
            for mm in 0..m {
                let gi = mm / mg;
                for oy in 0..oh {
                    for ox in 0..ow {
                        let mut acc = b[mm];
                        for cc in 0..cg {
                            for ky in 0..kh {
                                for kx in 0..kw {
                                    let iy = (oy * s + ky * d) as isize - p as isize;
                                    let ix = (ox * s + kx * d) as isize - p as isize;
                                    if iy < 0 || ix < 0 || iy >= h as isize || ix >= wd as isize {
                                        continue;
                                    }
                                    let ci = gi * cg + cc;
                                    acc += x[((bn * c + ci) * h + iy as usize) * wd + ix as usize]
                                        * w[((mm * cg + cc) * kh + ky) * kw + kx];
                                }
                            }
                        }
                        out[((bn * m + mm) * oh + oy) * ow + ox] = acc;
                    }
                }
            }
        }
        (out, oh, ow)
    }

    fn check(group: usize, c: usize, m: usize, k: usize, s: usize, p: usize, d: usize) {
        let (n, h, wd) = (2, 7, 6);
        let x = rand(n * c * h * wd, 11, -1.0, 1.0);
        let w = rand(m * (c / group) * k * k, 12, -1.0, 1.0);
        let b = rand(m, 13, -1.0, 1.0);
        let node = node(
            "Conv",
            3,
            1,
            vec![
                ("group", Attribute::Int(group as i64)),
                ("strides", Attribute::Ints(vec![s as i64; 2])),
                ("pads", Attribute::Ints(vec![p as i64; 4])),
                ("dilations", Attribute::Ints(vec![d as i64; 2])),
            ],
        );
        let out = run(
            build,
            &node,
            11,
            &[
                Some(Tensor::from_vec(vec![n, c, h, wd], f32s(&x))),
                Some(Tensor::from_vec(vec![m, c / group, k, k], f32s(&w))),
                Some(Tensor::from_vec(vec![m], f32s(&b))),
            ],
        )
        .unwrap();
        let (want, oh, ow) = reference(&x, &w, &b, (n, c, h, wd), (m, k, k), group, s, p, d);
        assert_eq!(out[0].shape(), &[n, m, oh, ow]);
        assert_close(out[0].data::<f32>(), &want, 1e-5);
    }

    #[test]
    fn general_grouped_pointwise_depthwise() {
        check(1, 3, 4, 3, 1, 1, 1);
        check(1, 3, 4, 3, 2, 2, 2);
        check(2, 4, 6, 3, 2, 1, 1);
        check(1, 5, 3, 1, 1, 0, 1);
        check(4, 4, 4, 3, 1, 1, 1);
        check(4, 4, 8, 3, 2, 1, 2);
    }
}
