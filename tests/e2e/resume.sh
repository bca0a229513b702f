#!/usr/bin/env bash
# A run killed (SIGKILL) after a checkpoint and resumed with --resume auto continues the trace
# without gap or repeat, bit-identical to the uninterrupted run. Also: SIGUSR1 makes mpitron
# write a checkpoint at the next step boundary and exit 3, and the resumed run is identical too;
# SIGHUP does the same, and a run whose stdout closes (`| head`) runs every step.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
args=(train --config "$TINY" --data "$data" --steps 40 --batch-size 8 --log-every 20
  --eval-every 15 --ckpt-every 10 --trace-flush-every 1)
"$MPITRON" "${args[@]}" --out full

"$MPITRON" "${args[@]}" --out killed &
pid=$!
for _ in $(seq 600); do [[ -e killed/ckpt_20.h5 ]] && break; sleep 0.1; done
kill -9 $pid || true
wait $pid || true
[[ -e killed/ckpt_40.h5 ]] && fail "the run finished before it could be killed"
"$MPITRON" "${args[@]}" --out killed --resume auto
"$MPITRON" compare full/trace.h5 killed/trace.h5 --rtol 0 || fail "resumed run differs"
cmp <(trace_column full/trace.h5 step) <(trace_column killed/trace.h5 step) ||
  fail "resumed trace has a gap or a repeated step"
cmp <(trace_column full/trace.h5 val_loss) <(trace_column killed/trace.h5 val_loss) ||
  fail "resumed validation losses differ"

# A newest checkpoint cut short (a node lost while its write reached the disk): --resume auto sets
# it aside, with a warning naming it, and continues from the newest complete one, bit for bit.
cp -r full cut
truncate -s $(($(stat -c %s cut/ckpt_40.h5) / 2)) cut/ckpt_40.h5
"$MPITRON" "${args[@]}" --out cut --resume auto >cut.log 2>&1 || fail "resume past a cut checkpoint failed: $(tail -n 5 cut.log)"
grep -q "skipping cut/ckpt_40.h5: .*moved to cut/ckpt_40.h5.damaged" cut.log ||
  fail "no warning naming the cut checkpoint: $(grep -i -m 3 'ckpt_40\|resumed' cut.log)"
grep -q "resumed from cut/ckpt_30.h5 at step 30" cut.log || fail "did not resume from ckpt_30"
[[ -e cut/ckpt_40.h5.damaged && -e cut/ckpt_40.h5 ]] || fail "the cut checkpoint was not set aside and rewritten"
"$MPITRON" compare full/trace.h5 cut/trace.h5 --rtol 0 || fail "run resumed past a cut checkpoint differs"
cmp <(trace_column full/trace.h5 step) <(trace_column cut/trace.h5 step) ||
  fail "trace resumed past a cut checkpoint has a gap or a repeated step"

"$MPITRON" "${args[@]}" --out signalled &
pid=$!
for _ in $(seq 600); do [[ -e signalled/ckpt_10.h5 ]] && break; sleep 0.1; done
kill -USR1 $pid
rc=0
wait $pid || rc=$?
[[ $rc == 3 ]] || fail "SIGUSR1 should stop with exit code 3, got $rc"
last=$(find signalled -name 'ckpt_*.h5' | sed 's/.*ckpt_\([0-9]*\)\.h5/\1/' | sort -n | tail -n 1)
[[ $last -lt 40 ]] || fail "the signalled run was not stopped early"
"$MPITRON" "${args[@]}" --out signalled --resume auto
"$MPITRON" compare full/trace.h5 signalled/trace.h5 --rtol 0 || fail "run resumed after SIGUSR1 differs"
cmp <(trace_column full/trace.h5 step) <(trace_column signalled/trace.h5 step) ||
  fail "trace after SIGUSR1 has a gap or a repeated step"

# SIGHUP (a closed terminal or ssh session) stops like SIGTERM: a checkpoint, exit 3.
short=(train --config "$TINY" --data "$data" --steps 40 --batch-size 8 --seq-len 32 --log-every 0
  --eval-every 0 --ckpt-every 2)
"$MPITRON" "${short[@]}" --out hup &
pid=$!
for _ in $(seq 600); do [[ -e hup/ckpt_2.h5 ]] && break; sleep 0.1; done
kill -HUP $pid
rc=0
wait $pid || rc=$?
[[ $rc == 3 ]] || fail "SIGHUP should stop with a checkpoint and exit code 3, got $rc"
hup_last=$(find hup -name 'ckpt_*.h5' | sed 's/.*ckpt_\([0-9]*\)\.h5/\1/' | sort -n | tail -n 1)
[[ $hup_last -lt 40 ]] || fail "the SIGHUP'd run was not stopped early"
h5ls hup/ckpt_"$hup_last".h5/params >/dev/null || fail "no readable checkpoint after SIGHUP"

# A closed stdout (the log piped into head) does not stop training: every step runs.
rc=0
"$MPITRON" "${short[@]}" --steps 6 --log-every 1 --out piped | head -n 2 >/dev/null || rc=$?
[[ $rc == 0 ]] || fail "the run whose stdout closed ended with exit $rc (141: killed by SIGPIPE)"
[[ -e piped/ckpt_6.h5 ]] || fail "the run whose stdout closed stopped before its last step"
[[ $(trace_column piped/trace.h5 step | wc -l) == 6 ]] ||
  fail "the run whose stdout closed traced $(trace_column piped/trace.h5 step | wc -l) steps, not 6"
echo "resume ok (killed after step 20, signalled at step $last, SIGHUP at step $hup_last, stdout closed)"
