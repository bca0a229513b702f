"""CTest oracle for `mpitron import`: a random GPT-2 in Hugging Face layout, imported, gives
PyTorch's logits and loss.

validate/gpt_torch.py (the model the main oracle checks mpitron against) writes a random small
GPT-2 as model.safetensors + config.json in HF layout (Conv1D weights (in, out), "transformer."
prefix, causal-mask buffers, a tied lm_head; and a BF16 variant without prefix, odd vocabulary);
`mpitron import` reads it and `mpitron eval --dump` gives logits, compared with gpt_torch's model
loaded from the same HF files by its own (Python) mapping, max|a-b|/max|b| below --rtol. A
mis-mapped reference (one Conv1D weight not transposed) must fail, so the test can fail.
Usage: hf_oracle_test.py --mpitron BIN --workdir DIR. Exit 0 only when all pass; 77: no torch.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
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


def run(cmd: list[str]) -> str:
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(f"FAILED ({p.returncode}): {' '.join(cmd)}\n{p.stdout}{p.stderr}")
        sys.exit(2)
    return p.stdout


def rel_err(a: np.ndarray, b: np.ndarray) -> float:
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.max(np.abs(a - b)) / np.max(np.abs(b)))


def check_variant(binary: str, work: Path, name: str, cfg: gpt_torch.GptConfig, seed: int,
                  rtol: float, **layout) -> bool:
    folder = work / name
    model = gpt_torch.Gpt(cfg)
    gpt_torch.randomize(model, seed)
    gpt_torch.write_hf_model(folder, model, **layout)
    rng = np.random.default_rng(seed)
    tokens = rng.integers(0, cfg.vocab_size, size=(3, cfg.block_size + 1), dtype=np.int32)
    with h5py.File(work / f"{name}_tokens.h5", "w") as f:
        f["tokens"] = tokens
    ckpt, dump = work / f"{name}.h5", work / f"{name}_dump.h5"
    run([binary, "import", "--from", str(folder), "--out", str(ckpt)])
    run([binary, "eval", "--ckpt", str(ckpt), "--tokens", str(work / f"{name}_tokens.h5"),
         "--dump", str(dump)])
    with h5py.File(dump, "r") as f:
        m_logits, m_loss = f["logits"][()], float(f["loss"][0])
    ok = True
    rels = {}
    for dtype in (torch.float32, torch.float64):
        ref = gpt_torch.load_hf_model(folder, dtype)
        with torch.no_grad():
            logits, loss = gpt_torch.logits_and_loss(ref, tokens)
        rels[dtype] = (rel_err(m_logits, logits.numpy()), abs(m_loss - loss.item()) / loss.item())
    r32, r64 = rels[torch.float32], rels[torch.float64]
    bad = not (r32[0] < rtol and r32[1] < rtol)
    ok &= not bad
    print(f"{name:<28} logits rel {r32[0]:.3e} (fp64 {r64[0]:.3e})  loss rel {r32[1]:.3e}"
          f"{'  FAIL' if bad else ''}")
    # Sensitivity: the reference with one square Conv1D weight left untransposed must differ.
    wrong = gpt_torch.load_hf_model(folder, torch.float32)
    with torch.no_grad():
        w = wrong.h[cfg.n_layer - 1].attn.c_proj.weight
        w.copy_(w.t().clone())
        logits, _ = gpt_torch.logits_and_loss(wrong, tokens)
    sensed = rel_err(m_logits, logits.numpy())
    print(f"{'':<28} mis-mapped reference: rel {sensed:.3e} "
          f"({'detected' if sensed >= rtol else 'NOT DETECTED'})")
    return ok and sensed >= rtol


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpitron", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--rtol", type=float, default=1e-5)
    args = ap.parse_args()
    torch.set_num_threads(1)
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    binary = str(Path(args.mpitron).resolve())
    cfg = gpt_torch.GptConfig(n_layer=3, n_head=4, n_embd=64, block_size=32, vocab_size=317)
    ok = check_variant(binary, work, "f32_prefixed_buffers", cfg, 11, args.rtol,
                       prefix="transformer.", mask_buffers=True, lm_head=True)
    ok &= check_variant(binary, work, "bf16_bare", cfg, 12, args.rtol, prefix="",
                        mask_buffers=False, dtype="BF16")
    ok &= check_variant(binary, work, "f16_bare", cfg, 13, args.rtol, prefix="",
                        mask_buffers=False, dtype="F16")
    print(f"hf oracle: {'PASS' if ok else 'FAIL'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
