#!/usr/bin/env python3
"""Does a pretrained knowledge-QA model hold the facts? A cloze probe in the pretraining's own format.

Usage: validate/qa_cloze_probe.py CKPT QA_DIR [--limit N]

For each question of QA_DIR/{train,valid}.qa ("Who was the father of SON?⁇FATHER"), takes the first
verse of QA_DIR/genealogies.txt whose first 112 bytes name both SON and FATHER, cuts FATHER out
and asks the checkpoint (a span-corruption pretraining of configs/qa-pretrain.toml, read with the
PyTorch model of validate/gpt_torch.py) to fill it: prefix [MASK] suffix [MASK], then FATHER [END]
must be the greedy continuation (every next byte the argmax). Prints, per split, how many of the
questions with such a verse it fills right. Question answering can use only what this finds.
"""
import os
import re
import sys

# Threads are set before torch loads: without OMP_NUM_THREADS in the environment, torch's first
# matrix product spun for ever (its OpenMP pool beside OpenBLAS's), and set_num_threads after
# the import did not help. One thread unless the caller asks for more: the probe is small.
if not os.environ.get("OMP_NUM_THREADS"):
    os.environ["OMP_NUM_THREADS"] = "1"
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import torch  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gpt_torch import load_model  # noqa: E402

MASK, END, WINDOW = 256, 257, 112  # [MASK], [END]; the longest document of a 128-byte row


def main(argv):
    args = [a for a in argv[1:] if not a.startswith("--")]
    limit = None
    if "--limit" in argv:
        limit = int(argv[argv.index("--limit") + 1])
        args.remove(argv[argv.index("--limit") + 1])
    if len(args) != 2:
        sys.exit(__doc__.split("\n\n")[1])
    ckpt, qa = args
    model = load_model(ckpt).eval()
    verses = open(os.path.join(qa, "genealogies.txt"), encoding="utf-8").read().split("\n")
    for split in ("train", "valid"):
        rows = [l.rstrip("\n").split("\u2047") for l in open(os.path.join(qa, f"{split}.qa"), encoding="utf-8")]
        right = tried = 0
        for question, father in rows[:limit]:
            son = question[len("Who was the father of "):-1]
            for verse in verses:
                doc = verse.encode()[:WINDOW].decode("utf-8", "ignore")
                f = re.search(r"\b%s\b" % re.escape(father), doc)
                if not f or not re.search(r"\b%s\b" % re.escape(son), doc[: f.start()] + doc[f.end():]):
                    continue
                b = doc.encode()
                at = len(doc[: f.start()].encode())
                prompt = list(b[:at]) + [MASK] + list(b[at + len(father.encode()):]) + [MASK]
                target = list(father.encode()) + [END]
                with torch.no_grad():
                    logits = model(torch.tensor([prompt + target[:-1]]))
                tried += 1
                right += logits[0, len(prompt) - 1:].argmax(-1).tolist() == target
                break
        print(f"{split}: {right} of {tried} fathers filled ({100 * right / max(tried, 1):.1f}%), "
              f"{len(rows[:limit]) - tried} questions without a verse naming both")


if __name__ == "__main__":
    main(sys.argv)
