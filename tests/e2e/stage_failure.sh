#!/usr/bin/env bash
# A rank that dies inside the pipeline ends the whole job, never a hang: a long pp 2 run is
# started, and once it logs training steps one stage's process is killed (SIGKILL: no handler,
# no checkpoint), first the last stage, then in a second run the first. The launcher must exit
# non-zero within 60 s, and no mpitron process of the run may be left behind.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)

launcher=""
run_dir=""
# The rank processes of the run in $run_dir: mpitron processes with its --out and an MPI rank.
ranks_of_run() {
  local pid
  for pid in $(pgrep -f -- "--out $run_dir( |$)" || true); do
    [[ $(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -1) == "$MPITRON" ]] || continue
    local rank
    rank=$(tr '\0' '\n' <"/proc/$pid/environ" 2>/dev/null | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')
    [[ -n $rank ]] && echo "$pid $rank"
  done
  return 0
}
# On any exit: end what this test started and is still running (the launcher, its ranks).
cleanup() {
  if [[ -n $run_dir ]]; then
    local pid rank
    while read -r pid rank; do kill -KILL "$pid" 2>/dev/null || true; done < <(ranks_of_run)
  fi
  if [[ -n $launcher ]]; then kill -KILL "$launcher" 2>/dev/null || true; fi
}
on_exit cleanup

# kill_stage VICTIM_RANK: starts a long pp 2 run, kills the rank once training runs, checks the end.
kill_stage() {
  local victim=$1
  run_dir=$WORK/run_kill_rank$victim
  local log=$WORK/kill_rank$victim.log
  mpiexec -n 2 "$MPITRON" train --config "$TINY" --data "$data" --pp 2 --micro-batches 4 \
    --batch-size 8 --seq-len 32 --steps 100000 --log-every 1 --eval-every 0 --ckpt-every 0 \
    --out "$run_dir" >"$log" 2>&1 &
  launcher=$!
  local i
  for ((i = 0; i < 600; i++)); do  # up to 60 s for the first progress lines
    if [[ $(grep -c '] step  *[0-9]*/100000 ' "$log") -ge 2 ]]; then break; fi
    kill -0 "$launcher" 2>/dev/null || fail "the run ended before training: $(cat "$log")"
    sleep 0.1
  done
  [[ $i -lt 600 ]] || fail "no training steps logged within 60 s: $(cat "$log")"
  local procs pid="" rank
  procs=$(ranks_of_run)
  [[ $(wc -l <<<"$procs") == 2 ]] || fail "expected 2 rank processes of $run_dir, found: $procs"
  while read -r p rank; do if [[ $rank == "$victim" ]]; then pid=$p; fi; done <<<"$procs"
  [[ -n $pid ]] || fail "no process of rank $victim among: $procs"
  echo "rank $victim (pid $pid) killed after: $(grep '] step ' "$log" | tail -1)"
  kill -KILL "$pid"
  local start=$SECONDS
  while kill -0 "$launcher" 2>/dev/null && ((SECONDS - start < 60)); do sleep 0.2; done
  if kill -0 "$launcher" 2>/dev/null; then
    fail "the job still runs 60 s after rank $victim was killed (a hang): $(tail -5 "$log")"
  fi
  local rc=0
  wait "$launcher" || rc=$?
  launcher=""
  [[ $rc != 0 ]] || fail "mpiexec exited 0 after rank $victim was killed"
  echo "mpiexec exited $rc after $((SECONDS - start)) s"
  sleep 1
  local left
  left=$(ranks_of_run)
  [[ -z $left ]] || fail "mpitron processes left behind after rank $victim was killed: $left"
  [[ ! -e $run_dir/ckpt_100000.h5 ]] || fail "the killed run wrote its final checkpoint"
}
kill_stage 1
kill_stage 0
echo "stage failure ok"
