"""The alpha-beta network model's helpers for bench/network_model.sh.

  fit --intra FILE --inter FILE --note TEXT -o OUT.toml
      least squares of time = alpha + bytes * beta on each link class's "bytes seconds" lines
      (bench/pingpong.c, the fastest repetition of each size); the worst error it reports is
      over messages of 64 kB and more
  median TRACE [SKIP]
      the median step_s of a trace.h5 after SKIP warm-up steps (default 2)
  sync TRACE [SKIP]
      the median over those steps of the slowest rank's gradient reduction (rank_grad_sync_us), s
  scaling --mpitron BIN --repo DIR -o OUT.png
      a predicted scaling plot out to 512 nodes for GPT-2 124M and GPT-2 XL on Bridges-2's V100
      nodes, each point from `mpitron plan --nodes` (the figures assumed are in BRIDGES2 below)
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile

import numpy as np


def read_points(path):
    # The fastest repetition: the link's own time, without the scheduling delays of a busy machine.
    pts = np.loadtxt(path, ndmin=2)
    return pts[:, 0], pts[:, 2]


def fit_link(path):
    x, t = read_points(path)
    A = np.stack([np.ones_like(x), x], axis=1)
    (alpha, beta), *_ = np.linalg.lstsq(A, t, rcond=None)
    if alpha < 0:  # the large messages leave no latency above zero: the smallest message's time
        alpha = float(t[np.argmin(x)])
        beta = float(np.sum(x * (t - alpha)) / np.sum(x * x))
    pred = alpha + beta * x
    big = x >= 65536
    worst = float(np.max(np.abs(pred[big] - t[big]) / t[big]))
    return float(alpha), float(beta), worst, x, t


def cmd_fit(a):
    out = [f'note = "{a.note}"']
    for name, path in (("intra_node", a.intra), ("inter_node", a.inter)):
        alpha, beta, worst, x, t = fit_link(path)
        out += ["", f"[{name}]", f"alpha_s = {alpha:.4g}", f"beta_s_per_byte = {beta:.4g}",
                f"# {1e-9 / beta:.3g} GB/s; worst fit error {100 * worst:.0f}% at 64 kB and more, "
                f"{len(x)} sizes {int(x.min())}-{int(x.max())} bytes"]
        print(f"{name}: alpha {alpha * 1e6:.1f} us, beta {beta:.4g} s/byte "
              f"({1e-9 / beta:.3g} GB/s), worst fit error {100 * worst:.0f}% from 64 kB")
    with open(a.out, "w") as f:
        f.write("\n".join(out) + "\n")


def cmd_median(a):
    import h5py
    with h5py.File(a.trace, "r") as f:
        s = np.asarray(f["trace/step_s"])[a.skip:]
    print(f"{np.median(s):.6f}")


def cmd_sync(a):
    import h5py
    with h5py.File(a.trace, "r") as f:
        us = np.asarray(f["trace/rank_grad_sync_us"])[a.skip:]
    print(f"{np.median(us.max(axis=1)) / 1e6:.6f}")


# Bridges-2's GPU nodes (PSC's published figures): 8 NVIDIA V100-32GB SXM2 a node, NVLink between
# them, one HDR InfiniBand 200 Gbit/s link a node. Assumed: NVLink ring 100 GB/s a direction at
# 5 us a message; HDR 25 GB/s at 2 us; a V100 sustaining 40 TFLOP/s in mixed precision (a third
# of its 125 tensor-core peak), a training step costing 6 x parameters x tokens FLOP.
BRIDGES2 = {
    "gpus_per_node": 8,
    "nvlink": (5e-6, 1 / 100e9),
    "hdr": (2e-6, 1 / 25e9),
    "v100_flops": 40e12,
}
MODELS = [  # config, label, parameters, tp, sequences per GPU (seq 1024)
    ("gpt2-124m.toml", "GPT-2 124M, dp (tp 1)", 124e6, 1, 8),
    # 25 heads: no TP that divides a node's 8 GPUs but 1
    ("gpt2-xl.toml", "GPT-2 XL 1.5B, dp (tp 1)", 1.56e9, 1, 8),
]


def plan_terms(binary, args):
    out = subprocess.run([binary, "plan", *args], capture_output=True, text=True)
    if out.returncode != 0:
        sys.exit(f"mpitron plan {' '.join(args)}: {out.stderr.strip()}")
    terms = {}
    for line in out.stdout.splitlines():
        m = re.match(r"^(compute|pipeline bubble|DP gradient all-reduce|TP all-reduces|PP sends|"
                     r"communication|total step)\s+([0-9.]+) s", line)
        if m:
            terms[m.group(1)] = float(m.group(2))
    return terms


def cmd_scaling(a):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    b = BRIDGES2
    nodes = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]
    with tempfile.TemporaryDirectory() as tmp:
        net = os.path.join(tmp, "bridges2.toml")
        with open(net, "w") as f:
            f.write('note = "Bridges-2 V100 nodes, assumed figures (bench/network_model.py)"\n'
                    f"[intra_node]\nalpha_s = {b['nvlink'][0]}\nbeta_s_per_byte = {b['nvlink'][1]}\n"
                    f"[inter_node]\nalpha_s = {b['hdr'][0]}\nbeta_s_per_byte = {b['hdr'][1]}\n")
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4.4))
        for (config, label, params, tp, per_gpu), color in zip(MODELS, ["C0", "C3"]):
            total, comm = [], []
            for n in nodes:
                ranks = n * b["gpus_per_node"]
                batch = per_gpu * ranks // tp  # sequences of 1024 tokens, weak scaling
                step_one = 6 * params * batch * 1024 / b["v100_flops"]  # the batch on one GPU
                t = plan_terms(a.mpitron, [
                    "--config", os.path.join(a.repo, "configs", config), "--batch-size", str(batch),
                    "--seq-len", "1024", "--tp", str(tp), "--nodes", str(n), "--ranks-per-node",
                    str(b["gpus_per_node"]), "--network", net, "--compute-step-s", f"{step_one:.6g}"])
                total.append(t["total step"])
                comm.append(t["communication"])
            ax1.plot(nodes, total, "o-", color=color, label=f"{label}: step")
            ax1.plot(nodes, comm, "s--", color=color, label=f"{label}: communication")
            ax2.plot(nodes, [total[0] / x for x in total], "o-", color=color, label=label)
            print(f"{label}: " + ", ".join(f"{n} nodes {x:.3f} s" for n, x in zip(nodes, total)))
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("nodes (8 V100 each)")
        ax.grid(alpha=0.3)
    ax1.set_yscale("log")
    ax1.set_ylabel("seconds a step")
    ax1.set_title("step time, 8 sequences of 1024 a GPU (weak scaling)", fontsize=9)
    ax1.legend(fontsize=7)
    ax2.set_ylabel("weak-scaling efficiency (1 node's step / N nodes')")
    ax2.set_ylim(0, 1.05)
    ax2.set_title("efficiency", fontsize=9)
    ax2.legend(fontsize=7)
    fig.suptitle("predicted by the alpha-beta model (mpitron plan): Bridges-2 GPU nodes, "
                 "8 V100-32GB, NVLink 100 GB/s 5 us, HDR InfiniBand 200 Gbit/s (25 GB/s) 2 us, "
                 "V100 at 40 TFLOP/s", fontsize=8)
    fig.tight_layout()
    fig.savefig(a.out, dpi=80)
    print(f"wrote {a.out}")


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    f = sub.add_parser("fit")
    f.add_argument("--intra", required=True)
    f.add_argument("--inter", required=True)
    f.add_argument("--note", required=True)
    f.add_argument("-o", "--out", required=True)
    m = sub.add_parser("median")
    m.add_argument("trace")
    m.add_argument("skip", nargs="?", type=int, default=2)
    y = sub.add_parser("sync")
    y.add_argument("trace")
    y.add_argument("skip", nargs="?", type=int, default=2)
    s = sub.add_parser("scaling")
    s.add_argument("--mpitron", required=True)
    s.add_argument("--repo", required=True)
    s.add_argument("-o", "--out", required=True)
    a = p.parse_args()
    {"fit": cmd_fit, "median": cmd_median, "sync": cmd_sync, "scaling": cmd_scaling}[a.cmd](a)


if __name__ == "__main__":
    main()
