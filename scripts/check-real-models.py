#!/usr/bin/env python3
"""Runs real-world models through onnxruntime (CPU, python) and our CLI and compares outputs.

    scripts/fetch-real-models.sh            # once: models into .cache/real-models/
    cargo build --release -p onnx-runtime-cli
    scripts/check-real-models.py [--only NAME ...] [--no-light] [--localize] [--markdown FILE]
                                 [--ep cpu|cuda]   (REAL_MODELS_DIR: models elsewhere)

Each model gets deterministic random inputs (scripts/real_models.py), written as .npy files and
passed as `onnx-runtime run MODEL --input NAME=FILE.npy ... --output-dir DIR`. Outputs are
compared with np.isclose semantics: |ours - ort| <= atol + rtol * |ort|, rtol 1e-3 and atol 1e-4
for floating point (unless a model states its own), exact for integers and booleans; shapes and
dtypes must match. Prints a table; exits 1 if any model fails or mismatches.

--localize: for a model that mismatches, exposes every intermediate value of the main graph as an
output, runs both runtimes again and names the first node (in graph order) whose inputs all match
but whose output does not: the op that computes differently.
Not part of scripts/check: CI never downloads models.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import real_models as rm  # noqa: E402

RTOL, ATOL = 1e-3, 1e-4


def ort_run(path: Path, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    so = ort.SessionOptions()
    so.log_severity_level = 3
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds)))


def cli_run(cli: Path, path: Path, feeds: dict[str, np.ndarray], names: list[str], work: Path,
            timeout: float, ep: str = "cpu") -> tuple[dict[str, np.ndarray] | None, str, float]:
    """Runs `onnx-runtime run`; returns (outputs or None, error text, seconds)."""
    in_dir, out_dir = work / "inputs", work / "outputs"
    in_dir.mkdir(parents=True, exist_ok=True)
    out_dir.mkdir(parents=True, exist_ok=True)
    cmd = [str(cli), "run", str(path), "--ep", ep, "--output-dir", str(out_dir)]
    for name, arr in feeds.items():
        f = in_dir / f"{rm.safe_name(name)}.npy"
        np.save(f, arr)
        cmd += ["--input", f"{name}={f}"]
    t0 = time.perf_counter()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None, f"timeout after {timeout:.0f}s", timeout
    dt = time.perf_counter() - t0
    if p.returncode != 0:
        err = (p.stderr.strip() or p.stdout.strip() or f"exit {p.returncode}")
        return None, err, dt
    outs = {}
    for name in names:
        for cand in (out_dir / f"{name}.npy", out_dir / f"{rm.safe_name(name)}.npy"):
            if cand.is_file():
                outs[name] = np.load(cand, allow_pickle=False)
                break
        else:
            have = sorted(x.name for x in out_dir.iterdir())
            return None, f"output {name!r} not written to {out_dir} (found {have})", dt
    return outs, "", dt


def compare(ours: np.ndarray, ref: np.ndarray, rtol: float, atol: float) -> tuple[bool, float, float, str]:
    """(ok, max abs err, max rel err, why-not)."""
    if ours.shape != ref.shape:
        return False, float("inf"), float("inf"), f"shape {ours.shape} != ort {ref.shape}"
    if ours.dtype != ref.dtype:
        return False, float("inf"), float("inf"), f"dtype {ours.dtype} != ort {ref.dtype}"
    if ref.size == 0:
        return True, 0.0, 0.0, ""
    if np.issubdtype(ref.dtype, np.floating):
        a, b = ours.astype(np.float64), ref.astype(np.float64)
        nan_a, nan_b = np.isnan(a), np.isnan(b)
        if (nan_a != nan_b).any():
            return False, float("inf"), float("inf"), f"NaN at {int((nan_a != nan_b).sum())} places where ort has none (or vice versa)"
        fin = ~nan_b
        diff = np.abs(a[fin] - b[fin])
        diff = np.where(a[fin] == b[fin], 0.0, diff)  # equal infinities
        if diff.size == 0:
            return True, 0.0, 0.0, ""
        mag = np.abs(b[fin])
        abs_err = float(diff.max())
        rel = diff / np.maximum(mag, atol)
        rel_err = float(rel.max())
        bad = diff > atol + rtol * mag
        if bad.any():
            i = int(np.argmax(np.where(bad, diff, -1)))
            return False, abs_err, rel_err, f"{int(bad.sum())}/{diff.size} elements off, worst {a[fin][i]:.6g} vs ort {b[fin][i]:.6g}"
        return True, abs_err, rel_err, ""
    diff = ours != ref
    if diff.any():
        d = np.abs(ours.astype(np.float64) - ref.astype(np.float64))
        return False, float(d.max()), float("nan"), f"{int(diff.sum())}/{ref.size} elements differ"
    return True, 0.0, 0.0, ""


def localize(cli: Path, model: rm.Model, feeds, work: Path, rtol: float, atol: float, timeout: float) -> str:
    """Names the first node of the main graph whose output mismatches while its inputs match."""
    import onnx

    m = onnx.load(str(model.path))
    try:
        inferred = onnx.shape_inference.infer_shapes(m)
        typed = {vi.name: vi for vi in inferred.graph.value_info}
    except Exception:  # noqa: BLE001 - shape inference is best effort here
        typed = {}
    existing = {o.name for o in m.graph.output}
    for node in m.graph.node:
        for out in node.output:
            if out and out not in existing:
                vi = typed.get(out)
                if vi is None or not vi.type.tensor_type.elem_type:
                    continue
                new = onnx.ValueInfoProto()
                new.name = out
                new.type.tensor_type.elem_type = vi.type.tensor_type.elem_type
                m.graph.output.append(new)
                existing.add(out)
    probe = work / "probe.onnx"
    onnx.save(m, str(probe))
    try:
        ref = ort_run(probe, feeds)
    except Exception as e:  # noqa: BLE001
        return f"localize: ort cannot run the probe model: {str(e).splitlines()[0]}"
    ours, err, _ = cli_run(cli, probe, feeds, list(ref), work / "probe", timeout)
    if ours is None:
        return f"localize: our runtime failed on the probe model: {err.splitlines()[0] if err else ''}"
    bad_values: set[str] = set()
    for node in m.graph.node:
        node_bad = []
        for out in node.output:
            if out in ref and out in ours:
                ok, a, r, why = compare(ours[out], ref[out], rtol, atol)
                if not ok:
                    node_bad.append((out, a, why))
        if node_bad and not any(i in bad_values for i in node.input):
            out, a, why = node_bad[0]
            return (f"first diverging node: {node.name or '(unnamed)'} op {node.op_type} "
                    f"output {out!r}: max abs err {a:.3g}; {why}")
        bad_values.update(o for o, _, _ in node_bad)
    return "localize: every intermediate matches (the mismatch is in a graph output only)"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--cli", default=str(rm.ROOT / "target" / "release" / "onnx-runtime"))
    ap.add_argument("--only", nargs="*", help="model names to check")
    ap.add_argument("--no-light", action="store_true", help="skip the onnx wheel's light_* models")
    ap.add_argument("--localize", action="store_true", help="name the first diverging node on mismatch")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds per CLI run")
    ap.add_argument("--markdown", help="also write the table as Markdown to this file")
    ap.add_argument("--ep", default="cpu", choices=["cpu", "cuda"],
                    help="our execution provider (cuda: supported nodes on GPU 0, the rest on the CPU)")
    args = ap.parse_args()

    cli = Path(args.cli)
    if not cli.is_file():
        print(f"error: {cli} not found; build it with `cargo build --release -p onnx-runtime-cli`", file=sys.stderr)
        return 2
    models = rm.real_models() + ([] if args.no_light else rm.light_models())
    if args.only:
        models = [m for m in models if m.name in args.only]
    missing = [m.name for m in models if not m.path.is_file()]
    if missing:
        print(f"error: models missing ({', '.join(missing)}); run scripts/fetch-real-models.sh", file=sys.stderr)
        return 2

    rows = []
    failed = 0
    with tempfile.TemporaryDirectory(prefix="check-real-models-") as tmp:
        for model in models:
            rtol, atol = model.tol or (RTOL, ATOL)
            ops = rm.op_types(model.path)
            feeds = rm.make_inputs(model)
            work = Path(tmp) / model.name
            try:
                ref = ort_run(model.path, feeds)
            except Exception as e:  # noqa: BLE001
                rows.append((model.name, len(ops), "ORT-FAIL", "", "", "", str(e).splitlines()[0]))
                failed += 1
                continue
            ours, err, secs = cli_run(cli, model.path, feeds, list(ref), work, args.timeout, args.ep)
            if ours is None:
                lines = [ln for ln in err.splitlines() if ln.strip()]
                note = " | ".join(lines[-3:])[:400]
                rows.append((model.name, len(ops), "FAIL", "", "", f"{secs:.2f}", note))
                failed += 1
                print(f"--- {model.name}: CLI failed:\n{err}\n", file=sys.stderr)
                continue
            worst_abs, worst_rel, notes, ok_all = 0.0, 0.0, [], True
            for name in ref:
                ok, a, r, why = compare(ours[name], ref[name], rtol, atol)
                worst_abs, worst_rel = max(worst_abs, a), max(worst_rel, r if r == r else 0.0)
                if not ok:
                    ok_all = False
                    notes.append(f"{name}: {why}")
            if model.tol:
                notes.append(f"rtol {rtol} atol {atol}: {model.tol_reason}")
            if not ok_all and args.localize:
                notes.append(localize(cli, model, feeds, work, rtol, atol, args.timeout))
            status = "PASS" if ok_all else "MISMATCH"
            failed += 0 if ok_all else 1
            rows.append((model.name, len(ops), status, f"{worst_abs:.2e}", f"{worst_rel:.2e}",
                         f"{secs:.2f}", "; ".join(notes)[:400]))
            print(f"{model.name}: {status}", file=sys.stderr)

    header = ("model", "op types", "status", "max abs err", "max rel err", "CLI s", "note")
    widths = [max(len(str(r[i])) for r in rows + [header]) for i in range(6)]
    for r in [header] + rows:
        print("  ".join(str(c).ljust(w) for c, w in zip(r[:6], widths)) + "  " + r[6])
    print(f"\n{len(rows) - failed} passed, {failed} failed (rtol {RTOL} atol {ATOL} for floats unless stated; integers exact)")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("| " + " | ".join(header) + " |\n|" + "---|" * len(header) + "\n")
            for r in rows:
                f.write("| " + " | ".join(str(c).replace("|", "\\|") for c in r) + " |\n")
    return 1 if failed else 0


if __name__ == "__main__":
    os.environ.setdefault("RUST_BACKTRACE", "0")
    sys.exit(main())
