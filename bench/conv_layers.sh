#!/usr/bin/env bash
# Conv2d layer timings of mpitron (bench_conv) against PyTorch (bench/torch_conv.py) on the CNN
# shapes at batch 128, float: conv forward + backward, and BatchNorm2d + ReLU forward + backward.
# The two run alternately (the order flips every round) with the same threads, pinned with taskset
# to the first `threads` CPUs; prints per shape the median over rounds of each run's median ms and
# the ratio mpitron/torch. Both on the same footing: OpenBLAS kernels, allocator
# (bench/same_footing.sh).
# Usage: bench/conv_layers.sh [-r rounds] [-t threads] [-b build_dir] [-o out_dir]
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
rounds=5 threads=2 build="$repo/build" out=""
while getopts "r:t:b:o:h" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    t) threads=$OPTARG ;;
    b) build=$OPTARG ;;
    o) out=$OPTARG ;;
    *) sed -n '2,9p' "$0"; exit 2 ;;
  esac
done
python=${PYTHON:-$("$repo/tests/find_python.sh" torch h5py || echo python3)}
bench="$build/bench/bench_conv"
if [[ ! -x $bench ]]; then
  echo "error: $bench is missing: cmake --build $build --target bench_conv" >&2
  exit 1
fi
if ! $python -c "import torch" 2>/dev/null; then
  echo "error: $python cannot import torch (apt-get install python3-torch)" >&2
  exit 1
fi
out=${out:-$(mktemp -d /tmp/conv_layers.XXXXXX)}
mkdir -p "$out"
results="$out/results.jsonl"
: >"$results"

mpitron=$build/mpitron
# shellcheck source=bench/same_footing.sh
source "$here/same_footing.sh"
export OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads
export OMP_PROC_BIND=true OMP_PLACES=cores
pin=()
if command -v taskset >/dev/null && (($(nproc) >= threads)); then
  pin=(taskset -c "0-$((threads - 1))")
fi

run_one() {  # impl
  if [[ $1 == mpitron ]]; then
    "${pin[@]}" "$bench" --threads "$threads" | tee -a "$results"
  else
    "${pin[@]}" "${torch_env[@]}" "$python" "$here/torch_conv.py" --threads "$threads" | tee -a "$results"
  fi
}

echo "threads $threads, $rounds rounds, OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-auto}," \
  "pinned: ${pin[*]:-no}"
for ((r = 1; r <= rounds; r++)); do
  if ((r % 2)); then order=(mpitron torch); else order=(torch mpitron); fi
  for impl in "${order[@]}"; do run_one "$impl"; done
done

$python - "$results" <<'EOF'
import json, statistics, sys
rows = [json.loads(l) for l in open(sys.argv[1]) if l.strip()]
def med(impl, shape, key):
    v = [r[key] for r in rows if r["impl"] == impl and r["shape"] == shape]
    return statistics.median(v) if v else float("nan")
shapes = list(dict.fromkeys(r["shape"] for r in rows))
print()
print(f"{'shape':<15} {'conv m ms':>10} {'conv t ms':>10} {'ratio m/t':>9} "
      f"{'bn+relu m ms':>12} {'bn+relu t ms':>12} {'ratio m/t':>9}")
for s in shapes:
    cm, ct = med("mpitron", s, "conv_ms"), med("torch", s, "conv_ms")
    bm, bt = med("mpitron", s, "bn_relu_ms"), med("torch", s, "bn_relu_ms")
    print(f"{s:<15} {cm:>10.1f} {ct:>10.1f} {cm / ct:>9.2f} {bm:>12.1f} {bt:>12.1f} "
          f"{bm / bt:>9.2f}")
print("conv: forward + backward (dinp, dweight, dbias), batch 128, float; medians over rounds")
EOF
echo "raw results: $results"
