#!/usr/bin/env bash
# The `cluster` tests' fixture (tests/cluster.cmake): `up DIR NODES` brings the virtual cluster up
# once for all of them (taking down one that a killed earlier run left in DIR), `down DIR` takes it
# down and checks that nothing is left. A reason to skip (77) is kept in DIR.skip for the tests.
set -euo pipefail
vc=$(dirname "$0")/vcluster.sh
what=$1 dir=$2
case $what in
  up)
    rm -f "$dir.skip"
    if [[ -e $dir/nodes ]]; then
      echo "taking down the virtual cluster an earlier run left in $dir"
      "$vc" down "$dir"
    fi
    rc=0
    "$vc" up "$3" "$dir" 2>"$dir.err" || rc=$?
    cat "$dir.err" >&2
    if [[ $rc == 77 ]]; then sed -n 's/^SKIP: //p' "$dir.err" >"$dir.skip"; fi
    rm -f "$dir.err"
    exit "$rc"
    ;;
  down)
    rm -f "$dir.skip"
    "$vc" down "$dir"
    ;;
  *)
    echo "usage: fixture.sh up DIR NODES | down DIR" >&2
    exit 2
    ;;
esac
