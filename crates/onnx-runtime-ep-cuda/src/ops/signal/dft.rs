//! DFT (opset 17: `axis` attribute, default 1; opset 20: `axis` input, default -2): the
//! discrete Fourier transform along one axis of a real (`[..., 1]`) or complex (`[..., 2]`)
//! signal, `inverse` (divided by the length), `onesided` (forward: the first len/2 + 1 bins;
//! inverse: a Hermitian spectrum given by its first half, real output `[..., 1]`),
//! `dft_length` padding with zeros or truncating. Semantics mirror the CPU provider
//! (`onnx-runtime-ep-cpu/src/ops/nn/signal/spectral.rs`), which sums in double: so do the
//! kernels (`kernels/dft.cu`): a radix-2 FFT in shared memory for power-of-two lengths up to
//! 8192, a direct O(len) sum per bin otherwise. float32, float64, float16, bfloat16; any
//! strides. dft_length and axis are read on the host (capturable after one eager run).
//! [`DftFns`] also runs STFT's transforms (`stft`).

use crate::ops::common::*;
use crate::ops::params::MAX_RANK;
use crate::ops::Registry;
use crate::runtime::{CuPtr, CudaRuntime, Function};
use onnx_runtime_ep_api::{CaptureSupport, EpResult, Kernel, KernelRequest, TensorMut, TensorView};
use onnx_runtime_ir::DataType;
use std::collections::HashMap;
use std::sync::Arc;

/// Mirrors `struct DftParams` in `kernels/dft.cu`.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct DftParams {
    pub lines: i64,
    pub ldims: [i64; MAX_RANK],
    pub lxs: [i64; MAX_RANK],
    pub los: [i64; MAX_RANK],
    pub n: i64,
    pub len: i64,
    pub out_len: i64,
    pub m: i64,
    pub xt: i64,
    pub xc: i64,
    pub ot: i64,
    pub oc: i64,
    pub ws: i64,
    pub nld: i32,
    pub comps: i32,
    pub out_comps: i32,
    pub inverse: i32,
    pub irfft: i32,
    pub win_code: i32,
}

/// Lengths the direct kernel keeps its twiddles for in shared memory (DFT_TABLE).
const DFT_TABLE: i64 = 4096;
/// The longest power-of-two length the shared-memory FFT takes.
const FFT_MAX: i64 = 8192;

pub(super) const FLOATS: [DataType; 4] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
];

/// The direct and FFT kernels by dtype.
pub(super) struct DftFns {
    direct: HashMap<DataType, Function>,
    fft: HashMap<DataType, Function>,
}

impl DftFns {
    pub fn load(base: &Base) -> EpResult<DftFns> {
        let m = base.module(&super::dft_module())?;
        let (mut direct, mut fft) = (HashMap::new(), HashMap::new());
        for dtype in FLOATS {
            let tag = type_tag(dtype).expect("a typed dtype");
            direct.insert(dtype, m.function(&format!("dft_direct_{tag}"))?);
            fft.insert(dtype, m.function(&format!("dft_fft_{tag}"))?);
        }
        Ok(DftFns { direct, fft })
    }

    pub fn supports(&self, dtype: DataType) -> bool {
        self.direct.contains_key(&dtype)
    }

    /// Enqueues the transforms `p` describes.
    pub fn launch(
        &self,
        base: &Base,
        dtype: DataType,
        x: CuPtr,
        win: CuPtr,
        y: CuPtr,
        p: &DftParams,
    ) -> EpResult<()> {
        let bins = (p.lines as u64).saturating_mul(p.out_len as u64);
        if bins == 0 {
            return Ok(());
        }
        let unsupported = || base.unsupported(dtype, "DFT takes float, double, float16, bfloat16");
        let sms = base.rt.sm_count().max(1);
        let (mut px, mut pw, mut py, mut pp) = (x, win, y, *p);
        let mut args = [arg(&mut px), arg(&mut pw), arg(&mut py), arg(&mut pp)];
        if p.len >= 2 && p.len <= FFT_MAX && (p.len as u64).is_power_of_two() {
            let f = *self.fft.get(&dtype).ok_or_else(unsupported)?;
            let threads = (p.len / 2).clamp(32, 512) as u32;
            let blocks = (p.lines as u64).min(u64::from(sms) * 8).max(1) as u32;
            let shared = (p.len * 16 + p.len / 2 * 16) as u32;
            // SAFETY: dft_fft_T(x, win, y, DftParams) reads the samples of each line inside
            // x's view (and window entries below the frame length) and writes each output
            // bin of y's view once; `shared` holds the line and its twiddles.
            return unsafe {
                base.rt
                    .launch_cfg(f, (blocks, 1, 1), (threads, 1, 1), shared, &mut args)
            };
        }
        let f = *self.direct.get(&dtype).ok_or_else(unsupported)?;
        let blocks = bins.div_ceil(256).clamp(1, u64::from(sms) * 16) as u32;
        let shared = if p.len <= DFT_TABLE {
            (p.len * 16) as u32
        } else {
            0
        };
        // SAFETY: dft_direct_T(x, win, y, DftParams) reads as above and writes each bin once;
        // `shared` holds the twiddle table when len <= DFT_TABLE.
        unsafe {
            base.rt
                .launch_cfg(f, (blocks, 1, 1), (256, 1, 1), shared, &mut args)
        }
    }
}

/// What one DFT call computes.
struct Plan {
    p: DftParams,
    out: (DataType, Vec<usize>),
    /// The transform axis and the line axes (output strides are filled in by `execute`).
    axis: usize,
    line_axes: Vec<usize>,
}

struct DftKernel {
    base: Base,
    host: HostReads,
    inverse: bool,
    onesided: bool,
    /// Opset 17 (axis attribute) rather than 20 (axis input).
    v17: bool,
    axis_attr: i64,
    fns: DftFns,
}

impl DftKernel {
    fn scalar(&self, host: &HostValues, pos: usize, what: &str) -> EpResult<Option<i64>> {
        match host.get(pos).cloned().flatten() {
            None => Ok(None),
            Some(v) => v
                .first()
                .copied()
                .map(Some)
                .ok_or_else(|| self.base.err(format!("{what} must be a scalar"))),
        }
    }

    fn plan(&self, x: &TensorView<'_>, host: &HostValues) -> EpResult<Plan> {
        let base = &self.base;
        if !self.fns.supports(x.dtype) {
            return Err(base.unsupported(x.dtype, "DFT takes float, double, float16, bfloat16"));
        }
        check_view_rank(base, x.shape)?;
        let shape = x.shape;
        let r = shape.len();
        if r < 2 || !matches!(shape[r - 1], 1 | 2) {
            return Err(base.err(format!(
                "input {shape:?} must end in a dimension of 1 (real) or 2 (complex)"
            )));
        }
        let len_in = self.scalar(host, 1, "dft_length")?;
        let axis = if self.v17 {
            self.axis_attr
        } else {
            self.scalar(host, 2, "axis")?.unwrap_or(-2)
        };
        let a = base.axis(axis, r, "axis")?;
        if a == r - 1 {
            return Err(base.err("axis may not be the last (complex) dimension"));
        }
        let n = shape[a];
        let irfft = self.inverse && self.onesided;
        let len = match len_in {
            Some(l) if l < 1 => return Err(base.err(format!("dft_length {l} must be positive"))),
            Some(l) => usize::try_from(l)
                .ok()
                .filter(|&l| l <= i32::MAX as usize)
                .ok_or_else(|| base.err(format!("dft_length {l} is too large")))?,
            None if irfft => 2 * n.saturating_sub(1),
            None => n,
        };
        if len == 0 {
            return Err(base.err("the transform length is 0"));
        }
        let out_len = if self.onesided && !self.inverse {
            len / 2 + 1
        } else {
            len
        };
        let mut oshape = shape.to_vec();
        oshape[a] = out_len;
        oshape[r - 1] = if irfft { 1 } else { 2 };
        let line_axes: Vec<usize> = (0..r - 1).filter(|&k| k != a).collect();
        let mut p = DftParams {
            lines: line_axes.iter().map(|&k| shape[k] as i64).product(),
            n: n as i64,
            len: len as i64,
            out_len: out_len as i64,
            m: n.min(len) as i64,
            xt: x.strides[a] as i64,
            xc: x.strides[r - 1] as i64,
            nld: line_axes.len() as i32,
            comps: shape[r - 1] as i32,
            out_comps: oshape[r - 1] as i32,
            inverse: self.inverse as i32,
            irfft: irfft as i32,
            ..Default::default()
        };
        for (j, &k) in line_axes.iter().enumerate() {
            p.ldims[j] = shape[k] as i64;
            p.lxs[j] = x.strides[k] as i64;
        }
        Ok(Plan {
            p,
            out: (x.dtype, oshape),
            axis: a,
            line_axes,
        })
    }
}

impl Kernel for DftKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> EpResult<OutputTypes> {
        let base = &self.base;
        let x = base.req(inputs, 0)?;
        Ok(vec![self.plan(x, &self.host.peek(base, inputs)?)?.out])
    }

    fn execute(&self, inputs: &[TensorView<'_>], outputs: &mut [TensorMut<'_>]) -> EpResult<()> {
        let base = &self.base;
        base.outputs_at_least(outputs, 1)?;
        let x = base.req(inputs, 0)?;
        let host = self.host.values(base, inputs, outputs)?;
        let mut plan = self.plan(x, &host)?;
        base.expect_outputs(outputs, std::slice::from_ref(&plan.out))?;
        let y = &outputs[0];
        let r = y.rank();
        for (j, &k) in plan.line_axes.iter().enumerate() {
            plan.p.los[j] = y.strides[k] as i64;
        }
        plan.p.ot = y.strides[plan.axis] as i64;
        plan.p.oc = y.strides[r - 1] as i64;
        self.fns
            .launch(base, x.dtype, ptr_of(x), 0, mut_ptr_of(y), &plan.p)
    }

    fn capture_support(&self) -> CaptureSupport {
        self.host.capture_support(&self.base)
    }

    fn set_constant_inputs(&mut self, constant: &[bool]) {
        self.host.set_constant(constant);
    }

    fn host_inputs(&self) -> Vec<usize> {
        self.host.positions()
    }
}

fn dft(rt: &Arc<CudaRuntime>, req: &KernelRequest<'_>) -> EpResult<Box<dyn Kernel>> {
    let node = req.node;
    let inverse = attr_int(node, "inverse")?.unwrap_or(0) != 0;
    let onesided = attr_int(node, "onesided")?.unwrap_or(0) != 0;
    let v17 = req.opset < 20;
    let axis_attr = attr_int(node, "axis")?.unwrap_or(1);
    let base = Base::new(rt, node);
    let fns = DftFns::load(&base)?;
    let host = HostReads::new(&base, if v17 { &[1] } else { &[1, 2] }, "dft_length / axis");
    Ok(Box::new(DftKernel {
        base,
        host,
        inverse,
        onesided,
        v17,
        axis_attr,
        fns,
    }))
}

pub fn register(r: &mut Registry) {
    r.register("", "DFT", 17, dft);
    r.register("", "DFT", 20, dft);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_layout_matches_the_kernel_struct() {
        assert_eq!(
            std::mem::size_of::<DftParams>(),
            8 + 3 * 8 * MAX_RANK + 9 * 8 + 6 * 4
        );
    }
}
