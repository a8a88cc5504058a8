//! ConvTranspose: per image and group, `W_g^T @ X_g` (GEMM) then a col2im scatter into the
//! output; output_padding, output_shape and auto_pad per the spec.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid, usize_list, Real};
use crate::ops::nn::conv::conv_transpose_tiled as tiled;
use crate::ops::nn::scratch::with_scratch;
use crate::ops::nn::window::{col2im, AutoPad, Window, WindowAttrs};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

struct ConvTransposeKernel {
    node: String,
    wa: WindowAttrs,
    group: usize,
    output_padding: Option<Vec<usize>>,
    output_shape: Option<Vec<usize>>,
}

struct Geom {
    n: usize,
    c: usize,
    m: usize,
    /// The window as seen by col2im: `input` is the output image, `output` the input image.
    win: Window,
}

impl ConvTransposeKernel {
    fn geometry(&self, x: &[usize], w: &[usize]) -> Result<Geom, EpError> {
        let node = &self.node;
        if x.len() < 3 || x.len() > 10 || w.len() != x.len() {
            return Err(invalid(
                node,
                format!("X {x:?} and W {w:?} must have one rank between 3 and 10"),
            ));
        }
        let g = self.group;
        let (n, c) = (x[0], x[1]);
        if w[0] != c || c % g != 0 {
            return Err(invalid(
                node,
                format!("W {w:?} must be [C={c}, M/group, k...] with C divisible by group={g}"),
            ));
        }
        let m = w[1] * g;
        let r = x.len() - 2;
        let input = &x[2..];
        let kernel = w[2..].to_vec();
        if let Some(k) = &self.wa.kernel {
            if *k != kernel {
                return Err(invalid(
                    node,
                    format!("kernel_shape {k:?} does not match W {w:?}"),
                ));
            }
        }
        let get = |v: &Option<Vec<usize>>,
                   name: &str,
                   len: usize,
                   d: usize|
         -> Result<Vec<usize>, EpError> {
            match v {
                Some(v) if v.len() != len => Err(invalid(
                    node,
                    format!("{name} has {} values; want {len}", v.len()),
                )),
                Some(v) => Ok(v.clone()),
                None => Ok(vec![d; len]),
            }
        };
        let strides = get(&self.wa.strides, "strides", r, 1)?;
        let dilations = get(&self.wa.dilations, "dilations", r, 1)?;
        let out_pad = get(&self.output_padding, "output_padding", r, 0)?;
        let full: Vec<usize> = (0..r)
            .map(|i| {
                strides[i] * (input[i].max(1) - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1
            })
            .collect();
        let same = matches!(self.wa.auto_pad, AutoPad::SameUpper | AutoPad::SameLower);
        let (out, pb, pe) = if self.output_shape.is_some() || same {
            let target = match &self.output_shape {
                // output_shape may carry the N and C dims too.
                Some(s) if s.len() == r + 2 => s[2..].to_vec(),
                Some(s) if s.len() == r => s.clone(),
                Some(s) => {
                    return Err(invalid(
                        node,
                        format!("output_shape {s:?} does not have {r} spatial dims"),
                    ))
                }
                None => (0..r).map(|i| input[i] * strides[i]).collect(),
            };
            let mut pb = vec![0; r];
            let mut pe = vec![0; r];
            for i in 0..r {
                // A target beyond the full extent pads the end (negative total padding);
                // halves round toward -inf like the reference.
                let total = full[i] as i64 - target[i] as i64;
                let half = total.div_euclid(2);
                let (b, e) = if self.wa.auto_pad == AutoPad::SameUpper {
                    (half, total - half)
                } else {
                    (total - half, half)
                };
                if b < 0 {
                    return Err(invalid(node, format!("output_shape {target:?} needs negative begin padding against the full extent {full:?}")));
                }
                pb[i] = b as usize;
                pe[i] = e.max(0) as usize;
            }
            (target, pb, pe)
        } else {
            let pads = get(&self.wa.pads, "pads", 2 * r, 0)?;
            let mut out = vec![0; r];
            for i in 0..r {
                let p = pads[i] + pads[i + r];
                if full[i] < p {
                    return Err(invalid(
                        node,
                        format!("pads {pads:?} exceed the transposed extent {full:?}"),
                    ));
                }
                out[i] = full[i] - p;
            }
            (out, pads[..r].to_vec(), pads[r..].to_vec())
        };
        Ok(Geom {
            n,
            c,
            m,
            win: Window {
                input: out,
                kernel,
                strides,
                dilations,
                pad_begin: pb,
                pad_end: pe,
                output: input.to_vec(),
            },
        })
    }
}

fn compute<T: Real>(geo: &Geom, group: usize, x: &[T], w: &[T], bias: Option<&[T]>) -> Vec<T> {
    let win = &geo.win;
    if tiled::fits(win) {
        let d = tiled::Dims {
            n: geo.n,
            c: geo.c,
            m: geo.m,
            group,
        };
        return tiled::compute(&d, win, x, w, bias);
    }
    let (cg, mg) = (geo.c / group, geo.m / group);
    let ks = win.kernel_size();
    let (in_sz, out_sz) = (win.output_size(), win.input_size());
    // The taps are summed onto the bias.
    let mut out: Vec<T> = (0..geo.n * geo.m)
        .flat_map(|p| std::iter::repeat_n(bias.map_or(T::zero(), |b| b[p % geo.m]), out_sz))
        .collect();
    with_scratch(mg * ks * in_sz, |col: &mut [T]| {
        for b in 0..geo.n {
            for gi in 0..group {
                let xg = &x[(b * geo.c + gi * cg) * in_sz..(b * geo.c + (gi + 1) * cg) * in_sz];
                // W_g is [cg, mg*ks]; col = W_g^T @ X_g is [mg*ks, in_sz].
                let wg = &w[gi * cg * mg * ks..(gi + 1) * cg * mg * ks];
                common::gemm(
                    mg * ks,
                    in_sz,
                    cg,
                    wg,
                    1,
                    mg * ks,
                    xg,
                    in_sz,
                    1,
                    col,
                    in_sz,
                    T::one(),
                    T::zero(),
                );
                let o =
                    &mut out[(b * geo.m + gi * mg) * out_sz..(b * geo.m + (gi + 1) * mg) * out_sz];
                col2im(col, mg, win, o);
            }
        }
    });
    out
}

impl CpuKernel for ConvTransposeKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let w = tensor_input(node, inputs, 1)?;
        let bias = optional_tensor_input(node, inputs, 2)?;
        let dtype = x.dtype();
        common::require_float(node, "ConvTranspose", dtype)?;
        for t in std::iter::once(w).chain(bias) {
            if t.dtype() != dtype {
                return Err(invalid(
                    node,
                    format!("inputs mix {dtype} and {}", t.dtype()),
                ));
            }
        }
        let geo = self.geometry(x.shape(), w.shape())?;
        if let Some(b) = bias {
            if b.numel() != geo.m {
                return Err(invalid(
                    node,
                    format!("B has {} values; want M={}", b.numel(), geo.m),
                ));
            }
        }
        let mut shape = vec![geo.n, geo.m];
        shape.extend(&geo.win.input);
        let out = if dtype == DataType::Float64 {
            Tensor::from_vec(
                shape,
                compute::<f64>(&geo, self.group, x.data(), w.data(), bias.map(|b| b.data())),
            )
        } else {
            let (ux, uw) = (common::upcast(x), common::upcast(w));
            let ub = bias.map(common::upcast);
            let y = compute::<f32>(
                &geo,
                self.group,
                ux.data(),
                uw.data(),
                ub.as_ref().map(|b| b.data()),
            );
            common::tensor_from_f32(dtype, shape, y)
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
    let list = |name: &str| -> Result<Option<Vec<usize>>, EpError> {
        attrs::opt_ints(n, name)?
            .map(|v| usize_list(n, name, &v))
            .transpose()
    };
    Ok(Box::new(ConvTransposeKernel {
        node: n.describe(),
        wa: WindowAttrs::parse(n)?,
        group: group as usize,
        output_padding: list("output_padding")?,
        output_shape: list("output_shape")?,
    }))
}

/// Col2Im: sums the columns of `[N, C * prod(block), L]` back into `[N, C, image...]`.
fn build_col2im(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let wa = WindowAttrs::parse(n)?;
    Ok(crate::kernel::kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let image = common::ints_of(&node, tensor_input(&node, inputs, 1)?, "image_shape")?;
        let block = common::ints_of(&node, tensor_input(&node, inputs, 2)?, "block_shape")?;
        common::require_float(&node, "Col2Im", x.dtype())?;
        if image.len() != block.len() || image.iter().chain(&block).any(|&v| v < 1) || x.rank() != 3
        {
            return Err(invalid(&node, format!("image_shape {image:?} and block_shape {block:?} must be positive and of one length, input 3-D")));
        }
        let image: Vec<usize> = image.iter().map(|&v| v as usize).collect();
        let block: Vec<usize> = block.iter().map(|&v| v as usize).collect();
        let win = wa.resolve(&node, &image, &block)?;
        let ks = win.kernel_size();
        let (nb, ckk, l) = (x.shape()[0], x.shape()[1], x.shape()[2]);
        if ckk % ks != 0 || win.output_size() != l {
            return Err(invalid(
                &node,
                format!(
                    "input {:?} does not match {} blocks of {ks} elements per channel",
                    x.shape(),
                    win.output_size()
                ),
            ));
        }
        let c = ckk / ks;
        let img_sz = win.input_size();
        let mut shape = vec![nb, c];
        shape.extend(&image);
        macro_rules! go {
            ($T:ty, $xv:expr) => {{
                let xv: &[$T] = $xv;
                let mut out = vec![<$T>::default(); nb * c * img_sz];
                for b in 0..nb {
                    col2im(
                        &xv[b * ckk * l..(b + 1) * ckk * l],
                        c,
                        &win,
                        &mut out[b * c * img_sz..(b + 1) * c * img_sz],
                    );
                }
                out
            }};
        }
        let y = if x.dtype() == DataType::Float64 {
            Tensor::from_vec(shape, go!(f64, x.data()))
        } else {
            let ux = common::upcast(x);
            common::tensor_from_f32(x.dtype(), shape, go!(f32, ux.data()))
        };
        Ok(vec![Value::Tensor(y)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "Col2Im", 18, build_col2im);
    for since in [1, 11, 22] {
        r.register("", "ConvTranspose", since, build);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn matches_scatter_reference() {
        // 1 image, C=2 -> M=3 (group 1), 2-D, stride 2, pads 1, output_padding 1.
        let (c, m, h, w, k, s, p, op) = (2, 3, 3, 4, 3, 2, 1, 1);
        let x = rand(c * h * w, 21, -1.0, 1.0);
        let wt = rand(c * m * k * k, 22, -1.0, 1.0);
        let node = node(
            "ConvTranspose",
            2,
            1,
            vec![
                ("strides", Attribute::Ints(vec![s as i64; 2])),
                ("pads", Attribute::Ints(vec![p as i64; 4])),
                ("output_padding", Attribute::Ints(vec![op as i64; 2])),
            ],
        );
        let out = run(
            build,
            &node,
            11,
            &[
                Some(Tensor::from_vec(vec![1, c, h, w], f32s(&x))),
                Some(Tensor::from_vec(vec![c, m, k, k], f32s(&wt))),
            ],
        )
        .unwrap();
        let oh = s * (h - 1) + op + k - 2 * p;
        let ow = s * (w - 1) + op + k - 2 * p;
        assert_eq!(out[0].shape(), &[1, m, oh, ow]);
        let mut want = vec![0.0; m * oh * ow];
        for ci in 0..c {
            for y in 0..h {
                for xx in 0..w {
                    for mm in 0..m {
                        for ky in 0..k {
                            for kx in 0..k {
                                let oy = (y * s + ky) as isize - p as isize;
                                let ox = (xx * s + kx) as isize - p as isize;
                                if oy < 0 || ox < 0 || oy >= oh as isize || ox >= ow as isize {
                                    continue;
                                }
                                want[(mm * oh + oy as usize) * ow + ox as usize] += x
                                    [(ci * h + y) * w + xx]
                                    * wt[((ci * m + mm) * k + ky) * k + kx];
                            }
                        }
                    }
                }
            }
        }
        assert_close(out[0].data::<f32>(), &want, 1e-5);
    }

    /// Brute-force float64 ConvTranspose of one image `[c, h, w]` (a 1-D input is `h == 1`
    /// with a 1-row kernel): every input element times every tap added at its output spot.
    #[allow(clippy::too_many_arguments)]
    fn reference(
        x: &[f64],
        wt: &[f64],
        bias: &[f64],
        (c, h, w): (usize, usize, usize),
        (mg, g): (usize, usize),
        (kh, kw): (usize, usize),
        (sh, sw): (usize, usize),
        (dh, dw): (usize, usize),
        (pt, pl): (usize, usize),
        (oh, ow): (usize, usize),
    ) -> Vec<f64> {
        let m = mg * g;
        let cg = c / g;
        let mut y: Vec<f64> = (0..m * oh * ow).map(|i| bias[i / (oh * ow)]).collect();
        for ci in 0..c {
            let gi = ci / cg;
            for iy in 0..h {
                for ix in 0..w {
                    for mm in 0..mg {
                        for ky in 0..kh {
                            for kx in 0..kw {
                                let oy = (iy * sh + ky * dh) as isize - pt as isize;
                                let ox = (ix * sw + kx * dw) as isize - pl as isize;
                                if oy < 0 || ox < 0 || oy >= oh as isize || ox >= ow as isize {
                                    continue;
                                }
                                y[((gi * mg + mm) * oh + oy as usize) * ow + ox as usize] += x
                                    [(ci * h + iy) * w + ix]
                                    * wt[((ci * mg + mm) * kh + ky) * kw + kx];
                            }
                        }
                    }
                }
            }
        }
        y
    }

    #[test]
    fn tiled_and_general_paths_match_brute_force() {
        // (c, h, w), (mg, group), kernel, strides, dilations, pads (begin = end), out_pad, 1-D
        let cases = [
            // kernel == stride: the tiled path (odd widths, tails off the vector width).
            (
                (24, 19, 13),
                (24, 1),
                (2, 2),
                (2, 2),
                (1, 1),
                (0, 0),
                0,
                false,
            ),
            ((6, 5, 7), (3, 2), (3, 2), (3, 2), (1, 1), (0, 0), 0, false),
            ((4, 9, 11), (1, 1), (1, 1), (1, 1), (1, 1), (0, 0), 0, false),
            ((5, 1, 37), (2, 1), (1, 4), (1, 4), (1, 1), (0, 0), 0, true),
            // Overlapping taps, padding, dilation, output padding: the col2im path.
            ((8, 10, 9), (4, 2), (3, 3), (2, 2), (1, 1), (1, 1), 1, false),
            ((3, 6, 7), (2, 1), (3, 2), (1, 3), (2, 1), (2, 0), 0, false),
            ((4, 1, 21), (3, 1), (1, 5), (1, 3), (1, 1), (0, 2), 0, true),
        ];
        for (i, ((c, h, w), (mg, g), (kh, kw), (sh, sw), (dh, dw), (pt, pl), op, one_d)) in
            cases.into_iter().enumerate()
        {
            let x = rand(c * h * w, 40 + i as u64, -1.0, 1.0);
            let wt = rand(c * mg * kh * kw, 50 + i as u64, -1.0, 1.0);
            let bias = rand(mg * g, 60 + i as u64, -1.0, 1.0);
            let oh = sh * (h - 1) + if one_d { 0 } else { op } + (kh - 1) * dh + 1 - 2 * pt;
            let ow = sw * (w - 1) + op + (kw - 1) * dw + 1 - 2 * pl;
            let want = reference(
                &x,
                &wt,
                &bias,
                (c, h, w),
                (mg, g),
                (kh, kw),
                (sh, sw),
                (dh, dw),
                (pt, pl),
                (oh, ow),
            );
            let (ints, xs, ws, ys) = if one_d {
                let l = |a: usize| Attribute::Ints(vec![a as i64]);
                (
                    vec![
                        ("strides", l(sw)),
                        ("dilations", l(dw)),
                        ("pads", Attribute::Ints(vec![pl as i64; 2])),
                        ("output_padding", l(op)),
                        ("group", Attribute::Int(g as i64)),
                    ],
                    vec![1, c, w],
                    vec![c, mg, kw],
                    vec![1, mg * g, ow],
                )
            } else {
                let l = |a: usize, b: usize| Attribute::Ints(vec![a as i64, b as i64]);
                (
                    vec![
                        ("strides", l(sh, sw)),
                        ("dilations", l(dh, dw)),
                        (
                            "pads",
                            Attribute::Ints(vec![pt as i64, pl as i64, pt as i64, pl as i64]),
                        ),
                        ("output_padding", l(op, op)),
                        ("group", Attribute::Int(g as i64)),
                    ],
                    vec![1, c, h, w],
                    vec![c, mg, kh, kw],
                    vec![1, mg * g, oh, ow],
                )
            };
            let node = node("ConvTranspose", 3, 1, ints);
            let out = run(
                build,
                &node,
                11,
                &[
                    Some(Tensor::from_vec(xs.clone(), f32s(&x))),
                    Some(Tensor::from_vec(ws.clone(), f32s(&wt))),
                    Some(Tensor::from_vec(vec![mg * g], f32s(&bias))),
                ],
            )
            .unwrap();
            assert_eq!(out[0].shape(), &ys[..], "case {i}");
            assert_close(out[0].data::<f32>(), &want, 1e-5);
            let out = run(
                build,
                &node,
                11,
                &[
                    Some(Tensor::from_vec(xs, x.clone())),
                    Some(Tensor::from_vec(ws, wt.clone())),
                    Some(Tensor::from_vec(vec![mg * g], bias.clone())),
                ],
            )
            .unwrap();
            for (j, (&g, &w)) in out[0].data::<f64>().iter().zip(&want).enumerate() {
                assert!((g - w).abs() <= 1e-12 * (1.0 + w.abs()), "case {i} f64 {j}");
            }
        }
    }
}
