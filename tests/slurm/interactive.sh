#!/usr/bin/env bash
# jobs/interactive.sh in interactive allocations of a real (single-node) Slurm cluster, the way
# PSC's `interact` makes them (an allocation, then a one-task `srun` step holding the shell):
# a short training runs on all of the job's tasks, through mpirun (whose slots the helper sets
# back from the step's one task to the job's) and through `srun --overlap`; and
# `make -f Makefile.slurm interact` inside a plain `salloc` allocation. The steps run without
# `--pty`: the helper sees the same one-task step, and no terminal is needed (or waited on).
# Arguments: mpitron binary, checkout, work folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/cluster.sh"
slurm_test_setup "$@"
cluster_start

steps=12
export STEPS=$steps BATCH_SIZE=8 SEQ_LEN=32 CKPT_EVERY=6 EVAL_EVERY=0 LOG_EVERY=4 THREADS=1
# No oversubscription here: mpirun must find the job's two slots by itself.
export SITE_ENV=none OMPI_MCA_rmaps_base_oversubscribe=0

SESSION_LIMIT=60 # seconds; a session takes 2-5 s

# session NAME SALLOC_OPTIONS -- COMMAND...: COMMAND in an allocation, output in NAME.log. A session
# that hangs is killed (salloc, its steps and its processes) and the test fails with what was left.
session() {
  local name=$1
  shift
  local opts=()
  while [[ $1 != -- ]]; do
    opts+=("$1")
    shift
  done
  shift
  local rc=0
  RUN=$WORK/$name timeout -k 10 "$SESSION_LIMIT" salloc "${opts[@]}" "$@" \
    >"$WORK/$name.log" 2>&1 </dev/null || rc=$?
  if [[ $rc != 0 ]]; then
    cat "$WORK/$name.log" >&2
    if [[ $rc == 124 || $rc == 137 ]]; then
      cluster_state
      fail "$name: still running after $SESSION_LIMIT s"
    fi
    fail "$name: exit $rc"
  fi
}

# ran NAME SCRIPT LAUNCH...: the session trained on 2 ranks with the command LAUNCH... and left
# its record.
ran() {
  local name=$1 script=$2
  shift 2
  check_trace "$WORK/$name" $steps
  [[ $(trace_attr "$WORK/$name/trace.h5" layout.world) == 2 ]] || fail "$name: world is not 2"
  grep -Eq "ntasks=2 .*launcher=$1( |$)" "$WORK/$name/jobs.log" ||
    fail "$name: not 2 tasks via $1: $(cat "$WORK/$name/jobs.log")"
  grep -q "^command=$* $MPITRON train " "$WORK/$name/jobs.log" ||
    fail "$name: command is not '$* $MPITRON train ...': $(cat "$WORK/$name/jobs.log")"
  [[ -f $WORK/$name/$script ]] || fail "$name: $script is not in the run folder"
  log "$name: ok ($*, $script)"
}

session interact-mpirun -p RM-shared -n 2 -- srun -n 1 "$REPO/jobs/interactive.sh" train
ran interact-mpirun bridges2-rm-shared.sbatch mpirun -n 2 -x OMP_NUM_THREADS

gpu_args=(--gpus=v100-32:2)
if [[ $CLUSTER_GPUS == 0 ]]; then gpu_args=(); fi
session interact-srun -p GPU-shared "${gpu_args[@]}" --ntasks-per-node=2 -- \
  srun -n 1 env LAUNCHER=srun DEVICE=cpu "$REPO/jobs/interactive.sh" train --lr 1e-3
ran interact-srun bridges2-gpu-shared.sbatch srun --mpi=pmix --ntasks=2 --kill-on-bad-exit=1 --overlap
grep -q -- "--lr 1e-3" "$WORK/interact-srun/jobs.log" || fail "extra flags did not reach mpitron"
[[ $(trace_attr "$WORK/interact-srun/trace.h5" train.lr) == 0.001 ]] || fail "--lr 1e-3 was not used"

session make-interact -p RM -n 2 -- make -s -C "$REPO" -f Makefile.slurm interact RUN="$WORK/make-interact"
ran make-interact bridges2-rm.sbatch mpirun -n 2 -x OMP_NUM_THREADS

session info -p RM-shared -n 2 -- srun -n 1 "$REPO/jobs/interactive.sh" info
grep -q "^ranks 2 " "$WORK/info.log" || fail "info: $(cat "$WORK/info.log")"
log "interactive helper ok"
