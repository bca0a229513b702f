"""PyTorch reference for bench/cnn_step.sh: one training step (forward, backward, AdamW) of the
CNN presets built from ordinary torch modules (nn.Conv2d, nn.BatchNorm2d over the whole batch,
max pooling, nn.Linear), on a random batch of 28x28 images; prints the median step time.
On a GPU (--device cuda) with cuDNN's autotuned algorithms (cudnn.benchmark), the step timed to
its end (synchronized); --precision bf16 runs it under autocast.
Usage: $PYTHON bench/torch_cnn_step.py FAMILY --width W [--hidden H | --blocks N]
       --batch B --steps S --threads T [--device cpu|cuda] [--precision fp32|bf16]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_bn(cin: int, cout: int, k: int = 3, stride: int = 1) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, k, stride, k // 2, bias=False), nn.BatchNorm2d(cout)]


def alexnet(width: int, hidden: int, classes: int = 10) -> nn.Module:
    w = width
    return nn.Sequential(
        *conv_bn(1, w), nn.ReLU(), nn.MaxPool2d(2),
        *conv_bn(w, 2 * w), nn.ReLU(), nn.MaxPool2d(2),
        *conv_bn(2 * w, 4 * w), nn.ReLU(),
        *conv_bn(4 * w, 4 * w), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Dropout(0.3), nn.Linear(4 * w * 9, hidden), nn.ReLU(),
        nn.Linear(hidden, classes))


class Block(nn.Module):
    def __init__(self, cin: int, cout: int, stride: int):
        super().__init__()
        self.branch = nn.Sequential(*conv_bn(cin, cout, 3, stride), nn.ReLU(), *conv_bn(cout, cout))
        self.down = (nn.Sequential(*conv_bn(cin, cout, 1, stride))
                     if stride != 1 or cin != cout else nn.Identity())

    def forward(self, x):
        return F.relu(self.branch(x) + self.down(x))


def resnet(width: int, blocks: int, classes: int = 10) -> nn.Module:
    layers, cin = [*conv_bn(1, width), nn.ReLU()], width
    for stage in range(3):
        cout = width << stage
        for i in range(blocks):
            layers.append(Block(cin, cout, 2 if stage > 0 and i == 0 else 1))
            cin = cout
    return nn.Sequential(*layers, nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(cin, classes))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("family", choices=["alexnet", "resnet"])
    ap.add_argument("--width", type=int, required=True)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--blocks", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    torch.backends.cudnn.benchmark = True
    model = (alexnet(a.width, a.hidden) if a.family == "alexnet"
             else resnet(a.width, a.blocks)).train().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    x = torch.rand(a.batch, 1, 28, 28, device=dev)
    y = torch.randint(0, 10, (a.batch,), device=dev)
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, torch.bfloat16, enabled=a.precision == "bf16"):
            loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"step_s": statistics.median(times[2:])}))


if __name__ == "__main__":
    main()
