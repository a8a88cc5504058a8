//! The CUDA runtime of one provider: context, one stream, caching allocator, copies, kernel
//! modules and launches, the device error word, and the CUDA graph capture lifecycle.
//!
//! Everything runs on one stream. cudarc's automatic multi-stream event tracking is disabled
//! (its events break stream capture with CUDA_ERROR_STREAM_CAPTURE_ISOLATION); we use the
//! driver's functions directly on that stream.

use crate::allocator::{size_class, CachingAllocator};
use crate::compiler::{compile_cubin, ModuleSpec};
use crate::libs;
use cudarc::driver::{result, sys, CudaContext, CudaStream, DriverError};
use onnx_runtime_ep_api::{CaptureSupport, EpError, EpResult, Kernel};
use std::any::{Any, TypeId};
use std::collections::HashMap;
use std::ffi::{c_void, CString};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// A device address as the driver takes it.
pub type CuPtr = sys::CUdeviceptr;

/// The driver's device address for a pointer from a [`onnx_runtime_ep_api::DeviceBuffer`].
pub fn cuptr(ptr: *const c_void) -> CuPtr {
    ptr as usize as CuPtr
}

pub(crate) fn drv(context: &str, e: DriverError) -> EpError {
    EpError::device(context, format!("{e:?}"))
}

/// A kernel function in a loaded module, and whether it may start before the kernel ahead of
/// it on the stream has finished (programmatic dependent launch, [`Function::overlapped`]).
#[derive(Clone, Copy, Debug)]
pub struct Function(sys::CUfunction, bool);

impl Function {
    /// Lets launches of this kernel overlap the tail of the kernel before it on the stream
    /// (programmatic dependent launch, sm_90 and newer, unless `ONNX_RUNTIME_CUDA_PDL=0`): the
    /// launch's own latency hides behind the previous kernel's last blocks.
    ///
    /// # Safety
    /// The kernel must call `pdl_wait()` (kernels/common.cuh) before it writes any global
    /// memory or reads any that a kernel ahead of it may write (model constants may be read
    /// before), so that everything the kernels before it did is complete and visible.
    pub unsafe fn overlapped(self) -> Function {
        Function(self.0, true)
    }

    /// This kernel launched the ordinary way (after the kernel ahead of it has finished),
    /// whatever [`Function::overlapped`] allowed: for a call whose operands the overlapped
    /// contract does not cover (weights that are not model constants).
    pub fn sequential(self) -> Function {
        Function(self.0, false)
    }

    /// [`Function::sequential`] unless `overlap` holds.
    ///
    /// # Safety
    /// As for [`Function::overlapped`] when `overlap` holds.
    pub unsafe fn overlapped_if(self, overlap: bool) -> Function {
        Function(self.0, overlap)
    }
}
// SAFETY: a CUfunction is a handle valid in its context from any thread.
unsafe impl Send for Function {}
// SAFETY: see above.
unsafe impl Sync for Function {}

/// A loaded CUBIN module.
pub struct Module {
    name: String,
    raw: sys::CUmodule,
    functions: Mutex<HashMap<String, Function>>,
}
// SAFETY: a CUmodule is a context-wide handle; lookups are guarded by the mutex.
unsafe impl Send for Module {}
// SAFETY: see above.
unsafe impl Sync for Module {}

impl Module {
    /// The kernel `name` (an `extern "C"` function of the module).
    pub fn function(&self, name: &str) -> EpResult<Function> {
        let mut functions = self.functions.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(f) = functions.get(name) {
            return Ok(*f);
        }
        let cname = CString::new(name).map_err(|e| EpError::device("cuda", e))?;
        // SAFETY: the module is loaded and stays loaded while self lives.
        let f = unsafe { result::module::get_function(self.raw, cname) }.map_err(|e| {
            drv(
                &format!("cuda: kernel '{name}' in module '{}'", self.name),
                e,
            )
        })?;
        functions.insert(name.to_string(), Function(f, false));
        Ok(Function(f, false))
    }
}

mod graph;
pub use graph::PooledGraph;

struct GraphState {
    graph: Option<sys::CUgraph>,
    exec: Option<sys::CUgraphExec>,
}

/// Context, stream, allocator and graph state of one provider. Shared by the provider and its
/// kernels through an `Arc`.
pub struct CudaRuntime {
    ctx: Arc<CudaContext>,
    stream: Arc<CudaStream>,
    ordinal: usize,
    arch: u32,
    sm_count: u32,
    alloc: Mutex<CachingAllocator>,
    graph: Mutex<GraphState>,
    capturing: AtomicBool,
    /// Whether float32 products and convolutions may use TF32 tensor cores.
    tf32: bool,
    /// Whether [`Function::overlapped`] kernels launch as programmatic dependents.
    pdl: bool,
    modules: Mutex<HashMap<ModuleSpec, Arc<Module>>>,
    /// Per-runtime state of library families (cuBLASLt and cuDNN handles, workspaces), by type.
    extensions: Mutex<HashMap<TypeId, Arc<dyn Any + Send + Sync>>>,
    /// Two u32 on the device: first error code, id of the kernel that raised it.
    err_word: CuPtr,
    kernel_names: Mutex<Vec<String>>,
}

// SAFETY: the raw graph handles are only touched under the `graph` mutex; the driver's handles
// are usable from any thread once the context is bound, which every entry point does.
unsafe impl Send for CudaRuntime {}
// SAFETY: see above.
unsafe impl Sync for CudaRuntime {}

impl std::fmt::Debug for CudaRuntime {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaRuntime")
            .field("ordinal", &self.ordinal)
            .field("arch", &self.arch)
            .finish()
    }
}

impl CudaRuntime {
    /// Opens device `ordinal`: finds and loads the driver, retains its primary context and
    /// creates the provider's stream.
    /// float32 stays true float32 unless `ONNX_RUNTIME_CUDA_TF32=1` is set
    /// ([`CudaRuntime::with_options`] decides in code).
    pub fn new(ordinal: usize) -> EpResult<Arc<Self>> {
        let tf32 = std::env::var("ONNX_RUNTIME_CUDA_TF32").is_ok_and(|v| v.trim() == "1");
        Self::with_options(ordinal, tf32)
    }

    /// Opens device `ordinal`; `tf32` lets float32 products and convolutions use TF32
    /// tensor cores (about 10 mantissa bits in the products; off by default).
    pub fn with_options(ordinal: usize, tf32: bool) -> EpResult<Arc<Self>> {
        libs::ensure_driver()?;
        result::init().map_err(|e| drv("cuda: cuInit", e))?;
        let count = result::device::get_count().map_err(|e| drv("cuda: device count", e))?;
        if ordinal >= count.max(0) as usize {
            return Err(EpError::device(
                "cuda",
                format!(
                    "device {ordinal} does not exist: {count} CUDA device(s) visible; pick an \
                     ordinal below {count} or check CUDA_VISIBLE_DEVICES"
                ),
            ));
        }
        let ctx = CudaContext::new(ordinal).map_err(|e| drv("cuda: context", e))?;
        // SAFETY: we use one stream and no CudaSlice, so nothing relies on cudarc's events.
        unsafe { ctx.disable_event_tracking() };
        let stream = ctx.new_stream().map_err(|e| drv("cuda: stream", e))?;
        let (major, minor) = ctx
            .compute_capability()
            .map_err(|e| drv("cuda: compute capability", e))?;
        let sm_count = ctx
            .attribute(sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)
            .map_err(|e| drv("cuda: multiprocessor count", e))?;
        // SAFETY: the context is bound (CudaContext::new binds it).
        let err_word = unsafe { result::malloc_sync(8) }.map_err(|e| drv("cuda: alloc", e))?;
        // SAFETY: err_word holds 8 bytes.
        unsafe { result::memset_d8_sync(err_word, 0, 8) }.map_err(|e| drv("cuda: memset", e))?;
        Ok(Arc::new(CudaRuntime {
            ctx,
            stream,
            ordinal,
            arch: (major * 10 + minor) as u32,
            sm_count: sm_count.max(1) as u32,
            alloc: Mutex::new(CachingAllocator::default()),
            graph: Mutex::new(GraphState {
                graph: None,
                exec: None,
            }),
            capturing: AtomicBool::new(false),
            tf32,
            // On by default on sm_90+ (measured on H100, docs/benchmarks/2026-12-07-gpu-session-21.md:
            // +4-5% decode tokens/s); ONNX_RUNTIME_CUDA_PDL=0 turns it off.
            pdl: major >= 9
                && !std::env::var("ONNX_RUNTIME_CUDA_PDL").is_ok_and(|v| v.trim() == "0"),
            modules: Mutex::new(HashMap::new()),
            extensions: Mutex::new(HashMap::new()),
            err_word,
            kernel_names: Mutex::new(Vec::new()),
        }))
    }

    /// Whether float32 products and convolutions may use TF32 tensor cores.
    pub fn tf32(&self) -> bool {
        self.tf32
    }

    pub fn ordinal(&self) -> usize {
        self.ordinal
    }

    /// The device's compute capability as `major * 10 + minor` (90 for an H100/H200).
    pub fn arch(&self) -> u32 {
        self.arch
    }

    pub fn device_name(&self) -> EpResult<String> {
        self.ctx.name().map_err(|e| drv("cuda: name", e))
    }

    /// The number of multiprocessors (sizes grids of reduction and tiled kernels).
    pub fn sm_count(&self) -> u32 {
        self.sm_count
    }

    /// The provider's one stream, for library calls (cuBLASLt, cuDNN) that take a stream.
    /// Work on it is ordered with every kernel launch and copy of the runtime.
    pub fn stream_handle(&self) -> sys::CUstream {
        self.raw_stream()
    }

    /// Makes the runtime's context current on the calling thread (before a library call).
    pub fn bind_thread(&self) -> EpResult<()> {
        self.bind()
    }

    /// The runtime's shared value of type `T` (a library handle, a workspace), made by `init`
    /// on first use and kept until the runtime is dropped. `init` runs outside the lock, so
    /// it may call back into the runtime; when two threads race, one value wins.
    pub fn extension<T: Any + Send + Sync>(
        &self,
        init: impl FnOnce(&CudaRuntime) -> EpResult<T>,
    ) -> EpResult<Arc<T>> {
        let key = TypeId::of::<T>();
        let lookup = |map: &HashMap<TypeId, Arc<dyn Any + Send + Sync>>| {
            map.get(&key).cloned().map(|v| {
                v.downcast::<T>()
                    .unwrap_or_else(|_| unreachable!("extension map is keyed by TypeId"))
            })
        };
        if let Some(v) = lookup(&self.extensions.lock().unwrap_or_else(|e| e.into_inner())) {
            return Ok(v);
        }
        self.refuse_during_capture("creating a library handle")?;
        let made: Arc<dyn Any + Send + Sync> = Arc::new(init(self)?);
        let mut map = self.extensions.lock().unwrap_or_else(|e| e.into_inner());
        let entry = map.entry(key).or_insert(made).clone();
        Ok(entry
            .downcast::<T>()
            .unwrap_or_else(|_| unreachable!("extension map is keyed by TypeId")))
    }

    fn bind(&self) -> EpResult<()> {
        self.ctx
            .bind_to_thread()
            .map_err(|e| drv("cuda: bind context", e))
    }

    fn raw_stream(&self) -> sys::CUstream {
        self.stream.cu_stream()
    }

    /// Whether a graph capture is in progress on the provider's stream.
    pub fn is_capturing(&self) -> bool {
        self.capturing.load(Ordering::Acquire)
    }

    fn refuse_during_capture(&self, what: &str) -> EpResult<()> {
        if self.is_capturing() {
            return Err(EpError::Capture {
                node: "cuda runtime".into(),
                message: format!(
                    "{what} is not allowed while a CUDA graph is being captured; do it before \
                     begin_graph_capture or after end_graph_capture"
                ),
            });
        }
        Ok(())
    }

    // ---- memory ----

    /// Device memory of at least `size` bytes from the caching allocator; returns the address
    /// and the size class reserved.
    pub fn allocate(&self, size: usize, align: usize) -> EpResult<(CuPtr, usize)> {
        if !align.is_power_of_two() || align > 256 {
            return Err(EpError::device(
                "cuda: allocate",
                format!(
                    "alignment {align} is not supported: device blocks are aligned to 256 bytes; \
                     ask for a power of two up to 256"
                ),
            ));
        }
        let class = size_class(size);
        let mut alloc = self.lock_alloc();
        if alloc.active_pool().is_some() {
            if let Some(ptr) = alloc.take_for_pool(class) {
                return Ok((ptr, class));
            }
            // A pooled capture (relaxed mode) may call the driver: the block joins the pool.
            self.bind()?;
            // SAFETY: the context is bound; cuMemAlloc enqueues nothing on the stream.
            let ptr = unsafe { result::malloc_sync(class) }.map_err(|e| {
                EpError::device(
                    "cuda: allocate during capture",
                    format!("cuMemAlloc of {class} bytes failed ({e:?})"),
                )
            })?;
            alloc.record_pool_new(ptr, class);
            return Ok((ptr, class));
        }
        if let Some(ptr) = alloc.take_cached(class) {
            return Ok((ptr, class));
        }
        if self.is_capturing() {
            return Err(EpError::Capture {
                node: "cuda allocator".into(),
                message: format!(
                    "no cached block of {class} bytes and cuMemAlloc cannot run during capture; \
                     allocate the buffers before begin_graph_capture"
                ),
            });
        }
        self.bind()?;
        // SAFETY: the context is bound.
        let ptr = match unsafe { result::malloc_sync(class) } {
            Ok(p) => p,
            Err(_) => {
                // Out of memory (or close to it): give the cached blocks back and retry once.
                self.stream
                    .synchronize()
                    .map_err(|e| drv("cuda: synchronize", e))?;
                for p in alloc.drain_cached() {
                    // SAFETY: cached blocks are ours and unused after the synchronize.
                    let _ = unsafe { result::free_sync(p) };
                }
                // SAFETY: as above.
                unsafe { result::malloc_sync(class) }.map_err(|e| {
                    EpError::device(
                        "cuda: allocate",
                        format!(
                            "cuMemAlloc of {class} bytes failed ({e:?}) with {} bytes in use; \
                             free tensors or use a smaller batch",
                            alloc.live_bytes()
                        ),
                    )
                })?
            }
        };
        alloc.record_new(ptr, class);
        Ok((ptr, class))
    }

    fn lock_alloc(&self) -> std::sync::MutexGuard<'_, CachingAllocator> {
        self.alloc.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Returns a block to the cache (no driver call).
    pub fn free(&self, ptr: CuPtr) -> EpResult<()> {
        let mut alloc = self.lock_alloc();
        alloc.release(ptr).map(|_| ()).ok_or_else(|| {
            EpError::device(
                "cuda: deallocate",
                format!("{ptr:#x} was not allocated by this provider (or was freed twice)"),
            )
        })
    }

    /// (bytes in use, bytes cached, blocks obtained from the driver).
    pub fn memory_stats(&self) -> (usize, usize, usize) {
        let a = self.alloc.lock().unwrap_or_else(|e| e.into_inner());
        (a.live_bytes(), a.cached_bytes(), a.driver_allocs)
    }

    // ---- copies ----

    /// Copies host bytes to the device, ordered on the provider's stream.
    ///
    /// # Safety
    /// `dst` must point to at least `src.len()` writable device bytes of this context.
    pub unsafe fn htod(&self, src: &[u8], dst: CuPtr) -> EpResult<()> {
        self.refuse_during_capture("a host-to-device copy")?;
        if src.is_empty() {
            return Ok(());
        }
        self.bind()?;
        result::memcpy_htod_async(dst, src, self.raw_stream()).map_err(|e| drv("cuda: htod", e))
    }

    /// Copies device bytes to the host and waits for them; reports any device-side error
    /// recorded by a kernel since the last synchronization.
    ///
    /// # Safety
    /// `src` must point to at least `dst.len()` readable device bytes of this context.
    pub unsafe fn dtoh(&self, dst: &mut [u8], src: CuPtr) -> EpResult<()> {
        self.refuse_during_capture("a device-to-host copy")?;
        self.bind()?;
        if !dst.is_empty() {
            result::memcpy_dtoh_async(dst, src, self.raw_stream())
                .map_err(|e| drv("cuda: dtoh", e))?;
        }
        self.synchronize()
    }

    /// Copies `bytes` bytes on the device, ordered on the stream (capturable).
    ///
    /// # Safety
    /// Both addresses must be valid for `bytes` bytes in this context.
    pub unsafe fn dtod(&self, src: CuPtr, dst: CuPtr, bytes: usize) -> EpResult<()> {
        if bytes == 0 {
            return Ok(());
        }
        self.bind()?;
        result::memcpy_dtod_async(dst, src, bytes, self.raw_stream())
            .map_err(|e| drv("cuda: dtod", e))
    }

    /// Waits for the stream; reports a device-side error a kernel recorded.
    pub fn synchronize(&self) -> EpResult<()> {
        self.refuse_during_capture("synchronizing the stream")?;
        self.bind()?;
        self.stream
            .synchronize()
            .map_err(|e| drv("cuda: synchronize", e))?;
        self.check_device_errors()
    }

    fn check_device_errors(&self) -> EpResult<()> {
        let mut word = [0u32; 2];
        // SAFETY: err_word holds 8 bytes; the stream is idle.
        unsafe { result::memcpy_dtoh_sync(&mut word, self.err_word) }
            .map_err(|e| drv("cuda: error word", e))?;
        if word[0] == 0 {
            return Ok(());
        }
        // SAFETY: as above.
        unsafe { result::memset_d8_sync(self.err_word, 0, 8) }
            .map_err(|e| drv("cuda: error word", e))?;
        let names = self.kernel_names.lock().unwrap_or_else(|e| e.into_inner());
        let node = names
            .get(word[1] as usize)
            .cloned()
            .unwrap_or_else(|| format!("kernel #{}", word[1]));
        let message = match word[0] {
            1 => "an index was out of range for the axis it indexes (accepted: [-dim, dim)); the \
                  affected elements were skipped (gathers wrote 0); fix the indices input"
                .to_string(),
            2 => "an integer division or modulus by zero (Div / Mod); the affected elements \
                  were set to 0; make sure the divisor has no zero element"
                .to_string(),
            16 => "a sequence_lens value of a recurrent op (RNN / GRU / LSTM) was outside \
                   [0, seq_length]; it was clamped; fix the sequence_lens input"
                .to_string(),
            code => format!("device error code {code}"),
        };
        Err(EpError::InvalidInput { node, message })
    }

    /// The device word kernels record errors in.
    pub fn err_ptr(&self) -> CuPtr {
        self.err_word
    }

    /// Registers a kernel's description; its id is what device errors name.
    pub(crate) fn register_kernel(&self, description: String) -> u32 {
        let mut names = self.kernel_names.lock().unwrap_or_else(|e| e.into_inner());
        names.push(description);
        (names.len() - 1) as u32
    }

    // ---- modules and launches ----

    /// The module for `spec`, compiled (or read from the cache) and loaded on first use.
    pub fn module(&self, spec: &ModuleSpec) -> EpResult<Arc<Module>> {
        if let Some(m) = self
            .modules
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(spec)
        {
            return Ok(m.clone());
        }
        self.refuse_during_capture("compiling or loading a kernel module")?;
        let cubin = compile_cubin(spec, self.arch)?;
        self.bind()?;
        let mut modules = self.modules.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(m) = modules.get(spec) {
            return Ok(m.clone());
        }
        // SAFETY: `cubin` is a complete CUBIN image; the context is bound.
        let raw = unsafe { result::module::load_data(cubin.as_ptr() as *const c_void) }
            .map_err(|e| drv(&format!("cuda: loading module '{}'", spec.name), e))?;
        let module = Arc::new(Module {
            name: spec.name.clone(),
            raw,
            functions: Mutex::new(HashMap::new()),
        });
        modules.insert(spec.clone(), module.clone());
        Ok(module)
    }

    /// Launches `f` with enough threads for `n` elements (a grid-stride loop covers the rest)
    /// on the provider's stream. `params` point at the kernel's arguments in order.
    ///
    /// # Safety
    /// `params` must match the kernel's signature, and every device address in them must be
    /// valid for the accesses the kernel makes.
    pub unsafe fn launch(&self, f: Function, n: u64, params: &mut [*mut c_void]) -> EpResult<()> {
        if n == 0 {
            return Ok(());
        }
        const BLOCK: u64 = 256;
        let max_blocks = u64::from(self.sm_count) * 16;
        let blocks = n.div_ceil(BLOCK).clamp(1, max_blocks) as u32;
        self.bind()?;
        self.launch_raw(f, (blocks, 1, 1), (BLOCK as u32, 1, 1), 0, params)
    }

    /// One launch on the provider's stream, as a programmatic dependent where `f` allows it.
    ///
    /// # Safety
    /// As for [`CudaRuntime::launch_cfg`]; the context is bound.
    unsafe fn launch_raw(
        &self,
        f: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        params: &mut [*mut c_void],
    ) -> EpResult<()> {
        if !(f.1 && self.pdl) {
            return result::launch_kernel(
                f.0,
                grid,
                block,
                shared_bytes,
                self.raw_stream(),
                params,
            )
            .map_err(|e| drv("cuda: kernel launch", e));
        }
        // SAFETY: an all-zero attribute is a valid value of the union; the id and value are set
        // below.
        let mut attr: sys::CUlaunchAttribute = std::mem::zeroed();
        attr.id = sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
        attr.value.programmaticStreamSerializationAllowed = 1;
        let config = sys::CUlaunchConfig {
            gridDimX: grid.0,
            gridDimY: grid.1,
            gridDimZ: grid.2,
            blockDimX: block.0,
            blockDimY: block.1,
            blockDimZ: block.2,
            sharedMemBytes: shared_bytes,
            hStream: self.raw_stream(),
            attrs: &mut attr,
            numAttrs: 1,
        };
        sys::cuLaunchKernelEx(&config, f.0, params.as_mut_ptr(), std::ptr::null_mut())
            .result()
            .map_err(|e| drv("cuda: kernel launch (programmatic dependent)", e))
    }

    /// Launches `f` with an explicit grid, block and dynamic shared memory (reductions,
    /// tiled kernels) on the provider's stream.
    ///
    /// # Safety
    /// As for [`CudaRuntime::launch`]; the kernel must be written for this block shape.
    pub unsafe fn launch_cfg(
        &self,
        f: Function,
        grid: (u32, u32, u32),
        block: (u32, u32, u32),
        shared_bytes: u32,
        params: &mut [*mut c_void],
    ) -> EpResult<()> {
        if grid.0 == 0 || grid.1 == 0 || grid.2 == 0 {
            return Ok(());
        }
        self.bind()?;
        // The 48 KiB default limit covers static and dynamic shared memory together, so a
        // kernel with static arrays needs the opt-in below 48 KiB of dynamic memory already
        // (the launch fails with CUDA_ERROR_INVALID_VALUE otherwise). Every kernel of this
        // crate keeps its static shared memory under 16 KiB.
        if shared_bytes > 32 * 1024 {
            result::function::set_function_attribute(
                f.0,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                shared_bytes as i32,
            )
            .map_err(|e| drv("cuda: shared memory attribute", e))?;
        }
        self.launch_raw(f, grid, block, shared_bytes, params)
    }

    // ---- graph capture ----

    /// Starts capturing the stream's work into a CUDA graph. Refuses, with each kernel's
    /// reason, when one of `kernels` cannot be captured now.
    pub fn begin_graph_capture(&self, kernels: &[&dyn Kernel]) -> EpResult<()> {
        let reasons: Vec<String> = kernels
            .iter()
            .enumerate()
            .filter_map(|(i, k)| match k.capture_support() {
                CaptureSupport::Supported => None,
                CaptureSupport::Unsupported { reason } => Some(format!("kernel {i}: {reason}")),
            })
            .collect();
        if !reasons.is_empty() {
            return Err(EpError::Capture {
                node: "cuda runtime".into(),
                message: format!(
                    "cannot capture: {}; run those kernels eagerly (or warm them once) first",
                    reasons.join("; ")
                ),
            });
        }
        if self.capturing.swap(true, Ordering::AcqRel) {
            return Err(EpError::Capture {
                node: "cuda runtime".into(),
                message: "a capture is already in progress; end or abort it first".into(),
            });
        }
        self.bind()?;
        // SAFETY: the stream is live.
        let begun = unsafe {
            result::stream::begin_capture(
                self.raw_stream(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        };
        if let Err(e) = begun {
            self.capturing.store(false, Ordering::Release);
            return Err(drv("cuda: begin capture", e));
        }
        Ok(())
    }

    /// Ends the capture and instantiates the graph, replacing any earlier one.
    pub fn end_graph_capture(&self) -> EpResult<()> {
        if !self.is_capturing() {
            return Err(EpError::Capture {
                node: "cuda runtime".into(),
                message: "end_graph_capture without begin_graph_capture".into(),
            });
        }
        self.bind()?;
        // SAFETY: the stream is capturing.
        let ended = unsafe { result::stream::end_capture(self.raw_stream()) };
        self.capturing.store(false, Ordering::Release);
        let graph = ended.map_err(|e| drv("cuda: end capture", e))?;
        // SAFETY: `graph` was just produced by the capture.
        let exec =
            match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
                Ok(exec) => exec,
                Err(e) => {
                    // SAFETY: the graph is ours and unused.
                    let _ = unsafe { result::graph::destroy(graph) };
                    return Err(drv("cuda: instantiate graph", e));
                }
            };
        let mut state = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        Self::destroy_graph(&mut state);
        state.graph = Some(graph);
        state.exec = Some(exec);
        Ok(())
    }

    /// Abandons a capture in progress (e.g. after a kernel refused to run); keeps any earlier
    /// graph. A no-op when nothing is being captured.
    pub fn abort_graph_capture(&self) -> EpResult<()> {
        if !self.is_capturing() {
            return Ok(());
        }
        self.bind()?;
        // SAFETY: the stream is capturing (possibly invalidated; the call ends it either way).
        let ended = unsafe { result::stream::end_capture(self.raw_stream()) };
        self.capturing.store(false, Ordering::Release);
        self.lock_alloc().end_pool(false);
        if let Ok(graph) = ended {
            if !graph.is_null() {
                // SAFETY: the graph is ours and unused.
                let _ = unsafe { result::graph::destroy(graph) };
            }
        }
        Ok(())
    }

    /// Launches the captured graph on the stream.
    pub fn replay_graph(&self) -> EpResult<()> {
        self.refuse_during_capture("replaying a graph")?;
        let state = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        let exec = state.exec.ok_or_else(|| EpError::Capture {
            node: "cuda runtime".into(),
            message: "no captured graph to replay; capture one first".into(),
        })?;
        self.bind()?;
        // SAFETY: the executable graph is live until reset.
        unsafe { result::graph::launch(exec, self.raw_stream()) }
            .map_err(|e| drv("cuda: graph launch", e))
    }

    /// Destroys the captured graph; returns whether there was one.
    pub fn reset_graph(&self) -> EpResult<bool> {
        self.refuse_during_capture("resetting the graph")?;
        self.bind()?;
        self.stream
            .synchronize()
            .map_err(|e| drv("cuda: synchronize", e))?;
        let mut state = self.graph.lock().unwrap_or_else(|e| e.into_inner());
        let had = state.exec.is_some() || state.graph.is_some();
        Self::destroy_graph(&mut state);
        Ok(had)
    }

    /// Whether an instantiated graph is ready to replay.
    pub fn has_graph_executable(&self) -> EpResult<bool> {
        Ok(self
            .graph
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .exec
            .is_some())
    }

    fn destroy_graph(state: &mut GraphState) {
        if let Some(exec) = state.exec.take() {
            // SAFETY: ours, and no launch of it is pending on the host side.
            let _ = unsafe { result::graph::exec_destroy(exec) };
        }
        if let Some(graph) = state.graph.take() {
            // SAFETY: ours.
            let _ = unsafe { result::graph::destroy(graph) };
        }
    }
}

impl Drop for CudaRuntime {
    fn drop(&mut self) {
        if self.ctx.bind_to_thread().is_err() {
            return;
        }
        if self.is_capturing() {
            let _ = self.abort_graph_capture();
        }
        let _ = self.stream.synchronize();
        Self::destroy_graph(self.graph.get_mut().unwrap_or_else(|e| e.into_inner()));
        for ptr in self
            .alloc
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain_all()
        {
            // SAFETY: every block is ours; the stream is idle.
            let _ = unsafe { result::free_sync(ptr) };
        }
        // SAFETY: as above.
        let _ = unsafe { result::free_sync(self.err_word) };
        for (_, module) in self
            .modules
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain()
        {
            // SAFETY: no kernel of this runtime outlives it (kernels hold an Arc to it).
            let _ = unsafe { result::module::unload(module.raw) };
        }
    }
}
