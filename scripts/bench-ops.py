#!/usr/bin/env python3
"""Single-operator latency, ours against onnxruntime, on shapes taken from the benchmark models.

    cargo build --release -p onnx-runtime-cli
    scripts/bench-ops.py [--threads 1] [--iterations 200] [--only NAME ...] [--cli PATH]

Each case is a one-node ONNX model (constant weights, random normal input) written to a temporary
folder. onnxruntime (python, CPUExecutionProvider, intra_op_num_threads=N, sequential) runs 20
warm-up and I timed runs; then `onnx-runtime bench MODEL --threads N --warmup 20 --iterations I
--input x=FILE.npy`. Prints the median latency of each in ms and ours/ORT. Not part of
scripts/check: the numbers are for docs/benchmarks/ (quote the machine and load with them).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def _model(name, nodes, x_shape, y_shape, inits, opset=13):
    g = helper.make_graph(
        nodes,
        name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, x_shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, y_shape)],
        inits,
    )
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def conv(cin, cout, hw, k, s=1, relu=True, pad=None, group=1):
    """Conv (+ Relu) with pad k//2 (or `pad`), as in the CNNs' 3x3 and 1x1 layers; `group`
    for ShuffleNet's grouped pointwise and depthwise layers."""
    rng = np.random.default_rng(0)
    p = k // 2 if pad is None else pad
    w = numpy_helper.from_array(
        (rng.standard_normal((cout, cin // group, k, k)) * 0.1).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(cout).astype(np.float32), "B")
    out = "t" if relu else "y"
    nodes = [helper.make_node("Conv", ["x", "W", "B"], [out], kernel_shape=[k, k], strides=[s, s], pads=[p] * 4,
                              group=group)]
    if relu:
        nodes.append(helper.make_node("Relu", ["t"], ["y"]))
    ho = (hw + 2 * p - k) // s + 1
    return _model("conv", nodes, [1, cin, hw, hw], [1, cout, ho, ho], [w, b]), [1, cin, hw, hw]


def matmul(m, k, n):
    """MatMul by a constant [k, n] weight (transformer projections at sequence m)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) * 0.1).astype(np.float32), "W")
    node = helper.make_node("MatMul", ["x", "W"], ["y"])
    return _model("matmul", [node], [1, m, k], [1, m, n], [w]), [1, m, k]


def gemm(m, k, n):
    """Gemm with transB=1 and a bias (a classifier head)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((n, k)) * 0.1).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "B")
    node = helper.make_node("Gemm", ["x", "W", "B"], ["y"], transB=1)
    return _model("gemm", [node], [m, k], [m, n], [w, b]), [m, k]


def lstm(seq, inp, hidden):
    """Bidirectional LSTM, batch 1 (an OCR model's sequence head)."""
    rng = np.random.default_rng(0)
    arr = lambda *s: (rng.standard_normal(s) * 0.05).astype(np.float32)  # noqa: E731
    inits = [
        numpy_helper.from_array(arr(2, 4 * hidden, inp), "W"),
        numpy_helper.from_array(arr(2, 4 * hidden, hidden), "R"),
        numpy_helper.from_array(arr(2, 8 * hidden), "B"),
    ]
    node = helper.make_node("LSTM", ["x", "W", "R", "B"], ["y"], hidden_size=hidden, direction="bidirectional")
    return _model("lstm", [node], [seq, 1, inp], [seq, 2, 1, hidden], inits, opset=14), [seq, 1, inp]


def maxpool(c, hw, k, s, pad, ceil):
    """MaxPool (SqueezeNet's 3x3 stride-2 downsampling, Inception's 3x3 stride-1 branch)."""
    node = helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4,
                            ceil_mode=int(ceil))
    return _model("maxpool", [node], [1, c, hw, hw], None, []), [1, c, hw, hw]


def avgpool(c, hw, k, s, pad):
    """AveragePool (Inception's 3x3 stride-1 branch; count_include_pad 0)."""
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[k, k], strides=[s, s], pads=[pad] * 4)
    return _model("avgpool", [node], [1, c, hw, hw], None, []), [1, c, hw, hw]


def bias_gelu_matmul(m, k, n):
    """MatMul by a constant weight, bias Add, then Gelu (a transformer feed-forward layer)."""
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array((rng.standard_normal((k, n)) * 0.1).astype(np.float32), "W")
    b = numpy_helper.from_array(rng.standard_normal(n).astype(np.float32), "B")
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["t"]),
        helper.make_node("Add", ["t", "B"], ["u"]),
        helper.make_node("Gelu", ["u"], ["y"], domain="com.microsoft"),
    ]
    m_ = _model("matmul_bias_gelu", nodes, [1, m, k], [1, m, n], [w, b])
    m_.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    return m_, [1, m, k]


def mlp_chain(m, d, hidden, layers):
    """`layers` BERT feed-forward blocks, x [1, m, d] -> MatMul [d, hidden] -> Relu -> MatMul
    [hidden, d], each with its own weights, so the weights (8 * d * hidden bytes per layer)
    stream from L3 or memory as in a whole model rather than staying in L2."""
    rng = np.random.default_rng(0)
    nodes, inits, cur = [], [], "x"
    for i in range(layers):
        for j, (k, n) in enumerate([(d, hidden), (hidden, d)]):
            w = f"W{i}_{j}"
            inits.append(numpy_helper.from_array(
                (rng.standard_normal((k, n)) * 0.05).astype(np.float32), w))
            out = "y" if (i == layers - 1 and j == 1) else f"t{i}_{j}"
            nodes.append(helper.make_node("MatMul", [cur, w], [out if j == 1 else out + "m"]))
            if j == 0:
                nodes.append(helper.make_node("Relu", [out + "m"], [out]))
            cur = out
    return _model("mlp_chain", nodes, [1, m, d], [1, m, d], inits), [1, m, d]


def softmax(heads, seq):
    """Softmax over the last axis of attention scores [1, heads, seq, seq]."""
    node = helper.make_node("Softmax", ["x"], ["y"], axis=-1)
    shape = [1, heads, seq, seq]
    return _model("softmax", [node], shape, shape, []), shape


CASES = {
    # ShuffleNet (the onnx wheel's light_shufflenet): grouped pointwise and depthwise layers.
    "shuf_g4_1x1_24_112_56": lambda: conv(24, 112, 56, 1, group=4),
    "shuf_g4_1x1_136_136_28": lambda: conv(136, 136, 28, 1, group=4),
    "shuf_g4_1x1_272_272_14": lambda: conv(272, 272, 14, 1, group=4),
    "shuf_g4_1x1_544_544_7": lambda: conv(544, 544, 7, 1, group=4),
    "shuf_dw3x3_136_28": lambda: conv(136, 136, 28, 3, relu=False, group=136),
    "shuf_dw3x3s2_112_56": lambda: conv(112, 112, 56, 3, s=2, relu=False, group=112),
    "shuf_dw3x3_272_14": lambda: conv(272, 272, 14, 3, relu=False, group=272),
    "conv3x3_16_64_55": lambda: conv(16, 64, 55, 3),
    "conv3x3_64_64_56": lambda: conv(64, 64, 56, 3),
    "conv3x3_32_128_27": lambda: conv(32, 128, 27, 3),
    "conv3x3_64_256_13": lambda: conv(64, 256, 13, 3),
    "conv3x3_256_256_14": lambda: conv(256, 256, 14, 3),
    "conv3x3_512_512_7": lambda: conv(512, 512, 7, 3),
    "conv3x3s2_3_64_224": lambda: conv(3, 64, 224, 3, s=2),
    # SqueezeNet 1.1's stem: 3x3 stride 2, unpadded, 224 -> 111.
    "conv3x3s2p0_3_64_224": lambda: conv(3, 64, 224, 3, s=2, pad=0),
    "conv1x1_64_256_56": lambda: conv(64, 256, 56, 1, relu=False),
    "conv1x1_16_64_55": lambda: conv(16, 64, 55, 1),
    "conv1x1_128_16_55": lambda: conv(128, 16, 55, 1),
    "conv1x1_2048_512_7": lambda: conv(2048, 512, 7, 1),
    "conv1x1_512_1000_13": lambda: conv(512, 1000, 13, 1),
    # ResNet-50 (batch 1, 224): the stem, each stage's 3x3 and 1x1 layers, a strided 3x3 and a
    # strided 1x1 downsample.
    "r50_conv7x7s2_3_64_224": lambda: conv(3, 64, 224, 7, s=2),
    "r50_conv3x3_64_64_56": lambda: conv(64, 64, 56, 3),
    "r50_conv3x3_128_128_28": lambda: conv(128, 128, 28, 3),
    "r50_conv3x3_256_256_14": lambda: conv(256, 256, 14, 3),
    "r50_conv3x3_512_512_7": lambda: conv(512, 512, 7, 3),
    "r50_conv3x3s2_128_128_56": lambda: conv(128, 128, 56, 3, s=2),
    "r50_conv1x1_64_64_56": lambda: conv(64, 64, 56, 1),
    "r50_conv1x1_256_64_56": lambda: conv(256, 64, 56, 1),
    "r50_conv1x1_64_256_56": lambda: conv(64, 256, 56, 1, relu=False),
    "r50_conv1x1_512_128_28": lambda: conv(512, 128, 28, 1),
    "r50_conv1x1_128_512_28": lambda: conv(128, 512, 28, 1, relu=False),
    "r50_conv1x1_1024_256_14": lambda: conv(1024, 256, 14, 1),
    "r50_conv1x1_256_1024_14": lambda: conv(256, 1024, 14, 1, relu=False),
    "r50_conv1x1_2048_512_7": lambda: conv(2048, 512, 7, 1),
    "r50_conv1x1_512_2048_7": lambda: conv(512, 2048, 7, 1, relu=False),
    "r50_conv1x1s2_256_512_56": lambda: conv(256, 512, 56, 1, s=2, relu=False),
    # The last stage's downsampling to 7 x 7 (49 positions).
    "r50_conv3x3s2_512_512_14": lambda: conv(512, 512, 14, 3, s=2),
    "r50_conv1x1s2_1024_2048_14": lambda: conv(1024, 2048, 14, 1, s=2, relu=False),
    "matmul_16_384_1536": lambda: matmul(16, 384, 1536),
    "matmul_16_1536_384": lambda: matmul(16, 1536, 384),
    "gemm_20_1024_8210": lambda: gemm(20, 1024, 8210),
    "lstm_20_512_512": lambda: lstm(20, 512, 512),
    "maxpool3x3s2_96_109": lambda: maxpool(96, 109, 3, 2, 0, True),
    "maxpool3x3s1_192_28": lambda: maxpool(192, 28, 3, 1, 1, False),
    "avgpool3x3s1_256_28": lambda: avgpool(256, 28, 3, 1, 1),
    "avgpool3x3s1_576_14": lambda: avgpool(576, 14, 3, 1, 1),
    "matmul_bias_gelu_16_384_1536": lambda: bias_gelu_matmul(16, 384, 1536),
    "softmax_12_16": lambda: softmax(12, 16),
    "mlp_16_384_1536_x4": lambda: mlp_chain(16, 384, 1536, 4),
}


def conv_gflop(model) -> float | None:
    """Multiply-adds x 2 of a model's Conv nodes (None when it has none), in GFLOP."""
    inits = {t.name: list(t.dims) for t in model.graph.initializer}
    out = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    total = 0
    for n in model.graph.node:
        if n.op_type == "Conv":
            w = inits[n.input[1]]
            total += 2 * int(np.prod(w)) * int(np.prod(out[2:])) * out[0]
    return total / 1e9 if total else None


def ort_median(path: Path, x: np.ndarray, threads: int, iters: int) -> float:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    for _ in range(20):
        s.run(None, {"x": x})
    ts = []
    for _ in range(iters):
        t0 = time.perf_counter()
        s.run(None, {"x": x})
        ts.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(ts))


def ours_median(cli: Path, path: Path, xfile: Path, threads: int, iters: int) -> float:
    cmd = [str(cli), "bench", str(path), "--threads", str(threads), "--warmup", "20",
           "--iterations", str(iters), "--input", f"x={xfile}"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    m = re.search(r"latency ms:.*?\bp50\s+([0-9.]+)", out)
    if not m:
        sys.exit(f"could not read the latency from: {' '.join(cmd)}\n{out}")
    return float(m.group(1))


def main() -> None:
    root = Path(__file__).resolve().parent.parent
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", type=Path, default=root / "target/release/onnx-runtime")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--iterations", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=1,
                    help="alternations of ORT and ours per case (each side: median of round medians)")
    ap.add_argument("--only", nargs="*", choices=sorted(CASES), help="cases to run (default: all)")
    args = ap.parse_args()
    names = args.only or list(CASES)
    print("| case | threads | ORT ms | ours ms | ours/ORT | ORT GFLOP/s/core | ours GFLOP/s/core |\n"
          "|---|---|---|---|---|---|---|")
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            model, x_shape = CASES[name]()
            path, xfile = Path(tmp) / f"{name}.onnx", Path(tmp) / f"{name}_x.npy"
            onnx.save(model, path)
            x = np.random.default_rng(1).standard_normal(x_shape).astype(np.float32)
            np.save(xfile, x)
            ort_r, ours_r = [], []
            for _ in range(args.rounds):
                ort_r.append(ort_median(path, x, args.threads, args.iterations))
                ours_r.append(ours_median(args.cli, path, xfile, args.threads, args.iterations))
            ort_ms, ours_ms = float(np.median(ort_r)), float(np.median(ours_r))
            gf = conv_gflop(model)
            rate = (lambda ms: f"{gf / (ms / 1e3) / args.threads:.1f}") if gf else (lambda ms: "")
            print(f"| {name} | {args.threads} | {ort_ms:.3f} | {ours_ms:.3f} | {ours_ms / ort_ms:.2f} "
                  f"| {rate(ort_ms)} | {rate(ours_ms)} |", flush=True)


if __name__ == "__main__":
    main()
