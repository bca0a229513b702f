#!/usr/bin/env bash
# Training step time of mpitron against PyTorch per family, at the same batch and thread count,
# run alternately (the order flips every round) so that machine noise hits both alike. Prints per
# family the median over rounds of each side's median step time, samples/s and the ratio
# mpitron/torch.
#   alexnet, resnet: the CNN presets (narrowed), batch 64 of 28x28 images, against
#     bench/torch_cnn_step.py (torch modules, AdamW); mpitron's step includes drawing the batch
#     (augmentation off), torch's reuses one random batch.
#   bert: a BERT-base-shaped encoder (12 layers, width 768, 12 heads, post-LN) on the byte
#     vocabulary (261), masked LM, batch 4 x 128 tokens, dropout off, clipping and AdamW, against
#     bench/torch_bert_step.py (validate/bert_torch.py's encoder); mpitron draws KJV windows.
# Both sides on the same footing (bench/same_footing.sh).
# Usage: bench/family_step.sh [-f "alexnet resnet bert"] [-r rounds] [-t threads] [-s steps]
#                             [-b build_dir] [-p previous_build_dir]
#   steps: per run, the first 2 warm up (default 20; bert 6)
#   -p: a build of an earlier commit, run in the same rounds (columns before_ms, new/before)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
rounds=3 threads=2 steps="" build="$repo/build" families="alexnet resnet bert" prev=""
while getopts "f:r:t:s:b:p:h" opt; do
  case $opt in
    f) families=$OPTARG ;;
    r) rounds=$OPTARG ;;
    t) threads=$OPTARG ;;
    s) steps=$OPTARG ;;
    b) build=$OPTARG ;;
    p) prev=$OPTARG ;;
    *) sed -n '2,17p' "$0"; exit 2 ;;
  esac
done
python=${PYTHON:-$("$repo/tests/find_python.sh" torch h5py || echo python3)}
mpitron=$build/mpitron
[[ -x $mpitron ]] || { echo "error: $mpitron is missing (make build)" >&2; exit 1; }
[[ -z $prev || -x $prev/mpitron ]] || { echo "error: $prev/mpitron is missing" >&2; exit 1; }
$python -c "import torch" 2>/dev/null || { echo "error: $python cannot import torch" >&2; exit 1; }
out=$(mktemp -d /tmp/family_step.XXXXXX)
trap 'rm -rf "$out"' EXIT # its runs' checkpoints take GBs (BERT-base: 1.3 GB each)
# shellcheck source=bench/same_footing.sh
source "$here/same_footing.sh"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMP_NUM_THREADS=$threads
declare -A batch=([alexnet]=64 [resnet]=64 [bert]=4) default_steps=([alexnet]=20 [resnet]=20 [bert]=6)
declare -A mp_args=(
  [alexnet]="--config $repo/configs/alexnet-fmnist.toml --set model.width=32 --set model.hidden=256
    --set train.augment=0"
  [resnet]="--config $repo/configs/resnet-fmnist.toml --set model.width=16
    --set model.blocks_per_stage=1 --set train.augment=0"
  [bert]="--config $repo/configs/bert-mlm.toml --set model.n_layer=12 --set model.n_head=12
    --set model.n_embd=768 --set model.block_size=128 --set train.seq_len=128
    --set train.dropout=0 --set train.grad_clip=1"
)
declare -A torch_args=(
  [alexnet]="$here/torch_cnn_step.py alexnet --width 32 --hidden 256"
  [resnet]="$here/torch_cnn_step.py resnet --width 16 --blocks 1"
  [bert]="$here/torch_bert_step.py --layers 12 --heads 12 --embd 768 --seq 128"
)

mpitron_step() {  # family round [binary]: median step_s of a run, steps 3.. (the first warm up)
  local dir=$out/$1_$2_${3:+prev} bin=${3:-$mpitron}
  # shellcheck disable=SC2086  # the args are words
  "$bin" train ${mp_args[$1]} --batch-size ${batch[$1]} --steps "${steps:-${default_steps[$1]}}" \
    --eval-every 0 --log-every 1000 --out "$dir" --threads "$threads" >/dev/null
  $python -c "
import sys, h5py, statistics
with h5py.File(sys.argv[1], 'r') as f:
    print(statistics.median(f['trace/step_s'][2:]))" "$dir/trace.h5"
}
torch_step() {
  # shellcheck disable=SC2086
  "${torch_env[@]}" $python ${torch_args[$1]} --batch ${batch[$1]} \
    --steps "${steps:-${default_steps[$1]}}" --threads "$threads" |
    $python -c "import json, sys; print(json.load(sys.stdin)['step_s'])"
}
median() { sort -g | awk '{a[NR] = $1} END {print (NR % 2) ? a[(NR + 1) / 2] : (a[NR / 2] + a[NR / 2 + 1]) / 2}'; }

printf '%-8s %12s %12s %16s %16s %8s' family mpitron_ms torch_ms mpitron_samples/s torch_samples/s ratio
[[ -z $prev ]] && echo || printf ' %10s %11s\n' before_ms new/before
for family in $families; do
  [[ -n ${batch[$family]:-} ]] || { echo "error: no family $family (alexnet, resnet, bert)" >&2; exit 1; }
  : >"$out/$family.mp" && : >"$out/$family.torch" && : >"$out/$family.prev"
  for ((r = 0; r < rounds; r++)); do
    if ((r % 2 == 0)); then
      mpitron_step "$family" "$r" >>"$out/$family.mp"; torch_step "$family" >>"$out/$family.torch"
      [[ -z $prev ]] || mpitron_step "$family" "$r" "$prev/mpitron" >>"$out/$family.prev"
    else
      [[ -z $prev ]] || mpitron_step "$family" "$r" "$prev/mpitron" >>"$out/$family.prev"
      torch_step "$family" >>"$out/$family.torch"; mpitron_step "$family" "$r" >>"$out/$family.mp"
    fi
  done
  m=$(median <"$out/$family.mp") t=$(median <"$out/$family.torch")
  p=0
  [[ -z $prev ]] || p=$(median <"$out/$family.prev")
  awk -v f="$family" -v m="$m" -v t="$t" -v p="$p" -v b="${batch[$family]}" 'BEGIN {
    printf "%-8s %12.1f %12.1f %16.1f %16.1f %8.2f", f, m * 1e3, t * 1e3, b / m, b / t, m / t
    if (p > 0) printf " %10.1f %11.2f", p * 1e3, m / p
    printf "\n" }'
done
echo "($threads threads, $rounds rounds; steps 3.. of each run; ratio < 1: mpitron faster)"
