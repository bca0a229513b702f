// Span corruption on text (io/span_corruption.hpp).
#include "io/span_corruption.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <vector>

#include "base/check.hpp"
#include "base/philox.hpp"

namespace mpitron::io {

namespace {

constexpr int64_t kWordSearch = 32;  // bytes a document start may move forward to a word start

PhiloxStream span_stream(uint64_t seed, Split split) {
  return {seed, fnv1a64(split == Split::train ? "span.train" : "span.val")};
}

int64_t split_tokens(const TextDataset& data, Split split) {
  return int64_t(data.split_end(split) - data.split_begin(split));
}

void check_split_fits(const TextDataset& data, Split split, int T) {
  if (T < 8) throw UsageError(fmt::format("span corruption needs seq_len >= 8 (got {})", T));
  const int64_t need = 2 * (span_max_length(T) + kWordSearch);
  if (split_tokens(data, split) < need)
    throw UsageError(fmt::format(
        "{}: the {} split holds {} tokens, span corruption at seq_len {} needs at least {}",
        data.path, split == Split::train ? "training" : "validation", split_tokens(data, split), T,
        need));
}

// The document of sample `d` from the split's start: bytes move forward to the next word start.
int64_t document_start(const TextDataset& data, Split split, const SpanDraw& d) {
  const size_t begin = data.split_begin(split) + size_t(d.offset);
  if (data.is_tokens()) return int64_t(begin);
  for (size_t k = begin; k < begin + kWordSearch; ++k)
    if (data.bytes[k] == ' ' || data.bytes[k] == '\n') return int64_t(k + 1);
  return int64_t(begin);
}

}  // namespace

void check_span_fits(const TextDataset& data, int T) {
  check_split_fits(data, Split::train, T);
  check_split_fits(data, Split::val, T);
}

SpanTokens span_tokens(const TextDataset& data) {
  const int32_t v = int32_t(data.vocab_size);
  return {v, v + 1, v + 2};
}

int span_max_length(int T) {
  return std::min(7 * T / 8, T - 2);
}

SpanDraw span_draw(const uint32_t v[4], int64_t split_tokens, int T) {
  const int max_length = span_max_length(T);
  SpanDraw d;
  d.offset = int64_t(v[0] % uint64_t(split_tokens - max_length - kWordSearch));
  d.length = 4 + int(v[1] % uint32_t(max_length - 3));
  d.span_length = 1 + int(v[2] % uint32_t(d.length / 2));
  d.span_begin = int(v[3] % uint32_t(d.length - d.span_length + 1));
  return d;
}

void span_row(const int32_t* doc, const SpanDraw& d, const SpanTokens& tok, int T, int32_t* row,
              int32_t* span) {
  MPITRON_REQUIRE(d.length + 3 <= T + 1, "span corruption document longer than the row");
  int n = 0;
  for (int k = 0; k < d.span_begin; ++k) row[n++] = doc[k];
  row[n++] = tok.mask;
  for (int k = d.span_begin + d.span_length; k < d.length; ++k) row[n++] = doc[k];
  row[n++] = tok.mask;
  for (int k = d.span_begin; k < d.span_begin + d.span_length; ++k) row[n++] = doc[k];
  row[n++] = tok.end;
  span[0] = 0;
  span[1] = n - 1;  // positions [0, L + 2) predict every token after the first, [END] included
  while (n < T + 1) row[n++] = tok.pad;
}

void fill_span_batch(const TextDataset& data, Split split, uint64_t seed, int64_t index,
                     int64_t sample_begin, int64_t count, int T, int32_t* out, int32_t* spans) {
  check_split_fits(data, split, T);
  const PhiloxStream rng = span_stream(seed, split);
  const SpanTokens tok = span_tokens(data);
  std::vector<int32_t> doc(size_t(span_max_length(T)));
  for (int64_t r = 0; r < count; ++r) {
    const Philox4x32 b = rng.block((uint64_t(index) << 32) | uint64_t(sample_begin + r));
    const SpanDraw d = span_draw(b.v, split_tokens(data, split), T);
    const int64_t start = document_start(data, split, d);
    for (int k = 0; k < d.length; ++k)
      doc[size_t(k)] = data.is_tokens() ? data.tokens[size_t(start + k)]
                                        : int32_t(data.bytes[size_t(start + k)]);
    span_row(doc.data(), d, tok, T, out + r * (T + 1), spans + 2 * r);
  }
}

int64_t span_batch_loss_terms(const TextDataset& data, Split split, uint64_t seed, int64_t index,
                              int64_t count, int T) {
  check_split_fits(data, split, T);
  const PhiloxStream rng = span_stream(seed, split);
  int64_t terms = 0;
  for (int64_t r = 0; r < count; ++r) {
    const Philox4x32 b = rng.block((uint64_t(index) << 32) | uint64_t(r));
    terms += span_draw(b.v, split_tokens(data, split), T).length + 2;
  }
  return terms;
}

}  // namespace mpitron::io
