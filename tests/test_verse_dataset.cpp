// The verse file reader and the encoder's classification rows (io/verse_dataset.hpp): references
// parsed into testaments, the fixed every-10th-verse test split, rows built as [CLS] a [SEP]
// (b [SEP]) [PAD]... with the label last, drawn the same whichever rank fills which rows.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "io/verse_dataset.hpp"
#include "base/check.hpp"

using namespace mpitron;
using namespace mpitron::io;
namespace fs = std::filesystem;

namespace {

std::string write_verses(const std::string& name, const std::string& text) {
  const fs::path p = fs::temp_directory_path() /
                     ("mpitron_verses_" + std::to_string(getpid()) + "_" + name + ".txt");
  std::ofstream(p) << text;
  return p.string();
}

// 40 verses: 30 of Genesis ("g<i>"), then 10 of 1 Corinthians ("c<i>").
std::string forty() {
  std::string s;
  for (int i = 0; i < 30; ++i)
    s += "Ge1:" + std::to_string(i + 1) + " g" + std::to_string(i) + "\n";
  for (int i = 0; i < 10; ++i)
    s += "1Cor2:" + std::to_string(i + 1) + " c" + std::to_string(i) + "\n";
  return s;
}

std::string row_text(const int32_t* row, int from, int to) {
  std::string s;
  for (int t = from; t < to; ++t) s += char(row[t]);
  return s;
}

const VerseTokens kTok{256, 258, 259};

}  // namespace

TEST(VerseDataset, ReferencesGiveTestamentsAndTheSplitIsEveryTenthVerse) {
  const VerseDataset d = load_verse_dataset(write_verses("forty", forty()));
  ASSERT_EQ(d.verses(), 40);
  for (int i = 0; i < 40; ++i) EXPECT_EQ(d.new_testament[i], i >= 30) << i;
  EXPECT_EQ(d.val, (std::vector<int64_t>{9, 19, 29, 39}));
  EXPECT_EQ(d.train.size(), 36u);
  EXPECT_EQ(std::string(d.ids.begin() + d.begin[31], d.ids.begin() + d.begin[32]), "c1");
}

TEST(VerseDataset, TestamentRowsAreClsVerseSepPaddedWithTheLabelLast) {
  const VerseDataset d = load_verse_dataset(write_verses("rows", forty()));
  const int T = 8, n = 64;
  std::vector<int32_t> rows(size_t(n) * (T + 1)), labels(n);
  fill_verse_batch(d, VerseTask::testament, kTok, Split::train, 5, 3, 0, n, T, rows.data(),
                   labels.data());
  int new_testament = 0;
  for (int r = 0; r < n; ++r) {
    const int32_t* row = rows.data() + r * (T + 1);
    ASSERT_EQ(row[0], kTok.cls);
    int sep = 1;
    while (row[sep] != kTok.sep) ++sep;
    const std::string verse = row_text(row, 1, sep);
    EXPECT_EQ(row[T], verse[0] == 'c') << verse;  // 1 Corinthians is the New Testament
    EXPECT_EQ(labels[r], row[T]);
    for (int t = sep + 1; t < T; ++t) EXPECT_EQ(row[t], kTok.pad);
    new_testament += row[T];
  }
  EXPECT_GT(new_testament, 0);
  EXPECT_LT(new_testament, n);
}

TEST(VerseDataset, PairRowsHoldTheNextVerseExactlyWhenTheLabelSaysSo) {
  const VerseDataset d = load_verse_dataset(write_verses("pairs", forty()));
  const int T = 12, n = 200;
  std::vector<int32_t> rows(size_t(n) * (T + 1));
  fill_verse_batch(d, VerseTask::pairs, kTok, Split::train, 5, 7, 0, n, T, rows.data(), nullptr);
  auto index_of = [&](const std::string& v) {
    return (v[0] == 'c' ? 30 : 0) + std::stoi(v.substr(1));
  };
  int positives = 0;
  for (int r = 0; r < n; ++r) {
    const int32_t* row = rows.data() + r * (T + 1);
    int s1 = 1;
    while (row[s1] != kTok.sep) ++s1;
    int s2 = s1 + 1;
    while (row[s2] != kTok.sep) ++s2;
    const int a = index_of(row_text(row, 1, s1)), b = index_of(row_text(row, s1 + 1, s2));
    EXPECT_EQ(row[T] == 1, b == a + 1) << a << " " << b;
    positives += row[T];
  }
  EXPECT_GT(positives, n / 3);
  EXPECT_LT(positives, 2 * n / 3);
}

TEST(VerseDataset, RowsDoNotDependOnWhichRankFillsThem) {
  const VerseDataset d = load_verse_dataset(write_verses("ranks", forty()));
  const int T = 10, n = 12;
  for (VerseTask task : {VerseTask::testament, VerseTask::pairs}) {
    std::vector<int32_t> whole(size_t(n) * (T + 1)), part(size_t(4) * (T + 1));
    fill_verse_batch(d, task, kTok, Split::val, 9, 2, 0, n, T, whole.data(), nullptr);
    fill_verse_batch(d, task, kTok, Split::val, 9, 2, 5, 4, T, part.data(), nullptr);
    EXPECT_TRUE(std::equal(part.begin(), part.end(), whole.begin() + 5 * (T + 1)));
  }
}

TEST(VerseDataset, LongVersesAreCutToFit) {
  std::string s = forty();
  s += "Rev1:1 " + std::string(100, 'x') + "\n";
  const VerseDataset d = load_verse_dataset(write_verses("long", s));
  const int T = 6;
  std::vector<int32_t> rows(size_t(d.val.size()) * (T + 1));
  fill_verse_rows(d, VerseTask::pairs, kTok, Split::val, 0, int64_t(d.val.size()), T, rows.data(),
                  nullptr);
  for (size_t r = 0; r < d.val.size(); ++r) {
    const int32_t* row = rows.data() + r * (T + 1);
    EXPECT_EQ(row[0], kTok.cls);
    EXPECT_EQ(row[T - 1], kTok.sep);  // both verses cut, the longer first: no padding left
  }
}

TEST(VerseDataset, WholeSplitVisitsEveryTestVerseOnce) {
  const VerseDataset d = load_verse_dataset(write_verses("whole", forty()));
  const int T = 8;
  std::vector<int32_t> rows(d.val.size() * (T + 1)), labels(d.val.size());
  fill_verse_rows(d, VerseTask::testament, kTok, Split::val, 0, int64_t(d.val.size()), T,
                  rows.data(), labels.data());
  EXPECT_EQ(labels, (std::vector<int32_t>{0, 0, 0, 1}));  // verses 9, 19, 29 and 39
  EXPECT_EQ(row_text(rows.data() + 3 * (T + 1), 1, 3), "c9");
}

TEST(VerseDataset, BadFilesAreUsageErrors) {
  auto error_of = [](const std::string& path) {
    try {
      load_verse_dataset(path);
    } catch (const UsageError& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const std::string bad = write_verses("bad", "Ge1:1 In the beginning.\nIn the beginning\n");
  EXPECT_NE(error_of(bad).find(bad + " line 2 does not start with a reference"), std::string::npos)
      << error_of(bad);
  const std::string few = write_verses("few", "Ge1:1 a\nGe1:2 b\n");
  EXPECT_NE(error_of(few).find("holds 2 verses: too few"), std::string::npos) << error_of(few);
  EXPECT_NE(error_of("/nonexistent/verses.txt").find("cannot be read"), std::string::npos);
}
