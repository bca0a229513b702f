#!/usr/bin/env bash
# A disk that fills in the middle of a checkpoint write: after ckpt_10 the running trainer gets a
# file-size limit (prlimit) below a checkpoint's size, so the write of ckpt_20 fails part-way with
# EFBIG, as on a full disk (the free-space check before a write cannot see it coming). The run
# must stop with one line naming the checkpoint and the last complete one, leave no partial file,
# keep ckpt_10 intact, and `--resume auto` must continue from it with the uninterrupted run's
# losses. Skips (77) without prlimit (util-linux). disk_full_tmpfs.sh: a real full disk (tmpfs).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
command -v prlimit >/dev/null || { echo "SKIP: no prlimit"; exit 77; }
data=$(corpus)
flags=(--config "$TINY" --data "$data" --steps 24 --batch-size 16 --seq-len 64 --eval-every 0
  --ckpt-every 10 --log-every 1 --threads 1)
"$MPITRON" train "${flags[@]}" --out run >run.log 2>&1 &
pid=$!
for _ in $(seq 1 1200); do
  [[ -e run/ckpt_10.h5 ]] && break
  kill -0 "$pid" 2>/dev/null || break
  sleep 0.02
done
[[ -e run/ckpt_10.h5 ]] || fail "no first checkpoint: $(tail -3 run.log)"
kill -STOP "$pid"
limit=$(($(stat -c %s run/ckpt_10.h5) / 3))
prlimit --pid "$pid" --fsize="$limit"
kill -CONT "$pid"
rc=0
wait "$pid" || rc=$?
cat run.log
[[ $rc != 0 ]] || fail "the run went on past a failed checkpoint write"
grep -q "error: writing checkpoint run/ckpt_20.h5 failed part-way (is the disk full or the file over a size limit?), its partial file removed: .*; the last complete one is run/ckpt_10.h5" run.log ||
  fail "no clear line for the failed write"
[[ $(find run -name "ckpt_*") == "run/ckpt_10.h5" ]] || fail "left behind: $(find run -name "ckpt_*")"
"$MPITRON" info --verify run/ckpt_10.h5 >/dev/null || fail "the last complete checkpoint was damaged"

# Room again: the run continues from ckpt_10 with the losses of a run that never failed.
"$MPITRON" train "${flags[@]}" --out run --resume auto >resume.log 2>&1 || fail "$(tail -3 resume.log)"
"$MPITRON" train "${flags[@]}" --out ref >ref.log 2>&1
"$MPITRON" compare ref/trace.h5 run/trace.h5 --rtol 0 || fail "the resumed run differs"
echo "PASS"
