//! `Kernel::output_types` for every registered op: the dtype and shape of each output for
//! inputs on the device (negative axes, shape-carrying inputs read at run time, broadcasting),
//! against expectations derived by hand from the ONNX spec; then `execute` must accept outputs
//! of exactly those types, and for some ops write the bytes a plain reference gives. Bad
//! inputs are errors naming the node, and `output_types` leaves the warm-then-capture rule to
//! `execute`.

use super::harness::*;
use onnx_runtime_ep_api::{CaptureSupport, ExecutionProvider, Kernel};
use onnx_runtime_ep_cuda::CudaExecutionProvider;
use onnx_runtime_ir::{Attribute, DataType, Node, TensorData};

type Types = Vec<(DataType, Vec<usize>)>;

fn kernel(ep: &CudaExecutionProvider, n: &Node, opset: u64, inputs: &[T]) -> Box<dyn Kernel> {
    let shapes: Vec<Vec<usize>> = inputs.iter().map(|t| t.shape.clone()).collect();
    ep.get_kernel(n, &shapes, opset).unwrap()
}

/// Asks `output_types` for `inputs`, checks it is `want`, runs `execute` on outputs of those
/// types and returns what it wrote.
fn resolve_and_run(
    ep: &CudaExecutionProvider,
    n: &Node,
    opset: u64,
    inputs: &[T],
    want: &[(DataType, Vec<usize>)],
) -> Vec<T> {
    let k = kernel(ep, n, opset, inputs);
    let mut bound = Bound::new(ep, inputs, &[]);
    let got = bound
        .output_types(k.as_ref())
        .unwrap_or_else(|e| panic!("{} output_types: {e}", n.op_type));
    assert_eq!(got, want, "{} at opset {opset}: output types", n.op_type);
    bound.set_outputs(&got);
    bound
        .execute(k.as_ref())
        .unwrap_or_else(|e| panic!("{} execute on the resolved outputs: {e}", n.op_type));
    bound.read().unwrap()
}

/// `output_types` must refuse `inputs` with an error naming the node and saying `needle`.
fn refused(ep: &CudaExecutionProvider, n: &Node, opset: u64, inputs: &[T], needle: &str) {
    let k = kernel(ep, n, opset, inputs);
    let bound = Bound::new(ep, inputs, &[]);
    let err = bound.output_types(k.as_ref()).unwrap_err().to_string();
    assert!(
        err.contains(&n.name) && err.contains(needle),
        "{}: expected an error naming the node and saying '{needle}', got: {err}",
        n.op_type
    );
}

fn one(dtype: DataType, shape: &[usize]) -> Types {
    vec![(dtype, shape.to_vec())]
}

fn f32s(rng: &mut Rng, shape: &[usize]) -> T {
    random_numeric(rng, DataType::Float32, shape, -50, 50)
}

#[test]
fn output_types_cast_cumsum_and_construction() {
    let ep = gpu();
    let mut rng = Rng::new(41);
    // Cast: the `to` dtype, the input's shape.
    let n = node(
        "Cast",
        1,
        1,
        &[("to", Attribute::Int(DataType::Float16.onnx_code() as i64))],
    );
    let x = f32s(&mut rng, &[2, 3]).with_layout(Layout::Reversed);
    resolve_and_run(&ep, &n, 19, &[x], &one(DataType::Float16, &[2, 3]));
    // CumSum: the input's type, whatever the (negative, int32) axis.
    let n = node("CumSum", 2, 1, &[("exclusive", Attribute::Int(1))]);
    let x = random_numeric(&mut rng, DataType::Float64, &[2, 3, 4], 0, 9);
    let axis = i32s(&[], &[-1]);
    resolve_and_run(&ep, &n, 14, &[x, axis], &one(DataType::Float64, &[2, 3, 4]));
    // ConstantOfShape: the value's dtype, the shape input's values (float32 zeros by default).
    let value = TensorData::from_bytes(DataType::Int64, vec![1], (-7i64).to_ne_bytes().to_vec());
    let n = node(
        "ConstantOfShape",
        1,
        1,
        &[("value", Attribute::Tensor(value))],
    );
    let got = resolve_and_run(
        &ep,
        &n,
        20,
        &[i64s(&[3], &[2, 1, 3])],
        &one(DataType::Int64, &[2, 1, 3]),
    );
    assert_close(&got[0], &[-7.0; 6], 0.0, 0.0, "constant_of_shape int64");
    let n = node("ConstantOfShape", 1, 1, &[]);
    let got = resolve_and_run(
        &ep,
        &n,
        20,
        &[i64s(&[2], &[4, 2])],
        &one(DataType::Float32, &[4, 2]),
    );
    assert_close(&got[0], &[0.0; 8], 0.0, 0.0, "constant_of_shape default");
    // A 0-element shape input gives a scalar.
    resolve_and_run(
        &ep,
        &n,
        20,
        &[i64s(&[0], &[])],
        &one(DataType::Float32, &[]),
    );
    // Shape: int64 [end - start] after clamping; here axes 1..3 of a rank-4 input.
    let x = random_bytes(&mut rng, DataType::Uint8, &[2, 3, 4, 5]);
    let n = node(
        "Shape",
        1,
        1,
        &[("start", Attribute::Int(-3)), ("end", Attribute::Int(-1))],
    );
    let got = resolve_and_run(&ep, &n, 15, &[x.clone()], &one(DataType::Int64, &[2]));
    assert_close(&got[0], &[3.0, 4.0], 0.0, 0.0, "shape values");
    // Size: an int64 scalar.
    let n = node("Size", 1, 1, &[]);
    let got = resolve_and_run(&ep, &n, 13, &[x], &one(DataType::Int64, &[]));
    assert_close(&got[0], &[120.0], 0.0, 0.0, "size value");
    // Range: ceil((limit - start) / delta) elements of start's dtype.
    let n = node("Range", 3, 1, &[]);
    let bounds = |dtype, s: f64, l: f64, d: f64| [s, l, d].map(|v| from_f64s(dtype, &[], &[v]));
    // 10, 7, 4, 1, -2, -5: ceil(-17 / -3) = 6.
    let got = resolve_and_run(
        &ep,
        &n,
        11,
        &bounds(DataType::Int64, 10.0, -7.0, -3.0),
        &one(DataType::Int64, &[6]),
    );
    assert_close(
        &got[0],
        &[10.0, 7.0, 4.0, 1.0, -2.0, -5.0],
        0.0,
        0.0,
        "range int64",
    );
    // ceil(17 / 4) = 5; ceil(1 / 0.3) = 4; ceil(-1 / 0.5) < 0 gives an empty range.
    let int32 = bounds(DataType::Int32, 0.0, 17.0, 4.0);
    resolve_and_run(&ep, &n, 11, &int32, &one(DataType::Int32, &[5]));
    let float = bounds(DataType::Float32, 1.0, 2.0, 0.3);
    resolve_and_run(&ep, &n, 11, &float, &one(DataType::Float32, &[4]));
    let empty = bounds(DataType::Float64, 1.0, 0.0, 0.5);
    resolve_and_run(&ep, &n, 11, &empty, &one(DataType::Float64, &[0]));
    // OneHot: values' dtype, the indices' shape with depth inserted at the (negative) axis;
    // depth may be a float.
    let idx = from_f64s(DataType::Int64, &[2, 3], &[0.0, 1.0, 4.0, -1.0, 2.0, 3.0]);
    let values = from_f64s(DataType::Float16, &[2], &[0.0, 1.0]);
    let n = node("OneHot", 3, 1, &[("axis", Attribute::Int(-2))]);
    let inputs = [idx.clone(), i64s(&[], &[5]), values.clone()];
    resolve_and_run(&ep, &n, 11, &inputs, &one(DataType::Float16, &[2, 5, 3]));
    let n = node("OneHot", 3, 1, &[("axis", Attribute::Int(0))]);
    let depth = from_f64s(DataType::Float32, &[1], &[4.0]);
    resolve_and_run(
        &ep,
        &n,
        11,
        &[idx, depth, values],
        &one(DataType::Float16, &[4, 2, 3]),
    );
    // Trilu: the input's type.
    let n = node("Trilu", 2, 1, &[("upper", Attribute::Int(0))]);
    let x = random_bytes(&mut rng, DataType::Int16, &[3, 4, 5]);
    resolve_and_run(
        &ep,
        &n,
        14,
        &[x, i64s(&[], &[1])],
        &one(DataType::Int16, &[3, 4, 5]),
    );
}

#[test]
fn output_types_index_ops() {
    let ep = gpu();
    let mut rng = Rng::new(42);
    // Gather on the last axis: data[:2] + indices' shape.
    let data = random_bytes(&mut rng, DataType::Float32, &[3, 4, 5]);
    let n = node("Gather", 2, 1, &[("axis", Attribute::Int(-1))]);
    let idx = [0i64, 4, -1, 2];
    let got = resolve_and_run(
        &ep,
        &n,
        13,
        &[data.clone(), i64s(&[2, 2], &idx)],
        &one(DataType::Float32, &[3, 4, 2, 2]),
    );
    let want = moved(&data, &[3, 4, 2, 2], |o| {
        let i = idx[o[2] * 2 + o[3]].rem_euclid(5) as usize;
        lin(&[3, 4, 5], &[o[0], o[1], i])
    });
    assert_same(&got[0], &want, "gather bytes");
    // GatherElements: the indices' shape.
    let data = random_bytes(&mut rng, DataType::Int64, &[3, 4]);
    let n = node("GatherElements", 2, 1, &[("axis", Attribute::Int(-1))]);
    let idx = i64s(&[3, 2], &[0, 3, 1, 2, -1, 0]);
    resolve_and_run(&ep, &n, 13, &[data, idx], &one(DataType::Int64, &[3, 2]));
    // GatherND with batch_dims 1: indices[:-1] + data[batch_dims + k:] = [2] + [4].
    let data = random_bytes(&mut rng, DataType::Uint8, &[2, 3, 4]);
    let n = node("GatherND", 2, 1, &[("batch_dims", Attribute::Int(1))]);
    let idx = i64s(&[2, 1], &[2, 0]);
    resolve_and_run(&ep, &n, 13, &[data, idx], &one(DataType::Uint8, &[2, 4]));
    // Scatters: the data's type.
    let n = node("ScatterND", 3, 1, &[]);
    let inputs = [
        f32s(&mut rng, &[4, 3]),
        i64s(&[2, 1], &[1, 3]),
        f32s(&mut rng, &[2, 3]),
    ];
    resolve_and_run(&ep, &n, 13, &inputs, &one(DataType::Float32, &[4, 3]));
    let inputs = [
        f32s(&mut rng, &[3, 3]),
        i64s(&[2, 3], &[0, 1, 2, 2, 0, 1]),
        f32s(&mut rng, &[2, 3]),
    ];
    let n = node("ScatterElements", 3, 1, &[("axis", Attribute::Int(-2))]);
    resolve_and_run(&ep, &n, 13, &inputs, &one(DataType::Float32, &[3, 3]));
    let n = node("Scatter", 3, 1, &[("axis", Attribute::Int(0))]);
    resolve_and_run(&ep, &n, 10, &inputs, &one(DataType::Float32, &[3, 3]));
}

#[test]
fn output_types_movement_ops() {
    let ep = gpu();
    let mut rng = Rng::new(43);
    let x = random_bytes(&mut rng, DataType::Float16, &[2, 3, 4]).with_layout(Layout::Padded);
    // Transpose: perm [-1, 0, -2] is [2, 0, 1]; no perm reverses the axes.
    let n = node(
        "Transpose",
        1,
        1,
        &[("perm", Attribute::Ints(vec![-1, 0, -2]))],
    );
    let got = resolve_and_run(
        &ep,
        &n,
        13,
        &[x.clone()],
        &one(DataType::Float16, &[4, 2, 3]),
    );
    let want = moved(&x, &[4, 2, 3], |o| lin(&[2, 3, 4], &[o[1], o[2], o[0]]));
    assert_same(&got[0], &want, "transpose bytes");
    let n = node("Transpose", 1, 1, &[]);
    resolve_and_run(
        &ep,
        &n,
        13,
        &[x.clone()],
        &one(DataType::Float16, &[4, 3, 2]),
    );
    // Expand broadcasts both ways: [3, 1, 4] with [2, 1, 5, 1] is [2, 3, 5, 4]; a shorter
    // shape keeps the input's leading axes.
    let e = random_bytes(&mut rng, DataType::Int32, &[3, 1, 4]);
    let n = node("Expand", 2, 1, &[]);
    let got = resolve_and_run(
        &ep,
        &n,
        13,
        &[e.clone(), i64s(&[4], &[2, 1, 5, 1])],
        &one(DataType::Int32, &[2, 3, 5, 4]),
    );
    let want = moved(&e, &[2, 3, 5, 4], |o| lin(&[3, 1, 4], &[o[1], 0, o[3]]));
    assert_same(&got[0], &want, "expand bytes");
    resolve_and_run(
        &ep,
        &n,
        13,
        &[e.clone(), i64s(&[1], &[4])],
        &one(DataType::Int32, &[3, 1, 4]),
    );
    // Tile: each axis times its repeat count.
    let n = node("Tile", 2, 1, &[]);
    resolve_and_run(
        &ep,
        &n,
        13,
        &[e, i64s(&[3], &[2, 3, 1])],
        &one(DataType::Int32, &[6, 3, 4]),
    );
    // Slice with negative axes and steps: axis 0 (size 2) from -1 down to the start by -2
    // keeps element 1; axis 2 (size 4) from 1 to the end by 2 keeps 1 and 3.
    let n = node("Slice", 5, 1, &[]);
    let inputs = [
        x.clone(),
        i64s(&[2], &[-1, 1]),
        i64s(&[2], &[i64::MIN, 100]),
        i64s(&[2], &[-3, -1]),
        i64s(&[2], &[-2, 2]),
    ];
    let got = resolve_and_run(&ep, &n, 13, &inputs, &one(DataType::Float16, &[1, 3, 2]));
    let want = moved(&x, &[1, 3, 2], |o| {
        lin(&[2, 3, 4], &[1, o[1], 1 + 2 * o[2]])
    });
    assert_same(&got[0], &want, "slice bytes");
    // The same with the axes omitted and a placeholder view in their place.
    let mut n = node("Slice", 5, 1, &[]);
    n.inputs[3] = None;
    let inputs = [
        x.clone(),
        i64s(&[1], &[1]),
        i64s(&[1], &[2]),
        i64s(&[0], &[]),
        i64s(&[1], &[1]),
    ];
    resolve_and_run(&ep, &n, 13, &inputs, &one(DataType::Float16, &[1, 3, 4]));
    // Concat on axis -2: the sizes there add up.
    let parts: Vec<T> = [1, 4, 2]
        .iter()
        .map(|&c| random_bytes(&mut rng, DataType::Bool, &[2, c, 3]))
        .collect();
    let n = node("Concat", 3, 1, &[("axis", Attribute::Int(-2))]);
    resolve_and_run(&ep, &n, 13, &parts, &one(DataType::Bool, &[2, 7, 3]));
    // Split: one output per node output, from the split input, the split attribute,
    // num_outputs (ceil(7 / 3) = 3 per chunk, the last one smaller) or equal parts.
    let s = random_bytes(&mut rng, DataType::Float64, &[3, 7, 2]);
    let shapes = |dims: &[[usize; 3]]| -> Types {
        dims.iter()
            .map(|d| (DataType::Float64, d.to_vec()))
            .collect()
    };
    let n = node("Split", 2, 3, &[("axis", Attribute::Int(-2))]);
    let inputs = [s.clone(), i64s(&[3], &[2, 4, 1])];
    let want = shapes(&[[3, 2, 2], [3, 4, 2], [3, 1, 2]]);
    let got = resolve_and_run(&ep, &n, 13, &inputs, &want);
    let expect = moved(&s, &[3, 4, 2], |o| lin(&[3, 7, 2], &[o[0], o[1] + 2, o[2]]));
    assert_same(&got[1], &expect, "split bytes");
    let n = node(
        "Split",
        1,
        2,
        &[
            ("axis", Attribute::Int(1)),
            ("split", Attribute::Ints(vec![5, 2])),
        ],
    );
    let want = shapes(&[[3, 5, 2], [3, 2, 2]]);
    resolve_and_run(&ep, &n, 11, &[s.clone()], &want);
    let n = node(
        "Split",
        1,
        3,
        &[
            ("axis", Attribute::Int(1)),
            ("num_outputs", Attribute::Int(3)),
        ],
    );
    let want = shapes(&[[3, 3, 2], [3, 3, 2], [3, 1, 2]]);
    resolve_and_run(&ep, &n, 18, &[s.clone()], &want);
    let n = node("Split", 1, 3, &[("axis", Attribute::Int(-3))]);
    let want = shapes(&[[1, 7, 2], [1, 7, 2], [1, 7, 2]]);
    resolve_and_run(&ep, &n, 13, &[s], &want);
}

#[test]
fn output_types_reshape_family() {
    let ep = gpu();
    let mut rng = Rng::new(44);
    let x = random_bytes(&mut rng, DataType::Int32, &[2, 1, 6]).with_layout(Layout::Reversed);
    // Reshape: 0 copies the input's dim, -1 takes the rest.
    let n = node("Reshape", 2, 1, &[]);
    let got = resolve_and_run(
        &ep,
        &n,
        14,
        &[x.clone(), i64s(&[3], &[0, -1, 3])],
        &one(DataType::Int32, &[2, 2, 3]),
    );
    let mut want = moved(&x, &[12], |o| o[0]);
    want.shape = vec![2, 2, 3];
    assert_same(&got[0], &want, "reshape bytes");
    // allowzero=1 keeps a 0 as a zero-sized dim (allowzero=0 would copy the input's 3).
    let n = node("Reshape", 2, 1, &[("allowzero", Attribute::Int(1))]);
    let empty = random_bytes(&mut rng, DataType::Int32, &[3, 0]);
    resolve_and_run(
        &ep,
        &n,
        14,
        &[empty, i64s(&[2], &[0, 5])],
        &one(DataType::Int32, &[0, 5]),
    );
    // Squeeze with a negative axes input, and with no axes (every size-1 axis).
    let y = random_bytes(&mut rng, DataType::Uint8, &[1, 3, 1, 2]);
    let n = node("Squeeze", 2, 1, &[]);
    let inputs = [y.clone(), i64s(&[2], &[-2, 0])];
    resolve_and_run(&ep, &n, 13, &inputs, &one(DataType::Uint8, &[3, 2]));
    let n = node("Squeeze", 1, 1, &[]);
    resolve_and_run(&ep, &n, 13, &[y.clone()], &one(DataType::Uint8, &[3, 2]));
    // Unsqueeze: axes count in the output's rank (5), so -1 is axis 4.
    let n = node("Unsqueeze", 2, 1, &[]);
    let inputs = [x.clone(), i64s(&[2], &[-1, 0])];
    resolve_and_run(
        &ep,
        &n,
        13,
        &inputs,
        &one(DataType::Int32, &[1, 2, 1, 6, 1]),
    );
    let n = node("Unsqueeze", 1, 1, &[("axes", Attribute::Ints(vec![1]))]);
    resolve_and_run(
        &ep,
        &n,
        11,
        &[x.clone()],
        &one(DataType::Int32, &[2, 1, 1, 6]),
    );
    // Flatten: [prod(dims before axis), prod(dims from axis)].
    let n = node("Flatten", 1, 1, &[("axis", Attribute::Int(-1))]);
    resolve_and_run(&ep, &n, 13, &[x.clone()], &one(DataType::Int32, &[2, 6]));
    let n = node("Flatten", 1, 1, &[("axis", Attribute::Int(0))]);
    resolve_and_run(&ep, &n, 13, &[x.clone()], &one(DataType::Int32, &[1, 12]));
    // Identity: the input's type.
    let n = node("Identity", 1, 1, &[]);
    resolve_and_run(&ep, &n, 13, &[y], &one(DataType::Uint8, &[1, 3, 1, 2]));
}

#[test]
fn output_types_where_and_pad() {
    let ep = gpu();
    let mut rng = Rng::new(45);
    // Where: X's dtype, the broadcast of [2, 1, 3], [4, 1] and [].
    let c = random_bytes(&mut rng, DataType::Bool, &[2, 1, 3]);
    let x = random_bytes(&mut rng, DataType::Int64, &[4, 1]);
    let y = random_bytes(&mut rng, DataType::Int64, &[]);
    let n = node("Where", 3, 1, &[]);
    let got = resolve_and_run(
        &ep,
        &n,
        16,
        &[c.clone(), x.clone(), y.clone()],
        &one(DataType::Int64, &[2, 4, 3]),
    );
    let mut bytes = Vec::new();
    for a in 0..2 {
        for b in 0..4 {
            for d in 0..3 {
                let take_x = c.bytes[a * 3 + d] != 0;
                bytes.extend_from_slice(if take_x { x.elem(b) } else { y.elem(0) });
            }
        }
    }
    assert_same(
        &got[0],
        &T::new(DataType::Int64, &[2, 4, 3], bytes),
        "where",
    );
    // Pad: begin/end pads (negative ones crop) per axis: [3 + 1 + 0, 4 - 1 + 2].
    let p = f32s(&mut rng, &[3, 4]);
    let n = node("Pad", 3, 1, &[("mode", Attribute::String("edge".into()))]);
    let inputs = [
        p.clone(),
        i64s(&[4], &[1, -1, 0, 2]),
        from_f64s(DataType::Float32, &[], &[0.0]),
    ];
    resolve_and_run(&ep, &n, 19, &inputs, &one(DataType::Float32, &[4, 5]));
    // With an axes input (opset 18): only the last axis, by [1, 2].
    let n = node("Pad", 4, 1, &[]);
    let inputs = [
        p.clone(),
        i64s(&[2], &[1, 2]),
        from_f64s(DataType::Float32, &[], &[-1.0]),
        i64s(&[1], &[-1]),
    ];
    resolve_and_run(&ep, &n, 18, &inputs, &one(DataType::Float32, &[3, 7]));
    // Pads from the attribute (opset 2): [0, 1, 2, 0] gives [3 + 2, 4 + 1].
    let n = node(
        "Pad",
        1,
        1,
        &[
            ("pads", Attribute::Ints(vec![0, 1, 2, 0])),
            ("value", Attribute::Float(1.5)),
        ],
    );
    resolve_and_run(&ep, &n, 2, &[p], &one(DataType::Float32, &[5, 5]));
}

#[test]
fn output_types_refuses_bad_inputs_naming_the_node() {
    let ep = gpu();
    let mut rng = Rng::new(46);
    let x = f32s(&mut rng, &[2, 3]);
    let n = node("Reshape", 2, 1, &[]);
    refused(
        &ep,
        &n,
        14,
        &[x.clone(), i64s(&[2], &[4, -1])],
        "cannot reshape",
    );
    let n = node("Reshape", 2, 1, &[]);
    refused(&ep, &n, 14, &[x.clone(), i64s(&[2], &[-2, 3])], "negative");
    let n = node("Squeeze", 2, 1, &[]);
    refused(&ep, &n, 13, &[x.clone(), i64s(&[1], &[1])], "not 1");
    let n = node("Unsqueeze", 2, 1, &[]);
    refused(&ep, &n, 13, &[x.clone(), i64s(&[2], &[0, -4])], "repeated");
    let n = node("Flatten", 1, 1, &[("axis", Attribute::Int(3))]);
    refused(&ep, &n, 13, &[x.clone()], "out of range");
    let n = node("Transpose", 1, 1, &[("perm", Attribute::Ints(vec![0, 0]))]);
    refused(&ep, &n, 13, &[x.clone()], "repeats");
    let n = node("Expand", 2, 1, &[]);
    refused(&ep, &n, 13, &[x.clone(), i64s(&[2], &[-1, 3])], "negative");
    let n = node("Expand", 2, 1, &[]);
    refused(&ep, &n, 13, &[x.clone(), i64s(&[1], &[4])], "broadcast");
    let n = node("Tile", 2, 1, &[]);
    refused(&ep, &n, 13, &[x.clone(), i64s(&[1], &[2])], "repeats");
    let n = node("Slice", 4, 1, &[]);
    let inputs = [
        x.clone(),
        i64s(&[1], &[0]),
        i64s(&[1], &[1]),
        i64s(&[1], &[2]),
    ];
    refused(&ep, &n, 13, &inputs, "out of range");
    let n = node("Concat", 2, 1, &[("axis", Attribute::Int(0))]);
    refused(
        &ep,
        &n,
        13,
        &[x.clone(), f32s(&mut rng, &[2, 4])],
        "concatenated",
    );
    let n = node("Split", 2, 2, &[("axis", Attribute::Int(1))]);
    refused(&ep, &n, 13, &[x.clone(), i64s(&[2], &[2, 2])], "split");
    let n = node("Split", 1, 2, &[("axis", Attribute::Int(-1))]);
    refused(&ep, &n, 13, &[x.clone()], "evenly");
    let n = node("CumSum", 2, 1, &[]);
    refused(&ep, &n, 14, &[x.clone(), i64s(&[], &[2])], "out of range");
    let n = node("Pad", 2, 1, &[]);
    refused(
        &ep,
        &n,
        19,
        &[x.clone(), i64s(&[3], &[1, 1, 1])],
        "2 entries",
    );
    let n = node("Gather", 2, 1, &[("axis", Attribute::Int(-3))]);
    refused(&ep, &n, 13, &[x.clone(), i64s(&[1], &[0])], "out of range");
    let n = node("GatherElements", 2, 1, &[("axis", Attribute::Int(0))]);
    refused(&ep, &n, 13, &[x.clone(), i64s(&[1], &[0])], "do not fit");
    let n = node("ScatterND", 3, 1, &[]);
    let inputs = [x.clone(), i64s(&[1, 1], &[0]), f32s(&mut rng, &[1, 2])];
    refused(&ep, &n, 13, &inputs, "do not fit");
    let n = node("Where", 3, 1, &[]);
    let c = random_bytes(&mut rng, DataType::Bool, &[4]);
    refused(&ep, &n, 16, &[c, x.clone(), x.clone()], "broadcast");
    let n = node("ConstantOfShape", 1, 1, &[]);
    refused(&ep, &n, 20, &[i64s(&[2], &[2, -3])], "negative");
    let n = node("Range", 3, 1, &[]);
    refused(&ep, &n, 11, &[1, 5, 0].map(|v| i64s(&[], &[v])), "delta");
    let n = node("OneHot", 3, 1, &[]);
    let inputs = [
        i64s(&[2], &[0, 1]),
        i64s(&[], &[0]),
        from_f64s(DataType::Float32, &[2], &[0.0, 1.0]),
    ];
    refused(&ep, &n, 11, &inputs, "depth");
}

#[test]
fn output_types_leaves_warm_then_capture_to_execute() {
    let ep = gpu();
    let runtime = ep.runtime();
    let mut rng = Rng::new(47);
    let n = node("Reshape", 2, 1, &[]);
    let inputs = [f32s(&mut rng, &[2, 6]), i64s(&[3], &[3, -1, 2])];
    let k = kernel(&ep, &n, 13, &inputs);
    let mut bound = Bound::new(&ep, &inputs, &[]);
    let types = bound.output_types(k.as_ref()).unwrap();
    assert_eq!(types, one(DataType::Float32, &[3, 2, 2]));
    // Asking for the output types does not warm the kernel; only execute does.
    assert!(matches!(
        k.capture_support(),
        CaptureSupport::Unsupported { .. }
    ));
    bound.set_outputs(&types);
    bound.execute(k.as_ref()).unwrap();
    assert_eq!(k.capture_support(), CaptureSupport::Supported);
    // Buffers for the calls made during capture (which may not allocate).
    let other = Bound::new(&ep, &[f32s(&mut rng, &[3, 4]), inputs[1].clone()], &[]);
    let c_node = node("ConstantOfShape", 1, 1, &[]);
    let c_inputs = [i64s(&[1], &[4])];
    let c_kernel = kernel(&ep, &c_node, 20, &c_inputs);
    let c_bound = Bound::new(&ep, &c_inputs, &[]);
    runtime.begin_graph_capture(&[k.as_ref()]).unwrap();
    // During capture: the warmed inputs answer from the warmed values...
    let during = bound.output_types(k.as_ref());
    // ...inputs never run eagerly are refused, as is a read no execute warmed.
    let unwarmed = other.output_types(k.as_ref());
    let host_read = c_bound.output_types(c_kernel.as_ref());
    runtime.abort_graph_capture().unwrap();
    assert_eq!(during.unwrap(), types);
    let err = unwarmed.unwrap_err().to_string();
    assert!(err.contains("warm the exact signature first"), "{err}");
    let err = host_read.unwrap_err().to_string();
    assert!(
        err.contains("test_ConstantOfShape") && err.contains("capture"),
        "{err}"
    );
    // After capture the host read works again.
    assert_eq!(
        c_bound.output_types(c_kernel.as_ref()).unwrap(),
        one(DataType::Float32, &[4])
    );
}
