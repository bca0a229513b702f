"""Conv2d layer timings of PyTorch on the CPU, bench/bench_conv.cpp's counterpart.

Times, per shape, torch.nn.functional.conv2d forward plus autograd backward (grad of the input,
weight and bias) in fp32 at batch 128 with torch.set_num_threads(threads), and, like bench_conv,
BatchNorm2d (training) + ReLU forward and backward on the conv's output. Prints one JSON line per
shape with the median ms of the timed repeats: {"impl", "shape", "conv_ms", "bn_relu_ms"}.
Usage: torch_conv.py [--threads 2] [--batch 128] [--reps 10] [--warmup 3] [--shape NAME]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn.functional as tf

# name: (IC, H=W, OC, K, stride, pad), the shapes of bench_conv.cpp.
SHAPES = {
    "c1_28_32": (1, 28, 32, 3, 1, 1),
    "c32_28_64_s2": (32, 28, 64, 3, 2, 1),
    "c64_14_64": (64, 14, 64, 3, 1, 1),
    "c64_14_128_s2": (64, 14, 128, 3, 2, 1),
    "c128_7_128": (128, 7, 128, 3, 1, 1),
}


def time_ms(fn, reps: int, warmup: int) -> float:
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--batch", type=int, default=128)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--shape", default=None, help="one shape name; default: all")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(1)
    for name, (ic, hw, oc, k, stride, pad) in SHAPES.items():
        if args.shape and name != args.shape:
            continue
        x = torch.randn(args.batch, ic, hw, hw, requires_grad=True)
        w = (torch.randn(oc, ic, k, k) * (2.0 / (ic * k * k)) ** 0.5).requires_grad_()
        b = torch.zeros(oc, requires_grad=True)
        y0 = tf.conv2d(x, w, b, stride=stride, padding=pad)
        dy = torch.randn_like(y0)

        def conv_step():
            y = tf.conv2d(x, w, b, stride=stride, padding=pad)
            gx, gw, gb = torch.autograd.grad(y, (x, w, b), dy)
            return gx, gw, gb

        h = y0.detach().requires_grad_()
        g = torch.ones(oc, requires_grad=True)
        beta = torch.zeros(oc, requires_grad=True)

        def bn_relu_step():
            z = torch.relu(tf.batch_norm(h, None, None, g, beta, training=True, eps=1e-5))
            return torch.autograd.grad(z, (h, g, beta), dy)

        conv_ms = time_ms(conv_step, args.reps, args.warmup)
        bn_ms = time_ms(bn_relu_step, args.reps, args.warmup)
        print(json.dumps({"impl": "torch", "shape": name, "conv_ms": conv_ms,
                          "bn_relu_ms": bn_ms}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
