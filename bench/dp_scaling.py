#!/usr/bin/env python3
"""Table and PNG for bench/dp_scaling.sh: step time, tokens/s and bytes sent per step per rank of
data-parallel runs, against the theoretical traffic of each --dp-reduce.

Usage: $PYTHON bench/dp_scaling.py [--warmup 3] [--png PNG] RUN_DIR...
       (PNG defaults to runs/bench/dp_scaling.png)

Each RUN_DIR holds the trace.h5 of one `mpitron train` run (and, for the exact gradient size, its
final checkpoint); runs of one configuration are rounds, reduced to the median of their median
step times. Step time is the median over the steps after the warm-up ones; bytes are the
per-rank median over the same steps less the last one (which also all-reduces the validation
loss), then the mean and the max over ranks.

Theory, with N = dp and G = 4 x the flat gradient buffer in bytes (the parameter count, each
tensor padded to 16 floats, the total padded to a multiple of 16·N floats; gpt_build):
  allreduce, ring (ZeRO 0)   every rank 2(N-1)/N·G  (ring reduce-scatter + all-gather)
  gather-scatter             root (N-1)·G, the others G: mean 2(N-1)/N·G, max (N-1)·G
  ZeRO 1/2, allreduce|ring   reduce-scatter (N-1)/N·G + all-gather of parameters (N-1)/N·G
                             = 2(N-1)/N·G on every rank, as for a ring all-reduce (ZeRO 2
                             reduce-scatters block by block during backward, every micro-batch:
                             M micro-batches make it M·(N-1)/N·G)
  ZeRO 1/2, gather-scatter   gather-scatter (M times at ZeRO 2) + all-gather
Scalars on top (comm/group.hpp counts a scalar as a 1-element ring all-reduce of 8 bytes: rank r
sends 16 - 8·[r = 0] - 8·[r = N-1] bytes): the loss every step, the squared gradient norm too
under ZeRO. The "check" column compares every rank's measured bytes with gradient + scalars
exactly (with --bucket-mb only the sum over ranks, which bucketing does not change).
"""

import argparse
import os
import statistics
import sys

import h5py
import numpy as np

SCALAR = 8  # bytes of a double


def chunk(n, p, r):
    """comm::ring_chunk_range: bytes-agnostic [begin, end) of chunk r of n elements over p parts."""
    base, rem = divmod(n, p)
    begin = r * base + min(r, rem)
    return begin, begin + base + (1 if r < rem else 0)


def clen(n, p, r):
    b, e = chunk(n, p, r)
    return e - b


def allreduce_bytes(n, elem, p, r):
    """comm::allreduce_bytes_sent."""
    if p == 1:
        return 0
    return (2 * n - clen(n, p, r) - clen(n, p, (r + 1) % p)) * elem


def padded_floats(run, parameters, dp):
    """Floats in the flat gradient buffer: registry size (tensors padded to 16) padded to 16·dp."""
    reg = None
    ckpts = sorted(f for f in os.listdir(run) if f.startswith("ckpt_") and f.endswith(".h5"))
    if ckpts:
        with h5py.File(os.path.join(run, ckpts[-1]), "r") as f:
            if "params" in f:
                reg = sum((f["params"][k].size + 15) // 16 * 16 for k in f["params"])
    if reg is None:
        reg = (parameters + 15) // 16 * 16  # exact when every tensor is a multiple of 16
    unit = 16 * dp
    return (reg + unit - 1) // unit * unit


def predict(n, p, method, zero, micro=1):
    """Per-rank bytes a step sends: (gradient/parameter traffic, scalar traffic), lists of p."""
    G = 4 * n
    grad, scal = [0] * p, [0] * p
    if p == 1:
        return grad, scal
    # ZeRO 2 reduces the gradient segments of every micro-batch as backward produces them (the
    # segments tile the padded buffer); ZeRO 0 and 1 reduce once per step.
    times = micro if zero == 2 else 1
    shard = n // p  # ZeRO shards: equal, the buffer being padded to 16·p floats
    for r in range(p):
        if method == "gather-scatter":
            g = times * ((p - 1) * G if r == 0 else G)
        elif zero == 0:
            g = allreduce_bytes(n, 4, p, r)
        else:  # reduce-scatter: n - own shard; all-gather of parameters: n - one shard
            g = 4 * (times * (n - shard) + (n - shard))
        if zero > 0 and method == "gather-scatter":
            g += (p - 1) * shard * 4  # parameters all-gathered after the sharded update
        grad[r] = g
        scalars = 1 + (1 if zero > 0 else 0)  # loss, + squared grad norm under ZeRO
        scal[r] = scalars * allreduce_bytes(1, SCALAR, p, r)
    return grad, scal


def load(run, warmup):
    with h5py.File(os.path.join(run, "trace.h5"), "r") as f:
        a = dict(f.attrs)
        t = f["trace"]
        step_s = np.asarray(t["step_s"][:], dtype=float)
        rank_bytes = np.asarray(t["rank_comm_bytes"][:], dtype=np.int64)
    dec = lambda v: v.decode() if isinstance(v, bytes) else str(v)
    dp = int(a["layout.dp"])
    steps = len(step_s)
    if steps <= warmup + 1:
        sys.exit(f"error: {run} has {steps} steps, need more than warm-up {warmup} + 1")
    timed = step_s[warmup:]
    counted = rank_bytes[warmup:-1]  # the last step also all-reduces the validation loss
    per_rank = [int(statistics.median(counted[:, r])) for r in range(dp)]
    varies = bool((counted != counted[0]).any())
    tokens = int(a["train.batch_size"]) * int(a["train.seq_len"])
    n = padded_floats(run, int(a["parameters"]), dp)
    return dict(
        run=run,
        dp=dp,
        method=dec(a["layout.dp_reduce"]) if dp > 1 else "-",
        zero=int(a["layout.zero"]),
        bucket=float(a.get("layout.bucket_mb", 0.0)),
        ms=1e3 * statistics.median(timed),
        tok_s=tokens / statistics.median(timed),
        per_rank=per_rank,
        varies=varies,
        n=n,
        tokens=tokens,
        micro=int(a.get("train.micro_batches", 1)),
        config=dec(a["config"]),
        batch=int(a["train.batch_size"]),
        seq=int(a["train.seq_len"]),
        steps=steps,
        parameters=int(a["parameters"]),
    )


def label(r):
    if r["dp"] == 1:
        return "none"
    s = r["method"] + (f" z{r['zero']}" if r["zero"] else "")
    return s + (f" b{r['bucket']:g}MB" if r["bucket"] > 0 else "")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--png", default="runs/bench/dp_scaling.png")
    args = ap.parse_args()

    groups = {}
    for run in args.runs:
        r = load(run, args.warmup)
        groups.setdefault((r["dp"], r["method"], r["zero"], r["bucket"]), []).append(r)
    rows = []
    for g in groups.values():  # repeated runs of one configuration: median of their medians
        r = dict(g[0])
        r["rounds"] = len(g)
        r["ms"] = statistics.median(x["ms"] for x in g)
        r["spread"] = (max(x["ms"] for x in g) - min(x["ms"] for x in g)) / r["ms"]
        r["tok_s"] = r["tokens"] / (r["ms"] / 1e3)
        r["varies"] = any(x["varies"] or x["per_rank"] != r["per_rank"] for x in g)
        rows.append(r)
    rows.sort(key=lambda r: (r["dp"], r["method"], r["zero"], r["bucket"]))
    base = next((r for r in rows if r["dp"] == 1), None)
    ok_all = True
    for r in rows:
        p = r["dp"]
        grad, scal = predict(r["n"], p, r["method"], r["zero"], r["micro"])
        r["theory_mean"] = sum(grad) / p
        r["theory_max"] = max(grad)
        r["scalar_mean"] = sum(scal) / p
        r["meas_mean"] = sum(r["per_rank"]) / p
        r["meas_max"] = max(r["per_rank"])
        want = [g + s for g, s in zip(grad, scal)]
        if r["bucket"] > 0:
            exact = sum(r["per_rank"]) == sum(want)
        else:
            exact = r["per_rank"] == want
        r["check"] = ("exact" if exact else "MISMATCH") + ("*" if r["varies"] else "")
        ok_all &= exact
        r["speedup"] = r["tok_s"] / base["tok_s"] if base else float("nan")
        r["ratio"] = r["meas_mean"] / r["theory_mean"] if r["theory_mean"] else float("nan")

    rounds = max(r["rounds"] for r in rows)
    head = ["dp", "dp-reduce", "zero", "step ms", *(["range"] if rounds > 1 else []), "tok/s",
            "speed-up", "meas B mean", "meas B max",
            "theory B mean", "theory B max", "meas/theory", "extra B", "check"]
    body = []
    for r in rows:
        nan = r["theory_mean"] == 0
        spread = [f"{100 * r['spread']:.0f}%"] if rounds > 1 else []
        body.append([
            str(r["dp"]), r["method"] + (f" b{r['bucket']:g}MB" if r["bucket"] > 0 else ""),
            str(r["zero"]), f"{r['ms']:.1f}", *spread,
            f"{r['tok_s']:.0f}", "-" if base is None else f"{r['speedup']:.2f}",
            f"{r['meas_mean']:.0f}", f"{r['meas_max']}", f"{r['theory_mean']:.0f}",
            f"{r['theory_max']}", "-" if nan else f"{r['ratio']:.6f}",
            f"{r['meas_mean'] - r['theory_mean']:.0f}", r["check"],
        ])
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    left = {1}
    fmt = lambda cells: "  ".join(c.ljust(w) if i in left else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    r0 = rows[0]
    cores = os.cpu_count()
    print(f"{r0['config']}: {r0['parameters']} parameters, global batch {r0['batch']}x{r0['seq']} "
          f"= {r0['tokens']} tokens/step, {r0['steps']} steps (median of steps "
          f"{args.warmup + 1}..{r0['steps']}"
          + (f", median over {r0['rounds']} interleaved runs" if r0["rounds"] > 1 else "")
          + "), one compute thread per rank")
    print(fmt(head))
    print("  ".join("-" * w for w in widths))
    for b in body:
        print(fmt(b))
    gs = ", ".join(f"dp {dp}: G = {4 * n} B" for dp, n in sorted({(r["dp"], r["n"]) for r in rows
                                                                 if r["dp"] > 1}))
    print(f"\nG = gradient bytes = 4 x flat buffer (parameters padded to 16·dp floats); {gs}.")
    print("theory (gradients/parameters only): allreduce, ring and ZeRO 1/2 (reduce-scatter + "
          "all-gather) 2(N-1)/N·G on every rank; gather-scatter root (N-1)·G, others G (mean "
          "2(N-1)/N·G).")
    print("extra B = measured mean - theory mean: the 8-byte scalar all-reduces (loss; + grad-norm "
          "square under ZeRO), 2(N-1)/N·8 B each per rank on average.")
    print("check: every rank's measured bytes equal gradient + scalar bytes exactly "
          "(bucketed: the sum over ranks)" + ("" if ok_all else "  -- MISMATCHES ABOVE") + ".")
    print("bytes are what comm::Group counts per rank (comm/group.hpp): the hand-written ring and "
          "gather-scatter count their real sends; MPI_Allreduce/Reduce_scatter/Allgather are "
          "counted by the ring convention, not measured on the wire.")
    if rounds > 1:
        print("range: (slowest - fastest) / median of the rounds' median step times.")
    over = [r["dp"] for r in rows if r["dp"] > cores]
    if over:
        dps = ", ".join(map(str, sorted(set(over))))
        print(f"NOTE: this machine has {cores} cores, so dp {dps}"
              f" is oversubscribed (ranks share cores, OMPI_MCA_mpi_yield_when_idle=1): its times "
              f"show the overhead trend, not speed-up beyond {cores} ranks.")
    if any(r["varies"] for r in rows):
        print("*: bytes varied between measured steps (median shown).")

    plot(rows, args.png, cores)
    print(f"\nplot: {args.png}")
    return 0 if ok_all else 1


def plot(rows, path, cores):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ncomm = sum(1 for r in rows if r["dp"] > 1)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(6.5 + max(6.5, 0.62 * ncomm), 5),
                                   gridspec_kw={"width_ratios": [6.5, max(6.5, 0.62 * ncomm)]})
    base = next((r for r in rows if r["dp"] == 1), None)
    labels = []
    for r in rows:
        if r["dp"] > 1 and label(r) not in labels:
            labels.append(label(r))
    colors = {l: plt.cm.tab10(i % 10) for i, l in enumerate(labels)}
    dps = sorted({r["dp"] for r in rows})
    for l in labels:
        pts = [(r["dp"], r["tok_s"]) for r in rows if label(r) == l]
        if base:
            pts = [(1, base["tok_s"])] + pts
        pts.sort()
        ax1.plot(*zip(*pts), marker="o", label=l, color=colors[l])
    if base:
        ideal = [(d, base["tok_s"] * min(d, cores)) for d in dps]
        ax1.plot(*zip(*ideal), ls=":", color="grey", label=f"linear up to {cores} cores")
    if max(dps) > cores:
        ax1.axvspan(cores + 0.05, max(dps) + 0.3, color="grey", alpha=0.12)
        ax1.text(cores + 0.15, 0.03, f"oversubscribed: > {cores} cores", va="bottom", fontsize=8,
                 color="dimgrey", transform=ax1.get_xaxis_transform())
    ax1.set_xticks(dps)
    ax1.set_xlabel("dp (ranks, one thread each)")
    ax1.set_ylabel("tokens/s (median step)")
    ax1.set_title("Throughput, fixed global batch")
    ax1.set_ylim(bottom=0)
    ax1.grid(alpha=0.3)
    ax1.legend(fontsize=8)

    comm = [r for r in rows if r["dp"] > 1]
    x = np.arange(len(comm))
    mb = 1 / 2**20
    ax2.bar(x, [r["meas_mean"] * mb for r in comm], width=0.6,
            color=[colors[label(r)] for r in comm], alpha=0.8, label="measured, mean over ranks")
    ax2.scatter(x, [r["meas_max"] * mb for r in comm], marker="^", color="black", zorder=3,
                label="measured, max rank")
    ax2.hlines([r["theory_mean"] * mb for r in comm], x - 0.38, x + 0.38, colors="red", lw=2,
               zorder=4, label="theory, mean over ranks (2(N-1)/N·G)")
    skew = [i for i, r in enumerate(comm) if r["theory_max"] != r["theory_mean"]]
    if skew:
        ax2.hlines([comm[i]["theory_max"] * mb for i in skew], x[skew] - 0.38, x[skew] + 0.38,
                   colors="red", lw=2, linestyles="--", zorder=4,
                   label="theory, max rank (gather-scatter root (N-1)·G)")
    top = max(max(r["meas_max"], r["theory_max"]) for r in comm) * mb if comm else 1
    ax2.set_ylim(0, top * 1.35)
    ax2.set_xticks(x)
    ax2.set_xticklabels([f"dp{r['dp']}\n" + label(r).replace(" ", "\n").replace("r-s", "r-\ns")
                         for r in comm], fontsize=7)
    ax2.set_ylabel("MiB sent per step per rank")
    ax2.set_title("Gradient traffic: measured vs theory")
    ax2.grid(axis="y", alpha=0.3)
    ax2.legend(fontsize=8, loc="upper left")
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)


if __name__ == "__main__":
    sys.exit(main())
