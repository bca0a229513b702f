"""Plots the loss curves of mpitron traces (trace.h5) into one PNG.

One line per trace (/trace/loss against /trace/step), its validation losses (/trace/val_loss,
NaN where not evaluated) as markers of the same colour drawn above every line, each trace its own
marker, so that points that coincide stay visible. Classifiers' validation accuracy
(/trace/val_accuracy) gets a panel of its own, as does validation BLEU (/trace/val_bleu,
translation, with epochs on the top axis where the trace knows its training pairs). With --diff
a last panel shows each trace's relative difference to the first one at their common steps,
|loss - ref| / |ref| on a log axis (steps that are bitwise equal sit on a dotted floor line): the
picture of ARCHITECTURE.md's layout-invariance claim. One legend below the panels names each
trace (run folder, layout attributes, last validation figures, steps equal to the reference);
the title names every trace's configuration.
Usage: plot_loss.py -o out.png a/trace.h5 b/trace.h5 ... [--diff] [--title T] [--logy]
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path

import h5py
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ZERO_FLOOR = 1e-12
WIDTH = 10.0  # inches
MARKERS = "osD^vP*X"


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
        t["val_accuracy"] = (f["trace/val_accuracy"][()] if "trace/val_accuracy" in f
                             else np.full(n, np.nan))
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


def describe(a: dict) -> str:
    """One trace's configuration: preset (model), batch, learning rate, seed."""
    # Language models read batch x tokens; classifiers batch samples (their seq_len is unused).
    batch = f"{a.get('train.batch_size', '?')}"
    if str(a.get("model.type", "gpt")) in ("gpt",) or (
            str(a.get("model.type")) == "bert" and int(a.get("model.task", 0)) == 0):
        batch += f"x{a.get('train.seq_len', '?')}"
    return (f"{a.get('config', 'mpitron')} ({a.get('model.type', '?')}): batch {batch}, "
            f"lr {a.get('train.lr', '?')}, seed {a.get('seed', '?')}")


def last_finite(x: np.ndarray):
    v = x[np.isfinite(x)]
    return float(v[-1]) if len(v) else None


def build_figure(traces: list[dict], labels: list[str], diff: bool = False,
                 title: str | None = None, logy: bool = False):
    """The figure: loss panel, then accuracy, BLEU and --diff panels where they apply, one
    legend entry per trace below them all (never over a curve), the title above."""
    bleu = any(np.isfinite(t["val_bleu"]).any() for t in traces)
    acc = any(np.isfinite(t["val_accuracy"]).any() for t in traces)
    kinds = ["loss"] + (["accuracy"] if acc else []) + (["bleu"] if bleu else []) + \
        (["diff"] if diff else [])
    ratios = [3 if k == "loss" else 2 for k in kinds]
    fig, axes = plt.subplots(len(kinds), 1, figsize=(WIDTH, 1.6 * sum(ratios) + 1.5),
                             sharex=True, squeeze=False, gridspec_kw={"height_ratios": ratios})
    panel = {k: axes[i, 0] for i, k in enumerate(kinds)}
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    n = len(traces)
    stats = [[] for _ in traces]
    handles = []

    # Markers over every line (zorder), each trace its own shape and a size that shrinks with its
    # index, hollow: validation points that coincide across traces, or sit on a training curve,
    # show as nested rings.
    def val_style(i: int) -> dict:
        return dict(linestyle="none", marker=MARKERS[i % len(MARKERS)],
                    markersize=max(4.0, 11.0 - 7.0 * i / max(n - 1, 1)),
                    markerfacecolor="none", markeredgewidth=1.6, color=colors[i % len(colors)],
                    zorder=3 + 0.01 * i)

    ax = panel["loss"]
    for i, t in enumerate(traces):
        c = colors[i % len(colors)]
        style = "-" if i == 0 else (0, (4, 2 + i % 3))
        (line,) = ax.plot(t["step"], t["loss"], color=c, linestyle=style, linewidth=1.3,
                          zorder=2)
        v = np.isfinite(t["val_loss"])
        if v.any():
            (mark,) = ax.plot(t["step"][v], t["val_loss"][v], **val_style(i))
            handles.append((line, mark))
            stats[i].append(f"val loss {t['val_loss'][v][-1]:.3f}")
        else:
            handles.append(line)
    ax.set_ylabel("loss (lines: training,\nmarkers: validation)")
    if logy:
        ax.set_yscale("log")
    ax.grid(True, alpha=0.3)
    a0 = traces[0]["attrs"]
    pairs = a0.get("data.train_pairs")
    if pairs:  # epochs on top: steps x batch / training pairs
        per_epoch = float(pairs) / float(a0.get("train.batch_size", 1))
        top = ax.secondary_xaxis("top", functions=(lambda s: s / per_epoch,
                                                   lambda e: e * per_epoch))
        top.set_xlabel("epoch")

    if acc:
        ax = panel["accuracy"]
        for i, t in enumerate(traces):
            v = np.isfinite(t["val_accuracy"])
            if v.any():
                ax.plot(t["step"][v], 100 * t["val_accuracy"][v], color=colors[i % len(colors)],
                        linewidth=1, alpha=0.6, zorder=2)
                ax.plot(t["step"][v], 100 * t["val_accuracy"][v], **val_style(i))
                stats[i].append(f"val acc {100 * t['val_accuracy'][v][-1]:.1f}%")
        ax.set_ylabel("validation accuracy (%)")
        ax.grid(True, alpha=0.3)

    if bleu:
        ax = panel["bleu"]
        for i, t in enumerate(traces):
            v = np.isfinite(t["val_bleu"])
            if v.any():
                ax.plot(t["step"][v], t["val_bleu"][v], color=colors[i % len(colors)],
                        linewidth=1, alpha=0.6, zorder=2)
                ax.plot(t["step"][v], t["val_bleu"][v], **val_style(i))
                stats[i].append(f"BLEU {t['val_bleu'][v][-1]:.2f}")
        ax.set_ylabel("validation BLEU")
        ax.grid(True, alpha=0.3)

    if diff:
        dx = panel["diff"]
        ref = traces[0]
        ref_loss = dict(zip(ref["step"].tolist(), ref["loss"].tolist()))
        worst, any_zero = 0.0, False
        stats[0].append("the reference")
        for i, t in enumerate(traces):
            if i == 0:
                continue
            common = [(s, l) for s, l in zip(t["step"].tolist(), t["loss"].tolist())
                      if s in ref_loss]
            if not common:
                print(f"warning: {t['path']} has no step in common with {ref['path']}",
                      file=sys.stderr)
                stats[i].append("no step in common with the reference")
                continue
            s = np.array([c[0] for c in common])
            r = np.array([abs(c[1] - ref_loss[c[0]]) / abs(ref_loss[c[0]]) for c in common])
            worst = max(worst, float(np.max(r)))
            dx.plot(s, np.maximum(r, ZERO_FLOOR), color=colors[i % len(colors)], marker=".",
                    markersize=3, linewidth=1)
            stats[i].append(f"{int(np.sum(r == 0))}/{len(r)} steps equal to the reference, "
                            f"max {float(np.max(r)):.1e}")
            any_zero |= bool(np.any(r == 0))
        dx.set_yscale("log")
        if any_zero:
            dx.axhline(ZERO_FLOOR, color="black", linewidth=0.6, linestyle=":")
            dx.annotate("bitwise equal", (0.005, ZERO_FLOOR), xycoords=("axes fraction", "data"),
                        xytext=(2, 3), textcoords="offset points", fontsize=7)
        dx.set_ylabel("|loss - ref| / |ref|")
        dx.set_title(f"relative difference to the first trace (max {worst:.2e})", fontsize=9)
        dx.grid(True, alpha=0.3)
    axes[-1, 0].set_xlabel("step")

    # The title: every distinct configuration, in the traces' order.
    if title is None:
        seen = list(dict.fromkeys(describe(t["attrs"]) for t in traces))
        title = "; ".join(seen)
    fig.suptitle("\n".join(textwrap.wrap(title, 95)), fontsize=11)

    # Below the panels, one entry per trace; wide enough labels get a column each.
    texts = [lab + (f"  [{', '.join(st)}]" if st else "") for lab, st in zip(labels, stats)]
    ncol = 1 if n == 1 or max(len(x) for x in texts) > 60 else 2
    legend = fig.legend(handles, texts, loc="lower center", bbox_to_anchor=(0.5, 0.0),
                        ncol=ncol, fontsize=8, frameon=False, handlelength=3.0)
    fig.canvas.draw()
    below = legend.get_window_extent().height / fig.bbox.height
    fig.tight_layout(rect=(0, below + 0.01, 1, 1))
    return fig


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("traces", nargs="+",
                    help="trace.h5 files; the first is the reference for --diff")
    ap.add_argument("-o", "--output", required=True, help="PNG to write")
    ap.add_argument("--diff", action="store_true", help="add a panel of relative differences")
    ap.add_argument("--title", default=None)
    ap.add_argument("--logy", action="store_true", help="logarithmic loss axis")
    args = ap.parse_args(argv)

    traces = [read_trace(p) for p in args.traces]
    seeds = {t["attrs"].get("seed") for t in traces}
    labels = [label(t, args.traces, seeds) for t in traces]
    fig = build_figure(traces, labels, diff=args.diff, title=args.title, logy=args.logy)
    fig.savefig(args.output, dpi=120)  # the figure as laid out: the legend is inside it
    plt.close(fig)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
