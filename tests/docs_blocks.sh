#!/usr/bin/env bash
# The guide's examples stay true: every ```sh runnable block of README.md and docs/*.md runs with
# this build's binary (a page's blocks in order, in a fresh folder of their own with build/,
# data/ and the checkout's folders beside them; docs/README.md says how blocks are marked), and
# every relative link of README.md, ARCHITECTURE.md and docs/ points at a file and heading that exist.
# Usage: docs_blocks.sh MPITRON REPO WORK
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/e2e/common.sh"
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=${OPENBLAS_NUM_THREADS:-1}

mapfile -t pages < <(cd "$REPO" && ls README.md ARCHITECTURE.md docs/*.md docs/*/*.md 2>/dev/null)
[[ ${#pages[@]} -gt 3 ]] || fail "no guide pages found under $REPO/docs"

# Links: a relative target must exist; a #heading in a markdown target must be one of its
# headings (GitHub's anchors: lower case, punctuation dropped, spaces as hyphens).
"$PYTHON" - "$REPO" "${pages[@]}" <<'EOF' || fail "broken links (above)"
import os, re, sys
repo, pages = sys.argv[1], sys.argv[2:]
def anchors(path):
    out, fence = set(), False
    for line in open(path, encoding="utf-8"):
        if line.startswith("```"):
            fence = not fence
        elif not fence and line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            out.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return out
bad = 0
for page in pages:
    fence = False
    for n, line in enumerate(open(os.path.join(repo, page), encoding="utf-8"), 1):
        if line.startswith("```"):
            fence = not fence
        if fence:
            continue
        for target in re.findall(r"\]\(([^)\s]+)\)", line):
            if re.match(r"[a-z]+:", target):
                continue
            path, _, anchor = target.partition("#")
            full = os.path.normpath(os.path.join(repo, os.path.dirname(page), path)) if path else os.path.join(repo, page)
            if not os.path.exists(full):
                print(f"{page}:{n}: link to {target}: no such file"); bad += 1
            elif anchor and full.endswith(".md") and anchor not in anchors(full):
                print(f"{page}:{n}: link to {target}: no such heading"); bad += 1
sys.exit(1 if bad else 0)
EOF
echo "links: every relative link of ${#pages[@]} pages resolves"

[[ -s $REPO/data/kjv.txt ]] || {
  echo "SKIP: $REPO/data/kjv.txt is missing (make data); the runnable blocks train on it"
  exit 77
}
images=$(cd "$REPO" && "$MPITRON" data-path --config configs/mlp-fmnist.toml) || fail "mpitron data-path failed"

# Each block to blocks/<n>.sh, with its page and the line of its opening fence in blocks/<n>.where.
mkdir -p blocks
for page in "${pages[@]}"; do
  awk -v where="$page" -v prefix="$WORK/blocks/${page//\//_}" '
    /^```sh runnable[[:space:]]*$/ { file = sprintf("%s.%03d", prefix, ++count); print where ":" NR > (file ".where")
      close(file ".where"); inblock = 1; next }
    inblock && /^```[[:space:]]*$/ { inblock = 0; close(file ".sh"); next }
    inblock { print > (file ".sh") }
    END { exit inblock }' "$REPO/$page" || fail "$page: a runnable block is not closed"
done
shopt -s nullglob
blocks=(blocks/*.sh)
[[ ${#blocks[@]} -ge 8 ]] || fail "only ${#blocks[@]} runnable blocks found (README.md and docs/ mark 8 or more)"

# A page's folder: the checkout's top-level entries, build/ at this binary's folder, data/ with
# the repository's data files (runs and outputs land in the folder, never in the checkout).
page_folder() {
  local dir=$1 entry
  mkdir -p "$dir/data"
  for entry in "$REPO"/*; do
    case ${entry##*/} in build | data | runs) ;; *) ln -s "$entry" "$dir/${entry##*/}" ;; esac
  done
  ln -s "$(dirname "$MPITRON")" "$dir/build"
  for entry in "$REPO"/data/*; do ln -s "$entry" "$dir/data/${entry##*/}"; done
}

failed=0 ran=0
for block in "${blocks[@]}"; do
  where=$(cat "${block%.sh}.where")
  page=${where%%:*}
  dir=$WORK/pages/${page//\//_}
  [[ -d $dir ]] || page_folder "$dir"
  if grep -q fmnist "$block" && [[ ! -e $images ]]; then
    echo "SKIP $where: no Fashion-MNIST at $images"
    continue
  fi
  start=$SECONDS
  rc=0
  (cd "$dir" && timeout 120 bash -euo pipefail "$WORK/$block") >"${block%.sh}.log" 2>&1 || rc=$?
  ran=$((ran + 1))
  if [[ $rc != 0 ]]; then
    echo "FAIL $where: the runnable block exited $rc; its output ends:"
    tail -15 "${block%.sh}.log" | sed 's/^/    /'
    failed=$((failed + 1))
  else
    echo "ok   $where ($((SECONDS - start)) s)"
  fi
done
[[ $failed == 0 ]] || fail "$failed of $ran runnable blocks failed (above)"
echo "runnable blocks: $ran passed"
