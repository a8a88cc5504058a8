#!/usr/bin/env bash
# Runs ON the GPU machine (copied into .gpu/ by scripts/gpu-test): the acceptance test
# (.gpu/seed-conformance, one thread) and the CUDA provider's GPU tests, then prints a short
# table. Needs no Rust and no variables: the runtime finds the CUDA libraries itself.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null || true
rows=()
status=0
# The NVRTC cache compiled where the binaries were built (scripts/gpu-test): unpacked into this
# machine's cache folder, so kernels load instead of compiling.
if [[ -f $here/nvrtc-cache.tar.xz ]]; then
  cache=${XDG_CACHE_HOME:-$HOME/.cache}
  mkdir -p "$cache" && tar -C "$cache" -xJf "$here/nvrtc-cache.tar.xz" &&
    echo "NVRTC cache: $(ls "$cache/onnx-runtime/cuda" | wc -l) modules in $cache/onnx-runtime/cuda"
fi
run() {
  local name=$1; shift
  [[ -x $1 ]] || { rows+=("$name|missing|-"); status=1; return; }
  local log; log=$(mktemp)
  local start=$SECONDS
  "$@" 2>&1 | tee "$log"
  local rc=${PIPESTATUS[0]}
  local summary; summary=$(grep -E '^test result:' "$log" | tail -1)
  rows+=("$name|rc=$rc ($((SECONDS - start)) s)|${summary:-no summary}")
  (( rc == 0 )) || status=1
}
# GPU_RUN_STEPS picks what runs: "tests" (acceptance test and GPU tests), "suites" (backend
# suites and real models) or both (the default), so a run fits one call's time limit.
steps=${GPU_RUN_STEPS:-tests suites}
if [[ $steps == *tests* ]]; then
  run seed-conformance "$here/seed-conformance" --test-threads=1
  run cuda-gpu-tests "$here/cuda-gpu-tests" --test-threads=4 --nocapture
fi

# The ONNX backend suites through the CLI, once with every node on the CPU and once with
# `--ep cuda`: a case that passes on the CPU and fails with CUDA placement is a CUDA
# regression. The case data comes staged by scripts/gpu-test (the onnx wheels on GPU machines
# often lack it). Pass lists and logs go to $OUT (or a temporary folder).
cli=$here/onnx-runtime
if [[ ! -x $cli && -f $cli.xz ]]; then
  xz -dc "$cli.xz" >"$cli" && chmod +x "$cli"
fi
out=${OUT:-$(mktemp -d)}
# GPU_RUN_CPU=0 skips the --ep cpu runs and compares with the repo's CPU pass lists instead
# (PASS_LIST_<suite>), which saves half the device time.
root=$(cd "$here/.." && pwd)
suite() { # NAME PASS_LIST DIR...
  local name=$1 pass_list=$2; shift 2
  local eps="cpu cuda"
  if [[ ${GPU_RUN_CPU:-1} == 0 && -f $pass_list ]]; then
    eps=cuda
    grep -v '^#' "$pass_list" | sed 's/[[:space:]]*$//' | grep -v '^$' >"$out/$name-pass-cpu.txt"
  fi
  for ep in $eps; do
    local start=$SECONDS log=$out/$name-$ep.log
    "$cli" test --ep "$ep" "$@" --write-pass-list "$out/$name-pass-$ep.txt" >"$log" 2>&1
    local rc=$?
    local placed; placed=$(grep -E 'ran every node on the device' "$log" | tail -1)
    rows+=("$name --ep $ep|rc=$rc ($((SECONDS - start)) s)|$(tail -n 1 "$log")${placed:+; $placed}")
    (( rc == 0 )) || status=1
  done
  comm -23 <(sort "$out/$name-pass-cpu.txt") <(sort "$out/$name-pass-cuda.txt") >"$out/$name-cuda-regressions.txt"
  local n; n=$(wc -l <"$out/$name-cuda-regressions.txt")
  rows+=("$name: pass on cpu, fail on cuda|$n cases|$out/$name-cuda-regressions.txt")
  if (( n > 0 )); then
    status=1
    grep -F -f "$out/$name-cuda-regressions.txt" "$out/$name-cuda.log" | grep '^FAIL' | head -40
  fi
}
if [[ $steps != *suites* ]]; then
  :
elif [[ -x $cli ]]; then
  data=$(mktemp -d)
  if [[ -f $here/onnx-1.22-data.tar.xz ]]; then
    mkdir -p "$data/1.22" && tar -C "$data/1.22" -xJf "$here/onnx-1.22-data.tar.xz"
    suite onnx-1.22 "$root/tests/backend/cpu-pass-list.txt" "$data/1.22/node" "$data/1.22/simple" "$data/1.22/light" \
      "$data/1.22/pytorch-converted" "$data/1.22/pytorch-operator"
  fi
  if [[ -f $here/onnx-1.23-node.tar.xz ]]; then
    mkdir -p "$data/1.23" && tar -C "$data/1.23" -xJf "$here/onnx-1.23-node.tar.xz"
    suite onnx-1.23-node "$root/tests/backend/cpu-pass-list-onnx-1.23.txt" "$data/1.23/onnx-1.23-node"
  fi
  # Real models staged in .gpu/models: outputs with --ep cuda against onnxruntime (CPU).
  if [[ -d $here/models ]]; then
    names=$(cd "$here/models" && ls *.onnx | sed 's/\.onnx$//' | tr '\n' ' ')
    start=$SECONDS
    REAL_MODELS_DIR=$here/models python3 "$here/../scripts/check-real-models.py" --cli "$cli" \
      --ep cuda --no-light --only $names >"$out/real-models-cuda.log" 2>&1
    rc=$?
    cat "$out/real-models-cuda.log"
    rows+=("real models --ep cuda vs onnxruntime|rc=$rc ($((SECONDS - start)) s)|$(grep -cE ': PASS$' "$out/real-models-cuda.log") PASS of $names")
    (( rc == 0 )) || status=1
  fi
else
  rows+=("backend suites|skipped|no $cli")
fi

echo
echo "| binary | exit | result |"
echo "| --- | --- | --- |"
for r in "${rows[@]}"; do IFS='|' read -r a b c <<<"$r"; echo "| $a | $b | $c |"; done
exit $status
