#!/usr/bin/env python3
"""Runs where torch and transformers are (the GPU machine): writes a tiny random-weight BERT
encoder exported exactly as scripts/gpu-session-bench.py exports BERT-base (TorchScript
exporter, opset 17, dynamic batch; transformers' SDPA attention), so the session's
transformer fusions are tested on the graph a real exporter writes.

    python3 scripts/export-encoder-fixture.py OUT.onnx

Sizes: 2 layers, hidden 64, 4 heads, intermediate 128, vocab 512, 128 positions.
"""

import importlib.util
import sys
from pathlib import Path

import torch
from transformers import BertConfig, BertModel


def main() -> int:
    out = Path(sys.argv[1])
    spec = importlib.util.spec_from_file_location(
        "bench", Path(__file__).with_name("gpu-session-bench.py"))
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=512, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=128)
    model = bench.bert_last_hidden(BertModel(cfg).eval())
    names = ["input_ids", "attention_mask", "token_type_ids"]
    feeds = {"input_ids": torch.randint(0, 512, (1, 16)).numpy(),
             "attention_mask": torch.ones(1, 16, dtype=torch.int64).numpy(),
             "token_type_ids": torch.zeros(1, 16, dtype=torch.int64).numpy()}
    if not torch.cuda.is_available():
        raise SystemExit("needs a CUDA device (the export helper moves feeds to cuda)")
    model = model.cuda()
    bench.export(model, names, ["last_hidden_state"], feeds, out)
    print(f"{out}: {out.stat().st_size} bytes")
    return 0


if __name__ == "__main__":
    sys.exit(main())
