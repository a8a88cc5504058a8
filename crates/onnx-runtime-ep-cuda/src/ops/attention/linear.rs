//! LinearAttention (opset 27): recurrent linear attention over packed (B, T, H*D) query, key
//! and value with an optional (B, H_kv, d_k, d_v) past_state, under the `linear`, `gated`,
//! `delta` and `gated_delta` update rules (the CPU provider's semantics: the delta rule reads
//! the state after its decay). Query heads share KV heads in groups (GQA / MQA); decay is per
//! head (B, T, H_kv) or per key row (B, T, H_kv * d_k), beta per head or one per token.
//!
//! One launch of `kernels/linear_attention.cu` runs the whole time loop: a block per (batch,
//! KV head, slice of value columns) keeps its part of the state in registers across tokens,
//! each column spread over up to 32 lanes of a warp that reduce with shuffles (see
//! [`tiling`]). Inputs may be strided views; float, float16 and bfloat16 compute in float32,
//! and the states may be any of the three (present_state takes past_state's dtype, else the
//! query's). Capturable: no host reads, syncs or allocations.

use super::super::common::*;
use super::super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::DataType;
use std::sync::Arc;

const OP: &str = "LinearAttention";

/// The input dtypes, with their kernel-name tags.
const DTYPES: [(DataType, &str); 3] = [
    (DataType::Float32, "f32"),
    (DataType::Float16, "f16"),
    (DataType::BFloat16, "bf16"),
];

/// State rows each lane keeps in registers: the `_r{R}` kernel variants.
const ROWS: [usize; 4] = [4, 8, 16, 32];

/// The largest key head size the kernels take: 32 lanes of 32 rows.
const MAX_DK: usize = 32 * 32;

/// The module of every LinearAttention kernel (three dtypes, four row counts).
pub(super) fn module() -> ModuleSpec {
    ModuleSpec::new(
        "linear_attention",
        include_str!("../../kernels/linear_attention.cu"),
    )
    .with_half()
}

/// Mirrors `LinAttnParams` in linear_attention.cu.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct LinAttnParams {
    q: CuPtr,
    k: CuPtr,
    v: CuPtr,
    past: CuPtr,
    decay: CuPtr,
    beta: CuPtr,
    y: CuPtr,
    present: CuPtr,
    qs: [i64; 3],
    kst: [i64; 3],
    vs: [i64; 3],
    gs: [i64; 3],
    es: [i64; 3],
    ps: [i64; 4],
    os: [i64; 3],
    ss: [i64; 4],
    scale: f32,
    b: i32,
    t: i32,
    hq: i32,
    hkv: i32,
    dk: i32,
    dv: i32,
    lanes: i32,
    cols: i32,
    col_blocks: i32,
    decay_mode: i32,
    has_beta: i32,
    past_code: i32,
    present_code: i32,
}

/// How a block covers a head's state: rows per lane (`R`), lanes per value column (a power
/// of two, at most 32, so a column's lanes share a warp) and value columns per block (blocks
/// are whole warps of at most 256 threads). Columns shrink while the launch would give fewer
/// than two blocks per SM, to spread small batches over the GPU. None when d_k > [`MAX_DK`].
pub(crate) fn tiling(dk: usize, dv: usize, units: usize, sms: usize) -> Option<[usize; 3]> {
    let rows = ROWS.iter().copied().find(|&r| dk.div_ceil(r) <= 32)?;
    let lanes = dk.div_ceil(rows).max(1).next_power_of_two();
    let min_cols = 32 / lanes;
    let mut cols = (256 / lanes)
        .min(dv.max(1).next_power_of_two())
        .max(min_cols);
    while cols > min_cols && units.saturating_mul(dv.div_ceil(cols)) < 2 * sms {
        cols /= 2;
    }
    Some([rows, lanes, cols])
}

/// What one call computes.
struct Plan {
    dtype: DataType,
    state_dtype: DataType,
    b: usize,
    t: usize,
    dk: usize,
    dv: usize,
    /// 0: no decay, 1: per head, 2: per key row.
    decay_mode: i32,
}

struct LinearAttention {
    base: Base,
    /// By input dtype (as in [`DTYPES`]), then by rows per lane (as in [`ROWS`]).
    fns: [[Function; 4]; 3],
    hq: usize,
    hkv: usize,
    /// The scale attribute; 0 means 1 / sqrt(d_k).
    scale: f32,
    gated: bool,
    delta: bool,
}

fn is_float(dtype: DataType) -> bool {
    DTYPES.iter().any(|d| d.0 == dtype)
}

impl LinearAttention {
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<Plan> {
        let base = &self.base;
        let q = base.req(inputs, 0)?;
        let k = base.req(inputs, 1)?;
        let v = base.req(inputs, 2)?;
        let past = base.input(inputs, 3);
        let decay = base.input(inputs, 4);
        let beta = base.input(inputs, 5);
        let dtype = q.dtype;
        if !is_float(dtype) {
            return Err(base.unsupported(dtype, "LinearAttention takes float, float16 or bfloat16"));
        }
        for (what, t) in [
            ("key", Some(k)),
            ("value", Some(v)),
            ("decay", decay),
            ("beta", beta),
        ] {
            if let Some(t) = t {
                base.same_dtype(dtype, t.dtype, what)?;
            }
        }
        for (what, t) in [("query", q), ("key", k), ("value", v)] {
            if t.rank() != 3 {
                return Err(base.err(format!("{what} must be (B, T, H*D), got {:?}", t.shape)));
            }
        }
        let (b, t) = (q.shape[0], q.shape[1]);
        let (hq, hkv) = (self.hq, self.hkv);
        if q.shape[2] % hq != 0 || v.shape[2] % hkv != 0 {
            return Err(base.err(format!(
                "query {:?} / value {:?}: the last dims must divide by q_num_heads {hq} / \
                 kv_num_heads {hkv}",
                q.shape, v.shape
            )));
        }
        let (dk, dv) = (q.shape[2] / hq, v.shape[2] / hkv);
        if k.shape != [b, t, hkv * dk] || v.shape[..2] != [b, t] {
            return Err(base.err(format!(
                "key {:?} / value {:?} do not match query {:?} (key must be [{b}, {t}, {}])",
                k.shape,
                v.shape,
                q.shape,
                hkv * dk
            )));
        }
        if self.gated != decay.is_some() || self.delta != beta.is_some() {
            return Err(base.err(
                "decay is required exactly for the gated rules and beta exactly for the delta \
                 rules (update_rule)",
            ));
        }
        let decay_mode = match decay {
            None => 0,
            Some(d) if d.shape == [b, t, hkv] => 1,
            Some(d) if d.shape == [b, t, hkv * dk] => 2,
            Some(d) => {
                return Err(base.err(format!(
                    "decay {:?} must be [{b}, {t}, {hkv}] or [{b}, {t}, {}]",
                    d.shape,
                    hkv * dk
                )))
            }
        };
        if let Some(x) = beta {
            if x.shape != [b, t, hkv] && x.shape != [b, t, 1] {
                return Err(base.err(format!(
                    "beta {:?} must be [{b}, {t}, {hkv}] or [{b}, {t}, 1]",
                    x.shape
                )));
            }
        }
        let state_dtype = match past {
            Some(p) => {
                if !is_float(p.dtype) {
                    return Err(
                        base.unsupported(p.dtype, "past_state must be float, float16 or bfloat16")
                    );
                }
                if p.shape != [b, hkv, dk, dv] {
                    return Err(base.err(format!(
                        "past_state {:?} must be [{b}, {hkv}, {dk}, {dv}]",
                        p.shape
                    )));
                }
                p.dtype
            }
            None => dtype,
        };
        if dk > MAX_DK {
            return Err(base.unsupported(
                dtype,
                format!(
                    "the CUDA LinearAttention takes key heads of up to {MAX_DK}, got {dk}; run \
                     this node on the CPU provider"
                ),
            ));
        }
        let limit = i32::MAX as usize;
        if [t, dk, dv, b, hq * dk.max(dv)].iter().any(|&n| n > limit) {
            return Err(base.err("a dimension exceeds the CUDA kernel's 32-bit limit"));
        }
        Ok(Plan {
            dtype,
            state_dtype,
            b,
            t,
            dk,
            dv,
            decay_mode,
        })
    }

    fn types(&self, plan: &Plan) -> OutputTypes {
        vec![
            (plan.dtype, vec![plan.b, plan.t, self.hq * plan.dv]),
            (plan.state_dtype, vec![plan.b, self.hkv, plan.dk, plan.dv]),
        ]
    }
}

/// The element strides of a 3-D view.
fn strides3(v: &TensorView<'_>) -> [i64; 3] {
    let s = istrides(v.strides);
    [s[0], s[1], s[2]]
}

impl Kernel for LinearAttention {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let plan = self.plan(inputs)?;
        Ok(self.types(&plan))
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let plan = self.plan(inputs)?;
        let want = self.types(&plan);
        base.expect_outputs(&outputs[..outputs.len().min(1)], &want[..1])?;
        // present_state is optional for the caller and may take any float dtype.
        let present = match outputs.get(1) {
            Some(s) => {
                if !is_float(s.dtype) {
                    return Err(base
                        .unsupported(s.dtype, "present_state must be float, float16 or bfloat16"));
                }
                base.expect_shape(s, &want[1].1, 1)?;
                Some(s)
            }
            None => None,
        };
        let (b, t, dk, dv) = (plan.b, plan.t, plan.dk, plan.dv);
        let units = b * self.hkv;
        if units == 0 || dv == 0 || (t == 0 && present.is_none()) {
            return Ok(());
        }
        let sms = base.rt.sm_count() as usize;
        let [rows, lanes, cols] = tiling(dk, dv, units, sms).expect("d_k checked by plan");
        let col_blocks = dv.div_ceil(cols);
        let blocks = units
            .checked_mul(col_blocks)
            .filter(|&n| n <= i32::MAX as usize)
            .ok_or_else(|| base.err("batch x kv_num_heads x value blocks exceeds the grid"))?;
        let q = base.req(inputs, 0)?;
        let k = base.req(inputs, 1)?;
        let v = base.req(inputs, 2)?;
        let past = base.input(inputs, 3);
        let decay = base.input(inputs, 4);
        let beta = base.input(inputs, 5);
        let y = &outputs[0];
        let scale = if self.scale == 0.0 {
            1.0 / (dk as f32).sqrt()
        } else {
            self.scale
        };
        let s4 = |s: &[usize]| -> [i64; 4] { [s[0] as i64, s[1] as i64, s[2] as i64, s[3] as i64] };
        let beta_strides = beta.map_or([0; 3], |x| {
            let mut s = strides3(x);
            if x.shape[2] == 1 {
                s[2] = 0;
            }
            s
        });
        let mut p = LinAttnParams {
            q: ptr_of(q),
            k: ptr_of(k),
            v: ptr_of(v),
            past: past.map_or(0, ptr_of),
            decay: decay.map_or(0, ptr_of),
            beta: beta.map_or(0, ptr_of),
            y: mut_ptr_of(y),
            present: present.map_or(0, mut_ptr_of),
            qs: strides3(q),
            kst: strides3(k),
            vs: strides3(v),
            gs: decay.map_or([0; 3], strides3),
            es: beta_strides,
            ps: past.map_or([0; 4], |x| s4(x.strides)),
            os: [
                y.strides[0] as i64,
                y.strides[1] as i64,
                y.strides[2] as i64,
            ],
            ss: present.map_or([0; 4], |x| s4(x.strides)),
            scale,
            b: b as i32,
            t: t as i32,
            hq: self.hq as i32,
            hkv: self.hkv as i32,
            dk: dk as i32,
            dv: dv as i32,
            lanes: lanes as i32,
            cols: cols as i32,
            col_blocks: col_blocks as i32,
            decay_mode: plan.decay_mode,
            has_beta: beta.is_some() as i32,
            past_code: past.map_or(0, |x| x.dtype.onnx_code()),
            present_code: present.map_or(0, |x| x.dtype.onnx_code()),
        };
        let di = DTYPES
            .iter()
            .position(|d| d.0 == plan.dtype)
            .expect("dtype checked by plan");
        let ri = ROWS.iter().position(|&r| r == rows).expect("a row variant");
        let f = self.fns[di][ri];
        let mut args = [arg(&mut p)];
        // SAFETY: linear_attention_<T>_r<R>(LinAttnParams) runs blocks of lanes * cols
        // threads (at most 256, whole warps, as `tiling` gives); it reads q, k, v, decay,
        // beta and past_state inside their views (shapes checked by `plan`) and writes the
        // output and present_state inside theirs.
        unsafe {
            base.rt.launch_cfg(
                f,
                (blocks as u32, 1, 1),
                ((lanes * cols) as u32, 1, 1),
                0,
                &mut args,
            )
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }
}

fn build(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let hq = attr_int(node, "q_num_heads")?.unwrap_or(0);
    let hkv = attr_int(node, "kv_num_heads")?.unwrap_or(0);
    if hq <= 0 || hkv <= 0 || hq % hkv != 0 {
        return Err(EpError::invalid_attribute(
            node,
            "q_num_heads",
            format!(
                "q_num_heads ({hq}) must be a positive multiple of kv_num_heads ({hkv}); both \
                 are required"
            ),
        ));
    }
    let rule = attr_string(node, "update_rule")?.unwrap_or_else(|| "gated_delta".into());
    let (gated, delta) = match rule.as_str() {
        "linear" => (false, false),
        "gated" => (true, false),
        "delta" => (false, true),
        "gated_delta" => (true, true),
        other => {
            return Err(EpError::invalid_attribute(
                node,
                "update_rule",
                format!("'{other}' is not linear, gated, delta or gated_delta"),
            ))
        }
    };
    // chunk_size only tunes chunked prefill algorithms; the recurrent kernel needs none.
    attr_int(node, "chunk_size")?;
    let base = Base::new(rt, node);
    let module = base.module(&module())?;
    let load = |tag: &str| -> EpResult<[Function; 4]> {
        let f = |r: usize| module.function(&format!("linear_attention_{tag}_r{r}"));
        Ok([f(ROWS[0])?, f(ROWS[1])?, f(ROWS[2])?, f(ROWS[3])?])
    };
    let fns = [load(DTYPES[0].1)?, load(DTYPES[1].1)?, load(DTYPES[2].1)?];
    Ok(Box::new(LinearAttention {
        base,
        fns,
        hq: hq as usize,
        hkv: hkv as usize,
        scale: attr_float(node, "scale")?.unwrap_or(0.0),
        gated,
        delta,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", OP, 27, build);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tiling_covers_the_key_rows_in_whole_warps() {
        for dk in [0usize, 1, 3, 8, 17, 64, 100, 128, 129, 256, 511, 1024] {
            for dv in [1usize, 7, 8, 64, 128, 300] {
                for units in [1usize, 2, 16, 64, 1024] {
                    let [rows, lanes, cols] = tiling(dk, dv, units, 132).unwrap();
                    assert!(ROWS.contains(&rows), "dk {dk}: rows {rows}");
                    assert!(lanes.is_power_of_two() && lanes <= 32, "dk {dk}: {lanes}");
                    assert!(rows * lanes >= dk, "dk {dk}: {rows} x {lanes}");
                    let threads = lanes * cols;
                    assert!(threads % 32 == 0 && threads <= 256, "{dk} {dv}: {threads}");
                }
            }
        }
        assert!(tiling(MAX_DK + 1, 8, 1, 132).is_none());
        // A large batch keeps 256-thread blocks; one head spreads its columns thin.
        assert_eq!(tiling(128, 128, 1024, 132), Some([4, 32, 8]));
        assert_eq!(tiling(128, 128, 1, 132), Some([4, 32, 1]));
    }
}
