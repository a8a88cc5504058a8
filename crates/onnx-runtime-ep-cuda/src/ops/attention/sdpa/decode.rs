//! The decode path of [`Sdpa`] for a (batch, kv head) of at most [`DEC_ROWS`] query rows:
//! `attn_dec1_<dp>` (kernels/attention_dec.cu: a key per thread, a pass per 256 keys) where
//! its loads fit, else `attn_dec_<dp>` (kernels/attention_fwd.cu: 64-key chunks), each with
//! its key splits.

use super::{i32_of, AttnParams, Fns, Problem, Sdpa};
use crate::ops::common::*;
use crate::runtime::Function;
use onnx_runtime_ep_api::EpResult;

/// The padded head sizes of the decode kernel (those whose 16-byte row loads fit one warp
/// are loaded per dtype).
pub(super) const DEC_HEADS: [usize; 4] = [32, 64, 128, 256];
/// Query rows per (batch, kv head) up to which the decode kernel runs (DEC_ROWS there).
pub(super) const DEC_ROWS: usize = 16;
/// The padded head sizes of the one-pass decode kernel (rows of at most 256 bytes).
pub(super) const DEC1_HEADS: [usize; 3] = [32, 64, 128];
/// Keys of one pass of the one-pass kernel (DEC1_NT: its threads).
const DEC1_KEYS: usize = 256;
/// Keys per split of the decode kernel at least, and splits at most (attn_combine's limit).
const DEC_MIN_KEYS: usize = 32;
const MAX_SPLITS: usize = 64;

/// The one-pass kernel for `p` (head size `need`), when it takes the problem: 16-byte K and
/// V rows without a bias, head sizes in whole 16-byte chunks.
pub(super) fn one_pass(f: &Fns, p: &Problem, a: &AttnParams, need: usize) -> Option<Function> {
    let &(_, func) = f.dec1.iter().find(|(dp, _)| *dp >= need)?;
    let v = 16 / f.width;
    let rows_ok = |s: &super::AttnSrc| s.vec != 0 && s.bias == 0;
    let past_ok = p.past == 0 || (rows_ok(&a.pk) && rows_ok(&a.pv));
    let new_ok = p.skv == 0 || (rows_ok(&a.k) && rows_ok(&a.v));
    (past_ok && new_ok && p.d.is_multiple_of(v) && p.dv.is_multiple_of(v)).then_some(func)
}

/// The one-pass kernel's dynamic shared memory: the staged V rows and the probabilities.
fn dec1_smem(dp: usize, width: usize, acc_width: usize) -> usize {
    DEC1_KEYS * dp * width + DEC_ROWS * DEC1_KEYS * acc_width
}

impl Sdpa {
    /// The one-pass decode kernel: one block per (batch x kv head, split), a key per thread
    /// and pass; a split per 256 keys (one pass each) up to [`MAX_SPLITS`], merged by the
    /// last split to finish.
    pub(super) fn run_decode1(
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
        let need = p.d.max(p.dv).max(1);
        let dp = DEC1_HEADS
            .iter()
            .copied()
            .find(|&dp| dp >= need)
            .unwrap_or(DEC1_HEADS[DEC1_HEADS.len() - 1]);
        let t = p.t().max(1);
        let mut splits = t.div_ceil(DEC1_KEYS).clamp(1, MAX_SPLITS);
        let chunk = t.div_ceil(splits);
        splits = t.div_ceil(chunk);
        if splits > 1 {
            a.chunk = i32_of(base, chunk, "split chunk")?;
            self.split_partials(base, f, p, a, splits)?;
            a.count = self.counters.get_zeroed(base, 4 * bh, "split counters")?;
        }
        let smem = dec1_smem(dp, f.width, f.acc_width);
        let mut args = [arg(&mut *a)];
        // SAFETY: attn_dec1_* take one AttnParams by value; every view lies inside its tensor,
        // `part` holds the partials of `splits` splits and `smem` bytes are what the kernel's
        // dynamic shared memory holds for its head size.
        unsafe {
            base.rt.launch_cfg(
                func,
                (1, bh as u32, splits as u32),
                (DEC1_KEYS as u32, 1, 1),
                smem as u32,
                &mut args,
            )?;
        }
        Ok(())
    }

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
