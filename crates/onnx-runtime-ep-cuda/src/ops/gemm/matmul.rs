//! MatMul, com.microsoft FusedMatMul (alpha, transA/transB, transBatchA/transBatchB as stride
//! permutations) and the session's internal MatMulBias (`act(A @ B + bias)` with a 2-D B).

use super::driver::{FloatEngine, FloatProblem};
use super::gemv::{Gemv, GemvOperands};
use super::integer::{self, IntFns, IntProblem};
use super::shape::{product, Act, Product};
use crate::ops::common::*;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

#[derive(Clone, Copy, Debug)]
enum Kind {
    MatMul,
    Fused {
        alpha: f32,
        trans: (bool, bool),
        trans_batch: (bool, bool),
    },
    Bias {
        act: Act,
    },
}

struct MatMulKernel {
    base: Base,
    kind: Kind,
    float: FloatEngine,
    gemv: Gemv,
    ints: IntFns,
    warmed: AtomicBool,
}

fn is_float(d: DataType) -> bool {
    matches!(
        d,
        DataType::Float32 | DataType::Float16 | DataType::BFloat16 | DataType::Float64
    )
}

fn is_int(d: DataType) -> bool {
    matches!(
        d,
        DataType::Int32 | DataType::Int64 | DataType::Uint32 | DataType::Uint64
    )
}

impl MatMulKernel {
    /// The product's shapes and dtype, with every check `execute` relies on.
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<(Product, DataType)> {
        let base = &self.base;
        let a = base.req(inputs, 0)?;
        let b = base.req(inputs, 1)?;
        if a.dtype != b.dtype {
            return Err(base.err(format!(
                "A is {} but B is {}; both must have one type",
                a.dtype, b.dtype
            )));
        }
        let dtype = a.dtype;
        let (trans, trans_batch) = match self.kind {
            Kind::Fused {
                trans, trans_batch, ..
            } => (trans, trans_batch),
            _ => ((false, false), (false, false)),
        };
        if (trans_batch.0 || trans_batch.1) && (a.rank() < 3 || a.rank() != b.rank()) {
            return Err(base.err(format!(
                "transBatchA/transBatchB need A and B of one rank >= 3, got {:?} and {:?}",
                a.shape, b.shape
            )));
        }
        match self.kind {
            Kind::MatMul if is_float(dtype) || is_int(dtype) => {}
            Kind::MatMul => {
                return Err(base.unsupported(
                    dtype,
                    "MatMul takes float32, float16, bfloat16, float64, int32, int64, uint32 \
                     or uint64",
                ))
            }
            _ if is_float(dtype) => {}
            _ => {
                return Err(base.unsupported(
                    dtype,
                    format!(
                        "the CUDA {} takes float32, float16, bfloat16 or float64",
                        base.op
                    ),
                ))
            }
        }
        if let Kind::Bias { .. } = self.kind {
            if b.rank() != 2 {
                return Err(base.err(format!("MatMulBias takes a 2-D B, got shape {:?}", b.shape)));
            }
        }
        let prod = product(base, a, b, trans, trans_batch)?;
        if let Kind::Bias { .. } = self.kind {
            let bias = base.req(inputs, 2)?;
            if bias.shape != [prod.n] || bias.dtype != dtype {
                return Err(base.err(format!(
                    "the bias must be a 1-D {dtype} tensor of B's {} columns, got {} {:?}",
                    prod.n, bias.dtype, bias.shape
                )));
            }
        }
        Ok((prod, dtype))
    }
}

impl Kernel for MatMulKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (prod, dtype) = self.plan(inputs)?;
        Ok(vec![(dtype, prod.out_shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (prod, dtype) = self.plan(inputs)?;
        base.expect_outputs(outputs, &[(dtype, prod.out_shape.clone())])?;
        let out = &outputs[0];
        let om = prod.out_mat(mut_ptr_of(out), out.strides);
        if is_int(dtype) {
            let f = self
                .ints
                .get(dtype)
                .ok_or_else(|| base.unsupported(dtype, "no integer product kernel"))?;
            integer::launch(
                base,
                f,
                &IntProblem {
                    a: &prod.a,
                    b: &prod.b,
                    out: &om,
                    za: None,
                    zb: None,
                    c: None,
                    alpha: 1,
                    beta: 0,
                    quant: None,
                },
            )?;
        } else {
            let (alpha, bias, act) = match self.kind {
                Kind::MatMul => (1.0, None, Act::None),
                Kind::Fused { alpha, .. } => (alpha as f64, None, Act::None),
                Kind::Bias { act } => {
                    let bias = base.req(inputs, 2)?;
                    (1.0, Some((ptr_of(bias), bias.strides[0] as i64)), act)
                }
            };
            // Decode shapes (a few rows of A, a 2-D B): the bandwidth-bound kernel of our own.
            let unit_bias = bias.is_none_or(|(_, s)| s == 1 || prod.n == 1);
            if alpha == 1.0 && unit_bias {
                if let Some(g) = GemvOperands::of(dtype, &prod, &om) {
                    self.gemv.run(base, &g, bias.map(|b| b.0), act, None)?;
                    self.warmed.store(true, Ordering::Release);
                    return Ok(());
                }
            }
            self.float.run(
                base,
                &FloatProblem {
                    dtype,
                    a: prod.a,
                    b: prod.b,
                    out: om,
                    alpha,
                    beta: 0.0,
                    c: None,
                    bias,
                    act,
                },
            )?;
        }
        self.warmed.store(true, Ordering::Release);
        Ok(())
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.gemv
            .set_constant_weights(constant.get(1).copied().unwrap_or(false));
    }

    fn capture_support(&self) -> CaptureSupport {
        if self.warmed.load(Ordering::Acquire) || self.float.warmed() {
            CaptureSupport::Supported
        } else {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: the cuBLASLt algorithm is chosen on the first run; run it once eagerly \
                     before capturing",
                    self.base.node
                ),
            }
        }
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>, kind: Kind) -> EpResult<Box<dyn Kernel>> {
    let base = Base::new(rt, req.node);
    let float = FloatEngine::new(&base)?;
    let ints = IntFns::load(&base)?;
    let gemv = Gemv::new(&base);
    Ok(Box::new(MatMulKernel {
        base,
        kind,
        float,
        gemv,
        ints,
        warmed: AtomicBool::new(false),
    }))
}

pub fn matmul(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    build(rt, req, Kind::MatMul)
}

/// A 0/1 attribute (any non-zero value is true, as the CPU provider reads it).
fn flag(node: &onnx_runtime_ir::Node, name: &str) -> EpResult<bool> {
    Ok(attr_int(node, name)?.unwrap_or(0) != 0)
}

pub fn fused_matmul(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let n = req.node;
    let kind = Kind::Fused {
        alpha: attr_float(n, "alpha")?.unwrap_or(1.0),
        trans: (flag(n, "transA")?, flag(n, "transB")?),
        trans_batch: (flag(n, "transBatchA")?, flag(n, "transBatchB")?),
    };
    build(rt, req, kind)
}

pub fn matmul_bias(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let act = Act::parse(req.node)?;
    build(rt, req, Kind::Bias { act })
}
