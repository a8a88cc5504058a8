#!/usr/bin/env python3
"""Finds the first node whose output differs between `--ep cpu` and `--ep cuda`.

Runs ON the GPU machine (numpy and onnx are there). Every node output of the model becomes a
graph output, the CLI runs the copy once per provider with the same inputs, and the values are
compared in topological order: the first node whose output differs beyond the tolerance, with
its inputs already equal, is the culprit.

    python3 scripts/gpu-bisect.py --cli .gpu/onnx-runtime MODEL.onnx [--input NAME=FILE.pb ...]
        [--optimize none|basic|all] [--rtol 1e-3 --atol 1e-4]

With `--optimize none` the nodes run as written; with `all` fusions can hide intermediate values
(an exposed value stops a fusion), so a bug in a fused kernel shows as a whole-model difference:
the script first compares the model's own outputs at the given level, then bisects at `none`.
"""
import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np
import onnx
from onnx import helper, shape_inference


def expose_all(model):
    inferred = shape_inference.infer_shapes(model)
    types = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
    g = model.graph
    have = {o.name for o in g.output}
    order = []
    for node in g.node:
        for name in node.output:
            if not name or name in have:
                continue
            vi = types.get(name)
            if vi is None:
                vi = helper.make_empty_tensor_value_info(name)
            g.output.append(vi)
            have.add(name)
            order.append((node, name))
    return model, order


def run(cli, model_path, ep, inputs, optimize, out_dir):
    cmd = [cli, "run", model_path, "--ep", ep, "--optimize", optimize, "--output-dir", out_dir]
    for i in inputs:
        cmd += ["--input", i]
    if not inputs:
        cmd += ["--random-inputs"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        print(f"{ep}: rc {p.returncode}\n{p.stderr[-3000:]}")
    return p.returncode


def load(out_dir, name):
    safe = name.replace("/", "_")
    for cand in (name, safe):
        path = os.path.join(out_dir, cand + ".npy")
        if os.path.exists(path):
            return np.load(path, allow_pickle=False)
    for f in os.listdir(out_dir):
        if f.startswith(safe) and f.endswith(".npy"):
            return np.load(os.path.join(out_dir, f), allow_pickle=False)
    return None


def differs(a, b, rtol, atol):
    if a is None or b is None:
        return "missing"
    if a.shape != b.shape:
        return f"shape {a.shape} vs {b.shape}"
    if a.dtype.kind in "fc":
        x, y = a.astype(np.float64), b.astype(np.float64)
        nan = np.isnan(x) != np.isnan(y)
        bad = nan | (np.abs(x - y) > atol + rtol * np.abs(x))
        bad &= ~(np.isnan(x) & np.isnan(y))
    else:
        bad = a != b
    if not bad.any():
        return None
    idx = np.argwhere(bad)[0]
    return (f"{int(bad.sum())} of {bad.size} differ; first at {tuple(idx)}: cpu {a[tuple(idx)]} "
            f"cuda {b[tuple(idx)]}; cpu range [{np.nanmin(a) if a.size else 0}, "
            f"{np.nanmax(a) if a.size else 0}], cuda range [{np.nanmin(b) if b.size else 0}, "
            f"{np.nanmax(b) if b.size else 0}]")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model")
    ap.add_argument("--cli", default=".gpu/onnx-runtime")
    ap.add_argument("--input", action="append", default=[])
    ap.add_argument("--optimize", default="all")
    ap.add_argument("--rtol", type=float, default=1e-3)
    ap.add_argument("--atol", type=float, default=1e-4)
    a = ap.parse_args()
    work = tempfile.mkdtemp(prefix="bisect-")
    model = onnx.load(a.model)
    names = [o.name for o in model.graph.output]
    for ep in ("cpu", "cuda"):
        os.makedirs(os.path.join(work, "whole", ep))
        run(a.cli, a.model, ep, a.input, a.optimize, os.path.join(work, "whole", ep))
    whole_bad = False
    for n in names:
        d = differs(load(os.path.join(work, "whole", "cpu"), n),
                    load(os.path.join(work, "whole", "cuda"), n), a.rtol, a.atol)
        print(f"model output {n} (--optimize {a.optimize}): {d or 'equal'}")
        whole_bad |= d is not None
    exposed, order = expose_all(model)
    path = os.path.join(work, "exposed.onnx")
    onnx.save(exposed, path)
    for opt in ("none", a.optimize) if a.optimize != "none" else ("none",):
        dirs = {}
        for ep in ("cpu", "cuda"):
            dirs[ep] = os.path.join(work, opt, ep)
            os.makedirs(dirs[ep])
            run(a.cli, path, ep, a.input, opt, dirs[ep])
        first = None
        for node, name in order:
            d = differs(load(dirs["cpu"], name), load(dirs["cuda"], name), a.rtol, a.atol)
            if d and d != "missing":
                first = (node, name, d)
                break
        if first is None:
            print(f"--optimize {opt}, every value exposed: all node outputs equal")
            continue
        node, name, d = first
        attrs = {x.name: helper.get_attribute_value(x) for x in node.attribute}
        print(f"--optimize {opt}: first difference at node '{node.name}' ({node.op_type}, "
              f"attrs {attrs}) output '{name}': {d}")
        for i in node.input:
            x = load(dirs["cpu"], i)
            if x is not None:
                print(f"  input {i}: {x.dtype} {x.shape}")
    if whole_bad:
        print("note: the exposed runs may hide a fusion bug; compare the whole-model lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())
