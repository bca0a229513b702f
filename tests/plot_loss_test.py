"""validate/plot_loss.py's figure, rendered (Agg) from traces written here in mpitron's format.

Classifiers (an MLP and AlexNet, each at dp 1 and dp 2, their validation losses on their
training curves) with --diff, and two GPT traces with --diff: the panels span the PNG's width
(> 85%), one legend with one entry per trace and over no panel, every validation point drawn
above every training line with its own marker, a validation-accuracy panel with each
classifier's points, and a title that names every configuration. Exits 77 without matplotlib.
Usage: plot_loss_test.py [WORKDIR]
"""

import os
import sys
import tempfile
from pathlib import Path

try:
    import h5py
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.image
    import matplotlib.pyplot as plt
    from matplotlib.figure import Figure
    import numpy as np
except ImportError as e:
    print(f"SKIP: {e} (apt-get install python3-matplotlib python3-h5py)")
    sys.exit(77)

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "validate"))
import plot_loss  # noqa: E402

failures = []


def check(ok: bool, what: str) -> None:
    print(("ok: " if ok else "FAIL: ") + what)
    if not ok:
        failures.append(what)


def write_trace(path: Path, config: str, model: str, dp: int, steps: int, every: int,
                accuracy: bool, rng: np.random.Generator) -> dict:
    step = np.arange(1, steps + 1)
    loss = 2.5 * np.exp(-step / steps) + 0.1 * np.sin(step) + 1e-8 * dp * rng.standard_normal(steps)
    val = np.full(steps, np.nan)
    acc = np.full(steps, np.nan)
    at = step % every == 0
    val[at] = loss[at] + 0.01  # on the training curve, as a CNN's early validation is
    if accuracy:
        acc[at] = np.linspace(0.3, 0.8, int(at.sum()))
    path.parent.mkdir(parents=True, exist_ok=True)
    with h5py.File(path, "w") as f:
        for name, x in (("step", step), ("loss", loss), ("val_loss", val), ("val_accuracy", acc),
                        ("val_bleu", np.full(steps, np.nan))):
            f[f"trace/{name}"] = x
        attrs = {"config": config, "model.type": model, "layout.dp": dp, "layout.tp": 1,
                 "layout.pp": 1, "layout.zero": 0, "seed": 1337, "train.batch_size": 64,
                 "train.lr": 0.002, "train.seq_len": 64, "train.micro_batches": 1}
        f.attrs.update(attrs)
    return {"step": step, "val": val, "acc": acc}


def render(paths: list[Path], out: Path):
    """Runs the script's main on these traces; returns the figure it saved and the PNG's width
    in pixels at the dpi it saved with."""
    saved = {}
    original = Figure.savefig

    def spy(fig, fname, *args, **kwargs):
        saved["fig"], saved["dpi"] = fig, kwargs.get("dpi", fig.dpi)
        original(fig, fname, *args, **kwargs)
        fig.canvas.draw()  # what tests read below is laid out as it was saved

    Figure.savefig = spy
    close = plt.close
    plt.close = lambda *a, **k: None  # the figure is read after main returns
    argv = sys.argv
    try:
        sys.argv = ["plot_loss.py", "-o", str(out), "--diff", *map(str, paths)]
        plot_loss.main()
    finally:
        Figure.savefig, plt.close, sys.argv = original, close, argv
    png = matplotlib.image.imread(str(out))
    return saved["fig"], saved["dpi"], png.shape[1]


def check_figure(name: str, paths: list[Path], truth: list[dict], configs: list[str],
                 out: Path) -> None:
    fig, dpi, png_width = render(paths, out)
    n = len(paths)
    panels = [a for a in fig.axes if a.get_visible() and a.axison]
    # Span in inches of the panels' union, against the PNG's width (a cropped or widened save
    # counts).
    x0 = min(a.get_position().x0 for a in panels)
    x1 = max(a.get_position().x1 for a in panels)
    span = (x1 - x0) * fig.get_figwidth() * dpi / png_width
    check(span > 0.85, f"{name}: the panels span {100 * span:.0f}% of the PNG's width (> 85%)")

    legends = list(fig.legends) + [a.get_legend() for a in fig.axes if a.get_legend()]
    entries = sum(len(lg.get_texts()) for lg in legends)
    check(len(legends) == 1 and entries == n,
          f"{name}: one legend with one entry per trace ({len(legends)} legends, {entries} "
          f"entries, {n} traces)")
    renderer = fig.canvas.get_renderer()
    covered = [a for lg in legends for a in panels
               if lg.get_window_extent(renderer).overlaps(a.get_window_extent(renderer))]
    check(not covered, f"{name}: no legend over a panel ({len(covered)} overlaps)")

    # The loss panel: training lines have a line style; validation points are markers alone.
    loss_ax = panels[0]
    lines = [ln for ln in loss_ax.get_lines() if ln.get_linestyle() not in ("None", "none", "")]
    marks = [ln for ln in loss_ax.get_lines() if ln.get_linestyle() in ("None", "none", "")]
    top_line = max(ln.get_zorder() for ln in lines)
    check(len(marks) == n and all(m.get_zorder() > top_line for m in marks),
          f"{name}: {len(marks)} validation marker sets for {n} traces, every one above every "
          f"training line")
    shapes = {(m.get_marker(), round(m.get_markersize(), 1)) for m in marks}
    check(len(shapes) == n, f"{name}: each trace's validation points their own marker "
          f"({len(shapes)} distinct of {n})")
    for t, m in zip(truth, marks):
        v = np.isfinite(t["val"])
        check(np.allclose(m.get_xdata(), t["step"][v]) and np.allclose(m.get_ydata(), t["val"][v]),
              f"{name}: validation points at the trace's steps and values")

    classifiers = [t for t in truth if np.isfinite(t["acc"]).any()]
    acc_axes = [a for a in panels if "accuracy" in a.get_ylabel()]
    if classifiers:
        drawn = 0
        if len(acc_axes) == 1:
            for t in classifiers:
                v = np.isfinite(t["acc"])
                drawn += any(np.allclose(ln.get_xdata(), t["step"][v]) and (
                    np.allclose(ln.get_ydata(), 100 * t["acc"][v]) or
                    np.allclose(ln.get_ydata(), t["acc"][v])) for ln in acc_axes[0].get_lines())
        check(len(acc_axes) == 1 and drawn == len(classifiers),
              f"{name}: a validation-accuracy panel with each of {len(classifiers)} classifiers "
              f"({len(acc_axes)} panels, {drawn} drawn)")
    else:
        check(not acc_axes, f"{name}: no accuracy panel for language models")

    title = " ".join(x.get_text() for x in [fig._suptitle] + [a.title for a in panels] if x)
    missing = [c for c in configs if c not in title]
    check(not missing, f"{name}: the title names every configuration (missing {missing})")
    plt.close(fig)


def main() -> int:
    work = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp())
    work.mkdir(parents=True, exist_ok=True)
    os.chdir(work)
    rng = np.random.default_rng(7)
    runs = [("mlp_dp1", "mlp-fmnist", "mlp", 1, 60, 10), ("mlp_dp2", "mlp-fmnist", "mlp", 2, 60, 10),
            ("alex_dp1", "alexnet-fmnist", "alexnet", 1, 30, 5),
            ("alex_dp2", "alexnet-fmnist", "alexnet", 2, 30, 5)]
    paths = [Path(r[0]) / "trace.h5" for r in runs]
    truth = [write_trace(p, c, m, dp, s, e, True, rng) for p, (_, c, m, dp, s, e) in zip(paths, runs)]
    check_figure("classifiers", paths, truth, ["mlp-fmnist", "alexnet-fmnist"], work / "cls.png")

    gpt = [Path(f"gpt_dp{dp}") / "trace.h5" for dp in (1, 2)]
    truth = [write_trace(p, "gpt-tiny", "gpt", dp, 40, 10, False, rng)
             for p, dp in zip(gpt, (1, 2))]
    check_figure("gpt", gpt, truth, ["gpt-tiny"], work / "gpt.png")
    if failures:
        print(f"FAIL: {len(failures)} checks")
        return 1
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
