#!/usr/bin/env bash
# A private single-node Slurm cluster on localhost for the `slurm` tests, sourced by them:
# munged, slurmctld and slurmd started by hand (no systemd) with all state in a temporary folder,
# partitions named like PSC Bridges-2's (RM, RM-shared, GPU, GPU-shared) and eight fake
# `v100-32` GPUs (character devices, no hardware behind them), torn down on exit.
# Where munge or Slurm cannot start here the test exits 77 (CTest: skipped) saying why.
#
# Use:  source cluster.sh; cluster_start   (sets SLURM_CONF, CLUSTER_DIR; trap tears down)
# Variables: MPITRON_SLURM_KEEP=1 keeps the folder (logs, state) after the test; MPITRON_KEEP_WORK=1
# keeps the test's work folder after it passed.

SLURM_TEST_SKIP=77
# Non-default ports, so a site's own Slurm on 6817/6818 is never touched; one test cluster at a
# time on a machine, guarded by a lock (concurrent ctest runs wait for each other).
SLURM_TEST_CTLD_PORT=${SLURM_TEST_CTLD_PORT:-16817}
SLURM_TEST_SLURMD_PORT=${SLURM_TEST_SLURMD_PORT:-16818}
SLURM_TEST_LOCK=${SLURM_TEST_LOCK:-/tmp/mpitron-slurm-test.lock}
CLUSTER_DIR=
export CLUSTER_GPUS=0 # fake GPUs of the node (8 where mknod is allowed), for the tests

skip() {
  echo "SKIP: $*" >&2
  exit "$SLURM_TEST_SKIP"
}

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

log() { echo "[$(date +%T)] $*"; }

# Prints the last lines of the daemons' logs (for a failure or a skip).
cluster_logs() {
  local f
  for f in "$CLUSTER_DIR"/log/*.log; do
    [[ -s $f ]] || continue
    echo "---- $f (last 15 lines)"
    tail -n 15 "$f"
  done >&2
}

# Prints the cluster's jobs and steps and this machine's processes (for a session that hangs).
cluster_state() {
  {
    echo "---- squeue; squeue --steps"
    squeue 2>&1 || true
    squeue --steps 2>&1 || true
    echo "---- scontrol show job"
    scontrol show job 2>&1 || true
    echo "---- processes"
    ps -eo pid,ppid,pgid,stat,etimes,args --forest 2>&1 || true
  } >&2
}

# pid_of FILE: the pid written in a daemon's pid file, if any.
pid_of() { [[ -s $1 ]] && tr -dc '0-9' <"$1"; }

cluster_stop() {
  local rc=$?
  [[ -n $CLUSTER_DIR && -d $CLUSTER_DIR ]] || return "$rc"
  if [[ $rc != 0 && $rc != "$SLURM_TEST_SKIP" ]]; then cluster_logs; fi
  if [[ -n ${SLURM_CONF:-} ]] && scontrol ping >/dev/null 2>&1; then
    # Cancel what is left, let the step daemons finish, then stop the daemons.
    local ids
    ids=$(squeue -h -o %i 2>/dev/null || true)
    if [[ -n $ids ]]; then
      # shellcheck disable=SC2086
      scancel $ids 2>/dev/null || true
      for _ in $(seq 50); do
        [[ -z $(squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.2
      done
    fi
    scontrol shutdown >/dev/null 2>&1 || true
  fi
  local f pid
  for f in "$CLUSTER_DIR"/run/slurmctld.pid "$CLUSTER_DIR"/run/slurmd.pid \
           "$CLUSTER_DIR"/run/munged.pid; do
    pid=$(pid_of "$f") || continue
    [[ -n $pid ]] || continue
    for _ in $(seq 25); do
      kill -0 "$pid" 2>/dev/null || break
      [[ $f == *munged.pid ]] && kill "$pid" 2>/dev/null
      sleep 0.2
    done
    kill -9 "$pid" 2>/dev/null || true
  done
  if [[ ${MPITRON_SLURM_KEEP:-0} == 1 ]]; then
    echo "kept the cluster folder $CLUSTER_DIR" >&2
  else
    rm -rf "$CLUSTER_DIR"
  fi
  rm -f "$SLURM_TEST_LOCK.dir"
  # A passing or skipped test leaves no work folder behind (CI's disk is small); a failing one keeps it.
  if [[ ($rc == 0 || $rc == "$SLURM_TEST_SKIP") && ${MPITRON_KEEP_WORK:-0} != 1 && -n ${WORK:-} ]]; then
    cd / && rm -rf "$WORK"
  fi
  return "$rc"
}

# cluster_start: starts munged, slurmctld and slurmd; returns when the node is idle.
cluster_start() {
  local bin
  for bin in munged munge unmunge slurmctld slurmd sbatch srun scontrol squeue scancel sinfo; do
    command -v "$bin" >/dev/null 2>&1 || [[ -x /usr/sbin/$bin ]] ||
      skip "'$bin' is missing: install Debian's slurm-wlm, slurmctld, slurmd, slurm-client and munge (make deps)"
  done
  [[ $(id -u) == 0 ]] || skip "a private Slurm cluster needs root here (SlurmUser=root, slurmd as root)"
  command -v flock >/dev/null || skip "flock is missing"
  # The daemons are started without this descriptor, so the lock ends with the test.
  exec {SLURM_TEST_LOCK_FD}>"$SLURM_TEST_LOCK"
  flock -w 240 "$SLURM_TEST_LOCK_FD" ||
    skip "another test cluster held $SLURM_TEST_LOCK for 4 minutes"

  # A test killed outright (a CTest timeout) leaves its daemons behind: stop them, by the pids
  # in their pid files, before they block the ports.
  local old pidfile pid
  old=$(cat "$SLURM_TEST_LOCK.dir" 2>/dev/null || true)
  if [[ $old == /tmp/mpitron-slurm.* && -d $old ]]; then
    for pidfile in "$old"/run/*.pid; do
      pid=$(pid_of "$pidfile") || continue
      if [[ -n $pid ]] && grep -qaE 'slurm|munge' "/proc/$pid/cmdline" 2>/dev/null; then
        echo "stopping pid $pid of a test cluster left in $old" >&2
        kill -9 "$pid" 2>/dev/null || true
      fi
    done
    rm -rf "$old"
  fi

  CLUSTER_DIR=$(mktemp -d /tmp/mpitron-slurm.XXXXXX)
  chmod 755 "$CLUSTER_DIR"
  echo "$CLUSTER_DIR" >"$SLURM_TEST_LOCK.dir"
  trap cluster_stop EXIT
  trap 'exit 143' TERM
  trap 'exit 130' INT
  local d=$CLUSTER_DIR
  mkdir -p "$d"/{munge,state,spool,run,log,dev}
  chmod 755 "$d/munge"

  # munge: a private daemon with its own key and socket (the machine's munged is left alone).
  dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$d/munge/munge.key"
  export MUNGE_SOCKET=$d/munge/munge.socket
  if ! /usr/sbin/munged --force --socket="$MUNGE_SOCKET" --key-file="$d/munge/munge.key" \
      --pid-file="$d/run/munged.pid" --log-file="$d/log/munged.log" \
      --seed-file="$d/munge/munged.seed" >"$d/log/munged.out" 2>&1 {SLURM_TEST_LOCK_FD}>&-; then
    cat "$d/log/munged.out" >&2
    skip "munged does not start here (see above)"
  fi
  munge -n -S "$MUNGE_SOCKET" | unmunge -S "$MUNGE_SOCKET" >/dev/null 2>&1 ||
    skip "munge does not work here: 'munge -n | unmunge' fails"

  # Fake GPUs: eight character devices (like /dev/null) stand in for /dev/nvidia*, so the
  # Bridges-2 scripts' `--gpus=v100-32:N` is scheduled unchanged and CUDA_VISIBLE_DEVICES set.
  local gres_node="" i
  CLUSTER_GPUS=0
  if (for i in 0 1 2 3 4 5 6 7; do mknod "$d/dev/fakegpu$i" c 1 3 2>/dev/null || exit 1; done); then
    gres_node="Gres=gpu:v100-32:8"
    CLUSTER_GPUS=8
    echo "NodeName=localhost Name=gpu Type=v100-32 File=$d/dev/fakegpu[0-7]" >"$d/gres.conf"
  else
    echo "note: mknod is not allowed here: the test cluster has no (fake) GPUs, GPU requests are dropped" >&2
    : >"$d/gres.conf"
  fi

  export SLURM_CONF=$d/slurm.conf
  cat >"$SLURM_CONF" <<EOF
ClusterName=mpitrontest
SlurmctldHost=localhost
SlurmctldPort=$SLURM_TEST_CTLD_PORT
SlurmdPort=$SLURM_TEST_SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$MUNGE_SOCKET,cred_expire=5
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=1
GresTypes=gpu
ReturnToService=2
KillWait=5
MinJobAge=600
InactiveLimit=0
SlurmdParameters=config_overrides
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmdPidFile=$d/run/slurmd.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmdLogFile=$d/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
NodeName=localhost NodeAddr=127.0.0.1 CPUs=128 RealMemory=16000 $gres_node State=UNKNOWN
PartitionName=RM-shared Nodes=localhost Default=YES MaxTime=INFINITE State=UP
PartitionName=RM Nodes=localhost MaxTime=INFINITE State=UP
PartitionName=GPU-shared Nodes=localhost MaxTime=INFINITE State=UP
PartitionName=GPU Nodes=localhost MaxTime=INFINITE State=UP
EOF
  # Clients inside jobs (scontrol requeue) find the cluster through SLURM_CONF, which sbatch
  # exports with the rest of the environment.
  if ! /usr/sbin/slurmctld -c -f "$SLURM_CONF" >"$d/log/slurmctld.out" 2>&1 {SLURM_TEST_LOCK_FD}>&-; then
    cat "$d/log/slurmctld.out" >&2
    cluster_logs
    skip "slurmctld does not start here (see above)"
  fi
  if ! /usr/sbin/slurmd -N localhost -f "$SLURM_CONF" >"$d/log/slurmd.out" 2>&1 {SLURM_TEST_LOCK_FD}>&-; then
    cat "$d/log/slurmd.out" >&2
    cluster_logs
    skip "slurmd does not start here (see above)"
  fi
  local state=""
  for _ in $(seq 150); do
    state=$(sinfo -h -n localhost -o %T 2>/dev/null | head -n 1)
    [[ $state == idle ]] && break
    sleep 0.2
  done
  if [[ $state != idle ]]; then
    cluster_logs
    skip "the Slurm node did not become idle in 30 s (state '$state')"
  fi
  log "Slurm cluster up in $d (ports $SLURM_TEST_CTLD_PORT/$SLURM_TEST_SLURMD_PORT)"
}

# job_field ID FIELD: one field of `scontrol show job` (JobState, ExitCode, Restarts, ...).
job_field() {
  scontrol show job -o "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n 1
}

# wait_job ID SECONDS: waits until the job has ended; prints its final state.
wait_job() {
  local id=$1 limit=$2 state="" t0=$SECONDS
  while ((SECONDS - t0 < limit)); do
    state=$(job_field "$id" JobState)
    case $state in
      COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | OUT_OF_MEMORY | BOOT_FAIL | DEADLINE)
        echo "$state"
        return 0
        ;;
    esac
    sleep 0.5
  done
  echo "TIMEOUT_WAITING($state)"
}

# slurm_test_setup MPITRON REPO WORK: the arguments every slurm test takes (binary, checkout, fresh
# work folder); sets MPITRON, REPO, WORK, CORPUS and enters WORK.
slurm_test_setup() {
  MPITRON=$(realpath "$1")
  REPO=$(realpath "$2")
  # The Python that imports h5py and numpy: from CTest (tests/python.cmake), else the same search.
  export PYTHON=${PYTHON:-$("$REPO/tests/find_python.sh" h5py numpy || echo python3)}
  WORK=$3
  rm -rf "$WORK"
  mkdir -p "$WORK"
  WORK=$(realpath "$WORK")
  cd "$WORK" || exit 1
  [[ -x $MPITRON ]] || fail "$MPITRON is not executable"
  if [[ -s $REPO/data/kjv.txt ]]; then
    CORPUS=$REPO/data/kjv.txt
  else # a bare checkout: a synthetic text does as well for these tests
    CORPUS=$WORK/corpus.txt
    "$PYTHON" -c "
import random
r = random.Random(7)
words = 'and the of to in that he shall unto for i his a lord they be is him not them it with all'.split()
print('\n'.join(' '.join(r.choice(words) for _ in range(12)) + '.' for _ in range(40000)))" >"$CORPUS"
  fi
  # What the job scripts read: the binary and checkout under test, the one-machine site profile.
  export MPITRON MPITRON_ROOT=$REPO SITE_ENV=jobs/local.env DATA=$CORPUS
}

# check_trace DIR STEPS: DIR/trace.h5 holds steps 1..STEPS, each once, in order, with finite losses,
# and DIR/ckpt_STEPS.h5 exists.
check_trace() {
  [[ -f $1/trace.h5 ]] || fail "$1/trace.h5 is missing"
  [[ -f $1/ckpt_$2.h5 ]] || fail "$1/ckpt_$2.h5 is missing"
  "$PYTHON" - "$1/trace.h5" "$2" <<'PY' || fail "$1/trace.h5 is not steps 1..$2"
import math, sys, h5py
with h5py.File(sys.argv[1], "r") as f:
    steps = [int(s) for s in f["trace/step"][:]]
    loss = f["trace/loss"][:]
n = int(sys.argv[2])
if steps != list(range(1, n + 1)):
    sys.exit(f"steps are {steps[:5]}...{steps[-5:]} ({len(steps)} rows), not 1..{n}")
if not all(math.isfinite(x) for x in loss):
    sys.exit("a loss is not finite")
PY
}

# trace_attr TRACE NAME: a root attribute of a trace (layout.dp, ...).
trace_attr() {
  "$PYTHON" -c "
import sys, h5py
v = h5py.File(sys.argv[1], 'r').attrs[sys.argv[2]]
print(v.decode() if isinstance(v, bytes) else v)" "$1" "$2"
}
