#!/usr/bin/env python3
"""Runs ON the GPU machine: times PyTorch on the shapes the CUDA provider's kernel benchmarks
(`cuda-gpu-tests --nocapture` bench lines) use, so the two can be put side by side in one run.

    python3 scripts/gpu-torch-kernels.py

float32 matrix products run with TF32 off (true float32, as the provider computes by
default). Times are the median of 5 samples, each the mean of back-to-back calls between two CUDA
events, after 20 warm-up calls.
"""

import torch


def med(fn, runs=200):
    """Median over 5 samples of the mean time of `runs // 5` back-to-back calls between two
    CUDA events (as the provider's benchmarks time their kernels: queued back to back)."""
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    per = max(1, runs // 5)
    ts = []
    for _ in range(5):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(per):
            fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e) * 1e3 / per)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
    dev = "cuda"
    print("| kernel | shape | dtype | torch us | torch rate |")
    print("| --- | --- | --- | --- | --- |")
    for (b, m, k, n) in [(1, 128, 768, 3072), (1, 1, 4096, 4096), (8, 512, 1024, 4096)]:
        for dt in [torch.float32, torch.float16, torch.bfloat16]:
            if b == 8 and dt != torch.float16:
                continue
            a = torch.randn(b, m, k, device=dev, dtype=dt)
            w = torch.randn(k, n, device=dev, dtype=dt)
            us = med(lambda: torch.matmul(a, w))
            tf = 2 * b * m * k * n / us / 1e6
            print(f"| MatMul | [{b},{m},{k}]@[{k},{n}] | {dt} | {us:.1f} | {tf:.1f} TFLOP/s |")
    n = 1 << 25
    x, y = torch.randn(n, device=dev), torch.randn(n, device=dev)
    us = med(lambda: x + y)
    print(f"| Add | [{n}] | f32 | {us:.1f} | {3 * 4 * n / us / 1e3:.0f} GB/s |")
    x2 = torch.randn(16384, 1024, device=dev)
    us = med(lambda: torch.softmax(x2, -1))
    print(f"| Softmax | [16384,1024] | f32 | {us:.1f} | {2 * 4 * x2.numel() / us / 1e3:.0f} GB/s |")
    ln = torch.nn.LayerNorm(768, device=dev)
    x3 = torch.randn(21845, 768, device=dev)
    with torch.inference_mode():
        us = med(lambda: ln(x3))
    print(f"| LayerNorm | [21845,768] | f32 | {us:.1f} | {2 * 4 * x3.numel() / us / 1e3:.0f} GB/s |")
    x4 = torch.randn(4096, 4096, device=dev)
    us = med(lambda: x4.sum(-1))
    print(f"| ReduceSum | [4096,4096] last axis | f32 | {us:.1f} | {4 * x4.numel() / us / 1e3:.0f} GB/s |")
    # ResNet-50 convolutions (NCHW), batch 1 and 32.
    # The layers of the provider's conv_bench_resnet50_layers: (C, H, M, k, stride, pad).
    layers = [(3, 224, 64, 7, 2, 3), (64, 56, 64, 1, 1, 0), (64, 56, 64, 3, 1, 1),
              (64, 56, 256, 1, 1, 0), (128, 56, 128, 3, 2, 1), (128, 28, 128, 3, 1, 1),
              (256, 14, 256, 3, 1, 1), (1024, 14, 256, 1, 1, 0), (512, 7, 512, 3, 1, 1),
              (2048, 7, 512, 1, 1, 0)]
    for batch in [1, 32]:
        for dt in [torch.float32, torch.float16]:
            for (cin, hw, cout, ks, st, pad) in layers:
                xx = torch.randn(batch, cin, hw, hw, device=dev, dtype=dt)
                ww = torch.randn(cout, cin, ks, ks, device=dev, dtype=dt)
                us = med(lambda: torch.nn.functional.conv2d(xx, ww, stride=st, padding=pad),
                         runs=50)
                oh = (hw + 2 * pad - ks) // st + 1
                tf = 2 * batch * cout * oh * oh * cin * ks * ks / us / 1e6
                print(f"| Conv | N{batch} C{cin} {hw}x{hw} K{cout} {ks}x{ks}/{st} | {dt} | "
                      f"{us:.1f} | {tf:.1f} TFLOP/s |")


if __name__ == "__main__":
    main()
