#!/usr/bin/env bash
# Placement is checked, not assumed: 3 ranks on each of 2 nodes at tp 2 put the TP group of ranks
# 2 and 3 on two hosts. The run's log names each rank's host and warns naming that group; under
# --strict-placement the same layout is refused in one line before any step. 4 ranks a node keep
# every TP group inside a node: no warning.
# Arguments: mpitron binary, checkout, work folder, virtual cluster folder, baseline folder.
set -euo pipefail
# shellcheck source=tests/slurm/cluster.sh
source "$(dirname "$0")/../slurm/cluster.sh"
# shellcheck source=tests/cluster/common.sh
source "$(dirname "$0")/common.sh"
cluster_test_setup "$@"
baseline_env
args=(train --config "$CONFIG" --data "$DATA" --steps 1 --batch-size 12 --seq-len 16 --eval-every 0
  --log-every 1 --tp 2)

rc=0
launch spread.log timeout 90 srun -N 2 --ntasks-per-node=3 --mpi=pmix "$MPITRON" "${args[@]}" \
  --out "$WORK/spread" || rc=$?
[[ $rc == 0 ]] || { cat spread.log >&2; fail "the spread layout did not train (exit $rc)"; }
grep -q "ranks by host: node[0-9]*: ranks 0-2; node[0-9]*: ranks 3-5" spread.log ||
  fail "no line naming each rank's host: $(grep 'ranks by host' spread.log)"
grep -q "the TP group of dp rank 1 and pp stage 0 (ranks 2,3) spans hosts node[0-9]*, node[0-9]*: its all-reduces cross the network" spread.log ||
  fail "no warning naming the TP group across nodes: $(grep -i 'tp group' spread.log)"
[[ $(grep -c "spans hosts" spread.log) == 1 ]] || fail "other TP groups than ranks 2,3 reported: $(grep 'spans hosts' spread.log)"

wait_idle 60
rc=0
launch strict.log timeout 90 srun -N 2 --ntasks-per-node=3 --mpi=pmix "$MPITRON" "${args[@]}" \
  --strict-placement --out "$WORK/strict" || rc=$?
[[ $rc != 0 && $rc != 124 ]] || { cat strict.log >&2; fail "--strict-placement did not refuse the layout (exit $rc)"; }
[[ $(grep -c "^error: --strict-placement: the TP group of dp rank 1 and pp stage 0 (ranks 2,3) spans hosts" strict.log) == 1 ]] ||
  { cat strict.log >&2; fail "--strict-placement: expected one error line naming the group"; }
[[ ! -e $WORK/strict/trace.h5 ]] || fail "--strict-placement refused after a step was traced"

wait_idle 60
rc=0
launch whole.log timeout 90 srun -N 2 --ntasks-per-node=4 --mpi=pmix "$MPITRON" "${args[@]}" \
  --batch-size 8 --strict-placement --out "$WORK/whole" || rc=$?
[[ $rc == 0 ]] || { cat whole.log >&2; fail "4 ranks a node at tp 2 was refused (exit $rc)"; }
grep -q "spans hosts" whole.log && fail "a warning where every TP group is inside a node"
log "placement: hosts logged, a TP group across nodes warned about and refused under --strict-placement"
