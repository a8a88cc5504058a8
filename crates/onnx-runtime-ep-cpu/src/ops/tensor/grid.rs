//! Spatial sampling: GridSample (2-D at opset 16, N-D from 20) and AffineGrid.

use super::common::{from_f64s, int_values, invalid, one, unsupported};
use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{attrs, CpuRegistry, Tensor};
use onnx_runtime_ep_api::EpError;

#[derive(Clone, Copy, PartialEq, Debug)]
enum Interp {
    Nearest,
    Linear,
    Cubic,
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Padding {
    Zeros,
    Border,
    Reflection,
}

fn floats(node: &str, t: &Tensor, op: &str) -> Result<Vec<f64>, EpError> {
    t.to_f64_vec()
        .filter(|_| t.dtype().is_float())
        .ok_or_else(|| unsupported(node, op, t.dtype(), "float types only"))
}

/// Reflects `x` into [lo, hi] by bouncing off the nearer border.
fn reflect(x: f64, lo: f64, hi: f64) -> f64 {
    let range = hi - lo;
    if range <= 0.0 {
        return lo;
    }
    if x < lo {
        let dx = lo - x;
        let n = (dx / range) as i64;
        let r = dx - n as f64 * range;
        if n % 2 == 0 {
            lo + r
        } else {
            hi - r
        }
    } else if x > hi {
        let dx = x - hi;
        let n = (dx / range) as i64;
        let r = dx - n as f64 * range;
        if n % 2 == 0 {
            hi - r
        } else {
            lo + r
        }
    } else {
        x
    }
}

fn cubic_coeffs(t: f64) -> [f64; 4] {
    let a = -0.75;
    let x = t.abs();
    [
        ((a * (x + 1.0) - 5.0 * a) * (x + 1.0) + 8.0 * a) * (x + 1.0) - 4.0 * a,
        ((a + 2.0) * x - (a + 3.0)) * x * x + 1.0,
        ((a + 2.0) * (1.0 - x) - (a + 3.0)) * (1.0 - x) * (1.0 - x) + 1.0,
        ((a * (2.0 - x) - 5.0 * a) * (2.0 - x) + 8.0 * a) * (2.0 - x) - 4.0 * a,
    ]
}

/// Round half to even (numpy's `rint`).
fn rint(x: f64) -> f64 {
    let r = x.round();
    if (x - x.trunc()).abs() == 0.5 && r % 2.0 != 0.0 {
        r - x.signum()
    } else {
        r
    }
}

struct Sampler {
    interp: Interp,
    padding: Padding,
    align: bool,
}

impl Sampler {
    /// The element index along an axis of length `d` for tap `i`, or `None` for a zero.
    fn tap(&self, i: i64, d: usize, lo: f64, hi: f64) -> Option<usize> {
        match self.padding {
            Padding::Zeros => (0..d as i64).contains(&i).then_some(i as usize),
            Padding::Border => Some(i.clamp(0, d as i64 - 1) as usize),
            Padding::Reflection => {
                Some((reflect(i as f64, lo, hi) as i64).clamp(0, d as i64 - 1) as usize)
            }
        }
    }

    /// Per-axis (index, weight) taps of one normalized grid point.
    fn taps(&self, g: &[f64], dims: &[usize]) -> Vec<Vec<(Option<usize>, f64)>> {
        let k = dims.len();
        (0..k)
            .map(|i| {
                let d = dims[i];
                let n = g[k - 1 - i];
                let (lo, hi) = if self.align {
                    (0.0, d as f64 - 1.0)
                } else {
                    (-0.5, d as f64 - 0.5)
                };
                let mut x = if self.align {
                    (n + 1.0) / 2.0 * (d as f64 - 1.0)
                } else {
                    ((n + 1.0) * d as f64 - 1.0) / 2.0
                };
                if self.interp == Interp::Nearest {
                    x = rint(x);
                }
                if x < lo || x > hi {
                    match self.padding {
                        Padding::Border => x = x.clamp(0.0, d as f64 - 1.0),
                        Padding::Reflection => x = reflect(x, lo, hi),
                        Padding::Zeros => {}
                    }
                }
                match self.interp {
                    Interp::Nearest => vec![(self.tap(x as i64, d, lo, hi), 1.0)],
                    Interp::Linear => {
                        let x0 = x.floor();
                        let f = x - x0;
                        let x0 = x0 as i64;
                        vec![
                            (self.tap(x0, d, lo, hi), 1.0 - f),
                            (self.tap(x0 + 1, d, lo, hi), f),
                        ]
                    }
                    Interp::Cubic => {
                        let x0 = x.floor();
                        let c = cubic_coeffs(x - x0);
                        let x0 = x0 as i64;
                        (0..4)
                            .map(|j| (self.tap(x0 - 1 + j as i64, d, lo, hi), c[j]))
                            .collect()
                    }
                }
            })
            .collect()
    }
}

fn build_grid_sample(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let v16 = ctx.opset < 20;
    let mode = attrs::string(ctx.node, "mode", if v16 { "bilinear" } else { "linear" })?;
    let interp = match (mode.as_str(), v16) {
        ("nearest", _) => Interp::Nearest,
        ("bilinear", true) | ("linear", false) => Interp::Linear,
        ("bicubic", true) | ("cubic", false) => Interp::Cubic,
        (other, _) => {
            return Err(EpError::invalid_attribute(
                ctx.node,
                "mode",
                format!("'{other}' is not a mode at opset {} (16: bilinear/nearest/bicubic; 20+: linear/nearest/cubic)", ctx.opset),
            ))
        }
    };
    let padding = match attrs::string(ctx.node, "padding_mode", "zeros")?.as_str() {
        "zeros" => Padding::Zeros,
        "border" => Padding::Border,
        "reflection" => Padding::Reflection,
        other => {
            return Err(EpError::invalid_attribute(
                ctx.node,
                "padding_mode",
                format!("'{other}' is not zeros, border or reflection"),
            ))
        }
    };
    let s = Sampler {
        interp,
        padding,
        align: attrs::int(ctx.node, "align_corners", 0)? != 0,
    };
    Ok(kernel_fn(move |inputs| {
        let xt = tensor_input(&node, inputs, 0)?;
        let gt = tensor_input(&node, inputs, 1)?;
        let (xs, gs) = (xt.shape(), gt.shape());
        let k = xs.len().saturating_sub(2);
        if k == 0
            || gs.len() != xs.len()
            || gs[0] != xs[0]
            || gs[gs.len() - 1] != k
            || (v16 && k != 2)
        {
            return Err(invalid(
                &node,
                format!("X {xs:?} and grid {gs:?} do not match: grid must be [N, out..., {k}]"),
            ));
        }
        if interp == Interp::Cubic && k > 3 {
            return Err(invalid(&node, "cubic sampling supports 2-D and 3-D inputs"));
        }
        let (n, c, dims) = (xs[0], xs[1], &xs[2..]);
        let x = floats(&node, xt, "GridSample")?;
        let g = floats(&node, gt, "GridSample")?;
        let plane: usize = dims.iter().product();
        let points: usize = gs[1..gs.len() - 1].iter().product();
        let strides = super::common::strides_of(dims);
        let mut out = vec![0f64; n * c * points];
        for b in 0..n {
            for p in 0..points {
                let taps = s.taps(&g[(b * points + p) * k..(b * points + p + 1) * k], dims);
                // Tensor product of the per-axis taps: (offset, weight), zero taps dropped.
                let mut combos: Vec<(usize, f64)> = vec![(0, 1.0)];
                for (i, axis) in taps.iter().enumerate() {
                    let mut next = Vec::with_capacity(combos.len() * axis.len());
                    for &(off, w) in &combos {
                        for &(idx, wt) in axis {
                            if let Some(idx) = idx {
                                next.push((off + idx * strides[i], w * wt));
                            }
                        }
                    }
                    combos = next;
                }
                for ch in 0..c {
                    let src = &x[(b * c + ch) * plane..(b * c + ch + 1) * plane];
                    out[(b * c + ch) * points + p] = combos.iter().map(|&(o, w)| w * src[o]).sum();
                }
            }
        }
        let mut shape = vec![n, c];
        shape.extend_from_slice(&gs[1..gs.len() - 1]);
        one(from_f64s(xt.dtype(), shape, &out).expect("float dtype"))
    }))
}

/// Normalized base coordinate of index `i` along an axis of length `d`.
fn base(i: usize, d: usize, align: bool) -> f64 {
    if align {
        if d <= 1 {
            -1.0
        } else {
            -1.0 + 2.0 * i as f64 / (d as f64 - 1.0)
        }
    } else {
        -1.0 + (2 * i + 1) as f64 / d as f64
    }
}

fn build_affine_grid(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    let align = attrs::int(ctx.node, "align_corners", 0)? != 0;
    Ok(kernel_fn(move |inputs| {
        let tt = tensor_input(&node, inputs, 0)?;
        let size = int_values(&node, tensor_input(&node, inputs, 1)?, "size")?;
        let theta = floats(&node, tt, "AffineGrid")?;
        let k = match size.len() {
            4 => 2,
            5 => 3,
            _ => {
                return Err(invalid(
                    &node,
                    format!("size {size:?} must be [N, C, H, W] or [N, C, D, H, W]"),
                ))
            }
        };
        let n = super::common::to_dim(&node, size[0], "size")?;
        if tt.shape() != [n, k, k + 1] {
            return Err(invalid(
                &node,
                format!("theta must be [{n}, {k}, {}], got {:?}", k + 1, tt.shape()),
            ));
        }
        let sp: Vec<usize> = size[2..]
            .iter()
            .map(|&d| super::common::to_dim(&node, d, "size"))
            .collect::<Result<_, _>>()?;
        let points: usize = super::common::checked_numel(&node, &sp)?;
        let mut out = Vec::with_capacity(n * points * k);
        for b in 0..n {
            let th = &theta[b * k * (k + 1)..(b + 1) * k * (k + 1)];
            for p in 0..points {
                // Homogeneous point (x, y[, z], 1): x runs along the last axis.
                let mut rem = p;
                let mut h = vec![1.0; k + 1];
                for a in (0..k).rev() {
                    let i = rem % sp[a];
                    rem /= sp[a];
                    h[k - 1 - a] = base(i, sp[a], align);
                }
                for r in 0..k {
                    out.push((0..=k).map(|j| th[r * (k + 1) + j] * h[j]).sum::<f64>());
                }
            }
        }
        let mut shape = vec![n];
        shape.extend_from_slice(&sp);
        shape.push(k);
        one(from_f64s(tt.dtype(), shape, &out).expect("float dtype"))
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [16, 20, 22] {
        r.register("", "GridSample", since, build_grid_sample);
    }
    r.register("", "AffineGrid", 20, build_affine_grid);
}

#[cfg(test)]
mod tests {
    use super::super::common::testutil::*;
    use super::{reflect, rint};
    use onnx_runtime_ir::Attribute;

    #[test]
    fn helpers() {
        assert_eq!(rint(2.5), 2.0);
        assert_eq!(rint(-1.5), -2.0);
        assert_eq!(rint(0.4), 0.0);
        assert!((reflect(-0.7, -0.5, 2.5) + 0.3).abs() < 1e-12);
        assert!((reflect(3.0, -0.5, 2.5) - 2.0).abs() < 1e-12);
    }

    #[test]
    fn identity_grid_reproduces_input() {
        // AffineGrid of the identity transform, sampled bilinearly without align_corners,
        // lands on pixel centres and returns X unchanged.
        let x = rand_f32(2 * 3 * 4, 11);
        let theta = t(&[1, 2, 3], vec![1f32, 0., 0., 0., 1., 0.]);
        let grid = run(
            &node("AffineGrid", 2, 1, vec![]),
            20,
            &[theta, t(&[4], vec![1i64, 2, 3, 4])],
        )
        .unwrap();
        let n = node(
            "GridSample",
            2,
            1,
            vec![("mode", Attribute::String("linear".into()))],
        );
        let o = run(
            &n,
            20,
            &[t(&[1, 2, 3, 4], x.clone()), Some(grid[0].clone())],
        )
        .unwrap();
        let (s, v) = out::<f32>(&o, 0);
        assert_eq!(s, vec![1, 2, 3, 4]);
        for (a, b) in v.iter().zip(&x) {
            assert!((a - b).abs() < 1e-6);
        }
    }
}
