#!/usr/bin/env bash
# Knowledge QA's layouts: span-corruption pretraining at dp 2, tp 2 and pp 2, and answer-only
# fine-tuning --init-from it at dp 2, name spans in windows with the loss on the span at dp 2, each equal to one rank within 1e-5 (dropout on). Apart from
# knowledge_qa so that the sanitizer run can leave these launches out (the same sample and loss
# code runs there at one rank).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
pre=(--config "$TINY" --data "$data" --set train.objective=span_corruption
  --set model.vocab_size=259 --steps 6 --batch-size 8 --seq-len 32 --eval-every 3
  --eval-batches 1 --dropout 0.1 --threads 1)
"$MPITRON" train "${pre[@]}" --out pre1 >pre1.log
for layout in dp tp pp; do
  mpiexec -n 2 "$MPITRON" train "${pre[@]}" "--$layout" 2 --out "pre_$layout" >"pre_$layout.log" 2>&1 ||
    fail "--$layout 2: $(tail -3 "pre_$layout.log")"
  "$MPITRON" compare pre1/trace.h5 "pre_$layout/trace.h5" --rtol 1e-5 || fail "--$layout 2 differs"
done
# Name spans in windows of words, some words left out, the loss on the span: the loss terms are
# counted from the data, by every rank alike.
win=("${pre[@]}" --set train.objective=name_span_corruption --set train.span_context_words=3
  --set train.span_drop_words=0.3 --set train.span_loss=span)
"$MPITRON" train "${win[@]}" --out win1 >win1.log
grep -q "span corruption on names, 0-3 words each side, each left out with p 0.3" win1.log ||
  fail "windows: $(head -1 win1.log)"
mpiexec -n 2 "$MPITRON" train "${win[@]}" --dp 2 --out win_dp >win_dp.log 2>&1 ||
  fail "windows at dp 2: $(tail -3 win_dp.log)"
"$MPITRON" compare win1/trace.h5 win_dp/trace.h5 --rtol 1e-5 || fail "windows at dp 2 differ"
mkdir -p qa
for k in $(seq 1 60); do printf 'Who was the father of Son%d?\u2047Father%d\n' "$k" $((k % 7)); done >qa/train.qa
for k in $(seq 61 70); do printf 'Who was the father of Son%d?\u2047Father%d\n' "$k" $((k % 7)); done >qa/valid.qa
ft=(--config "$TINY" --data qa --set model.task=1 --set model.vocab_size=259 --steps 6
  --batch-size 8 --seq-len 48 --eval-every 3 --eval-batches 1 --dropout 0.1 --threads 1
  --init-from pre1/ckpt_6.h5)
"$MPITRON" train "${ft[@]}" --out ft1 >ft1.log
mpiexec -n 2 "$MPITRON" train "${ft[@]}" --dp 2 --out ft_dp >ft_dp.log 2>&1 ||
  fail "fine-tuning at dp 2: $(tail -3 ft_dp.log)"
"$MPITRON" compare ft1/trace.h5 ft_dp/trace.h5 --rtol 1e-5 || fail "fine-tuning at dp 2 differs"
echo "knowledge qa layouts ok"
