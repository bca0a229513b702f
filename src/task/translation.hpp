// The translation and question-answering tasks (gpt task 1): text <-> ids of a pair dataset, lines
// translated through the GPT's decoding (src/model/gpt_translate.hpp), and the tasks' validation
// metrics (BLEU, exact match), which the trainer and `eval` call without naming a family.
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/pair_dataset.hpp"
#include "io/sentencepiece_tokenizer.hpp"
#include "src/model/gpt_translate.hpp"
#include "src/model/model.hpp"

namespace mpitron {

// Text <-> ids of a pair dataset: bytes, or a SentencePiece model; and its special tokens.
struct PairCodec {
  io::PairTokens tokens;
  std::optional<io::SentencePieceTokenizer> spm;
  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
  TranslationTokens specials() const { return {tokens.sep, tokens.end, tokens.pad}; }
};

// The translations of the lines, in order (translate_ids on the encoded lines). model: a whole
// pair-trained GPT; UsageError naming the model otherwise.
std::vector<std::string> translate_lines(Model& model, const PairCodec& codec,
                                         const std::vector<std::string>& sources,
                                         const TranslateOptions& options, TranslateStats* stats);

// Corpus BLEU of the first `lines` validation pairs' translations (greedy, window tokens) against
// their references; beat() after each batch of lines (the trainer's watchdog).
double validation_bleu(Model& model, const PairCodec& codec, const io::PairDataset& pairs,
                       int64_t lines, int window, const std::function<void()>& beat);

// Question answering scored by exact match: a prediction counts when it equals its answer (both
// without surrounding spaces). The baseline always answers the most common training answer
// (ties: the first in sorted order).
struct ExactMatch {
  int64_t correct = 0, total = 0;
  std::string majority;          // the most common training answer
  int64_t majority_correct = 0;  // how many answers it matches
  double rate() const { return total > 0 ? double(correct) / double(total) : 0.0; }
  double majority_rate() const {
    return total > 0 ? double(majority_correct) / double(total) : 0.0;
  }
};
ExactMatch exact_match(const std::vector<std::string>& predictions,
                       const std::vector<std::string>& answers,
                       const std::vector<std::string>& train_answers);

}  // namespace mpitron
