//! AffineGrid (opset 20): the sampling grid of an affine transform for GridSample, 2-D
//! (`size` = [N, C, H, W], output [N, H, W, 2]) or 3-D (`size` = [N, C, D, H, W], output
//! [N, D, H, W, 3]), align_corners 0 (pixel centres, the default) or 1 (corners). `size` is
//! read on the host (it decides the output shape), so the kernel captures after one eager
//! run. theta [N, k, k + 1] of any float type and any strides. Semantics mirror the CPU
//! provider (`onnx-runtime-ep-cpu/src/ops/tensor/grid.rs`).

use crate::ops::common::*;
use crate::ops::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

/// Mirrors `struct AffineParams` in `kernels/affine_grid.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct AffineParams {
    total: i64,
    points: i64,
    k: i32,
    align: i32,
    dims: [i64; 3],
    ts: [i64; 3],
    ys: [i64; 5],
}

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

struct AffineGridKernel {
    base: Base,
    host: HostReads,
    align: bool,
    fns: HashMap<DataType, Function>,
}

impl AffineGridKernel {
    /// The kernel for theta's dtype, the spatial sizes and the output shape.
    fn plan(
        &self,
        inputs: &[TensorView<'_>],
        host: &HostValues,
    ) -> EpResult<(Function, Vec<usize>, Vec<usize>)> {
        let base = &self.base;
        let theta = base.req(inputs, 0)?;
        base.req(inputs, 1)?;
        let f = *self.fns.get(&theta.dtype).ok_or_else(|| {
            base.unsupported(
                theta.dtype,
                "AffineGrid takes float, double, float16 and bfloat16",
            )
        })?;
        let size = host.get(1).cloned().flatten().unwrap_or_default();
        let k = match size.len() {
            4 => 2,
            5 => 3,
            _ => {
                return Err(base.err(format!(
                    "size {size:?} must be [N, C, H, W] or [N, C, D, H, W]"
                )))
            }
        };
        let dims = size
            .iter()
            .map(|&d| {
                usize::try_from(d)
                    .map_err(|_| base.err(format!("size must be non-negative, got {d}")))
            })
            .collect::<EpResult<Vec<usize>>>()?;
        let n = dims[0];
        if theta.shape != [n, k, k + 1] {
            return Err(base.err(format!(
                "theta must be [{n}, {k}, {}], got {:?}",
                k + 1,
                theta.shape
            )));
        }
        let sp = dims[2..].to_vec();
        let mut shape = vec![n];
        shape.extend_from_slice(&sp);
        shape.push(k);
        checked_numel(base, &shape)?;
        Ok((f, sp, shape))
    }
}

impl Kernel for AffineGridKernel {
    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let (_, _, shape) = self.plan(inputs, &self.host.peek(base, inputs)?)?;
        Ok(vec![(base.req(inputs, 0)?.dtype, shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let host = self.host.values(base, inputs, outputs)?;
        let (f, sp, shape) = self.plan(inputs, &host)?;
        let theta = base.req(inputs, 0)?;
        base.expect_outputs(outputs, &[(theta.dtype, shape.clone())])?;
        let y = &outputs[0];
        if y.numel() == 0 {
            return Ok(());
        }
        let k = sp.len();
        let points: usize = sp.iter().product();
        let total = shape[0] * points;
        let mut p = AffineParams {
            total: total as i64,
            points: points as i64,
            k: k as i32,
            align: self.align as i32,
            ..Default::default()
        };
        p.dims = fill(&sp.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.ts = fill(&istrides(theta.strides));
        p.ys = fill(&istrides(y.strides));
        let (mut pt, mut py) = (ptr_of(theta), mut_ptr_of(y));
        let mut args = [arg(&mut pt), arg(&mut py), arg(&mut p)];
        // SAFETY: affine_grid_T(theta, y, AffineParams) reads theta's N x k x (k + 1) view
        // and writes every element of the output's view once.
        unsafe { base.rt.launch(f, total as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }
}

fn affine_grid(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let align = attr_int(node, "align_corners")?.unwrap_or(0) != 0;
    let base = Base::new(rt, node);
    let module = base.module(&super::affine_grid_module())?;
    let mut fns = HashMap::new();
    for dtype in FLOATS {
        let tag = type_tag(dtype).expect("a typed dtype");
        fns.insert(dtype, module.function(&format!("affine_grid_{tag}"))?);
    }
    let host = HostReads::new(&base, &[1], "size input");
    Ok(Box::new(AffineGridKernel {
        base,
        host,
        align,
        fns,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "AffineGrid", 20, affine_grid);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(std::mem::size_of::<AffineParams>(), 24 + 8 * 11);
    }
}
