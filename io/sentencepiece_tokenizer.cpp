// SentencePiece models: learning and encoding (io/sentencepiece_tokenizer.hpp).
#include "io/sentencepiece_tokenizer.hpp"

#include <fmt/format.h>
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "base/check.hpp"
#include "base/philox.hpp"

namespace mpitron::io {

namespace fs = std::filesystem;

bool is_sentencepiece_model(const std::string& path) {
  return fs::path(path).extension() == ".model";
}

SentencePieceTokenizer SentencePieceTokenizer::load(const std::string& model_path) {
  if (!fs::is_regular_file(model_path))
    throw UsageError(
        fmt::format("SentencePiece model {} does not exist (learn one with mpitron "
                    "tokenize --learn N)",
                    model_path));
  std::ifstream in(model_path, std::ios::binary);
  const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  SentencePieceTokenizer t;
  t.sp_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  const auto status = t.sp_->LoadFromSerializedProto(bytes);
  if (!status.ok())
    throw UsageError(
        fmt::format("{} is not a SentencePiece model: {}", model_path, status.ToString()));
  t.path_ = fs::absolute(model_path).lexically_normal().string();
  t.checksum_ = fnv1a64(bytes);
  return t;
}

void SentencePieceTokenizer::learn(const std::vector<std::string>& inputs, int vocab_size,
                                   const std::string& out_model) {
  if (!is_sentencepiece_model(out_model))
    throw UsageError(fmt::format("--out {} must end in .model", out_model));
  if (inputs.empty()) throw UsageError("learning a SentencePiece model needs --in files");
  for (const std::string& p : inputs)
    if (p.find_first_of(" ,\t") != std::string::npos)
      throw UsageError(
          fmt::format("input {}: SentencePiece's trainer takes no path with a space or a "
                      "comma (copy or link the file elsewhere)",
                      p));
  if (out_model.find_first_of(" ,\t") != std::string::npos)
    throw UsageError(
        fmt::format("--out {}: SentencePiece's trainer takes no path with a space or "
                    "a comma",
                    out_model));
  std::string files;
  for (const std::string& f : inputs) {
    if (!fs::is_regular_file(f)) throw UsageError(fmt::format("input {} does not exist", f));
    files += (files.empty() ? "" : ",") + f;
  }
  const std::string prefix = out_model.substr(0, out_model.size() - 6) + ".learning";
  // Every line is read (no sampling), one thread: the same files give the same model.
  const std::string args = fmt::format(
      "--input={} --model_prefix={} --vocab_size={} --model_type=bpe --character_coverage=1.0 "
      "--unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --input_sentence_size=0 "
      "--shuffle_input_sentence=false --num_threads=1 --minloglevel=2",
      files, prefix, vocab_size);
  const auto status = sentencepiece::SentencePieceTrainer::Train(args);
  std::remove((prefix + ".vocab").c_str());
  if (!status.ok()) {
    std::remove((prefix + ".model").c_str());
    throw UsageError(fmt::format("learning a SentencePiece model of {} pieces failed: {}",
                                 vocab_size, status.ToString()));
  }
  fs::rename(prefix + ".model", out_model);
}

SentencePieceTokenizer::SentencePieceTokenizer(SentencePieceTokenizer&&) noexcept = default;
SentencePieceTokenizer& SentencePieceTokenizer::operator=(SentencePieceTokenizer&&) noexcept =
    default;
SentencePieceTokenizer::~SentencePieceTokenizer() = default;

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::vector<int> ids;
  const auto status = sp_->Encode(text, &ids);
  MPITRON_REQUIRE(status.ok(), "SentencePiece encode: " + status.ToString());
  return {ids.begin(), ids.end()};
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids) const {
  std::string text;
  const auto status = sp_->Decode(std::vector<int>(ids.begin(), ids.end()), &text);
  MPITRON_REQUIRE(status.ok(), "SentencePiece decode: " + status.ToString());
  return text;
}

int SentencePieceTokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}
int32_t SentencePieceTokenizer::unk_id() const {
  return sp_->unk_id();
}
int32_t SentencePieceTokenizer::bos_id() const {
  return sp_->bos_id();
}
int32_t SentencePieceTokenizer::eos_id() const {
  return sp_->eos_id();
}
int32_t SentencePieceTokenizer::pad_id() const {
  return sp_->pad_id();
}

}  // namespace mpitron::io
