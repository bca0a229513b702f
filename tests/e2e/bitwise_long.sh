#!/usr/bin/env bash
# --bitwise over a long run at the preset's learning rate: one process, then two parallel layouts,
# every step's trace row (loss, validation loss, norm, lr) and the final checkpoint (parameters,
# optimizer moments, buffers) equal bit for bit (`mpitron compare --bitwise`). Why a long run:
# without --bitwise a layout sums in another order, its loss differs from step 2 on, and training
# can amplify that. Measured at dp 2 without --bitwise (relative loss): the MLP 1e-8 to 1e-7
# throughout; gpt-tiny at batch 24 up to 3.4e-5 in 200 steps (validation 3e-5); resnet at batch
# 64 2.2e-3 within 50 steps and 3.3e-2 within 300 (batch norm amplifies round-off). --bitwise: 0.
# Usage: bitwise_long.sh MPITRON REPO WORK FAMILY   (FAMILY: mlp, alexnet, resnet or gpt)
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
family=$4
fmnist=/usr/share/datasets/fashion-mnist
if [[ $family != gpt && ! -e $fmnist/train-images-idx3-ubyte.gz ]]; then
  echo "SKIP: $fmnist is missing (apt-get install dataset-fashion-mnist)"
  exit 77
fi
# No --lr: each preset's own. The batches give shard counts that the layouts' dp divide: mlp 48
# (24 shards: dp 2 and dp 3), alexnet 32 (8), resnet 32 (4 shards of 8, whole batch-norm groups),
# gpt 8 (8). The CNNs at cnn_baseline.sh's small widths, gpt-tiny at baseline.sh's sequence
# length; small batches keep the three runs of each family within a minute.
case $family in
  mlp)
    model=(--config "$REPO/configs/mlp-fmnist.toml" --data "$fmnist" --batch-size 48)
    steps=600
    layouts=("dp2 2 --dp 2" "dp3_zero1 3 --dp 3 --zero 1") ;;
  alexnet)
    model=(--config "$REPO/configs/alexnet-fmnist.toml" --data "$fmnist" --set model.width=8
      --set model.hidden=32 --set model.norm_group=4 --batch-size 32)
    steps=600
    layouts=("dp2 2 --dp 2" "dp2_pp2 4 --dp 2 --pp 2") ;;
  resnet)
    model=(--config "$REPO/configs/resnet-fmnist.toml" --data "$fmnist" --set model.width=8
      --set model.blocks_per_stage=2 --set model.norm_group=8 --batch-size 32 --reduction-shards 4)
    steps=300
    layouts=("dp2 2 --dp 2" "pp4_1f1b 4 --pp 4 --schedule 1f1b") ;;
  gpt)
    model=(--config "$TINY" --data "$(corpus)" --batch-size 8 --seq-len 32)
    steps=200
    layouts=("dp2 2 --dp 2" "dp2_pp2_zero1 4 --dp 2 --pp 2 --zero 1") ;;
  *) fail "unknown family $family" ;;
esac
# Validation three times (it is compared too), a log line at each, a checkpoint at the end only.
flags=(--steps "$steps" --eval-every $((steps / 3)) --log-every $((steps / 3)) --ckpt-every 0 --bitwise)

# train DIR RANKS [layout flags...]: one run, its log in DIR.log (shown if it fails).
train() {
  local dir=$1 ranks=$2
  shift 2
  mpiexec -n "$ranks" "$MPITRON" train "${model[@]}" "${flags[@]}" --out "$dir" "$@" >"$dir.log" 2>&1 ||
    { cat "$dir.log"; fail "$family $dir: training failed"; }
  [[ -e $dir/ckpt_$steps.h5 ]] || fail "$family $dir: no checkpoint at step $steps"
}

# seconds SINCE: the time since $EPOCHREALTIME was SINCE, to a tenth of a second.
seconds() {
  local us=$((${EPOCHREALTIME/./} - ${1/./}))
  echo "$((us / 1000000)).$((us / 100000 % 10))"
}

start=$EPOCHREALTIME
train one 1
grep "step *$steps/$steps" one.log
printf '%-22s 1 rank  %5s s  %s steps, the reference\n' "$family one" "$(seconds "$start")" "$steps"
# Both layouts run, then the test fails naming each one that differed.
problems=()
for layout in "${layouts[@]}"; do
  read -ra l <<<"$layout"
  name=${l[0]}
  t=$EPOCHREALTIME
  train "$name" "${l[@]:1}"
  result="bit for bit"
  for file in trace.h5 "ckpt_$steps.h5"; do
    if ! "$MPITRON" compare "one/$file" "$name/$file" --bitwise >compare.txt 2>&1; then
      cat compare.txt
      result="DIFFERS"
      problems+=("$family $name (${l[1]} ranks, ${l[*]:2}): $file differs from one process")
    fi
  done
  printf '%-22s %s ranks %5s s  %s\n' "$family $name" "${l[1]}" "$(seconds "$t")" "$result"
done
if [[ ${#problems[@]} != 0 ]]; then
  printf '%s\n' "${problems[@]}" >&2
  fail "$family: ${#problems[@]} differences over $steps steps (above)"
fi
echo "$family: ${#layouts[@]} layouts train one process's bits for $steps steps, in $(seconds "$start") s"
