//! Device workspace a kernel keeps between runs (split partials, counters, staging), safe
//! under CUDA graph capture: a captured graph keeps using the block it saw.

use crate::ops::common::Base;
use crate::runtime::{CuPtr, CudaRuntime};
use onnx_runtime_ep_api::{EpError, EpResult};
use std::sync::{Arc, Mutex};

/// Device workspace a kernel keeps between runs; grows when a call needs more. Blocks are
/// kept until the kernel is dropped, since a captured graph may still use an earlier one.
pub struct Scratch {
    rt: Arc<CudaRuntime>,
    blocks: Mutex<Vec<(CuPtr, usize)>>,
}

impl Scratch {
    pub fn new(rt: &Arc<CudaRuntime>) -> Self {
        Scratch {
            rt: rt.clone(),
            blocks: Mutex::new(Vec::new()),
        }
    }

    /// At least `bytes` bytes. During capture only an existing block (or a cached one) can
    /// be had; otherwise the error says to run the signature eagerly first.
    pub fn get(&self, base: &Base, bytes: usize, what: &str) -> EpResult<CuPtr> {
        let mut blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(ptr, cap)) = blocks.last() {
            if cap >= bytes {
                return Ok(ptr);
            }
        }
        let capturing = self.rt.is_capturing();
        let (ptr, cap) = self.rt.allocate(bytes.max(256), 256).map_err(|e| match e {
            EpError::Capture { .. } if capturing => EpError::Capture {
                node: base.node.clone(),
                message: format!(
                    "{} needs a device workspace of {bytes} bytes for its {what}, and none \
                         can be allocated during capture ({e}); run this shape once eagerly \
                         before capturing",
                    base.op
                ),
            },
            other => other,
        })?;
        blocks.push((ptr, cap));
        Ok(ptr)
    }

    /// As [`Scratch::get`], zero-filled when it is (re)allocated: for counters the kernels
    /// set back to zero themselves.
    pub fn get_zeroed(&self, base: &Base, bytes: usize, what: &str) -> EpResult<CuPtr> {
        let fresh = {
            let blocks = self.blocks.lock().unwrap_or_else(|e| e.into_inner());
            !matches!(blocks.last(), Some(&(_, cap)) if cap >= bytes)
        };
        let ptr = self.get(base, bytes, what)?;
        if fresh {
            // SAFETY: `ptr` holds at least `bytes` bytes (just allocated for them).
            unsafe { self.rt.htod(&vec![0u8; bytes.max(256)], ptr)? };
        }
        Ok(ptr)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let blocks = self.blocks.get_mut().unwrap_or_else(|e| e.into_inner());
        for (ptr, _) in blocks.drain(..) {
            let _ = self.rt.free(ptr);
        }
    }
}
