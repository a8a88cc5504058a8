//! Signal processing: DFT (opset 17 axis attribute, opset 20 axis input), STFT, the Hann,
//! Hamming and Blackman windows and MelWeightMatrix. Transforms accumulate in f64 with
//! per-length twiddle tables.

use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid, unsupported};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::f64::consts::PI;

/// DFT of one complex line `x` (len n, zero-padded or truncated to `len`), `out_len` bins.
fn dft_line(
    x: &[(f64, f64)],
    len: usize,
    out_len: usize,
    inverse: bool,
    tw: &[(f64, f64)],
) -> Vec<(f64, f64)> {
    let sign = if inverse { 1.0 } else { -1.0 };
    let mut out = vec![(0.0, 0.0); out_len];
    let m = x.len().min(len);
    for (k, o) in out.iter_mut().enumerate() {
        let (mut re, mut im) = (0.0, 0.0);
        for (t, &(xr, xi)) in x[..m].iter().enumerate() {
            let (c, s) = tw[(k * t) % len];
            let s = s * sign;
            re += xr * c - xi * s;
            im += xr * s + xi * c;
        }
        if inverse {
            re /= len as f64;
            im /= len as f64;
        }
        *o = (re, im);
    }
    out
}

fn twiddles(n: usize) -> Vec<(f64, f64)> {
    (0..n)
        .map(|k| {
            let a = 2.0 * PI * k as f64 / n as f64;
            (a.cos(), a.sin())
        })
        .collect()
}

fn float_out(dtype: DataType, shape: Vec<usize>, v: Vec<f64>) -> Tensor {
    match dtype {
        DataType::Float64 => Tensor::from_vec(shape, v),
        d => common::tensor_from_f32(d, shape, v.into_iter().map(|x| x as f32).collect()),
    }
}

fn scalar_int(node: &str, t: &Tensor, what: &str) -> Result<i64, EpError> {
    common::ints_of(node, t, what)?
        .first()
        .copied()
        .ok_or_else(|| invalid(node, format!("{what} must be a scalar")))
}

#[allow(clippy::too_many_arguments)]
fn dft(
    node: &str,
    x: &Tensor,
    axis: i64,
    len: Option<i64>,
    inverse: bool,
    onesided: bool,
) -> Result<Tensor, EpError> {
    common::require_float(node, "DFT", x.dtype())?;
    let shape = x.shape();
    let r = shape.len();
    if r < 2 || !matches!(shape[r - 1], 1 | 2) {
        return Err(invalid(
            node,
            format!("input {shape:?} must end in a dimension of 1 (real) or 2 (complex)"),
        ));
    }
    // The axis counts the trailing complex dim in the rank but may not name it.
    let a = crate::shape::normalize_axis(node, axis, r)?;
    if a == r - 1 {
        return Err(invalid(
            node,
            "axis may not be the last (complex) dimension",
        ));
    }
    let n = shape[a];
    let irfft = inverse && onesided;
    let len = match len {
        Some(l) if l < 1 => return Err(invalid(node, format!("dft_length {l} must be positive"))),
        Some(l) => l as usize,
        None if irfft => 2 * n.saturating_sub(1),
        None => n,
    };
    if len == 0 {
        return Err(invalid(node, "the transform length is 0"));
    }
    let out_len = if onesided && !inverse {
        len / 2 + 1
    } else {
        len
    };
    let comps = shape[r - 1];
    let outer: usize = shape[..a].iter().product();
    let inner: usize = shape[a + 1..r - 1].iter().product();
    let xv = x.to_f64_vec().unwrap_or_default();
    let tw = twiddles(len);
    let mut out = vec![0.0; outer * out_len * inner * 2];
    for o in 0..outer {
        for i in 0..inner {
            let line: Vec<(f64, f64)> = (0..n)
                .map(|t| {
                    let base = ((o * n + t) * inner + i) * comps;
                    (xv[base], if comps == 2 { xv[base + 1] } else { 0.0 })
                })
                .collect();
            let line = if irfft {
                // Rebuild the Hermitian spectrum from its one-sided half.
                let half = len / 2;
                let mut full = vec![(0.0, 0.0); len];
                for (k, f) in full.iter_mut().enumerate().take(half + 1) {
                    let (re, im) = line.get(k).copied().unwrap_or((0.0, 0.0));
                    let real_bin = k == 0 || (len % 2 == 0 && k == half);
                    *f = (re, if real_bin { 0.0 } else { im });
                }
                for k in half + 1..len {
                    let (re, im) = full[len - k];
                    full[k] = (re, -im);
                }
                full
            } else {
                line
            };
            let res = dft_line(&line, len, out_len, inverse, &tw);
            for (k, (re, im)) in res.into_iter().enumerate() {
                let base = ((o * out_len + k) * inner + i) * 2;
                out[base] = re;
                out[base + 1] = im;
            }
        }
    }
    let mut oshape = shape.to_vec();
    oshape[a] = out_len;
    oshape[r - 1] = 2;
    if irfft {
        // A real signal: keep the real parts.
        oshape[r - 1] = 1;
        out = out.iter().step_by(2).copied().collect();
    }
    Ok(float_out(x.dtype(), oshape, out))
}

fn build_dft(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let inverse = attrs::int(n, "inverse", 0)? != 0;
    let onesided = attrs::int(n, "onesided", 0)? != 0;
    let v17 = ctx.opset < 20;
    let axis_attr = attrs::int(n, "axis", 1)?;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        let len = optional_tensor_input(&node, inputs, 1)?
            .map(|t| scalar_int(&node, t, "dft_length"))
            .transpose()?;
        let axis = if v17 {
            axis_attr
        } else {
            match optional_tensor_input(&node, inputs, 2)? {
                Some(t) => scalar_int(&node, t, "axis")?,
                None => -2,
            }
        };
        Ok(vec![Value::Tensor(dft(
            &node, x, axis, len, inverse, onesided,
        )?)])
    }))
}

fn build_stft(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let node = n.describe();
    let onesided = attrs::int(n, "onesided", 1)? != 0;
    Ok(kernel_fn(move |inputs| {
        let x = tensor_input(&node, inputs, 0)?;
        common::require_float(&node, "STFT", x.dtype())?;
        let step = scalar_int(&node, tensor_input(&node, inputs, 1)?, "frame_step")?;
        let window = optional_tensor_input(&node, inputs, 2)?;
        let flen = optional_tensor_input(&node, inputs, 3)?
            .map(|t| scalar_int(&node, t, "frame_length"))
            .transpose()?;
        let shape = x.shape();
        if shape.len() != 3 || !matches!(shape[2], 1 | 2) {
            return Err(invalid(
                &node,
                format!("signal {shape:?} must be [batch, length, 1 or 2]"),
            ));
        }
        let wv = window.map(|w| w.to_f64_vec().unwrap_or_default());
        let flen = match (flen, &wv) {
            (Some(f), _) => f,
            (None, Some(w)) => w.len() as i64,
            (None, None) => return Err(invalid(&node, "give frame_length or window")),
        };
        if step < 1 || flen < 1 || flen as usize > shape[1] {
            return Err(invalid(&node, format!("frame_step {step} and frame_length {flen} must be positive and fit the signal of {}", shape[1])));
        }
        let (step, flen) = (step as usize, flen as usize);
        if let Some(w) = &wv {
            if w.len() != flen {
                return Err(invalid(
                    &node,
                    format!("window has {} values; frame_length is {flen}", w.len()),
                ));
            }
        }
        let (batch, slen, comps) = (shape[0], shape[1], shape[2]);
        let frames = 1 + (slen - flen) / step;
        let bins = if onesided { flen / 2 + 1 } else { flen };
        let xv = x.to_f64_vec().unwrap_or_default();
        let tw = twiddles(flen);
        let mut out = vec![0.0; batch * frames * bins * 2];
        for b in 0..batch {
            for f in 0..frames {
                let line: Vec<(f64, f64)> = (0..flen)
                    .map(|t| {
                        let base = (b * slen + f * step + t) * comps;
                        let w = wv.as_ref().map_or(1.0, |w| w[t]);
                        (
                            xv[base] * w,
                            if comps == 2 { xv[base + 1] * w } else { 0.0 },
                        )
                    })
                    .collect();
                for (k, (re, im)) in dft_line(&line, flen, bins, false, &tw)
                    .into_iter()
                    .enumerate()
                {
                    let o = ((b * frames + f) * bins + k) * 2;
                    out[o] = re;
                    out[o + 1] = im;
                }
            }
        }
        Ok(vec![Value::Tensor(float_out(
            x.dtype(),
            vec![batch, frames, bins, 2],
            out,
        ))])
    }))
}

#[derive(Clone, Copy)]
enum Window {
    Hann,
    Hamming,
    Blackman,
}

fn out_dtype(ctx: &BuildContext<'_>) -> Result<DataType, EpError> {
    let code = attrs::int(ctx.node, "output_datatype", 1)?;
    DataType::from_onnx(code as i32)
        .filter(|d| d.is_float() || d.is_integer())
        .ok_or_else(|| {
            common::bad_attr(
                ctx.node,
                "output_datatype",
                format!("{code} is not a numeric type"),
            )
        })
}

/// Values of `v` as a tensor of `dtype` (integers truncate like a numpy cast).
fn numeric_out(
    node: &str,
    op: &str,
    dtype: DataType,
    shape: Vec<usize>,
    v: Vec<f64>,
) -> Result<Tensor, EpError> {
    match dtype {
        DataType::Float64 | DataType::Float32 | DataType::Float16 | DataType::BFloat16 => {
            Ok(float_out(dtype, shape, v))
        }
        d => crate::dispatch_int!(d, T => {
            Ok(Tensor::from_vec(shape, v.iter().map(|&x| num_traits::cast::<f64, T>(x.trunc()).unwrap_or_default()).collect()))
        }, other => Err(unsupported(node, op, other, "numeric output types"))),
    }
}

fn build_window(
    ctx: &BuildContext<'_>,
    kind: Window,
    op: &'static str,
) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let periodic = attrs::int(ctx.node, "periodic", 1)? != 0;
    let dtype = out_dtype(ctx)?;
    Ok(kernel_fn(move |inputs| {
        let size = scalar_int(&node, tensor_input(&node, inputs, 0)?, "size")?;
        if size < 0 {
            return Err(invalid(&node, format!("size {size} must not be negative")));
        }
        let size = size as usize;
        let nn = if periodic {
            size as f64
        } else {
            size as f64 - 1.0
        };
        let v: Vec<f64> = (0..size)
            .map(|i| {
                let x = 2.0 * PI * i as f64 / nn;
                match kind {
                    Window::Hann => 0.5 - 0.5 * x.cos(),
                    Window::Hamming => 25.0 / 46.0 - (1.0 - 25.0 / 46.0) * x.cos(),
                    Window::Blackman => 0.42 - 0.5 * x.cos() + 0.08 * (2.0 * x).cos(),
                }
            })
            .collect();
        Ok(vec![Value::Tensor(numeric_out(
            &node,
            op,
            dtype,
            vec![size],
            v,
        )?)])
    }))
}

fn build_hann(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_window(ctx, Window::Hann, "HannWindow")
}
fn build_hamming(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_window(ctx, Window::Hamming, "HammingWindow")
}
fn build_blackman(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_window(ctx, Window::Blackman, "BlackmanWindow")
}

fn build_mel(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let dtype = out_dtype(ctx)?;
    Ok(kernel_fn(move |inputs| {
        let int = |i, w| scalar_int(&node, tensor_input(&node, inputs, i)?, w);
        let flt = |i, w| -> Result<f64, EpError> {
            common::floats_of(&node, tensor_input(&node, inputs, i)?, w)?
                .first()
                .copied()
                .ok_or_else(|| invalid(&node, format!("{w} must be a scalar")))
        };
        let (bins, dft_len, rate) = (
            int(0, "num_mel_bins")?,
            int(1, "dft_length")?,
            int(2, "sample_rate")?,
        );
        let (lo, hi) = (flt(3, "lower_edge_hertz")?, flt(4, "upper_edge_hertz")?);
        if bins < 1 || dft_len < 1 || rate < 1 {
            return Err(invalid(
                &node,
                "num_mel_bins, dft_length and sample_rate must be positive",
            ));
        }
        let (bins, spec) = (bins as usize, dft_len as usize / 2 + 1);
        let mel = |f: f64| 2595.0 * (1.0 + f / 700.0).log10();
        let (lm, hm) = (mel(lo), mel(hi));
        let step = (hm - lm) / (bins + 2) as f64;
        let points: Vec<i64> = (0..bins + 2)
            .map(|i| {
                let hz = 700.0 * (10f64.powf((i as f64 * step + lm) / 2595.0) - 1.0);
                (((dft_len + 1) as f64 * hz) / rate as f64).floor() as i64
            })
            .collect();
        let mut out = vec![0.0; spec * bins];
        let mut set = |j: i64, i: usize, v: f64| {
            if j >= 0 && (j as usize) < spec {
                out[j as usize * bins + i] = v;
            }
        };
        for i in 0..bins {
            let (l, c, h) = (points[i], points[i + 1], points[i + 2]);
            if c == l {
                set(c, i, 1.0);
            } else {
                for j in l..=c {
                    set(j, i, (j - l) as f64 / (c - l) as f64);
                }
            }
            if h > c {
                for j in c..h {
                    set(j, i, (h - j) as f64 / (h - c) as f64);
                }
            }
        }
        Ok(vec![Value::Tensor(numeric_out(
            &node,
            "MelWeightMatrix",
            dtype,
            vec![spec, bins],
            out,
        )?)])
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register("", "DFT", 17, build_dft);
    r.register("", "DFT", 20, build_dft);
    r.register("", "STFT", 17, build_stft);
    r.register("", "HannWindow", 17, build_hann);
    r.register("", "HammingWindow", 17, build_hamming);
    r.register("", "BlackmanWindow", 17, build_blackman);
    r.register("", "MelWeightMatrix", 17, build_mel);
}
