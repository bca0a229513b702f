"""CTest oracle: mpitron's BERT encoder family ("bert") against the independent PyTorch model in
validate/bert_torch.py.

First the reference checks itself (bert_torch.self_test: gradcheck in float64, padding-mask
invariance, a loop-by-loop numpy forward of the specification, torch's TransformerEncoderLayer).
Then for each task, on a small model (2 layers, 4 heads, width 64, byte vocabulary 261):
  task 0 (masked LM) on windows of the corpus (B 8, T 34);
  task 1 (testament classification) on rows built here, [CLS] verse [SEP] [PAD]... with verses
         of different lengths (one row without padding, one of length 3);
  task 2 (consecutive-verse pairs) on rows [CLS] a [SEP] b [SEP] [PAD]... (token types 1);
mpitron writes the initial checkpoint (`mpitron train --steps 0`), and a copy gets every
parameter randomised here (LayerNorm weights near 1, biases not zero, weights large enough that
GELU inputs are of order 1), so that a bias, LayerNorm or activation wrong in the C++ shows. For
both checkpoints `mpitron eval --tokens batch.h5 --dump dump.h5` gives the loss, the logits and
every parameter gradient, compared with torch float32 as max|a-b|/max|b| per tensor below --rtol
(1e-5), with a float64 torch run beside it to tell round-off from a real mismatch (a tensor where
torch fp32 is itself further than --rtol from fp64 while mpitron is within --rtol of fp64 is
marked ROUND-OFF, not failed). The parameter names of the dump, the checkpoint and the reference
must be the same sets (the MLM head only for task 0, pooler and classifier only for tasks 1, 2).
The model is fed what the dump says mpitron fed itself (inputs, token_types, lengths, targets),
and that is checked against the batch file independently: tasks 1, 2 exactly (lengths up to the
first [PAD], token type 1 after the first [SEP]); task 0 the masking rule: exactly
m = max(1, round(0.15 (T-2))) masked positions per sample, all in 1..T-2, targets there the
batch's content, every other input [CLS] content [SEP], each masked input [MASK], unchanged or
another token; on 512 samples the shares of the three (80/10/10 %) and every position used, the
same masks for the same samples in a batch of 8 and of 512 (keyed by global sample), and m at
T = 24 and T = 5 (whose batches are compared with torch too).
Wrong references (pre-LN instead of post-LN, tanh GELU, LayerNorm eps 1e-5, no padding mask and
token types ignored where the task has them) must exceed the tolerance, so the test can fail.
Usage: bert_oracle_test.py --mpitron BIN --repo SRC --workdir DIR. Exit status: 0 pass,
1 mismatch, 2 an mpitron command failed, 77 skipped (torch or h5py missing).
"""

from __future__ import annotations

import argparse
import math
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
    import bert_torch
    from oracle_test import rel_err, run, synthetic_corpus  # the GPT oracle's helpers
except ImportError as e:
    print(f"SKIP: {e.name} is not importable by {sys.executable} "
          "(Debian: apt-get install python3-torch python3-h5py)")
    sys.exit(77)

TASKS = {0: "masked LM", 1: "testament classification", 2: "verse-pair classification"}
# Wrong references: (description, bert_torch options, tasks where it can show)
WRONG = [("pre-LN instead of post-LN", {"pre_ln": True}, (0, 1, 2)),
         ("tanh GELU instead of erf", {"gelu": "tanh"}, (0, 1, 2)),
         ("LayerNorm eps 1e-5 instead of 1e-12", {"ln_eps": 1e-5}, (0, 1, 2)),
         ("padding mask ignored", {"mask_padding": False}, (1, 2)),
         ("token types ignored", {"token_types": False}, (2,))]


# ---- data -------------------------------------------------------------------------------------

def corpus_lines(path: Path) -> list[bytes]:
    return [ln for ln in path.read_bytes().split(b"\n") if ln.strip()]


def verse_file(lines: list[bytes], path: Path, n: int = 60) -> None:
    """A small verse file (references as io/get_bible.sh --references writes them): n lines of
    Genesis and n of Matthew, for `train --steps 0` of the classification tasks."""
    out = [b"Gen1:%d " % (i + 1) + lines[i] for i in range(n)]
    out += [b"Mat1:%d " % (i + 1) + lines[n + i] for i in range(n)]
    path.write_bytes(b"\n".join(out) + b"\n")


def mlm_rows(text: bytes, B: int, T: int, rng: np.random.Generator) -> np.ndarray:
    """(B, T+1) windows of running text (byte tokens)."""
    starts = rng.integers(0, len(text) - T - 1, B)
    return np.stack([np.frombuffer(text[s:s + T + 1], np.uint8) for s in starts]).astype(np.int32)


def classification_rows(lines: list[bytes], cfg: bert_torch.BertConfig, task: int, T: int,
                        shapes: list, rng: np.random.Generator) -> np.ndarray:
    """Rows built by hand: task 1 [CLS] a [SEP], task 2 [CLS] a [SEP] b [SEP], [PAD] to T, label
    at row[T]; shapes: the content lengths (task 1 len_a, task 2 (len_a, len_b))."""
    rows = np.full((len(shapes), T + 1), cfg.pad_id, np.int32)
    for r, shape in enumerate(shapes):
        parts = [shape] if task == 1 else list(shape)
        seq = [cfg.cls_id]
        for n in parts:
            line = lines[int(rng.integers(0, len(lines)))]
            while len(line) < n:
                line = line + b" " + lines[int(rng.integers(0, len(lines)))]
            seq += list(line[:n]) + [cfg.sep_id]
        assert len(seq) <= T, (shape, T)
        rows[r, :len(seq)] = seq
    # Labels: both classes, unbalanced (1 but for a quarter of the rows). With balanced labels
    # the gradients of a near-uniform classifier (mpitron's initialisation) are sums of
    # per-sample terms that cancel, and float32 round-off alone reaches 1e-4 of them.
    rows[:, T] = 1
    rows[::4, T] = 0
    return rows


def write_batch(path: Path, rows: np.ndarray) -> None:
    with h5py.File(path, "w") as f:
        f.create_dataset("tokens", data=rows.astype(np.int32))


def write_config(path: Path, model: dict) -> None:
    lines = ["[model]", 'type = "bert"'] + [f"{k} = {v}" for k, v in model.items()]
    path.write_text("\n".join(lines) + "\n")


def randomize_checkpoint(src: Path, dst: Path, seed: int) -> None:
    """dst: a copy of src whose /params are all random (bert_torch.randomize), written in place
    with h5py (the datasets keep their layout and Fletcher-32 filter)."""
    shutil.copyfile(src, dst)
    model = bert_torch.load_model(str(src), torch.float64)
    bert_torch.randomize(model, seed)
    with h5py.File(dst, "r+") as f:
        for name, p in model.named_parameters():
            f["params"][name][...] = p.detach().numpy().astype(np.float32)


def read_dump(path: Path) -> dict:
    with h5py.File(path, "r") as f:
        d = {k: f[k][()] for k in ("loss", "logits", "inputs", "token_types", "lengths",
                                   "targets") if k in f}
        missing = [k for k in ("loss", "logits", "inputs", "token_types", "lengths", "targets")
                   if k not in d]
        if missing:
            raise ValueError(f"{path} lacks the datasets {missing}")
        grads = {}
        f["grads"].visititems(
            lambda n, o: grads.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
    d["loss"] = float(np.asarray(d["loss"]).reshape(-1)[0])
    d["grads"] = grads
    for k in ("inputs", "token_types", "lengths", "targets"):
        a = np.asarray(d[k], dtype=np.float64)
        if not np.array_equal(a, np.rint(a)):
            raise ValueError(f"{path}: /{k} holds values that are not integers")
        d[k] = np.rint(a).astype(np.int64)
    return d


# ---- what mpitron fed itself, checked against the batch file ----------------------------------

def check_classification_inputs(dump: dict, rows: np.ndarray, cfg) -> bool:
    ids, types, lengths, labels = bert_torch.classification_inputs(rows, cfg)
    ok = True
    for name, got, want in (("inputs", dump["inputs"], ids), ("token_types", dump["token_types"],
                            types), ("lengths", dump["lengths"], lengths),
                            ("targets", dump["targets"], labels)):
        if got.shape != want.shape or not np.array_equal(got, want):
            where = "" if got.shape != want.shape else \
                f", first difference at {tuple(np.argwhere(got != want)[0])}"
            print(f"FAIL: the dump's {name} {got.shape} is not the batch's {want.shape}{where}")
            ok = False
    if ok:
        print(f"  inputs, token types, lengths {lengths.tolist()} and labels {labels.tolist()} "
              "are the batch's")
    return ok


def check_masking(dump: dict, rows: np.ndarray, cfg, label: str, stats: bool = False) -> bool:
    """The masking rule, from the dump against the batch file (not re-deriving the RNG)."""
    B, T = rows.shape[0], rows.shape[1] - 1
    m = bert_torch.masked_count(T)
    clean = bert_torch.mlm_unmasked_inputs(rows, cfg)
    inputs, targets = dump["inputs"], dump["targets"]
    problems = []
    for name, a, shape in (("inputs", inputs, (B, T)), ("token_types", dump["token_types"],
                           (B, T)), ("lengths", dump["lengths"], (B,)),
                           ("targets", targets, (B, T))):
        if a.shape != shape:
            problems.append(f"{name} has shape {a.shape}, not {shape}")
    if problems:
        print(f"FAIL ({label}): " + "; ".join(problems))
        return False
    if not np.all(dump["token_types"] == 0):
        problems.append("token types are not all 0")
    if not np.all(dump["lengths"] == T):
        problems.append(f"lengths {sorted(set(dump['lengths'].tolist()))} are not all T = {T}")
    masked = targets >= 0
    counts = masked.sum(axis=1)
    if not np.all(counts == m):
        problems.append(f"masked positions per sample {sorted(set(counts.tolist()))}, "
                        f"not m = {m}")
    if np.any(masked[:, 0]) or np.any(masked[:, T - 1]):
        problems.append("[CLS] or [SEP] masked (positions must be in 1..T-2)")
    if np.any(targets[~masked] != -1):
        problems.append("targets other than -1 at unmasked positions")
    if np.any(targets[masked] != clean[masked]):
        problems.append(f"{int(np.sum(targets[masked] != clean[masked]))} targets are not the "
                        "batch's token at their position")
    if np.any(inputs[~masked] != clean[~masked]):
        problems.append(f"{int(np.sum(inputs[~masked] != clean[~masked]))} unmasked inputs "
                        "differ from [CLS] content [SEP]")
    got = inputs[masked]
    if np.any((got < 0) | (got >= cfg.vocab_size)):
        problems.append("masked inputs outside the vocabulary")
    n = int(masked.sum())
    is_mask = got == cfg.mask_id
    unchanged = got == clean[masked]
    random = ~is_mask & ~unchanged
    rnd = got[random]
    special = {cfg.pad_id, cfg.unk_id, cfg.cls_id, cfg.sep_id, cfg.mask_id}
    specials = sorted(set(rnd.tolist()) & special)
    ids = f", ids {int(rnd.min())}..{int(rnd.max())}" if rnd.size else ""
    print(f"  masking ({label}, B {B}, T {T}): m = {m} per sample, {n} masked positions: "
          f"[MASK] {is_mask.sum()} ({is_mask.mean():.1%}), random {random.sum()} "
          f"({random.mean():.1%}{ids}{', special ids ' + str(specials) if specials else ''}), "
          f"unchanged {unchanged.sum()} ({unchanged.mean():.1%})")
    if stats:
        # 80 % [MASK]; 10 % random (a random draw equal to the original counts as unchanged);
        # 10 % unchanged. Bounds of 5 standard deviations.
        for what, share, p in (("[MASK]", is_mask.mean(), 0.8), ("random", random.mean(), 0.1),
                               ("unchanged", unchanged.mean(), 0.1)):
            tol = 5 * math.sqrt(p * (1 - p) / n) + 0.01
            if abs(share - p) > tol:
                problems.append(f"share of {what} {share:.3f} is not {p} +- {tol:.3f}")
        used = masked.any(axis=0)
        if not np.all(used[1:T - 1]):
            problems.append(f"positions {np.nonzero(~used[1:T - 1])[0] + 1} never masked in {B} "
                            "samples")
        if len({tuple(np.nonzero(r)[0]) for r in masked}) < B // 2:
            problems.append("the samples' masked positions repeat: not drawn per sample")
    for p in problems:
        print(f"FAIL ({label}): {p}")
    return not problems


# ---- comparisons ------------------------------------------------------------------------------

def reference(ckpt: Path, dump: dict, dtype, **options):
    model = bert_torch.load_model(str(ckpt), dtype, **options)
    return bert_torch.loss_and_grads(model, dump["inputs"], dump["token_types"], dump["lengths"],
                                     dump["targets"])


def zero_partner(name: str) -> str | None:
    """The gradient of the key bias is zero in exact arithmetic (softmax does not change when a
    query's scores all move by the same q.b_k), so what both sides hold there is round-off, and
    max|b| is no scale for it: its error is taken relative to the gradient of the same linear's
    weight, the size of what flows through that linear."""
    return name[:-len("bias")] + "weight" if name.endswith("attention.self.key.bias") else None


def rel(a, b, scale: float | None = None) -> tuple[float, float]:
    """(max|a-b|, max|a-b| / scale), scale max|b| unless given."""
    if scale is None:
        return rel_err(a, b)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    diff = float(np.max(np.abs(a - b))) if a.size else 0.0
    if scale == 0.0:
        return diff, 0.0 if diff == 0.0 else math.inf
    return diff, diff / scale


def grad_scale(name: str, grads: dict) -> float | None:
    partner = zero_partner(name)
    return None if partner is None else float(np.max(np.abs(grads[partner])))


def table(rows: list, rtol: float, show: bool = True) -> tuple[bool, dict]:
    """rows of (name, mpitron, torch fp32, torch fp64, scale fp32, scale fp64) (scales None:
    max|b|); prints them, returns (all pass, worst relative errors {'fp32': (rel, name), 'fp64':
    ..., 't32-t64': ...})."""
    if show:
        print(f"\n  {'tensor':<54} {'shape':<14} {'max|b|':>10} {'max|a-b|':>10} "
              f"{'rel(a,t32)':>11} {'rel(a,t64)':>11} {'rel(t32,t64)':>12}")
    ok = True
    worst = {"fp32": (0.0, ""), "fp64": (0.0, ""), "t32-t64": (0.0, "")}
    for name, a, b32, b64, s32, s64 in rows:
        if tuple(a.shape) != tuple(b32.shape):
            print(f"  {name:<54} shape {a.shape} != torch {b32.shape}  FAIL")
            ok = False
            continue
        diff, r32 = rel(a, b32, s32)
        _, r64 = rel(a, b64, s64)
        _, r_t = rel(b32, b64, s64)
        # Where torch fp32 is itself further than rtol from fp64 and mpitron is within rtol of
        # fp64, the miss is torch's round-off: shown as ROUND-OFF, not a failure.
        roundoff = not r32 < rtol and r64 < rtol and not r_t < rtol
        bad = not r32 < rtol and not roundoff
        ok &= not bad
        worst["fp32"] = max(worst["fp32"], (r32, name))
        worst["fp64"] = max(worst["fp64"], (r64, name))
        worst["t32-t64"] = max(worst["t32-t64"], (r_t, name))
        if show or bad:
            mark = "*" if s32 is not None else ""
            print(f"  {name + mark:<54} {str(tuple(a.shape)):<14} {np.max(np.abs(b32)):>10.3e} "
                  f"{diff:>10.3e} {r32:>11.3e} {r64:>11.3e} {r_t:>12.3e}"
                  f"{'  FAIL' if bad else ''}"
                  f"{'  ROUND-OFF (torch fp32 vs fp64 beyond rtol)' if roundoff else ''}")
    if show and any(r[4] is not None for r in rows):
        print("  * zero in exact arithmetic: relative to max|grad| of the same linear's weight")
    return ok, worst


def compare(label: str, ckpt: Path, dump: dict, rtol: float, show: bool = True
            ) -> tuple[bool, dict]:
    """mpitron's dump against torch fp32 and fp64; returns (pass, summary figures)."""
    try:
        names = [n for n, _ in bert_torch.load_model(str(ckpt)).named_parameters()]
    except ValueError as e:
        print(f"FAIL ({label}): {e}")
        return False, {}
    missing = sorted(set(names) - set(dump["grads"]))
    extra = sorted(set(dump["grads"]) - set(names))
    if missing or extra:
        print(f"FAIL ({label}): the dump's gradients lack {missing}, have unexpected {extra}")
        return False, {}
    t32 = reference(ckpt, dump, torch.float32)
    t64 = reference(ckpt, dump, torch.float64)
    rows = [("loss", np.array([dump["loss"]]), np.array([t32[0]]), np.array([t64[0]]), None,
             None),
            ("logits", dump["logits"], t32[1], t64[1], None, None)]
    rows += [(f"grad {n}", dump["grads"][n], t32[2][n], t64[2][n], grad_scale(n, t32[2]),
              grad_scale(n, t64[2])) for n in names]
    ok, worst = table(rows, rtol, show)

    def worst_of(col: int, scol: int):
        return max(((rel(r[1], r[col], r[scol])[1], r[0].removeprefix("grad "))
                    for r in rows[2:] if r[1].shape == r[col].shape), default=(math.inf, "?"))

    def fig_of(r):
        if r[1].shape != r[2].shape:
            return math.inf, math.inf
        return rel(r[1], r[2])[1], rel(r[1], r[3])[1]

    fig = {"loss": fig_of(rows[0]), "logits": fig_of(rows[1]), "grad": worst_of(2, 4),
           "grad64": worst_of(3, 5), "t32-t64": worst["t32-t64"][0]}
    print(f"  {label}: {'PASS' if ok else 'FAIL'}: loss {fig['loss'][0]:.3e}/{fig['loss'][1]:.3e}"
          f" logits {fig['logits'][0]:.3e}/{fig['logits'][1]:.3e} worst grad "
          f"{fig['grad'][0]:.3e} ({fig['grad'][1]})/{fig['grad64'][0]:.3e} ({fig['grad64'][1]})"
          f" [against torch fp32/fp64]; torch fp32 against fp64 {fig['t32-t64']:.3e} "
          f"({worst['t32-t64'][1]}); tolerance {rtol:.0e}")
    return ok, fig


def wrong_references(task: int, ckpts: dict, dumps: dict, rtol: float) -> tuple[bool, list]:
    """Each wrong reference must differ from mpitron by more than rtol (on some checkpoint)."""
    ok, figures = True, []
    for what, options, tasks in WRONG:
        if task not in tasks:
            continue
        sensed = {}
        for which, ckpt in ckpts.items():
            d = dumps[which]
            loss, logits, grads = reference(ckpt, d, torch.float32, **options)
            sensed[which] = max([rel(d["loss"], loss)[1], rel(d["logits"], logits)[1]] +
                                [rel(d["grads"][n], g, grad_scale(n, grads))[1]
                                 for n, g in grads.items()])
        detected = max(sensed.values()) >= rtol
        ok &= detected
        figures.append((task, what, sensed, detected))
        print(f"  sensitivity: {what}: relative error "
              + ", ".join(f"{v:.3e} ({k})" for k, v in sensed.items())
              + f" ({'detected' if detected else 'NOT DETECTED'})")
    return ok, figures


# ---- per task ---------------------------------------------------------------------------------

def check_task(task: int, args, binary: str, work: Path, text_data: Path, verses: Path,
               lines: list[bytes], log: Path) -> tuple[bool, list, list]:
    d = work / f"task{task}"
    d.mkdir()
    model = {"n_layer": args.n_layer, "n_head": args.n_head, "n_embd": args.n_embd,
             "block_size": args.block_size, "vocab_size": args.vocab_size, "task": task}
    write_config(d / "bert.toml", model)
    T = args.seq_len_mlm if task == 0 else args.seq_len_cls
    B = 8
    print(f"\n==== task {task} ({TASKS[task]}): {model}, batch {B} x {T}")
    run([binary, "train", "--config", str(d / "bert.toml"), "--data",
         str(text_data if task == 0 else verses), "--seed", str(args.seed), "--dropout", "0",
         "--batch-size", str(B), "--seq-len", str(T), "--steps", "0", "--threads", "1",
         "--out", str(d / "init")], log)
    ckpts = {"init": d / "init" / "ckpt_0.h5", "random": d / "random.h5"}
    try:
        cfg = bert_torch.read_checkpoint(str(ckpts["init"]))[0]
    except ValueError as e:
        print(f"FAIL: {e}")
        return False, [], []
    for k, v in model.items():
        if getattr(cfg, k) != v:
            print(f"FAIL: the checkpoint's model.{k} is {getattr(cfg, k)}, not {v}")
            return False, [], []
    try:
        randomize_checkpoint(ckpts["init"], ckpts["random"], args.seed + task)
    except ValueError as e:  # the checkpoint's parameter names are not the reference's
        print(f"FAIL: {e}")
        return False, [], []

    rng = np.random.default_rng(args.seed + 10 * task)
    if task == 0:
        rows = mlm_rows(text_data.read_bytes(), B, T, rng)
    elif task == 1:  # [CLS] a [SEP]: lengths 40 (no padding), 3, ...
        rows = classification_rows(lines, cfg, 1, T, [T - 2, 1, 5, 12, 20, 30, T - 3, 9], rng)
    else:            # [CLS] a [SEP] b [SEP]
        rows = classification_rows(lines, cfg, 2, T, [(18, T - 21), (1, 1), (3, 10), (10, 3),
                                                      (15, 15), (20, 5), (5, 25), (8, 8)], rng)
    write_batch(d / "batch.h5", rows)
    dumps, ok = {}, True
    for which, ckpt in ckpts.items():
        run([binary, "eval", "--ckpt", str(ckpt), "--tokens", str(d / "batch.h5"), "--dump",
             str(d / f"dump_{which}.h5")], log)
        dumps[which] = read_dump(d / f"dump_{which}.h5")
    print(f"  batch rows ({B} x {T + 1}), first: {rows[0].tolist()}")

    if task == 0:
        ok &= check_masking(dumps["init"], rows, cfg, "batch")
        for k in ("inputs", "targets"):
            if not np.array_equal(dumps["init"][k], dumps["random"][k]):
                print(f"FAIL: the two evaluations of one batch masked differently ({k})")
                ok = False
    else:
        ok &= check_classification_inputs(dumps["init"], rows, cfg)

    figures = []
    for which, ckpt in ckpts.items():
        print(f"\n  task {task}, checkpoint {which} ({ckpt.name})")
        good, fig = compare(f"task {task} {which}", ckpt, dumps[which], args.rtol)
        ok &= good
        figures.append((f"task {task} {which}", fig))

    if task == 0:
        # The masking rule on many samples; the same masks for the same samples (global sample
        # keys, whatever the batch size); m at other lengths (and those batches against torch).
        big = np.concatenate([rows, mlm_rows(text_data.read_bytes(), 512 - B, T, rng)])
        write_batch(d / "batch_512.h5", big)
        run([binary, "eval", "--ckpt", str(ckpts["init"]), "--tokens", str(d / "batch_512.h5"),
             "--dump", str(d / "dump_512.h5")], log)
        d512 = read_dump(d / "dump_512.h5")
        ok &= check_masking(d512, big, cfg, "512 samples", stats=True)
        same = np.array_equal(d512["targets"][:B] >= 0, dumps["init"]["targets"] >= 0) and \
            np.array_equal(d512["inputs"][:B], dumps["init"]["inputs"])
        print(f"  samples 0..{B - 1} masked as in the batch of {B}: "
              f"{'yes' if same else 'NO (FAIL: masks not keyed by global sample)'}")
        ok &= same
        for t in (24, 5):
            r = mlm_rows(text_data.read_bytes(), B, t, rng)
            write_batch(d / f"batch_T{t}.h5", r)
            run([binary, "eval", "--ckpt", str(ckpts["random"]), "--tokens",
                 str(d / f"batch_T{t}.h5"), "--dump", str(d / f"dump_T{t}.h5")], log)
            dt = read_dump(d / f"dump_T{t}.h5")
            ok &= check_masking(dt, r, cfg, f"T {t}")
            good, fig = compare(f"task 0 random, T {t}", ckpts["random"], dt, args.rtol,
                                show=False)
            ok &= good
            figures.append((f"task 0 random T={t}", fig))

    print()
    good, wrong = wrong_references(task, ckpts, dumps, args.rtol)
    ok &= good
    print(f"task {task} ({TASKS[task]}): {'PASS' if ok else 'FAIL'}")
    return ok, figures, wrong


def has_bert(binary: str) -> bool:
    p = subprocess.run([binary, "train", "--help-config"], capture_output=True, text=True)
    return 'type = "bert"' in p.stdout


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpitron", required=True, help="path of the mpitron binary")
    ap.add_argument("--repo", required=True, help="source tree (data/)")
    ap.add_argument("--workdir", required=True, help="scratch folder (emptied first)")
    ap.add_argument("--tasks", default="0,1,2")
    ap.add_argument("--n-layer", type=int, default=2)
    ap.add_argument("--n-head", type=int, default=4)
    ap.add_argument("--n-embd", type=int, default=64)
    ap.add_argument("--block-size", type=int, default=64)
    ap.add_argument("--vocab-size", type=int, default=261)
    ap.add_argument("--seq-len-mlm", type=int, default=34, help="task 0 T (m = 5)")
    ap.add_argument("--seq-len-cls", type=int, default=40, help="tasks 1, 2 T")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--synthetic", action="store_true",
                    help="use a generated corpus even where data/kjv.txt exists")
    ap.add_argument("--skip-self-test", action="store_true")
    args = ap.parse_args()

    t_start = time.perf_counter()
    torch.set_num_threads(args.threads)
    repo = Path(args.repo).resolve()
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "commands.log"
    binary = str(Path(args.mpitron).resolve())
    if not has_bert(binary):
        print(f"FAIL: {binary} has no model family 'bert' (train --help-config)")
        return 1

    ok = True
    if not args.skip_self_test:
        print("the reference on its own (bert_torch.self_test):")
        good = bert_torch.self_test()
        print(f"bert_torch self-test {'PASS' if good else 'FAIL'}")
        ok &= good

    data = repo / "data" / "kjv.txt"
    if args.synthetic or not data.is_file():
        data = work / "synthetic.txt"
        synthetic_corpus(data)
    lines = corpus_lines(data)
    verses = work / "verses.txt"
    verse_file(lines, verses)
    print(f"mpitron {binary}\ndata {data}\nverses {verses}")

    results, figures, wrong = {}, [], []
    for task in (int(t) for t in args.tasks.split(",")):
        good, fig, w = check_task(task, args, binary, work, data, verses, lines, log)
        results[task] = good
        figures += fig
        wrong += w
        ok &= good

    print(f"\n{'summary':<24} {'loss t32/t64':>21} {'logits t32/t64':>21} "
          f"{'worst grad t32':>14} {'(tensor)':<46} {'t64':>9}")
    for label, f in figures:
        if f:
            print(f"{label:<24} {f['loss'][0]:>10.3e}/{f['loss'][1]:<10.3e} "
                  f"{f['logits'][0]:>10.3e}/{f['logits'][1]:<10.3e} {f['grad'][0]:>14.3e} "
                  f"{f['grad'][1].removeprefix('grad '):<46} {f['grad64'][0]:>9.3e}")
    print("wrong references (largest relative error against mpitron; must be >= "
          f"{args.rtol:.0e}):")
    for task, what, sensed, detected in wrong:
        print(f"  task {task} {what:<38} "
              + " ".join(f"{k} {v:.3e}" for k, v in sensed.items())
              + f"  {'detected' if detected else 'NOT DETECTED'}")
    verdicts = ", ".join(f"task {t} {'PASS' if r else 'FAIL'}" for t, r in results.items())
    print(f"\nbert oracle: {verdicts} ({time.perf_counter() - t_start:.1f}s; commands in {log})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
