"""Writes onnxruntime's float32 and float16 Sigmoid and Tanh over a dense input sweep, for
tests/activation_reference.rs.

Inputs (float32): every 4093rd bit pattern of all 2^32 (every sign, exponent and a spread of
mantissas: large magnitudes, subnormals), every pattern within 512 ulp of the points where
onnxruntime's rational approximations change behaviour (the clamps at +-18 and +-9, where the
logistic's result first rounds below 0 near -16.6 and where it overshoots 1 near 17.6, where
tanh overshoots 1 near 8.5, the smallest normal, 1e-30 where tanh's intermediate goes
subnormal, 0), the subnormals nearest 0, and +-0, +-inf, quiet and signalling NaNs of both
signs. float16: all 65536 bit patterns.

Ops: float32 Sigmoid, Tanh, Gelu (approximate="tanh", opset 20), com.microsoft FastGelu and
com.microsoft QuickGelu (alpha 1.702); float16 Sigmoid and Tanh (see OPS).

File layout (little-endian): for float32 then float16, a u32 count n, then the n inputs, then
n outputs per op in OPS order (4 bytes each for float32, 2 for float16), then the onnxruntime
version as UTF-8 to the end of the file.

Usage: python3 make_sweep.py OUT.bin
"""
import sys

import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper


def f32_inputs():
    bits = [np.arange(0, 2**32, 4093, dtype=np.uint64).astype(np.uint32)]
    centres = [18.0, 9.0, 16.6, 17.6, 8.5, 1.1754944e-38, 1e-30, 0.0]
    for c in centres:
        for s in (c, -c):
            b = int(np.array(s, np.float32).view(np.uint32))
            lo, hi = max(b - 512, 0), min(b + 512, 2**32 - 1)
            if c == 0.0:
                lo = b
            bits.append(np.arange(lo, hi + 1, dtype=np.uint64).astype(np.uint32))
    specials = [0x0000_0000, 0x8000_0000, 0x7F80_0000, 0xFF80_0000, 0x7FC0_0000, 0xFFC0_0000,
                0x7FC0_1234, 0x7F80_0001, 0xFF80_0001, 0x7F7F_FFFF, 0xFF7F_FFFF, 0x0000_0001,
                0x8000_0001, 0x007F_FFFF, 0x807F_FFFF]
    bits.append(np.array(specials, np.uint32))
    return np.unique(np.concatenate(bits)).view(np.float32)


# (op, domain, opset, attributes) per dtype, in file order.
OPS = {
    np.float32: [("Sigmoid", "", 13, {}), ("Tanh", "", 13, {}),
                 ("Gelu", "", 20, {"approximate": "tanh"}), ("FastGelu", "com.microsoft", 1, {}),
                 ("QuickGelu", "com.microsoft", 1, {"alpha": 1.702})],
    np.float16: [("Sigmoid", "", 13, {}), ("Tanh", "", 13, {})],
}


def run(op, domain, opset, attrs, dtype, x):
    elem = TensorProto.FLOAT if dtype == np.float32 else TensorProto.FLOAT16
    node = helper.make_node(op, ["x"], ["y"], domain=domain, **attrs)
    graph = helper.make_graph([node], op, [helper.make_tensor_value_info("x", elem, [None])],
                              [helper.make_tensor_value_info("y", elem, [None])])
    imports = [helper.make_opsetid("", opset if not domain else 20)]
    if domain:
        imports.append(helper.make_opsetid(domain, opset))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 9
    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so,
                                providers=["CPUExecutionProvider"])
    y = sess.run(None, {"x": x})[0]
    assert y.dtype == dtype and y.shape == x.shape
    return y


def main():
    out = sys.argv[1]
    x32 = f32_inputs()
    x16 = np.arange(0, 2**16, dtype=np.uint32).astype(np.uint16).view(np.float16)
    with open(out, "wb") as f:
        for x, dtype in ((x32, np.float32), (x16, np.float16)):
            f.write(np.array([len(x)], "<u4").tobytes())
            outs = [run(*o, dtype, x) for o in OPS[dtype]]
            for a in [x] + outs:
                f.write(a.astype(a.dtype.newbyteorder("<")).tobytes())
        f.write(f"onnxruntime {ort.__version__}, onnx {onnx.__version__}".encode())


if __name__ == "__main__":
    main()
