//! DeformConv (opsets 19, 22): an N-D convolution whose kernel taps are displaced by the
//! learned per-position `offset` (multilinear interpolation, zero outside the input) and
//! scaled by the optional `mask` (v2), with `group`, `offset_group`, `pads`, `strides`,
//! `dilations`, `kernel_shape` (default: W's) and an optional bias. Semantics, shape checks
//! and errors mirror the CPU provider (`onnx-runtime-ep-cpu/src/ops/nn/conv/deform_conv.rs`).
//!
//! Kernels (`kernels/deform_conv.cu`): W packed densely in the accumulation type, a
//! deformable im2col (sampling in double) into a workspace, then a shared-memory tiled
//! product per (batch, group) that adds the bias and writes Y's strides. float32, float16 and
//! bfloat16 accumulate in float32, float64 in double. Batches are processed in chunks that
//! keep the workspace under 256 MiB. Capturable once one eager run has sized the workspace.

use super::common::*;
use super::params::MAX_RANK;
use super::Registry;
use crate::compiler::ModuleSpec;
use crate::runtime::{CudaRuntime, Function};
use onnx_runtime_ep_api::{
    CaptureSupport, EpError, EpResult, Kernel, KernelRequest, TensorMut, TensorView,
};
use onnx_runtime_ir::{DataType, Node};
use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Spatial axes the kernels take (DC_SP).
const SP: usize = 6;
/// The im2col workspace's budget per chunk of batches.
const WORKSPACE: usize = 256 << 20;

/// Mirrors `struct DcParams` in `kernels/deform_conv.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
struct DcParams {
    nd: i64,
    ic: i64,
    oc: i64,
    g: i64,
    og: i64,
    icg: i64,
    ocg: i64,
    ico: i64,
    kk: i64,
    npos: i64,
    b0: i64,
    nb: i64,
    in_sp: [i64; SP],
    out_sp: [i64; SP],
    ker: [i64; SP],
    str: [i64; SP],
    pad: [i64; SP],
    dil: [i64; SP],
    xs: [i64; MAX_RANK],
    ws: [i64; MAX_RANK],
    offs: [i64; MAX_RANK],
    ms: [i64; MAX_RANK],
    ys: [i64; MAX_RANK],
    bs: i64,
    has_mask: i32,
    has_bias: i32,
}

pub fn deform_conv_module() -> ModuleSpec {
    ModuleSpec::new("deform_conv", include_str!("../kernels/deform_conv.cu")).with_half()
}

/// The NVRTC modules of this op (all variants, for the compile test).
pub fn modules() -> Vec<ModuleSpec> {
    vec![deform_conv_module()]
}

const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

/// The three kernels of one dtype.
#[derive(Clone, Copy)]
struct Fns {
    pack: Function,
    im2col: Function,
    gemm: Function,
}

struct DeformConvKernel {
    base: Base,
    kernel: Option<Vec<usize>>,
    pads: Option<Vec<usize>>,
    strides: Option<Vec<usize>>,
    dilations: Option<Vec<usize>>,
    group: usize,
    offset_group: usize,
    fns: HashMap<DataType, Fns>,
    warmed: AtomicBool,
}

impl DeformConvKernel {
    /// Checks every input as the CPU provider does; the launch parameters (strides of the
    /// output left for `execute`) and the output shape.
    fn plan(&self, inputs: &[TensorView<'_>]) -> EpResult<(DcParams, Vec<usize>)> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let off = base.req(inputs, 2)?;
        let b = base.input(inputs, 3);
        let mask = base.input(inputs, 4);
        if !FLOATS.contains(&x.dtype) {
            return Err(base.unsupported(
                x.dtype,
                "DeformConv takes float, double, float16 or bfloat16",
            ));
        }
        for t in [Some(w), Some(off), b, mask].into_iter().flatten() {
            if t.dtype != x.dtype {
                return Err(base.err(format!("all inputs must be {}, got {}", x.dtype, t.dtype)));
            }
        }
        let xs = x.shape;
        if xs.len() < 3 || w.rank() != xs.len() || off.rank() != xs.len() {
            return Err(base.err(format!(
                "X {xs:?}, W {:?} and offset {:?} must share a rank >= 3",
                w.shape, off.shape
            )));
        }
        check_view_rank(base, xs)?;
        let nd = xs.len() - 2;
        let (n, ic) = (xs[0], xs[1]);
        let spatial = &xs[2..];
        let oc = w.shape[0];
        let kernel = self.kernel.clone().unwrap_or_else(|| w.shape[2..].to_vec());
        let pads = self.pads.clone().unwrap_or_else(|| vec![0; 2 * nd]);
        let strides = self.strides.clone().unwrap_or_else(|| vec![1; nd]);
        let dil = self.dilations.clone().unwrap_or_else(|| vec![1; nd]);
        let (g, og) = (self.group, self.offset_group);
        if kernel.len() != nd || pads.len() != 2 * nd || strides.len() != nd || dil.len() != nd {
            return Err(base.err(format!(
                "kernel_shape/pads/strides/dilations do not match {nd} spatial axes"
            )));
        }
        if w.shape[2..] != kernel[..] || ic != w.shape[1] * g || oc % g != 0 || ic % og != 0 {
            return Err(base.err(format!(
                "W {:?} does not fit X {xs:?} with group {g}, offset_group {og}, kernel \
                 {kernel:?}",
                w.shape
            )));
        }
        let kk: usize = kernel.iter().product();
        let mut out_sp = Vec::with_capacity(nd);
        for d in 0..nd {
            let ext = (kernel[d].max(1) - 1) * dil[d] + 1;
            let padded = spatial[d] + pads[d] + pads[nd + d];
            if kernel[d] == 0 || padded < ext || strides[d] == 0 {
                return Err(base.err(format!(
                    "kernel extent {ext} exceeds padded axis {d} of size {padded}"
                )));
            }
            out_sp.push((padded - ext) / strides[d] + 1);
        }
        let mut want_off = vec![n, og * kk * nd];
        want_off.extend_from_slice(&out_sp);
        if off.shape != want_off.as_slice() {
            return Err(base.err(format!("offset shape {:?} must be {want_off:?}", off.shape)));
        }
        if let Some(m) = mask {
            let mut want = vec![n, og * kk];
            want.extend_from_slice(&out_sp);
            if m.shape != want.as_slice() {
                return Err(base.err(format!("mask shape {:?} must be {want:?}", m.shape)));
            }
        }
        if let Some(b) = b {
            if b.shape != [oc] {
                return Err(base.err(format!("B shape {:?} must be [{oc}]", b.shape)));
            }
        }
        let npos: usize = out_sp.iter().product();
        let sp = |v: &[usize]| fill::<SP>(&v.iter().map(|&d| d as i64).collect::<Vec<_>>());
        let p = DcParams {
            nd: nd as i64,
            ic: ic as i64,
            oc: oc as i64,
            g: g as i64,
            og: og as i64,
            icg: (ic / g) as i64,
            ocg: (oc / g) as i64,
            ico: (ic / og) as i64,
            kk: kk as i64,
            npos: npos as i64,
            b0: 0,
            nb: n as i64,
            in_sp: sp(spatial),
            out_sp: sp(&out_sp),
            ker: sp(&kernel),
            str: sp(&strides),
            pad: sp(&pads[..nd]),
            dil: sp(&dil),
            xs: fill(&istrides(x.strides)),
            ws: fill(&istrides(w.strides)),
            offs: fill(&istrides(off.strides)),
            ms: mask.map_or([0; MAX_RANK], |m| fill(&istrides(m.strides))),
            ys: [0; MAX_RANK],
            bs: b.map_or(0, |b| b.strides[0] as i64),
            has_mask: mask.is_some() as i32,
            has_bias: b.is_some() as i32,
        };
        let mut shape = vec![n, oc];
        shape.extend_from_slice(&out_sp);
        Ok((p, shape))
    }
}

impl Kernel for DeformConvKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let x = self.base.req(inputs, 0)?;
        Ok(vec![(x.dtype, self.plan(inputs)?.1)])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        let (mut p, shape) = self.plan(inputs)?;
        let x = base.req(inputs, 0)?;
        base.expect_outputs(outputs, &[(x.dtype, shape)])?;
        let y = &outputs[0];
        p.ys = fill(&istrides(y.strides));
        if y.numel() == 0 {
            return Ok(());
        }
        let fns = *self
            .fns
            .get(&x.dtype)
            .ok_or_else(|| base.unsupported(x.dtype, "DeformConv takes float types"))?;
        let a = if x.dtype == DataType::Float64 { 8 } else { 4 };
        let n = p.nb as usize;
        let r_len = (p.icg * p.kk) as usize;
        let per_batch = (p.ic * p.kk) as usize * p.npos as usize * a;
        // Also at most 65535 (batch, group) products per launch (the grid's z limit).
        if p.g > 65535 {
            return Err(base.unsupported(x.dtype, "the CUDA DeformConv takes at most 65535 groups"));
        }
        let chunk = (WORKSPACE / per_batch.max(1))
            .min(65535 / p.g as usize)
            .clamp(1, n);
        let wp_bytes = (p.oc as usize * r_len * a).div_ceil(256) * 256;
        let (ws, _) = base.rt.allocate(wp_bytes + chunk * per_batch + 256, 256)?;
        let r = self.run(inputs, y, fns, &mut p, ws, wp_bytes, chunk);
        // The workspace goes back to the cache; its reuse is ordered after this work.
        let _ = base.rt.free(ws);
        if r.is_ok() && !base.rt.is_capturing() {
            self.warmed.store(true, Ordering::Release);
        }
        r
    }

    fn capture_support(&self) -> CaptureSupport {
        if self.warmed.load(Ordering::Acquire) {
            CaptureSupport::Supported
        } else {
            CaptureSupport::Unsupported {
                reason: format!(
                    "{}: DeformConv allocates its workspace on the first run; run it once \
                     eagerly before capturing",
                    self.base.node
                ),
            }
        }
    }
}

impl DeformConvKernel {
    #[allow(clippy::too_many_arguments)]
    fn run(
        &self,
        inputs: &[TensorView<'_>],
        y: &TensorMut<'_>,
        fns: Fns,
        p: &mut DcParams,
        ws: crate::runtime::CuPtr,
        wp_bytes: usize,
        chunk: usize,
    ) -> EpResult<()> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        let w = base.req(inputs, 1)?;
        let off = base.req(inputs, 2)?;
        let bias = base.input(inputs, 3).map_or(0, ptr_of);
        let mask = base.input(inputs, 4).map_or(0, ptr_of);
        let n = p.nb as usize;
        let wp = ws;
        let col = ws + wp_bytes as crate::runtime::CuPtr;
        let packed = (p.oc * p.icg * p.kk) as u64;
        if packed > 0 {
            let (mut pw, mut pwp, mut pp) = (ptr_of(w), wp, *p);
            let mut args = [arg(&mut pw), arg(&mut pwp), arg(&mut pp)];
            // SAFETY: dc_pack_w_T(w, wp, DcParams) reads W inside its view and writes the
            // oc * icg * kk packed entries.
            unsafe { base.rt.launch(fns.pack, packed, &mut args)? };
        }
        let mut b0 = 0usize;
        while b0 < n {
            let nb = chunk.min(n - b0);
            p.b0 = b0 as i64;
            p.nb = nb as i64;
            let taps = (nb as i64 * p.og * p.kk * p.npos) as u64;
            if p.ico > 0 && taps > 0 {
                let (mut px, mut po, mut pm, mut pc, mut pp) =
                    (ptr_of(x), ptr_of(off), mask, col, *p);
                let mut args = [
                    arg(&mut px),
                    arg(&mut po),
                    arg(&mut pm),
                    arg(&mut pc),
                    arg(&mut pp),
                ];
                // SAFETY: dc_im2col_T reads X, offset and mask inside their views (sample
                // corners only inside the input) and writes the chunk's nb * ic * kk * npos
                // workspace entries.
                unsafe { base.rt.launch(fns.im2col, taps, &mut args)? };
            }
            let grid = (
                (p.npos as u64).div_ceil(64) as u32,
                (p.ocg as u64).div_ceil(64) as u32,
                (nb as i64 * p.g) as u32,
            );
            let (mut pwp, mut pc, mut pb, mut py, mut pp) = (wp, col, bias, mut_ptr_of(y), *p);
            let mut args = [
                arg(&mut pwp),
                arg(&mut pc),
                arg(&mut pb),
                arg(&mut py),
                arg(&mut pp),
            ];
            // SAFETY: dc_gemm_T reads the packed W and the chunk's workspace inside their
            // extents and writes each output element of the chunk's batches once.
            unsafe {
                base.rt
                    .launch_cfg(fns.gemm, grid, (256, 1, 1), 0, &mut args)?
            };
            b0 += nb;
        }
        Ok(())
    }
}

fn usize_list(node: &Node, name: &str) -> EpResult<Option<Vec<usize>>> {
    attr_ints(node, name)?
        .map(|v| {
            v.iter()
                .map(|&d| {
                    usize::try_from(d).map_err(|_| {
                        EpError::invalid_attribute(
                            node,
                            name,
                            format!("values must be non-negative, got {v:?}"),
                        )
                    })
                })
                .collect()
        })
        .transpose()
}

fn deform_conv(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let group = attr_int(node, "group")?.unwrap_or(1);
    let offset_group = attr_int(node, "offset_group")?.unwrap_or(1);
    if group < 1 || offset_group < 1 {
        return Err(EpError::invalid_attribute(
            node,
            "group",
            "group and offset_group must be >= 1",
        ));
    }
    let base = Base::new(rt, node);
    let m = base.module(&deform_conv_module())?;
    let mut fns = HashMap::new();
    for dtype in FLOATS {
        let tag = type_tag(dtype).expect("a typed dtype");
        fns.insert(
            dtype,
            Fns {
                pack: m.function(&format!("dc_pack_w_{tag}"))?,
                im2col: m.function(&format!("dc_im2col_{tag}"))?,
                gemm: m.function(&format!("dc_gemm_{tag}"))?,
            },
        );
    }
    Ok(Box::new(DeformConvKernel {
        kernel: usize_list(node, "kernel_shape")?,
        pads: usize_list(node, "pads")?,
        strides: usize_list(node, "strides")?,
        dilations: usize_list(node, "dilations")?,
        group: group as usize,
        offset_group: offset_group as usize,
        fns,
        warmed: AtomicBool::new(false),
        base,
    }))
}

pub fn register(r: &mut Registry) {
    for since in [19, 22] {
        r.register("", "DeformConv", since, deform_conv);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(
            std::mem::size_of::<DcParams>(),
            12 * 8 + 6 * SP * 8 + 5 * MAX_RANK * 8 + 8 + 8
        );
    }
}
