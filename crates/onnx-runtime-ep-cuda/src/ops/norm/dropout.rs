//! Dropout at inference: the output is a copy of the input (one device copy when both are
//! contiguous) and the optional mask is all true (bool from opset 10; ones of the input type
//! before, float32 for a double input as the CPU provider gives). Training mode draws a random mask, which the CUDA provider does not do: opsets 1
//! and 6 with `is_test = 0` and a mask output are refused when the kernel is built (the session
//! places the node on the CPU), and a `training_mode` input (opset 12+) that is true at run
//! time with a non-zero ratio is an error. A constant `training_mode` is read once; a
//! non-constant one is read on the host every run (so such a kernel is not capturable).

use super::require_float;
use crate::ops::common::*;
use crate::ops::params::{FillParams, MAX_RANK};
use crate::ops::Registry;
use crate::runtime::CudaRuntime;
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::sync::{Arc, Mutex};

struct DropoutKernel {
    base: Base,
    opset: u64,
    copy: WidthFns,
    fill: WidthFns,
    constant: Vec<bool>,
    /// The `training_mode` value read last (kept for a constant input).
    training: Mutex<Option<bool>>,
}

impl DropoutKernel {
    /// Bool from opset 10. Before, the spec says the input's type; the CPU provider (the
    /// reference) builds that mask in float32 and narrows it only to float16/bfloat16, so a
    /// double input gets a float32 mask there, and here too until the CPU follows the spec.
    fn mask_dtype(&self, x: DataType) -> DataType {
        if self.opset >= 10 {
            DataType::Bool
        } else if x == DataType::Float64 {
            DataType::Float32
        } else {
            x
        }
    }

    /// Whether `training_mode` (input 2, opset 12+) is wired.
    fn has_training_input(&self) -> bool {
        self.opset >= 12 && self.base.has(2)
    }

    fn training_constant(&self) -> bool {
        self.constant.get(2).copied().unwrap_or(false)
    }

    /// The `training_mode` value of this call.
    fn training(&self, inputs: &[TensorView<'_>]) -> EpResult<bool> {
        let base = &self.base;
        if !self.has_training_input() {
            return Ok(false);
        }
        let mut cached = self.training.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = *cached {
            if self.training_constant() {
                return Ok(v);
            }
        }
        if base.rt.is_capturing() {
            return Err(EpError::Capture {
                node: base.node.clone(),
                message: "Dropout reads a non-constant training_mode input on the host, which \
                          cannot happen during capture; make it an initializer or drop it"
                    .into(),
            });
        }
        let view = base.req(inputs, 2)?;
        let v = if view.numel() == 0 {
            false
        } else {
            let w = base.width(view.dtype)?;
            let mut bytes = vec![0u8; w];
            // SAFETY: the view holds at least one element of `w` bytes at its pointer.
            unsafe { base.rt.dtoh(&mut bytes, ptr_of(view))? };
            bytes.iter().any(|&b| b != 0)
        };
        *cached = Some(v);
        Ok(v)
    }
}

impl Kernel for DropoutKernel {
    fn host_inputs(&self) -> Vec<usize> {
        // ratio only: training_mode is read with a device copy of its own.
        vec![1]
    }

    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        require_float(&self.base, x.dtype, "data")?;
        let mut types = vec![(x.dtype, x.shape.to_vec())];
        if self.base.outputs > 1 {
            types.push((self.mask_dtype(x.dtype), x.shape.to_vec()));
        }
        Ok(types)
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let want = self.output_types(inputs)?;
        base.outputs_at_least(outputs, 1)?;
        let given = outputs.len().min(want.len());
        base.expect_outputs(&outputs[..given], &want[..given])?;
        if self.training(inputs)? {
            let ratio = match base.input(inputs, 1) {
                Some(r) => read_f64s(base, r, "ratio")?.first().copied().unwrap_or(0.5),
                None => 0.5,
            };
            if ratio != 0.0 {
                // A planned refusal, said before anything launches: the session runs this
                // call on the node's CPU kernel, which draws the reference's mask.
                return Err(EpError::UnsupportedOp {
                    ep: "cuda".into(),
                    node: base.node.clone(),
                    domain_op: format!("{} with training_mode true (ratio {ratio})", base.op),
                    opset: 0,
                    hint: "training Dropout draws a random mask, which the CUDA provider does \
                           not implement; the CPU provider runs it, or set training_mode to \
                           false for inference"
                        .into(),
                });
            }
        }
        let x = base.req(inputs, 0)?;
        let width = base.width(x.dtype)?;
        let y = &outputs[0];
        copy_strided(
            base,
            &self.copy,
            width,
            ptr_of(x),
            mut_ptr_of(y),
            x.shape,
            &istrides(x.strides),
            &istrides(y.strides),
            0,
            0,
        )?;
        if given < 2 || x.numel() == 0 {
            return Ok(());
        }
        let mask = &outputs[1];
        base.check_rank(mask.shape.len(), MAX_RANK)?;
        let (bits, w): (u64, usize) = match mask.dtype {
            DataType::Bool => (1, 1),
            DataType::Float32 => (u64::from(1.0f32.to_bits()), 4),
            DataType::Float64 => (1.0f64.to_bits(), 8),
            DataType::Float16 => (u64::from(half::f16::ONE.to_bits()), 2),
            DataType::BFloat16 => (u64::from(half::bf16::ONE.to_bits()), 2),
            other => return Err(base.unsupported(other, "mask of this dtype")),
        };
        let mut p = FillParams {
            n: mask.numel() as i64,
            rank: mask.shape.len() as i32,
            value: [bits, 0],
            ..Default::default()
        };
        p.dims = fill(&mask.shape.iter().map(|&d| d as i64).collect::<Vec<_>>());
        p.strides = fill(&istrides(mask.strides));
        let mut pm = mut_ptr_of(mask);
        let mut args = [arg(&mut pm), arg(&mut p)];
        // SAFETY: fill_w{w}(out, FillParams) writes inside the mask view.
        unsafe { base.rt.launch(self.fill.get(w), p.n as u64, &mut args) }
    }

    fn capture_support(&self) -> CaptureSupport {
        if !self.has_training_input() {
            return CaptureSupport::Supported;
        }
        let read = self
            .training
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some();
        if self.training_constant() && read {
            CaptureSupport::Supported
        } else {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: Dropout reads its training_mode input on the host; make it a constant \
                     initializer and run once eagerly before capturing",
                    self.base.node
                ),
            }
        }
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.constant = constant.to_vec();
    }
}

fn dropout(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    if req.opset < 7 && attr_int(node, "is_test")?.unwrap_or(0) == 0 && node.outputs.len() > 1 {
        return Err(EpError::invalid_attribute(
            node,
            "is_test",
            "is_test = 0 with a mask output is training Dropout, which draws a random mask; \
             the CUDA provider runs Dropout for inference only (set is_test = 1, or run this \
             node on the CPU provider)",
        ));
    }
    let base = Base::new(rt, node);
    let module = base.module(&copy_module())?;
    Ok(Box::new(DropoutKernel {
        copy: WidthFns::load(&module, "copy_nd", "")?,
        fill: WidthFns::load(&module, "fill", "")?,
        base,
        opset: req.opset,
        constant: Vec::new(),
        training: Mutex::new(None),
    }))
}

pub fn register(r: &mut Registry) {
    for since in [1, 6, 7, 10, 12, 13, 22] {
        r.register("", "Dropout", since, dropout);
    }
}
