#!/usr/bin/env bash
# --bitwise across a resume: a dp 4 / ZeRO 1 run's checkpoint at step 10 resumes at tp 2 x pp 2,
# at dp 2 x pp 2 and at 1 rank, and each resumed run ends with the bits of an uninterrupted 1-rank run: every
# step's trace row (steps 1-10 written at dp 4, 11-20 after the resume) and ckpt_20 (parameters,
# optimizer moments, buffers), `mpitron compare --bitwise`.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
# The equivalence baseline's flags (tests/e2e/baseline.sh): gpt-tiny, dropout on, 24 shards.
run=(--config "$TINY" --data "$(corpus)" --steps 20 --batch-size 24 --seq-len 32 --dropout 0.1
  --eval-every 10 --log-every 10 --warmup-steps 5 --lr 1e-3 --ckpt-every 10 --bitwise)
mpiexec -n 1 "$MPITRON" train "${run[@]}" --out one >one.log 2>&1 || { cat one.log; fail "the 1-rank run failed"; }
mpiexec -n 4 "$MPITRON" train "${run[@]}" --dp 4 --zero 1 --out dp4 >dp4.log 2>&1 ||
  { cat dp4.log; fail "the dp 4 run failed"; }
[[ -e dp4/ckpt_10.h5 ]] || fail "the dp 4 run wrote no ckpt_10.h5"
for target in "4 --tp 2 --pp 2" "4 --dp 2 --pp 2" "1"; do
  read -ra t <<<"$target"
  dir=resumed_${target// /_}
  mkdir -p "$dir"
  cp dp4/trace.h5 dp4/ckpt_10.h5 "$dir/"
  mpiexec -n "${t[0]}" "$MPITRON" train "${run[@]}" "${t[@]:1}" --out "$dir" --resume "$dir/ckpt_10.h5" \
    >"$dir.log" 2>&1 || { cat "$dir.log"; fail "the resume at $target failed"; }
  grep -q "resumed from .* at step 10" "$dir.log" || { cat "$dir.log"; fail "the run at $target did not resume"; }
  "$MPITRON" compare one/trace.h5 "$dir/trace.h5" --bitwise || fail "the resumed trace at $target differs"
  "$MPITRON" compare one/ckpt_20.h5 "$dir/ckpt_20.h5" --bitwise || fail "ckpt_20 resumed at $target differs"
  cmp <(trace_column one/trace.h5 step) <(trace_column "$dir/trace.h5" step) ||
    fail "the resumed trace at $target has a gap or a repeated step"
done
echo "bitwise across a resume: dp 4 -> tp 2 x pp 2, dp 2 x pp 2 and 1 rank, trace and ckpt_20 bit for bit"
