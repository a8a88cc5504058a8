"""onnx_runtime_rs: this project's Rust ONNX runtime (CPU and CUDA) behind onnxruntime's Python API.

    import onnx_runtime_rs as ort
    sess = ort.InferenceSession("model.onnx", providers=["CPUExecutionProvider"])
    outputs = sess.run(None, {"x": x})

What differs from onnxruntime is listed in the README's Python section.
"""

from __future__ import annotations

import os
import warnings
from enum import IntEnum
from typing import Any, Sequence

import ml_dtypes
import numpy as np

from . import _native
from ._native import (  # onnxruntime's exception classes, by the same names
    EngineError,
    EPFail,
    Fail,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    NoModel,
    NoSuchFile,
    NotImplemented,
    RuntimeException,
)

__all__ = [
    "InferenceSession",
    "SessionOptions",
    "RunOptions",
    "GraphOptimizationLevel",
    "ExecutionMode",
    "NodeArg",
    "ModelMetadata",
    "get_available_providers",
    "get_all_providers",
    "get_device",
    "OrtValue",
    "IOBinding",
    "from_dlpack",
    "Fail",
    "InvalidArgument",
    "NoSuchFile",
    "NoModel",
    "EngineError",
    "RuntimeException",
    "InvalidProtobuf",
    "NotImplemented",
    "InvalidGraph",
    "EPFail",
]

try:
    from importlib.metadata import version as _version

    __version__ = _version("onnx-runtime-rs")
except Exception:  # not installed as a distribution (e.g. run from a source tree)
    __version__ = "0.0.0"

CPU = "CPUExecutionProvider"
CUDA = "CUDAExecutionProvider"

# ONNX element type code -> numpy dtype (ml_dtypes where numpy has none). Sub-byte types
# (int4, uint4, float4e2m1, int2, uint2) are one element a byte in numpy, packed two or four
# to a byte in the runtime.
_DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float32),
    2: np.dtype(np.uint8),
    3: np.dtype(np.int8),
    4: np.dtype(np.uint16),
    5: np.dtype(np.int16),
    6: np.dtype(np.int32),
    7: np.dtype(np.int64),
    8: np.dtype(object),
    9: np.dtype(np.bool_),
    10: np.dtype(np.float16),
    11: np.dtype(np.float64),
    12: np.dtype(np.uint32),
    13: np.dtype(np.uint64),
    14: np.dtype(np.complex64),
    15: np.dtype(np.complex128),
    16: np.dtype(ml_dtypes.bfloat16),
    17: np.dtype(ml_dtypes.float8_e4m3fn),
    18: np.dtype(ml_dtypes.float8_e4m3fnuz),
    19: np.dtype(ml_dtypes.float8_e5m2),
    20: np.dtype(ml_dtypes.float8_e5m2fnuz),
    21: np.dtype(ml_dtypes.uint4),
    22: np.dtype(ml_dtypes.int4),
    23: np.dtype(ml_dtypes.float4_e2m1fn),
    24: np.dtype(ml_dtypes.float8_e8m0fnu),
    25: np.dtype(ml_dtypes.uint2),
    26: np.dtype(ml_dtypes.int2),
}
_CODES: dict[np.dtype, int] = {d: c for c, d in _DTYPES.items() if c != 8}
_SUB_BYTE_BITS = {21: 4, 22: 4, 23: 4, 25: 2, 26: 2}
_NAMES = {
    1: "float", 2: "uint8", 3: "int8", 4: "uint16", 5: "int16", 6: "int32", 7: "int64",
    8: "string", 9: "bool", 10: "float16", 11: "double", 12: "uint32", 13: "uint64",
    14: "complex64", 15: "complex128", 16: "bfloat16", 17: "float8e4m3fn",
    18: "float8e4m3fnuz", 19: "float8e5m2", 20: "float8e5m2fnuz", 21: "uint4", 22: "int4",
    23: "float4e2m1", 24: "float8e8m0", 25: "uint2", 26: "int2",
}  # fmt: skip


def _code_of(dtype: np.dtype) -> int | None:
    """The ONNX element type of a numpy dtype (strings and objects: string), or None."""
    if dtype.kind in "USO":
        return 8
    return _CODES.get(dtype)


# --- providers -------------------------------------------------------------------------------


def get_all_providers() -> list[str]:
    """Every execution provider this package knows (whether or not it can run here)."""
    return [CUDA, CPU]


def get_available_providers() -> list[str]:
    """The providers a session may ask for here: CUDA where the CUDA driver library loads
    (the wheel has no CUDA dependency; the libraries are found at run time), and the CPU."""
    return [CUDA, CPU] if _native.cuda_available() else [CPU]


def get_device() -> str:
    return "GPU" if _native.cuda_available() else "CPU"


# --- options ---------------------------------------------------------------------------------


class GraphOptimizationLevel(IntEnum):
    """onnxruntime's levels. This runtime has three: DISABLE_ALL runs the graph as written,
    BASIC removes no-ops and folds BatchNormalization/Mul/Add into Conv, and EXTENDED, LAYOUT
    and ALL add the fusions into com.microsoft kernels."""

    ORT_DISABLE_ALL = 0
    ORT_ENABLE_BASIC = 1
    ORT_ENABLE_EXTENDED = 2
    ORT_ENABLE_LAYOUT = 3
    ORT_ENABLE_ALL = 99


class ExecutionMode(IntEnum):
    ORT_SEQUENTIAL = 0
    ORT_PARALLEL = 1


_SPIN_KEY = "session.intra_op.allow_spinning"


class SessionOptions:
    """How a session is built, by onnxruntime's names; the options this runtime does not
    have are accepted and have no effect (the README lists them).

    This runtime's own options:
      - allow_spinning (bool, default True): idle worker threads poll for work during a run
        instead of sleeping (less latency, more CPU time on the other cores). Also set by
        onnxruntime's config entry "session.intra_op.allow_spinning" ("0" or "1").
      - precision ("fp32", the default, "fp16" or "bf16"): run a float32 model in half
        precision, converted at load (weights cast once, float32 inputs and outputs kept,
        shape arithmetic left in float32).
      - cuda_graph ("auto", the default, or "off"): on CUDA, record each input shape's second
        run into a CUDA graph and replay it from the third on; "off" runs node by node.
      - tf32 (bool, default False): on CUDA, float32 MatMul/Gemm/Conv on TF32 tensor cores.
    """

    def __init__(self) -> None:
        self.intra_op_num_threads = 0
        self.inter_op_num_threads = 0
        self.graph_optimization_level = GraphOptimizationLevel.ORT_ENABLE_ALL
        self.execution_mode = ExecutionMode.ORT_SEQUENTIAL
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.enable_profiling = False
        self.profile_file_prefix = "onnxruntime_profile_"
        self.optimized_model_filepath = ""
        self.enable_cpu_mem_arena = True
        self.enable_mem_pattern = True
        self.enable_mem_reuse = True
        self.use_deterministic_compute = False
        self.allow_spinning = True
        self.precision = "fp32"
        self.cuda_graph = "auto"
        self.tf32 = False
        self._config: dict[str, str] = {}

    def add_session_config_entry(self, key: str, value: str) -> None:
        self._config[key] = value
        if key == _SPIN_KEY:
            self.allow_spinning = value != "0"

    def get_session_config_entry(self, key: str) -> str:
        if key == _SPIN_KEY and key not in self._config:
            return "1" if self.allow_spinning else "0"
        if key not in self._config:
            raise RuntimeError(f"SessionOptions does not have configuration with key: {key}")
        return self._config[key]

    def _native_args(self) -> dict[str, Any]:
        level = int(self.graph_optimization_level)
        if level == GraphOptimizationLevel.ORT_DISABLE_ALL:
            optimization = "none"
        elif level == GraphOptimizationLevel.ORT_ENABLE_BASIC:
            optimization = "basic"
        else:
            optimization = "all"
        threads = int(self.intra_op_num_threads)
        if threads < 0:
            raise ValueError(f"intra_op_num_threads must be 0 (one per core) or more, got {threads}")
        if self.precision not in ("fp32", "fp16", "bf16"):
            raise ValueError(f"precision must be 'fp32', 'fp16' or 'bf16', got {self.precision!r}")
        if self.cuda_graph not in ("auto", "off"):
            raise ValueError(f"cuda_graph must be 'auto' or 'off', got {self.cuda_graph!r}")
        return {"optimization": optimization, "spin": bool(self.allow_spinning), "threads": threads,
                "precision": self.precision, "cuda_graph": self.cuda_graph,
                "tf32": bool(self.tf32)}


class RunOptions:
    """Accepted for onnxruntime compatibility; a run takes no options here."""

    def __init__(self) -> None:
        self.log_severity_level = -1
        self.log_verbosity_level = 0
        self.logid = ""
        self.terminate = False
        self.only_execute_path_to_fetches = False
        self._config: dict[str, str] = {}

    def add_run_config_entry(self, key: str, value: str) -> None:
        self._config[key] = value

    def get_run_config_entry(self, key: str) -> str:
        return self._config[key]


# --- metadata --------------------------------------------------------------------------------


class NodeArg:
    """A graph input or output: .name, .shape (ints, symbolic dimensions as strings, None for
    an unnamed unknown dimension) and .type ("tensor(float)", "seq(tensor(int64))" ...)."""

    def __init__(self, name: str, type: str, shape: list) -> None:
        self.name = name
        self.type = type
        self.shape = shape

    def __repr__(self) -> str:
        return f"NodeArg(name={self.name!r}, type={self.type!r}, shape={self.shape!r})"


class ModelMetadata:
    def __init__(self, d: dict) -> None:
        self.producer_name: str = d["producer_name"]
        self.graph_name: str = d["graph_name"]
        self.domain: str = d["domain"]
        self.description: str = d["doc_string"]
        self.graph_description: str = d["graph_doc_string"]
        self.version: int = d["model_version"]
        self.custom_metadata_map: dict[str, str] = dict(d["metadata_props"])


class _Io:
    """What the session knows of one input or output."""

    __slots__ = ("name", "type", "dims", "code", "has_default", "arg")

    def __init__(self, t: tuple) -> None:
        self.name, self.type, self.dims, self.code, self.has_default = t
        self.arg = NodeArg(self.name, self.type, list(self.dims) if self.dims is not None else [])


def _invalid(message: str) -> InvalidArgument:
    return InvalidArgument(f"[ONNXRuntimeError] : 2 : INVALID_ARGUMENT : {message}")


# --- values ----------------------------------------------------------------------------------


def _pack(a: np.ndarray, bits: int) -> np.ndarray:
    """Sub-byte elements (one a byte in numpy) packed `8 // bits` to a byte, first in the low
    bits."""
    codes = a.reshape(-1).view(np.uint8) & ((1 << bits) - 1)
    per = 8 // bits
    pad = (-codes.size) % per
    if pad:
        codes = np.concatenate([codes, np.zeros(pad, np.uint8)])
    codes = codes.reshape(-1, per)
    out = np.zeros(codes.shape[0], np.uint8)
    for i in range(per):
        out |= codes[:, i] << (bits * i)
    return out


def _unpack(raw: bytearray, code: int, shape: list) -> np.ndarray:
    bits = _SUB_BYTE_BITS[code]
    per = 8 // bits
    packed = np.frombuffer(raw, np.uint8)
    codes = np.stack([(packed >> (bits * i)) & ((1 << bits) - 1) for i in range(per)], axis=1)
    n = int(np.prod(shape, dtype=np.int64))
    return codes.reshape(-1)[:n].astype(np.uint8).view(_DTYPES[code]).reshape(shape)


def _tensor_in(a: np.ndarray) -> tuple:
    code = _code_of(a.dtype)
    if code is None:
        raise _invalid(f"Unexpected input data type {a.dtype}: it has no ONNX element type")
    shape = list(a.shape)
    if code == 8:
        return ("s", shape, [x if isinstance(x, str) else (x.decode() if isinstance(x, bytes) else str(x)) for x in a.reshape(-1).tolist()])
    if code in _SUB_BYTE_BITS:
        a = _pack(a, _SUB_BYTE_BITS[code])
    elif not (a.flags.c_contiguous and a.flags.aligned):
        a = np.ascontiguousarray(a)  # the only copy: the runtime reads C-contiguous arrays in place
    return ("t", code, shape, a.__array_interface__["data"][0], a.nbytes, a)


def _tensor_out(t: tuple) -> np.ndarray:
    if t[0] == "s":
        return np.array(t[2], dtype=object).reshape(t[1])
    _, code, shape, raw = t
    if code in _SUB_BYTE_BITS:
        return _unpack(raw, code, shape)
    return np.frombuffer(raw, _DTYPES[code]).reshape(shape)


def _value_out(v: tuple) -> Any:
    tag = v[0]
    if tag in ("t", "s"):
        return _tensor_out(v)
    if tag == "q":
        return [_tensor_out(t) for t in v[2]]
    if tag == "o":
        return None if v[1] is None else _value_out(v[1])
    if tag == "m":
        keys, values = _tensor_out(v[1]), _tensor_out(v[2])
        return dict(zip(keys.tolist(), values.tolist()))
    if tag == "ms":
        return [dict(zip(_tensor_out(k).tolist(), _tensor_out(x).tolist())) for k, x in v[1]]
    raise RuntimeError(f"unknown output kind {tag!r}")


def _element_code(type_name: str) -> int | None:
    """The element type code of a type string's innermost tensor ("seq(tensor(float))": 1,
    "map(int64,tensor(float))": 1, the values')."""
    i = type_name.rfind("tensor(")
    if i < 0:
        return None
    name = type_name[i + len("tensor(") : type_name.index(")", i)]
    return next((c for c, n in _NAMES.items() if n == name), None)


def _value_in(io: _Io, v: Any, type_name: str | None = None) -> tuple:
    """A Python value fed for `io` (of type `type_name`, by default io's) in the native form,
    checked as onnxruntime checks it."""
    type_name = type_name or io.type
    if type_name.startswith("optional("):
        inner = type_name[len("optional(") : -1]
        return ("o", None if v is None else _value_in(io, v, inner))
    if type_name.startswith("seq("):
        if not isinstance(v, (list, tuple)):
            raise _invalid(f"Input '{io.name}' must be a list of arrays (declared {type_name})")
        code = _element_code(type_name)
        items = [_tensor_in(np.asarray(x, dtype=_DTYPES.get(code) if code not in (None, 8) else None)) for x in v]
        return ("q", code or 1, list(items))
    if type_name.startswith("map("):
        if not isinstance(v, dict):
            raise _invalid(f"Input '{io.name}' must be a dict (declared {type_name})")
        key_name = type_name[len("map(") :].split(",", 1)[0]
        key_code = next(c for c, n in _NAMES.items() if n == key_name)
        val_code = _element_code(type_name)
        keys = np.array(list(v.keys()), dtype=_DTYPES[key_code])
        values = np.array(list(v.values()), dtype=_DTYPES[val_code] if val_code else None)
        return ("m", _tensor_in(keys), _tensor_in(values))
    # A tensor: onnxruntime's checks, by its messages.
    if not isinstance(v, np.ndarray):
        want = _DTYPES.get(io.code) if io.code else None
        v = np.asarray(v, dtype=want if want is not None and io.code != 8 else None)
    code = _code_of(v.dtype)
    if io.code and code != io.code:
        actual = f"tensor({_NAMES[code]})" if code else f"tensor({v.dtype})"
        raise _invalid(f"Unexpected input data type. Actual: ({actual}) , expected: ({type_name})")
    if io.dims is not None:
        if v.ndim != len(io.dims):
            raise _invalid(
                f"Invalid rank for input: {io.name} Got: {v.ndim} Expected: {len(io.dims)} "
                "Please fix either the inputs/outputs or the model."
            )
        bad = [(i, n, d) for i, (n, d) in enumerate(zip(v.shape, io.dims)) if isinstance(d, int) and n != d]
        if bad:
            lines = "".join(f" index: {i} Got: {n} Expected: {d}\n" for i, n, d in bad)
            raise _invalid(
                f"Got invalid dimensions for input: {io.name} for the following indices\n{lines}"
                " Please fix either the inputs/outputs or the model."
            )
    return _tensor_in(v)


# --- the session -----------------------------------------------------------------------------


def _normalize_providers(providers, provider_options) -> list[tuple[str, dict]]:
    if providers is None:
        return [(CPU, {})]
    if provider_options is not None and len(provider_options) != len(providers):
        raise ValueError("'providers' and 'provider_options' should be the same length if both are given.")
    out = []
    for i, p in enumerate(providers):
        if isinstance(p, str):
            name, opts = p, dict(provider_options[i]) if provider_options is not None else {}
        elif isinstance(p, (tuple, list)) and len(p) == 2 and isinstance(p[0], str) and isinstance(p[1], dict):
            if provider_options is not None:
                raise ValueError("Only one of 'providers' and 'provider_options' can carry provider options.")
            name, opts = p[0], dict(p[1])
        else:
            raise ValueError("'providers' values must be either strings or (string, dict) tuples.")
        out.append((name, opts))
    return out


class InferenceSession:
    """onnxruntime's InferenceSession over this runtime: a model (a path, or its bytes) built
    once, then run from any number of threads (the GIL is released while it runs)."""

    def __init__(
        self,
        path_or_bytes: str | bytes | os.PathLike,
        sess_options: SessionOptions | None = None,
        providers: Sequence[str | tuple[str, dict]] | None = None,
        provider_options: Sequence[dict] | None = None,
        **kwargs,
    ) -> None:
        if isinstance(path_or_bytes, (str, os.PathLike)):
            model = os.fspath(path_or_bytes)
            if not os.path.exists(model):
                raise NoSuchFile(
                    f"[ONNXRuntimeError] : 3 : NO_SUCHFILE : Load model from {model} failed:"
                    f"Load model {model} failed. File doesn't exist"
                )
            self._model_path: str | None = model
        elif isinstance(path_or_bytes, (bytes, bytearray, memoryview)):
            model = bytes(path_or_bytes)
            self._model_path = None
        else:
            raise TypeError(f"Unable to load from type '{type(path_or_bytes)}'")
        self._model = model
        self._sess_options = sess_options or SessionOptions()
        self._build(_normalize_providers(providers, provider_options))

    def _build(self, providers: list[tuple[str, dict]]) -> None:
        args = self._sess_options._native_args()
        available = get_available_providers()
        chosen: list[tuple[str, dict]] = []
        for name, opts in providers:
            if name not in get_all_providers():
                warnings.warn(
                    f"Specified provider '{name}' is not in available provider names."
                    f"Available providers: '{', '.join(available)}'"
                )
            elif name not in available:
                warnings.warn(f"{name} is not available here (no CUDA driver library found); running on the CPU")
            else:
                chosen.append((name, opts))
        native = None
        cuda = next((opts for name, opts in chosen if name == CUDA), None)
        self._provider_options: dict[str, dict] = {}
        if cuda is not None:
            device_id = int(cuda.get("device_id", 0))
            try:
                native = _native.NativeSession(self._model, device_id=device_id, **args)
                self._provider_options[CUDA] = {"device_id": str(device_id)}
            except EPFail as e:
                warnings.warn(f"{e}; falling back to CPUExecutionProvider")
        if native is None:
            native = _native.NativeSession(self._model, **args)
        self._provider_options[CPU] = {}
        self._native = native
        self._all_inputs = [_Io(t) for t in native.inputs()]
        self._by_name = {io.name: io for io in self._all_inputs}
        self._outputs = [_Io(t) for t in native.outputs()]
        self._output_index = {io.name: i for i, io in enumerate(self._outputs)}

    # The inputs to feed (initializers that are also inputs are left out, as in onnxruntime:
    # get_overridable_initializers lists them).
    def get_inputs(self) -> list[NodeArg]:
        return [io.arg for io in self._all_inputs if not io.has_default]

    def get_overridable_initializers(self) -> list[NodeArg]:
        return [io.arg for io in self._all_inputs if io.has_default]

    def get_outputs(self) -> list[NodeArg]:
        return [io.arg for io in self._outputs]

    def get_modelmeta(self) -> ModelMetadata:
        return ModelMetadata(self._native.metadata())

    def get_providers(self) -> list[str]:
        return list(self._provider_options)

    def get_provider_options(self) -> dict[str, dict]:
        return {k: dict(v) for k, v in self._provider_options.items()}

    def get_session_options(self) -> SessionOptions:
        return self._sess_options

    def set_providers(self, providers=None, provider_options=None) -> None:
        """Rebuilds the session for other providers."""
        self._build(_normalize_providers(providers, provider_options))

    def run(self, output_names, input_feed: dict[str, Any], run_options: RunOptions | None = None) -> list:
        """The outputs named (all when `output_names` is None or empty), in that order, as
        numpy arrays (lists for sequences, dicts for maps, None for an empty optional)."""
        missing = [
            io.name
            for io in self._all_inputs
            if not io.has_default and io.name not in input_feed and not io.type.startswith("optional")
        ]
        if missing:
            raise ValueError(f"Required inputs ({missing}) are missing from input feed ({list(input_feed)}).")
        feeds = []
        for name, value in input_feed.items():
            io = self._by_name.get(name)
            if io is None:
                raise _invalid(f"Invalid input name: {name}")
            feeds.append((name, _value_in(io, value)))
        indices = None
        if output_names:
            indices = []
            for name in output_names:
                i = self._output_index.get(name)
                if i is None:
                    raise _invalid(f"Invalid output name:{name}")
                indices.append(i)
        return [_value_out(v) for v in self._native.run(feeds, indices)]

    def _cuda_device(self) -> int | None:
        """The CUDA device the session runs on, or None on the CPU only."""
        cuda = self._provider_options.get(CUDA)
        return int(cuda["device_id"]) if cuda is not None else None

    def io_binding(self) -> "IOBinding":
        """A new IOBinding for this session (see IOBinding)."""
        return IOBinding(self)

    def run_with_iobinding(self, iobinding: "IOBinding", run_options: RunOptions | None = None) -> None:
        """Runs on the bound inputs; the outputs are then iobinding.get_outputs(). As in
        onnxruntime the run waits for the device before returning, unless run_options has
        "disable_synchronize_execution_providers" set to "1" (then call
        iobinding.synchronize_outputs() before reading device outputs elsewhere)."""
        if not isinstance(iobinding, IOBinding) or iobinding._session is not self:
            raise ValueError("run_with_iobinding takes an IOBinding made by this session's io_binding()")
        sync = True
        if run_options is not None:
            sync = run_options._config.get("disable_synchronize_execution_providers", "0") != "1"
        iobinding._run(sync)

    def run_with_ort_values(self, output_names, input_dict_ort_values: dict, run_options: RunOptions | None = None) -> list:
        """run() on OrtValues: the outputs named (all when None or empty) as OrtValues on the
        host."""
        feeds = []
        for name, value in input_dict_ort_values.items():
            if name not in self._by_name:
                raise _invalid(f"Invalid input name: {name}")
            if not isinstance(value, OrtValue):
                raise TypeError(f"input '{name}' must be an OrtValue, got {type(value).__name__}")
            feeds.append((name, value._native))
        names = list(output_names) if output_names else [io.name for io in self._outputs]
        for name in names:
            if name not in self._output_index:
                raise _invalid(f"Invalid output name:{name}")
        return [OrtValue(v) for v in self._native.run_bound(feeds, [(n, False, None) for n in names])]

    def __repr__(self) -> str:
        where = self._model_path or "<model bytes>"
        return f"onnx_runtime_rs.InferenceSession({where!r}, providers={self.get_providers()})"


from ._iobinding import IOBinding, OrtValue, from_dlpack  # noqa: E402 (uses the helpers above)
