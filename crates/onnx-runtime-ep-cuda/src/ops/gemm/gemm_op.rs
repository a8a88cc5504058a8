//! Gemm: `alpha * op(A) @ op(B) + beta * C`, C broadcast unidirectionally to [M, N] (scalar,
//! row, column or full; optional from opset 11). Float types on cuBLASLt (a row-vector C with
//! beta = 1 is the bias epilogue, a full C is the library's C matrix, other C's are broadcast
//! into the output first), the 32/64-bit integer types on the tiled integer kernel.

use super::driver::{CMat, FloatEngine, FloatProblem};
use super::integer::{self, int_factor, IntFns, IntProblem};
use super::shape::{Act, Mat};
use crate::ops::common::*;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

struct GemmKernel {
    base: Base,
    alpha: f32,
    beta: f32,
    trans_a: bool,
    trans_b: bool,
    c_required: bool,
    float: FloatEngine,
    ints: IntFns,
    warmed: AtomicBool,
}

impl GemmKernel {
    /// (M, K, N) and the dtype, with every check `execute` relies on.
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<(usize, usize, usize, DataType)> {
        let base = &self.base;
        let a = base.req(inputs, 0)?;
        let b = base.req(inputs, 1)?;
        let c = self.c(inputs)?;
        if a.rank() != 2 || b.rank() != 2 {
            return Err(base.err(format!(
                "A {:?} and B {:?} must be 2-D; use MatMul for batched products",
                a.shape, b.shape
            )));
        }
        let (m, k) = if self.trans_a {
            (a.shape[1], a.shape[0])
        } else {
            (a.shape[0], a.shape[1])
        };
        let (kb, n) = if self.trans_b {
            (b.shape[1], b.shape[0])
        } else {
            (b.shape[0], b.shape[1])
        };
        if k != kb {
            return Err(base.err(format!(
                "inner dimensions differ: op(A) is [{m}, {k}], op(B) is [{kb}, {n}]"
            )));
        }
        let dtype = a.dtype;
        for t in std::iter::once(b).chain(c) {
            if t.dtype != dtype {
                return Err(base.err(format!(
                    "inputs mix {dtype} and {}; all must have one type",
                    t.dtype
                )));
            }
        }
        match dtype {
            DataType::Float32 | DataType::Float16 | DataType::BFloat16 | DataType::Float64 => {}
            DataType::Int32 | DataType::Int64 | DataType::Uint32 | DataType::Uint64 => {}
            other => {
                return Err(base.unsupported(
                    other,
                    "Gemm takes float32, float16, bfloat16, float64, int32, int64, uint32 or \
                     uint64",
                ))
            }
        }
        Ok((m, k, n, dtype))
    }

    fn c<'a, 'b>(&self, inputs: &'b [TensorView<'a>]) -> EpResult<Option<&'b TensorView<'a>>> {
        if self.c_required {
            self.base.req(inputs, 2).map(Some)
        } else {
            Ok(self.base.input(inputs, 2))
        }
    }

    /// C's strides over the [m, n] output, or an error when it does not broadcast there.
    fn c_mat(&self, c: &TensorView<'_>, m: usize, n: usize) -> EpResult<CMat> {
        let base = &self.base;
        let fits = c.rank() <= 2
            && c.shape
                .iter()
                .rev()
                .zip([n, m])
                .all(|(&d, want)| d == 1 || d == want);
        if !fits {
            return Err(base.err(format!(
                "C of shape {:?} does not broadcast to [{m}, {n}]",
                c.shape
            )));
        }
        let s = broadcast_strides(base, c.shape, c.strides, &[m, n], "C")?;
        Ok(CMat {
            ptr: ptr_of(c),
            rs: s[0],
            cs: s[1],
        })
    }
}

impl Kernel for GemmKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let (m, _, n, dtype) = self.plan(inputs)?;
        Ok(vec![(dtype, vec![m, n])])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (m, _, n, dtype) = self.plan(inputs)?;
        base.expect_outputs(outputs, &[(dtype, vec![m, n])])?;
        let a = base.req(inputs, 0)?;
        let b = base.req(inputs, 1)?;
        let c = self.c(inputs)?;
        let out = &outputs[0];
        let am = Mat::of(ptr_of(a), a.shape, a.strides, true, self.trans_a, false);
        let bm = Mat::of(ptr_of(b), b.shape, b.strides, false, self.trans_b, false);
        let om = Mat {
            ptr: mut_ptr_of(out),
            batch: Vec::new(),
            bstrides: Vec::new(),
            rows: m,
            cols: n,
            rs: out.strides[0] as i64,
            cs: out.strides[1] as i64,
        };
        if let Some(f) = self.ints.get(dtype) {
            // The CPU provider adds beta * C whenever C is given (checking its shape).
            let cm = c.map(|c| self.c_mat(c, m, n)).transpose()?;
            integer::launch(
                base,
                f,
                &IntProblem {
                    a: &am,
                    b: &bm,
                    out: &om,
                    za: None,
                    zb: None,
                    c: cm,
                    alpha: int_factor(self.alpha as f64, dtype),
                    beta: int_factor(self.beta as f64, dtype),
                    quant: None,
                },
            )?;
        } else {
            // With beta = 0, C is not read (as on the CPU provider).
            let cm = match c {
                Some(c) if self.beta != 0.0 => Some(self.c_mat(c, m, n)?),
                _ => None,
            };
            self.float.run(
                base,
                &FloatProblem {
                    dtype,
                    a: am,
                    b: bm,
                    out: om,
                    alpha: self.alpha as f64,
                    beta: self.beta as f64,
                    c: cm,
                    bias: None,
                    act: Act::None,
                },
            )?;
        }
        self.warmed.store(true, Ordering::Release);
        Ok(())
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

pub fn gemm(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let n = req.node;
    let base = Base::new(rt, n);
    let float = FloatEngine::new(&base)?;
    let ints = IntFns::load(&base)?;
    Ok(Box::new(GemmKernel {
        alpha: attr_float(n, "alpha")?.unwrap_or(1.0),
        beta: attr_float(n, "beta")?.unwrap_or(1.0),
        trans_a: attr_int(n, "transA")?.unwrap_or(0) != 0,
        trans_b: attr_int(n, "transB")?.unwrap_or(0) != 0,
        c_required: req.opset < 11,
        base,
        float,
        ints,
        warmed: AtomicBool::new(false),
    }))
}
