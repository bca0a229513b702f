#!/usr/bin/env bash
# One rank over many cores: the whole training step (forward, backward, AdamW; bench_step) at 1, 2,
# 4, ... threads up to the cores this process may use, pinned one thread a core. Prints per thread
# count the median ms/step over rounds, the speed-up S(p) over one thread, the efficiency S(p)/p
# and the Karp-Flatt serial fraction e(p) = (1/S - 1/p) / (1 - 1/p); fits Amdahl's law
# 1/S = (1 - f) + f/p for the step's parallel fraction f; and draws OUT/thread_scaling.png (the
# measured speed-up beside Amdahl's curve for that f and the ideal line). The README's "Ranks and
# threads on a node" says how to choose ranks x threads from these figures.
# Usage: bench/thread_scaling.sh [-t "1 2 4 ..."] [-c gpt2-124m|small] [-r ROUNDS] [-b BUILD]
#                                [-o OUT]
#   defaults: threads 1, 2, 4, ... up to the cores (nproc), the gpt2-124m step at batch 4 x 64
#   tokens, 3 rounds (the thread counts in another order each round), OUT a temporary folder.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
threads_list="" model=gpt2-124m rounds=3 build="$repo/build" out=""
while getopts "t:c:r:b:o:h" opt; do
  case $opt in
    t) threads_list=$OPTARG ;;
    c) model=$OPTARG ;;
    r) rounds=$OPTARG ;;
    b) build=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,12p' "$0"; exit 2 ;;
  esac
done
cores=$(nproc)
if [[ -z $threads_list ]]; then
  for ((p = 1; p < cores; p *= 2)); do threads_list+="$p "; done
  threads_list+=$cores
fi
for p in $threads_list; do
  if ((p < 1 || p > cores)); then
    echo "error: $p threads: this process may use $cores cores (nproc); pinned threads need a core each" >&2
    exit 1
  fi
done
case $model in
  gpt2-124m) args=(--config "$repo/configs/gpt2-124m.toml" --batch 4 --seq 64 --steps 5 --warmup 2) ;;
  small) args=(--batch 8 --seq 128 --layers 4 --embd 256 --heads 4 --vocab 256 --steps 10 --warmup 3) ;;
  *) echo "error: -c is gpt2-124m or small, not $model" >&2; exit 1 ;;
esac
bench="$build/bench/bench_step"
[[ -x $bench ]] || { echo "error: $bench is missing: cmake --build $build --target bench_step" >&2; exit 1; }
python=${PYTHON:-$("$repo/tests/find_python.sh" numpy matplotlib)}
out=${out:-$(mktemp -d /tmp/thread_scaling.XXXXXX)}
mkdir -p "$out"
results=$out/results.jsonl
: >"$results"
export OMP_PROC_BIND=close OMP_PLACES=cores
read -ra order <<<"$threads_list"
echo "$model step, threads: ${order[*]} of $cores cores, $rounds rounds, OMP_PROC_BIND=close OMP_PLACES=cores"
for ((r = 1; r <= rounds; r++)); do
  for p in "${order[@]}"; do
    line=$(OMP_NUM_THREADS=$p OPENBLAS_NUM_THREADS=$p "$bench" "${args[@]}" --threads "$p" --json | tail -n 1)
    echo "$line" >>"$results"
    echo "  round $r, $p threads: $("$python" -c 'import json, sys; print("%.1f ms/step" % json.loads(sys.argv[1])["ms_per_step"])' "$line")"
  done
  # Reverse the order each round, so slow drift of the machine hits every count alike.
  for ((i = 0, j = ${#order[@]} - 1; i < j; i++, j--)); do
    t=${order[i]} order[i]=${order[j]} order[j]=$t
  done
done

"$python" - "$results" "$out/thread_scaling.png" "$model" "$cores" <<'PY'
import json, statistics, sys
import numpy as np
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
results, png, model, cores = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
rows = [json.loads(l) for l in open(results) if l.strip()]
ps = sorted({r["threads"] for r in rows})
ms = {p: statistics.median(r["ms_per_step"] for r in rows if r["threads"] == p) for p in ps}
if 1 not in ms:
    sys.exit("error: the speed-up is over one thread: include 1 in -t")
S = {p: ms[1] / ms[p] for p in ps}
# Amdahl: 1/S = (1 - f) + f/p is linear in f: least squares over the counts above one thread.
multi = [p for p in ps if p > 1]
f = float("nan")
if multi:
    x = np.array([1 - 1 / p for p in multi])
    y = np.array([1 - 1 / S[p] for p in multi])
    f = float(np.clip(x @ y / (x @ x), 0.0, 1.0))
print()
print(f"{'threads':>7} {'ms/step':>9} {'speed-up':>9} {'efficiency':>10} {'serial e(p)':>11}")
for p in ps:
    e = (1 / S[p] - 1 / p) / (1 - 1 / p) if p > 1 else float("nan")
    print(f"{p:>7} {ms[p]:>9.1f} {S[p]:>9.2f} {S[p] / p:>10.2f} {e:>11.3f}")
print(f"Amdahl fit: parallel fraction f = {f:.3f}; predicted speed-up at "
      + ", ".join(f"{p} threads {1 / ((1 - f) + f / p):.1f}x" for p in (8, 16, 32, 64, 128)))
fig, ax = plt.subplots(figsize=(7, 5))
grid = np.linspace(1, max(max(ps), 2), 200)
ax.plot(grid, grid, color="gray", linestyle=":", label="ideal")
if multi:
    ax.plot(grid, 1 / ((1 - f) + f / grid), color="C1", label=f"Amdahl, f = {f:.3f}")
ax.plot(ps, [S[p] for p in ps], "o-", color="C0", label="measured (median)")
for p in ps:
    ax.annotate(f"{ms[p]:.0f} ms", (p, S[p]), textcoords="offset points", xytext=(5, -12), fontsize=8)
ax.set_xlabel("threads of one rank (pinned, one a core)")
ax.set_ylabel("speed-up of the training step over one thread")
ax.set_title(f"{model} step on one rank, {cores}-core machine")
ax.grid(True, alpha=0.3)
ax.legend()
fig.tight_layout()
fig.savefig(png, dpi=110)
print(f"wrote {png}")
PY
echo "raw results: $results"
