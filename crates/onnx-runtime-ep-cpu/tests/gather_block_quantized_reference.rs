//! Runs the CPU kernel of com.microsoft GatherBlockQuantized on the cases of
//! `tests/gbq/make_cases.py`: seeded random tables (uint8 with 2/4/8-bit codes, int4, uint4,
//! float8 and float4e2m1), scales of float32 / float16, with and without zero points, int32 and
//! int64 indices (negative ones too) of several ranks, on several gather and quantize axes;
//! expected outputs from onnxruntime (CPU). Needs python3 with onnx, onnxruntime, numpy and
//! ml_dtypes. Set `GBQ_CASES` to a name prefix to run a subset.

mod support;

use onnx_runtime_ep_cpu::kernel::BuildContext;
use onnx_runtime_ep_cpu::{registry, Tensor, Value};
use onnx_runtime_ir::{Attribute, DataType, Node, NodeId, ValueId};

#[test]
fn gather_block_quantized_reference_cases() {
    support::run_suite(support::Suite {
        script: "gbq/make_cases.py",
        modules: "onnx, onnxruntime, numpy, ml_dtypes",
        filter_var: "GBQ_CASES",
        skip: |_| false,
        missing_fails: true,
        check: support::compare_tensor,
    });
}

/// Runs the kernel on uint8 4-bit data [4, 16] (logical [4, 32]), block 16, float scales.
fn run_u8(indices: Tensor, attrs: &[(&str, i64)]) -> Result<Vec<Value>, String> {
    let mut node = Node::new(
        NodeId(0),
        "GatherBlockQuantized",
        (0..3).map(|i| Some(ValueId(i))).collect(),
        vec![ValueId(9)],
    )
    .with_domain("com.microsoft")
    .with_name("gbq");
    for (k, v) in attrs {
        node.attributes.insert(k.to_string(), Attribute::Int(*v));
    }
    let (_, factory) = registry()
        .lookup("com.microsoft", "GatherBlockQuantized", 1)
        .expect("registered");
    let kernel = factory(&BuildContext::new(&node, 1)).map_err(|e| e.to_string())?;
    let data = Tensor::from_vec(vec![4, 16], (0..64u8).collect::<Vec<_>>());
    let scales = Tensor::from_vec(vec![4, 2], vec![0.5f32; 8]);
    let values = [data, indices, scales].map(Value::Tensor);
    let refs: Vec<Option<&Value>> = values.iter().map(Some).collect();
    kernel.run(&refs).map_err(|e| e.to_string())
}

#[test]
fn out_of_range_and_bad_attributes_are_errors() {
    let bits4 = [("bits", 4), ("block_size", 16)];
    let ok = run_u8(Tensor::from_vec(vec![2], vec![-1i64, 0]), &bits4).unwrap();
    let y = ok[0].as_tensor().unwrap();
    assert_eq!(
        (y.dtype(), y.shape()),
        (DataType::Float32, &[2usize, 32][..])
    );
    // Row 3, element 0: byte 48's low nibble (0) minus the default zero point 8, times 0.5.
    assert_eq!(y.data::<f32>()[0], -4.0);
    for bad in [4i64, -5] {
        let err = run_u8(Tensor::from_vec(vec![1], vec![bad]), &bits4).unwrap_err();
        assert!(
            err.contains("gbq") && err.contains("out of range"),
            "index {bad}: {err}"
        );
    }
    let err = run_u8(Tensor::from_vec(vec![1], vec![0i32]), &[("bits", 3)]).unwrap_err();
    assert!(err.contains("bits"), "{err}");
    let err = run_u8(
        Tensor::from_vec(vec![1], vec![0i32]),
        &[("bits", 4), ("block_size", 24)],
    )
    .unwrap_err();
    assert!(err.contains("block_size"), "{err}");
    // Scales that do not match the blocks.
    let err = run_u8(
        Tensor::from_vec(vec![1], vec![0i32]),
        &[("bits", 4), ("block_size", 32)],
    )
    .unwrap_err();
    assert!(err.contains("scales has shape"), "{err}");
}
