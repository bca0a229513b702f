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
# -d cuda: both on the GPU (mpitron --device cuda with cuDNN's deterministic algorithms; torch with
# cuDNN autotuned, each step synchronized), the CNN presets whole (ResNet's 3 blocks a stage) at
# batch 256 and BERT-base at batch 32 x 128, on random images and text in the data's formats (a GPU
# machine need not have the data); -P bf16: mpitron --precision bf16, torch under autocast.
# -d cpu-staged walks the GPU settings on the CPU (torch on the CPU), -B a smaller batch for that.
# Usage: bench/family_step.sh [-f "alexnet resnet bert"] [-r rounds] [-t threads] [-s steps]
#                             [-b build_dir] [-p previous_build_dir] [-d cpu|cuda|cpu-staged]
#                             [-P fp32|bf16] [-B batch]
#   steps: per run, the first 2 warm up (default 20; bert 6)
#   -p: a build of an earlier commit, run in the same rounds (columns before_ms, new/before)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")
rounds=3 threads=2 steps="" build="$repo/build" families="alexnet resnet bert" prev=""
device=cpu precision=fp32 batch_all=""
while getopts "f:r:t:s:b:p:d:P:B:h" opt; do
  case $opt in
    f) families=$OPTARG ;;
    r) rounds=$OPTARG ;;
    t) threads=$OPTARG ;;
    s) steps=$OPTARG ;;
    b) build=$OPTARG ;;
    p) prev=$OPTARG ;;
    d) device=$OPTARG ;;
    P) precision=$OPTARG ;;
    B) batch_all=$OPTARG ;;
    *) sed -n '2,22p' "$0"; exit 2 ;;
  esac
done
python=${PYTHON:-$("$repo/tests/find_python.sh" torch h5py || echo python3)}
mpitron=$build/mpitron
[[ -x $mpitron ]] || { echo "error: $mpitron is missing (make build)" >&2; exit 1; }
[[ -z $prev || -x $prev/mpitron ]] || { echo "error: $prev/mpitron is missing" >&2; exit 1; }
$python -c "import torch" 2>/dev/null || { echo "error: $python cannot import torch" >&2; exit 1; }
[[ $device =~ ^(cpu|cuda|cpu-staged)$ ]] ||
  { echo "error: -d takes cpu, cuda or cpu-staged, not '$device'" >&2; exit 2; }
[[ $precision =~ ^(fp32|bf16)$ ]] ||
  { echo "error: -P takes fp32 or bf16, not '$precision'" >&2; exit 2; }
[[ -z $batch_all || $batch_all =~ ^[1-9][0-9]*$ ]] ||
  { echo "error: -B takes a positive integer, not '$batch_all'" >&2; exit 2; }
if [[ $device == cuda ]] &&
  ! $python -c "import torch, sys; sys.exit(not torch.cuda.is_available())"; then
  echo "error: $python's torch sees no GPU" >&2
  exit 1
fi
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

torch_device=cpu device_args=(--precision "$precision")
if [[ $device != cpu ]]; then  # the GPU's settings: whole presets, larger batches, random data
  [[ $device == cuda ]] && torch_device=cuda
  device_args+=(--device "$device")
  batch=([alexnet]=256 [resnet]=256 [bert]=32)
  mp_args[resnet]="--config $repo/configs/resnet-fmnist.toml --set train.augment=0"
  torch_args[resnet]="$here/torch_cnn_step.py resnet --width 16 --blocks 3"
  $python - "$out/images" "$out/text.txt" <<'EOF'
import os, random, struct, sys
rng = random.Random(7)
os.makedirs(sys.argv[1])
for split, n in (("train", 4096), ("t10k", 256)):
    with open(f"{sys.argv[1]}/{split}-images-idx3-ubyte", "wb") as f:
        f.write(struct.pack(">IIII", 0x803, n, 28, 28) + rng.randbytes(n * 28 * 28))
    with open(f"{sys.argv[1]}/{split}-labels-idx1-ubyte", "wb") as f:
        f.write(struct.pack(">II", 0x801, n) + bytes(rng.randrange(10) for _ in range(n)))
words = "and the of to in that he shall unto lord his i a for they be is him not them it".split()
with open(sys.argv[2], "w") as f:
    f.write("\n".join(" ".join(rng.choice(words) for _ in range(12)) + "." for _ in range(20000)))
EOF
  for f in alexnet resnet; do mp_args[$f]+=" --data $out/images"; done
  mp_args[bert]+=" --data $out/text.txt"
fi
if [[ -n $batch_all ]]; then for f in alexnet resnet bert; do batch[$f]=$batch_all; done; fi

mpitron_step() {  # family round [binary]: median step_s of a run, steps 3.. (the first warm up)
  local dir=$out/$1_$2_${3:+prev} bin=${3:-$mpitron}
  # shellcheck disable=SC2086  # the args are words
  "$bin" train ${mp_args[$1]} --batch-size ${batch[$1]} --steps "${steps:-${default_steps[$1]}}" \
    --eval-every 0 --log-every 1000 --out "$dir" --threads "$threads" "${device_args[@]}" >/dev/null
  $python -c "
import sys, h5py, statistics
with h5py.File(sys.argv[1], 'r') as f:
    print(statistics.median(f['trace/step_s'][2:]))" "$dir/trace.h5"
}
torch_step() {
  # shellcheck disable=SC2086
  "${torch_env[@]}" $python ${torch_args[$1]} --batch ${batch[$1]} \
    --steps "${steps:-${default_steps[$1]}}" --threads "$threads" --device "$torch_device" \
    --precision "$precision" |
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
echo "($device, $precision, $threads threads, $rounds rounds; steps 3.. of each run;" \
  "ratio < 1: mpitron faster)"
