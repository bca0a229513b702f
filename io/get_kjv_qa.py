#!/usr/bin/env python3
"""Father-of questions drawn from the KJV's own genealogies, for knowledge QA (README, "Knowledge QA").

Usage: io/get_kjv_qa.py KJV_TEXT OUT_DIR [--dev-fraction 0.2] [--restate]

Reads the Bible one verse a line (io/get_bible.sh) and writes OUT_DIR/train.qa and OUT_DIR/valid.qa,
one "Who was the father of SON?⁇FATHER" line each; OUT_DIR/genealogies.txt, the verses in which a
rule found a father (in order, one a line: a pretraining text as dense in these facts as the
corpus of biographies the span-corruption recipe was made for), then verses spread over the Bible
that name no father, an eighth of the former's bytes: training holds out the last tenth of a text
for validation, so that tenth holds no fact and every fact is in the pretraining; and
OUT_DIR/summary.txt (the counts below).

--restate adds to genealogies.txt every question's fact (training and valid people alike) in two of
the KJV's own phrasings, "SON, the son of FATHER." (Luke 3's) and "And FATHER begat SON."
(Genesis 5's), as lines spread among the verses (a fixed shuffle) before the fact-free tail. Most
facts are written father first ("X begat Y", "the sons of X; Y") and a left-to-right model stores
them as a way from the father to the son, while the question starts from the son: only 50 of the
124 valid facts are ever written son first. The restatements store each fact both ways, as a
corpus of biographies written several ways does (the knowledge augmentation of "Physics of
Language Models", part 3.1). No question is written into the text.

Rules (the verses are joined with spaces first, so a genealogy that runs across verses is read whole;
a NAME is a capitalised word, optionally hyphenated, that is not in STOP):
  1. "NAME begat NAME(, and NAME)*"                  - every NAME after begat is a son of the first
     ("And Enos lived ninety years, and begat Cainan": the words between a name and begat may be
     "lived ... years, and").
  2. "NAME, the son of NAME(, the son of NAME)*"     - a chain: each name's father is the next
     (also "which was the son of", the chain of Luke 3).
  3. "The sons of NAME[;:,] NAME(, and NAME)*"       - every listed NAME is a son of the first.
  4. "NAME his son, NAME his son"                    - a chain of "his son": each name's father
     is the name before it (1 Chronicles 3 and 6).
A "son of NAME the wife of / the daughter of / his mother" is a mother, and is skipped.
A son named with two or more different fathers (several men of one name, or one man's father
spelled two ways: Salah and Shelah) is ambiguous and dropped; so is a son who is his own father.
The split is by son: a hash of the name puts about --dev-fraction of the sons in valid.qa, so no
valid person is asked about in train.qa (his father may appear there as someone else's answer).
"""
import bisect
import collections
import hashlib
import os
import random
import re
import sys

STOP = set("""And The God LORD Lord He She They His Her Then Now Also But For Thus So Behold Moreover
Jesus Christ Israel Judah Of In If When Which Who Whom What Whose This These That Those All My Thy
Our Your Their I O Ye We After Before Therefore Wherefore Yea Let Go Neither Nor Because Unto
Jews Levites Hebrews Gentiles Egyptians Philistines Syria Egypt Jerusalem Canaanites Amorites
Hittites Spirit Holy Ghost Son Father King Amen Lo Hear See Come Give Take""".split())

NAME = r"[A-Z][a-z]+(?:-[a-z]+)?"
QUESTION = "Who was the father of {}?"
MARK = "\u2047"  # the separator between question and answer


def names_in_list(text):
    """The names at the start of text, in a list "A, and B, C and D"; stops at anything else."""
    out = []
    for m in re.finditer(r"\s*(?:,\s*)?(?:and\s+)?(" + NAME + r")\b", text):
        if m.start() != (out[-1][1] if out else 0):
            break
        out.append((m.group(1), m.end()))
    return [n for n, _ in out]


def extract(text):
    """(son, father, start, end) found by the four rules, with repeats (one per mention); start
    and end bound the words of text that say it."""
    found = []
    # Rule 1: NAME [lived ... years, and] begat LIST.
    for m in re.finditer(r"(" + NAME + r")(?: lived [a-z ,]*?years?,? and)? begat ", text):
        for son in names_in_list(text[m.end():]):
            found.append((son, m.group(1), m.start(), m.end() + 1))
    # Rule 2: chains of "[,] the son of" / "which was the son of".
    link = r",?\s+(?:[Ww]hich was )?the son of\s+"
    for m in re.finditer(r"(" + NAME + r")((?:" + link + NAME + r")+)", text):
        chain = [m.group(1)] + re.findall(link + r"(" + NAME + r")", m.group(2))
        after = text[m.end():m.end() + 24]
        for k in range(len(chain) - 1):
            last = k + 1 == len(chain) - 1
            if last and re.match(r",? (?:the (?:wife|daughter|mother) of|his mother)", after):
                continue  # "the son of Adah the wife of Esau": a mother
            found.append((chain[k], chain[k + 1], m.start(), m.end()))
    # Rule 3: the sons of NAME; LIST.
    for m in re.finditer(r"[Ss]ons of (" + NAME + r")(?: were)?[;:,] ", text):
        for son in names_in_list(text[m.end():]):
            found.append((son, m.group(1), m.start(), m.end() + 1))
    # Rule 4: NAME his son, NAME his son, ...
    for m in re.finditer(r"(" + NAME + r") his son((?:, (?:and )?" + NAME + r" his son)+)", text):
        chain = [m.group(1)] + re.findall(r"(" + NAME + r") his son", m.group(2))
        for k in range(len(chain) - 1):
            found.append((chain[k + 1], chain[k], m.start(), m.end()))
    return [x for x in found if x[0] not in STOP and x[1] not in STOP]


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    dev_fraction = 0.2
    restate = "--restate" in argv
    if "--dev-fraction" in argv:
        dev_fraction = float(argv[argv.index("--dev-fraction") + 1])
        args.remove(argv[argv.index("--dev-fraction") + 1])
    if len(args) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    src, out = args
    try:
        with open(src, encoding="utf-8") as f:
            verses = [line.strip() for line in f]
    except OSError as e:
        sys.exit(f"error: {src}: {e.strerror} (io/get_bible.sh writes the Bible as text)")
    text = " ".join(verses)
    starts = [0]  # where each verse begins in text
    for v in verses:
        starts.append(starts[-1] + len(v) + 1)
    fathers = collections.defaultdict(collections.Counter)
    mentions = extract(text)
    cited = set()
    for son, father, begin, end in mentions:
        fathers[son][father] += 1
        cited.update(range(bisect.bisect_right(starts, begin) - 1, bisect.bisect_left(starts, end)))
    ambiguous = sorted(s for s, c in fathers.items() if len(c) > 1)
    own = sorted(s for s, c in fathers.items() if len(c) == 1 and s in c)
    pairs = sorted((s, next(iter(c))) for s, c in fathers.items() if len(c) == 1 and s not in c)
    if not pairs:
        sys.exit(f"error: {src}: no genealogy found (is it the KJV, one verse a line?)")
    os.makedirs(out, exist_ok=True)
    split = {"train": [], "valid": []}
    for son, father in pairs:
        h = int.from_bytes(hashlib.sha256(son.encode()).digest()[:8], "little") / 2**64
        split["valid" if h < dev_fraction else "train"].append((son, father))
    for name, rows in split.items():
        tmp = os.path.join(out, name + ".qa.tmp")
        with open(tmp, "w", encoding="utf-8") as f:
            for son, father in rows:
                f.write(QUESTION.format(son) + MARK + father + "\n")
        os.replace(tmp, os.path.join(out, name + ".qa"))
    def size(k):
        return len(verses[k].encode()) + 1

    pretraining = [verses[k] for k in sorted(cited)]
    restated = []
    if restate:
        for son, father in pairs:
            restated += [f"{son}, the son of {father}.", f"And {father} begat {son}."]
        random.Random(1).shuffle(restated)
        # restatement i follows verse floor(i * verses / restatements): spread evenly
        spread = collections.defaultdict(list)
        for i, r in enumerate(restated):
            spread[i * len(pretraining) // len(restated)].append(r)
        pretraining = [x for k, v in enumerate(pretraining) for x in [v] + spread[k]]
    uncited = [k for k in range(len(verses)) if k not in cited and verses[k]]
    need = sum(len(x.encode()) + 1 for x in pretraining) / 8
    tail, tail_bytes = [], 0
    for k in uncited[:: max(1, len(uncited) // 500)] + uncited:  # spread, then any
        if tail_bytes >= need:
            break
        if k not in tail:
            tail.append(k)
            tail_bytes += size(k)
    with open(os.path.join(out, "genealogies.txt.tmp"), "w", encoding="utf-8") as f:
        for line in pretraining + [verses[k] for k in tail]:
            f.write(line + "\n")
    os.replace(os.path.join(out, "genealogies.txt.tmp"), os.path.join(out, "genealogies.txt"))
    # Ties go to the first name in sorted order (as mpitron eval's baseline does).
    common = min(collections.Counter(f for _, f in split["train"]).items(), key=lambda c: (-c[1], c[0]))
    lines = [
        f"{len(mentions)} mentions of a father in {src}",
        f"{len(fathers)} sons named with a father",
        f"{len(ambiguous)} ambiguous (two or more fathers; dropped)",
        f"{len(own)} named as their own father (dropped)",
        f"{len(pairs)} question-answer pairs: {len(split['train'])} train, {len(split['valid'])} valid",
        f"{len(cited)} verses in genealogies.txt that name a father"
        + (f", {len(restated)} restatements among them" if restate else "")
        + f", then {len(tail)} that name none (the held-out tenth)",
        f"most common father in train: {common[0]} ({common[1]} sons)",
    ]
    with open(os.path.join(out, "summary.txt"), "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main(sys.argv)
