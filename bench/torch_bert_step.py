"""PyTorch reference for bench/family_step.sh's bert case: one masked-LM training step (forward,
backward, clip_grad_norm_(1.0), AdamW) of validate/bert_torch.py's encoder (the family's
specification in ordinary torch modules), dropout off, on random byte tokens with
masked_count(T) masked positions a sample; prints the median step time (steps 3..). On a GPU
(--device cuda) the step is timed to its end (synchronized); --precision bf16 runs it under
autocast.
Usage: $PYTHON bench/torch_bert_step.py --layers L --heads H --embd C --seq T --batch B
       --steps S --threads N [--device cpu|cuda] [--precision fp32|bf16]
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
import bert_torch  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--embd", type=int, default=768)
    ap.add_argument("--seq", type=int, default=128)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dev = torch.device(a.device)
    cfg = bert_torch.BertConfig(n_layer=a.layers, n_head=a.heads, n_embd=a.embd,
                                block_size=a.seq, task=0)
    model = bert_torch.Bert(cfg).train().to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, weight_decay=0.01)
    B, T = a.batch, a.seq
    ids = torch.randint(0, 256, (B, T))
    types = torch.zeros(B, T, dtype=torch.long)
    lengths = torch.full((B,), T)
    targets = torch.full((B, T), -1)
    m = bert_torch.masked_count(T)
    for b in range(B):
        at = 1 + torch.randperm(T - 2)[:m]
        targets[b, at] = ids[b, at]
        ids[b, at] = cfg.mask_id
    ids, types, lengths, targets = (t.to(dev) for t in (ids, types, lengths, targets))
    times = []
    for _ in range(a.steps):
        t0 = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        with torch.autocast(dev.type, torch.bfloat16, enabled=a.precision == "bf16"):
            loss = model(ids, types, lengths, targets)[1]
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if dev.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - t0)
    print(json.dumps({"step_s": statistics.median(times[2:])}))


if __name__ == "__main__":
    main()
