// Span corruption on text (train.objective = "span_corruption"): a sample is a document, truncated
// to a random length L (drawn in [4, min(7T/8, T-2)], at most the document's length), with a span
// of random length m in [1, L/2] (mean about L/4) cut out at a random place, presented as
//   prefix [MASK] suffix [MASK] span [END] [PAD]...
// and every position up to [END] is a loss term (the span's loss span is [0, L + 2)). The model
// learns to fill a gap from both sides of it; [END] marks where the span stops, as the answers of
// question answering do (io/pair_dataset.hpp: question [SEP] answer [END], [SEP] = [MASK]).
// A document is a line of byte text (a verse of the KJV; lines under 4 bytes are skipped), read
// from its start as the original recipe reads one article a line; token files have no lines, so
// there it is the tokens from a random position. Sample i of batch `index` draws its document and
// lengths from Philox keyed by (seed, split, index, i), so every layout sees the baseline's samples
// and knows the batch's loss terms without a message.
// Name spans (train.objective = "name_span_corruption", byte text): the same sample, but the cut
// span is a name, a capitalized word that is not the document's first (salient span masking, as
// REALM masks named entities): the span chosen is the k-th such word whose letters all lie inside
// the truncated document, k from the draw's third number; a document without one keeps the random
// span. L, and so the loss terms, do not depend on the choice.
// Name spans in a window of words (train.span_context_words = K > 0): the name is drawn from the
// whole line, and the document is the name with a random number of words on each side, a in
// [0, K] before and b in [0, K] after it (the line's ends stop them; words are runs of bytes
// between spaces, the name's own punctuation stays with it); a window longer than the longest
// document gives up a word of its longer side until it fits. So a fact is asked from a few of its
// words at a time, the son's name alone with the relation among them, as a question asks it;
// a line without a name keeps the truncated document and its random span. L, and so the loss
// terms, depend on the window: they are counted from the data.
// Words left out of windows (train.span_drop_words = p): each word of the window but the name's is
// dropped with probability p, the rest closing up with single spaces. A fact is then also asked
// from the son's name and the relation with the words between them gone ("Enos lived ninety years,
// and begat Cainan" as "Enos begat Cainan"), closer to the few words a question gives.
#pragma once
#include <cstdint>
#include <vector>

#include "io/dataset.hpp"

namespace mpitron::io {

// The special tokens follow the data's vocabulary: bytes 256, 257, 258 (those of byte pairs).
struct SpanTokens {
  int32_t mask = 256, end = 257, pad = 258;
};
SpanTokens span_tokens(const TextDataset& data);

// The documents of one split: its lines (byte text), or every start of a window of the longest
// document's length (tokens).
struct SpanDocuments {
  std::vector<int64_t> start;   // lines: where each starts in the data
  std::vector<int32_t> length;  // lines: its length without the newline
  int64_t window_begin = 0;     // tokens: windows start in [window_begin, + windows)
  int64_t windows = 0;
  int window_length = 0;
  int64_t count() const { return windows > 0 ? windows : int64_t(start.size()); }
};
// UsageError when T < 8 or the split holds fewer than two documents.
SpanDocuments span_documents(const TextDataset& data, Split split, int T);

// The random choices of one sample, from four 32-bit draws.
struct SpanDraw {
  int64_t start;    // where the document starts in the data
  int length;       // L, the truncated document's length
  int span_begin;   // where the cut span starts in the document
  int span_length;  // m
};
// The longest document a T-token sample holds.
int span_max_length(int T);
SpanDraw span_draw(const uint32_t v[4], const SpanDocuments& docs, int T);

// Moves d's span onto a name of doc[0, d.length), drawn with v (see above); false if it has none.
bool name_span(const int32_t* doc, uint32_t v, SpanDraw& d);

// Name spans with context_words > 0: d (a document of line[0, line_length) from line_start) becomes
// the window around a name of the whole line, drawn with v (see above); false, d untouched, if the
// line has no name.
bool name_window(const int32_t* line, int64_t line_start, int line_length, const uint32_t v[4],
                 int context_words, int max_length, SpanDraw& d);

// Name windows with drop > 0: each word of the window but the name's (d.span_begin's) is left out
// with probability drop (word j by a Philox stream keyed by v); the kept words, joined by single
// spaces, become doc[0, d.length), the name's place follows.
void drop_window_words(int32_t* doc, const uint32_t v[4], double drop, SpanDraw& d);

// The objective's variants.
struct SpanOptions {
  bool names = false;         // the span is a name
  int context_words = 0;      // names: > 0, the document is a window of words around the name
  bool loss_on_span = false;  // the loss terms are the span and [END] only, not the document
  double drop_words = 0;      // windows: the probability each word but the name's is left out
};

// The row (T + 1 tokens) of a document doc[0, L), and its loss span: [0, L + 2), or with
// loss_on_span the positions that predict the span and [END], [L - m + 1, L + 2).
void span_row(const int32_t* doc, const SpanDraw& d, const SpanTokens& tok, int T, int32_t* row,
              int32_t* span, bool loss_on_span = false);

// Rows [sample_begin, sample_begin + count) of batch `index`: out (count, T + 1), spans (count, 2).
void fill_span_batch(const TextDataset& data, const SpanDocuments& docs, Split split, uint64_t seed,
                     int64_t index, int64_t sample_begin, int64_t count, int T, int32_t* out,
                     int32_t* spans, SpanOptions options = {});

// The loss terms of rows [0, count) of batch `index`: the sum of (L + 2).
int64_t span_batch_loss_terms(const TextDataset& data, const SpanDocuments& docs, Split split,
                              uint64_t seed, int64_t index, int64_t count, int T,
                              SpanOptions options = {});

}  // namespace mpitron::io
