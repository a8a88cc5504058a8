//! DeformConv (opset 19, 22): N-D convolution whose kernel taps are displaced by learned
//! per-position `offset`s (multilinear interpolation, zero outside the input) and scaled by
//! an optional `mask`. Built as deformable im2col (in f64) followed by one GEMM per group.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

struct DeformConv {
    node: String,
    kernel: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    group: usize,
    offset_group: usize,
}

/// Multilinear sample of the `dims`-shaped plane `x` at real coordinates `p` (zero outside).
fn sample(x: &[f64], dims: &[usize], p: &[f64]) -> f64 {
    let nd = dims.len();
    let mut total = 0.0;
    'corner: for corner in 0..(1usize << nd) {
        let mut w = 1.0;
        let mut idx = 0usize;
        for d in 0..nd {
            let lo = p[d].floor();
            let frac = p[d] - lo;
            let hi = corner >> d & 1 == 1;
            let c = if hi { lo + 1.0 } else { lo };
            let wd = if hi { frac } else { 1.0 - frac };
            if wd == 0.0 {
                continue 'corner;
            }
            if c < 0.0 || c >= dims[d] as f64 {
                continue 'corner;
            }
            w *= wd;
            idx = idx * dims[d] + c as usize;
        }
        total += w * x[idx];
    }
    total
}

fn multi_index(mut lin: usize, dims: &[usize], out: &mut [usize]) {
    for d in (0..dims.len()).rev() {
        out[d] = lin % dims[d];
        lin /= dims[d];
    }
}

impl CpuKernel for DeformConv {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let w = tensor_input(node, inputs, 1)?;
        let off = tensor_input(node, inputs, 2)?;
        let b = optional_tensor_input(node, inputs, 3)?;
        let mask = optional_tensor_input(node, inputs, 4)?;
        common::require_float(node, "DeformConv", x.dtype())?;
        for t in [Some(w), Some(off), b, mask].into_iter().flatten() {
            if t.dtype() != x.dtype() {
                return Err(invalid(
                    node,
                    format!("all inputs must be {}, got {}", x.dtype(), t.dtype()),
                ));
            }
        }
        let xs = x.shape();
        if xs.len() < 3 || w.rank() != xs.len() || off.rank() != xs.len() {
            return Err(invalid(
                node,
                format!(
                    "X {xs:?}, W {:?} and offset {:?} must share a rank >= 3",
                    w.shape(),
                    off.shape()
                ),
            ));
        }
        let nd = xs.len() - 2;
        let (n, ic) = (xs[0], xs[1]);
        let spatial = &xs[2..];
        let oc = w.shape()[0];
        let kernel = self
            .kernel
            .clone()
            .unwrap_or_else(|| w.shape()[2..].to_vec());
        let pads = self.pads.clone().unwrap_or_else(|| vec![0; 2 * nd]);
        let strides = self.strides.clone().unwrap_or_else(|| vec![1; nd]);
        let dil = self.dilations.clone().unwrap_or_else(|| vec![1; nd]);
        let (g, og) = (self.group, self.offset_group);
        if kernel.len() != nd || pads.len() != 2 * nd || strides.len() != nd || dil.len() != nd {
            return Err(invalid(
                node,
                format!("kernel_shape/pads/strides/dilations do not match {nd} spatial axes"),
            ));
        }
        if w.shape()[2..] != kernel[..] || ic != w.shape()[1] * g || oc % g != 0 || ic % og != 0 {
            return Err(invalid(
                node,
                format!("W {:?} does not fit X {xs:?} with group {g}, offset_group {og}, kernel {kernel:?}", w.shape()),
            ));
        }
        let kk: usize = kernel.iter().product();
        let mut out_sp = Vec::with_capacity(nd);
        for d in 0..nd {
            let ext = (kernel[d] - 1) * dil[d] + 1;
            let padded = spatial[d] + pads[d] + pads[nd + d];
            if padded < ext || strides[d] == 0 {
                return Err(invalid(
                    node,
                    format!("kernel extent {ext} exceeds padded axis {d} of size {padded}"),
                ));
            }
            out_sp.push((padded - ext) / strides[d] + 1);
        }
        let mut want_off = vec![n, og * kk * nd];
        want_off.extend_from_slice(&out_sp);
        if off.shape() != want_off.as_slice() {
            return Err(invalid(
                node,
                format!("offset shape {:?} must be {want_off:?}", off.shape()),
            ));
        }
        if let Some(m) = mask {
            let mut want = vec![n, og * kk];
            want.extend_from_slice(&out_sp);
            if m.shape() != want.as_slice() {
                return Err(invalid(
                    node,
                    format!("mask shape {:?} must be {want:?}", m.shape()),
                ));
            }
        }
        if let Some(b) = b {
            if b.shape() != [oc] {
                return Err(invalid(
                    node,
                    format!("B shape {:?} must be [{oc}]", b.shape()),
                ));
            }
        }
        let xv = common::floats_of(node, x, "X")?;
        let wv = common::floats_of(node, w, "W")?;
        let ov = common::floats_of(node, off, "offset")?;
        let mv = mask
            .map(|m| common::floats_of(node, m, "mask"))
            .transpose()?;
        let bv = b.map(|b| common::floats_of(node, b, "B")).transpose()?;
        let plane: usize = spatial.iter().product();
        let npos: usize = out_sp.iter().product();
        let (icg, ocg, ico) = (ic / g, oc / g, ic / og);
        let mut y = vec![0.0f64; n * oc * npos];
        let mut col = vec![0.0f64; ic * kk * npos];
        let (mut kidx, mut oidx, mut p) = (vec![0; nd], vec![0; nd], vec![0.0; nd]);
        for bi in 0..n {
            for ogi in 0..og {
                for k in 0..kk {
                    multi_index(k, &kernel, &mut kidx);
                    for pos in 0..npos {
                        multi_index(pos, &out_sp, &mut oidx);
                        for d in 0..nd {
                            let o = ov[(((bi * og + ogi) * kk + k) * nd + d) * npos + pos];
                            p[d] = (oidx[d] * strides[d]) as f64 - pads[d] as f64
                                + (kidx[d] * dil[d]) as f64
                                + o;
                        }
                        let m = mv
                            .as_ref()
                            .map_or(1.0, |m| m[((bi * og + ogi) * kk + k) * npos + pos]);
                        for c in ogi * ico..(ogi + 1) * ico {
                            let xp = &xv[(bi * ic + c) * plane..][..plane];
                            col[(c * kk + k) * npos + pos] = m * sample(xp, spatial, &p);
                        }
                    }
                }
            }
            for gi in 0..g {
                let a = &wv[gi * ocg * icg * kk..][..ocg * icg * kk];
                let bcol = &col[gi * icg * kk * npos..][..icg * kk * npos];
                let out = &mut y[(bi * oc + gi * ocg) * npos..][..ocg * npos];
                common::matmul_rm(ocg, npos, icg * kk, a, bcol, out);
                if let Some(bv) = &bv {
                    for o in 0..ocg {
                        for v in &mut out[o * npos..(o + 1) * npos] {
                            *v += bv[gi * ocg + o];
                        }
                    }
                }
            }
        }
        let mut shape = vec![n, oc];
        shape.extend_from_slice(&out_sp);
        let t = match x.dtype() {
            DataType::Float64 => Tensor::from_vec(shape, y),
            d => common::tensor_from_f32(d, shape, y.into_iter().map(|v| v as f32).collect()),
        };
        Ok(vec![Value::Tensor(t)])
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let list = |name: &str| -> Result<Option<Vec<usize>>, EpError> {
        attrs::opt_ints(n, name)?
            .map(|v| common::usize_list(n, name, &v))
            .transpose()
    };
    let group = attrs::int(n, "group", 1)?;
    let offset_group = attrs::int(n, "offset_group", 1)?;
    if group < 1 || offset_group < 1 {
        return Err(common::bad_attr(
            n,
            "group",
            "group and offset_group must be >= 1",
        ));
    }
    Ok(Box::new(DeformConv {
        node: n.describe(),
        kernel: list("kernel_shape")?,
        pads: list("pads")?,
        strides: list("strides")?,
        dilations: list("dilations")?,
        group: group as usize,
        offset_group: offset_group as usize,
    }))
}

pub fn register(r: &mut CpuRegistry) {
    for since in [19, 22] {
        r.register("", "DeformConv", since, build);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ops::nn::common::testutil::*;

    /// With zero offsets and no mask DeformConv is a plain convolution (f64 loop reference);
    /// an offset of exactly +1 row shifts every tap by one row.
    #[test]
    fn zero_offset_is_conv_and_integer_offset_shifts() {
        let (h, wd) = (4usize, 5usize);
        let x = rand(2 * h * wd, 3, -1.0, 1.0);
        let w = rand(3 * 2 * 2 * 2, 4, -1.0, 1.0);
        let nd = node("DeformConv", 3, 1, vec![]);
        let (oh, ow) = (h - 1, wd - 1);
        for shift in [0.0f64, 1.0] {
            let mut off = vec![0.0; 8 * oh * ow];
            for k in 0..4 {
                for pos in 0..oh * ow {
                    off[(k * 2) * oh * ow + pos] = shift;
                }
            }
            let out = run(
                build,
                &nd,
                22,
                &[
                    Some(Tensor::from_vec(vec![1, 2, h, wd], x.clone())),
                    Some(Tensor::from_vec(vec![3, 2, 2, 2], w.clone())),
                    Some(Tensor::from_vec(vec![1, 8, oh, ow], off)),
                ],
            )
            .unwrap();
            let mut want = vec![0.0; 3 * oh * ow];
            for o in 0..3 {
                for i in 0..oh {
                    for j in 0..ow {
                        let mut s = 0.0;
                        for c in 0..2 {
                            for ki in 0..2 {
                                for kj in 0..2 {
                                    let r = i + ki + shift as usize;
                                    if r < h {
                                        s += w[((o * 2 + c) * 2 + ki) * 2 + kj]
                                            * x[(c * h + r) * wd + j + kj];
                                    }
                                }
                            }
                        }
                        want[(o * oh + i) * ow + j] = s;
                    }
                }
            }
            let got: Vec<f32> = out[0].data::<f64>().iter().map(|&v| v as f32).collect();
            assert_close(&got, &want, 1e-6);
        }
    }
}
