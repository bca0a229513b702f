// libFuzzer target for the IDX image reader (io/image_dataset.cpp, plain or gzipped files): the
// input packs the folder's four files (layout below); a loaded dataset must then serve batches of
// both splits. Loading must either work or throw UsageError.
#include <cstdint>
#include <filesystem>
#include <string>
#include <vector>

#include "io/image_dataset.hpp"
#include "base/check.hpp"
#include "tests/fuzz/fuzz_common.hpp"

// Input layout: byte 0: bit k set -> file k is named with ".gz" (zlib reads plain content under
// that name too); bytes 1..6: the lengths of files 0..2 as little-endian uint16 (cut to what is
// left); then the files back to back, the fourth taking the rest. Files, in order:
// train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte.
extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mpitron;
  namespace fs = std::filesystem;
  constexpr size_t kHeader = 7;
  if (size < kHeader) return 0;
  static const fs::path dir = fuzz::scratch_dir() / "idx";
  static const char* const names[4] = {"train-images-idx3-ubyte", "train-labels-idx1-ubyte",
                                       "t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte"};
  std::error_code ec;
  fs::remove_all(dir, ec);
  fs::create_directories(dir);
  size_t at = kHeader;
  for (int k = 0; k < 4; ++k) {
    size_t len = size - at;
    if (k < 3) len = std::min<size_t>(len, size_t(data[1 + 2 * k]) | size_t(data[2 + 2 * k]) << 8);
    const std::string name = std::string(names[k]) + (data[0] >> k & 1 ? ".gz" : "");
    fuzz::write_file((dir / name).string(), data + at, len);
    at += len;
  }
  try {
    const io::ImageDataset d = io::load_image_dataset(dir.string());
    const int ppi = d.pixels_per_image();
    std::vector<float> pixels(2 * size_t(ppi));
    std::vector<int32_t> labels(2);
    for (io::Split s : {io::Split::train, io::Split::val}) {
      io::fill_image_batch(d, s, /*seed=*/size, /*index=*/1, /*sample_begin=*/0, 2, pixels.data(),
                           labels.data());
      for (int32_t l : labels)
        if (l < 0 || l >= d.classes) __builtin_trap();  // every label is a class
    }
  } catch (const UsageError&) {
  }
  return 0;
}
