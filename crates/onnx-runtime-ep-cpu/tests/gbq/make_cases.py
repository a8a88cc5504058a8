"""Reference cases for the CPU kernel of com.microsoft GatherBlockQuantized, as JSON for
tests/gather_block_quantized_reference.rs. Each case is one node on seeded random inputs (data,
scales and zero points as initializers, as onnxruntime wants them); the expected output comes
from onnxruntime (CPU, graph optimizations off).

Usage: python3 make_cases.py OUT.json
"""
import json
import sys

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(20261202)


def tj(a):
    t = numpy_helper.from_array(np.asarray(a).copy(order="C"))
    return {"dtype": t.data_type, "shape": list(t.dims), "hex": t.raw_data.hex()}


def attr_j(v):
    return {"t": "i", "v": int(v)}


def run_ort(inputs, attrs):
    """inputs: data, indices, scales, zero_points (or None); all but indices are initializers."""
    names = ["data", "indices", "scales", "zp"]
    used = [n if a is not None else "" for n, a in zip(names, inputs)]
    while used and used[-1] == "":
        used.pop()
    node = helper.make_node("GatherBlockQuantized", used, ["y"], domain="com.microsoft", **attrs)
    inits = [numpy_helper.from_array(np.ascontiguousarray(a), n)
             for n, a in zip(names, inputs) if a is not None and n != "indices"]
    idx = inputs[1]
    g_in = [helper.make_tensor_value_info("indices", helper.np_dtype_to_tensor_dtype(idx.dtype),
                                          idx.shape)]
    graph = helper.make_graph([node], "gbq", g_in, [onnx.ValueInfoProto(name="y")],
                              initializer=inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 10
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {"indices": idx})[0]


SCALE_TYPES = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def scales_for(shape, st):
    return (rng.random(shape) * 0.2 + 0.01).astype(SCALE_TYPES[st])


def indices(shape, dim, itype, negative=True):
    lo = -dim if negative else 0
    return rng.integers(lo, dim, size=shape).astype(itype)


SKIPPED = []


def case(name, inputs, attrs, rtol=1e-5, atol=1e-6):
    try:
        out = run_ort(inputs, attrs)
    except ort.capi.onnxruntime_pybind11_state.NotImplemented:
        # onnxruntime has no CPU kernel for this type combination (e.g. bfloat16 scales).
        SKIPPED.append(name)
        return None
    return {"name": name, "op": "GatherBlockQuantized", "domain": "com.microsoft", "opset": 1,
            "inputs": [None if a is None else tj(a) for a in inputs], "n_outputs": 1,
            "attrs": {k: attr_j(v) for k, v in attrs.items()}, "outputs": [tj(out)],
            "rtol": rtol, "atol": atol, "source": "onnxruntime"}


def uint8_cases():
    out = []
    for bits in (8, 4, 2):
        for block in (16, 32, 64, 128):
            for vocab, dim in ((37, 96), (5, 256)):
                per = 8 // bits
                data = rng.integers(0, 256, (vocab, dim // per), dtype=np.uint8)
                kb = -(-dim // block)
                for st in ("f32", "f16", "bf16"):
                    sc = scales_for((vocab, kb), st)
                    for with_zp in (False, True):
                        zp = None
                        if with_zp:
                            zp = rng.integers(0, 256, (vocab, -(-kb * bits // 8)), dtype=np.uint8)
                        for itype in (np.int64, np.int32):
                            idx = indices((2, 3) if itype == np.int64 else (4,), vocab, itype)
                            out.append(case(
                                f"u8_b{bits}_blk{block}_{vocab}x{dim}_{st}_zp{int(with_zp)}_"
                                f"{np.dtype(itype).name}",
                                [data, idx, sc, zp],
                                {"bits": bits, "block_size": block, "quantize_axis": 1,
                                 "gather_axis": 0}))
    # A rank-3 table (onnxruntime quantizes uint8 data along the last axis only).
    for bits in (8, 4):
        data = rng.integers(0, 256, (6, 3, 40 * bits // 8), dtype=np.uint8)
        sc = scales_for((6, 3, 3), "f32")
        zp = rng.integers(0, 256, (6, 3, -(-3 * bits // 8)), dtype=np.uint8)
        out.append(case(f"u8_b{bits}_rank3", [data, indices((5,), 6, np.int64), sc, zp],
                        {"bits": bits, "block_size": 16, "quantize_axis": -1, "gather_axis": 0}))
    return out


def int4_cases():
    out = []
    for dt, lo, hi in ((ml_dtypes.int4, -8, 8), (ml_dtypes.uint4, 0, 16)):
        tag = "i4" if dt == ml_dtypes.int4 else "u4"
        for shape, g, q, block in (
            ((33, 80), 0, 1, 16),       # embedding table, K not a multiple of the block
            ((33, 80), 0, -1, 32),
            ((64, 20), 1, 0, 16),       # gather columns, quantize rows
            ((4, 50, 6), 1, 1, 16),     # gather and quantize the same axis
            ((4, 7, 130), -2, 2, 64),
            ((3, 5, 7, 40), 0, 3, 128),
        ):
            data = rng.integers(lo, hi, shape).astype(dt)
            r = len(shape)
            qa, ga = q % r, g % r
            s_shape = list(shape)
            s_shape[qa] = -(-shape[qa] // block)
            for st in ("f32", "f16"):
                sc = scales_for(s_shape, st)
                for with_zp in (False, True):
                    zp = rng.integers(lo, hi, s_shape).astype(dt) if with_zp else None
                    idx = indices((2, 2), shape[ga], np.int64)
                    out.append(case(
                        f"{tag}_{'x'.join(map(str, shape))}_g{g}_q{q}_blk{block}_{st}_zp{int(with_zp)}",
                        [data, idx, sc, zp],
                        {"block_size": block, "quantize_axis": q, "gather_axis": g}))
        # A scalar index drops the gathered axis.
        data = rng.integers(lo, hi, (9, 32)).astype(dt)
        sc = scales_for((9, 2), "f32")
        out.append(case(f"{tag}_scalar_index", [data, np.array(-3, np.int64), sc, None],
                        {"block_size": 16, "quantize_axis": 1}))
    return out


def float8_cases():
    out = []
    for dt, tag in ((ml_dtypes.float8_e4m3fn, "e4m3fn"), (ml_dtypes.float8_e5m2, "e5m2"),
                    (ml_dtypes.float8_e4m3fnuz, "e4m3fnuz"), (ml_dtypes.float8_e5m2fnuz, "e5m2fnuz"),
                    (ml_dtypes.float4_e2m1fn, "f4e2m1")):
        data = (rng.standard_normal((12, 64)) * 2).astype(dt)
        for block, s_shape in ((32, (12, 2)), (0, (12, 1)), (16, (1, 4))):
            sc = scales_for(s_shape, "f32")
            out.append(case(f"{tag}_blk{block}_s{'x'.join(map(str, s_shape))}",
                            [data, indices((3,), 12, np.int64), sc, None],
                            {"block_size": block, "quantize_axis": 1, "gather_axis": 0}))
    return out


def main():
    cases = [c for c in uint8_cases() + int4_cases() + float8_cases() if c is not None]
    if SKIPPED:
        print(f"{len(SKIPPED)} variants onnxruntime has no CPU kernel for, e.g. {SKIPPED[0]}",
              file=sys.stderr)
    with open(sys.argv[1], "w") as f:
        json.dump(cases, f)


if __name__ == "__main__":
    main()
