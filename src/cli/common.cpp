// Helpers several commands share: the tokenizer a checkpoint was trained with, the vocabulary
// check, "did you mean" suggestions.
#include <fmt/format.h>

#include <algorithm>
#include <filesystem>
#include <numeric>

#include "base/check.hpp"
#include "io/checkpoint.hpp"
#include "io/dataset.hpp"
#include "src/cli/cli.hpp"

namespace mpitron::cli {

// The BPE tokenizer of a checkpoint's text: --tokenizer DIR when given, else the folder recorded in
// the token file the checkpoint was trained on; none (byte tokens) for a text file.
std::optional<io::BpeTokenizer> checkpoint_tokenizer(const std::string& ckpt,
                                                     const CheckpointRecord& rec,
                                                     const std::string& tokenizer_dir) {
  if (!tokenizer_dir.empty()) return io::BpeTokenizer::load(tokenizer_dir);
  const std::string& data = rec.data_path;
  if (data.empty() && !rec.tokenizer.empty()) {  // an imported checkpoint's
    if (!io::has_tokenizer_files(rec.tokenizer))
      throw UsageError(
          fmt::format("{} records the tokenizer in '{}', which is gone: give --tokenizer DIR", ckpt,
                      rec.tokenizer));
    return io::BpeTokenizer::load(rec.tokenizer);
  }
  if (data.empty()) return std::nullopt;
  if (!std::filesystem::exists(data)) {
    if (std::filesystem::path(data).extension() != ".h5") return std::nullopt;
    throw UsageError(fmt::format(
        "{} was trained on the token file {}, which does not exist: give --tokenizer DIR", ckpt,
        data));
  }
  if (!io::is_token_file(data)) return std::nullopt;
  const io::TokenFileInfo info = io::read_token_file_info(data);
  if (!io::has_tokenizer_files(info.tokenizer))
    throw UsageError(fmt::format(
        "{} was trained on {}, made with the tokenizer in '{}', which is gone: give --tokenizer "
        "DIR",
        ckpt, data, info.tokenizer));
  return io::BpeTokenizer::load(info.tokenizer);
}

// A model's vocabulary must hold every id of the data's (or tokenizer's) vocabulary.
std::string kept_beside(const std::string& ckpt, const std::string& recorded) {
  namespace fs = std::filesystem;
  if (recorded.empty() || fs::exists(recorded)) return recorded;
  const fs::path beside = fs::path(ckpt).parent_path() / fs::path(recorded).filename();
  return fs::exists(beside) ? beside.string() : recorded;
}

std::string checkpoint_of(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::is_directory(path, ec)) return path;
  const std::string latest = io::latest_checkpoint(path);
  if (latest.empty())
    throw UsageError(
        fmt::format("{} is a folder without checkpoints (ckpt_<step>.h5): give a checkpoint file "
                    "or a run folder",
                    path));
  return latest;
}

void check_vocab(const std::string& what, int64_t data_vocab, const std::string& model,
                 int64_t model_vocab) {
  if (model_vocab < data_vocab)
    throw UsageError(fmt::format(
        "{} has a vocabulary of {} tokens, but {} has vocab_size {} (set model.vocab_size >= {})",
        what, data_vocab, model, model_vocab, data_vocab));
}

namespace {

// Levenshtein distance, for "did you mean" suggestions.
size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  std::iota(row.begin(), row.end(), size_t(0));
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] != b[j - 1])});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string suggestion(const std::string& word, const std::vector<std::string>& candidates) {
  std::string best;
  size_t best_d = std::max<size_t>(2, word.size() / 3) + 1;
  for (const std::string& c : candidates)
    if (size_t d = edit_distance(word, c); d < best_d) best = c, best_d = d;
  return best.empty() ? "" : fmt::format(" (did you mean {}?)", best);
}

}  // namespace mpitron::cli
