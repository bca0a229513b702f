// Span corruption (io/span_corruption.hpp) against a reference written here from the definition:
// a document truncated to L, a span of m cut out at s, the row prefix [MASK] suffix [MASK] span
// [END] then [PAD]; prefix + span + suffix is the truncated document, the markers sit where the
// definition puts them, and every position before [END]'s is a loss term. Also: the lengths'
// ranges, documents are lines (of 4 bytes or more, whole within their split) read from their
// start, any rank's slice is the batch's rows, loss terms sum the spans, and token data (no lines)
// gets windows and special ids after its vocabulary.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <string>
#include <vector>

#include "base/check.hpp"
#include "io/dataset.hpp"
#include "io/span_corruption.hpp"

using namespace mpitron;
using namespace mpitron::io;

namespace {

constexpr int32_t kMask = 256, kEnd = 257, kPad = 258;

// The definition, spelled out on strings of ids.
std::vector<int32_t> reference_row(const std::vector<int32_t>& doc, int s, int m, int T) {
  const std::vector<int32_t> prefix(doc.begin(), doc.begin() + s),
      span(doc.begin() + s, doc.begin() + s + m), suffix(doc.begin() + s + m, doc.end());
  std::vector<int32_t> row = prefix;
  row.push_back(kMask);
  row.insert(row.end(), suffix.begin(), suffix.end());
  row.push_back(kMask);
  row.insert(row.end(), span.begin(), span.end());
  row.push_back(kEnd);
  row.resize(size_t(T) + 1, kPad);
  return row;
}

TextDataset text_of(const std::string& s) {
  TextDataset d;
  d.path = "test";
  d.bytes.assign(s.begin(), s.end());
  d.train_end = s.size() * 9 / 10;
  return d;
}

std::string words(int n, uint32_t seed) {
  std::mt19937 g(seed);
  const char* w[] = {"and", "the", "begat", "Enos", "Cainan", "lived", "years", "son", "of"};
  std::string s;
  for (int k = 0; k < n; ++k) s += std::string(w[g() % 9]) + (g() % 7 == 0 ? "\n" : " ");
  return s;
}

// The line of `text` that holds position `at`: [its start, its end).
std::pair<size_t, size_t> line_at(const std::string& text, size_t at) {
  const size_t begin = at == 0 ? 0 : text.rfind('\n', at - 1) + 1;  // npos + 1 == 0
  const size_t end = text.find('\n', at);
  return {begin, end == std::string::npos ? text.size() : end};
}

}  // namespace

TEST(SpanCorruption, RowsMatchTheDefinition) {
  std::mt19937 g(3);
  const SpanTokens tok;
  for (int T : {8, 16, 64}) {
    const int max_length = std::min(7 * T / 8, T - 2);
    SpanDocuments windows;  // token data: any window of the longest length
    windows.windows = 10000;
    windows.window_length = max_length;
    SpanDocuments lines;  // lines of 4 to 100 tokens
    for (int k = 0; k < 50; ++k) {
      lines.start.push_back(1000 * k);
      lines.length.push_back(4 + int32_t(g() % 97));
    }
    for (const SpanDocuments* docs : {&windows, &lines}) {
      for (int trial = 0; trial < 300; ++trial) {
        const uint32_t v[4] = {uint32_t(g()), uint32_t(g()), uint32_t(g()), uint32_t(g())};
        const SpanDraw d = span_draw(v, *docs, T);
        // The document: v[0] picks it; v[1] a length in [4, max_length], cut to the document's.
        const int64_t k = int64_t(v[0] % uint64_t(docs->count()));
        const int drawn = 4 + int(v[1] % uint32_t(max_length - 3));
        ASSERT_EQ(d.start, docs == &windows ? k : lines.start[size_t(k)]);
        ASSERT_EQ(d.length, docs == &windows ? drawn : std::min(drawn, lines.length[size_t(k)]));
        ASSERT_GE(d.length, 4);
        ASSERT_LE(d.length, max_length);
        ASSERT_GE(d.span_length, 1);
        ASSERT_LE(d.span_length, d.length / 2);
        ASSERT_LE(d.span_begin + d.span_length, d.length);
        std::vector<int32_t> doc(size_t(d.length));
        for (auto& x : doc) x = int32_t(g() % 256);
        std::vector<int32_t> row(size_t(T) + 1, -7), span(2, -7);
        span_row(doc.data(), d, tok, T, row.data(), span.data());
        ASSERT_EQ(row, reference_row(doc, d.span_begin, d.span_length, T));
        // Loss terms: positions 0 .. L + 1, whose next tokens are everything up to [END].
        ASSERT_EQ(span[0], 0);
        ASSERT_EQ(span[1], d.length + 2);
        ASSERT_EQ(row[size_t(span[1])], kEnd);
        // The two markers: after the prefix, and after prefix + suffix + 1.
        ASSERT_EQ(row[size_t(d.span_begin)], kMask);
        ASSERT_EQ(row[size_t(d.length - d.span_length + 1)], kMask);
        ASSERT_EQ(std::count(row.begin(), row.end(), kMask), 2);
        // prefix + span + suffix gives the document back.
        const auto second = row.begin() + (d.length - d.span_length + 1);
        std::vector<int32_t> back(row.begin(), row.begin() + d.span_begin);
        back.insert(back.end(), second + 1, second + 1 + d.span_length);
        back.insert(back.end(), row.begin() + d.span_begin + 1, second);
        ASSERT_EQ(back, doc);
      }
    }
  }
}

TEST(SpanCorruption, DocumentsAreTheWholeLinesOfTheirSplit) {
  // Lines: "ab" (too short), "abcd", "" , "efghij", then the split cuts "klmnop" after "klmn".
  const std::string text = "ab\nabcd\n\nefghij\nklmnop\nqrst\nuv\nwxyz1";
  TextDataset d = text_of(text);
  d.train_end = text.find("op");
  const SpanDocuments train = span_documents(d, Split::train, 16);
  const std::vector<int64_t> train_starts = {3, 9, 16};
  const std::vector<int32_t> train_lengths = {4, 6, 4};
  EXPECT_EQ(train.start, train_starts);
  EXPECT_EQ(train.length, train_lengths);  // "klmn": what lies inside the split
  const SpanDocuments val = span_documents(d, Split::val, 16);
  const std::vector<int64_t> val_starts = {int64_t(text.find("qrst")), int64_t(text.find("wxyz1"))};
  const std::vector<int32_t> val_lengths = {4, 5};
  EXPECT_EQ(val.start, val_starts) << "the rest of a line the split cut belongs to training";
  EXPECT_EQ(val.length, val_lengths);
}

TEST(SpanCorruption, BatchesAreSlicesOfOneBatchAndDocumentsComeFromTheirSplit) {
  const std::string text = words(4000, 1);
  const TextDataset d = text_of(text);
  const int T = 32, rows = 12;
  const SpanDocuments docs = span_documents(d, Split::train, T),
                      vdocs = span_documents(d, Split::val, T);
  std::vector<int32_t> all(size_t(rows) * (T + 1)), spans(size_t(rows) * 2);
  fill_span_batch(d, docs, Split::train, 5, 9, 0, rows, T, all.data(), spans.data());
  int64_t terms = 0;
  auto document_of = [&](const int32_t* row, int L) {
    const int first = int(std::find(row, row + T + 1, kMask) - row);
    const int second = int(std::find(row + first + 1, row + T + 1, kMask) - row);
    EXPECT_LT(second, T + 1);
    const int m = L - (second - 1);  // L = prefix + suffix + m, second = prefix + suffix + 1
    std::string doc(row, row + first);
    for (int k = second + 1; k < second + 1 + m; ++k) doc += char(row[k]);
    for (int k = first + 1; k < second; ++k) doc += char(row[k]);
    EXPECT_EQ(int(doc.size()), L);
    return doc;
  };
  // The document is the start of a line: at a line's start, and at most the whole line.
  auto expect_line_start = [&](const std::string& doc, size_t from, size_t to) {
    size_t at = text.find(doc, from);
    while (at != std::string::npos && at > 0 && text[at - 1] != '\n') at = text.find(doc, at + 1);
    ASSERT_NE(at, std::string::npos) << doc << " does not start a line";
    ASSERT_LE(at + doc.size(), to) << doc << " reaches the other split";
    const auto [begin, end] = line_at(text, at);
    ASSERT_EQ(begin, at);
    ASSERT_LE(at + doc.size(), end) << doc << " runs past its line";
  };
  for (int r = 0; r < rows; ++r) {
    terms += spans[size_t(2 * r + 1)] - spans[size_t(2 * r)];
    const std::string doc =
        document_of(all.data() + size_t(r) * (T + 1), spans[size_t(2 * r + 1)] - 2);
    expect_line_start(doc, 0, d.train_end);
  }
  EXPECT_EQ(span_batch_loss_terms(d, docs, Split::train, 5, 9, rows, T), terms);
  for (int first : {0, 5, 9}) {
    const int n = std::min(3, rows - first);
    std::vector<int32_t> part(size_t(n) * (T + 1)), pspans(size_t(n) * 2);
    fill_span_batch(d, docs, Split::train, 5, 9, first, n, T, part.data(), pspans.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + size_t(first) * (T + 1)));
    EXPECT_TRUE(std::equal(pspans.begin(), pspans.end(), spans.begin() + 2 * first));
  }
  std::vector<int32_t> val(all.size()), vspans(spans.size());
  fill_span_batch(d, vdocs, Split::val, 5, 9, 0, rows, T, val.data(), vspans.data());
  EXPECT_NE(val, all);
  for (int r = 0; r < rows; ++r) {  // validation documents lie in the last 10%
    const std::string doc =
        document_of(val.data() + size_t(r) * (T + 1), vspans[size_t(2 * r + 1)] - 2);
    expect_line_start(doc, d.train_end, text.size());
  }
}

TEST(SpanCorruption, TokenDataGetsWindowsAndSpecialIdsAfterItsVocabularyAndShortDataIsRefused) {
  TextDataset d;
  d.path = "tokens";
  for (int k = 0; k < 3000; ++k) d.tokens.push_back(k % 1000);
  d.vocab_size = 1000;
  d.train_end = 2700;
  const SpanTokens tok = span_tokens(d);
  EXPECT_EQ(tok.mask, 1000);
  EXPECT_EQ(tok.end, 1001);
  EXPECT_EQ(tok.pad, 1002);
  const int T = 16;
  const SpanDocuments docs = span_documents(d, Split::train, T);
  EXPECT_EQ(docs.windows, 2700 - 14 + 1);  // windows of min(7T/8, T-2) = 14 inside the split
  std::vector<int32_t> rows(4 * (T + 1)), spans(8);
  fill_span_batch(d, docs, Split::train, 1, 0, 0, 4, T, rows.data(), spans.data());
  for (int r = 0; r < 4; ++r) {
    const int32_t* row = rows.data() + r * (T + 1);
    EXPECT_EQ(std::count(row, row + T + 1, 1000), 2);
    EXPECT_EQ(row[spans[size_t(2 * r + 1)]], 1001);
  }
  d.train_end = 14;  // a training split of one window
  EXPECT_THROW(span_documents(d, Split::train, T), UsageError);
  EXPECT_THROW(span_documents(text_of(words(4000, 2)), Split::train, 6), UsageError);  // T < 8
  EXPECT_THROW(span_documents(text_of("abcdef\nab\n" + std::string(20, '\n') + "xyz\nabcdefgh"),
                              Split::train, 16),
               UsageError);  // one line of 4 bytes or more in training
}

TEST(SpanCorruption, NameSpansCutOutAWholeCapitalizedWordThatIsNotTheFirst) {
  const std::string text = "And Enos lived ninety years, and begat Cainan: and Ca";
  std::vector<int32_t> doc(text.begin(), text.end());
  // Names whole inside the document: Enos (4, 4) and Cainan (39, 6); "And" starts it, "Ca" is cut.
  const std::vector<std::pair<int, int>> names = {{4, 4}, {39, 6}};
  for (uint32_t v = 0; v < 6; ++v) {
    SpanDraw d{0, int(text.size()), 1, 1};
    ASSERT_TRUE(name_span(doc.data(), v, d));
    EXPECT_EQ(d.span_begin, names[v % 2].first);
    EXPECT_EQ(d.span_length, names[v % 2].second);
    EXPECT_EQ(d.length, int(text.size())) << "the loss terms do not depend on the span";
  }
  SpanDraw short_doc{0, 8, 2, 3};  // "And Enos": Enos reaches the end and may be cut
  EXPECT_FALSE(name_span(doc.data(), 0, short_doc));
  EXPECT_EQ(short_doc.span_begin, 2) << "no name: the random span stays";
  EXPECT_EQ(short_doc.span_length, 3);

  // In batches: every row's span is a capitalized word that is not the document's first.
  std::string lines;
  for (int k = 0; k < 200; ++k) lines += text.substr(0, 46) + "\n";
  const TextDataset data = text_of(lines);
  const int T = 64, rows = 16;
  const SpanDocuments docs = span_documents(data, Split::train, T);
  std::vector<int32_t> out(size_t(rows) * (T + 1)), spans(size_t(rows) * 2), plain(out.size()),
      plain_spans(spans.size());
  fill_span_batch(data, docs, Split::train, 3, 1, 0, rows, T, out.data(), spans.data(),
                  SpanOptions{true, 0});
  fill_span_batch(data, docs, Split::train, 3, 1, 0, rows, T, plain.data(), plain_spans.data());
  EXPECT_EQ(spans, plain_spans) << "the same loss spans with and without name spans";
  int named = 0;
  for (int r = 0; r < rows; ++r) {
    const int32_t* row = out.data() + size_t(r) * (T + 1);
    const int L = spans[size_t(2 * r + 1)] - 2;
    const int second =
        int(std::find(row + int(std::find(row, row + T + 1, kMask) - row) + 1, row + T + 1, kMask) -
            row);
    const std::string span(row + second + 1, row + L + 2);  // between the second [MASK] and [END]
    if (span == "Enos" || span == "Cainan")
      ++named;
    else
      EXPECT_LT(L, 9) << "a document holding a whole name got the span '" << span << "'";
  }
  EXPECT_GT(named, rows / 2);
}

TEST(SpanCorruption, NameWindowsHoldTheNameAndUpToKWholeWordsOnEachSide) {
  const std::string line =
      "And Enos lived ninety years, and begat (Cainan: and Cainan, the son of Enos, lived";
  const std::vector<int32_t> doc(line.begin(), line.end());
  // The reference: words split at spaces; the name's word is words[i]; a window of a words before
  // and b after is words[i - a .. i + b] joined by spaces, a and b clipped at the line's ends.
  std::vector<std::string> words;
  for (size_t at = 0; at <= line.size();) {
    const size_t space = std::min(line.find(' ', at), line.size());
    words.push_back(line.substr(at, space - at));
    at = space + 1;
  }
  std::mt19937 g(11);
  const int K = 3;
  int seen_shrunk = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const uint32_t v[4] = {uint32_t(g()), uint32_t(g()), uint32_t(g()), uint32_t(g())};
    const int max_length = trial % 2 == 0 ? 112 : 24;
    SpanDraw d{1000, 7, 1, 2};
    ASSERT_TRUE(name_window(doc.data(), 1000, int(line.size()), v, K, max_length, d));
    const std::string window = line.substr(size_t(d.start - 1000), size_t(d.length));
    const std::string name = window.substr(size_t(d.span_begin), size_t(d.span_length));
    ASSERT_TRUE(name == "Enos" || name == "Cainan") << name;
    ASSERT_LE(d.length, max_length);
    // The name's word index: count the spaces before the name in the line.
    const size_t name_at = size_t(d.start - 1000 + d.span_begin);
    const int i = int(std::count(line.begin(), line.begin() + long(name_at), ' '));
    const int n = int(words.size());
    const int a = std::min<int>(int(v[1] % (K + 1)), i),
              b = std::min<int>(int(v[3] % (K + 1)), n - 1 - i);
    auto joined = [&](int first, int last) {
      std::string s = words[size_t(first)];
      for (int k = first + 1; k <= last; ++k) s += " " + words[size_t(k)];
      return s;
    };
    if (int(joined(i - a, i + b).size()) <= max_length) {
      EXPECT_EQ(window, joined(i - a, i + b)) << "a " << a << ", b " << b;
    } else {  // shrunk: whole words still, fewer of them, the name's word inside
      ++seen_shrunk;
      bool found = false;
      for (int lo = i - a; lo <= i && !found; ++lo)
        for (int hi = i; hi <= i + b && !found; ++hi) found = window == joined(lo, hi);
      EXPECT_TRUE(found) << "'" << window << "' is not whole words around the name";
    }
  }
  EXPECT_GT(seen_shrunk, 20);
  const std::string no_name = "and they lived ninety years";
  const std::vector<int32_t> none(no_name.begin(), no_name.end());
  const uint32_t v[4] = {1, 2, 3, 4};
  SpanDraw d{5, 6, 1, 2};
  EXPECT_FALSE(name_window(none.data(), 5, int(none.size()), v, K, 112, d));
  EXPECT_EQ(d.start, 5);
  EXPECT_EQ(d.length, 6) << "no name: the draw stays";

  // In batches: rows are windows of whole words of one line, the span a name, and the loss terms
  // (which now depend on the data) are the rows' spans.
  std::string lines;
  for (int k = 0; k < 100; ++k) lines += line + "\nand no name here at all\n";
  const TextDataset data = text_of(lines);
  const int T = 64, rows = 24;
  const SpanDocuments docs = span_documents(data, Split::train, T);
  std::vector<int32_t> out(size_t(rows) * (T + 1)), spans(size_t(rows) * 2);
  fill_span_batch(data, docs, Split::train, 4, 2, 0, rows, T, out.data(), spans.data(),
                  SpanOptions{true, 2});
  int64_t terms = 0, windows = 0;
  for (int r = 0; r < rows; ++r) {
    const int32_t* row = out.data() + size_t(r) * (T + 1);
    terms += spans[size_t(2 * r + 1)] - spans[size_t(2 * r)];
    const int first = int(std::find(row, row + T + 1, kMask) - row);
    const int second = int(std::find(row + first + 1, row + T + 1, kMask) - row);
    const int end = int(std::find(row, row + T + 1, kEnd) - row);
    const std::string prefix(row, row + first), suffix(row + first + 1, row + second),
        span(row + second + 1, row + end);
    if (span != "Enos" && span != "Cainan") continue;  // the line without a name
    ++windows;
    const std::string window = prefix + span + suffix;
    const size_t at = line.find(window);
    ASSERT_NE(at, std::string::npos) << window;
    EXPECT_TRUE(at == 0 || line[at - 1] == ' ') << window;
    EXPECT_TRUE(at + window.size() == line.size() || line[at + window.size()] == ' ') << window;
    EXPECT_LE(std::count(window.begin(), window.end(), ' '), 2 + 2) << window;
  }
  EXPECT_GT(windows, rows / 3);
  EXPECT_EQ(span_batch_loss_terms(data, docs, Split::train, 4, 2, rows, T, SpanOptions{true, 2}),
            terms);
}

TEST(SpanCorruption, LossOnTheSpanCountsOnlyThePositionsThatPredictTheSpanAndEnd) {
  std::string lines;
  for (int k = 0; k < 100; ++k)
    lines += "And Enos lived ninety years, and begat Cainan: and Irad\n";
  const TextDataset data = text_of(lines + words(2000, 4));
  const int T = 64, rows = 20;
  const SpanDocuments docs = span_documents(data, Split::train, T);
  for (const SpanOptions base :
       {SpanOptions{false, 0}, SpanOptions{true, 0}, SpanOptions{true, 4}}) {
    SpanOptions on_span = base;
    on_span.loss_on_span = true;
    std::vector<int32_t> all(size_t(rows) * (T + 1)), all_spans(size_t(rows) * 2), only(all.size()),
        only_spans(all_spans.size());
    fill_span_batch(data, docs, Split::train, 8, 3, 0, rows, T, all.data(), all_spans.data(), base);
    fill_span_batch(data, docs, Split::train, 8, 3, 0, rows, T, only.data(), only_spans.data(),
                    on_span);
    EXPECT_EQ(all, only) << "the same rows";
    int64_t terms = 0;
    for (int r = 0; r < rows; ++r) {
      const int32_t* row = only.data() + size_t(r) * (T + 1);
      const int first = int(std::find(row, row + T + 1, kMask) - row);
      const int second = int(std::find(row + first + 1, row + T + 1, kMask) - row);
      const int end = int(std::find(row + second, row + T + 1, kEnd) - row);
      EXPECT_EQ(all_spans[size_t(2 * r)], 0);
      EXPECT_EQ(only_spans[size_t(2 * r)], second) << "from the [MASK] that precedes the span";
      EXPECT_EQ(only_spans[size_t(2 * r + 1)], end) << "to the position that predicts [END]";
      EXPECT_EQ(all_spans[size_t(2 * r + 1)], end);
      terms += end - second;
    }
    EXPECT_EQ(span_batch_loss_terms(data, docs, Split::train, 8, 3, rows, T, on_span), terms);
  }
}

TEST(SpanCorruption, DroppedWordsLeaveTheNameAndAnOrderedSubsetOfTheWindowsWords) {
  const std::string line =
      "And Enos lived ninety years, and begat (Cainan: and Cainan, the son of Enos, lived";
  const std::vector<int32_t> doc(line.begin(), line.end());
  auto split_words = [](const std::string& s) {
    std::vector<std::string> w;
    for (size_t at = 0; at < s.size();) {
      const size_t space = std::min(s.find(' ', at), s.size());
      w.push_back(s.substr(at, space - at));
      at = space + 1;
    }
    return w;
  };
  std::mt19937 g(5);
  int64_t context = 0, dropped = 0;
  for (int trial = 0; trial < 600; ++trial) {
    const uint32_t v[4] = {uint32_t(g()), uint32_t(g()), uint32_t(g()), uint32_t(g())};
    const double p = trial % 3 == 0 ? 0.0 : trial % 3 == 1 ? 0.5 : 0.999999;
    SpanDraw window{1000, 7, 1, 2};
    ASSERT_TRUE(name_window(doc.data(), 1000, int(line.size()), v, 4, 112, window));
    const std::string before = line.substr(size_t(window.start - 1000), size_t(window.length));
    const std::string name = before.substr(size_t(window.span_begin), size_t(window.span_length));
    std::vector<int32_t> d(before.begin(), before.end());
    SpanDraw after = window;
    drop_window_words(d.data(), v, p, after);
    const std::string kept(d.begin(), d.begin() + after.length);
    ASSERT_EQ(kept.substr(size_t(after.span_begin), size_t(after.span_length)), name) << kept;
    const std::vector<std::string> all = split_words(before), left = split_words(kept);
    EXPECT_EQ(kept.find("  "), std::string::npos) << "single spaces: " << kept;
    // left is all with some words other than the name's removed, in order.
    size_t k = 0;
    for (const std::string& w : all)
      if (k < left.size() && w == left[k]) ++k;
    EXPECT_EQ(k, left.size()) << "'" << kept << "' is not an ordered subset of '" << before << "'";
    if (p == 0.0) {
      EXPECT_EQ(kept, before);
    }
    if (p > 0.99) {
      EXPECT_EQ(left.size(), 1u) << kept;
    }
    if (p == 0.5) {
      context += int64_t(all.size()) - 1;
      dropped += int64_t(all.size() - left.size());
    }
    SpanDraw again = window;
    std::vector<int32_t> d2(before.begin(), before.end());
    drop_window_words(d2.data(), v, p, again);
    EXPECT_EQ(std::string(d2.begin(), d2.begin() + again.length), kept) << "a function of v";
  }
  ASSERT_GT(context, 400);
  EXPECT_NEAR(double(dropped) / double(context), 0.5, 0.05);

  // In batches: each named row's document is the name and an ordered subset of the line's words,
  // and the loss terms are counted from the same rows.
  std::string lines;
  for (int k = 0; k < 100; ++k) lines += line + "\nand no name here at all\n";
  const TextDataset data = text_of(lines);
  const int T = 64, rows = 24;
  const SpanDocuments docs = span_documents(data, Split::train, T);
  const SpanOptions options{true, 3, false, 0.5};
  std::vector<int32_t> out(size_t(rows) * (T + 1)), spans(size_t(rows) * 2);
  fill_span_batch(data, docs, Split::train, 4, 2, 0, rows, T, out.data(), spans.data(), options);
  const std::vector<std::string> line_words = split_words(line);
  int64_t terms = 0, windows = 0;
  for (int r = 0; r < rows; ++r) {
    const int32_t* row = out.data() + size_t(r) * (T + 1);
    terms += spans[size_t(2 * r + 1)] - spans[size_t(2 * r)];
    const int first = int(std::find(row, row + T + 1, kMask) - row);
    const int second = int(std::find(row + first + 1, row + T + 1, kMask) - row);
    const int end = int(std::find(row, row + T + 1, kEnd) - row);
    const std::string prefix(row, row + first), suffix(row + first + 1, row + second),
        span(row + second + 1, row + end);
    if (span != "Enos" && span != "Cainan") continue;
    ++windows;
    const std::vector<std::string> w = split_words(prefix + span + suffix);
    size_t k = 0;
    for (const std::string& lw : line_words)
      if (k < w.size() && lw == w[k]) ++k;
    EXPECT_EQ(k, w.size()) << prefix + span + suffix;
  }
  EXPECT_GT(windows, rows / 3);
  EXPECT_EQ(span_batch_loss_terms(data, docs, Split::train, 4, 2, rows, T, options), terms);
}
