#!/usr/bin/env bash
# A virtual multi-node Slurm cluster on one machine, for the `cluster` tests and
# `make -f Makefile.slurm sandbox`: each node is a network + UTS namespace with its own hostname
# (node1..nodeN) and address on a private bridge (no route out), running its own slurmd; one
# munged and one slurmctld (in a namespace "head" of its own) serve them all. Partitions as on
# Bridges-2: RM (all nodes), RM-shared (one node a job), and the default `debug` (all nodes).
# Clients (sbatch, salloc, srun, mpirun) run in the machine's own namespace with the environment
# that `env` prints. Open MPI reaches between nodes over TCP on the bridge, within a node through
# shared memory.
#
#   vcluster.sh up NODES DIR        start a cluster of NODES (>= 1) nodes with its state in DIR
#   vcluster.sh down DIR            stop it, remove everything it made, check that nothing remains
#   vcluster.sh env DIR             print the environment for its clients (eval "$(... env DIR)")
#   vcluster.sh exec DIR NODE CMD…  run CMD inside a node's namespaces
#   vcluster.sh kill-node DIR NODE  a node crashes: its link is cut, every process in it SIGKILLed
#   vcluster.sh revive-node DIR NODE  the node "reboots": clean tmp/spool/shm, link up, new slurmd
#
# Variables: VCLUSTER_ID (0-199, default 0) picks the subnet 10.199.ID.0/24 and the link names
# (mpvcID...), so clusters with other ids coexist. Needs root (CAP_SYS_ADMIN for namespaces,
# CAP_NET_ADMIN for the links), unshare, nsenter, ip, munged and Slurm's daemons; where something
# is missing `up` exits 77 saying what.
set -euo pipefail

VC_SKIP=77
VC_CTLD_PORT=16827
VC_SLURMD_PORT=16828
VC_ID=${VCLUSTER_ID:-0}
[[ $VC_ID =~ ^[0-9]+$ && $VC_ID -le 199 ]] || { echo "error: VCLUSTER_ID must be 0-199" >&2; exit 2; }
VC_NET=10.199.$VC_ID
VC_BRIDGE=mpvc${VC_ID}br
VC_HEAD_ADDR=$VC_NET.250
VC_SHM_PREFIX=mpvc$VC_ID

skip() {
  echo "SKIP: $*" >&2
  exit "$VC_SKIP"
}
die() {
  echo "error: $*" >&2
  exit 1
}
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# veth NAME: the machine-side link of member NAME (head, node1, ...).
veth() {
  if [[ $1 == head ]]; then echo "mpvc${VC_ID}h"; else echo "mpvc${VC_ID}n${1#node}"; fi
}
# addr NAME: a member's address on the bridge.
addr() {
  if [[ $1 == head ]]; then echo "$VC_HEAD_ADDR"; else echo "$VC_NET.${1#node}"; fi
}
# in_ns DIR NAME CMD...: CMD in member NAME's namespaces.
in_ns() {
  local d=$1 n=$2
  shift 2
  nsenter --net="$d/ns/$n.net" --uts="$d/ns/$n.uts" "$@"
}
# ns_pids INODE...: the processes in the network namespaces with these inodes (one scan of /proc).
ns_pids() {
  { stat -L -c '%i %n' /proc/[0-9]*/ns/net 2>/dev/null || true; } |
    awk -v want=" $* " 'index(want, " " $1 " ") { split($2, p, "/"); print p[3] }'
}
# kill_ns SIGNAL INODE...: sends SIGNAL to every process in those network namespaces; 0 if none was left.
kill_ns() {
  local sig=$1 pids
  shift
  pids=$(ns_pids "$@")
  [[ -z $pids ]] && return 0
  # shellcheck disable=SC2086
  kill -s "$sig" $pids 2>/dev/null || true
  return 1
}
# members DIR: head and the node names of the cluster in DIR.
members() {
  echo head
  seq -f 'node%g' 1 "$(cat "$1/nodes")"
}
load_id() {
  [[ -f $1/id ]] || return 0
  VC_ID=$(cat "$1/id")
  VC_NET=10.199.$VC_ID
  VC_BRIDGE=mpvc${VC_ID}br
  VC_HEAD_ADDR=$VC_NET.250
  VC_SHM_PREFIX=mpvc$VC_ID
}

# A failed `up` takes down what it made.
up_failed() {
  local rc=$?
  if [[ $rc != 0 ]]; then cmd_down "$VC_UP_DIR" >&2 || true; fi
  exit "$rc"
}

# ---- up -----------------------------------------------------------------------------------
cmd_up() {
  local n=$1 d=$2 t0
  t0=$(now)
  [[ $n =~ ^[1-9][0-9]*$ && $n -le 200 ]] || die "NODES must be 1-200, not '$n'"
  [[ $(id -u) == 0 ]] || skip "a virtual cluster needs root (namespaces, links, slurmd as root)"
  local bin
  for bin in unshare nsenter ip flock munge unmunge sinfo scontrol squeue scancel; do
    command -v "$bin" >/dev/null || skip "'$bin' is missing (util-linux, iproute2, munge, slurm-client)"
  done
  for bin in munged slurmctld slurmd; do
    [[ -x /usr/sbin/$bin ]] || skip "/usr/sbin/$bin is missing (Debian's munge, slurmctld, slurmd)"
  done
  unshare --net --uts true 2>/dev/null ||
    skip "cannot create network and UTS namespaces here (unshare --net --uts: no CAP_SYS_ADMIN?)"
  if ip link show "$VC_BRIDGE" >/dev/null 2>&1; then
    skip "a virtual cluster with id $VC_ID is already up ($(ip -o link show "$VC_BRIDGE" |
      sed -n 's/.*alias \(.*\)$/\1/p')): 'vcluster.sh down DIR' it, or set VCLUSTER_ID"
  fi
  if [[ -e $d/nodes ]]; then die "$d holds a virtual cluster already: 'vcluster.sh down $d' first"; fi
  mkdir -p "$d"
  d=$(realpath "$d")
  [[ -z $(ls -A "$d") ]] || die "$d is not empty"
  chmod 755 "$d"
  echo "$VC_ID" >"$d/id"
  echo "$n" >"$d/nodes"
  # From here on a failure takes down what was made.
  VC_UP_DIR=$d
  trap up_failed EXIT
  mkdir -p "$d"/{ns,munge,state,run,log,spool,tmp}
  chmod 755 "$d/munge"
  touch "$d/shm.before"
  ls /dev/shm >"$d/shm.before" 2>/dev/null || true

  if ! ip link add "$VC_BRIDGE" type bridge 2>"$d/log/ip.err"; then
    skip "cannot create a bridge here (ip link add: $(cat "$d/log/ip.err"); no CAP_NET_ADMIN?)"
  fi
  ip link set "$VC_BRIDGE" alias "$d"
  ip addr add "$VC_NET.254/24" dev "$VC_BRIDGE"
  ip link set "$VC_BRIDGE" up
  local m
  for m in $(members "$d"); do
    touch "$d/ns/$m.net" "$d/ns/$m.uts"
    unshare --net="$d/ns/$m.net" --uts="$d/ns/$m.uts" hostname "$m"
    stat -L -c %i "$d/ns/$m.net" >"$d/ns/$m.inode"
    ip link add "$(veth "$m")" type veth peer name eth0 netns "$d/ns/$m.net"
    ip link set "$(veth "$m")" master "$VC_BRIDGE" up
    in_ns "$d" "$m" ip addr add "$(addr "$m")/24" dev eth0
    in_ns "$d" "$m" ip link set eth0 up
    in_ns "$d" "$m" ip link set lo up
    mkdir -p "$d/tmp/$m" "$d/spool/$m"
  done

  # munge: one daemon with its own key; its socket is a path, which every namespace reaches.
  dd if=/dev/urandom of="$d/munge/munge.key" bs=1024 count=1 status=none
  chmod 400 "$d/munge/munge.key"
  local sock=$d/munge/munge.socket
  /usr/sbin/munged --force --socket="$sock" --key-file="$d/munge/munge.key" \
    --pid-file="$d/run/munged.pid" --log-file="$d/log/munged.log" --seed-file="$d/munge/seed" \
    </dev/null >"$d/log/munged.out" 2>&1 || skip "munged does not start here: $(cat "$d/log/munged.out")"
  munge -n -S "$sock" | unmunge -S "$sock" >/dev/null 2>&1 || skip "munge does not work here"

  # Slurm leaves TMPDIR=/tmp to jobs, and the nodes share the machine's /dev/shm: each job step
  # gets a folder per node for its temporary files and one in /dev/shm for Open MPI's shared memory,
  # which the epilog removes (a killed run's stale segments must not meet its requeued run's, same
  # names). Per step, not per job: a step's Open MPI, finishing, removes its session folders while
  # the next step of the job starts in them (seen: the job body's check step, then the training).
  cat >"$d/taskprolog.sh" <<EOF
#!/bin/sh
t=$d/tmp/\$(hostname)/job\$SLURM_JOB_ID/step\${SLURM_STEP_ID:-batch}
s=/dev/shm/$VC_SHM_PREFIX.\$(hostname).job\$SLURM_JOB_ID/step\${SLURM_STEP_ID:-batch}
mkdir -p "\$t" "\$s"
echo "export TMPDIR=\$t"
echo "export OMPI_MCA_btl_vader_backing_directory=\$s"
EOF
  cat >"$d/epilog.sh" <<EOF
#!/bin/sh
rm -rf "$d/tmp/\$(hostname)/job\$SLURM_JOB_ID" "/dev/shm/$VC_SHM_PREFIX.\$(hostname).job\$SLURM_JOB_ID"
EOF
  chmod 755 "$d/taskprolog.sh" "$d/epilog.sh"
  : >"$d/plugstack.conf"
  local conf=$d/slurm.conf i nodes_line=""
  cat >"$conf" <<EOF
ClusterName=mpitronvc$VC_ID
SlurmctldHost=head($VC_HEAD_ADDR)
SlurmctldPort=$VC_CTLD_PORT
SlurmdPort=$VC_SLURMD_PORT
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$sock,cred_expire=5
MpiDefault=none
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
TaskProlog=$d/taskprolog.sh
Epilog=$d/epilog.sh
PlugStackConfig=$d/plugstack.conf
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
SchedulerType=sched/backfill
SchedulerParameters=batch_sched_delay=0,sched_min_interval=0,sched_interval=2,bf_interval=1
ReturnToService=2
SlurmdTimeout=6
MessageTimeout=3
KillWait=2
MinJobAge=600
InactiveLimit=0
SlurmdParameters=config_overrides
StateSaveLocation=$d/state
SlurmdSpoolDir=$d/spool/%n
SlurmdPidFile=$d/run/slurmd.%n.pid
SlurmdLogFile=$d/log/slurmd.%n.log
TmpFS=$d/tmp/%n
SlurmctldPidFile=$d/run/slurmctld.pid
SlurmctldLogFile=$d/log/slurmctld.log
SlurmctldDebug=info
SlurmdDebug=info
EOF
  # 128 CPUs a node as on Bridges-2's RM (the real cores are shared): its scripts' requests fit.
  for ((i = 1; i <= n; i++)); do
    echo "NodeName=node$i NodeAddr=$VC_NET.$i CPUs=128 RealMemory=16000 State=UNKNOWN" >>"$conf"
  done
  nodes_line="node[1-$n]"
  [[ $n == 1 ]] && nodes_line=node1
  cat >>"$conf" <<EOF
PartitionName=debug Nodes=$nodes_line Default=YES MaxTime=INFINITE State=UP
PartitionName=RM Nodes=$nodes_line MaxTime=INFINITE State=UP
PartitionName=RM-shared Nodes=$nodes_line MaxNodes=1 MaxTime=INFINITE State=UP
EOF
  export SLURM_CONF=$conf
  in_ns "$d" head /usr/sbin/slurmctld -c -f "$conf" </dev/null >"$d/log/slurmctld.out" 2>&1 ||
    die "slurmctld does not start: $(cat "$d/log/slurmctld.out")"
  for ((i = 1; i <= n; i++)); do start_slurmd "$d" "node$i"; done
  local idle=0
  for _ in $(seq 150); do
    idle=$(sinfo -h -N -p debug -o '%N %T' 2>/dev/null | grep -c ' idle$' || true)
    [[ $idle == "$n" ]] && break
    sleep 0.2
  done
  if [[ $idle != "$n" ]]; then
    tail -n 20 "$d"/log/*.log >&2 || true
    die "only $idle of $n nodes became idle in 30 s: $(sinfo -h -N -o '%N %T' 2>&1 | tr '\n' ' ')"
  fi
  write_env "$d"
  trap - EXIT
  echo "virtual cluster: $n nodes (node1..node$n on $VC_NET.0/24) up in $(since "$t0") s, state in $d"
}

start_slurmd() {
  local d=$1 m=$2
  in_ns "$d" "$m" /usr/sbin/slurmd -N "$m" -f "$d/slurm.conf" </dev/null \
    >"$d/log/slurmd.$m.out" 2>&1 || die "slurmd on $m does not start: $(cat "$d/log/slurmd.$m.out")"
}

# The clients' environment (env) and the same MPI settings as a site profile for the job scripts
# (site.env, SITE_ENV=...): Open MPI as root, more ranks than cores, TCP between the nodes over
# the bridge only.
write_env() {
  local d=$1
  cat >"$d/site.env" <<EOF
# shellcheck shell=bash
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_mpi_yield_when_idle=1
export OMPI_MCA_pml=ob1 OMPI_MCA_btl=self,vader,tcp
export OMPI_MCA_btl_tcp_if_include=$VC_NET.0/24 OMPI_MCA_oob_tcp_if_include=$VC_NET.0/24
export OMP_NUM_THREADS=\${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=1
EOF
  {
    echo "export SLURM_CONF=$d/slurm.conf"
    grep '^export' "$d/site.env"
    echo "export VCLUSTER_DIR=$d VCLUSTER_SITE_ENV=$d/site.env"
  } >"$d/env"
}

# ---- down ---------------------------------------------------------------------------------
cmd_down() {
  local d=$1 t0 m inode
  t0=$(now)
  [[ -d $d ]] || { echo "virtual cluster: $d does not exist, nothing to take down"; return 0; }
  d=$(realpath "$d")
  [[ -f $d/nodes ]] || die "$d holds no virtual cluster (no $d/nodes)"
  load_id "$d"
  if [[ -f $d/slurm.conf ]] && timeout 5 env SLURM_CONF="$d/slurm.conf" scontrol ping >/dev/null 2>&1; then
    local ids
    ids=$(SLURM_CONF=$d/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null || true)
    if [[ -n $ids ]]; then
      # shellcheck disable=SC2086
      SLURM_CONF=$d/slurm.conf timeout 5 scancel $ids 2>/dev/null || true
      for _ in $(seq 20); do
        [[ -z $(SLURM_CONF=$d/slurm.conf timeout 5 squeue -h -o %i 2>/dev/null) ]] && break
        sleep 0.25
      done
    fi
  fi
  # Every process in the members' namespaces: daemons, step daemons, tasks, shells entered.
  local inodes=()
  for m in $(members "$d"); do
    [[ -s $d/ns/$m.inode ]] && inodes+=("$(cat "$d/ns/$m.inode")")
  done
  local sig=TERM
  for i in $(seq 50); do
    kill_ns "$sig" "${inodes[@]}" && break
    ((i >= 10)) && sig=KILL
    sleep 0.2
  done
  local pid
  if pid=$(tr -dc '0-9' 2>/dev/null <"$d/run/munged.pid") && [[ -n $pid ]] &&
    grep -qa munged "/proc/$pid/cmdline" 2>/dev/null; then
    kill "$pid" 2>/dev/null || true
    for _ in $(seq 5); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -9 "$pid" 2>/dev/null || true
  fi
  for m in $(members "$d"); do
    ip link del "$(veth "$m")" 2>/dev/null || true
  done
  # Only our own bridge: the one whose alias is this folder.
  if ip -o link show "$VC_BRIDGE" 2>/dev/null | grep -q "alias $d\$"; then ip link del "$VC_BRIDGE"; fi
  for m in $(members "$d"); do
    umount "$d/ns/$m.net" 2>/dev/null || true
    umount "$d/ns/$m.uts" 2>/dev/null || true
  done
  # Shared memory of the jobs' Open MPI ranks: their folders, and any vader_segment.<node>.* made
  # since `up` by a rank that did not get one.
  local f
  rm -rf /dev/shm/"$VC_SHM_PREFIX".node*
  for f in /dev/shm/*; do
    [[ -e $f ]] || continue
    grep -qxF "$(basename "$f")" "$d/shm.before" 2>/dev/null && continue
    for m in $(members "$d"); do
      if [[ $(basename "$f") == *."$m".* ]]; then rm -rf "$f"; fi
    done
  done
  # Anything left is a failure of the teardown: say what.
  local problems=()
  local pids
  pids=$(ns_pids "${inodes[@]}")
  [[ -z $pids ]] || problems+=("processes $(tr '\n' ' ' <<<"$pids")in the namespaces")
  if [[ -f $d/run/munged.pid ]] && pid=$(tr -dc '0-9' <"$d/run/munged.pid") && [[ -n $pid ]] &&
    kill -0 "$pid" 2>/dev/null && grep -qa munged "/proc/$pid/cmdline" 2>/dev/null; then
    problems+=("munged $pid")
  fi
  for m in $(members "$d"); do
    ip link show "$(veth "$m")" >/dev/null 2>&1 && problems+=("link $(veth "$m")")
  done
  if ip -o link show "$VC_BRIDGE" 2>/dev/null | grep -q "alias $d\$"; then problems+=("bridge $VC_BRIDGE"); fi
  if grep -qF " $d/" /proc/self/mountinfo; then problems+=("mounts: $(grep -F " $d/" /proc/self/mountinfo | cut -d' ' -f5 | tr '\n' ' ')"); fi
  for f in /dev/shm/*; do
    [[ -e $f ]] || continue
    for m in $(members "$d"); do
      if [[ $(basename "$f") == *."$m".* ]] && ! grep -qxF "$(basename "$f")" "$d/shm.before" 2>/dev/null; then
        problems+=("$f")
      fi
    done
  done
  if [[ ${#problems[@]} -gt 0 ]]; then
    printf 'error: the virtual cluster in %s left: %s\n' "$d" "${problems[*]}" >&2
    return 1
  fi
  if [[ ${VCLUSTER_KEEP:-0} == 1 ]]; then
    rm -f "$d/nodes"
    echo "virtual cluster: kept its folder $d (VCLUSTER_KEEP=1)"
  else
    rm -rf "$d"
    [[ ! -e $d ]] || { echo "error: $d could not be removed" >&2; return 1; }
  fi
  echo "virtual cluster in $d down in $(since "$t0") s: no process, link, mount or shared-memory file left"
}

# ---- node loss ----------------------------------------------------------------------------
cmd_kill_node() {
  local d=$1 m=$2
  load_id "$d"
  [[ -s $d/ns/$m.inode && $m == node* ]] || die "no node $m in $d"
  # The link first, so no half-dead process says goodbye to the others; then every process.
  ip link set "$(veth "$m")" down
  local inode
  inode=$(cat "$d/ns/$m.inode")
  for _ in $(seq 50); do
    kill_ns KILL "$inode" && break
    sleep 0.1
  done
  [[ -z $(ns_pids "$inode") ]] || die "processes survived in $m: $(ns_pids "$inode" | tr '\n' ' ')"
}

cmd_revive_node() {
  local d=$1 m=$2
  load_id "$d"
  [[ -s $d/ns/$m.inode && $m == node* ]] || die "no node $m in $d"
  [[ -z $(ns_pids "$(cat "$d/ns/$m.inode")") ]] || die "$m is still running: kill-node it first"
  # A reboot's clean slate: a stale PMIx socket in the spool would fail the next step on it.
  rm -rf "${d:?}/tmp/$m" "$d/spool/$m"
  mkdir -p "$d/tmp/$m" "$d/spool/$m"
  rm -rf /dev/shm/vader_segment."$m".* /dev/shm/"$VC_SHM_PREFIX.$m".*
  ip link set "$(veth "$m")" up
  export SLURM_CONF=$d/slurm.conf
  start_slurmd "$d" "$m"
  local state=""
  for _ in $(seq 100); do
    state=$(sinfo -h -n "$m" -o %T 2>/dev/null | head -n 1)
    [[ $state == idle || $state == mixed || $state == allocated ]] && return 0
    sleep 0.2
  done
  die "$m did not come back (state '$state')"
}

case ${1:-} in
  up)
    [[ $# == 3 ]] || die "usage: vcluster.sh up NODES DIR"
    cmd_up "$2" "$3"
    ;;
  down)
    [[ $# == 2 ]] || die "usage: vcluster.sh down DIR"
    cmd_down "$2"
    ;;
  env)
    [[ $# == 2 && -f $2/env ]] || die "usage: vcluster.sh env DIR (of a cluster that is up)"
    cat "$2/env"
    ;;
  exec)
    [[ $# -ge 4 ]] || die "usage: vcluster.sh exec DIR NODE COMMAND..."
    d=$2 m=$3
    shift 3
    [[ -s $d/ns/$m.inode ]] || die "no node $m in $d"
    in_ns "$d" "$m" "$@"
    ;;
  kill-node)
    [[ $# == 3 ]] || die "usage: vcluster.sh kill-node DIR NODE"
    cmd_kill_node "$(realpath "$2")" "$3"
    ;;
  revive-node)
    [[ $# == 3 ]] || die "usage: vcluster.sh revive-node DIR NODE"
    cmd_revive_node "$(realpath "$2")" "$3"
    ;;
  *)
    sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
    [[ ${1:-} == -h || ${1:-} == --help || ${1:-} == help ]] || exit 2
    ;;
esac
