//! cuDNN through cudarc's raw bindings (`cudarc::cudnn::sys`, the legacy convolution API;
//! the backend (graph) API is in [`super::graph`], its symbols checked here too):
//! one handle per runtime, bound to the runtime's stream (a [`CudaRuntime::extension`]);
//! descriptors that destroy themselves; and a workspace shared by the runtime's convolutions
//! that only grows, so a block a captured graph holds is never handed to anything else. The
//! algorithms cuDNN's heuristics propose, and their timing on a shape's first eager run, are
//! in [`super::algo`].
//!
//! cudarc's safe cuDNN wrappers need cudarc streams and slices (event tracking is off in this
//! crate: its events break graph capture), so only the `sys` level is used. cudarc panics on a
//! missing library or symbol; [`Dnn::get`] checks both first and answers with an error.

use crate::libs;
use crate::runtime::{CuPtr, CudaRuntime};
use cudarc::cudnn::sys;
use cudarc::driver::CudaContext;
use onnx_runtime_ep_api::{EpError, EpResult};
use onnx_runtime_ir::DataType;
use std::ffi::{c_int, c_void, CStr};
use std::sync::{Arc, Mutex, MutexGuard};

/// Every cuDNN function this module calls (checked before the first call).
const SYMBOLS: &[&str] = &[
    "cudnnGetVersion",
    "cudnnGetErrorString",
    "cudnnCreate",
    "cudnnDestroy",
    "cudnnSetStream",
    "cudnnCreateTensorDescriptor",
    "cudnnSetTensorNdDescriptor",
    "cudnnDestroyTensorDescriptor",
    "cudnnCreateFilterDescriptor",
    "cudnnSetFilterNdDescriptor",
    "cudnnDestroyFilterDescriptor",
    "cudnnCreateConvolutionDescriptor",
    "cudnnSetConvolutionNdDescriptor",
    "cudnnSetConvolutionGroupCount",
    "cudnnSetConvolutionMathType",
    "cudnnDestroyConvolutionDescriptor",
    "cudnnCreateActivationDescriptor",
    "cudnnSetActivationDescriptor",
    "cudnnDestroyActivationDescriptor",
    "cudnnGetConvolutionForwardAlgorithmMaxCount",
    "cudnnGetConvolutionForwardAlgorithm_v7",
    "cudnnGetConvolutionForwardWorkspaceSize",
    "cudnnConvolutionForward",
    "cudnnConvolutionBiasActivationForward",
    "cudnnGetConvolutionBackwardDataAlgorithmMaxCount",
    "cudnnGetConvolutionBackwardDataAlgorithm_v7",
    "cudnnGetConvolutionBackwardDataWorkspaceSize",
    "cudnnConvolutionBackwardData",
    "cudnnGetConvolutionNdForwardOutputDim",
];

/// The error for a runtime whose cuDNN cannot be used: what went wrong and how to install it.
pub fn unavailable_message(detail: &str) -> String {
    let mut message = format!(
        "the CUDA convolutions (Conv, ConvTranspose, FusedConv) run on cuDNN, which is not \
         usable: {detail}"
    );
    if !detail.contains("nvidia-cudnn-cu") {
        message.push_str("; ");
        message.push_str(libs::CUDNN_INSTALL);
    }
    message
}

/// A library error's message without its context prefix.
fn detail(e: EpError) -> String {
    match e {
        EpError::Device { message, .. } => message,
        other => other.to_string(),
    }
}

fn unavailable(detail: &str) -> EpError {
    EpError::device("cudnn", unavailable_message(detail))
}

/// A cuDNN status as an error, with cuDNN's own text.
pub fn check(status: sys::cudnnStatus_t, what: &str) -> EpResult<()> {
    if status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS {
        return Ok(());
    }
    Err(EpError::device(
        format!("cudnn: {what}"),
        status_text(status),
    ))
}

pub fn status_text(status: sys::cudnnStatus_t) -> String {
    // SAFETY: cuDNN is loaded (a status came from it); the string is static.
    let text = unsafe {
        let p = sys::cudnnGetErrorString(status);
        if p.is_null() {
            String::new()
        } else {
            CStr::from_ptr(p).to_string_lossy().into_owned()
        }
    };
    format!("{status:?} ({text})")
}

/// The cuDNN handle.
pub struct Handle(pub sys::cudnnHandle_t);
// SAFETY: a cuDNN handle may be used from any thread, one at a time (the mutex in `Dnn`).
unsafe impl Send for Handle {}

/// cuDNN state of one runtime.
pub struct Dnn {
    handle: Mutex<Handle>,
    /// Workspace blocks, the last one the largest; earlier ones stay alive (plans and
    /// captured graphs may hold them).
    workspace: Mutex<Vec<(CuPtr, usize)>>,
    /// `cudnnGetVersion()`, e.g. 91000 for 9.10.0.
    pub version: usize,
    /// Keeps the device's primary context alive until the handle is destroyed (the runtime
    /// drops its own reference before its extensions).
    ctx: Arc<CudaContext>,
}

impl Dnn {
    /// The runtime's cuDNN state, created on first use (loading cuDNN).
    pub fn get(rt: &Arc<CudaRuntime>) -> EpResult<Arc<Dnn>> {
        rt.extension::<Dnn>(Dnn::create)
    }

    fn create(rt: &CudaRuntime) -> EpResult<Dnn> {
        let path = libs::ensure_cudnn().map_err(|e| unavailable(&detail(e)))?;
        let mut missing = libs::cudnn_missing_symbols(SYMBOLS);
        missing.extend(libs::cudnn_missing_symbols(super::graph::SYMBOLS));
        if !missing.is_empty() {
            return Err(unavailable(&format!(
                "{} does not export {}",
                path.display(),
                missing.join(", ")
            )));
        }
        // SAFETY: the symbol exists (checked above) and takes no arguments.
        let version = unsafe { sys::cudnnGetVersion() };
        if version < 90000 {
            return Err(unavailable(&format!(
                "{} is cuDNN {}.{}, but the bindings are cuDNN 9's",
                path.display(),
                version / 1000,
                version % 1000 / 100
            )));
        }
        rt.bind_thread()?;
        let ctx = CudaContext::new(rt.ordinal())
            .map_err(|e| EpError::device("cudnn: context", format!("{e:?}")))?;
        let mut raw: sys::cudnnHandle_t = std::ptr::null_mut();
        // SAFETY: the runtime's context is current; `raw` receives the new handle.
        check(unsafe { sys::cudnnCreate(&mut raw) }, "cudnnCreate").map_err(|e| {
            unavailable(&format!(
                "cudnnCreate failed with {} ({e}); the cuDNN build may not match the driver \
                 or its sub-libraries may be missing from {}",
                path.display(),
                path.parent()
                    .map_or(String::new(), |p| p.display().to_string())
            ))
        })?;
        // SAFETY: the handle is live; the stream is the runtime's and outlives the handle's
        // use (the handle is detached from it in Drop).
        let set = unsafe { sys::cudnnSetStream(raw, rt.stream_handle() as sys::cudaStream_t) };
        if let Err(e) = check(set, "cudnnSetStream") {
            // SAFETY: ours, unused.
            unsafe { sys::cudnnDestroy(raw) };
            return Err(e);
        }
        Ok(Dnn {
            handle: Mutex::new(Handle(raw)),
            workspace: Mutex::new(Vec::new()),
            version,
            ctx,
        })
    }

    /// The handle, held for a sequence of calls.
    pub fn lock(&self) -> MutexGuard<'_, Handle> {
        self.handle.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A workspace of at least `bytes` bytes (null for 0). Allocates only when the current
    /// block is too small, which cannot happen during capture (plans are made eagerly).
    pub fn workspace(&self, rt: &CudaRuntime, bytes: usize) -> EpResult<CuPtr> {
        if bytes == 0 {
            return Ok(0);
        }
        let mut blocks = self.workspace.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(&(p, size)) = blocks.last() {
            if size >= bytes {
                return Ok(p);
            }
        }
        let (p, size) = rt.allocate(bytes, 256)?;
        blocks.push((p, size));
        Ok(p)
    }
}

impl Drop for Dnn {
    fn drop(&mut self) {
        let _ = self.ctx.bind_to_thread();
        let h = self.handle.get_mut().unwrap_or_else(|e| e.into_inner()).0;
        // SAFETY: the handle is ours and no call on it is in flight (we are being dropped);
        // detaching it from the runtime's stream first keeps cudnnDestroy off a stream that
        // may already be gone. The workspace blocks go back with the runtime's allocator.
        unsafe {
            sys::cudnnSetStream(h, std::ptr::null_mut());
            sys::cudnnDestroy(h);
        }
    }
}

// ---- data types ----

/// How cuDNN computes one ONNX float dtype.
#[derive(Clone, Copy, Debug)]
pub struct Types {
    pub data: sys::cudnnDataType_t,
    pub compute: sys::cudnnDataType_t,
    pub math: sys::cudnnMathType_t,
}

impl Types {
    /// float32: FP32 math with FMA only (no TF32), or cuDNN's default math (TF32 tensor
    /// cores allowed) with `tf32`; float16/bfloat16: float32 accumulation with tensor cores;
    /// float64: double.
    pub fn of(dtype: DataType, tf32: bool) -> Option<Types> {
        use sys::cudnnDataType_t::*;
        use sys::cudnnMathType_t::*;
        Some(match dtype {
            DataType::Float32 => Types {
                data: CUDNN_DATA_FLOAT,
                compute: CUDNN_DATA_FLOAT,
                math: if tf32 {
                    CUDNN_DEFAULT_MATH
                } else {
                    CUDNN_FMA_MATH
                },
            },
            DataType::Float16 => Types {
                data: CUDNN_DATA_HALF,
                compute: CUDNN_DATA_FLOAT,
                math: CUDNN_TENSOR_OP_MATH,
            },
            DataType::BFloat16 => Types {
                data: CUDNN_DATA_BFLOAT16,
                compute: CUDNN_DATA_FLOAT,
                math: CUDNN_TENSOR_OP_MATH,
            },
            DataType::Float64 => Types {
                data: CUDNN_DATA_DOUBLE,
                compute: CUDNN_DATA_DOUBLE,
                math: CUDNN_DEFAULT_MATH,
            },
            _ => return None,
        })
    }

    fn is_f32(&self) -> bool {
        self.data == sys::cudnnDataType_t::CUDNN_DATA_FLOAT
    }

    fn is_double(&self) -> bool {
        self.data == sys::cudnnDataType_t::CUDNN_DATA_DOUBLE
    }

    /// float32 in true float32 (TF32 not allowed by the provider's options).
    fn is_strict_f32(&self) -> bool {
        self.is_f32() && self.math == sys::cudnnMathType_t::CUDNN_FMA_MATH
    }

    /// Whether a math type the heuristics propose keeps this dtype's precision (strict
    /// float32 must not run on TF32 tensor cores).
    pub(super) fn math_ok(&self, math: u32) -> bool {
        !self.is_strict_f32() || math == sys::cudnnMathType_t::CUDNN_FMA_MATH as u32 || math == 0
    }

    /// The math type to set for an algorithm the heuristics proposed with `math`.
    pub(super) fn math_for(&self, math: u32) -> sys::cudnnMathType_t {
        use sys::cudnnMathType_t::*;
        if self.is_strict_f32() {
            return CUDNN_FMA_MATH;
        }
        match math {
            0 => CUDNN_DEFAULT_MATH,
            1 => CUDNN_TENSOR_OP_MATH,
            2 => CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION,
            3 => CUDNN_FMA_MATH,
            _ => self.math,
        }
    }

    /// alpha and beta in the type cuDNN reads them as (double for float64, float otherwise).
    pub fn scale(&self, alpha: f64, beta: f64) -> Scale {
        Scale {
            f: [alpha as f32, beta as f32],
            d: [alpha, beta],
            double: self.is_double(),
        }
    }
}

/// Host scaling factors for a cuDNN call.
pub struct Scale {
    f: [f32; 2],
    d: [f64; 2],
    double: bool,
}

impl Scale {
    pub fn alpha(&self) -> *const c_void {
        if self.double {
            &self.d[0] as *const f64 as *const c_void
        } else {
            &self.f[0] as *const f32 as *const c_void
        }
    }

    pub fn beta(&self) -> *const c_void {
        if self.double {
            &self.d[1] as *const f64 as *const c_void
        } else {
            &self.f[1] as *const f32 as *const c_void
        }
    }
}

// ---- descriptors ----

fn dims_i32(dims: &[usize], what: &str) -> EpResult<Vec<c_int>> {
    dims.iter()
        .map(|&d| {
            c_int::try_from(d).map_err(|_| {
                EpError::device(
                    "cudnn",
                    format!("{what} {dims:?} has a dimension beyond cuDNN's 32-bit limit"),
                )
            })
        })
        .collect()
}

/// A packed (row-major) tensor descriptor.
pub struct TensorDesc(pub sys::cudnnTensorDescriptor_t);

impl TensorDesc {
    pub fn new(data: sys::cudnnDataType_t, dims: &[usize]) -> EpResult<Self> {
        let d = dims_i32(dims, "tensor")?;
        let strides = dims_i32(&onnx_runtime_ir::compute_contiguous_strides(dims), "tensor")?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` receives a new descriptor.
        check(
            unsafe { sys::cudnnCreateTensorDescriptor(&mut raw) },
            "cudnnCreateTensorDescriptor",
        )?;
        let desc = TensorDesc(raw);
        // SAFETY: the descriptor is live; the arrays hold `d.len()` values.
        check(
            unsafe {
                sys::cudnnSetTensorNdDescriptor(
                    raw,
                    data,
                    d.len() as c_int,
                    d.as_ptr(),
                    strides.as_ptr(),
                )
            },
            &format!("cudnnSetTensorNdDescriptor {dims:?}"),
        )?;
        Ok(desc)
    }
}

impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: ours.
        unsafe { sys::cudnnDestroyTensorDescriptor(self.0) };
    }
}

/// A filter descriptor, [out channels, in channels / group, kernel...], NCHW.
pub struct FilterDesc(pub sys::cudnnFilterDescriptor_t);

impl FilterDesc {
    pub fn new(data: sys::cudnnDataType_t, dims: &[usize]) -> EpResult<Self> {
        let d = dims_i32(dims, "filter")?;
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` receives a new descriptor.
        check(
            unsafe { sys::cudnnCreateFilterDescriptor(&mut raw) },
            "cudnnCreateFilterDescriptor",
        )?;
        let desc = FilterDesc(raw);
        // SAFETY: the descriptor is live; the array holds `d.len()` values.
        check(
            unsafe {
                sys::cudnnSetFilterNdDescriptor(
                    raw,
                    data,
                    sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
                    d.len() as c_int,
                    d.as_ptr(),
                )
            },
            &format!("cudnnSetFilterNdDescriptor {dims:?}"),
        )?;
        Ok(desc)
    }
}

impl Drop for FilterDesc {
    fn drop(&mut self) {
        // SAFETY: ours.
        unsafe { sys::cudnnDestroyFilterDescriptor(self.0) };
    }
}

/// A cross-correlation (ONNX Conv) descriptor.
pub struct ConvDesc(pub sys::cudnnConvolutionDescriptor_t);

impl ConvDesc {
    pub fn new(
        pads: &[usize],
        strides: &[usize],
        dilations: &[usize],
        group: usize,
        ty: Types,
    ) -> EpResult<Self> {
        let p = dims_i32(pads, "pads")?;
        let s = dims_i32(strides, "strides")?;
        let d = dims_i32(dilations, "dilations")?;
        let g = dims_i32(&[group], "group")?[0];
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` receives a new descriptor.
        check(
            unsafe { sys::cudnnCreateConvolutionDescriptor(&mut raw) },
            "cudnnCreateConvolutionDescriptor",
        )?;
        let desc = ConvDesc(raw);
        // SAFETY: the descriptor is live; each array holds `p.len()` values.
        check(
            unsafe {
                sys::cudnnSetConvolutionNdDescriptor(
                    raw,
                    p.len() as c_int,
                    p.as_ptr(),
                    s.as_ptr(),
                    d.as_ptr(),
                    sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                    ty.compute,
                )
            },
            &format!(
                "cudnnSetConvolutionNdDescriptor pads {pads:?} strides {strides:?} dilations \
                 {dilations:?}"
            ),
        )?;
        // SAFETY: as above.
        check(
            unsafe { sys::cudnnSetConvolutionGroupCount(raw, g) },
            "cudnnSetConvolutionGroupCount",
        )?;
        desc.set_math(ty.math)?;
        Ok(desc)
    }

    pub fn set_math(&self, math: sys::cudnnMathType_t) -> EpResult<()> {
        // SAFETY: the descriptor is live.
        check(
            unsafe { sys::cudnnSetConvolutionMathType(self.0, math) },
            "cudnnSetConvolutionMathType",
        )
    }
}

impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: ours.
        unsafe { sys::cudnnDestroyConvolutionDescriptor(self.0) };
    }
}

/// An activation descriptor for the fused call (identity or ReLU).
pub struct ActDesc(pub sys::cudnnActivationDescriptor_t);

impl ActDesc {
    pub fn new(relu: bool) -> EpResult<Self> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` receives a new descriptor.
        check(
            unsafe { sys::cudnnCreateActivationDescriptor(&mut raw) },
            "cudnnCreateActivationDescriptor",
        )?;
        let desc = ActDesc(raw);
        let mode = if relu {
            sys::cudnnActivationMode_t::CUDNN_ACTIVATION_RELU
        } else {
            sys::cudnnActivationMode_t::CUDNN_ACTIVATION_IDENTITY
        };
        // SAFETY: the descriptor is live.
        check(
            unsafe {
                sys::cudnnSetActivationDescriptor(
                    raw,
                    mode,
                    sys::cudnnNanPropagation_t::CUDNN_PROPAGATE_NAN,
                    0.0,
                )
            },
            "cudnnSetActivationDescriptor",
        )?;
        Ok(desc)
    }
}

impl Drop for ActDesc {
    fn drop(&mut self) {
        // SAFETY: ours.
        unsafe { sys::cudnnDestroyActivationDescriptor(self.0) };
    }
}

// SAFETY: descriptors are plain host objects; they are only read by cuDNN calls, which run
// under the handle's mutex, and written only when made.
unsafe impl Send for TensorDesc {}
// SAFETY: see above.
unsafe impl Sync for TensorDesc {}
// SAFETY: see above.
unsafe impl Send for FilterDesc {}
// SAFETY: see above.
unsafe impl Sync for FilterDesc {}
// SAFETY: see above (the math type is set under the plan's lock only).
unsafe impl Send for ConvDesc {}
// SAFETY: see above.
unsafe impl Sync for ConvDesc {}
// SAFETY: see above.
unsafe impl Send for ActDesc {}
// SAFETY: see above.
unsafe impl Sync for ActDesc {}

/// The output dims cuDNN computes for a forward convolution of `x` by `w` (a cross-check of
/// the ONNX geometry before any call runs).
pub fn forward_output_dims(
    conv: &ConvDesc,
    x: &TensorDesc,
    w: &FilterDesc,
    rank: usize,
) -> EpResult<Vec<usize>> {
    let mut dims = vec![0 as c_int; rank];
    // SAFETY: live descriptors; `dims` holds `rank` values.
    check(
        unsafe {
            sys::cudnnGetConvolutionNdForwardOutputDim(
                conv.0,
                x.0,
                w.0,
                rank as c_int,
                dims.as_mut_ptr(),
            )
        },
        "cudnnGetConvolutionNdForwardOutputDim",
    )?;
    Ok(dims.iter().map(|&d| d.max(0) as usize).collect())
}

/// A device address as cuDNN takes it.
pub fn dptr(p: CuPtr) -> *const c_void {
    p as usize as *const c_void
}

pub fn dptr_mut(p: CuPtr) -> *mut c_void {
    p as usize as *mut c_void
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_cudnn_message_names_the_pip_packages() {
        let m = unavailable_message("could not find cuDNN 9 (libcudnn.so.9) in 12 folders");
        assert!(m.contains("pip install nvidia-cudnn-cu13"), "{m}");
        assert!(m.contains("nvidia-cudnn-cu12"), "{m}");
        assert!(m.contains("Conv"), "{m}");
        // A detail that already says how to install is not repeated.
        let detail = format!("not found; {}", libs::CUDNN_INSTALL);
        let m = unavailable_message(&detail);
        assert_eq!(m.matches("nvidia-cudnn-cu13").count(), 1, "{m}");
    }

    #[test]
    fn ensure_cudnn_answers_without_panicking() {
        // On a machine without cuDNN (no GPU needed) the answer is the clear error; where
        // cuDNN is installed it loads and exports everything this module calls.
        match libs::ensure_cudnn() {
            Ok(path) => {
                let mut missing = libs::cudnn_missing_symbols(SYMBOLS);
                missing.extend(libs::cudnn_missing_symbols(super::super::graph::SYMBOLS));
                assert!(
                    missing.is_empty(),
                    "{}: missing {missing:?}",
                    path.display()
                );
            }
            Err(e) => {
                let m = unavailable_message(&detail(e));
                eprintln!("{m}");
                assert!(m.contains("nvidia-cudnn-cu13"), "{m}");
                assert!(m.contains("libcudnn.so.9"), "{m}");
            }
        }
    }
}
