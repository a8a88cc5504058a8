//! NVRTC compilation of the crate's `.cu` kernels to CUBIN, with an on-disk cache.
//!
//! A [`ModuleSpec`] is one compile unit: a `.cu` source embedded with `include_str!` plus the
//! `#define`s that pick its variant (e.g. the output type of a cast). It is compiled to CUBIN for
//! the device's own architecture (`--gpu-architecture=sm_XY`, never PTX: the PTX of a newer NVRTC
//! is rejected by an older driver). Each variant is compiled once: the CUBIN is kept in memory
//! for the process and on disk under `$XDG_CACHE_HOME/onnx-runtime/cuda` (or
//! `~/.cache/onnx-runtime/cuda`), keyed by a hash of the source, the defines, the options, the
//! architecture and the NVRTC version, written atomically (temp file + rename). Where the CUDA
//! headers were found is not part of the key (the headers ship with the NVRTC version that is),
//! so a cache filled on one machine serves another with the same NVRTC: `scripts/gpu-test`
//! carries one to the GPU machine that way.

use crate::libs;
use cudarc::nvrtc::sys as nv;
use onnx_runtime_ep_api::EpError;
use std::borrow::Cow;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, CString};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

/// Common device helpers prepended to every kernel source.
const COMMON: &str = include_str!("kernels/common.cuh");
/// Typed helpers (half conversions, atomics) prepended to modules that need `cuda_fp16.h`.
const NUMERIC: &str = include_str!("kernels/numeric.cuh");

/// One compile unit.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct ModuleSpec {
    /// A short name for logs and cache files: `copy`, `cast_to_f16`.
    pub name: String,
    /// An embedded `.cu` file, or a source generated at kernel build (fused element-wise
    /// chains); the cache keys include it either way.
    pub source: Cow<'static, str>,
    pub defines: Vec<(String, String)>,
    /// Whether the source needs `cuda_fp16.h` / `cuda_bf16.h`.
    pub needs_half: bool,
}

impl ModuleSpec {
    pub fn new(name: impl Into<String>, source: &'static str) -> Self {
        ModuleSpec {
            name: name.into(),
            source: Cow::Borrowed(source),
            defines: Vec::new(),
            needs_half: false,
        }
    }

    /// A compile unit from a source generated at run time.
    pub fn generated(name: impl Into<String>, source: String) -> Self {
        ModuleSpec {
            name: name.into(),
            source: Cow::Owned(source),
            defines: Vec::new(),
            needs_half: false,
        }
    }

    pub fn define(mut self, key: &str, value: &str) -> Self {
        self.defines.push((key.into(), value.into()));
        self
    }

    pub fn with_half(mut self) -> Self {
        self.needs_half = true;
        self
    }

    /// The full source NVRTC sees.
    pub fn full_source(&self) -> String {
        let mut src = String::new();
        for (k, v) in &self.defines {
            src.push_str(&format!("#define {k} {v}\n"));
        }
        if self.needs_half {
            src.push_str("#define ORT_HALF 1\n#include <cuda_fp16.h>\n#include <cuda_bf16.h>\n");
        }
        src.push_str(COMMON);
        src.push('\n');
        if self.needs_half {
            src.push_str(NUMERIC);
            src.push('\n');
        }
        src.push_str(&self.source);
        src
    }
}

/// `major * 1000 + minor * 10` style version of the loaded NVRTC, e.g. (13, 0).
pub fn nvrtc_version() -> Result<(i32, i32), EpError> {
    libs::ensure_nvrtc()?;
    let (mut major, mut minor): (c_int, c_int) = (0, 0);
    // SAFETY: NVRTC is loaded; the out-pointers are valid.
    let r = unsafe { nv::nvrtcVersion(&mut major, &mut minor) };
    if r != nv::nvrtcResult::NVRTC_SUCCESS {
        return Err(EpError::device(
            "nvrtc",
            format!("nvrtcVersion failed: {r:?}"),
        ));
    }
    Ok((major, minor))
}

fn cache_dir() -> Option<PathBuf> {
    let base = std::env::var_os("XDG_CACHE_HOME")
        .map(PathBuf::from)
        .filter(|p| p.is_absolute())
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))?;
    Some(base.join("onnx-runtime").join("cuda"))
}

/// FNV-1a, 64 bits, from a given offset basis.
fn fnv1a(bytes: &[u8], basis: u64) -> u64 {
    let mut h = basis;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h
}

fn cache_key(source: &str, options: &[String], arch: u32, version: (i32, i32)) -> String {
    let mut text = String::from(source);
    text.push('\0');
    // Where the headers are, and in how many folders, differs between machines (a toolkit,
    // pip wheels, both): only whether there are some is keyed, so a cache compiled on one
    // machine serves another with the same NVRTC.
    let mut keyed: Vec<&str> = options
        .iter()
        .filter(|o| !o.starts_with("--include-path="))
        .map(String::as_str)
        .collect();
    if keyed.len() < options.len() {
        keyed.push("--include-path");
    }
    text.push_str(&keyed.join("\u{1}"));
    text.push_str(&format!("\0sm_{arch}\0nvrtc{}.{}", version.0, version.1));
    let a = fnv1a(text.as_bytes(), 0xcbf2_9ce4_8422_2325);
    let b = fnv1a(text.as_bytes(), 0x6c62_272e_07bb_0142);
    format!("{a:016x}{b:016x}")
}

/// CUBINs compiled (or read) in this process, by variant and architecture.
type MemoryCache = Mutex<HashMap<(ModuleSpec, u32), Arc<Vec<u8>>>>;
static MEMORY: OnceLock<MemoryCache> = OnceLock::new();

/// Compiles `spec` to CUBIN for `sm_{arch}` (e.g. 90), using the in-memory and disk caches.
pub fn compile_cubin(spec: &ModuleSpec, arch: u32) -> Result<Arc<Vec<u8>>, EpError> {
    let memory = MEMORY.get_or_init(Default::default);
    let key = (spec.clone(), arch);
    if let Some(hit) = memory.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(hit.clone());
    }
    // One compile per variant at a time: threads that want the same variant wait for the
    // first one's result instead of compiling it again; different variants compile in
    // parallel (NVRTC compiles one program per call on the calling thread).
    type Inflight = Mutex<HashMap<(ModuleSpec, u32), Arc<Mutex<()>>>>;
    static INFLIGHT: OnceLock<Inflight> = OnceLock::new();
    let gate = INFLIGHT
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .entry(key.clone())
        .or_default()
        .clone();
    let _guard = gate.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(hit) = memory.lock().unwrap_or_else(|e| e.into_inner()).get(&key) {
        return Ok(hit.clone());
    }
    let version = nvrtc_version()?;
    let source = spec.full_source();
    let mut options = vec![
        format!("--gpu-architecture=sm_{arch}"),
        "--std=c++17".to_string(),
        "-default-device".to_string(),
    ];
    if spec.needs_half {
        let dirs = libs::include_dirs();
        if dirs.is_empty() {
            return Err(EpError::device(
                format!("nvrtc: {}", spec.name),
                "the CUDA headers cuda_fp16.h / cuda_bf16.h were not found; install the CUDA \
                 toolkit (/usr/local/cuda/include) or `pip install nvidia-cuda-runtime`",
            ));
        }
        options.extend(
            dirs.iter()
                .map(|d| format!("--include-path={}", d.display())),
        );
    }
    let file_key = cache_key(&source, &options, arch, version);
    let file = cache_dir().map(|d| d.join(format!("{}-sm{arch}-{file_key}.cubin", spec.name)));
    if let Some(path) = &file {
        if let Ok(bytes) = std::fs::read(path) {
            if !bytes.is_empty() {
                let bytes = Arc::new(bytes);
                memory
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .insert(key, bytes.clone());
                return Ok(bytes);
            }
        }
    }
    announce_compiles(arch);
    let cubin = Arc::new(nvrtc_compile(&spec.name, &source, &options)?);
    if let Some(path) = &file {
        write_atomic(path, &cubin);
    }
    memory
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .insert(key, cubin.clone());
    Ok(cubin)
}

/// Says once per process, on stderr, that kernels are being compiled: the first use of a
/// model's ops on a machine compiles their modules (a minute or more for the attention
/// modules), which would otherwise look like a hang. `ONNX_RUNTIME_QUIET=1` silences it.
fn announce_compiles(arch: u32) {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var("ONNX_RUNTIME_QUIET").is_ok_and(|v| v.trim() == "1") {
            return;
        }
        let dir = cache_dir().map_or_else(|| "no cache folder".into(), |d| d.display().to_string());
        eprintln!(
            "onnx-runtime: compiling CUDA kernels for sm_{arch} with NVRTC (once per machine; \
             cached in {dir})"
        );
    });
}

/// Writes `bytes` to `path` through a temporary file and a rename; a failure only costs a
/// recompile next time, so it is ignored.
fn write_atomic(path: &std::path::Path, bytes: &[u8]) {
    let Some(dir) = path.parent() else { return };
    if std::fs::create_dir_all(dir).is_err() {
        return;
    }
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy(),
        std::process::id()
    ));
    if std::fs::write(&tmp, bytes).is_ok() && std::fs::rename(&tmp, path).is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
}

fn check(r: nv::nvrtcResult, what: &str, name: &str) -> Result<(), EpError> {
    if r == nv::nvrtcResult::NVRTC_SUCCESS {
        Ok(())
    } else {
        Err(EpError::device(
            format!("nvrtc: {name}"),
            format!("{what} failed: {r:?}"),
        ))
    }
}

fn nvrtc_compile(name: &str, source: &str, options: &[String]) -> Result<Vec<u8>, EpError> {
    let csrc = CString::new(source).map_err(|e| EpError::device("nvrtc", e))?;
    let cname = CString::new(format!("{name}.cu")).map_err(|e| EpError::device("nvrtc", e))?;
    let copts: Vec<CString> = options
        .iter()
        .map(|o| CString::new(o.as_str()).expect("options have no NUL"))
        .collect();
    let opt_ptrs: Vec<*const c_char> = copts.iter().map(|c| c.as_ptr()).collect();
    let mut prog: nv::nvrtcProgram = std::ptr::null_mut();
    // SAFETY: NVRTC is loaded (nvrtc_version ran); all pointers outlive the calls.
    unsafe {
        check(
            nv::nvrtcCreateProgram(
                &mut prog,
                csrc.as_ptr(),
                cname.as_ptr(),
                0,
                std::ptr::null(),
                std::ptr::null(),
            ),
            "nvrtcCreateProgram",
            name,
        )?;
        let result = nv::nvrtcCompileProgram(prog, opt_ptrs.len() as c_int, opt_ptrs.as_ptr());
        let log = program_log(prog);
        let out = if result != nv::nvrtcResult::NVRTC_SUCCESS {
            Err(EpError::device(
                format!("nvrtc: {name}"),
                format!(
                    "compiling kernel module '{name}' with options {options:?} failed ({result:?}); NVRTC log:\n{log}"
                ),
            ))
        } else {
            let mut size = 0usize;
            check(
                nv::nvrtcGetCUBINSize(prog, &mut size),
                "nvrtcGetCUBINSize",
                name,
            )
            .and_then(|_| {
                let mut buf = vec![0u8; size];
                check(
                    nv::nvrtcGetCUBIN(prog, buf.as_mut_ptr() as *mut c_char),
                    "nvrtcGetCUBIN",
                    name,
                )?;
                if buf.is_empty() {
                    return Err(EpError::device(
                        format!("nvrtc: {name}"),
                        format!("NVRTC produced no CUBIN; log:\n{log}"),
                    ));
                }
                Ok(buf)
            })
        };
        nv::nvrtcDestroyProgram(&mut prog);
        out
    }
}

/// # Safety
/// `prog` must be a live NVRTC program.
unsafe fn program_log(prog: nv::nvrtcProgram) -> String {
    let mut size = 0usize;
    if nv::nvrtcGetProgramLogSize(prog, &mut size) != nv::nvrtcResult::NVRTC_SUCCESS || size == 0 {
        return String::new();
    }
    let mut buf = vec![0u8; size];
    if nv::nvrtcGetProgramLog(prog, buf.as_mut_ptr() as *mut c_char)
        != nv::nvrtcResult::NVRTC_SUCCESS
    {
        return String::new();
    }
    String::from_utf8_lossy(&buf)
        .trim_end_matches('\0')
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_key_depends_on_every_input() {
        let opts = vec!["a".to_string()];
        let base = cache_key("src", &opts, 90, (13, 0));
        assert_ne!(base, cache_key("src2", &opts, 90, (13, 0)));
        assert_ne!(base, cache_key("src", &opts, 80, (13, 0)));
        assert_ne!(base, cache_key("src", &opts, 90, (13, 1)));
        assert_ne!(base, cache_key("src", &["b".to_string()], 90, (13, 0)));
        assert_eq!(base, cache_key("src", &opts, 90, (13, 0)));
        // Where the headers are is not part of the key; whether there are some is.
        let here = vec!["--include-path=/usr/local/cuda/include".to_string()];
        let there = vec!["--include-path=/opt/venv/nvidia/cuda_runtime/include".to_string()];
        assert_eq!(
            cache_key("src", &here, 90, (13, 0)),
            cache_key("src", &there, 90, (13, 0))
        );
        assert_ne!(
            cache_key("src", &here, 90, (13, 0)),
            cache_key("src", &[], 90, (13, 0))
        );
        // Nor in how many folders (a toolkit and a pip wheel on the GPU machine, one wheel
        // where the cache was built).
        let both = vec![here[0].clone(), there[0].clone()];
        assert_eq!(
            cache_key("src", &both, 90, (13, 0)),
            cache_key("src", &there, 90, (13, 0))
        );
    }
}
