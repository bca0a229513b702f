// libFuzzer target for BERT's WordPiece vocabularies (io/wordpiece_tokenizer.cpp): byte 0 picks
// vocab.txt or vocab.json (bit 0), bytes 1..2 the vocabulary's length (uint16 LE), then the
// vocabulary, then a text. Loading must work or throw UsageError; a loaded tokenizer must then
// encode the text to ids inside the vocabulary, and decode them without failing.
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include "io/wordpiece_tokenizer.hpp"
#include "base/check.hpp"
#include "tests/fuzz/fuzz_common.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace mpitron;
  namespace fs = std::filesystem;
  if (size < 3) return 0;
  static const fs::path txt = fuzz::scratch_dir() / "txt", json = fuzz::scratch_dir() / "json";
  fs::create_directories(txt);
  fs::create_directories(json);
  const fs::path dir = data[0] & 1 ? json : txt;
  const size_t len = std::min<size_t>(size - 3, size_t(data[1]) | size_t(data[2]) << 8);
  fuzz::write_file((dir / (data[0] & 1 ? "vocab.json" : "vocab.txt")).string(), data + 3, len);
  const std::string_view text(reinterpret_cast<const char*>(data + 3 + len), size - 3 - len);
  try {
    const io::WordPieceTokenizer t = io::WordPieceTokenizer::load(dir.string());
    const std::vector<int32_t> ids = t.encode(text);
    for (int32_t id : ids)
      if (id < 0 || id >= t.vocab_size()) __builtin_trap();
    (void)t.decode(ids);
  } catch (const UsageError&) {
  }
  return 0;
}
