#!/usr/bin/env python3
"""CPU latency of our runtime against onnxruntime, side by side, on the same models and inputs.

    scripts/fetch-real-models.sh            # once: models into .cache/real-models/
    cargo build --release -p onnx-runtime-cli
    scripts/bench-vs-ort.py [--threads N] [--warmup W] [--iterations I] [--only NAME ...]

For each model (the onnx wheel's light_* models, then the fetched real models): onnxruntime in
python (CPUExecutionProvider, intra_op_num_threads=N, inter_op_num_threads=1, sequential
execution, default graph optimizations) runs W warm-up then I timed runs; then
`onnx-runtime bench MODEL --warmup W --iterations I --threads N --input NAME=FILE.npy ...` on the
same inputs, alternating the two in --rounds rounds (I/rounds timed runs each) so that load changes
on a shared machine hit both alike; each side reports the median of its round medians. The iteration count shrinks for slow models (--budget seconds per runtime, at least
--min-iterations). Reports median latencies and ours/ORT, and writes a Markdown table to
docs/benchmarks/YYYY-MM-DD-cpu.md (or --out). Not part of scripts/check.
"""

from __future__ import annotations

import argparse
import datetime as dt
import math
import os
import platform
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_models as rm  # noqa: E402

# `onnx-runtime bench` prints "latency ms: min A  p50 B  p90 C ..."; also accepted: "median: 12.3 ms",
# "p50 1234 us" ...
LATENCY_MS_RE = re.compile(r"latency ms:.*?\bp50\s+([0-9]+(?:\.[0-9]+)?)")
MEDIAN_RE = re.compile(r"(?:median|p50)\D{0,12}?([0-9]+(?:\.[0-9]+)?(?:e[-+]?[0-9]+)?)\s*(ms|us|µs|ns|s)\b", re.I)
UNIT = {"s": 1e3, "ms": 1.0, "us": 1e-3, "µs": 1e-3, "ns": 1e-6}


def ort_session(path: Path, threads: int):
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def ort_bench(sess, feeds, warmup: int, iters: int) -> float:
    for _ in range(warmup):
        sess.run(None, feeds)
    times = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        sess.run(None, feeds)
        times.append((time.perf_counter_ns() - t0) / 1e6)
    return float(np.median(times))


def ours_bench(cli: Path, path: Path, feeds, work: Path, warmup: int, iters: int, threads: int,
               timeout: float, extra: list[str]) -> tuple[float | None, str]:
    work.mkdir(parents=True, exist_ok=True)
    cmd = [str(cli), "bench", str(path), "--warmup", str(warmup), "--iterations", str(iters),
           "--threads", str(threads)] + extra
    if bench_takes_inputs(cli):
        for name, arr in feeds.items():
            f = work / f"{rm.safe_name(name)}.npy"
            np.save(f, arr)
            cmd += ["--input", f"{name}={f}"]
    else:
        # An older `onnx-runtime bench` makes random inputs itself: give it the same shapes.
        for dim, size in symbolic_dims(path, feeds).items():
            cmd += ["--dim", f"{dim}={size}"]
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout:.0f}s"
    text = p.stdout + "\n" + p.stderr
    if p.returncode != 0:
        lines = [ln for ln in text.splitlines() if ln.strip()]
        return None, " | ".join(lines[-3:])[:300]
    m = LATENCY_MS_RE.search(text)
    if m:
        return float(m.group(1)), text
    m = MEDIAN_RE.search(text)
    if not m:
        return None, f"no median in bench output: {text.strip()[:200]}"
    return float(m.group(1)) * UNIT[m.group(2).lower()], text


_TAKES_INPUTS: dict[str, bool] = {}


def bench_takes_inputs(cli: Path) -> bool:
    if str(cli) not in _TAKES_INPUTS:
        h = subprocess.run([str(cli), "bench", "--help"], capture_output=True, text=True).stdout
        _TAKES_INPUTS[str(cli)] = "--input" in h
    return _TAKES_INPUTS[str(cli)]


def symbolic_dims(path: Path, feeds) -> dict[str, int]:
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    out = {}
    for vi in m.graph.input:
        if vi.name in feeds:
            for d, size in zip(vi.type.tensor_type.shape.dim, feeds[vi.name].shape):
                if d.dim_param:
                    out[d.dim_param] = size
    return out


def git_rev() -> str:
    try:
        rev = subprocess.run(["git", "-C", str(rm.ROOT), "rev-parse", "--short", "HEAD"],
                             capture_output=True, text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(rm.ROOT), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True).stdout.strip()
        return rev + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def tool_version(cmd: list[str]) -> str:
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()[0]
    except (OSError, IndexError):
        return "unknown"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=str(rm.ROOT / "target" / "release" / "onnx-runtime"))
    ap.add_argument("--threads", type=int, default=rm.cpu_count(), help="threads for both runtimes (default: all cores)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iterations", type=int, default=50, help="timed runs at most")
    ap.add_argument("--min-iterations", type=int, default=6)
    ap.add_argument("--rounds", type=int, default=3, help="alternations of ORT and ours per model")
    ap.add_argument("--budget", type=float, default=10.0, help="target seconds of timed ORT runs per model")
    ap.add_argument("--only", nargs="*", help="model names")
    ap.add_argument("--no-light", action="store_true")
    ap.add_argument("--no-real", action="store_true")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per `onnx-runtime bench`")
    ap.add_argument("--bench-arg", action="append", default=[], help="extra argument for `onnx-runtime bench`")
    ap.add_argument("--out", help="Markdown file (default docs/benchmarks/YYYY-MM-DD-cpu.md)")
    args = ap.parse_args()

    import onnxruntime as ort

    cli = Path(args.cli)
    if not cli.is_file():
        print(f"error: {cli} not found; build it with `cargo build --release -p onnx-runtime-cli`", file=sys.stderr)
        return 2
    models = ([] if args.no_light else rm.light_models()) + ([] if args.no_real else rm.real_models())
    if args.only:
        models = [m for m in models if m.name in args.only]
    missing = [m.name for m in models if not m.path.is_file()]
    if missing:
        print(f"error: models missing ({', '.join(missing)}); run scripts/fetch-real-models.sh", file=sys.stderr)
        return 2

    load_before = os.getloadavg()
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench-vs-ort-") as tmp:
        for model in models:
            feeds = rm.make_inputs(model)
            try:
                sess = ort_session(model.path, args.threads)
                t0 = time.perf_counter()
                sess.run(None, feeds)
                one = max(time.perf_counter() - t0, 1e-6)
                iters = max(args.min_iterations, min(args.iterations, int(args.budget / one)))
            except Exception as e:  # noqa: BLE001
                rows.append((model.name, "-", None, None, f"ORT failed: {str(e).splitlines()[0]}"))
                continue
            # Alternate the two runtimes in rounds so that load changes on a shared machine hit
            # both alike; each reports the median of its per-round medians.
            per_round = max(1, iters // args.rounds)
            iters = per_round * args.rounds
            ort_meds, our_meds, note = [], [], ""
            for _ in range(args.rounds):
                ort_meds.append(ort_bench(sess, feeds, args.warmup, per_round))
                ms, out = ours_bench(cli, model.path, feeds, Path(tmp) / model.name, args.warmup, per_round,
                                     args.threads, args.timeout, args.bench_arg)
                if ms is None:
                    note = out
                    break
                our_meds.append(ms)
            del sess
            ort_ms = float(np.median(ort_meds))
            ours_ms = float(np.median(our_meds)) if not note else None
            rows.append((model.name, iters, ort_ms, ours_ms, note))
            ratio = f"{ours_ms / ort_ms:.2f}x" if ours_ms else "-"
            print(f"{model.name}: ORT {ort_ms:.2f} ms, ours {ours_ms if ours_ms is None else f'{ours_ms:.2f}'} ms, {ratio} {note[:120]}",
                  file=sys.stderr, flush=True)
    load_after = os.getloadavg()

    ratios = [o / r for _, _, r, o, _ in rows if o and r]
    geo = math.exp(sum(math.log(x) for x in ratios) / len(ratios)) if ratios else float("nan")
    today = dt.date.today().isoformat()
    out = Path(args.out) if args.out else rm.ROOT / "docs" / "benchmarks" / f"{today}-cpu.md"
    cmd = "scripts/bench-vs-ort.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    lines = [
        f"# CPU benchmark against ONNX Runtime, {today}",
        "",
        f"- machine: {rm.cpu_model_name()}, {os.cpu_count()} cores ({rm.cpu_count()} usable), {platform.system()} {platform.release()}",
        f"- command: `{cmd.strip()}`",
        f"- threads: {args.threads} for both; {args.rounds} alternating rounds per model, each a warm-up of {args.warmup} runs "
        "then timed runs (total per model in the table; median of round medians) "
        f"(at most {args.iterations}, fewer for slow models: about {args.budget:.0f} s of ORT time)",
        f"- onnxruntime {ort.__version__} (python, CPUExecutionProvider, sequential, intra_op_num_threads={args.threads}, "
        "default graph optimizations); ours: `onnx-runtime bench` at commit "
        f"{git_rev()}, {tool_version(['rustc', '--version'])}, release profile",
        ("" if bench_takes_inputs(cli) else "- this `onnx-runtime bench` has no --input: ours ran on its own random inputs of the same shapes\n")
        + f"- load average before/after: {load_before[0]:.2f} / {load_after[0]:.2f} (a shared machine: medians, not means)",
        "",
        "| model | timed runs | ORT median ms | ours median ms | ours/ORT | note |",
        "|---|---|---|---|---|---|",
    ]
    for name, iters, r, o, note in rows:
        rs = f"{r:.2f}" if r else "-"
        os_ = f"{o:.2f}" if o else "-"
        ratio = f"{o / r:.2f}" if (o and r) else "-"
        lines.append(f"| {name} | {iters} | {rs} | {os_} | {ratio} | {note.replace('|', '/')} |")
    lines += ["", f"Geometric mean of ours/ORT over the {len(ratios)} models both ran: {geo:.2f}.", ""]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    print(f"\nwrote {out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
