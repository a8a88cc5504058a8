//! The window generators (HannWindow, HammingWindow, BlackmanWindow) against the CPU
//! provider: every output dtype, periodic and symmetric, int32 and int64 sizes, empty and
//! one-element windows, `output_types` agreeing with what execute writes, capture support
//! after one eager run, bad sizes as errors naming the node.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, EpError, ExecutionProvider};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const WINDOWS: [&str; 3] = ["HannWindow", "HammingWindow", "BlackmanWindow"];

const NUMERIC: [DataType; 12] = [
    DataType::Float32,
    DataType::Float64,
    DataType::Float16,
    DataType::BFloat16,
    DataType::Int8,
    DataType::Int16,
    DataType::Int32,
    DataType::Int64,
    DataType::Uint8,
    DataType::Uint16,
    DataType::Uint32,
    DataType::Uint64,
];

/// Builds the kernel, asks `output_types`, runs on outputs of exactly those types.
fn gpu_run(ep: &CudaExecutionProvider, node: &Node, inputs: &[T]) -> Result<Vec<T>, EpError> {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    let kernel = ep.get_kernel(node, &shapes, 17)?;
    let mut bound = Bound::new(ep, inputs, &[]);
    let types = bound.output_types(kernel.as_ref())?;
    bound.set_outputs(&types);
    bound.execute(kernel.as_ref())?;
    bound.read()
}

/// The tolerance of an output dtype against the CPU's (which rounds f64 -> f32 -> T).
fn tolerance(dtype: DataType) -> (f64, f64) {
    match dtype {
        DataType::Float64 => (1e-13, 1e-14),
        DataType::Float32 => (1e-6, 1e-7),
        DataType::Float16 => (1e-3, 1e-3),
        DataType::BFloat16 => (1e-2, 1e-2),
        _ => (0.0, 0.0),
    }
}

fn size_input(dtype: DataType, size: i64) -> T {
    if dtype == DataType::Int32 {
        i32s(&[], &[size as i32])
    } else {
        i64s(&[], &[size])
    }
}

#[test]
fn windows_every_dtype_periodic_and_symmetric() {
    let ep = gpu();
    for op in WINDOWS {
        for dtype in NUMERIC {
            for periodic in [None, Some(0), Some(1)] {
                for (size, size_dtype) in [
                    (1, DataType::Int64),
                    (2, DataType::Int32),
                    (7, DataType::Int64),
                    (16, DataType::Int64),
                    (1001, DataType::Int32),
                ] {
                    let mut attrs =
                        vec![("output_datatype", Attribute::Int(dtype.onnx_code() as i64))];
                    if let Some(p) = periodic {
                        attrs.push(("periodic", Attribute::Int(p)));
                    }
                    let n = node(op, 1, 1, &attrs);
                    let input = size_input(size_dtype, size);
                    let what = format!("{op} {dtype} periodic {periodic:?} size {size}");
                    let want = cpu_reference(&n, 17, &[Some(&input)])
                        .unwrap_or_else(|e| panic!("{what}: CPU reference: {e}"));
                    let got = gpu_run(&ep, &n, &[input]).unwrap_or_else(|e| panic!("{what}: {e}"));
                    let (rtol, atol) = tolerance(dtype);
                    assert_close_to(&got[0], &want[0], rtol, atol, &what);
                }
            }
        }
    }
}

#[test]
fn windows_default_dtype_and_empty() {
    let ep = gpu();
    for op in WINDOWS {
        let n = node(op, 1, 1, &[]);
        for size in [0i64, 3, 64] {
            let input = i64s(&[], &[size]);
            let want = cpu_reference(&n, 17, &[Some(&input)]).unwrap();
            let got = gpu_run(&ep, &n, &[input]).unwrap();
            assert_eq!(got[0].dtype, DataType::Float32, "{op}: default output type");
            assert_close_to(&got[0], &want[0], 1e-6, 1e-7, &format!("{op} size {size}"));
        }
        // A one-element size tensor of rank 1 works as a scalar.
        let input = i64s(&[1], &[5]);
        let want = cpu_reference(&n, 17, &[Some(&input)]).unwrap();
        let got = gpu_run(&ep, &n, &[input]).unwrap();
        assert_close_to(&got[0], &want[0], 1e-6, 1e-7, &format!("{op} size [5]"));
    }
}

#[test]
fn windows_capture_after_one_eager_run() {
    let ep = gpu();
    let n = node("HannWindow", 1, 1, &[]);
    let input = i64s(&[], &[32]);
    let kernel = ep.get_kernel(&n, &[vec![]], 17).unwrap();
    assert!(
        matches!(kernel.capture_support(), CaptureSupport::Unsupported { .. }),
        "the size is read on the host: not capturable before an eager run"
    );
    let mut bound = Bound::new(&ep, &[input], &[]);
    let types = bound.output_types(kernel.as_ref()).unwrap();
    assert_eq!(types, vec![(DataType::Float32, vec![32])]);
    bound.set_outputs(&types);
    bound.execute(kernel.as_ref()).unwrap();
    assert_eq!(kernel.capture_support(), CaptureSupport::Supported);
}

#[test]
fn bad_window_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    for op in WINDOWS {
        let n = node(op, 1, 1, &[]);
        let err = gpu_run(&ep, &n, &[i64s(&[], &[-3])])
            .err()
            .unwrap_or_else(|| panic!("{op}: a negative size must fail"))
            .to_string();
        assert!(
            err.contains(&n.name) && err.contains("negative"),
            "{op}: got {err}"
        );
        let err = gpu_run(&ep, &n, &[i64s(&[0], &[])])
            .err()
            .unwrap_or_else(|| panic!("{op}: an empty size must fail"))
            .to_string();
        assert!(err.contains(&n.name), "{op}: got {err}");
        // A non-numeric output_datatype is refused when the kernel is built.
        let bad = node(op, 1, 1, &[("output_datatype", Attribute::Int(8))]);
        assert!(
            ep.get_kernel(&bad, &[vec![]], 17).is_err(),
            "{op}: string output"
        );
    }
}
