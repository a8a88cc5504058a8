//! Integer-domain products: QLinearMatMul, QLinearConv and the generic ConvInteger. Zero points are
//! subtracted up front and the products run on the f64 GEMM, which is exact for 8-bit
//! operands (|sums| < 2^53); results are requantized with round-half-to-even.

use crate::kernel::{kernel_fn, optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid, unsupported};
use crate::ops::nn::conv::conv_op::{conv_compute, ConvGeom};
use crate::ops::nn::quant::qtypes::{decode, encode};
use crate::ops::nn::window::WindowAttrs;
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

fn values(node: &str, t: &Tensor, what: &str) -> Result<Vec<f64>, EpError> {
    decode(t).ok_or_else(|| {
        invalid(
            node,
            format!("{what} of type {} is not a quantized type", t.dtype()),
        )
    })
}

fn q8(node: &str, op: &str, t: &Tensor) -> Result<(), EpError> {
    match t.dtype() {
        DataType::Uint8 | DataType::Int8 => Ok(()),
        other => Err(unsupported(node, op, other, "uint8 or int8")),
    }
}

/// `v` minus a zero point that is a scalar or varies along `axis_len` blocks of `inner`.
fn centered(v: &[f64], zp: &[f64], inner: usize, axis_len: usize) -> Vec<f64> {
    if zp.len() <= 1 {
        let z = zp.first().copied().unwrap_or(0.0);
        return v.iter().map(|&x| x - z).collect();
    }
    v.iter()
        .enumerate()
        .map(|(i, &x)| x - zp[(i / inner.max(1)) % axis_len])
        .collect()
}

fn build_qlinear_matmul(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node.describe();
    Ok(kernel_fn(move |inputs| {
        let t = |i| tensor_input(&node, inputs, i);
        let (a, as_, azp, b, bs, bzp, ys, yzp) =
            (t(0)?, t(1)?, t(2)?, t(3)?, t(4)?, t(5)?, t(6)?, t(7)?);
        q8(&node, "QLinearMatMul", a)?;
        q8(&node, "QLinearMatMul", b)?;
        let p = crate::ops::nn::gemm::matmul::plan(&node, a.shape(), b.shape(), false, false)?;
        let (m, k, n) = (p.m, p.k, p.n);
        let (asv, bsv) = (
            common::floats_of(&node, as_, "a_scale")?,
            common::floats_of(&node, bs, "b_scale")?,
        );
        let (azv, bzv) = (
            values(&node, azp, "a_zero_point")?,
            values(&node, bzp, "b_zero_point")?,
        );
        // Per-row A parameters (M values) and per-column B parameters (N values).
        for (v, want, what) in [
            (&asv, m, "a_scale"),
            (&azv, m, "a_zero_point"),
            (&bsv, n, "b_scale"),
            (&bzv, n, "b_zero_point"),
        ] {
            if v.len() != 1 && v.len() != want {
                return Err(invalid(
                    &node,
                    format!("{what} has {} values; want 1 or {want}", v.len()),
                ));
            }
        }
        let av = centered(&values(&node, a, "a")?, &azv, k, m);
        let bv = {
            let raw = values(&node, b, "b")?;
            if bzv.len() <= 1 {
                centered(&raw, &bzv, 1, 1)
            } else {
                centered(&raw, &bzv, 1, n)
            }
        };
        let acc =
            crate::ops::nn::gemm::matmul::matmul_float::<f64>(&p, &av, &bv, false, false, 1.0);
        let ysv = common::floats_of(&node, ys, "y_scale")?;
        let yzv = values(&node, yzp, "y_zero_point")?;
        let (ysc, yz) = (ysv[0], yzv[0]);
        let out: Vec<f64> = acc
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let (row, col) = ((i / n) % m, i % n);
                let sa = asv[if asv.len() == 1 { 0 } else { row }] as f32;
                let sb = bsv[if bsv.len() == 1 { 0 } else { col }] as f32;
                ((v as f32 * (sa * sb / ysc as f32)) as f64).round_ties_even() + yz
            })
            .collect();
        Ok(vec![Value::Tensor(encode(
            yzp.dtype(),
            p.out_shape,
            &out,
            true,
        ))])
    }))
}

/// The generic (f64) QLinearConv / ConvInteger kernel, any rank.
pub(crate) struct ConvQ {
    pub(crate) node: String,
    pub(crate) wa: WindowAttrs,
    pub(crate) group: usize,
    /// QLinearConv (requantized output) or ConvInteger (int32 output).
    pub(crate) qlinear: bool,
}

impl CpuKernel for ConvQ {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let op = if self.qlinear {
            "QLinearConv"
        } else {
            "ConvInteger"
        };
        let (x, xzp, w, wzp) = if self.qlinear {
            (
                tensor_input(node, inputs, 0)?,
                Some(tensor_input(node, inputs, 2)?),
                tensor_input(node, inputs, 3)?,
                Some(tensor_input(node, inputs, 5)?),
            )
        } else {
            (
                tensor_input(node, inputs, 0)?,
                optional_tensor_input(node, inputs, 2)?,
                tensor_input(node, inputs, 1)?,
                optional_tensor_input(node, inputs, 3)?,
            )
        };
        q8(node, op, x)?;
        q8(node, op, w)?;
        let g = ConvGeom::new(node, &self.wa, self.group, x.shape(), w.shape())?;
        let xz = match xzp {
            Some(z) => values(node, z, "x_zero_point")?,
            None => vec![0.0],
        };
        if xz.len() != 1 {
            return Err(invalid(node, "x_zero_point must be a scalar"));
        }
        let wz = match wzp {
            Some(z) => values(node, z, "w_zero_point")?,
            None => vec![0.0],
        };
        if wz.len() != 1 && wz.len() != g.m {
            return Err(invalid(
                node,
                format!("w_zero_point has {} values; want 1 or M={}", wz.len(), g.m),
            ));
        }
        let per_m: usize = w.shape()[1..].iter().product();
        let xv = centered(&values(node, x, "x")?, &xz, 1, 1);
        let wv = centered(&values(node, w, "w")?, &wz, per_m, g.m);
        let bias = if self.qlinear {
            optional_tensor_input(node, inputs, 8)?
                .map(|b| {
                    common::ints_of(node, b, "B")
                        .map(|v| v.into_iter().map(|x| x as f64).collect::<Vec<_>>())
                })
                .transpose()?
        } else {
            None
        };
        if let Some(b) = &bias {
            if b.len() != g.m {
                return Err(invalid(
                    node,
                    format!("B has {} values; want M={}", b.len(), g.m),
                ));
            }
        }
        let acc = conv_compute::<f64>(&g, &xv, &wv, bias.as_deref());
        let shape = g.out_shape();
        if !self.qlinear {
            return Ok(vec![Value::Tensor(Tensor::from_vec(
                shape,
                acc.into_iter().map(|v| v as i32).collect(),
            ))]);
        }
        let xs = common::floats_of(node, tensor_input(node, inputs, 1)?, "x_scale")?;
        let ws = common::floats_of(node, tensor_input(node, inputs, 4)?, "w_scale")?;
        let ys = common::floats_of(node, tensor_input(node, inputs, 6)?, "y_scale")?;
        let yzt = tensor_input(node, inputs, 7)?;
        let yz = values(node, yzt, "y_zero_point")?;
        if ws.len() != 1 && ws.len() != g.m {
            return Err(invalid(
                node,
                format!("w_scale has {} values; want 1 or M={}", ws.len(), g.m),
            ));
        }
        let out_sz = g.win.output_size().max(1);
        let out: Vec<f64> = acc
            .iter()
            .enumerate()
            .map(|(i, &v)| {
                let mm = (i / out_sz) % g.m;
                let s = xs[0] as f32 * ws[if ws.len() == 1 { 0 } else { mm }] as f32 / ys[0] as f32;
                ((v as f32 * s) as f64).round_ties_even() + yz[0]
            })
            .collect();
        Ok(vec![Value::Tensor(encode(yzt.dtype(), shape, &out, true))])
    }
}

fn build_conv(ctx: &BuildContext<'_>, qlinear: bool) -> Result<Box<dyn CpuKernel>, EpError> {
    let n = ctx.node;
    let group = attrs::int(n, "group", 1)?;
    if group < 1 {
        return Err(common::bad_attr(n, "group", "must be >= 1"));
    }
    Ok(Box::new(ConvQ {
        node: n.describe(),
        wa: WindowAttrs::parse(n)?,
        group: group as usize,
        qlinear,
    }))
}

fn build_qlinear_conv(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    build_conv(ctx, true)
}

pub fn register(r: &mut CpuRegistry) {
    for since in [10, 21] {
        r.register("", "QLinearMatMul", since, build_qlinear_matmul);
    }
    r.register("", "QLinearConv", 10, build_qlinear_conv);
    r.register(
        "",
        "ConvInteger",
        10,
        crate::ops::nn::quant::conv_integer::build_conv_integer,
    );
}
