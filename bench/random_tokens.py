"""Random tokens (uniform over the vocabulary, fixed seed) as an mpitron token file: /tokens and
the attributes io/dataset.hpp describes, the checksum the FNV-1a 64 of io/dataset.cpp.
Usage: random_tokens.py OUT.h5 VOCAB [COUNT] [SOURCE]   (COUNT default 2^20)"""
import sys

import h5py
import numpy as np


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    path, vocab = sys.argv[1], int(sys.argv[2])
    count = int(sys.argv[3]) if len(sys.argv) > 3 else 1 << 20
    source = sys.argv[4] if len(sys.argv) > 4 else "random tokens"
    ids = np.random.default_rng(1337).integers(0, vocab, count, dtype=np.int64)
    h, mask = 1469598103934665603, (1 << 64) - 1
    for t in ids.tolist():
        h = ((h ^ t) * 1099511628211) & mask
    with h5py.File(path, "w") as f:
        f.create_dataset("tokens", data=ids.astype("<u2" if vocab <= 65536 else "<u4"))
        for key, value in (("format", "mpitron tokens"), ("tokenizer", ""),
                           ("tokenizer_format", ""), ("source", source)):
            f.attrs[key] = value
        for key, value in (("vocab_size", vocab), ("source_bytes", 0), ("tokens", ids.size),
                           ("checksum", h - (1 << 64) if h >= 1 << 63 else h)):
            f.attrs[key] = np.int64(value)


if __name__ == "__main__":
    main()
