"""Reference cases for the CPU kernels of the quantization, PRelu and ai.onnx.ml ops, as JSON
for tests/quant_ml_reference.rs. Each case is one node on seeded random inputs; the expected
outputs come from onnxruntime (CPU, graph optimizations off) or, where onnxruntime lacks the
op or the variant, from float64 numpy math named in the case.

Usage: python3 make_cases.py OUT.json
"""
import json
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

rng = np.random.default_rng(20261130)


def tj(a):
    """A numpy array as {dtype, shape, hex} (raw little-endian bytes), or {shape, strings}."""
    a = np.asarray(a)
    if a.dtype.kind in "OUS":
        return {"dtype": TensorProto.STRING, "shape": list(a.shape),
                "strings": [str(v) for v in a.ravel()]}
    t = numpy_helper.from_array(a.copy(order="C"))
    return {"dtype": t.data_type, "shape": list(t.dims), "hex": t.raw_data.hex()}


def attr_j(v):
    if isinstance(v, bool) or isinstance(v, (int, np.integer)):
        return {"t": "i", "v": int(v)}
    if isinstance(v, float):
        return {"t": "f", "v": v}
    if isinstance(v, str):
        return {"t": "s", "v": v}
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, str) for x in v) and v:
            return {"t": "ss", "v": list(v)}
        if all(isinstance(x, (int, np.integer)) for x in v):
            return {"t": "is", "v": [int(x) for x in v]}
        return {"t": "fs", "v": [float(x) for x in v]}
    raise TypeError(v)


def out_j(o):
    """A tensor, or a sequence of maps (ZipMap) as {seq_maps: [{keys, values}]}."""
    if isinstance(o, list):
        maps = []
        for m in o:
            keys = list(m.keys())
            if keys and isinstance(keys[0], str):
                kj = {"strings": keys}
            else:
                kj = tj(np.array(keys, np.int64))
            maps.append({"keys": kj, "values": tj(np.array(list(m.values()), np.float32))})
        return {"seq_maps": maps}
    return tj(np.asarray(o))


def onnx_model(op, inputs, attrs, n_out, domain, opset, consts=()):
    """consts: indices of inputs that become initializers (onnxruntime needs some constant)."""
    in_names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    out_names = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, in_names, out_names, domain=domain, **attrs)
    g_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for k, (n, a) in enumerate(zip(in_names, inputs)) if a is not None and k not in consts]
    inits = [numpy_helper.from_array(inputs[k], in_names[k]) for k in consts
             if inputs[k] is not None]
    g_out = [onnx.ValueInfoProto(name=n) for n in out_names]
    graph = helper.make_graph([node], op, g_in, g_out, initializer=inits)
    imports = [helper.make_opsetid("", opset if domain == "" else 21)]
    if domain:
        imports.append(helper.make_opsetid(domain, opset))
    model = helper.make_model(graph, opset_imports=imports)
    model.ir_version = 10 if opset >= 7 or domain else 3
    return model, [n if k not in consts else "" for k, n in enumerate(in_names)]


def run_ort(model, in_names, inputs):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.log_severity_level = 3
    # One thread: onnxruntime's LSTM quantizes the hidden state per chunk of batch rows, one
    # chunk per thread; with one thread the chunk is the whole batch.
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: a for n, a in zip(in_names, inputs) if a is not None and n})


CASES = []


def case(name, op, inputs, attrs=None, n_out=1, domain="", opset=21, rtol=0.0, atol=0.0,
         ref=None, source="onnxruntime", consts=()):
    """ref: a function of the inputs giving the expected outputs (float64 numpy math);
    otherwise onnxruntime computes them."""
    attrs = attrs or {}
    if ref is None:
        model, in_names = onnx_model(op, inputs, attrs, n_out, domain, opset, consts)
        outs = run_ort(model, in_names, inputs)
    else:
        outs = ref(*inputs)
    CASES.append({
        "name": name, "op": op, "domain": domain, "opset": opset, "source": source,
        "attrs": {k: attr_j(v) for k, v in attrs.items()},
        "inputs": [tj(a) if a is not None else None for a in inputs],
        "n_outputs": n_out, "outputs": [out_j(o) for o in outs], "rtol": rtol, "atol": atol,
    })


def u8(*shape):
    return rng.integers(0, 256, size=shape).astype(np.uint8)


def i8(*shape):
    return rng.integers(-128, 128, size=shape).astype(np.int8)


def f32(*shape, lo=-1.0, hi=1.0):
    return rng.uniform(lo, hi, size=shape).astype(np.float32)


def quant_cases():
    # DynamicQuantizeLinear: exact (uint8 and the f32 scale bit for bit).
    for name, x in [
        ("mixed", rng.normal(0.0, 2.0, size=(3, 5, 7)).astype(np.float32)),
        ("large", rng.normal(0.3, 1.0, size=(64, 97)).astype(np.float32)),
        ("positive", f32(4, 9, lo=0.5, hi=3.0)),     # min clamps to 0: zero point 0
        ("negative", f32(4, 9, lo=-3.0, hi=-0.5)),   # max clamps to 0: zero point 255
        ("zeros", np.zeros((2, 3), np.float32)),     # empty range: scale 1, zero point 0
        # Range [0, 127.5] gives scale 0.5 exactly: x / scale lands on .5 ties.
        ("ties", np.array([0, 0.25, 0.75, 1.25, 1.75, 2.25, 126.75, 127.25, 127.5], np.float32)),
        ("scalar_row", f32(1, 1, lo=0.1, hi=0.2)),
    ]:
        case(f"dql_{name}", "DynamicQuantizeLinear", [x], n_out=3, opset=11)

    # MatMulInteger: exact int32.
    a, b = u8(4, 6), u8(6, 5)
    case("mmi_u8u8_scalar_zp", "MatMulInteger", [a, b, np.array(3, np.uint8), np.array(250, np.uint8)],
         opset=10)
    case("mmi_u8i8_per_column", "MatMulInteger", [u8(3, 7), i8(7, 4), np.array([128], np.uint8),
                                                   i8(4)], opset=10)
    case("mmi_u8u8_batch", "MatMulInteger", [u8(2, 3, 5, 8), u8(8, 6), np.array(7, np.uint8),
                                              np.array(200, np.uint8)], opset=10)
    case("mmi_u8u8_batch_b", "MatMulInteger", [u8(5, 8), u8(2, 8, 3), None, np.array(9, np.uint8)],
         opset=10)
    case("mmi_u8_vector", "MatMulInteger", [u8(8), u8(8, 3), np.array(1, np.uint8)], opset=10)
    case("mmi_no_zp", "MatMulInteger", [u8(16, 33), i8(33, 17)], opset=10)
    case("mmi_i8i8", "MatMulInteger", [i8(3, 9), i8(9, 4), np.array(-5, np.int8),
                                       np.array(3, np.int8)], opset=10)

    # Per-row A zero points (the spec allows them; onnxruntime accepts only a scalar):
    # float64 math.
    def mmi_ref(a, b, azp, bzp):
        a64 = a.astype(np.float64) - azp.astype(np.float64)[:, None]
        b64 = b.astype(np.float64) - bzp.astype(np.float64)[None, :]
        return [(a64 @ b64).astype(np.int32)]

    case("mmi_per_row_a", "MatMulInteger", [u8(5, 7), i8(7, 3), u8(5), i8(3)], opset=10,
         ref=mmi_ref, source="float64 numpy")

    # N-D zero points: A [2, 3, 4] with [2, 3, 1], B [2, 4, 5] with [2, 1, 5].
    def mmi_nd_ref(a, b, azp, bzp):
        a64 = a.astype(np.float64) - azp.astype(np.float64)
        b64 = b.astype(np.float64) - bzp.astype(np.float64)
        return [(a64 @ b64).astype(np.int32)]

    case("mmi_nd_zero_points", "MatMulInteger", [u8(2, 3, 4), i8(2, 4, 5), u8(2, 3, 1),
                                                 i8(2, 1, 5)], opset=10, ref=mmi_nd_ref,
         source="float64 numpy")


def prelu_cases():
    def legacy(x, s):
        shape = [1] * x.ndim
        shape[1] = s.shape[0]
        xd = x.astype(np.float64)
        return [np.where(xd < 0, xd * s.astype(np.float64).reshape(shape), xd).astype(x.dtype)]

    for nd in (3, 4, 5):
        x = rng.normal(size=(2, 3) + (4, 5, 6)[: nd - 2]).astype(np.float32)
        s = f32(3, lo=0.05, hi=0.9)
        case(f"prelu_v6_channel_{nd}d", "PRelu", [x, s], opset=6, ref=legacy, source="float64 numpy",
             rtol=1e-6, atol=1e-7)
    # Opset 7+: numpy broadcasting of slope [C, 1, 1] and [W].
    x = rng.normal(size=(2, 3, 4, 5)).astype(np.float32)
    case("prelu_v9_slope_c11", "PRelu", [x, f32(3, 1, 1)], opset=9, rtol=1e-6, atol=1e-7)
    case("prelu_v16_slope_w", "PRelu", [x, f32(5)], opset=16, rtol=1e-6, atol=1e-7)


def quantize_weights(w, per_column, dtype, symmetric):
    """w [dirs, K, 4H] float -> (q, scale, zero point), per direction or per column (axis 2).
    onnxruntime's kernel takes int8 weights with zero point 0 only (symmetric)."""
    info = np.iinfo(dtype)
    axes = (1,) if per_column else (1, 2)
    if symmetric:
        scale = (np.abs(w).max(axis=axes) / info.max).astype(np.float32)
        zp = np.zeros(scale.shape, dtype)
    else:
        lo = np.minimum(w.min(axis=axes), 0)
        hi = np.maximum(w.max(axis=axes), 0)
        scale = ((hi - lo) / (info.max - info.min)).astype(np.float32)
        zp = np.clip(np.round(info.min - lo / scale), info.min, info.max).astype(dtype)
    s_b = scale[:, None, :] if per_column else scale[:, None, None]
    z_b = zp[:, None, :] if per_column else zp[:, None, None]
    q = np.clip(np.round(w / s_b) + z_b.astype(np.float32), info.min, info.max).astype(dtype)
    return q, scale, zp


def dyn_quant_product(x, q, scale, zp):
    """onnxruntime's product: x [m, K] f32 quantized to uint8 as a whole (round half to even),
    integer product with (q - zp) [K, N], then acc * (x_scale * w_scale[n]) in f32."""
    lo, hi = np.float32(min(x.min(), 0)), np.float32(max(x.max(), 0))
    xs = np.float32(1.0) if hi == lo else np.float32((hi - lo) / np.float32(255))
    xz = np.float32(np.rint(np.clip(-lo / xs, 0, 255)))
    xq = np.clip(np.rint(x / xs) + xz, 0, 255) - xz
    acc = xq.astype(np.float64) @ (q.astype(np.float64) - zp.astype(np.float64))
    return acc.astype(np.float32) * (xs * scale.astype(np.float32))


def qlstm_ref(x, wq, rq, b, sl, h0, c0, p, ws, wz, rs, rz, direction, clip=None,
              input_forget=0):
    """Float64 gate math on onnxruntime's quantized products (sigmoid, tanh, tanh)."""
    seq, batch, _ = x.shape
    nd, hidden = wq.shape[0], rq.shape[1]
    g = 4 * hidden
    lens = [seq] * batch if sl is None else [int(v) for v in sl]
    sig = lambda v: 1.0 / (1.0 + np.exp(-v))  # noqa: E731
    cl = (lambda v: np.clip(v, -clip, clip)) if clip else (lambda v: v)  # noqa: E731
    y = np.zeros((seq, nd, batch, hidden), np.float32)
    yh = np.zeros((nd, batch, hidden), np.float32)
    yc = np.zeros((nd, batch, hidden), np.float32)

    def per(v, d):
        return np.broadcast_to(v.reshape(nd, -1)[d], (g,))

    for d in range(nd):
        reverse = direction == "reverse" or (direction == "bidirectional" and d == 1)
        xw = dyn_quant_product(x.reshape(seq * batch, -1), wq[d], per(ws, d), per(wz, d))
        xw = xw.reshape(seq, batch, g).astype(np.float64)
        bias = np.zeros(g) if b is None else b[d, :g].astype(np.float64) + b[d, g:]
        hs = np.zeros((batch, hidden)) if h0 is None else h0[d].astype(np.float64)
        cs = np.zeros((batch, hidden)) if c0 is None else c0[d].astype(np.float64)
        pd = np.zeros(3 * hidden) if p is None else p[d].astype(np.float64)
        for step in range(max(lens)):
            # The previous step's outputs: zeros for rows that ended before it.
            live = np.array([hs[bi] if step <= lens[bi] else np.zeros(hidden)
                             for bi in range(batch)])
            hr = dyn_quant_product(live.astype(np.float32), rq[d], per(rs, d), per(rz, d))
            for bi in range(batch):
                if step >= lens[bi]:
                    continue
                t = lens[bi] - 1 - step if reverse else step
                pre = xw[t, bi] + hr[bi] + bias
                i = sig(cl(pre[:hidden] + pd[:hidden] * cs[bi]))
                f = 1 - i if input_forget else sig(cl(pre[2 * hidden:3 * hidden]
                                                      + pd[2 * hidden:] * cs[bi]))
                cc = np.tanh(cl(pre[3 * hidden:]))
                cs[bi] = f * cs[bi] + i * cc
                o = sig(cl(pre[hidden:2 * hidden] + pd[hidden:2 * hidden] * cs[bi]))
                hs[bi] = o * np.tanh(cs[bi])
                y[t, d, bi] = hs[bi]
        yh[d], yc[d] = hs, cs
    return [y, yh, yc]


def qlstm_cases():
    def one(name, seq, batch, inp, hidden, direction, dtype, per_column, bias=True, init=True,
            peep=False, lens=None, symmetric=True, numpy_ref=False, rtol=1e-4, atol=1e-5,
            **attrs):
        nd = 2 if direction == "bidirectional" else 1
        x = rng.normal(0, 1, size=(seq, batch, inp)).astype(np.float32)
        w = rng.normal(0, 0.3, size=(nd, inp, 4 * hidden)).astype(np.float32)
        r = rng.normal(0, 0.3, size=(nd, hidden, 4 * hidden)).astype(np.float32)
        wq, ws, wz = quantize_weights(w, per_column, dtype, symmetric)
        rq, rs, rz = quantize_weights(r, per_column, dtype, symmetric)
        b = rng.normal(0, 0.2, size=(nd, 8 * hidden)).astype(np.float32) if bias else None
        sl = None if lens is None else np.array(lens, np.int32)
        h0 = rng.normal(0, 0.5, size=(nd, batch, hidden)).astype(np.float32) if init else None
        c0 = rng.normal(0, 0.5, size=(nd, batch, hidden)).astype(np.float32) if init else None
        p = rng.normal(0, 0.3, size=(nd, 3 * hidden)).astype(np.float32) if peep else None
        ref = None
        if numpy_ref:
            ref = lambda *a: qlstm_ref(*a, direction=direction, **attrs)  # noqa: E731
        case(f"qlstm_{name}", "DynamicQuantizeLSTM",
             [x, wq, rq, b, sl, h0, c0, p, ws, wz, rs, rz],
             dict(hidden_size=hidden, direction=direction, **attrs), n_out=3,
             domain="com.microsoft", opset=1, consts=(1, 2, 8, 9, 10, 11),
             # Against onnxruntime bit for bit: the integer products are exact and the gates
             # (rational Sigmoid/Tanh, peephole and bias order) are computed as it does.
             rtol=rtol if numpy_ref else 0.0, atol=atol if numpy_ref else 0.0,
             ref=ref, source="float64 numpy" if numpy_ref else "onnxruntime")

    one("bidir_per_dir", 5, 2, 6, 4, "bidirectional", np.int8, False)
    one("fwd_per_col_peep_lens", 6, 3, 5, 3, "forward", np.int8, True, init=False, peep=True,
        lens=[6, 4, 1])
    one("rev_per_col_clip_forget", 4, 2, 3, 5, "reverse", np.int8, True, clip=0.7,
        input_forget=1)
    one("bidir_lens_no_bias", 5, 3, 4, 3, "bidirectional", np.int8, False, bias=False,
        lens=[5, 2, 3])
    one("wide", 7, 1, 64, 32, "bidirectional", np.int8, True)
    # uint8 / asymmetric int8 weights (onnxruntime refuses them): numpy reference.
    one("np_uint8_asym_per_col", 5, 2, 6, 4, "bidirectional", np.uint8, True, symmetric=False,
        numpy_ref=True, lens=[5, 3])
    one("np_int8_asym_peep_clip", 4, 2, 5, 3, "forward", np.int8, False, symmetric=False,
        numpy_ref=True, peep=True, clip=1.5)


ML = "ai.onnx.ml"


def svm_cases():
    c = 4  # features
    x = rng.normal(0, 1, size=(7, c)).astype(np.float32)

    def svc(name, per_class, kernel, labels, proba=False, post="NONE", params=(0.3, 0.5, 2),
            positive=False, dtype=np.float32, rtol=1e-5, atol=1e-5):
        k = len(per_class)
        total = sum(per_class)
        coef = rng.uniform(0 if positive else -1, 1, size=(k - 1) * total)
        attrs = dict(
            vectors_per_class=list(per_class), support_vectors=list(rng.normal(size=total * c)),
            coefficients=list(coef), rho=list(rng.uniform(-0.5, 0.5, size=k * (k - 1) // 2)),
            kernel_type=kernel, kernel_params=list(params), post_transform=post)
        if proba:
            attrs["prob_a"] = list(rng.uniform(-3, -0.5, size=k * (k - 1) // 2))
            attrs["prob_b"] = list(rng.uniform(-0.3, 0.3, size=k * (k - 1) // 2))
        attrs["classlabels_strings" if isinstance(labels[0], str) else "classlabels_ints"] = labels
        case(f"svc_{name}", "SVMClassifier", [x.astype(dtype)], attrs, n_out=2, domain=ML, opset=1,
             rtol=rtol, atol=atol)

    svc("rbf_3", [2, 3, 2], "RBF", [4, 7, 9])
    svc("poly_3_proba_strings", [3, 2, 2], "POLY", ["a", "b", "c"], proba=True, rtol=1e-4,
        atol=1e-5)
    svc("sigmoid_4_softmax", [2, 1, 2, 2], "SIGMOID", [0, 1, 2, 3], post="SOFTMAX")
    svc("linear_binary", [3, 2], "LINEAR", [0, 1])
    svc("rbf_binary_positive", [2, 3], "RBF", [10, 20], positive=True)
    svc("rbf_binary_proba", [2, 2], "RBF", ["no", "yes"], proba=True)
    svc("poly_binary_logistic", [2, 2], "POLY", [3, 5], post="LOGISTIC")
    svc("rbf_double", [2, 2, 2], "RBF", [1, 2, 3], dtype=np.float64)

    def linear(name, k, labels, post="NONE", rho=None, positive=False):
        coef = rng.uniform(0 if positive else -1, 1, size=k * c)
        attrs = dict(coefficients=list(coef), post_transform=post, kernel_type="LINEAR",
                     kernel_params=[0.0, 0.0, 1.0],
                     rho=list(rho if rho is not None else rng.uniform(-0.5, 0.5, size=1)))
        attrs["classlabels_strings" if isinstance(labels[0], str) else "classlabels_ints"] = labels
        case(f"svc_liblinear_{name}", "SVMClassifier", [x], attrs, n_out=2, domain=ML, opset=1,
             rtol=1e-5, atol=1e-5)

    linear("3", 3, [1, 2, 3])
    linear("3_logistic_strings", 3, ["x", "y", "z"], post="LOGISTIC")
    linear("binary", 2, [0, 1])
    linear("binary_positive", 2, [5, 6], positive=True, rho=[0.1])

    def svr(name, n_sv, kernel, post="NONE", one_class=0, params=(0.2, 0.1, 3)):
        attrs = dict(coefficients=list(rng.uniform(-1, 1, size=n_sv if n_sv else c)),
                     kernel_type=kernel, kernel_params=list(params), n_supports=n_sv,
                     rho=[float(rng.uniform(-0.5, 0.5))], post_transform=post,
                     one_class=one_class)
        if n_sv:
            attrs["support_vectors"] = list(rng.normal(size=n_sv * c))
        case(f"svr_{name}", "SVMRegressor", [x], attrs, domain=ML, opset=1, rtol=1e-5, atol=1e-5)

    svr("rbf", 5, "RBF")
    svr("poly", 4, "POLY")
    svr("sigmoid", 3, "SIGMOID")
    svr("linear_no_vectors", 0, "LINEAR")
    svr("one_class", 5, "RBF", one_class=1)


def zipmap_cases():
    x = rng.uniform(0, 1, size=(4, 3)).astype(np.float32)
    case("zipmap_ints", "ZipMap", [x], dict(classlabels_int64s=[5, -2, 9]), domain=ML, opset=1)
    case("zipmap_strings", "ZipMap", [x], dict(classlabels_strings=["cat", "dog", "emu"]),
         domain=ML, opset=1)
    case("zipmap_1d", "ZipMap", [x[0]], dict(classlabels_int64s=[0, 1, 2]), domain=ML, opset=1)


def main():
    quant_cases()
    zipmap_cases()
    svm_cases()
    prelu_cases()
    qlstm_cases()
    with open(sys.argv[1], "w") as f:
        json.dump(CASES, f)
    print(f"{len(CASES)} cases -> {sys.argv[1]}")


if __name__ == "__main__":
    main()
