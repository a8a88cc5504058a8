"""Writes reference cases for the CPU `nn` kernels as JSON (read by tests/nn_reference.rs).

Two sources:
- the ONNX backend node tests of the nn ops (single-node models, expected outputs as shipped);
- com.microsoft ops (no backend tests): small random cases whose expected outputs come from
  onnxruntime (see ms_cases.py);
- RNN, GRU and LSTM on random inputs, expected outputs from onnxruntime (see rnn_cases.py).

Usage: python3 make_cases.py OUT.json [PREFIX ...]
"""
import json
import os
import sys

import numpy as np
import onnx
from onnx import numpy_helper

NN_PREFIXES = [
    "test_matmul", "test_gemm", "test_conv", "test_convtranspose", "test_maxpool",
    "test_averagepool", "test_globalaveragepool", "test_globalmaxpool", "test_lppool",
    "test_globallppool", "test_batchnorm", "test_instancenorm", "test_layer_normalization",
    "test_group_normalization", "test_rms_normalization", "test_lrn", "test_mvn",
    "test_dropout", "test_training_dropout", "test_resize", "test_upsample", "test_basic_conv",
    "test_rnn", "test_simple_rnn", "test_gru", "test_lstm", "test_quantizelinear",
    "test_dequantizelinear", "test_dynamicquantizelinear", "test_qlinearconv",
    "test_qlinearmatmul", "test_matmulinteger", "test_convinteger", "test_basic_convinteger",
    "test_col2im", "test_dft", "test_stft", "test_hannwindow", "test_hammingwindow",
    "test_blackmanwindow", "test_melweightmatrix", "test_attention", "test_rotary_embedding",
    "test_basic_deform", "test_deform",
]


def tensor_json(t: onnx.TensorProto):
    if t.data_type == onnx.TensorProto.STRING:
        return None
    if not t.HasField("raw_data"):
        arr = numpy_helper.to_array(t)
        t = numpy_helper.from_array(arr)
        if not t.HasField("raw_data"):
            return None
    return {"dtype": t.data_type, "shape": list(t.dims), "hex": t.raw_data.hex()}


def attr_json(a: onnx.AttributeProto):
    A = onnx.AttributeProto
    if a.type == A.INT:
        return {"t": "i", "v": a.i}
    if a.type == A.FLOAT:
        return {"t": "f", "v": float(a.f)}
    if a.type == A.STRING:
        return {"t": "s", "v": a.s.decode()}
    if a.type == A.INTS:
        return {"t": "is", "v": list(a.ints)}
    if a.type == A.FLOATS:
        return {"t": "fs", "v": [float(x) for x in a.floats]}
    if a.type == A.STRINGS:
        return {"t": "ss", "v": [s.decode() for s in a.strings]}
    if a.type == A.TENSOR:
        return {"t": "t", "v": tensor_json(a.t)}
    return None


def backend_cases(prefixes):
    root = os.path.join(os.path.dirname(onnx.__file__), "backend/test/data/node")
    cases = []
    for name in sorted(os.listdir(root)):
        if not any(name.startswith(p) for p in prefixes) or "expanded" in name:
            continue
        d = os.path.join(root, name)
        model = onnx.load(os.path.join(d, "model.onnx"))
        g = model.graph
        if len(g.node) != 1:
            continue
        node = g.node[0]
        opset = {o.domain: o.version for o in model.opset_import}
        ds = os.path.join(d, "test_data_set_0")
        feeds = {}
        for i, gi in enumerate(g.input):
            p = os.path.join(ds, f"input_{i}.pb")
            if os.path.exists(p):
                feeds[gi.name] = onnx.load_tensor(p)
        for init in g.initializer:
            feeds[init.name] = init
        outs = {}
        for i, go in enumerate(g.output):
            p = os.path.join(ds, f"output_{i}.pb")
            if os.path.exists(p):
                outs[go.name] = onnx.load_tensor(p)
        attrs = {a.name: attr_json(a) for a in node.attribute}
        if any(v is None for v in attrs.values()):
            continue
        ins = [tensor_json(feeds[n]) if n else None for n in node.input]
        outs_j = [tensor_json(outs[n]) if n in outs else None for n in node.output]
        cases.append({
            "name": name, "op": node.op_type, "domain": node.domain,
            "opset": opset.get(node.domain, opset.get("ai.onnx", 1)),
            "attrs": attrs, "inputs": ins, "n_outputs": len(node.output), "outputs": outs_j,
            "rtol": 1e-3, "atol": 1e-5,
        })
    return cases


def main():
    out = sys.argv[1]
    prefixes = sys.argv[2:] or NN_PREFIXES
    cases = backend_cases(prefixes)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import ms_cases
    import rnn_cases

    cases += ms_cases.cases()
    cases += rnn_cases.cases()
    with open(out, "w") as f:
        json.dump(cases, f)
    print(f"{len(cases)} cases -> {out}")


if __name__ == "__main__":
    main()
