#!/usr/bin/env bash
# --bitwise refuses what it cannot keep bit for bit, before any step, with one message that says
# why and what would work: a dp that does not divide the reduction shards, micro-batches of
# partial shards, shards that do not divide the batch, a tp that does not divide the TP shards,
# gradient buckets.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
common=(--config "$TINY" --data "$(corpus)" --steps 2 --seq-len 16 --batch-size 24 --bitwise --out run)

# refused WANT RANKS [flags...]: expect_error on RANKS ranks (1: the binary alone, where stderr must
# be that one line), and no step ran (no line of one, no trace).
refused() {
  local want=$1 ranks=$2 launch=()
  shift 2
  [[ $ranks == 1 ]] || launch=(mpiexec -n "$ranks")
  rm -rf run
  expect_error "$want" "${launch[@]}" "$MPITRON" train "${common[@]}" "$@"
  ! grep -q "step " out.txt || fail "$*: refused after a step ran: $(cat out.txt)"
  [[ ! -e run/trace.h5 ]] || fail "$*: refused after writing a trace"
}

# 24 shards (gcd(24, 24)): dp 5 does not divide them; 4 and 6 are the nearest that do.
refused "dp 5 does not divide the 24 reduction shards.*use --dp 4 or 6" 5 --dp 5
# A micro-batch holds whole shards: at dp 2 its 12 shards split into 2, 3, 4, 6 or 12 micro-batches.
refused "dp x micro-batches must divide the 24 shards.*use --micro-batches 4 or 6" 2 --dp 2 --micro-batches 5
refused "7 reduction shards do not split the batch of 24.*1, 2, 3, 4, 6, 8, 12, 24 (the divisors of the batch)" \
  1 --reduction-shards 7
# Buckets reduce while backward runs; --bitwise sums after the step's last shard.
refused "--bucket-mb .*--bitwise.*drop --bucket-mb" 2 --dp 2 --bucket-mb 0.1
# tp must divide the TP shards (4 by default); the shards must be a power of two.
refused "--tp 8 does not divide the 4 TP shards.*use --tp 4" 8 --tp 8
refused "tp_shards must be a power of two" 1 --tp-shards 3
echo "--bitwise refusals ok"
