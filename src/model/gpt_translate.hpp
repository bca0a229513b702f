// Translation decoding with a GPT trained on sentence pairs (gpt task 1): each source becomes the
// prompt source [SEP], and the model's tokens up to [END] are the translation. Greedy decoding
// runs batched with a KV cache (src/model/gpt_decoder.hpp: the prompts in one pass, then one token
// per step for the whole batch), or without it, recomputing the whole prefix each step (the
// reference the cache is tested against); beam search keeps the k most likely prefixes per line
// (log-probabilities summed, finished beams ranked by their mean per token). Token ids in and out:
// text is the task's (src/task/translation.hpp).
#pragma once
#include <cstdint>
#include <functional>
#include <vector>

#include "src/model/gpt.hpp"

namespace mpitron {

// The special ids of a pair vocabulary (io::PairTokens' values).
struct TranslationTokens {
  int32_t sep = 256, end = 257, pad = 258;
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

// Greedy or beam token ids for prompts (source ids). model: whole (tp 1, pp 1), built for at
// least `batch` rows of the window's tokens when options.cache is false.
std::vector<std::vector<int32_t>> translate_ids(GptModel& model, const TranslationTokens& tokens,
                                                const std::vector<std::vector<int32_t>>& sources,
                                                const TranslateOptions& options,
                                                TranslateStats* stats);

}  // namespace mpitron
