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

namespace {

// The names of doc[0, length): (begin, length) of each capitalized word that is not the first; one
// reaching `length` counts only when the document ends there (a truncation may have cut it).
std::vector<std::pair<int, int>> names_in(const int32_t* doc, int length, bool ends_whole) {
  auto letter = [](int32_t c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); };
  std::vector<std::pair<int, int>> names;
  for (int k = 1; k < length; ++k) {
    if (doc[k] < 'A' || doc[k] > 'Z' || letter(doc[k - 1])) continue;
    int end = k;
    while (end < length && letter(doc[end])) ++end;
    if (end < length || ends_whole) names.push_back({k, end - k});
  }
  return names;
}

}  // namespace

bool name_span(const int32_t* doc, uint32_t v, SpanDraw& d) {
  const std::vector<std::pair<int, int>> names = names_in(doc, d.length, false);
  if (names.empty()) return false;
  const auto [begin, length] = names[v % names.size()];
  d.span_begin = begin;
  d.span_length = length;
  return true;
}

bool name_window(const int32_t* line, int64_t line_start, int line_length, const uint32_t v[4],
                 int context_words, int max_length, SpanDraw& d) {
  const std::vector<std::pair<int, int>> names = names_in(line, line_length, true);
  if (names.empty()) return false;
  const auto [begin, length] = names[v[2] % names.size()];
  auto space = [&](int k) { return line[k] == ' '; };
  int word_begin = begin, word_end = begin + length;  // the name's word, punctuation and all
  while (word_begin > 0 && !space(word_begin - 1)) --word_begin;
  while (word_end < line_length && !space(word_end)) ++word_end;
  auto left_edge = [&](int words) {  // where the words-th word before the name's starts
    int at = word_begin;
    for (int w = 0; w < words; ++w) {
      int k = at;
      while (k > 0 && space(k - 1)) --k;
      if (k == 0) break;
      while (k > 0 && !space(k - 1)) --k;
      at = k;
    }
    return at;
  };
  auto right_edge = [&](int words) {  // where the words-th word after the name's ends
    int at = word_end;
    for (int w = 0; w < words; ++w) {
      int k = at;
      while (k < line_length && space(k)) ++k;
      if (k == line_length) break;
      while (k < line_length && !space(k)) ++k;
      at = k;
    }
    return at;
  };
  const uint32_t sides = uint32_t(context_words) + 1;
  int before = int(v[1] % sides), after = int(v[3] % sides);
  int window_begin = left_edge(before), window_end = right_edge(after);
  while (window_end - window_begin > max_length) {
    if (before == 0 && after == 0) return false;
    if (after == 0 || (before > 0 && begin - window_begin >= window_end - word_end))
      window_begin = left_edge(--before);
    else
      window_end = right_edge(--after);
  }
  d.start = line_start + window_begin;
  d.length = window_end - window_begin;
  d.span_begin = begin - window_begin;
  d.span_length = length;
  return true;
}

void drop_window_words(int32_t* doc, const uint32_t v[4], double drop, SpanDraw& d) {
  // Word j's draw: a stream keyed by the sample's own draw, so still a pure function of the sample.
  const PhiloxStream words{(uint64_t(v[0]) << 32) | v[1], (uint64_t(v[2]) << 32) | v[3]};
  const int name_begin = d.span_begin, name_end = d.span_begin + d.span_length;
  int n = 0, at = 0, j = 0;
  while (at < d.length) {
    if (doc[at] == ' ') {
      ++at;
      continue;
    }
    int end = at;
    while (end < d.length && doc[end] != ' ') ++end;
    const bool name = at <= name_begin && name_end <= end;
    if (name || double(words.uniform(uint64_t(j))) >= drop) {
      if (n > 0) doc[n++] = ' ';
      if (name) d.span_begin = n + (name_begin - at);
      for (int k = at; k < end; ++k) doc[n++] = doc[k];
    }
    ++j;
    at = end;
  }
  d.length = n;
}

namespace {

// Sample v's document and span; doc[0, L) holds the document on return.
SpanDraw sample_draw(const TextDataset& data, const SpanDocuments& docs, const uint32_t v[4], int T,
                     SpanOptions options, std::vector<int32_t>& doc) {
  SpanDraw d = span_draw(v, docs, T);
  auto read = [&](int64_t start, int n) {
    if (doc.size() < size_t(n)) doc.resize(size_t(n));
    for (int k = 0; k < n; ++k)
      doc[size_t(k)] = data.is_tokens() ? data.tokens[size_t(start + k)]
                                        : int32_t(data.bytes[size_t(start + k)]);
  };
  if (options.names && options.context_words > 0 && docs.windows == 0) {
    const size_t k = size_t(v[0] % uint64_t(docs.count()));  // span_draw's line
    read(docs.start[k], docs.length[k]);
    SpanDraw w = d;
    if (name_window(doc.data(), docs.start[k], docs.length[k], v, options.context_words,
                    span_max_length(T), w)) {
      std::copy_n(doc.begin() + (w.start - docs.start[k]), w.length, doc.begin());
      if (options.drop_words > 0) drop_window_words(doc.data(), v, options.drop_words, w);
      return w;
    }
    return d;  // the truncated document: the line's start, already in doc
  }
  read(d.start, d.length);
  if (options.names) name_span(doc.data(), v[2], d);
  return d;
}

}  // namespace

void span_row(const int32_t* doc, const SpanDraw& d, const SpanTokens& tok, int T, int32_t* row,
              int32_t* span, bool loss_on_span) {
  MPITRON_REQUIRE(d.length + 3 <= T + 1, "span corruption document longer than the row");
  int n = 0;
  for (int k = 0; k < d.span_begin; ++k) row[n++] = doc[k];
  row[n++] = tok.mask;
  for (int k = d.span_begin + d.span_length; k < d.length; ++k) row[n++] = doc[k];
  row[n++] = tok.mask;
  for (int k = d.span_begin; k < d.span_begin + d.span_length; ++k) row[n++] = doc[k];
  row[n++] = tok.end;
  span[0] = loss_on_span ? d.length - d.span_length + 1 : 0;
  span[1] = n - 1;  // positions [0, L + 2) predict every token after the first, [END] included
  while (n < T + 1) row[n++] = tok.pad;
}

void fill_span_batch(const TextDataset& data, const SpanDocuments& docs, Split split, uint64_t seed,
                     int64_t index, int64_t sample_begin, int64_t count, int T, int32_t* out,
                     int32_t* spans, SpanOptions options) {
  const PhiloxStream rng = span_stream(seed, split);
  const SpanTokens tok = span_tokens(data);
  std::vector<int32_t> doc(size_t(span_max_length(T)));
  for (int64_t r = 0; r < count; ++r) {
    const Philox4x32 b = rng.block((uint64_t(index) << 32) | uint64_t(sample_begin + r));
    const SpanDraw d = sample_draw(data, docs, b.v, T, options, doc);
    span_row(doc.data(), d, tok, T, out + r * (T + 1), spans + 2 * r, options.loss_on_span);
  }
}

int64_t span_batch_loss_terms(const TextDataset& data, const SpanDocuments& docs, Split split,
                              uint64_t seed, int64_t index, int64_t count, int T,
                              SpanOptions options) {
  const PhiloxStream rng = span_stream(seed, split);
  // The span (names) and the window read the data; the seed's L does not.
  const bool read = (options.names && options.context_words > 0) || options.loss_on_span;
  std::vector<int32_t> doc;
  int64_t terms = 0;
  for (int64_t r = 0; r < count; ++r) {
    const Philox4x32 b = rng.block((uint64_t(index) << 32) | uint64_t(r));
    const SpanDraw d =
        read ? sample_draw(data, docs, b.v, T, options, doc) : span_draw(b.v, docs, T);
    terms += options.loss_on_span ? d.span_length + 1 : d.length + 2;
  }
  return terms;
}

}  // namespace mpitron::io
