"""GPU step-time benchmark of a plain PyTorch GPT-2, the reference for mpitron's CUDA backend.

A self-contained GPT-2 written with nn.Module (pre-LN blocks, learned positions, LayerNorm eps
1e-5, GELU tanh, tied head, attention through F.scaled_dot_product_attention(is_causal=True)),
trained on random tokens (fixed seed) with forward, backward, clip_grad_norm_(1.0) and
torch.optim.AdamW(lr 6e-4, betas (0.9, 0.95), weight decay 0.1 on 2-D weights only, fused=True
on cuda), dropout off, in bf16 autocast (--precision bf16; fp32 without autocast, TF32 off as
PyTorch's default) or torch.compile(model) (--mode compile). Each timed step runs between two
torch.cuda.synchronize() calls. Prints one JSON line: impl, batch, seq, precision, ms_per_step
and tokens_per_s (medians over the timed steps), tflops, mfu, peak_mem_bytes
(torch.cuda.max_memory_allocated; 0 on cpu) and more.

Model FLOPs per step, the convention of bench/torch_step.py: 6 * (N - wpe) * B*T + 6 * L * B *
T^2 * C. N - wpe: parameters without the position table (the tied wte/head counted once), so the
first term is every weight matrix product, forward (2 per multiply-add) and backward (4), the
head included; the second is the attention matrix products Q K^T and P V (4 B T^2 C per layer
forward, twice that backward: 12), halved because causal attention needs only the lower
triangle. Not counted: softmax, LayerNorm, GELU, the loss, the optimizer, nor what recomputation
would add. tflops = FLOPs per step / median step time; mfu = tflops / the peak: --peak-tflops
(default 989, the H100 SXM's dense bf16 tensor-core figure from its data sheet) or, with
--peak-from-matmul, what an N^3 bf16 torch.matmul (N = --matmul-n, 8192) achieves on this GPU
(printed to stderr; with --steps 0 only that is measured and printed as JSON).
--largest-batch tries batch 64, 32, 16, 8, 4 in turn and measures the first that does not run
out of memory.
Usage: torch_gpu_gpt2.py [--mode eager|compile] [--precision bf16|fp32] [--batch 16 |
    --largest-batch] [--seq 1024] [--steps 20] [--warmup 5] [--config configs/gpt2-124m.toml]
CPU smoke test: torch_gpu_gpt2.py --device cpu --layers 2 --embd 64 --heads 2 --vocab 256
    --seq 32 --batch 2 --steps 2 --warmup 1
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import re
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

LARGEST_BATCH_TRIES = (64, 32, 16, 8, 4)


@dataclass
class GptConfig:
    n_layer: int = 12
    n_head: int = 12
    n_embd: int = 768
    vocab_size: int = 50257
    block_size: int = 1024


def read_model_config(path: str) -> dict[str, int]:
    """The integer keys of the [model] table of an mpitron TOML preset (no tomllib needed)."""
    values: dict[str, int] = {}
    section = ""
    for line in Path(path).read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if m := re.fullmatch(r"\[(.+)\]", line):
            section = m.group(1).strip()
        elif section == "model" and (m := re.fullmatch(r"(\w+)\s*=\s*(-?\d+)", line)):
            values[m.group(1)] = int(m.group(2))
    return values


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: GptConfig) -> None:
        super().__init__()
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd)
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(x).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_head, c // self.n_head).transpose(1, 2) for z in (q, k, v))
        if hasattr(F, "scaled_dot_product_attention"):
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        else:  # torch < 2.0 (Debian's CPU build): the same product written out, for smoke tests
            att = (q @ k.transpose(-2, -1)) / math.sqrt(k.shape[-1])
            mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
            y = att.masked_fill(~mask, float("-inf")).softmax(dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(b, t, c))


class Mlp(nn.Module):
    def __init__(self, cfg: GptConfig) -> None:
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd)
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, cfg: GptConfig) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.mlp = Mlp(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class Gpt(nn.Module):
    def __init__(self, cfg: GptConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg.vocab_size, cfg.n_embd)
        self.wpe = nn.Embedding(cfg.block_size, cfg.n_embd)
        self.h = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer))
        self.ln_f = nn.LayerNorm(cfg.n_embd, eps=1e-5)
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():  # GPT-2's initialisation
            if name.endswith("bias"):
                nn.init.zeros_(p)
            elif p.dim() == 2:
                std = 0.02 / math.sqrt(2 * cfg.n_layer) if name.endswith("c_proj.weight") else 0.02
                nn.init.normal_(p, std=std)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(idx.shape[1], device=idx.device)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.h:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return F.cross_entropy(logits.view(-1, logits.shape[-1]).float(), targets.view(-1))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def is_out_of_memory(e: BaseException) -> bool:
    return isinstance(e, torch.cuda.OutOfMemoryError) or (
        isinstance(e, RuntimeError) and "out of memory" in str(e))


def free_memory(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()


def matmul_tflops(n: int, device: torch.device) -> float:
    """TFLOP/s of an n^3 bf16 torch.matmul: the best of 5 timings of 10 products after 3 warm-up."""
    a = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    b = torch.randn(n, n, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    best = math.inf
    for _ in range(5):
        sync(device)
        t0 = time.perf_counter()
        for _ in range(10):
            a @ b
        sync(device)
        best = min(best, (time.perf_counter() - t0) / 10)
    del a, b
    free_memory(device)
    return 2.0 * n**3 / best / 1e12


def measure(args: argparse.Namespace, cfg: GptConfig, batch: int,
            device: torch.device) -> dict[str, float]:
    """Builds model and optimizer, runs warm-up and timed steps; median ms/step and the peak."""
    torch.manual_seed(args.seed)
    model = Gpt(cfg).to(device)
    params = list(model.parameters())  # the tied weight once
    decay = [p for p in params if p.dim() >= 2]
    no_decay = [p for p in params if p.dim() < 2]
    extra = {"fused": True} if device.type == "cuda" else {}
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=6e-4, betas=(0.9, 0.95), eps=1e-8, **extra)
    run = model
    if args.mode == "compile":
        from torch import _dynamo

        _dynamo.reset()  # no graphs (nor dynamic shapes) left from an earlier batch
        run = torch.compile(model, dynamic=False)
    g = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, cfg.vocab_size, (batch, args.seq + 1), generator=g).to(device)
    x, y = tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()
    amp = torch.autocast(device_type=device.type, dtype=torch.bfloat16,
                         enabled=args.precision == "bf16")

    def step() -> torch.Tensor:
        opt.zero_grad(set_to_none=True)
        with amp:
            loss = run(x, y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        return loss.detach()

    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    for _ in range(args.warmup):
        step()
    ms: list[float] = []
    loss = torch.zeros(())
    for _ in range(args.steps):
        sync(device)
        t0 = time.perf_counter()
        loss = step()
        sync(device)
        ms.append((time.perf_counter() - t0) * 1e3)
    peak = torch.cuda.max_memory_allocated(device) if device.type == "cuda" else 0
    return {"params": sum(p.numel() for p in params), "ms": statistics.median(ms),
            "ms_min": min(ms), "ms_max": max(ms), "loss": float(loss), "peak": peak}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("eager", "compile"), default="eager")
    ap.add_argument("--precision", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                    help="cpu only for smoke tests")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--largest-batch", action="store_true",
                    help=f"measure the largest of {LARGEST_BATCH_TRIES} that fits in memory")
    ap.add_argument("--seq", type=int, default=1024)
    ap.add_argument("--steps", type=int, default=20, help="timed steps")
    ap.add_argument("--warmup", type=int, default=5, help="untimed steps first (compilation)")
    ap.add_argument("--config", default=None,
                    help="mpitron TOML preset for the shapes; default: GPT-2 124M")
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--embd", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=None)
    ap.add_argument("--block", type=int, default=None)
    ap.add_argument("--peak-tflops", type=float, default=989.0,
                    help="TFLOP/s that MFU divides by (989: H100 SXM dense bf16)")
    ap.add_argument("--peak-from-matmul", action="store_true",
                    help="use the TFLOP/s of an N^3 bf16 matmul on this device as the peak")
    ap.add_argument("--matmul-n", type=int, default=8192)
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()

    cfg = GptConfig()
    if args.config:
        model_keys = read_model_config(args.config)
        for key in ("n_layer", "n_head", "n_embd", "vocab_size", "block_size"):
            if key in model_keys:
                setattr(cfg, key, model_keys[key])
    for key, value in (("n_layer", args.layers), ("n_embd", args.embd), ("n_head", args.heads),
                       ("vocab_size", args.vocab), ("block_size", args.block)):
        if value is not None:
            setattr(cfg, key, value)
    if args.seq > cfg.block_size:
        ap.error(f"--seq {args.seq} exceeds the block size {cfg.block_size}")
    if cfg.n_embd % cfg.n_head:
        ap.error(f"width {cfg.n_embd} is not divisible by {cfg.n_head} heads")
    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        print(f"error: torch {torch.__version__} sees no CUDA device (use --device cpu for a smoke "
              "test)", file=sys.stderr)
        return 1
    if args.mode == "compile" and not hasattr(torch, "compile"):
        print(f"error: torch {torch.__version__} has no torch.compile (needs torch >= 2.0)",
              file=sys.stderr)
        return 1

    peak_tflops, peak_from = args.peak_tflops, "given"
    if args.peak_from_matmul:
        peak_tflops, peak_from = matmul_tflops(args.matmul_n, device), f"matmul {args.matmul_n}^3"
        print(f"bf16 matmul {args.matmul_n}^3 on {device}: {peak_tflops:.1f} TFLOP/s, the peak for "
              "MFU", file=sys.stderr)
        if args.steps == 0:
            print(json.dumps({"impl": "matmul", "n": args.matmul_n,
                              "peak_tflops": round(peak_tflops, 2)}))
            return 0
    if args.steps < 1:
        ap.error("--steps must be at least 1 (0 only with --peak-from-matmul)")

    result, batch = None, args.batch
    for batch in LARGEST_BATCH_TRIES if args.largest_batch else (args.batch,):
        failure = None
        try:
            result = measure(args, cfg, batch, device)
        except (RuntimeError, torch.cuda.OutOfMemoryError) as e:
            if not (args.largest_batch and is_out_of_memory(e)):
                raise
            failure = str(e).splitlines()[0]
        free_memory(device)  # after the handler: the traceback no longer holds the tensors
        if result is not None:
            break
        print(f"batch {batch}: out of memory ({failure[:120]})", file=sys.stderr)
    if result is None:
        print(f"error: even batch {LARGEST_BATCH_TRIES[-1]} runs out of memory", file=sys.stderr)
        return 1

    tokens_per_step = batch * args.seq
    flops = (6.0 * (result["params"] - cfg.block_size * cfg.n_embd) * tokens_per_step
             + 6.0 * cfg.n_layer * batch * args.seq**2 * cfg.n_embd)
    med_s = result["ms"] / 1e3
    tflops = flops / med_s / 1e12
    print(json.dumps({
        "impl": f"torch-{args.mode}", "batch": batch, "seq": args.seq,
        "precision": args.precision, "ms_per_step": round(result["ms"], 3),
        "tokens_per_s": round(tokens_per_step / med_s, 1), "tflops": round(tflops, 3),
        "mfu": round(tflops / peak_tflops, 4), "peak_mem_bytes": int(result["peak"]),
        "peak_tflops": round(peak_tflops, 2), "peak_from": peak_from,
        "ms_min": round(result["ms_min"], 3), "ms_max": round(result["ms_max"], 3),
        "steps": args.steps, "warmup": args.warmup, "params": int(result["params"]),
        "model_tflop_per_step": round(flops / 1e12, 6), "n_layer": cfg.n_layer,
        "n_head": cfg.n_head, "n_embd": cfg.n_embd, "vocab_size": cfg.vocab_size,
        "attention": "sdpa" if hasattr(F, "scaled_dot_product_attention") else "manual",
        "loss": round(result["loss"], 6), "device": args.device, "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name(device) if device.type == "cuda" else "",
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
