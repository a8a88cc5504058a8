//! Conv (1-D/2-D/3-D and beyond) and com.microsoft FusedConv: tiled im2col + GEMM
//! ([`gemm_conv`]; 1x1 stride-1 convolutions read the input in place) and a direct kernel for
//! 2-D depthwise ([`depthwise2d`]); bias, Z and the activation are applied per output block.

use crate::kernel::{optional_tensor_input, tensor_input, BuildContext, CpuKernel};
use crate::ops::nn::common::{self, invalid, Real};
use crate::ops::nn::conv::conv_act::{Activation, Epilogue};
use crate::ops::nn::conv::conv_direct::{self, DirectWeights};
use crate::ops::nn::conv::conv_gemm::gemm_conv;
use crate::ops::nn::conv::depthwise::depthwise2d;
use crate::ops::nn::conv::small_maps::{self, SmallMapWeights};
use crate::ops::nn::scratch::build_vec;
use crate::ops::nn::window::{Window, WindowAttrs};
use crate::{attrs, CpuRegistry, Tensor, Value};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;
use std::sync::OnceLock;

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
    conv_fused(g, x, w, &Epilogue::bias_only(bias))
}

/// The convolution finished by `ep` (bias, Z, activation) over compute-type slices.
pub fn conv_fused<T: Real>(g: &ConvGeom, x: &[T], w: &[T], ep: &Epilogue<T>) -> Vec<T> {
    let len = g.n * g.m * g.win.output_size();
    let depthwise = g.c == g.group && g.win.input.len() == 2;
    // SAFETY: both kernels write every element of the output they are given.
    unsafe {
        build_vec(len, |out| {
            if depthwise {
                depthwise2d(g, x, w, ep, out)
            } else {
                gemm_conv(g, x, w, ep, out)
            }
        })
    }
}

/// Constant weights, packed on first use for the kernel that runs them (a model's shapes
/// decide which; packing both would double the weights' memory).
#[derive(Default)]
pub struct PackedConv {
    direct: OnceLock<DirectWeights>,
    small: OnceLock<SmallMapWeights>,
}

/// The f32 convolution: pointwise ones over small maps transposed ([`small_maps`]), else by
/// the direct kernel where it applies, else as [`conv_fused`]. With `packed` (constant
/// weights) the first two keep their packed weights there; without, they pack them now.
pub fn conv_fused_f32(
    g: &ConvGeom,
    x: &[f32],
    w: &[f32],
    packed: Option<&PackedConv>,
    ep: &Epilogue<f32>,
) -> Vec<f32> {
    small_maps::try_conv(g, x, w, packed.map(|p| &p.small), ep)
        .or_else(|| conv_direct::try_conv(g, x, w, packed.map(|p| &p.direct), ep))
        .unwrap_or_else(|| conv_fused(g, x, w, ep))
}

/// Conv, and com.microsoft FusedConv: Conv's attributes plus `activation` (Relu, Tanh,
/// Sigmoid, LeakyRelu, Clip, HardSigmoid; this runtime also accepts HardSwish, which takes
/// no parameters), `activation_params` (LeakyRelu: alpha; Clip: min, max; HardSigmoid: alpha,
/// beta) and an optional fourth input Z of the output's shape, added before the activation:
/// `Y = activation(conv(X, W) + B + Z)`.
struct ConvKernel {
    node: String,
    op: &'static str,
    wa: WindowAttrs,
    group: usize,
    act: Activation,
    /// The weights in f32 when they are a constant f16/bf16 tensor (converted once).
    packed_w: Option<Tensor>,
    /// Whether the weights are a constant float tensor of a 2-D, not depthwise, convolution,
    /// packed on first use into `packed`.
    constant_w: bool,
    packed: PackedConv,
}

impl CpuKernel for ConvKernel {
    fn run(&self, inputs: &[Option<&Value>]) -> Result<Vec<Value>, EpError> {
        let node = &self.node;
        let x = tensor_input(node, inputs, 0)?;
        let w = tensor_input(node, inputs, 1)?;
        let bias = optional_tensor_input(node, inputs, 2)?;
        let z = optional_tensor_input(node, inputs, 3)?;
        let dtype = x.dtype();
        common::require_float(node, self.op, dtype)?;
        for t in std::iter::once(w).chain(bias).chain(z) {
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
        if let Some(z) = z {
            if z.shape() != g.out_shape().as_slice() {
                return Err(invalid(
                    node,
                    format!(
                        "Z has shape {:?}; it must have the output's shape {:?}",
                        z.shape(),
                        g.out_shape()
                    ),
                ));
            }
        }
        let out = if dtype == DataType::Float64 {
            let ep = Epilogue {
                bias: bias.map(|b| b.data()),
                z: z.map(|z| z.data()),
                act: self.act,
            };
            let y = conv_fused::<f64>(&g, x.data(), w.data(), &ep);
            Tensor::from_vec(g.out_shape(), y)
        } else {
            let ux = common::upcast(x);
            let uw = match &self.packed_w {
                Some(p) => std::borrow::Cow::Borrowed(p),
                None => common::upcast(w),
            };
            let ub = bias.map(common::upcast);
            let uz = z.map(common::upcast);
            let ep = Epilogue {
                bias: ub.as_ref().map(|b| b.data()),
                z: uz.as_ref().map(|z| z.data()),
                act: self.act,
            };
            let y = conv_fused_f32(
                &g,
                ux.data(),
                uw.data(),
                self.constant_w.then_some(&self.packed),
                &ep,
            );
            common::tensor_from_f32(dtype, g.out_shape(), y)
        };
        Ok(vec![Value::Tensor(out)])
    }
}

fn make(
    ctx: &BuildContext<'_>,
    op: &'static str,
    fused: bool,
) -> Result<Box<dyn CpuKernel>, EpError> {
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
    // Constant float weights of a 2-D, not depthwise, convolution: packed once, at the
    // first run, for the kernel that input's geometry takes.
    let constant_w = matches!(
        ctx.constant(1),
        Some(Value::Tensor(t))
            if matches!(
                t.dtype(),
                DataType::Float32 | DataType::Float16 | DataType::BFloat16
            ) && t.shape().len() == 4
                && t.shape()[0] % group as usize == 0
                && t.shape()[1] > 1
                && t.numel() > 0
    );
    Ok(Box::new(ConvKernel {
        node: n.describe(),
        op,
        wa: WindowAttrs::parse(n)?,
        group: group as usize,
        act: if fused {
            Activation::parse(n)?
        } else {
            Activation::None
        },
        packed_w,
        constant_w,
        packed: PackedConv::default(),
    }))
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    make(ctx, "Conv", false)
}

fn build_fused(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    make(ctx, "FusedConv", true)
}

pub fn register(r: &mut CpuRegistry) {
    for since in [1, 11, 22] {
        r.register("", "Conv", since, build);
    }
    r.register("com.microsoft", "FusedConv", 1, build_fused);
}

#[cfg(test)]
#[path = "conv_tests.rs"]
mod tests;
