// Verses for sequence classification: a text file of one verse a line, each line "<reference>
// <text>" as the bible program prints them ("Mat1:1 The book of ..."; io/get_bible.sh
// --references). Two tasks on it:
//   testament: [CLS] verse [SEP] -> 0 (Old Testament) or 1 (New Testament);
//   pairs:     [CLS] a [SEP] b [SEP] -> 1 when b is the verse after a, 0 when b is another verse
//              (the next-sentence task of BERT, Devlin et al. 2019, on verses).
// The split is fixed: verse i (of the pair task: the first verse) is validation when i % 10 == 9.
// Sample i of batch `index` draws its verse (and coin, and partner) from Philox keyed by (seed,
// split, index, i), so every layout sees the same samples. Tokens are the verses' bytes, or their
// WordPiece ids (a BERT vocabulary).
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "io/dataset.hpp"

namespace mpitron::io {

enum class VerseTask { testament = 1, pairs = 2 };

struct VerseDataset {
  std::string path;
  std::vector<int32_t> ids;            // the verses' tokens, back to back (no references)
  std::vector<int64_t> begin;          // (verses + 1) offsets into ids
  std::string tokenizer;               // the WordPiece vocabulary's folder; "" for bytes
  std::vector<uint8_t> new_testament;  // (verses) 1 for a New Testament book
  std::vector<int64_t> train, val;     // verse indices of each split
  uint64_t checksum = 0;               // FNV-1a of the file

  int64_t verses() const { return int64_t(new_testament.size()); }
  const std::vector<int64_t>& split(Split s) const { return s == Split::train ? train : val; }
};

// Special token ids the rows are built with.
struct VerseTokens {
  int32_t pad = 256, cls = 258, sep = 259;
};

class WordPieceTokenizer;

// UsageError for a missing file, a line without a "<Book><chapter>:<verse> " reference (naming
// the line), or too few verses for both splits. wordpiece: encode the verses with it (else bytes).
VerseDataset load_verse_dataset(const std::string& path,
                                const WordPieceTokenizer* wordpiece = nullptr);

// Rows [sample_begin, sample_begin + count) of batch `index`: out is (count, T + 1), row[0..T) the
// input ids ([PAD] after the last [SEP]), row[T] the label; labels (count) gets the labels too.
// T >= 3 (pairs: T >= 5); a verse too long is cut (pairs: the longer of the two, a token at a
// time).
void fill_verse_batch(const VerseDataset& data, VerseTask task, const VerseTokens& tok, Split split,
                      uint64_t seed, int64_t index, int64_t sample_begin, int64_t count, int T,
                      int32_t* out, int32_t* labels);

// Rows [first, first + count) of a whole split in order (its verses once each; the pair task's
// coin and partner from a fixed draw per verse), for evaluating on the whole test split.
void fill_verse_rows(const VerseDataset& data, VerseTask task, const VerseTokens& tok, Split split,
                     int64_t first, int64_t count, int T, int32_t* out, int32_t* labels);

}  // namespace mpitron::io
