// libFuzzer target for the verse reader and the encoder's classification rows
// (io/verse_dataset.cpp): byte 0 picks the task (bit 0) and T (5 + b / 2 % 60), the rest is the
// verse file. Loading must work or throw UsageError; a loaded file must then fill rows of both
// splits, drawn and whole, whose ids are bytes or the three specials, with [CLS] first and a label
// of 0 or 1 last.
#include <cstdint>
#include <string>
#include <vector>

#include "io/verse_dataset.hpp"
#include "base/check.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mpitron;
  if (size < 1) return 0;
  const io::VerseTask task = data[0] & 1 ? io::VerseTask::pairs : io::VerseTask::testament;
  const int T = 5 + data[0] / 2 % 60;
  static const std::string path = (fuzz::scratch_dir() / "verses.txt").string();
  fuzz::write_file(path, data + 1, size - 1);
  try {
    const io::VerseDataset d = io::load_verse_dataset(path);
    const io::VerseTokens tok{256, 258, 259};
    const int64_t n = 4;
    std::vector<int32_t> rows(size_t(n) * (T + 1)), labels(n);
    auto check = [&] {
      for (int64_t r = 0; r < n; ++r) {
        const int32_t* row = rows.data() + r * (T + 1);
        if (row[0] != tok.cls || (row[T] != 0 && row[T] != 1) || row[T] != labels[r])
          __builtin_trap();
        for (int t = 0; t < T; ++t)
          if (row[t] < 0 || row[t] > 259) __builtin_trap();
      }
    };
    for (io::Split s : {io::Split::train, io::Split::val}) {
      io::fill_verse_batch(d, task, tok, s, size, 3, 0, n, T, rows.data(), labels.data());
      check();
    }
    const int64_t m = std::min<int64_t>(n, int64_t(d.val.size()));
    io::fill_verse_rows(d, task, tok, io::Split::val, 0, m, T, rows.data(), labels.data());
    if (m == n) check();
  } catch (const UsageError&) {
  }
  return 0;
}
