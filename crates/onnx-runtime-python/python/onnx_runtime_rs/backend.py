"""onnx's backend API (onnx.backend.base.Backend) over onnx_runtime_rs, so onnx's own test
runner (onnx.backend.test.BackendTest) and other backend users run models through it:

    import onnx_runtime_rs.backend as backend
    rep = backend.prepare(model, "CPU")
    outputs = rep.run([x])
"""

from __future__ import annotations

from typing import Any

import numpy as np
import onnx
from onnx import helper
from onnx.backend.base import Backend, BackendRep, namedtupledict

from . import (
    CPU,
    CUDA,
    InferenceSession,
    SessionOptions,
    _code_of,
    get_available_providers,
)

# SessionOptions attributes prepare() accepts as keyword arguments (as onnxruntime's backend).
_ALLOWED_SESSION_OPTIONS = frozenset(
    {
        "graph_optimization_level",
        "intra_op_num_threads",
        "inter_op_num_threads",
        "execution_mode",
        "log_severity_level",
        "allow_spinning",
    }
)


def _device_kind(device: Any) -> str:
    """'CPU' or 'CUDA' from a device string ('CPU', 'CUDA', 'CUDA:1', 'GPU') or Device."""
    text = str(getattr(device, "type", device) or "CPU").upper()
    if "CUDA" in text or "GPU" in text:
        return "CUDA"
    return "CPU"


class RustBackendRep(BackendRep):
    """A prepared model: run(inputs) with inputs a list (in the order of get_inputs()), a
    dict by name, or a single array; returns the outputs as a namedtuple."""

    def __init__(self, session: InferenceSession) -> None:
        self._session = session

    @property
    def session(self) -> InferenceSession:
        return self._session

    def run(self, inputs: Any, **kwargs: Any) -> tuple[Any, ...]:
        if isinstance(inputs, dict):
            feed = inputs
        else:
            if isinstance(inputs, np.ndarray):
                inputs = [inputs]
            names = [i.name for i in self._session.get_inputs()]
            feed = dict(zip(names, inputs))
        outputs = self._session.run(None, feed)
        names = [o.name for o in self._session.get_outputs()]
        return namedtupledict("Outputs", names)(*outputs)


class RustBackend(Backend):
    """onnx's Backend over onnx_runtime_rs (CPU, and CUDA where its driver library loads)."""

    @classmethod
    def is_compatible(cls, model: onnx.ModelProto, device: str = "CPU", **kwargs: Any) -> bool:
        return cls.supports_device(device)

    @classmethod
    def supports_device(cls, device: str) -> bool:
        kind = _device_kind(device)
        return kind == "CPU" or CUDA in get_available_providers()

    @classmethod
    def prepare(cls, model: Any, device: str = "CPU", **kwargs: Any) -> RustBackendRep:
        """A session for `model` (ModelProto, serialized bytes, a path, or a session) on
        `device`: 'CPU', or 'CUDA' ('CUDA:N' for device N) for the CUDA provider with the CPU
        running what it cannot."""
        if isinstance(model, RustBackendRep):
            return model
        if isinstance(model, InferenceSession):
            return RustBackendRep(model)
        options = SessionOptions()
        for k, v in kwargs.items():
            if k not in _ALLOWED_SESSION_OPTIONS:
                raise RuntimeError(
                    f"SessionOptions attribute '{k}' is not accepted by the backend; "
                    f"accepted: {', '.join(sorted(_ALLOWED_SESSION_OPTIONS))}"
                )
            setattr(options, k, v)
        if isinstance(model, onnx.ModelProto):
            model = model.SerializeToString()
        if not cls.supports_device(device):
            raise RuntimeError(f"Incompatible device: '{device}' is not available here")
        if _device_kind(device) == "CUDA":
            text = str(device)
            device_id = int(text.split(":", 1)[1]) if ":" in text else 0
            providers: list = [(CUDA, {"device_id": device_id}), CPU]
        else:
            providers = [CPU]
        return RustBackendRep(InferenceSession(model, sess_options=options, providers=providers))

    @classmethod
    def run_model(cls, model: Any, inputs: Any, device: str = "CPU", **kwargs: Any) -> tuple[Any, ...]:
        return cls.prepare(model, device, **kwargs).run(inputs)

    @classmethod
    def run_node(
        cls,
        node: onnx.NodeProto,
        inputs: Any,
        device: str = "CPU",
        outputs_info: Any = None,
        **kwargs: Any,
    ) -> tuple[Any, ...]:
        """Runs one node on `inputs` (a list in the node's input order, or a dict by name):
        the node is made into a model whose input types are the arrays' and whose output
        types onnx's shape inference gives. kwargs: opset_version (default: onnx's latest)."""
        opset = kwargs.pop("opset_version", None) or onnx.defs.onnx_opset_version()
        if isinstance(inputs, dict):
            feed = dict(inputs)
        else:
            names = [n for n in node.input if n]
            feed = dict(zip(names, inputs))
        graph_inputs = []
        for name, value in feed.items():
            a = np.asarray(value)
            code = _code_of(a.dtype)
            if code is None:
                raise ValueError(f"input '{name}': numpy dtype {a.dtype} has no ONNX element type")
            graph_inputs.append(helper.make_tensor_value_info(name, code, a.shape))
        if outputs_info is not None:
            graph_outputs = [
                helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dt)), shape)
                for name, (dt, shape) in zip(node.output, outputs_info)
            ]
        else:
            graph_outputs = [helper.make_empty_tensor_value_info(n) for n in node.output if n]
        domain = node.domain or ""
        opsets = [helper.make_opsetid("", opset)]
        if domain not in ("", "ai.onnx"):
            opsets.append(helper.make_opsetid(domain, 1))
        graph = helper.make_graph([node], f"run_node_{node.op_type}", graph_inputs, graph_outputs)
        model = helper.make_model(graph, opset_imports=opsets, producer_name="onnx_runtime_rs.backend")
        if outputs_info is None:
            inferred = onnx.shape_inference.infer_shapes(model)
            known = {v.name: v for v in inferred.graph.value_info}
            known.update({v.name: v for v in inferred.graph.output if v.type.HasField("tensor_type")})
            del model.graph.output[:]
            model.graph.output.extend(
                known.get(n) or helper.make_empty_tensor_value_info(n) for n in node.output if n
            )
        return cls.prepare(model, device, **kwargs).run(feed)


prepare = RustBackend.prepare
run_model = RustBackend.run_model
run_node = RustBackend.run_node
supports_device = RustBackend.supports_device
is_compatible = RustBackend.is_compatible
