//! A stand-in device for the generation tests: its "device memory" is host memory and its
//! kernels are the CPU provider's, launched at once or, during a capture, recorded and run by
//! each replay of the graph. Every copy between host and device is counted with its bytes,
//! so a test can see what a decode step moves, and whether the session replayed a graph.
//!
//! Kernels read the inputs the CUDA provider reads on the host (Reshape's shape, Slice's
//! starts, GroupQueryAttention's total_sequence_length, ...) in host memory, and answer
//! their output shapes during a capture from what they computed eagerly for the same input
//! shapes and host-read values, as a real device's kernels know them without running.

use onnx_runtime_ep_api::{
    CaptureSupport, DeviceBuffer, DeviceGraph, DeviceId, DeviceKind, DevicePtr, DevicePtrMut,
    EpError, ExecutionProvider, Kernel, TensorMut, TensorView,
};
use onnx_runtime_ep_cpu::{BuildContext, CpuKernel, Tensor, Value};
use onnx_runtime_ir::{DataType, Node};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// What crossed between host and device, and how kernels ran.
#[derive(Default, Debug)]
pub struct Counters {
    pub uploads: AtomicUsize,
    pub upload_bytes: AtomicUsize,
    pub downloads: AtomicUsize,
    pub download_bytes: AtomicUsize,
    pub device_copies: AtomicUsize,
    pub device_copy_bytes: AtomicUsize,
    /// Kernels run outside a capture.
    pub launches: AtomicUsize,
    /// Kernels recorded into graphs.
    pub recorded: AtomicUsize,
    pub replays: AtomicUsize,
}

/// A snapshot of [`Counters`], to subtract.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Count {
    pub uploads: usize,
    pub upload_bytes: usize,
    pub downloads: usize,
    pub download_bytes: usize,
    pub device_copies: usize,
    pub device_copy_bytes: usize,
    pub launches: usize,
    pub replays: usize,
}

impl Counters {
    pub fn now(&self) -> Count {
        let g = |a: &AtomicUsize| a.load(Ordering::Relaxed);
        Count {
            uploads: g(&self.uploads),
            upload_bytes: g(&self.upload_bytes),
            downloads: g(&self.downloads),
            download_bytes: g(&self.download_bytes),
            device_copies: g(&self.device_copies),
            device_copy_bytes: g(&self.device_copy_bytes),
            launches: g(&self.launches),
            replays: g(&self.replays),
        }
    }
}

impl std::ops::Sub for Count {
    type Output = Count;
    fn sub(self, o: Count) -> Count {
        Count {
            uploads: self.uploads - o.uploads,
            upload_bytes: self.upload_bytes - o.upload_bytes,
            downloads: self.downloads - o.downloads,
            download_bytes: self.download_bytes - o.download_bytes,
            device_copies: self.device_copies - o.device_copies,
            device_copy_bytes: self.device_copy_bytes - o.device_copy_bytes,
            launches: self.launches - o.launches,
            replays: self.replays - o.replays,
        }
    }
}

type Launch = Box<dyn Fn() -> Result<(), EpError> + Send + Sync>;

#[derive(Default)]
struct Capture {
    launches: Vec<Launch>,
    /// Blocks allocated during the capture: the graph's memory.
    blocks: Vec<usize>,
    /// Those of them freed during the capture (kept for the graph).
    freed: Vec<usize>,
}

struct State {
    buffers: Mutex<HashMap<usize, Vec<u64>>>,
    capture: Mutex<Option<Capture>>,
    /// Blocks that belong to a finished graph (freed when it is dropped).
    graph_blocks: Mutex<HashSet<usize>>,
    counters: Arc<Counters>,
}

impl State {
    fn capturing(&self) -> bool {
        self.capture.lock().unwrap().is_some()
    }
}

/// The provider. Cloning shares the device.
#[derive(Clone)]
pub struct HostDevice(Arc<State>);

impl HostDevice {
    pub fn new() -> (HostDevice, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        let state = State {
            buffers: Mutex::default(),
            capture: Mutex::default(),
            graph_blocks: Mutex::default(),
            counters: counters.clone(),
        };
        (HostDevice(Arc::new(state)), counters)
    }

    /// Device blocks alive (tensors and graphs).
    pub fn live_blocks(&self) -> usize {
        self.0.buffers.lock().unwrap().len()
    }
}

/// The inputs the CUDA provider's kernels read on the host.
fn host_inputs(node: &Node) -> Vec<usize> {
    let n = node.inputs.len();
    let from = |p: usize| (p..n).collect::<Vec<_>>();
    match (node.domain.as_str(), node.op_type.as_str()) {
        ("com.microsoft", "GroupQueryAttention") => vec![6],
        ("com.microsoft", _) => Vec::new(),
        (_, "Reshape" | "Expand" | "Tile" | "Unsqueeze" | "Squeeze" | "TopK" | "Split") => vec![1],
        (_, "ConstantOfShape") => vec![0],
        (_, "Range") => from(0),
        (_, "Slice" | "Resize") => from(1),
        (_, "Pad") => vec![1, 3],
        (_, op) if op.starts_with("Reduce") => vec![1],
        _ => Vec::new(),
    }
}

/// A view's metadata, owned, for a recorded launch.
#[derive(Clone)]
struct Owned {
    ptr: usize,
    dtype: DataType,
    shape: Vec<usize>,
    /// A host-memory input read when the launch was recorded: the host buffer is gone by
    /// the replays (a CUDA kernel takes such values as launch arguments).
    baked: Option<Tensor>,
}

impl Owned {
    fn of(ptr: usize, dtype: DataType, shape: &[usize]) -> Owned {
        Owned {
            ptr,
            dtype,
            shape: shape.to_vec(),
            baked: None,
        }
    }

    fn absent(&self) -> bool {
        self.ptr == 0 && self.dtype == DataType::Undefined
    }

    /// The bytes behind the view as a host tensor.
    fn read(&self, node: &str) -> Result<Tensor, EpError> {
        if let Some(t) = &self.baked {
            return Ok(t.clone());
        }
        let mut t = Tensor::zeros(self.dtype, self.shape.clone());
        let n = t.bytes().len();
        if n > 0 && self.ptr == 0 {
            return Err(EpError::Other(format!("{node}: a null input of {n} bytes")));
        }
        // SAFETY: views address memory of this device (host memory) or the host, holding the
        // tensor's contiguous bytes (checked by the caller).
        let src = unsafe { std::slice::from_raw_parts(self.ptr as *const u8, n) };
        t.bytes_mut().copy_from_slice(src);
        Ok(t)
    }
}

struct HostKernel {
    name: String,
    inner: Arc<dyn CpuKernel>,
    host_inputs: Vec<usize>,
    dev: Arc<State>,
    /// Output types by input types and host-read values, from eager runs.
    seen: Mutex<HashMap<Key, Types>>,
}

/// Dtype and shape of each input or output.
type Types = Vec<(DataType, Vec<usize>)>;

/// Input types and host-read values.
type Key = (Types, Vec<Vec<i64>>);

fn owned(views: &[TensorView<'_>], node: &str) -> Result<Vec<Owned>, EpError> {
    views
        .iter()
        .map(|v| {
            if !v.is_contiguous() {
                return Err(EpError::Other(format!("{node}: a strided input")));
            }
            let mut o = Owned::of(v.ptr.0 as usize, v.dtype, v.shape);
            if v.device.kind == DeviceKind::Cpu && !o.absent() {
                o.baked = Some(o.read(node)?);
            }
            Ok(o)
        })
        .collect()
}

/// Runs the CPU kernel on the views and writes its outputs into `outs`.
fn run(
    name: &str,
    inner: &dyn CpuKernel,
    ins: &[Owned],
    outs: &[Owned],
) -> Result<Vec<Value>, EpError> {
    let values = ins
        .iter()
        .map(|o| {
            if o.absent() {
                Ok(None)
            } else {
                o.read(name).map(|t| Some(Value::Tensor(t)))
            }
        })
        .collect::<Result<Vec<_>, _>>()?;
    let refs: Vec<Option<&Value>> = values.iter().map(|v| v.as_ref()).collect();
    let results = inner.run(&refs)?;
    for (out, r) in outs.iter().zip(&results) {
        let t = r
            .as_tensor()
            .ok_or_else(|| EpError::Other(format!("{name}: an output is not a tensor")))?;
        if t.dtype() != out.dtype || t.shape() != out.shape.as_slice() {
            return Err(EpError::Other(format!(
                "{name}: the kernel made {} {:?} for a {} {:?} buffer",
                t.dtype(),
                t.shape(),
                out.dtype,
                out.shape
            )));
        }
        let b = t.bytes();
        // SAFETY: the output buffer holds the tensor's contiguous bytes.
        unsafe { std::ptr::copy_nonoverlapping(b.as_ptr(), out.ptr as *mut u8, b.len()) };
    }
    Ok(results)
}

impl HostKernel {
    fn key(&self, inputs: &[TensorView<'_>]) -> Result<Key, EpError> {
        let types = inputs.iter().map(|v| (v.dtype, v.shape.to_vec())).collect();
        let mut values = Vec::new();
        for &p in &self.host_inputs {
            let Some(v) = inputs.get(p).filter(|v| v.dtype != DataType::Undefined) else {
                values.push(Vec::new());
                continue;
            };
            if v.device.kind != DeviceKind::Cpu && self.dev.capturing() {
                return Err(EpError::Capture {
                    node: self.name.clone(),
                    message: format!("input {p} is read on the host but lives on the device"),
                });
            }
            let t = owned(std::slice::from_ref(v), &self.name)?[0].read(&self.name)?;
            values.push(t.to_i64_vec().unwrap_or_default());
        }
        Ok((types, values))
    }
}

impl Kernel for HostKernel {
    fn output_types(&self, inputs: &[TensorView<'_>]) -> Result<Types, EpError> {
        let key = self.key(inputs)?;
        if self.dev.capturing() {
            return self
                .seen
                .lock()
                .unwrap()
                .get(&key)
                .cloned()
                .ok_or_else(|| EpError::Capture {
                    node: self.name.clone(),
                    message: "these input shapes were not run eagerly first".into(),
                });
        }
        let ins = owned(inputs, &self.name)?;
        let values = ins
            .iter()
            .map(|o| {
                if o.absent() {
                    Ok(None)
                } else {
                    o.read(&self.name).map(|t| Some(Value::Tensor(t)))
                }
            })
            .collect::<Result<Vec<_>, _>>()?;
        let refs: Vec<Option<&Value>> = values.iter().map(|v| v.as_ref()).collect();
        let types: Types = self
            .inner
            .run(&refs)?
            .iter()
            .map(|v| {
                let t = v.as_tensor().expect("tensor outputs");
                (t.dtype(), t.shape().to_vec())
            })
            .collect();
        self.seen.lock().unwrap().insert(key, types.clone());
        Ok(types)
    }

    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<(), EpError> {
        let ins = owned(inputs, &self.name)?;
        let outs: Vec<Owned> = outputs
            .iter()
            .map(|o| Owned::of(o.ptr.0 as usize, o.dtype, o.shape))
            .collect();
        let mut capture = self.dev.capture.lock().unwrap();
        match capture.as_mut() {
            Some(c) => {
                let (name, inner) = (self.name.clone(), self.inner.clone());
                c.launches
                    .push(Box::new(move || run(&name, &*inner, &ins, &outs).map(drop)));
                self.dev.counters.recorded.fetch_add(1, Ordering::Relaxed);
                Ok(())
            }
            None => {
                drop(capture);
                self.dev.counters.launches.fetch_add(1, Ordering::Relaxed);
                run(&self.name, &*self.inner, &ins, &outs).map(drop)
            }
        }
    }

    fn capture_support(&self) -> CaptureSupport {
        CaptureSupport::Supported
    }

    fn host_inputs(&self) -> Vec<usize> {
        self.host_inputs.clone()
    }
}

struct HostGraph {
    launches: Vec<Launch>,
    blocks: Vec<usize>,
    dev: Arc<State>,
}

impl DeviceGraph for HostGraph {
    fn replay(&self) -> Result<(), EpError> {
        self.dev.counters.replays.fetch_add(1, Ordering::Relaxed);
        self.launches.iter().try_for_each(|l| l())
    }
}

impl Drop for HostGraph {
    fn drop(&mut self) {
        let mut buffers = self.dev.buffers.lock().unwrap();
        let mut graph = self.dev.graph_blocks.lock().unwrap();
        for b in &self.blocks {
            buffers.remove(b);
            graph.remove(b);
        }
    }
}

impl ExecutionProvider for HostDevice {
    fn name(&self) -> &str {
        "host-device"
    }

    fn device_id(&self) -> DeviceId {
        DeviceId::cuda(5)
    }

    fn supports(&self, node: &Node, opset: u64) -> bool {
        onnx_runtime_ep_cpu::registry().contains(&node.domain, &node.op_type, opset)
    }

    fn get_kernel(
        &self,
        node: &Node,
        _input_shapes: &[Vec<usize>],
        opset: u64,
    ) -> Result<Box<dyn Kernel>, EpError> {
        let (_, factory) = onnx_runtime_ep_cpu::registry()
            .lookup(&node.domain, &node.op_type, opset)
            .ok_or_else(|| EpError::unsupported_op("host-device", node, opset))?;
        let inner: Arc<dyn CpuKernel> = Arc::from(factory(&BuildContext::new(node, opset))?);
        Ok(Box::new(HostKernel {
            name: node.describe(),
            inner,
            host_inputs: host_inputs(node),
            dev: self.0.clone(),
            seen: Mutex::default(),
        }))
    }

    fn allocate(&self, size: usize, _align: usize) -> Result<DeviceBuffer, EpError> {
        let mut block = vec![0u64; size.div_ceil(8).max(1)];
        let ptr = block.as_mut_ptr() as *mut std::ffi::c_void;
        self.0.buffers.lock().unwrap().insert(ptr as usize, block);
        if let Some(c) = self.0.capture.lock().unwrap().as_mut() {
            c.blocks.push(ptr as usize);
        }
        // SAFETY: the block stays in the map, unmoved, until freed.
        Ok(unsafe { DeviceBuffer::from_raw_parts(ptr, size, size, self.device_id()) })
    }

    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError> {
        let ptr = buffer.as_ptr() as usize;
        // A block of a graph (allocated during its capture) lives as long as the graph.
        if let Some(c) = self.0.capture.lock().unwrap().as_mut() {
            if c.blocks.contains(&ptr) {
                c.freed.push(ptr);
                return Ok(());
            }
        }
        if !self.0.graph_blocks.lock().unwrap().contains(&ptr) {
            self.0.buffers.lock().unwrap().remove(&ptr);
        }
        Ok(())
    }

    unsafe fn copy_from_host(&self, src: &[u8], dst: DevicePtrMut) -> Result<(), EpError> {
        if self.0.capturing() {
            return Err(EpError::Capture {
                node: "host-device".into(),
                message: "a host-to-device copy during a capture".into(),
            });
        }
        let c = &self.0.counters;
        c.uploads.fetch_add(1, Ordering::Relaxed);
        c.upload_bytes.fetch_add(src.len(), Ordering::Relaxed);
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0 as *mut u8, src.len());
        Ok(())
    }

    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), EpError> {
        if self.0.capturing() {
            return Err(EpError::Capture {
                node: "host-device".into(),
                message: "a device-to-host copy during a capture".into(),
            });
        }
        let c = &self.0.counters;
        c.downloads.fetch_add(1, Ordering::Relaxed);
        c.download_bytes.fetch_add(dst.len(), Ordering::Relaxed);
        std::ptr::copy_nonoverlapping(src.0 as *const u8, dst.as_mut_ptr(), dst.len());
        Ok(())
    }

    unsafe fn copy_on_device(
        &self,
        src: DevicePtr,
        dst: DevicePtrMut,
        bytes: usize,
    ) -> Result<(), EpError> {
        let c = &self.0.counters;
        c.device_copies.fetch_add(1, Ordering::Relaxed);
        c.device_copy_bytes.fetch_add(bytes, Ordering::Relaxed);
        let (src, dst) = (src.0 as usize, dst.0 as usize);
        let launch = move || {
            // SAFETY: both addresses hold `bytes` bytes of this device's memory.
            unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
            Ok(())
        };
        match self.0.capture.lock().unwrap().as_mut() {
            Some(c) => c.launches.push(Box::new(launch)),
            None => launch()?,
        }
        Ok(())
    }

    fn synchronize(&self) -> Result<(), EpError> {
        if self.0.capturing() {
            return Err(EpError::Capture {
                node: "host-device".into(),
                message: "a synchronize during a capture".into(),
            });
        }
        Ok(())
    }

    fn supports_capture(&self) -> bool {
        true
    }

    fn begin_capture(&self) -> Result<(), EpError> {
        let mut c = self.0.capture.lock().unwrap();
        if c.is_some() {
            return Err(EpError::Capture {
                node: "host-device".into(),
                message: "a capture is already in progress".into(),
            });
        }
        *c = Some(Capture::default());
        Ok(())
    }

    fn end_capture(&self) -> Result<Box<dyn DeviceGraph>, EpError> {
        let c = self
            .0
            .capture
            .lock()
            .unwrap()
            .take()
            .ok_or_else(|| EpError::Capture {
                node: "host-device".into(),
                message: "no capture in progress".into(),
            })?;
        self.0
            .graph_blocks
            .lock()
            .unwrap()
            .extend(c.blocks.iter().copied());
        Ok(Box::new(HostGraph {
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
