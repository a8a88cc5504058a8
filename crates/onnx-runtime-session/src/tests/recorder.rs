//! A stand-in device provider for session tests: host memory, kernels as closures that run
//! now or are recorded during a capture and replayed, and counters of every copy, launch and
//! host read of device memory.

use super::*;
use crate::{CudaGraph, Session};
use onnx_runtime_ep_api::{
    CaptureSupport, DeviceBuffer, DeviceGraph, DeviceId, DeviceKind, DevicePtr, DevicePtrMut,
    EpError, ExecutionProvider, Kernel, TensorMut, TensorView,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

#[derive(Default)]
pub(super) struct Counters {
    pub(super) uploads: AtomicUsize,
    pub(super) downloads: AtomicUsize,
    /// Copies from device memory to device memory.
    pub(super) device_copies: AtomicUsize,
    /// Kernel executions outside a capture (eager launches).
    pub(super) launches: AtomicUsize,
    pub(super) recorded: AtomicUsize,
    pub(super) replays: AtomicUsize,
    /// Host reads of device memory by kernels (what a shape input on the device costs).
    pub(super) device_reads: AtomicUsize,
}

type Launch = Box<dyn Fn() + Send + Sync>;

/// Host-memory "device" whose kernels are closures: run now, or recorded during a capture.
pub(super) struct Recorder {
    buffers: Mutex<HashMap<usize, Vec<u64>>>,
    /// During a capture: what it recorded so far.
    capture: Mutex<Option<Capture>>,
    /// Blocks of finished graphs (kept for their replays; freed with the graph).
    graphs: Mutex<std::collections::HashSet<usize>>,
    counters: Arc<Counters>,
}

#[derive(Default)]
struct Capture {
    launches: Vec<Launch>,
    /// Blocks allocated during the capture, and those of them freed during it.
    blocks: Vec<usize>,
    freed: Vec<usize>,
}

impl Recorder {
    pub(super) fn new() -> (Arc<Recorder>, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        let dev = Recorder {
            buffers: Mutex::new(HashMap::new()),
            capture: Mutex::new(None),
            graphs: Mutex::default(),
            counters: counters.clone(),
        };
        (Arc::new(dev), counters)
    }

    pub(super) fn live(&self) -> usize {
        self.buffers.lock().unwrap().len()
    }

    fn capturing(&self) -> bool {
        self.capture.lock().unwrap().is_some()
    }
}

struct RecKernel {
    op: String,
    dev: Arc<Recorder>,
}

pub(super) fn f32s(ptr: usize, n: usize) -> Vec<f32> {
    // SAFETY: recorder pointers are host memory holding `n` floats.
    unsafe { std::slice::from_raw_parts(ptr as *const f32, n).to_vec() }
}

pub(super) fn write_f32s(ptr: usize, v: &[f32]) {
    // SAFETY: as above, for the output buffer.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), ptr as *mut f32, v.len()) }
}

/// An element-wise launch over `n` floats: y = f(x, b) (both read before y is written).
fn binary(x: usize, b: usize, n: usize, y: usize, f: fn(f32, f32) -> f32) -> Launch {
    Box::new(move || {
        let v: Vec<f32> = f32s(x, n)
            .iter()
            .zip(f32s(b, n))
            .map(|(a, b)| f(*a, b))
            .collect();
        write_f32s(y, &v);
    })
}

impl RecKernel {
    /// Reshape's target shape: read in place from host memory, or (counted) from the device.
    fn shape_input(&self, v: &TensorView<'_>) -> Vec<usize> {
        if v.device.kind != DeviceKind::Cpu {
            self.dev
                .counters
                .device_reads
                .fetch_add(1, Ordering::Relaxed);
        }
        // SAFETY: both kinds of memory are host memory here, holding numel int64s.
        let dims = unsafe { std::slice::from_raw_parts(v.ptr.0 as *const i64, v.numel()) };
        dims.iter().map(|&d| d as usize).collect()
    }
}

impl Kernel for RecKernel {
    fn output_types(
        &self,
        inputs: &[TensorView<'_>],
    ) -> Result<Vec<(DataType, Vec<usize>)>, EpError> {
        let x = &inputs[0];
        Ok(match self.op.as_str() {
            "Reshape" => vec![(x.dtype, self.shape_input(&inputs[1]))],
            _ => vec![(x.dtype, x.shape.to_vec())],
        })
    }

    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<(), EpError> {
        if self.op == "Neg" && self.dev.capturing() {
            // A stand-in for a kernel that finds out only while capturing that it cannot be.
            return Err(EpError::Capture {
                node: "Neg".into(),
                message: "the fake Neg cannot be captured".into(),
            });
        }
        let n = inputs[0].numel();
        let (x, y) = (inputs[0].ptr.0 as usize, outputs[0].ptr.0 as usize);
        let b = inputs.get(1).map(|v| v.ptr.0 as usize);
        let launch: Launch = match self.op.as_str() {
            "Relu" | "Sign" => Box::new(move || {
                let v: Vec<f32> = f32s(x, n).iter().map(|v| v.max(0.0)).collect();
                write_f32s(y, &v);
            }),
            "Neg" => Box::new(move || {
                let v: Vec<f32> = f32s(x, n).iter().map(|v| -v).collect();
                write_f32s(y, &v);
            }),
            // Add reads both inputs before it writes: its output may be its first input.
            "Add" => binary(x, b.expect("Add has two inputs"), n, y, |a, b| a + b),
            "Mul" => binary(x, b.expect("Mul has two inputs"), n, y, |a, b| a * b),
            _ => Box::new(move || write_f32s(y, &f32s(x, n))), // Reshape: a copy
        };
        match self.dev.capture.lock().unwrap().as_mut() {
            Some(c) => {
                self.dev.counters.recorded.fetch_add(1, Ordering::Relaxed);
                c.launches.push(launch);
            }
            None => {
                self.dev.counters.launches.fetch_add(1, Ordering::Relaxed);
                launch();
            }
        }
        Ok(())
    }

    fn capture_support(&self) -> CaptureSupport {
        if self.op == "Sign" {
            CaptureSupport::Unsupported {
                reason: "the fake Sign is data-dependent".into(),
            }
        } else {
            CaptureSupport::Supported
        }
    }

    fn in_place_input(&self, output: usize) -> Option<usize> {
        (self.op == "Add" && output == 0).then_some(0)
    }

    fn host_inputs(&self) -> Vec<usize> {
        if self.op == "Reshape" {
            vec![1]
        } else {
            Vec::new()
        }
    }
}

struct RecGraph {
    launches: Vec<Launch>,
    blocks: Vec<usize>,
    dev: Arc<Recorder>,
}

impl DeviceGraph for RecGraph {
    fn replay(&self) -> Result<(), EpError> {
        self.dev.counters.replays.fetch_add(1, Ordering::Relaxed);
        for launch in &self.launches {
            launch();
        }
        Ok(())
    }
}

impl Drop for RecGraph {
    fn drop(&mut self) {
        let mut buffers = self.dev.buffers.lock().unwrap();
        let mut graphs = self.dev.graphs.lock().unwrap();
        for b in &self.blocks {
            buffers.remove(b);
            graphs.remove(b);
        }
    }
}

/// The provider, shared by the session and the graphs it returns.
pub(super) struct RecProvider(pub(super) Arc<Recorder>);

impl ExecutionProvider for RecProvider {
    fn name(&self) -> &str {
        "recorder"
    }

    fn device_id(&self) -> DeviceId {
        DeviceId::cuda(3)
    }

    fn supports(&self, node: &Node, _opset: u64) -> bool {
        // ConstantOfShape: claimed like the CUDA provider does; it must still stay on the host
        // when it only builds a shape.
        [
            "Relu",
            "Add",
            "Mul",
            "Reshape",
            "Sign",
            "Neg",
            "ConstantOfShape",
        ]
        .contains(&node.op_type.as_str())
    }

    fn get_kernel(
        &self,
        node: &Node,
        _: &[Vec<usize>],
        _: u64,
    ) -> Result<Box<dyn Kernel>, EpError> {
        Ok(Box::new(RecKernel {
            op: node.op_type.clone(),
            dev: self.0.clone(),
        }))
    }

    fn allocate(&self, size: usize, _align: usize) -> Result<DeviceBuffer, EpError> {
        let mut block = vec![0u64; size.div_ceil(8).max(1)];
        let ptr = block.as_mut_ptr() as *mut std::ffi::c_void;
        self.0.buffers.lock().unwrap().insert(ptr as usize, block);
        if let Some(c) = self.0.capture.lock().unwrap().as_mut() {
            c.blocks.push(ptr as usize);
        }
        // SAFETY: the block stays in the map, unmoved, until deallocated (or, when a capture
        // allocated it, until its graph is dropped).
        Ok(unsafe { DeviceBuffer::from_raw_parts(ptr, size, size, self.device_id()) })
    }

    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError> {
        let ptr = buffer.as_ptr() as usize;
        // A block of a capture stays for the graph's replays; the graph frees it.
        if let Some(c) = self.0.capture.lock().unwrap().as_mut() {
            if c.blocks.contains(&ptr) {
                c.freed.push(ptr);
                return Ok(());
            }
        }
        if !self.0.graph_block(ptr) {
            self.0.buffers.lock().unwrap().remove(&ptr);
        }
        Ok(())
    }

    unsafe fn copy_from_host(&self, src: &[u8], dst: DevicePtrMut) -> Result<(), EpError> {
        if self.0.capturing() {
            return Err(EpError::Capture {
                node: "recorder".into(),
                message: "a host-to-device copy during capture".into(),
            });
        }
        self.0.counters.uploads.fetch_add(1, Ordering::Relaxed);
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0 as *mut u8, src.len());
        Ok(())
    }

    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), EpError> {
        if self.0.capturing() {
            return Err(EpError::Capture {
                node: "recorder".into(),
                message: "a device-to-host copy during capture".into(),
            });
        }
        self.0.counters.downloads.fetch_add(1, Ordering::Relaxed);
        std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.as_mut_ptr(), dst.len());
        Ok(())
    }

    unsafe fn copy_on_device(
        &self,
        src: DevicePtr,
        dst: DevicePtrMut,
        n: usize,
    ) -> Result<(), EpError> {
        self.0
            .counters
            .device_copies
            .fetch_add(1, Ordering::Relaxed);
        std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.0 as *mut u8, n);
        Ok(())
    }

    fn synchronize(&self) -> Result<(), EpError> {
        Ok(())
    }

    fn supports_capture(&self) -> bool {
        true
    }

    fn begin_capture(&self) -> Result<(), EpError> {
        *self.0.capture.lock().unwrap() = Some(Capture::default());
        Ok(())
    }

    fn end_capture(&self) -> Result<Box<dyn DeviceGraph>, EpError> {
        let c = self.0.capture.lock().unwrap().take().unwrap();
        self.0
            .graphs
            .lock()
            .unwrap()
            .extend(c.blocks.iter().copied());
        Ok(Box::new(RecGraph {
            launches: c.launches,
            blocks: c.blocks,
            dev: self.0.clone(),
        }))
    }

    fn abort_capture(&self) {
        // Blocks freed during the capture go now; the others when their tensors free them.
        if let Some(c) = self.0.capture.lock().unwrap().take() {
            let mut buffers = self.0.buffers.lock().unwrap();
            for b in c.freed {
                buffers.remove(&b);
            }
        }
    }
}

impl Recorder {
    /// Whether `ptr` belongs to a finished graph (kept for its replays).
    fn graph_block(&self, ptr: usize) -> bool {
        self.graphs.lock().unwrap().contains(&ptr)
    }
}

pub(super) fn session(b: &G, dev: &Arc<Recorder>, mode: CudaGraph) -> Session {
    let options = crate::SessionOptions {
        device: Some(Arc::new(RecProvider(dev.clone())) as Arc<dyn ExecutionProvider>),
        cuda_graph: mode,
        ..Default::default()
    };
    Session::from_graph(&b.g, options).unwrap()
}

pub(super) fn run(s: &Session, n: usize, seed: u64) -> Vec<(String, Value)> {
    let x = rand_f32(n * 3, seed);
    s.run(&[("x", f32t(&[n, 3], &x))]).unwrap()
}

pub(super) fn same(a: &[(String, Value)], b: &[(String, Value)]) {
    assert_eq!(a.len(), b.len());
    for ((na, va), (nb, vb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        let (ta, tb) = (va.as_tensor().unwrap(), vb.as_tensor().unwrap());
        assert_eq!(ta.shape(), tb.shape(), "{na}");
        assert_eq!(ta.bytes(), tb.bytes(), "{na}: bytes differ");
    }
}
