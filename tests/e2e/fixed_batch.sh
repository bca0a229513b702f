#!/usr/bin/env bash
# train.fixed_batch = 1: every step trains on step 1's batch. At a learning rate of 1e-30 (no
# weight moves by it) without dropout every step's loss is then step 1's, bit for bit (the GPT,
# and BERT's masked LM, whose masking draws by the batch, not the step), where the ordinary run's
# losses differ; at the preset's learning rate the GPT learns the batch (the loss halves in 30
# steps). The run's last lines give the host's peak resident set.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
still=(--steps 4 --batch-size 8 --log-every 0 --eval-every 0 --set train.lr=1e-30
  --set train.dropout=0)
# distinct DIR: the number of distinct training losses of a run.
distinct() { trace_column "$1/trace.h5" loss | sort -u | wc -l; }
for preset in gpt-tiny bert-mlm; do
  args=(--config "$REPO/configs/$preset.toml" --data "$data" --seq-len 32 "${still[@]}")
  "$MPITRON" train "${args[@]}" --out "${preset}_moving" >/dev/null
  "$MPITRON" train "${args[@]}" --set train.fixed_batch=1 --out "${preset}_fixed" >"$preset.log"
  losses() { trace_column "${preset}_$1/trace.h5" loss | tr '\n' ' '; }
  [[ $(distinct "${preset}_moving") == 4 ]] ||
    fail "$preset: the ordinary run repeats a loss: $(losses moving)"
  [[ $(distinct "${preset}_fixed") == 1 ]] ||
    fail "$preset: train.fixed_batch=1 gives other losses: $(losses fixed)"
  grep -q "host memory: peak resident set [0-9.]* MiB (rank 0, the largest)" "$preset.log" ||
    fail "$preset: no host memory line: $(tail -3 "$preset.log")"
done
"$MPITRON" train --config "$TINY" --data "$data" --steps 30 --batch-size 8 --seq-len 32 \
  --log-every 0 --eval-every 0 --set train.warmup_steps=3 --set train.fixed_batch=1 \
  --out learns >/dev/null
"$PYTHON" - learns/trace.h5 <<'PY' || fail "the GPT did not learn its one batch"
import sys, h5py
loss = h5py.File(sys.argv[1], "r")["trace/loss"][:]
print(f"fixed batch: loss {loss[0]:.3f} at step 1, {loss[-1]:.3f} at step {len(loss)}")
sys.exit(0 if loss[-1] < 0.5 * loss[0] else 1)
PY
expect_error "fixed_batch must be 0 (off) or 1" \
  "$MPITRON" train --config "$TINY" --data "$data" --set train.fixed_batch=2 --out bad
echo "fixed batch ok"
