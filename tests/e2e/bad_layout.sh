#!/usr/bin/env bash
# Impossible layouts are refused on every rank with one clear message, never a hang.
source "$(dirname "$0")/common.sh"
data=$(corpus)
check() {
  local want=$1
  shift
  local rc=0
  timeout 60 mpiexec "$@" >out.txt 2>err.txt || rc=$?
  [[ $rc != 0 ]] || fail "'$*' succeeded"
  [[ $rc != 124 ]] || fail "'$*' hung"
  local n
  n=$(grep -c "^error: .*$want" err.txt || true)
  [[ $n == 1 ]] || fail "'$*': expected one 'error: ...$want' line, got $n: $(cat err.txt)"
  echo "ok: $(grep '^error' err.txt)"
}
common=(--config "$TINY" --data "$data" --steps 2 --seq-len 16)
check "needs 2 ranks but the job has 4" -n 4 "$MPITRON" train "${common[@]}" --dp 2 --batch-size 8
check "needs 8 ranks" -n 2 "$MPITRON" train "${common[@]}" --dp 2 --tp 2 --pp 2 --batch-size 8
check "not divisible by dp (2) x micro-batches (3)" -n 2 "$MPITRON" train "${common[@]}" --dp 2 --micro-batches 3 --batch-size 8
check "not divisible by dp (3)" -n 3 "$MPITRON" train "${common[@]}" --dp 3 --batch-size 8
check "ZeRO stage" -n 2 "$MPITRON" train "${common[@]}" --dp 2 --zero 3 --batch-size 8
check "dp-reduce" -n 2 "$MPITRON" train "${common[@]}" --dp 2 --dp-reduce tree --batch-size 8
check "not supported yet" -n 2 "$MPITRON" train "${common[@]}" --tp 2 --batch-size 8
# A file only rank 0 opens (the trace) is broken: every rank stops with rank 0's message.
mpiexec -n 2 "$MPITRON" train "${common[@]}" --dp 2 --batch-size 8 --out broken >/dev/null
echo "not a trace" >broken/trace.h5
check "trace broken/trace.h5" -n 2 "$MPITRON" train "${common[@]}" --dp 2 --batch-size 8 --steps 4 --out broken --resume auto
echo "bad layouts ok"
