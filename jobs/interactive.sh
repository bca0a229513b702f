#!/bin/bash
# Runs mpitron inside the current Slurm allocation, for interactive sessions (PSC's `interact`,
# `salloc`, `srun --pty bash`), on all of the job's tasks:
#   jobs/interactive.sh train [mpitron flags...]   a short training run (50 steps unless STEPS is set)
#   jobs/interactive.sh validate [ctest args...]   the CTest equivalence matrix (jobs/validate.sbatch)
#   jobs/interactive.sh info                       the allocation, as the training would use it
# `train` runs this partition's batch script by hand (jobs/bridges2-<partition>.sbatch on the
# Bridges-2 partitions GPU, GPU-shared, RM, RM-shared, else jobs/generic.sbatch; SCRIPT=... picks
# another), so its variables (DP TP PP ZERO CONFIG DATA RUN STEPS ..., see the script) apply and the
# run folder gets the same record. Flags after `train` are appended (EXTRA_ARGS); RANKS=n uses n
# of the job's tasks.
# Example, on Bridges-2:
#   interact -p GPU-shared --gres=gpu:v100-32:2 --ntasks-per-node=2 -t 01:00:00
#   DP=2 jobs/interactive.sh train --lr 1e-3
set -euo pipefail

fail() {
  echo "error: $*" >&2
  exit 1
}

usage() {
  sed -n '2,14p' "$0" | sed 's/^# \{0,1\}//'
}

what=${1:-}
if [[ -z $what || $what == -h || $what == --help || $what == help ]]; then
  usage
  exit 0
fi
shift
if [[ -z ${SLURM_JOB_ID:-} ]]; then
  fail "jobs/interactive.sh runs inside a Slurm allocation: start one first (on Bridges-2:" \
    "'interact -p RM-shared --ntasks-per-node=4 -t 01:00:00'; elsewhere 'salloc -n 4'), or submit" \
    "a batch job (make -f Makefile.slurm submit)"
fi

root=$(cd "$(dirname "$0")/.." && pwd)
export MPITRON_ROOT=${MPITRON_ROOT:-$root}

# Inside a job step (`srun --pty bash`, `interact`) Slurm's task variables describe that one-task
# step; the training launches on the whole job, so they are set back to the job's.
job_info=$(scontrol show job -o "$SLURM_JOB_ID")
field() { tr ' ' '\n' <<<"$job_info" | sed -n "s/^$1=//p" | head -n 1; }
tasks=$(field NumTasks)
nodes=$(field NumNodes)
nodes=${nodes%%-*}
[[ $tasks =~ ^[0-9]+$ ]] || tasks=${SLURM_NTASKS:-1}
[[ $nodes =~ ^[0-9]+$ ]] || nodes=${SLURM_JOB_NUM_NODES:-1}
export SLURM_NTASKS=${RANKS:-$tasks}
if ((SLURM_NTASKS % nodes == 0)); then
  export SLURM_NTASKS_PER_NODE=$((SLURM_NTASKS / nodes))
  if ((nodes > 1)); then
    export SLURM_TASKS_PER_NODE="$SLURM_NTASKS_PER_NODE(x$nodes)"
  else
    export SLURM_TASKS_PER_NODE=$SLURM_NTASKS_PER_NODE
  fi
else # uneven over the nodes: no per-node count (the batch script would take the allocation's)
  unset SLURM_NTASKS_PER_NODE
fi
# mpirun starts its daemons on other nodes with srun, which must share the session's step.
if [[ -n ${SLURM_STEP_ID:-} ]]; then export OMPI_MCA_plm_slurm_args=--overlap; fi

partition=${SLURM_JOB_PARTITION:-}
case $partition in
  GPU | GPU-shared | RM | RM-shared)
    default_script=jobs/bridges2-$(tr '[:upper:]' '[:lower:]' <<<"$partition").sbatch ;;
  *) default_script=jobs/generic.sbatch ;;
esac
SCRIPT=${SCRIPT:-$default_script}

case $what in
  train)
    export STEPS=${STEPS:-50}
    export LOG_EVERY=${LOG_EVERY:-10}
    export RUN=${RUN:-runs/interactive-$SLURM_JOB_ID-$(date +%H%M%S)}
    if [[ $# -gt 0 ]]; then export EXTRA_ARGS="${EXTRA_ARGS:+$EXTRA_ARGS }$*"; fi
    cd "$MPITRON_ROOT"
    exec bash "$SCRIPT"
    ;;
  validate)
    if [[ $# -gt 0 ]]; then export CTEST_ARGS="${CTEST_ARGS:+$CTEST_ARGS }$*"; fi
    cd "$MPITRON_ROOT"
    exec bash jobs/validate.sbatch
    ;;
  info)
    echo "job $SLURM_JOB_ID, partition ${partition:-?}, nodes ${SLURM_JOB_NODELIST:-?} ($nodes)"
    echo "ranks $SLURM_NTASKS (${SLURM_TASKS_PER_NODE:-?} per node), GPUs on this node ${SLURM_GPUS_ON_NODE:-0}" \
      "(CUDA_VISIBLE_DEVICES=${CUDA_VISIBLE_DEVICES:-})"
    echo "in step ${SLURM_STEP_ID:-none}; train would run $SCRIPT in $MPITRON_ROOT"
    if srun --mpi=list 2>&1 | grep -qw pmix; then echo "srun offers --mpi=pmix"; fi
    ;;
  *) fail "unknown command '$what': train, validate or info (jobs/interactive.sh --help)" ;;
esac
