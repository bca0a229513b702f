// libFuzzer target for the checkpoint readers (io/checkpoint.cpp) and `mpitron info` (io/inspect):
// the input is a whole ckpt_<step>.h5; header, every small float tensor, verification and the
// summary must either work or throw UsageError. libhdf5 itself is not instrumented.
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "io/checkpoint.hpp"
#include "io/inspect.hpp"
#include "base/check.hpp"
#include "tests/fuzz/fuzz_common.hpp"

namespace {

// Tensors above this many elements are skipped: their reads cost time, not coverage.
constexpr int64_t kMaxElements = 1 << 16;

bool small_shape(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0 || d > kMaxElements) return false;
    n *= d;
    if (n > kMaxElements) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mpitron;
  static const std::string path = (fuzz::scratch_dir() / "ckpt_1.h5").string();
  fuzz::write_file(path, data, size);
  try {
    const io::CheckpointHeader h = io::read_checkpoint_header(path);
    for (const auto& [name, shape] : h.shapes) {
      if (!small_shape(shape)) continue;
      const int64_t n = io::numel(shape);
      std::vector<float> buf(size_t(n > 0 ? n : 1));
      io::TensorPiece t{name, shape, io::flat_range_blocks(shape, 0, n), buf.data()};
      try {
        io::read_checkpoint_tensors(path, {t});
      } catch (const UsageError&) {
      }
    }
  } catch (const UsageError&) {
  }
  try {
    (void)io::verify_checkpoint(path);
  } catch (const UsageError&) {
  }
  fuzz::print_info_both_ways(path);
  return 0;
}
