#!/usr/bin/env bash
# Runs ON the GPU machine from the repo root, after scripts/gpu-test staged .gpu/ here: the
# acceptance test, chosen GPU tests ($GPU_TESTS), the onnx 1.22 suites with --ep cuda against the
# repo's CPU pass list (runs with several data sets capture and replay CUDA graphs), and the
# session benchmark (scripts/gpu-session-bench.py: ResNet-50 / BERT-base, CUDA graphs on and
# off, PyTorch eager and CUDA graph). Logs go to $OUT.
# Carry: .gpu/cuda-gpu-tests .gpu/seed-conformance .gpu/onnx-runtime.xz .gpu/nvrtc-cache.tar.xz
#        .gpu/onnx-1.22-data.tar.xz .gpu/gpu-run.sh
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
g=.gpu
xz -dc $g/onnx-runtime.xz > $g/onnx-runtime && chmod +x $g/onnx-runtime
mkdir -p ~/.cache && tar -C ~/.cache -xJf $g/nvrtc-cache.tar.xz
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }
if [[ ${SKIP_SEED:-0} != 1 ]]; then
  step seed; timeout 90 $g/seed-conformance --test-threads=1 2>&1 | grep "test result"
fi
if [[ -n ${GPU_TESTS:-} ]]; then
  step "gpu tests: $GPU_TESTS"
  # shellcheck disable=SC2086
  timeout ${GPU_TESTS_TIMEOUT:-150} $g/cuda-gpu-tests $GPU_TESTS --test-threads=4 > $OUT/tests.log 2>&1
  grep -E "^test .*FAILED|panicked|test result" $OUT/tests.log | head -30
fi
if [[ ${SKIP_SUITE:-0} != 1 ]]; then
  step "onnx 1.22 suites --ep cuda"
  OUT=$OUT GPU_RUN_STEPS=suites GPU_RUN_CPU=0 timeout ${SUITE_TIMEOUT:-240} bash $g/gpu-run.sh > $OUT/suites.log 2>&1
  tail -8 $OUT/suites.log
fi
if [[ ${SKIP_BENCH:-0} != 1 ]]; then
  step session bench
  timeout ${BENCH_TIMEOUT:-300} python3 scripts/gpu-session-bench.py --cli $g/onnx-runtime \
    --iterations ${ITER:-30} ${BENCH_ARGS:-} > $OUT/session.log 2>&1
  grep -E "^(--|\||cuda graph|outputs)" $OUT/session.log | tail -40
fi
step done
