"""PyTorch CUDA tensors in and out of a CUDA session through DLPack and IO binding, without a
host copy, against the CPU session's results.

SKIPPED ON CI: these tests need a CUDA GPU, PyTorch built with CUDA, and the CUDA driver
library (CUDAExecutionProvider available); the CI machines have none of them. Run them on a
GPU machine with `python3 -m pytest -q crates/onnx-runtime-python/tests/test_gpu_dlpack.py`.
"""

from __future__ import annotations

import gc

import numpy as np
import pytest
from conftest import make_model, tensor
from onnx import helper, numpy_helper

import onnx_runtime_rs as ort

torch = pytest.importorskip("torch", reason="needs PyTorch (skipped on CI: no GPU)")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() or "CUDAExecutionProvider" not in ort.get_available_providers(),
    reason="needs a CUDA GPU, PyTorch with CUDA and the CUDA driver library (skipped on CI: no GPU)",
)

W = (np.arange(32, dtype=np.float32).reshape(8, 4) - 16) / 16


@pytest.fixture(scope="module")
def model() -> bytes:
    """y = Relu(x + b), z = MatMul(x, W): x float [N, 8], b float [8], W [8, 4]."""
    return make_model(
        [
            helper.make_node("Add", ["x", "b"], ["s"]),
            helper.make_node("Relu", ["s"], ["y"]),
            helper.make_node("MatMul", ["x", "W"], ["z"]),
        ],
        [tensor("x", shape=["N", 8]), tensor("b", shape=[8])],
        [tensor("y", shape=["N", 8]), tensor("z", shape=["N", 4])],
        [numpy_helper.from_array(W, "W")],
    )


@pytest.fixture(scope="module")
def gpu(model):
    s = ort.InferenceSession(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    assert s.get_providers()[0] == "CUDAExecutionProvider"
    return s


@pytest.fixture(scope="module")
def cpu(model):
    return ort.InferenceSession(model, providers=["CPUExecutionProvider"])


def inputs(seed: int, n: int = 5):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(n, 8, device="cuda", generator=g)
    b = torch.randn(8, device="cuda", generator=g)
    return x, b


def expected(cpu, x, b):
    return cpu.run(None, {"x": x.cpu().numpy(), "b": b.cpu().numpy()})


# float32 MatMul on the GPU may sum in another order than the CPU (TF32 is off by default).
TOL = dict(rtol=1e-5, atol=1e-5)


def test_torch_tensors_in_and_out_without_a_host_copy(gpu, cpu):
    for seed in range(3):
        x, b = inputs(seed, n=seed + 2)
        xv, bv = ort.from_dlpack(x), ort.OrtValue.from_dlpack(b)
        assert (xv.device_name(), xv.device_id()) == ("cuda", 0)
        assert xv.data_ptr() == x.data_ptr() and bv.data_ptr() == b.data_ptr()
        binding = gpu.io_binding()
        binding.bind_ortvalue_input("x", xv)
        binding.bind_ortvalue_input("b", bv)
        binding.bind_output("y", "cuda", 0)
        binding.bind_output("z", "cuda", 0)
        gpu.run_with_iobinding(binding)
        yv, zv = binding.get_outputs()
        assert yv.device_name() == "cuda" and yv.__dlpack_device__() == (2, 0)
        y, z = torch.from_dlpack(yv), torch.from_dlpack(zv)
        assert y.is_cuda and y.data_ptr() == yv.data_ptr()
        want_y, want_z = expected(cpu, x, b)
        np.testing.assert_allclose(y.cpu().numpy(), want_y, **TOL)
        np.testing.assert_allclose(z.cpu().numpy(), want_z, **TOL)
        np.testing.assert_allclose(binding.copy_outputs_to_cpu()[1], want_z, **TOL)


def test_raw_pointers_and_bound_output_buffers(gpu, cpu):
    x, b = inputs(7)
    want_y, want_z = expected(cpu, x, b)
    binding = gpu.io_binding()
    binding.bind_input("x", "cuda", 0, np.float32, list(x.shape), x.data_ptr())
    binding.bind_input("b", "cuda", 0, np.float32, list(b.shape), b.data_ptr())
    y = torch.full((5, 8), float("nan"), device="cuda")
    binding.bind_output("y", "cuda", 0, np.float32, list(y.shape), y.data_ptr())
    z = torch.full((5, 4), float("nan"), device="cuda")
    binding.bind_ortvalue_output("z", ort.from_dlpack(z))
    torch.cuda.synchronize()  # the raw-pointer inputs must be final: nothing orders them
    gpu.run_with_iobinding(binding)
    np.testing.assert_allclose(y.cpu().numpy(), want_y, **TOL)
    np.testing.assert_allclose(z.cpu().numpy(), want_z, **TOL)


def test_torch_work_on_its_stream_is_ordered_before_the_run(gpu, cpu):
    # x is written by a kernel queued on a side stream just before the hand-over; DLPack's
    # stream argument makes the session's stream wait for it.
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        x = torch.zeros(4096, 8, device="cuda")
        for _ in range(20):
            x = x + 0.5
        b = torch.ones(8, device="cuda")
        xv, bv = ort.from_dlpack(x), ort.from_dlpack(b)
    binding = gpu.io_binding()
    binding.bind_ortvalue_input("x", xv)
    binding.bind_ortvalue_input("b", bv)
    binding.bind_output("y", "cuda", 0)
    gpu.run_with_iobinding(binding)
    (y,) = binding.copy_outputs_to_cpu()
    np.testing.assert_array_equal(y, np.full((4096, 8), 11.0, np.float32))


def test_values_outlive_the_torch_names_and_numpy_uploads(gpu, cpu):
    x, b = inputs(3)
    want_y, _ = expected(cpu, x, b)
    xv, bv = ort.from_dlpack(x), ort.from_dlpack(b)
    del x, b
    gc.collect()
    torch.cuda.empty_cache()
    binding = gpu.io_binding()
    binding.bind_ortvalue_input("x", xv)
    binding.bind_ortvalue_input("b", bv)
    binding.bind_output("y", "cpu")
    gpu.run_with_iobinding(binding)
    np.testing.assert_allclose(binding.copy_outputs_to_cpu()[0], want_y, **TOL)
    # A NumPy array uploaded by ortvalue_from_numpy, read back, and handed to torch.
    a = np.arange(40, dtype=np.float32).reshape(5, 8)
    av = ort.OrtValue.ortvalue_from_numpy(a, "cuda", 0)
    assert av.device_name() == "cuda"
    np.testing.assert_array_equal(av.numpy(), a)
    np.testing.assert_array_equal(torch.from_dlpack(av).cpu().numpy(), a)


def test_device_misuse_is_a_clear_error(gpu):
    x, _ = inputs(0)
    with pytest.raises(ValueError, match="not compact row-major"):
        ort.from_dlpack(x.t())
    binding = gpu.io_binding()
    with pytest.raises(ort.InvalidArgument, match="runs on cuda:0"):
        binding.bind_output("y", "cuda", 1)
    cpu_only = ort.InferenceSession(gpu._model, providers=["CPUExecutionProvider"])
    cb = cpu_only.io_binding()
    with pytest.raises(ort.InvalidArgument, match="CPU only"):
        cb.bind_ortvalue_input("x", ort.from_dlpack(x))


def test_an_output_bound_to_its_input_value_is_written_into_it():
    """A KV cache bound as both an input and an output (the same CUDA OrtValue, as ORT users
    write decoders): the run writes the output into that memory; nothing is copied after."""
    model = make_model(
        [helper.make_node("Add", ["cache", "x"], ["next"])],
        [tensor("cache", shape=[4, 3]), tensor("x", shape=[4, 3])],
        [tensor("next", shape=[4, 3])],
        [],
    )
    s = ort.InferenceSession(model, providers=["CUDAExecutionProvider", "CPUExecutionProvider"])
    cache = torch.zeros(4, 3, device="cuda")
    cv = ort.from_dlpack(cache)
    want = torch.zeros(4, 3, device="cuda")
    for seed in range(4):
        g = torch.Generator(device="cuda").manual_seed(seed)
        x = torch.randn(4, 3, device="cuda", generator=g)
        want += x
        binding = s.io_binding()
        binding.bind_ortvalue_input("cache", cv)
        binding.bind_ortvalue_input("x", ort.from_dlpack(x))
        binding.bind_ortvalue_output("next", cv)
        s.run_with_iobinding(binding)
        (out,) = binding.get_outputs()
        assert out is cv and out.data_ptr() == cache.data_ptr()
        assert torch.equal(cache, want), f"step {seed}"
