#!/usr/bin/env python3
"""Table and PNG of the data-parallel study (bench/bert_dp_study.sh): per DP reduction and dp,
the time per step split into compute and exposed gradient communication, the bytes each rank
sends per step against theory, and the share of the communication that bucketing hides.

Usage: $PYTHON validate/plot_dp_study.py [--warmup 5] [--png PNG] OUT_DIR
       (reads OUT_DIR/*/trace.h5; PNG defaults to OUT_DIR/dp_study.png)

Runs of one configuration (dp, --dp-reduce, --bucket-mb) are rounds: each quantity is the median
over rounds of the run's median over its steps after the first `--warmup` ones.

  step       /trace/step_s: rank 0's wall time of one training step (batch, forward, backward,
             gradient reduction, gradient norm, AdamW, loss all-reduce; evaluation and trace
             gathering excluded).
  exposed    /trace/rank_grad_sync_us, mean over ranks: the time a rank is blocked in gradient
             communication (GradSync::take_comm_seconds): the reductions launched or made by the
             backward hooks (buckets) plus finish_backward's reduction or its wait for the
             buckets. It includes waiting for a slower rank to arrive.
  compute    step - exposed (forward, backward, AdamW, ...: everything else).
  fwd+bwd    /trace/rank_busy_us, mean over ranks (forward and backward; with buckets it also
             holds the hooks' launches).
  hidden     for a bucketed run: 1 - exposed(bucketed) / exposed(same reduction, same dp,
             unbucketed): the fraction of the blocking time of the one-shot reduction that the
             buckets took off the critical path (negative: bucketing made ranks wait longer).
             Per round too, pairing the runs of one round.
  bytes      /trace/rank_comm_bytes per rank, median over the measured steps less the last one
             (which also all-reduces the evaluation figures).

Theory, with p = dp, G = gradient bytes = /trace/param_bytes (4 x the flat buffer, parameters
padded to 16 floats each and the total to a multiple of 16 p; the same on every rank at ZeRO 0)
and c(k) the bytes of ring chunk k (comm::ring_chunk_range):
  allreduce, ring      rank r sends 2G - c(r) - c(r+1 mod p) = 2(p-1)/p G (p divides G/4):
                       reduce-scatter then all-gather. The hand-written ring counts its real
                       sends; MPI_Allreduce/MPI_Iallreduce are counted by this same convention
                       (comm/group.hpp), not observed on the wire.
  gather-scatter       comm::Group::gather_scatter_allreduce_sum: every rank but 0 sends its whole
                       buffer to rank 0 (G) and receives the sum back; rank 0 sends the sum to
                       each of the p-1 others: (p-1) G. Mean over ranks 2(p-1)/p G, as the ring,
                       but rank 0's link carries (p-1) G each way, one message after another.
  buckets              the same per bucket (buckets of --bucket-mb MiB cut from the end of the
                       flat buffer, GradSync's constructor); the sum over ranks is unchanged.
  + the loss all-reduce every step, an 8-byte scalar counted as a ring all-reduce: rank r sends
    16 - 8 [r = 0] - 8 [r = p-1] bytes.
"""

import argparse
import glob
import os
import statistics
import sys

import h5py
import numpy as np

MIB = 2.0**20


def dec(v):
    if isinstance(v, bytes):
        return v.decode()
    if isinstance(v, np.generic):
        return v.item()
    return v


# ---- theory ---------------------------------------------------------------------------------


def chunk_len(n, p, r):
    """Length of comm::ring_chunk_range(n, p, r)."""
    base, rem = divmod(n, p)
    return base + (1 if r < rem else 0)


def ring_bytes(n, elem, p, r):
    """comm::allreduce_bytes_sent: rank r of p all-reducing n elements of elem bytes."""
    if p == 1:
        return 0
    return (2 * n - chunk_len(n, p, r) - chunk_len(n, p, (r + 1) % p)) * elem


def gather_scatter_bytes(n, elem, p, r):
    if p == 1:
        return 0
    return (p - 1) * n * elem if r == 0 else n * elem


def buckets(n, bucket_mb):
    """Float counts of GradSync's buckets: [n] without buckets."""
    if bucket_mb <= 0:
        return [n]
    per = int(min(max(bucket_mb * MIB / 4, 16.0), float(n)))
    out, end = [], n
    while end > 0:
        begin = end - per if end > per else 0
        out.append(end - begin)
        end = begin
    return out


def theory(n, p, method, bucket_mb):
    """Per-rank bytes of one step: (gradient bytes, scalar bytes), lists of p."""
    grad, scal = [0] * p, [0] * p
    for r in range(p):
        for nb in buckets(n, bucket_mb):
            if method == "gather-scatter":
                grad[r] += gather_scatter_bytes(nb, 4, p, r)
            else:
                grad[r] += ring_bytes(nb, 4, p, r)
        scal[r] = ring_bytes(1, 8, p, r)  # the loss
    return grad, scal


# ---- reading --------------------------------------------------------------------------------


def load(run, warmup):
    with h5py.File(os.path.join(run, "trace.h5"), "r") as f:
        a = {k: dec(v) for k, v in f.attrs.items()}
        t = f["trace"]
        if "rank_grad_sync_us" not in t:
            sys.exit(f"error: {run}/trace.h5 has no /trace/rank_grad_sync_us (an mpitron built "
                     "before that column; rebuild)")
        step_s = np.asarray(t["step_s"][:], float)
        loss = np.asarray(t["loss"][:], float)
        rbytes = np.asarray(t["rank_comm_bytes"][:], np.int64)
        busy = np.asarray(t["rank_busy_us"][:], float) / 1e3
        sync = np.asarray(t["rank_grad_sync_us"][:], float) / 1e3
        g = int(t["param_bytes"][0])
    p = int(a["layout.dp"])
    steps = len(step_s)
    if steps <= warmup + 1:
        sys.exit(f"error: {run} has {steps} steps; need more than warm-up {warmup} + 1")
    w = slice(warmup, None)
    counted = rbytes[warmup:-1]
    return dict(
        run=run,
        dp=p,
        method=a["layout.dp_reduce"] if p > 1 else "none",
        bucket=float(a.get("layout.bucket_mb", 0.0)) if p > 1 else 0.0,
        step=1e3 * float(np.median(step_s[w])),
        exposed=float(np.median(sync[w].mean(axis=1))),
        exposed_min=float(np.median(sync[w].min(axis=1))),
        busy=float(np.median(busy[w].mean(axis=1))),
        per_rank=[int(np.median(counted[:, r])) for r in range(p)],
        varies=bool((counted != counted[0]).any()),
        loss=loss,
        G=g,
        attrs=a,
        steps=steps,
    )


def key(r):
    return (r["dp"], r["method"], r["bucket"])


def label(r, sep="\n"):
    if r["dp"] == 1:
        return f"dp1{sep}no comm."
    s = f"dp{r['dp']}{sep}{r['method']}"
    return s + (f"{sep}+{r['bucket']:g} MiB buckets" if r["bucket"] > 0 else "")


# ---- table ----------------------------------------------------------------------------------


def summarise(runs):
    groups = {}
    for r in runs:
        groups.setdefault(key(r), []).append(r)
    rows = []
    for k in sorted(groups, key=lambda k: (k[0], ["none", "allreduce", "ring",
                                                   "gather-scatter"].index(k[1]), k[2])):
        g = sorted(groups[k], key=lambda r: r["run"])
        row = dict(g[0])
        row["rounds"] = g
        for q in ("step", "exposed", "exposed_min", "busy"):
            row[q] = statistics.median(x[q] for x in g)
        row["compute"] = row["step"] - row["exposed"]
        row["step_min"] = min(x["step"] for x in g)
        row["step_max"] = max(x["step"] for x in g)
        row["varies"] = any(x["varies"] or x["per_rank"] != row["per_rank"] for x in g)
        p = row["dp"]
        grad, scal = theory(row["G"] // 4, p, row["method"], row["bucket"])
        row["theory"] = [a + b for a, b in zip(grad, scal)]
        row["theory_grad_mean"] = sum(grad) / p
        row["exact"] = all(x["per_rank"] == row["theory"] for x in g)
        rows.append(row)
    by_key = {key(r): r for r in rows}
    for r in rows:
        r["hidden"], r["hidden_rounds"] = None, []
        if r["bucket"] > 0:
            ref = by_key.get((r["dp"], r["method"], 0.0))
            if ref and ref["exposed"] > 0:
                r["ref_exposed"] = ref["exposed"]
                r["hidden"] = 1 - r["exposed"] / ref["exposed"]
                pairs = zip(sorted(r["rounds"], key=round_of), sorted(ref["rounds"], key=round_of))
                r["hidden_rounds"] = [1 - b["exposed"] / u["exposed"] for b, u in pairs]
                if ref["exposed_min"] > 0:
                    r["ref_exposed_min"] = ref["exposed_min"]
                    r["hidden_min"] = 1 - r["exposed_min"] / ref["exposed_min"]
    return rows


def round_of(r):
    name = os.path.basename(os.path.normpath(r["run"]))
    return name.rsplit("_r", 1)[-1] if "_r" in name else name


def print_table(rows, warmup, cores):
    r0 = rows[0]
    a = r0["attrs"]
    nrounds = max(len(r["rounds"]) for r in rows)
    shape = ", ".join(f"{k} {a['model.' + k]}" for k in ("n_layer", "n_head", "n_embd")
                      if "model." + k in a)
    print(f"{a.get('config', '?')} ({a.get('model.type', '?')}, task {a.get('model.task', '?')};"
          f" {shape}): {a.get('parameters')} parameters, global batch "
          f"{a.get('train.batch_size')} x {a.get('train.seq_len')} tokens, {r0['steps']} steps, "
          f"median of steps {warmup + 1}..{r0['steps']}, median of {nrounds} round(s); one "
          f"compute thread per rank, {cores} cores")
    head = ["dp", "reduction", "step ms", "rounds", "fwd+bwd", "compute", "exposed", "min rank",
            "exp/step",
            "MiB/rank mean", "max rank", "theory mean", "theory max", "check", "hidden"]
    body = []
    for r in rows:
        p = r["dp"]
        meas_mean = sum(r["per_rank"]) / p / MIB
        th_mean = sum(r["theory"]) / p / MIB
        hid = "-" if r["bucket"] == 0 else ("?" if r["hidden"] is None
                                            else f"{100 * r['hidden']:+.0f}%")
        if r["bucket"] == 0 and p > 1:
            hid = "0 (ref)"
        body.append([
            str(p),
            r["method"] + (f" +{r['bucket']:g}MiB buckets" if r["bucket"] > 0 else ""),
            f"{r['step']:.1f}",
            f"{r['step_min']:.0f}-{r['step_max']:.0f}",
            f"{r['busy']:.1f}",
            f"{r['compute']:.1f}",
            f"{r['exposed']:.1f}",
            f"{r['exposed_min']:.1f}",
            f"{100 * r['exposed'] / r['step']:.0f}%",
            f"{meas_mean:.3f}",
            f"{max(r['per_rank']) / MIB:.3f}",
            f"{th_mean:.3f}",
            f"{max(r['theory']) / MIB:.3f}",
            ("exact" if r["exact"] else "MISMATCH") + ("*" if r["varies"] else ""),
            hid,
        ])
    widths = [max(len(h), *(len(b[i]) for b in body)) for i, h in enumerate(head)]
    fmt = lambda cells: "  ".join(c.ljust(w) if i == 1 else c.rjust(w)
                                  for i, (c, w) in enumerate(zip(cells, widths)))
    print(fmt(head))
    print("  ".join("-" * w for w in widths))
    for b in body:
        print(fmt(b))

    gs = ", ".join(f"dp {p}: G = {g} B = {g / MIB:.3f} MiB"
                   for p, g in sorted({(r["dp"], r["G"]) for r in rows if r["dp"] > 1}))
    print()
    print("times in ms per step (rank 0's step_s; rank means of the per-rank columns); rounds: "
          "fastest-slowest round's median step.")
    print("exposed = time a rank is blocked in gradient communication (/trace/rank_grad_sync_us:"
          " the bucket launches in the backward hooks + finish_backward's reduction or wait for "
          "the buckets, incl. waiting for a slower rank), mean over ranks; compute = step - "
          "exposed; min rank = the same for the rank that waited least in each step (the last to "
          "arrive: about the reduction alone; exposed - min rank is mostly waiting for slower "
          "ranks); fwd+bwd = /trace/rank_busy_us (contains the hooks' launches).")
    print("hidden = 1 - exposed(bucketed) / exposed(same reduction and dp, unbucketed): the "
          "share of the one-shot reduction's blocking time that bucketing took off the critical "
          "path; < 0: bucketing made ranks wait longer.")
    for r in rows:
        if r["hidden_rounds"]:
            print(f"  dp {r['dp']} {r['method']} +{r['bucket']:g} MiB buckets: exposed "
                  f"{r['ref_exposed']:.1f} -> {r['exposed']:.1f} ms; hidden per round "
                  + ", ".join(f"{100 * h:+.0f}%" for h in r["hidden_rounds"])
                  + (f"; by the min rank {r['ref_exposed_min']:.1f} -> {r['exposed_min']:.1f} ms,"
                     f" {100 * r['hidden_min']:+.0f}%" if "hidden_min" in r else ""))
    bmb = sorted({r["bucket"] for r in rows if r["bucket"] > 0})
    if bmb:
        nb = {p: len(buckets(g // 4, bmb[0])) for p, g in {(r["dp"], r["G"]) for r in rows}}
        print(f"buckets: {bmb[0]:g} MiB cut from the end of the gradient ("
              + ", ".join(f"dp {p}: {n}" for p, n in sorted(nb.items()) if p > 1)
              + " buckets), each launched as MPI_Iallreduce (comm::Group::iallreduce_sum, the "
              "one non-blocking --dp-reduce) as soon as backward has finished its range; "
              "finish_backward waits for all.")
    print(f"bytes per rank per step, G = gradient bytes ({gs}):")
    print("  allreduce, ring: 2(p-1)/p G on every rank (reduce-scatter + all-gather; rank r: 2G -"
          " c(r) - c(r+1)); gather-scatter: rank 0 (p-1) G, the others G (mean 2(p-1)/p G);")
    print("  buckets: the same per bucket; theory adds the 8-byte loss all-reduce (rank r: 16 - "
          "8[r=0] - 8[r=p-1] B). check: every rank's measured bytes equal theory exactly.")
    print("  MPI_Allreduce/MPI_Iallreduce bytes are counted by the ring convention (comm/group.hpp),"
          " the hand-written ring and gather-scatter count their actual sends.")
    if any(r["varies"] for r in rows):
        print("  *: bytes varied between measured steps (median shown).")
    over = sorted({r["dp"] for r in rows if r["dp"] > cores})
    if over:
        print(f"NOTE: {cores} cores: dp {', '.join(map(str, over))} is oversubscribed (ranks share "
              "cores, OMPI_MCA_mpi_yield_when_idle=1), and every run shares this machine's cores "
              "with whatever else runs on it.")
    print("These are not cluster times: all ranks are processes of one machine, so 'communication'"
          " is shared-memory copying by the same cores that compute (no network, no NIC to move "
          "data while a core computes), and with more ranks than cores compute and communication "
          "take turns on a core.")
    ref = next((r for r in rows if r["dp"] == 1), rows[0])
    worst = 0.0
    for r in rows:
        for x in r["rounds"]:
            n = min(len(x["loss"]), len(ref["loss"]))
            d = np.abs(x["loss"][:n] - ref["loss"][:n]) / np.maximum(np.abs(ref["loss"][:n]),
                                                                      1e-30)
            worst = max(worst, float(d.max()))
    print(f"same work in every run: every loss trace equals the {label(ref, ' ')} one to a "
          f"relative {worst:.1e} (layout invariance).")
    return all(r["exact"] for r in rows)


# ---- plot -----------------------------------------------------------------------------------


def plot(rows, path, cores):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    comm = [r for r in rows if r["dp"] > 1]
    hid = [r for r in rows if r["hidden"] is not None]
    fig, axes = plt.subplots(
        1, 3, figsize=(21, 6.8),
        gridspec_kw={"width_ratios": [len(rows), max(len(comm), 1), max(3.5, 1.6 * len(hid))]})
    ax1, ax2, ax3 = axes
    x = np.arange(len(rows))
    labels = [label(r) for r in rows]

    compute = np.array([r["compute"] for r in rows])
    own = np.array([r["exposed_min"] for r in rows])
    wait = np.array([r["exposed"] - r["exposed_min"] for r in rows])
    ax1.bar(x, compute, width=0.65, color="#4c72b0", label="compute (step - exposed)")
    ax1.bar(x, own, width=0.65, bottom=compute, color="#dd8452",
            label="exposed communication: the reduction (rank that waited least)")
    ax1.bar(x, wait, width=0.65, bottom=compute + own, color="#f3c19c",
            label="exposed communication: waiting for slower ranks (mean - least)")
    lo = [r["step"] - r["step_min"] for r in rows]
    hi = [r["step_max"] - r["step"] for r in rows]
    ax1.errorbar(x, [r["step"] for r in rows], yerr=[lo, hi], fmt="none", ecolor="black",
                 capsize=3, lw=1, label="fastest-slowest round")
    for i, r in enumerate(rows):
        ax1.text(i, r["step_max"] * 1.01, f"{r['step']:.0f}", ha="center", va="bottom", fontsize=8)
    ax1.set_xticks(x)
    ax1.set_xticklabels(labels, fontsize=8)
    ax1.set_ylabel("ms per step (median)")
    ax1.set_title("Time per step: compute + exposed communication")
    ax1.set_ylim(0, max(r["step_max"] for r in rows) * 1.55)  # room for the legend
    over = [i for i, r in enumerate(rows) if r["dp"] > cores]
    if over:
        ax1.axvspan(min(over) - 0.45, max(over) + 0.45, color="grey", alpha=0.12, zorder=0)
        ax1.text(max(over) + 0.4, ax1.get_ylim()[1] * 0.97,
                 f"oversubscribed: {rows[over[0]]['dp']} ranks on {cores} cores", fontsize=8,
                 ha="right", va="top", color="dimgrey")
    ax1.grid(axis="y", alpha=0.3)
    ax1.legend(fontsize=8, loc="upper left")

    xc = np.arange(len(comm))
    mean = [sum(r["per_rank"]) / r["dp"] / MIB for r in comm]
    ax2.bar(xc, mean, width=0.65, color="#55a868", label="measured, mean over ranks")
    ax2.scatter(xc, [max(r["per_rank"]) / MIB for r in comm], marker="^", color="black", zorder=3,
                label="measured, busiest rank")
    ax2.hlines([sum(r["theory"]) / r["dp"] / MIB for r in comm], xc - 0.4, xc + 0.4,
               colors="red", lw=2, zorder=4, label="theory, mean: 2(p-1)/p G")
    skew = [i for i, r in enumerate(comm) if max(r["theory"]) != min(r["theory"])]
    if skew:
        ax2.hlines([max(comm[i]["theory"]) / MIB for i in skew], xc[skew] - 0.4, xc[skew] + 0.4,
                   colors="red", lw=2, linestyles="--", zorder=4,
                   label="theory, rank 0 of gather-scatter: (p-1) G")
    for i, r in enumerate(comm):
        ax2.text(i, max(r["per_rank"]) / MIB * 1.02, f"{max(r['per_rank']) / MIB:.1f}",
                 ha="center", va="bottom", fontsize=8)
    ax2.set_xticks(xc)
    ax2.set_xticklabels([label(r) for r in comm], fontsize=8)
    ax2.set_ylabel("MiB sent per rank per step")
    g = comm[0]["G"] / MIB if comm else 0
    ax2.set_title(f"Bytes per rank per step (G = {g:.1f} MiB of gradients)")
    ax2.set_ylim(0, max([max(r["per_rank"]) / MIB for r in comm] + [1]) * 1.3)
    ax2.grid(axis="y", alpha=0.3)
    ax2.legend(fontsize=8, loc="upper left")

    if hid:
        xh = np.arange(len(hid))
        vals = [100 * r["hidden"] for r in hid]
        span = max([abs(v) for v in vals] + [abs(100 * h) for r in hid for h in r["hidden_rounds"]]
                   + [10])
        ax3.bar(xh, vals, width=0.55, color=["#8172b3" if v >= 0 else "#c44e52" for v in vals],
                label="median rounds")
        for i, r in enumerate(hid):
            pts = [100 * h for h in r["hidden_rounds"]]
            ax3.scatter([i] * len(pts), pts, color="black", s=14, zorder=3,
                        label="each round" if i == 0 else None)
            end = min([vals[i]] + pts) if vals[i] < 0 else max([vals[i]] + pts)
            ax3.text(i, end + (-0.04 if vals[i] < 0 else 0.04) * span,
                     f"{vals[i]:+.0f}%\nexposed {r['ref_exposed']:.0f} -> {r['exposed']:.0f} ms",
                     ha="center", va="top" if vals[i] < 0 else "bottom", fontsize=8)
        ax3.set_ylim(-span * 1.35, span * 1.35)
        ax3.axhline(0, color="black", lw=0.8)
        ax3.set_xticks(xh)
        ax3.set_xticklabels([label(r) for r in hid], fontsize=8)
        ax3.set_ylabel("hidden share (% of the unbucketed exposed time)")
        ax3.legend(fontsize=8, loc="upper left")
    else:
        ax3.text(0.5, 0.5, "no bucketed runs", ha="center", transform=ax3.transAxes)
    ax3.set_title("Hidden by buckets: 1 - exposed(bucketed)\n/ exposed(same reduction, unbucketed)",
                  fontsize=11)
    ax3.grid(axis="y", alpha=0.3)

    a = rows[0]["attrs"]
    fig.suptitle(f"{a.get('config', '')}: {a.get('model.n_layer')} layers, width "
                 f"{a.get('model.n_embd')}, {a.get('parameters')} parameters, global batch "
                 f"{a.get('train.batch_size')} x {a.get('train.seq_len')}; one thread per rank on a "
                 f"{cores}-core machine (shared memory, not a cluster)", fontsize=11)
    fig.tight_layout()
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("out_dir", help="folder holding one sub-folder (trace.h5) per run")
    ap.add_argument("--warmup", type=int, default=5, help="steps dropped from every median")
    ap.add_argument("--png", default=None, help="default OUT_DIR/dp_study.png")
    args = ap.parse_args()
    traces = sorted(glob.glob(os.path.join(args.out_dir, "*", "trace.h5")))
    if not traces:
        sys.exit(f"error: no */trace.h5 under {args.out_dir}")
    runs = [load(os.path.dirname(t), args.warmup) for t in traces]
    rows = summarise(runs)
    cores = os.cpu_count() or 1
    ok = print_table(rows, args.warmup, cores)
    png = args.png or os.path.join(args.out_dir, "dp_study.png")
    plot(rows, png, cores)
    print(f"\nplot: {png}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
