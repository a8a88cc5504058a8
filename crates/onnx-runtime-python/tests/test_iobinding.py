"""OrtValue, IOBinding and DLPack on the CPU: bound runs against sess.run and onnxruntime,
zero-copy sharing with NumPy (data pointers equal, writes seen on the other side), buffer
lifetimes, and the errors of misuse."""

from __future__ import annotations

import gc
import weakref

import numpy as np
import onnxruntime
import pytest
from conftest import make_model, tensor
from onnx import TensorProto, helper, numpy_helper

import onnx_runtime_rs as ort

W = np.arange(8, dtype=np.float32).reshape(4, 2) / 8 - 0.25


@pytest.fixture(scope="module")
def model() -> bytes:
    """y = Relu(x + b), z = MatMul(x, W): x float [N, 4], b float [4], W a [4, 2] initializer."""
    return make_model(
        [
            helper.make_node("Add", ["x", "b"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
            helper.make_node("MatMul", ["x", "W"], ["z"]),
        ],
        [tensor("x", shape=["N", 4]), tensor("b", shape=[4])],
        [tensor("y", shape=["N", 4]), tensor("z", shape=["N", 2])],
        [numpy_helper.from_array(W, "W")],
    )


@pytest.fixture(scope="module")
def sess(model):
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def reference(model):
    return onnxruntime.InferenceSession(model, providers=["CPUExecutionProvider"])


def feeds(seed: int, n: int = 3) -> dict:
    rng = np.random.default_rng(seed)
    return {"x": rng.standard_normal((n, 4)).astype(np.float32), "b": rng.standard_normal(4).astype(np.float32)}


# --- IO binding ------------------------------------------------------------------------------


def test_bound_run_equals_run_and_onnxruntime(sess, reference):
    binding = sess.io_binding()
    assert binding.get_outputs() == []
    for seed in range(3):
        f = feeds(seed, n=seed + 1)
        binding.bind_cpu_input("x", f["x"])
        binding.bind_cpu_input("b", f["b"])
        binding.bind_output("z")
        binding.bind_output("y", "cpu", 0)
        sess.run_with_iobinding(binding)
        z, y = binding.copy_outputs_to_cpu()  # in the order bound
        want_y, want_z = sess.run(None, f)
        np.testing.assert_array_equal(y, want_y)
        np.testing.assert_array_equal(z, want_z)
        ref_y, ref_z = reference.run(None, f)
        np.testing.assert_allclose(y, ref_y, rtol=1e-6, atol=1e-6)
        np.testing.assert_allclose(z, ref_z, rtol=1e-5, atol=1e-6)
        values = binding.get_outputs()
        assert [v.shape() for v in values] == [[seed + 1, 2], [seed + 1, 4]]
        assert all(v.data_type() == "tensor(float)" and v.device_name() == "cpu" and v.is_tensor() for v in values)
        np.testing.assert_array_equal(values[1].numpy(), want_y)


def test_the_same_code_runs_on_onnxruntime(model):
    """One function, written against onnxruntime's API, run on both packages."""

    def bound_run(mod, f):
        s = mod.InferenceSession(model, providers=["CPUExecutionProvider"])
        binding = s.io_binding()
        binding.bind_ortvalue_input("x", mod.OrtValue.ortvalue_from_numpy(f["x"]))
        b = np.ascontiguousarray(f["b"])
        binding.bind_input("b", "cpu", 0, np.float32, list(b.shape), b.ctypes.data)
        z = mod.OrtValue.ortvalue_from_shape_and_type([len(f["x"]), 2], np.float32, "cpu", 0)
        binding.bind_output("y", "cpu")
        binding.bind_ortvalue_output("z", z)
        s.run_with_iobinding(binding)
        outs = binding.get_outputs()
        meta = [(v.shape(), v.data_type(), v.device_name(), v.is_tensor()) for v in outs]
        return binding.copy_outputs_to_cpu(), meta, z.numpy()

    f = feeds(5, n=6)
    ours, ref = bound_run(ort, f), bound_run(onnxruntime, f)
    assert ours[1] == ref[1]
    for a, b in zip(ours[0] + [ours[2]], ref[0] + [ref[2]]):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_ortvalue_inputs_and_address_inputs(sess):
    f = feeds(7)
    binding = sess.io_binding()
    binding.bind_ortvalue_input("x", ort.OrtValue.ortvalue_from_numpy(f["x"]))
    b = f["b"].copy()
    binding.bind_input("b", "cpu", 0, np.float32, b.shape, b.ctypes.data)
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], sess.run(["y"], f)[0])
    # The address binding reads the array in place: a change shows in the next run.
    b += 1.0
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], sess.run(["y"], {"x": f["x"], "b": b})[0])


def test_outputs_into_bound_buffers(sess):
    f = feeds(3, n=5)
    want_y, want_z = sess.run(None, f)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", f["x"])
    binding.bind_cpu_input("b", f["b"])
    out_y = np.full((5, 4), np.nan, np.float32)
    binding.bind_output("y", "cpu", 0, np.float32, out_y.shape, out_y.ctypes.data)
    z_value = ort.OrtValue.ortvalue_from_shape_and_type([5, 2], np.float32)
    z_view = np.from_dlpack(z_value)  # shares the OrtValue's memory
    assert z_view.ctypes.data == z_value.data_ptr()
    binding.bind_ortvalue_output("z", z_value)
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(out_y, want_y)
    np.testing.assert_array_equal(z_view, want_z)
    outs = binding.get_outputs()
    assert outs[1] is z_value and outs[0].data_ptr() == out_y.ctypes.data
    # An output bound to a NumPy array shared by ortvalue_from_numpy is written in place too.
    target = np.zeros((5, 2), np.float32)
    binding.bind_ortvalue_output("z", ort.OrtValue.ortvalue_from_numpy(target))
    sess.run_with_iobinding(binding)
    np.testing.assert_array_equal(target, want_z)


def test_run_options_and_run_with_ort_values(sess):
    f = feeds(11)
    binding = sess.io_binding()
    binding.bind_cpu_input("x", f["x"])
    binding.bind_cpu_input("b", f["b"])
    binding.bind_output("y")
    opts = ort.RunOptions()
    opts.add_run_config_entry("disable_synchronize_execution_providers", "1")
    sess.run_with_iobinding(binding, opts)
    binding.synchronize_inputs()
    binding.synchronize_outputs()
    np.testing.assert_array_equal(binding.copy_outputs_to_cpu()[0], sess.run(["y"], f)[0])
    values = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in f.items()}
    got = sess.run_with_ort_values(["z", "y"], values)
    want_y, want_z = sess.run(None, f)
    np.testing.assert_array_equal(got[0].numpy(), want_z)
    np.testing.assert_array_equal(got[1].numpy(), want_y)
    assert len(sess.run_with_ort_values(None, values)) == 2


def test_non_tensor_outputs_come_back_as_values():
    m = make_model(
        [helper.make_node("SequenceConstruct", ["a", "a"], ["seq"])],
        [tensor("a", shape=[2])],
        [helper.make_tensor_sequence_value_info("seq", TensorProto.FLOAT, [2])],
    )
    s = ort.InferenceSession(m)
    binding = s.io_binding()
    a = np.array([1.5, -2.0], np.float32)
    binding.bind_cpu_input("a", a)
    binding.bind_output("seq")
    s.run_with_iobinding(binding)
    (value,) = binding.get_outputs()
    assert not value.is_tensor() and value.data_type() == "seq(tensor(float))"
    (got,) = binding.copy_outputs_to_cpu()
    assert len(got) == 2 and all(np.array_equal(g, a) for g in got)
    with pytest.raises(TypeError, match="holds a sequence"):
        value.shape()


def test_binding_misuse_is_a_clear_error(sess):
    f = feeds(0)
    binding = sess.io_binding()
    with pytest.raises(ort.InvalidArgument, match="Invalid input name: nope"):
        binding.bind_cpu_input("nope", f["x"])
    with pytest.raises(ort.InvalidArgument, match="Invalid output name: nope"):
        binding.bind_output("nope")
    with pytest.raises(ort.InvalidArgument, match=r"Unexpected input data type. Actual: \(tensor\(double\)\)"):
        binding.bind_cpu_input("x", f["x"].astype(np.float64))
    with pytest.raises(ort.InvalidArgument, match="Got invalid dimensions for input: x"):
        binding.bind_cpu_input("x", np.zeros((2, 5), np.float32))
    with pytest.raises(ort.InvalidArgument, match="runs on the CPU only"):
        binding.bind_output("y", "cuda", 0)
    with pytest.raises(ort.InvalidArgument, match="runs on the CPU only"):
        binding.bind_input("x", "cuda", 0, np.float32, [3, 4], 1 << 20)
    with pytest.raises(ValueError, match="Unsupported device type 'npu'"):
        binding.bind_output("y", "npu")
    with pytest.raises(ValueError, match="needs element_type and shape"):
        binding.bind_output("y", "cpu", 0, buffer_ptr=1 << 20)
    with pytest.raises(ValueError, match="null address"):
        binding.bind_input("x", "cpu", 0, np.float32, [3, 4], 0)
    binding.bind_cpu_input("x", f["x"])
    with pytest.raises(ort.InvalidArgument, match="no output is bound"):
        sess.run_with_iobinding(binding)
    binding.bind_output("y")
    with pytest.raises(ort.InvalidArgument, match="missing input 'b'"):
        sess.run_with_iobinding(binding)
    # An OrtValue of the wrong type is refused by the run, naming the input.
    binding.bind_ortvalue_input("b", ort.OrtValue.ortvalue_from_numpy(np.zeros(4, np.int64)))
    with pytest.raises(ort.InvalidArgument, match="'b'"):
        sess.run_with_iobinding(binding)
    binding.bind_cpu_input("b", f["b"])
    # A bound output buffer of the wrong shape, and a read-only one.
    binding.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_shape_and_type([2, 2], np.float32))
    with pytest.raises(ort.InvalidArgument, match=r"output 'y' is a float tensor of shape \[3, 4\].*shape \[2, 2\]"):
        sess.run_with_iobinding(binding)
    frozen = np.zeros((3, 4), np.float32)
    frozen.flags.writeable = False
    binding.bind_ortvalue_output("y", ort.OrtValue.ortvalue_from_numpy(frozen))
    with pytest.raises(ort.InvalidArgument, match="read-only"):
        sess.run_with_iobinding(binding)
    assert not frozen.any()
    binding.clear_binding_outputs()
    binding.bind_output("y")
    sess.run_with_iobinding(binding)
    binding.clear_binding_inputs()
    with pytest.raises(ort.InvalidArgument, match="missing input 'x'"):
        sess.run_with_iobinding(binding)
    other = ort.InferenceSession(sess._model)
    with pytest.raises(ValueError, match="this session's io_binding"):
        other.run_with_iobinding(binding)
    with pytest.raises(TypeError, match="takes an OrtValue"):
        binding.bind_ortvalue_input("x", f["x"])


# --- OrtValue and DLPack ---------------------------------------------------------------------


def test_ortvalue_from_numpy_shares_the_array():
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    v = ort.OrtValue.ortvalue_from_numpy(a)
    assert v.data_ptr() == a.ctypes.data
    assert (v.shape(), v.data_type(), v.element_type(), v.device_name(), v.is_tensor(), v.has_value()) == (
        [3, 4], "tensor(float)", np.float32, "cpu", True, True)
    a[1, 2] = -7.0
    assert v.numpy()[1, 2] == -7.0
    assert v.numpy().ctypes.data != a.ctypes.data  # numpy() is a copy, as in onnxruntime
    assert v.__dlpack_device__() == (1, 0)
    # A strided array is copied (the runtime reads row-major memory).
    s = a[:, ::2]
    w = ort.OrtValue.ortvalue_from_numpy(s)
    np.testing.assert_array_equal(w.numpy(), s)
    z = ort.OrtValue.ortvalue_from_shape_and_type((2, 3), np.int64)
    np.testing.assert_array_equal(z.numpy(), np.zeros((2, 3), np.int64))
    strings = ort.OrtValue.ortvalue_from_numpy(np.array(["a", "bc"], dtype=object))
    assert strings.data_type() == "tensor(string)" and list(strings.numpy()) == ["a", "bc"]
    with pytest.raises(BufferError, match="no DLPack element type"):
        strings.__dlpack__()
    with pytest.raises(ValueError, match="Unsupported device type"):
        ort.OrtValue.ortvalue_from_numpy(a, "npu")


DTYPES = [np.float16, np.float32, np.float64, np.int8, np.int16, np.int32, np.int64, np.uint8,
          np.uint16, np.uint32, np.uint64, np.bool_, np.complex64, np.complex128]  # fmt: skip


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: np.dtype(d).name)
def test_dlpack_round_trip_with_numpy_is_zero_copy(dtype):
    rng = np.random.default_rng(0)
    a = (rng.standard_normal((2, 3, 4)) * 10).astype(dtype)
    v = ort.from_dlpack(a)
    assert v.data_ptr() == a.ctypes.data
    assert v.data_type() == f"tensor({ort._NAMES[ort._code_of(a.dtype)]})"
    np.testing.assert_array_equal(v.numpy(), a)
    back = np.from_dlpack(v)  # versioned capsule (NumPy asks for max_version 1.0)
    assert back.ctypes.data == a.ctypes.data and back.dtype == a.dtype
    np.testing.assert_array_equal(back, a)
    again = ort.OrtValue.from_dlpack(back)
    assert again.data_ptr() == a.ctypes.data


def test_dlpack_writes_are_seen_on_both_sides():
    a = np.zeros((2, 3), np.float32)
    v = ort.OrtValue.from_dlpack(a)
    a[0, 1] = 5.0  # the producer writes; the value reads the same memory
    assert v.numpy()[0, 1] == 5.0
    view = np.from_dlpack(v)
    view[1, 2] = -3.0  # the consumer writes; the array and the value see it
    assert a[1, 2] == -3.0 and v.numpy()[1, 2] == -3.0


class _Legacy:
    """A producer from before DLPack 1.0: __dlpack__ takes only `stream`."""

    def __init__(self, capsule, device=(1, 0)):
        self.capsule, self.device = capsule, device

    def __dlpack__(self, stream=None):
        return self.capsule

    def __dlpack_device__(self):
        return self.device


def test_unversioned_capsules_both_ways():
    a = np.arange(6, dtype=np.int32).reshape(2, 3)
    v = ort.OrtValue.ortvalue_from_numpy(a)
    capsule = v.to_dlpack()
    assert "dltensor" in repr(capsule)
    b = np.from_dlpack(_Legacy(capsule))
    assert b.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(b, a)
    w = ort.from_dlpack(a.__dlpack__())  # a NumPy capsule taken directly
    assert w.data_ptr() == a.ctypes.data
    w2 = ort.from_dlpack(_Legacy(a.__dlpack__()))
    np.testing.assert_array_equal(w2.numpy(), a)


def test_dlpack_lifetimes():
    # The value keeps the producer's array alive, and lets it go when it is dropped.
    a = np.arange(4, dtype=np.float64)
    ref = weakref.ref(a)
    v = ort.from_dlpack(a)
    del a
    gc.collect()
    assert ref() is not None
    np.testing.assert_array_equal(v.numpy(), np.arange(4.0))
    del v
    gc.collect()
    assert ref() is None
    # An exported array outlives the OrtValue it came from.
    v = ort.OrtValue.ortvalue_from_shape_and_type([3], np.int16)
    view = np.from_dlpack(v)
    del v
    gc.collect()
    view[:] = [1, 2, 3]
    assert view.sum() == 6
    # A capsule nobody consumed frees its tensor (the capsule's destructor), and a capsule is
    # consumed once.
    b = np.ones(3, np.float32)
    ref = weakref.ref(b)
    capsule = ort.OrtValue.ortvalue_from_numpy(b).to_dlpack()
    del b, capsule
    gc.collect()
    assert ref() is None
    c = np.ones(3, np.float32)
    capsule = c.__dlpack__()
    ort.from_dlpack(capsule)
    with pytest.raises(ValueError, match="already consumed"):
        ort.from_dlpack(capsule)


def test_dlpack_strided_and_read_only_inputs():
    a = np.arange(24, dtype=np.float32).reshape(4, 6)
    s = a[::-1, 1::2]  # negative and non-unit strides: copied to row-major
    v = ort.from_dlpack(s)
    np.testing.assert_array_equal(v.numpy(), s)
    assert v.data_ptr() != s.ctypes.data
    col = a[:, 2:3]  # a [4, 1] column: compact apart from the size-1 axis
    np.testing.assert_array_equal(ort.from_dlpack(col).numpy(), col)
    frozen = np.ones(3, np.float32)
    frozen.flags.writeable = False
    r = ort.from_dlpack(frozen)  # marked read-only by a versioned capsule
    assert r.data_ptr() == frozen.ctypes.data
    assert not r._native.writable()


def test_dlpack_errors():
    with pytest.raises(TypeError, match="does not implement __dlpack__"):
        ort.OrtValue.from_dlpack(42)
    a = np.zeros(2, np.float32)
    with pytest.raises(BufferError, match="not on"):
        ort.OrtValue.ortvalue_from_numpy(a).__dlpack__(dl_device=(2, 0))
    copied = np.from_dlpack(ort.OrtValue.ortvalue_from_numpy(a), copy=True)
    assert copied.ctypes.data != a.ctypes.data
    with pytest.raises(TypeError, match="make an OrtValue with"):
        ort.OrtValue(a)
    with pytest.raises(ValueError, match="no ONNX element type"):
        ort.OrtValue.ortvalue_from_shape_and_type([2], np.dtype("M8[s]"))


@pytest.mark.skipif("CUDAExecutionProvider" in ort.get_available_providers(), reason="a CUDA driver is here")
def test_cuda_values_without_a_cuda_driver_are_a_clear_error():
    a = np.zeros((2, 2), np.float32)
    with pytest.raises(ort.EPFail, match="CUDA execution provider is not available on device 0"):
        ort.OrtValue.ortvalue_from_numpy(a, "cuda", 0)
    with pytest.raises(ort.EPFail, match="not available on device 1"):
        ort.OrtValue.ortvalue_from_shape_and_type([2], np.float32, "cuda", 1)
