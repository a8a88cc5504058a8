#!/usr/bin/env python3
"""Writes the feeds of one decode step of an LLM decoder folder as .npy files, for
`onnx-runtime bench MODEL --input NAME=FILE ...` (a per-node profile of one step with
`--profile`, or the replayed step's latency with `--ep cuda`).

    python3 scripts/decode-step-inputs.py MODEL_DIR OUTDIR [--cached 64] [--max-length 144]

The step feeds one token after `--cached` cached ones, the way `onnx-runtime generate` feeds
a decode step: with a shared past/present buffer (genai_config.json's
past_present_share_buffer) the caches hold `--max-length` rows and the attention mask is
padded with zeros to that length; otherwise the caches hold `--cached` rows and the mask is
`--cached + 1` ones. Cache contents are random (fixed seed). Prints the `--input` arguments.
"""

import argparse
import json
import os
import sys

import numpy as np
import onnx

DTYPES = {onnx.TensorProto.FLOAT: np.float32, onnx.TensorProto.FLOAT16: np.float16,
          onnx.TensorProto.INT64: np.int64, onnx.TensorProto.INT32: np.int32}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("model_dir")
    ap.add_argument("outdir")
    ap.add_argument("--cached", type=int, default=64)
    ap.add_argument("--max-length", type=int, default=144)
    a = ap.parse_args()
    cfg_path = os.path.join(a.model_dir, "genai_config.json")
    share, filename, dec = False, "model.onnx", {}
    if os.path.isfile(cfg_path):
        cfg = json.load(open(cfg_path))
        dec = cfg["model"]["decoder"]
        filename = dec.get("filename", filename)
        share = cfg.get("search", {}).get("past_present_share_buffer", False)
    model = onnx.load(os.path.join(a.model_dir, filename), load_external_data=False)
    rows = a.max_length if share else a.cached
    total = a.cached + 1
    rng = np.random.default_rng(0)
    os.makedirs(a.outdir, exist_ok=True)
    args = []
    for inp in model.graph.input:
        t = inp.type.tensor_type
        dt = DTYPES.get(t.elem_type)
        if dt is None:
            print(f"{inp.name}: element type {t.elem_type} is not handled", file=sys.stderr)
            return 2
        name = inp.name
        if name == "input_ids":
            v = np.array([[17]], dt)
        elif name == "attention_mask":
            v = np.zeros((1, rows if share else total), dt)
            v[0, :total] = 1
        elif name == "position_ids":
            v = np.array([[a.cached]], dt)
        elif "past" in name:
            dims = [d.dim_value if d.HasField("dim_value") else None for d in t.shape.dim]
            # Symbolic cache dimensions: the heads and head size from genai_config.json.
            heads = dims[1] or dec.get("num_key_value_heads")
            width = dims[3] or dec.get("head_size")
            if not heads or not width:
                print(f"{name}: the cache's heads / head size are not in the model or "
                      "genai_config.json", file=sys.stderr)
                return 2
            shape = [1, heads, rows, width]
            v = (rng.standard_normal(shape) * 0.5).astype(dt)
        else:
            print(f"{name}: unknown decoder input", file=sys.stderr)
            return 2
        path = os.path.join(a.outdir, name.replace("/", "_") + ".npy")
        np.save(path, v)
        args += ["--input", f"{name}={path}"]
    print(" ".join(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
