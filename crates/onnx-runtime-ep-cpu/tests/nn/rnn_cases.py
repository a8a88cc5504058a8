"""RNN, GRU and LSTM cases on seeded random inputs with expected outputs from onnxruntime (CPU,
one thread), for the gates' Sigmoid and Tanh (tolerances per op: see TOL). LSTM one-step cases
on dyadic inputs must match bit for bit."""
import numpy as np
import onnx
from onnx import helper, numpy_helper

rng = np.random.default_rng(16)

# (rtol, atol) per op. LSTM: onnxruntime's gates are MLAS's Sigmoid/Tanh, as ours, so only the
# matrix products' summation order differs. RNN and GRU: onnxruntime computes their gates with
# functions of their own (RNN: tanh(x) = 2 / (1 + e^-2x) - 1 through std::exp; GRU: the tanh
# rational with clamps at 10 and 20, unfused, sigmoid as (1 + tanh(x/2)) / 2), which differ from
# ours by a few ulp per step (docs/cpu-math.md).
TOL = {"LSTM": (1e-5, 2e-6), "RNN": (1e-4, 1e-5), "GRU": (1e-4, 1e-5)}


def tj(a):
    t = numpy_helper.from_array(np.ascontiguousarray(a))
    return {"dtype": t.data_type, "shape": list(t.dims), "hex": t.raw_data.hex()}


def attr_j(v):
    if isinstance(v, int):
        return {"t": "i", "v": v}
    if isinstance(v, float):
        return {"t": "f", "v": v}
    if isinstance(v, str):
        return {"t": "s", "v": v}
    if isinstance(v, list) and all(isinstance(s, str) for s in v):
        return {"t": "ss", "v": v}
    return {"t": "fs", "v": [float(x) for x in v]}


def run_ort(op, inputs, attrs, n_out, opset):
    import onnxruntime as ort

    in_names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    node = helper.make_node(op, in_names, [f"o{k}" for k in range(n_out)], **attrs)
    g_in = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
            for n, a in zip(in_names, inputs) if a is not None]
    g_out = [onnx.ValueInfoProto(name=f"o{k}") for k in range(n_out)]
    model = helper.make_model(helper.make_graph([node], op, g_in, g_out),
                              opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 9
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    so.intra_op_num_threads = 1
    so.log_severity_level = 3
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    return sess.run(None, {n: a for n, a in zip(in_names, inputs) if a is not None})


def normal(sd, shape, exact):
    """Normal values, or with `exact` multiples of 1/16 (of 1/8 for sd >= 1) of about that
    spread: products and short sums of them are exact in float32, so the gates' inputs do not
    depend on the summation order."""
    v = rng.normal(0, sd, size=shape)
    if exact:
        q = 8.0 if sd >= 1.0 else 16.0
        v = np.round(v * q) / q
    return v.astype(np.float32)


def recurrent(op, name, seq, batch, inp, hidden, direction="forward", lens=None, init=True,
              peep=False, opset=14, scale=1.0, exact=False, **attrs):
    """One RNN/GRU/LSTM case; `scale` widens the weights so the gates reach saturation.
    `exact` (one time step): dyadic inputs, so the pre-activations are exact and the outputs
    must equal onnxruntime's bit for bit (tolerance 0)."""
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    nd = 2 if direction == "bidirectional" else 1
    x = normal(1.0, (seq, batch, inp), exact)
    w = normal(0.4 * scale, (nd, gates * hidden, inp), exact)
    r = normal(0.4 * scale, (nd, gates * hidden, hidden), exact)
    b = normal(0.3, (nd, 2 * gates * hidden), exact)
    sl = None if lens is None else np.array(lens, np.int32)
    h0 = normal(0.5, (nd, batch, hidden), exact) if init else None
    inputs = [x, w, r, b, sl, h0]
    if op == "LSTM":
        c0 = normal(0.5, (nd, batch, hidden), exact) if init else None
        p = normal(0.3, (nd, 3 * hidden), exact) if peep else None
        inputs += [c0, p]
    while inputs[-1] is None:
        inputs.pop()
    attrs = dict(hidden_size=hidden, direction=direction, **attrs)
    n_out = 3 if op == "LSTM" else 2
    outs = run_ort(op, inputs, attrs, n_out, opset)
    return {
        "name": f"ort_{op.lower()}_{name}", "op": op, "domain": "", "opset": opset,
        "source": "onnxruntime", "attrs": {k: attr_j(v) for k, v in attrs.items()},
        "inputs": [tj(a) if a is not None else None for a in inputs], "n_outputs": n_out,
        "outputs": [tj(o) for o in outs], "rtol": 0.0 if exact else TOL[op][0],
        "atol": 0.0 if exact else TOL[op][1],
    }


def cases():
    c = []
    for op in ("RNN", "GRU", "LSTM"):
        c.append(recurrent(op, "fwd", 6, 3, 5, 8))
        c.append(recurrent(op, "bidir_lens", 5, 3, 4, 6, "bidirectional", lens=[5, 2, 4]))
        c.append(recurrent(op, "rev_no_init", 4, 2, 7, 5, "reverse", init=False))
        c.append(recurrent(op, "saturated", 5, 2, 6, 16, "bidirectional", scale=6.0))
        c.append(recurrent(op, "clip", 5, 2, 6, 7, clip=0.8, scale=3.0))
        c.append(recurrent(op, "wide", 3, 4, 48, 40, "bidirectional"))
    c.append(recurrent("GRU", "linear_before_reset", 5, 3, 4, 6, "bidirectional",
                       linear_before_reset=1))
    c.append(recurrent("LSTM", "peep_lens", 6, 3, 5, 4, lens=[6, 3, 1], peep=True))
    c.append(recurrent("LSTM", "input_forget", 4, 2, 5, 6, input_forget=1, peep=True))
    c.append(recurrent("RNN", "sigmoid_act", 5, 2, 4, 6, activations=["Sigmoid"]))
    c.append(recurrent("GRU", "tanh_sigmoid_acts", 5, 2, 4, 6,
                       activations=["Tanh", "Sigmoid"]))
    c.append(recurrent("LSTM", "swapped_acts", 5, 2, 4, 6,
                       activations=["Tanh", "Sigmoid", "Sigmoid"]))
    # LSTM, one step on dyadic inputs: bit for bit (the gate activations and the gate
    # arithmetic decide every bit).
    c.append(recurrent("LSTM", "exact", 1, 3, 6, 8, "bidirectional", exact=True))
    c.append(recurrent("LSTM", "exact_saturated", 1, 2, 6, 16, exact=True, scale=8.0))
    c.append(recurrent("LSTM", "exact_peep_clip", 1, 3, 6, 8, exact=True, peep=True,
                       clip=5.0, scale=4.0))
    return c
