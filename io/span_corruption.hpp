// Span corruption on text (train.objective = "span_corruption"): a sample is a document, truncated
// to a random length L in [4, min(7T/8, T-2)], with a span of random length m in [1, L/2] (mean
// about L/4) cut out at a random place, presented as
//   prefix [MASK] suffix [MASK] span [END] [PAD]...
// and every position up to [END] is a loss term (the span's loss span is [0, L + 2)). The model
// learns to fill a gap from both sides of it; [END] marks where the span stops, as the answers of
// question answering do (io/pair_dataset.hpp: question [SEP] answer [END], [SEP] = [MASK]).
// The KJV's verses are mostly longer than a block, so a document is the text from a random word
// start (bytes) or a random token (token files); sample i of batch `index` draws its document and
// lengths from Philox keyed by (seed, split, index, i), so every layout sees the baseline's
// samples and knows the batch's loss terms without a message.
#pragma once
#include <cstdint>

#include "io/dataset.hpp"

namespace mpitron::io {

// The special tokens follow the data's vocabulary: bytes 256, 257, 258 (those of byte pairs).
struct SpanTokens {
  int32_t mask = 256, end = 257, pad = 258;
};
SpanTokens span_tokens(const TextDataset& data);

// The random choices of one sample, from four 32-bit draws.
struct SpanDraw {
  int64_t offset;   // where the document starts, from the split's start
  int length;       // L, the truncated document's length
  int span_begin;   // where the cut span starts in the document
  int span_length;  // m
};
// The longest document a T-token sample holds.
int span_max_length(int T);
SpanDraw span_draw(const uint32_t v[4], int64_t split_tokens, int T);

// The row (T + 1 tokens) of a document doc[0, L), and its loss span.
void span_row(const int32_t* doc, const SpanDraw& d, const SpanTokens& tok, int T, int32_t* row,
              int32_t* span);

// UsageError when T < 8 or a split is shorter than two of the longest documents.
void check_span_fits(const TextDataset& data, int T);

// Rows [sample_begin, sample_begin + count) of batch `index`: out (count, T + 1), spans (count, 2).
void fill_span_batch(const TextDataset& data, Split split, uint64_t seed, int64_t index,
                     int64_t sample_begin, int64_t count, int T, int32_t* out, int32_t* spans);

// The loss terms of rows [0, count) of batch `index`: the sum of (L + 2).
int64_t span_batch_loss_terms(const TextDataset& data, Split split, uint64_t seed, int64_t index,
                              int64_t count, int T);

}  // namespace mpitron::io
