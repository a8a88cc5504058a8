//! Einsum (opset 12): every equation the CPU provider accepts (explicit or implicit output,
//! `...` with broadcasting, repeated indices within one operand, indices summed in one operand
//! only, scalars, any number of operands) for float32, float16, bfloat16, float64 and the 8- to
//! 64-bit integer types.
//!
//! The equation is parsed and checked when the kernel is built; the first call with a set of
//! shapes and strides makes a plan (kept until the shapes change), which every later call
//! replays with its own addresses. As on the CPU provider, operands are contracted pairwise
//! from the left:
//! - a repeated index within one operand is a diagonal, read through a strided view (the
//!   strides of the repeated axes added up), never copied;
//! - indices that appear in one operand of a pair only and are needed nowhere later are summed
//!   out first (`einsum_sum_*` of kernels/einsum.cu);
//! - each pairwise contraction is a batched `[batch, M, K] x [batch, K, N]` product on the
//!   float product driver (cuBLASLt) or the integer GEMM kernel. The index groups M, K and N are
//!   ordered so that each merges into one stride of the operands' own views (a transposed
//!   operand is a transpose flag, a broadcast batch a zero stride); only an operand whose
//!   groups cannot merge is copied into a contiguous block first, and the last product writes
//!   straight into the output when its layout allows;
//! - the output is the last product, or one strided copy / sum of what is left into it.
//!
//! Floats accumulate in float32 (float64 for float64); integer products and sums wrap.
//!
//! This module holds the kernel and its registration; [`equation`] parses and checks the
//! equation and resolves the shapes, [`plan`] plans the contractions.

mod equation;
mod plan;

use super::driver::{FloatEngine, FloatProblem};
use super::integer::{self, IntProblem};
use super::shape::{Act, Mat};
use crate::compiler::ModuleSpec;
use crate::ops::common::*;
use crate::ops::params::MAX_DIMS;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use equation::{parse_equation, resolve_shapes, Equation, Resolved};
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use plan::{make_plan, Buf, MatPlan, Plan, PlanKey, Step};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The reduction kernels.
pub(crate) fn einsum_module() -> ModuleSpec {
    ModuleSpec::new("einsum", include_str!("../../../kernels/einsum.cu")).with_half()
}

/// Threads per block of `einsum_sum_*` (EIN_THREADS).
const SUM_THREADS: u32 = 256;

/// Mirrors `EinSumParams` in einsum.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct EinSumParams {
    n_out: i64,
    n_red: i64,
    rank_k: i32,
    rank_r: i32,
    g: i32,
    lane_major: i32,
    dims_k: [i64; MAX_DIMS],
    sk_in: [i64; MAX_DIMS],
    sk_out: [i64; MAX_DIMS],
    dims_r: [i64; MAX_DIMS],
    sr_in: [i64; MAX_DIMS],
    src: u64,
    dst: u64,
}

/// The dtypes the kernel takes.
fn supported(d: DataType) -> bool {
    use DataType::*;
    matches!(
        d,
        Float32
            | Float16
            | BFloat16
            | Float64
            | Int8
            | Int16
            | Int32
            | Int64
            | Uint8
            | Uint16
            | Uint32
            | Uint64
    )
}

fn is_float(d: DataType) -> bool {
    matches!(
        d,
        DataType::Float32 | DataType::Float16 | DataType::BFloat16 | DataType::Float64
    )
}

struct EinsumKernel {
    base: Base,
    eq: Equation,
    float: FloatEngine,
    /// `igemm_{i8,i16,i32,i64,u8,u16,u32,u64}`.
    igemm: HashMap<DataType, Function>,
    /// `einsum_sum_<tag>` by dtype.
    sums: HashMap<DataType, Function>,
    copy: WidthFns,
    plan: Mutex<Option<(PlanKey, Arc<Plan>)>>,
    warmed: AtomicBool,
}

impl EinsumKernel {
    /// Labels, sizes and the output, with every check of the CPU provider.
    fn resolve(&self, inputs: &[TensorView<'_>]) -> EpResult<Resolved> {
        let base = &self.base;
        let eq = &self.eq;
        let mut views = Vec::with_capacity(eq.inputs.len());
        for i in 0..eq.inputs.len() {
            views.push(base.req(inputs, i)?);
        }
        if inputs.len() > views.len() {
            return Err(base.err(format!(
                "the equation names {} inputs but the node has {}",
                views.len(),
                inputs.len()
            )));
        }
        let dtype = views[0].dtype;
        for v in &views {
            if v.dtype != dtype {
                return Err(base.err(format!(
                    "inputs mix {dtype} and {}; all must have one type",
                    v.dtype
                )));
            }
        }
        if !supported(dtype) {
            return Err(base.unsupported(
                dtype,
                "the CUDA Einsum takes float32, float16, bfloat16, float64 and 8- to 64-bit \
                 integers",
            ));
        }
        let shapes: Vec<&[usize]> = views.iter().map(|v| v.shape).collect();
        let (labels, sizes, out, out_shape) = resolve_shapes(&base.node, eq, &shapes)?;
        checked_numel(base, &out_shape)?;
        Ok(Resolved {
            dtype,
            labels,
            sizes,
            out,
            out_shape,
        })
    }

    /// The plan for these views (the cached one when the shapes and strides repeat).
    fn plan(
        &self,
        r: &Resolved,
        inputs: &[TensorView<'_>],
        out_strides: &[usize],
    ) -> EpResult<Arc<Plan>> {
        let n = r.labels.len();
        let key = PlanKey {
            dtype: r.dtype,
            inputs: inputs[..n]
                .iter()
                .map(|v| (v.shape.to_vec(), v.strides.to_vec()))
                .collect(),
            out_strides: out_strides.to_vec(),
        };
        let mut slot = self.plan.lock().unwrap_or_else(|e| e.into_inner());
        if let Some((k, p)) = slot.as_ref() {
            if *k == key {
                return Ok(p.clone());
            }
        }
        let sm = self.base.rt.sm_count().max(1) as usize;
        let plan = Arc::new(make_plan(&self.base.node, sm, r, &key)?);
        *slot = Some((key, plan.clone()));
        Ok(plan)
    }
}

/// Temporary blocks of one call, returned to the cache once its work is enqueued (the stream
/// orders any later reuse after it).
struct Temps<'a> {
    rt: &'a CudaRuntime,
    blocks: Vec<CuPtr>,
}

impl Drop for Temps<'_> {
    fn drop(&mut self) {
        for &p in &self.blocks {
            let _ = self.rt.free(p);
        }
    }
}

impl Kernel for EinsumKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let r = self.resolve(inputs)?;
        Ok(vec![(r.dtype, r.out_shape)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let r = self.resolve(inputs)?;
        base.expect_outputs(outputs, &[(r.dtype, r.out_shape.clone())])?;
        let out = &outputs[0];
        let plan = self.plan(&r, inputs, out.strides)?;
        let dtype = r.dtype;
        let w = base.width(dtype)?;
        let rt = &*base.rt;
        let mut temps = Temps {
            rt,
            blocks: Vec::with_capacity(plan.temps.len()),
        };
        for &numel in &plan.temps {
            let (ptr, _) = rt.allocate(numel.saturating_mul(w).max(1), 256)?;
            temps.blocks.push(ptr);
        }
        let out_ptr = mut_ptr_of(out);
        let ptr = |b: Buf| match b {
            Buf::In(i) => ptr_of(&inputs[i]),
            Buf::Tmp(j) => temps.blocks[j],
            Buf::Out => out_ptr,
        };
        let mat = |m: &MatPlan| Mat {
            ptr: ptr(m.buf),
            batch: m.batch.clone(),
            bstrides: m.bstrides.clone(),
            rows: m.rows,
            cols: m.cols,
            rs: m.rs,
            cs: m.cs,
        };
        for step in &plan.steps {
            match step {
                Step::Sum {
                    src,
                    dst,
                    p,
                    blocks,
                } => {
                    if p.n_out == 0 {
                        continue;
                    }
                    let f = *self
                        .sums
                        .get(&dtype)
                        .ok_or_else(|| base.unsupported(dtype, "no Einsum sum kernel"))?;
                    let mut prm = EinSumParams {
                        src: ptr(*src),
                        dst: ptr(*dst),
                        ..**p
                    };
                    let mut args = [arg(&mut prm)];
                    // SAFETY: einsum_sum_T(EinSumParams) reads the source view and writes the
                    // destination view the plan describes, both inside their blocks.
                    unsafe {
                        rt.launch_cfg(f, (*blocks, 1, 1), (SUM_THREADS, 1, 1), 0, &mut args)?
                    };
                }
                Step::Copy {
                    src,
                    dst,
                    dims,
                    s_src,
                    s_dst,
                } => copy_strided(
                    base,
                    &self.copy,
                    w,
                    ptr(*src),
                    ptr(*dst),
                    dims,
                    s_src,
                    s_dst,
                    0,
                    0,
                )?,
                Step::Gemm { a, b, out } => {
                    let (am, bm, om) = (mat(a), mat(b), mat(out));
                    if is_float(dtype) {
                        self.float.run(
                            base,
                            &FloatProblem {
                                dtype,
                                a: am,
                                b: bm,
                                out: om,
                                alpha: 1.0,
                                beta: 0.0,
                                c: None,
                                bias: None,
                                act: Act::None,
                            },
                        )?;
                    } else {
                        let f = *self
                            .igemm
                            .get(&dtype)
                            .ok_or_else(|| base.unsupported(dtype, "no integer product kernel"))?;
                        integer::launch(
                            base,
                            f,
                            &IntProblem {
                                a: &am,
                                b: &bm,
                                out: &om,
                                za: None,
                                zb: None,
                                c: None,
                                alpha: 1,
                                beta: 0,
                                quant: None,
                            },
                        )?;
                    }
                }
            }
        }
        drop(temps);
        self.warmed.store(true, Ordering::Release);
        Ok(())
    }

    fn capture_support(&self) -> CaptureSupport {
        if self.warmed.load(Ordering::Acquire) {
            CaptureSupport::Supported
        } else {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: the Einsum plan, its temporary blocks and the cuBLASLt algorithm are \
                     made on the first run; run it once eagerly before capturing",
                    self.base.node
                ),
            }
        }
    }
}

pub fn einsum(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let eq = parse_equation(node)?;
    let base = Base::new(rt, node);
    let float = FloatEngine::new(&base)?;
    let gemm = base.module(&super::gemm_module())?;
    let mut igemm = HashMap::new();
    for (dtype, tag) in [
        (DataType::Int8, "i8"),
        (DataType::Int16, "i16"),
        (DataType::Int32, "i32"),
        (DataType::Int64, "i64"),
        (DataType::Uint8, "u8"),
        (DataType::Uint16, "u16"),
        (DataType::Uint32, "u32"),
        (DataType::Uint64, "u64"),
    ] {
        igemm.insert(dtype, gemm.function(&format!("igemm_{tag}"))?);
    }
    let module = base.module(&einsum_module())?;
    let mut sums = HashMap::new();
    for (dtype, tag, _) in TYPED.iter().filter(|t| supported(t.0)) {
        sums.insert(*dtype, module.function(&format!("einsum_sum_{tag}"))?);
    }
    let copy = WidthFns::load(&*base.module(&copy_module())?, "copy_nd", "")?;
    Ok(Box::new(EinsumKernel {
        base,
        eq,
        float,
        igemm,
        sums,
        copy,
        plan: Mutex::new(None),
        warmed: AtomicBool::new(false),
    }))
}
