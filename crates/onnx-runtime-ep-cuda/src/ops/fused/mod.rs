//! The session's internal `FusedElementwise` (domain `ai.onnx_runtime_rs.internal`): a chain
//! of element-wise nodes the optimizer collapsed into one node with a `program` attribute
//! (see `codegen` for the syntax). At kernel build the program becomes CUDA C for the node's
//! `dtype` (float32 registers for float16/bfloat16, double for float64), compiled once through
//! the NVRTC cache (its key includes the source, so one chain compiles once across sessions
//! and processes). At execute: one launch, a vectorized flat walk when every operand is
//! contiguous (or a single element), else a strided walk over the broadcast. Inputs of
//! another dtype are a planned refusal (the CPU provider's kernel runs them).

pub mod codegen;

use super::common::*;
use super::elementwise::coalesce_n;
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CudaRuntime, Function};
use codegen::{Program, MAX_OPS};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::sync::Arc;

/// The session's internal domain (`onnx_runtime_ep_cpu::INTERNAL_DOMAIN`).
pub const INTERNAL_DOMAIN: &str = "ai.onnx_runtime_rs.internal";
pub const OP: &str = "FusedElementwise";
/// Axes of the strided walk (`FE_RANK`).
const FE_RANK: usize = 8;

/// Launch parameters, mirroring `FeParams` in `kernels/fused.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
struct FeParams {
    n: i64,
    rank: i32,
    mode: i32,
    narrow: i32,
    _pad: i32,
    dims: [i64; FE_RANK],
    st: [[i64; FE_RANK]; MAX_OPS],
    ptr: [u64; MAX_OPS],
}

impl FeParams {
    fn zeroed() -> Self {
        FeParams {
            n: 0,
            rank: 0,
            mode: 0,
            narrow: 0,
            _pad: 0,
            dims: [0; FE_RANK],
            st: [[0; FE_RANK]; MAX_OPS],
            ptr: [0; MAX_OPS],
        }
    }
}

pub struct FusedKernel {
    base: Base,
    dtype: DataType,
    n_in: usize,
    n_out: usize,
    /// Elements per thread of the flat walk (the kernel's `FE_V`).
    vec: usize,
    f: Function,
}

impl FusedKernel {
    fn check_inputs(&self, inputs: &[TensorView<'_>]) -> EpResult<Vec<usize>> {
        let mut shapes: Vec<&[usize]> = Vec::with_capacity(self.n_in);
        for k in 0..self.n_in {
            let x = self.base.req(inputs, k)?;
            if x.dtype != self.dtype {
                return Err(self.base.unsupported(
                    x.dtype,
                    format!(
                        "this fused kernel was generated for {} inputs (input {k} is {})",
                        self.dtype, x.dtype
                    ),
                ));
            }
            shapes.push(x.shape);
        }
        let shape = broadcast_shapes(&self.base, &shapes)?;
        check_view_rank(&self.base, &shape)?;
        Ok(shape)
    }
}

impl Kernel for FusedKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let shape = self.check_inputs(inputs)?;
        Ok(vec![(self.dtype, shape); self.n_out])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let shape = self.check_inputs(inputs)?;
        let want = vec![(self.dtype, shape.clone()); self.n_out];
        base.expect_outputs(outputs, &want)?;
        let n = shape
            .iter()
            .try_fold(1usize, |n, &d| n.checked_mul(d))
            .ok_or_else(|| base.err(format!("shape {shape:?} has too many elements")))?;
        if n == 0 {
            return Ok(());
        }
        let mut p = FeParams::zeroed();
        p.n = n as i64;
        p.narrow = (n <= u32::MAX as usize) as i32;
        let views: Vec<&TensorView<'_>> = (0..self.n_in)
            .map(|k| base.req(inputs, k))
            .collect::<EpResult<_>>()?;
        for (k, x) in views.iter().enumerate() {
            p.ptr[k] = ptr_of(x);
        }
        for (o, out) in outputs.iter().take(self.n_out).enumerate() {
            p.ptr[self.n_in + o] = mut_ptr_of(out);
        }
        let aligned = |ptr: u64| ptr.is_multiple_of(16);
        let flat = outputs
            .iter()
            .take(self.n_out)
            .all(|o| o.is_contiguous() && aligned(mut_ptr_of(o)))
            && views.iter().all(|x| {
                x.numel() == 1 || (x.numel() == n && x.is_contiguous() && aligned(ptr_of(x)))
            });
        let threads = if flat {
            p.mode = 1;
            for (k, x) in views.iter().enumerate() {
                p.st[k][0] = (x.numel() != 1) as i64;
            }
            let v = self.vec;
            let nv = n / v;
            nv.max(n - nv * v).max(1) as u64
        } else {
            let mut strides: Vec<Vec<i64>> = Vec::with_capacity(self.n_in + self.n_out);
            for (k, x) in views.iter().enumerate() {
                strides.push(broadcast_strides(
                    base,
                    x.shape,
                    x.strides,
                    &shape,
                    &format!("input {k}"),
                )?);
            }
            for out in outputs.iter().take(self.n_out) {
                strides.push(istrides(out.strides));
            }
            let (dims, st) = coalesce_n(&shape, &strides);
            if dims.len() > FE_RANK {
                return Err(base.unsupported(
                    self.dtype,
                    format!(
                        "the strided walk has {} axes after merging; the fused CUDA kernel takes \
                         at most {FE_RANK}",
                        dims.len()
                    ),
                ));
            }
            p.mode = 0;
            p.rank = dims.len() as i32;
            for (slot, &d) in p.dims.iter_mut().zip(&dims) {
                *slot = d as i64;
            }
            for (k, s) in st.iter().enumerate() {
                p.st[k][..s.len()].copy_from_slice(s);
            }
            n as u64
        };
        let mut args = [arg(&mut p)];
        // SAFETY: fused_ew(FeParams) reads each input and writes each output only at the
        // offsets of the planned walk, which stay inside their views (the flat walk is taken
        // only for contiguous full-shape or single-element operands).
        unsafe { base.rt.launch(self.f, threads, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let text = attr_string(node, "program")?.ok_or_else(|| {
        EpError::invalid_attribute(node, "program", "the program attribute is required")
    })?;
    let prog = Program::parse(&text).map_err(|e| EpError::invalid_attribute(node, "program", e))?;
    let code = attr_int(node, "dtype")?.ok_or_else(|| {
        EpError::invalid_attribute(node, "dtype", "the dtype attribute is required")
    })?;
    let dtype = DataType::from_onnx(code as i32).ok_or_else(|| {
        EpError::invalid_attribute(node, "dtype", format!("{code} is not an ONNX dtype"))
    })?;
    let base = Base::new(rt, node);
    if !codegen::supports(dtype) {
        return Err(base.unsupported(
            dtype,
            "the fused CUDA kernel computes float, double, float16 and bfloat16",
        ));
    }
    let n_in = node.inputs.len();
    if node.inputs.iter().any(Option::is_none) {
        return Err(base.err("every input of a fused element-wise node must be wired"));
    }
    if prog.outputs.len() != node.outputs.len() {
        return Err(EpError::invalid_attribute(
            node,
            "program",
            format!(
                "the program has {} 'out' line(s) but the node has {} output(s)",
                prog.outputs.len(),
                node.outputs.len()
            ),
        ));
    }
    let spec = codegen::module(&prog, n_in, dtype)
        .map_err(|e| EpError::invalid_attribute(node, "program", e))?;
    let f = base.module(&spec)?.function("fused_ew")?;
    Ok(Box::new(FusedKernel {
        base,
        dtype,
        n_in,
        n_out: prog.outputs.len(),
        vec: codegen::vec_width(&prog, n_in, dtype),
        f,
    }))
}

pub fn register(r: &mut Registry) {
    r.register(INTERNAL_DOMAIN, OP, 1, build);
}

/// The modules of a program with every op, for each dtype (the compile test builds them).
pub fn modules() -> Vec<ModuleSpec> {
    let prog = codegen::every_op_program();
    [
        DataType::Float32,
        DataType::Float64,
        DataType::Float16,
        DataType::BFloat16,
    ]
    .iter()
    .map(|&d| codegen::module_for(&prog, 3, d).expect("the sample program is valid"))
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_match_the_kernel_layout() {
        // n, rank/mode/narrow/pad, dims, st, ptr.
        assert_eq!(
            std::mem::size_of::<FeParams>(),
            8 + 16 + 8 * FE_RANK + 8 * FE_RANK * MAX_OPS + 8 * MAX_OPS
        );
        // Kernel parameters must stay under CUDA's 4 KiB.
        assert!(std::mem::size_of::<FeParams>() < 4096);
    }

    #[test]
    fn sample_modules_cover_every_dtype() {
        let m = modules();
        assert_eq!(m.len(), 4);
        assert!(m[2].needs_half && m[3].needs_half && !m[0].needs_half);
    }
}
