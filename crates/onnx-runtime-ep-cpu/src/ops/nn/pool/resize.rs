//! Resize (opsets 10..19) and Upsample (7, 9): nearest (four rounding modes), linear and
//! cubic, every coordinate transformation mode, antialias, axes, keep_aspect_ratio_policy.
//! Interpolation is separable: each resized axis is one pass of weighted taps.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, bad_attr, invalid, Real};
use crate::ops::nn::pool::resize_nearest::{nearest, NearestAxis};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::{DataType, Node};
use rayon::prelude::*;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Mode {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Nearest {
    RoundPreferFloor,
    RoundPreferCeil,
    Floor,
    Ceil,
    /// Resize-10 / Upsample: floor when upsampling, ceil when downsampling.
    Simple,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Ctm {
    HalfPixel,
    HalfPixelSymmetric,
    PytorchHalfPixel,
    AlignCorners,
    Asymmetric,
    TfHalfPixelForNn,
    TfCropAndResize,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Aspect {
    Stretch,
    NotLarger,
    NotSmaller,
}

#[derive(Clone, Debug)]
struct ResizeAttrs {
    mode: Mode,
    nearest: Nearest,
    ctm: Ctm,
    cubic_a: f64,
    exclude_outside: bool,
    extrapolation: f64,
    antialias: bool,
    axes: Option<Vec<i64>>,
    aspect: Aspect,
}

/// Taps of one resized axis: per output index, `taps` (input index, weight) pairs.
struct AxisPlan {
    out_len: usize,
    taps: usize,
    idx: Vec<usize>,
    w: Vec<f64>,
    extrapolate: Vec<bool>,
}

impl AxisPlan {
    fn is_identity(&self, in_len: usize) -> bool {
        self.out_len == in_len
            && !self.extrapolate.iter().any(|&e| e)
            && (0..self.out_len).all(|j| {
                (0..self.taps).all(|t| {
                    let (i, w) = (self.idx[j * self.taps + t], self.w[j * self.taps + t]);
                    w == 0.0 || (i == j && w == 1.0)
                })
            })
    }
}

fn cubic(x: f64, a: f64) -> f64 {
    let x = x.abs();
    if x <= 1.0 {
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0
    } else if x < 2.0 {
        ((a * x - 5.0 * a) * x + 8.0 * a) * x - 4.0 * a
    } else {
        0.0
    }
}

fn plan_axis(
    at: &ResizeAttrs,
    in_len: usize,
    out_len: usize,
    scale: f64,
    roi: (f64, f64),
) -> AxisPlan {
    let out_w = scale * in_len as f64;
    let inl = in_len as f64;
    // Filter support: nearest/linear 2 taps, cubic 4; antialias widens by 1/scale.
    let fscale = if at.antialias && at.mode != Mode::Nearest {
        scale.min(1.0)
    } else {
        1.0
    };
    let (start, taps) = match at.mode {
        Mode::Nearest => (0i64, 2usize),
        Mode::Linear => {
            let s = (-1.0 / fscale).floor() as i64 + 1;
            (s, (2 - 2 * s) as usize)
        }
        Mode::Cubic => {
            let s = (-2.0 / fscale).floor() as i64 + 1;
            (s, (2 - 2 * s) as usize)
        }
    };
    let mut plan = AxisPlan {
        out_len,
        taps,
        idx: vec![0; out_len * taps],
        w: vec![0.0; out_len * taps],
        extrapolate: vec![false; out_len],
    };
    for j in 0..out_len {
        let y = j as f64;
        let x = match at.ctm {
            Ctm::AlignCorners => {
                if out_w == 1.0 || out_len == 1 {
                    0.0
                } else {
                    y * (inl - 1.0) / (out_w - 1.0)
                }
            }
            Ctm::Asymmetric => y / scale,
            Ctm::TfHalfPixelForNn => (y + 0.5) / scale,
            Ctm::TfCropAndResize => {
                let x = if out_w == 1.0 || out_len == 1 {
                    (roi.1 - roi.0) * (inl - 1.0) / 2.0
                } else {
                    y * (roi.1 - roi.0) * (inl - 1.0) / (out_w - 1.0)
                } + roi.0 * (inl - 1.0);
                if x < 0.0 || x > inl - 1.0 {
                    plan.extrapolate[j] = true;
                }
                x
            }
            Ctm::PytorchHalfPixel => {
                if out_w == 1.0 || out_len == 1 {
                    -0.5
                } else {
                    (y + 0.5) / scale - 0.5
                }
            }
            Ctm::HalfPixel => (y + 0.5) / scale - 0.5,
            Ctm::HalfPixelSymmetric => {
                let adjustment = out_len as f64 / out_w;
                let offset = inl / 2.0 * (1.0 - adjustment);
                offset + (y + 0.5) / scale - 0.5
            }
        };
        // Prefer the left pixel: an exact integer x has ratio 1 from x - 1.
        let fl = x.floor();
        let (base, ratio) = if x == fl {
            (fl as i64 - 1, 1.0)
        } else {
            (fl as i64, x - fl)
        };
        let ws = &mut plan.w[j * taps..(j + 1) * taps];
        match at.mode {
            Mode::Nearest => {
                let right = match at.nearest {
                    _ if ratio == 1.0 => true,
                    Nearest::RoundPreferFloor => ratio > 0.5,
                    Nearest::RoundPreferCeil => ratio >= 0.5,
                    Nearest::Floor => false,
                    Nearest::Ceil => true,
                    Nearest::Simple => scale < 1.0,
                };
                ws[right as usize] = 1.0;
            }
            Mode::Linear => {
                for (t, w) in ws.iter_mut().enumerate() {
                    let arg = ((start + t as i64) as f64 - ratio) * fscale;
                    *w = (1.0 - arg.abs()).clamp(0.0, 1.0);
                }
            }
            Mode::Cubic => {
                for (t, w) in ws.iter_mut().enumerate() {
                    *w = cubic(((start + t as i64) as f64 - ratio) * fscale, at.cubic_a);
                }
            }
        }
        let first = base + start;
        if at.exclude_outside {
            for (t, w) in ws.iter_mut().enumerate() {
                let i = first + t as i64;
                if i < 0 || i >= in_len as i64 {
                    *w = 0.0;
                }
            }
        }
        let sum: f64 = ws.iter().sum();
        if at.mode != Mode::Nearest && sum != 0.0 && (at.exclude_outside || fscale != 1.0) {
            ws.iter_mut().for_each(|w| *w /= sum);
        }
        for t in 0..taps {
            plan.idx[j * taps + t] = (first + t as i64).clamp(0, in_len as i64 - 1) as usize;
        }
    }
    plan
}

/// One separable pass along `axis` of `shape`.
fn apply_axis<T: Real>(x: &[T], shape: &[usize], axis: usize, p: &AxisPlan, extrap: T) -> Vec<T> {
    let outer: usize = shape[..axis].iter().product();
    let inner: usize = shape[axis + 1..].iter().product();
    let in_len = shape[axis];
    let mut out = vec![T::zero(); outer * p.out_len * inner];
    if out.is_empty() {
        return out;
    }
    let w: Vec<T> = p.w.iter().map(|&v| T::from_f64c(v)).collect();
    out.par_chunks_mut(p.out_len * inner)
        .enumerate()
        .for_each(|(o, dst)| {
            let src = &x[o * in_len * inner..(o + 1) * in_len * inner];
            for j in 0..p.out_len {
                let d = &mut dst[j * inner..(j + 1) * inner];
                if p.extrapolate[j] {
                    d.fill(extrap);
                    continue;
                }
                for t in 0..p.taps {
                    let wt = w[j * p.taps + t];
                    if wt == T::zero() {
                        continue;
                    }
                    let s = &src[p.idx[j * p.taps + t] * inner..][..inner];
                    for (dv, &sv) in d.iter_mut().zip(s) {
                        *dv += wt * sv;
                    }
                }
            }
        });
    out
}

fn resize_compute<T: Real>(
    x: &[T],
    shape: &[usize],
    plans: &[Option<AxisPlan>],
    extrap: T,
) -> (Vec<T>, Vec<usize>) {
    let mut cur: Option<Vec<T>> = None;
    let mut shape = shape.to_vec();
    // Shrinking axes first keeps the intermediate tensors small.
    let mut order: Vec<usize> = (0..shape.len()).filter(|&a| plans[a].is_some()).collect();
    order.sort_by_key(|&a| {
        plans[a]
            .as_ref()
            .map_or(0, |p| p.out_len as isize - shape[a] as isize)
    });
    for a in order {
        let p = plans[a].as_ref().expect("planned axis");
        let next = apply_axis(cur.as_deref().unwrap_or(x), &shape, a, p, extrap);
        shape[a] = p.out_len;
        cur = Some(next);
    }
    (cur.unwrap_or_else(|| x.to_vec()), shape)
}

/// Output sizes, per-axis scales and per-axis roi (start, end).
type Geometry = (Vec<usize>, Vec<f64>, Vec<(f64, f64)>);

struct ResizeKernel {
    node: String,
    at: ResizeAttrs,
    /// Input positions of roi, scales and sizes (None where the opset lacks them).
    roi_in: Option<usize>,
    scales_in: usize,
    sizes_in: Option<usize>,
    /// Upsample-7: scales from the attribute.
    scales_attr: Option<Vec<f64>>,
}

impl ResizeKernel {
    /// Output sizes and per-axis scales.
    fn geometry(&self, inputs: &[Option<&Value>], shape: &[usize]) -> Result<Geometry, EpError> {
        let node = &self.node;
        let r = shape.len();
        let axes: Vec<usize> = match &self.at.axes {
            Some(a) => crate::shape::normalize_axes(node, a, r)?,
            None => (0..r).collect(),
        };
        let get = |i: Option<usize>| -> Result<Option<&Tensor>, EpError> {
            match i {
                Some(i) => Ok(optional_tensor_input(node, inputs, i)?.filter(|t| t.numel() > 0)),
                None => Ok(None),
            }
        };
        let scales = match &self.scales_attr {
            Some(s) => Some(s.clone()),
            None => get(Some(self.scales_in))?
                .map(|t| common::floats_of(node, t, "scales"))
                .transpose()?,
        };
        let sizes = get(self.sizes_in)?
            .map(|t| common::ints_of(node, t, "sizes"))
            .transpose()?;
        let mut roi = vec![(0.0, 1.0); r];
        if self.at.ctm == Ctm::TfCropAndResize {
            let rv = get(self.roi_in)?
                .map(|t| common::floats_of(node, t, "roi"))
                .transpose()?
                .ok_or_else(|| invalid(node, "tf_crop_and_resize needs the roi input"))?;
            if rv.len() != 2 * axes.len() {
                return Err(invalid(
                    node,
                    format!("roi has {} values; want 2 x {} axes", rv.len(), axes.len()),
                ));
            }
            for (i, &a) in axes.iter().enumerate() {
                roi[a] = (rv[i], rv[axes.len() + i]);
            }
        }
        let mut out = shape.to_vec();
        let mut sc = vec![1.0; r];
        match (scales, sizes) {
            (Some(_), Some(_)) => return Err(invalid(node, "give scales or sizes, not both")),
            (None, None) => return Err(invalid(node, "one of scales or sizes is required")),
            (Some(s), None) => {
                if s.len() != axes.len() {
                    return Err(invalid(
                        node,
                        format!("scales has {} values; want {}", s.len(), axes.len()),
                    ));
                }
                for (i, &a) in axes.iter().enumerate() {
                    if s[i] <= 0.0 || !s[i].is_finite() {
                        return Err(invalid(node, format!("scale {} must be positive", s[i])));
                    }
                    sc[a] = s[i];
                    let span = if self.at.ctm == Ctm::TfCropAndResize {
                        roi[a].1 - roi[a].0
                    } else {
                        1.0
                    };
                    out[a] = (shape[a] as f64 * span * s[i]).floor().max(0.0) as usize;
                }
            }
            (None, Some(z)) => {
                if z.len() != axes.len() || z.iter().any(|&v| v < 0) {
                    return Err(invalid(
                        node,
                        format!("sizes {z:?} must be {} non-negative values", axes.len()),
                    ));
                }
                for (i, &a) in axes.iter().enumerate() {
                    out[a] = z[i] as usize;
                    sc[a] = z[i] as f64 / shape[a].max(1) as f64;
                }
                if self.at.aspect != Aspect::Stretch {
                    let it = axes.iter().map(|&a| sc[a]);
                    let s = if self.at.aspect == Aspect::NotLarger {
                        it.fold(f64::INFINITY, f64::min)
                    } else {
                        it.fold(0.0, f64::max)
                    };
                    for &a in &axes {
                        sc[a] = s;
                        out[a] = (s * shape[a] as f64 + 0.5) as usize;
                    }
                }
            }
        }
        Ok((out, sc, roi))
    }
}

impl CpuKernel for ResizeKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let shape = x.shape().to_vec();
        let (out, scales, roi) = self.geometry(inputs, &shape)?;
        let plans: Vec<Option<AxisPlan>> = (0..shape.len())
            .map(|a| {
                if shape[a] == 0 && out[a] > 0 {
                    return Err(invalid(
                        node,
                        format!("cannot resize empty axis {a} to {}", out[a]),
                    ));
                }
                let p = plan_axis(&self.at, shape[a], out[a], scales[a], roi[a]);
                Ok(if p.is_identity(shape[a]) {
                    None
                } else {
                    Some(p)
                })
            })
            .collect::<Result<_, _>>()?;
        let dtype = x.dtype();
        let ex = self.at.extrapolation;
        if self.at.mode == Mode::Nearest {
            if let Some(y) = nearest_resize(x, &plans, ex) {
                return Ok(vec![Value::Tensor(y)]);
            }
        }
        let y = match dtype {
            DataType::Float64 => {
                let (v, s) = resize_compute::<f64>(x.data(), &shape, &plans, ex);
                Tensor::from_vec(s, v)
            }
            DataType::Float32 | DataType::Float16 | DataType::BFloat16 => {
                let ux = common::upcast(x);
                let (v, s) = resize_compute::<f32>(ux.data(), &shape, &plans, ex as f32);
                common::tensor_from_f32(dtype, s, v)
            }
            d if d.is_integer() && !d.is_sub_byte() => {
                let xv = x.to_f64_vec().unwrap_or_default();
                let (v, s) = resize_compute::<f64>(&xv, &shape, &plans, ex);
                int_from_f64(d, s, &v)
                    .ok_or_else(|| common::unsupported(node, "Resize", d, "numeric types"))?
            }
            other => {
                return Err(common::unsupported(
                    node,
                    "Resize",
                    other,
                    "float or integer types",
                ))
            }
        };
        Ok(vec![Value::Tensor(y)])
    }
}

/// `v` rounded half to even and saturated into integer type `d` (None if `d` is not one).
fn int_from_f64(d: DataType, shape: Vec<usize>, v: &[f64]) -> Option<Tensor> {
    crate::dispatch_int!(d, T => {
        let lo = num_traits::cast::<T, f64>(T::MIN).unwrap_or(f64::MIN);
        let hi = num_traits::cast::<T, f64>(T::MAX).unwrap_or(f64::MAX);
        let q: Vec<T> = v.iter().map(|&f| num_traits::cast::<f64, T>(f.round_ties_even().clamp(lo, hi)).unwrap_or_default()).collect();
        Some(Tensor::from_vec(shape, q))
    }, _other => None)
}

/// Nearest mode as one gather of `x`'s elements (see [`resize_nearest`]); None where a plan
/// picks no tap (exclude_outside dropped it) or the dtype is not a fixed-width number.
fn nearest_resize(x: &Tensor, plans: &[Option<AxisPlan>], ex: f64) -> Option<Tensor> {
    let dtype = x.dtype();
    let extrap = match dtype {
        DataType::Float64 => Tensor::from_vec(vec![1], vec![ex]),
        DataType::Float32 | DataType::Float16 | DataType::BFloat16 => {
            common::tensor_from_f32(dtype, vec![1], vec![ex as f32])
        }
        d if d.is_integer() && !d.is_sub_byte() => int_from_f64(d, vec![1], &[ex])?,
        _ => return None,
    };
    let mut axes = Vec::with_capacity(plans.len());
    for (a, p) in plans.iter().enumerate() {
        axes.push(match p {
            None => NearestAxis::identity(x.shape()[a]),
            Some(p) => {
                let mut src = Vec::with_capacity(p.out_len);
                for j in 0..p.out_len {
                    let t = (0..p.taps).find(|&t| p.w[j * p.taps + t] == 1.0)?;
                    src.push(p.idx[j * p.taps + t]);
                }
                NearestAxis {
                    src,
                    outside: p.extrapolate.clone(),
                }
            }
        });
    }
    let shape: Vec<usize> = axes.iter().map(|m| m.src.len()).collect();
    Some(crate::dispatch_width!(dtype, T => {
        let e = bytemuck::pod_read_unaligned::<T>(extrap.bytes());
        Tensor::from_vec(shape, nearest(x.data::<T>(), x.shape(), &axes, e)).with_dtype(dtype)
    }, _ => return None))
}

fn parse_mode(node: &Node, s: &str) -> Result<Mode, EpError> {
    Ok(match s {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" | "trilinear" => Mode::Linear,
        "cubic" => Mode::Cubic,
        other => {
            return Err(bad_attr(
                node,
                "mode",
                format!("'{other}' is not nearest, linear or cubic"),
            ))
        }
    })
}

fn build_resize(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let v10 = ctx.opset < 11;
    let mode = parse_mode(n, &attrs::string(n, "mode", "nearest")?)?;
    let nearest = if v10 {
        Nearest::Simple
    } else {
        match attrs::string(n, "nearest_mode", "round_prefer_floor")?.as_str() {
            "round_prefer_floor" => Nearest::RoundPreferFloor,
            "round_prefer_ceil" => Nearest::RoundPreferCeil,
            "floor" => Nearest::Floor,
            "ceil" => Nearest::Ceil,
            other => {
                return Err(bad_attr(
                    n,
                    "nearest_mode",
                    format!("'{other}' is not a nearest mode"),
                ))
            }
        }
    };
    let ctm = if v10 {
        Ctm::Asymmetric
    } else {
        match attrs::string(n, "coordinate_transformation_mode", "half_pixel")?.as_str() {
            "half_pixel" => Ctm::HalfPixel,
            "half_pixel_symmetric" => Ctm::HalfPixelSymmetric,
            "pytorch_half_pixel" => Ctm::PytorchHalfPixel,
            "align_corners" => Ctm::AlignCorners,
            "asymmetric" => Ctm::Asymmetric,
            "tf_half_pixel_for_nn" => Ctm::TfHalfPixelForNn,
            "tf_crop_and_resize" => Ctm::TfCropAndResize,
            other => {
                return Err(bad_attr(
                    n,
                    "coordinate_transformation_mode",
                    format!("'{other}' is not supported"),
                ))
            }
        }
    };
    let aspect = match attrs::string(n, "keep_aspect_ratio_policy", "stretch")?.as_str() {
        "stretch" => Aspect::Stretch,
        "not_larger" => Aspect::NotLarger,
        "not_smaller" => Aspect::NotSmaller,
        other => {
            return Err(bad_attr(
                n,
                "keep_aspect_ratio_policy",
                format!("'{other}' is not stretch, not_larger or not_smaller"),
            ))
        }
    };
    let at = ResizeAttrs {
        mode,
        nearest,
        ctm,
        cubic_a: attrs::float(n, "cubic_coeff_a", -0.75)? as f64,
        exclude_outside: attrs::int(n, "exclude_outside", 0)? != 0,
        extrapolation: attrs::float(n, "extrapolation_value", 0.0)? as f64,
        antialias: attrs::int(n, "antialias", 0)? != 0,
        axes: attrs::opt_ints(n, "axes")?,
        aspect,
    };
    Ok(Box::new(ResizeKernel {
        node: n.describe(),
        at,
        roi_in: if v10 { None } else { Some(1) },
        scales_in: if v10 { 1 } else { 2 },
        sizes_in: if v10 { None } else { Some(3) },
        scales_attr: None,
    }))
}

fn build_upsample(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let mode = parse_mode(n, &attrs::string(n, "mode", "nearest")?)?;
    if mode == Mode::Cubic {
        return Err(bad_attr(n, "mode", "Upsample takes nearest or linear"));
    }
    let scales_attr = if ctx.opset < 9 {
        let s =
            attrs::opt_floats(n, "scales")?.ok_or_else(|| bad_attr(n, "scales", "is required"))?;
        Some(s.into_iter().map(|v| v as f64).collect())
    } else {
        None
    };
    Ok(Box::new(ResizeKernel {
        node: n.describe(),
        at: ResizeAttrs {
            mode,
            nearest: Nearest::Simple,
            ctm: Ctm::Asymmetric,
            cubic_a: -0.75,
            exclude_outside: false,
            extrapolation: 0.0,
            antialias: false,
            axes: None,
            aspect: Aspect::Stretch,
        },
        roi_in: None,
        scales_in: 1,
        sizes_in: None,
        scales_attr,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [10, 11, 13, 18, 19] {
        r.register("", "Resize", since, build_resize);
    }
    for since in [7, 9] {
        r.register("", "Upsample", since, build_upsample);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn linear_half_pixel_upsample_2x() {
        // 1-D linear half_pixel 2x of [a, b, c]: the known closed form per output position.
        let x = rand(3, 71, -1.0, 1.0);
        let node = node(
            "Resize",
            3,
            1,
            vec![("mode", Attribute::String("linear".into()))],
        );
        let out = run(
            build_resize,
            &node,
            13,
            &[
                Some(Tensor::from_vec(vec![1, 3], f32s(&x))),
                None,
                Some(Tensor::from_vec(vec![2], vec![1.0f32, 2.0])),
            ],
        )
        .unwrap();
        assert_eq!(out[0].shape(), &[1, 6]);
        let want: Vec<f64> = (0..6)
            .map(|j| {
                let xo = ((j as f64 + 0.5) / 2.0 - 0.5).clamp(0.0, 2.0);
                let i0 = xo.floor() as usize;
                let i1 = (i0 + 1).min(2);
                let f = xo - i0 as f64;
                x[i0] * (1.0 - f) + x[i1] * f
            })
            .collect();
        assert_close(out[0].data::<f32>(), &want, 1e-6);
    }

    #[test]
    fn nearest_sizes_and_upsample() {
        let x = Tensor::from_vec(vec![1, 1, 2, 2], vec![1.0f32, 2., 3., 4.]);
        let node = node("Upsample", 2, 1, vec![]);
        let out = run(
            build_upsample,
            &node,
            9,
            &[
                Some(x),
                Some(Tensor::from_vec(vec![4], vec![1.0f32, 1., 2., 3.])),
            ],
        )
        .unwrap();
        assert_eq!(out[0].shape(), &[1, 1, 4, 6]);
        let got = out[0].data::<f32>();
        // np.repeat semantics
        for y in 0..4 {
            for xx in 0..6 {
                assert_eq!(got[y * 6 + xx], [1., 2., 3., 4.][(y / 2) * 2 + xx / 3]);
            }
        }
    }
}
