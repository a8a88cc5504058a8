//! cuDNN's convolution algorithms: the proposals of its heuristics
//! (`cudnnGet*Algorithm_v7`, not the exhaustive `cudnnFind*`, which makes first runs slow)
//! that are usable for a dtype, each with the math type to set and the workspace it needs
//! ([`Algo`]), and the driver-event [`Timer`] with which a shape's first eager run times the
//! first few of them ([`TUNE_CANDIDATES`]).

use super::dnn::{check, ConvDesc, Dnn, FilterDesc, TensorDesc, Types};
use crate::runtime::CudaRuntime;
use cudarc::cudnn::sys;
use onnx_runtime_ep_api::{EpError, EpResult};
use std::ffi::c_int;

/// The largest workspace an algorithm may ask for; faster algorithms that need more are
/// passed over for the next one.
const WORKSPACE_CAP: usize = 1 << 30;

// ---- algorithms ----

/// cuDNN's algorithm performance record with its enums as plain integers, so a value the
/// bindings do not list cannot become an invalid Rust enum.
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Perf {
    algo: u32,
    status: u32,
    time: f32,
    memory: usize,
    determinism: u32,
    math: u32,
    reserved: [c_int; 3],
}

const _: () = assert!(
    std::mem::size_of::<Perf>() == std::mem::size_of::<sys::cudnnConvolutionFwdAlgoPerf_t>()
        && std::mem::size_of::<Perf>()
            == std::mem::size_of::<sys::cudnnConvolutionBwdDataAlgoPerf_t>()
);

/// One usable algorithm: the math type to set on the descriptor before running it and the
/// workspace it needs.
#[derive(Clone, Copy, Debug)]
pub struct Algo<A> {
    pub algo: A,
    pub math: sys::cudnnMathType_t,
    pub workspace: usize,
    /// Proposed by the heuristics (not one of the last resorts appended after them).
    pub proposed: bool,
}

fn fwd_algo(v: u32) -> Option<sys::cudnnConvolutionFwdAlgo_t> {
    use sys::cudnnConvolutionFwdAlgo_t::*;
    Some(match v {
        0 => CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM,
        1 => CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM,
        2 => CUDNN_CONVOLUTION_FWD_ALGO_GEMM,
        3 => CUDNN_CONVOLUTION_FWD_ALGO_DIRECT,
        4 => CUDNN_CONVOLUTION_FWD_ALGO_FFT,
        5 => CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING,
        6 => CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD,
        7 => CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED,
        _ => return None,
    })
}

fn bwd_data_algo(v: u32) -> Option<sys::cudnnConvolutionBwdDataAlgo_t> {
    use sys::cudnnConvolutionBwdDataAlgo_t::*;
    Some(match v {
        0 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_0,
        1 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
        2 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT,
        3 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING,
        4 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD,
        5 => CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED,
        _ => return None,
    })
}

/// The heuristics' proposals (algorithm, math type, proposed) that are usable for `ty`, best
/// first, then every algorithm in order as a last resort.
fn proposals(perf: &[Perf], ty: Types, count: u32) -> Vec<(u32, u32, bool)> {
    let mut out: Vec<(u32, u32, bool)> = perf
        .iter()
        .filter(|p| p.status == 0 && p.memory <= WORKSPACE_CAP && ty.math_ok(p.math))
        .map(|p| (p.algo, p.math, true))
        .collect();
    for a in 0..count {
        if !out.iter().any(|o| o.0 == a) {
            out.push((a, ty.math as u32, false));
        }
    }
    out
}

impl Dnn {
    /// The forward algorithms usable for these descriptors, best first (cuDNN's heuristics).
    /// Leaves `conv`'s math type set for the first one.
    pub fn forward_algos(
        &self,
        x: &TensorDesc,
        w: &FilterDesc,
        conv: &ConvDesc,
        y: &TensorDesc,
        ty: Types,
    ) -> EpResult<Vec<Algo<sys::cudnnConvolutionFwdAlgo_t>>> {
        let h = self.lock();
        let mut count: c_int = 0;
        // SAFETY: the handle is live; `count` receives the number.
        check(
            unsafe { sys::cudnnGetConvolutionForwardAlgorithmMaxCount(h.0, &mut count) },
            "cudnnGetConvolutionForwardAlgorithmMaxCount",
        )?;
        let mut perf = vec![Perf::default(); count.max(1) as usize];
        let mut returned: c_int = 0;
        // SAFETY: `perf` holds `count` records of the layout cuDNN writes (checked at compile
        // time); the descriptors are live.
        check(
            unsafe {
                sys::cudnnGetConvolutionForwardAlgorithm_v7(
                    h.0,
                    x.0,
                    w.0,
                    conv.0,
                    y.0,
                    count.max(1),
                    &mut returned,
                    perf.as_mut_ptr() as *mut sys::cudnnConvolutionFwdAlgoPerf_t,
                )
            },
            "cudnnGetConvolutionForwardAlgorithm_v7",
        )?;
        let returned = (returned.max(0) as usize).min(perf.len());
        let mut algos = Vec::new();
        for (a, m, proposed) in proposals(&perf[..returned], ty, 8) {
            let Some(algo) = fwd_algo(a) else { continue };
            let math = ty.math_for(m);
            conv.set_math(math)?;
            let mut ws = 0usize;
            // SAFETY: live descriptors; `ws` receives the size.
            let status = unsafe {
                sys::cudnnGetConvolutionForwardWorkspaceSize(
                    h.0, x.0, w.0, conv.0, y.0, algo, &mut ws,
                )
            };
            if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS && ws <= WORKSPACE_CAP {
                algos.push(Algo {
                    algo,
                    math,
                    workspace: ws,
                    proposed,
                });
            }
        }
        if let Some(first) = algos.first() {
            conv.set_math(first.math)?;
        }
        Ok(algos)
    }

    /// The backward-data algorithms usable for these descriptors (`dy` the transposed
    /// convolution's input, `dx` its output), best first. Leaves `conv`'s math type set for
    /// the first one.
    pub fn backward_data_algos(
        &self,
        w: &FilterDesc,
        dy: &TensorDesc,
        conv: &ConvDesc,
        dx: &TensorDesc,
        ty: Types,
    ) -> EpResult<Vec<Algo<sys::cudnnConvolutionBwdDataAlgo_t>>> {
        let h = self.lock();
        let mut count: c_int = 0;
        // SAFETY: the handle is live; `count` receives the number.
        check(
            unsafe { sys::cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h.0, &mut count) },
            "cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
        )?;
        let mut perf = vec![Perf::default(); count.max(1) as usize];
        let mut returned: c_int = 0;
        // SAFETY: as in `forward_algos`.
        check(
            unsafe {
                sys::cudnnGetConvolutionBackwardDataAlgorithm_v7(
                    h.0,
                    w.0,
                    dy.0,
                    conv.0,
                    dx.0,
                    count.max(1),
                    &mut returned,
                    perf.as_mut_ptr() as *mut sys::cudnnConvolutionBwdDataAlgoPerf_t,
                )
            },
            "cudnnGetConvolutionBackwardDataAlgorithm_v7",
        )?;
        let returned = (returned.max(0) as usize).min(perf.len());
        let mut algos = Vec::new();
        for (a, m, proposed) in proposals(&perf[..returned], ty, 6) {
            let Some(algo) = bwd_data_algo(a) else {
                continue;
            };
            let math = ty.math_for(m);
            conv.set_math(math)?;
            let mut ws = 0usize;
            // SAFETY: live descriptors; `ws` receives the size.
            let status = unsafe {
                sys::cudnnGetConvolutionBackwardDataWorkspaceSize(
                    h.0, w.0, dy.0, conv.0, dx.0, algo, &mut ws,
                )
            };
            if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS && ws <= WORKSPACE_CAP {
                algos.push(Algo {
                    algo,
                    math,
                    workspace: ws,
                    proposed,
                });
            }
        }
        if let Some(first) = algos.first() {
            conv.set_math(first.math)?;
        }
        Ok(algos)
    }
}

// ---- timing the proposals ----

/// How many of the heuristics' proposals the first eager run of a shape times.
pub const TUNE_CANDIDATES: usize = 4;

/// Timed runs per proposal (after one untimed warm-up run).
pub const TUNE_REPS: usize = 3;

/// A proposal after the first that needs a workspace beyond this (and beyond the first's) is
/// not timed: the shared workspace only grows, so a trial would keep the memory.
pub const TUNE_WORKSPACE_CAP: usize = 256 << 20;

/// Device time of work enqueued on the runtime's stream, between two CUDA driver events
/// (used once per shape on its first eager run, never during capture: it synchronizes).
pub struct Timer {
    start: cudarc::driver::sys::CUevent,
    end: cudarc::driver::sys::CUevent,
}

impl Timer {
    pub fn new(rt: &CudaRuntime) -> EpResult<Timer> {
        use cudarc::driver::result::event;
        use cudarc::driver::sys::CUevent_flags;
        let err = |e: cudarc::driver::DriverError| EpError::device("cuda: event", format!("{e:?}"));
        rt.bind_thread()?;
        let start = event::create(CUevent_flags::CU_EVENT_DEFAULT).map_err(err)?;
        let end = match event::create(CUevent_flags::CU_EVENT_DEFAULT) {
            Ok(e) => e,
            Err(e) => {
                // SAFETY: ours, never recorded.
                let _ = unsafe { event::destroy(start) };
                return Err(err(e));
            }
        };
        Ok(Timer { start, end })
    }

    /// Runs `f` once (warm-up: lazy kernel loading, caches), then `reps` times between the
    /// events; the mean device time of one run in microseconds. Refused during capture.
    pub fn time(
        &self,
        rt: &CudaRuntime,
        reps: usize,
        mut f: impl FnMut() -> EpResult<()>,
    ) -> EpResult<f64> {
        use cudarc::driver::result::event;
        if rt.is_capturing() {
            return Err(EpError::device(
                "cuda: timing",
                "internal: algorithm timing during graph capture",
            ));
        }
        let err = |e: cudarc::driver::DriverError| EpError::device("cuda: event", format!("{e:?}"));
        f()?;
        let stream = rt.stream_handle();
        // SAFETY: both events are live and belong to the runtime's context; the stream is the
        // runtime's.
        unsafe { event::record(self.start, stream) }.map_err(err)?;
        for _ in 0..reps.max(1) {
            f()?;
        }
        // SAFETY: as above.
        let ms = unsafe {
            event::record(self.end, stream).map_err(err)?;
            event::synchronize(self.end).map_err(err)?;
            event::elapsed(self.start, self.end).map_err(err)?
        };
        Ok(f64::from(ms) * 1e3 / reps.max(1) as f64)
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: ours; destroying an event whose work is pending is allowed (the driver
        // releases it when the work completes).
        unsafe {
            let _ = cudarc::driver::result::event::destroy(self.start);
            let _ = cudarc::driver::result::event::destroy(self.end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use onnx_runtime_ir::DataType;

    #[test]
    fn float32_never_takes_tensor_op_math() {
        let f32t = Types::of(DataType::Float32, false).unwrap();
        assert!(!f32t.math_ok(1) && !f32t.math_ok(2) && f32t.math_ok(3));
        assert_eq!(f32t.math_for(1), sys::cudnnMathType_t::CUDNN_FMA_MATH);
        let h = Types::of(DataType::Float16, false).unwrap();
        assert!(h.math_ok(1));
        assert_eq!(h.math_for(1), sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH);
        assert!(Types::of(DataType::Int8, false).is_none());
        // With the provider's TF32 option, float32 takes what the heuristics propose.
        let tf32 = Types::of(DataType::Float32, true).unwrap();
        assert!(tf32.math_ok(1) && tf32.math_ok(2));
        assert_eq!(tf32.math_for(1), sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH);
        // Heuristic proposals first, then the remaining algorithms in order.
        let perf = [
            Perf {
                algo: 6,
                math: 3,
                ..Default::default()
            },
            Perf {
                algo: 1,
                status: 3000,
                ..Default::default()
            },
        ];
        let p = proposals(&perf, f32t, 8);
        assert_eq!(p[0], (6, 3, true));
        assert_eq!(p.len(), 8);
        assert!(p[1..].iter().all(|q| !q.2));
    }
}
