#!/usr/bin/env bash
# The `cluster` tests' fixture (tests/cluster.cmake): `up DIR NODES` brings the virtual cluster up
# once for all of them, `down DIR` takes it down and checks that nothing is left. The cluster
# belongs to the ctest run that brought it up (DIR.owner): another run waits for it, and takes
# down only a cluster whose run has gone (a ctest killed outright). A reason to skip (77) is kept
# in DIR.skip for the tests.
set -euo pipefail
vc=$(dirname "$0")/vcluster.sh
what=$1 dir=$2
me=$PPID # the ctest run

# owner_alive: the ctest run that owns the cluster in DIR is another one, still running.
owner_alive() {
  local pid
  pid=$(cat "$dir.owner" 2>/dev/null || true)
  [[ -n $pid && $pid != "$me" ]] && kill -0 "$pid" 2>/dev/null &&
    grep -qa ctest "/proc/$pid/cmdline" 2>/dev/null
}

case $what in
  up)
    t0=$SECONDS
    while [[ -e $dir/nodes ]] && owner_alive; do
      if ((SECONDS - t0 > 240)); then
        echo "another ctest run (pid $(cat "$dir.owner")) has held the virtual cluster in $dir for 4 minutes" >"$dir.skip"
        echo "SKIP: $(cat "$dir.skip")" >&2
        exit 77
      fi
      sleep 1
    done
    rm -f "$dir.skip"
    if [[ -e $dir/nodes ]]; then
      echo "taking down the virtual cluster an earlier run left in $dir"
      "$vc" down "$dir"
    fi
    echo "$me" >"$dir.owner"
    rc=0
    "$vc" up "$3" "$dir" 2>"$dir.err" || rc=$?
    cat "$dir.err" >&2
    if [[ $rc == 77 ]]; then sed -n 's/^SKIP: //p' "$dir.err" >"$dir.skip"; fi
    rm -f "$dir.err"
    exit "$rc"
    ;;
  down)
    if owner_alive; then
      echo "the virtual cluster in $dir belongs to another ctest run (pid $(cat "$dir.owner")): left to it"
      exit 0
    fi
    rm -f "$dir.skip"
    "$vc" down "$dir"
    rm -f "$dir.owner"
    ;;
  *)
    echo "usage: fixture.sh up DIR NODES | down DIR" >&2
    exit 2
    ;;
esac
