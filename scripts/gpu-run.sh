#!/usr/bin/env bash
# Runs ON the GPU machine (copied into .gpu/ by scripts/gpu-test): the acceptance test
# (.gpu/seed-conformance, one thread) and the CUDA provider's GPU tests, then prints a short
# table. Needs no Rust and no variables: the runtime finds the CUDA libraries itself.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
nvidia-smi --query-gpu=name,driver_version,compute_cap --format=csv,noheader 2>/dev/null || true
rows=()
status=0
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
run seed-conformance "$here/seed-conformance" --test-threads=1
run cuda-gpu-tests "$here/cuda-gpu-tests" --test-threads=4 --nocapture

# The ONNX backend suites of the onnx wheel installed there, through the CLI, once with every
# node on the CPU and once with `--ep cuda`; a case that passes on the CPU and fails with CUDA
# placement is a CUDA regression. Pass lists and logs go to $OUT (or a temporary folder).
cli=$here/onnx-runtime
data=$(python3 -c 'import onnx, os; print(os.path.join(os.path.dirname(onnx.__file__), "backend", "test", "data"))' 2>/dev/null)
if [[ -x $cli && -d ${data:-/nonexistent} ]]; then
  out=${OUT:-$(mktemp -d)}
  suites=("$data/node" "$data/simple" "$data/light" "$data/pytorch-converted" "$data/pytorch-operator")
  for ep in cpu cuda; do
    start=$SECONDS
    "$cli" test --ep "$ep" "${suites[@]}" --write-pass-list "$out/pass-$ep.txt" >"$out/suite-$ep.log" 2>&1
    rc=$?
    placed=$(grep -E 'ran at least one node on the device' "$out/suite-$ep.log" | tail -1)
    rows+=("backend suites --ep $ep|rc=$rc ($((SECONDS - start)) s)|$(tail -n 1 "$out/suite-$ep.log")${placed:+; $placed}")
    (( rc == 0 )) || status=1
  done
  comm -23 <(sort "$out/pass-cpu.txt") <(sort "$out/pass-cuda.txt") >"$out/cuda-regressions.txt"
  n=$(wc -l <"$out/cuda-regressions.txt")
  rows+=("cpu-pass, cuda-fail|$n cases|listed in $out/cuda-regressions.txt")
  (( n == 0 )) || { status=1; sed 's/^/  cuda regression: /' "$out/cuda-regressions.txt"; grep -F -f "$out/cuda-regressions.txt" "$out/suite-cuda.log" | grep '^FAIL' | head -40; }
else
  rows+=("backend suites|skipped|no $cli or no onnx wheel with test data")
fi
echo
echo "| binary | exit | result |"
echo "| --- | --- | --- |"
for r in "${rows[@]}"; do IFS='|' read -r a b c <<<"$r"; echo "| $a | $b | $c |"; done
exit $status
