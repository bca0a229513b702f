#!/usr/bin/env bash
# Hugging Face GPT-2 weights in and out: import -> export gives every tensor bitwise back (and the
# very bytes of a file in the safetensors library's layout); train --init-from loads exactly the
# imported parameters at 1 rank and at tp 2, and trains; bad models give one clear error line.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
PY=$TORCH_PYTHON
if [[ -z $PY ]] || ! $PY -c 'import torch, h5py, numpy' 2>/dev/null; then
  echo "SKIP: no python imports torch, h5py and numpy (TORCH_PYTHON='$PY'; tests/python.cmake)"
  exit 77
fi
data=$(corpus)

# A random GPT-2 (2 layers, width 64, odd vocabulary 301) in several HF layouts.
$PY - "$REPO/validate" <<'PYEOF'
import json, sys
sys.path.insert(0, sys.argv[1])
import numpy as np, torch
import gpt_torch as g
cfg = g.GptConfig(n_layer=2, n_head=4, n_embd=64, block_size=64, vocab_size=301)
m = g.Gpt(cfg)
g.randomize(m, 5)
g.write_hf_model("hf", m, prefix="transformer.", mask_buffers=True, lm_head=True)
g.write_hf_model("canon", m, prefix="", mask_buffers=False)
t = g.read_safetensors("canon/model.safetensors")
def variant(name, tensors, config=None):
    import pathlib
    pathlib.Path(name).mkdir()
    g.write_safetensors(f"{name}/model.safetensors", tensors, {"format": "pt"})
    c = g.hf_config(cfg)
    c.update(config or {})
    pathlib.Path(f"{name}/config.json").write_text(json.dumps(c))
variant("missing", {k: v for k, v in t.items() if k != "h.1.mlp.c_fc.bias"})
variant("misshapen", {**t, "h.0.attn.c_attn.weight": np.ascontiguousarray(t["h.0.attn.c_attn.weight"].T)})
variant("untied", {**t, "lm_head.weight": t["wte.weight"] + 1})
variant("eps", t, {"layer_norm_epsilon": 1e-6})
variant("extra", {**t, "h.7.mlp.c_fc.bias": t["h.1.mlp.c_fc.bias"]})
PYEOF

# import -> export: the tensors bitwise, the canonical file byte for byte, and again.
"$MPITRON" import --from hf --plan >plan.txt
grep -q "total: .* parameters" plan.txt || fail "--plan printed no total: $(cat plan.txt)"
"$MPITRON" import hf --plan >plan_positional.txt  # the source may be positional, as export's is
cmp plan.txt plan_positional.txt || fail "import with a positional source differs from --from"
"$MPITRON" import --from hf --out imported.h5 >import.txt
grep -q "^tokenizer: none beside the weights .*give --tokenizer DIR" import.txt ||
  fail "import without tokenizer files does not say what later commands need: $(cat import.txt)"
# Tokenizer files beside the weights are recorded, and a recorded folder that is gone is named.
cp -r hf hf_tok
echo '{}' >hf_tok/encoder.json
echo '#version: 0.2' >hf_tok/vocab.bpe
"$MPITRON" import --from hf_tok --out imported_tok.h5 >import_tok.txt
grep -q "^tokenizer: $PWD/hf_tok (recorded: generate and eval use it" import_tok.txt ||
  fail "import did not record the tokenizer beside the weights: $(cat import_tok.txt)"
rm hf_tok/encoder.json hf_tok/vocab.bpe
expect_error "records the tokenizer in '$PWD/hf_tok', which is gone: give --tokenizer DIR" \
  "$MPITRON" generate imported_tok.h5 --prompt x --new-tokens 2
"$MPITRON" export imported.h5 --out exported
$PY - "$REPO/validate" <<'PYEOF' || fail "exported tensors differ from the imported file's"
import sys
sys.path.insert(0, sys.argv[1])
import numpy as np
import gpt_torch as g
a = {k.removeprefix("transformer."): v for k, v in g.read_safetensors("hf/model.safetensors").items()
     if ".attn.bias" not in k and k != "lm_head.weight"}
b = g.read_safetensors("exported/model.safetensors")
assert sorted(a) == sorted(b), (sorted(set(a) ^ set(b)))
bad = [k for k in a if a[k].shape != b[k].shape or a[k].tobytes() != b[k].tobytes()]
assert not bad, bad
print(f"{len(a)} tensors bitwise identical after import -> export")
PYEOF
cmp exported/model.safetensors canon/model.safetensors ||
  fail "export of a library-layout file is not byte-identical"
"$MPITRON" import --from exported --out again.h5
"$MPITRON" export again.h5 --out exported2
cmp exported/model.safetensors exported2/model.safetensors || fail "second round trip differs"
cmp exported/config.json exported2/config.json || fail "config.json differs after a round trip"

# train --init-from: the parameters at step 0 are the imported ones (1 rank, and tp 2 with the
# odd vocabulary padded), then 3 steps train (dp 2, from the HF folder and from the checkpoint).
shape=(--config "$TINY" --set model.n_layer=2 --set model.n_embd=64 --set model.vocab_size=301
  --data "$data" --batch-size 4 --seq-len 32 --eval-every 0 --log-every 1 --dropout 0)
"$MPITRON" train "${shape[@]}" --steps 0 --init-from hf --out init1
mpiexec -n 2 "$MPITRON" train "${shape[@]}" --steps 0 --tp 2 --init-from hf/model.safetensors \
  --out init_tp2
"$MPITRON" train "${shape[@]}" --steps 0 --out scratch
$PY - <<'PYEOF' || fail "--init-from did not load the imported parameters"
import h5py, numpy as np
def params(p):
    with h5py.File(p, "r") as f:
        out = {}
        f["params"].visititems(lambda n, o: out.__setitem__(n, o[()]) if isinstance(o, h5py.Dataset) else None)
        return out
ref = params("imported.h5")
for run in ("init1", "init_tp2"):
    got = params(f"{run}/ckpt_0.h5")
    bad = [k for k in ref if not np.array_equal(ref[k], got[k])]
    assert not bad and sorted(ref) == sorted(got), (run, bad[:3])
assert not np.array_equal(ref["wte.weight"], params("scratch/ckpt_0.h5")["wte.weight"])
print("init-from: step-0 parameters equal the imported ones at tp 1 and tp 2")
PYEOF
mpiexec -n 2 "$MPITRON" train "${shape[@]}" --steps 3 --dp 2 --init-from hf --out ft
mpiexec -n 2 "$MPITRON" train "${shape[@]}" --steps 3 --dp 2 --init-from imported.h5 --out ft_ckpt
"$MPITRON" compare ft/trace.h5 ft_ckpt/trace.h5 --rtol 0 || fail "HF and checkpoint init differ"
[[ -e ft/ckpt_3.h5 ]] || fail "fine-tuning wrote no checkpoint"

# Clear errors, one line each.
expect_error "model.vocab_size is 301 there, 256 in this run's config" \
  "$MPITRON" train --config "$TINY" --data "$data" --steps 1 --init-from hf --out bad1
expect_error "model.n_layer is 2 there, 4" \
  "$MPITRON" train --config "$TINY" --set model.vocab_size=301 --data "$data" --steps 1 \
  --init-from imported.h5 --out bad2
expect_error "missing tensor 'h.1.mlp.c_fc.bias'" "$MPITRON" import --from missing --out x.h5
expect_error "tensor 'h.0.attn.c_attn.weight' has shape (192,64).*needs (64,192)" \
  "$MPITRON" import --from misshapen --out x.h5
expect_error "lm_head.weight differs from wte.weight" "$MPITRON" import --from untied --out x.h5
expect_error "layer_norm_epsilon 1e-06 differs" "$MPITRON" import --from eps --out x.h5
expect_error "unexpected tensor 'h.7.mlp.c_fc.bias'" "$MPITRON" import --from extra --out x.h5
expect_error "missing tensor 'h.1.mlp.c_fc.bias'" \
  "$MPITRON" train "${shape[@]}" --steps 1 --init-from missing --out bad3
mkdir trunc
cp hf/config.json trunc/
head -c 100000 hf/model.safetensors >trunc/model.safetensors
"$MPITRON" import --from trunc --plan | grep -q TRUNCATED || fail "--plan does not report truncation"
expect_error "is truncated" "$MPITRON" import --from trunc --out x.h5
[[ ! -e x.h5 ]] || fail "a refused import left a checkpoint"
echo "pretrained ok"
