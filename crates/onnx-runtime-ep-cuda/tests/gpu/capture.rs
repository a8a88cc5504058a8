//! Graph capture: eager-vs-replay equality for every op family, the warm-then-capture rule,
//! refusals, the caching allocator and the NVRTC disk cache.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, ExecutionProvider, Kernel};
use onnx_runtime_ir::{Attribute, DataType, Node};

struct Case {
    node: Node,
    opset: u64,
    inputs: Vec<T>,
    /// Which inputs get new random values before replay (shape-carrying ones stay fixed).
    mutate: Vec<usize>,
    outs: Vec<(DataType, Vec<usize>)>,
}

fn cases(rng: &mut Rng) -> Vec<Case> {
    let f32s = |rng: &mut Rng, s: &[usize]| random_numeric(rng, DataType::Float32, s, -50, 50);
    vec![
        Case {
            node: node("Slice", 5, 1, &[]),
            opset: 13,
            inputs: vec![
                f32s(rng, &[4, 6]).with_layout(Layout::Reversed),
                i64s(&[2], &[3, 1]),
                i64s(&[2], &[0, 6]),
                i64s(&[2], &[0, 1]),
                i64s(&[2], &[-1, 2]),
            ],
            mutate: vec![0],
            outs: vec![(DataType::Float32, vec![3, 3])],
        },
        Case {
            node: node("Transpose", 1, 1, &[("perm", Attribute::Ints(vec![1, 0]))]),
            opset: 13,
            inputs: vec![f32s(rng, &[5, 3])],
            mutate: vec![0],
            outs: vec![(DataType::Float32, vec![3, 5])],
        },
        Case {
            node: node("Gather", 2, 1, &[("axis", Attribute::Int(1))]),
            opset: 13,
            inputs: vec![f32s(rng, &[3, 4]), i64s(&[2], &[3, -1])],
            mutate: vec![0, 1],
            outs: vec![(DataType::Float32, vec![3, 2])],
        },
        Case {
            node: node(
                "Cast",
                1,
                1,
                &[("to", Attribute::Int(DataType::Float16.onnx_code() as i64))],
            ),
            opset: 19,
            inputs: vec![f32s(rng, &[7])],
            mutate: vec![0],
            outs: vec![(DataType::Float16, vec![7])],
        },
        Case {
            node: node("Where", 3, 1, &[]),
            opset: 16,
            inputs: vec![
                random_bytes(rng, DataType::Bool, &[3, 1]),
                f32s(rng, &[1, 4]),
                f32s(rng, &[3, 4]),
            ],
            mutate: vec![0, 1, 2],
            outs: vec![(DataType::Float32, vec![3, 4])],
        },
        Case {
            node: node(
                "Pad",
                3,
                1,
                &[("mode", Attribute::String("reflect".into()))],
            ),
            opset: 18,
            inputs: vec![
                f32s(rng, &[3, 4]),
                i64s(&[4], &[1, 2, 0, 1]),
                from_f64s(DataType::Float32, &[], &[0.0]),
            ],
            mutate: vec![0],
            outs: vec![(DataType::Float32, vec![4, 7])],
        },
        Case {
            node: node(
                "ScatterElements",
                3,
                1,
                &[
                    ("axis", Attribute::Int(0)),
                    ("reduction", Attribute::String("add".into())),
                ],
            ),
            opset: 18,
            inputs: vec![
                f32s(rng, &[3, 2]),
                i64s(&[2, 2], &[0, 2, 1, 0]),
                f32s(rng, &[2, 2]),
            ],
            mutate: vec![0, 2],
            outs: vec![(DataType::Float32, vec![3, 2])],
        },
        Case {
            node: node("CumSum", 2, 1, &[]),
            opset: 14,
            inputs: vec![f32s(rng, &[2, 5]), i64s(&[], &[1])],
            mutate: vec![0],
            outs: vec![(DataType::Float32, vec![2, 5])],
        },
        Case {
            node: node("Range", 3, 1, &[]),
            opset: 11,
            inputs: vec![
                from_f64s(DataType::Int64, &[], &[3.0]),
                from_f64s(DataType::Int64, &[], &[30.0]),
                from_f64s(DataType::Int64, &[], &[3.0]),
            ],
            mutate: vec![],
            outs: vec![(DataType::Int64, vec![9])],
        },
        Case {
            node: node("Tile", 2, 1, &[]),
            opset: 13,
            inputs: vec![f32s(rng, &[2, 3]), i64s(&[2], &[2, 2])],
            mutate: vec![0],
            outs: vec![(DataType::Float32, vec![4, 6])],
        },
    ]
}

#[test]
fn replay_matches_eager_for_every_family() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(31);
    let cases = cases(&mut rng);
    let kernels: Vec<Box<dyn Kernel>> = cases
        .iter()
        .map(|c| {
            let shapes: Vec<Vec<usize>> = c.inputs.iter().map(|t| t.shape.clone()).collect();
            ep.get_kernel(&c.node, &shapes, c.opset).unwrap()
        })
        .collect();
    let mut bounds: Vec<Bound<'_>> = cases
        .iter()
        .map(|c| Bound::new(&ep, &c.inputs, &c.outs))
        .collect();
    // Capture refuses kernels that read on the host until they ran once.
    let refs: Vec<&dyn Kernel> = kernels.iter().map(|k| k.as_ref()).collect();
    let err = runtime.begin_graph_capture(&refs).unwrap_err().to_string();
    assert!(err.contains("Slice") && err.contains("eagerly"), "{err}");
    assert!(!runtime.is_capturing());
    // Warm every kernel eagerly.
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
        assert_eq!(k.capture_support(), CaptureSupport::Supported);
    }
    runtime.begin_graph_capture(&refs).unwrap();
    assert!(runtime.is_capturing());
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    runtime.end_graph_capture().unwrap();
    assert!(runtime.has_graph_executable().unwrap());
    // New data in the data inputs; replay; compare with an eager run on the same data.
    for (c, b) in cases.iter().zip(bounds.iter_mut()) {
        for &i in &c.mutate {
            let t = &c.inputs[i];
            let fresh = if i == 1 && c.node.op_type == "Gather" {
                i64s(&[2], &[rng.range(-4, 4), rng.range(-4, 4)])
            } else if t.dtype == DataType::Bool {
                random_bytes(&mut rng, t.dtype, &t.shape)
            } else {
                random_numeric(&mut rng, t.dtype, &t.shape, -50, 50)
            }
            .with_layout(t.layout);
            b.set_input(i, fresh);
        }
    }
    runtime.replay_graph().unwrap();
    let replayed: Vec<Vec<T>> = bounds.iter().map(|b| b.read().unwrap()).collect();
    for (k, b) in kernels.iter().zip(bounds.iter_mut()) {
        b.execute(k.as_ref()).unwrap();
    }
    for ((c, b), r) in cases.iter().zip(&bounds).zip(&replayed) {
        let eager = b.read().unwrap();
        for (e, g) in eager.iter().zip(r) {
            assert_same(g, e, &format!("replay vs eager: {}", c.node.op_type));
        }
    }
    assert!(runtime.reset_graph().unwrap());
    assert!(!runtime.reset_graph().unwrap());
    assert!(runtime.replay_graph().is_err());
}

#[test]
fn capture_refuses_host_copies_and_unwarmed_signatures() {
    let ep = gpu();
    let runtime = ep.runtime();
    let x = random_numeric(&mut Rng::new(5), DataType::Float32, &[2, 6], 0, 9);
    let n = node("Slice", 3, 1, &[]);
    let kernel = ep.get_kernel(&n, &[], 13).unwrap();
    let mut b = Bound::new(
        &ep,
        &[x, i64s(&[1], &[1]), i64s(&[1], &[2])],
        &[(DataType::Float32, vec![1, 6])],
    );
    b.execute(kernel.as_ref()).unwrap();
    let buf = ep.allocate(4, 256).unwrap();
    runtime.begin_graph_capture(&[kernel.as_ref()]).unwrap();
    // A block the cache does not hold cannot come from cuMemAlloc during capture.
    let err = ep.allocate(1 << 30, 256).unwrap_err();
    assert!(
        err.to_string().contains("before begin_graph_capture"),
        "{err}"
    );
    // Copies to or from the host are refused while capturing.
    let mut host = [0u8; 4];
    let err = unsafe {
        runtime.dtoh(
            &mut host,
            onnx_runtime_ep_cuda::runtime::cuptr(buf.as_ptr()),
        )
    }
    .unwrap_err();
    assert!(err.to_string().contains("captured"), "{err}");
    let err = unsafe { runtime.htod(&host, onnx_runtime_ep_cuda::runtime::cuptr(buf.as_ptr())) }
        .unwrap_err();
    assert!(err.to_string().contains("captured"), "{err}");
    // A second capture cannot start inside the first.
    assert!(runtime.begin_graph_capture(&[]).is_err());
    runtime.abort_graph_capture().unwrap();
    assert!(!runtime.has_graph_executable().unwrap());
    ep.deallocate(buf).unwrap();
    // After the abort the stream works eagerly again.
    b.execute(kernel.as_ref()).unwrap();
    b.read().unwrap();
}

#[test]
fn libraries_found_without_user_variables() {
    // The machine's loader path need not hold the toolkit: discovery finds it.
    let driver = onnx_runtime_ep_cuda::libs::ensure_driver().unwrap();
    let nvrtc = onnx_runtime_ep_cuda::libs::ensure_nvrtc().unwrap();
    let cublaslt = onnx_runtime_ep_cuda::libs::ensure_cublaslt().unwrap();
    eprintln!(
        "libcuda: {}\nnvrtc: {}\ncublasLt: {}",
        driver.display(),
        nvrtc.display(),
        cublaslt.display()
    );
    let version = onnx_runtime_ep_cuda::compiler::nvrtc_version().unwrap();
    assert!(version.0 >= 12, "NVRTC {version:?}");
}

#[test]
fn caching_allocator_reuses_blocks() {
    let ep = gpu();
    let (_, _, before) = ep.runtime().memory_stats();
    for _ in 0..50 {
        let a = ep.allocate(1000, 256).unwrap();
        let b = ep.allocate(3 << 20, 128).unwrap();
        assert!(a.capacity() >= 1000 && b.capacity() >= 3 << 20);
        assert_eq!(a.as_ptr() as usize % 256, 0);
        ep.deallocate(a).unwrap();
        ep.deallocate(b).unwrap();
    }
    let (live, cached, after) = ep.runtime().memory_stats();
    assert_eq!(
        after - before,
        2,
        "only the first round may reach cuMemAlloc"
    );
    assert_eq!(live, 0);
    assert!(cached >= 1000 + (3 << 20));
    assert!(
        ep.allocate(16, 512).is_err(),
        "alignments above 256 are refused"
    );
}

#[test]
fn nvrtc_disk_cache_holds_compiled_modules() {
    let ep = gpu();
    // Building any kernel compiles (or loads) the copy module.
    let _k = ep
        .get_kernel(&node("Identity", 1, 1, &[]), &[], 13)
        .unwrap();
    let dir = std::env::var_os("XDG_CACHE_HOME")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache")
        })
        .join("onnx-runtime/cuda");
    let arch = ep.runtime().arch();
    let found = std::fs::read_dir(&dir).unwrap().flatten().any(|e| {
        e.file_name()
            .to_string_lossy()
            .starts_with(&format!("copy-sm{arch}-"))
    });
    assert!(found, "no cached CUBIN for sm_{arch} in {}", dir.display());
}
