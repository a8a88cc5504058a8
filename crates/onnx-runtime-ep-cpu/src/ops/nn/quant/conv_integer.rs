//! ConvInteger (opset 10) on the exact 8-bit GEMM ([`crate::ops::nn::gemm::igemm`]): for
//! every image and group, the weights (packed once at build when they are constant) are the
//! A rows, the image's im2col columns (padding holds the x zero point, so it adds nothing)
//! the B panels, and the i32 result lands in the output's NCHW planes directly. 1-D and 2-D
//! convolutions take this path; others run the generic f64 kernel ([`ConvQ`]).

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common;
use crate::ops::nn::conv::conv_op::ConvGeom;
use crate::ops::nn::gemm::igemm::{igemm, PackedB8, RowsA, Zero};
use crate::ops::nn::quant::qlinear::ConvQ;
use crate::ops::nn::window::{Window, WindowAttrs};
use crate::{attrs, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::sync::Arc;

/// The weights [M, C/group, k..] as one block of A rows per group.
struct PackedW {
    shape: Vec<usize>,
    dtype: DataType,
    groups: Vec<RowsA>,
}

impl PackedW {
    fn new(w: &Tensor, group: usize) -> PackedW {
        let m = w.shape()[0];
        let (mg, kg) = (m / group, w.numel() / m.max(1));
        let signed = w.dtype() == DataType::Int8;
        let bytes = w.bytes();
        PackedW {
            shape: w.shape().to_vec(),
            dtype: w.dtype(),
            groups: (0..group)
                .map(|g| RowsA::new(&bytes[g * mg * kg..], signed, mg, kg, kg))
                .collect(),
        }
    }
}

struct ConvIntegerKernel {
    generic: ConvQ,
    packed: Option<Arc<PackedW>>,
}

fn is_8bit(t: &Tensor) -> bool {
    matches!(t.dtype(), DataType::Uint8 | DataType::Int8)
}

/// A zero point's values as i32 (`None` when it is not 8-bit).
fn zp_values(z: &Tensor) -> Option<Vec<i32>> {
    match z.dtype() {
        DataType::Uint8 => Some(z.data::<u8>().iter().map(|&v| v as i32).collect()),
        DataType::Int8 => Some(z.data::<i8>().iter().map(|&v| v as i32).collect()),
        _ => None,
    }
}

/// The 2-D geometry of a 1-D or 2-D window: (ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl).
fn geom2d(w: &Window) -> [usize; 12] {
    let (i, o, k, s, d, p) = (
        &w.input,
        &w.output,
        &w.kernel,
        &w.strides,
        &w.dilations,
        &w.pad_begin,
    );
    if i.len() == 1 {
        [1, i[0], 1, o[0], 1, k[0], 1, s[0], 1, d[0], 0, p[0]]
    } else {
        [
            i[0], i[1], o[0], o[1], k[0], k[1], s[0], s[1], d[0], d[1], p[0], p[1],
        ]
    }
}

/// The im2col matrix [channels * kh * kw, oh * ow] of `x` ([channels, ih, iw] bytes), with
/// `pad` where the window hangs over the edge.
fn im2col_bytes(x: &[u8], channels: usize, g: [usize; 12], pad: u8, col: &mut [u8]) {
    let [ih, iw, oh, ow, kh, kw, sh, sw, dh, dw, pt, pl] = g;
    let p = oh * ow;
    let mut rows = col.chunks_exact_mut(p.max(1));
    for c in 0..channels {
        let plane = &x[c * ih * iw..(c + 1) * ih * iw];
        for ky in 0..kh {
            for kx in 0..kw {
                let row = rows.next().expect("im2col rows");
                let off = (kx * dw) as isize - pl as isize;
                // Output columns whose input column ox * sw + off lies inside the row.
                let lo = if off >= 0 {
                    0
                } else {
                    ((-off) as usize).div_ceil(sw).min(ow)
                };
                let hi = if off >= iw as isize {
                    0
                } else {
                    ((iw as isize - 1 - off) as usize / sw + 1).min(ow)
                };
                let hi = hi.max(lo);
                for oy in 0..oh {
                    let dst = &mut row[oy * ow..(oy + 1) * ow];
                    let iy = (oy * sh + ky * dh) as isize - pt as isize;
                    if iy < 0 || iy >= ih as isize {
                        dst.fill(pad);
                        continue;
                    }
                    let line = &plane[iy as usize * iw..(iy as usize + 1) * iw];
                    dst[..lo].fill(pad);
                    dst[hi..].fill(pad);
                    let start = (lo * sw) as isize + off;
                    if sw == 1 {
                        dst[lo..hi]
                            .copy_from_slice(&line[start as usize..start as usize + hi - lo]);
                    } else {
                        for (j, v) in dst[lo..hi].iter_mut().enumerate() {
                            *v = line[start as usize + j * sw];
                        }
                    }
                }
            }
        }
    }
}

impl ConvIntegerKernel {
    /// The convolution on the integer GEMM, or `None` where the generic kernel takes it.
    fn fast(&self, inputs: &[Option<&Value>]) -> Result<Option<Tensor>, EpError> {
        let node = &self.generic.node;
        let x = tensor_input(node, inputs, 0)?;
        let w = tensor_input(node, inputs, 1)?;
        let xzp = optional_tensor_input(node, inputs, 2)?;
        let wzp = optional_tensor_input(node, inputs, 3)?;
        if !is_8bit(x) || !is_8bit(w) || !(3..=4).contains(&x.rank()) {
            return Ok(None);
        }
        let group = self.generic.group;
        let g = ConvGeom::new(node, &self.generic.wa, group, x.shape(), w.shape())?;
        let same = |z: Option<&Tensor>, t: &Tensor| z.is_none_or(|z| z.dtype() == t.dtype());
        if !same(xzp, x) || !same(wzp, w) {
            return Ok(None);
        }
        let xz = match xzp.map(zp_values) {
            None => vec![0],
            Some(Some(v)) if v.len() == 1 => v,
            _ => return Ok(None),
        };
        let wz = match wzp.map(zp_values) {
            None => vec![0],
            Some(Some(v)) if v.len() == 1 || v.len() == g.m => v,
            _ => return Ok(None),
        };
        let own;
        let pw = match &self.packed {
            Some(p) if p.shape == w.shape() && p.dtype == w.dtype() => &**p,
            _ => {
                own = PackedW::new(w, group);
                &own
            }
        };
        let geo = geom2d(&g.win);
        let (cg, mg) = (g.c / group, g.m / group);
        let kg = cg * g.win.kernel_size();
        let (p, in_plane) = (g.win.output_size(), g.win.input_size());
        if p == 0 || kg == 0 {
            return Ok(None);
        }
        let x_signed = x.dtype() == DataType::Int8;
        // The padding value: the x zero point's byte.
        let pad = xz[0] as u8;
        let xb = x.bytes();
        let mut out = vec![0i32; g.n * g.m * p];
        let mut col = if g.win.is_pointwise() {
            Vec::new()
        } else {
            vec![0u8; kg * p]
        };
        for n in 0..g.n {
            for gi in 0..group {
                let xs = &xb[(n * g.c + gi * cg) * in_plane..(n * g.c + (gi + 1) * cg) * in_plane];
                let src: &[u8] = if g.win.is_pointwise() {
                    xs
                } else {
                    im2col_bytes(xs, cg, geo, pad, &mut col);
                    &col
                };
                let b = PackedB8::new(src, x_signed, kg, p, p);
                let za = if wz.len() == 1 {
                    Zero::All(wz[0])
                } else {
                    Zero::Each(&wz[gi * mg..(gi + 1) * mg])
                };
                let o = (n * g.m + gi * mg) * p;
                igemm(
                    &pw.groups[gi],
                    za,
                    &b,
                    Zero::All(xz[0]),
                    &mut out[o..o + mg * p],
                    p,
                );
            }
        }
        Ok(Some(Tensor::from_vec(g.out_shape(), out)))
    }
}

impl CpuKernel for ConvIntegerKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        if let Some(t) = self.fast(inputs)? {
            return Ok(vec![Value::Tensor(t)]);
        }
        self.generic.run(inputs)
    }
}

pub fn build_conv_integer(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let group = attrs::int(n, "group", 1)?;
    if group < 1 {
        return Err(common::bad_attr(n, "group", "must be >= 1"));
    }
    let group = group as usize;
    let packed = ctx
        .constant(1)
        .and_then(Value::as_tensor)
        .filter(|w| is_8bit(w) && w.rank() >= 3 && w.shape()[0] % group == 0)
        .map(|w| Arc::new(PackedW::new(w, group)));
    Ok(Box::new(ConvIntegerKernel {
        generic: ConvQ {
            node: n.describe(),
            wa: WindowAttrs::parse(n)?,
            group,
            qlinear: false,
        },
        packed,
    }))
}
