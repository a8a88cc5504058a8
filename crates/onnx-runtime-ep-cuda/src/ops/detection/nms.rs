//! NonMaxSuppression (opsets 10, 11): per (batch, class), the boxes whose score is above
//! `score_threshold` (all when it is omitted) in descending score order (ties by box index),
//! each kept when its IoU with every box kept before it is at most `iou_threshold` (default
//! 0), until `max_output_boxes_per_class` (default 0: nothing) are kept. Output
//! `[selected, 3]` int64 rows (batch, class, box), batches then classes, each class's boxes in
//! selection order: the CPU provider's (`onnx-runtime-ep-cpu/src/ops/tensor/detection.rs`)
//! order exactly. `center_point_box` 1 reads boxes as (x_center, y_center, width, height).
//! Boxes and scores of any float dtype (each read as double, as the CPU does).
//!
//! The three scalars are read on the host. Everything else runs on the device
//! (`kernels/nms.cu`): corners and sort keys, a sort of every candidate by (batch, class,
//! score descending, box), one block per (batch, class) for the greedy pass, and a scan of the
//! kept counts. The selected count decides the output shape, so `output_types` reads it back
//! (one synchronization) and keeps the device state for the `execute` that follows with the
//! same inputs, which writes the rows. Not capturable (data-dependent output size).

use crate::ops::common::*;
use crate::ops::tensor_misc::unique::{
    data_dependent, located, read_i64, sort_ids, Located, ScanFns, Scratch, MAX_SORT_IDS,
};
use crate::ops::Registry;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::sync::{Arc, Mutex};

/// Mirrors `struct NmsParams` in `kernels/nms.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct NmsParams {
    batches: i64,
    classes: i64,
    n: i64,
    bs: [i64; 3],
    ss: [i64; 3],
    max_out: i64,
    iou_th: f64,
    score_th: f64,
    box_code: i32,
    score_code: i32,
    center: i32,
    has_score_th: i32,
}

/// Mirrors `struct NmsCmp` in `kernels/nms.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct NmsCmp {
    keys: u64,
    n: i64,
}

/// Threads of the greedy pass's block (one block per (batch, class)).
const SELECT_THREADS: u32 = 256;

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

// Scratch regions.
const R_CORNERS: usize = 0;
const R_KEYS: usize = 1;
const R_IDS_A: usize = 2;
const R_IDS_B: usize = 3;
const R_KEPT: usize = 4;
const R_COUNTS: usize = 5;
const R_OFFSETS: usize = 6;
const R_SUMS: usize = 7;

/// The device state of one call: the kept boxes, counts and their offsets, and the total.
struct Work {
    scratch: Option<Scratch>,
    p: NmsParams,
    total: usize,
}

struct NmsKernel {
    base: Base,
    center: bool,
    prepare: Function,
    sort_tiles: Function,
    sort_merge: Function,
    select: Function,
    write: Function,
    scan: ScanFns,
    peeked: Mutex<Option<(Located, Work)>>,
}

impl NmsKernel {
    /// Checks the inputs and reads the three scalars (host reads).
    fn params(&self, inputs: &[TensorView<'_>]) -> EpResult<NmsParams> {
        let base = &self.base;
        let boxes = base.req(inputs, 0)?;
        let scores = base.req(inputs, 1)?;
        for (t, what) in [(boxes, "boxes"), (scores, "scores")] {
            if !FLOATS.contains(&t.dtype) {
                return Err(base.unsupported(
                    t.dtype,
                    format!(
                        "NonMaxSuppression's {what} must be float, double, float16 or bfloat16"
                    ),
                ));
            }
        }
        let (bs, ss) = (boxes.shape, scores.shape);
        if bs.len() != 3 || bs[2] != 4 || ss.len() != 3 || ss[0] != bs[0] || ss[2] != bs[1] {
            return Err(base.err(format!(
                "boxes {bs:?} must be [batches, boxes, 4] and scores {ss:?} [batches, classes, \
                 boxes]"
            )));
        }
        let max_out = match base.input(inputs, 2) {
            Some(t) if t.numel() > 0 => {
                if t.dtype == DataType::Bool || !t.dtype.is_integer() {
                    return Err(base.err(format!(
                        "max_output_boxes_per_class must be integers, got {}",
                        t.dtype
                    )));
                }
                read_ints(base, t, "max_output_boxes_per_class")?[0].max(0)
            }
            _ => 0,
        };
        let scalar = |pos: usize, what: &str| -> EpResult<Option<f64>> {
            match base.input(inputs, pos) {
                Some(t) if t.numel() > 0 => {
                    if t.numel() != 1 {
                        return Err(base.err(format!(
                            "{what} must hold one element, got shape {:?}",
                            t.shape
                        )));
                    }
                    Ok(Some(read_f64s(base, t, what)?[0]))
                }
                _ => Ok(None),
            }
        };
        let iou_th = scalar(3, "iou_threshold")?.unwrap_or(0.0);
        let score_th = scalar(4, "score_threshold")?;
        let (batches, n, classes) = (bs[0], bs[1], ss[1]);
        batches
            .checked_mul(classes)
            .and_then(|v| v.checked_mul(n))
            .filter(|&v| v <= MAX_SORT_IDS && batches * classes <= i32::MAX as usize)
            .ok_or_else(|| {
                base.unsupported(
                    scores.dtype,
                    format!(
                        "the CUDA NonMaxSuppression sorts at most {MAX_SORT_IDS} \
                         (batch, class, box) candidates"
                    ),
                )
            })?;
        Ok(NmsParams {
            batches: batches as i64,
            classes: classes as i64,
            n: n as i64,
            bs: fill(&istrides(boxes.strides)),
            ss: fill(&istrides(scores.strides)),
            max_out,
            iou_th,
            score_th: score_th.unwrap_or(0.0),
            box_code: boxes.dtype.onnx_code(),
            score_code: scores.dtype.onnx_code(),
            center: self.center as i32,
            has_score_th: score_th.is_some() as i32,
        })
    }

    /// Runs the selection on the device and reads the selected count (synchronizes).
    fn select(&self, inputs: &[TensorView<'_>]) -> EpResult<Work> {
        let base = &self.base;
        let p = self.params(inputs)?;
        let segs = (p.batches * p.classes) as usize;
        let total = segs * p.n as usize;
        if total == 0 || p.max_out == 0 {
            return Ok(Work {
                scratch: None,
                p,
                total: 0,
            });
        }
        let scratch = Scratch::new(
            base,
            &[
                p.batches as usize * p.n as usize * 32,
                total * 8,
                total * 4,
                total * 4,
                total * 4,
                segs * 8,
                segs * 8,
                ScanFns::sums_len(segs) * 8,
            ],
        )?;
        match self.select_in(inputs, &p, &scratch, segs, total) {
            Ok(selected) => Ok(Work {
                scratch: Some(scratch),
                p,
                total: selected,
            }),
            Err(e) => {
                scratch.release(base);
                Err(e)
            }
        }
    }

    fn select_in(
        &self,
        inputs: &[TensorView<'_>],
        p: &NmsParams,
        sc: &Scratch,
        segs: usize,
        total: usize,
    ) -> EpResult<usize> {
        let base = &self.base;
        let boxes = base.req(inputs, 0)?;
        let scores = base.req(inputs, 1)?;
        let mut prm = *p;
        let (mut pb, mut ps, mut pc, mut pk, mut pi) = (
            ptr_of(boxes),
            ptr_of(scores),
            sc.at(R_CORNERS),
            sc.at(R_KEYS),
            sc.at(R_IDS_A),
        );
        let mut args = [
            arg(&mut pb),
            arg(&mut ps),
            arg(&mut pc),
            arg(&mut pk),
            arg(&mut pi),
            arg(&mut prm),
        ];
        // SAFETY: nms_prepare reads boxes and scores inside their views and writes the
        // corners of every (batch, box) and the key and id of every candidate.
        unsafe { base.rt.launch(self.prepare, total as u64, &mut args)? };
        let cmp = NmsCmp {
            keys: sc.at(R_KEYS),
            n: p.n,
        };
        let sorted = sort_ids(
            base,
            self.sort_tiles,
            self.sort_merge,
            sc.at(R_IDS_A),
            sc.at(R_IDS_B),
            total,
            cmp,
        )?;
        let (mut psrt, mut pk, mut pc, mut pkept, mut pcnt) = (
            sorted,
            sc.at(R_KEYS),
            sc.at(R_CORNERS),
            sc.at(R_KEPT),
            sc.at(R_COUNTS),
        );
        let mut prm = *p;
        let mut args = [
            arg(&mut psrt),
            arg(&mut pk),
            arg(&mut pc),
            arg(&mut pkept),
            arg(&mut pcnt),
            arg(&mut prm),
        ];
        // SAFETY: nms_select runs one block per segment; each reads its n sorted ids, their
        // keys and corners, and writes at most n kept boxes of its own and its count.
        unsafe {
            base.rt.launch_cfg(
                self.select,
                (segs as u32, 1, 1),
                (SELECT_THREADS, 1, 1),
                0,
                &mut args,
            )?
        };
        let at = self
            .scan
            .run(base, sc.at(R_COUNTS), sc.at(R_OFFSETS), sc.at(R_SUMS), segs)?;
        let selected = read_i64(base, at)?;
        if selected < 0 || selected as usize > total {
            return Err(base.err(format!(
                "internal: the device selected {selected} of {total} candidates"
            )));
        }
        Ok(selected as usize)
    }

    fn take(&self, inputs: &[TensorView<'_>]) -> EpResult<Work> {
        let peeked = self.peeked.lock().unwrap_or_else(|e| e.into_inner()).take();
        match peeked {
            Some((at, w)) if at == located(inputs) => Ok(w),
            other => {
                if let Some((
                    _,
                    Work {
                        scratch: Some(s), ..
                    },
                )) = other
                {
                    s.release(&self.base);
                }
                self.select(inputs)
            }
        }
    }

    fn write(&self, w: &Work, sc: &Scratch, out: &TensorMut<'_>) -> EpResult<()> {
        let base = &self.base;
        let total = (w.p.batches * w.p.classes * w.p.n) as u64;
        let (mut pk, mut pc, mut po, mut py) = (
            sc.at(R_KEPT),
            sc.at(R_COUNTS),
            sc.at(R_OFFSETS),
            mut_ptr_of(out),
        );
        let (mut s0, mut s1, mut p) = (out.strides[0] as i64, out.strides[1] as i64, w.p);
        let mut args = [
            arg(&mut pk),
            arg(&mut pc),
            arg(&mut po),
            arg(&mut py),
            arg(&mut s0),
            arg(&mut s1),
            arg(&mut p),
        ];
        // SAFETY: nms_write writes row offsets[seg] + j (below the selected total, the
        // output's row count) for each kept box j of each segment.
        unsafe { base.rt.launch(self.write, total, &mut args) }
    }
}

impl Kernel for NmsKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let w = self.select(inputs)?;
        let total = w.total;
        let old = self
            .peeked
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .replace((located(inputs), w));
        if let Some((
            _,
            Work {
                scratch: Some(s), ..
            },
        )) = old
        {
            s.release(&self.base);
        }
        Ok(vec![(DataType::Int64, vec![total, 3])])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let w = self.take(inputs)?;
        let r = base
            .expect_outputs(outputs, &[(DataType::Int64, vec![w.total, 3])])
            .and_then(|_| match &w.scratch {
                Some(sc) if w.total > 0 => self.write(&w, sc, &outputs[0]),
                _ => Ok(()),
            });
        if let Some(sc) = &w.scratch {
            sc.release(base);
        }
        r
    }

    fn capture_support(&self) -> CaptureSupport {
        data_dependent(&self.base)
    }

    fn host_inputs(&self) -> Vec<usize> {
        (2..5).filter(|&p| self.base.has(p)).collect()
    }
}

impl Drop for NmsKernel {
    fn drop(&mut self) {
        if let Some((
            _,
            Work {
                scratch: Some(s), ..
            },
        )) = self.peeked.lock().unwrap_or_else(|e| e.into_inner()).take()
        {
            s.release(&self.base);
        }
    }
}

fn nms(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    // Any non-zero value selects centre-point boxes, as the CPU provider reads it.
    let center = attr_int(node, "center_point_box")?.unwrap_or(0) != 0;
    let base = Base::new(rt, node);
    let m = base.module(&super::nms_module())?;
    Ok(Box::new(NmsKernel {
        center,
        prepare: m.function("nms_prepare")?,
        sort_tiles: m.function("nms_sort_tiles")?,
        sort_merge: m.function("nms_sort_merge")?,
        select: m.function("nms_select")?,
        write: m.function("nms_write")?,
        scan: ScanFns::load(&m)?,
        peeked: Mutex::new(None),
        base,
    }))
}

pub fn register(r: &mut Registry) {
    for since in [10, 11] {
        r.register("", "NonMaxSuppression", since, nms);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(std::mem::size_of::<NmsParams>(), 10 * 8 + 16 + 16);
        assert_eq!(std::mem::size_of::<NmsCmp>(), 16);
    }
}
