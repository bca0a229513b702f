#!/usr/bin/env bash
# The run folder's checkpoint files: --keep-last K keeps exactly the newest K, the .tmp an
# interrupted write left behind is removed at start-up with a line saying so, and a checkpoint
# verifies itself: a flipped byte in a tensor is refused with the tensor's name, on every rank;
# a full disk (a small tmpfs, where this machine may mount one) stops every rank with a clear
# error before anything is written, and the previous checkpoint stays loadable.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)
small=(--config "$TINY" --data "$data" --batch-size 4 --seq-len 16 --log-every 0 --eval-every 0)
mkdir run
head -c 1000 /dev/urandom >run/ckpt_3.h5.tmp
"$MPITRON" train "${small[@]}" --steps 6 --ckpt-every 1 --keep-last 2 --out run >run.log 2>&1 ||
  fail "training failed: $(cat run.log)"
grep -q "removed run/ckpt_3.h5.tmp: the remains of an interrupted checkpoint write" run.log ||
  fail "no line about the stale .tmp: $(cat run.log)"
[[ ! -e run/ckpt_3.h5.tmp ]] || fail "the stale .tmp is still there"
[[ $(find run -name "ckpt_*" | sort | tr "\n" " ") == "run/ckpt_5.h5 run/ckpt_6.h5 " ]] ||
  fail "--keep-last 2 left: $(find run -name "ckpt_*")"
# The newest checkpoint always stays, and resuming still works from it.
mpiexec -n 2 "$MPITRON" train "${small[@]}" --steps 8 --ckpt-every 1 --keep-last 1 --allow-changes \
  --out run --resume auto >resume.log 2>&1 || fail "resume failed: $(cat resume.log)"
[[ $(find run -name "ckpt_*") == "run/ckpt_8.h5" ]] || fail "--keep-last 1 left: $(find run -name "ckpt_*")"

"$MPITRON" info --verify run/ckpt_8.h5 >verify.txt || fail "an intact checkpoint failed --verify"
grep -q "run/ckpt_8.h5: 156 of 156 tensors read back intact" verify.txt || fail "$(cat verify.txt)"
cp run/ckpt_8.h5 flipped.h5
"$PYTHON" - <<'PY'
import h5py
with h5py.File("flipped.h5", "r") as f:
    at = f["params/h.3.mlp.c_fc.weight"].id.get_chunk_info(0).byte_offset + 1000
with open("flipped.h5", "r+b") as g:
    g.seek(at)
    b = g.read(1)
    g.seek(at)
    g.write(bytes([b[0] ^ 0x01]))
PY
rc=0
"$MPITRON" info --verify flipped.h5 >verify.txt || rc=$?
if [[ $rc != 1 ]] || ! grep -q "^FAILED params/h.3.mlp.c_fc.weight" verify.txt; then
  fail "--verify missed the flipped byte (exit $rc): $(cat verify.txt)"
fi
# h.3 lives on the last stage only: every rank stops with that stage's message.
expect_error "flipped.h5: params/h.3.mlp.c_fc.weight fails its checksum" \
  mpiexec -n 2 "$MPITRON" train "${small[@]}" --steps 10 --pp 2 --allow-changes --out flipped \
  --resume flipped.h5

# 1930k: the trace (seven 128 KiB rank matrices and the columns, about 1.1 MB) and one checkpoint
# (0.4 MB) fit; a second needs more than the about 0.7 MiB the check asks for.
mkdir -p disk
if mount -t tmpfs -o size=1930k tmpfs disk 2>/dev/null; then
  unmount_disk() { umount "$WORK/disk" 2>/dev/null || true; }
  on_exit unmount_disk
  tiny=(--set model.n_layer=1 --set model.n_embd=32 --set model.n_head=2)
  expect_error "no room for checkpoint disk/run/ckpt_2.h5: .* the last complete one is disk/run/ckpt_1.h5" \
    mpiexec -n 2 "$MPITRON" train "${small[@]}" "${tiny[@]}" --steps 4 --ckpt-every 1 --out disk/run
  [[ $(find disk/run -name "ckpt_*") == "disk/run/ckpt_1.h5" ]] ||
    fail "the full disk left: $(find disk/run -name "ckpt_*")"
  "$MPITRON" info --verify disk/run/ckpt_1.h5 >/dev/null || fail "the last checkpoint was damaged"
  cp -r disk/run after_full_disk
  # The trace on a full disk: the rank that writes it ends the job with one line saying so.
  head -c "$(($(df -k --output=avail disk | tail -n 1) * 1024))" /dev/zero >disk/filler 2>/dev/null || true
  rc=0
  timeout 120 mpiexec -n 2 "$MPITRON" train "${small[@]}" "${tiny[@]}" --steps 4 --out disk/trace_run \
    >trace_full.log 2>&1 || rc=$?
  [[ $rc != 0 && $rc != 124 ]] || fail "a full disk under the trace did not end the job (exit $rc)"
  grep -qE "error: cannot (create|write) trace disk/trace_run/trace.h5.*No space left on device" \
    trace_full.log || fail "no clear line for the trace's full disk: $(grep -i error trace_full.log)"
  echo "ok ($rc): $(grep -oE 'error: cannot (create|write) trace.*' trace_full.log | head -n 1)"
  umount disk
  "$MPITRON" train "${small[@]}" "${tiny[@]}" --steps 4 --ckpt-every 1 --out after_full_disk \
    --resume auto >after.log 2>&1 || fail "the last checkpoint does not resume: $(cat after.log)"
else
  echo "note: cannot mount a tmpfs here: the full-disk case is not tested"
fi
expect_error "--keep-last -1 must be 0" "$MPITRON" train "${small[@]}" --steps 1 --keep-last -1 --out bad
echo "checkpoint files ok"
