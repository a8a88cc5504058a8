"""A real client: the onnxruntime-calling part of scripts/check-real-models.py (its ort_run),
taken from the script as it is with only `import onnxruntime as ort` changed to
`import onnx_runtime_rs as ort`, runs three of the wheel's light_* models (and the real models of
scripts/fetch-real-models.sh where .cache/real-models has them: not on CI) and matches
onnxruntime's outputs within the script's tolerances."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "scripts" / "check-real-models.py"
sys.path.insert(0, str(ROOT / "scripts"))
import real_models as rm  # noqa: E402


def _ort_run_from_script(import_line: str):
    """The script's ort_run function, with its import of onnxruntime replaced by `import_line`."""
    source = SCRIPT.read_text()
    tree = ast.parse(source)
    (fn,) = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "ort_run"]
    text = ast.get_source_segment(source, fn)
    assert "    import onnxruntime as ort\n" in text
    text = text.replace("    import onnxruntime as ort\n", f"    {import_line}\n")
    namespace = {"np": np, "Path": Path, "__builtins__": __builtins__}
    exec("from __future__ import annotations\n" + text, namespace)
    return namespace["ort_run"]


ours_run = _ort_run_from_script("import onnx_runtime_rs as ort")
theirs_run = _ort_run_from_script("import onnxruntime as ort")

# The quick ones (under a second each on CI's two cores; the other light models spend seconds
# making their large generated weights in both runtimes).
LIGHT = {"light_squeezenet", "light_shufflenet", "light_inception_v1"}
REAL = {"ppocr_mobile_v2_cls", "silero_vad", "ppocr_v4_det", "minilm_l3_dynq"}
MODELS = [m for m in rm.light_models() if m.name in LIGHT] + [m for m in rm.real_models() if m.name in REAL]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.name)
def test_check_real_models_client_runs_unchanged(model):
    if not model.path.exists():
        pytest.skip(f"{model.path} not fetched (scripts/fetch-real-models.sh)")
    feeds = rm.make_inputs(model)
    ours = ours_run(model.path, feeds)
    theirs = theirs_run(model.path, feeds)
    assert list(ours) == list(theirs)
    rtol, atol = model.tol or (1e-3, 1e-4)
    for name, want in theirs.items():
        got = ours[name]
        assert got.dtype == want.dtype and got.shape == want.shape, name
        if np.issubdtype(want.dtype, np.floating):
            np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=name)
        else:
            np.testing.assert_array_equal(got, want, err_msg=name)
