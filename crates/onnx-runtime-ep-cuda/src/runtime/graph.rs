//! Whole-run device graphs: a capture with a private memory pool (the session's automatic
//! CUDA graphs), its replays, and its teardown.
//!
//! `begin_pooled_capture` starts recording the stream and points the allocator at a fresh
//! pool: every block the captured work is handed comes from the shared cache into the pool
//! (a warm-up run of the same work has just filled the cache with blocks of the right sizes),
//! or fresh from the driver when the cache runs short (the capture runs in relaxed mode, where
//! `cuMemAlloc` is allowed), and a block the capture frees is reused only
//! by the capture's later work, as stream order allows. The finished graph owns the pool:
//! its replays use those addresses, so nobody else gets them until the graph is dropped.

use super::{drv, CudaRuntime};
use cudarc::driver::{result, sys};
use onnx_runtime_ep_api::{DeviceGraph, EpError, EpResult};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// A captured, instantiated graph and the pool of memory its replays use.
pub struct PooledGraph {
    rt: Arc<CudaRuntime>,
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    pool: u32,
}

// SAFETY: the graph handles are used only through `replay` (one launch call, which the driver
// allows from any thread with the context bound) and `drop`.
unsafe impl Send for PooledGraph {}
// SAFETY: see above.
unsafe impl Sync for PooledGraph {}

impl CudaRuntime {
    /// Starts capturing the stream with a private memory pool (see the module docs).
    pub fn begin_pooled_capture(&self) -> EpResult<()> {
        if self.capturing.swap(true, Ordering::AcqRel) {
            return Err(EpError::Capture {
                node: "cuda runtime".into(),
                message: "a capture is already in progress; end or abort it first".into(),
            });
        }
        if let Err(e) = self.bind() {
            self.capturing.store(false, Ordering::Release);
            return Err(e);
        }
        self.lock_alloc().begin_pool();
        // SAFETY: the stream is live.
        let begun = unsafe {
            result::stream::begin_capture(
                self.raw_stream(),
                // Relaxed: the capture may take fresh device memory (cuMemAlloc) when the
                // cache runs short; the runtime itself refuses copies and syncs meanwhile.
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_RELAXED,
            )
        };
        if let Err(e) = begun {
            self.lock_alloc().end_pool(false);
            self.capturing.store(false, Ordering::Release);
            return Err(drv("cuda: begin capture", e));
        }
        Ok(())
    }

    /// Ends the pooled capture and instantiates its graph, which takes the pool.
    pub fn end_pooled_capture(self: &Arc<Self>) -> EpResult<PooledGraph> {
        if !self.is_capturing() || self.lock_alloc().active_pool().is_none() {
            return Err(EpError::Capture {
                node: "cuda runtime".into(),
                message: "end_capture without begin_capture".into(),
            });
        }
        self.bind()?;
        // SAFETY: the stream is capturing.
        let ended = unsafe { result::stream::end_capture(self.raw_stream()) };
        self.capturing.store(false, Ordering::Release);
        let graph = match ended {
            Ok(g) if !g.is_null() => g,
            Ok(_) => {
                self.lock_alloc().end_pool(false);
                return Err(EpError::Capture {
                    node: "cuda runtime".into(),
                    message: "the capture recorded no graph".into(),
                });
            }
            Err(e) => {
                self.lock_alloc().end_pool(false);
                return Err(drv("cuda: end capture", e));
            }
        };
        // SAFETY: `graph` was just produced by the capture.
        let exec =
            match unsafe { result::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) } {
                Ok(exec) => exec,
                Err(e) => {
                    // SAFETY: the graph is ours and unused.
                    let _ = unsafe { result::graph::destroy(graph) };
                    self.lock_alloc().end_pool(false);
                    return Err(drv("cuda: instantiate graph", e));
                }
            };
        let pool = self
            .lock_alloc()
            .end_pool(true)
            .expect("the pool was active until now");
        Ok(PooledGraph {
            rt: self.clone(),
            graph,
            exec,
            pool,
        })
    }

    /// Abandons a pooled capture in progress; a no-op without one.
    pub fn abort_pooled_capture(&self) {
        if self.lock_alloc().active_pool().is_none() {
            return;
        }
        let _ = self.abort_graph_capture();
    }
}

impl DeviceGraph for PooledGraph {
    fn replay(&self) -> EpResult<()> {
        if self.rt.is_capturing() {
            return Err(EpError::Capture {
                node: "cuda runtime".into(),
                message: "replaying a graph is not allowed while another is being captured".into(),
            });
        }
        self.rt.bind()?;
        // SAFETY: the executable graph lives as long as `self`.
        unsafe { result::graph::launch(self.exec, self.rt.raw_stream()) }
            .map_err(|e| drv("cuda: graph launch", e))
    }

    fn memory_bytes(&self) -> usize {
        self.rt.lock_alloc().pool_size(self.pool)
    }
}

impl Drop for PooledGraph {
    fn drop(&mut self) {
        if self.rt.bind().is_ok() {
            // A replay may still be running: wait before the memory goes back.
            let _ = self.rt.stream.synchronize();
            // SAFETY: ours, and no launch of it is pending after the synchronize.
            let _ = unsafe { result::graph::exec_destroy(self.exec) };
            // SAFETY: ours.
            let _ = unsafe { result::graph::destroy(self.graph) };
        }
        self.rt.lock_alloc().drop_pool(self.pool);
    }
}
