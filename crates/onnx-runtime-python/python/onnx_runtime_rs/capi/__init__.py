"""Where onnxruntime keeps its exception classes: `onnxruntime.capi.onnxruntime_pybind11_state`
has the same names here, so `except ort.capi.onnxruntime_pybind11_state.InvalidArgument` works
with only the import changed."""
