//! Device graphs and host-side shape arithmetic, tested with a stand-in provider that records
//! kernel launches during a capture and replays them: which run captures, that replays give
//! the eager run's bytes, that shapes never cost a device-to-host copy, and that whatever
//! cannot be recorded leaves the signature eager with its reason.

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
struct Counters {
    uploads: AtomicUsize,
    downloads: AtomicUsize,
    /// Kernel executions outside a capture (eager launches).
    launches: AtomicUsize,
    recorded: AtomicUsize,
    replays: AtomicUsize,
    /// Host reads of device memory by kernels (what a shape input on the device costs).
    device_reads: AtomicUsize,
}

type Launch = Box<dyn Fn() + Send + Sync>;

/// Host-memory "device" whose kernels are closures: run now, or recorded during a capture.
struct Recorder {
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
    fn new() -> (Arc<Recorder>, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        let dev = Recorder {
            buffers: Mutex::new(HashMap::new()),
            capture: Mutex::new(None),
            graphs: Mutex::default(),
            counters: counters.clone(),
        };
        (Arc::new(dev), counters)
    }

    fn live(&self) -> usize {
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

fn f32s(ptr: usize, n: usize) -> Vec<f32> {
    // SAFETY: recorder pointers are host memory holding `n` floats.
    unsafe { std::slice::from_raw_parts(ptr as *const f32, n).to_vec() }
}

fn write_f32s(ptr: usize, v: &[f32]) {
    // SAFETY: as above, for the output buffer.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), ptr as *mut f32, v.len()) }
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
            "Mul" => {
                let b = b.expect("Mul has two inputs");
                Box::new(move || {
                    let v: Vec<f32> = f32s(x, n)
                        .iter()
                        .zip(f32s(b, n))
                        .map(|(a, b)| a * b)
                        .collect();
                    write_f32s(y, &v);
                })
            }
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
struct RecProvider(Arc<Recorder>);

impl ExecutionProvider for RecProvider {
    fn name(&self) -> &str {
        "recorder"
    }

    fn device_id(&self) -> DeviceId {
        DeviceId::cuda(3)
    }

    fn supports(&self, node: &Node, _opset: u64) -> bool {
        ["Relu", "Mul", "Reshape", "Sign", "Neg"].contains(&node.op_type.as_str())
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

/// x [n,3] → Relu → Mul(r, r) → m; Shape(m) → Gather([1,0]) → Reshape(m, ·) → y [3,n];
/// outputs y and the shape `s2` (a host value).
fn shapes_graph(op: &str) -> G {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[-1, 3]);
    b.init("order", &Tensor::from_slice(vec![2], &[1i64, 0]));
    b.node(op, &["x"], &["r"]);
    b.node("Mul", &["r", "r"], &["m"]);
    b.node("Shape", &["m"], &["s"]);
    b.node("Gather", &["s", "order"], &["s2"]);
    b.node("Reshape", &["m", "s2"], &["y"]);
    b.output("y");
    b.output("s2");
    b
}

fn session(b: &G, dev: &Arc<Recorder>, mode: CudaGraph) -> Session {
    let options = crate::SessionOptions {
        device: Some(Arc::new(RecProvider(dev.clone())) as Arc<dyn ExecutionProvider>),
        cuda_graph: mode,
        ..Default::default()
    };
    Session::from_graph(&b.g, options).unwrap()
}

fn run(s: &Session, n: usize, seed: u64) -> Vec<(String, Value)> {
    let x = rand_f32(n * 3, seed);
    s.run(&[("x", f32t(&[n, 3], &x))]).unwrap()
}

fn same(a: &[(String, Value)], b: &[(String, Value)]) {
    assert_eq!(a.len(), b.len());
    for ((na, va), (nb, vb)) in a.iter().zip(b) {
        assert_eq!(na, nb);
        let (ta, tb) = (va.as_tensor().unwrap(), vb.as_tensor().unwrap());
        assert_eq!(ta.shape(), tb.shape(), "{na}");
        assert_eq!(ta.bytes(), tb.bytes(), "{na}: bytes differ");
    }
}

#[test]
fn shapes_never_cost_a_device_read() {
    let (dev, counters) = Recorder::new();
    let s = session(&shapes_graph("Relu"), &dev, CudaGraph::Off);
    assert_eq!(
        s.device_nodes(),
        3,
        "Relu, Mul and Reshape; Shape and Gather stay on the host"
    );
    assert!(
        s.host_nodes().is_empty(),
        "shape arithmetic is not a host placement"
    );
    let outs = run(&s, 2, 1);
    let want = Session::from_graph(&shapes_graph("Relu").g, Default::default())
        .unwrap()
        .run(&[("x", f32t(&[2, 3], &rand_f32(6, 1)))])
        .unwrap();
    same(&outs, &want);
    assert_eq!(counters.device_reads.load(Ordering::Relaxed), 0);
    assert_eq!(counters.uploads.load(Ordering::Relaxed), 1, "x");
    assert_eq!(
        counters.downloads.load(Ordering::Relaxed),
        1,
        "y (s2 is a host value)"
    );
}

#[test]
fn the_second_run_captures_and_later_runs_replay() {
    let (dev, counters) = Recorder::new();
    let b = shapes_graph("Relu");
    let s = session(&b, &dev, CudaGraph::Auto);
    let cpu = Session::from_graph(&b.g, Default::default()).unwrap();
    let cpu_run = |seed| {
        cpu.run(&[("x", f32t(&[4, 3], &rand_f32(12, seed)))])
            .unwrap()
    };
    assert!(s.capture_report().blockers.is_empty());

    same(&run(&s, 4, 1), &cpu_run(1));
    assert_eq!(
        counters.launches.load(Ordering::Relaxed),
        3,
        "eager warm-up"
    );
    assert_eq!(s.capture_report().signatures[0].state, "warm");

    same(&run(&s, 4, 2), &cpu_run(2));
    assert_eq!(counters.recorded.load(Ordering::Relaxed), 3, "the capture");
    assert_eq!(
        counters.launches.load(Ordering::Relaxed),
        3,
        "nothing ran eagerly"
    );
    assert_eq!(
        counters.replays.load(Ordering::Relaxed),
        1,
        "replayed for its outputs"
    );

    let (up, down) = (
        counters.uploads.load(Ordering::Relaxed),
        counters.downloads.load(Ordering::Relaxed),
    );
    for seed in 3..6 {
        same(&run(&s, 4, seed), &cpu_run(seed));
    }
    assert_eq!(counters.launches.load(Ordering::Relaxed), 3);
    assert_eq!(counters.replays.load(Ordering::Relaxed), 4);
    assert_eq!(
        counters.uploads.load(Ordering::Relaxed) - up,
        3,
        "one feed copy per run"
    );
    assert_eq!(
        counters.downloads.load(Ordering::Relaxed) - down,
        3,
        "one output copy per run"
    );
    assert_eq!(counters.device_reads.load(Ordering::Relaxed), 0);
    let report = s.capture_report();
    assert_eq!(report.signatures.len(), 1);
    assert_eq!(report.signatures[0].state, "captured");
    assert_eq!(report.signatures[0].replays, 4);
    assert_eq!(report.signatures[0].inputs, vec!["float[4, 3]".to_string()]);

    drop(s);
    assert_eq!(
        dev.live(),
        0,
        "the graph's memory is returned with the session"
    );
}

#[test]
fn each_signature_gets_its_own_graph() {
    let (dev, counters) = Recorder::new();
    let b = shapes_graph("Relu");
    let s = session(&b, &dev, CudaGraph::Auto);
    let cpu = Session::from_graph(&b.g, Default::default()).unwrap();
    for round in 0..3u64 {
        for n in [1usize, 5] {
            let x = rand_f32(n * 3, round * 10 + n as u64);
            let got = s.run(&[("x", f32t(&[n, 3], &x))]).unwrap();
            let want = cpu.run(&[("x", f32t(&[n, 3], &x))]).unwrap();
            same(&got, &want);
        }
    }
    let report = s.capture_report();
    assert_eq!(report.signatures.len(), 2);
    assert!(report.signatures.iter().all(|sig| sig.state == "captured"));
    assert_eq!(counters.replays.load(Ordering::Relaxed), 4);
}

#[test]
fn a_kernel_that_cannot_be_captured_keeps_the_signature_eager() {
    for op in ["Sign", "Neg"] {
        let (dev, counters) = Recorder::new();
        let b = shapes_graph(op);
        let s = session(&b, &dev, CudaGraph::Auto);
        let cpu = Session::from_graph(&b.g, Default::default()).unwrap();
        for seed in 0..4 {
            let x = rand_f32(6, seed);
            let got = s.run(&[("x", f32t(&[2, 3], &x))]).unwrap();
            let want = cpu.run(&[("x", f32t(&[2, 3], &x))]).unwrap();
            // The fake Sign computes Relu: compare the shapes only for it.
            if op == "Neg" {
                same(&got, &want);
            }
        }
        assert_eq!(
            counters.launches.load(Ordering::Relaxed),
            12,
            "{op}: all eager"
        );
        assert_eq!(counters.replays.load(Ordering::Relaxed), 0);
        let report = s.capture_report();
        let state = &report.signatures[0].state;
        assert!(state.starts_with("eager: "), "{op}: {state}");
        assert!(
            state.contains(op),
            "{op}: the reason names the node: {state}"
        );
        drop(s);
        assert_eq!(
            dev.live(),
            0,
            "{op}: an abandoned capture returns its memory"
        );
    }
}

#[test]
fn nodes_on_the_cpu_block_capture_and_are_named() {
    let (dev, counters) = Recorder::new();
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, 3]);
    b.node("Relu", &["x"], &["r"]);
    b.node("Softmax", &["r"], &["y"]);
    b.output("y");
    let s = session(&b, &dev, CudaGraph::Auto);
    let report = s.capture_report();
    assert_eq!(report.blockers.len(), 1, "{:?}", report.blockers);
    assert!(
        report.blockers[0].contains("Softmax"),
        "{:?}",
        report.blockers
    );
    for seed in 0..3 {
        run(&s, 2, seed);
    }
    assert_eq!(counters.launches.load(Ordering::Relaxed), 3);
    assert!(s.capture_report().signatures.is_empty());
}
