#!/usr/bin/env bash
# Data-parallel scaling and traffic: trains a fixed global batch (default gpt-tiny, batch 16,
# seq 64, 20 steps, one compute thread per rank) at dp 1, 2, 4 with every --dp-reduce at ZeRO 0,
# plus allreduce and ring at ZeRO 1 and 2, then bench/dp_scaling.py prints a table (median step time
# after the warm-up steps, tokens/s, speed-up over dp 1, bytes sent per step per rank against the
# theoretical 2(N-1)/N x gradient bytes) and draws a PNG. Runs land in runs/bench/ (git-ignored).
# Usage: bench/dp_scaling.sh [-s steps] [-w warmup] [-b batch] [-t seq_len] [-c config]
#          [-d "1 2 4"] [-r rounds] [-k bucket_mb] [-B build_dir] [-o out_dir] [-p png]
#   -r R   run every configuration R times, round by round (default 3); times: median of medians
#   -k X   also run allreduce, ring and gather-scatter at ZeRO 0 with --bucket-mb X
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
steps=20 warmup=3 batch=16 seq=64 config="$repo/configs/gpt-tiny.toml" dps="1 2 4"
bucket="" rounds=3
build="$repo/build" out="$repo/runs/bench/dp_scaling" png=""
while getopts "s:w:b:t:c:d:r:k:B:o:p:h" opt; do
  case $opt in
    s) steps=$OPTARG ;;
    w) warmup=$OPTARG ;;
    b) batch=$OPTARG ;;
    t) seq=$OPTARG ;;
    c) config=$OPTARG ;;
    d) dps=$OPTARG ;;
    r) rounds=$OPTARG ;;
    k) bucket=$OPTARG ;;
    B) build=$OPTARG ;;
    o) out=$OPTARG ;;
    p) png=$OPTARG ;;
    *) sed -n '2,10p' "$0"; exit 2 ;;
  esac
done
png=${png:-$out.png}
python=${PYTHON:-$("$repo/tests/find_python.sh" h5py matplotlib numpy || echo python3)}
bin="$build/mpitron"
if [[ ! -x $bin ]]; then
  echo "error: $bin is missing: cmake --build $build --target mpitron" >&2
  exit 1
fi
if ! $python -c "import h5py, matplotlib, numpy" 2>/dev/null; then
  echo "error: $python cannot import h5py, matplotlib and numpy" \
    "(apt-get install python3-h5py python3-matplotlib)" >&2
  exit 1
fi
data="$repo/data/kjv.txt"
[[ -f $data ]] || "$repo/io/get_bible.sh" "$data"
if (( steps <= warmup + 1 )); then
  echo "error: -s $steps leaves no measured step after $warmup warm-up steps" >&2
  exit 2
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

rm -rf "$out"
mkdir -p "$out"
runs=()
# run NAME DP REDUCE ZERO [BUCKET_MB]
run() {
  local name=$1 dp=$2 reduce=$3 zero=$4 bmb=${5:-}
  local dir="$out/$name"
  local extra=()
  [[ -n $bmb ]] && extra=(--bucket-mb "$bmb")
  echo "== dp=$dp --dp-reduce $reduce --zero $zero${bmb:+ --bucket-mb $bmb} -> $dir" >&2
  if ! mpirun -n "$dp" "$bin" train --config "$config" --data "$data" --steps "$steps" \
      --batch-size "$batch" --seq-len "$seq" --dp "$dp" --dp-reduce "$reduce" --zero "$zero" \
      "${extra[@]}" --threads 1 --eval-every 0 --log-every 1000 --out "$dir" >"$dir.log" 2>&1; then
    echo "error: run failed, see $dir.log" >&2
    tail -20 "$dir.log" >&2
    exit 1
  fi
  runs+=("$dir")
}

for ((round = 1; round <= rounds; ++round)); do
  sfx=""
  if ((rounds > 1)); then sfx="_r$round"; fi
  for dp in $dps; do
    if (( dp == 1 )); then
      run "dp1$sfx" 1 allreduce 0  # no communication: one baseline serves every method
      continue
    fi
    for reduce in allreduce ring gather-scatter; do
      run "dp${dp}_${reduce}_z0$sfx" "$dp" "$reduce" 0
    done
    for zero in 1 2; do
      for reduce in allreduce ring; do
        run "dp${dp}_${reduce}_z$zero$sfx" "$dp" "$reduce" "$zero"
      done
    done
    if [[ -n $bucket ]]; then
      for reduce in allreduce ring gather-scatter; do
        run "dp${dp}_${reduce}_z0_b${bucket}$sfx" "$dp" "$reduce" 0 "$bucket"
      done
    fi
  done
done

$python "$here/dp_scaling.py" --warmup "$warmup" --png "$png" "${runs[@]}" | tee "$out/table.txt"
