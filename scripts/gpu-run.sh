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
echo
echo "| binary | exit | result |"
echo "| --- | --- | --- |"
for r in "${rows[@]}"; do IFS='|' read -r a b c <<<"$r"; echo "| $a | $b | $c |"; done
exit $status
