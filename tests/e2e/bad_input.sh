#!/usr/bin/env bash
# Bad input gets one clear line on stderr and a non-zero exit: never a crash, a hang or a trace.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
data=$(corpus)

small=(--steps 2 --batch-size 4 --seq-len 16 --eval-every 0)
"$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --out good
ckpt=good/ckpt_2.h5
[[ -e $ckpt ]] || fail "no checkpoint"

expect_error "does not exist" "$MPITRON" train --config "$TINY" --data nothing.txt "${small[@]}"
expect_error "does not exist" "$MPITRON" train --config nothing.toml --data "$data"
head -c 100 "$data" >short.txt
expect_error "too short" "$MPITRON" train --config "$TINY" --data short.txt "${small[@]}"

head -c 300000 $ckpt >good/ckpt_3.h5
expect_error "truncated or corrupt" "$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --steps 4 --allow-changes --out good --resume good/ckpt_3.h5
head -c 5000 /dev/urandom >noise.h5
expect_error "not an HDF5 file" "$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --resume noise.h5
expect_error "not an HDF5 file" "$MPITRON" generate --ckpt noise.h5 --new-tokens 3
expect_error "does not exist" "$MPITRON" generate --ckpt missing.h5 --new-tokens 3
expect_error "does not exist" "$MPITRON" compare missing.h5 good/trace.h5

sed 's/n_embd = 128/n_embd = 64/' "$TINY" >narrow.toml
expect_error "another model shape" "$MPITRON" train --config narrow.toml --data "$data" "${small[@]}" --resume $ckpt

sed 's/^n_head = 4/n_head = 3/' "$TINY" >heads.toml
expect_error "divisible by n_head" "$MPITRON" train --config heads.toml --data "$data" "${small[@]}"
cp "$TINY" unknown.toml
echo "n_layers = 4" >>unknown.toml
expect_error "unknown key 'train.n_layers'" "$MPITRON" train --config unknown.toml --data "$data" "${small[@]}"
printf '[model]\nn_layer = "four"\n' >typed.toml
expect_error "wrong type" "$MPITRON" train --config typed.toml --data "$data" "${small[@]}"
printf '[model\n' >broken.toml
expect_error "not valid TOML" "$MPITRON" train --config broken.toml --data "$data" "${small[@]}"

expect_error "batch_size must be positive" "$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --batch-size 0
expect_error "seq_len must be positive" "$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --seq-len -3
expect_error "steps must not be negative" "$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --steps -1
expect_error "exceeds the model's block_size" "$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --seq-len 65
expect_error "dropout must be in" "$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --dropout 1.5
expect_error "already holds checkpoints" "$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --out good
sed 's/vocab_size = 256/vocab_size = 100/' "$TINY" >smallvocab.toml
expect_error "smaller than the byte vocabulary" "$MPITRON" train --config smallvocab.toml --data "$data" "${small[@]}"
expect_error "--threads -1 is out of range" "$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --threads -1
expect_error "--bucket-mb must be between" "$MPITRON" train --config "$TINY" --data "$data" "${small[@]}" --bucket-mb nan
sed 's/^lr = 3e-3/lr = 3e-3\nbeta2 = 1.0/' "$TINY" >beta.toml
expect_error "beta1 and beta2" "$MPITRON" train --config beta.toml --data "$data" "${small[@]}"
expect_error "--top-k must not be negative" "$MPITRON" generate --ckpt $ckpt --top-k -1 --new-tokens 3
expect_error "--temperature must be" "$MPITRON" generate --ckpt $ckpt --temperature nan --new-tokens 3
expect_error "cannot create" "$MPITRON" batch --data "$data" --out missing_dir/batch.h5
expect_error "Could not convert: --steps = lots" "$MPITRON" train --config "$TINY" --data "$data" --steps lots
expect_error "--device gpu: not a device (cpu, cuda or cpu-staged)" "$MPITRON" train --config "$TINY" --data "$data" --steps 1 --device gpu --out dev
# Without CUDA in the build, or without a GPU in the machine: one line either way.
expect_error "--device cuda: " "$MPITRON" train --config "$TINY" --data "$data" --steps 1 --device cuda --out dev
expect_error "--comm nccl sums a GPU's gradients: it needs --device cuda" "$MPITRON" train --config "$TINY" --data "$data" --steps 1 --comm nccl --out dev
expect_error "--comm shm: not a communication library (mpi or nccl)" "$MPITRON" train --config "$TINY" --data "$data" --steps 1 --comm shm --out dev
echo "bad input ok"
# A preset's [data] table names its data: data-path prints it, train reads it without --data,
# and a missing one says which preset and how to prepare it.
sed 's/^steps = 500$/steps = 2/' "$TINY" >named_data.toml
printf '\n[data]\npath = "%s"\n' "$data" >>named_data.toml
[[ $("$MPITRON" data-path --config named_data.toml) == "$data" ]] ||
  fail "data-path does not print the [data] path"
[[ $("$MPITRON" data-path --config "$TINY") == data/kjv.txt ]] ||
  fail "data-path does not print the family's default for a preset without [data]"
"$MPITRON" train --config named_data.toml --batch-size 4 --seq-len 16 --eval-every 0 --out named ||
  fail "a preset with a [data] table did not train without --data"
printf '\n[data]\npath = "missing/corpus.txt"\n' >missing_data.toml
cat "$TINY" >>missing_data.toml
expect_error "missing_data.toml's data missing/corpus.txt (\[data\] path) does not exist: prepare it with io/prepare_data.sh" \
  "$MPITRON" train --config missing_data.toml "${small[@]}"
printf '\n[data]\nfile = "x"\n' >data_key.toml
cat "$TINY" >>data_key.toml
expect_error "unknown key 'data.file'" "$MPITRON" train --config data_key.toml "${small[@]}"
