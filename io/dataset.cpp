#include "io/dataset.hpp"

#include <fmt/format.h>

#include <filesystem>
#include <fstream>

#include "src/check.hpp"
#include "src/philox.hpp"

namespace mpitron::io {

TextDataset load_text_dataset(const std::string& path, int seq_len, double val_fraction) {
  if (!std::filesystem::is_regular_file(path))
    throw UsageError(
        fmt::format("data file '{}' does not exist (give a text file with --data)", path));
  std::ifstream in(path, std::ios::binary);
  if (!in) throw UsageError(fmt::format("data file '{}' cannot be read", path));
  TextDataset d;
  d.path = path;
  d.bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  d.train_end = size_t(double(d.bytes.size()) * (1.0 - val_fraction));
  size_t need = size_t(seq_len) + 2;
  if (d.train_end < need || d.bytes.size() - d.train_end < need)
    throw UsageError(fmt::format(
        "data file '{}' has {} bytes: too short for sequences of {} tokens in both splits", path,
        d.bytes.size(), seq_len));
  uint64_t h = 1469598103934665603ull;
  for (uint8_t b : d.bytes) h = (h ^ b) * 1099511628211ull;
  d.checksum = h;
  return d;
}

void fill_batch(const TextDataset& data, Split split, uint64_t seed, int64_t index,
                int64_t sample_begin, int64_t count, int seq_len, int32_t* out) {
  const size_t begin = data.split_begin(split);
  const uint64_t starts = data.split_end(split) - begin - size_t(seq_len) - 1;
  const PhiloxStream rng{seed, fnv1a64(split == Split::train ? "data.train" : "data.val")};
  for (int64_t i = 0; i < count; ++i) {
    uint64_t sample = uint64_t(sample_begin + i);
    Philox4x32 r = rng.block((uint64_t(index) << 32) | sample);
    uint64_t offset = begin + ((uint64_t(r.v[0]) | (uint64_t(r.v[1]) << 32)) % starts);
    int32_t* row = out + i * (seq_len + 1);
    for (int t = 0; t <= seq_len; ++t) row[t] = data.bytes[offset + t];
  }
}

}  // namespace mpitron::io
