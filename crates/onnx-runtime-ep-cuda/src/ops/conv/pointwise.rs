//! Pointwise convolutions (kernel 1 in every spatial dim, no pads, group 1; any rank, any
//! strides) as one strided-batched cuBLASLt GEMM per call.
//!
//! With P the output positions, `Y[n]` (row-major `[M, P]`) is `W [M, C] @ X'[n] [C, P]`,
//! where `X'` is X read at the convolution's strides (X itself for stride 1). cuBLASLt is
//! column-major, so it computes the transpose: `D = Y[n]^T = X'[n]^T W^T`, a column-major
//! `[P, M]` matrix with leading dimension P, which is exactly `Y[n]`'s row-major memory. X'
//! enters as the library's A (batch stride X's batch stride), W as B (batch stride 0: one
//! matrix for every image). A channels-last view of X is a transposed A, not a copy; views no
//! BLAS layout describes are packed by the caller.
//!
//! cuBLASLt's bias runs along the rows of D (here the positions, not the channels), so the
//! per-channel bias and activations run in the conv family's one-pass epilogue; a packed
//! residual Z enters as C with beta 1.

use super::ConvGeom;
use crate::ops::common::Base;
use crate::ops::gemm::blas::{BlasState, BlasType, Epi, LayoutKey, Plan as BlasPlan, PlanKey};
use crate::ops::gemm::shape::{alignment, major, Major};
use crate::runtime::{CuPtr, CudaRuntime};
use onnx_runtime_ep_api::{EpError, EpResult};
use std::collections::HashMap;
use std::ffi::c_void;
use std::sync::{Arc, Mutex};

/// Library plans one kernel keeps before it starts over (shapes that keep changing).
const MAX_PLANS: usize = 64;

/// Whether the convolution is a product over channels: kernel 1 everywhere, no pads, one
/// group (strides and dilations are free: dilation does not move a 1-wide window).
pub(super) fn eligible(g: &ConvGeom) -> bool {
    g.group == 1
        && g.win.kernel.iter().all(|&k| k == 1)
        && g.win.pad_begin.iter().all(|&p| p == 0)
        && g.win.pad_end.iter().all(|&p| p == 0)
}

/// The rows-by-positions matrix `[rows, P]` of a `[N, rows, spatial...]` view whose spatial
/// axes merge into one (strides in elements): its BLAS layout and its batch stride.
/// `None` when the spatial axes do not merge or no layout describes it.
pub(super) fn mat_view(shape: &[usize], strides: &[i64]) -> Option<(Major, i64)> {
    if shape.len() < 2 || shape.len() != strides.len() {
        return None;
    }
    let rows = shape[1];
    let p: usize = shape[2..].iter().product();
    // The merged positions axis: its stride, and the extent merged so far (innermost first).
    let mut sp: Option<i64> = None;
    let mut extent = 1i64;
    for k in (2..shape.len()).rev() {
        if shape[k] == 1 {
            continue;
        }
        match sp {
            None => {
                sp = Some(strides[k]);
                extent = shape[k] as i64;
            }
            Some(s) => {
                if strides[k] != s * extent {
                    return None;
                }
                extent *= shape[k] as i64;
            }
        }
    }
    let m = major(rows, p, strides[1], sp.unwrap_or(1))?;
    let batch = if shape[0] <= 1 { 0 } else { strides[0] };
    Some((m, batch))
}

/// W `[M, C, 1...]` as the `[M, C]` matrix: its BLAS layout.
pub(super) fn w_view(shape: &[usize], strides: &[usize]) -> Option<Major> {
    if shape.len() < 2 {
        return None;
    }
    major(shape[0], shape[1], strides[0] as i64, strides[1] as i64)
}

/// One library operand: column-major `rows x cols` with leading dimension `ld`, transposed
/// by the call when `trans`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Lib {
    pub trans: bool,
    pub rows: usize,
    pub cols: usize,
    pub ld: i64,
}

/// The library operands of `D = X'^T W^T` (see the module doc): A from X' (`[C, P]` in our
/// row-major terms), B from W (`[M, C]`), D `[P, M]` column-major with leading dimension P.
pub(super) fn libs(c: usize, m: usize, p: usize, x: Major, w: Major) -> (Lib, Lib, Lib) {
    let a = match x {
        // X'(c, p) at c * ld + p: column-major [P, C] with ld, which is X'^T itself.
        Major::Row(ld) => Lib {
            trans: false,
            rows: p,
            cols: c,
            ld,
        },
        // X'(c, p) at c + p * ld: column-major [C, P], transposed by the call.
        Major::Col(ld) => Lib {
            trans: true,
            rows: c,
            cols: p,
            ld,
        },
    };
    let b = match w {
        // W(m, c) at m * ld + c: column-major [C, M], which is W^T itself.
        Major::Row(ld) => Lib {
            trans: false,
            rows: c,
            cols: m,
            ld,
        },
        // W(m, c) at m + c * ld: column-major [M, C], transposed by the call.
        Major::Col(ld) => Lib {
            trans: true,
            rows: m,
            cols: c,
            ld,
        },
    };
    let d = Lib {
        trans: false,
        rows: p,
        cols: m,
        ld: p.max(1) as i64,
    };
    (a, b, d)
}

/// The sizes of one product: N images, C input channels, M output channels, P positions.
#[derive(Clone, Copy, Debug)]
pub(super) struct Dims {
    pub n: usize,
    pub c: usize,
    pub m: usize,
    pub p: usize,
}

/// The device operands of one product.
#[derive(Clone, Copy, Debug)]
pub(super) struct Operands {
    /// X' (the view at the convolution's strides), its layout and batch stride (elements).
    pub x: CuPtr,
    pub x_major: Major,
    pub x_batch: i64,
    pub w: CuPtr,
    pub w_major: Major,
    /// The packed `[N, M, P]` output.
    pub d: CuPtr,
    /// A packed residual of D's shape added with beta 1 (FusedConv's Z).
    pub z: Option<CuPtr>,
}

/// A kernel's cuBLASLt state and its plans.
pub(super) struct Engine {
    blas: Arc<BlasState>,
    plans: Mutex<HashMap<PlanKey, BlasPlan>>,
}

impl Engine {
    pub fn new(rt: &Arc<CudaRuntime>) -> EpResult<Engine> {
        Ok(Engine {
            blas: BlasState::of(rt)?,
            plans: Mutex::new(HashMap::new()),
        })
    }

    /// The plan key of a product (layouts, transposes, alignments).
    fn key(ty: BlasType, d: Dims, o: &Operands, width: usize) -> PlanKey {
        let (la, lb, ld) = libs(d.c, d.m, d.p, o.x_major, o.w_major);
        let batch = d.n.max(1);
        let layout = |l: &Lib, stride: i64| LayoutKey {
            rows: l.rows as u64,
            cols: l.cols as u64,
            ld: l.ld,
            batch: batch as i32,
            stride: if batch > 1 { stride } else { 0 },
        };
        let d_stride = (d.m * d.p) as i64;
        let w = width as i64;
        let batch_off = |s: i64| -> Vec<i64> {
            if batch > 1 {
                vec![s * w]
            } else {
                Vec::new()
            }
        };
        let d_align = alignment(o.d, &batch_off(d_stride));
        PlanKey {
            ty,
            trans_a: la.trans,
            trans_b: lb.trans,
            a: layout(&la, o.x_batch),
            b: layout(&lb, 0),
            c: layout(&ld, d_stride),
            d: layout(&ld, d_stride),
            epi: Epi::None,
            align: [
                alignment(o.x, &batch_off(o.x_batch)),
                alignment(o.w, &[]),
                o.z.map_or(d_align, |z| alignment(z, &batch_off(d_stride))),
                d_align,
                256,
            ],
        }
    }

    /// Enqueues `D = X'^T W^T (+ Z)` for every image on the runtime's stream; plans it first
    /// (eagerly only).
    pub fn run(
        &self,
        base: &Base,
        ty: BlasType,
        d: Dims,
        o: &Operands,
        width: usize,
    ) -> EpResult<()> {
        if d.n == 0 || d.m == 0 || d.p == 0 {
            return Ok(());
        }
        if d.n > i32::MAX as usize {
            return Err(base.err(format!(
                "{} images exceed cuBLASLt's batch count limit",
                d.n
            )));
        }
        let key = Self::key(ty, d, o, width);
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if !plans.contains_key(&key) {
            if base.rt.is_capturing() {
                return Err(EpError::Capture {
                    node: base.node.clone(),
                    message: format!(
                        "{}'s matrix-product plan for these operand layouts was not made \
                         eagerly; run it once with the same inputs before capturing",
                        base.op
                    ),
                });
            }
            if plans.len() >= MAX_PLANS {
                plans.clear();
            }
            let plan = BlasPlan::new(&self.blas, &key, 0)?;
            plans.insert(key, plan);
        }
        let plan = &plans[&key];
        let beta = if o.z.is_some() { 1.0 } else { 0.0 };
        let (a32, b32) = (1.0f32, beta as f32);
        let (a64, b64) = (1.0f64, beta);
        let (alpha, beta): (*const c_void, *const c_void) = if ty.double_scale() {
            (
                &a64 as *const f64 as *const c_void,
                &b64 as *const f64 as *const c_void,
            )
        } else {
            (
                &a32 as *const f32 as *const c_void,
                &b32 as *const f32 as *const c_void,
            )
        };
        base.rt.bind_thread()?;
        // SAFETY: the layouts describe the views the addresses point into (X' with its
        // strides, W, the packed output and Z of its shape); alpha and beta live until the
        // call returns (cuBLASLt reads host scalars when it enqueues).
        unsafe {
            plan.run(
                &self.blas,
                &base.rt,
                alpha,
                beta,
                [o.x, o.w, o.z.unwrap_or(o.d), o.d],
                None,
            )
        }
    }
}

#[cfg(test)]
mod tests {
    //! The library mapping against a host model of cuBLASLt's column-major strided-batched
    //! GEMM: row-major and channels-last X, plain and transposed W, batches, 1-D to 3-D.
    use super::*;

    /// What cuBLASLt computes (alpha 1, beta 0) for the mapping of `Y[n] = W @ X'[n]`.
    #[allow(clippy::too_many_arguments)]
    fn simulate(d: Dims, x: &[f64], xm: Major, xb: i64, w: &[f64], wm: Major, out: &mut [f64]) {
        let (la, lb, ld) = libs(d.c, d.m, d.p, xm, wm);
        let (rows_a, k_a) = if la.trans {
            (la.cols, la.rows)
        } else {
            (la.rows, la.cols)
        };
        let (k_b, cols_b) = if lb.trans {
            (lb.cols, lb.rows)
        } else {
            (lb.rows, lb.cols)
        };
        assert_eq!(k_a, k_b, "inner dimensions");
        assert_eq!((rows_a, cols_b), (ld.rows, ld.cols), "D's shape");
        for l in [&la, &lb, &ld] {
            assert!(l.ld >= l.rows.max(1) as i64, "leading dimension of {l:?}");
        }
        for n in 0..d.n as i64 {
            for r in 0..ld.rows as i64 {
                for col in 0..ld.cols as i64 {
                    let mut s = 0.0;
                    for k in 0..k_a as i64 {
                        let av = if la.trans {
                            x[(n * xb + k + r * la.ld) as usize]
                        } else {
                            x[(n * xb + r + k * la.ld) as usize]
                        };
                        let bv = if lb.trans {
                            w[(col + k * lb.ld) as usize]
                        } else {
                            w[(k + col * lb.ld) as usize]
                        };
                        s += av * bv;
                    }
                    out[(n * (d.m * d.p) as i64 + r + col * ld.ld) as usize] = s;
                }
            }
        }
    }

    fn span(shape: &[usize], strides: &[i64]) -> usize {
        1 + shape
            .iter()
            .zip(strides)
            .map(|(&d, &s)| d.saturating_sub(1) as i64 * s)
            .sum::<i64>() as usize
    }

    /// X' of `xs` with element strides `xst`, W `[m, c]` with strides `wst`: the simulated
    /// library result must equal the direct pointwise convolution into a packed Y.
    fn case(xs: &[usize], xst: &[i64], m: usize, wst: [usize; 2]) {
        let what = format!("X {xs:?}/{xst:?} W [{m}, {}]/{wst:?}", xs[1]);
        let (xm, xb) = mat_view(xs, xst).unwrap_or_else(|| panic!("{what}: no layout"));
        let c = xs[1];
        let wm = w_view(&[m, c, 1], &[wst[0], wst[1], 1]).expect("W layout");
        let p: usize = xs[2..].iter().product();
        let d = Dims { n: xs[0], c, m, p };
        let x: Vec<f64> = (0..span(xs, xst))
            .map(|i| ((i * 7919) % 23) as f64 - 11.0)
            .collect();
        let wlen = 1 + (m - 1) * wst[0] + (c - 1) * wst[1];
        let w: Vec<f64> = (0..wlen)
            .map(|i| ((i * 104729) % 19) as f64 - 9.0)
            .collect();
        let mut got = vec![f64::NAN; d.n * m * p];
        simulate(d, &x, xm, xb, &w, wm, &mut got);
        // Direct: position q of the spatial walk (row-major over xs[2..]).
        let sp = &xs[2..];
        for n in 0..d.n {
            for mo in 0..m {
                for q in 0..p {
                    let (mut rem, mut off) = (q, n as i64 * xst[0]);
                    for k in (0..sp.len()).rev() {
                        off += (rem % sp[k]) as i64 * xst[2 + k];
                        rem /= sp[k];
                    }
                    let want: f64 = (0..c)
                        .map(|ci| {
                            w[mo * wst[0] + ci * wst[1]] * x[(off + ci as i64 * xst[1]) as usize]
                        })
                        .sum();
                    let g = got[(n * m + mo) * p + q];
                    assert_eq!(g, want, "{what}: n {n} m {mo} q {q} ({xm:?}, {wm:?})");
                }
            }
        }
    }

    #[test]
    fn pointwise_mapping_matches_a_direct_convolution() {
        // Packed NCHW, 1-D, 2-D, 3-D, batch 1 and 3.
        case(&[1, 3, 5], &[15, 5, 1], 4, [3, 1]);
        case(&[2, 3, 4, 5], &[60, 20, 5, 1], 6, [3, 1]);
        case(&[3, 2, 2, 3, 2], &[24, 12, 6, 2, 1], 5, [2, 1]);
        // Channels-last X (a transposed A), padded batches, a transposed W.
        case(&[2, 3, 4, 5], &[60, 1, 15, 3], 4, [3, 1]);
        case(&[2, 3, 4, 5], &[70, 20, 5, 1], 4, [1, 4]);
        case(&[2, 3, 4, 5], &[61, 1, 15, 3], 2, [1, 2]);
        // Padded channel rows, one position, one channel, one output channel.
        case(&[2, 3, 4], &[30, 9, 1], 2, [3, 1]);
        case(&[2, 3, 1, 1], &[3, 1, 1, 1], 4, [3, 1]);
        case(&[2, 1, 3, 3], &[9, 9, 3, 1], 3, [1, 1]);
        case(&[2, 3, 3, 3], &[27, 9, 3, 1], 1, [3, 1]);
        // A stride-2 view of a [2, 3, 8] input (X' = X[..., ::2]) does not merge with stride
        // 2 as a row-major matrix: it has no layout (the caller packs it).
        assert!(mat_view(&[2, 3, 4], &[24, 8, 2]).is_none());
        // Spatial axes that do not merge.
        assert!(mat_view(&[1, 3, 4, 5], &[60, 20, 6, 1]).is_none());
    }
}
