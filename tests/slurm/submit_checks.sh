#!/usr/bin/env bash
# `make -f Makefile.slurm submit` checks a request against the cluster before it queues anything
# (jobs/submit.sh), on a real (single-node) Slurm cluster: a partition renamed by the site profile
# (PARTITION_RM=RM-shared) is the one the job runs in; a partition that does not exist (by name or
# by the site's mapping), more nodes than the partition has, more ranks x cores a node than a
# node's CPUs, ranks that do not fill the nodes evenly, and (where accounting answers: faked here)
# an account that is not the user's are each refused with a clear message, nothing queued, RUN
# removed. The job itself runs a stand-in mpitron that records its arguments.
# Arguments: mpitron binary, checkout, work folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/cluster.sh"
slurm_test_setup "$@"
cluster_start

fake=$WORK/fake-mpitron
cat >"$fake" <<'EOF'
#!/bin/sh
if [ "$1" = train ]; then
  out=. prev=
  for a in "$@"; do
    if [ "$prev" = --out ]; then out=$a; fi
    prev=$a
  done
  echo "$*" >"$out/train-args.${OMPI_COMM_WORLD_RANK:-0}"
fi
EOF
chmod +x "$fake"
export MPITRON=$fake
# Accounting, faked: the user's associations are abc123 and xyz.
mkdir -p "$WORK/bin"
cat >"$WORK/bin/sacctmgr" <<'EOF'
#!/bin/sh
printf 'abc123\nxyz\n'
EOF
chmod +x "$WORK/bin/sacctmgr"
cat >"$WORK/site.env" <<EOF
# shellcheck shell=bash
source "$REPO/jobs/local.env"
PARTITION_RM=RM-shared
PARTITION_GPU_SHARED=gpu-elsewhere
EOF

# submit NAME [make variables...]: make submit with RUN=$WORK/NAME, its output in $WORK/NAME.log.
submit() {
  local name=$1
  shift
  make -s -C "$REPO" -f Makefile.slurm submit RUN="$WORK/$name" TIME=10 "$@" >"$WORK/$name.log" 2>&1
}
# refused NAME MESSAGE [make variables...]: refused with MESSAGE, nothing queued, RUN removed.
refused() {
  local name=$1 msg=$2
  shift 2
  if submit "$name" "$@"; then fail "$name: submitted: $(cat "$WORK/$name.log")"; fi
  grep -q -- "^error: $msg" "$WORK/$name.log" || fail "$name: not refused with '$msg': $(cat "$WORK/$name.log")"
  [[ ! -e $WORK/$name ]] || fail "$name: $WORK/$name was left behind"
  [[ -z $(squeue -h -o %i) ]] || fail "$name: a job was queued: $(squeue)"
  log "$name: $(grep '^error: ' "$WORK/$name.log")"
}

refused no-partition "partition 'nowhere' does not exist on this cluster (.*partitions: GPU GPU-shared RM RM-shared)" \
  PARTITION=nowhere RANKS=2
refused no-mapped-partition "partition 'gpu-elsewhere' does not exist on this cluster .*PARTITION_GPU_SHARED=" \
  PARTITION=GPU-shared GPUS=1 SITE_ENV="$WORK/site.env"
refused too-many-nodes "2 node(s) asked for, but partition RM has 1: ask for fewer nodes" \
  PARTITION=RM NODES=2 RANKS=1 CPUS=1
refused too-many-cores "40 rank(s) on 1 node(s) are 40 a node x 4 core(s) a rank = 160 cores a node, but the nodes of partition RM-shared have at most 128 CPUs" \
  PARTITION=RM-shared RANKS=40 CPUS=4
refused uneven "3 rank(s) on 2 node(s) with --ntasks-per-node=2 " PARTITION=debug NODES=2 RANKS=3
PATH=$WORK/bin:$PATH refused not-my-account "account 'nope' is not one of yours on this cluster (sacctmgr show assoc: abc123 xyz)" \
  PARTITION=RM-shared RANKS=2 CPUS=1 ACCOUNT=nope

# The site's name: PARTITION=RM runs jobs/bridges2-rm.sbatch in RM-shared (an account of the user's).
PATH=$WORK/bin:$PATH submit mapped PARTITION=RM RANKS=2 CPUS=1 ACCOUNT=abc123 SITE_ENV="$WORK/site.env" ||
  fail "make submit PARTITION=RM with PARTITION_RM=RM-shared failed: $(cat "$WORK/mapped.log")"
grep -q "^partition RM is RM-shared here (PARTITION_RM in $WORK/site.env)" "$WORK/mapped.log" ||
  fail "the mapping was not reported: $(cat "$WORK/mapped.log")"
id=$(sed -n 's/^Submitted batch job \([0-9]*\).*/\1/p' "$WORK/mapped.log")
[[ -n $id ]] || fail "no job id from make submit: $(cat "$WORK/mapped.log")"
state=$(wait_job "$id" 120)
[[ $state == COMPLETED ]] || fail "the mapped job ended $state: $(cat "$WORK"/mapped/slurm-*.out)"
[[ $(job_field "$id" Partition) == RM-shared ]] || fail "the mapped job ran in $(job_field "$id" Partition)"
grep -q "partition=RM-shared " "$WORK/mapped/jobs.log" || fail "jobs.log: not RM-shared: $(cat "$WORK/mapped/jobs.log")"
[[ -f $WORK/mapped/train-args.0 && -f $WORK/mapped/train-args.1 && -f $WORK/mapped/bridges2-rm.sbatch ]] ||
  fail "the mapped job did not train on 2 ranks with jobs/bridges2-rm.sbatch: $(ls "$WORK/mapped")"
log "PARTITION=RM ran in RM-shared (job $id); bad partitions, nodes, cores and accounts refused before sbatch"
