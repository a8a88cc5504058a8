#!/usr/bin/env bash
# Runs ON the GPU machine from the repo root, after scripts/gpu-test staged .gpu/ here: the
# acceptance test, the kernel throughput tests and the ResNet-50 convolution bench (ours), the
# same shapes in PyTorch, the exported ResNet-50/BERT models against onnxruntime and timed, the
# placement of the staged models, and memcheck over chosen GPU tests. Logs go to $OUT.
# Carry: .gpu/cuda-gpu-tests .gpu/seed-conformance .gpu/onnx-runtime.xz .gpu/nvrtc-cache.tar.xz
#        .gpu/onnx-1.23-node.tar.xz and a models folder of at most ~17 MB (.gpu/models-small).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-$(mktemp -d)}
g=.gpu
xz -dc $g/onnx-runtime.xz > $g/onnx-runtime && chmod +x $g/onnx-runtime
mkdir -p ~/.cache && tar -C ~/.cache -xJf $g/nvrtc-cache.tar.xz
t0=$SECONDS
step() { echo "== [$((SECONDS - t0)) s] $*"; }
step seed; $g/seed-conformance --test-threads=1 2>&1 | grep "test result"
step attention-rnn; timeout 150 $g/cuda-gpu-tests attention rnn:: --test-threads=4 2>&1 | grep -E "FAILED|panicked|test result" | head -20
step cli-attention; mkdir -p $g/d && tar -C $g/d -xJf $g/onnx-1.23-node.tar.xz && $g/onnx-runtime test --ep cuda $g/d/onnx-1.23-node --filter attention 2>&1 | grep -E "^FAIL|passed" | head
step throughput; timeout 150 $g/cuda-gpu-tests throughput --test-threads=1 --nocapture 2>&1 | grep -E "GB/s|us|FAILED|test result" > $OUT/throughput.log; tail -3 $OUT/throughput.log
step convbench; timeout 120 $g/cuda-gpu-tests --ignored conv_bench --test-threads=1 --nocapture > $OUT/convbench.log 2>&1; tail -3 $OUT/convbench.log
step torch; timeout 120 python3 scripts/gpu-torch-kernels.py > $OUT/torch.log 2>&1; tail -3 $OUT/torch.log
step models; timeout 170 python3 scripts/gpu-models.py --cli $g/onnx-runtime --iterations 30 > $OUT/models.log 2>&1; tail -6 $OUT/models.log
step placement; for m in $g/models-small/*.onnx /tmp/gpu-models/resnet50.onnx /tmp/gpu-models/bert.onnx; do [ -f $m ] && { echo "-- $m"; $g/onnx-runtime info --ep cuda $m 2>&1 | sed -n '/cuda placement/,$p' | head -12; }; done
step memcheck; timeout 120 compute-sanitizer --tool memcheck --print-limit 20 $g/cuda-gpu-tests cast:: einsum:: signal:: detection:: linalg:: unpool:: tensor_scatter:: fused:: conv_pointwise --test-threads=1 > $OUT/memcheck.log 2>&1; grep -E "ERROR SUMMARY|test result" $OUT/memcheck.log | tail -3
step done
