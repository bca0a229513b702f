// Corpus BLEU as sacreBLEU computes it by default (Papineni et al. 2002; Post 2018): the 13a
// tokenizer of mteval-v13a, clipped n-gram matches up to 4-grams summed over the corpus, the
// brevity penalty exp(1 - r/c) when c < r, and the "exp" smoothing (a zero match count at order n
// counts as 1/2^k of that order's n-grams, k = 1, 2, ... for each such order in turn); a corpus
// without a single match scores 0.
// BLEU = BP * exp(mean_n log p_n), in percent.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace mpitron::io {

constexpr int kBleuOrder = 4;

struct BleuStats {
  std::array<int64_t, kBleuOrder> matches{};  // clipped n-gram matches, n = 1..4
  std::array<int64_t, kBleuOrder> totals{};   // n-grams in the hypotheses
  int64_t hyp_length = 0, ref_length = 0;     // tokens

  BleuStats& operator+=(const BleuStats& o);
};

struct BleuScore {
  double score = 0;                             // 0..100
  std::array<double, kBleuOrder> precisions{};  // percent, after smoothing
  double brevity_penalty = 0;
  BleuStats stats;
};

// mteval-v13a's tokenization (sacreBLEU's default "13a"): HTML entities &quot; &amp; &lt; &gt;
// decoded, punctuation split off, periods and commas split off unless between digits, a dash
// after a digit split off.
std::vector<std::string> tokenize_13a(std::string_view line);

// Statistics of one hypothesis against its one reference (tokens).
BleuStats bleu_stats(const std::vector<std::string>& hypothesis,
                     const std::vector<std::string>& reference);

// The score of summed statistics (an empty corpus or one without hypotheses' tokens scores 0).
BleuScore bleu_score(const BleuStats& stats);

// Corpus BLEU of lines (13a-tokenized); UsageError when the counts differ.
BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::string>& references);

// sacreBLEU's line: "BLEU = 23.41 55.0/30.1/18.2/11.0 (BP = 0.951 ratio = 0.952 hyp_len = 1234
// ref_len = 1296)", the score with `width` decimals (the precisions with width - 1).
std::string describe(const BleuScore& b, int width = 2);
// "n-gram matches: 1: 120/200, 2: 60/180, 3: 25/160, 4: 9/140".
std::string describe_counts(const BleuStats& s);

}  // namespace mpitron::io
