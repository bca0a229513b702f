"""CTest oracle: mpitron's GPT against the independent PyTorch model in validate/gpt_torch.py.

From one initial checkpoint (`mpitron train --steps 0`) and the global batches mpitron itself
draws (`mpitron batch`), it checks (1) the logits, the loss and every parameter gradient of
`mpitron eval --dump` against torch float32, max|a-b|/max|b| per tensor below --rtol, with a
float64 torch run shown beside it to tell round-off from a real mismatch, and (2) the losses of
a 10-step `mpitron train` (AdamW, warm-up, cosine schedule, clipping; dropout off) against the
same 10 steps taken by torch.optim.AdamW, plus the validation loss after the last step.
A deliberately perturbed model must fail the same comparison, so the test can fail.
Usage: oracle_test.py --mpitron BIN --repo SRC --workdir DIR. Exit status 0 only when all pass.
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

try:
    import h5py
    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import gpt_torch
except ImportError as e:
    print(f"SKIP: {e.name} is not importable by {sys.executable} "
          "(Debian: apt-get install python3-torch python3-h5py)")
    sys.exit(77)


def run(cmd: list[str], log: Path) -> str:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write(f"$ {' '.join(cmd)}\n{p.stdout}{p.stderr}\n")
    if p.returncode != 0:
        sys.stderr.write(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        sys.exit(2)
    print(f"  ran {Path(cmd[0]).name} {cmd[1]} in {time.perf_counter() - t0:.1f}s")
    return p.stdout


def synthetic_corpus(path: Path, nbytes: int = 200_000) -> None:
    rng = np.random.default_rng(1234)
    words = ("and the of to in that he shall unto for i his a lord they be is him not them it with "
             "all thou thy was god which my me said but ye their have will thee from as are when "
             "this out were upon man by you israel king son up there hath then people came had "
             "house on into her come one we children s before your also day land men").split()
    lines, size = [], 0
    while size < nbytes:
        n = int(rng.integers(6, 20))
        line = " ".join(words[i] for i in rng.integers(0, len(words), n)).capitalize() + ".\n"
        lines.append(line)
        size += len(line)
    path.write_text("".join(lines))


def rel_err(a: np.ndarray, b: np.ndarray) -> tuple[float, float]:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    scale = float(np.max(np.abs(b))) if b.size else 0.0
    if scale == 0.0:
        return diff, 0.0 if diff == 0.0 else math.inf
    return diff, diff / scale


def read_dump(path: Path) -> tuple[float, np.ndarray, dict[str, np.ndarray]]:
    with h5py.File(path, "r") as f:
        loss = float(f["loss"][0])
        logits = f["logits"][()]
        grads = {}
        f["grads"].visititems(
            lambda n, o: grads.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    return loss, logits, grads


def compare_gradients(ckpt: Path, tokens: np.ndarray, dump: Path, rtol: float) -> bool:
    m_loss, m_logits, m_grads = read_dump(dump)
    ref = {}
    for dtype in (torch.float32, torch.float64):
        model = gpt_torch.load_model(str(ckpt), dtype)
        ref[dtype] = gpt_torch.loss_and_grads(model, tokens)
    t32, t64 = ref[torch.float32], ref[torch.float64]

    names = list(t32[2])
    missing = sorted(set(names) - set(m_grads))
    if missing:
        print(f"FAIL: mpitron's dump lacks gradients {missing}")
        return False
    rows = [("loss", (), np.array([m_loss]), np.array([t32[0]]), np.array([t64[0]])),
            ("logits", m_logits.shape, m_logits, t32[1], t64[1])]
    rows += [(f"grad {n}", m_grads[n].shape, m_grads[n], t32[2][n], t64[2][n]) for n in names]

    print(f"\n{'tensor':<34} {'shape':<14} {'max|b|':>10} {'max|a-b|':>10} {'rel(a,t32)':>11} "
          f"{'rel(a,t64)':>11} {'rel(t32,t64)':>12}")
    ok = True
    worst = (0.0, "")
    for name, shape, a, b32, b64 in rows:
        if tuple(a.shape) != tuple(b32.shape):
            print(f"{name:<34} shape {a.shape} != torch {b32.shape}  FAIL")
            ok = False
            continue
        diff, rel = rel_err(a, b32)
        _, rel64 = rel_err(a, b64)
        _, rel_t = rel_err(b32, b64)
        bad = not rel < rtol
        ok &= not bad
        worst = max(worst, (rel, name))
        print(f"{name:<34} {str(tuple(shape)):<14} {np.max(np.abs(b32)):>10.3e} {diff:>10.3e} "
              f"{rel:>11.3e} {rel64:>11.3e} {rel_t:>12.3e}{'  FAIL' if bad else ''}")
    print(f"largest relative error against torch fp32: {worst[0]:.3e} ({worst[1]}), "
          f"tolerance {rtol:.0e}")

    model = gpt_torch.load_model(str(ckpt), torch.float32)
    with torch.no_grad():
        model.h[0].attn.c_attn.weight[0, 0] += 1e-2
    _, _, p_grads = gpt_torch.loss_and_grads(model, tokens)
    sensed = max(rel_err(m_grads[n], p_grads[n])[1] for n in names)
    print(f"sensitivity: one weight moved by 1e-2 gives relative error {sensed:.3e} "
          f"({'detected' if sensed >= rtol else 'NOT DETECTED'})")
    if sensed < rtol:
        ok = False
    return ok


def compare_training(ckpt: Path, batches: np.ndarray, val_batches: np.ndarray, trace: Path,
                     tc: gpt_torch.TrainConfig, rtol: float) -> bool:
    with h5py.File(trace, "r") as f:
        steps = f["trace/step"][()]
        losses = f["trace/loss"][()]
        lrs = f["trace/lr"][()]
        norms = f["trace/grad_norm"][()]
        val = f["trace/val_loss"][()]
    n = batches.shape[0]
    if list(steps) != list(range(1, n + 1)):
        print(f"FAIL: trace steps {list(steps)} are not 1..{n}")
        return False
    model = gpt_torch.load_model(str(ckpt), torch.float32)
    opt = gpt_torch.make_optimizer(model, tc)
    ok = True
    print(f"\n{'step':>4} {'lr':>10} {'mpitron loss':>14} {'torch loss':>14} {'rel':>10} "
          f"{'grad_norm m':>12} {'grad_norm t':>12} {'rel':>10}")
    for s in range(1, n + 1):
        r = gpt_torch.train_step(model, opt, batches[s - 1], s, tc)
        rel = abs(losses[s - 1] - r["loss"]) / abs(r["loss"])
        nrel = abs(norms[s - 1] - r["grad_norm"]) / abs(r["grad_norm"])
        lr_ok = math.isclose(lrs[s - 1], r["lr"], rel_tol=1e-12, abs_tol=1e-15)
        bad = not rel < rtol or not lr_ok
        ok &= not bad
        print(f"{s:>4} {r['lr']:>10.3e} {losses[s - 1]:>14.8f} {r['loss']:>14.8f} {rel:>10.3e} "
              f"{norms[s - 1]:>12.6f} {r['grad_norm']:>12.6f} {nrel:>10.3e}"
              f"{'' if lr_ok else '  LR MISMATCH'}{'  FAIL' if bad else ''}")
    with torch.no_grad():
        v = np.mean([gpt_torch.logits_and_loss(model, b)[1].item() for b in val_batches])
    v_m = val[n - 1]
    v_rel = abs(v_m - v) / abs(v)
    v_bad = not v_rel < rtol
    ok &= not v_bad
    print(f"val_loss after step {n}: mpitron {v_m:.8f} torch {v:.8f} rel {v_rel:.3e}"
          f"{'  FAIL' if v_bad else ''}")
    return ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpitron", required=True, help="path of the mpitron binary")
    ap.add_argument("--repo", required=True, help="source tree (configs/, data/)")
    ap.add_argument("--workdir", required=True, help="scratch folder (emptied first)")
    ap.add_argument("--config", default="configs/gpt-tiny.toml")
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--seq-len", type=int, default=32)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--eval-batches", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--synthetic", action="store_true",
                    help="use a generated corpus even where data/kjv.txt exists")
    args = ap.parse_args()

    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    repo = Path(args.repo).resolve()
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "commands.log"
    binary = str(Path(args.mpitron).resolve())
    config = str(repo / args.config)
    data = repo / "data" / "kjv.txt"
    if args.synthetic or not data.is_file():
        data = work / "synthetic.txt"
        synthetic_corpus(data)
    print(f"mpitron {binary}\nconfig {config}\ndata {data}")

    B, T, S = args.batch_size, args.seq_len, args.steps
    common = ["--config", config, "--data", str(data), "--seed", str(args.seed), "--dropout", "0",
              "--batch-size", str(B), "--seq-len", str(T), "--warmup-steps", str(args.warmup),
              "--lr", repr(args.lr), "--eval-batches", str(args.eval_batches), "--threads", "1"]
    run([binary, "train", *common, "--steps", "0", "--out", str(work / "init")], log)
    ckpt = work / "init" / "ckpt_0.h5"
    batch = ["--data", str(data), "--seed", str(args.seed), "--batch-size", str(B), "--seq-len",
             str(T)]
    run([binary, "batch", *batch, "--first-step", "1", "--steps", "1", "--out",
         str(work / "batch.h5")], log)
    run([binary, "batch", *batch, "--first-step", "1", "--steps", str(S), "--out",
         str(work / "batches.h5")], log)
    run([binary, "batch", *batch, "--val", "--first-step", "0", "--steps",
         str(args.eval_batches), "--out", str(work / "val.h5")], log)
    run([binary, "eval", "--ckpt", str(ckpt), "--tokens", str(work / "batch.h5"), "--dump",
         str(work / "dump.h5")], log)
    run([binary, "train", *common, "--steps", str(S), "--out", str(work / "train"),
         "--eval-every", "0", "--ckpt-every", "0", "--log-every", "1"], log)

    with h5py.File(work / "batch.h5", "r") as f:
        tokens = f["tokens"][()]
    with h5py.File(work / "batches.h5", "r") as f:
        batches = f["tokens"][()].reshape(S, B, T + 1)
    with h5py.File(work / "val.h5", "r") as f:
        val_batches = f["tokens"][()].reshape(args.eval_batches, B, T + 1)
    if not np.array_equal(tokens, batches[0]):
        print("FAIL: `mpitron batch --steps 1` and the first of --steps N differ")
        return 1

    _, tc = gpt_torch.load_toml_config(config)
    tc.steps, tc.warmup_steps, tc.lr = S, args.warmup, args.lr

    grads_ok = compare_gradients(ckpt, tokens, work / "dump.h5", args.rtol)
    train_ok = compare_training(ckpt, batches, val_batches, work / "train" / "trace.h5", tc,
                                args.rtol)
    ok = grads_ok and train_ok
    print(f"\noracle: logits/loss/gradients {'PASS' if grads_ok else 'FAIL'}, "
          f"{S}-step training {'PASS' if train_ok else 'FAIL'} "
          f"({time.perf_counter() - t_start:.1f}s; commands in {log})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
