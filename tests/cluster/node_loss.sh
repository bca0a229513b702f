#!/usr/bin/env bash
# A node dies under a running 2-node training job (jobs/generic.sbatch, --requeue, a checkpoint
# every few steps) while the job writes a checkpoint: its link is cut and every process in it
# SIGKILLed with the write in flight. The ranks left wait on the dead one; the job's first run ends
# within mpitron's hang timeout (--hang-timeout) + 10 s: Slurm notices the node (SlurmdTimeout 6 s)
# and requeues the job, or else the watchdog ends the ranks with exit code 4 and the job body
# requeues the job itself (the cluster's Slurm does not requeue exit codes). The job runs again on
# the nodes that are left, removes the interrupted write, resumes from the newest complete
# checkpoint, and its trace equals an uninterrupted run's: every step once, no gap, the same losses
# bit for bit. The dead node then "reboots" (clean spool, tmp and shared memory, a new slurmd) and
# takes jobs again.
# Arguments: mpitron binary, checkout, work folder, virtual cluster folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/../slurm/cluster.sh"
# shellcheck source=tests/cluster/common.sh
source "$(dirname "$0")/common.sh"
cluster_test_setup "$@"

# The watchdog's limit: above Slurm's notice of a dead node (7-13 s here), so Slurm ends the run
# (a run the watchdog ends first leaves the job completing until the node is down, and the requeued
# start then races its revoked credential); and above the longest quiet spell of a healthy run (a
# checkpoint across the nodes: up to 3 s on 2 loaded cores).
steps=40 hang=15
export STEPS=$steps BATCH_SIZE=8 SEQ_LEN=32 CKPT_EVERY=4 EVAL_EVERY=0 LOG_EVERY=4 THREADS=1
export EXTRA_ARGS="--hang-timeout $hang"
flags=(--config "$REPO/configs/gpt-tiny.toml" --data "$CORPUS" --steps "$steps" --batch-size 8
  --seq-len 32 --ckpt-every 4 --eval-every 0 --log-every 4 --threads 1 --dp 4)

[[ $(sinfo -h -N -p debug -o '%N %T' | grep -c ' idle$') -ge 3 ]] ||
  fail "node loss needs 3 idle nodes (a 2-node job and one to take over): $(sinfo -h -N -o '%N %T' | tr '\n' ' ')"
t_submit=$(date +%s.%N)
id=$(submit lost generic.sbatch -N 2 --ntasks-per-node=2 --ntasks=4)

# Mid-run and mid-write: once the job has written the checkpoint of step 8, while it writes the
# next one (step 12: ckpt_12.h5.tmp until every rank's part is in).
t0=$SECONDS
until [[ -e $WORK/lost/ckpt_8.h5 && -e $WORK/lost/ckpt_12.h5.tmp ]]; do
  ((SECONDS - t0 < 120)) || { cat "$WORK"/lost/slurm-*.out >&2 || true; fail "no checkpoint of step 12 begun in 120 s"; }
  [[ ! -e $WORK/lost/ckpt_12.h5 ]] || fail "ckpt_12.h5 was written whole before its write was seen"
  case $(job_field "$id" JobState) in
    COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY)
      cat "$WORK"/lost/slurm-*.out >&2 || true
      fail "the job ended before the node was killed"
      ;;
  esac
  sleep 0.02
done
[[ $(job_field "$id" Restarts) == 0 ]] ||
  { cat "$WORK"/lost/slurm-*.out >&2 || true; fail "the job restarted before any node was killed"; }
nodes=$(job_field "$id" NodeList)
batch_host=$(job_field "$id" BatchHost)
victim=$(scontrol show hostnames "$nodes" | grep -vx "$batch_host" | head -n 1)
[[ -n $victim ]] || fail "the job is not on two nodes: $nodes"
t_kill=$(date +%s.%N)
CLUSTER_DEAD_NODE=$victim
"$VC" kill-node "$VCLUSTER_DIR" "$victim"
log "killed $victim (link cut, every process SIGKILLed) under job $id on $nodes, batch host" \
  "$batch_host, while ckpt_12.h5 was being written"

# The uninterrupted reference, outside Slurm, meanwhile.
(
  # shellcheck source=/dev/null
  source "$SITE_ENV"
  export OMPI_MCA_btl=self,vader
  mpirun -n 4 "$MPITRON" train "${flags[@]}" --out "$WORK/reference" >"$WORK/reference.log" 2>&1
) &
ref_pid=$!

# Follow the job: end of the first run (no longer RUNNING), back in the queue, running again, done.
t_end="" t_requeue="" t_rerun="" state=""
while ((SECONDS - t0 < 240)); do
  info=$(scontrol show job -o "$id" 2>/dev/null || true)
  state=$(sed -n 's/.* JobState=\([A-Z_]*\) .*/\1/p' <<<"$info")
  restarts=$(sed -n 's/.* Restarts=\([0-9]*\) .*/\1/p' <<<"$info")
  if [[ -z $t_end && $state != RUNNING ]]; then t_end=$(elapsed "$t_kill"); fi
  if [[ -z $t_requeue && ($state == PENDING || $state == REQUEUED || $restarts -ge 1) ]]; then
    t_requeue=$(elapsed "$t_kill")
  fi
  if [[ -z $t_rerun && $state == RUNNING && $restarts -ge 1 ]]; then t_rerun=$(elapsed "$t_kill"); fi
  case $state in COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY) break ;; esac
  sleep 0.25
done
t_done=$(elapsed "$t_kill")
log "job $id after the kill: first run ended at ${t_end:-?} s, requeued at ${t_requeue:-?} s," \
  "running again at ${t_rerun:-?} s, $state at $t_done s (submitted to done: $(elapsed "$t_submit") s)"
out=$(cat "$WORK"/lost/slurm-*.out)
if [[ $state != COMPLETED ]]; then
  echo "$out" >&2
  fail "the job ended $state after $(job_field "$id" Restarts) restart(s)"
fi
awk -v t="${t_end:-1e9}" -v l=$((hang + 10)) 'BEGIN { exit !(t <= l) }' ||
  fail "the first run ended ${t_end:-never} s after the kill, not within the hang timeout + 10 s ($((hang + 10)) s)"
[[ -n $t_requeue ]] || fail "the job was not seen back in the queue"
if grep -q "requeue job JobId=$id due to failure of node $victim" "$VCLUSTER_DIR/log/slurmctld.log"; then
  log "Slurm found $victim down and requeued the job"
elif grep -q "error: no progress for .* (--hang-timeout)" <<<"$out"; then
  log "the watchdog ended the ranks left (exit 4) and the cluster requeued the job"
else
  echo "$out" >&2
  fail "neither Slurm's node failure nor the watchdog ended the first run"
fi
[[ $(job_field "$id" Restarts) == 1 ]] ||
  { echo "$out" >&2; fail "the job ran $(($(job_field "$id" Restarts) + 1)) times, not twice"; }
final_nodes=$(job_field "$id" NodeList)
scontrol show hostnames "$final_nodes" | grep -qx "$victim" &&
  fail "the requeued job ran on the dead node $victim ($final_nodes)"

# The write of step 12 never completed; the requeued run removed what it left and resumed from the
# newest checkpoint the first run completed (step 8).
newest=$(sed '/(start 2)/q' <<<"$out" | sed -n 's/.* checkpoint .*ckpt_\([0-9]*\)\.h5$/\1/p' | tail -n 1)
[[ -n $newest ]] || { echo "$out" >&2; fail "the first run wrote no checkpoint"; }
[[ $newest == 8 ]] ||
  { echo "$out" >&2; fail "the first run completed ckpt_$newest.h5: the kill did not interrupt the write of ckpt_12.h5"; }
grep -q "removed .*ckpt_12.h5.tmp: the remains of an interrupted checkpoint write" <<<"$out" ||
  { echo "$out" >&2; fail "the requeued run did not remove the interrupted write ckpt_12.h5.tmp"; }
grep -q "resumed from .*ckpt_$newest.h5 at step $newest" <<<"$out" ||
  { echo "$out" >&2; fail "the requeued job did not resume from ckpt_$newest.h5, the newest complete one"; }
log "resumed from step $newest on $final_nodes (ranks: $(hosts_of "$WORK/lost"))"

wait "$ref_pid" || fail "the reference run failed: $(tail -n 5 "$WORK/reference.log")"
check_trace "$WORK/reference" $steps
check_trace "$WORK/lost" $steps
"$MPITRON" compare "$WORK/reference/trace.h5" "$WORK/lost/trace.h5" --rtol 0 ||
  fail "the losses differ from the uninterrupted run's"

# The node reboots and takes a job again.
t_boot=$(date +%s.%N)
"$VC" revive-node "$VCLUSTER_DIR" "$victim"
CLUSTER_DEAD_NODE=
log "$victim rebooted and back in $(elapsed "$t_boot") s: $(sinfo -h -n "$victim" -o %T)"
srun -N 3 --ntasks-per-node=1 hostname | sort | tr '\n' ' ' | grep -q "$victim" ||
  fail "$victim does not run steps after its reboot"
log "node loss ok"
