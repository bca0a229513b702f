"""CTest oracle: mpitron's CNN families (alexnet, resnet) against the independent PyTorch models in
validate/cnn_torch.py.

For each family, at small sizes (width 8; alexnet hidden 32, resnet 2 blocks per stage; batch-norm
groups of 4, batch 16), from one initial checkpoint (`mpitron train --steps 0`) it checks
(1) the logits, the loss and every parameter gradient of `mpitron eval --dump` (training mode:
ghost-group batch norm; dropout off) on the batch of training step 1 against torch float32,
max|a-b|/max|b| per tensor below --rtol, with a float64 torch run shown beside it to tell
round-off from a real mismatch (a tensor where torch fp32 is itself further than --rtol from fp64
while mpitron is within --rtol of fp64 is marked ROUND-OFF, not failed); (2) that wrong
references fail that comparison (batch-norm groups twice as large, a conv kernel transposed), so
the test can fail; (3) the losses of a 5-step
`mpitron train` (AdamW, warm-up, cosine schedule; dropout and augmentation off) against the same
steps of torch.optim.AdamW in float64 (a float32 reference has kinks of its own decided by its
round-off, which no flip of ours undoes, and Adam's first steps turn such a gradient difference
into a 1e-4 loss difference by step 3), then the validation loss (evaluation mode: running statistics) and
the batch-norm running statistics and parameters of the final checkpoint. Training batches are
drawn here as mpitron draws them (io/image_dataset.cpp: Philox4x32-10 keyed by seed, split, step
and sample), from the Fashion-MNIST IDX files; the step-1 loss of the run against `eval` on the
batch drawn here checks that draw.
ReLU and max pooling have kinks: an input within float32 round-off of 0 (or a pool window whose
two largest values are that close) may be decided either way, which moves a gradient element by a
whole upstream gradient value. Such kinks (within --kink-tol of the tensor's largest value) are
listed, and those mpitron decided the other way are found (one at a time, kept when the gradient
error at least halves) and decided so in the reference; the table says how many. For the
training steps, mpitron's gradients of every step (`eval --dump` of the checkpoint before it)
serve the same purpose.
Usage: cnn_oracle_test.py --mpitron BIN --repo SRC --workdir DIR [--data FASHION_MNIST_DIR].
Exit status: 0 pass, 1 mismatch, 2 an mpitron command failed, 77 skipped (torch, h5py or the
dataset missing).
"""

from __future__ import annotations

import argparse
import gzip
import math
import shutil
import sys
import time
from pathlib import Path

try:
    import h5py
    import numpy as np
    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    import cnn_torch
    from oracle_test import read_dump, rel_err, run  # the GPT oracle's helpers
except ImportError as e:
    print(f"SKIP: {e.name} is not importable by {sys.executable} "
          "(Debian: apt-get install python3-torch python3-h5py)")
    sys.exit(77)

DEFAULT_DATA = "/usr/share/datasets/fashion-mnist"  # Debian's dataset-fashion-mnist
FAMILIES = {
    "alexnet": ("configs/alexnet-fmnist.toml", ["model.width=8", "model.hidden=32"],
                "conv2.weight"),
    "resnet": ("configs/resnet-fmnist.toml", ["model.width=8", "model.blocks_per_stage=2"],
               "layer1.0.conv1.weight"),
}
M32 = 0xFFFFFFFF
M64 = 0xFFFFFFFFFFFFFFFF


# ---- mpitron's image batches (base/philox.hpp, io/image_dataset.cpp), re-derived ---------------

def fnv1a64(s: str) -> int:
    h = 1469598103934665603
    for c in s.encode():
        h = ((h ^ c) * 1099511628211) & M64
    return h


def philox4x32(c: list[int], k0: int, k1: int) -> list[int]:
    c0, c1, c2, c3 = c
    for _ in range(10):
        p0, p1 = 0xD2511F53 * c0, 0xCD9E8D57 * c2
        c0, c1, c2, c3 = ((p1 >> 32) ^ c1 ^ k0) & M32, p1 & M32, ((p0 >> 32) ^ c3 ^ k1) & M32, \
            p0 & M32
        k0, k1 = (k0 + 0x9E3779B9) & M32, (k1 + 0xBB67AE85) & M32
    return [c0, c1, c2, c3]


def draw_images(seed: int, split: str, index: int, count: int, n: int) -> np.ndarray:
    """Which image of the split (n images) each of samples 0..count-1 of batch `index` is."""
    stream = fnv1a64(f"images.{split}")
    out = []
    for i in range(count):
        ctr = (index << 32) | i
        v = philox4x32([ctr & M32, ctr >> 32, stream & M32, stream >> 32], seed & M32, seed >> 32)
        out.append((v[0] | (v[1] << 32)) % n)
    return np.array(out, dtype=np.int64)


def read_idx(folder: Path, name: str, magic: int) -> np.ndarray:
    gz, plain = folder / f"{name}.gz", folder / name
    raw = gzip.open(gz).read() if gz.is_file() else plain.read_bytes()
    if int.from_bytes(raw[:4], "big") != magic:
        raise ValueError(f"{folder / name}: magic {raw[:4].hex()} is not {magic:#010x}")
    dims = [int.from_bytes(raw[4 + 4 * i:8 + 4 * i], "big") for i in range(magic & 0xFF)]
    a = np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * len(dims))
    return a.reshape(dims[0], -1)


def load_fashion_mnist(folder: Path) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    out = {}
    for split, prefix in (("train", "train"), ("val", "t10k")):
        images = read_idx(folder, f"{prefix}-images-idx3-ubyte", 0x803)
        labels = read_idx(folder, f"{prefix}-labels-idx1-ubyte", 0x801).reshape(-1)
        out[split] = (images, labels)
    return out


def batch(data: dict, seed: int, split: str, index: int, count: int) -> tuple[np.ndarray, ...]:
    images, labels = data[split]
    pick = draw_images(seed, split, index, count, images.shape[0])
    return images[pick].astype(np.int32), labels[pick].astype(np.int32)


# ---- comparisons ------------------------------------------------------------------------------

def table(rows: list, rtol: float) -> tuple[bool, dict]:
    """rows of (name, mpitron, torch fp32, torch fp64); prints them, returns (all pass, worst
    relative errors {'fp32': (rel, name), 'fp64': ...})."""
    print(f"\n{'tensor':<36} {'shape':<14} {'max|b|':>10} {'max|a-b|':>10} {'rel(a,t32)':>11} "
          f"{'rel(a,t64)':>11} {'rel(t32,t64)':>12}")
    ok = True
    worst = {"fp32": (0.0, ""), "fp64": (0.0, ""), "t32-t64": (0.0, "")}
    for name, a, b32, b64 in rows:
        if tuple(a.shape) != tuple(b32.shape):
            print(f"{name:<36} shape {a.shape} != torch {b32.shape}  FAIL")
            ok = False
            continue
        diff, rel = rel_err(a, b32)
        _, rel64 = rel_err(a, b64)
        _, rel_t = rel_err(b32, b64)
        # Where torch fp32 is itself further than rtol from fp64 and mpitron is within rtol of
        # fp64, the miss is torch's round-off: shown as ROUND-OFF, not a failure.
        roundoff = not rel < rtol and rel64 < rtol and not rel_t < rtol
        bad = not rel < rtol and not roundoff
        ok &= not bad
        worst["fp32"] = max(worst["fp32"], (rel, name))
        worst["fp64"] = max(worst["fp64"], (rel64, name))
        worst["t32-t64"] = max(worst["t32-t64"], (rel_t, name))
        print(f"{name:<36} {str(tuple(a.shape)):<14} {np.max(np.abs(b32)):>10.3e} {diff:>10.3e} "
              f"{rel:>11.3e} {rel64:>11.3e} {rel_t:>12.3e}{'  FAIL' if bad else ''}"
              f"{'  ROUND-OFF (torch fp32 vs fp64 beyond rtol)' if roundoff else ''}")
    return ok, worst


def max_grad_err(m_grads: dict, grads: dict) -> float:
    return max(rel_err(m_grads[n], grads[n])[1] for n in grads)


def choose_flips(model, images, labels, m_grads: dict, tol: float, most: int = 40):
    """The kinks (cnn_torch.Kinks: ReLU inputs within tol * max|x| of 0, pool windows whose two
    largest inputs are that close) that mpitron's float32 round-off decided the other way: tried
    one at a time, nearest first, each flip kept when it at least halves the largest gradient
    error against mpitron. Returns (flips, the probe with every ambiguous kink and its margin)."""
    probe = cnn_torch.Kinks(tol)
    _, _, g = cnn_torch.loss_and_grads(model, images, labels, probe)
    best, flips = max_grad_err(m_grads, g), []
    for kink in sorted(probe.ambiguous, key=probe.margin.get)[:most]:
        _, _, g = cnn_torch.loss_and_grads(model, images, labels,
                                           cnn_torch.Kinks(0.0, flips + [kink]))
        err = max_grad_err(m_grads, g)
        if err < best / 2:
            flips.append(kink)
            best = err
    return flips, probe


def describe_flips(flips: list, probe) -> str:
    margin = {k: f"{v:.1e}" for k, v in probe.margin.items()}
    return ", ".join(f"site {s} element {i} (margin {margin.get((s, i), '?')})" for s, i in flips)


def compare_gradients(family: str, ckpt: Path, images, labels, dump: Path, rtol: float,
                      perturb_weight: str, kink_tol: float) -> bool:
    m_loss, m_logits, m_grads = read_dump(dump)
    names = [n for n, _ in cnn_torch.load_model(str(ckpt)).named_parameters()]
    missing = sorted(set(names) - set(m_grads))
    extra = sorted(set(m_grads) - set(names))
    if missing or extra:
        print(f"FAIL: mpitron's dump lacks gradients {missing}, has unexpected {extra}")
        return False
    # Kinks within round-off of their decision may go either way in float32: find the ones
    # mpitron took the other way (against float64), and decide them so in both references.
    model64 = cnn_torch.load_model(str(ckpt), torch.float64)
    flips, probe = choose_flips(model64, images, labels, m_grads, kink_tol)
    unflipped = max_grad_err(m_grads, cnn_torch.loss_and_grads(model64, images, labels)[2])
    print(f"\n{family}: {len(probe.ambiguous)} kinks within {kink_tol:.0e} (relative) of their "
          f"decision; mpitron decided {len(flips)} the other way"
          f"{': ' + describe_flips(flips, probe) if flips else ''} (largest gradient error "
          f"against fp64 without {'them' if flips else 'flips'}: {unflipped:.3e})")
    t64 = cnn_torch.loss_and_grads(model64, images, labels, cnn_torch.Kinks(0.0, flips))
    # torch float32 has round-off of its own at the same kinks: the same search for it.
    model32 = cnn_torch.load_model(str(ckpt), torch.float32)
    flips32, _ = choose_flips(model32, images, labels, m_grads, kink_tol)
    t32 = cnn_torch.loss_and_grads(model32, images, labels, cnn_torch.Kinks(0.0, flips32))
    if sorted(flips32) != sorted(flips):
        print(f"{family}: torch fp32 decided differently from mpitron at "
              f"{describe_flips(flips32, probe) or 'none'} (margins from fp64)")
    rows = [("loss", np.array([m_loss]), np.array([t32[0]]), np.array([t64[0]])),
            ("logits", m_logits, t32[1], t64[1])]
    rows += [(f"grad {n}", m_grads[n], t32[2][n], t64[2][n]) for n in names]
    ok, worst = table(rows, rtol)
    grad_rows = rows[2:]
    worst_grad = max((rel_err(a, b32)[1], name) for name, a, b32, _ in grad_rows)
    worst_grad64 = max((rel_err(a, b64)[1], name) for name, a, _, b64 in grad_rows)
    print(f"{family}: largest relative error against torch fp32 {worst['fp32'][0]:.3e} "
          f"({worst['fp32'][1]}), against fp64 {worst['fp64'][0]:.3e} ({worst['fp64'][1]}); "
          f"torch fp32 against fp64 {worst['t32-t64'][0]:.3e}; tolerance {rtol:.0e}")
    print(f"{family} summary: loss {rel_err(m_loss, t32[0])[1]:.3e}/"
          f"{rel_err(m_loss, t64[0])[1]:.3e}"
          f" logits {rel_err(m_logits, t32[1])[1]:.3e}/{rel_err(m_logits, t64[1])[1]:.3e}"
          f" worst grad {worst_grad[0]:.3e}/{worst_grad64[0]:.3e} ({worst_grad[1]}, "
          f"{worst_grad64[1]}) [fp32/fp64], kink flips {len(flips)} (fp64) {len(flips32)} (fp32)")

    # Wrong references must be told apart, with the same search for kink flips: each must fail.
    cfg = cnn_torch.read_checkpoint(str(ckpt))[0]
    wrong = {f"batch-norm groups of {2 * cfg.norm_group} instead of {cfg.norm_group}":
             cnn_torch.load_model(str(ckpt), torch.float32, norm_group=2 * cfg.norm_group)}
    model = cnn_torch.load_model(str(ckpt), torch.float32)
    with torch.no_grad():
        w = dict(model.named_parameters())[perturb_weight]
        w.copy_(w.transpose(2, 3).clone())
    wrong[f"{perturb_weight} with its kernel transposed"] = model
    for what, model in wrong.items():
        p_flips, _ = choose_flips(model, images, labels, m_grads, kink_tol)
        p_loss, p_logits, p_grads = cnn_torch.loss_and_grads(model, images, labels,
                                                             cnn_torch.Kinks(0.0, p_flips))
        sensed = max([rel_err(m_loss, p_loss)[1], rel_err(m_logits, p_logits)[1]] +
                     [rel_err(m_grads[n], p_grads[n])[1] for n in names])
        print(f"sensitivity: {what} gives relative error {sensed:.3e} "
              f"({'detected' if sensed >= rtol else 'NOT DETECTED'})")
        ok &= sensed >= rtol
    return ok


def compare_training(family: str, ckpt: Path, final: Path, trace: Path, batches: list,
                     val_batches: list, dumps: list, rtol: float, kink_tol: float) -> bool:
    with h5py.File(trace, "r") as f:
        steps = f["trace/step"][()]
        losses = f["trace/loss"][()]
        lrs = f["trace/lr"][()]
        norms = f["trace/grad_norm"][()]
        val = f["trace/val_loss"][()]
    n = len(batches)
    if list(steps) != list(range(1, n + 1)):
        print(f"FAIL: trace steps {list(steps)} are not 1..{n}")
        return False
    _, m_params, m_buffers, attrs = cnn_torch.read_checkpoint(str(final))
    tc = cnn_torch.train_config(attrs)
    if tc.steps != n or float(attrs.get("train.dropout", 0)) != 0 or \
            int(attrs.get("train.augment", 0)) != 0:
        print(f"FAIL: the run's settings are not {n} steps without dropout and augmentation")
        return False
    model = cnn_torch.load_model(str(ckpt), torch.float64)  # see the docstring, (3)
    opt = cnn_torch.make_optimizer(model, tc)
    ok = True
    print(f"\n{family}: lr {tc.lr}, warm-up {tc.warmup_steps}, weight decay {tc.weight_decay}, "
          f"betas ({tc.beta1}, {tc.beta2}), eps {tc.eps}, grad_clip {tc.grad_clip}")
    print(f"{'step':>4} {'lr':>10} {'mpitron loss':>14} {'torch loss':>14} {'rel':>10} "
          f"{'grad_norm m':>12} {'grad_norm t':>12} {'rel':>10} {'kinks':>6} {'flips':>6}")
    for s in range(1, n + 1):
        # mpitron's gradients of this step (eval --dump of the checkpoint before it) tell which
        # kinks its round-off decided the other way; torch's step decides them so too.
        flips, probe = choose_flips(model, *batches[s - 1], read_dump(dumps[s - 1])[2], kink_tol)
        r = cnn_torch.train_step(model, opt, *batches[s - 1], s, tc, cnn_torch.Kinks(0.0, flips))
        rel = abs(losses[s - 1] - r["loss"]) / abs(r["loss"])
        nrel = abs(norms[s - 1] - r["grad_norm"]) / abs(r["grad_norm"])
        lr_ok = math.isclose(lrs[s - 1], r["lr"], rel_tol=1e-12, abs_tol=1e-15)
        bad = not rel < rtol or not lr_ok
        ok &= not bad
        print(f"{s:>4} {r['lr']:>10.3e} {losses[s - 1]:>14.8f} {r['loss']:>14.8f} {rel:>10.3e} "
              f"{norms[s - 1]:>12.6f} {r['grad_norm']:>12.6f} {nrel:>10.3e} "
              f"{len(probe.ambiguous):>6} {len(flips):>6}"
              f"{'' if lr_ok else '  LR MISMATCH'}{'  FAIL' if bad else ''}")
    v = float(np.mean([cnn_torch.eval_loss(model, *b) for b in val_batches]))
    v_m = float(val[n - 1])
    v_rel = abs(v_m - v) / abs(v)
    v_bad = not v_rel < rtol
    ok &= not v_bad
    print(f"val_loss after step {n} (running statistics): mpitron {v_m:.8f} torch {v:.8f} "
          f"rel {v_rel:.3e}{'  FAIL' if v_bad else ''}")

    # The final checkpoint: running statistics must agree to rtol; parameters are shown (after
    # Adam's normalised steps, a gradient that is round-off noise moves its weight by up to lr).
    print(f"\n{'after step ' + str(n):<40} {'max|b|':>10} {'max|a-b|':>10} {'rel':>10}")
    worst_buf, worst_param = (0.0, ""), (0.0, "")
    for name, b in model.named_buffers():
        d, rel = rel_err(m_buffers[name], b.numpy())
        bad = not rel < rtol
        ok &= not bad
        worst_buf = max(worst_buf, (rel, name))
        print(f"{'buffer ' + name:<40} {float(b.abs().max()):>10.3e} {d:>10.3e} {rel:>10.3e}"
              f"{'  FAIL' if bad else ''}")
    for name, p in model.named_parameters():
        worst_param = max(worst_param, (rel_err(m_params[name], p.detach().numpy())[1], name))
    print(f"{family}: running statistics largest relative error {worst_buf[0]:.3e} "
          f"({worst_buf[1]}); parameters {worst_param[0]:.3e} ({worst_param[1]})")
    return ok


def check_family(family: str, args, binary: str, repo: Path, work: Path, data: dict,
                 log: Path) -> bool:
    config, sets, perturb_weight = FAMILIES[family]
    B, S, seed = args.batch_size, args.steps, args.seed
    fam = work / family
    fam.mkdir()
    print(f"\n==== {family} ({config}, {' '.join(sets)}, norm_group {args.norm_group}, batch {B})")
    common = ["--config", str(repo / config), "--data", args.data, "--seed", str(seed),
              "--dropout", "0", "--batch-size", str(B), "--warmup-steps", str(args.warmup),
              "--eval-batches", str(args.eval_batches), "--threads", "1",
              "--set", f"model.norm_group={args.norm_group}", "--set", "train.augment=0"]
    for s in sets:
        common += ["--set", s]
    run([binary, "train", *common, "--steps", "0", "--out", str(fam / "init")], log)
    ckpt = fam / "init" / "ckpt_0.h5"

    batches = [batch(data, seed, "train", s, B) for s in range(1, S + 1)]
    val_batches = [batch(data, seed, "val", e, B) for e in range(args.eval_batches)]
    images, labels = batches[0]
    with h5py.File(fam / "batch.h5", "w") as f:
        f.create_dataset("images", data=images.astype(np.int32))
        f.create_dataset("labels", data=labels.astype(np.int32))
    out = run([binary, "eval", "--ckpt", str(ckpt), "--tokens", str(fam / "batch.h5"), "--dump",
               str(fam / "dump.h5")], log)
    run([binary, "train", *common, "--steps", str(S), "--out", str(fam / "train"),
         "--eval-every", "0", "--ckpt-every", "1", "--log-every", "1"], log)
    dumps = [fam / "dump.h5"]  # mpitron's gradients of every training step
    for s in range(2, S + 1):
        with h5py.File(fam / f"batch_{s}.h5", "w") as f:
            f.create_dataset("images", data=batches[s - 1][0])
            f.create_dataset("labels", data=batches[s - 1][1])
        dumps.append(fam / f"dump_{s}.h5")
        run([binary, "eval", "--ckpt", str(fam / "train" / f"ckpt_{s - 1}.h5"), "--tokens",
             str(fam / f"batch_{s}.h5"), "--dump", str(dumps[-1])], log)

    grads_ok = compare_gradients(family, ckpt, images, labels, fam / "dump.h5", args.rtol,
                                 perturb_weight, args.kink_tol)
    # The batches drawn here are the run's: its step-1 loss is eval's on batch.h5.
    with h5py.File(fam / "train" / "trace.h5", "r") as f:
        first = float(f["trace/loss"][0])
    eval_loss = read_dump(fam / "dump.h5")[0]
    draw_ok = abs(first - eval_loss) <= 1e-6 * abs(eval_loss)
    print(f"\n{family}: step-1 loss of the run {first:.8f}, eval on the batch drawn here "
          f"{eval_loss:.8f} ({'same batch' if draw_ok else 'FAIL: the draw differs'})")
    train_ok = draw_ok and compare_training(family, ckpt, fam / "train" / f"ckpt_{S}.h5",
                                            fam / "train" / "trace.h5", batches, val_batches,
                                            dumps, args.rtol, args.kink_tol)
    print(f"{family}: logits/loss/gradients {'PASS' if grads_ok else 'FAIL'}, {S}-step training "
          f"{'PASS' if train_ok else 'FAIL'}")
    return grads_ok and train_ok


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mpitron", required=True, help="path of the mpitron binary")
    ap.add_argument("--repo", required=True, help="source tree (configs/)")
    ap.add_argument("--workdir", required=True, help="scratch folder (emptied first)")
    ap.add_argument("--data", default=DEFAULT_DATA, help="Fashion-MNIST folder (IDX files)")
    ap.add_argument("--families", default="alexnet,resnet")
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--norm-group", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--eval-batches", type=int, default=2)
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--rtol", type=float, default=1e-5)
    ap.add_argument("--kink-tol", type=float, default=1e-6,
                    help="ReLU inputs / pool gaps within this of max|x| may be decided either way")
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    args = ap.parse_args()

    t_start = time.perf_counter()
    data_dir = Path(args.data)
    if not all(any((data_dir / f"{n}-ubyte{z}").is_file() for z in (".gz", ""))
               for n in ("train-images-idx3", "train-labels-idx1", "t10k-images-idx3",
                         "t10k-labels-idx1")):
        print(f"SKIP: no Fashion-MNIST IDX files in {data_dir} (Debian: apt-get install "
              "dataset-fashion-mnist, or pass --data)")
        return 77
    torch.set_num_threads(args.threads)
    repo = Path(args.repo).resolve()
    work = Path(args.workdir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = work / "commands.log"
    binary = str(Path(args.mpitron).resolve())
    print(f"mpitron {binary}\ndata {data_dir}")
    data = load_fashion_mnist(data_dir)

    results = {f: check_family(f, args, binary, repo, work, data, log)
               for f in args.families.split(",")}
    ok = all(results.values())
    verdicts = ", ".join(f"{f} {'PASS' if r else 'FAIL'}" for f, r in results.items())
    print(f"\noracle: {verdicts} ({time.perf_counter() - t_start:.1f}s; commands in {log})")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
