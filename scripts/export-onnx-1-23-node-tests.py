#!/usr/bin/env python3
"""Writes the ONNX 1.23.2 node test cases out as backend-style case folders.

onnx 1.23 no longer ships the node test data; it generates the cases in Python
(onnx.backend.test.loader.load_node_model_tests()). This script installs onnx==1.23.2 into
.cache/onnx-1.23.2 (kept apart from the onnx 1.22.0 the other suites read) and writes each
case as OUT/<name>/model.onnx, OUT/<name>/test_data_set_<i>/{input,output}_<j>.pb and a
data.json with the case's tolerances, the layout `onnx-runtime test` reads.

usage: scripts/export-onnx-1-23-node-tests.py OUT_DIR
Run with the project's python3; it re-executes itself with the 1.23.2 packages first on the
path. OUT_DIR is reused when it already holds an export of the same version.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

VERSION = "1.23.2"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(ROOT, ".cache", f"onnx-{VERSION}")


def ensure_installed() -> None:
    marker = os.path.join(TARGET, f"onnx-{VERSION}.dist-info")
    if os.path.isdir(marker):
        return
    subprocess.check_call(
        [
            sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-cache-dir",
            "--target", TARGET, f"onnx=={VERSION}",
        ]
    )


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
    import onnx
    from onnx.backend.test.loader import load_node_model_tests

    assert onnx.__version__ == VERSION, f"imported onnx {onnx.__version__}, not {VERSION}"
    stamp = os.path.join(out_dir, ".exported")
    if os.path.exists(stamp) and open(stamp).read().strip() == VERSION:
        print(f"{out_dir}: already holds the onnx {VERSION} node tests")
        return
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
        f.write(VERSION)
    print(f"{out_dir}: wrote {len(cases)} onnx {VERSION} node test cases")


def main() -> None:
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    out_dir = os.path.abspath(sys.argv[1])
    if os.environ.get("ONNX_EXPORT_CHILD") != "1":
        ensure_installed()
        env = dict(os.environ, ONNX_EXPORT_CHILD="1", PYTHONPATH=TARGET)
        sys.exit(subprocess.call([sys.executable, os.path.abspath(__file__), out_dir], env=env))
    export(out_dir)


if __name__ == "__main__":
    main()
