#!/usr/bin/env bash
# Runs ON the GPU machine, from the repo root: the decode-speed and GPU-test steps of the LLM
# work, with binaries staged here in .gpu/c1/ (compressed, so they fit one call's carry):
#
#   scripts/gpu-test                      # builds .gpu/ (tests, acceptance test, CLI, NVRTC cache)
#   mkdir -p .gpu/c1 && cp scripts/gpu-llm-run.sh .gpu/c1/run.sh
#   xz -T0 -c .gpu/cuda-gpu-tests > .gpu/c1/cuda-gpu-tests.xz
#   xz -T0 -c .gpu/seed-conformance > .gpu/c1/seed-conformance.xz
#   cp .gpu/onnx-runtime.xz .gpu/nvrtc-cache.tar.xz .gpu/c1/
#   # optional: an older CLI as .gpu/c1/onnx-runtime-base.xz (step llmb), the Python wheel
#   # (scripts/python-wheel --no-install; cp target/wheels/*.whl .gpu/c1/) for step py, and
#   # the onnxruntime-genai wheel in .whl/ (the model builder; see /work/.library/device).
#
# then, with carry [".gpu/c1", ".whl"]:  bash .gpu/c1/run.sh STEP...
# steps: tests, tests-pdl, tests-nopdl, t-FILTER, llm, llmb, llm-pdl, llm-nopdl, llm-cublas (float products on cuBLASLt
# only), kg/kg-fp16 (a replayed step's device time, ncu graph mode), llm15, llmx (Llama 1B and Phi-3 mini
# int4), kt, kt-fp16, san, py
set -uo pipefail
C1=$(cd "$(dirname "$0")" && pwd)
G=/tmp/g
mkdir -p $G
for b in cuda-gpu-tests seed-conformance onnx-runtime onnx-runtime-base; do
  [[ -f $C1/$b.xz ]] || continue
  if [[ ! -x $G/$b || $C1/$b.xz -nt $G/$b ]]; then xz -dc $C1/$b.xz > $G/$b && chmod +x $G/$b; fi
done
cache=${XDG_CACHE_HOME:-$HOME/.cache}
mkdir -p $cache && tar -C $cache -xJf $C1/nvrtc-cache.tar.xz
if [[ -d .whl && ! -d /tmp/site/onnxruntime_genai ]]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
fi
export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
for step in "$@"; do
  echo "===== $step ($(date +%T))"
  case $step in
    tests) $G/seed-conformance --test-threads=1 2>&1 | grep -E "^test result|FAILED|panicked" ;
           $G/cuda-gpu-tests --test-threads=4 2>&1 | grep -E "^test result|FAILED|failed|panicked" ;;
    tests-pdl) ONNX_RUNTIME_CUDA_PDL=1 $G/cuda-gpu-tests --test-threads=4 2>&1 | grep -E "^test result|FAILED|failed|panicked" ;;
    t-*) $G/cuda-gpu-tests --test-threads=4 "${step#t-}" 2>&1 | grep -E "^test |^test result|panicked|assert" | tail -40 ;;
    llm) python3 scripts/gpu-llm-bench.py --cli $G/onnx-runtime --sizes 0.5b --precisions int4 fp16 --skip-hf --check-tokens 32 2>&1 | cut -c1-400 | grep -v "prompt step" | tail -25 ;;
    llmb) python3 scripts/gpu-llm-bench.py --cli $G/onnx-runtime-base --sizes 0.5b --precisions int4 fp16 --skip-hf --skip-check 2>&1 | cut -c1-400 | grep -v "prompt step" | tail -12 ;;
    llm-nopdl) ONNX_RUNTIME_CUDA_PDL=0 python3 scripts/gpu-llm-bench.py --cli $G/onnx-runtime --sizes 0.5b --precisions int4 fp16 --skip-hf --skip-check 2>&1 | cut -c1-400 | grep -v "prompt step" | tail -12 ;;
    tests-nopdl) ONNX_RUNTIME_CUDA_PDL=0 $G/cuda-gpu-tests --test-threads=4 2>&1 | grep -E "^test result|FAILED|failed|panicked" ;;
    llm-pdl) ONNX_RUNTIME_CUDA_PDL=1 python3 scripts/gpu-llm-bench.py --cli $G/onnx-runtime --sizes 0.5b --precisions int4 fp16 --skip-hf --check-tokens 32 2>&1 | cut -c1-400 | grep -v "prompt step" | tail -25 ;;
    llm-gemv*) v=${step#llm-gemv}; ONNX_RUNTIME_CUDA_GEMV=${v:-1} python3 scripts/gpu-llm-bench.py --cli $G/onnx-runtime --sizes 0.5b --precisions int4 fp16 --skip-hf --skip-check 2>&1 | cut -c1-400 | grep -v "prompt step" | tail -12 ;;
    llm-cublas) ONNX_RUNTIME_CUDA_GEMV=0 python3 scripts/gpu-llm-bench.py --cli $G/onnx-runtime --sizes 0.5b --precisions int4 fp16 --skip-hf --skip-check 2>&1 | cut -c1-400 | grep -v "prompt step" | tail -12 ;;
    llmx) python3 scripts/gpu-llm-bench.py --cli $G/onnx-runtime --sizes llama-1b phi3-mini --precisions int4 --skip-hf --check-tokens 32 2>&1 | cut -c1-400 | grep -v "prompt step" | tail -25 ;;
    llm15) python3 scripts/gpu-llm-bench.py --cli $G/onnx-runtime --sizes 1.5b --precisions fp16 --skip-hf --check-tokens 32 2>&1 | cut -c1-400 | grep -v "prompt step" | tail -25 ;;
    kt|kt-fp16|ktb|ktb-fp16)
      # kt*: the current CLI, ktb*: the base one (onnx-runtime-base); the whole decode step's
      # kernels in order go to $OUT/kernels-STEP.txt when $OUT is set.
      p=int4; [[ $step == *-fp16 ]] && p=fp16
      cli=$G/onnx-runtime; [[ $step == ktb* ]] && cli=$G/onnx-runtime-base
      args=$(python3 scripts/decode-step-inputs.py /tmp/gpu-llm-bench/onnx-0.5b-$p /tmp/step-$p --cached 64 --max-length 144)
      python3 scripts/gpu-kernel-times.py --cache-control none --top 40 --order -- $cli bench \
        /tmp/gpu-llm-bench/onnx-0.5b-$p/model.onnx --ep cuda --warmup 1 --iterations 3 $args \
        > /tmp/kt-$step.txt 2>&1
      [[ -n ${OUT:-} ]] && cp /tmp/kt-$step.txt $OUT/kernels-$step.txt
      grep -v "^[0-9]* *|" /tmp/kt-$step.txt | head -45 ;;
    kg|kg-fp16)
      # The whole replayed decode step as one workload (ncu --graph-profiling graph): its
      # device time with float products on our GEMV or on cuBLASLt, with and without PDL.
      p=int4; [[ $step == *-fp16 ]] && p=fp16
      args=$(python3 scripts/decode-step-inputs.py /tmp/gpu-llm-bench/onnx-0.5b-$p /tmp/step-$p --cached 64 --max-length 144)
      for v in ${KG_GEMV:-1 0}; do
        for pdl in 0 1; do
          ONNX_RUNTIME_CUDA_PDL=$pdl ONNX_RUNTIME_CUDA_GEMV=$v ncu --clock-control none \
            --cache-control none --graph-profiling graph --metrics gpu__time_duration.sum --csv \
            $G/onnx-runtime bench /tmp/gpu-llm-bench/onnx-0.5b-$p/model.onnx --ep cuda \
            --warmup 1 --iterations 6 $args > /tmp/kg.csv 2>/dev/null
          python3 - "$p GEMV=$v PDL=$pdl" /tmp/kg.csv <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[2])) if len(r) > 10]
if not rows:
    print(sys.argv[1], "no ncu rows"); sys.exit()
h = rows[0]; name = h.index("Kernel Name"); val = h.index("Metric Value")
last = [(r[name][:40], r[val]) for r in rows[1:] if r[h.index("Metric Name")] == "gpu__time_duration.sum"][-4:]
print(sys.argv[1], "last workloads (ns):", last)
PY
        done
      done ;;
    san)
      for t in ${SAN_FILTER:-attention nbits gqa norm}; do
        for tool in memcheck racecheck; do
          echo "--- $tool $t"
          compute-sanitizer --tool $tool --print-limit 20 $G/cuda-gpu-tests --test-threads=1 $t 2>&1 | grep -E "ERROR SUMMARY|RACECHECK SUMMARY|^test result|Invalid|hazard" | head -12
        done
      done ;;
    py) rm -rf /tmp/sitepy && mkdir -p /tmp/sitepy && python3 -m zipfile -e $C1/onnx_runtime_rs-*.whl /tmp/sitepy
        PYTHONPATH=/tmp/sitepy python3 -m pytest -q -p no:cacheprovider crates/onnx-runtime-python/tests/test_gpu_dlpack.py \
          crates/onnx-runtime-python/tests/test_session.py crates/onnx-runtime-python/tests/test_iobinding.py 2>&1 | tail -15 ;;
    *) echo "unknown step $step" ;;
  esac
done
