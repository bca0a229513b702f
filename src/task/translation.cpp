// The translation and question-answering tasks (src/task/translation.hpp).
#include "src/task/translation.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <map>

#include "base/check.hpp"
#include "io/bleu.hpp"

namespace mpitron {

namespace {

// The decoding is the GPT's: a pair task's model is one (ModelFamily gpt, task 1).
GptModel& gpt_of(Model& model) {
  auto* gpt = dynamic_cast<GptModel*>(&model);
  if (gpt == nullptr)
    throw UsageError("translation decodes with a whole fp32 GPT (model.type gpt, task 1)");
  return *gpt;
}

}  // namespace

std::vector<int32_t> PairCodec::encode(const std::string& text) const {
  if (spm) return spm->encode(text);
  std::vector<int32_t> ids;
  for (unsigned char c : text) ids.push_back(int32_t(c));
  return ids;
}

std::string PairCodec::decode(const std::vector<int32_t>& ids) const {
  if (spm) {
    std::vector<int32_t> kept;
    for (int32_t t : ids)
      if (t >= 0 && t < spm->vocab_size() && t != tokens.sep && t != tokens.end && t != tokens.pad)
        kept.push_back(t);
    return spm->decode(kept);
  }
  std::string text;  // a line break would split the line: a space instead
  for (int32_t t : ids)
    if (t >= 0 && t < 256) text.push_back(t == '\n' || t == '\r' ? ' ' : char(t));
  return text;
}

std::vector<std::string> translate_lines(Model& model, const PairCodec& codec,
                                         const std::vector<std::string>& sources,
                                         const TranslateOptions& options, TranslateStats* stats) {
  std::vector<std::vector<int32_t>> ids;
  ids.reserve(sources.size());
  for (const std::string& s : sources) ids.push_back(codec.encode(s));
  const std::vector<std::vector<int32_t>> got =
      translate_ids(gpt_of(model), codec.specials(), ids, options, stats);
  std::vector<std::string> text;
  text.reserve(got.size());
  for (const auto& g : got) text.push_back(codec.decode(g));
  return text;
}

double validation_bleu(Model& model, const PairCodec& codec, const io::PairDataset& pairs,
                       int64_t lines, int window, const std::function<void()>& beat) {
  const io::PairSplit& v = pairs.val;
  const int64_t n = lines > 0 ? std::min<int64_t>(lines, v.pairs()) : v.pairs();
  std::vector<std::vector<int32_t>> sources(static_cast<size_t>(n));
  for (int64_t k = 0; k < n; ++k)
    sources[size_t(k)].assign(v.ids.begin() + v.begin[size_t(2 * k)],
                              v.ids.begin() + v.begin[size_t(2 * k + 1)]);
  TranslateOptions o;
  o.window = window;
  o.progress = [&](int64_t, int64_t) { beat(); };
  const std::vector<std::vector<int32_t>> got =
      translate_ids(gpt_of(model), codec.specials(), sources, o, nullptr);
  std::vector<std::string> hyps,
      refs(pairs.val_references.begin(), pairs.val_references.begin() + n);
  for (const auto& g : got) hyps.push_back(codec.decode(g));
  return io::corpus_bleu(hyps, refs).score;
}

ExactMatch exact_match(const std::vector<std::string>& predictions,
                       const std::vector<std::string>& answers,
                       const std::vector<std::string>& train_answers) {
  MPITRON_REQUIRE(predictions.size() == answers.size(), "one prediction per answer");
  auto trim = [](const std::string& s) {
    const size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
    return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
  };
  ExactMatch m;
  std::map<std::string, int64_t> counts;
  for (const std::string& a : train_answers) ++counts[trim(a)];
  int64_t most = 0;
  for (const auto& [answer, n] : counts)
    if (n > most) most = n, m.majority = answer;
  for (size_t k = 0; k < answers.size(); ++k) {
    const std::string want = trim(answers[k]);
    m.correct += trim(predictions[k]) == want;
    m.majority_correct += !m.majority.empty() && m.majority == want;
  }
  m.total = int64_t(answers.size());
  return m;
}

}  // namespace mpitron
