"""onnx_runtime_rs.backend: onnx's Backend API (prepare, run_model, run_node, supports_device)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import make_model, tensor
from onnx import helper
from onnx.backend.base import Backend, BackendRep

import onnx_runtime_rs as ort
import onnx_runtime_rs.backend as backend


def _add_model():
    return onnx.load_from_string(
        make_model(
            [helper.make_node("Add", ["a", "b"], ["c"])],
            [tensor("a", shape=[2]), tensor("b", shape=[2])],
            [tensor("c", shape=[2])],
        )
    )


def test_is_an_onnx_backend():
    assert issubclass(backend.RustBackend, Backend)
    assert issubclass(backend.RustBackendRep, BackendRep)


def test_supports_device():
    assert backend.supports_device("CPU")
    assert backend.supports_device("CUDA") == ("CUDAExecutionProvider" in ort.get_available_providers())
    assert backend.RustBackend.is_compatible(_add_model(), "CPU")


def test_prepare_and_run_every_way():
    a, b = np.array([1, 2], np.float32), np.array([10, 20], np.float32)
    model = _add_model()
    for m in (model, model.SerializeToString()):
        rep = backend.prepare(m, "CPU")
        (c,) = rep.run([a, b])
        assert c.tolist() == [11, 22]
        assert rep.run({"a": a, "b": b}).c.tolist() == [11, 22]
    rep = backend.prepare(model, "CPU", intra_op_num_threads=1)
    assert backend.prepare(rep) is rep
    (c,) = backend.run_model(model, [a, b])
    assert c.tolist() == [11, 22]
    with pytest.raises(RuntimeError, match="not accepted"):
        backend.prepare(model, "CPU", no_such_option=1)
    if not backend.supports_device("CUDA"):
        with pytest.raises(RuntimeError, match="Incompatible device"):
            backend.prepare(model, "CUDA")


def test_run_node():
    node = helper.make_node("Transpose", ["x"], ["y"], perm=[1, 0])
    x = np.arange(6, dtype=np.int32).reshape(2, 3)
    (y,) = backend.run_node(node, [x])
    np.testing.assert_array_equal(y, x.T)
    assert y.dtype == np.int32
    node = helper.make_node("TopK", ["x", "k"], ["values", "indices"])
    values, indices = backend.run_node(node, [np.array([[3.0, 1.0, 2.0]], np.float32), np.array([2], np.int64)])
    assert values.tolist() == [[3.0, 2.0]] and indices.tolist() == [[0, 2]]
    # With outputs_info, as onnx's node tests may give it.
    (y,) = backend.run_node(
        helper.make_node("Relu", ["x"], ["y"]), [np.array([-1.0, 1.0], np.float32)], outputs_info=[(np.float32, (2,))]
    )
    assert y.tolist() == [0.0, 1.0]


def test_backend_errors_are_the_sessions():
    node = helper.make_node("Reshape", ["x", "s"], ["y"], name="r")
    with pytest.raises(ort.RuntimeException, match="RUNTIME_EXCEPTION"):
        backend.run_node(node, [np.zeros(6, np.float32), np.array([4, 4], np.int64)])
