"""Plots the loss curves of mpitron traces (trace.h5) into one PNG.

One line per trace (/trace/loss against /trace/step), its validation losses (/trace/val_loss,
NaN where not evaluated) as markers of the same colour, the legend naming each trace by its run
folder and layout attributes. With --diff a second panel shows each trace's relative
difference to the first one at their common steps, |loss - ref| / |ref| on a log axis (steps
that are bitwise equal sit on a dotted floor line): the picture of ARCHITECTURE.md's layout-invariance
claim. Traces with validation BLEU (/trace/val_bleu, translation) get a BLEU panel, with epochs
on the top axis where the trace knows its training pairs.
Usage: plot_loss.py -o out.png a/trace.h5 b/trace.h5 ... [--diff] [--title T] [--logy]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ZERO_FLOOR = 1e-12


def attr(attrs, key, default=None):
    v = attrs.get(key, default)
    if isinstance(v, bytes):
        v = v.decode()
    if isinstance(v, np.generic):
        v = v.item()
    return v


def read_trace(path: str) -> dict:
    with h5py.File(path, "r") as f:
        if "trace/step" not in f or "trace/loss" not in f:
            raise SystemExit(f"error: {path} is not an mpitron trace (no /trace/step, /trace/loss)")
        t = {"step": f["trace/step"][()], "loss": f["trace/loss"][()]}
        n = len(t["step"])
        t["val_loss"] = f["trace/val_loss"][()] if "trace/val_loss" in f else np.full(n, np.nan)
        t["val_bleu"] = f["trace/val_bleu"][()] if "trace/val_bleu" in f else np.full(n, np.nan)
        t["attrs"] = {k: attr(f.attrs, k) for k in f.attrs}
    t["path"] = path
    return t


def label(t: dict, paths: list[str], seeds: set) -> str:
    p = Path(t["path"])
    run = p.parent.name if p.name == "trace.h5" and p.parent.name else p.stem
    if len({str(Path(q).parent.name) for q in paths}) < len(paths):
        run = str(p.parent) if p.name == "trace.h5" else str(p)
    a = t["attrs"]
    bits = []
    if "layout.dp" in a:
        bits.append(f"dp{a['layout.dp']} tp{a.get('layout.tp', 1)} pp{a.get('layout.pp', 1)}")
        if a.get("layout.zero", 0):
            bits.append(f"zero{a['layout.zero']}")
    if a.get("train.micro_batches", 1) not in (None, 1):
        bits.append(f"mb{a['train.micro_batches']}")
    if len(seeds) > 1:
        bits.append(f"seed {a.get('seed')}")
    if "config" in a and a["config"] not in run:
        bits.insert(0, str(a["config"]))
    return f"{run} ({', '.join(bits)})" if bits else run


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+",
                    help="trace.h5 files; the first is the reference for --diff")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--diff", action="store_true", help="add a panel of relative differences")
    ap.add_argument("--title", default=None)
    ap.add_argument("--logy", action="store_true", help="logarithmic loss axis")
    args = ap.parse_args()

    traces = [read_trace(p) for p in args.traces]
    seeds = {t["attrs"].get("seed") for t in traces}
    labels = [label(t, args.traces, seeds) for t in traces]
    bleu = any(np.isfinite(t["val_bleu"]).any() for t in traces)
    ratios = [3] + ([2] if bleu else []) + ([2] if args.diff else [])
    rows = len(ratios)
    fig, axes = plt.subplots(rows, 1, figsize=(9, 4.2 * rows + 0.6), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": ratios})
    ax = axes[0, 0]
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    any_val = False
    for i, (t, lab) in enumerate(zip(traces, labels)):
        c = colors[i % len(colors)]
        style = "-" if i == 0 else (0, (4, 2 + i % 3))
        ax.plot(t["step"], t["loss"], color=c, linestyle=style, linewidth=1.4, label=lab)
        v = np.isfinite(t["val_loss"])
        if v.any():
            ax.plot(t["step"][v], t["val_loss"][v], "o", color=c, markersize=6 + 2 * (i == 0),
                    markerfacecolor="none", markeredgewidth=1.5)
            any_val = True
    if any_val:
        ax.plot([], [], "o", color="gray", markerfacecolor="none", markeredgewidth=1.5,
                label="val_loss (colour of its trace)")
    ax.set_ylabel("loss")
    if args.logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="upper right")
    a0 = traces[0]["attrs"]
    # Language models read batch x tokens; classifiers batch samples (their seq_len is unused).
    batch = f"{a0.get('train.batch_size', '?')}"
    if str(a0.get("model.type", "gpt")) in ("gpt",) or (
            str(a0.get("model.type")) == "bert" and int(a0.get("model.task", 0)) == 0):
        batch += f"x{a0.get('train.seq_len', '?')}"
    title = args.title or (
        f"{a0.get('config', 'mpitron')} ({a0.get('model.type', '?')}): batch {batch}, "
        f"lr {a0.get('train.lr', '?')}, seed {a0.get('seed', '?')}")
    ax.set_title(title)
    pairs = a0.get("data.train_pairs")
    if pairs:  # epochs on top: steps x batch / training pairs
        per_epoch = float(pairs) / float(a0.get("train.batch_size", 1))
        top = ax.secondary_xaxis("top", functions=(lambda s: s / per_epoch,
                                                   lambda e: e * per_epoch))
        top.set_xlabel("epoch")

    if bleu:
        bx = axes[1, 0]
        for i, (t, lab) in enumerate(zip(traces, labels)):
            v = np.isfinite(t["val_bleu"])
            if v.any():
                bx.plot(t["step"][v], t["val_bleu"][v], "o-", color=colors[i % len(colors)],
                        label=f"{lab}: last {t['val_bleu'][v][-1]:.2f}")
        bx.set_ylabel("validation BLEU")
        bx.grid(True, alpha=0.3)
        bx.legend(fontsize=8, loc="lower right")

    if args.diff:
        dx = axes[-1, 0]
        ref = traces[0]
        ref_loss = dict(zip(ref["step"].tolist(), ref["loss"].tolist()))
        worst, any_zero = 0.0, False
        for i, (t, lab) in enumerate(zip(traces, labels)):
            if i == 0:
                continue
            pairs = zip(t["step"].tolist(), t["loss"].tolist())
            common = [(s, l) for s, l in pairs if s in ref_loss]
            if not common:
                print(f"warning: {t['path']} has no step in common with {ref['path']}",
                      file=sys.stderr)
                continue
            s = np.array([c[0] for c in common])
            r = np.array([abs(c[1] - ref_loss[c[0]]) / abs(ref_loss[c[0]]) for c in common])
            worst = max(worst, float(np.max(r)))
            c = colors[i % len(colors)]
            dx.plot(s, np.maximum(r, ZERO_FLOOR), color=c, marker=".", markersize=3,
                    linewidth=1, label=f"{lab}: {int(np.sum(r == 0))}/{len(r)} steps equal")
            any_zero |= bool(np.any(r == 0))
        dx.set_yscale("log")
        if any_zero:
            dx.axhline(ZERO_FLOOR, color="black", linewidth=0.6, linestyle=":")
            dx.annotate("bitwise equal", (0.005, ZERO_FLOOR), xycoords=("axes fraction", "data"),
                        xytext=(2, 3), textcoords="offset points", fontsize=7)
        dx.set_ylabel(f"|loss - ref| / |ref|\nref: {labels[0]}", fontsize=8)
        dx.set_title(f"relative difference to the first trace (max |.| = {worst:.2e})", fontsize=9)
        dx.grid(True, alpha=0.3)
        if len(traces) > 1:  # beside the axes, not over the curves
            dx.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    axes[-1, 0].set_xlabel("step")
    fig.tight_layout()
    fig.savefig(args.output, dpi=120, bbox_inches="tight")  # keeps a legend beside the axes
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
