"""Shared helpers of the onnx_runtime_rs tests: small models made with onnx.helper."""

from __future__ import annotations

import os

import onnx
import pytest
from onnx import TensorProto, helper


def make_model(nodes, inputs, outputs, initializers=(), opset=21, ir_version=None, **kw) -> bytes:
    graph = helper.make_graph(nodes, kw.pop("graph_name", "g"), inputs, outputs, list(initializers))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], **kw)
    model.ir_version = ir_version or min(model.ir_version, 10)
    return model.SerializeToString()


def tensor(name, elem=TensorProto.FLOAT, shape=None):
    return helper.make_tensor_value_info(name, elem, shape)


@pytest.fixture
def relu_model() -> bytes:
    """y = Relu(x), x float [N, 3]."""
    return make_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [tensor("x", shape=["N", 3])],
        [tensor("y", shape=["N", 3])],
    )


@pytest.fixture(scope="session")
def onnx_data() -> str:
    return os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data")
