//! Placement on an accelerator, tested with a stand-in provider whose "device memory" is host
//! memory it owns: which nodes it takes, when values cross between host and device, the CPU
//! fallback for dtypes the device refuses, and that every device buffer is returned.

use super::*;
use crate::Session;
use onnx_runtime_ep_api::{
    DeviceBuffer, DeviceId, DevicePtr, DevicePtrMut, EpError, ExecutionProvider, Kernel, TensorMut,
    TensorView,
};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// Counts of what the session asked of the stand-in device.
#[derive(Default)]
struct Counters {
    uploads: AtomicUsize,
    downloads: AtomicUsize,
    launches: AtomicUsize,
}

/// A provider that keeps its buffers in host memory and runs Relu (f32 only), Mul (f32, equal
/// shapes) and Transpose (any fixed-width dtype, rank 2, reversed axes only).
struct FakeDevice {
    buffers: Mutex<HashMap<usize, Vec<u64>>>,
    counters: Arc<Counters>,
}

impl FakeDevice {
    fn new() -> (Arc<FakeDevice>, Arc<Counters>) {
        let counters = Arc::new(Counters::default());
        let dev = FakeDevice {
            buffers: Mutex::new(HashMap::new()),
            counters: counters.clone(),
        };
        (Arc::new(dev), counters)
    }

    fn live(&self) -> usize {
        self.buffers.lock().unwrap().len()
    }
}

struct FakeKernel {
    op: String,
    counters: Arc<Counters>,
}

fn bytes_of<'a>(v: &TensorView<'a>) -> &'a [u8] {
    // SAFETY: the fake device's pointers are host memory holding the view's bytes.
    unsafe { std::slice::from_raw_parts(v.ptr.0 as *const u8, v.contiguous_bytes()) }
}

impl Kernel for FakeKernel {
    fn output_types(
        &self,
        inputs: &[TensorView<'_>],
    ) -> Result<Vec<(DataType, Vec<usize>)>, EpError> {
        let x = &inputs[0];
        match self.op.as_str() {
            "Relu" if x.dtype != DataType::Float32 => Err(EpError::UnsupportedDtype {
                node: "Relu".into(),
                op: "Relu".into(),
                dtype: x.dtype,
                detail: "the fake device runs float32 only".into(),
                hint: "run it on the CPU".into(),
            }),
            "Relu" | "Mul" => Ok(vec![(x.dtype, x.shape.to_vec())]),
            _ => Ok(vec![(x.dtype, x.shape.iter().rev().copied().collect())]),
        }
    }

    fn execute(
        &self,
        inputs: &[TensorView<'_>],
        outputs: &mut [TensorMut<'_>],
    ) -> Result<(), EpError> {
        self.counters.launches.fetch_add(1, Ordering::Relaxed);
        let x = &inputs[0];
        if self.op == "Relu" && x.shape.first() == Some(&13) {
            // A stand-in for a device fault (a failed launch, a library error).
            return Err(EpError::Other("fake device: launch failed".into()));
        }
        let src = bytes_of(x);
        let out = &mut outputs[0];
        // SAFETY: the output is host memory of the fake device holding its bytes.
        let dst =
            unsafe { std::slice::from_raw_parts_mut(out.ptr.0 as *mut u8, out.contiguous_bytes()) };
        let f = |s: &[u8]| f32::from_le_bytes(s.try_into().unwrap());
        if self.op == "Relu" {
            for (d, s) in dst.chunks_exact_mut(4).zip(src.chunks_exact(4)) {
                d.copy_from_slice(&f(s).max(0.0).to_le_bytes());
            }
        } else if self.op == "Mul" {
            let b = bytes_of(&inputs[1]);
            for ((d, s), b) in dst
                .chunks_exact_mut(4)
                .zip(src.chunks_exact(4))
                .zip(b.chunks_exact(4))
            {
                d.copy_from_slice(&(f(s) * f(b)).to_le_bytes());
            }
        } else {
            let (r, c) = (x.shape[0], x.shape[1]);
            let w = x.dtype.element_size().unwrap();
            for i in 0..r {
                for j in 0..c {
                    let s = (i * c + j) * w;
                    let d = (j * r + i) * w;
                    dst[d..d + w].copy_from_slice(&src[s..s + w]);
                }
            }
        }
        Ok(())
    }
}

impl ExecutionProvider for FakeDevice {
    fn name(&self) -> &str {
        "fake"
    }

    fn device_id(&self) -> DeviceId {
        DeviceId::cuda(7)
    }

    fn supports(&self, node: &Node, _opset: u64) -> bool {
        ["Relu", "Mul", "Transpose"].contains(&node.op_type.as_str())
    }

    fn get_kernel(
        &self,
        node: &Node,
        _: &[Vec<usize>],
        _: u64,
    ) -> Result<Box<dyn Kernel>, EpError> {
        Ok(Box::new(FakeKernel {
            op: node.op_type.clone(),
            counters: self.counters.clone(),
        }))
    }

    fn allocate(&self, size: usize, _align: usize) -> Result<DeviceBuffer, EpError> {
        let mut block = vec![0u64; size.div_ceil(8).max(1)];
        let ptr = block.as_mut_ptr() as *mut std::ffi::c_void;
        self.buffers.lock().unwrap().insert(ptr as usize, block);
        // SAFETY: the block stays in the map, unmoved, until deallocate.
        Ok(unsafe { DeviceBuffer::from_raw_parts(ptr, size, size, self.device_id()) })
    }

    fn deallocate(&self, buffer: DeviceBuffer) -> Result<(), EpError> {
        let removed = self
            .buffers
            .lock()
            .unwrap()
            .remove(&(buffer.as_ptr() as usize));
        assert!(
            removed.is_some(),
            "a buffer the fake device did not hand out"
        );
        Ok(())
    }

    unsafe fn copy_from_host(&self, src: &[u8], dst: DevicePtrMut) -> Result<(), EpError> {
        self.counters.uploads.fetch_add(1, Ordering::Relaxed);
        std::ptr::copy_nonoverlapping(src.as_ptr(), dst.0 as *mut u8, src.len());
        Ok(())
    }

    unsafe fn copy_to_host(&self, src: DevicePtr, dst: &mut [u8]) -> Result<(), EpError> {
        self.counters.downloads.fetch_add(1, Ordering::Relaxed);
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
}

/// x [2,3] → Transpose → Relu → Add(w) on the CPU → Transpose → y; `w` is a [3,2] constant
/// and a second output `r` is the Relu result (read by the CPU Add and by the caller).
fn mixed() -> G {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[2, 3]);
    b.init(
        "w",
        &Tensor::from_slice(vec![3, 2], &[1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0]),
    );
    b.node("Transpose", &["x"], &["t"]);
    b.node("Relu", &["t"], &["r"]);
    b.node("Add", &["r", "w"], &["s"]);
    b.node("Transpose", &["s"], &["y"]);
    b.output("y");
    b.output("r");
    b
}

fn session_on(b: &G, dev: &Arc<FakeDevice>) -> Session {
    let options = crate::SessionOptions {
        device: Some(dev.clone() as Arc<dyn ExecutionProvider>),
        ..Default::default()
    };
    Session::from_graph(&b.g, options).unwrap()
}

fn cpu_session(b: &G) -> Session {
    Session::from_graph(&b.g, crate::SessionOptions::default()).unwrap()
}

#[test]
fn device_nodes_run_there_and_values_cross_only_when_read() {
    let (dev, counters) = FakeDevice::new();
    let b = mixed();
    let s = session_on(&b, &dev);
    assert_eq!(s.device_nodes(), 3, "two Transposes and the Relu");
    assert_eq!(dev.live(), 0, "no device node reads a constant");
    let x = rand_f32(6, 3);
    let outs = s.run(&[("x", f32t(&[2, 3], &x))]).unwrap();
    let want = cpu_session(&b).run(&[("x", f32t(&[2, 3], &x))]).unwrap();
    for i in 0..2 {
        let (shape, got) = out_f32(&outs, i);
        let (want_shape, w) = out_f32(&want, i);
        assert_eq!(shape, want_shape);
        assert_eq!(got, w, "output {i}");
    }
    // Uploads: x, and the CPU Add's s for the last Transpose. Downloads: r (once, for the
    // Add and the caller alike) and y.
    assert_eq!(counters.uploads.load(Ordering::Relaxed), 2);
    assert_eq!(counters.downloads.load(Ordering::Relaxed), 2);
    assert_eq!(counters.launches.load(Ordering::Relaxed), 3);
    assert_eq!(
        dev.live(),
        0,
        "every device buffer is returned after the run"
    );
}

#[test]
fn constants_go_to_the_device_once_at_build() {
    let (dev, counters) = FakeDevice::new();
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[3, 2]);
    b.init(
        "w",
        &Tensor::from_slice(vec![2, 3], &[1.0f32, -2.0, 3.0, -4.0, 5.0, -6.0]),
    );
    // Transpose(w) reads only a constant: it folds on the CPU at build and runs nowhere.
    b.node("Transpose", &["w"], &["wt"]);
    b.node("Mul", &["x", "wt"], &["y"]);
    b.output("y");
    let s = session_on(&b, &dev);
    assert_eq!(s.device_nodes(), 1, "the Mul; the constant Transpose folds");
    assert_eq!(dev.live(), 1, "the folded wt waits on the device");
    assert_eq!(counters.uploads.load(Ordering::Relaxed), 1);
    let x = rand_f32(6, 5);
    let wt = [1.0f64, -4.0, -2.0, 5.0, 3.0, -6.0];
    for _ in 0..3 {
        let outs = s.run(&[("x", f32t(&[3, 2], &x))]).unwrap();
        let want: Vec<f64> = x.iter().zip(wt).map(|(&v, w)| v as f64 * w).collect();
        assert_close(&out_f32(&outs, 0).1, &want);
    }
    assert_eq!(
        counters.uploads.load(Ordering::Relaxed),
        4,
        "wt once, x once per run"
    );
    assert_eq!(dev.live(), 1);
    drop(s);
    assert_eq!(
        dev.live(),
        0,
        "dropping the session returns the constant's buffer"
    );
}

#[test]
fn refused_dtypes_fall_back_to_the_cpu_kernel() {
    let (dev, counters) = FakeDevice::new();
    let mut b = G::new(13);
    b.input("x", DataType::Float64, &[2, 2]);
    b.node("Relu", &["x"], &["y"]);
    b.output("y");
    let s = session_on(&b, &dev);
    assert_eq!(s.device_nodes(), 1);
    let x = Tensor::from_slice(vec![2, 2], &[-1.0f64, 2.0, -3.0, 4.0]);
    let outs = s.run(&[("x", Value::Tensor(x))]).unwrap();
    let t = outs[0].1.as_tensor().unwrap();
    assert_eq!(t.data::<f64>(), &[0.0, 2.0, 0.0, 4.0]);
    assert_eq!(counters.launches.load(Ordering::Relaxed), 0);
    assert_eq!(
        dev.live(),
        0,
        "the upload made for the refused call is freed"
    );
}

#[test]
fn host_nodes_are_reported_with_their_reason() {
    let (dev, _) = FakeDevice::new();
    let s = session_on(&mixed(), &dev);
    let host = s.host_nodes();
    assert_eq!(host.len(), 1, "{host:?}");
    assert_eq!(host[0].op, "Add");
    assert!(
        host[0].reason.contains("no kernel for Add"),
        "{}",
        host[0].reason
    );
    assert!(cpu_session(&mixed()).host_nodes().is_empty());
}

#[test]
fn a_device_error_is_the_runs_error_not_a_cpu_rerun() {
    let (dev, counters) = FakeDevice::new();
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[13, 2]);
    b.node("Relu", &["x"], &["y"]);
    b.output("y");
    let s = session_on(&b, &dev);
    let x = rand_f32(26, 4);
    let err = s.run(&[("x", f32t(&[13, 2], &x))]).unwrap_err().to_string();
    assert!(err.contains("launch failed"), "{err}");
    assert_eq!(counters.launches.load(Ordering::Relaxed), 1);
    assert_eq!(s.device_calls(), (0, 0), "neither ran nor refused");
}

#[test]
fn concurrent_runs_share_the_device_session() {
    let (dev, _) = FakeDevice::new();
    let b = mixed();
    let s = session_on(&b, &dev);
    let cpu = cpu_session(&b);
    std::thread::scope(|scope| {
        for seed in 0..4u64 {
            let (s, cpu) = (&s, &cpu);
            scope.spawn(move || {
                for k in 0..20 {
                    let x = rand_f32(6, seed * 100 + k);
                    let got = s.run(&[("x", f32t(&[2, 3], &x))]).unwrap();
                    let want = cpu.run(&[("x", f32t(&[2, 3], &x))]).unwrap();
                    assert_eq!(out_f32(&got, 0), out_f32(&want, 0));
                }
            });
        }
    });
    assert_eq!(dev.live(), 0);
}
