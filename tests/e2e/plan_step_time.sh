#!/usr/bin/env bash
# mpitron plan --nodes --ranks-per-node --network: the step time the alpha-beta model predicts,
# term by term (compute from --compute-step-s or a one-rank trace); the total is the terms' sum,
# the same ranks spread over more nodes on a slower network communicate longer, and bad input
# (no network file, ranks per node not dividing the ranks, a TP group across nodes) is one line.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"

cat >fast.toml <<'EOF'
note = "test links: 1 GB/s within a node, 10 GB/s across"
[intra_node]
alpha_s = 1e-6
beta_s_per_byte = 1e-9
[inter_node]
alpha_s = 1e-5
beta_s_per_byte = 1e-10
EOF
cat >slow.toml <<'EOF'
[intra_node]
alpha_s = 1e-6
beta_s_per_byte = 1e-9
[inter_node]
alpha_s = 1e-4
beta_s_per_byte = 1e-8
EOF
plan=("$MPITRON" plan --config "$TINY" --batch-size 16 --seq-len 32)

# seconds FILE NAME: the seconds on the line of that term.
seconds() { sed -n "s/^$2  *\([0-9.]*\) s.*/\1/p" "$1"; }

"${plan[@]}" --tp 2 --micro-batches 2 --nodes 2 --ranks-per-node 2 --network fast.toml \
  --compute-step-s 2 >fast.txt || fail "plan with --nodes failed: $(cat fast.txt)"
cat fast.txt
grep -q "^step time predicted by the alpha-beta model: dp 2 x tp 2 x pp 1 on 2 nodes x 2 ranks" fast.txt ||
  fail "no step-time heading"
names=("compute" "pipeline bubble" "DP gradient all-reduce" "TP all-reduces" "PP sends")
sum=0
for n in "${names[@]}"; do
  v=$(seconds fast.txt "$n")
  [[ -n $v ]] || fail "no '$n' term"
  sum=$(awk -v a="$sum" -v b="$v" 'BEGIN { printf "%.6f", a + b }')
done
total=$(seconds fast.txt "total step")
grep -q "^total step .*(predicted by the alpha-beta model)" fast.txt || fail "the total is not labelled"
awk -v a="$sum" -v b="$total" 'BEGIN { exit !(a - b < 2e-6 && b - a < 2e-6) }' ||
  fail "the total $total is not the sum of the terms $sum"
[[ $(seconds fast.txt compute) == 0.500000 ]] || fail "compute is not 2 s over 4 ranks"
# Both DP rings {0,2} and {1,3} cross the nodes; the TP pairs stay within one.
grep -q "^DP gradient all-reduce .*ring of 2 over inter-node link shared by 2 rings" fast.txt ||
  fail "the DP rings do not cross the inter-node link, shared"
grep -q "^TP all-reduces .*16 x 2 micro-batches x ring of 2 over intra-node link" fast.txt ||
  fail "the TP term is not 16 all-reduces a micro-batch within a node"

# dp 4: one node, then four nodes on the slow link: a longer communication term.
"${plan[@]}" --nodes 1 --ranks-per-node 4 --network slow.toml --compute-step-s 2 >one.txt
"${plan[@]}" --nodes 4 --ranks-per-node 1 --network slow.toml --compute-step-s 2 >four.txt
c1=$(seconds one.txt communication) c4=$(seconds four.txt communication)
awk -v a="$c1" -v b="$c4" 'BEGIN { exit !(b > 2 * a && a > 0) }' ||
  fail "4 nodes on the slow link communicate $c4 s, not more than twice 1 node's $c1 s"
"${plan[@]}" --nodes 4 --ranks-per-node 1 --network fast.toml --compute-step-s 2 >four_fast.txt
cf=$(seconds four_fast.txt communication)
awk -v a="$cf" -v b="$c4" 'BEGIN { exit !(b > a) }' || fail "the slow link ($c4 s) is not slower than the fast ($cf s)"

# --ranks-per-node above the cores: the compute term slows by ranks / cores.
"${plan[@]}" --nodes 1 --ranks-per-node 4 --network slow.toml --compute-step-s 2 --cores-per-node 2 >cores.txt
[[ $(seconds cores.txt compute) == 1.000000 ]] || fail "4 ranks on 2 cores: compute is not 2 s / 4 x 2"

# The compute from a one-rank run's trace: its median step.
"$MPITRON" train --config "$TINY" --batch-size 4 --seq-len 16 --steps 3 --eval-every 0 \
  --data "$(corpus)" --out run >train.log 2>&1 || fail "the one-rank run failed: $(tail -5 train.log)"
"${plan[@]}" --nodes 2 --ranks-per-node 1 --network slow.toml --compute-trace run >trace.txt ||
  fail "plan --compute-trace failed: $(cat trace.txt)"
median=$("$PYTHON" -c 'import h5py, numpy, sys
s = h5py.File(sys.argv[1], "r")["trace/step_s"][1:]
print("%.6f" % (numpy.median(s) / 2))' run/trace.h5)
[[ $(seconds trace.txt compute) == "$median" ]] ||
  fail "compute $(seconds trace.txt compute) s is not the trace's median step over 2 ranks ($median s)"

# The example measured on the virtual cluster loads.
"${plan[@]}" --nodes 2 --ranks-per-node 1 --network "$REPO/bench/network-vcluster.toml" \
  --compute-step-s 1 >example.txt || fail "bench/network-vcluster.toml: $(cat example.txt)"
grep -q "^  network: measured on the virtual cluster" example.txt || fail "the example's note is not shown"

# Bad input: one line on stderr naming the problem, exit 1.
bad() {
  local want=$1 rc=0
  shift
  "${plan[@]}" "$@" >bad.out 2>bad.err || rc=$?
  [[ $rc == 1 ]] || fail "plan $* exited $rc, not 1"
  [[ $(wc -l <bad.err) == 1 ]] || fail "plan $*: not one line: $(cat bad.err)"
  grep -q "^error: .*$want" bad.err || fail "plan $*: '$(cat bad.err)' does not say '$want'"
}
bad "network file 'missing.toml' not found" --nodes 2 --ranks-per-node 2 --network missing.toml --compute-step-s 1
bad "ranks-per-node 2 does not divide the layout's 3 ranks" --dp 3 --batch-size 12 --nodes 2 \
  --ranks-per-node 2 --network fast.toml --compute-step-s 1
bad "a TP group of 4 ranks would span nodes" --tp 4 --nodes 2 --ranks-per-node 2 --network fast.toml \
  --compute-step-s 1
bad "needs --nodes, --ranks-per-node and --network together" --nodes 2 --network fast.toml --compute-step-s 1
bad "needs the compute time" --nodes 2 --ranks-per-node 2 --network fast.toml
echo "bad alpha" >broken.toml
bad "network file broken.toml: not valid TOML" --nodes 2 --ranks-per-node 2 --network broken.toml --compute-step-s 1
echo "ok"
