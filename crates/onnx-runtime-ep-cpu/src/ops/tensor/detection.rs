//! Object-detection ops: NonMaxSuppression, RoiAlign, MaxRoiPool.

use super::common::{from_f64s, int_values, invalid, one, scalar_f64, unsupported};
use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor};
use onnx_runtime_ep_api::EpError;

fn floats(node: &str, t: &Tensor, what: &str) -> Result<Vec<f64>, EpError> {
    if !t.dtype().is_float() {
        return Err(unsupported(node, what, t.dtype(), "float types only"));
    }
    t.to_f64_vec()
        .ok_or_else(|| unsupported(node, what, t.dtype(), "float, double, float16 or bfloat16"))
}

/// Corners (y1, x1, y2, x2) with y1 <= y2 and x1 <= x2.
fn corners(b: &[f64], center: bool) -> [f64; 4] {
    if center {
        let (xc, yc, w, h) = (b[0], b[1], b[2], b[3]);
        [yc - h / 2.0, xc - w / 2.0, yc + h / 2.0, xc + w / 2.0]
    } else {
        [
            b[0].min(b[2]),
            b[1].min(b[3]),
            b[0].max(b[2]),
            b[1].max(b[3]),
        ]
    }
}

fn iou(a: &[f64; 4], b: &[f64; 4]) -> f64 {
    let area = |c: &[f64; 4]| (c[2] - c[0]) * (c[3] - c[1]);
    let (aa, ab) = (area(a), area(b));
    if aa <= 0.0 || ab <= 0.0 {
        return 0.0;
    }
    let ih = (a[2].min(b[2]) - a[0].max(b[0])).max(0.0);
    let iw = (a[3].min(b[3]) - a[1].max(b[1])).max(0.0);
    let inter = ih * iw;
    let union = aa + ab - inter;
    if union <= 0.0 {
        0.0
    } else {
        inter / union
    }
}

fn build_nms(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let center = attrs::int(ctx.node, "center_point_box", 0)? != 0;
    Ok(kernel_fn(move |inputs| {
        let boxes_t = tensor_input(&node, inputs, 0)?;
        let scores_t = tensor_input(&node, inputs, 1)?;
        let max_out = match optional_tensor_input(&node, inputs, 2)? {
            Some(t) if t.numel() > 0 => {
                int_values(&node, t, "max_output_boxes_per_class")?[0].max(0) as usize
            }
            _ => 0,
        };
        let iou_th = match optional_tensor_input(&node, inputs, 3)? {
            Some(t) if t.numel() > 0 => scalar_f64(&node, t, "iou_threshold")?,
            _ => 0.0,
        };
        let score_th = match optional_tensor_input(&node, inputs, 4)? {
            Some(t) if t.numel() > 0 => Some(scalar_f64(&node, t, "score_threshold")?),
            _ => None,
        };
        let (bs, ss) = (boxes_t.shape(), scores_t.shape());
        if bs.len() != 3 || bs[2] != 4 || ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
            return Err(invalid(
                &node,
                format!("boxes {bs:?} must be [batches, boxes, 4] and scores {ss:?} [batches, classes, boxes]"),
            ));
        }
        let (batches, n, classes) = (bs[0], bs[1], ss[1]);
        let boxes = floats(&node, boxes_t, "NonMaxSuppression")?;
        let scores = floats(&node, scores_t, "NonMaxSuppression")?;
        let mut out: Vec<i64> = Vec::new();
        for b in 0..batches {
            let cs: Vec<[f64; 4]> = (0..n)
                .map(|i| corners(&boxes[(b * n + i) * 4..(b * n + i + 1) * 4], center))
                .collect();
            for c in 0..classes {
                if max_out == 0 {
                    break;
                }
                let sc = &scores[(b * classes + c) * n..(b * classes + c + 1) * n];
                let mut cand: Vec<usize> = (0..n)
                    .filter(|&i| score_th.is_none_or(|t| sc[i] > t))
                    .collect();
                cand.sort_by(|&i, &j| sc[j].total_cmp(&sc[i]).then(i.cmp(&j)));
                let mut kept: Vec<usize> = Vec::new();
                for i in cand {
                    if kept.len() >= max_out {
                        break;
                    }
                    if kept.iter().all(|&k| iou(&cs[k], &cs[i]) <= iou_th) {
                        kept.push(i);
                    }
                }
                for k in kept {
                    out.extend_from_slice(&[b as i64, c as i64, k as i64]);
                }
            }
        }
        let rows = out.len() / 3;
        one(Tensor::from_vec(vec![rows, 3], out))
    }))
}

struct RoiAttrs {
    avg: bool,
    oh: usize,
    ow: usize,
    ratio: i64,
    scale: f64,
    half_pixel: bool,
}

/// Bilinear sample positions and weights of one sampling point, or `None` outside the map.
fn bilinear(h: usize, w: usize, y: f64, x: f64) -> Option<([usize; 4], [f64; 4])> {
    if y < -1.0 || y > h as f64 || x < -1.0 || x > w as f64 {
        return None;
    }
    let (mut y, mut x) = (y.max(0.0), x.max(0.0));
    let (mut yl, mut xl) = (y as usize, x as usize);
    let yh = if yl >= h - 1 {
        yl = h - 1;
        y = yl as f64;
        yl
    } else {
        yl + 1
    };
    let xh = if xl >= w - 1 {
        xl = w - 1;
        x = xl as f64;
        xl
    } else {
        xl + 1
    };
    let (ly, lx) = (y - yl as f64, x - xl as f64);
    let (hy, hx) = (1.0 - ly, 1.0 - lx);
    Some((
        [yl * w + xl, yl * w + xh, yh * w + xl, yh * w + xh],
        [hy * hx, hy * lx, ly * hx, ly * lx],
    ))
}

fn roi_align(
    a: &RoiAttrs,
    x: &[f64],
    [_, ch, h, w]: [usize; 4],
    rois: &[f64],
    batch: &[usize],
) -> Vec<f64> {
    let nr = batch.len();
    let mut out = vec![0f64; nr * ch * a.oh * a.ow];
    let off = if a.half_pixel { 0.5 } else { 0.0 };
    for r in 0..nr {
        let roi = &rois[r * 4..r * 4 + 4];
        let (sw, sh) = (roi[0] * a.scale - off, roi[1] * a.scale - off);
        let (ew, eh) = (roi[2] * a.scale - off, roi[3] * a.scale - off);
        let (mut rw, mut rh) = (ew - sw, eh - sh);
        if !a.half_pixel {
            rw = rw.max(1.0);
            rh = rh.max(1.0);
        }
        let (bh, bw) = (rh / a.oh as f64, rw / a.ow as f64);
        let gh = if a.ratio > 0 {
            a.ratio as usize
        } else {
            (rh / a.oh as f64).ceil().max(0.0) as usize
        };
        let gw = if a.ratio > 0 {
            a.ratio as usize
        } else {
            (rw / a.ow as f64).ceil().max(0.0) as usize
        };
        let count = (gh * gw).max(1) as f64;
        let mut pre = Vec::with_capacity(a.oh * a.ow * gh * gw);
        for ph in 0..a.oh {
            for pw in 0..a.ow {
                for iy in 0..gh {
                    let y = sh + ph as f64 * bh + (iy as f64 + 0.5) * bh / gh as f64;
                    for ix in 0..gw {
                        let xx = sw + pw as f64 * bw + (ix as f64 + 0.5) * bw / gw as f64;
                        pre.push(bilinear(h, w, y, xx).unwrap_or(([0; 4], [0.0; 4])));
                    }
                }
            }
        }
        for c in 0..ch {
            let plane = &x[(batch[r] * ch + c) * h * w..(batch[r] * ch + c + 1) * h * w];
            let dst = &mut out[(r * ch + c) * a.oh * a.ow..(r * ch + c + 1) * a.oh * a.ow];
            for (bin, d) in dst.iter_mut().enumerate() {
                let samples = &pre[bin * gh * gw..(bin + 1) * gh * gw];
                *d = if a.avg {
                    samples
                        .iter()
                        .map(|(p, wt)| (0..4).map(|k| wt[k] * plane[p[k]]).sum::<f64>())
                        .sum::<f64>()
                        / count
                } else {
                    samples
                        .iter()
                        .map(|(p, wt)| {
                            (0..4)
                                .map(|k| wt[k] * plane[p[k]])
                                .fold(f64::NEG_INFINITY, f64::max)
                        })
                        .fold(None, |m: Option<f64>, v| Some(m.map_or(v, |m| m.max(v))))
                        .unwrap_or(0.0)
                };
            }
        }
    }
    out
}

fn build_roi_align(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let mode = attrs::string(ctx.node, "mode", "avg")?;
    if mode != "avg" && mode != "max" {
        return Err(EpError::invalid_attribute(
            ctx.node,
            "mode",
            format!("'{mode}' is not avg or max"),
        ));
    }
    let ctm_default = if ctx.opset >= 16 {
        "half_pixel"
    } else {
        "output_half_pixel"
    };
    let ctm = attrs::string(ctx.node, "coordinate_transformation_mode", ctm_default)?;
    let half_pixel = match ctm.as_str() {
        "half_pixel" => true,
        "output_half_pixel" => false,
        other => {
            return Err(EpError::invalid_attribute(
                ctx.node,
                "coordinate_transformation_mode",
                format!("'{other}' is not half_pixel or output_half_pixel"),
            ))
        }
    };
    let dim = |name: &str| -> Result<usize, EpError> {
        let v = attrs::int(ctx.node, name, 1)?;
        usize::try_from(v).ok().filter(|v| *v > 0).ok_or_else(|| {
            EpError::invalid_attribute(ctx.node, name, format!("must be positive, got {v}"))
        })
    };
    let a = RoiAttrs {
        avg: mode == "avg",
        oh: dim("output_height")?,
        ow: dim("output_width")?,
        ratio: attrs::int(ctx.node, "sampling_ratio", 0)?,
        scale: attrs::float(ctx.node, "spatial_scale", 1.0)? as f64,
        half_pixel,
    };
    Ok(kernel_fn(move |inputs| {
        let xt = tensor_input(&node, inputs, 0)?;
        let rt = tensor_input(&node, inputs, 1)?;
        let bt = tensor_input(&node, inputs, 2)?;
        let [n, c, h, w] = *xt.shape() else {
            return Err(invalid(
                &node,
                format!("X must be 4-D, got {:?}", xt.shape()),
            ));
        };
        let nr = bt.numel();
        if rt.shape() != [nr, 4] {
            return Err(invalid(
                &node,
                format!("rois must be [{nr}, 4], got {:?}", rt.shape()),
            ));
        }
        let batch = int_values(&node, bt, "batch_indices")?
            .into_iter()
            .map(|b| {
                usize::try_from(b)
                    .ok()
                    .filter(|b| *b < n)
                    .ok_or_else(|| invalid(&node, format!("batch index {b} is outside 0..{n}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let x = floats(&node, xt, "RoiAlign")?;
        let rois = floats(&node, rt, "RoiAlign")?;
        if h == 0 || w == 0 {
            return Err(invalid(&node, "X must have non-empty spatial dims"));
        }
        let out = roi_align(&a, &x, [n, c, h, w], &rois, &batch);
        one(from_f64s(xt.dtype(), vec![nr, c, a.oh, a.ow], &out).expect("float dtype"))
    }))
}

fn build_max_roi_pool(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let pooled = attrs::ints(ctx.node, "pooled_shape")?;
    let [ph, pw] = pooled[..] else {
        return Err(EpError::invalid_attribute(
            ctx.node,
            "pooled_shape",
            "must be [height, width]",
        ));
    };
    if ph <= 0 || pw <= 0 {
        return Err(EpError::invalid_attribute(
            ctx.node,
            "pooled_shape",
            "must be positive",
        ));
    }
    let (ph, pw) = (ph as usize, pw as usize);
    let scale = attrs::float(ctx.node, "spatial_scale", 1.0)? as f64;
    Ok(kernel_fn(move |inputs| {
        let xt = tensor_input(&node, inputs, 0)?;
        let rt = tensor_input(&node, inputs, 1)?;
        let [n, c, h, w] = *xt.shape() else {
            return Err(invalid(
                &node,
                format!("X must be 4-D, got {:?}", xt.shape()),
            ));
        };
        let [nr, 5] = *rt.shape() else {
            return Err(invalid(
                &node,
                format!("rois must be [num_rois, 5], got {:?}", rt.shape()),
            ));
        };
        let x = floats(&node, xt, "MaxRoiPool")?;
        let rois = floats(&node, rt, "MaxRoiPool")?;
        let mut out = vec![0f64; nr * c * ph * pw];
        for r in 0..nr {
            let roi = &rois[r * 5..r * 5 + 5];
            let b = roi[0] as i64;
            if b < 0 || b as usize >= n {
                return Err(invalid(
                    &node,
                    format!("roi {r} names batch {b} outside 0..{n}"),
                ));
            }
            let (sw, sh) = (
                (roi[1] * scale).round() as i64,
                (roi[2] * scale).round() as i64,
            );
            let (ew, eh) = (
                (roi[3] * scale).round() as i64,
                (roi[4] * scale).round() as i64,
            );
            let rh = (eh - sh + 1).max(1) as f64;
            let rw = (ew - sw + 1).max(1) as f64;
            let (bh, bw) = (rh / ph as f64, rw / pw as f64);
            for ch in 0..c {
                let plane = &x[(b as usize * c + ch) * h * w..];
                for i in 0..ph {
                    let hs = ((i as f64 * bh).floor() as i64 + sh).clamp(0, h as i64) as usize;
                    let he = (((i + 1) as f64 * bh).ceil() as i64 + sh).clamp(0, h as i64) as usize;
                    for j in 0..pw {
                        let ws = ((j as f64 * bw).floor() as i64 + sw).clamp(0, w as i64) as usize;
                        let we =
                            (((j + 1) as f64 * bw).ceil() as i64 + sw).clamp(0, w as i64) as usize;
                        let mut m = f64::NEG_INFINITY;
                        for y in hs..he {
                            for xx in ws..we {
                                m = m.max(plane[y * w + xx]);
                            }
                        }
                        out[((r * c + ch) * ph + i) * pw + j] =
                            if he <= hs || we <= ws { 0.0 } else { m };
                    }
                }
            }
        }
        one(from_f64s(xt.dtype(), vec![nr, c, ph, pw], &out).expect("float dtype"))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [10, 11] {
        r.register("", "NonMaxSuppression", since, build_nms);
    }
    for since in [10, 16, 22] {
        r.register("", "RoiAlign", since, build_roi_align);
    }
    for since in [1, 22] {
        r.register("", "MaxRoiPool", since, build_max_roi_pool);
    }
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use onnx_runtime_ir::Attribute;

    #[test]
    fn nms_suppresses_overlaps() {
        // Boxes 0 and 1 overlap with IoU 0.81; box 2 is apart. Scores favour 1, then 0, then 2.
        let boxes = vec![0f32, 0., 1., 1., 0., 0.1, 1., 1.1, 0., 10., 1., 11.];
        let n = node("NonMaxSuppression", 5, 1, vec![]);
        let o = run(
            &n,
            11,
            &[
                t(&[1, 3, 4], boxes),
                t(&[1, 1, 3], vec![0.8f32, 0.9, 0.3]),
                t(&[1], vec![3i64]),
                t(&[1], vec![0.5f32]),
                t(&[1], vec![0.0f32]),
            ],
        )
        .unwrap();
        assert_eq!(out::<i64>(&o, 0), (vec![2, 3], vec![0, 0, 1, 0, 0, 2]));
    }

    #[test]
    fn max_roi_pool_whole_map() {
        // One roi covering a 3x3 map pooled to 1x1 is the map's max.
        let n = node(
            "MaxRoiPool",
            2,
            1,
            vec![("pooled_shape", Attribute::Ints(vec![1, 1]))],
        );
        let x = rand_f32(9, 3);
        let m = x.iter().cloned().fold(f32::MIN, f32::max);
        let o = run(
            &n,
            1,
            &[t(&[1, 1, 3, 3], x), t(&[1, 5], vec![0f32, 0., 0., 2., 2.])],
        )
        .unwrap();
        assert_eq!(out::<f32>(&o, 0).1, vec![m]);
    }
}
