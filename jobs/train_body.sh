# shellcheck shell=bash
# The body of every mpitron training job: jobs/generic.sbatch and jobs/bridges2-*.sbatch hold only
# their #SBATCH header and site defaults (SITE_ENV, LAUNCHER) and source this file from the
# checkout (MPITRON_ROOT, else the folder sbatch ran in); each run folder keeps a copy of both
# beside jobs.log (with their SHA-256), so a run stays a complete record.
# Variables (empty means: the config's or mpitron's default):
#   MPITRON_ROOT  the mpitron checkout (default: the folder sbatch ran in)
#   MPITRON       the binary (default: $MPITRON_ROOT/build/mpitron)
#   CONFIG        model preset (configs/gpt-tiny.toml)
#   DATA          its data, --data (empty: the preset's own, `mpitron data-path --config CONFIG`)
#   RUN           run folder (runs/<job name>-<job id>); a requeued job continues in it
#   DP TP PP      layout, passed to mpitron as they are (DP: ranks / (TP*PP)); mpitron refuses
#                 what it does not support, with its usual message
#   ZERO SCHEDULE ZeRO stage (0); pipeline schedule, gpipe|1f1b|interleaved (--schedule, if set)
#   MICRO_BATCHES DP_REDUCE BUCKET_MB STEPS BATCH_SIZE SEQ_LEN LR SEED
#   CKPT_EVERY EVAL_EVERY LOG_EVERY   the mpitron flags of the same names
#   THREADS       compute threads per rank ($SLURM_CPUS_PER_TASK, else 1)
#   DEVICE        cpu | cuda | cpu-staged (empty: cuda where the job holds GPUs, which needs a
#                 CUDA build of mpitron; else cpu)
#   COMM          mpi | nccl, the gradients' collectives (empty: nccl on GPUs where the build has
#                 NCCL and ZERO and DP_REDUCE allow it; else mpi)
#   PRECISION     fp32 | bf16 | fp16 (--precision, if set; V100s have no bf16: fp16 there)
#   EXTRA_ARGS    further mpitron flags, split at spaces
#   MAX_RESTARTS  how often the job requeues itself after a time-limit warning or a lost peer (20)
#   SITE_ENV      file sourced first (module loads, MPI settings; relative to the checkout; none)
#   LAUNCHER      auto (srun --mpi=pmix if offered, else mpirun) | srun | mpirun
set -euo pipefail
: "${SITE_ENV:=none}" "${LAUNCHER:=auto}" # the training script's site defaults, set before
# This file, for the run record (the job enters MPITRON_ROOT below).
MPITRON_BODY=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/$(basename "${BASH_SOURCE[0]}")

fail() {
  echo "error: $*" >&2
  exit 1
}
note() { echo "[$(date +%T)] $*"; }

[[ -n ${SLURM_JOB_ID:-} ]] ||
  fail "jobs/train_body.sh runs inside a Slurm job, sourced by a jobs/*.sbatch training script"

[[ ${SLURM_NTASKS:-} =~ ^[0-9]+$ ]] ||
  fail "the job has no task count (SLURM_NTASKS): ask for --ntasks or --ntasks-per-node, one per rank"
# Slurm lets an --ntasks (the command line's or an #SBATCH line's) cap -N x --ntasks-per-node
# without a word: a job with fewer ranks than it asked for per node stops here.
job_nodes=${SLURM_JOB_NUM_NODES:-${SLURM_NNODES:-1}}
if [[ ${SLURM_NTASKS_PER_NODE:-} =~ ^[0-9]+$ && $job_nodes =~ ^[0-9]+$ ]] &&
  ((SLURM_NTASKS != job_nodes * SLURM_NTASKS_PER_NODE)); then
  fail "this job has $SLURM_NTASKS task(s) on $job_nodes node(s), but asks for $SLURM_NTASKS_PER_NODE" \
    "per node ($((job_nodes * SLURM_NTASKS_PER_NODE)) in all): an --ntasks (-n, on the command line" \
    "or an #SBATCH line of the script) takes precedence over --ntasks-per-node; ask for the ranks" \
    "one way (-N $job_nodes --ntasks-per-node=K), or give -n as nodes x --ntasks-per-node"
fi

MPITRON_ROOT=${MPITRON_ROOT:-${SLURM_SUBMIT_DIR:-$PWD}}
cd "$MPITRON_ROOT" || fail "cannot enter MPITRON_ROOT=$MPITRON_ROOT"
[[ -f CMakeLists.txt && -d configs ]] ||
  fail "$MPITRON_ROOT is not an mpitron checkout: submit from the checkout or set MPITRON_ROOT"
if [[ -n $SITE_ENV && $SITE_ENV != none ]]; then
  [[ -f $SITE_ENV ]] || fail "SITE_ENV=$SITE_ENV does not exist"
  # shellcheck source=/dev/null
  source "$SITE_ENV"
fi

MPITRON=${MPITRON:-$MPITRON_ROOT/build/mpitron}
CONFIG=${CONFIG:-configs/gpt-tiny.toml}
DATA=${DATA:-}
RUN=${RUN:-runs/${SLURM_JOB_NAME:-mpitron}-$SLURM_JOB_ID}
TP=${TP:-1}
PP=${PP:-1}
if [[ -z ${DP:-} ]]; then
  DP=$SLURM_NTASKS
  if [[ $TP =~ ^[1-9][0-9]*$ && $PP =~ ^[1-9][0-9]*$ ]]; then DP=$((SLURM_NTASKS / (TP * PP))); fi
elif [[ $DP =~ ^[1-9][0-9]*$ && $TP =~ ^[1-9][0-9]*$ && $PP =~ ^[1-9][0-9]*$ ]] &&
  ((DP * TP * PP != SLURM_NTASKS)); then
  fail "DP x TP x PP = $DP x $TP x $PP = $((DP * TP * PP)) ranks, but the job has $SLURM_NTASKS" \
    "(SLURM_NTASKS): ask Slurm for $((DP * TP * PP)) tasks, or leave DP empty (ranks / (TP x PP))"
fi
ZERO=${ZERO:-0}
SCHEDULE=${SCHEDULE:-}
THREADS=${THREADS:-${SLURM_CPUS_PER_TASK:-1}}
MAX_RESTARTS=${MAX_RESTARTS:-20}
RESTART=${SLURM_RESTART_COUNT:-0}
[[ -x $MPITRON ]] || fail "$MPITRON is missing: build it first (make -f Makefile.slurm build)"
[[ -f $CONFIG ]] || fail "CONFIG=$CONFIG does not exist (relative paths are from $MPITRON_ROOT)"
# The data, on this node, before any rank starts: DATA, else what the preset reads.
if [[ -n $DATA ]]; then
  [[ -e $DATA ]] || fail "DATA=$DATA does not exist on $(hostname) (relative paths are from $MPITRON_ROOT)"
elif [[ " ${EXTRA_ARGS:-} " != *" --data"* && ${EXTRA_ARGS:-} != *data.path* ]] &&
  preset_data=$("$MPITRON" data-path --config "$CONFIG" 2>/dev/null) && [[ -n $preset_data ]]; then
  [[ -e $preset_data ]] ||
    fail "$CONFIG reads $preset_data, which does not exist on $(hostname): prepare it (the [data]" \
      "table of $CONFIG says how) or set DATA to the data to train on"
fi

# One rank per GPU: where the job holds GPUs, as many tasks per node as GPUs per node.
tasks_per_node=${SLURM_NTASKS_PER_NODE:-${SLURM_TASKS_PER_NODE%%[(,]*}}
gpus_per_node=${SLURM_GPUS_ON_NODE:-0}
if [[ $gpus_per_node -gt 0 && $tasks_per_node != "$gpus_per_node" ]]; then
  fail "one rank per GPU: this job has $tasks_per_node tasks but $gpus_per_node GPUs per node;" \
    "ask for --ntasks-per-node=$gpus_per_node (or as many GPUs as tasks)"
fi

# Where the step runs: on the job's GPUs when it holds any. A job charged for GPUs that would
# train on its cores instead stops here, saying so (DEVICE=cpu asks for that on purpose).
devices=""
build_devices() {
  if [[ -z $devices ]]; then
    devices=$("$MPITRON" devices 2>&1) || fail "'$MPITRON devices' failed: $devices"
  fi
}
DEVICE=${DEVICE:-}
if [[ -z $DEVICE ]]; then
  DEVICE=cpu
  if [[ $gpus_per_node -gt 0 ]]; then
    build_devices
    grep -q '^cuda:' <<<"$devices" ||
      fail "this job holds $gpus_per_node GPU(s) per node, but $MPITRON cannot use them" \
        "($(head -n 1 <<<"$devices")): build it with CUDA on a GPU node (make -f Makefile.slurm" \
        "build in an interactive GPU session), or set DEVICE=cpu to train on the job's cores"
    DEVICE=cuda
  fi
fi
COMM=${COMM:-}
if [[ -z $COMM ]]; then
  COMM=mpi
  if [[ $DEVICE == cuda && $ZERO =~ ^[01]$ && ${DP_REDUCE:-allreduce} == allreduce ]]; then
    build_devices
    if grep -q '^nccl: [0-9]' <<<"$devices"; then COMM=nccl; fi
  fi
fi

case $LAUNCHER in
  auto)
    LAUNCHER=mpirun
    if srun --mpi=list 2>&1 | grep -qw pmix; then LAUNCHER=srun; fi
    ;;
  srun | mpirun) ;;
  *) fail "LAUNCHER must be auto, srun or mpirun, not '$LAUNCHER'" ;;
esac
if [[ $LAUNCHER == srun ]]; then
  launch=(srun --mpi=pmix --ntasks="$SLURM_NTASKS" --kill-on-bad-exit=1)
  # Inside a job step (an interactive session) a new step must share its CPUs.
  if [[ -n ${SLURM_STEP_ID:-} ]]; then launch+=(--overlap); fi
else
  launch=(mpirun -n "$SLURM_NTASKS" -x OMP_NUM_THREADS)
  if [[ $THREADS -gt 1 ]]; then launch+=(--bind-to none); fi
fi
export OMP_NUM_THREADS=$THREADS

# The MPI world must be the job's $SLURM_NTASKS ranks: ask the launcher for it before training.
# shellcheck disable=SC2016
world=$("${launch[@]}" bash -c 'echo "${OMPI_COMM_WORLD_RANK:-${PMIX_RANK:-${PMI_RANK:-x}}}"' |
  sort -u | grep -c '^[0-9]' || true)
if [[ $world != "$SLURM_NTASKS" ]]; then
  fail "'${launch[*]}' starts an MPI world of $world ranks, but the job has SLURM_NTASKS=$SLURM_NTASKS;" \
    "check the launcher (LAUNCHER=srun|mpirun) and the MPI module"
fi

add_flag() { if [[ -n $2 ]]; then cmd+=("$1" "$2"); fi; }
cmd=("${launch[@]}" "$MPITRON" train --config "$CONFIG")
add_flag --data "$DATA"
cmd+=(--out "$RUN" --resume auto --dp "$DP" --tp "$TP" --pp "$PP" --zero "$ZERO" --threads "$THREADS"
  --device "$DEVICE" --comm "$COMM")
add_flag --precision "${PRECISION:-}"
add_flag --schedule "$SCHEDULE"
add_flag --micro-batches "${MICRO_BATCHES:-}"
add_flag --dp-reduce "${DP_REDUCE:-}"
add_flag --bucket-mb "${BUCKET_MB:-}"
add_flag --steps "${STEPS:-}"
add_flag --batch-size "${BATCH_SIZE:-}"
add_flag --seq-len "${SEQ_LEN:-}"
add_flag --lr "${LR:-}"
add_flag --seed "${SEED:-}"
add_flag --ckpt-every "${CKPT_EVERY:-}"
add_flag --eval-every "${EVAL_EVERY:-}"
add_flag --log-every "${LOG_EVERY:-}"
if [[ -n ${EXTRA_ARGS:-} ]]; then
  read -r -a extra <<<"$EXTRA_ARGS"
  cmd+=("${extra[@]}")
fi

# The run record: revision, job, exact command, the script and this body.
mkdir -p "$RUN"
job_info=$(scontrol show job -o "$SLURM_JOB_ID" 2>/dev/null || true)
script=$0
if [[ $(basename "$script") == slurm_script ]]; then # sbatch runs a copy from its spool folder
  submitted=$(tr ' ' '\n' <<<"$job_info" | sed -n 's/^Command=//p')
  script_name=$(basename "${submitted:-job.sbatch}")
else
  script_name=$(basename "$script")
fi
cp "$script" "$RUN/$script_name"
cp "$MPITRON_BODY" "$RUN/train_body.sh"
sha() { sha256sum "$1" 2>/dev/null | cut -d' ' -f1 || echo unknown; }
rev=$(git rev-parse HEAD 2>/dev/null || echo unknown)
dirty=$(git status --porcelain --untracked-files=no 2>/dev/null | wc -l) || dirty=0
if [[ $dirty -gt 0 ]]; then git diff HEAD >"$RUN/git-diff-$SLURM_JOB_ID.patch"; fi
{
  echo "# $(date -Is) start $((RESTART + 1)) of job $SLURM_JOB_ID"
  echo "job_id=$SLURM_JOB_ID"
  echo "restart_count=$RESTART"
  echo "job_name=${SLURM_JOB_NAME:-} partition=${SLURM_JOB_PARTITION:-} nodes=${SLURM_JOB_NODELIST:-}" \
    "ntasks=$SLURM_NTASKS gpus_per_node=$gpus_per_node cpus_per_task=${SLURM_CPUS_PER_TASK:-}" \
    "threads=$THREADS device=$DEVICE comm=$COMM launcher=$LAUNCHER"
  echo "git_rev=$rev"
  echo "git_modified_files=$dirty"
  echo "script=$script_name"
  echo "script_sha256=$(sha "$script")"
  echo "body=train_body.sh"
  echo "body_sha256=$(sha "$MPITRON_BODY")"
  echo "command=$(printf '%q ' "${cmd[@]}")"
} >>"$RUN/jobs.log"
note "job $SLURM_JOB_ID (start $((RESTART + 1))), revision $rev, run folder $RUN"
note "$(printf '%q ' "${cmd[@]}")"

# Slurm's warning before the time limit (--signal=B:USR1@s) reaches only this shell, and bash
# runs traps only between commands: so the launcher runs in the background, this shell waits,
# and a signal is handed on (mpirun and srun pass it to every rank). mpitron then writes a
# checkpoint at the next step boundary on all ranks and exits with 3. USR1 means "come back
# later": the job requeues itself. TERM (scancel, preemption, the time limit itself) means stop:
# the checkpoint is written, nothing is requeued.
signals_seen=""
# shellcheck disable=SC2317  # called from the traps
pass_on() {
  signals_seen+=" $1"
  note "SIG$1: asking mpitron for a checkpoint at the next step boundary"
  kill -s "$1" "$pid" 2>/dev/null || true
}
trap 'pass_on USR1' USR1
trap 'pass_on TERM' TERM
"${cmd[@]}" &
pid=$!
while kill -0 "$pid" 2>/dev/null; do wait "$pid" || true; done
rc=0
wait "$pid" || rc=$?
echo "exit=$rc ($(date -Is))" >>"$RUN/jobs.log"

if [[ $rc == 3 ]]; then
  batch=$(tr ' ' '\n' <<<"$job_info" | sed -n 's/^BatchFlag=//p')
  if [[ $batch != 1 || -n ${SLURM_STEP_ID:-} || $signals_seen != *USR1* || $signals_seen == *TERM* ]]; then
    note "stopped by a signal ($signals_seen) with a checkpoint; not requeued: submit again with" \
      "RUN=$RUN to continue"
  elif [[ $RESTART -ge $MAX_RESTARTS ]]; then
    fail "stopped with a checkpoint after $RESTART restarts (MAX_RESTARTS=$MAX_RESTARTS): not" \
      "requeued; submit again with RUN=$RUN to continue"
  else
    note "stopped with a checkpoint: requeueing job $SLURM_JOB_ID; it continues with --resume auto"
    echo "requeued ($(date -Is))" >>"$RUN/jobs.log"
    scontrol requeue "$SLURM_JOB_ID" || fail "scontrol requeue failed: submit again with RUN=$RUN"
    exit 0
  fi
fi
# 4: mpitron's watchdog saw no progress for --hang-timeout (a lost node, a stuck rank) and ended
# the ranks. A batch job comes back by itself (its run folder holds the checkpoints; --resume auto
# takes the newest complete one), whether or not the site's Slurm requeues this exit code.
if [[ $rc == 4 ]]; then
  batch=$(tr ' ' '\n' <<<"$job_info" | sed -n 's/^BatchFlag=//p')
  if [[ $batch != 1 || -n ${SLURM_STEP_ID:-} || -n $signals_seen ]]; then
    note "the watchdog ended the ranks (exit 4); not requeued: submit again with RUN=$RUN"
  elif [[ $RESTART -ge $MAX_RESTARTS ]]; then
    fail "the watchdog ended the ranks (exit 4) after $RESTART restarts (MAX_RESTARTS=" \
      "$MAX_RESTARTS): not requeued; submit again with RUN=$RUN to continue"
  else
    note "the watchdog ended the ranks (exit 4): requeueing job $SLURM_JOB_ID; it continues" \
      "from the newest complete checkpoint"
    echo "requeued after exit 4 ($(date -Is))" >>"$RUN/jobs.log"
    scontrol requeue "$SLURM_JOB_ID" || fail "scontrol requeue failed: submit again with RUN=$RUN"
    exit 0
  fi
fi
exit "$rc"
