#!/usr/bin/env python3
"""Runs models through our CLI with graph optimization off and on and compares the outputs.

    cargo build --release -p onnx-runtime-cli
    scripts/check-optimizer.py [--only NAME ...] [--level basic|all] [--rtol R] [--atol A]

Inputs are the deterministic random ones of scripts/real_models.py (real models from
.cache/real-models/, the onnx wheel's light_* models). Each model runs once with
`--optimize none` (the reference) and once with `--optimize LEVEL`; outputs must satisfy
|opt - ref| <= atol + rtol * |ref| (default rtol 1e-4, atol 1e-5: folding BatchNormalization
into weights and fusing activations changes float rounding, nothing else), shapes and dtypes
equal. Prints one line per model with the node counts before/after (from `onnx-runtime info`)
and the largest differences; exits 1 on any mismatch.
"""

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_models  # noqa: E402


def run(cli, level, model, feeds_dir, out_dir, names, timeout):
    cmd = [cli, "--optimize", level, "run", str(model.path), "--output-dir", str(out_dir)]
    for n in names:
        cmd += ["--input", f"{n}={feeds_dir / (real_models.safe_name(n) + '.npy')}"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    if p.returncode != 0:
        raise RuntimeError(f"--optimize {level}: {p.stderr.strip()[-400:]}")


def node_counts(cli, model, level):
    p = subprocess.run([cli, "--optimize", level, "info", str(model.path)],
                       capture_output=True, text=True, timeout=120)
    m = re.search(r"after --optimize \w+: (\d+) nodes \(from (\d+)\)", p.stdout)
    return (int(m.group(2)), int(m.group(1))) if m else (None, None)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default="target/release/onnx-runtime")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--level", default="all")
    ap.add_argument("--rtol", type=float, default=1e-4)
    ap.add_argument("--atol", type=float, default=1e-5)
    ap.add_argument("--timeout", type=float, default=600)
    args = ap.parse_args()

    models = [m for m in real_models.real_models() if m.path.exists()] + real_models.light_models()
    if args.only:
        models = [m for m in models if m.name in args.only]
    bad = 0
    for model in models:
        with tempfile.TemporaryDirectory() as tmp:
            tmp = Path(tmp)
            feeds = real_models.make_inputs(model)
            for n, v in feeds.items():
                np.save(tmp / (real_models.safe_name(n) + ".npy"), v)
            ref, opt = tmp / "ref", tmp / "opt"
            ref.mkdir()
            opt.mkdir()
            try:
                run(args.cli, "none", model, tmp, ref, feeds, args.timeout)
                run(args.cli, args.level, model, tmp, opt, feeds, args.timeout)
            except (RuntimeError, subprocess.TimeoutExpired) as e:
                print(f"{model.name}: FAIL {e}")
                bad += 1
                continue
            before, after = node_counts(args.cli, model, args.level)
            worst_abs, worst_rel, ok = 0.0, 0.0, True
            for f in sorted(ref.glob("*.npy")):
                a, b = np.load(f), np.load(opt / f.name)
                if a.shape != b.shape or a.dtype != b.dtype:
                    print(f"  {f.stem}: shape/dtype {a.shape} {a.dtype} vs {b.shape} {b.dtype}")
                    ok = False
                    continue
                if a.dtype.kind != "f":
                    ok &= bool(np.array_equal(a, b))
                    continue
                a64, b64 = a.astype(np.float64), b.astype(np.float64)
                d = np.abs(a64 - b64)
                worst_abs = max(worst_abs, float(d.max(initial=0)))
                worst_rel = max(worst_rel, float((d / np.maximum(np.abs(a64), 1e-6)).max(initial=0)))
                ok &= bool(np.all(d <= args.atol + args.rtol * np.abs(a64)))
            status = "ok" if ok else "MISMATCH"
            bad += not ok
            print(f"{model.name}: {status} nodes {before} -> {after}, "
                  f"max abs diff {worst_abs:.3g}, max rel diff {worst_rel:.3g}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
