// libFuzzer target for the data reader (io/dataset.cpp: a text file, or an HDF5 token file): the
// first byte picks seq_len (1..64), the rest is the data file; a loaded file must then serve
// batches of both splits. Loading must either work or throw UsageError.
#include <cstdint>
#include <string>
#include <vector>

#include "io/dataset.hpp"
#include "base/check.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mpitron;
  if (size < 1) return 0;
  const int seq_len = 1 + data[0] % 64;
  static const std::string path = (fuzz::scratch_dir() / "data.txt").string();
  fuzz::write_file(path, data + 1, size - 1);
  try {
    const io::TextDataset d = io::load_text_dataset(path, seq_len);
    std::vector<int32_t> out(4 * size_t(seq_len + 1));
    for (io::Split s : {io::Split::train, io::Split::val}) {
      io::fill_batch(d, s, /*seed=*/size, /*index=*/3, /*sample_begin=*/0, 4, seq_len, out.data());
      for (int32_t tok : out)
        if (tok < 0 || tok >= d.vocab_size) __builtin_trap();  // every token is in the vocabulary
    }
  } catch (const UsageError&) {
  }
  return 0;
}
