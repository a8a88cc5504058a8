//! Resize's host-side plan: the attributes, the geometry (output sizes, scales, roi from the
//! host-read inputs) and the per-axis taps, all the CPU provider's
//! (`onnx-runtime-ep-cpu/src/ops/nn/pool/resize.rs`) ported line for line so coordinates round
//! the same way (float64), and the device table a plan becomes.

use super::attr_floats;
use super::FloatValues;
use crate::ops::common::*;
use onnx_runtime_ep_api::{EpError, EpResult};
use onnx_runtime_ir::{DataType, Node};

#[derive(Clone, Copy, PartialEq, Debug)]
pub(super) enum Mode {
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
pub(super) enum Ctm {
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
pub(super) struct ResizeAttrs {
    pub(super) mode: Mode,
    nearest: Nearest,
    pub(super) ctm: Ctm,
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

/// The CPU provider's `plan_axis`, unchanged.
fn plan_axis(
    at: &ResizeAttrs,
    in_len: usize,
    out_len: usize,
    scale: f64,
    roi: (f64, f64),
) -> AxisPlan {
    let out_w = scale * in_len as f64;
    let inl = in_len as f64;
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
    let last = (in_len as i64 - 1).max(0);
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
            plan.idx[j * taps + t] = (first + t as i64).clamp(0, last) as usize;
        }
    }
    plan
}

/// Output sizes, per-axis scales and per-axis roi (start, end).
pub(super) type Geometry = (Vec<usize>, Vec<f64>, Vec<(f64, f64)>);

/// One resampled axis in the device table, in the CPU's pass order.
#[derive(Clone, Copy, Debug)]
pub(super) struct Slot {
    pub(super) axis: usize,
    pub(super) taps: usize,
    /// First table entry (entry `tab + j * taps + t`).
    pub(super) tab: usize,
    /// First flag (flag `flag + j`).
    pub(super) flag: usize,
}

/// The device table of a geometry as bytes: idx (i32), weights (f64, then f32), flags (i32),
/// each section 8-byte aligned, with the resampled axes in the CPU's pass order and each
/// section's byte offset.
pub(super) fn build_table(
    at: &ResizeAttrs,
    shape: &[usize],
    g: &Geometry,
) -> (Vec<u8>, Vec<Slot>, [usize; 4]) {
    let (out, scales, roi) = g;
    let plans: Vec<(usize, AxisPlan)> = (0..shape.len())
        .filter_map(|a| {
            let p = plan_axis(at, shape[a], out[a], scales[a], roi[a]);
            (!p.is_identity(shape[a])).then_some((a, p))
        })
        .collect();
    // The CPU's pass order: shrinking axes first (a stable sort).
    let mut order: Vec<usize> = (0..plans.len()).collect();
    order.sort_by_key(|&i| plans[i].1.out_len as isize - shape[plans[i].0] as isize);
    let nearest = at.mode == Mode::Nearest;
    let (mut idx, mut wd, mut wf, mut flags) = (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let mut slots = Vec::with_capacity(plans.len());
    for &i in &order {
        let (axis, p) = &plans[i];
        let taps = if nearest { 1 } else { p.taps };
        slots.push(Slot {
            axis: *axis,
            taps,
            tab: idx.len(),
            flag: flags.len(),
        });
        for j in 0..p.out_len {
            let row = j * p.taps..(j + 1) * p.taps;
            if nearest {
                let hit = row.clone().find(|&e| p.w[e] == 1.0);
                idx.push(hit.map_or(0, |e| p.idx[e]) as i32);
                flags.push(if p.extrapolate[j] {
                    1i32
                } else if hit.is_none() {
                    2
                } else {
                    0
                });
            } else {
                for e in row {
                    idx.push(p.idx[e] as i32);
                    wd.push(p.w[e]);
                    wf.push(p.w[e] as f32);
                }
                flags.push(p.extrapolate[j] as i32);
            }
        }
    }
    // One block: idx (i32), weights (f64, then f32), flags (i32), each 8-byte aligned.
    let mut bytes: Vec<u8> = Vec::new();
    let mut section = |data: Vec<u8>| -> usize {
        while !bytes.len().is_multiple_of(8) {
            bytes.push(0);
        }
        let at = bytes.len();
        bytes.extend_from_slice(&data);
        at
    };
    let idx_at = section(idx.iter().flat_map(|v| v.to_ne_bytes()).collect());
    let wd_at = section(wd.iter().flat_map(|v| v.to_ne_bytes()).collect());
    let wf_at = section(wf.iter().flat_map(|v| v.to_ne_bytes()).collect());
    let flags_at = section(flags.iter().flat_map(|v| v.to_ne_bytes()).collect());
    (bytes, slots, [idx_at, wd_at, wf_at, flags_at])
}

/// Whether the flags section (from byte `at` to the end) marks any coordinate.
pub(super) fn table_special(bytes: &[u8], at: usize) -> bool {
    bytes[at..]
        .chunks_exact(4)
        .any(|f| i32::from_ne_bytes(f.try_into().expect("4 bytes")) != 0)
}

/// What a Resize / Upsample node asks for, without a device: its attributes and where its
/// roi, scales and sizes come from.
pub(super) struct ResizeSpec {
    node: String,
    pub(super) at: ResizeAttrs,
    /// Input positions of roi, scales and sizes (None where the opset lacks them).
    pub(super) roi_in: Option<usize>,
    pub(super) scales_in: Option<usize>,
    pub(super) sizes_in: Option<usize>,
    /// Upsample-7: scales from the attribute.
    pub(super) scales_attr: Option<Vec<f64>>,
}

impl ResizeSpec {
    fn err(&self, message: impl Into<String>) -> EpError {
        EpError::InvalidInput {
            node: self.node.clone(),
            message: message.into(),
        }
    }

    fn axis(&self, axis: i64, rank: usize) -> EpResult<usize> {
        let r = rank as i64;
        let a = if axis < 0 { axis + r } else { axis };
        if a < 0 || a >= r {
            return Err(self.err(format!(
                "axes entry {axis} is out of range for rank {rank} (accepted: [-{rank}, {}])",
                r - 1
            )));
        }
        Ok(a as usize)
    }

    /// The CPU provider's `geometry` on the host-read values.
    pub(super) fn geometry(
        &self,
        values: &FloatValues,
        shape: &[usize],
        sizes_dtype: Option<DataType>,
    ) -> EpResult<Geometry> {
        let base = self;
        let r = shape.len();
        let axes: Vec<usize> = match &self.at.axes {
            Some(a) => {
                let mut out = Vec::with_capacity(a.len());
                for &v in a {
                    let ax = self.axis(v, r)?;
                    if out.contains(&ax) {
                        return Err(base.err(format!("axis {ax} is repeated in {a:?}")));
                    }
                    out.push(ax);
                }
                out
            }
            None => (0..r).collect(),
        };
        let get = |i: Option<usize>| -> Option<&Vec<f64>> {
            i.and_then(|i| values.get(i)?.as_ref())
                .filter(|v| !v.is_empty())
        };
        let scales = match &self.scales_attr {
            Some(s) => Some(s.clone()),
            None => get(self.scales_in).cloned(),
        };
        let sizes: Option<Vec<i64>> = match get(self.sizes_in) {
            Some(v) => {
                if let Some(dtype) = sizes_dtype.filter(|d| !d.is_integer()) {
                    return Err(base.err(format!("sizes must be an integer tensor, got {dtype}")));
                }
                Some(v.iter().map(|&f| f as i64).collect())
            }
            None => None,
        };
        let mut roi = vec![(0.0, 1.0); r];
        if self.at.ctm == Ctm::TfCropAndResize {
            let rv = get(self.roi_in)
                .ok_or_else(|| base.err("tf_crop_and_resize needs the roi input"))?;
            if rv.len() != 2 * axes.len() {
                return Err(base.err(format!(
                    "roi has {} values; want 2 x {} axes",
                    rv.len(),
                    axes.len()
                )));
            }
            for (i, &a) in axes.iter().enumerate() {
                roi[a] = (rv[i], rv[axes.len() + i]);
            }
        }
        let mut out = shape.to_vec();
        let mut sc = vec![1.0; r];
        match (scales, sizes) {
            (Some(_), Some(_)) => return Err(base.err("give scales or sizes, not both")),
            (None, None) => return Err(base.err("one of scales or sizes is required")),
            (Some(s), None) => {
                if s.len() != axes.len() {
                    return Err(base.err(format!(
                        "scales has {} values; want {} (one per resized axis)",
                        s.len(),
                        axes.len()
                    )));
                }
                for (i, &a) in axes.iter().enumerate() {
                    if s[i] <= 0.0 || !s[i].is_finite() {
                        return Err(base.err(format!("scale {} must be positive", s[i])));
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
                    return Err(base.err(format!(
                        "sizes {z:?} must be {} non-negative values",
                        axes.len()
                    )));
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
        for a in 0..r {
            if shape[a] == 0 && out[a] > 0 {
                return Err(base.err(format!("cannot resize empty axis {a} to {}", out[a])));
            }
        }
        if !out.contains(&0)
            && out
                .iter()
                .try_fold(1usize, |n, &d| n.checked_mul(d))
                .is_none()
        {
            return Err(base.err(format!(
                "output shape {out:?} has more elements than fit in memory"
            )));
        }
        Ok((out, sc, roi))
    }

    /// The extrapolation value stored as `dtype` (the CPU's conversion), as bits.
    pub(super) fn extrap_bits(&self, dtype: DataType) -> u64 {
        let ex = self.at.extrapolation;
        let int = |lo: f64, hi: f64| -> f64 { ex.round_ties_even().clamp(lo, hi) };
        match dtype {
            DataType::Float32 => (ex as f32).to_bits() as u64,
            DataType::Float64 => ex.to_bits(),
            DataType::Float16 => half::f16::from_f32(ex as f32).to_bits() as u64,
            DataType::BFloat16 => half::bf16::from_f32(ex as f32).to_bits() as u64,
            DataType::Int8 => int(i8::MIN as f64, i8::MAX as f64) as i8 as u8 as u64,
            DataType::Uint8 => int(0.0, u8::MAX as f64) as u8 as u64,
            DataType::Int16 => int(i16::MIN as f64, i16::MAX as f64) as i16 as u16 as u64,
            DataType::Uint16 => int(0.0, u16::MAX as f64) as u16 as u64,
            DataType::Int32 => int(i32::MIN as f64, i32::MAX as f64) as i32 as u32 as u64,
            DataType::Uint32 => int(0.0, u32::MAX as f64) as u32 as u64,
            DataType::Int64 => int(i64::MIN as f64, i64::MAX as f64) as i64 as u64,
            DataType::Uint64 => int(0.0, u64::MAX as f64) as u64,
            _ => 0,
        }
    }
}

fn parse_mode(node: &Node, s: &str) -> EpResult<Mode> {
    Ok(match s {
        "nearest" => Mode::Nearest,
        "linear" | "bilinear" | "trilinear" => Mode::Linear,
        "cubic" => Mode::Cubic,
        other => {
            return Err(EpError::invalid_attribute(
                node,
                "mode",
                format!("'{other}' is not nearest, linear or cubic"),
            ))
        }
    })
}

fn string_or(node: &Node, name: &str, default: &str) -> EpResult<String> {
    Ok(attr_string(node, name)?.unwrap_or_else(|| default.to_string()))
}

pub(super) fn resize_spec(n: &Node, opset: u64) -> EpResult<ResizeSpec> {
    let v10 = opset < 11;
    let mode = parse_mode(n, &string_or(n, "mode", "nearest")?)?;
    let nearest = if v10 {
        Nearest::Simple
    } else {
        match string_or(n, "nearest_mode", "round_prefer_floor")?.as_str() {
            "round_prefer_floor" => Nearest::RoundPreferFloor,
            "round_prefer_ceil" => Nearest::RoundPreferCeil,
            "floor" => Nearest::Floor,
            "ceil" => Nearest::Ceil,
            other => {
                return Err(EpError::invalid_attribute(
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
        match string_or(n, "coordinate_transformation_mode", "half_pixel")?.as_str() {
            "half_pixel" => Ctm::HalfPixel,
            "half_pixel_symmetric" => Ctm::HalfPixelSymmetric,
            "pytorch_half_pixel" => Ctm::PytorchHalfPixel,
            "align_corners" => Ctm::AlignCorners,
            "asymmetric" => Ctm::Asymmetric,
            "tf_half_pixel_for_nn" => Ctm::TfHalfPixelForNn,
            "tf_crop_and_resize" => Ctm::TfCropAndResize,
            other => {
                return Err(EpError::invalid_attribute(
                    n,
                    "coordinate_transformation_mode",
                    format!("'{other}' is not supported"),
                ))
            }
        }
    };
    let aspect = match string_or(n, "keep_aspect_ratio_policy", "stretch")?.as_str() {
        "stretch" => Aspect::Stretch,
        "not_larger" => Aspect::NotLarger,
        "not_smaller" => Aspect::NotSmaller,
        other => {
            return Err(EpError::invalid_attribute(
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
        cubic_a: attr_float(n, "cubic_coeff_a")?.unwrap_or(-0.75) as f64,
        exclude_outside: attr_int(n, "exclude_outside")?.unwrap_or(0) != 0,
        extrapolation: attr_float(n, "extrapolation_value")?.unwrap_or(0.0) as f64,
        antialias: attr_int(n, "antialias")?.unwrap_or(0) != 0,
        axes: attr_ints(n, "axes")?,
        aspect,
    };
    let (roi_in, scales_in, sizes_in) = if v10 {
        (None, Some(1), None)
    } else {
        (Some(1), Some(2), Some(3))
    };
    Ok(ResizeSpec {
        node: n.describe(),
        at,
        roi_in,
        scales_in,
        sizes_in,
        scales_attr: None,
    })
}

pub(super) fn upsample_spec(n: &Node, opset: u64) -> EpResult<ResizeSpec> {
    let mode = parse_mode(n, &string_or(n, "mode", "nearest")?)?;
    if mode == Mode::Cubic {
        return Err(EpError::invalid_attribute(
            n,
            "mode",
            "Upsample takes nearest or linear",
        ));
    }
    let scales_attr = if opset < 9 {
        let s = attr_floats(n, "scales")?
            .ok_or_else(|| EpError::invalid_attribute(n, "scales", "is required"))?;
        Some(s.into_iter().map(|v| v as f64).collect())
    } else {
        None
    };
    let at = ResizeAttrs {
        mode,
        nearest: Nearest::Simple,
        ctm: Ctm::Asymmetric,
        cubic_a: -0.75,
        exclude_outside: false,
        extrapolation: 0.0,
        antialias: false,
        axes: None,
        aspect: Aspect::Stretch,
    };
    Ok(ResizeSpec {
        node: n.describe(),
        at,
        roi_in: None,
        scales_in: Some(1),
        sizes_in: None,
        scales_attr,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn attrs(mode: Mode, ctm: Ctm) -> ResizeAttrs {
        ResizeAttrs {
            mode,
            nearest: Nearest::RoundPreferFloor,
            ctm,
            cubic_a: -0.75,
            exclude_outside: false,
            extrapolation: 0.0,
            antialias: false,
            axes: None,
            aspect: Aspect::Stretch,
        }
    }

    #[test]
    fn linear_half_pixel_2x_plan() {
        let p = plan_axis(&attrs(Mode::Linear, Ctm::HalfPixel), 3, 6, 2.0, (0.0, 1.0));
        assert_eq!(p.taps, 2);
        // Output 0: x = -0.25 -> taps (-1 clamped to 0, 0) with weights (0.25, 0.75).
        assert_eq!(&p.idx[..2], &[0, 0]);
        assert_eq!(&p.w[..2], &[0.25, 0.75]);
        assert!(!p.is_identity(3));
        let id = plan_axis(&attrs(Mode::Linear, Ctm::HalfPixel), 4, 4, 1.0, (0.0, 1.0));
        assert!(id.is_identity(4));
    }

    #[test]
    fn antialias_widens_the_filter() {
        let mut at = attrs(Mode::Cubic, Ctm::HalfPixel);
        at.antialias = true;
        let p = plan_axis(&at, 16, 4, 0.25, (0.0, 1.0));
        assert_eq!(p.taps, 16);
        for j in 0..4 {
            let s: f64 = p.w[j * 16..(j + 1) * 16].iter().sum();
            assert!((s - 1.0).abs() < 1e-12);
        }
    }
}
