//! Col2Im (opset 18): sums the columns of `[N, C * prod(block), L]` back into `[N, C, *image]`
//! images, one thread per image element gathering the blocks that cover it (no atomics, the
//! CPU provider's summation order). `image_shape` and `block_shape` are inputs read on the
//! host, so the kernel is capturable after one eager run.

use super::super::common::*;
use super::super::params::MAX_RANK;
use super::super::Registry;
use super::typed_module;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

/// Mirrors `Col2ImParams` in tensor_misc.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct Col2ImParams {
    n: i64,
    rank: i32,
    _pad: i32,
    channels: i64,
    ks: i64,
    blocks: i64,
    image: [i64; MAX_RANK],
    kernel: [i64; MAX_RANK],
    grid: [i64; MAX_RANK],
    strides: [i64; MAX_RANK],
    dilations: [i64; MAX_RANK],
    pads: [i64; MAX_RANK],
    xs: [i64; 3],
    os: [i64; 2 + MAX_RANK],
}

struct Col2ImKernel {
    base: Base,
    host: HostReads,
    strides: Option<Vec<i64>>,
    dilations: Option<Vec<i64>>,
    pads: Option<Vec<i64>>,
    typed: HashMap<DataType, Function>,
}

impl Col2ImKernel {
    /// The output shape and the launch parameters (less the output strides).
    fn plan(&self, x: &TensorView<'_>, host: &HostValues) -> EpResult<(Vec<usize>, Col2ImParams)> {
        let base = &self.base;
        let image = host.get(1).cloned().flatten().unwrap_or_default();
        let block = host.get(2).cloned().flatten().unwrap_or_default();
        if image.len() != block.len()
            || image.is_empty()
            || image.iter().chain(&block).any(|&v| v < 1)
            || x.rank() != 3
        {
            return Err(base.err(format!(
                "image_shape {image:?} and block_shape {block:?} must be positive and of one \
                 length, input 3-D (got {:?})",
                x.shape
            )));
        }
        let r = image.len();
        base.check_rank(2 + r, MAX_RANK)?;
        let list =
            |v: &Option<Vec<i64>>, len: usize, default: i64, what: &str| -> EpResult<Vec<i64>> {
                match v {
                    Some(v) if v.len() != len => Err(base.err(format!(
                        "{what} has {} values but there are {r} spatial dims",
                        v.len()
                    ))),
                    Some(v) => Ok(v.clone()),
                    None => Ok(vec![default; len]),
                }
            };
        let strides = list(&self.strides, r, 1, "strides")?;
        let dilations = list(&self.dilations, r, 1, "dilations")?;
        let pads = list(&self.pads, 2 * r, 0, "pads")?;
        let mut grid = vec![0i64; r];
        for d in 0..r {
            let ek = (block[d] - 1) * dilations[d] + 1;
            let span = image[d] + pads[d] + pads[d + r];
            if span < ek {
                return Err(base.err(format!(
                    "padded image extent {span} on spatial axis {d} is smaller than the dilated \
                     block {ek}"
                )));
            }
            grid[d] = (span - ek) / strides[d] + 1;
        }
        let ks: i64 = block.iter().product();
        let blocks: i64 = grid.iter().product();
        let (nb, ckk, l) = (x.shape[0], x.shape[1] as i64, x.shape[2] as i64);
        if ckk % ks != 0 || blocks != l {
            return Err(base.err(format!(
                "input {:?} does not match {blocks} blocks of {ks} elements per channel",
                x.shape
            )));
        }
        let channels = ckk / ks;
        let mut shape = vec![nb, channels as usize];
        shape.extend(image.iter().map(|&d| d as usize));
        let mut p = Col2ImParams {
            n: shape.iter().product::<usize>() as i64,
            rank: r as i32,
            channels,
            ks,
            blocks,
            ..Default::default()
        };
        p.image = fill(&image);
        p.kernel = fill(&block);
        p.grid = fill(&grid);
        p.strides = fill(&strides);
        p.dilations = fill(&dilations);
        p.pads = fill(&pads[..r]);
        p.xs = fill(&istrides(x.strides));
        Ok((shape, p))
    }

    fn kernel_for(&self, dtype: DataType) -> EpResult<Function> {
        self.typed.get(&dtype).copied().ok_or_else(|| {
            self.base
                .unsupported(dtype, "Col2Im takes float, double, float16 or bfloat16")
        })
    }
}

impl Kernel for Col2ImKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        self.kernel_for(x.dtype)?;
        let (shape, _) = self.plan(x, &self.host.peek(base, inputs)?)?;
        Ok(vec![(x.dtype, shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        let f = self.kernel_for(x.dtype)?;
        let host = self.host.values(base, inputs, outputs)?;
        let (shape, mut p) = self.plan(x, &host)?;
        base.expect_outputs(outputs, &[(x.dtype, shape)])?;
        let out = &outputs[0];
        p.os = fill(&istrides(out.strides));
        let (mut px, mut po) = (ptr_of(x), mut_ptr_of(out));
        let mut args = [arg(&mut px), arg(&mut po), arg(&mut p)];
        // SAFETY: col2im_T(x, out, Col2ImParams) reads x inside its view (block indices below
        // L, kernel indices below prod(block)) and writes each output element once.
        unsafe { base.rt.launch(f, p.n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

fn col2im(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let positive = |name: &str| -> EpResult<Option<Vec<i64>>> {
        let v = attr_ints(node, name)?;
        if v.as_ref().is_some_and(|v| v.iter().any(|&x| x < 1)) {
            return Err(EpError::invalid_attribute(node, name, "must be positive"));
        }
        Ok(v)
    };
    let strides = positive("strides")?;
    let dilations = positive("dilations")?;
    let pads = attr_ints(node, "pads")?;
    if pads.as_ref().is_some_and(|v| v.iter().any(|&x| x < 0)) {
        return Err(EpError::invalid_attribute(
            node,
            "pads",
            "must not be negative",
        ));
    }
    let base = Base::new(rt, node);
    let module = base.module(&typed_module())?;
    let mut typed = HashMap::new();
    for (dtype, tag) in [
        (DataType::Float32, "f32"),
        (DataType::Float64, "f64"),
        (DataType::Float16, "f16"),
        (DataType::BFloat16, "bf16"),
    ] {
        typed.insert(dtype, module.function(&format!("col2im_{tag}"))?);
    }
    let host = HostReads::new(&base, &[1, 2], "image_shape/block_shape inputs");
    Ok(Box::new(Col2ImKernel {
        base,
        host,
        strides,
        dilations,
        pads,
        typed,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "Col2Im", 18, col2im);
}
