//! Compiles every kernel module variant with NVRTC to CUBIN for sm_90. Needs no GPU, only the
//! NVRTC library (and the CUDA fp16/bf16 headers): `pip install -r scripts/requirements-test.txt`.
//! Without NVRTC the test is skipped with a message, except under CI=true, where it fails.
//! `NVRTC_MODULES=attention,nbits_gemv` compiles only the modules whose names start so (a
//! quick check of a changed kernel).

use onnx_runtime_ep_cuda::compiler::{compile_cubin, nvrtc_version};
use onnx_runtime_ep_cuda::libs;
use onnx_runtime_ep_cuda::ops::modules::all_modules;

#[test]
fn every_kernel_module_compiles_to_cubin_for_sm90() {
    if let Err(e) = libs::ensure_nvrtc() {
        let ci = std::env::var("CI").is_ok_and(|v| v == "true" || v == "1");
        assert!(!ci, "CI=true but NVRTC is missing: {e}");
        eprintln!("SKIPPED: NVRTC not found ({e})");
        return;
    }
    let version = nvrtc_version().expect("NVRTC version");
    let mut modules = all_modules();
    assert!(
        modules.len() >= 18,
        "expected every variant, got {}",
        modules.len()
    );
    if let Ok(only) = std::env::var("NVRTC_MODULES") {
        let prefixes: Vec<&str> = only.split(',').filter(|p| !p.is_empty()).collect();
        modules.retain(|m| prefixes.iter().any(|p| m.name.starts_with(p)));
        assert!(
            !modules.is_empty(),
            "no module matches NVRTC_MODULES={only}"
        );
    }
    // Modules compile independently: spread them over the cores (NVRTC compiles one module
    // per call on one thread).
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let next = std::sync::atomic::AtomicUsize::new(0);
    let failures = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|scope| {
        for _ in 0..workers {
            scope.spawn(|| loop {
                let i = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                let Some(spec) = modules.get(i) else { break };
                match compile_cubin(spec, 90) {
                    // A CUBIN is an ELF image, not PTX text.
                    Ok(cubin) if &cubin[..4] == b"\x7fELF" => {}
                    Ok(_) => failures
                        .lock()
                        .unwrap()
                        .push(format!("{} is not a CUBIN", spec.name)),
                    Err(e) => failures.lock().unwrap().push(format!("{}: {e}", spec.name)),
                }
            });
        }
    });
    let failures = failures.into_inner().unwrap();
    assert!(
        failures.is_empty(),
        "NVRTC {version:?}:\n{}",
        failures.join("\n\n")
    );
    eprintln!("compiled {} modules with NVRTC {version:?}", modules.len());
}
