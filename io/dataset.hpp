// Byte-level text data: every byte of a text file is a token (vocabulary 256). The first 90% of
// the file is the training split, the rest validation. The global batch of step s is a pure
// function of (seed, s): sample i starts at a Philox-drawn offset keyed by (seed, split, s, i),
// so any DP rank or micro-batch can draw exactly its slice of it.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace mpitron::io {

enum class Split { train, val };

struct TextDataset {
  std::string path;
  std::vector<uint8_t> bytes;
  size_t train_end = 0;   // [0, train_end) is train, [train_end, size) validation
  uint64_t checksum = 0;  // FNV-1a of the bytes, recorded in checkpoints

  size_t split_begin(Split s) const { return s == Split::train ? 0 : train_end; }
  size_t split_end(Split s) const { return s == Split::train ? train_end : bytes.size(); }
};

// Loads a text file; UsageError if it is missing, unreadable, or too short for seq_len.
TextDataset load_text_dataset(const std::string& path, int seq_len, double val_fraction = 0.1);

// Writes samples [sample_begin, sample_begin + count) of batch `index` (the step for training,
// the evaluation batch for validation) as rows of seq_len + 1 tokens: out is (count, seq_len+1).
void fill_batch(const TextDataset& data, Split split, uint64_t seed, int64_t index,
                int64_t sample_begin, int64_t count, int seq_len, int32_t* out);

}  // namespace mpitron::io
