"""InferenceSession, SessionOptions and the module functions, against onnxruntime's behaviour
(onnxruntime is in the pinned test set, so its messages are compared directly)."""

from __future__ import annotations

import os
import pathlib
import threading
import time
import warnings

import ml_dtypes
import numpy as np
import onnxruntime
import pytest
from conftest import make_model, tensor
from onnx import TensorProto, helper, numpy_helper

import onnx_runtime_rs as ort


def test_the_package_does_not_shadow_onnxruntime():
    assert ort.__name__ == "onnx_runtime_rs"
    assert ort.InferenceSession is not onnxruntime.InferenceSession


def test_load_from_bytes_path_and_pathlike(relu_model, tmp_path):
    p = tmp_path / "m.onnx"
    p.write_bytes(relu_model)
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    for source in (relu_model, str(p), p, bytearray(relu_model)):
        sess = ort.InferenceSession(source)
        (y,) = sess.run(None, {"x": x})
        np.testing.assert_array_equal(y, np.maximum(x, 0))
        assert y.dtype == np.float32 and y.flags.writeable


def test_load_errors_are_onnxruntimes(tmp_path):
    missing = str(tmp_path / "nope.onnx")
    for mod in (ort, onnxruntime):
        with pytest.raises(Exception) as e:
            mod.InferenceSession(missing)
        assert type(e.value).__name__ == "NoSuchFile"
        assert str(e.value).startswith("[ONNXRuntimeError] : 3 : NO_SUCHFILE : Load model from")
    with pytest.raises(ort.InvalidProtobuf, match=r"^\[ONNXRuntimeError\] : 7 : INVALID_PROTOBUF : .*not a valid ONNX protobuf"):
        ort.InferenceSession(b"\xff\xff garbage")
    with pytest.raises(TypeError, match="Unable to load from type"):
        ort.InferenceSession(42)


def test_unsupported_op_says_which():
    model = make_model([helper.make_node("FooOp", ["x"], ["y"])], [tensor("x", shape=[1])], [tensor("y", shape=[1])])
    with pytest.raises(ort.NotImplemented, match=r"NOT_IMPLEMENTED : .*FooOp \(opset 21\)"):
        ort.InferenceSession(model)


def test_providers():
    assert ort.get_available_providers()[-1] == "CPUExecutionProvider"
    assert set(ort.get_available_providers()) <= set(ort.get_all_providers())
    assert ort.get_device() in ("CPU", "GPU")


def test_providers_by_name_with_options(relu_model):
    sess = ort.InferenceSession(relu_model, providers=["CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    assert sess.get_provider_options() == {"CPUExecutionProvider": {}}
    with pytest.warns(UserWarning, match="not in available provider names"):
        sess = ort.InferenceSession(relu_model, providers=["NoSuchExecutionProvider", "CPUExecutionProvider"])
    assert sess.get_providers() == ["CPUExecutionProvider"]
    with pytest.raises(ValueError):
        ort.InferenceSession(relu_model, providers=[42])


def test_cuda_provider_runs_or_falls_back(relu_model):
    """On a machine without CUDA, asking for it warns and runs on the CPU (as onnxruntime
    does); with CUDA the same wheel runs the model on the device."""
    providers = [("CUDAExecutionProvider", {"device_id": 0}), "CPUExecutionProvider"]
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        sess = ort.InferenceSession(relu_model, providers=providers)
    if "CUDAExecutionProvider" in sess.get_providers():
        assert sess.get_providers() == ["CUDAExecutionProvider", "CPUExecutionProvider"]
        assert sess.get_provider_options()["CUDAExecutionProvider"] == {"device_id": "0"}
    else:
        assert sess.get_providers() == ["CPUExecutionProvider"]
        assert caught, "falling back to the CPU warns"
    np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))


def test_inputs_outputs_and_types():
    model = make_model(
        [
            helper.make_node("Add", ["a", "w"], ["sum"]),
            helper.make_node("SequenceConstruct", ["sum"], ["seq"]),
            helper.make_node("Shape", ["ids"], ["shape"]),
        ],
        [tensor("a", shape=["batch", 3]), tensor("ids", TensorProto.INT64, [None, 2]), tensor("w", shape=[3])],
        [
            tensor("sum", shape=["batch", 3]),
            helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None),
            tensor("shape", TensorProto.INT64, [2]),
        ],
        initializers=[numpy_helper.from_array(np.ones(3, np.float32), "w")],
    )
    sess = ort.InferenceSession(model)
    ref = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])
    for ours, theirs in ((sess.get_inputs(), ref.get_inputs()), (sess.get_outputs(), ref.get_outputs())):
        assert [(a.name, a.type, a.shape) for a in ours] == [(a.name, a.type, a.shape) for a in theirs]
    assert [i.name for i in sess.get_overridable_initializers()] == ["w"]
    assert sess.get_inputs()[0].shape == ["batch", 3]
    assert sess.get_inputs()[1].shape == [None, 2]
    assert sess.get_outputs()[1].type == "seq(tensor(float))"
    assert repr(sess.get_inputs()[0]) == "NodeArg(name='a', type='tensor(float)', shape=['batch', 3])"
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    ids = np.zeros((5, 2), np.int64)
    s, seq, shape = sess.run(None, {"a": a, "ids": ids})
    np.testing.assert_array_equal(s, a + 1)
    assert isinstance(seq, list) and len(seq) == 1
    np.testing.assert_array_equal(seq[0], a + 1)
    np.testing.assert_array_equal(shape, [5, 2])
    # The initializer may be fed to override it.
    (s,) = sess.run(["sum"], {"a": a, "ids": ids, "w": np.full(3, 2, np.float32)})
    np.testing.assert_array_equal(s, a + 2)


def test_modelmeta():
    model = make_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [tensor("x", shape=[1])],
        [tensor("y", shape=[1])],
        producer_name="the producer",
        doc_string="what it does",
        domain="example.org",
        model_version=7,
        graph_name="main graph",
    )
    import onnx

    m = onnx.load_from_string(model)
    m.graph.doc_string = "the graph"
    helper.set_model_props(m, {"author": "me", "license": "MIT"})
    model = m.SerializeToString()
    ours = ort.InferenceSession(model).get_modelmeta()
    theirs = onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"]).get_modelmeta()
    for field in ("producer_name", "graph_name", "domain", "description", "graph_description", "version", "custom_metadata_map"):
        assert getattr(ours, field) == getattr(theirs, field), field
    assert ours.custom_metadata_map == {"author": "me", "license": "MIT"}


def test_output_names_pick_and_order():
    model = make_model(
        [helper.make_node("Neg", ["x"], ["n"]), helper.make_node("Abs", ["x"], ["a"])],
        [tensor("x", shape=[2])],
        [tensor("n", shape=[2]), tensor("a", shape=[2])],
    )
    sess = ort.InferenceSession(model)
    x = np.array([-1.0, 2.0], np.float32)
    n, a = sess.run(None, {"x": x})
    assert sess.run([], {"x": x})[0].tolist() == n.tolist()
    a2, n2 = sess.run(["a", "n"], {"x": x})
    assert a2.tolist() == [1.0, 2.0] and n2.tolist() == [1.0, -2.0]
    (a3,) = sess.run(["a"], {"x": x})
    assert a3.tolist() == a.tolist()


# The wrong feeds onnxruntime checks, with the message each gives; ours must be the same.
BAD_FEEDS = [
    (None, {"z": np.zeros((1, 3), np.float32)}),  # a required input missing
    (None, {"x": np.zeros((1, 3), np.float32), "z": np.zeros(1)}),  # an unknown input
    (None, {"x": np.zeros((1, 3), np.float64)}),  # wrong dtype
    (None, {"x": np.zeros((1, 3, 1), np.float32)}),  # wrong rank
    (None, {"x": np.zeros((1, 4), np.float32)}),  # wrong dimension
    (["q"], {"x": np.zeros((1, 3), np.float32)}),  # an unknown output
]


@pytest.mark.parametrize("outputs,feed", BAD_FEEDS)
def test_feed_errors_match_onnxruntime(relu_model, outputs, feed):
    ours = ort.InferenceSession(relu_model)
    theirs = onnxruntime.InferenceSession(relu_model, providers=["CPUExecutionProvider"])
    with pytest.raises(Exception) as want:
        theirs.run(outputs, feed)
    with pytest.raises(Exception) as got:
        ours.run(outputs, feed)
    assert type(got.value).__name__ == type(want.value).__name__
    assert str(got.value) == str(want.value)


def test_exception_classes_where_onnxruntime_has_them(relu_model):
    from onnx_runtime_rs.capi.onnxruntime_pybind11_state import InvalidArgument

    sess = ort.InferenceSession(relu_model)
    with pytest.raises(InvalidArgument):
        sess.run(None, {"x": np.zeros((1, 3), np.float64)})
    assert issubclass(ort.InvalidArgument, Exception)


def test_runtime_errors_carry_the_runtimes_message():
    model = make_model(
        [helper.make_node("Reshape", ["x", "s"], ["y"], name="the_reshape")],
        [tensor("x", shape=[6]), tensor("s", TensorProto.INT64, [2])],
        [tensor("y", shape=None)],
    )
    sess = ort.InferenceSession(model)
    with pytest.raises(ort.RuntimeException) as e:
        sess.run(None, {"x": np.zeros(6, np.float32), "s": np.array([4, 4], np.int64)})
    text = str(e.value)
    assert text.startswith("[ONNXRuntimeError] : 6 : RUNTIME_EXCEPTION : ")
    assert "the_reshape" in text, text


def test_python_lists_and_non_contiguous_arrays(relu_model):
    sess = ort.InferenceSession(relu_model)
    (y,) = sess.run(None, {"x": [[1, -2, 3]]})
    assert y.dtype == np.float32 and y.tolist() == [[1, 0, 3]]
    base = np.arange(12, dtype=np.float32).reshape(3, 4) - 5
    x = base[:, ::2][:, :2].T.copy().T  # Fortran order
    x = np.asfortranarray(base[:, :3])
    assert not x.flags.c_contiguous
    (y,) = sess.run(None, {"x": x})
    np.testing.assert_array_equal(y, np.maximum(x, 0))
    strided = base[:, ::1][:, [0, 1, 2]][::2]
    (y,) = sess.run(None, {"x": strided})
    np.testing.assert_array_equal(y, np.maximum(strided, 0))


def test_inputs_are_read_in_place_and_never_written():
    """A contiguous array is read where it is (no copy); outputs never share its memory,
    even when the graph passes the input straight through."""
    model = make_model(
        [helper.make_node("Identity", ["x"], ["y"]), helper.make_node("Add", ["x", "x"], ["z"])],
        [tensor("x", shape=[4])],
        [tensor("y", shape=[4]), tensor("z", shape=[4])],
    )
    sess = ort.InferenceSession(model)
    x = np.arange(4, dtype=np.float32)
    before = x.copy()
    y, z = sess.run(None, {"x": x})
    assert not np.shares_memory(x, y)
    y[0] = 100.0
    np.testing.assert_array_equal(x, before)
    np.testing.assert_array_equal(z, before * 2)
    # The feed passes the array's own buffer: no copy of a large input (its address reaches
    # the runtime; a Python-side copy would have shown up as a second buffer of this size).
    from onnx_runtime_rs import _tensor_in

    big = np.ones((256, 1024), np.float32)
    packed = _tensor_in(big)
    assert packed[3] == big.__array_interface__["data"][0] and packed[5] is big
    assert _tensor_in(np.asfortranarray(big))[5] is not big


def _identity(elem, opset):
    return make_model(
        [helper.make_node("Identity", ["x"], ["y"])],
        [tensor("x", elem, [None])],
        [tensor("y", elem, [None])],
        opset=opset,
        ir_version=11 if opset >= 23 else None,
    )


DTYPES = [
    (TensorProto.FLOAT, np.float32, 21),
    (TensorProto.DOUBLE, np.float64, 21),
    (TensorProto.FLOAT16, np.float16, 21),
    (TensorProto.BFLOAT16, ml_dtypes.bfloat16, 21),
    (TensorProto.FLOAT8E4M3FN, ml_dtypes.float8_e4m3fn, 21),
    (TensorProto.FLOAT8E4M3FNUZ, ml_dtypes.float8_e4m3fnuz, 21),
    (TensorProto.FLOAT8E5M2, ml_dtypes.float8_e5m2, 21),
    (TensorProto.FLOAT8E5M2FNUZ, ml_dtypes.float8_e5m2fnuz, 21),
    (TensorProto.INT8, np.int8, 21),
    (TensorProto.INT16, np.int16, 21),
    (TensorProto.INT32, np.int32, 21),
    (TensorProto.INT64, np.int64, 21),
    (TensorProto.UINT8, np.uint8, 21),
    (TensorProto.UINT16, np.uint16, 21),
    (TensorProto.UINT32, np.uint32, 21),
    (TensorProto.UINT64, np.uint64, 21),
    (TensorProto.BOOL, np.bool_, 21),
    (TensorProto.INT4, ml_dtypes.int4, 21),
    (TensorProto.UINT4, ml_dtypes.uint4, 21),
    (TensorProto.FLOAT4E2M1, ml_dtypes.float4_e2m1fn, 23),
    (TensorProto.COMPLEX64, np.complex64, 21),
    (TensorProto.COMPLEX128, np.complex128, 21),
]


@pytest.mark.parametrize("elem,dtype,opset", DTYPES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_every_dtype_round_trips(elem, dtype, opset):
    rng = np.random.default_rng(elem)
    values = rng.integers(-3, 4, size=7)
    if np.dtype(dtype).kind == "u" or dtype in (ml_dtypes.uint4,):
        values = np.abs(values)
    if dtype is np.bool_:
        values = values > 0
    x = np.asarray(values).astype(dtype)
    try:
        sess = ort.InferenceSession(_identity(elem, opset))
    except ort.NotImplemented as e:
        pytest.skip(f"no Identity kernel for this type: {e}")
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == np.dtype(dtype), (y.dtype, dtype)
    assert y.shape == x.shape
    np.testing.assert_array_equal(y.view(np.uint8) if y.dtype.itemsize == 1 else y, x.view(np.uint8) if x.dtype.itemsize == 1 else x)
    assert [i.type for i in sess.get_inputs()] == [f"tensor({ort._NAMES[elem]})"]


def test_strings():
    sess = ort.InferenceSession(_identity(TensorProto.STRING, 21))
    x = np.array(["a", "", "ünï"], dtype=object)
    (y,) = sess.run(None, {"x": x})
    assert y.dtype == object and y.tolist() == ["a", "", "ünï"]
    (y,) = sess.run(None, {"x": np.array(["u", "v"])})  # numpy str_ arrays too
    assert y.tolist() == ["u", "v"]


def test_sequences_optionals_and_maps():
    model = make_model(
        [
            helper.make_node("SequenceLength", ["seq"], ["n"]),
            helper.make_node("SequenceAt", ["seq", "i"], ["item"]),
            helper.make_node("OptionalHasElement", ["opt"], ["has"]),
        ],
        [
            helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, None),
            tensor("i", TensorProto.INT64, []),
            helper.make_value_info(
                "opt", helper.make_optional_type_proto(helper.make_tensor_type_proto(TensorProto.FLOAT, [2]))
            ),
        ],
        [tensor("n", TensorProto.INT64, []), tensor("item", shape=None), tensor("has", TensorProto.BOOL, [])],
    )
    sess = ort.InferenceSession(model)
    assert sess.get_inputs()[2].type == "optional(tensor(float))"
    seq = [np.ones(2, np.float32), np.arange(3, dtype=np.float32)]
    n, item, has = sess.run(None, {"seq": seq, "i": np.array(1, np.int64), "opt": None})
    assert n == 2 and item.tolist() == [0, 1, 2] and not has
    _, _, has = sess.run(None, {"seq": seq, "i": np.array(0, np.int64), "opt": np.zeros(2, np.float32)})
    assert has
    # Optional inputs may be left out.
    _, _, has = sess.run(None, {"seq": seq, "i": np.array(0, np.int64)})
    assert not has


def test_zipmap_output_is_a_list_of_dicts():
    node = helper.make_node("ZipMap", ["x"], ["y"], domain="ai.onnx.ml", classlabels_int64s=[10, 20])
    graph = helper.make_graph(
        [node],
        "g",
        [tensor("x", shape=[2, 2])],
        [
            helper.make_value_info(
                "y",
                helper.make_sequence_type_proto(
                    helper.make_map_type_proto(TensorProto.INT64, helper.make_tensor_type_proto(TensorProto.FLOAT, []))
                ),
            )
        ],
    )
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("ai.onnx.ml", 3)])
    m.ir_version = 10
    sess = ort.InferenceSession(m.SerializeToString())
    (y,) = sess.run(None, {"x": np.array([[0.25, 0.75], [1, 0]], np.float32)})
    assert y == [{10: 0.25, 20: 0.75}, {10: 1.0, 20: 0.0}]
    assert sess.get_outputs()[0].type == "seq(map(int64,tensor(float)))"


def test_session_options(relu_model):
    so = ort.SessionOptions()
    assert so.intra_op_num_threads == 0
    assert so.graph_optimization_level == ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    for level in ort.GraphOptimizationLevel:
        for threads in (0, 1, 2):
            so = ort.SessionOptions()
            so.graph_optimization_level = level
            so.intra_op_num_threads = threads
            sess = ort.InferenceSession(relu_model, so)
            assert sess.get_session_options() is so
            np.testing.assert_array_equal(sess.run(None, {"x": x})[0], np.maximum(x, 0))
    so = ort.SessionOptions()
    assert so.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    so.add_session_config_entry("session.intra_op.allow_spinning", "0")
    assert so.allow_spinning is False
    so.log_severity_level = 3  # accepted, as scripts/check-real-models.py sets it
    ort.InferenceSession(relu_model, so, providers=["CPUExecutionProvider"]).run(None, {"x": x}, ort.RunOptions())
    so.intra_op_num_threads = -1
    with pytest.raises(ValueError):
        ort.InferenceSession(relu_model, so)


def test_precision_and_cuda_graph_options():
    """The runtime's own options: a float32 model run in float16 or bfloat16 (converted at
    load) gives half-precision-close results with float32 inputs and outputs; bad values are
    errors; cuda_graph and tf32 are accepted on the CPU (they change nothing there)."""
    rng = np.random.default_rng(3)
    w = (rng.standard_normal((16, 8)) * 0.25).astype(np.float32)
    model = make_model(
        [helper.make_node("MatMul", ["x", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(w, "w")],
    )
    x = rng.standard_normal((4, 16)).astype(np.float32)
    want = np.tanh(x @ w)
    for precision, tol in (("fp32", 1e-6), ("fp16", 4e-3), ("bf16", 3e-2)):
        so = ort.SessionOptions()
        so.precision = precision
        so.cuda_graph = "off"
        so.tf32 = True
        (y,) = ort.InferenceSession(model, so).run(None, {"x": x})
        assert y.dtype == np.float32
        np.testing.assert_allclose(y, want, atol=tol, rtol=0)
        if precision != "fp32":
            assert np.abs(y - want).max() > 0, "a half-precision run rounds somewhere"
    for name, bad in (("precision", "fp8"), ("cuda_graph", "always")):
        so = ort.SessionOptions()
        setattr(so, name, bad)
        with pytest.raises(ValueError, match=name):
            ort.InferenceSession(model, so)


def _slow_model():
    """A few hundred milliseconds of MatMuls on one thread."""
    nodes, prev = [], "x"
    for i in range(40):
        nodes.append(helper.make_node("MatMul", [prev, "w"], [f"h{i}"]))
        prev = f"h{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"]))
    w = numpy_helper.from_array((np.eye(256, dtype=np.float32) * 0.5), "w")
    return make_model(nodes, [tensor("x", shape=[256, 256])], [tensor("y", shape=[256, 256])], [w])


def test_the_gil_is_released_while_a_model_runs():
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(_slow_model(), so)
    x = np.ones((256, 256), np.float32)
    t0 = time.perf_counter()
    sess.run(None, {"x": x})
    one_run = time.perf_counter() - t0
    runs = max(1, int(0.5 / max(one_run, 1e-3)))
    done = threading.Event()

    def work():
        for _ in range(runs):
            sess.run(None, {"x": x})
        done.set()

    t = threading.Thread(target=work)
    t.start()
    ticks = 0
    while not done.is_set():  # Python code runs on this thread while the other one runs the model
        ticks += 1
        time.sleep(0.001)
    t.join()
    # With the GIL held for each run this thread would get a tick only between runs.
    assert ticks > 2 * runs, (ticks, runs)


def test_threads_share_one_session():
    sess = ort.InferenceSession(_slow_model())
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal((256, 256)).astype(np.float32) for _ in range(4)]
    want = [sess.run(None, {"x": x})[0] for x in xs]
    got: dict[int, list] = {}

    def work(i):
        got[i] = [sess.run(None, {"x": xs[i]})[0] for _ in range(3)]

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i in range(4):
        for y in got[i]:
            np.testing.assert_array_equal(y, want[i])


def test_the_readme_example(tmp_path, relu_model):
    """The README's five lines, on a model file."""
    path = tmp_path / "model.onnx"
    path.write_bytes(relu_model)
    os.chdir(tmp_path)
    x = np.array([[-1.0, 0.5, 2.0]], np.float32)
    # --- README example ---
    import onnx_runtime_rs as ort2

    sess = ort2.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    name = sess.get_inputs()[0].name
    (y,) = sess.run(None, {name: x})
    # ---
    assert y.tolist() == [[0.0, 0.5, 2.0]]
    assert pathlib.Path.cwd() == tmp_path
