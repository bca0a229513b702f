#include "io/verse_dataset.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <filesystem>
#include <fstream>
#include <string_view>

#include "io/wordpiece_tokenizer.hpp"
#include "base/check.hpp"
#include "base/philox.hpp"

namespace mpitron::io {

namespace {

// The bible program's abbreviations of the New Testament's 27 books.
constexpr std::array<std::string_view, 27> kNewTestament = {
    "Mat", "Mark", "Luke", "John", "Acts", "Rom",  "1Cor", "2Cor",  "Gal",
    "Eph", "Phi",  "Col",  "1Th",  "2Th",  "1Tim", "2Tim", "Titus", "Phmn",
    "Heb", "Jas",  "1Pet", "2Pet", "1Jn",  "2Jn",  "3Jn",  "Jude",  "Rev"};

// "<Book><chapter>:<verse>": the book is an optional digit then letters; returns its length, or 0
// when the reference does not have that form.
size_t book_length(std::string_view ref) {
  size_t i = 0;
  if (i < ref.size() && ref[i] >= '1' && ref[i] <= '3') ++i;
  const size_t letters = i;
  while (i < ref.size() && ((ref[i] >= 'A' && ref[i] <= 'Z') || (ref[i] >= 'a' && ref[i] <= 'z')))
    ++i;
  if (i == letters) return 0;
  const size_t book = i;
  auto digits = [&] {
    const size_t s = i;
    while (i < ref.size() && ref[i] >= '0' && ref[i] <= '9') ++i;
    return i > s;
  };
  if (!digits() || i >= ref.size() || ref[i] != ':') return 0;
  ++i;
  if (!digits() || i != ref.size()) return 0;
  return book;
}

}  // namespace

VerseDataset load_verse_dataset(const std::string& path, const WordPieceTokenizer* wordpiece) {
  std::ifstream in(path, std::ios::binary);
  if (!in)
    throw UsageError(fmt::format(
        "verse file {} cannot be read (make it with io/get_bible.sh {} --references)", path, path));
  VerseDataset d;
  d.path = path;
  d.begin.push_back(0);
  uint64_t h = 1469598103934665603ull;
  std::string line;
  int64_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    for (char c : line) h = (h ^ uint8_t(c)) * 1099511628211ull;
    h = (h ^ uint8_t('\n')) * 1099511628211ull;
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const size_t space = line.find(' ');
    const std::string_view ref(line.data(), space == std::string::npos ? line.size() : space);
    const size_t book = book_length(ref);
    if (space == std::string::npos || book == 0)
      throw UsageError(fmt::format(
          "verse file {} line {} does not start with a reference like 'Mat1:1 ' (a verse file "
          "comes from io/get_bible.sh FILE --references)",
          path, number));
    const std::string_view name = ref.substr(0, book);
    d.new_testament.push_back(std::find(kNewTestament.begin(), kNewTestament.end(), name) !=
                              kNewTestament.end());
    const std::string_view verse = std::string_view(line).substr(space + 1);
    if (wordpiece)
      wordpiece->encode(verse, d.ids);
    else
      for (char c : verse) d.ids.push_back(uint8_t(c));  // bytes: ids 0..255
    d.begin.push_back(int64_t(d.ids.size()));
  }
  d.checksum = h;
  if (wordpiece) d.tokenizer = std::filesystem::path(wordpiece->file()).parent_path().string();
  for (int64_t i = 0; i < d.verses(); ++i) (i % 10 == 9 ? d.val : d.train).push_back(i);
  // The pair task draws a first verse with a successor.
  if (d.val.empty() || d.verses() < 20)
    throw UsageError(fmt::format(
        "verse file {} holds {} verses: too few for a training and a validation split (20 at "
        "least)",
        path, d.verses()));
  return d;
}

namespace {

// One row for first verse a (its position in the split's pool drawn by the caller); pairs take
// draw's coin (bit 0 of v[1]) and, for a negative, v[2] picks the partner.
int fill_verse_row(const VerseDataset& data, VerseTask task, const VerseTokens& tok, int64_t a,
                   const Philox4x32& draw, int T, int32_t* row) {
  std::fill(row, row + T, tok.pad);
  int label = 0;
  int64_t len_a = data.begin[a + 1] - data.begin[a], len_b = 0, b = -1;
  if (task == VerseTask::testament) {
    label = data.new_testament[a];
    len_a = std::min<int64_t>(len_a, T - 2);
  } else {
    if (a + 1 >= data.verses()) a = 0;  // the last verse has no successor
    len_a = data.begin[a + 1] - data.begin[a];
    label = int(draw.v[1] & 1);
    b = a + 1;
    if (label == 0) {  // another verse, never the successor
      b = int64_t(draw.v[2] % uint64_t(data.verses() - 1));
      if (b >= a + 1) ++b;
    }
    len_b = data.begin[b + 1] - data.begin[b];
    while (len_a + len_b > T - 3) (len_a >= len_b ? len_a : len_b) -= 1;
  }
  int t = 0;
  row[t++] = tok.cls;
  for (int64_t i = 0; i < len_a; ++i) row[t++] = data.ids[size_t(data.begin[a] + i)];
  row[t++] = tok.sep;
  if (b >= 0) {
    for (int64_t i = 0; i < len_b; ++i) row[t++] = data.ids[size_t(data.begin[b] + i)];
    row[t++] = tok.sep;
  }
  row[T] = label;
  return label;
}

}  // namespace

void fill_verse_batch(const VerseDataset& data, VerseTask task, const VerseTokens& tok, Split split,
                      uint64_t seed, int64_t index, int64_t sample_begin, int64_t count, int T,
                      int32_t* out, int32_t* labels) {
  MPITRON_REQUIRE(T >= (task == VerseTask::pairs ? 5 : 3), "sequence too short for the task");
  const std::vector<int64_t>& pool = data.split(split);
  const PhiloxStream rng{seed, fnv1a64(split == Split::train ? "verses.train" : "verses.val")};
  for (int64_t r = 0; r < count; ++r) {
    const Philox4x32 draw = rng.block((uint64_t(index) << 32) | uint64_t(sample_begin + r));
    const int label =
        fill_verse_row(data, task, tok, pool[draw.v[0] % pool.size()], draw, T, out + r * (T + 1));
    if (labels) labels[r] = label;
  }
}

void fill_verse_rows(const VerseDataset& data, VerseTask task, const VerseTokens& tok, Split split,
                     int64_t first, int64_t count, int T, int32_t* out, int32_t* labels) {
  MPITRON_REQUIRE(T >= (task == VerseTask::pairs ? 5 : 3), "sequence too short for the task");
  const std::vector<int64_t>& pool = data.split(split);
  MPITRON_REQUIRE(first >= 0 && first + count <= int64_t(pool.size()), "rows outside the split");
  const PhiloxStream rng{0, fnv1a64("verses.whole")};
  for (int64_t r = 0; r < count; ++r) {
    const int64_t i = first + r;
    const int label = fill_verse_row(data, task, tok, pool[size_t(i)], rng.block(uint64_t(i)), T,
                                     out + r * (T + 1));
    if (labels) labels[r] = label;
  }
}

}  // namespace mpitron::io
