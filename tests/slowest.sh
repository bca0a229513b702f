#!/usr/bin/env bash
# The slowest tests of a CTest run and its totals, from the JUnit file `ctest --output-junit` wrote
# (`make test` and `make check` print this at the end). Usage: tests/slowest.sh JUNIT [N] [WALL_S]
#   N (10) tests listed; WALL_S, the run's wall-clock seconds, is printed beside the sum of the
#   test times (their ratio is how well -j kept the cores busy).
set -euo pipefail
xml=$1
n=${2:-10}
wall=${3:-}
if [[ ! -s $xml ]]; then
  echo "no test times: $xml is missing"
  exit 0
fi
# One "<seconds> <status> <name>" line per test case (name, classname, time and status attributes).
rows=$(grep -o '<testcase name="[^"]*" classname="[^"]*" time="[^"]*" status="[^"]*"' "$xml" |
  sed -E 's/^<testcase name="([^"]*)" classname="[^"]*" time="([^"]*)" status="([^"]*)"$/\2 \3 \1/' |
  sed -e 's/&lt;/</g; s/&gt;/>/g; s/&quot;/"/g; s/&amp;/\&/g' | sort -g -r)
echo "the $n slowest tests:"
head -n "$n" <<<"$rows" | awk '{t = $1; s = $2; $1 = ""; $2 = ""; sub(/^  /, "");
  printf "  %8.1f s  %-7s %s\n", t, (s == "run" ? "" : s), $0}'
awk -v wall="$wall" '{sum += $1; n++; if ($2 == "fail") failed++; if ($2 == "notrun") skipped++}
  END {printf "%d tests (%d failed, %d not run or skipped): %.0f s of test time", n, failed,
    skipped, sum; if (wall != "") printf ", %s s wall clock", wall; printf "\n"}' <<<"$rows"
