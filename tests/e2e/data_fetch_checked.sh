#!/usr/bin/env bash
# The sha256 step of the download route, offline on file:// URLs: io/fetch_checked.sh writes a
# file whose sha256 matches (given in either case), and refuses one that does not, naming both
# sums and leaving neither the file nor its partial download; a malformed sum and a missing URL
# are refused. io/prepare_data.sh's download of Fashion-MNIST (no package, no archive) through a
# mirror holding another file under the package's name is refused the same way, nothing written.
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
if ! command -v curl >/dev/null; then
  echo "SKIP: curl is missing (it makes the downloads)"
  exit 77
fi
fetch=$REPO/io/fetch_checked.sh
seq 1 100000 >payload
good=$(sha256sum <payload | cut -d' ' -f1)
bad=$(printf '%s' "$good" | tr 0-9a-f 1-9a-f0)

"$fetch" "file://$WORK/payload" "$good" out/good | tee ok.log
cmp payload out/good || fail "the fetched file differs"
grep -q "sha256 checked" ok.log || fail "no word of the check"
"$fetch" "file://$WORK/payload" "${good^^}" out/upper >/dev/null || fail "an upper-case sum was refused"

if "$fetch" "file://$WORK/payload" "$bad" out/bad 2>err.log; then fail "a wrong sha256 was accepted"; fi
cat err.log
grep -q "has sha256 $good, not the expected $bad" err.log || fail "the refusal names not both sums"
[[ ! -e out/bad && ! -e out/bad.part ]] || fail "a refused download left a file"

if "$fetch" "file://$WORK/payload" 1234 out/short 2>err.log; then fail "a malformed sum was accepted"; fi
grep -q "is not a sha256" err.log || fail "a malformed sum: $(cat err.log)"
if "$fetch" "file://$WORK/missing" "$good" out/missing 2>err.log; then fail "a missing URL was fetched"; fi
grep -q "could not download file://$WORK/missing" err.log || fail "a missing URL: $(cat err.log)"
[[ ! -e out/missing && ! -e out/missing.part ]] || fail "a failed download left a file"

# The route itself: no Debian folder, no archive, a mirror with the wrong bytes.
deb=pool/main/d/dataset-fashion-mnist/dataset-fashion-mnist_0.0~git20200523.55506a9-1_all.deb
mkdir -p "mirror/${deb%/*}" root
cp payload "mirror/$deb"
if MPITRON_DATA_PATH=data/fashion-mnist MPITRON_FASHION_MNIST=$WORK/none \
  MPITRON_DEBIAN_MIRROR=file://$WORK/mirror \
  "$REPO/io/prepare_data.sh" "$REPO/configs/mlp-fmnist.toml" root 2>err.log; then
  fail "Fashion-MNIST was prepared from a package of the wrong sha256"
fi
cat err.log
grep -q "has sha256 $good, not the expected 39e172fe" err.log || fail "the route did not check the sha256"
grep -q "cannot prepare data/fashion-mnist" err.log || fail "the route's refusal does not name the data"
[[ ! -e root/data/fashion-mnist ]] || fail "a refused download left data/fashion-mnist"
echo "fetch checked ok"
