# shellcheck shell=bash
# Shared by the `cluster` tests, which run on the virtual multi-node cluster that the CTest fixture
# brought up (tests/cluster/vcluster.sh, tests/cluster.cmake): sourced after tests/slurm/cluster.sh
# (skip, fail, log, job_field, wait_job, slurm_test_setup, check_trace, trace_attr).
# cluster_test_setup MPITRON REPO WORK VCLUSTER_DIR [BASELINE_DIR]: enters a fresh WORK; the
# environment of the cluster's clients (SLURM_CONF, Open MPI over TCP on its bridge) and of its jobs
# (SITE_ENV: the same settings as a site profile); a passing test removes WORK.
VC=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/vcluster.sh

cluster_test_setup() {
  local vdir=$4
  BASELINE_DIR=${5:-}
  slurm_test_setup "$1" "$2" "$3"
  if [[ ! -f $vdir/env ]]; then
    local why="the virtual cluster is not up in $vdir"
    [[ -s $vdir.skip ]] && why+=": $(cat "$vdir.skip")"
    skip "$why (the cluster_up test brings it up)"
  fi
  VCLUSTER_DIR=$(realpath "$vdir")
  eval "$("$VC" env "$VCLUSTER_DIR")"
  export SITE_ENV=$VCLUSTER_SITE_ENV
  # Open MPI's session folders of the clients here (mpirun in salloc) go with the cluster.
  export TMPDIR=$VCLUSTER_DIR/tmp/clients
  mkdir -p "$TMPDIR"
  sinfo -h >/dev/null 2>&1 || fail "the virtual cluster in $VCLUSTER_DIR does not answer: $(sinfo 2>&1)"
  trap cluster_test_done EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
}

# At exit: a failure prints the cluster's state and logs (the job's own output is printed by the
# test); jobs left by this test are cancelled so the next test finds the nodes idle; a passing or
# skipped test removes its work folder.
cluster_test_done() {
  local rc=$? ids
  if [[ $rc != 0 && $rc != "$SLURM_TEST_SKIP" && -n ${VCLUSTER_DIR:-} ]]; then
    {
      echo "---- sinfo; squeue"
      sinfo -N -o '%N %T %E' 2>&1 || true
      squeue 2>&1 || true
      local f
      for f in "$VCLUSTER_DIR"/log/*.log; do
        echo "---- $f (last 10 lines)"
        tail -n 10 "$f"
      done
    } >&2
  fi
  if [[ -n ${VCLUSTER_DIR:-} ]]; then
    ids=$(squeue -h -o %i 2>/dev/null || true)
    # shellcheck disable=SC2086
    if [[ -n $ids ]]; then scancel $ids 2>/dev/null || true; fi
    # A node this test killed comes back for the next test.
    if [[ -n ${CLUSTER_DEAD_NODE:-} ]]; then "$VC" revive-node "$VCLUSTER_DIR" "$CLUSTER_DEAD_NODE" || true; fi
  fi
  if [[ ($rc == 0 || $rc == "$SLURM_TEST_SKIP") && ${MPITRON_KEEP_WORK:-0} != 1 && -n ${WORK:-} ]]; then
    cd / && rm -rf "$WORK"
  fi
  return "$rc"
}

# elapsed T0: seconds since T0 (from `date +%s.%N`), one decimal.
elapsed() { awk -v a="$1" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }'; }

# baseline_env: the job scripts' variables for the equivalence baseline's run (tests/e2e/baseline.sh:
# its flags file, its corpus), so a job's trace can be compared with the baseline's. Settings
# the scripts have a variable for go there, the rest into EXTRA_ARGS.
baseline_env() {
  [[ -n $BASELINE_DIR && -f $BASELINE_DIR/trace.h5 && -f $BASELINE_DIR/flags ]] ||
    fail "no equivalence baseline in '$BASELINE_DIR' (the equivalence_baseline test makes it)"
  local flags extra=() i
  read -r -a flags <"$BASELINE_DIR/flags"
  export CONFIG=$REPO/configs/gpt-tiny.toml
  # The baseline's corpus: the Bible where the checkout has it, else its synthetic one.
  if [[ -s $REPO/data/kjv.txt ]]; then
    DATA=$REPO/data/kjv.txt
  else
    DATA=$BASELINE_DIR/corpus.txt
  fi
  [[ -s $DATA ]] || fail "the baseline's corpus $DATA is missing"
  export DATA
  for ((i = 0; i < ${#flags[@]}; i += 2)); do
    case ${flags[i]} in
      --steps) export STEPS=${flags[i + 1]} ;;
      --batch-size) export BATCH_SIZE=${flags[i + 1]} ;;
      --seq-len) export SEQ_LEN=${flags[i + 1]} ;;
      --eval-every) export EVAL_EVERY=${flags[i + 1]} ;;
      --log-every) export LOG_EVERY=${flags[i + 1]} ;;
      --ckpt-every) export CKPT_EVERY=${flags[i + 1]} ;;
      --lr) export LR=${flags[i + 1]} ;;
      --seed) export SEED=${flags[i + 1]} ;;
      --micro-batches) export MICRO_BATCHES=${flags[i + 1]} ;;
      *) extra+=("${flags[i]}" "${flags[i + 1]}") ;;
    esac
  done
  export EXTRA_ARGS="${extra[*]}"
  export THREADS=1
}

# same_as_baseline RUN: RUN/trace.h5 equals the baseline's at the equivalence matrix's tolerance.
same_as_baseline() {
  "$MPITRON" compare "$BASELINE_DIR/trace.h5" "$1/trace.h5" --rtol 1e-5 ||
    fail "$1/trace.h5 differs from the equivalence baseline"
}

# submit NAME SCRIPT [sbatch options...]: sbatch with RUN=$WORK/NAME and its output there; prints
# the job id.
submit() {
  local name=$1 script=$2
  shift 2
  mkdir -p "$WORK/$name"
  RUN=$WORK/$name sbatch --parsable -o "$WORK/$name/slurm-%j.out" "$@" "$REPO/jobs/$script"
}

# finished NAME ID SECONDS: the job ended COMPLETED within SECONDS, else the test fails with its
# output; prints its run time.
finished() {
  local name=$1 id=$2 limit=$3 state
  state=$(wait_job "$id" "$limit")
  if [[ $state != COMPLETED ]]; then
    cat "$WORK/$name"/slurm-*.out >&2 || true
    fail "$name (job $id): ended $state, exit $(job_field "$id" ExitCode)"
  fi
  log "$name (job $id): COMPLETED on $(job_field "$id" NodeList), run time $(job_field "$id" RunTime)"
}

# hosts_of RUN: the ranks' hosts mpitron printed ("ranks by host: node1: ranks 0-3; ...").
hosts_of() {
  grep -ho 'ranks by host: .*' "$1"/slurm-*.out | tail -n 1
}

# wait_idle [SECONDS]: until no job is left in the queue (a finished job's epilog may still be
# running, and a job started beside it on the same node has seen its shared-memory files go).
wait_idle() {
  local limit=${1:-60} t0=$SECONDS
  while [[ -n $(squeue -h -o %i 2>/dev/null) ]]; do
    ((SECONDS - t0 < limit)) || fail "jobs still queued after $limit s: $(squeue 2>&1)"
    sleep 0.2
  done
}

# startup_crash LOG [RUN]: Open MPI crashed while starting on the virtual nodes (a segmentation
# fault in its start-up, before the run wrote a trace). Seen now and then in full CI runs on this
# setup, never in a run of the `cluster` label alone: several nodes share one machine's /tmp and
# /dev/shm. The launchers below try such a run once more, saying so; a second crash fails.
startup_crash() {
  grep -q "Signal: Segmentation fault" "$1" 2>/dev/null && [[ -z ${2:-} || ! -e $2/trace.h5 ]]
}

# launch LOG COMMAND...: COMMAND with its output in LOG, once more after a start-up crash.
launch() {
  local out=$1 rc=0
  shift
  "$@" >"$out" 2>&1 </dev/null || rc=$?
  if [[ $rc != 0 ]] && startup_crash "$out"; then
    log "Open MPI crashed starting on the virtual nodes ($(grep -m 1 'Signal:' "$out")): once more"
    mv "$out" "$out.crash"
    rc=0
    "$@" >"$out" 2>&1 </dev/null || rc=$?
  fi
  return "$rc"
}

# run_job NAME SECONDS SCRIPT [sbatch options...]: submit (RUN=$WORK/NAME) and wait for COMPLETED
# (finished); a job that crashed starting is submitted once more.
run_job() {
  local name=$1 limit=$2 id state
  shift 2
  id=$(submit "$name" "$@")
  state=$(wait_job "$id" "$limit")
  if [[ $state != COMPLETED ]] && startup_crash "$WORK/$name/slurm-$id.out" "$WORK/$name"; then
    log "$name: Open MPI crashed starting on the virtual nodes (job $id): submitting once more"
    mv "$WORK/$name" "$WORK/$name.crash-$id"
    wait_idle 60
    id=$(submit "$name" "$@")
  fi
  finished "$name" "$id" "$limit"
}
