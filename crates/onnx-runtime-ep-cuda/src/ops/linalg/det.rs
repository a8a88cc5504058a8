//! Det (opsets 11, 22): the determinants of the trailing square matrices of a batch (any
//! number of batch dims, any strides), by LU decomposition with partial pivoting, one block
//! per matrix; float and double work in double (the CPU's precision), float16 and bfloat16 in
//! float. The matrix sits in shared memory while it fits (order up to ~160 in double), else
//! in a global scratch block kept for the kernel's life (grown on an eager run; a capture
//! needs the size warmed). Semantics mirror the CPU provider
//! (`onnx-runtime-ep-cpu/src/ops/math/det.rs`); an order-0 matrix has determinant 1.

use crate::ops::common::*;
use crate::ops::pool::DeviceBlocks;
use crate::ops::Registry;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

const DET_MAX_BATCH: usize = 8;
/// The most dynamic shared memory a Det block takes (H100/H200 allow 227 KiB per block).
const SHARED_LIMIT: usize = 200 * 1024;
/// Blocks in flight when the matrices live in the global scratch (one scratch slot each).
const SCRATCH_BLOCKS: usize = 1024;

/// Mirrors `struct DetParams` in `kernels/linalg.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct DetParams {
    batch: i64,
    n: i64,
    brank: i32,
    _pad: i32,
    bdims: [i64; DET_MAX_BATCH],
    xs: [i64; DET_MAX_BATCH],
    ys: [i64; DET_MAX_BATCH],
    sr: i64,
    sc: i64,
}

/// (kernel, bytes of the accumulation type) by dtype.
const FLOATS: [(DataType, usize); 4] = [
    (DataType::Float32, 8),
    (DataType::Float64, 8),
    (DataType::Float16, 4),
    (DataType::BFloat16, 4),
];

struct DetKernel {
    base: Base,
    fns: HashMap<DataType, (Function, usize)>,
    blocks: DeviceBlocks,
    /// The global scratch block and its size in bytes.
    scratch: Mutex<Option<(CuPtr, usize)>>,
}

impl DetKernel {
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<((Function, usize), Vec<usize>)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let f = *self.fns.get(&x.dtype).ok_or_else(|| {
            base.unsupported(x.dtype, "Det takes float, double, float16 and bfloat16")
        })?;
        let r = x.rank();
        if r < 2 || x.shape[r - 1] != x.shape[r - 2] {
            return Err(base.err(format!(
                "Det needs square matrices in the last two dimensions, got shape {:?}",
                x.shape
            )));
        }
        base.check_rank(r - 2, DET_MAX_BATCH)?;
        Ok((f, x.shape[..r - 2].to_vec()))
    }

    /// A global scratch block of at least `bytes` (grown eagerly; during capture the warmed
    /// one must do).
    fn scratch(&self, bytes: usize) -> EpResult<CuPtr> {
        let mut s = self.scratch.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((ptr, have)) = *s {
            if have >= bytes {
                return Ok(ptr);
            }
        }
        if self.base.rt.is_capturing() {
            return Err(EpError::Capture {
                node: self.base.node.clone(),
                message: "Det of matrices too large for shared memory needs a scratch block \
                          that is allocated on an eager run; run this signature once eagerly \
                          before capturing"
                    .into(),
            });
        }
        let ptr = self.blocks.alloc(bytes)?;
        *s = Some((ptr, bytes));
        Ok(ptr)
    }
}

impl Kernel for DetKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (_, shape) = self.plan(inputs)?;
        Ok(vec![(self.base.req(inputs, 0)?.dtype, shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let ((f, acc), shape) = self.plan(inputs)?;
        let x = base.req(inputs, 0)?;
        base.expect_outputs(outputs, &[(x.dtype, shape.clone())])?;
        let y = &outputs[0];
        let batch = y.numel();
        if batch == 0 {
            return Ok(());
        }
        let r = x.rank();
        let n = x.shape[r - 1];
        let mut p = DetParams {
            batch: batch as i64,
            n: n as i64,
            brank: (r - 2) as i32,
            sr: x.strides[r - 2] as i64,
            sc: x.strides[r - 1] as i64,
            ..Default::default()
        };
        for k in 0..r - 2 {
            p.bdims[k] = x.shape[k] as i64;
            p.xs[k] = x.strides[k] as i64;
            p.ys[k] = y.strides[k] as i64;
        }
        let per_matrix = (n * n + n)
            .checked_mul(acc)
            .ok_or_else(|| base.err(format!("matrices of order {n} are too large")))?;
        let (grid, shared, mut scratch) = if per_matrix <= SHARED_LIMIT {
            (batch.min(i32::MAX as usize), per_matrix, 0 as CuPtr)
        } else {
            let blocks = batch.min(SCRATCH_BLOCKS);
            (blocks, 0, self.scratch(per_matrix * blocks)?)
        };
        let threads = if n <= 8 {
            32
        } else if n <= 24 {
            128
        } else {
            256
        };
        let (mut px, mut py) = (ptr_of(x), mut_ptr_of(y));
        let mut args = [arg(&mut px), arg(&mut py), arg(&mut scratch), arg(&mut p)];
        // SAFETY: det_T(x, y, scratch, DetParams) reads each matrix inside X's view, works in
        // `shared` bytes of shared memory or its block's slot of the scratch (grid slots of
        // per_matrix bytes), and writes each output element of its view once.
        unsafe {
            base.rt.launch_cfg(
                f,
                (grid as u32, 1, 1),
                (threads, 1, 1),
                shared as u32,
                &mut args,
            )
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn det(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let module = base.module(&super::linalg_module())?;
    let mut fns = HashMap::new();
    for (dtype, acc) in FLOATS {
        let tag = type_tag(dtype).expect("a typed dtype");
        fns.insert(dtype, (module.function(&format!("det_{tag}"))?, acc));
    }
    Ok(Box::new(DetKernel {
        base,
        fns,
        blocks: DeviceBlocks::new(rt),
        scratch: Mutex::new(None),
    }))
}

pub fn register(r: &mut Registry) {
    for since in [11, 22] {
        r.register("", "Det", since, det);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(std::mem::size_of::<DetParams>(), 24 + 8 * 8 * 3 + 16);
    }
}
