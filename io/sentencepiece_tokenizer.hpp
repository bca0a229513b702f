// Subwords from SentencePiece (Kudo and Richardson 2018), used as a library: a BPE model learned
// from text files, and encoding and decoding with it. The models this project learns reserve
// unk 0, bos 1 (the separator of a pair), eos 2 (the end of a target) and pad 3.
#pragma once
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace mpitron::io {

class SentencePieceTokenizer {
 public:
  // UsageError naming the file when it is missing or not a SentencePiece model.
  static SentencePieceTokenizer load(const std::string& model_path);
  // Learns a BPE model of vocab_size pieces from the lines of the inputs and writes out_model
  // (".model", written under a temporary name and renamed); UsageError for unreadable inputs, a
  // vocabulary the text cannot fill, or an out_model without the .model suffix.
  static void learn(const std::vector<std::string>& inputs, int vocab_size,
                    const std::string& out_model);

  SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept;
  SentencePieceTokenizer& operator=(SentencePieceTokenizer&&) noexcept;
  ~SentencePieceTokenizer();

  std::vector<int32_t> encode(std::string_view text) const;
  std::string decode(std::span<const int32_t> ids) const;
  int vocab_size() const;
  int32_t unk_id() const;
  int32_t bos_id() const;
  int32_t eos_id() const;
  int32_t pad_id() const;
  const std::string& path() const { return path_; }
  uint64_t checksum() const { return checksum_; }  // FNV-1a of the model file

 private:
  SentencePieceTokenizer() = default;
  std::unique_ptr<sentencepiece::SentencePieceProcessor> sp_;
  std::string path_;
  uint64_t checksum_ = 0;
};

// True for a path that names a SentencePiece model (by its .model suffix).
bool is_sentencepiece_model(const std::string& path);

}  // namespace mpitron::io
