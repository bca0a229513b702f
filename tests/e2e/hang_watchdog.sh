#!/usr/bin/env bash
# A rank that stops making progress (SIGSTOP: a stuck device, a dead mount) must not hold the
# job for ever: the other ranks' watchdogs end it within --hang-timeout plus a few seconds, each
# naming itself, the step and what it waited in; no process is left behind. At dp 4, and in a
# pipeline with tensor parallelism (pp 2 x tp 2).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
timeout_s=5
started=()
ranks_of() {  # the rank processes of run $1 (argv[0] is the mpitron binary, not the launcher)
  local pid
  for pid in $(pgrep -f -- "--out $WORK/$1( |$)" || true); do
    [[ $(tr '\0' '\n' <"/proc/$pid/cmdline" 2>/dev/null | head -n 1) == "$MPITRON" ]] && echo "$pid"
  done
  return 0
}
cleanup() {
  local p pid
  for p in "${started[@]}"; do
    for pid in $(ranks_of "$p"); do kill -CONT "$pid" 2>/dev/null; kill -KILL "$pid" 2>/dev/null; done
  done
  return 0
}
on_exit cleanup

stop_one_rank() {  # name layout flags...
  local name=$1
  shift
  started+=("$name")
  (
    rc=0
    timeout -k 5 120 mpiexec -n 4 "$MPITRON" train --config "$TINY" --data "$data" --steps 100000 \
      --batch-size 8 --seq-len 16 --log-every 1 --hang-timeout $timeout_s "$@" --out "$WORK/$name" \
      >"$name.log" 2>&1 || rc=$?
    echo "rc=$rc" >>"$name.log"
  ) &
  for _ in $(seq 600); do grep -qs "step      3/" "$name.log" && break; sleep 0.1; done
  grep -qs "step      3/" "$name.log" || fail "$name: training did not start: $(cat "$name.log")"
  local pid
  pid=$(ranks_of "$name" | tail -n 1)
  [[ -n $pid ]] || fail "$name: no rank process found"
  local t0=$SECONDS
  kill -STOP "$pid"
  while ! grep -qs "^rc=" "$name.log"; do
    ((SECONDS - t0 < 60)) || fail "$name: the job still runs 60 s after a rank was stopped"
    sleep 0.2
  done
  local took=$((SECONDS - t0))
  grep "^rc=" "$name.log" | grep -qv "rc=0" || fail "$name: the job ended with exit 0"
  ((took <= timeout_s + 15)) || fail "$name: the job ended only after $took s"
  grep -Eq "^\[rank [0-9]+\] error: no progress for [0-9]+ s \(--hang-timeout\) at step [0-9]+ in .*; last MPI call entered: MPI_[A-Za-z_ ]+ on the (world|dp|tp|pp|embedding) group: ending the job" \
    "$name.log" || fail "$name: no watchdog line naming the call it waited in: $(cat "$name.log")"
  sleep 1
  [[ -z $(ranks_of "$name") ]] || fail "$name: processes left behind"
  echo "$name: ended $took s after a rank stopped: $(grep -m 1 'no progress' "$name.log")"
}
stop_one_rank dp4 --dp 4
stop_one_rank pp2_tp2 --pp 2 --tp 2 --micro-batches 2
echo "hang watchdog ok"
