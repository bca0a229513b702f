"""Step-time benchmark of the PyTorch reference GPT (validate/gpt_torch.py), mpitron's counterpart.

Times what bench/bench_step.cpp times, the PyTorch way: forward, backward, clip_grad_norm_(1.0)
and torch.optim.AdamW with mpitron's parameter groups, dropout off, on random tokens, in fp32 with
torch.set_num_threads(threads). Prints one JSON line with the same keys as `bench_step --json`;
model FLOPs per step are 6 * (parameters - wpe) * B*T + 6 * L * B * T^2 * C (matrix products,
forward and backward, causal attention counted half), as there.
Usage: torch_step.py [--config configs/gpt2-124m.toml] [--batch 8] [--seq 128] [--threads 2] ...
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "validate"))
import gpt_torch  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--config", default=None, help="TOML preset; default: the small config")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--steps", type=int, default=10, help="timed steps")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps first")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--embd", type=int, default=None)
    ap.add_argument("--heads", type=int, default=None)
    ap.add_argument("--vocab", type=int, default=None)
    ap.add_argument("--seed", type=int, default=1337)
    args = ap.parse_args()

    torch.set_num_threads(args.threads)
    if args.config:
        cfg, _ = gpt_torch.load_toml_config(args.config)
        name = Path(args.config).stem
    else:
        cfg, name = gpt_torch.GptConfig(n_layer=4, n_head=4, n_embd=256, vocab_size=256), "small"
    for key, value in (("n_layer", args.layers), ("n_embd", args.embd), ("n_head", args.heads),
                       ("vocab_size", args.vocab)):
        if value is not None:
            setattr(cfg, key, value)
    cfg.block_size = max(cfg.block_size, args.seq)

    model = gpt_torch.Gpt(cfg)
    model.init_weights(args.seed)
    tc = gpt_torch.TrainConfig(lr=1e-4)
    opt = gpt_torch.make_optimizer(model, tc)
    g = torch.Generator().manual_seed(args.seed)
    tokens = torch.randint(0, cfg.vocab_size, (args.batch, args.seq + 1), generator=g)
    params = list(model.parameters())

    def step() -> float:
        opt.zero_grad(set_to_none=True)
        _, loss = gpt_torch.logits_and_loss(model, tokens)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, tc.grad_clip)
        opt.step()
        return loss.item()

    for _ in range(args.warmup):
        step()
    ms = []
    for _ in range(args.steps):
        t0 = time.perf_counter()
        loss = step()
        ms.append((time.perf_counter() - t0) * 1e3)

    n_params = sum(p.numel() for p in params)
    tokens_per_step = args.batch * args.seq
    flops = (6.0 * (n_params - cfg.block_size * cfg.n_embd) * tokens_per_step
             + 6.0 * cfg.n_layer * args.batch * args.seq ** 2 * cfg.n_embd)
    med = statistics.median(ms)
    print(json.dumps({
        "impl": "torch", "config": name, "n_layer": cfg.n_layer, "n_embd": cfg.n_embd,
        "n_head": cfg.n_head, "vocab_size": cfg.vocab_size, "batch": args.batch, "seq": args.seq,
        "threads": args.threads, "params": n_params, "steps": args.steps,
        "ms_per_step": round(med, 3), "ms_min": round(min(ms), 3), "ms_max": round(max(ms), 3),
        "tokens_per_s": round(tokens_per_step / (med / 1e3), 1),
        "model_gflop_per_step": round(flops / 1e9, 4),
        "gflops": round(flops / (med / 1e3) / 1e9, 2),
        "loss": round(loss, 6), "torch": torch.__version__,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
