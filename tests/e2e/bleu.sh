#!/usr/bin/env bash
# `mpitron bleu` against NLTK's corpus_bleu: the tokens from a 13a tokenizer written here with
# Python's re (the rules of mteval-v13a, as sacreBLEU applies them), the score to 1e-6 with NLTK's
# smoothing method 3 (mteval's, sacreBLEU's default "exp"). NLTK counts at least one n-gram per
# sentence and order where sacreBLEU counts none, so on corpora with hypotheses shorter than four
# tokens (empty ones too) the n-gram matches and totals are compared instead, and the score against
# BLEU's formula. Skips (77) without NLTK (apt-get install python3-nltk).
# shellcheck source=tests/e2e/common.sh
source "$(dirname "$0")/common.sh"
if ! "$PYTHON" -c "import nltk.translate.bleu_score" 2>/dev/null; then
  echo "SKIP: $PYTHON does not import nltk (apt-get install python3-nltk)"
  exit 77
fi
export MPITRON
"$PYTHON" - <<'PY' || fail "BLEU differs from NLTK's"
import math, os, random, re, subprocess
from nltk.translate.bleu_score import (SmoothingFunction, brevity_penalty, corpus_bleu,
                                       modified_precision)

def tok13a(line):
    line = line.replace("<skipped>", "").replace("-\n", "").replace("\n", " ")
    if "&" in line:
        for a, b in (("&quot;", '"'), ("&amp;", "&"), ("&lt;", "<"), ("&gt;", ">")):
            line = line.replace(a, b)
    line = " " + line + " "
    line = re.sub(r"([\{-\~\[-\` -\&\(-\+\:-\@\/])", r" \1 ", line)
    line = re.sub(r"([^0-9])([\.,])", r"\1 \2 ", line)
    line = re.sub(r"([\.,])([^0-9])", r" \1 \2", line)
    line = re.sub(r"([0-9])(-)", r"\1 \2 ", line)
    return line.split()

def mpitron(hyps, refs, name):
    with open(name + ".hyp", "w") as f:
        f.write("".join(h + "\n" for h in hyps))
    with open(name + ".ref", "w") as f:
        f.write("".join(r + "\n" for r in refs))
    out = subprocess.run([os.environ["MPITRON"], "bleu", name + ".hyp", name + ".ref", "-w", "10"],
                         check=True, capture_output=True, text=True).stdout
    print(name + ": " + out.strip().replace("\n", "; "))
    score = float(re.search(r"^BLEU = (\S+) ", out).group(1))
    bp = float(re.search(r"BP = (\S+) ", out).group(1))
    counts = [tuple(map(int, m)) for m in re.findall(r"\d: (\d+)/(\d+)", out)]
    return score, bp, counts

r = random.Random(11)
words = ("the lord said unto moses , and israel went out of egypt . in beginning god created "
         "heaven earth ; 3.5 1,000 12-year-old don't \"light\" & <b> co-operation").split()

def sentence(n):
    return " ".join(r.choice(words) for _ in range(n))

def perturb(ref, drop, minimum):
    toks = ref.split()
    kept = [t if r.random() > 0.3 else r.choice(words) for t in toks if r.random() > drop]
    while len(kept) < minimum:
        kept.append(r.choice(words))
    return " ".join(kept)

def check_score(hyps, refs, name):
    score, bp, _ = mpitron(hyps, refs, name)
    want = 100 * corpus_bleu([[tok13a(x)] for x in refs], [tok13a(x) for x in hyps],
                             smoothing_function=SmoothingFunction().method3)
    assert abs(score - want) <= 1e-6, (name, score, want)

# 13a itself: the C++ tokens of each line are the Python rules' (the reference is those tokens
# joined by spaces, which 13a leaves as they are: every n-gram matches, the lengths agree).
for line in ['He said: "Go." 3.5-4,000 items, e.g. A&amp;B &lt;x&gt;', "a <skipped> c",
             "12-year-old, don't (yes) [no] {x} $5 @home ~ end.", "Señor. Amén, ¡sí! x.y 3,a"]:
    toks = tok13a(line)
    _, _, counts = mpitron([line], [" ".join(toks)], "tok")
    assert counts[0] == (len(toks), len(toks)) and all(m == t for m, t in counts), (line, toks, counts)

# A corpus of 300 pairs, hypotheses shorter and longer than their references (BP < 1 and 1).
refs = [sentence(r.randint(5, 30)) for _ in range(300)]
check_score([perturb(x, 0.25, 4) for x in refs], refs, "shorter")
check_score([perturb(x, 0.0, 4) + " " + sentence(3) for x in refs], refs, "longer")
# No 3- or 4-gram matches: smoothing at orders 3 and 4 (k = 1, 2).
refs = ["a b c d e f", "g h i j k l"]
check_score(["a b x c d y", "g h z i j w"], refs, "smoothed")
# Identical corpora score 100; disjoint ones 0 with every precision 0 (sacreBLEU and NLTK alike).
check_score(refs, refs, "identical")
check_score(["x y z w v", "u t s r q"], refs, "disjoint")
score, bp, counts = mpitron(["x y z w v", "u t s r q"], refs, "disjoint2")
assert score == 0 and all(m == 0 for m, _ in counts), (score, counts)

# Empty and short hypotheses: matches and totals against NLTK's clipped counts.
refs = [sentence(r.randint(3, 12)) for _ in range(60)]
hyps = [perturb(x, 0.6, 0) if i % 3 else "" for i, x in enumerate(refs)]
hyps[1] = refs[1].split()[0]
score, bp, counts = mpitron(hyps, refs, "empty")
H, R = [tok13a(x) for x in hyps], [tok13a(x) for x in refs]
c, rl = sum(map(len, H)), sum(map(len, R))
for n in range(1, 5):
    matches = sum(modified_precision([ref], hyp, n).numerator for hyp, ref in zip(H, R))
    totals = sum(max(0, len(h) - n + 1) for h in H)
    assert counts[n - 1] == (matches, totals), (n, counts, matches, totals)
assert abs(bp - brevity_penalty(rl, c)) <= 1e-9, (bp, brevity_penalty(rl, c))
logs, k = 0.0, 1
for m, t in counts:
    assert t > 0
    p = m / t if m else 1 / (2 ** k * t)
    k += 0 if m else 1
    logs += math.log(p)
want = 100 * bp * math.exp(logs / 4)
assert abs(score - want) <= 1e-6 * max(1, want), (score, want)
# Every hypothesis empty: no n-grams, BLEU 0.
score, bp, counts = mpitron([""] * 3, refs[:3], "all_empty")
assert score == 0 and bp == 0 and all(t == 0 for _, t in counts), (score, bp, counts)
print("BLEU matches NLTK")
PY

# Files of different lengths are refused with both counts; a missing file is named.
printf 'a b c\n' >one.txt
printf 'a b c\nd e f\n' >two.txt
if "$MPITRON" bleu one.txt two.txt 2>err.txt; then fail "different line counts accepted"; fi
grep -q "one.txt has 1 lines but two.txt has 2" err.txt || fail "line count message: $(cat err.txt)"
if "$MPITRON" bleu none.txt two.txt 2>err.txt; then fail "missing file accepted"; fi
grep -q "hypotheses file none.txt does not exist" err.txt || fail "missing file: $(cat err.txt)"
echo "PASS"
