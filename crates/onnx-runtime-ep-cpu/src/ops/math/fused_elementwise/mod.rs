//! `FusedElementwise` in the runtime's own domain ([`crate::INTERNAL_DOMAIN`]): a chain of
//! element-wise ops that the session's optimizer collapsed into one node (for an accelerator,
//! where one launch instead of ten is what makes small models fast). This CPU kernel is the
//! fallback when the device refuses the node and the reference the device kernels are tested
//! against: an interpreter over the node's program with numpy broadcasting.
//!
//! This module holds the kernel build (attribute checks, dtype dispatch) and its registration;
//! [`program`] the program's text format (ops, parser, printer, limits), re-exported here for
//! the session's optimizer and the device crates; `interp` the element loop that runs a
//! compiled program over broadcast inputs.
//!
//! Attribute `program` (a string) holds the program (see [`program`] for the syntax). Every
//! input has the program's dtype (float, double, float16 or bfloat16); the inputs broadcast
//! together (numpy rules) and every output has that broadcast shape and the dtype. Values
//! compute in f32 (f64 for double): half types are rounded once, at the outputs. Each op has
//! the semantics of the CPU provider's standalone kernel (the same f32 approximations of exp,
//! erf, tanh and sigmoid).
//!
//! Attribute `dtype` (int, the ONNX TensorProto code) names the dtype the optimizer saw; the
//! CPU kernel takes any float dtype, device kernels compile for that one.

mod interp;
pub mod program;
#[cfg(test)]
mod tests;

pub use program::{Instr, Op, Operand, Program, MAX_INPUTS, MAX_INSTRS, MAX_OUTPUTS};

use crate::kernel::{kernel_fn, tensor_input, BuildContext, CpuKernel};
use crate::{CpuRegistry, Tensor};
use half::{bf16, f16};
use interp::{run_typed, Compiled};
use onnx_runtime_ep_api::EpError;
use onnx_runtime_ir::DataType;

/// The op's name in [`crate::INTERNAL_DOMAIN`].
pub const OP: &str = "FusedElementwise";

fn invalid(desc: &str, message: String) -> EpError {
    EpError::InvalidInput {
        node: desc.to_string(),
        message,
    }
}

fn build(ctx: &BuildContext<'_>) -> Result<Box<dyn CpuKernel>, EpError> {
    let node = ctx.node;
    let desc = node.describe();
    let text = crate::attrs::opt_string(node, "program")?.ok_or_else(|| {
        EpError::invalid_attribute(node, "program", "the program attribute is required")
    })?;
    let prog = Program::parse(&text).map_err(|e| EpError::invalid_attribute(node, "program", e))?;
    let n_inputs = node.inputs.len();
    if prog.n_inputs() > n_inputs {
        return Err(EpError::invalid_attribute(
            node,
            "program",
            format!(
                "the program reads in{} but the node has {n_inputs} input(s)",
                prog.n_inputs() - 1
            ),
        ));
    }
    if n_inputs == 0 {
        return Err(invalid(&desc, format!("{OP} needs at least one input")));
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
    let compiled = Compiled::new(&prog, n_inputs);
    let n_out = prog.outputs.len();
    Ok(kernel_fn(move |inputs| {
        let ts: Vec<&Tensor> = (0..n_inputs)
            .map(|i| tensor_input(&desc, inputs, i))
            .collect::<Result<_, _>>()?;
        let dtype = ts[0].dtype();
        if let Some(t) = ts.iter().find(|t| t.dtype() != dtype) {
            return Err(invalid(
                &desc,
                format!(
                    "every input must have one dtype, got {dtype} and {}",
                    t.dtype()
                ),
            ));
        }
        match dtype {
            DataType::Float32 => run_typed::<f32>(&desc, &compiled, &ts, n_out),
            DataType::Float64 => run_typed::<f64>(&desc, &compiled, &ts, n_out),
            DataType::Float16 => run_typed::<f16>(&desc, &compiled, &ts, n_out),
            DataType::BFloat16 => run_typed::<bf16>(&desc, &compiled, &ts, n_out),
            d => Err(EpError::UnsupportedDtype {
                node: desc.clone(),
                op: OP.into(),
                dtype: d,
                detail: "FusedElementwise computes float, double, float16 and bfloat16".into(),
                hint: "run the graph with optimization below 'all' to keep the unfused nodes"
                    .into(),
            }),
        }
    }))
}

pub fn register(r: &mut CpuRegistry) {
    r.register(crate::INTERNAL_DOMAIN, OP, 1, build);
}
