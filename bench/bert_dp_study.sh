#!/usr/bin/env bash
# The data-parallel study as a benchmark: one fine-tuning job, the BERT testament classifier
# (configs/bert-testament.toml widened to n_embd 256: 4 layers, 3.3M parameters, 12.7 MiB of
# gradients; global batch 8 x 64 tokens, so the reduction is visible next to the compute), trained
# at dp 2 and dp 4 with --dp-reduce allreduce, ring and gather-scatter, and with allreduce in
# buckets of -k MiB launched during backward (MPI_Iallreduce), plus dp 1 without communication as
# the reference. One compute thread per rank, R rounds in alternating order. Then
# validate/plot_dp_study.py prints the table (median time per step split into compute and exposed
# gradient communication, bytes per rank per step against theory, the share bucketing hides) and
# draws OUT_DIR/dp_study.png. Builds nothing: the binary is $MPITRON, else build/mpitron.
# Usage: bench/bert_dp_study.sh [-s steps] [-w warmup] [-r rounds] [-k bucket_mb] [OUT_DIR]
#   defaults: 30 steps, the first 5 dropped from medians, 3 rounds, 2 MiB buckets,
#   OUT_DIR runs/dp_study (its dp*_r* run folders are replaced)
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
steps=30 warmup=5 rounds=3 bucket=2
while getopts "s:w:r:k:h" opt; do
  case $opt in
    s) steps=$OPTARG ;;
    w) warmup=$OPTARG ;;
    r) rounds=$OPTARG ;;
    k) bucket=$OPTARG ;;
    *) sed -n '2,14p' "$0"; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
out=${1:-$repo/runs/dp_study}
mpitron=${MPITRON:-$repo/build/mpitron}
python=${PYTHON:-$("$repo/tests/find_python.sh" h5py matplotlib numpy || echo python3)}

if [[ ! -x $mpitron ]]; then
  echo "error: no mpitron binary at $mpitron (set MPITRON, or cmake --build build --target" \
    "mpitron)" >&2
  exit 1
fi
if ! $python -c "import h5py, matplotlib, numpy" 2>/dev/null; then
  echo "error: $python cannot import h5py, matplotlib and numpy" \
    "(apt-get install python3-h5py python3-matplotlib)" >&2
  exit 1
fi
command -v mpirun >/dev/null || { echo "error: mpirun is missing" >&2; exit 1; }
if ((steps <= warmup + 1)); then
  echo "error: -s $steps leaves no measured step after $warmup warm-up steps" >&2
  exit 2
fi
data=$repo/data/kjv_verses.txt
[[ -s $data ]] || "$repo/io/get_bible.sh" "$data" --references

cores=$(nproc)  # before OMP_NUM_THREADS is set: nproc obeys it
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

mkdir -p "$out"
rm -rf "$out"/dp*_r*  # this script's run folders and logs from an earlier study
job=(--config "$repo/configs/bert-testament.toml" --set model.n_embd=256 --data "$data"
  --batch-size 8 --seq-len 64 --steps "$steps" --threads 1 --eval-every 0 --eval-batches 1
  --ckpt-every 0 --log-every 1000)

# The grid: "dp reduction bucket_mb" (bucket 0: one reduction after backward).
grid=("1 allreduce 0")
for dp in 2 4; do
  grid+=("$dp allreduce 0" "$dp allreduce $bucket" "$dp ring 0" "$dp gather-scatter 0")
done
total=$((rounds * ${#grid[@]}))
echo "mpitron $mpitron; $total runs (${#grid[@]} configurations x $rounds rounds), $steps steps" \
  "each; $cores cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
if ((cores < 4)); then
  echo "dp 4 puts 4 ranks (one thread each) on $cores cores: oversubscribed, ranks take turns" \
    "on a core, so dp 4 times show the cost of sharing, not a 4-node cluster"
fi
start=$SECONDS
k=0
for ((round = 1; round <= rounds; ++round)); do
  order=("${grid[@]}")
  if ((round % 2 == 0)); then  # alternate the order so drifting load hits every run alike
    order=()
    for ((i = ${#grid[@]} - 1; i >= 0; --i)); do order+=("${grid[i]}"); done
  fi
  for cfg in "${order[@]}"; do
    read -r dp reduce bmb <<<"$cfg"
    k=$((k + 1))
    name=dp${dp}_${reduce}_b${bmb}_r$round
    dir=$out/$name
    what="dp $dp --dp-reduce $reduce"
    ((dp == 1)) && what="dp 1 (no communication)"
    [[ $bmb != 0 ]] && what+=" --bucket-mb $bmb"
    t0=$SECONDS
    if ! mpirun -n "$dp" "$mpitron" train "${job[@]}" --dp "$dp" --dp-reduce "$reduce" \
        --bucket-mb "$bmb" --out "$dir" >"$dir.log" 2>&1; then
      echo "error: run failed, see $dir.log" >&2
      tail -n 20 "$dir.log" >&2
      exit 1
    fi
    rm -f "$dir"/ckpt_*.h5  # the final checkpoint: not needed, 40 MB each
    ms=$($python -c 'import sys, h5py, numpy
with h5py.File(sys.argv[1], "r") as f:
    print("%.0f" % (1e3 * numpy.median(f["trace/step_s"][int(sys.argv[2]):])))' \
      "$dir/trace.h5" "$warmup")
    echo "[$k/$total] round $round: $what: median step $ms ms, run $((SECONDS - t0)) s"
  done
done
echo "grid done in $((SECONDS - start)) s; load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo
$python "$repo/validate/plot_dp_study.py" --warmup "$warmup" "$out" | tee "$out/table.txt"
