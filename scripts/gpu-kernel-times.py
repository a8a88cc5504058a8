#!/usr/bin/env python3
"""Runs ON the GPU machine: device time per kernel of one run of a program, read with Nsight
Compute (`ncu --metrics gpu__time_duration.sum`, clocks left alone). The program should repeat
one run several times (`onnx-runtime bench ... --warmup 1 --iterations 3`); the script finds the
period of the kernel sequence at the end of the trace (one run: replayed CUDA graph kernels are
profiled one by one) and prints, for that last run, the kernels grouped by name: calls, total
and mean microseconds, share of the run, and the run's kernel count and summed device time.

    python3 scripts/gpu-kernel-times.py [--top 30] [--log FILE] -- PROGRAM ARGS...

The summed time is what the kernels take back to back; a run's wall time above it is launch
gaps, host work and copies. ncu serializes kernels, so no overlap is counted.
"""

from __future__ import annotations

import argparse
import csv
import io
import re
import subprocess
import sys
from collections import OrderedDict


def short(name: str) -> str:
    name = re.sub(r"\(.*$", "", name)  # parameter list
    return name[:90]


def period(names: list[str]) -> int:
    """The smallest p such that the last p names (with launch shapes) repeat the p before
    them (else all)."""
    n = len(names)
    for p in range(1, n // 2 + 1):
        if names[n - p:] == names[n - 2 * p:n - p]:
            return p
    return n


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--log", default="/tmp/ncu-times.csv")
    ap.add_argument("--order", action="store_true", help="also print the run's kernels in order")
    ap.add_argument("--cache-control", choices=["all", "none"], default="all",
                    help="ncu's cache flush between kernels: all (ncu's default: every kernel "
                    "starts with cold caches) or none (caches as the previous kernel left them, "
                    "closer to a replayed CUDA graph)")
    ap.add_argument("cmd", nargs=argparse.REMAINDER)
    a = ap.parse_args()
    cmd = a.cmd[1:] if a.cmd and a.cmd[0] == "--" else a.cmd
    ncu = ["ncu", "--clock-control", "none", "--cache-control", a.cache_control,
           "--metrics", "gpu__time_duration.sum", "--csv",
           "--print-units", "base", "--log-file", a.log, *cmd]
    r = subprocess.run(ncu, capture_output=True, text=True)
    if r.returncode != 0:
        print((r.stdout + r.stderr)[-3000:], file=sys.stderr)
    text = open(a.log, encoding="utf-8", errors="replace").read()
    start = text.find('"ID"')
    if start < 0:
        print("no ncu rows:\n" + text[-2000:], file=sys.stderr)
        return 1
    rows = [row for row in csv.DictReader(io.StringIO(text[start:]))
            if row.get("Metric Name") == "gpu__time_duration.sum"]
    names = [short(row["Kernel Name"]) for row in rows]
    times = [float(row["Metric Value"].replace(",", "")) / 1000.0 for row in rows]  # ns -> us
    grids = [row.get("Grid Size", "") + " x " + row.get("Block Size", "") for row in rows]
    # A layer's kernels repeat inside a run, and the last layer's products can share names
    # with the head's (one GEMV kernel for every float product): launch shapes tell them apart.
    p = period([f"{n} {g}" for n, g in zip(names, grids)])
    last = list(zip(names[-p:], times[-p:], grids[-p:]))
    total = sum(t for _, t, _ in last)
    print(f"kernels in trace {len(names)}; one run = {p} kernels, {total:.1f} us summed")
    groups: OrderedDict[str, list[float]] = OrderedDict()
    for n, t, _ in last:
        groups.setdefault(n, []).append(t)
    print("| kernel | calls | total us | mean us | share |")
    print("| --- | --- | --- | --- | --- |")
    for n, ts in sorted(groups.items(), key=lambda kv: -sum(kv[1]))[: a.top]:
        s = sum(ts)
        print(f"| {n} | {len(ts)} | {s:.1f} | {s / len(ts):.2f} | {100 * s / max(total, 1e-9):.1f}% |")
    if a.order:
        for i, (n, t, g) in enumerate(last):
            print(f"{i:4d} {t:8.2f} us  {g:28s} {n}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
