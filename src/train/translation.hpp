// Translating lines with a GPT trained on sentence pairs (gpt task 1): each source line becomes
// the prompt source [SEP], and the model's tokens up to [END] are the translation. Greedy decoding
// runs batched with a KV cache (src/model/gpt_decoder.hpp: the prompts in one pass, then one token
// per step for the whole batch), or without it, recomputing the whole prefix each step (the
// reference the cache is tested against); beam search keeps the k most likely prefixes per line
// (log-probabilities summed, finished beams ranked by their mean per token).
#pragma once
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "io/pair_dataset.hpp"
#include "io/sentencepiece_tokenizer.hpp"
#include "src/model/gpt.hpp"

namespace mpitron {

// Text <-> ids of a pair dataset: bytes, or a SentencePiece model; and its special tokens.
struct PairCodec {
  io::PairTokens tokens;
  std::optional<io::SentencePieceTokenizer> spm;
  std::vector<int32_t> encode(const std::string& text) const;
  std::string decode(const std::vector<int32_t>& ids) const;
};

struct TranslateOptions {
  int batch = 32;            // lines decoded together
  int beam = 1;              // 1: greedy
  bool beam_search = false;  // beam search even at width 1 (which must equal greedy)
  bool cache = true;         // false: the whole prefix again each step (greedy only)
  // Tokens a sequence may hold, as in training (its seq_len; 0: the block size): sources longer
  // than (window - 1) / 2 are cut to that, translations stop at the window.
  int window = 0;
  std::function<void(int64_t done, int64_t total)> progress;  // after each batch of lines
};

struct TranslateStats {
  int64_t lines = 0, new_tokens = 0;
  int64_t cut_sources = 0;  // sources longer than (window - 1) / 2 tokens, cut to that
  int64_t cut_targets = 0;  // translations that reached the window before [END]
  double seconds = 0;
};

// The translations of the lines, in order. model: whole (tp 1, pp 1), built for at least `batch`
// rows of the window's tokens when options.cache is false.
std::vector<std::string> translate_lines(GptModel& model, const PairCodec& codec,
                                         const std::vector<std::string>& sources,
                                         const TranslateOptions& options, TranslateStats* stats);

// Greedy or beam token ids for prompts (source ids, already cut), for tests: the same search as
// translate_lines without the text.
std::vector<std::vector<int32_t>> translate_ids(GptModel& model, const io::PairTokens& tokens,
                                                const std::vector<std::vector<int32_t>>& sources,
                                                const TranslateOptions& options,
                                                TranslateStats* stats);

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
