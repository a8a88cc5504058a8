#!/usr/bin/env python3
"""Writes the ONNX 1.23.2 node test cases out as backend-style case folders.

onnx 1.23 no longer ships the node test data; it generates the cases in Python
(onnx.backend.test.loader.load_node_model_tests()), and computes their expected outputs with
numpy and ml_dtypes (the Cast cases' bytes change with the ml_dtypes version). This script
installs onnx 1.23.2 and exactly the packages pinned in scripts/requirements-onnx-1.23.txt
into .cache/onnx-1.23.2 (kept apart from the onnx 1.22.0 the other suites read; see
scripts/pins.py) and writes each case as OUT/<name>/model.onnx,
OUT/<name>/test_data_set_<i>/{input,output}_<j>.pb and a data.json with the case's
tolerances, the layout `onnx-runtime test` reads.

usage: scripts/export-onnx-1-23-node-tests.py OUT_DIR
Run with the project's python3; it re-executes itself with the pinned packages first on the
path. OUT_DIR is reused only when it holds an export made by this script from the same
pinned set (OUT_DIR/.exported records both); anything else is removed and exported again.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import pins  # noqa: E402  (scripts/pins.py)

VERSION = "1.23.2"
ROOT = os.path.dirname(HERE)
TARGET = os.path.join(ROOT, ".cache", f"onnx-{VERSION}")
REQUIREMENTS = os.path.join(HERE, "requirements-onnx-1.23.txt")


def export_stamp() -> str:
    """What OUT_DIR/.exported holds: the onnx version, and a digest of the pinned set and of
    this script (a change to either makes the export stale)."""
    with open(os.path.abspath(__file__)) as f:
        source = f.read()
    return f"onnx {VERSION}, pins+script {pins.digest(pins.fingerprint(REQUIREMENTS), source)}"


def check_imports() -> None:
    """The packages imported are the pinned ones from TARGET, not others from site-packages."""
    import importlib

    problems = pins.check(REQUIREMENTS, TARGET)
    for module in ("onnx", "numpy", "ml_dtypes", "google.protobuf", "typing_extensions"):
        m = importlib.import_module(module)
        if not os.path.abspath(m.__file__).startswith(TARGET + os.sep):
            problems.append(f"{module} was imported from {m.__file__}, not from {TARGET}")
    if problems:
        sys.exit("export-onnx-1-23-node-tests.py:\n  " + "\n  ".join(problems))


def write_value(path: str, value, type_proto, name: str) -> None:
    from onnx import TensorProto, numpy_helper

    if type_proto.HasField("map_type"):
        proto = numpy_helper.from_dict(value, name)
    elif type_proto.HasField("sequence_type"):
        proto = numpy_helper.from_list(value, name)
    elif type_proto.HasField("optional_type"):
        proto = numpy_helper.from_optional(value, name)
    elif isinstance(value, TensorProto):
        proto = value
    else:
        proto = numpy_helper.from_array(value, name)
    with open(path, "wb") as f:
        f.write(proto.SerializeToString())


def export(out_dir: str) -> None:
    import warnings

    import onnx
    from onnx.backend.test.loader import load_node_model_tests

    # numpy's warnings while the cases compute their outputs (divide by zero, out-of-range
    # casts) are expected there; they only bury the log.
    warnings.filterwarnings("ignore", category=RuntimeWarning)

    assert onnx.__version__ == VERSION, f"imported onnx {onnx.__version__}, not {VERSION}"
    check_imports()
    stamp = os.path.join(out_dir, ".exported")
    want = export_stamp()
    if os.path.exists(stamp) and open(stamp).read().strip() == want:
        print(f"{out_dir}: already holds the onnx {VERSION} node tests ({want})")
        return
    if os.path.exists(out_dir):
        print(f"{out_dir}: not made from the current pins and script; exporting again")
    if os.path.exists(out_dir):
        shutil.rmtree(out_dir)
    os.makedirs(out_dir)
    cases = load_node_model_tests()
    for case in cases:
        case_dir = os.path.join(out_dir, case.name)
        os.makedirs(case_dir)
        graph = case.model.graph
        with open(os.path.join(case_dir, "model.onnx"), "wb") as f:
            f.write(case.model.SerializeToString())
        with open(os.path.join(case_dir, "data.json"), "w") as f:
            json.dump({"rtol": case.rtol, "atol": case.atol}, f)
        for i, (inputs, outputs) in enumerate(case.data_sets):
            set_dir = os.path.join(case_dir, f"test_data_set_{i}")
            os.makedirs(set_dir)
            # Inputs pair with the graph inputs that have no initializer, in order.
            inits = {t.name for t in graph.initializer}
            feeds = [x for x in graph.input if x.name not in inits]
            for j, value in enumerate(inputs):
                write_value(
                    os.path.join(set_dir, f"input_{j}.pb"), value, feeds[j].type, feeds[j].name
                )
            for j, value in enumerate(outputs):
                out = graph.output[j]
                write_value(os.path.join(set_dir, f"output_{j}.pb"), value, out.type, out.name)
    with open(stamp, "w") as f:
        f.write(want)
    print(f"{out_dir}: wrote {len(cases)} onnx {VERSION} node test cases ({want})")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = os.path.abspath(sys.argv[1])
    if os.environ.get("ONNX_EXPORT_CHILD") != "1":
        pins.install_target(REQUIREMENTS, TARGET)
        env = dict(os.environ, ONNX_EXPORT_CHILD="1", PYTHONPATH=TARGET)
        sys.exit(subprocess.call([sys.executable, os.path.abspath(__file__), out_dir], env=env))
    export(out_dir)


if __name__ == "__main__":
    main()
