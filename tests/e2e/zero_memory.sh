#!/usr/bin/env bash
# ZeRO shards the AdamW moments (stage 1) and the reduced gradients (stage 2) over dp: at a fixed
# per-rank micro-batch, each rank's peak memory falls as dp grows (further at stage 2 than at
# stage 1); at stage 0 it does not.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
run() {  # run NAME RANKS ZERO
  mpiexec -n "$2" "$MPITRON" train --config "$TINY" --data "$data" --steps 2 --seq-len 32 \
    --batch-size $((4 * $2)) --dp "$2" --zero "$3" --eval-every 0 --out "$1" >/dev/null
}
run z0_dp1 1 0
for z in 0 1 2; do for dp in 2 4; do run z${z}_dp$dp $dp $z; done; done
"$PYTHON" - <<'PY'
import h5py
def peak(name):
    with h5py.File(f"{name}/trace.h5", "r") as f:
        per_rank = [int(x) for x in f["trace/rank_peak_mem_bytes"][-1]]
    print(f"{name}: peak bytes per rank {per_rank}")  # shown whatever fails below
    return max(per_rank)
base = peak("z0_dp1")
with h5py.File("z0_dp1/trace.h5", "r") as f:
    moment_bytes = 2 * 4 * int(f.attrs["parameters"])
rows = {z: [base] + [peak(f"z{z}_dp{dp}") for dp in (2, 4)] for z in (0, 1, 2)}
for z, r in rows.items():
    print(f"zero {z}: peak bytes per rank at dp 1, 2, 4: {r}")
assert rows[0][1] == base and rows[0][2] == base, "stage 0 memory should not depend on dp"
for z in (1, 2):
    assert rows[z][0] > rows[z][1] > rows[z][2], f"stage {z} memory does not fall with dp"
    # dp 4 keeps a quarter of the two fp32 moments (and adds a shard-sized reduce buffer)
    assert base - rows[z][2] >= 0.5 * moment_bytes, f"stage {z}: moments are not sharded"
for i in (1, 2):
    # stage 2 keeps no whole gradient: only embeddings, ln_f, one block window and the shard
    assert rows[2][i] < rows[1][i], "stage 2 does not shard the gradients"
PY
echo "zero memory ok"
