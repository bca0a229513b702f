// Span corruption on text (io/span_corruption.hpp).
#include "io/span_corruption.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <utility>
#include <vector>

#include "base/check.hpp"
#include "base/philox.hpp"

namespace mpitron::io {

namespace {

constexpr int kShortestDocument = 4;

PhiloxStream span_stream(uint64_t seed, Split split) {
  return {seed, fnv1a64(split == Split::train ? "span.train" : "span.val")};
}

const char* split_name(Split split) {
  return split == Split::train ? "training" : "validation";
}

}  // namespace

SpanTokens span_tokens(const TextDataset& data) {
  const int32_t v = int32_t(data.vocab_size);
  return {v, v + 1, v + 2};
}

int span_max_length(int T) {
  return std::min(7 * T / 8, T - 2);
}

SpanDocuments span_documents(const TextDataset& data, Split split, int T) {
  if (T < 8) throw UsageError(fmt::format("span corruption needs seq_len >= 8 (got {})", T));
  const int64_t begin = int64_t(data.split_begin(split)), end = int64_t(data.split_end(split));
  SpanDocuments docs;
  if (data.is_tokens()) {
    docs.window_length = span_max_length(T);
    docs.window_begin = begin;
    docs.windows = std::max<int64_t>(0, end - begin - docs.window_length + 1);
    if (docs.windows < 2)
      throw UsageError(fmt::format(
          "{}: the {} split holds {} tokens, span corruption at seq_len {} needs at least {}",
          data.path, split_name(split), end - begin, T, docs.window_length + 1));
    return docs;
  }
  // A line starts at the data's start or after a newline; one cut by the split's start is not
  // whole (it belongs to the other split), one cut by its end keeps what lies inside.
  int64_t at = begin;
  if (at > 0 && data.bytes[size_t(at - 1)] != '\n')
    while (at < end && data.bytes[size_t(at)] != '\n') ++at;
  while (at < end) {
    if (data.bytes[size_t(at)] == '\n') {
      ++at;
      continue;
    }
    int64_t stop = at;
    while (stop < end && data.bytes[size_t(stop)] != '\n') ++stop;
    if (stop - at >= kShortestDocument) {
      docs.start.push_back(at);
      docs.length.push_back(int32_t(std::min<int64_t>(stop - at, INT32_MAX)));
    }
    at = stop;
  }
  if (docs.start.size() < 2)
    throw UsageError(fmt::format(
        "{}: the {} split holds {} lines of {} bytes or more; span corruption reads a document "
        "a line and needs at least 2",
        data.path, split_name(split), docs.start.size(), kShortestDocument));
  return docs;
}

SpanDraw span_draw(const uint32_t v[4], const SpanDocuments& docs, int T) {
  const int max_length = span_max_length(T);
  SpanDraw d;
  const int64_t k = int64_t(v[0] % uint64_t(docs.count()));
  const int drawn = kShortestDocument + int(v[1] % uint32_t(max_length - kShortestDocument + 1));
  if (docs.windows > 0) {
    d.start = docs.window_begin + k;
    d.length = std::min(drawn, docs.window_length);
  } else {
    d.start = docs.start[size_t(k)];
    d.length = std::min(drawn, int(docs.length[size_t(k)]));
  }
  d.span_length = 1 + int(v[2] % uint32_t(d.length / 2));
  d.span_begin = int(v[3] % uint32_t(d.length - d.span_length + 1));
  return d;
}

bool name_span(const int32_t* doc, uint32_t v, SpanDraw& d) {
  auto letter = [](int32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  std::vector<std::pair<int, int>> names;  // (begin, length)
  for (int k = 1; k < d.length; ++k) {
    if (doc[k] < 'A' || doc[k] > 'Z' || letter(doc[k - 1])) continue;
    int end = k;
    while (end < d.length && letter(doc[end])) ++end;
    if (end < d.length) names.push_back({k, end - k});  // a name the truncation cut is not whole
  }
  if (names.empty()) return false;
  const auto [begin, length] = names[v % names.size()];
  d.span_begin = begin;
  d.span_length = length;
  return true;
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

void fill_span_batch(const TextDataset& data, const SpanDocuments& docs, Split split, uint64_t seed,
                     int64_t index, int64_t sample_begin, int64_t count, int T, int32_t* out,
                     int32_t* spans, bool names) {
  const PhiloxStream rng = span_stream(seed, split);
  const SpanTokens tok = span_tokens(data);
  std::vector<int32_t> doc(size_t(span_max_length(T)));
  for (int64_t r = 0; r < count; ++r) {
    const Philox4x32 b = rng.block((uint64_t(index) << 32) | uint64_t(sample_begin + r));
    SpanDraw d = span_draw(b.v, docs, T);
    for (int k = 0; k < d.length; ++k)
      doc[size_t(k)] = data.is_tokens() ? data.tokens[size_t(d.start + k)]
                                        : int32_t(data.bytes[size_t(d.start + k)]);
    if (names) name_span(doc.data(), b.v[2], d);
    span_row(doc.data(), d, tok, T, out + r * (T + 1), spans + 2 * r);
  }
}

int64_t span_batch_loss_terms(const SpanDocuments& docs, Split split, uint64_t seed, int64_t index,
                              int64_t count, int T) {
  const PhiloxStream rng = span_stream(seed, split);
  int64_t terms = 0;
  for (int64_t r = 0; r < count; ++r) {
    const Philox4x32 b = rng.block((uint64_t(index) << 32) | uint64_t(r));
    terms += span_draw(b.v, docs, T).length + 2;
  }
  return terms;
}

}  // namespace mpitron::io
