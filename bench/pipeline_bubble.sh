#!/usr/bin/env bash
# Pipeline schedules side by side: trains gpt-tiny's width with 8 blocks at pp P and M micro-batches
# with gpipe, 1f1b and interleaved (V 2), and prints per schedule the measured bubble (median of the
# trace's /trace/bubble after the first step: 1 - time every rank computed / (ranks x the slowest
# rank's walk)), the simulator's and the theory's ((P-1)/(M+P-1); interleaved (P-1)/(V*M+P-1)),
# the median step time, and the activation bytes each stage keeps (/trace/rank_activation_bytes:
# activation sets, backward scratch, message buffers). Then the memory bound: gpipe and 1f1b at 8
# and at -l micro-batches of one sequence each (one step), activation bytes per stage.
# With more ranks than cores the ranks share cores and the measured bubble is not the schedule's:
# run it where the machine has at least P cores.
# Usage: bench/pipeline_bubble.sh [-b build_dir] [-p pp] [-m micro_batches] [-s steps]
#                                 [-l many_micro_batches] [-o out_dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
build="$repo/build" pp=4 micro=8 steps=8 many=1000 out=""
while getopts "b:p:m:s:l:o:h" opt; do
  case $opt in
    b) build=$OPTARG ;;
    p) pp=$OPTARG ;;
    m) micro=$OPTARG ;;
    s) steps=$OPTARG ;;
    l) many=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,13p' "$0"; exit 2 ;;
  esac
done
out=${out:-$(mktemp -d /tmp/pipeline_bubble.XXXXXX)}
mkdir -p "$out"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1 OMP_NUM_THREADS=1
data=$repo/data/kjv.txt
[[ -s $data ]] || { echo "error: $data is missing (io/get_bible.sh $data)" >&2; exit 1; }
config=$out/gpt-8-blocks.toml
sed 's/^n_layer = .*/n_layer = 8/' "$repo/configs/gpt-tiny.toml" >"$config"
echo "pp $pp, $micro micro-batches of 2x64 tokens, $steps steps; $(getconf _NPROCESSORS_ONLN) cores for $pp ranks"

train() {  # run_name micro batch steps flags...
  local run=$out/$1 m=$2 batch=$3 n=$4
  shift 4
  rm -rf "$run"
  mpirun --bind-to none -n "$pp" "$build/mpitron" train --config "$config" --data "$data" \
    --pp "$pp" --micro-batches "$m" --batch-size "$batch" --seq-len 64 --steps "$n" \
    --eval-every 0 --eval-batches 1 --log-every 0 --dropout 0 --out "$run" "$@" >"$run.log" 2>&1 ||
    { tail -n 5 "$run.log"; exit 1; }
}
train gpipe "$micro" $((2 * micro)) "$steps" --schedule gpipe
train 1f1b "$micro" $((2 * micro)) "$steps" --schedule 1f1b
train interleaved "$micro" $((2 * micro)) "$steps" --schedule interleaved --virtual-stages 2
for s in gpipe 1f1b; do
  for m in 8 "$many"; do train "mem_${s}_m$m" "$m" "$m" 1 --schedule "$s"; done
done
for s in gpipe 1f1b interleaved; do
  v=1 && [[ $s == interleaved ]] && v=2
  "$build/mpitron" schedule --pp "$pp" --micro-batches "$micro" --schedule "$s" \
    --virtual-stages "$v" --png "$out/$s.png" >"$out/$s.schedule.txt"
done
"${PYTHON:-$("$repo/tests/find_python.sh" h5py numpy)}" - "$out" "$many" <<'PY'
import re, statistics, sys, h5py, pathlib
out, many = pathlib.Path(sys.argv[1]), sys.argv[2]
mib = lambda b: f"{b / 2**20:.2f}"
print(f"\n{'schedule':<12} {'measured':>9} {'simulated':>9} {'theory':>7} {'ms/step':>8}  "
      "activation MiB per stage")
for s in ["gpipe", "1f1b", "interleaved"]:
    with h5py.File(out / s / "trace.h5", "r") as f:
        bubble = statistics.median(f["trace/bubble"][1:])
        ms = statistics.median(f["trace/step_s"][1:]) * 1e3
        acts = f["trace/rank_activation_bytes"][-1]
    text = (out / f"{s}.schedule.txt").read_text()
    sim, theory = re.search(r"bubble: simulated ([0-9.]+), theoretical ([0-9.]+)", text).groups()
    print(f"{s:<12} {bubble:>9.3f} {float(sim):>9.3f} {float(theory):>7.3f} {ms:>8.1f}  "
          + " ".join(mib(a) for a in acts))
print(f"\nactivation MiB per stage (one sequence per micro-batch)")
print(f"{'schedule':<12} {'m':>5}  per stage")
for s in ["gpipe", "1f1b"]:
    for m in ["8", many]:
        with h5py.File(out / f"mem_{s}_m{m}" / "trace.h5", "r") as f:
            acts = f["trace/rank_activation_bytes"][-1]
        print(f"{s:<12} {m:>5}  " + " ".join(mib(a) for a in acts))
print(f"\ntimelines: {out}/{{gpipe,1f1b,interleaved}}.png")
PY
