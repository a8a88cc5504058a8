#!/usr/bin/env python3
"""Tiny random-weight LLM decoders in the two folder formats `onnx-runtime generate` reads.

    python3 scripts/tiny-llm.py OUTDIR [--reference]

writes OUTDIR/genai/ (the onnxruntime-genai builder's op set: com.microsoft
GroupQueryAttention with rotary inside, MatMulNBits int4 block 32,
(Skip)SimplifiedLayerNormalization, a SwiGLU MLP, genai_config.json with
past_present_share_buffer) and OUTDIR/optimum/ (standard ONNX ops only, a Concat KV cache,
config.json), each with the same byte-level BPE tokenizer.json. Both have 2 layers, hidden
64, 4 heads, 2 KV heads, vocab 512 and context 128; the weights are random with a fixed seed,
so every run writes the same models.

With --reference, onnxruntime (CPU) runs each model greedily for REFERENCE_PROMPT_IDS, feeding the KV cache back the way the format's runtime does, and writes
reference.json beside the model: the prompt ids, the prompt's logits (every position), each
of 32 decode steps' logits and the 33 tokens chosen (one from the prompt, one per step).

Needs python3 with onnx and numpy (onnxruntime for --reference); no torch.
"""

import argparse
import json
import os
import re
import sys

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

LAYERS = 2
HIDDEN = 64
HEADS = 4
KV_HEADS = 2
HEAD = HIDDEN // HEADS
FFN = 128
VOCAB = 512
CONTEXT = 128
THETA = 10000.0
EPS = 1e-5
BOS, EOS = 510, 511
SEED = 1234
REFERENCE_PROMPT_IDS = [510, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114, 108, 100]
# The prompt's step chooses the first new token, and each of 32 decode steps one more.
REFERENCE_DECODE_STEPS = 32

# ---------------------------------------------------------------------------------------------
# Tokenizer: byte-level BPE trained on a fixed text, written as a Hugging Face tokenizer.json.

CORPUS = (
    "the quick brown fox jumps over the lazy dog. hello world, hello there! "
    "a language model reads tokens and writes tokens, one at a time. "
    "the cache keeps the keys and values of every token seen so far. "
    "generation stops at the end of sequence token or at the length limit. "
    "numbers 0123456789 and punctuation: ; , . ! ? ( ) - that is all. "
    "über café naïve — unicode text is split into bytes first. 你好世界 "
) * 4


def byte_to_unicode():
    """The byte-level alphabet: every byte as one printable character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    chars = keep[:]
    extra = 0
    for b in range(256):
        if b not in keep:
            keep.append(b)
            chars.append(256 + extra)
            extra += 1
    return {b: chr(c) for b, c in zip(keep, chars)}


def pretokenize(text):
    """Splits roughly like the GPT-2 pattern: letters, single digits, punctuation runs, each
    with its leading space, and runs of spaces."""
    return re.findall(r" ?[^\W\d_]+| ?\d| ?[^\s\w]+|\s+", text)


def train_bpe(n_merges):
    table = byte_to_unicode()
    words = {}
    for piece in pretokenize(CORPUS):
        w = tuple(table[b] for b in piece.encode("utf-8"))
        words[w] = words.get(w, 0) + 1
    merges = []
    for _ in range(n_merges):
        pairs = {}
        for w, c in words.items():
            for a, b in zip(w, w[1:]):
                pairs[(a, b)] = pairs.get((a, b), 0) + c
        if not pairs:
            break
        best = max(sorted(pairs), key=lambda p: pairs[p])
        merges.append(best)
        new_words = {}
        for w, c in words.items():
            out, i = [], 0
            while i < len(w):
                if i + 1 < len(w) and (w[i], w[i + 1]) == best:
                    out.append(w[i] + w[i + 1])
                    i += 2
                else:
                    out.append(w[i])
                    i += 1
            new_words[tuple(out)] = new_words.get(tuple(out), 0) + c
        words = new_words
    return table, merges


def tokenizer_json():
    table, merges = train_bpe(VOCAB - 256 - 2)
    vocab = {table[b]: b for b in range(256)}
    for a, b in merges:
        if a + b not in vocab:
            vocab[a + b] = len(vocab)
    # The corpus runs out of merges before the vocabulary is full: plain filler tokens give
    # every id below BOS a text, so whatever a random model picks decodes to something.
    while len(vocab) < BOS:
        vocab[f"<extra_{len(vocab)}>"] = len(vocab)
    specials = [(BOS, "<s>"), (EOS, "</s>")]
    for i, name in specials:
        vocab[name] = i
    return {
        "version": "1.0",
        "truncation": None,
        "padding": None,
        "added_tokens": [
            {
                "id": i,
                "content": name,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": True,
            }
            for i, name in specials
        ],
        "normalizer": None,
        "pre_tokenizer": {
            "type": "ByteLevel",
            "add_prefix_space": False,
            "trim_offsets": True,
            "use_regex": True,
        },
        "post_processor": None,
        "decoder": {
            "type": "ByteLevel",
            "add_prefix_space": True,
            "trim_offsets": True,
            "use_regex": True,
        },
        "model": {
            "type": "BPE",
            "dropout": None,
            "unk_token": None,
            "continuing_subword_prefix": None,
            "end_of_word_suffix": None,
            "fuse_unk": False,
            "byte_fallback": False,
            "vocab": vocab,
            "merges": [f"{a} {b}" for a, b in merges],
        },
    }


# ---------------------------------------------------------------------------------------------
# Weights (shared by both formats, so both models compute nearly the same function).


def weights():
    rng = np.random.default_rng(SEED)

    def mat(k, n, scale=1.0):
        return (rng.standard_normal((k, n)) * scale / np.sqrt(k)).astype(np.float32)

    w = {"embed": (rng.standard_normal((VOCAB, HIDDEN)) * 0.5).astype(np.float32)}
    for i in range(LAYERS):
        w[f"l{i}.ln1"] = (1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
        w[f"l{i}.ln2"] = (1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
        w[f"l{i}.q"] = mat(HIDDEN, HEADS * HEAD, 2.0)
        w[f"l{i}.k"] = mat(HIDDEN, KV_HEADS * HEAD, 2.0)
        w[f"l{i}.v"] = mat(HIDDEN, KV_HEADS * HEAD)
        w[f"l{i}.o"] = mat(HEADS * HEAD, HIDDEN)
        w[f"l{i}.gate"] = mat(HIDDEN, FFN)
        w[f"l{i}.up"] = mat(HIDDEN, FFN)
        w[f"l{i}.down"] = mat(FFN, HIDDEN)
    w["norm"] = (1.0 + 0.1 * rng.standard_normal(HIDDEN)).astype(np.float32)
    w["lm_head"] = mat(HIDDEN, VOCAB, 3.0)
    return w


def rotary_tables():
    inv = 1.0 / THETA ** (np.arange(0, HEAD, 2, dtype=np.float64) / HEAD)
    freqs = np.outer(np.arange(CONTEXT, dtype=np.float64), inv)
    return np.cos(freqs).astype(np.float32), np.sin(freqs).astype(np.float32)


def quantize_int4(w, block=32, zero_points=True):
    """MatMulNBits weights for float w [K, N]: B uint8 [N, K/block, block/2], scales
    [N * K/block], zero points uint8 [N * ceil(blocks/2)] (None for the symmetric default 8),
    and the dequantized float matrix the quantized weights stand for."""
    k, n = w.shape
    blocks = k // block
    wt = w.T.reshape(n, blocks, block).astype(np.float64)
    if zero_points:
        lo = np.minimum(wt.min(axis=2), 0.0)
        hi = np.maximum(wt.max(axis=2), 0.0)
        scale = np.where(hi > lo, (hi - lo) / 15.0, 1.0)
        zp = np.clip(np.round(-lo / scale), 0, 15)
    else:
        scale = np.maximum(np.abs(wt).max(axis=2), 1e-8) / 7.0
        zp = np.full((n, blocks), 8.0)
    scale = scale.astype(np.float32)
    q = np.clip(np.round(wt / scale[..., None].astype(np.float64)) + zp[..., None], 0, 15)
    q = q.astype(np.uint8)
    packed = (q[..., 0::2] | (q[..., 1::2] << 4)).astype(np.uint8)
    deq = ((q.astype(np.float32) - zp[..., None].astype(np.float32)) * scale[..., None]).reshape(n, k).T
    zp_packed = None
    if zero_points:
        zpi = zp.astype(np.uint8)
        if blocks % 2:
            zpi = np.concatenate([zpi, np.zeros((n, 1), np.uint8)], axis=1)
        zp_packed = (zpi[:, 0::2] | (zpi[:, 1::2] << 4)).astype(np.uint8).reshape(-1)
    return packed, scale.reshape(-1), zp_packed, deq.astype(np.float32)


class Builder:
    def __init__(self):
        self.nodes, self.inits, self.count = [], [], 0

    def init(self, name, array):
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op, inputs, n_out=1, domain="", name=None, outputs=None, **attrs):
        self.count += 1
        name = name or f"{op}_{self.count}"
        outputs = outputs or [f"{name}/out{i}" for i in range(n_out)]
        self.nodes.append(helper.make_node(op, inputs, outputs, name=name, domain=domain, **attrs))
        return outputs[0] if len(outputs) == 1 else outputs


# ---------------------------------------------------------------------------------------------
# genai/: the onnxruntime-genai builder's op set.


def build_genai(w, out_dir):
    b = Builder()
    cos, sin = rotary_tables()
    b.init("cos_cache", cos)
    b.init("sin_cache", sin)
    b.init("embed_tokens", w["embed"])
    one = b.init("one_i64", np.array([1], np.int64))
    # seqlens_k = sum(attention_mask) - 1 and total_sequence_length = shape(mask)[1], as int32.
    mask_sum = b.node("ReduceSum", ["attention_mask", one], keepdims=0, name="mask_sum")
    seqlens64 = b.node("Sub", [mask_sum, one], name="seqlens_sub")
    seqlens = b.node("Cast", [seqlens64], to=TensorProto.INT32, name="seqlens_k")
    mask_shape = b.node("Shape", ["attention_mask"], name="mask_shape")
    total64 = b.node("Gather", [mask_shape, b.init("idx1", np.array(1, np.int64))], axis=0, name="total_gather")
    total = b.node("Cast", [total64], to=TensorProto.INT32, name="total_seq_len")

    def nbits(x, key, name, zp=True):
        packed, scales, zps, _ = quantize_int4(w[key], zero_points=zp)
        k, n = w[key].shape
        ins = [x, b.init(f"{name}.qweight", packed), b.init(f"{name}.scales", scales)]
        if zps is not None:
            ins.append(b.init(f"{name}.qzeros", zps))
        return b.node("MatMulNBits", ins, domain="com.microsoft", name=name, K=k, N=n, bits=4, block_size=32)

    x = b.node("Gather", ["embed_tokens", "input_ids"], name="embed")
    residual = x
    h = b.node(
        "SimplifiedLayerNormalization",
        [x, b.init("l0.ln1", w["l0.ln1"])],
        name="l0.input_norm",
        axis=-1,
        epsilon=EPS,
        stash_type=1,
    )
    for i in range(LAYERS):
        qkv_w = np.concatenate([w[f"l{i}.q"], w[f"l{i}.k"], w[f"l{i}.v"]], axis=1)
        w[f"l{i}.qkv"] = qkv_w
        qkv = nbits(h, f"l{i}.qkv", f"l{i}.qkv_proj", zp=(i % 2 == 0))
        attn, _, _ = b.node(
            "GroupQueryAttention",
            [qkv, "", "", f"past_key_values.{i}.key", f"past_key_values.{i}.value", seqlens, total, "cos_cache", "sin_cache"],
            domain="com.microsoft",
            name=f"l{i}.attn",
            outputs=[f"l{i}.attn_out", f"present.{i}.key", f"present.{i}.value"],
            num_heads=HEADS,
            kv_num_heads=KV_HEADS,
            do_rotary=1,
            rotary_interleaved=0,
            local_window_size=-1,
            scale=1.0 / np.sqrt(HEAD),
        )
        o = nbits(attn, f"l{i}.o", f"l{i}.o_proj")
        h, _, _, residual = b.node(
            "SkipSimplifiedLayerNormalization",
            [o, residual, b.init(f"l{i}.ln2", w[f"l{i}.ln2"])],
            domain="com.microsoft",
            name=f"l{i}.post_attn_norm",
            outputs=[f"l{i}.post_norm", "", "", f"l{i}.residual2"],
            epsilon=EPS,
        )
        gate = nbits(h, f"l{i}.gate", f"l{i}.gate_proj", zp=False)
        up = nbits(h, f"l{i}.up", f"l{i}.up_proj")
        act = b.node("Mul", [gate, b.node("Sigmoid", [gate], name=f"l{i}.sigmoid")], name=f"l{i}.silu")
        down = nbits(b.node("Mul", [act, up], name=f"l{i}.swiglu"), f"l{i}.down", f"l{i}.down_proj")
        last = i == LAYERS - 1
        gamma = w["norm"] if last else w[f"l{i + 1}.ln1"]
        h, _, _, residual = b.node(
            "SkipSimplifiedLayerNormalization",
            [down, residual, b.init(f"l{i}.next_norm", gamma)],
            domain="com.microsoft",
            name=f"l{i}.next_norm",
            outputs=[f"l{i}.next_norm_out", "", "", f"l{i}.residual3"],
            epsilon=EPS,
        )
    nbits(h, "lm_head", "lm_head")
    b.nodes[-1].output[0] = "logits"

    f = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", f, ["batch_size", "sequence_length", VOCAB])]
    for i in range(LAYERS):
        for kind in ("key", "value"):
            inputs.append(
                helper.make_tensor_value_info(
                    f"past_key_values.{i}.{kind}", f, ["batch_size", KV_HEADS, "past_sequence_length", HEAD]
                )
            )
            outputs.append(
                helper.make_tensor_value_info(
                    f"present.{i}.{kind}", f, ["batch_size", KV_HEADS, "total_sequence_length", HEAD]
                )
            )
    graph = helper.make_graph(b.nodes, "tiny_genai", inputs, outputs, b.inits)
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 21), helper.make_opsetid("com.microsoft", 1)]
    )
    model.ir_version = 10
    os.makedirs(out_dir, exist_ok=True)
    onnx.save(model, os.path.join(out_dir, "model.onnx"))
    config = {
        "model": {
            "bos_token_id": BOS,
            "context_length": CONTEXT,
            "decoder": {
                "session_options": {"log_id": "onnxruntime-genai", "provider_options": []},
                "filename": "model.onnx",
                "head_size": HEAD,
                "hidden_size": HIDDEN,
                "inputs": {
                    "input_ids": "input_ids",
                    "attention_mask": "attention_mask",
                    "past_key_names": "past_key_values.%d.key",
                    "past_value_names": "past_key_values.%d.value",
                },
                "outputs": {
                    "logits": "logits",
                    "present_key_names": "present.%d.key",
                    "present_value_names": "present.%d.value",
                },
                "num_attention_heads": HEADS,
                "num_hidden_layers": LAYERS,
                "num_key_value_heads": KV_HEADS,
            },
            "eos_token_id": [EOS],
            "pad_token_id": EOS,
            "type": "qwen2",
            "vocab_size": VOCAB,
        },
        "search": {
            "diversity_penalty": 0.0,
            "do_sample": False,
            "early_stopping": True,
            "length_penalty": 1.0,
            "max_length": CONTEXT,
            "min_length": 0,
            "no_repeat_ngram_size": 0,
            "num_beams": 1,
            "num_return_sequences": 1,
            "past_present_share_buffer": True,
            "repetition_penalty": 1.0,
            "temperature": 1.0,
            "top_k": 1,
            "top_p": 1.0,
        },
    }
    with open(os.path.join(out_dir, "genai_config.json"), "w") as fh:
        json.dump(config, fh, indent=4)


# ---------------------------------------------------------------------------------------------
# optimum/: standard ONNX ops, Concat KV cache, position_ids, config.json.


def build_optimum(w, out_dir):
    b = Builder()
    cos, sin = rotary_tables()
    # Hugging Face layout: [positions, head] with the half-tables repeated.
    b.init("cos_table", np.concatenate([cos, cos], axis=1))
    b.init("sin_table", np.concatenate([sin, sin], axis=1))
    b.init("embed_tokens", w["embed"])
    i64 = lambda name, v: b.init(name, np.array(v, np.int64))  # noqa: E731
    i64("c_axes_last", [-1])
    i64("c_axis1", [1])
    i64("c_zero", 0)
    i64("c_one", 1)
    i64("c_half_lo_start", [0])
    i64("c_half_lo_end", [HEAD // 2])
    i64("c_half_hi_end", [HEAD])
    i64("c_heads_shape", [0, 0, HEADS, HEAD])
    i64("c_kv_shape", [0, 0, KV_HEADS, HEAD])
    i64("c_merge_shape", [0, 0, HIDDEN])
    i64("c_rep_expand", [1, 1, HEADS // KV_HEADS, 1, 1])
    i64("c_rep_shape", [0, HEADS, -1, HEAD])
    b.init("c_eps", np.array(EPS, np.float32))
    b.init("c_two", np.array(2.0, np.float32))
    b.init("c_scale", np.array(1.0 / np.sqrt(HEAD), np.float32))
    b.init("c_zero_f", np.array(0.0, np.float32))
    b.init("c_neg", np.array(-1e9, np.float32))

    def rms(x, gamma, name):
        sq = b.node("Pow", [x, "c_two"], name=f"{name}.pow")
        mean = b.node("ReduceMean", [sq, "c_axes_last"], keepdims=1, name=f"{name}.mean")
        rstd = b.node("Sqrt", [b.node("Add", [mean, "c_eps"], name=f"{name}.add")], name=f"{name}.sqrt")
        normed = b.node("Div", [x, rstd], name=f"{name}.div")
        return b.node("Mul", [normed, b.init(f"{name}.weight", gamma)], name=f"{name}.mul")

    def rotate(x, cos_b, sin_b, name):
        lo = b.node("Slice", [x, "c_half_lo_start", "c_half_lo_end", "c_axes_last"], name=f"{name}.lo")
        hi = b.node("Slice", [x, "c_half_lo_end", "c_half_hi_end", "c_axes_last"], name=f"{name}.hi")
        rot = b.node("Concat", [b.node("Neg", [hi], name=f"{name}.neg"), lo], axis=-1, name=f"{name}.rot")
        a = b.node("Mul", [x, cos_b], name=f"{name}.xcos")
        c = b.node("Mul", [rot, sin_b], name=f"{name}.rsin")
        return b.node("Add", [a, c], name=f"{name}.rope")

    # Causal + padding bias [batch, 1, seq, total] from attention_mask and the query count.
    total = b.node("Gather", [b.node("Shape", ["attention_mask"], name="mask_shape"), "c_one"], axis=0, name="total")
    seq = b.node("Gather", [b.node("Shape", ["input_ids"], name="ids_shape"), "c_one"], axis=0, name="seq")
    past = b.node("Sub", [total, seq], name="past_len")
    keys = b.node("Range", ["c_zero", total, "c_one"], name="key_pos")
    queries = b.node("Unsqueeze", [b.node("Range", [past, total, "c_one"], name="query_pos"), "c_axes_last"], name="query_col")
    causal = b.node("LessOrEqual", [keys, queries], name="causal")
    pad = b.node(
        "Unsqueeze",
        [b.node("Cast", ["attention_mask"], to=TensorProto.BOOL, name="mask_bool"), b.init("c_axes_12", np.array([1, 2], np.int64))],
        name="mask_4d",
    )
    allowed = b.node("And", [causal, pad], name="allowed")
    bias = b.node("Where", [allowed, "c_zero_f", "c_neg"], name="attn_bias")
    cos_b = b.node("Unsqueeze", [b.node("Gather", ["cos_table", "position_ids"], name="cos_g"), "c_axis1"], name="cos_b")
    sin_b = b.node("Unsqueeze", [b.node("Gather", ["sin_table", "position_ids"], name="sin_g"), "c_axis1"], name="sin_b")

    x = b.node("Gather", ["embed_tokens", "input_ids"], name="embed")
    for i in range(LAYERS):
        p = f"layers.{i}"
        h = rms(x, w[f"l{i}.ln1"], f"{p}.input_layernorm")
        proj = lambda inp, key, name: b.node("MatMul", [inp, b.init(f"{name}.weight", w[key])], name=name)  # noqa: E731
        q = proj(h, f"l{i}.q", f"{p}.q_proj")
        k = proj(h, f"l{i}.k", f"{p}.k_proj")
        v = proj(h, f"l{i}.v", f"{p}.v_proj")
        perm = [0, 2, 1, 3]
        q = b.node("Transpose", [b.node("Reshape", [q, "c_heads_shape"], name=f"{p}.q_r")], perm=perm, name=f"{p}.q_t")
        k = b.node("Transpose", [b.node("Reshape", [k, "c_kv_shape"], name=f"{p}.k_r")], perm=perm, name=f"{p}.k_t")
        v = b.node("Transpose", [b.node("Reshape", [v, "c_kv_shape"], name=f"{p}.v_r")], perm=perm, name=f"{p}.v_t")
        q = rotate(q, cos_b, sin_b, f"{p}.q_rot")
        k = rotate(k, cos_b, sin_b, f"{p}.k_rot")
        pk = b.node("Concat", [f"past_key_values.{i}.key", k], axis=2, outputs=[f"present.{i}.key"], name=f"{p}.k_cat")
        pv = b.node("Concat", [f"past_key_values.{i}.value", v], axis=2, outputs=[f"present.{i}.value"], name=f"{p}.v_cat")

        def repeat(t, name):
            u = b.node("Unsqueeze", [t, b.init(f"{name}.axis", np.array([2], np.int64))], name=f"{name}.u")
            e = b.node("Expand", [u, "c_rep_expand"], name=f"{name}.e")
            return b.node("Reshape", [e, "c_rep_shape"], name=f"{name}.r")

        kr, vr = repeat(pk, f"{p}.k_rep"), repeat(pv, f"{p}.v_rep")
        scores = b.node("MatMul", [q, b.node("Transpose", [kr], perm=[0, 1, 3, 2], name=f"{p}.kT")], name=f"{p}.qk")
        scores = b.node("Add", [b.node("Mul", [scores, "c_scale"], name=f"{p}.scale"), bias], name=f"{p}.bias")
        probs = b.node("Softmax", [scores], axis=-1, name=f"{p}.softmax")
        ctx = b.node("MatMul", [probs, vr], name=f"{p}.pv")
        ctx = b.node("Reshape", [b.node("Transpose", [ctx], perm=perm, name=f"{p}.ctx_t"), "c_merge_shape"], name=f"{p}.ctx_r")
        x = b.node("Add", [x, proj(ctx, f"l{i}.o", f"{p}.o_proj")], name=f"{p}.res1")
        h = rms(x, w[f"l{i}.ln2"], f"{p}.post_attention_layernorm")
        gate = proj(h, f"l{i}.gate", f"{p}.gate_proj")
        up = proj(h, f"l{i}.up", f"{p}.up_proj")
        act = b.node("Mul", [gate, b.node("Sigmoid", [gate], name=f"{p}.sigmoid")], name=f"{p}.silu")
        down = proj(b.node("Mul", [act, up], name=f"{p}.swiglu"), f"l{i}.down", f"{p}.down_proj")
        x = b.node("Add", [x, down], name=f"{p}.res2")
    h = rms(x, w["norm"], "norm")
    b.node("MatMul", [h, b.init("lm_head.weight", w["lm_head"])], outputs=["logits"], name="lm_head")

    f = TensorProto.FLOAT
    inputs = [
        helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
        helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch_size", "total_sequence_length"]),
        helper.make_tensor_value_info("position_ids", TensorProto.INT64, ["batch_size", "sequence_length"]),
    ]
    outputs = [helper.make_tensor_value_info("logits", f, ["batch_size", "sequence_length", VOCAB])]
    for i in range(LAYERS):
        for kind in ("key", "value"):
            inputs.append(
                helper.make_tensor_value_info(
                    f"past_key_values.{i}.{kind}", f, ["batch_size", KV_HEADS, "past_sequence_length", HEAD]
                )
            )
            outputs.append(
                helper.make_tensor_value_info(
                    f"present.{i}.{kind}", f, ["batch_size", KV_HEADS, "total_sequence_length", HEAD]
                )
            )
    graph = helper.make_graph(b.nodes, "tiny_optimum", inputs, outputs, b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    os.makedirs(out_dir, exist_ok=True)
    onnx.save(model, os.path.join(out_dir, "model.onnx"))
    config = {
        "architectures": ["Qwen2ForCausalLM"],
        "model_type": "qwen2",
        "bos_token_id": BOS,
        "eos_token_id": EOS,
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "max_position_embeddings": CONTEXT,
        "num_attention_heads": HEADS,
        "num_hidden_layers": LAYERS,
        "num_key_value_heads": KV_HEADS,
        "rms_norm_eps": EPS,
        "rope_theta": THETA,
        "torch_dtype": "float32",
        "vocab_size": VOCAB,
        "use_cache": True,
    }
    with open(os.path.join(out_dir, "config.json"), "w") as fh:
        json.dump(config, fh, indent=2)


# ---------------------------------------------------------------------------------------------
# The onnxruntime reference: greedy decoding, the KV cache fed back as each format's runtime does.


def reference(folder, kind):
    import onnxruntime as ort

    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(os.path.join(folder, "model.onnx"), opts, providers=["CPUExecutionProvider"])
    ids = list(REFERENCE_PROMPT_IDS)
    # genai with past_present_share_buffer: fixed buffers of max_length rows, fed back as is;
    # optimum: empty pasts that grow by Concat.
    rows = CONTEXT if kind == "genai" else 0
    past = {
        f"past_key_values.{i}.{k}": np.zeros((1, KV_HEADS, rows, HEAD), np.float32)
        for i in range(LAYERS)
        for k in ("key", "value")
    }
    new_ids, total, steps, tokens = ids, 0, [], []
    prompt_logits = None
    for step in range(1 + REFERENCE_DECODE_STEPS):
        feeds = dict(past)
        feeds["input_ids"] = np.array([new_ids], np.int64)
        feeds["attention_mask"] = np.ones((1, total + len(new_ids)), np.int64)
        if kind == "optimum":
            feeds["position_ids"] = np.arange(total, total + len(new_ids), dtype=np.int64)[None, :]
        outs = dict(zip([o.name for o in sess.get_outputs()], sess.run(None, feeds)))
        logits = outs["logits"][0]
        if step == 0:
            prompt_logits = logits
        else:
            steps.append(logits[-1])
        total += len(new_ids)
        for name in past:
            past[name] = outs[name.replace("past_key_values", "present")]
        token = int(np.argmax(logits[-1]))
        tokens.append(token)
        if token == EOS:
            break
        new_ids = [token]
    # tokens[0] came from the prompt's last logits, tokens[i + 1] from step_logits[i].
    ref = {
        "kind": kind,
        "prompt_ids": ids,
        "decode_steps": REFERENCE_DECODE_STEPS,
        "prompt_logits": prompt_logits.astype(np.float64).tolist(),
        "step_logits": [s.astype(np.float64).tolist() for s in steps],
        "tokens": tokens,
        "onnxruntime": ort.__version__,
    }
    with open(os.path.join(folder, "reference.json"), "w") as fh:
        json.dump(ref, fh)
    return tokens


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("outdir")
    ap.add_argument("--reference", action="store_true", help="also write reference.json (needs onnxruntime)")
    args = ap.parse_args()
    w = weights()
    tok = tokenizer_json()
    for kind, build in (("genai", build_genai), ("optimum", build_optimum)):
        folder = os.path.join(args.outdir, kind)
        build(dict(w), folder)
        with open(os.path.join(folder, "tokenizer.json"), "w", encoding="utf-8") as fh:
            json.dump(tok, fh, ensure_ascii=False)
        if args.reference:
            tokens = reference(folder, kind)
            print(f"{kind}: {folder} (reference: {len(tokens)} tokens, first {tokens[:8]})")
        else:
            print(f"{kind}: {folder}")


if __name__ == "__main__":
    sys.exit(main())
