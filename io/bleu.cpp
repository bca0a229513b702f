// Corpus BLEU with sacreBLEU's defaults (io/bleu.hpp). The 13a tokenizer's rules are Python
// regular expressions applied with re.sub; PCRE2's global substitution has the same semantics
// (leftmost, non-overlapping matches).
#define PCRE2_CODE_UNIT_WIDTH 8
#include "io/bleu.hpp"

#include <fmt/format.h>
#include <pcre2.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <memory>

#include "base/check.hpp"
#include "io/utf8.hpp"

namespace mpitron::io {
namespace {

struct Substitution {
  const char* pattern;
  const char* replacement;
};

// mteval-v13a's rules, as sacreBLEU's TokenizerRegexp states them.
constexpr Substitution kRules[] = {
    {R"(([\{-\~\[-\` -\&\(-\+\:-\@\/]))", " $1 "},  // punctuation
    {R"(([^0-9])([\.,]))", "$1 $2 "},               // period and comma unless after a digit
    {R"(([\.,])([^0-9]))", " $1 $2"},               // period and comma unless before a digit
    {R"(([0-9])(-))", "$1 $2 "},                    // dash after a digit
};

struct CompiledRules {
  std::vector<pcre2_code*> codes;
  CompiledRules() {
    for (const Substitution& r : kRules) {
      int err = 0;
      PCRE2_SIZE at = 0;
      pcre2_code* c = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(r.pattern), PCRE2_ZERO_TERMINATED,
                                    0, &err, &at, nullptr);
      MPITRON_REQUIRE(c != nullptr, fmt::format("pcre2_compile of 13a rule {}", r.pattern));
      codes.push_back(c);
    }
  }
  ~CompiledRules() {
    for (pcre2_code* c : codes) pcre2_code_free(c);
  }
};

const CompiledRules& rules() {
  static const CompiledRules r;  // compiled once; read-only afterwards
  return r;
}

std::string substitute(const pcre2_code* code, const std::string& in, const char* replacement) {
  std::string out(in.size() * 2 + 64, '\0');
  for (;;) {
    PCRE2_SIZE len = out.size();
    const int rc =
        pcre2_substitute(code, reinterpret_cast<PCRE2_SPTR>(in.data()), in.size(), 0,
                         PCRE2_SUBSTITUTE_GLOBAL | PCRE2_SUBSTITUTE_OVERFLOW_LENGTH, nullptr,
                         nullptr, reinterpret_cast<PCRE2_SPTR>(replacement), PCRE2_ZERO_TERMINATED,
                         reinterpret_cast<PCRE2_UCHAR*>(out.data()), &len);
    if (rc == PCRE2_ERROR_NOMEMORY) {
      out.resize(len);
      continue;
    }
    MPITRON_REQUIRE(rc >= 0, fmt::format("pcre2_substitute failed ({})", rc));
    out.resize(len);
    return out;
  }
}

void replace_all(std::string& s, std::string_view from, std::string_view to) {
  for (size_t at = s.find(from); at != std::string::npos; at = s.find(from, at + to.size()))
    s.replace(at, from.size(), to);
}

// Python's str.isspace() for one code point (what str.split() splits on).
bool is_python_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
         c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F ||
         c == 0x205F || c == 0x3000;
}

std::vector<std::string> split_on_space(const std::string& s) {
  std::vector<std::string> words;
  std::string word;
  const auto* p = reinterpret_cast<const uint8_t*>(s.data());
  for (size_t i = 0; i < s.size();) {
    const int len = utf8_char(p + i, s.size() - i);
    const int n = len > 0 ? len : -len;
    if (len > 0 && is_python_space(utf8_decode(p + i, len))) {
      if (!word.empty()) words.push_back(std::move(word)), word.clear();
    } else {
      word.append(s, i, size_t(n));
    }
    i += size_t(n);
  }
  if (!word.empty()) words.push_back(std::move(word));
  return words;
}

using Ngrams = std::map<std::vector<std::string>, int64_t>;

Ngrams count_ngrams(const std::vector<std::string>& words, int n) {
  Ngrams counts;
  for (size_t i = 0; i + size_t(n) <= words.size(); ++i)
    ++counts[std::vector<std::string>(words.begin() + i, words.begin() + i + n)];
  return counts;
}

}  // namespace

BleuStats& BleuStats::operator+=(const BleuStats& o) {
  for (int n = 0; n < kBleuOrder; ++n) matches[n] += o.matches[n], totals[n] += o.totals[n];
  hyp_length += o.hyp_length;
  ref_length += o.ref_length;
  return *this;
}

std::vector<std::string> tokenize_13a(std::string_view text) {
  std::string line(text);
  replace_all(line, "<skipped>", "");
  replace_all(line, "-\n", "");
  replace_all(line, "\n", " ");
  if (line.find('&') != std::string::npos) {
    replace_all(line, "&quot;", "\"");
    replace_all(line, "&amp;", "&");
    replace_all(line, "&lt;", "<");
    replace_all(line, "&gt;", ">");
  }
  line = " " + line + " ";
  const CompiledRules& r = rules();
  for (size_t k = 0; k < r.codes.size(); ++k)
    line = substitute(r.codes[k], line, kRules[k].replacement);
  return split_on_space(line);
}

BleuStats bleu_stats(const std::vector<std::string>& hyp, const std::vector<std::string>& ref) {
  BleuStats s;
  s.hyp_length = int64_t(hyp.size());
  s.ref_length = int64_t(ref.size());
  for (int n = 1; n <= kBleuOrder; ++n) {
    const Ngrams h = count_ngrams(hyp, n), r = count_ngrams(ref, n);
    for (const auto& [gram, count] : h) {
      const auto it = r.find(gram);
      if (it != r.end()) s.matches[n - 1] += std::min(count, it->second);
    }
    s.totals[n - 1] = std::max<int64_t>(0, int64_t(hyp.size()) - n + 1);
  }
  return s;
}

BleuScore bleu_score(const BleuStats& s) {
  BleuScore b;
  b.stats = s;
  const double c = double(s.hyp_length), r = double(s.ref_length);
  b.brevity_penalty = c >= r ? 1.0 : c > 0 ? std::exp(1.0 - r / c) : 0.0;
  // sacreBLEU: no match of any order scores 0 with every precision 0 (no smoothing then); an
  // order with no n-gram at all keeps precision 0 (so the score is 0).
  bool any_match = false;
  for (int n = 0; n < kBleuOrder; ++n) any_match = any_match || s.matches[n] > 0;
  if (!any_match) return b;
  double smooth = 1.0, log_sum = 0.0;
  bool zero = false;
  for (int n = 0; n < kBleuOrder; ++n) {
    if (s.totals[n] == 0) {
      for (int k = n; k < kBleuOrder; ++k) b.precisions[k] = 0.0;
      zero = true;
      break;
    }
    if (s.matches[n] == 0) {
      smooth *= 2.0;
      b.precisions[n] = 100.0 / (smooth * double(s.totals[n]));
    } else {
      b.precisions[n] = 100.0 * double(s.matches[n]) / double(s.totals[n]);
    }
    log_sum += std::log(b.precisions[n]);
  }
  b.score = zero ? 0.0 : b.brevity_penalty * std::exp(log_sum / kBleuOrder);
  return b;
}

BleuScore corpus_bleu(const std::vector<std::string>& hypotheses,
                      const std::vector<std::string>& references) {
  if (hypotheses.size() != references.size())
    throw UsageError(fmt::format("{} hypotheses but {} references: BLEU pairs them line by line",
                                 hypotheses.size(), references.size()));
  BleuStats total;
  for (size_t i = 0; i < hypotheses.size(); ++i)
    total += bleu_stats(tokenize_13a(hypotheses[i]), tokenize_13a(references[i]));
  return bleu_score(total);
}

std::string describe(const BleuScore& b, int width) {
  const BleuStats& s = b.stats;
  const double ratio = s.ref_length > 0 ? double(s.hyp_length) / double(s.ref_length) : 0.0;
  const int w = std::max(width, 0), pw = std::max(width - 1, 0);
  return fmt::format(
      "BLEU = {:.{}f} {:.{}f}/{:.{}f}/{:.{}f}/{:.{}f} (BP = {:.{}f} ratio = {:.{}f} hyp_len = {} "
      "ref_len = {})",
      b.score, w, b.precisions[0], pw, b.precisions[1], pw, b.precisions[2], pw, b.precisions[3],
      pw, b.brevity_penalty, w + 1, ratio, w + 1, s.hyp_length, s.ref_length);
}

std::string describe_counts(const BleuStats& s) {
  std::string out = "n-gram matches:";
  for (int n = 0; n < kBleuOrder; ++n)
    out += fmt::format("{} {}: {}/{}", n ? "," : "", n + 1, s.matches[n], s.totals[n]);
  return out;
}

}  // namespace mpitron::io
