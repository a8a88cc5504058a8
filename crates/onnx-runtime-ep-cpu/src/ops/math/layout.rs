//! Axis layouts shared by reductions, softmax, ArgMax, CumSum and TopK.

use rayon::prelude::*;

/// A tensor viewed as `[outer, len, inner]` around one axis (or a run of axes).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct AxisView {
    pub outer: usize,
    pub len: usize,
    pub inner: usize,
}

impl AxisView {
    /// The view around axes `[from, to)` of `shape`.
    pub fn new(shape: &[usize], from: usize, to: usize) -> AxisView {
        AxisView {
            outer: shape[..from].iter().product(),
            len: shape[from..to].iter().product(),
            inner: shape[to..].iter().product(),
        }
    }
}

/// Runs `f(block, out_block)` over consecutive blocks of `block_len` outputs, splitting the
/// blocks across threads when the work (`work` elements touched) is large.
pub fn par_blocks<O: Send>(
    out: &mut [O],
    block_len: usize,
    work: usize,
    f: impl Fn(usize, &mut [O]) + Sync,
) {
    if block_len == 0 || out.is_empty() {
        return;
    }
    let blocks = out.len() / block_len;
    if work >= super::elementwise::PAR_THRESHOLD && blocks > 1 {
        let min = (4096 / block_len).max(1);
        out.par_chunks_mut(block_len)
            .enumerate()
            .with_min_len(min)
            .for_each(|(b, o)| f(b, o));
    } else {
        for (b, o) in out.chunks_mut(block_len).enumerate() {
            f(b, o);
        }
    }
}
