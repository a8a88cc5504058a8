//! IO binding on the recording stand-in device: device feeds and device outputs, eager and
//! replayed, counted copy by copy; outputs not asked for are not copied; misuse is an error.

use super::recorder::*;
use super::*;
use crate::{CudaGraph, Input, OutputOn, SessionError};
use std::sync::atomic::Ordering;
use std::sync::Arc;

/// x [n,3] → Relu → Mul(r, r) → m; Shape(m) → Gather([1,0]) → Reshape(m, ·) → y [3,n];
/// outputs y and the shape `s2`.
fn graph() -> G {
    let mut b = G::new(13);
    b.input("x", DataType::Float32, &[-1, 3]);
    b.init("order", &Tensor::from_slice(vec![2], &[1i64, 0]));
    b.node("Relu", &["x"], &["r"]);
    b.node("Mul", &["r", "r"], &["m"]);
    b.node("Shape", &["m"], &["s"]);
    b.node("Gather", &["s", "order"], &["s2"]);
    b.node("Reshape", &["m", "s2"], &["y"]);
    b.output("y");
    b.output("s2");
    b
}

fn x_of(seed: u64) -> Tensor {
    let v = rand_f32(12, seed);
    match f32t(&[4, 3], &v) {
        Value::Tensor(t) => t,
        _ => unreachable!(),
    }
}

fn want(seed: u64) -> Vec<(String, Value)> {
    Session::from_graph(&graph().g, Default::default())
        .unwrap()
        .run(&[("x", Value::Tensor(x_of(seed)))])
        .unwrap()
}

fn counts(c: &Counters) -> [usize; 3] {
    [
        c.uploads.load(Ordering::Relaxed),
        c.downloads.load(Ordering::Relaxed),
        c.device_copies.load(Ordering::Relaxed),
    ]
}

#[test]
fn device_feeds_and_outputs_never_cross_to_the_host() {
    for mode in [CudaGraph::Off, CudaGraph::Auto] {
        let (dev, counters) = Recorder::new();
        let s = session(&graph(), &dev, mode);
        for seed in 0..4 {
            let x = s.to_device(&x_of(seed)).unwrap();
            let before = counts(&counters);
            let out = s
                .run_bound(&[("x", Input::Device(&x))], &[("y", OutputOn::Device)])
                .unwrap();
            let after = counts(&counters);
            assert_eq!(out.len(), 1, "only y was asked for");
            assert_eq!(out[0].0, "y");
            let y = out[0].1.as_device().expect("y stays on the device");
            assert_eq!(y.shape(), &[3, 4]);
            assert_eq!(
                [after[0] - before[0], after[1] - before[1]],
                [0, 0],
                "{mode:?} run {seed}: no upload and no download"
            );
            if mode == CudaGraph::Auto && seed >= 2 {
                // A replay: x into the graph's buffer and y out of it, on the device.
                assert_eq!(after[2] - before[2], 2, "run {seed}: two device copies");
            }
            let got = vec![("y".to_string(), Value::Tensor(y.to_host().unwrap()))];
            same(&got, &want(seed)[..1]);
        }
        if mode == CudaGraph::Auto {
            assert!(counters.replays.load(Ordering::Relaxed) >= 2);
        }
    }
}

#[test]
fn host_and_device_outputs_mix_and_skipped_outputs_are_not_copied() {
    let (dev, counters) = Recorder::new();
    let s = session(&graph(), &dev, CudaGraph::Auto);
    for seed in 0..4 {
        let x = Value::Tensor(x_of(seed));
        let before = counts(&counters);
        let out = s
            .run_bound(&[("x", Input::Host(&x))], &[("s2", OutputOn::Host)])
            .unwrap();
        let after = counts(&counters);
        assert_eq!(
            after[1] - before[1],
            0,
            "y is not asked for: not downloaded"
        );
        same(
            &out.into_iter()
                .map(|(n, o)| (n, o.into_host().unwrap()))
                .collect::<Vec<_>>(),
            &want(seed)[1..],
        );
        let out = s
            .run_bound(
                &[("x", Input::Host(&x))],
                &[("s2", OutputOn::Device), ("y", OutputOn::Host)],
            )
            .unwrap();
        assert_eq!(out[0].0, "s2");
        assert!(
            out[0].1.as_device().is_some(),
            "a host value asked for on the device"
        );
        let host: Vec<(String, Value)> = out
            .into_iter()
            .map(|(n, o)| (n, o.into_host().unwrap()))
            .collect();
        let w = want(seed);
        same(&host, &[w[1].clone(), w[0].clone()]);
    }
}

#[test]
fn binding_misuse_is_a_clear_error() {
    let (dev, _) = Recorder::new();
    let s = session(&graph(), &dev, CudaGraph::Auto);
    let x = s.to_device(&x_of(0)).unwrap();
    let h = Value::Tensor(x_of(0));
    let err = |r: crate::SessionResult<Vec<(String, crate::Output)>>| r.unwrap_err().to_string();
    let e = err(s.run_bound(&[("x", Input::Device(&x)), ("x", Input::Host(&h))], &[]));
    assert!(e.contains("'x' is bound twice"), "{e}");
    let e = err(s.run_bound(&[("x", Input::Device(&x))], &[("z", OutputOn::Host)]));
    assert!(e.contains("unknown output 'z'") && e.contains("'y'"), "{e}");
    let e = err(s.run_bound(
        &[("x", Input::Device(&x))],
        &[("y", OutputOn::Host), ("y", OutputOn::Device)],
    ));
    assert!(e.contains("'y' is asked for twice"), "{e}");
    let e = err(s.run_bound(&[], &[("y", OutputOn::Host)]));
    assert!(e.contains("missing input 'x'"), "{e}");
    // A device value of the wrong shape.
    let bad = match f32t(&[2, 4], &[0.0; 8]) {
        Value::Tensor(t) => s.to_device(&t).unwrap(),
        _ => unreachable!(),
    };
    let r = s.run_bound(&[("x", Input::Device(&bad))], &[("y", OutputOn::Host)]);
    assert!(
        matches!(r, Err(SessionError::InputMismatch { .. })),
        "{r:?}"
    );
    // A session without a device has no device values.
    let cpu = Session::from_graph(&graph().g, Default::default()).unwrap();
    let e = err(cpu.run_bound(&[("x", Input::Device(&x))], &[("y", OutputOn::Host)]));
    assert!(e.contains("has no device"), "{e}");
    let e = err(cpu.run_bound(&[("x", Input::Host(&h))], &[("y", OutputOn::Device)]));
    assert!(e.contains("has no device"), "{e}");
    assert!(cpu.to_device(&x_of(0)).is_err());
    cpu.synchronize().unwrap();
}

/// Counts its drops: the keep-alive of a borrowed device value.
struct DropCount(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for DropCount {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::Relaxed);
    }
}

#[test]
fn borrowed_device_memory_is_read_in_place_and_released_to_its_owner() {
    for mode in [CudaGraph::Off, CudaGraph::Auto] {
        let (dev, counters) = Recorder::new();
        let s = session(&graph(), &dev, mode);
        for seed in 0..3 {
            // The recorder's device memory is host memory, so a Vec stands in for another
            // library's device tensor.
            let x = x_of(seed);
            let theirs: Vec<f32> = x.data::<f32>().to_vec();
            let drops = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            // SAFETY: `theirs` holds the 12 floats of a [4, 3] tensor and outlives the value.
            let v = unsafe {
                s.device_value_from_raw(
                    DataType::Float32,
                    vec![4, 3],
                    theirs.as_ptr() as *const std::ffi::c_void,
                    Arc::new(DropCount(drops.clone())),
                )
            }
            .unwrap();
            assert_eq!(v.data_ptr(), theirs.as_ptr() as *const std::ffi::c_void);
            assert_eq!(
                (v.dtype(), v.shape()),
                (DataType::Float32, &[4usize, 3][..])
            );
            let before = counts(&counters);
            let out = s
                .run_bound(&[("x", Input::Device(&v))], &[("y", OutputOn::Host)])
                .unwrap();
            assert_eq!(counts(&counters)[0], before[0], "{mode:?}: no upload of x");
            let got: Vec<(String, Value)> = out
                .into_iter()
                .map(|(n, o)| (n, o.into_host().unwrap()))
                .collect();
            same(&got, &want(seed)[..1]);
            let clone = v.clone();
            drop(v);
            assert_eq!(drops.load(Ordering::Relaxed), 0, "a clone still holds it");
            drop(clone);
            assert_eq!(
                drops.load(Ordering::Relaxed),
                1,
                "released once, to its owner"
            );
        }
    }
    // Misuse: a null address, a dtype without bytes, and a session without a device.
    let (dev, _) = Recorder::new();
    let s = session(&graph(), &dev, CudaGraph::Off);
    let keep = || Arc::new(()) as Arc<dyn Send + Sync>;
    // SAFETY: each call is refused before the address is used.
    let e =
        unsafe { s.device_value_from_raw(DataType::Float32, vec![2], std::ptr::null(), keep()) }
            .unwrap_err()
            .to_string();
    assert!(e.contains("null address"), "{e}");
    let word = 0u64;
    let p = &word as *const u64 as *const std::ffi::c_void;
    // SAFETY: as above.
    let e = unsafe { s.device_value_from_raw(DataType::String, vec![1], p, keep()) }
        .unwrap_err()
        .to_string();
    assert!(e.contains("no byte storage"), "{e}");
    let cpu = Session::from_graph(&graph().g, Default::default()).unwrap();
    // SAFETY: as above.
    let e = unsafe { cpu.device_value_from_raw(DataType::Float32, vec![1], p, keep()) }
        .unwrap_err()
        .to_string();
    assert!(e.contains("has no device"), "{e}");
}
