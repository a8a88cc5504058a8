//! The cuBLASLt wrapper: one handle and one workspace per runtime ([`BlasState`]), and
//! [`Plan`]s: a matmul descriptor, four matrix layouts and the heuristic's algorithm for one
//! problem, made once and replayed by every call with that problem.
//!
//! We use cudarc's `sys` level directly on the runtime's raw stream: its safe wrapper tracks
//! events on its own streams, which breaks graph capture.

use crate::libs;
use crate::runtime::{CuPtr, CudaRuntime};
use cudarc::cublaslt::result::CublasError;
use cudarc::cublaslt::sys;
use onnx_runtime_ep_api::{EpError, EpResult};
use onnx_runtime_ir::DataType;
use std::ffi::c_void;
use std::sync::Arc;

/// The workspace every product of a runtime shares (they all run on its one stream).
pub const WORKSPACE_BYTES: usize = 32 << 20;

pub fn blas_err(what: &str, e: CublasError) -> EpError {
    EpError::device(format!("cublaslt: {what}"), format!("{:?}", e.0))
}

/// A runtime's cuBLASLt handle and workspace (made on first use, outside capture).
pub struct BlasState {
    handle: sys::cublasLtHandle_t,
    workspace: CuPtr,
}

// SAFETY: the handle holds no thread affinity; calls are ordered on the runtime's one stream.
unsafe impl Send for BlasState {}
// SAFETY: see above.
unsafe impl Sync for BlasState {}

impl BlasState {
    /// The runtime's state, made on first use: finds and loads cuBLASLt (an error naming the
    /// package when it is missing), creates the handle and allocates the workspace.
    pub fn of(rt: &Arc<CudaRuntime>) -> EpResult<Arc<BlasState>> {
        rt.extension::<BlasState>(|rt| {
            libs::ensure_cublaslt().map_err(|e| {
                EpError::device(
                    "cuda: MatMul/Gemm",
                    format!("the CUDA provider's matrix products need cuBLASLt: {e}"),
                )
            })?;
            rt.bind_thread()?;
            let mut handle: sys::cublasLtHandle_t = std::ptr::null_mut();
            // SAFETY: cuBLASLt is loaded; the out-pointer is valid.
            unsafe { sys::cublasLtCreate(&mut handle) }
                .result()
                .map_err(|e| blas_err("cublasLtCreate", e))?;
            let workspace = match rt.allocate(WORKSPACE_BYTES, 256) {
                Ok((ptr, _)) => ptr,
                Err(e) => {
                    // SAFETY: the handle was just created and is unused.
                    let _ = unsafe { sys::cublasLtDestroy(handle) };
                    return Err(e);
                }
            };
            Ok(BlasState { handle, workspace })
        })
    }
}

impl Drop for BlasState {
    fn drop(&mut self) {
        // SAFETY: ours; no call uses it any more (the runtime is being dropped). The workspace
        // is a block of the runtime's allocator, which frees its blocks itself.
        let _ = unsafe { sys::cublasLtDestroy(self.handle) };
    }
}

/// Element type, compute type and scale type of a product.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum BlasType {
    F32,
    /// float32 data on TF32 tensor cores (the provider's `tf32` option).
    F32Tf32,
    F16,
    BF16,
    F64,
}

impl BlasType {
    /// The product type for `dtype`; `tf32` lets float32 use TF32 tensor cores.
    pub fn of(dtype: DataType, tf32: bool) -> Option<BlasType> {
        Some(match dtype {
            DataType::Float32 if tf32 => BlasType::F32Tf32,
            DataType::Float32 => BlasType::F32,
            DataType::Float16 => BlasType::F16,
            DataType::BFloat16 => BlasType::BF16,
            DataType::Float64 => BlasType::F64,
            _ => return None,
        })
    }

    fn data(self) -> sys::cudaDataType {
        match self {
            BlasType::F32 | BlasType::F32Tf32 => sys::cudaDataType::CUDA_R_32F,
            BlasType::F16 => sys::cudaDataType::CUDA_R_16F,
            BlasType::BF16 => sys::cudaDataType::CUDA_R_16BF,
            BlasType::F64 => sys::cudaDataType::CUDA_R_64F,
        }
    }

    fn compute(self) -> sys::cublasComputeType_t {
        match self {
            BlasType::F32Tf32 => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F_FAST_TF32,
            BlasType::F64 => sys::cublasComputeType_t::CUBLAS_COMPUTE_64F,
            _ => sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
        }
    }

    fn scale(self) -> sys::cudaDataType {
        match self {
            BlasType::F64 => sys::cudaDataType::CUDA_R_64F,
            _ => sys::cudaDataType::CUDA_R_32F,
        }
    }

    /// Whether alpha and beta are doubles.
    pub fn double_scale(self) -> bool {
        self == BlasType::F64
    }
}

/// What cuBLASLt applies to the product before storing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Epi {
    None,
    /// `+ bias` per row of D (per output column of the row-major product).
    Bias,
    ReluBias,
    /// The tanh approximation of GELU after the bias.
    GeluBias,
}

impl Epi {
    fn raw(self) -> sys::cublasLtEpilogue_t {
        match self {
            Epi::None => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_DEFAULT,
            Epi::Bias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_BIAS,
            Epi::ReluBias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_RELU_BIAS,
            Epi::GeluBias => sys::cublasLtEpilogue_t::CUBLASLT_EPILOGUE_GELU_BIAS,
        }
    }
}

/// A column-major matrix layout (batched when `batch > 1`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct LayoutKey {
    pub rows: u64,
    pub cols: u64,
    pub ld: i64,
    pub batch: i32,
    pub stride: i64,
}

/// Everything a plan depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct PlanKey {
    pub ty: BlasType,
    pub trans_a: bool,
    pub trans_b: bool,
    pub a: LayoutKey,
    pub b: LayoutKey,
    pub c: LayoutKey,
    pub d: LayoutKey,
    pub epi: Epi,
    /// Byte alignment of A, B, C, D and the bias (and of every batch offset added to them).
    pub align: [u32; 5],
}

struct Desc(sys::cublasLtMatmulDesc_t);
impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: ours.
        let _ = unsafe { sys::cublasLtMatmulDescDestroy(self.0) };
    }
}

struct Layout(sys::cublasLtMatrixLayout_t);
impl Drop for Layout {
    fn drop(&mut self) {
        // SAFETY: ours.
        let _ = unsafe { sys::cublasLtMatrixLayoutDestroy(self.0) };
    }
}

struct Pref(sys::cublasLtMatmulPreference_t);
impl Drop for Pref {
    fn drop(&mut self) {
        // SAFETY: ours.
        let _ = unsafe { sys::cublasLtMatmulPreferenceDestroy(self.0) };
    }
}

fn set_desc<T>(
    d: &Desc,
    attr: sys::cublasLtMatmulDescAttributes_t,
    v: &T,
) -> Result<(), CublasError> {
    // SAFETY: `v` is a live value of the attribute's type and size.
    unsafe {
        sys::cublasLtMatmulDescSetAttribute(
            d.0,
            attr,
            v as *const T as *const c_void,
            std::mem::size_of::<T>(),
        )
    }
    .result()
}

fn layout(ty: BlasType, k: &LayoutKey) -> Result<Layout, CublasError> {
    let mut raw: sys::cublasLtMatrixLayout_t = std::ptr::null_mut();
    // SAFETY: the out-pointer is valid.
    unsafe { sys::cublasLtMatrixLayoutCreate(&mut raw, ty.data(), k.rows, k.cols, k.ld) }
        .result()?;
    let l = Layout(raw);
    if k.batch > 1 {
        let set = |attr, v: *const c_void, size| {
            // SAFETY: `v` points at a live value of `size` bytes.
            unsafe { sys::cublasLtMatrixLayoutSetAttribute(l.0, attr, v, size) }.result()
        };
        set(
            sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
            &k.batch as *const i32 as *const c_void,
            4,
        )?;
        set(
            sys::cublasLtMatrixLayoutAttribute_t::CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
            &k.stride as *const i64 as *const c_void,
            8,
        )?;
    }
    Ok(l)
}

/// One problem's descriptors and chosen algorithm.
pub struct Plan {
    desc: Desc,
    a: Layout,
    b: Layout,
    c: Layout,
    d: Layout,
    algo: sys::cublasLtMatmulAlgo_t,
    /// Whether the key's epilogue runs inside cuBLASLt; when not (no algorithm for it), the
    /// caller applies the bias and activation itself.
    pub fused: bool,
}

// SAFETY: the descriptors are host objects used under the owning kernel's lock.
unsafe impl Send for Plan {}

impl Plan {
    /// Makes the descriptors and asks the heuristic for an algorithm; when none exists for the
    /// key's epilogue, plans the plain product instead (`fused = false`).
    pub fn new(blas: &BlasState, key: &PlanKey, bias: CuPtr) -> EpResult<Plan> {
        match Self::build(blas, key, key.epi, bias) {
            Ok(p) => Ok(p),
            Err(_) if key.epi != Epi::None => Self::build(blas, key, Epi::None, 0)
                .map(|mut p| {
                    p.fused = false;
                    p
                })
                .map_err(|e| blas_err(&format!("no algorithm for {key:?}"), e)),
            Err(e) => Err(blas_err(&format!("no algorithm for {key:?}"), e)),
        }
    }

    fn build(blas: &BlasState, key: &PlanKey, epi: Epi, bias: CuPtr) -> Result<Plan, CublasError> {
        use sys::cublasLtMatmulDescAttributes_t as D;
        let ty = key.ty;
        let mut raw: sys::cublasLtMatmulDesc_t = std::ptr::null_mut();
        // SAFETY: the out-pointer is valid.
        unsafe { sys::cublasLtMatmulDescCreate(&mut raw, ty.compute(), ty.scale()) }.result()?;
        let desc = Desc(raw);
        let op = |t: bool| -> i32 { i32::from(t) }; // CUBLAS_OP_N = 0, CUBLAS_OP_T = 1
        set_desc(&desc, D::CUBLASLT_MATMUL_DESC_TRANSA, &op(key.trans_a))?;
        set_desc(&desc, D::CUBLASLT_MATMUL_DESC_TRANSB, &op(key.trans_b))?;
        if epi != Epi::None {
            set_desc(&desc, D::CUBLASLT_MATMUL_DESC_EPILOGUE, &(epi.raw() as u32))?;
            let p = bias as usize as *const c_void;
            set_desc(&desc, D::CUBLASLT_MATMUL_DESC_BIAS_POINTER, &p)?;
            // One bias vector for every matrix of a batch.
            set_desc(&desc, D::CUBLASLT_MATMUL_DESC_BIAS_BATCH_STRIDE, &0i64)?;
        }
        let (a, b, c, d) = (
            layout(ty, &key.a)?,
            layout(ty, &key.b)?,
            layout(ty, &key.c)?,
            layout(ty, &key.d)?,
        );
        let mut raw_pref: sys::cublasLtMatmulPreference_t = std::ptr::null_mut();
        // SAFETY: the out-pointer is valid.
        unsafe { sys::cublasLtMatmulPreferenceCreate(&mut raw_pref) }.result()?;
        let pref = Pref(raw_pref);
        {
            use sys::cublasLtMatmulPreferenceAttributes_t as P;
            let set = |attr, v: *const c_void, size| {
                // SAFETY: `v` points at a live value of `size` bytes.
                unsafe { sys::cublasLtMatmulPreferenceSetAttribute(pref.0, attr, v, size) }.result()
            };
            let ws = WORKSPACE_BYTES as u64;
            set(
                P::CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                &ws as *const u64 as *const c_void,
                8,
            )?;
            let attrs = [
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                P::CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
            ];
            for (attr, align) in attrs.into_iter().zip(key.align) {
                set(attr, &align as *const u32 as *const c_void, 4)?;
            }
        }
        // SAFETY: an all-zero heuristic result is a valid value (status SUCCESS, empty algo).
        let mut result: sys::cublasLtMatmulHeuristicResult_t = unsafe { std::mem::zeroed() };
        let mut count: i32 = 0;
        // SAFETY: every descriptor is live; the result array holds one entry.
        unsafe {
            sys::cublasLtMatmulAlgoGetHeuristic(
                blas.handle,
                desc.0,
                a.0,
                b.0,
                c.0,
                d.0,
                pref.0,
                1,
                &mut result,
                &mut count,
            )
        }
        .result()?;
        if count < 1 {
            return Err(CublasError(
                sys::cublasStatus_t::CUBLAS_STATUS_NOT_SUPPORTED,
            ));
        }
        result.state.result()?;
        Ok(Plan {
            desc,
            a,
            b,
            c,
            d,
            algo: result.algo,
            fused: epi != Epi::None,
        })
    }

    /// Enqueues `D = alpha * op(A) op(B) + beta * C` (+ the fused epilogue with `bias`) on the
    /// runtime's stream. `alpha`/`beta` point at host scalars of the plan's scale type.
    ///
    /// # Safety
    /// Every address must be valid for the layouts of the plan; `alpha`/`beta` must point at
    /// live `f32`s (`f64`s for float64 plans).
    #[allow(clippy::too_many_arguments)]
    pub unsafe fn run(
        &self,
        blas: &BlasState,
        rt: &CudaRuntime,
        alpha: *const c_void,
        beta: *const c_void,
        ptrs: [CuPtr; 4],
        bias: Option<CuPtr>,
    ) -> EpResult<()> {
        if self.fused {
            if let Some(bias) = bias {
                let p = bias as usize as *const c_void;
                set_desc(
                    &self.desc,
                    sys::cublasLtMatmulDescAttributes_t::CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                    &p,
                )
                .map_err(|e| blas_err("bias pointer", e))?;
            }
        }
        let [a, b, c, d] = ptrs.map(|p| p as usize as *mut c_void);
        sys::cublasLtMatmul(
            blas.handle,
            self.desc.0,
            alpha,
            a,
            self.a.0,
            b,
            self.b.0,
            beta,
            c,
            self.c.0,
            d,
            self.d.0,
            &self.algo,
            blas.workspace as usize as *mut c_void,
            WORKSPACE_BYTES,
            rt.stream_handle() as sys::cudaStream_t,
        )
        .result()
        .map_err(|e| blas_err("cublasLtMatmul", e))
    }
}
