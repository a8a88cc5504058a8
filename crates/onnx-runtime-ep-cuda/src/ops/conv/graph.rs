//! cuDNN's backend (graph) API through cudarc's raw bindings: descriptors that destroy
//! themselves ([`Desc`]), the operation graph of one forward convolution
//! ([`ConvGraph`]: X, W and Y tensors with packed NCHW strides, the convolution descriptor and
//! the CONVOLUTION_FORWARD operation), the engine configurations cuDNN's heuristics propose
//! for it ([`engine_configs`]), each with its engine's global index and notes
//! ([`EngineInfo`]), execution plans made from them ([`ExecPlan`]) and their execution with
//! a variant pack of device pointers and workspace on the handle's stream.
//!
//! The engines behind this API include the tensor-core implicit-GEMM kernels that read NCHW
//! half tensors directly (the legacy `cudnnConvolutionForward` only offers slow NCHW-half
//! kernels for 3x3 windows). Which engine runs a shape is chosen in [`super::graph_plan`].
//!
//! Enum-valued attributes cuDNN writes back (numerical and behavior notes) are read as plain
//! integers, so a value newer than the bindings cannot become an invalid Rust enum.

use super::dnn::check;
use cudarc::cudnn::sys;
use onnx_runtime_ep_api::{EpError, EpResult};
use std::ffi::c_void;
use sys::cudnnBackendAttributeName_t as A;
use sys::cudnnBackendAttributeType_t as T;
use sys::cudnnBackendDescriptorType_t as D;

/// Every backend-API function this module calls (checked with the legacy ones before the
/// first call: an old cuDNN is reported by name rather than crashing in cudarc).
pub const SYMBOLS: &[&str] = &[
    "cudnnBackendCreateDescriptor",
    "cudnnBackendDestroyDescriptor",
    "cudnnBackendSetAttribute",
    "cudnnBackendGetAttribute",
    "cudnnBackendFinalize",
    "cudnnBackendExecute",
];

/// Unique ids of the graph's tensors (the variant pack names its pointers by them).
pub const UID_X: i64 = 1;
pub const UID_W: i64 = 2;
pub const UID_Y: i64 = 3;

/// The byte alignment the tensors declare; a call whose pointers are less aligned runs on
/// the legacy path (every buffer of the runtime's allocator is 256-byte aligned).
pub const ALIGNMENT: usize = 16;

/// One backend descriptor, destroyed on drop.
pub struct Desc {
    raw: sys::cudnnBackendDescriptor_t,
}

// SAFETY: backend descriptors are host objects; cuDNN reads them in calls made under the
// runtime's handle mutex (plans, executions) or while they are built by one thread.
unsafe impl Send for Desc {}
// SAFETY: see above; `&Desc` only hands the raw pointer to cuDNN calls.
unsafe impl Sync for Desc {}

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: ours; no call using it is in flight (executions are stream-ordered and
        // cuDNN does not keep descriptor memory for enqueued work).
        unsafe { sys::cudnnBackendDestroyDescriptor(self.raw) };
    }
}

impl Desc {
    pub fn new(kind: D) -> EpResult<Desc> {
        let mut raw: sys::cudnnBackendDescriptor_t = std::ptr::null_mut();
        // SAFETY: `raw` receives the new descriptor.
        check(
            unsafe { sys::cudnnBackendCreateDescriptor(kind, &mut raw) },
            &format!("cudnnBackendCreateDescriptor({kind:?})"),
        )?;
        if raw.is_null() {
            return Err(EpError::device(
                "cudnn",
                format!("cudnnBackendCreateDescriptor({kind:?}) returned null"),
            ));
        }
        Ok(Desc { raw })
    }

    pub fn raw(&self) -> sys::cudnnBackendDescriptor_t {
        self.raw
    }

    /// Sets `name` to `count` values of type `ty` at `values`.
    ///
    /// # Safety
    /// `values` must point to `count` values of the C type cuDNN reads for `ty`.
    unsafe fn set_raw(&self, name: A, ty: T, count: usize, values: *const c_void) -> EpResult<()> {
        check(
            sys::cudnnBackendSetAttribute(self.raw, name, ty, count as i64, values),
            &format!("cudnnBackendSetAttribute({name:?})"),
        )
    }

    pub fn set_i64s(&self, name: A, values: &[i64]) -> EpResult<()> {
        // SAFETY: int64 values.
        unsafe {
            self.set_raw(
                name,
                T::CUDNN_TYPE_INT64,
                values.len(),
                values.as_ptr() as *const c_void,
            )
        }
    }

    pub fn set_dtype(&self, name: A, value: sys::cudnnDataType_t) -> EpResult<()> {
        // SAFETY: one cudnnDataType_t (a C enum, 32 bits).
        unsafe {
            self.set_raw(
                name,
                T::CUDNN_TYPE_DATA_TYPE,
                1,
                &value as *const _ as *const c_void,
            )
        }
    }

    /// A 32-bit enum value of attribute type `ty` (convolution mode, heuristics mode).
    pub fn set_enum(&self, name: A, ty: T, value: u32) -> EpResult<()> {
        // SAFETY: the enums cuDNN reads for these types are 32-bit C enums.
        unsafe { self.set_raw(name, ty, 1, &value as *const u32 as *const c_void) }
    }

    pub fn set_descs(&self, name: A, values: &[&Desc]) -> EpResult<()> {
        let raw: Vec<sys::cudnnBackendDescriptor_t> = values.iter().map(|d| d.raw).collect();
        // SAFETY: descriptor handles, live for the call (cuDNN copies what it keeps).
        unsafe {
            self.set_raw(
                name,
                T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                raw.len(),
                raw.as_ptr() as *const c_void,
            )
        }
    }

    pub fn set_handle(&self, name: A, handle: sys::cudnnHandle_t) -> EpResult<()> {
        // SAFETY: one handle value.
        unsafe {
            self.set_raw(
                name,
                T::CUDNN_TYPE_HANDLE,
                1,
                &handle as *const sys::cudnnHandle_t as *const c_void,
            )
        }
    }

    pub fn set_f32(&self, name: A, value: f32) -> EpResult<()> {
        // SAFETY: one float.
        unsafe {
            self.set_raw(
                name,
                T::CUDNN_TYPE_FLOAT,
                1,
                &value as *const f32 as *const c_void,
            )
        }
    }

    pub fn set_f64(&self, name: A, value: f64) -> EpResult<()> {
        // SAFETY: one double.
        unsafe {
            self.set_raw(
                name,
                T::CUDNN_TYPE_DOUBLE,
                1,
                &value as *const f64 as *const c_void,
            )
        }
    }

    pub fn set_ptrs(&self, name: A, values: &[*mut c_void]) -> EpResult<()> {
        // SAFETY: void pointers (device addresses; cuDNN stores them, never reads them here).
        unsafe {
            self.set_raw(
                name,
                T::CUDNN_TYPE_VOID_PTR,
                values.len(),
                values.as_ptr() as *const c_void,
            )
        }
    }

    pub fn finalize(&self, what: &str) -> EpResult<()> {
        // SAFETY: a live descriptor.
        check(
            unsafe { sys::cudnnBackendFinalize(self.raw) },
            &format!("cudnnBackendFinalize({what})"),
        )
    }

    pub fn get_i64(&self, name: A) -> EpResult<i64> {
        let mut value = 0i64;
        let mut count = 0i64;
        // SAFETY: room for one int64.
        check(
            unsafe {
                sys::cudnnBackendGetAttribute(
                    self.raw,
                    name,
                    T::CUDNN_TYPE_INT64,
                    1,
                    &mut count,
                    &mut value as *mut i64 as *mut c_void,
                )
            },
            &format!("cudnnBackendGetAttribute({name:?})"),
        )?;
        Ok(value)
    }

    /// Up to `max` 32-bit enum values of type `ty`, as integers.
    pub fn get_enums(&self, name: A, ty: T, max: usize) -> EpResult<Vec<u32>> {
        let mut values = vec![0u32; max];
        let mut count = 0i64;
        // SAFETY: room for `max` 32-bit enum values.
        check(
            unsafe {
                sys::cudnnBackendGetAttribute(
                    self.raw,
                    name,
                    ty,
                    max as i64,
                    &mut count,
                    values.as_mut_ptr() as *mut c_void,
                )
            },
            &format!("cudnnBackendGetAttribute({name:?})"),
        )?;
        values.truncate((count.max(0) as usize).min(max));
        Ok(values)
    }

    /// Fills `out` (descriptors made by the caller, of the attribute's descriptor type)
    /// with the attribute's values; returns how many cuDNN wrote.
    pub fn get_descs(&self, name: A, out: &[Desc]) -> EpResult<usize> {
        let mut raw: Vec<sys::cudnnBackendDescriptor_t> = out.iter().map(|d| d.raw).collect();
        let mut count = 0i64;
        // SAFETY: `raw` holds `out.len()` live descriptors cuDNN writes into.
        check(
            unsafe {
                sys::cudnnBackendGetAttribute(
                    self.raw,
                    name,
                    T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    raw.len() as i64,
                    &mut count,
                    raw.as_mut_ptr() as *mut c_void,
                )
            },
            &format!("cudnnBackendGetAttribute({name:?})"),
        )?;
        Ok((count.max(0) as usize).min(out.len()))
    }

    /// How many descriptors the attribute holds.
    pub fn count_descs(&self, name: A) -> EpResult<usize> {
        let mut count = 0i64;
        // SAFETY: a count query (no elements requested, no array).
        check(
            unsafe {
                sys::cudnnBackendGetAttribute(
                    self.raw,
                    name,
                    T::CUDNN_TYPE_BACKEND_DESCRIPTOR,
                    0,
                    &mut count,
                    std::ptr::null_mut(),
                )
            },
            &format!("cudnnBackendGetAttribute({name:?}) count"),
        )?;
        Ok(count.max(0) as usize)
    }
}

/// Packed row-major strides of `dims`.
fn packed_strides(dims: &[i64]) -> Vec<i64> {
    let mut s = vec![1i64; dims.len()];
    for i in (0..dims.len().saturating_sub(1)).rev() {
        s[i] = s[i + 1] * dims[i + 1].max(1);
    }
    s
}

fn tensor(data: sys::cudnnDataType_t, dims: &[i64], uid: i64) -> EpResult<Desc> {
    let t = Desc::new(D::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    t.set_dtype(A::CUDNN_ATTR_TENSOR_DATA_TYPE, data)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_DIMENSIONS, dims)?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_STRIDES, &packed_strides(dims))?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[uid])?;
    t.set_i64s(A::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[ALIGNMENT as i64])?;
    t.finalize(&format!("tensor {dims:?}"))?;
    Ok(t)
}

/// The shapes of one forward convolution as cuDNN sees them (a 1-D convolution already
/// made 2-D): X [N, C, spatial...], W [M, C / group, kernel...] (the group count follows
/// from C and W's dim 1), Y [N, M, out...], all packed.
#[derive(Clone, Debug)]
pub struct ConvSpec {
    pub data: sys::cudnnDataType_t,
    pub compute: sys::cudnnDataType_t,
    pub x: Vec<i64>,
    pub w: Vec<i64>,
    pub y: Vec<i64>,
    /// Symmetric pads (the same before and after), strides, dilations: one per spatial axis.
    pub pads: Vec<i64>,
    pub strides: Vec<i64>,
    pub dilations: Vec<i64>,
}

/// The finalized operation graph of one forward convolution (its parts kept alive with it).
pub struct ConvGraph {
    pub graph: Desc,
    _op: Desc,
    _conv: Desc,
    _tensors: [Desc; 3],
}

/// The finalized CONVOLUTION_FORWARD operation of `s` with its convolution and tensor
/// descriptors (no handle needed).
fn conv_op(s: &ConvSpec) -> EpResult<(Desc, Desc, [Desc; 3])> {
    {
        let spatial = s.x.len().saturating_sub(2);
        if spatial == 0
            || s.w.len() != s.x.len()
            || s.y.len() != s.x.len()
            || [&s.pads, &s.strides, &s.dilations]
                .iter()
                .any(|v| v.len() != spatial)
        {
            return Err(EpError::device(
                "cudnn",
                format!("internal: inconsistent convolution spec {s:?}"),
            ));
        }
        let x = tensor(s.data, &s.x, UID_X)?;
        let w = tensor(s.data, &s.w, UID_W)?;
        let y = tensor(s.data, &s.y, UID_Y)?;
        let conv = Desc::new(D::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
        conv.set_dtype(A::CUDNN_ATTR_CONVOLUTION_COMP_TYPE, s.compute)?;
        conv.set_enum(
            A::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
            T::CUDNN_TYPE_CONVOLUTION_MODE,
            sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION as u32,
        )?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[spatial as i64])?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &s.pads)?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, &s.pads)?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, &s.strides)?;
        conv.set_i64s(A::CUDNN_ATTR_CONVOLUTION_DILATIONS, &s.dilations)?;
        conv.finalize("convolution")?;
        let op = Desc::new(D::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR)?;
        op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, &[&x])?;
        op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, &[&w])?;
        op.set_descs(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, &[&y])?;
        op.set_descs(
            A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
            &[&conv],
        )?;
        // alpha 1, beta 0: Y is written, not accumulated into. Double data scales in double.
        if s.data == sys::cudnnDataType_t::CUDNN_DATA_DOUBLE {
            op.set_f64(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, 1.0)?;
            op.set_f64(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, 0.0)?;
        } else {
            op.set_f32(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, 1.0)?;
            op.set_f32(A::CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, 0.0)?;
        }
        op.finalize("convolution forward operation")?;
        Ok((op, conv, [x, w, y]))
    }
}

impl ConvGraph {
    pub fn new(handle: sys::cudnnHandle_t, s: &ConvSpec) -> EpResult<ConvGraph> {
        let (op, conv, tensors) = conv_op(s)?;
        let graph = Desc::new(D::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        graph.set_descs(A::CUDNN_ATTR_OPERATIONGRAPH_OPS, &[&op])?;
        graph.set_handle(A::CUDNN_ATTR_OPERATIONGRAPH_HANDLE, handle)?;
        graph.finalize("operation graph")?;
        Ok(ConvGraph {
            graph,
            _op: op,
            _conv: conv,
            _tensors: tensors,
        })
    }
}

/// At most this many configurations are read from one heuristics query.
const MAX_CONFIGS: usize = 64;

/// The engine configurations cuDNN's heuristics `mode` proposes for `graph`, best first.
pub fn engine_configs(graph: &ConvGraph, mode: sys::cudnnBackendHeurMode_t) -> EpResult<Vec<Desc>> {
    let heur = Desc::new(D::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
    heur.set_descs(A::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[&graph.graph])?;
    heur.set_enum(
        A::CUDNN_ATTR_ENGINEHEUR_MODE,
        T::CUDNN_TYPE_HEUR_MODE,
        mode as u32,
    )?;
    heur.finalize(&format!("engine heuristics {mode:?}"))?;
    // A cuDNN that refuses the count query is asked for the most configurations read.
    let count = heur
        .count_descs(A::CUDNN_ATTR_ENGINEHEUR_RESULTS)
        .unwrap_or(MAX_CONFIGS)
        .min(MAX_CONFIGS);
    if count == 0 {
        return Ok(Vec::new());
    }
    let mut cfgs = (0..count)
        .map(|_| Desc::new(D::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
        .collect::<EpResult<Vec<_>>>()?;
    let got = heur.get_descs(A::CUDNN_ATTR_ENGINEHEUR_RESULTS, &cfgs)?;
    cfgs.truncate(got);
    Ok(cfgs)
}

/// What an engine configuration's engine is: cuDNN's global engine index and its notes.
#[derive(Clone, Debug, Default)]
pub struct EngineInfo {
    pub id: i64,
    /// `cudnnBackendNumericalNote_t` values.
    pub numerical: Vec<u32>,
    /// `cudnnBackendBehaviorNote_t` values.
    pub behavior: Vec<u32>,
}

pub const NOTE_TENSOR_CORE: u32 =
    sys::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_TENSOR_CORE as u32;
pub const NOTE_DOWN_CONVERT_INPUTS: u32 =
    sys::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS as u32;
pub const NOTE_REDUCED_PRECISION_REDUCTION: u32 =
    sys::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION as u32;
pub const NOTE_FFT: u32 = sys::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_FFT as u32;
pub const NOTE_WINOGRAD: u32 =
    sys::cudnnBackendNumericalNote_t::CUDNN_NUMERICAL_NOTE_WINOGRAD as u32;
pub const BEHAVIOR_RUNTIME_COMPILATION: u32 =
    sys::cudnnBackendBehaviorNote_t::CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION as u32;

/// The engine of configuration `cfg` and its notes.
pub fn engine_info(cfg: &Desc) -> EpResult<EngineInfo> {
    let engine = Desc::new(D::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
    let got = cfg.get_descs(
        A::CUDNN_ATTR_ENGINECFG_ENGINE,
        std::slice::from_ref(&engine),
    )?;
    if got != 1 {
        return Err(EpError::device(
            "cudnn",
            "an engine configuration without an engine",
        ));
    }
    Ok(EngineInfo {
        id: engine.get_i64(A::CUDNN_ATTR_ENGINE_GLOBAL_INDEX)?,
        numerical: engine.get_enums(
            A::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE,
            T::CUDNN_TYPE_NUMERICAL_NOTE,
            32,
        )?,
        behavior: engine.get_enums(
            A::CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE,
            T::CUDNN_TYPE_BEHAVIOR_NOTE,
            32,
        )?,
    })
}

/// A finalized execution plan with the workspace it needs, and the variant pack of the last
/// pointers it ran with (rebuilt only when they change).
pub struct ExecPlan {
    // Dropped in this order: the variant pack, the plan, then the configuration it was
    // made from.
    pack: Option<([usize; 4], Desc)>,
    plan: Desc,
    _cfg: Desc,
    pub workspace: usize,
    pub info: EngineInfo,
}

impl ExecPlan {
    /// The plan of configuration `cfg` on `handle` (fails for a configuration cuDNN cannot
    /// build here: the caller tries the next one).
    pub fn new(handle: sys::cudnnHandle_t, cfg: Desc, info: EngineInfo) -> EpResult<ExecPlan> {
        let plan = Desc::new(D::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR)?;
        plan.set_handle(A::CUDNN_ATTR_EXECUTION_PLAN_HANDLE, handle)?;
        plan.set_descs(A::CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[&cfg])?;
        plan.finalize(&format!("execution plan of engine {}", info.id))?;
        let ws = plan.get_i64(A::CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE)?;
        Ok(ExecPlan {
            pack: None,
            plan,
            _cfg: cfg,
            workspace: ws.max(0) as usize,
            info,
        })
    }

    /// Enqueues the convolution `y = conv(x, w)` on the handle's stream: `x`, `w`, `y` are
    /// device addresses of packed tensors of the graph's shapes, aligned to [`ALIGNMENT`];
    /// `ws` holds at least `self.workspace` bytes (or is 0 when that is 0).
    ///
    /// # Safety
    /// The pointers must be live device buffers of the graph's shapes and dtype, the handle
    /// the one the plan was made with and held by the caller (no concurrent use).
    pub unsafe fn execute(
        &mut self,
        handle: sys::cudnnHandle_t,
        x: u64,
        w: u64,
        y: u64,
        ws: u64,
    ) -> EpResult<()> {
        let key = [x as usize, w as usize, y as usize, ws as usize];
        let stale = self.pack.as_ref().is_none_or(|(k, _)| *k != key);
        if stale {
            self.pack = None;
            let vp = Desc::new(D::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
            let ptrs = [x, w, y].map(|p| p as usize as *mut c_void);
            vp.set_ptrs(A::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, &ptrs)?;
            vp.set_i64s(
                A::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                &[UID_X, UID_W, UID_Y],
            )?;
            vp.set_ptrs(
                A::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                &[ws as usize as *mut c_void],
            )?;
            vp.finalize("variant pack")?;
            self.pack = Some((key, vp));
        }
        let Some((_, vp)) = self.pack.as_ref() else {
            return Err(EpError::device("cudnn", "internal: no variant pack"));
        };
        check(
            sys::cudnnBackendExecute(handle, self.plan.raw(), vp.raw()),
            &format!("cudnnBackendExecute (engine {})", self.info.id),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn packed_strides_are_row_major() {
        assert_eq!(packed_strides(&[2, 3, 4, 5]), vec![60, 20, 5, 1]);
        assert_eq!(packed_strides(&[1, 8, 1, 1]), vec![8, 1, 1, 1]);
        assert_eq!(packed_strides(&[7]), vec![1]);
    }

    /// Where cuDNN is installed (no device needed), the tensor, convolution and operation
    /// descriptors of 2-D and 3-D, grouped and dilated half / float convolutions finalize,
    /// and a bad one is an error, not a crash.
    #[test]
    fn conv_operation_descriptors_finalize_where_cudnn_loads() {
        let Ok(path) = crate::libs::ensure_cudnn() else {
            eprintln!("no cuDNN here: descriptor test skipped");
            return;
        };
        let missing = crate::libs::cudnn_missing_symbols(SYMBOLS);
        assert!(
            missing.is_empty(),
            "{}: missing {missing:?}",
            path.display()
        );
        use sys::cudnnDataType_t::*;
        let spec = |data, x: &[i64], w: &[i64], y: &[i64], p: i64, st: i64, d: i64| ConvSpec {
            data,
            compute: CUDNN_DATA_FLOAT,
            x: x.to_vec(),
            w: w.to_vec(),
            y: y.to_vec(),
            pads: vec![p; x.len() - 2],
            strides: vec![st; x.len() - 2],
            dilations: vec![d; x.len() - 2],
        };
        for s in [
            spec(
                CUDNN_DATA_HALF,
                &[1, 64, 56, 56],
                &[64, 64, 3, 3],
                &[1, 64, 56, 56],
                1,
                1,
                1,
            ),
            spec(
                CUDNN_DATA_BFLOAT16,
                &[8, 16, 15, 15],
                &[32, 16, 3, 3],
                &[8, 32, 8, 8],
                1,
                2,
                1,
            ),
            spec(
                CUDNN_DATA_HALF,
                &[2, 32, 10, 10],
                &[32, 1, 3, 3],
                &[2, 32, 10, 10],
                1,
                1,
                1,
            ),
            spec(
                CUDNN_DATA_FLOAT,
                &[1, 16, 13, 13],
                &[16, 16, 3, 3],
                &[1, 16, 13, 13],
                2,
                1,
                2,
            ),
            spec(
                CUDNN_DATA_HALF,
                &[1, 8, 5, 6, 6],
                &[8, 8, 3, 3, 3],
                &[1, 8, 5, 6, 6],
                1,
                1,
                1,
            ),
        ] {
            match conv_op(&s) {
                Ok(_) => {}
                // cuDNN's engine libraries need the CUDA driver (libcuda.so.1) to load.
                Err(e) if e.to_string().contains("SUBLIBRARY_LOADING_FAILED") => {
                    eprintln!("cuDNN loads but its sub-libraries do not ({e}): test skipped");
                    return;
                }
                Err(e) => panic!("{s:?}: {e}"),
            }
        }
        // Y of the wrong size: refused at finalize.
        let bad = spec(
            CUDNN_DATA_HALF,
            &[1, 8, 8, 8],
            &[8, 8, 3, 3],
            &[1, 8, 3, 3],
            1,
            1,
            1,
        );
        assert!(conv_op(&bad).is_err());
    }

    #[test]
    fn backend_symbols_are_named() {
        assert!(SYMBOLS.contains(&"cudnnBackendExecute"));
        assert!(SYMBOLS.iter().all(|s| s.starts_with("cudnnBackend")));
    }
}
