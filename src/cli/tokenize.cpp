// mpitron tokenize: a text file as a token file (GPT-2 BPE, BERT WordPiece or a SentencePiece
// model), with a progress line about once a second (BPE).
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>

#include "base/check.hpp"
#include "io/bpe_tokenizer.hpp"
#include "io/dataset.hpp"
#include "io/sentencepiece_tokenizer.hpp"
#include "io/wordpiece_tokenizer.hpp"
#include "src/cli/cli.hpp"

namespace mpitron::cli {

bool is_wordpiece_vocabulary(const std::string& path) {
  namespace fs = std::filesystem;
  const std::string name = fs::path(path).filename().string();
  if (name == "vocab.txt" || name == "vocab.json") return true;
  return !fs::exists(fs::path(path) / "encoder.json") &&
         (fs::exists(fs::path(path) / "vocab.txt") || fs::exists(fs::path(path) / "vocab.json"));
}

int cmd_tokenize(const std::string& tokenizer_dir, const std::string& in, const std::string& out) {
  if (tokenizer_dir.empty()) throw UsageError("tokenize needs --tokenizer DIR");
  if (std::filesystem::path(out).extension() != ".h5")
    throw UsageError(fmt::format("--out {} must name an HDF5 token file (.h5)", out));
  if (io::is_sentencepiece_model(tokenizer_dir)) {
    const io::SentencePieceTokenizer spm = io::SentencePieceTokenizer::load(tokenizer_dir);
    const auto t0 = std::chrono::steady_clock::now();
    const io::TokenFileInfo info = io::tokenize_file(spm, in, out);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print(
        "wrote {}: {} SentencePiece tokens from {} bytes of {} in {:.2f} s (eos {} after each "
        "line), vocab {}\n",
        out, info.tokens, info.source_bytes, in, s, spm.eos_id(), info.vocab_size);
    return 0;
  }
  if (is_wordpiece_vocabulary(tokenizer_dir)) {
    const io::WordPieceTokenizer wp = io::WordPieceTokenizer::load(tokenizer_dir);
    const auto t0 = std::chrono::steady_clock::now();
    const io::TokenFileInfo info = io::tokenize_file(wp, in, out);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    fmt::print("wrote {}: {} WordPiece tokens from {} bytes of {} in {:.2f} s, vocab {}\n", out,
               info.tokens, info.source_bytes, in, s, info.vocab_size);
    fmt::print(
        "for the bert family: --set model.vocab_size={} --set model.pad_id={} --set "
        "model.unk_id={} --set model.cls_id={} --set model.sep_id={} --set model.mask_id={}\n",
        wp.vocab_size(), wp.pad_id(), wp.unk_id(), wp.cls_id(), wp.sep_id(), wp.mask_id());
    return 0;
  }
  io::BpeTokenizer tok = io::BpeTokenizer::load(tokenizer_dir);
  const auto t0 = std::chrono::steady_clock::now();
  auto seconds = [&] {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  };
  const io::TokenFileInfo info =
      io::tokenize_file(tok, in, out, [&](int64_t done, int64_t total, int64_t n) {
        fmt::print("tokenize: {:.1f} of {:.1f} MB ({:.1f} MB/s), {} tokens\n", done / 1e6,
                   total / 1e6, done / 1e6 / seconds(), n);
        std::fflush(stdout);
      });
  const double s = seconds();
  fmt::print("wrote {}: {} tokens ({}) from {} bytes of {} in {:.2f} s ({:.1f} MB/s), vocab {}\n",
             out, info.tokens, info.vocab_size > 65536 ? "uint32" : "uint16", info.source_bytes, in,
             s, info.source_bytes / 1e6 / std::max(s, 1e-9), info.vocab_size);
  return 0;
}

int cmd_learn_tokenizer(const std::vector<std::string>& inputs, int pieces, const std::string& out,
                        const std::string& tokenizer) {
  if (!tokenizer.empty())
    throw UsageError("--learn writes a new model to --out: it takes no --tokenizer");
  const auto t0 = std::chrono::steady_clock::now();
  fmt::print("tokenize: learning a SentencePiece BPE model of {} pieces from {} file(s)\n", pieces,
             inputs.size());
  std::fflush(stdout);
  io::SentencePieceTokenizer::learn(inputs, pieces, out);
  const io::SentencePieceTokenizer spm = io::SentencePieceTokenizer::load(out);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  fmt::print(
      "wrote {}: {} pieces (unk {}, bos {}, eos {}, pad {}) in {:.1f} s; train a translation "
      "model with --tokenizer {} --set model.vocab_size={}\n",
      out, spm.vocab_size(), spm.unk_id(), spm.bos_id(), spm.eos_id(), spm.pad_id(), s, out,
      spm.vocab_size());
  return 0;
}

}  // namespace mpitron::cli
