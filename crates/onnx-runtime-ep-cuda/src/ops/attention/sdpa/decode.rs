//! The decode path of [`Sdpa`]: `attn_dec_<dp>` (kernels/attention_fwd.cu) for a
//! (batch, kv head) of at most [`DEC_ROWS`] query rows, with its key splits.

use super::{i32_of, AttnParams, Fns, Problem, Sdpa};
use crate::ops::common::*;
use crate::runtime::Function;
use onnx_runtime_ep_api::EpResult;

/// The padded head sizes of the decode kernel (those whose 16-byte row loads fit one warp
/// are loaded per dtype).
pub(super) const DEC_HEADS: [usize; 4] = [32, 64, 128, 256];
/// Query rows per (batch, kv head) up to which the decode kernel runs (DEC_ROWS there).
pub(super) const DEC_ROWS: usize = 16;
/// Keys per split of the decode kernel at least, and splits at most (attn_combine's limit).
const DEC_MIN_KEYS: usize = 32;
const MAX_SPLITS: usize = 64;

impl Sdpa {
    /// The decode kernel: one block per (batch x kv head, split), every query row of the
    /// group in it; the keys split so that about two blocks per multiprocessor run, and the
    /// last split of a (batch, kv head) to finish merges them.
    pub(super) fn run_decode(
        &self,
        base: &Base,
        f: &Fns,
        p: &Problem,
        a: &mut AttnParams,
        func: Function,
    ) -> EpResult<()> {
        let bh = p.b * p.hkv;
        if bh > 65535 {
            return Err(base.err(format!(
                "batch x kv heads = {bh} exceeds the CUDA attention grid limit of 65535; run \
                 this node on the CPU provider"
            )));
        }
        let t = p.t().max(1);
        let target = 2 * base.rt.sm_count() as usize;
        let mut splits = target
            .div_ceil(bh)
            .min(t.div_ceil(DEC_MIN_KEYS))
            .clamp(1, MAX_SPLITS);
        let chunk = t.div_ceil(splits);
        splits = t.div_ceil(chunk);
        if splits > 1 {
            a.chunk = i32_of(base, chunk, "split chunk")?;
            self.split_partials(base, f, p, a, splits)?;
            // The last split of a (batch, kv head) to finish merges them (no attn_combine).
            a.count = self.counters.get_zeroed(base, 4 * bh, "split counters")?;
        }
        let mut args = [arg(&mut *a)];
        // SAFETY: attn_dec_* take one AttnParams by value; every view lies inside its tensor
        // and `part` holds the partials of `splits` splits.
        unsafe {
            base.rt.launch_cfg(
                func,
                (1, bh as u32, splits as u32),
                (128, 1, 1),
                0,
                &mut args,
            )?;
        }
        Ok(())
    }
}
