"""Prints Rust test cases for the CPU math kernels, with expected values from the ONNX
reference implementation on random inputs. Usage: python scripts/math_cases.py GROUP."""
import sys
import numpy as np
import onnx
from onnx import helper, TensorProto
from onnx.reference import ReferenceEvaluator

rng = np.random.default_rng(7)
NP2ONNX = {np.float32: TensorProto.FLOAT, np.float64: TensorProto.DOUBLE, np.float16: TensorProto.FLOAT16,
           np.int64: TensorProto.INT64, np.int32: TensorProto.INT32, np.int8: TensorProto.INT8,
           np.uint8: TensorProto.UINT8, np.uint32: TensorProto.UINT32, np.uint64: TensorProto.UINT64,
           np.bool_: TensorProto.BOOL}
CTOR = {np.float32: "f32s", np.float64: "f64s", np.float16: "f16s", np.int64: "i64s", np.int32: "i32s",
        np.int8: "i8s", np.uint8: "u8s", np.uint32: "u32s", np.uint64: "u64s", np.bool_: "bools"}
RDT = {np.float32: "Float32", np.float64: "Float64", np.float16: "Float16", np.int64: "Int64",
       np.int32: "Int32", np.int8: "Int8", np.uint8: "Uint8", np.uint32: "Uint32", np.uint64: "Uint64",
       np.bool_: "Bool", np.uint16: "Uint16", np.int16: "Int16"}


def lit(v, is_float):
    if is_float:
        v = float(v)
        if np.isnan(v):
            return "f64::NAN"
        if np.isinf(v):
            return "f64::INFINITY" if v > 0 else "f64::NEG_INFINITY"
        return repr(v) if "." in repr(v) or "e" in repr(v) else repr(v) + ".0"
    return str(int(v))


def tensor(a):
    t = a.dtype.type
    fl = t in (np.float32, np.float64, np.float16)
    vals = ", ".join(lit(v, fl) for v in a.ravel())
    return f"{CTOR[t]}(&{list(a.shape)}, &[{vals}])"


def attr(k, v):
    if isinstance(v, float):
        return f'("{k}", float({v!r}))'
    if isinstance(v, int):
        return f'("{k}", int({v}))'
    if isinstance(v, str):
        return f'("{k}", string("{v}"))'
    return f'("{k}", ints(&{list(v)}))'


def case(op, inputs, opset=None, tol=1e-5, domain="", out_index=0, ref=None, **attrs):
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["y", "z"][:out_index + 1], domain=domain, **attrs)
    vi = [helper.make_tensor_value_info(n, NP2ONNX[a.dtype.type], a.shape) for n, a in zip(names, inputs)]
    graph = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in ["y", "z"][:out_index + 1]])
    opsets = [helper.make_opsetid("", opset or 21)]
    model = helper.make_model(graph, opset_imports=opsets)
    if ref is not None:
        y = ref(*inputs)
    else:
        y = ReferenceEvaluator(model).run(None, dict(zip(names, inputs)))[out_index]
    y = np.asarray(y)
    t = y.dtype.type
    fl = t in (np.float32, np.float64, np.float16)
    want = ", ".join(lit(v, True) for v in y.ravel())
    a = ", ".join(attr(k, v) for k, v in attrs.items())
    ins = ", ".join(tensor(x) for x in inputs)
    fn = f"check_output(\"{op}\", {opset or 21}, vec![{a}], &[{ins}], {out_index}," if out_index else f"check(\"{op}\", {opset or 21}, vec![{a}], &[{ins}],"
    print(f"    {fn} DataType::{RDT[t]}, &{list(y.shape)}, &[{want}], {tol});")


def f(shape, lo=-3, hi=3, dt=np.float32):
    return rng.uniform(lo, hi, shape).astype(dt)


def i(shape, lo=-20, hi=20, dt=np.int64):
    return rng.integers(lo, hi, shape).astype(dt)


def unary():
    for op in ["Abs", "Neg", "Sign", "Ceil", "Floor", "Sqrt", "Reciprocal", "Exp", "Log", "Sin", "Cos", "Tan",
               "Sinh", "Cosh", "Asinh", "Erf", "Atan"]:
        lo = 0.1 if op in ("Sqrt", "Log") else -3
        case(op, [f([2, 3], lo)])
    for op in ["Asin", "Acos", "Atanh"]:
        case(op, [f([5], -0.99, 0.99)])
    case("Acosh", [f([4], 1, 5)])
    case("Round", [np.array([0.5, 1.5, 2.5, -0.5, -1.5, 2.4, -2.6, 3.0], np.float32)])
    case("Round", [np.array([0.5, 1.5, 2.5, -2.5], np.float16)])
    case("Exp", [f([3], dt=np.float64)], tol=1e-12)
    case("Exp", [f([3], dt=np.float16)], tol=1e-3)
    case("Abs", [i([5])])
    case("Neg", [i([5], dt=np.int8)])
    case("Sign", [i([5], dt=np.int32)])
    case("IsNaN", [np.array([1.0, np.nan, np.inf], np.float32)])
    case("IsInf", [np.array([1.0, np.nan, np.inf, -np.inf], np.float32)], detect_negative=0)
    case("Not", [np.array([True, False], np.bool_)])
    case("BitwiseNot", [i([4], dt=np.uint8, lo=0, hi=255)], opset=18)


def activation():
    x = f([2, 4])
    for op in ["Relu", "Sigmoid", "Softplus", "Softsign", "Tanh", "HardSwish", "Mish", "Elu", "Selu", "Celu"]:
        case(op, [x], opset=22)
    case("Relu", [i([5], dt=np.int8)])
    case("LeakyRelu", [x], alpha=0.3)
    case("Elu", [x], alpha=0.5)
    case("HardSigmoid", [x], alpha=0.3, beta=0.4)
    case("ThresholdedRelu", [x], alpha=0.7)
    case("Celu", [x], alpha=2.0)
    case("Gelu", [x], opset=20)
    case("Gelu", [x], opset=20, approximate="tanh")
    case("PRelu", [f([2, 3, 4]), f([3, 1])])
    case("PRelu", [i([2, 3], dt=np.int32), i([3], dt=np.int32)], opset=16)
    case("Clip", [x, np.array(-1.0, np.float32), np.array(1.5, np.float32)], opset=13)
    case("Clip", [i([6]), np.array(-4, np.int64), np.array(6, np.int64)], opset=13)
    case("Clip", [x], opset=6, min=-0.5, max=0.5)
    case("Shrink", [x], opset=9, lambd=1.0, bias=0.5)
    case("Shrink", [i([6], dt=np.int8)], opset=9, lambd=2.0, bias=1.0)
    case("Swish", [x], opset=24, alpha=0.8)


def binary():
    a, b = f([2, 3, 4]), f([3, 1])
    for op in ["Add", "Sub", "Mul", "Div"]:
        case(op, [a, b])
        case(op, [i([2, 3]), i([3], 1, 9)])
    case("Div", [i([6], dt=np.int32), np.array([3, -3, 4, -4, 7, 2], np.int32)])
    case("Add", [f([4], dt=np.float16), f([1], dt=np.float16)], tol=1e-3)
    case("Pow", [f([2, 3], 0.1, 3), f([3], -2, 2)])
    case("Pow", [f([4], 0.1, 3), np.array([2, -1, 0, 3], np.int64)], opset=15)
    case("Pow", [i([4], -4, 4), np.array([2, 1, 0, 3], np.int64)], opset=15)
    case("Pow", [i([4], -4, 4, dt=np.int32), np.array([2.0, 1.0, 0.5, 3.0], np.float32)], opset=15)
    case("Mod", [i([8]), i([8], 1, 7) * np.array([1, -1] * 4)])
    case("Mod", [i([8], dt=np.int32), i([8], 1, 7, dt=np.int32) * np.array([1, -1] * 4, np.int32)], fmod=1)
    case("Mod", [f([6]), f([6], 0.5, 2)], fmod=1)
    case("BitShift", [i([4], 0, 200, dt=np.uint8), np.array([1, 2, 3, 0], np.uint8)], direction="LEFT")
    case("BitShift", [i([4], 0, 2000, dt=np.uint32), np.array([1, 2, 3, 0], np.uint32)], direction="RIGHT")
    for op in ["BitwiseAnd", "BitwiseOr", "BitwiseXor"]:
        case(op, [i([2, 3], -100, 100, dt=np.int32), i([3], -100, 100, dt=np.int32)], opset=18)


def logic():
    a, b = i([2, 3], 0, 3), i([3], 0, 3)
    for op in ["Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"]:
        case(op, [a, b])
        case(op, [f([2, 2]), f([2, 1])])
    ba, bb = rng.integers(0, 2, [2, 3]).astype(np.bool_), rng.integers(0, 2, [3]).astype(np.bool_)
    for op in ["And", "Or", "Xor"]:
        case(op, [ba, bb])


def variadic():
    x, y, z = f([2, 3]), f([3]), f([1, 1])
    x[0, 1] = np.nan
    for op in ["Max", "Min", "Sum", "Mean"]:
        case(op, [x, y, z])
        case(op, [y])
    case("Max", [i([2, 3]), i([3])])
    case("Min", [i([2, 3], dt=np.uint8, lo=0, hi=200), i([3], dt=np.uint8, lo=0, hi=200)])


def reduce():
    x = f([2, 3, 4], 0.1, 3)
    ops = ["ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
           "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"]
    for op in ops:
        case(op, [x, np.array([0, 2], np.int64)], opset=18)
        case(op, [x, np.array([-2], np.int64)], opset=18, keepdims=0)
        case(op, [x], opset=13 if op != "ReduceSum" else 11, axes=[1])
        case(op, [x], opset=13 if op != "ReduceSum" else 11, keepdims=0)
        case(op, [f([3, 0, 2]), np.array([1], np.int64)], opset=18)
        case(op, [x, np.array([], np.int64)], opset=18, noop_with_empty_axes=1)
    case("ReduceSum", [i([3, 4]), np.array([0], np.int64)], opset=13)
    case("ReduceMax", [i([3, 4], dt=np.int32), np.array([1], np.int64)], opset=18)
    case("ReduceProd", [i([3, 2], -3, 3), np.array([0], np.int64)], opset=18)
    case("ReduceMean", [f([2, 3, 4, 5], dt=np.float64), np.array([1, 3], np.int64)], opset=18, tol=1e-12)


def tie_input():
    x = f([3, 4, 2])
    x[0, 1, 0] = x[0, 2, 0]
    return x


def argminmax():
    x = tie_input()
    for op in ["ArgMax", "ArgMin"]:
        case(op, [x], opset=13)
        case(op, [x], opset=13, axis=1, keepdims=0)
        case(op, [x], opset=13, axis=-2, select_last_index=1)
        case(op, [i([4, 3], 0, 3)], opset=13, axis=0, select_last_index=1)


def softmax():
    x = tie_input()
    for op in ["Softmax", "LogSoftmax", "Hardmax"]:
        case(op, [x], opset=13)
        case(op, [x], opset=13, axis=1)
        for axis in (1, 0, 3):
            # The reference evaluator only has the opset-13 semantics: flatten by hand.
            def legacy(x, op=op, axis=axis):
                n = int(np.prod(x.shape[:axis]))
                x2 = x.reshape(n, -1)
                node = helper.make_node(op, ["x"], ["y"], axis=1)
                g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", 1, x2.shape)],
                                      [helper.make_tensor_value_info("y", 1, None)])
                m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
                return ReferenceEvaluator(m).run(None, {"x": x2})[0].reshape(x.shape)
            case(op, [x], opset=11, axis=axis, ref=legacy)
    case("Softmax", [f([2, 5], dt=np.float64)], opset=13, tol=1e-12)


def cumsum():
    case("CumSum", [f([2, 3, 2]), np.array(1, np.int64)], opset=14)
    case("CumSum", [i([2, 3]), np.array(-1, np.int32)], opset=14, exclusive=1, reverse=1)
    case("CumSum", [f([4], dt=np.float64), np.array(0, np.int64)], opset=14, reverse=1, tol=1e-12)


def topk():
    y = i([3, 5], 0, 4).astype(np.float32)
    for largest in (0, 1):
        for o in (0, 1):
            case("TopK", [y, np.array([3], np.int64)], opset=11, largest=largest, out_index=o)
            case("TopK", [y, np.array([2], np.int64)], opset=11, axis=0, largest=largest, out_index=o)
    case("TopK", [i([2, 4]), np.array([4], np.int64)], opset=11, out_index=1)


def cast_bytes(x, to, opset=21, **attrs):
    """A cast whose output is a narrow type: compare the raw (packed) bytes."""
    node = helper.make_node("Cast", ["x"], ["y"], to=to, **attrs)
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", NP2ONNX[x.dtype.type], x.shape)],
                          [helper.make_tensor_value_info("y", to, None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    y = ReferenceEvaluator(m).run(None, {"x": x})[0]
    raw = onnx.numpy_helper.from_array(y).raw_data
    a = ", ".join(attr(k, v) for k, v in {"to": to, **attrs}.items())
    print(f"    check_bytes(\"Cast\", {opset}, vec![{a}], &[{tensor(x)}], &{list(raw)});")


def cast():
    x = f([7], -300, 300)
    x[:3] = [0.5, -1.5, 2.5]
    for to, name in [(TensorProto.FLOAT16, "f16"), (TensorProto.DOUBLE, "f64"), (TensorProto.INT32, "i32"),
                     (TensorProto.INT8, "i8"), (TensorProto.UINT8, "u8"), (TensorProto.BOOL, "bool"),
                     (TensorProto.INT64, "i64")]:
        case("Cast", [x], opset=13, to=to)
    case("Cast", [i([6], -1000, 1000)], opset=13, to=TensorProto.INT8)
    case("Cast", [i([6], -1000, 1000)], opset=13, to=TensorProto.UINT16)
    case("Cast", [i([6], -1000, 1000)], opset=13, to=TensorProto.FLOAT)
    case("Cast", [np.array([True, False]), ], opset=13, to=TensorProto.FLOAT)
    case("Cast", [f([5], dt=np.float16)], opset=13, to=TensorProto.FLOAT)
    case("Cast", [f([5], dt=np.float64)], opset=13, to=TensorProto.FLOAT16)
    y = np.concatenate([f([12], -500, 500), f([6], -0.01, 0.01),
                        np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e9, 57344 + 4096, 464], np.float32)])
    for to in [TensorProto.FLOAT8E4M3FN, TensorProto.FLOAT8E4M3FNUZ, TensorProto.FLOAT8E5M2,
               TensorProto.FLOAT8E5M2FNUZ]:
        cast_bytes(y, to, opset=19)
        cast_bytes(y, to, opset=19, saturate=0)
    cast_bytes(f([9], -8, 8), TensorProto.FLOAT4E2M1, opset=23)
    for to in [TensorProto.INT4, TensorProto.UINT4]:
        cast_bytes(np.array([-9.7, -8, -2.5, -0.5, 1.5, 7.5, 15.5, 17], np.float32), to)
    for to in [TensorProto.INT2, TensorProto.UINT2]:
        cast_bytes(np.array([-3, -2, -1, 0, 1, 2, 3, 5, 9], np.int32), to, opset=25)
    z = np.abs(f([8], 1e-3, 1e3))
    z[0] = 3.0
    for mode in ["up", "down", "nearest"]:
        cast_bytes(z, TensorProto.FLOAT8E8M0, opset=24, round_mode=mode)


def einsum():
    case("Einsum", [f([2, 3]), f([3, 4])], opset=12, equation="ij,jk->ik")
    case("Einsum", [f([5, 2, 3]), f([5, 3, 4])], opset=12, equation="bij,bjk->bik")
    case("Einsum", [f([3, 3])], opset=12, equation="ii->i")
    case("Einsum", [f([3, 3])], opset=12, equation="ii")
    case("Einsum", [f([2, 3, 4])], opset=12, equation="ijk->kji")
    case("Einsum", [f([2, 3, 4])], opset=12, equation="...k->k")
    case("Einsum", [f([4]), f([4])], opset=12, equation="i,i")
    case("Einsum", [f([3]), f([4])], opset=12, equation="i,j->ij")
    case("Einsum", [f([2, 1, 3, 4]), f([5, 4, 2])], opset=12, equation="...ij,...jk->...ik")
    case("Einsum", [f([2, 3]), f([3, 4]), f([4, 2])], opset=12, equation="ab,bc,cd->ad")
    case("Einsum", [f([2, 3, 2])], opset=12, equation="aba->b")
    case("Einsum", [i([2, 3]), i([3])], opset=12, equation="ij,j->i")
    case("Einsum", [f([3, 2], dt=np.float64), f([2, 3], dt=np.float64)], opset=12, equation="ij,ji", tol=1e-12)
    case("Einsum", [f([2, 3, 4])], opset=12, equation="bij")


def det():
    case("Det", [f([3, 3])], opset=11)
    case("Det", [f([2, 4, 4])], opset=11)
    case("Det", [f([2, 2, 2], dt=np.float64)], opset=11, tol=1e-12)
    case("Det", [np.array([[1, 2], [2, 4]], np.float32)], opset=11)


def ms_case(op, inputs, tol=1e-5, **attrs):
    """A com.microsoft case whose expected output comes from onnxruntime."""
    import onnxruntime as ort
    names = [f"x{i}" for i in range(len(inputs))]
    node = helper.make_node(op, names, ["y"], domain="com.microsoft", **attrs)
    vi = [helper.make_tensor_value_info(n, NP2ONNX[a.dtype.type], a.shape) for n, a in zip(names, inputs)]
    g = helper.make_graph([node], "g", vi, [helper.make_tensor_value_info("y", NP2ONNX[inputs[0].dtype.type], None)])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)])
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    y = sess.run(None, dict(zip(names, inputs)))[0]
    a = ", ".join(attr(k, v) for k, v in attrs.items())
    ins = ", ".join(f"Some({tensor(x)})" for x in inputs)
    want = ", ".join(lit(v, True) for v in y.ravel())
    print(f"    check_ms(\"{op}\", vec![{a}], &[{ins}], &{list(y.shape)}, &[{want}], {tol});")


def ms():
    x = f([2, 5])
    ms_case("Gelu", [x])
    ms_case("FastGelu", [x])
    ms_case("FastGelu", [x, f([5])])
    ms_case("BiasGelu", [x, f([5])])
    ms_case("QuickGelu", [x])
    ms_case("QuickGelu", [x], alpha=1.2)


globals()[sys.argv[1]]()
