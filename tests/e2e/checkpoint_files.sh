#!/usr/bin/env bash
# The run folder's checkpoint files: --keep-last K keeps exactly the newest K, and the .tmp an
# interrupted write left behind is removed at start-up with a line saying so.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
small=(--config "$TINY" --data "$data" --batch-size 4 --seq-len 16 --log-every 0 --eval-every 0)
mkdir run
head -c 1000 /dev/urandom >run/ckpt_3.h5.tmp
"$MPITRON" train "${small[@]}" --steps 6 --ckpt-every 1 --keep-last 2 --out run >run.log 2>&1 ||
  fail "training failed: $(cat run.log)"
grep -q "removed run/ckpt_3.h5.tmp: the remains of an interrupted checkpoint write" run.log ||
  fail "no line about the stale .tmp: $(cat run.log)"
[[ ! -e run/ckpt_3.h5.tmp ]] || fail "the stale .tmp is still there"
[[ $(find run -name "ckpt_*" | sort | tr "\n" " ") == "run/ckpt_5.h5 run/ckpt_6.h5 " ]] ||
  fail "--keep-last 2 left: $(find run -name "ckpt_*")"
# The newest checkpoint always stays, and resuming still works from it.
mpiexec -n 2 "$MPITRON" train "${small[@]}" --steps 8 --ckpt-every 1 --keep-last 1 --allow-changes \
  --out run --resume auto >resume.log 2>&1 || fail "resume failed: $(cat resume.log)"
[[ $(find run -name "ckpt_*") == "run/ckpt_8.h5" ]] || fail "--keep-last 1 left: $(find run -name "ckpt_*")"
expect_error "--keep-last -1 must be 0" "$MPITRON" train "${small[@]}" --steps 1 --keep-last -1 --out bad
echo "checkpoint files ok"
