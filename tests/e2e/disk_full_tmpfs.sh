#!/usr/bin/env bash
# A disk that really fills, on a tmpfs in a private mount namespace (unshare -m). The run folder's
# disk fills in the middle of ckpt_20's write: strace holds the trainer for 3 s at the start of
# the write (after its free-space check passed), while another writer takes all but half a
# checkpoint of the room, so the write fails with ENOSPC part-way. The run must stop with one line
# naming the checkpoint and the last complete one, leave no partial file and keep ckpt_10 intact.
# On the still full disk `--resume auto` is refused before writing, with its own clear line; once
# the other file is gone it finishes the run with the uninterrupted run's losses.
# Skips (77) where this user may not mount a tmpfs in a mount namespace, or trace with strace.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
for tool in unshare strace fallocate; do
  command -v "$tool" >/dev/null || { echo "SKIP: no $tool"; exit 77; }
done
mkdir disk
if ! why=$(unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs disk' 2>&1); then
  echo "SKIP: no rights to mount a tmpfs in a private mount namespace (unshare -m): $why"
  exit 77
fi
if ! why=$(strace -qq -o /dev/null true 2>&1); then
  echo "SKIP: strace cannot trace here: $why"
  exit 77
fi
data=$(corpus)
flags=(--config "$TINY" --data "$data" --steps 24 --batch-size 16 --seq-len 64 --eval-every 0
  --ckpt-every 10 --log-every 1 --threads 1)
"$MPITRON" train "${flags[@]}" --out ref >ref.log 2>&1 || fail "$(tail -3 ref.log)"

# Inside the namespace, in disk/ (the tmpfs); the logs go to the work folder.
inside() {
  mount -t tmpfs -o size=64m tmpfs disk
  cd disk
  local rc=0 half
  half=$(($(stat -c %s ../ref/ckpt_10.h5) / 2))
  strace -f -qq -o /dev/null -P run/ckpt_20.h5.tmp -e trace=statfs \
    -e inject=statfs:delay_exit=3000000:when=1 "$MPITRON" train "$@" --out run >../run.log 2>&1 &
  local pid=$!
  for _ in $(seq 1 1500); do
    [[ -e run/ckpt_20.h5.tmp ]] && break
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.02
  done
  [[ -e run/ckpt_20.h5.tmp ]] || fail "the write of ckpt_20 never began: $(tail -3 ../run.log)"
  fallocate -l $((($(stat -f -c '%a * %S' .) - half) / 4096 * 4096)) other_writer
  wait "$pid" || rc=$?
  echo "$rc" >../run.rc
  find run -name "ckpt_*" >../left.txt
  "$MPITRON" info --verify run/ckpt_10.h5 >../verify.txt 2>&1 || echo "verify failed" >>../verify.txt
  "$MPITRON" train "$@" --out run --resume auto >../full.log 2>&1 && echo 0 >../full.rc
  rm other_writer
  "$MPITRON" train "$@" --out run --resume auto >../resume.log 2>&1 || fail "$(tail -3 ../resume.log)"
  cp run/trace.h5 ../resumed.h5
}
export -f inside fail
export MPITRON
unshare -m bash -euo pipefail -c 'inside "$@"' bash "${flags[@]}" || fail "in the namespace"
cat run.log
[[ $(cat run.rc) != 0 ]] || fail "the run went on past a failed checkpoint write"
grep -q "error: writing checkpoint run/ckpt_20.h5 failed part-way (is the disk full or the file over a size limit?), its partial file removed: .*; the last complete one is run/ckpt_10.h5 (--resume auto continues from it)" run.log ||
  fail "no clear line for the failed write"
[[ $(cat left.txt) == "run/ckpt_10.h5" ]] || fail "left behind: $(cat left.txt)"
grep -q "verify failed" verify.txt && fail "the last complete checkpoint was damaged: $(cat verify.txt)"
[[ ! -e full.rc ]] || fail "a resume on the full disk succeeded"
grep -q "^error: no room for checkpoint run/ckpt_20.h5: .*; the last complete one is run/ckpt_10.h5" full.log ||
  fail "no clear line on the full disk: $(tail -3 full.log)"
grep -q "resumed from run/ckpt_10.h5 at step 10" resume.log || fail "the last run did not resume: $(head -3 resume.log)"
"$MPITRON" compare ref/trace.h5 resumed.h5 --rtol 0 || fail "the resumed run differs"
echo "PASS"
