//! The session's internal MatMulSiluMul: `silu(A @ Wg) * (A @ Wu)` with two 2-D weights of one
//! shape and type (the gated feed-forward of float16 LLM exports). Decode shapes run as one
//! launch of the decode product reading both weights ([`super::gemv`], SiLU and the product in
//! its epilogue); other shapes as the two products on cuBLASLt and one element-wise pass
//! (`silu_mul_*`). Either way each product is rounded to A's type, then SiLU, then the
//! product, as the unfused graph computes.

use super::driver::{FloatEngine, FloatProblem};
use super::gemv::{Gemv, GemvOperands};
use super::shape::{product, Act};
use crate::ops::common::*;
use crate::ops::scratch::Scratch;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

struct SiluMulKernel {
    base: Base,
    float: FloatEngine,
    gemv: Gemv,
    /// `silu_mul_*` by dtype.
    finish: HashMap<DataType, Function>,
    /// The up product of the cuBLASLt path.
    up: Scratch,
    warmed: AtomicBool,
}

fn elem_bytes(d: DataType) -> Option<usize> {
    match d {
        DataType::Float32 => Some(4),
        DataType::Float16 | DataType::BFloat16 => Some(2),
        _ => None,
    }
}

impl SiluMulKernel {
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<(super::shape::Product, DataType)> {
        let base = &self.base;
        let a = base.req(inputs, 0)?;
        let wg = base.req(inputs, 1)?;
        let wu = base.req(inputs, 2)?;
        let dtype = a.dtype;
        if elem_bytes(dtype).is_none() {
            return Err(base.unsupported(
                dtype,
                "the CUDA MatMulSiluMul takes float32, float16 or bfloat16",
            ));
        }
        if wg.dtype != dtype || wu.dtype != dtype {
            return Err(base.err(format!(
                "A is {dtype} but the weights are {} and {}; all three must have one type",
                wg.dtype, wu.dtype
            )));
        }
        if wg.rank() != 2 || wg.shape != wu.shape {
            return Err(base.err(format!(
                "the gate and up weights must be 2-D of one shape, got {:?} and {:?}",
                wg.shape, wu.shape
            )));
        }
        Ok((product(base, a, wg, (false, false), (false, false))?, dtype))
    }
}

impl Kernel for SiluMulKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (prod, dtype) = self.plan(inputs)?;
        Ok(vec![(dtype, prod.out_shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (prod, dtype) = self.plan(inputs)?;
        base.expect_outputs(outputs, &[(dtype, prod.out_shape.clone())])?;
        let (wg, wu) = (base.req(inputs, 1)?, base.req(inputs, 2)?);
        let out = &outputs[0];
        let om = prod.out_mat(mut_ptr_of(out), out.strides);
        if wg.strides == wu.strides {
            if let Some(g) = GemvOperands::of(dtype, &prod, &om) {
                self.gemv.run(base, &g, None, Act::None, Some(ptr_of(wu)))?;
                self.warmed.store(true, Ordering::Release);
                return Ok(());
            }
        }
        if istrides(out.strides) != contiguous(out.shape) {
            return Err(base.err(
                "the cuBLASLt path of MatMulSiluMul writes a contiguous output only; give it \
                 a contiguous output buffer",
            ));
        }
        let n: usize = out.shape.iter().product();
        let es = elem_bytes(dtype).unwrap_or(2);
        let up = self.up.get(base, n.max(1) * es, "up product")?;
        let upm = prod.out_mat(up, out.strides);
        let bu = super::shape::Mat {
            ptr: ptr_of(wu),
            ..prod.b.clone()
        };
        let run = |a: super::shape::Mat, b: super::shape::Mat, target| {
            self.float.run(
                base,
                &FloatProblem {
                    dtype,
                    a,
                    b,
                    out: target,
                    alpha: 1.0,
                    beta: 0.0,
                    c: None,
                    bias: None,
                    act: Act::None,
                },
            )
        };
        run(prod.a.clone(), prod.b.clone(), om)?;
        run(prod.a.clone(), bu, upm)?;
        let f = self
            .finish
            .get(&dtype)
            .copied()
            .ok_or_else(|| base.unsupported(dtype, "no silu_mul kernel"))?;
        let (mut y, mut u, mut count) = (mut_ptr_of(out), up, n as i64);
        let mut args = [arg(&mut y), arg(&mut u), arg(&mut count)];
        // SAFETY: silu_mul_* read and write n contiguous elements of y (the output) and read n
        // of `up` (allocated for them).
        unsafe { base.rt.launch(f, n as u64, &mut args)? };
        self.warmed.store(true, Ordering::Release);
        Ok(())
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        let at = |i: usize| constant.get(i).copied().unwrap_or(false);
        self.gemv.set_constant_weights(at(1) && at(2));
    }

    fn capture_support(&self) -> CaptureSupport {
        if self.warmed.load(Ordering::Acquire) {
            CaptureSupport::Supported
        } else {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: the product's kernels and workspace are chosen on the first run; run it \
                     once eagerly before capturing",
                    self.base.node
                ),
            }
        }
    }
}

pub fn matmul_silu_mul(
    rt: &Arc<CudaRuntime>,
    req: &KernelRequest<'_>,
) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let float = FloatEngine::new(&base)?;
    let gemv = Gemv::new(&base);
    let module = base.module(&super::gemv_module())?;
    let mut finish = HashMap::new();
    for (dtype, tag) in [
        (DataType::Float32, "f32"),
        (DataType::Float16, "f16"),
        (DataType::BFloat16, "bf16"),
    ] {
        finish.insert(dtype, module.function(&format!("silu_mul_{tag}"))?);
    }
    Ok(Box::new(SiluMulKernel {
        up: Scratch::new(rt),
        base,
        float,
        gemv,
        finish,
        warmed: AtomicBool::new(false),
    }))
}
