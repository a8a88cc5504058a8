#!/usr/bin/env python3
"""Runs ON the GPU machine: the LLM decode table of the generation issue. Builds random-weight
Hugging Face models of real shapes (Qwen2.5 0.5B and 1.5B, Llama 3.2 1B, Phi-3 mini;
nothing downloaded), exports each with the
onnxruntime-genai model builder (`python3 -m onnxruntime_genai.models.builder -i HF -o OUT -p
fp16|int4 -e cuda`), then, on the same weights and the same 16 prompt ids, times
  - `onnx-runtime generate OUT --ep cuda --bench` (greedy, end-of-sequence ignored, 128 new
    tokens): prompt ms, time to first token, decode tokens/s, and its CUDA graph report,
  - Hugging Face transformers `generate` with a static cache (fp16, greedy, 128 new tokens;
    decode rate from the difference between a 128-token and a 1-token generation),
and prints a Markdown table of decode tokens/s, then checks that our first 32 greedy tokens
agree with onnxruntime (CPU) on the same export, and reports how far they agree with Hugging
Face's (fp16 rounding differs there, and int4 weights are not Hugging Face's).

    python3 scripts/gpu-llm-bench.py --cli .gpu/onnx-runtime [--sizes 0.5b 1.5b llama-1b phi3-mini]
        [--precisions fp16 int4] [--work DIR] [--new-tokens 128] [--check-tokens 32]
        [--skip-hf] [--skip-check] [--rebuild]

The builder is not on that machine: carry the `onnxruntime-genai` wheel (and its missing
requirements) as /work/.library/device/README.md shows, and put it on PYTHONPATH. Without it
the script says so and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

QWEN = dict(arch="Qwen2", vocab_size=151936, max_position_embeddings=32768, rope_theta=1e6,
            rms_norm_eps=1e-6, tie_word_embeddings=True)
SIZES = {  # real shapes (head size = hidden / heads) of the families the builder exports
    # Qwen2.5 0.5B and 1.5B: tied embeddings, 2 KV heads
    "0.5b": dict(QWEN, hidden_size=896, num_hidden_layers=24, num_attention_heads=14,
                 num_key_value_heads=2, intermediate_size=4864),
    "1.5b": dict(QWEN, hidden_size=1536, num_hidden_layers=28, num_attention_heads=12,
                 num_key_value_heads=2, intermediate_size=8960),
    # Llama 3.2 1B (plain rotary: the llama3 frequency scaling changes no shape)
    "llama-1b": dict(arch="Llama", vocab_size=128256, max_position_embeddings=8192,
                     rope_theta=5e5, rms_norm_eps=1e-5, tie_word_embeddings=True,
                     hidden_size=2048, num_hidden_layers=16, num_attention_heads=32,
                     num_key_value_heads=8, intermediate_size=8192),
    # Phi-3 mini 4k: packed QKV and gate/up projections, as many KV heads as query heads
    "phi3-mini": dict(arch="Phi3", vocab_size=32064, max_position_embeddings=4096,
                      original_max_position_embeddings=4096, rope_theta=1e4,
                      rms_norm_eps=1e-5, tie_word_embeddings=False, hidden_size=3072,
                      num_hidden_layers=32, num_attention_heads=32, num_key_value_heads=32,
                      intermediate_size=8192),
}
PROMPT_LEN = 16


def log(*a):
    print(*a, file=sys.stderr, flush=True)


def prompt_ids(size: str) -> list[int]:
    """The same 16 ids for every model whose vocabulary holds them (Qwen's, Llama's); drawn
    below the vocabulary's size for the others."""
    rng = np.random.default_rng(15)
    return [int(x) for x in rng.integers(1000, min(100000, vocab(size) - 1), PROMPT_LEN)]


def vocab(size: str) -> int:
    return SIZES[size]["vocab_size"]


def hf_classes(size: str):
    import transformers

    arch = SIZES[size]["arch"]
    return getattr(transformers, f"{arch}Config"), getattr(transformers, f"{arch}ForCausalLM")


def byte_alphabet() -> list[str]:
    """The byte-level BPE alphabet: printable bytes stand for themselves, the others for
    the code points from 256 up, in byte order."""
    printable = [b for b in range(256)
                 if 33 <= b <= 126 or 161 <= b <= 172 or 174 <= b <= 255]
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def write_tokenizer(hf: Path):
    """A byte-level BPE tokenizer (256 byte tokens and an end token, no merges): the builder
    copies the folder's tokenizer next to the export, and nothing can be downloaded."""
    vocab = {c: i for i, c in enumerate(byte_alphabet())}
    end = "<|endoftext|>"
    byte_level = {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
                  "use_regex": True}
    doc = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": len(vocab), "content": end, "single_word": False,
                          "lstrip": False, "rstrip": False, "normalized": False,
                          "special": True}],
        "normalizer": None, "pre_tokenizer": byte_level, "post_processor": None,
        "decoder": byte_level,
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "vocab": vocab, "merges": []},
    }
    (hf / "tokenizer.json").write_text(json.dumps(doc))
    (hf / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast", "eos_token": end, "pad_token": end,
        "model_max_length": 32768}))
    from transformers import AutoTokenizer

    try:
        AutoTokenizer.from_pretrained(hf)
    except Exception as e:  # the builder would fail later, less clearly
        raise RuntimeError(f"transformers cannot load the tokenizer written to {hf}: {e}")


def build_hf(size: str, hf: Path):
    import torch

    if (hf / "config.json").is_file():
        return
    config_cls, model_cls = hf_classes(size)
    shape = {k: v for k, v in SIZES[size].items() if k != "arch"}
    log(f"[{size}] random-weight {model_cls.__name__} -> {hf}")
    end = vocab(size) - 1
    cfg = config_cls(bos_token_id=None, eos_token_id=end, pad_token_id=end, **shape)
    cfg.architectures = [model_cls.__name__]
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = model_cls(cfg)
    model = model.to(torch.float16).eval()
    model.save_pretrained(hf)
    write_tokenizer(hf)


def builder_available() -> str | None:
    """None when the builder imports; else why not."""
    r = subprocess.run([sys.executable, "-c", "import onnxruntime_genai.models.builder"],
                       capture_output=True, text=True)
    return None if r.returncode == 0 else (r.stderr.strip().splitlines() or ["?"])[-1]


def export(hf: Path, out: Path, precision: str, cache: Path):
    if (out / "genai_config.json").is_file():
        return
    log(f"export {hf.name} {precision} -> {out}")
    t = time.time()
    cmd = [sys.executable, "-m", "onnxruntime_genai.models.builder", "-i", str(hf), "-o",
           str(out), "-p", precision, "-e", "cuda", "-c", str(cache)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"the builder failed ({' '.join(cmd)}):\n{r.stderr[-3000:]}")
    log(f"  exported in {time.time() - t:.0f} s")


def ours_bench(cli: Path, out: Path, ids, new: int) -> dict:
    cmd = [str(cli), "generate", str(out), "--ep", "cuda", "--prompt-ids",
           ",".join(map(str, ids)), "--max-new-tokens", str(new), "--greedy", "--ignore-eos",
           "--bench", "--max-length", str(len(ids) + new)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        return {"error": (r.stderr or r.stdout).strip()[-800:]}
    err = r.stderr
    num = lambda pat: float(m.group(1)) if (m := re.search(pat, err)) else None
    return {
        "prompt_ms": num(r"prompt: \d+ tokens in ([\d.]+) ms"),
        "ttft_ms": num(r"time to first token: ([\d.]+) ms"),
        "decode_steps": num(r"decode: (\d+) tokens"),
        "decode_tps": num(r"decode: \d+ tokens in [\d.]+ ms \(([\d.]+) tokens/s\)"),
        "graphs": [l for l in err.splitlines() if l.startswith("cuda graph")],
        "load": next((l for l in err.splitlines() if l.startswith("model:")), ""),
    }


def ours_tokens(cli: Path, out: Path, ids, n: int) -> list[int] | str:
    cmd = [str(cli), "generate", str(out), "--ep", "cuda", "--prompt-ids",
           ",".join(map(str, ids)), "--max-new-tokens", str(n), "--greedy", "--ignore-eos",
           "--print-ids", "--max-length", str(len(ids) + n)]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        return (r.stderr or r.stdout).strip()[-800:]
    return [int(t) for t in r.stdout.split()]


def ort_tokens(out: Path, ids, n: int):
    """Greedy tokens and each step's top-2 logit gap from onnxruntime (CPU) on the export,
    fed as onnxruntime-genai does: the shared max-length past, the unpadded mask."""
    import onnxruntime as ort

    cfg = json.loads((out / "genai_config.json").read_text())
    dec = cfg["model"]["decoder"]
    so = ort.SessionOptions()
    so.intra_op_num_threads = os.cpu_count() or 8
    s = ort.InferenceSession(str(out / dec["filename"]), so, providers=["CPUExecutionProvider"])
    types = {i.name: i.type for i in s.get_inputs()}
    names = [o.name for o in s.get_outputs()]
    L, kv, hs = len(ids) + n, dec["num_key_value_heads"], dec["head_size"]
    kv_dt = np.float16 if "float16" in types["past_key_values.0.key"] else np.float32
    past = {k: np.zeros((1, kv, L, hs), kv_dt) for k in types if k.startswith("past_key_values")}
    tokens, gaps, feed, total = [], [], list(ids), 0
    for _ in range(n):
        total += len(feed)
        f = {"input_ids": np.array([feed], np.int64),
             "attention_mask": np.ones((1, total), np.int64), **past}
        if "position_ids" in types:
            f["position_ids"] = np.arange(total - len(feed), total, dtype=np.int64)[None]
        res = dict(zip(names, s.run(None, f)))
        last = res["logits"][0, -1].astype(np.float32)
        top = np.argsort(last)[-2:]
        tokens.append(int(top[1]))
        gaps.append(float(last[top[1]] - last[top[0]]))
        past = {k.replace("present", "past_key_values"): v for k, v in res.items()
                if k.startswith("present")}
        feed = [tokens[-1]]
    return tokens, gaps


def hf_bench(size: str, hf: Path, ids, new: int):
    """Decode tokens/s of transformers generate with a static cache (fp16, greedy), and the
    greedy tokens."""
    import torch

    model = hf_classes(size)[1].from_pretrained(hf, dtype=torch.float16).cuda().eval()
    model.generation_config.eos_token_id = None
    x = torch.tensor([ids], device="cuda")
    mask = torch.ones_like(x)

    def gen(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            y = model.generate(x, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                               do_sample=False, cache_implementation="static",
                               pad_token_id=vocab(size) - 1)
        torch.cuda.synchronize()
        return time.perf_counter() - t, y[0, len(ids):].tolist()

    for _ in range(2):  # warm-up (kernels, static cache, any compilation)
        gen(new)
    t1 = min(gen(1)[0] for _ in range(3))
    tn, tokens = min(gen(new) for _ in range(3))
    del model
    torch.cuda.empty_cache()
    return {"decode_tps": (new - 1) / max(tn - t1, 1e-9), "tokens": tokens,
            "total_s": tn}


def agree(a, b) -> int:
    k = 0
    while k < min(len(a), len(b)) and a[k] == b[k]:
        k += 1
    return k


def fmt(v, spec=".0f"):
    return "—" if v is None else format(v, spec)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cli", type=Path, default=Path("target/release/onnx-runtime"))
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpu-llm-bench"))
    ap.add_argument("--sizes", nargs="*", default=["0.5b", "1.5b"], choices=list(SIZES))
    ap.add_argument("--precisions", nargs="*", default=["int4", "fp16"],
                    choices=["int4", "fp16"])
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--check-tokens", type=int, default=32)
    ap.add_argument("--skip-hf", action="store_true")
    ap.add_argument("--skip-check", action="store_true",
                    help="skip the token agreement with onnxruntime CPU")
    ap.add_argument("--rebuild", action="store_true", help="rebuild models and exports")
    a = ap.parse_args()
    a.cli = a.cli.resolve()
    if not a.cli.is_file():
        log(f"no onnx-runtime binary at {a.cli} (--cli)")
        return 2
    why = builder_available()
    if why is not None:
        log("the onnxruntime-genai model builder cannot be imported "
            f"(python3 -m onnxruntime_genai.models.builder): {why}\n"
            "carry the onnxruntime-genai wheel and its missing requirements as "
            "/work/.library/device/README.md shows, then put them on PYTHONPATH")
        return 2
    if a.rebuild and a.work.exists():
        import shutil

        shutil.rmtree(a.work)
    a.work.mkdir(parents=True, exist_ok=True)
    rows, hf_rates, failed = [], {}, False
    for size in a.sizes:
        ids = prompt_ids(size)
        log(f"[{size}] prompt ids: {ids}")
        hf = a.work / f"hf-{size}"
        build_hf(size, hf)
        if not a.skip_hf and "fp16" in a.precisions:
            log(f"[{size}] transformers static cache")
            hf_rates[size] = hf_bench(size, hf, ids, a.new_tokens)
        for prec in a.precisions:
            out = a.work / f"onnx-{size}-{prec}"
            export(hf, out, prec, a.work / "cache")
            log(f"[{size} {prec}] ours")
            r = ours_bench(a.cli, out, ids, a.new_tokens)
            row = {"size": size, "precision": prec, **r}
            if "error" not in r and not a.skip_check:
                n = a.check_tokens
                got = ours_tokens(a.cli, out, ids, n)
                want, gaps = ort_tokens(out, ids, n)
                if isinstance(got, str):
                    row["check"] = f"ours failed: {got}"
                    failed = True
                else:
                    k = agree(got, want)
                    row["check"] = (f"{k}/{n} greedy tokens equal to onnxruntime CPU"
                                    + ("" if k == n else
                                       f" (first differs at step {k}: ours {got[k]}, "
                                       f"onnxruntime {want[k]}, its top-2 gap {gaps[k]:.4f})"))
                    failed |= k < n
                    if prec == "fp16" and size in hf_rates:
                        h = agree(got, hf_rates[size]["tokens"])
                        row["check"] += f"; {h}/{n} equal to Hugging Face's fp16 greedy"
            failed |= "error" in r
            rows.append(row)
    cols = [f"{s} {p}" for s in a.sizes for p in a.precisions]
    print("\n| engine | " + " | ".join(cols) + " |")
    print("| --- |" + " --- |" * len(cols))
    ours_cells = []
    for s in a.sizes:
        for p in a.precisions:
            r = next(r for r in rows if r["size"] == s and r["precision"] == p)
            ours_cells.append(fmt(r.get("decode_tps")) + " tok/s" if "error" not in r
                              else "failed")
    print("| onnx-runtime `generate --ep cuda` (ours) | " + " | ".join(ours_cells) + " |")
    if hf_rates:
        cells = [fmt(hf_rates[s]["decode_tps"]) + " tok/s" if p == "fp16" and s in hf_rates
                 else "—" for s in a.sizes for p in a.precisions]
        print("| Hugging Face transformers 5, static cache | " + " | ".join(cells) + " |")
    print(f"\nbatch 1, {PROMPT_LEN}-token prompt, {a.new_tokens} new tokens greedy, random "
          "weights from the configs' real shapes; decode tokens/s over the tokens after the first.\n")
    print("| model | prompt ms | time to first token ms | decode tok/s | check |")
    print("| --- | --- | --- | --- | --- |")
    for r in rows:
        if "error" in r:
            print(f"| {r['size']} {r['precision']} | failed | | | {r['error'][:300]!r} |")
            continue
        print(f"| {r['size']} {r['precision']} | {fmt(r['prompt_ms'], '.2f')} | "
              f"{fmt(r['ttft_ms'], '.2f')} | {fmt(r['decode_tps'], '.1f')} | "
              f"{r.get('check', 'not checked')} |")
    for r in rows:
        for g in r.get("graphs", []):
            print(f"{r['size']} {r['precision']}: {g}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
