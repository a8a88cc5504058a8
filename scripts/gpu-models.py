#!/usr/bin/env python3
"""Runs ON the GPU machine: exports a torchvision ResNet-50 and a transformers BERT-base with
random weights (nothing is downloaded), checks `onnx-runtime run --ep cuda` against
onnxruntime (CPU) on the same inputs, and times `onnx-runtime bench --ep cuda` side by side
with PyTorch eager on the same GPU.

    python3 scripts/gpu-models.py --cli .gpu/onnx-runtime [--work DIR] [--only resnet50 bert]
                                  [--iterations 50] [--no-bench]

Outputs are compared as |ours - ort| <= atol + rtol * |ort| (rtol 1e-3, atol 1e-4 for ResNet-50
logits; BERT's hidden states likewise). Prints a Markdown table last; exits 1 on a mismatch.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

RTOL, ATOL = 1e-3, 1e-4


def export_resnet50(path: Path):
    import torch
    import torchvision

    torch.manual_seed(0)
    model = torchvision.models.resnet50(weights=None).eval()
    x = torch.randn(1, 3, 224, 224)
    export(model, (x,), path, ["input"], ["logits"])
    return model, {"input": x.numpy()}


def export_bert(path: Path):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig()).eval()
    seq = 128
    ids = torch.randint(0, 30522, (1, seq))
    mask = torch.ones(1, seq, dtype=torch.int64)
    types = torch.zeros(1, seq, dtype=torch.int64)

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    w = Wrap(model).eval()
    export(w, (ids, mask, types), path, ["input_ids", "attention_mask", "token_type_ids"],
           ["last_hidden_state"])
    return w, {"input_ids": ids.numpy(), "attention_mask": mask.numpy(),
               "token_type_ids": types.numpy()}


def export(model, args, path: Path, inputs, outputs):
    import torch

    try:
        torch.onnx.export(model, args, str(path), input_names=inputs, output_names=outputs,
                          opset_version=17, dynamo=False)
    except Exception as e:  # the TorchScript exporter may be gone: use the dynamo one
        print(f"TorchScript export failed ({e}); trying dynamo=True", file=sys.stderr)
        torch.onnx.export(model, args, str(path), input_names=inputs, output_names=outputs,
                          opset_version=18, dynamo=True, external_data=False)


def ort_run(path: Path, feeds):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return [o for o in s.run(None, feeds)]


def cli_run(cli: Path, path: Path, feeds, work: Path):
    ind, outd = work / "in", work / "out"
    ind.mkdir(parents=True, exist_ok=True)
    outd.mkdir(parents=True, exist_ok=True)
    cmd = [str(cli), "run", str(path), "--ep", "cuda", "--output-dir", str(outd)]
    for k, v in feeds.items():
        f = ind / f"{k}.npy"
        np.save(f, v)
        cmd += ["--input", f"{k}={f}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return None, r.stderr[-2000:] + r.stdout[-2000:]
    outs = sorted(outd.glob("*.npy"))
    return [np.load(f) for f in outs], r.stdout


def cli_bench(cli: Path, path: Path, ep: str, iterations: int, inputs: Path):
    """`bench` on the inputs `cli_run` saved (random token ids would be out of range)."""
    cmd = [str(cli), "bench", str(path), "--ep", ep, "--iterations", str(iterations),
           "--warmup", "5"]
    for f in sorted(inputs.glob("*.npy")):
        cmd += ["--input", f"{f.stem}={f}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = re.search(r"p50 ([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        return None, (r.stderr + r.stdout)[-1500:]
    return float(m.group(1)), r.stdout


def torch_time(model, feeds, iterations: int, half: bool = False):
    import torch

    dev = torch.device("cuda")
    m = model.to(dev)
    args = [torch.from_numpy(v).to(dev) for v in feeds.values()]
    if half:
        m = m.half()
        args = [a.half() if a.is_floating_point() else a for a in args]
    with torch.inference_mode():
        for _ in range(10):
            m(*args)
        torch.cuda.synchronize()
        times = []
        for _ in range(iterations):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            m(*args)
            e.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(e))
    m.to("cpu")
    return float(np.median(times))


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpu-models"))
    ap.add_argument("--only", nargs="*", default=["resnet50", "bert"])
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--no-bench", action="store_true")
    a = ap.parse_args()
    a.cli = a.cli.resolve()
    a.work.mkdir(parents=True, exist_ok=True)
    rows, status = [], 0
    makers = {"resnet50": export_resnet50, "bert": export_bert}
    for name in a.only:
        path = a.work / f"{name}.onnx"
        t0 = time.time()
        model, feeds = makers[name](path)
        print(f"{name}: exported in {time.time() - t0:.1f} s", flush=True)
        want = ort_run(path, feeds)
        got, log = cli_run(a.cli, path, feeds, a.work / name)
        if got is None:
            rows.append((name, "ERROR", log.replace("\n", " ")[:400], "", "", ""))
            status = 1
            continue
        worst = 0.0
        ok = len(got) == len(want)
        for g, w in zip(got, want):
            ok &= g.shape == w.shape and bool(np.all(np.abs(g - w) <= ATOL + RTOL * np.abs(w)))
            worst = max(worst, float(np.max(np.abs(g.astype(np.float64) - w))))
        placed = re.findall(r"(\d+) of (\d+) nodes? on the device|on the device.*", log)
        status |= 0 if ok else 1
        ours = cpu = torch32 = torch16 = None
        if not a.no_bench:
            ours, blog = cli_bench(a.cli, path, "cuda", a.iterations, a.work / name / "in")
            if ours is None:
                print(blog)
            torch32 = torch_time(model, feeds, a.iterations)
            if name == "resnet50":
                torch16 = torch_time(model, feeds, a.iterations, half=True)
        rows.append((name, "PASS" if ok else "MISMATCH", f"max |diff| {worst:.2e}",
                     f"{ours:.3f}" if ours else "-", f"{torch32:.3f}" if torch32 else "-",
                     f"{torch16:.3f}" if torch16 else "-"))
        print(log[-800:], flush=True)
    print()
    print("| model | vs onnxruntime CPU | error | ours --ep cuda p50 ms | torch eager fp32 ms "
          "| torch eager fp16 ms |")
    print("| --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return status


if __name__ == "__main__":
    sys.exit(main())
