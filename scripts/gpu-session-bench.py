#!/usr/bin/env python3
"""Runs ON the GPU machine: the session-speed table of the GPU session issue. Exports a
torchvision ResNet-50 and a transformers BERT-base (random weights, nothing downloaded) in
float32 and float16 with a dynamic batch, then per (model, precision, batch) times, on the same
GPU and the same inputs:
  - `onnx-runtime bench --ep cuda` with CUDA graphs (`--cuda-graph auto`) and without (`off`),
  - PyTorch eager, PyTorch replaying a manually captured CUDA graph, and (with --compile)
    `torch.compile(mode="reduce-overhead")`.
Prints one Markdown table (p50 ms) and, per row, our capture report and whether the replayed
outputs equal the eager run's byte for byte, and our fp32/fp16 outputs against PyTorch's.

    python3 scripts/gpu-session-bench.py --cli .gpu/onnx-runtime [--only resnet50 bert]
        [--iterations 50] [--compile] [--work DIR] [--configs bert:fp16:1 ...]
        [--profile ROWS]   (also print our per-node profile, node by node, device-synced)
Configs: resnet50:fp16:1 resnet50:fp16:32 resnet50:fp32:1 bert:fp32:1 bert:fp16:1 bert:fp16:32
bert:fp16c:1 bert:fp16c:32 (fp16c: the float32 export run with `--precision fp16`, against
PyTorch's float16 model; see CONFIGS).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

CONFIGS = [  # (model, precision, batch)
    ("resnet50", "fp16", 1),
    ("resnet50", "fp16", 32),
    ("resnet50", "fp32", 1),
    ("bert", "fp32", 1),
    ("bert", "fp16", 1),
    ("bert", "fp16", 32),
    ("bert", "fp16c", 1),
    ("bert", "fp16c", 32),
]
# "fp16c": PyTorch runs the float16 model; we run the float32 export converted at load
# (`--precision fp16`). The TorchScript exporter writes `model.half()` BERT as a float32 graph
# with float16 weights cast up (session 13's dtype census), so "fp16" BERT is not a float16
# graph; "fp16c" is the float16 comparison.
SEQ = 128


def build(name: str):
    import torch

    torch.manual_seed(0)
    if name == "resnet50":
        import torchvision

        return torchvision.models.resnet50(weights=None).eval(), ["input"], ["logits"]
    from transformers import BertConfig, BertModel

    return bert_last_hidden(BertModel(BertConfig()).eval()), [
        "input_ids", "attention_mask", "token_type_ids"], ["last_hidden_state"]


def bert_last_hidden(bert):
    """`bert` as a module of (input_ids, attention_mask, token_type_ids) returning its
    last hidden state (what the exports take as their one output)."""
    import torch

    class Wrap(torch.nn.Module):
        def __init__(self, m):
            super().__init__()
            self.m = m

        def forward(self, input_ids, attention_mask, token_type_ids):
            return self.m(input_ids=input_ids, attention_mask=attention_mask,
                          token_type_ids=token_type_ids).last_hidden_state

    return Wrap(bert).eval()


def feeds_for(name: str, batch: int, half: bool):
    rng = np.random.default_rng(batch)
    if name == "resnet50":
        x = rng.standard_normal((batch, 3, 224, 224), dtype=np.float32)
        return {"input": x.astype(np.float16) if half else x}
    return {"input_ids": rng.integers(0, 30522, (batch, SEQ), dtype=np.int64),
            "attention_mask": np.ones((batch, SEQ), dtype=np.int64),
            "token_type_ids": np.zeros((batch, SEQ), dtype=np.int64)}


def export(model, names, outs, feeds, path: Path):
    import torch

    args = tuple(torch.from_numpy(v).cuda() for v in feeds.values())
    dyn = {n: {0: "batch"} for n in names + outs}
    with torch.no_grad():
        try:
            torch.onnx.export(model, args, str(path), input_names=names, output_names=outs,
                              opset_version=17, dynamic_axes=dyn, dynamo=False)
        except Exception as e:  # the TorchScript exporter may be gone: use the dynamo one
            print(f"TorchScript export failed ({e}); trying dynamo=True", file=sys.stderr)
            torch.onnx.export(model, args, str(path), input_names=names, output_names=outs,
                              opset_version=18, dynamo=True, external_data=False)


def ours(cli: Path, path: Path, feeds, work: Path, graph: str, iterations: int,
         extra=()):
    work.mkdir(parents=True, exist_ok=True)
    cmd = [str(cli), "bench", str(path), "--ep", "cuda", "--cuda-graph", graph,
           "--iterations", str(iterations), "--warmup", "5", *extra]
    for k, v in feeds.items():
        f = work / f"{k}.npy"
        np.save(f, v)
        cmd += ["--input", f"{k}={f}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    m = re.search(r"p50 ([0-9.]+)", r.stdout)
    if r.returncode != 0 or not m:
        return None, (r.stderr + r.stdout)[-1500:]
    notes = [l for l in r.stdout.splitlines()
             if l.startswith(("cuda graph", "  ", "outputs", "precision", "device-resident"))
             or "device node" in l]
    return float(m.group(1)), "\n".join(notes)


def bound_p50(notes: str):
    """The device-resident (IO-bound) p50 from `bench`'s notes."""
    m = re.search(r"device-resident latency ms.*?p50 ([0-9.]+)", notes or "")
    return float(m.group(1)) if m else None


def ours_profile(cli: Path, path: Path, feeds, work: Path, rows: int, extra=()) -> str:
    cmd = [str(cli), "bench", str(path), "--ep", "cuda", "--cuda-graph", "off",
           "--iterations", "10", "--warmup", "3", "--profile", str(rows), *extra]
    for k in feeds:
        cmd += ["--input", f"{k}={work / (k + '.npy')}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    return (r.stdout + r.stderr)[-6000:]


def ours_output(cli: Path, path: Path, feeds, work: Path, extra=()):
    outd = work / ("out" + "".join(extra).replace("-", ""))
    outd.mkdir(parents=True, exist_ok=True)
    cmd = [str(cli), "run", str(path), "--ep", "cuda", "--output-dir", str(outd), *extra]
    for k in feeds:
        cmd += ["--input", f"{k}={work / (k + '.npy')}"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        return None
    return [np.load(f) for f in sorted(outd.glob("*.npy"))]


def torch_times(model, feeds, iterations: int, compile_: bool):
    import torch

    args = [torch.from_numpy(v).cuda() for v in feeds.values()]

    def timed(fn):
        for _ in range(10):
            fn()
        torch.cuda.synchronize()
        ts = []
        for _ in range(iterations):
            s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            fn()
            e.record()
            torch.cuda.synchronize()
            ts.append(s.elapsed_time(e))
        return float(np.median(ts))

    res = {}
    with torch.inference_mode():
        out = model(*args)
        res["eager"] = timed(lambda: model(*args))
        try:
            g = torch.cuda.CUDAGraph()
            static = [a.clone() for a in args]
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    model(*static)
            torch.cuda.current_stream().wait_stream(s)
            with torch.cuda.graph(g):
                model(*static)
            res["graph"] = timed(g.replay)
        except Exception as e:  # noqa: BLE001
            print(f"torch CUDA graph failed: {e}", file=sys.stderr)
        if compile_:
            try:
                c = torch.compile(model, mode="reduce-overhead")
                for _ in range(3):
                    c(*args)
                res["compile"] = timed(lambda: c(*args))
            except Exception as e:  # noqa: BLE001
                print(f"torch.compile failed: {e}", file=sys.stderr)
    return res, out.float().cpu().numpy()


def main() -> int:
    import torch

    ap = argparse.ArgumentParser()
    ap.add_argument("--cli", type=Path, required=True)
    ap.add_argument("--work", type=Path, default=Path("/tmp/gpu-session"))
    ap.add_argument("--only", nargs="*", default=["resnet50", "bert"])
    ap.add_argument("--iterations", type=int, default=50)
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--configs", nargs="*", default=None,
                    help="model:precision:batch entries (default: every config)")
    ap.add_argument("--profile", type=int, default=0, metavar="ROWS")
    ap.add_argument("--convert", action="store_true",
                    help="also run the fp32 exports with --precision fp16 (converted at load)")
    a = ap.parse_args()
    a.cli = a.cli.resolve()
    a.work.mkdir(parents=True, exist_ok=True)
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    rows = []
    for name, prec, batch in CONFIGS:
        if name not in a.only:
            continue
        if a.configs is not None and f"{name}:{prec}:{batch}" not in a.configs:
            continue
        converted = prec == "fp16c"
        half = prec in ("fp16", "fp16c")
        model, names, outs = build(name)
        model = model.cuda()
        path = a.work / f"{name}-{'fp32' if converted else prec}.onnx"
        feeds = feeds_for(name, batch, half and not converted)
        if not path.exists():
            if half and not converted:
                model = model.half()
            t0 = time.time()
            export(model, names, outs, feeds_for(name, 1, half and not converted), path)
            print(f"{path.name}: exported in {time.time() - t0:.1f} s", flush=True)
        if half:
            model = model.half()
        extra = ("--precision", "fp16") if converted else ()
        work = a.work / f"{name}-{prec}-b{batch}"
        auto, notes = ours(a.cli, path, feeds, work, "auto", a.iterations, extra)
        off, notes_off = ours(a.cli, path, feeds, work, "off", a.iterations, extra)
        tt, want = torch_times(model, feeds, a.iterations, a.compile)
        got = ours_output(a.cli, path, feeds, work, extra)
        err = "-"
        if got:
            g = got[0].astype(np.float64)
            err = f"{float(np.max(np.abs(g - want))):.2e} (|ref| max {float(np.max(np.abs(want))):.1f})"
        fmt = lambda v: f"{v:.3f}" if v is not None else "-"  # noqa: E731
        rows.append((f"{name} {prec} b{batch}", fmt(auto), fmt(bound_p50(notes)), fmt(off),
                     fmt(tt.get("eager")),
                     fmt(tt.get("graph")), fmt(tt.get("compile")),
                     f"{tt['eager'] / auto:.2f}" if auto else "-", err))
        print(f"-- {name} {prec} b{batch}: ours auto {fmt(auto)} off {fmt(off)}; torch {tt}")
        print(notes if auto else notes, flush=True)
        if a.profile:
            print(ours_profile(a.cli, path, feeds, work, a.profile, extra), flush=True)
        if a.convert and not half:
            conv = ("--precision", "fp16")
            t_conv, notes_conv = ours(a.cli, path, feeds, work, "auto", a.iterations, conv)
            got_c = ours_output(a.cli, path, feeds, work, conv)
            err_c = "-"
            if got_c:
                g = got_c[0].astype(np.float64)
                err_c = f"{float(np.max(np.abs(g - want))):.2e}"
            rows.append((f"{name} fp32 → --precision fp16 b{batch}", fmt(t_conv),
                         fmt(bound_p50(notes_conv)), "-", "-",
                         "-", "-", f"{tt['eager'] / t_conv:.2f}" if t_conv else "-", err_c))
            print(f"-- {name} fp32 as fp16 b{batch}: ours auto {fmt(t_conv)}; "
                  f"max abs diff vs torch fp32 {err_c}")
            print(notes_conv, flush=True)
        if off is None:
            print(notes_off)
        model.cpu()
        del model
        torch.cuda.empty_cache()
    print()
    print("| model | ours, CUDA graph | ours, CUDA graph, IO on the device | ours, node by node "
          "| torch eager | torch CUDA graph | torch.compile | torch eager / ours "
          "| max abs diff vs torch |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
