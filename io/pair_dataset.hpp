// Sentence pairs for a decoder trained on source -> target (translation): a folder named
// "<s>-<t>" (data/es-en) holding train.<s>, train.<t>, valid.<s>, valid.<t>, one sentence a line,
// line k of the two files of a split one pair. Or questions and answers: a folder holding
// train.qa and valid.qa, one "question⁇answer" line a pair (io/get_kjv_qa.py). A sample is
//   source [SEP] target [END] [PAD]...
// and only the target and [END] are loss terms (its loss span). Tokens are bytes (SEP 256,
// END 257, PAD 258) or the ids of a SentencePiece model (its bos, eos and pad). Sample i of batch
// `index` draws its pair from Philox keyed by (seed, split, index, i), so every layout sees the
// baseline's samples, and the batch's loss terms are known to every rank without a message.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/dataset.hpp"

namespace mpitron::io {

class SentencePieceTokenizer;

// Between question and answer on a line of a .qa file: U+2047, DOUBLE QUESTION MARK.
inline constexpr const char* kQaMark = "\u2047";

struct PairTokens {
  int32_t sep = 256, end = 257, pad = 258;
};

struct PairSplit {
  std::vector<int32_t> ids;    // sources and targets, back to back
  std::vector<int64_t> begin;  // (2 pairs + 1): pair k's source [2k, 2k+1), target [2k+1, 2k+2)
  int64_t pairs() const { return int64_t(begin.size() / 2); }
};

// Training pairs in length buckets (train.length_buckets): `buckets` runs of (nearly) equal count
// over the pairs sorted by length (source + target + 2, ties by index). A batch draws all its rows
// from one bucket, picked by (seed, index), so it needs few more positions than its longest pair;
// each pair is still drawn about as often as without buckets. Empty: no buckets.
struct PairBuckets {
  std::vector<int64_t> order;   // pair indices by length
  std::vector<int64_t> bounds;  // (buckets + 1) offsets into order
  int count() const { return bounds.empty() ? 0 : int(bounds.size() - 1); }
};

// UsageError when there are fewer pairs than buckets.
PairBuckets pair_length_buckets(const PairSplit& s, int buckets);

struct PairDataset {
  std::string path;                 // the folder
  std::string source, target;       // the files' suffixes (languages); question, answer
  bool qa = false;                  // train.qa and valid.qa
  std::string tokenizer;            // the SentencePiece model; "" for bytes
  uint64_t tokenizer_checksum = 0;  // its file's FNV-1a (0 for bytes)
  PairTokens tokens;
  int64_t vocab_size = 259;  // every id is below it
  PairSplit train, val;
  PairBuckets train_buckets;  // the training batches' buckets (train.length_buckets; empty: off)
  std::vector<std::string> val_sources;     // the validation sources' text, for BLEU and EM
  std::vector<std::string> val_references;  // the validation targets' text, for BLEU
  std::vector<std::string> train_answers;   // qa: the training answers' text (the majority)
  uint64_t checksum = 0;                    // FNV-1a over the four files

  const PairSplit& split(Split s) const { return s == Split::train ? train : val; }
};

// UsageError for: a folder not named "<s>-<t>" (without train.qa) or missing one of the files,
// files of a split with different line counts, an empty line (naming file and line), invalid
// UTF-8, a .qa line without exactly one ⁇.
// spm: encode with it (else bytes).
PairDataset load_pair_dataset(const std::string& dir, const SentencePieceTokenizer* spm = nullptr);

// The row of pair (source, target) in T + 1 tokens and its loss span [begin, end) over the T
// target positions (position t predicts row[t + 1]). Too long, the source is cut first, to no
// fewer than (T - 1) / 2 tokens, then the target, whose [END] then falls away too.
void pair_row(const int32_t* source, int64_t source_len, const int32_t* target, int64_t target_len,
              const PairTokens& tok, int T, int32_t* row, int32_t* span);

// Rows [sample_begin, sample_begin + count) of batch `index`: out (count, T + 1), spans (count, 2).
void fill_pair_batch(const PairDataset& data, Split split, uint64_t seed, int64_t index,
                     int64_t sample_begin, int64_t count, int T, int32_t* out, int32_t* spans);

// The loss terms of rows [0, count) of batch `index`: the sum of their spans' lengths.
int64_t pair_batch_loss_terms(const PairDataset& data, Split split, uint64_t seed, int64_t index,
                              int64_t count, int T);

// The positions rows [0, count) of batch `index` need: the longest row's (source [SEP] target
// predicts up to [END]) rounded up to a multiple of `multiple`, at most T. A batch filled with it
// holds every row's first positions exactly as with T, and the same loss spans.
int pair_batch_seq_len(const PairDataset& data, Split split, uint64_t seed, int64_t index,
                       int64_t count, int T, int multiple);

}  // namespace mpitron::io
