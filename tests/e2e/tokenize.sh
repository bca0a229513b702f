#!/usr/bin/env bash
# Token files end to end: `mpitron tokenize` writes one, gpt-tiny (vocab_size 50257) trains on it,
# eval and generate find its tokenizer through the checkpoint, and bad input gets one clear line.
# Skips (77) without the GPT-2 tokenizer files (data step: io/get_gpt2_tokenizer.sh).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
tok=$REPO/data/gpt2-tokenizer
if [[ ! -s $tok/encoder.json || ! -s $tok/vocab.bpe ]]; then
  echo "SKIP: no GPT-2 tokenizer in $tok (data step: io/get_gpt2_tokenizer.sh data/gpt2-tokenizer)"
  exit 77
fi
data=$(corpus)
head -c 300000 "$data" >small.txt

"$MPITRON" tokenize --tokenizer "$tok" --in small.txt --out small.h5 | tee tokenize.log
grep -q "^wrote small.h5: .* tokens (uint16) from 300000 bytes" tokenize.log || fail "no summary line"
"$PYTHON" - <<'PY' || fail "token file attributes"
import h5py, os
with h5py.File("small.h5", "r") as f:
    a = f.attrs
    assert a["format"] == "mpitron tokens" and a["vocab_size"] == 50257, dict(a)
    assert a["source_bytes"] == 300000 and a["tokens"] == f["tokens"].shape[0], dict(a)
    assert os.path.isabs(a["tokenizer"]) and f["tokens"].dtype == "uint16", dict(a)
PY

small=(--steps 3 --batch-size 4 --seq-len 16 --eval-every 0 --eval-batches 2)
bpe=(--set model.vocab_size=50257)
"$MPITRON" train --config "$TINY" "${bpe[@]}" --data small.h5 "${small[@]}" --out run | tee train.log
ckpt=run/ckpt_3.h5
[[ -e $ckpt ]] || fail "no checkpoint"
# Two ranks (data parallel) reproduce the single-process trace on token data too.
mpiexec -n 2 "$MPITRON" train --config "$TINY" "${bpe[@]}" --data small.h5 "${small[@]}" --out run2 >train2.log
"$MPITRON" compare run/trace.h5 run2/trace.h5

"$MPITRON" eval --ckpt $ckpt | tee eval.log
grep -q "^val_loss .* from .*small.h5" eval.log || fail "eval did not read the token file"
# A text file is encoded with the tokenizer of the checkpoint's token file, or with --tokenizer.
tail -c 60000 small.txt >val.txt
"$MPITRON" eval --ckpt $ckpt --data val.txt --batches 2 | tee eval_text.log
"$MPITRON" eval --ckpt $ckpt --data val.txt --batches 2 --tokenizer "$tok" | tee eval_text2.log
[[ $(grep -o '^val_loss [0-9.]*' eval_text.log) == $(grep -o '^val_loss [0-9.]*' eval_text2.log) ]] ||
  fail "eval differs with and without --tokenizer"
loss=$(grep -o '^val_loss [0-9.]*' eval_text.log | cut -d' ' -f2)
"$PYTHON" -c "import sys; sys.exit(not 5 < float(sys.argv[1]) < 12)" "$loss" ||
  fail "val_loss $loss is not that of BPE tokens (ln 50257 = 10.8 untrained)"

"$MPITRON" generate --ckpt $ckpt --prompt "In the beginning" --new-tokens 8 --temperature 0 >gen.txt
grep -q "^In the beginning" gen.txt || fail "generate did not echo the prompt"
[[ $(wc -c <gen.txt) -gt 18 ]] || fail "generate wrote no BPE tokens"

# Bad input: one clear line each.
expect_error "the token file small.h5 has a vocabulary of 50257 tokens, but .* has vocab_size 256" \
  "$MPITRON" train --config "$TINY" --data small.h5 "${small[@]}" --out small_vocab
expect_error "tokenizer folder 'nowhere' does not exist" \
  "$MPITRON" tokenize --tokenizer nowhere --in small.txt --out x.h5
mkdir -p empty_dir
expect_error "has neither encoder.json" "$MPITRON" tokenize --tokenizer empty_dir --in small.txt --out x.h5
expect_error "text file 'missing.txt' does not exist" \
  "$MPITRON" tokenize --tokenizer "$tok" --in missing.txt --out x.h5
expect_error "must name an HDF5 token file" "$MPITRON" tokenize --tokenizer "$tok" --in small.txt --out x.bin
expect_error "cannot create" "$MPITRON" tokenize --tokenizer "$tok" --in small.txt --out no_dir/x.h5
expect_error "not a token file" "$MPITRON" train --config "$TINY" "${bpe[@]}" --data $ckpt "${small[@]}" --out ckpt_data
expect_error "does not exist" "$MPITRON" generate --ckpt $ckpt --new-tokens 2 --tokenizer nowhere
cp small.h5 broken.h5
"$PYTHON" -c "
import h5py
with h5py.File('broken.h5', 'r+') as f: f['tokens'][5] = (int(f['tokens'][5]) + 1) % 50257"
expect_error "broken.h5 is corrupt" "$MPITRON" train --config "$TINY" "${bpe[@]}" --data broken.h5 "${small[@]}" --out broken
mv small.h5 moved.h5
expect_error "trained on the token file .*small.h5, which does not exist: give --tokenizer" \
  "$MPITRON" generate --ckpt $ckpt --new-tokens 2
echo "tokenize ok"
