"""com.microsoft (and ORT-only) op cases with expected outputs from onnxruntime on random inputs."""
import numpy as np
import onnx
from onnx import helper, numpy_helper, TensorProto

rng = np.random.default_rng(7)


def rnd(*shape, lo=-1.0, hi=1.0, dtype=np.float32):
    return rng.uniform(lo, hi, size=shape).astype(dtype)


def tj(a):
    t = numpy_helper.from_array(np.ascontiguousarray(a))
    return {"dtype": t.data_type, "shape": list(t.dims), "hex": t.raw_data.hex()}


def case(name, op, inputs, attrs=None, n_out=1, domain="com.microsoft", rtol=1e-4, atol=1e-4):
    """inputs: list of numpy arrays or None (omitted)."""
    import onnxruntime as ort

    attrs = attrs or {}
    in_names = [f"i{k}" if a is not None else "" for k, a in enumerate(inputs)]
    out_names = [f"o{k}" for k in range(n_out)]
    node = helper.make_node(op, in_names, out_names, domain=domain, **attrs)
    g_in = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in zip(in_names, inputs) if a is not None
    ]
    g_out = [onnx.ValueInfoProto(name=n) for n in out_names]
    graph = helper.make_graph([node], name, g_in, g_out)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 10
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    feeds = {n: a for n, a in zip(in_names, inputs) if a is not None}
    outs = sess.run(None, feeds)
    attrs_j = {}
    for k, v in attrs.items():
        if isinstance(v, int):
            attrs_j[k] = {"t": "i", "v": v}
        elif isinstance(v, float):
            attrs_j[k] = {"t": "f", "v": v}
        elif isinstance(v, list):
            attrs_j[k] = {"t": "is", "v": v}
    return {
        "name": "ms_" + name, "op": op, "domain": domain, "opset": 1 if domain else 21,
        "attrs": attrs_j, "inputs": [tj(a) if a is not None else None for a in inputs],
        "n_outputs": n_out, "outputs": [tj(o) for o in outs], "rtol": rtol, "atol": atol,
    }


def nbits_pack(w, bits, block):
    """w: [N, K] float -> (B uint8 [N, kb, blob], scales [N*kb], packed zp)."""
    n, k = w.shape
    kb = (k + block - 1) // block
    qmax = (1 << bits) - 1
    B = np.zeros((n, kb, block * bits // 8), np.uint8)
    scales = np.zeros((n, kb), np.float32)
    zps = np.zeros((n, kb), np.uint8)
    for r in range(n):
        for b in range(kb):
            blk = np.zeros(block, np.float32)
            src = w[r, b * block:(b + 1) * block]
            blk[:len(src)] = src
            lo, hi = min(blk.min(), 0), max(blk.max(), 0)
            s = (hi - lo) / qmax or 1.0
            z = int(np.clip(round(-lo / s), 0, qmax))
            q = np.clip(np.round(blk / s) + z, 0, qmax).astype(np.uint8)
            scales[r, b], zps[r, b] = s, z
            per = 8 // bits
            for i, v in enumerate(q):
                B[r, b, i // per] |= v << ((i % per) * bits)
    per = 8 // bits
    zp_packed = np.zeros((n, (kb * bits + 7) // 8), np.uint8)
    for r in range(n):
        for b in range(kb):
            zp_packed[r, b // per] |= zps[r, b] << ((b % per) * bits)
    return B, scales.reshape(-1), zp_packed


def cases():
    out = []
    b, s, h = 2, 5, 16
    x, sk, g, be, bi = rnd(b, s, h), rnd(b, s, h), rnd(h), rnd(h), rnd(h)
    out.append(case("skip_ln", "SkipLayerNormalization", [x, sk, g, be, bi], {"epsilon": 1e-5}, n_out=4))
    out.append(case("skip_ln_2d_skip", "SkipLayerNormalization", [x, rnd(s, h), g, be, None], {}, n_out=1))
    out.append(case("skip_sln", "SkipSimplifiedLayerNormalization", [x, sk, g, bi], {"epsilon": 1e-6}, n_out=4))
    out.append(case("sln", "SimplifiedLayerNormalization", [x, g], {"epsilon": 1e-6, "axis": -1}, n_out=1, domain=""))
    out.append(case("fused_matmul", "FusedMatMul", [rnd(2, 4, 3), rnd(2, 5, 4)], {"alpha": 0.5, "transA": 1, "transB": 1}))
    out.append(case("fused_matmul_bcast", "FusedMatMul", [rnd(3, 2, 4, 6), rnd(6, 5)], {"alpha": 2.0}))
    for bits, block, k in [(4, 32, 64), (4, 16, 40), (8, 32, 64), (2, 16, 32)]:
        n = 12
        w = rnd(n, k)
        B, sc, zp = nbits_pack(w, bits, block)
        a = rnd(3, k)
        out.append(case(f"matmulnbits_{bits}b_{block}_{k}", "MatMulNBits", [a, B, sc, zp, None, rnd(n)],
                        {"K": k, "N": n, "bits": bits, "block_size": block}, rtol=1e-3, atol=1e-3))
        out.append(case(f"matmulnbits_nozp_{bits}b_{block}_{k}", "MatMulNBits", [rnd(2, 2, k), B, sc],
                        {"K": k, "N": n, "bits": bits, "block_size": block}, rtol=1e-3, atol=1e-3))
    # MultiHeadAttention
    nh, d = 2, 4
    q, kk, v = rnd(b, s, nh * d), rnd(b, 6, nh * d), rnd(b, 6, nh * d)
    out.append(case("mha_cross", "MultiHeadAttention", [q, kk, v], {"num_heads": nh}))
    out.append(case("mha_bias_mask", "MultiHeadAttention",
                    [q, kk, v, rnd(3 * nh * d), np.array([[1, 1, 1, 0, 1, 0], [1, 1, 1, 1, 1, 1]], np.int32), rnd(b, nh, s, 6)],
                    {"num_heads": nh}))
    qs, ks, vs = rnd(b, s, nh * d), rnd(b, s, nh * d), rnd(b, s, nh * d)
    out.append(case("mha_past_causal", "MultiHeadAttention",
                    [qs, ks, vs, None, None, None, rnd(b, nh, 3, d), rnd(b, nh, 3, d)],
                    {"num_heads": nh, "unidirectional": 1, "scale": 0.3}, n_out=3))
    # com.microsoft Attention
    din = 8
    out.append(case("attention_mask", "Attention",
                    [rnd(b, s, din), rnd(din, 3 * nh * d), rnd(3 * nh * d), np.array([[1, 1, 1, 1, 0], [1, 1, 0, 0, 0]], np.int32)],
                    {"num_heads": nh}))
    out.append(case("attention_past_unidir", "Attention",
                    [rnd(b, s, din), rnd(din, 3 * nh * d), rnd(3 * nh * d), None, rnd(2, b, nh, 2, d)],
                    {"num_heads": nh, "unidirectional": 1}, n_out=2))
    # GroupQueryAttention: prompt, then one decode step with a past cache.
    nq, nkv, d = 4, 2, 16
    qg, kg, vg = rnd(b, s, nq * d), rnd(b, s, nkv * d), rnd(b, s, nkv * d)
    seqlens = np.array([s - 1, s - 1], np.int32)
    tot = np.array(s, np.int32)
    out.append(case("gqa_prompt", "GroupQueryAttention", [qg, kg, vg, None, None, seqlens, tot],
                    {"num_heads": nq, "kv_num_heads": nkv}, n_out=3))
    cos = np.cos(rnd(16, d // 2, lo=0, hi=3)).astype(np.float32)
    sin = np.sin(rnd(16, d // 2, lo=0, hi=3)).astype(np.float32)
    out.append(case("gqa_prompt_rotary_window", "GroupQueryAttention", [qg, kg, vg, None, None, seqlens, tot, cos, sin],
                    {"num_heads": nq, "kv_num_heads": nkv, "do_rotary": 1, "local_window_size": 2}, n_out=3))
    p = 3
    q1, k1, v1 = rnd(b, 1, nq * d), rnd(b, 1, nkv * d), rnd(b, 1, nkv * d)
    out.append(case("gqa_decode", "GroupQueryAttention",
                    [q1, k1, v1, rnd(b, nkv, p, d), rnd(b, nkv, p, d), np.array([p, p], np.int32), np.array(p + 1, np.int32), cos, sin],
                    {"num_heads": nq, "kv_num_heads": nkv, "do_rotary": 1, "rotary_interleaved": 1}, n_out=3))
    out.append(case("gqa_softcap_smooth", "GroupQueryAttention", [qg, kg, vg, None, None, seqlens, tot],
                    {"num_heads": nq, "kv_num_heads": nkv, "softcap": 2.0, "smooth_softmax": 1}, n_out=1))
    # com.microsoft RotaryEmbedding
    xr = rnd(b, s, nh * 8)
    cos2 = np.cos(rnd(10, 4, lo=0, hi=3)).astype(np.float32)
    sin2 = np.sin(rnd(10, 4, lo=0, hi=3)).astype(np.float32)
    out.append(case("rotary_offset", "RotaryEmbedding", [xr, np.array([2], np.int64), cos2, sin2], {"num_heads": nh}))
    pos = rng.integers(0, 10, size=(b, s)).astype(np.int64)
    out.append(case("rotary_ids_interleaved", "RotaryEmbedding", [xr, pos, cos2, sin2], {"interleaved": 1, "num_heads": nh}))
    return out
