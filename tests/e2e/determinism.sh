#!/usr/bin/env bash
# Same seed, same flags -> bit-identical loss trace; another seed -> a different one.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
args=(train --config "$TINY" --data "$data" --steps 30 --batch-size 8 --log-every 10 --eval-every 15)
"$MPITRON" "${args[@]}" --out a
"$MPITRON" "${args[@]}" --out b
"$MPITRON" "${args[@]}" --out c --seed 7
"$MPITRON" compare a/trace.h5 b/trace.h5 --rtol 0 || fail "same seed gave different losses"
cmp <(trace_column a/trace.h5 val_loss) <(trace_column b/trace.h5 val_loss) ||
  fail "same seed gave different validation losses"
if "$MPITRON" compare a/trace.h5 c/trace.h5 --rtol 0; then fail "another seed gave the same losses"; fi
echo "determinism ok"
