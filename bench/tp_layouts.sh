#!/usr/bin/env bash
# Tensor-parallel layouts side by side: for gpt-tiny and gpt2-124m at tp 1, 2 and 4 (one rank per
# TP shard, dp 1), trains a few steps and prints from each trace the median step time, the bytes
# each rank sent per step against the formula of Megatron's scheme, and each rank's parameter and
# peak memory. Formula per step and rank r of p (one micro-batch; allreduce(n) as comm/group.hpp
# counts a ring all-reduce of n floats):
#   (4 L + 2) allreduce(B·T·C) + 3 allreduce(B·T) + the gradient norm's scalar all-reduce
# Usage: bench/tp_layouts.sh [-b build_dir] [-s steps] [-o out_dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
build="$repo/build" steps=6 out=""
while getopts "b:s:o:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    s) steps=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
  esac
done
out=${out:-$(mktemp -d /tmp/tp_layouts.XXXXXX)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
data=$repo/data/kjv.txt
[[ -s $data ]] || { echo "error: $data is missing (io/get_bible.sh $data)" >&2; exit 1; }
cases=("gpt-tiny|$repo/configs/gpt-tiny.toml|16|64" "gpt2-124m|$repo/configs/gpt2-124m.toml|4|64")
for c in "${cases[@]}"; do
  IFS='|' read -r name config batch seq <<<"$c"
  for tp in 1 2 4; do
    run=$out/${name}_tp$tp
    rm -rf "$run"
    echo "$name tp $tp: $steps steps, batch ${batch}x$seq"
    mpirun --bind-to none -n "$tp" "$build/mpitron" train --config "$config" --data "$data" --tp "$tp" \
      --steps "$steps" --batch-size "$batch" --seq-len "$seq" --eval-every 0 --log-every 0 \
      --dropout 0 --out "$run" >"$run.log" 2>&1 || { tail -n 5 "$run.log"; exit 1; }
  done
done
"${PYTHON:-$("$repo/tests/find_python.sh" h5py numpy)}" - "$out" <<'PY'
import statistics, sys, h5py, pathlib
out = pathlib.Path(sys.argv[1])

def chunk(n, p, r):
    q, m = divmod(n, p)
    return q + (1 if r < m else 0)

def allreduce(n, elem, p, r):  # bytes rank r sends in a ring all-reduce (comm/group.hpp)
    if p == 1:
        return 0
    return (2 * n - chunk(n, p, r) - chunk(n, p, (r + 1) % p)) * elem

print(f"{'model':<10} {'tp':>2} {'ms/step':>8} {'sent/step/rank':>15} {'formula':>10} "
      f"{'params/rank':>12} {'peak/rank':>10}")
runs = [r for r in out.glob("*_tp*") if r.is_dir()]
for run in sorted(runs, key=lambda r: (r.name.split("_tp")[0], int(r.name.split("_tp")[1]))):
    with h5py.File(run / "trace.h5", "r") as f:
        a = f.attrs
        L, C = int(a["model.n_layer"]), int(a["model.n_embd"])
        B, T, p = int(a["train.batch_size"]), int(a["train.seq_len"]), int(a["layout.tp"])
        step_s = f["trace/step_s"][1:-1] if len(f["trace/step_s"]) > 2 else f["trace/step_s"][:]
        sent = f["trace/rank_comm_bytes"][1:-1]
        params = f["trace/rank_param_bytes"][-1]
        peak = f["trace/rank_peak_mem_bytes"][-1]
    ms = statistics.median(step_s) * 1e3
    measured = [int(statistics.median(sent[:, r])) for r in range(p)]
    formula = [(4 * L + 2) * allreduce(B * T * C, 4, p, r) + 3 * allreduce(B * T, 4, p, r)
               + allreduce(1, 8, p, r) for r in range(p)]
    ok = "=" if measured == formula else "!="
    mib = lambda x: f"{x / 2**20:.1f} MiB"
    print(f"{run.name.split('_tp')[0]:<10} {p:>2} {ms:>8.1f} {max(measured):>15,} {ok} "
          f"{max(formula):>8,} {mib(max(params)):>12} {mib(max(peak)):>10}")
print("sent/step/rank: the largest rank's median over the steps between the first and the last;"
      " '=' when every rank's figure equals the formula")
PY
echo "runs: $out"
