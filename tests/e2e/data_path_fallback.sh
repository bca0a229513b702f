#!/usr/bin/env bash
# io/prepare_data.sh's own reading of a preset's data path (for a build without `mpitron
# data-path`) agrees with `mpitron data-path` for every preset, both in a folder without
# data/fashion-mnist and in one with it (the image families' default moves there).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
if ! "$MPITRON" data-path --config "$TINY" >/dev/null 2>&1; then
  echo "SKIP: this mpitron has no data-path subcommand to compare with"
  exit 77
fi
mkdir -p bare with/data/fashion-mnist
n=0
for root in bare with; do
  for c in "$REPO"/configs/*.toml; do
    want=$(cd "$root" && "$MPITRON" data-path --config "$c")
    got=$(MPITRON=$WORK/none "$REPO/io/prepare_data.sh" --path "$c" "$root")
    [[ $got == "$want" ]] || fail "${c##*/} in $root: prepare_data.sh reads $got, mpitron data-path $want"
    n=$((n + 1))
  done
done
[[ $n -ge 20 ]] || fail "only $n presets compared"
[[ $(MPITRON=$WORK/none "$REPO/io/prepare_data.sh" --path "$REPO/configs/mlp-fmnist.toml" with) == data/fashion-mnist ]] ||
  fail "the MLP's fallback default ignores data/fashion-mnist"
echo "data path fallback ok: $n presets"
