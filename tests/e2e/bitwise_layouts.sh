#!/usr/bin/env bash
# --bitwise: every layout of a family trains the same bits as one process (dp, tp, pp, ZeRO,
# reductions, schedules, micro-batches). The family's small
# model (the equivalence baseline's shapes and flags, dropout on, augmentation on for the CNNs)
# trains once at 1 rank, then at each layout; `mpitron compare --bitwise` must find every step's
# trace row and the final checkpoint (parameters, optimizer moments, buffers) equal bit for bit.
# Usage: bitwise_layouts.sh MPITRON REPO WORK FAMILY
#   FAMILY: gpt, gpt_staged, bert_mlm, bert_testament, mlp, alexnet, alexnet_staged or resnet
#   (*_staged: --device cpu-staged, the GPU's code path on the CPU)
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
family=$4
fmnist=/usr/share/datasets/fashion-mnist
if [[ $family =~ ^(mlp|alexnet|alexnet_staged|resnet)$ && ! -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: $fmnist is missing (apt-get install dataset-fashion-mnist)"
  exit 77
fi
# Each layout: "name ranks flags...". The shards are gcd(batch, 24) (gpt and mlp 24, bert and
# the CNNs 8): every dp here divides them, and the trainer makes micro-batches = shards / dp.
bert_shape=(--set model.n_layer=2 --set model.n_embd=32 --batch-size 16 --dropout 0.1)
bert_flags=(--steps 12 --eval-every 6 --eval-batches 2 --log-every 6 --warmup-steps 3 --lr 2e-3)
cnn_flags=(--steps 12 --set train.augment=1 --eval-every 6 --eval-batches 2 --log-every 6 --warmup-steps 3)
case $family in
  gpt)
    model=(--config "$TINY" --data "$(corpus)")
    flags=(--steps 20 --batch-size 24 --seq-len 32 --dropout 0.1 --eval-every 10 --log-every 10
      --warmup-steps 5 --lr 1e-3)
    layouts=("dp2_allreduce 2 --dp 2 --dp-reduce allreduce"
      "dp3_ring_zero1 3 --dp 3 --dp-reduce ring --zero 1"
      "dp4_gather_scatter_zero2 4 --dp 4 --dp-reduce gather-scatter --zero 2"
      "dp2_micro4 2 --dp 2 --micro-batches 4"
      "pp2_1f1b 2 --pp 2 --schedule 1f1b"
      "pp4_gpipe 4 --pp 4 --schedule gpipe"
      "dp2_pp2_zero1 4 --dp 2 --pp 2 --zero 1"
      "pp3_stage_layers_1_1_2 3 --pp 3 --stage-layers 1,1,2"
      "pp2_interleaved_v2 2 --pp 2 --schedule interleaved --virtual-stages 2"
      "dp2_recompute 2 --dp 2 --recompute block"
      "tp2 2 --tp 2" "tp4 4 --tp 4" "dp2_tp2_zero2 4 --dp 2 --tp 2 --zero 2"
      "tp2_pp2_gpipe 4 --tp 2 --pp 2 --schedule gpipe"
      "dp2_tp2_pp2_zero1 8 --dp 2 --tp 2 --pp 2 --zero 1") ;;
  gpt_staged)  # the GPU's path on the CPU: the trees over host copies of device memory
    model=(--config "$TINY" --data "$(corpus)" --device cpu-staged)
    flags=(--steps 10 --batch-size 24 --seq-len 32 --dropout 0.1 --eval-every 5 --log-every 5
      --warmup-steps 3 --lr 1e-3)
    layouts=("dp2 2 --dp 2" "dp3_zero2 3 --dp 3 --zero 2" "dp2_pp2_zero1 4 --dp 2 --pp 2 --zero 1"
      "tp2 2 --tp 2" "tp4 4 --tp 4" "dp2_tp2_pp2 8 --dp 2 --tp 2 --pp 2") ;;
  alexnet_staged)  # the CNNs' channel-split convolutions and split head on device memory
    model=(--config "$REPO/configs/alexnet-fmnist.toml" --data "$fmnist" --set model.width=8
      --set model.hidden=32 --set model.norm_group=4 --dropout 0.2 --batch-size 32
      --device cpu-staged)
    flags=("${cnn_flags[@]}")
    layouts=("tp2 2 --tp 2" "dp2_tp2 4 --dp 2 --tp 2") ;;
  bert_mlm)
    model=(--config "$REPO/configs/bert-mlm.toml" --data "$(corpus)" "${bert_shape[@]}" --seq-len 32)
    flags=("${bert_flags[@]}")
    layouts=("dp2_ring 2 --dp 2 --dp-reduce ring" "dp4_zero1 4 --dp 4 --zero 1" "dp2_zero2 2 --dp 2 --zero 2"
      "tp2 2 --tp 2" "dp2_tp2 4 --dp 2 --tp 2") ;;
  bert_testament)
    model=(--config "$REPO/configs/bert-testament.toml" --data "$(verses)" "${bert_shape[@]}" --seq-len 48)
    flags=("${bert_flags[@]}")
    layouts=("dp2 2 --dp 2" "dp2_zero1_gather_scatter 2 --dp 2 --zero 1 --dp-reduce gather-scatter"
      "tp4 4 --tp 4") ;;
  mlp)
    model=(--config "$REPO/configs/mlp-fmnist.toml" --data "$fmnist")
    flags=(--steps 60 --batch-size 48 --dropout 0.1 --eval-every 20 --log-every 20 --warmup-steps 5)
    layouts=("dp2 2 --dp 2" "dp3_zero2 3 --dp 3 --zero 2" "dp4_ring 4 --dp 4 --dp-reduce ring") ;;
  alexnet)
    model=(--config "$REPO/configs/alexnet-fmnist.toml" --data "$fmnist" --set model.width=8
      --set model.hidden=32 --set model.norm_group=4 --dropout 0.2 --batch-size 32)
    flags=("${cnn_flags[@]}")
    layouts=("dp2 2 --dp 2" "dp4_zero2 4 --dp 4 --zero 2" "pp4_1f1b 4 --pp 4 --schedule 1f1b"
      "dp2_pp2_zero1 4 --dp 2 --pp 2 --zero 1" "tp2 2 --tp 2" "tp2_pp2 4 --tp 2 --pp 2"
      "dp2_tp2 4 --dp 2 --tp 2") ;;
  resnet)
    model=(--config "$REPO/configs/resnet-fmnist.toml" --data "$fmnist" --set model.width=8
      --set model.blocks_per_stage=2 --set model.norm_group=8 --batch-size 64 --lr 1e-4)
    flags=("${cnn_flags[@]}")
    layouts=("dp2_zero1 2 --dp 2 --zero 1" "pp4_gpipe 4 --pp 4 --schedule gpipe" "dp2_pp2 4 --dp 2 --pp 2"
      "pp2_interleaved_v3 2 --pp 2 --schedule interleaved --virtual-stages 3") ;;
  *) fail "unknown family $family" ;;
esac
steps=${flags[1]}
[[ ${flags[0]} == --steps ]] || fail "the flags must start with --steps"

# train DIR RANKS [layout flags...]: one --bitwise run, its log in DIR.log (shown if it fails), a
# checkpoint at the end only (--ckpt-every 0: the one the comparison reads).
train() {
  local dir=$1 ranks=$2
  shift 2
  mpiexec -n "$ranks" "$MPITRON" train "${model[@]}" "${flags[@]}" --ckpt-every 0 --bitwise \
    --out "$dir" "$@" >"$dir.log" 2>&1 || { cat "$dir.log"; fail "$family $dir: training failed"; }
  [[ -e $dir/ckpt_$steps.h5 ]] || fail "$family $dir: no checkpoint at step $steps"
}

# bitwise A B: mpitron compare --bitwise A B succeeds, else its lines are shown and it fails.
bitwise() {
  "$MPITRON" compare "$1" "$2" --bitwise >compare.txt 2>&1 || { cat compare.txt; return 1; }
}

# seconds SINCE: the time since $EPOCHREALTIME was SINCE, to a tenth of a second.
seconds() {
  local us=$((${EPOCHREALTIME/./} - ${1/./}))
  echo "$((us / 1000000)).$((us / 100000 % 10))"
}

start=$EPOCHREALTIME
train one 1
check_memory_plan one.log >/dev/null
printf '%-32s 1 rank  %5s s  the reference\n' "$family one" "$(seconds "$start")"
# Every layout runs and the test fails at the end, naming each layout that differed or whose
# memory plan was off: one run shows the whole family.
problems=()
for layout in "${layouts[@]}"; do
  read -ra l <<<"$layout"
  name=${l[0]}
  t=$EPOCHREALTIME
  train "$name" "${l[@]:1}"
  result="bit for bit"
  if ! bitwise one/trace.h5 "$name/trace.h5"; then
    result="DIFFERS"
    problems+=("$name: the trace differs from one process (${l[1]} ranks, ${l[*]:2})")
  fi
  if ! bitwise "one/ckpt_$steps.h5" "$name/ckpt_$steps.h5"; then
    result="DIFFERS"
    problems+=("$name: ckpt_$steps differs from one process (${l[1]} ranks, ${l[*]:2})")
  fi
  if plan=$(check_memory_plan "$name.log" 2>&1); then
    plan=$(grep -o "within [0-9.]*%\|none" <<<"$plan" | head -1)
  else
    problems+=("$name: ${plan#FAIL: }")
    plan="OFF"
  fi
  printf '%-32s %s ranks %5s s  %s, memory plan %s\n' "$family $name" "${l[1]}" "$(seconds "$t")" \
    "$result" "$plan"
done
if [[ ${#problems[@]} != 0 ]]; then
  printf '%s\n' "${problems[@]/#/$family }" >&2
  fail "$family: ${#problems[@]} problems in ${#layouts[@]} layouts (above)"
fi
echo "$family: ${#layouts[@]} layouts train the 1-rank bits (trace and ckpt_$steps), in" \
  "$(seconds "$start") s"
