#!/usr/bin/env bash
# bench/bert_converge.sh -h prints its usage, every option and how long the defaults take, and
# starts nothing (no data, no run); an unknown option prints the usage on stderr and exits 2.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
script=$REPO/bench/bert_converge.sh
timeout 10 bash "$script" -h -o out >help.txt 2>err.txt || fail "-h failed: $(cat err.txt)"
cat help.txt
grep -q "^Usage: bench/bert_converge.sh " help.txt || fail "no usage line"
for opt in -b -m -f -t -y -o; do
  grep -qE "^  $opt( |$)" help.txt || fail "-h does not explain $opt"
done
grep -qE "^Time: the defaults take about [0-9]+ minutes" help.txt || fail "-h does not say how long the defaults take"
[[ ! -e out ]] || fail "-h started a run"
rc=0
bash "$script" -z >out.txt 2>err.txt || rc=$?
[[ $rc == 2 ]] || fail "an unknown option exited $rc, not 2"
grep -q "^Usage: bench/bert_converge.sh " err.txt || fail "no usage on stderr for an unknown option"
echo "PASS"
