// libFuzzer target for the safetensors reader (io/safetensors.cpp): the input is a whole
// .safetensors file; opening it, and reading every small tensor of a readable dtype, must either
// work or throw UsageError.
#include <cstdint>
#include <string>
#include <vector>

#include "io/safetensors.hpp"
#include "base/check.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mpitron;
  static const std::string path = (fuzz::scratch_dir() / "model.safetensors").string();
  fuzz::write_file(path, data, size);
  try {
    const io::SafetensorsFile f(path);
    (void)f.metadata();
    for (const io::SafetensorsEntry& e : f.tensors()) {
      try {
        (void)f.find(e.name);
        (void)f.bytes(e);
        (void)f.f32_data(e);
        const int64_t n = e.numel();
        if (!io::safetensors_dtype_readable(e.dtype) || n < 0 || n > (1 << 16)) continue;
        std::vector<float> out(size_t(n > 0 ? n : 1));
        f.read(e, out.data());
        if (n > 1) f.read(e, 1, (n - 1) / 2, 2, out.data());
      } catch (const UsageError&) {
      }
    }
  } catch (const UsageError&) {
  }
  return 0;
}
