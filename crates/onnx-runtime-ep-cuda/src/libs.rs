//! Finding the CUDA shared libraries without user variables.
//!
//! cudarc's dynamic loading opens its libraries by name (`libcuda.so.1`, `libnvrtc.so.13`, ...)
//! through the system loader. We look for each library ourselves first (the loader path, the
//! CUDA toolkit folders, the pip `nvidia-*` wheels under site-packages) and open the file we find
//! by its absolute path with `RTLD_GLOBAL`. The loader then answers cudarc's later lookup by
//! soname with the library already loaded, so no `LD_LIBRARY_PATH` is needed. A library that is
//! not found is a clear error naming what to install, never a panic inside cudarc.

use onnx_runtime_ep_api::EpError;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// One library cudarc loads, with the sonames to try (newest first) and what provides it.
struct LibSpec {
    what: &'static str,
    sonames: &'static [&'static str],
    /// Extra libraries that must be loaded from the same folder first (e.g. NVRTC's builtins).
    companions: &'static [&'static str],
    install: &'static str,
}

const DRIVER: LibSpec = LibSpec {
    what: "the CUDA driver library (libcuda)",
    sonames: &["libcuda.so.1", "libcuda.so"],
    companions: &[],
    install:
        "install the NVIDIA driver (it provides libcuda.so.1) and check that `nvidia-smi` works",
};

const NVRTC: LibSpec = LibSpec {
    what: "the NVRTC runtime compiler (libnvrtc)",
    sonames: &["libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"],
    companions: &[
        "libnvrtc-builtins.so.13.0",
        "libnvrtc-builtins.so.13.1",
        "libnvrtc-builtins.so.13.2",
        "libnvrtc-builtins.so.12.9",
        "libnvrtc-builtins.so.12.8",
        "libnvrtc-builtins.so",
    ],
    install:
        "install the CUDA toolkit (/usr/local/cuda) or `pip install nvidia-cuda-nvrtc==13.0.88`",
};

const CUBLASLT: LibSpec = LibSpec {
    what: "cuBLASLt (libcublasLt)",
    sonames: &["libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"],
    companions: &[],
    install: "install the CUDA toolkit (/usr/local/cuda) or `pip install nvidia-cublas`",
};

/// cuDNN 9: `libcudnn.so.9` is a small front that opens its sub-libraries by soname when a
/// handle is created; preloading them from the same folder with `RTLD_GLOBAL` lets the loader
/// answer those lookups without `LD_LIBRARY_PATH`. cudarc's bindings are cuDNN 9's and its
/// loader does not try `libcudnn.so.8`, so cuDNN 8 is not an option.
const CUDNN: LibSpec = LibSpec {
    what: "cuDNN 9 (libcudnn.so.9)",
    sonames: &["libcudnn.so.9"],
    companions: &[
        "libcudnn_graph.so.9",
        "libcudnn_engines_precompiled.so.9",
        "libcudnn_engines_runtime_compiled.so.9",
        "libcudnn_heuristic.so.9",
        "libcudnn_ops.so.9",
        "libcudnn_cnn.so.9",
        "libcudnn_adv.so.9",
    ],
    install: CUDNN_INSTALL,
};

/// How to get cuDNN, for error messages.
pub const CUDNN_INSTALL: &str = "install cuDNN 9 for your CUDA version: `pip install \
     nvidia-cudnn-cu13` (CUDA 13) or `pip install nvidia-cudnn-cu12` (CUDA 12), into the Python \
     environment on PATH or an active virtual environment, or put the folder holding \
     libcudnn.so.9 on LD_LIBRARY_PATH";

/// A library we opened; kept for the life of the process.
struct Loaded {
    path: PathBuf,
    _lib: libloading::os::unix::Library,
    _companions: Vec<libloading::os::unix::Library>,
}

fn open_global(path: &Path) -> Result<libloading::os::unix::Library, String> {
    use libloading::os::unix::{Library, RTLD_GLOBAL, RTLD_NOW};
    // SAFETY: loading a CUDA library runs its initialisers, which have no preconditions.
    unsafe { Library::open(Some(path), RTLD_NOW | RTLD_GLOBAL) }.map_err(|e| e.to_string())
}

/// Folders that may hold CUDA libraries, most specific first.
pub fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in [
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_ROOT",
        "CUDA_TOOLKIT_ROOT_DIR",
    ] {
        if let Some(root) = std::env::var_os(var) {
            let root = PathBuf::from(root);
            dirs.push(root.join("lib64"));
            dirs.push(root.join("lib"));
            dirs.push(root.join("targets/x86_64-linux/lib"));
        }
    }
    dirs.push("/usr/local/cuda/lib64".into());
    dirs.push("/usr/local/cuda/targets/x86_64-linux/lib".into());
    let mut versioned = glob_dirs("/usr/local", |name| name.starts_with("cuda-"));
    versioned.sort();
    versioned.reverse();
    for dir in versioned {
        dirs.push(dir.join("lib64"));
        dirs.push(dir.join("targets/x86_64-linux/lib"));
    }
    for site in site_packages() {
        for sub in [
            "nvidia/cu13/lib",
            "nvidia/cuda_nvrtc/lib",
            "nvidia/cublas/lib",
            "nvidia/cuda_runtime/lib",
            "nvidia/cu12/lib",
            "nvidia/cudnn/lib",
        ] {
            dirs.push(site.join(sub));
        }
    }
    if let Some(paths) = std::env::var_os("LD_LIBRARY_PATH") {
        dirs.extend(std::env::split_paths(&paths));
    }
    for dir in [
        "/usr/local/nvidia/lib64",
        "/usr/local/nvidia/lib",
        "/usr/lib/x86_64-linux-gnu",
        "/usr/lib64",
        "/usr/lib",
        "/usr/lib/wsl/lib",
    ] {
        dirs.push(dir.into());
    }
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| d.is_dir() && seen.insert(d.clone()));
    dirs
}

/// Folders holding CUDA headers (cuda_fp16.h, cuda_bf16.h) for NVRTC.
pub fn include_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    for var in [
        "CUDA_HOME",
        "CUDA_PATH",
        "CUDA_ROOT",
        "CUDA_TOOLKIT_ROOT_DIR",
    ] {
        if let Some(root) = std::env::var_os(var) {
            dirs.push(PathBuf::from(root).join("include"));
        }
    }
    // The loaded NVRTC's own folder first: its headers match its version.
    if let Some(lib) = loaded_path(&NVRTC_STATE) {
        if let Some(parent) = lib.parent().and_then(Path::parent) {
            dirs.push(parent.join("include"));
        }
    }
    dirs.push("/usr/local/cuda/include".into());
    dirs.push("/usr/local/cuda/targets/x86_64-linux/include".into());
    for site in site_packages() {
        for sub in [
            "nvidia/cu13/include",
            "nvidia/cuda_runtime/include",
            "nvidia/cu12/include",
        ] {
            dirs.push(site.join(sub));
        }
    }
    let mut seen = std::collections::HashSet::new();
    dirs.retain(|d| d.join("cuda_fp16.h").is_file() && seen.insert(d.clone()));
    dirs
}

fn glob_dirs(parent: &str, keep: impl Fn(&str) -> bool) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter(|e| e.file_name().to_str().is_some_and(&keep))
        .map(|e| e.path())
        .filter(|p| p.is_dir())
        .collect()
}

/// Python site-packages folders where pip's `nvidia-*` wheels may live.
fn site_packages() -> Vec<PathBuf> {
    let mut roots: Vec<PathBuf> = Vec::new();
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(v) = std::env::var_os(var) {
            roots.push(PathBuf::from(v).join("lib"));
        }
    }
    if let Some(home) = std::env::var_os("HOME") {
        let home = PathBuf::from(home);
        roots.push(home.join(".local/lib"));
        for version in glob_dirs(&home.join(".pyenv/versions").to_string_lossy(), |_| true) {
            roots.push(version.join("lib"));
        }
    }
    // Interpreters on PATH (virtual environments, CI tool caches): their prefix's lib/.
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            if dir.join("python3").exists() || dir.join("python").exists() {
                if let Some(prefix) = dir.parent() {
                    roots.push(prefix.join("lib"));
                }
            }
        }
    }
    for venv in glob_dirs("/opt", |_| true) {
        roots.push(venv.join(".venv/lib"));
        roots.push(venv.join("lib"));
    }
    roots.push("/usr/local/lib".into());
    roots.push("/usr/lib".into());
    roots.push("/opt/conda/lib".into());
    let mut out = Vec::new();
    for root in roots {
        for py in glob_dirs(&root.to_string_lossy(), |n| n.starts_with("python3")) {
            out.push(py.join("site-packages"));
            out.push(py.join("dist-packages"));
        }
    }
    out.retain(|p| p.join("nvidia").is_dir());
    out
}

type State = OnceLock<Result<Loaded, String>>;
static DRIVER_STATE: State = OnceLock::new();
static NVRTC_STATE: State = OnceLock::new();
static CUBLASLT_STATE: State = OnceLock::new();
static CUDNN_STATE: State = OnceLock::new();

fn loaded_path(state: &State) -> Option<PathBuf> {
    state.get()?.as_ref().ok().map(|l| l.path.clone())
}

fn find_and_load(spec: &LibSpec) -> Result<Loaded, String> {
    let dirs = candidate_dirs();
    let mut tried = Vec::new();
    // Absolute paths from known folders first, so a matching toolkit or wheel wins; then the
    // plain soname through the loader's own path.
    for dir in &dirs {
        for soname in spec.sonames {
            let path = dir.join(soname);
            if !path.exists() {
                continue;
            }
            let mut pending: Vec<PathBuf> = spec
                .companions
                .iter()
                .map(|c| dir.join(c))
                .filter(|p| p.exists())
                .collect();
            let mut companions = open_companions(&mut pending);
            match open_global(&path) {
                Ok(lib) => {
                    // Companions that need the main library itself load now.
                    companions.extend(open_companions(&mut pending));
                    return Ok(Loaded {
                        path,
                        _lib: lib,
                        _companions: companions,
                    });
                }
                Err(e) => tried.push(format!("{} ({e})", path.display())),
            }
        }
    }
    for soname in spec.sonames {
        if let Ok(lib) = open_global(Path::new(soname)) {
            return Ok(Loaded {
                path: PathBuf::from(soname),
                _lib: lib,
                _companions: Vec::new(),
            });
        }
        tried.push((*soname).to_string());
    }
    Err(format!(
        "could not find {}; tried {} in {} folders ({}); {}",
        spec.what,
        spec.sonames.join(", "),
        dirs.len(),
        if tried.is_empty() {
            "no candidate file exists".to_string()
        } else {
            tried.join("; ")
        },
        spec.install
    ))
}

/// Opens the `pending` libraries in passes until no more load: one that needs another of them
/// (by soname) loads in a later pass. What never loads stays in `pending`.
fn open_companions(pending: &mut Vec<PathBuf>) -> Vec<libloading::os::unix::Library> {
    let mut opened = Vec::new();
    loop {
        let before = pending.len();
        pending.retain(|p| match open_global(p) {
            Ok(lib) => {
                opened.push(lib);
                false
            }
            Err(_) => true,
        });
        if pending.is_empty() || pending.len() == before {
            return opened;
        }
    }
}

fn ensure(state: &'static State, spec: &LibSpec) -> Result<PathBuf, EpError> {
    match state.get_or_init(|| find_and_load(spec)) {
        Ok(l) => Ok(l.path.clone()),
        Err(e) => Err(EpError::device("cuda", e)),
    }
}

/// Loads the CUDA driver library; returns where it was found.
pub fn ensure_driver() -> Result<PathBuf, EpError> {
    ensure(&DRIVER_STATE, &DRIVER)
}

/// Loads NVRTC (and its builtins); returns where it was found.
pub fn ensure_nvrtc() -> Result<PathBuf, EpError> {
    ensure(&NVRTC_STATE, &NVRTC)
}

/// Loads cuBLASLt; returns where it was found.
pub fn ensure_cublaslt() -> Result<PathBuf, EpError> {
    ensure(&CUBLASLT_STATE, &CUBLASLT)
}

/// Loads cuDNN 9 and its sub-libraries; returns where it was found. The libraries cuDNN's
/// engines may need (cuBLASLt, cuBLAS, NVRTC) are loaded first where they can be found, so
/// their sonames resolve too. Missing cuDNN is an error naming the pip package to install.
pub fn ensure_cudnn() -> Result<PathBuf, EpError> {
    if CUDNN_STATE.get().is_none() {
        let _ = ensure_nvrtc();
        let _ = ensure_cublaslt();
        preload_any(&["libcublas.so.13", "libcublas.so.12"]);
    }
    let found =
        CUDNN_STATE.get_or_init(|| cudnn_on_loader_path().unwrap_or_else(|| find_and_load(&CUDNN)));
    match found {
        Ok(l) => Ok(l.path.clone()),
        Err(e) => Err(EpError::device("cuda", e)),
    }
}

/// The cuDNN that cudarc will bind to if the system loader finds one under a name cudarc
/// tries before `libcudnn.so.9` (`libcudnn.so`, ...): that library, so the one whose
/// symbols are checked is the one called, and no second cuDNN is loaded beside it.
fn cudnn_on_loader_path() -> Option<Result<Loaded, String>> {
    for name in cudarc::get_lib_name_candidates("cudnn") {
        if CUDNN.sonames.contains(&name.as_str()) {
            return None;
        }
        if let Ok(lib) = open_global(Path::new(&name)) {
            return Some(Ok(Loaded {
                path: PathBuf::from(name),
                _lib: lib,
                _companions: Vec::new(),
            }));
        }
    }
    None
}

/// The first of `sonames` found in a candidate folder, opened with `RTLD_GLOBAL` and kept for
/// the life of the process (best effort: nothing found is not an error).
fn preload_any(sonames: &[&str]) {
    static KEPT: std::sync::Mutex<Vec<libloading::os::unix::Library>> =
        std::sync::Mutex::new(Vec::new());
    for dir in candidate_dirs() {
        for soname in sonames {
            let path = dir.join(soname);
            if path.exists() {
                if let Ok(lib) = open_global(&path) {
                    KEPT.lock().unwrap_or_else(|e| e.into_inner()).push(lib);
                    return;
                }
            }
        }
    }
}

/// The names in `symbols` that the loaded cuDNN does not export (all of them when cuDNN is
/// not loaded). cudarc's bindings panic on a missing symbol, so callers check first.
pub fn cudnn_missing_symbols(symbols: &[&str]) -> Vec<String> {
    let Some(Ok(loaded)) = CUDNN_STATE.get() else {
        return symbols.iter().map(|s| s.to_string()).collect();
    };
    symbols
        .iter()
        .filter(|name| {
            // SAFETY: only the symbol's address is looked up; nothing is called.
            unsafe { loaded._lib.get::<*const std::ffi::c_void>(name.as_bytes()) }.is_err()
        })
        .map(|s| s.to_string())
        .collect()
}
