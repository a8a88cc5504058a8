//! TensorScatter against the CPU provider (bit for bit: the op moves values): linear and
//! circular modes, write_indices given (int64 and int32) and omitted, default and explicit
//! (negative) axes on ranks 3 and 4, every element width (1 to 16 bytes, bool), the
//! contiguous wide-word path and strided caches and updates, and bad inputs (an index that
//! overruns the cache, axis 0, mismatched shapes and dtypes) as errors naming the node.
//! Every call runs on the outputs `output_types` gives.

use super::harness::*;
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node};

const LAYOUTS: [Layout; 3] = [Layout::Contiguous, Layout::Reversed, Layout::Padded];

fn s(v: &str) -> Attribute {
    Attribute::String(v.to_string())
}

struct Case {
    past: &'static [usize],
    seq: usize,
    axis: Option<i64>,
    circular: bool,
    /// write_indices (None: omitted).
    widx: Option<&'static [i64]>,
}

const CASES: [Case; 7] = [
    Case {
        past: &[2, 3, 8, 4],
        seq: 3,
        axis: None,
        circular: false,
        widx: Some(&[1, 5]),
    },
    Case {
        past: &[2, 3, 8, 4],
        seq: 3,
        axis: None,
        circular: true,
        widx: Some(&[6, 7]),
    },
    Case {
        past: &[2, 3, 8, 4],
        seq: 2,
        axis: Some(-2),
        circular: false,
        widx: None,
    },
    Case {
        past: &[3, 8, 5],
        seq: 2,
        axis: Some(1),
        circular: false,
        widx: Some(&[0, 3, 6]),
    },
    Case {
        past: &[2, 3, 6],
        seq: 4,
        axis: Some(-1),
        circular: true,
        widx: Some(&[5, 2]),
    },
    Case {
        past: &[1, 2, 5, 3],
        seq: 5,
        axis: Some(2),
        circular: true,
        widx: Some(&[9]),
    },
    Case {
        past: &[2, 2, 7, 3],
        seq: 0,
        axis: None,
        circular: false,
        widx: Some(&[7, 0]),
    },
];

fn scatter_node(case: &Case) -> Node {
    let mut attrs = Vec::new();
    if let Some(a) = case.axis {
        attrs.push(("axis", Attribute::Int(a)));
    }
    if case.circular {
        attrs.push(("mode", s("circular")));
    }
    let mut n = node("TensorScatter", 3, 1, &attrs);
    if case.widx.is_none() {
        n.inputs.truncate(2);
    }
    n
}

fn update_shape(case: &Case) -> Vec<usize> {
    let rank = case.past.len() as i64;
    let a = case.axis.unwrap_or(-2);
    let a = if a < 0 { a + rank } else { a } as usize;
    let mut u = case.past.to_vec();
    u[a] = case.seq;
    u
}

fn run_case(ep: &CudaExecutionProvider, case: &Case, inputs: Vec<Option<T>>, what: &str) {
    let n = scatter_node(case);
    let want = reference(&n, 24, &inputs, what);
    let got = gpu_run(ep, &n, 24, &inputs).unwrap_or_else(|e| panic!("{what}: {e}"));
    assert_same(&got[0], &want[0], what);
}

#[test]
fn tensor_scatter_modes_axes_and_layouts() {
    let ep = gpu();
    let mut rng = Rng::new(71);
    for (ci, case) in CASES.iter().enumerate() {
        for (li, &layout) in LAYOUTS.iter().enumerate() {
            let past = random_bytes(&mut rng, DataType::Float32, case.past).with_layout(layout);
            let upd = random_bytes(&mut rng, DataType::Float32, &update_shape(case))
                .with_layout(LAYOUTS[(li + 1) % 3]);
            let mut inputs = vec![Some(past), Some(upd)];
            if let Some(w) = case.widx {
                inputs.push(Some(i64s(&[w.len()], w)));
            }
            run_case(
                &ep,
                case,
                inputs,
                &format!("TensorScatter case {ci} {layout:?}"),
            );
        }
    }
}

#[test]
fn tensor_scatter_every_element_width() {
    let ep = gpu();
    let mut rng = Rng::new(72);
    let dtypes = [
        DataType::Float32,
        DataType::Float64,
        DataType::Float16,
        DataType::BFloat16,
        DataType::Int8,
        DataType::Int64,
        DataType::Uint8,
        DataType::Uint16,
        DataType::Bool,
        DataType::Complex64,
        DataType::Complex128,
    ];
    for dtype in dtypes {
        // Inner runs of 4 and 3 elements: wide words where they divide the run, and not.
        for case in [&CASES[0], &CASES[3], &CASES[4]] {
            let past = random_bytes(&mut rng, dtype, case.past);
            let upd = random_bytes(&mut rng, dtype, &update_shape(case));
            let mut inputs = vec![Some(past), Some(upd)];
            if let Some(w) = case.widx {
                // int32 write indices for the signed-byte case, int64 otherwise.
                inputs.push(Some(if dtype == DataType::Int8 {
                    i32s(&[w.len()], &w.iter().map(|&v| v as i32).collect::<Vec<_>>())
                } else {
                    i64s(&[w.len()], w)
                }));
            }
            run_case(
                &ep,
                case,
                inputs,
                &format!("TensorScatter {dtype} {:?}", case.past),
            );
        }
    }
}

#[test]
fn tensor_scatter_large_kv_cache() {
    let ep = gpu();
    let mut rng = Rng::new(73);
    // A KV-cache-like update: [batch, heads, max_seq, head_dim] with a 16-byte inner run.
    let case = Case {
        past: &[2, 8, 256, 64],
        seq: 16,
        axis: None,
        circular: false,
        widx: Some(&[17, 240]),
    };
    for dtype in [DataType::Float16, DataType::Float32] {
        let past = random_bytes(&mut rng, dtype, case.past);
        let upd = random_bytes(&mut rng, dtype, &update_shape(&case));
        let w = case.widx.unwrap();
        let inputs = vec![Some(past), Some(upd), Some(i64s(&[2], w))];
        run_case(&ep, &case, inputs, &format!("TensorScatter large {dtype}"));
    }
}

#[test]
fn tensor_scatter_bad_inputs_are_errors_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(74);
    let case = &CASES[0];
    let n = scatter_node(case);
    let past = random_bytes(&mut rng, DataType::Float32, case.past);
    let upd = random_bytes(&mut rng, DataType::Float32, &update_shape(case));
    // A write index whose run overruns the cache in linear mode: a device error.
    expect_err(
        &ep,
        &n,
        24,
        &[
            Some(past.clone()),
            Some(upd.clone()),
            Some(i64s(&[2], &[0, 6])),
        ],
        "out of range",
    );
    expect_err(
        &ep,
        &n,
        24,
        &[
            Some(past.clone()),
            Some(upd.clone()),
            Some(i64s(&[2], &[-1, 0])),
        ],
        "out of range",
    );
    // The runtime recovers.
    gpu_run(
        &ep,
        &n,
        24,
        &[
            Some(past.clone()),
            Some(upd.clone()),
            Some(i64s(&[2], &[0, 5])),
        ],
    )
    .unwrap();
    // One write index per batch.
    expect_err(
        &ep,
        &n,
        24,
        &[
            Some(past.clone()),
            Some(upd.clone()),
            Some(i64s(&[3], &[0, 1, 2])),
        ],
        "write_indices",
    );
    // An update longer than the cache, or of another shape elsewhere.
    let long = random_bytes(&mut rng, DataType::Float32, &[2, 3, 9, 4]);
    expect_err(
        &ep,
        &n,
        24,
        &[Some(past.clone()), Some(long), Some(i64s(&[2], &[0, 0]))],
        "update shape",
    );
    let other = random_bytes(&mut rng, DataType::Float32, &[2, 2, 3, 4]);
    expect_err(
        &ep,
        &n,
        24,
        &[Some(past.clone()), Some(other), Some(i64s(&[2], &[0, 0]))],
        "update shape",
    );
    // Dtypes that differ.
    let upd16 = random_bytes(&mut rng, DataType::Float16, &update_shape(case));
    expect_err(
        &ep,
        &n,
        24,
        &[Some(past.clone()), Some(upd16), Some(i64s(&[2], &[0, 0]))],
        "update is",
    );
    // The batch axis, an axis out of range.
    let n0 = node("TensorScatter", 3, 1, &[("axis", Attribute::Int(0))]);
    expect_err(
        &ep,
        &n0,
        24,
        &[
            Some(past.clone()),
            Some(upd.clone()),
            Some(i64s(&[2], &[0, 0])),
        ],
        "batch axis",
    );
    let n9 = node("TensorScatter", 3, 1, &[("axis", Attribute::Int(9))]);
    expect_err(
        &ep,
        &n9,
        24,
        &[Some(past), Some(upd), Some(i64s(&[2], &[0, 0]))],
        "out of range",
    );
}
