#!/usr/bin/env bash
# Preemption on a real (single-node) Slurm cluster: a running training job gets the time-limit
# warning (`scancel --signal=USR1 --batch`, what `--signal=B:USR1@300` sends), mpitron writes a
# checkpoint at the next step boundary on all ranks and exits 3, the job requeues itself, and the
# requeued start continues with `--resume auto`: the trace holds every step once and its losses
# equal an uninterrupted run's bit for bit. Once through mpirun (the Bridges-2 scripts) and once
# through srun --mpi=pmix (jobs/generic.sbatch). A plain `scancel` still ends a job for good.
# A hung rank (SIGSTOP, as a lost node or a dead file system leaves it): the other rank's watchdog
# ends the job with exit 4 after --hang-timeout, the job body requeues the job itself (this
# cluster's Slurm requeues no exit code), and the requeued start resumes from the checkpoint.
# Arguments: mpitron binary, checkout, work folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/cluster.sh"
slurm_test_setup "$@"
cluster_start

steps=120
export STEPS=$steps BATCH_SIZE=8 SEQ_LEN=32 CKPT_EVERY=20 EVAL_EVERY=0 LOG_EVERY=20 THREADS=1
flags=(--config "$REPO/configs/gpt-tiny.toml" --data "$CORPUS" --steps "$steps" --batch-size 8
  --seq-len 32 --ckpt-every 20 --eval-every 0 --log-every 20 --threads 1 --dp 2)

submit() {
  local name=$1 script=$2
  shift 2
  mkdir -p "$WORK/$name"
  RUN=$WORK/$name sbatch --parsable -o "$WORK/$name/slurm-%j.out" "$@" "$REPO/jobs/$script"
}
mpirun_id=$(submit mpirun bridges2-rm-shared.sbatch --ntasks=2 --cpus-per-task=1)
srun_id=$(submit srun generic.sbatch --ntasks=2)
cancel_id=$(submit cancelled generic.sbatch --ntasks=2)
hung_id=$(EXTRA_ARGS="--hang-timeout 4" submit hung generic.sbatch --ntasks=2)
# The uninterrupted reference, meanwhile, outside Slurm.
mpirun -n 2 "$MPITRON" train "${flags[@]}" --out "$WORK/reference" >"$WORK/reference.log" 2>&1 &
ref_pid=$!

# wait_file FILE SECONDS
wait_file() {
  local t0=$SECONDS
  while [[ ! -e $1 ]]; do
    ((SECONDS - t0 < $2)) || fail "$1 did not appear in $2 s"
    sleep 0.1
  done
}
# Signal each job once it has trained 20 steps (so mpitron is past start-up and has its handler).
wait_file "$WORK/mpirun/ckpt_20.h5" 120
scancel --signal=USR1 --batch "$mpirun_id"
log "sent USR1 to job $mpirun_id (mpirun)"
# The second one as a user would: make -f Makefile.slurm cancel SIGNAL=USR1.
wait_file "$WORK/srun/ckpt_20.h5" 120
make -s -C "$REPO" -f Makefile.slurm cancel JOB="$srun_id" SIGNAL=USR1
log "sent USR1 to job $srun_id (srun)"
wait_file "$WORK/cancelled/ckpt_20.h5" 120
make -s -C "$REPO" -f Makefile.slurm cancel JOB="$cancel_id"
log "cancelled job $cancel_id"
wait_file "$WORK/hung/ckpt_20.h5" 120
hung_rank=""
for pid in $(pgrep -f "mpitron train .*--out $WORK/hung( |$)"); do # a rank, not its launcher
  [[ $(cat "/proc/$pid/comm" 2>/dev/null) == mpitron ]] && hung_rank=$pid
done
[[ -n $hung_rank ]] || fail "no rank of job $hung_id found to stop"
kill -STOP "$hung_rank"
log "stopped a rank (pid $hung_rank) of job $hung_id"

wait "$ref_pid" || fail "the reference run failed: $(tail -n 5 "$WORK/reference.log")"
check_trace "$WORK/reference" $steps

for name in mpirun srun; do
  id=${name}_id
  id=${!id}
  run=$WORK/$name
  state=$(wait_job "$id" 180)
  log "$name (job $id): $state after $(job_field "$id" Restarts) restart(s)"
  [[ $state == COMPLETED ]] || { cat "$run"/slurm-*.out >&2; fail "$name: job ended $state"; }
  [[ $(job_field "$id" Restarts) == 1 ]] || fail "$name: the job was not requeued once"
  out=$(cat "$run"/slurm-*.out)
  stopped=$(sed -n 's/.*stopped after step \([0-9]*\) with a checkpoint.*/\1/p' <<<"$out" | head -n 1)
  [[ -n $stopped ]] || { echo "$out" >&2; fail "$name: mpitron did not stop on the signal"; }
  ((stopped >= 20 && stopped < steps)) || fail "$name: stopped at step $stopped"
  [[ -f $run/ckpt_$stopped.h5 ]] || fail "$name: no checkpoint of step $stopped"
  grep -q "resumed from .*ckpt_$stopped.h5 at step $stopped" <<<"$out" ||
    { echo "$out" >&2; fail "$name: the requeued job did not resume from step $stopped"; }
  rec=$run/jobs.log
  [[ $(grep -c "^job_id=$id$" "$rec") == 2 ]] || fail "$name: expected two starts in $rec"
  grep -qx "restart_count=1" "$rec" || fail "$name: the second start is not restart 1"
  grep -q "^exit=3 " "$rec" || fail "$name: the first start did not exit with 3"
  grep -q "^requeued " "$rec" || fail "$name: no requeue recorded"
  [[ $(tail -n 1 "$rec") == exit=0* ]] || fail "$name: the last start did not end with 0"
  check_trace "$run" $steps
  "$MPITRON" compare "$WORK/reference/trace.h5" "$run/trace.h5" --rtol 0 ||
    fail "$name: losses differ from the uninterrupted run"
  "$PYTHON" - "$WORK/reference/trace.h5" "$run/trace.h5" <<'PY' || fail "$name: losses differ bitwise"
import sys, h5py, numpy as np
a, b = (h5py.File(p, "r")["trace/loss"][:] for p in sys.argv[1:])
assert a.shape == b.shape and np.array_equal(a.view(np.uint32 if a.dtype == np.float32 else np.uint64),
                                             b.view(np.uint32 if b.dtype == np.float32 else np.uint64))
PY
  log "$name: stopped at step $stopped, requeued, resumed; $steps steps identical to the reference"
done

# The hung job: ended by the watchdog (exit 4), requeued by its body, resumed, identical.
run=$WORK/hung
state=$(wait_job "$hung_id" 180)
out=$(cat "$run"/slurm-*.out)
log "hung (job $hung_id): $state after $(job_field "$hung_id" Restarts) restart(s)"
[[ $state == COMPLETED ]] || { echo "$out" >&2; fail "hung: job ended $state"; }
[[ $(job_field "$hung_id" Restarts) == 1 ]] || { echo "$out" >&2; fail "hung: the job was not requeued once"; }
grep -q "error: no progress for .* (--hang-timeout)" <<<"$out" ||
  { echo "$out" >&2; fail "hung: the watchdog did not end the stopped job"; }
grep -q "the watchdog ended the ranks (exit 4): requeueing job $hung_id" <<<"$out" ||
  { echo "$out" >&2; fail "hung: the job body did not requeue after exit 4"; }
grep -q "^exit=4 " "$run/jobs.log" || fail "hung: the first start did not exit with 4 ($(grep ^exit= "$run/jobs.log" | tr '\n' ' '))"
grep -q "^requeued after exit 4 " "$run/jobs.log" || fail "hung: no requeue after exit 4 recorded"
resumed=$(sed -n 's/.*resumed from .*ckpt_\([0-9]*\)\.h5 at step.*/\1/p' <<<"$out" | head -n 1)
((resumed >= 20)) || { echo "$out" >&2; fail "hung: the requeued job did not resume from a checkpoint"; }
check_trace "$run" $steps
"$MPITRON" compare "$WORK/reference/trace.h5" "$run/trace.h5" --rtol 0 ||
  fail "hung: losses differ from the uninterrupted run"
log "hung: the watchdog ended it, the body requeued it, resumed from step $resumed; $steps steps identical"

# A cancelled job stays cancelled: its SIGTERM also makes mpitron checkpoint and exit 3, but the
# script's requeue is refused for a cancelled job.
state=$(wait_job "$cancel_id" 60)
[[ $state == CANCELLED ]] || fail "the cancelled job ended $state"
sleep 8 # longer than the requeue delay of this cluster: a requeued job would be pending or running
state=$(job_field "$cancel_id" JobState)
[[ $state == CANCELLED && $(job_field "$cancel_id" Restarts) == 0 ]] ||
  fail "the cancelled job came back: $state, $(job_field "$cancel_id" Restarts) restarts"
log "preemption ok"
