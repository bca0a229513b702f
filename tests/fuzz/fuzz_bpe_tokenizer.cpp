// libFuzzer target for the GPT-2 tokenizer files (io/bpe_tokenizer.cpp): the input packs
// vocab.json, merges.txt and a text (bytes 0..3: the first two lengths, uint16 LE). Loading must
// work or throw UsageError; a loaded tokenizer must then give the text back: decode(encode(x)) ==
// x.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "io/bpe_tokenizer.hpp"
#include "base/check.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mpitron;
  namespace fs = std::filesystem;
  if (size < 4) return 0;
  static const fs::path dir = fuzz::scratch_dir() / "tokenizer";
  fs::create_directories(dir);
  size_t at = 4;
  const char* const names[2] = {"vocab.json", "merges.txt"};
  for (int k = 0; k < 2; ++k) {
    const size_t len =
        std::min<size_t>(size - at, size_t(data[2 * k]) | size_t(data[2 * k + 1]) << 8);
    fuzz::write_file((dir / names[k]).string(), data + at, len);
    at += len;
  }
  const std::string_view text(reinterpret_cast<const char*>(data + at), size - at);
  try {
    io::BpeTokenizer t = io::BpeTokenizer::load(dir.string());
    const std::vector<int32_t> ids = t.encode(text);
    for (int32_t id : ids)
      if (id < 0 || id >= t.vocab_size()) __builtin_trap();
    if (t.decode(ids) != text) __builtin_trap();  // lossless on any bytes
  } catch (const UsageError&) {
  }
  return 0;
}
