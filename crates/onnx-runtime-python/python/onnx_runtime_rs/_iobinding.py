"""OrtValue, IOBinding and DLPack: onnxruntime's API for values that stay where they are (a
NumPy array read in place, a CUDA tensor of PyTorch or CuPy handed over without a copy, a
session's output left on the GPU)."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from . import (
    _DTYPES,
    _SUB_BYTE_BITS,
    _code_of,
    _invalid,
    _native,
    _tensor_in,
    _value_in,
    _value_out,
)

_KDL_CPU, _KDL_CUDA = 1, 2


def _device(device_type: str, device_id: int) -> int | None:
    """None for the host, the ordinal for a CUDA device; an error for anything else."""
    kind = str(device_type).lower()
    if kind == "cpu":
        return None
    if kind in ("cuda", "gpu"):
        if int(device_id) < 0:
            raise ValueError(f"device_id must be 0 or more, got {device_id}")
        return int(device_id)
    raise ValueError(f"Unsupported device type '{device_type}': this runtime has 'cpu' and 'cuda'")


def _element_code(element_type: Any) -> int:
    try:
        code = _code_of(np.dtype(element_type))
    except TypeError:
        code = None
    if code is None or code == 8:
        raise ValueError(f"element_type {element_type!r} has no ONNX element type with byte storage here")
    return code


def _is_capsule(obj: Any) -> bool:
    return type(obj).__name__ == "PyCapsule"


def _native_from_dlpack(obj: Any) -> Any:
    """A NativeValue sharing the memory of a DLPack producer (an object with __dlpack__, or
    a capsule). A CUDA producer is asked to order its work before the stream the value is
    read on (`__dlpack__(stream=...)`)."""
    if _is_capsule(obj):
        return _native.NativeValue.from_dlpack(obj)
    if not hasattr(obj, "__dlpack__"):
        raise TypeError(f"{type(obj).__name__} does not implement __dlpack__ (nor is it a DLPack capsule)")
    stream = None
    if hasattr(obj, "__dlpack_device__"):
        kind, ordinal = obj.__dlpack_device__()
        if int(kind) == _KDL_CUDA:
            stream = _native.cuda_stream(int(ordinal))
    try:
        capsule = obj.__dlpack__(stream=stream, max_version=(1, 0))
    except TypeError:  # a producer from before DLPack 1.0 (no max_version)
        capsule = obj.__dlpack__() if stream is None else obj.__dlpack__(stream=stream)
    return _native.NativeValue.from_dlpack(capsule)


class OrtValue:
    """A value for IO binding and DLPack, by onnxruntime's name: a tensor on the host (which
    may share a NumPy array's memory) or in CUDA device memory, or any other ONNX value a
    run returned (sequence, map, optional)."""

    def __init__(self, native: Any) -> None:
        if not isinstance(native, _native.NativeValue):
            raise TypeError("make an OrtValue with OrtValue.ortvalue_from_numpy, ortvalue_from_shape_and_type or from_dlpack")
        self._native = native

    # --- construction -----------------------------------------------------------------------

    @staticmethod
    def ortvalue_from_numpy(numpy_obj: np.ndarray, device_type: str = "cpu", device_id: int = 0, vendor_id: int = -1) -> "OrtValue":
        """On the CPU the value reads the array in place (a C-contiguous, aligned array of a
        byte-sized type; others are copied) and keeps it alive; writes to the array are seen
        by the value. On CUDA the array is copied to the device."""
        a = numpy_obj if isinstance(numpy_obj, np.ndarray) else np.asarray(numpy_obj)
        if _code_of(a.dtype) is None:
            raise _invalid(f"Unexpected data type {a.dtype}: it has no ONNX element type")
        t = _tensor_in(a)
        shared = t[0] == "t" and t[5] is a
        native = _native.NativeValue.from_host(t, _device(device_type, device_id), shared and a.flags.writeable)
        return OrtValue(native)

    @staticmethod
    def ortvalue_from_shape_and_type(shape: Sequence[int], element_type: Any, device_type: str = "cpu", device_id: int = 0, vendor_id: int = -1) -> "OrtValue":
        """A zero-filled tensor (a buffer to bind an output to)."""
        code = _element_code(element_type)
        if code in _SUB_BYTE_BITS:
            raise ValueError(f"sub-byte element type {np.dtype(element_type)} cannot be allocated as an output buffer")
        return OrtValue(_native.NativeValue.zeros(code, [int(n) for n in shape], _device(device_type, device_id)))

    @staticmethod
    def from_dlpack(data: Any, is_bool_tensor: bool = False) -> "OrtValue":
        """Shares the memory of a DLPack tensor (NumPy, PyTorch, CuPy ..., or a capsule):
        CPU tensors are read in place (strided ones are copied to row-major), CUDA tensors
        become device values without a copy (they must be compact row-major)."""
        return OrtValue(_native_from_dlpack(data))

    # --- what it holds ----------------------------------------------------------------------

    def is_tensor(self) -> bool:
        return self._native.is_tensor()

    def has_value(self) -> bool:
        return not (self._native.kind() == "optional" and self._value() is None)

    def _tensor_type(self) -> tuple[int, list]:
        t = self._native.tensor_type()
        if t is None:
            raise TypeError(f"the OrtValue holds a {self._native.kind()}, not a tensor")
        return t

    def shape(self) -> list[int]:
        return list(self._tensor_type()[1])

    def data_type(self) -> str:
        """onnxruntime's type string: "tensor(float)", "seq(tensor(int64))" ..."""
        return self._native.type_string()

    def element_type(self) -> type:
        return _DTYPES[self._tensor_type()[0]].type

    def device_name(self) -> str:
        return self._native.device()[0]

    def device_id(self) -> int:
        return self._native.device()[1]

    def data_ptr(self) -> int:
        """The address of the first element, in host or device memory."""
        return self._native.data_ptr()

    def _value(self) -> Any:
        return _value_out(self._native.to_py())

    def numpy(self) -> np.ndarray:
        """A copy on the host as a NumPy array (np.from_dlpack(value) shares the memory)."""
        if not self.is_tensor():
            raise TypeError(f"numpy() is for tensors; the OrtValue holds a {self._native.kind()}")
        return self._value()

    # --- DLPack -----------------------------------------------------------------------------

    def __dlpack_device__(self) -> tuple[int, int]:
        kind, ordinal = self._native.device()
        return (_KDL_CUDA, ordinal) if kind == "cuda" else (_KDL_CPU, 0)

    def __dlpack__(self, *, stream: Any = None, max_version: tuple | None = None, dl_device: tuple | None = None, copy: bool | None = None) -> Any:
        """A capsule sharing the tensor's memory. A CUDA value waits for the device work
        writing it before it is handed out, so any consumer stream sees its final bytes."""
        if dl_device is not None and tuple(dl_device) != self.__dlpack_device__():
            raise BufferError(f"the value lives on {self.__dlpack_device__()}, not on {tuple(dl_device)}: no cross-device export")
        if copy:
            if self.device_name() != "cpu":
                raise BufferError("copy=True is only supported for CPU values")
            return OrtValue.ortvalue_from_numpy(self.numpy()).__dlpack__(max_version=max_version)
        versioned = max_version is not None and int(max_version[0]) >= 1
        return self._native.dlpack(versioned)

    def to_dlpack(self) -> Any:
        """A DLPack capsule ("dltensor") sharing the tensor's memory."""
        return self._native.dlpack(False)

    def __repr__(self) -> str:
        if self.is_tensor():
            return f"OrtValue({self.data_type()}, shape={self.shape()}, device={self.device_name()}:{self.device_id()})"
        return f"OrtValue({self.data_type()})"


def from_dlpack(data: Any) -> OrtValue:
    """OrtValue.from_dlpack."""
    return OrtValue.from_dlpack(data)


class IOBinding:
    """onnxruntime's IOBinding: inputs and outputs bound by name, then
    `session.run_with_iobinding(binding)`. Outputs bound to "cuda" stay on the device; an
    output bound to a buffer (buffer_ptr, or bind_ortvalue_output) is written there."""

    def __init__(self, session: Any) -> None:
        self._session = session
        self._inputs: dict[str, OrtValue] = {}
        self._outputs: dict[str, tuple[bool, OrtValue | None]] = {}
        self._results: list[OrtValue] = []

    def _input(self, name: str) -> Any:
        io = self._session._by_name.get(name)
        if io is None:
            raise _invalid(f"Invalid input name: {name}")
        return io

    def _check_device(self, ordinal: int | None, what: str) -> None:
        if ordinal is None:
            return
        on = self._session._cuda_device()
        if on is None:
            raise _invalid(f"{what} is bound to cuda:{ordinal}, and the session runs on the CPU only (CPUExecutionProvider)")
        if on != ordinal:
            raise _invalid(f"{what} is bound to cuda:{ordinal}, and the session runs on cuda:{on}")

    # --- inputs -----------------------------------------------------------------------------

    def bind_cpu_input(self, name: str, arr_on_cpu: Any) -> None:
        """Binds a host array, read in place (C-contiguous arrays) and checked as run() checks."""
        io = self._input(name)
        t = _value_in(io, arr_on_cpu)
        self._inputs[name] = OrtValue(_native.NativeValue.from_host(t, None, False))

    def bind_input(self, name: str, device_type: str, device_id: int, element_type: Any, shape: Sequence[int], buffer_ptr: int) -> None:
        """Binds memory at `buffer_ptr` (host or CUDA device memory), read in place. The caller
        keeps it valid, and its contents final, until the run is done."""
        self._input(name)
        ordinal = _device(device_type, device_id)
        self._check_device(ordinal, f"input '{name}'")
        native = _native.NativeValue.from_address(_element_code(element_type), [int(n) for n in shape], int(buffer_ptr), ordinal)
        self._inputs[name] = OrtValue(native)

    def bind_ortvalue_input(self, name: str, ortvalue: OrtValue) -> None:
        self._input(name)
        if not isinstance(ortvalue, OrtValue):
            raise TypeError(f"bind_ortvalue_input takes an OrtValue, got {type(ortvalue).__name__}")
        if ortvalue.device_name() == "cuda":
            self._check_device(ortvalue.device_id(), f"input '{name}'")
        self._inputs[name] = ortvalue

    # --- outputs ----------------------------------------------------------------------------

    def _output(self, name: str) -> None:
        if name not in self._session._output_index:
            raise _invalid(f"Invalid output name: {name}")

    def bind_output(self, name: str, device_type: str = "cpu", device_id: int = 0, element_type: Any = None, shape: Sequence[int] | None = None, buffer_ptr: int | None = None) -> None:
        """Asks for output `name` on the host or the CUDA device (allocated by the run), or,
        with buffer_ptr (and element_type and shape), written into that memory."""
        self._output(name)
        ordinal = _device(device_type, device_id)
        self._check_device(ordinal, f"output '{name}'")
        dst = None
        if buffer_ptr is not None:
            if element_type is None or shape is None:
                raise ValueError("bind_output with buffer_ptr needs element_type and shape")
            dst = OrtValue(_native.NativeValue.from_address(_element_code(element_type), [int(n) for n in shape], int(buffer_ptr), ordinal))
        self._outputs[name] = (ordinal is not None, dst)

    def bind_ortvalue_output(self, name: str, ortvalue: OrtValue) -> None:
        """The run writes output `name` into this tensor's memory (same type and shape)."""
        self._output(name)
        if not isinstance(ortvalue, OrtValue) or not ortvalue.is_tensor():
            raise TypeError("bind_ortvalue_output takes an OrtValue holding a tensor")
        on_device = ortvalue.device_name() == "cuda"
        if on_device:
            self._check_device(ortvalue.device_id(), f"output '{name}'")
        self._outputs[name] = (on_device, ortvalue)

    # --- after the run ----------------------------------------------------------------------

    def synchronize_inputs(self) -> None:
        for v in self._inputs.values():
            v._native.synchronize()

    def synchronize_outputs(self) -> None:
        self._session._native.synchronize()

    def clear_binding_inputs(self) -> None:
        self._inputs.clear()

    def clear_binding_outputs(self) -> None:
        self._outputs.clear()
        self._results = []

    def get_outputs(self) -> list[OrtValue]:
        """The outputs of the last run, in the order they were bound."""
        return list(self._results)

    def copy_outputs_to_cpu(self) -> list:
        """The outputs of the last run on the host (NumPy arrays; lists and dicts for
        sequences and maps)."""
        return [v._value() for v in self._results]

    def _run(self, synchronize: bool) -> None:
        if not self._outputs:
            raise _invalid("no output is bound: bind_output or bind_ortvalue_output at least one")
        names = list(self._outputs)
        # An output bound to the same CUDA OrtValue as an input (a KV cache as past and
        # present) is written into that memory by the run itself: no copy afterwards.
        into = {}
        for name in names:
            dst = self._outputs[name][1]
            if dst is not None and dst.device_name() == "cuda":
                into[name] = next((n for n, v in self._inputs.items() if v is dst), None)
        natives = self._session._native.run_bound(
            [(n, v._native) for n, v in self._inputs.items()],
            [(n, self._outputs[n][0], into.get(n)) for n in names],
            synchronize,
        )
        results = []
        for name, got in zip(names, natives):
            dst = self._outputs[name][1]
            if dst is None:
                results.append(OrtValue(got))
            else:
                if into.get(name) is None:
                    got.copy_into(dst._native, name)
                results.append(dst)
        self._results = results
