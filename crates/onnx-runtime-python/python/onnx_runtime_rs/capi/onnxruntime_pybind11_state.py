"""onnxruntime's `capi.onnxruntime_pybind11_state` names: the exception classes and options."""

from .. import (  # noqa: F401
    EngineError,
    EPFail,
    ExecutionMode,
    Fail,
    GraphOptimizationLevel,
    InvalidArgument,
    InvalidGraph,
    InvalidProtobuf,
    ModelMetadata,
    NodeArg,
    NoModel,
    NoSuchFile,
    NotImplemented,
    RunOptions,
    RuntimeException,
    SessionOptions,
    get_all_providers,
    get_available_providers,
    get_device,
)
