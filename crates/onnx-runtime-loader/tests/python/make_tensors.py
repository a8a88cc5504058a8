"""Writes, for every ONNX element type, a tensor stored in its typed field (NAME_typed.pb),
the same tensor as raw_data (NAME_raw.pb) and the little-endian packed bytes numpy/onnx give
for it (NAME.bin), into the folder argv[1]. Strings get NAME.txt (one per line) instead.
Also writes a map (map.pb) with its keys (map_keys.txt) and value count."""
import os
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(3)
DIMS = [3, 5]
N = 15


def values(dt):
    name = TensorProto.DataType.Name(dt)
    if dt in (TensorProto.INT4,):
        return rng.integers(-8, 8, N).tolist()
    if dt in (TensorProto.UINT4,):
        return rng.integers(0, 16, N).tolist()
    if dt == TensorProto.INT2:
        return rng.integers(-2, 2, N).tolist()
    if dt == TensorProto.UINT2:
        return rng.integers(0, 4, N).tolist()
    if dt == TensorProto.BOOL:
        return rng.integers(0, 2, N).astype(bool).tolist()
    if dt == TensorProto.FLOAT8E8M0:
        return (2.0 ** rng.integers(-10, 10, N)).tolist()
    if dt == TensorProto.FLOAT4E2M1:
        return rng.choice([0, 0.5, 1, 1.5, 2, 3, 4, 6, -1, -6], N).tolist()
    if dt in (TensorProto.COMPLEX64, TensorProto.COMPLEX128):
        return (rng.standard_normal(N) + 1j * rng.standard_normal(N)).tolist()
    if "FLOAT" in name or dt in (TensorProto.DOUBLE, TensorProto.BFLOAT16):
        return (rng.standard_normal(N) * 3).tolist()
    np_dt = helper.tensor_dtype_to_np_dtype(dt)
    info = np.iinfo(np_dt)
    return rng.integers(info.min, info.max, N, endpoint=True, dtype=np_dt).tolist()


def main(folder):
    for dt in TensorProto.DataType.values():
        if dt == TensorProto.UNDEFINED:
            continue
        name = TensorProto.DataType.Name(dt).lower()
        if dt == TensorProto.STRING:
            strings = [f"s{i}-é" for i in range(N)]
            t = helper.make_tensor("t", dt, DIMS, [s.encode() for s in strings])
            open(os.path.join(folder, name + "_typed.pb"), "wb").write(t.SerializeToString())
            open(os.path.join(folder, name + ".txt"), "w").write("\n".join(strings))
            continue
        typed = helper.make_tensor("t", dt, DIMS, values(dt))
        assert not typed.raw_data, name
        raw = numpy_helper.from_array(numpy_helper.to_array(typed), "t")
        assert raw.data_type == dt and raw.raw_data, name
        for suffix, t in (("_typed", typed), ("_raw", raw)):
            open(os.path.join(folder, name + suffix + ".pb"), "wb").write(t.SerializeToString())
        open(os.path.join(folder, name + ".bin"), "wb").write(raw.raw_data)

    keys = [3, -7, 11]
    m = numpy_helper.from_dict(
        {k: np.full([2], k, dtype=np.float32) for k in keys}, "m")
    open(os.path.join(folder, "map.pb"), "wb").write(m.SerializeToString())


if __name__ == "__main__":
    main(sys.argv[1])
