#!/usr/bin/env bash
# Training step time of the CNN presets in mpitron against PyTorch (bench/torch_cnn_step.py: the
# same networks from torch modules, AdamW) at the same batch and thread count, run alternately
# (the order flips every round) so that machine noise hits both alike. Prints per family the
# median over rounds of each side's median step time, images/s and the ratio mpitron/torch.
# mpitron's step includes drawing the batch (augmentation off); torch's reuses one random batch.
# Usage: bench/cnn_step.sh [-r rounds] [-t threads] [-s steps] [-b build_dir]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
rounds=3 threads=2 steps=20 build="$repo/build"
while getopts "r:t:s:b:h" opt; do
  case $opt in
    r) rounds=$OPTARG ;;
    t) threads=$OPTARG ;;
    s) steps=$OPTARG ;;
    b) build=$OPTARG ;;
    *) sed -n '2,7p' "$0"; exit 2 ;;
  esac
done
python=${PYTHON:-$("$repo/tests/find_python.sh" torch h5py || echo python3)}
mpitron=$build/mpitron
[[ -x $mpitron ]] || { echo "error: $mpitron is missing (make build)" >&2; exit 1; }
$python -c "import torch" 2>/dev/null || { echo "error: $python cannot import torch" >&2; exit 1; }
out=$(mktemp -d /tmp/cnn_step.XXXXXX)
# shellcheck source=bench/same_footing.sh
source "$here/same_footing.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=$threads
batch=64
declare -A mp_args=(
  [alexnet]="--set model.width=32 --set model.hidden=256"
  [resnet]="--set model.width=16 --set model.blocks_per_stage=1"
)
declare -A torch_args=([alexnet]="--width 32 --hidden 256" [resnet]="--width 16 --blocks 1")

mpitron_step() {  # family round: median step_s of a run, steps 3.. (the first warm up)
  local dir=$out/$1_$2
  # shellcheck disable=SC2086  # the args are words
  "$mpitron" train --config "$repo/configs/$1-fmnist.toml" ${mp_args[$1]} --set train.augment=0 \
    --batch-size $batch --steps "$steps" --eval-every 0 --log-every "$steps" --out "$dir" \
    --threads "$threads" >/dev/null
  $python -c "
import sys, h5py, statistics
with h5py.File(sys.argv[1], 'r') as f:
    print(statistics.median(f['trace/step_s'][2:]))" "$dir/trace.h5"
}
torch_step() {
  # shellcheck disable=SC2086
  "${torch_env[@]}" $python "$here/torch_cnn_step.py" "$1" ${torch_args[$1]} --batch $batch \
    --steps "$steps" --threads "$threads" | $python -c "import json, sys; print(json.load(sys.stdin)['step_s'])"
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

printf '%-8s %12s %12s %14s %14s %8s\n' family mpitron_ms torch_ms mpitron_img/s torch_img/s ratio
for family in alexnet resnet; do
  : >"$out/$family.mp" && : >"$out/$family.torch"
  for ((r = 0; r < rounds; r++)); do
    if ((r % 2 == 0)); then
      mpitron_step "$family" "$r" >>"$out/$family.mp"; torch_step "$family" >>"$out/$family.torch"
    else
      torch_step "$family" >>"$out/$family.torch"; mpitron_step "$family" "$r" >>"$out/$family.mp"
    fi
  done
  m=$(median <"$out/$family.mp") t=$(median <"$out/$family.torch")
  awk -v f="$family" -v m="$m" -v t="$t" -v b=$batch 'BEGIN {
    printf "%-8s %12.1f %12.1f %14.0f %14.0f %8.2f\n", f, m * 1e3, t * 1e3, b / m, b / t, m / t }'
done
echo "(batch $batch, $threads threads, $rounds rounds of $steps steps; ratio < 1: mpitron faster)"
