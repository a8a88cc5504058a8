"""onnx's own backend test runner (onnx.backend.test.BackendTest, unmodified) over the onnx
1.22 node suite, through onnx_runtime_rs.backend, in this process: one session per case.

It fails on a regression: a case on backend-node-pass-list.txt (next to this file) that no
longer passes. Cases that pass but are not on the list are printed, not failed. To rewrite the
list from what passes now (keeping its comments):

    ONNX_RUNTIME_RS_UPDATE_PASS_LIST=1 python3 -m pytest crates/onnx-runtime-python/tests/test_backend_node_suite.py

A case is kept off the list on purpose by a line `# off: NAME: why`. A second test keeps the count within 1% of what `onnx-runtime test` passes of the same cases
(tests/backend/cpu-pass-list.txt, the CLI's list), so the two ways in stay in step.
"""

from __future__ import annotations

import os
import unittest
import warnings
from pathlib import Path

import onnx
import onnx.backend.test
import pytest

from onnx_runtime_rs.backend import RustBackend

HERE = Path(__file__).resolve().parent
PASS_LIST = HERE / "backend-node-pass-list.txt"
CLI_PASS_LIST = HERE.parents[2] / "tests" / "backend" / "cpu-pass-list.txt"
NODE_DIR = Path(onnx.__file__).parent / "backend" / "test" / "data" / "node"


def _names(path: Path) -> list[str]:
    return [s for s in (line.split("#", 1)[0].strip() for line in path.read_text().splitlines()) if s]


def _off(path: Path) -> set[str]:
    """The cases a pass list keeps off on purpose: `# off: NAME: why` lines."""
    lines = path.read_text().splitlines() if path.exists() else []
    return {line[len("# off:") :].split(":", 1)[0].strip() for line in lines if line.startswith("# off:")}


@pytest.fixture(scope="module")
def outcome() -> dict[str, str]:
    """Case name (the case folder's, without the runner's _cpu suffix) -> passed, failed,
    error or skipped, for every node case on the CPU."""
    runner = onnx.backend.test.BackendTest(RustBackend, __name__)
    runner.include(r"_cpu$")
    case = runner.test_cases["OnnxBackendNodeModelTest"]
    suite = unittest.defaultTestLoader.loadTestsFromTestCase(case)
    status = {t.id().rsplit(".", 1)[1]: "passed" for t in suite}  # (a suite drops its tests as it runs)
    result = unittest.TestResult()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        suite.run(result)
    for kind, items in (("failed", result.failures), ("error", result.errors), ("skipped", result.skipped)):
        for t, _ in items:
            status[t.id().rsplit(".", 1)[1]] = kind
    return {name.removesuffix("_cpu"): s for name, s in status.items() if name.endswith("_cpu")}


def test_node_suite_has_no_regressions(outcome):
    off = _off(PASS_LIST)
    passed = sorted(n for n, s in outcome.items() if s == "passed" and n not in off)
    if os.environ.get("ONNX_RUNTIME_RS_UPDATE_PASS_LIST"):
        comments = [line for line in PASS_LIST.read_text().splitlines() if line.startswith("#")] if PASS_LIST.exists() else []
        PASS_LIST.write_text("\n".join(comments + passed) + "\n")
    expected = _names(PASS_LIST)
    regressions = [n for n in expected if outcome.get(n) != "passed"]
    new = [n for n in passed if n not in set(expected)]
    print(f"\nnode suite through the backend: {len(passed)} of {len(outcome)} passed; "
          f"{len(expected)} on the pass list; {len(new)} pass but are not on it: {new[:20]}")
    assert not regressions, f"{len(regressions)} cases on {PASS_LIST.name} no longer pass: {regressions}"


def test_node_suite_within_one_percent_of_the_cli(outcome):
    node_cases = {p.name for p in NODE_DIR.iterdir() if p.is_dir()}
    cli = {n for n in _names(CLI_PASS_LIST) if n in node_cases}
    ours = {n for n, s in outcome.items() if s == "passed"} - _off(PASS_LIST)
    assert len(ours) >= 0.99 * len(cli), (
        f"the backend passes {len(ours)} node cases, `onnx-runtime test` {len(cli)}; "
        f"only the CLI: {sorted(cli - ours)}"
    )
