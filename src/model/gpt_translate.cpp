// Translation decoding with a pair-trained GPT (src/model/gpt_translate.hpp).
#include "src/model/gpt_translate.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <limits>
#include <optional>

#include "base/check.hpp"
#include "src/model/gpt_decoder.hpp"

namespace mpitron {

namespace {

int arg_max(const float* x, int V) {
  return int(std::max_element(x, x + V) - x);
}

// log softmax of one row of logits, into out.
void log_softmax(const float* x, int V, std::vector<double>& out) {
  out.resize(size_t(V));
  const double mx = *std::max_element(x, x + V);
  double sum = 0;
  for (int j = 0; j < V; ++j) sum += std::exp(double(x[j]) - mx);
  const double lse = mx + std::log(sum);
  for (int j = 0; j < V; ++j) out[size_t(j)] = double(x[j]) - lse;
}

// Greedy over one batch of prompts (each source [SEP]) with the KV cache.
void greedy_cached(GptDecoder& dec, const TranslationTokens& tok, int V,
                   const std::vector<std::vector<int32_t>>& prompts,
                   std::vector<std::vector<int32_t>>& out, TranslateStats& st, int T) {
  const int R = dec.rows(), B = int(prompts.size());
  int longest = 1;
  for (const auto& p : prompts) longest = std::max(longest, int(p.size()));
  std::vector<int32_t> feed(size_t(R) * longest, tok.pad), take(size_t(R), -1),
      next(static_cast<size_t>(R));
  for (int b = 0; b < B; ++b) {
    std::copy(prompts[size_t(b)].begin(), prompts[size_t(b)].end(),
              feed.begin() + size_t(b) * longest);
    take[size_t(b)] = int32_t(prompts[size_t(b)].size()) - 1;
  }
  std::vector<float> logits(size_t(R) * V);
  dec.reset();
  dec.feed(feed.data(), longest, take.data(), logits.data());
  for (;;) {
    bool any = false;
    for (int b = 0; b < B; ++b) {
      if (take[size_t(b)] < 0) continue;
      const int t = arg_max(logits.data() + size_t(b) * V, V);
      if (t == tok.end) {
        take[size_t(b)] = -1;
        continue;
      }
      out[size_t(b)].push_back(t);
      ++st.new_tokens;
      // The last token fed goes to position T - 1: a longer sequence is cut here.
      if (prompts[size_t(b)].size() + out[size_t(b)].size() > size_t(T)) {
        ++st.cut_targets;
        take[size_t(b)] = -1;
        continue;
      }
      next[size_t(b)] = t;
      take[size_t(b)] = 0;
      any = true;
    }
    if (!any) return;
    for (int b = 0; b < R; ++b)
      if (take[size_t(b)] < 0) next[size_t(b)] = tok.pad;
    dec.feed(next.data(), 1, take.data(), logits.data());
  }
}

// Greedy over one batch recomputing the whole prefix each step (the cache's reference).
void greedy_full(GptModel& model, const TranslationTokens& tok, int V,
                 const std::vector<std::vector<int32_t>>& prompts,
                 std::vector<std::vector<int32_t>>& out, TranslateStats& st, int T) {
  const int B = int(prompts.size());
  MPITRON_REQUIRE(model.B >= B && model.T >= T, "the model is not planned for the batch");
  const int Tm = model.T;  // the planned rows: the window's T tokens, then padding
  std::vector<int32_t> window(size_t(model.B) * (Tm + 1));
  std::vector<bool> active(static_cast<size_t>(B), true);
  for (;;) {
    std::fill(window.begin(), window.end(), tok.pad);
    for (int b = 0; b < B; ++b) {
      int32_t* row = window.data() + size_t(b) * (Tm + 1);
      std::copy(prompts[size_t(b)].begin(), prompts[size_t(b)].end(), row);
      std::copy(out[size_t(b)].begin(), out[size_t(b)].end(), row + prompts[size_t(b)].size());
    }
    MicroBatch mb;
    mb.samples = {window.data(), nullptr, nullptr, model.B};
    model.forward(mb);  // causal: the padding after each row changes nothing before it
    const ModelOutput o = model.output(0);
    bool any = false;
    for (int b = 0; b < B; ++b) {
      if (!active[size_t(b)]) continue;
      const size_t len = prompts[size_t(b)].size() + out[size_t(b)].size();
      const int t = arg_max(o.logits + (size_t(b) * Tm + len - 1) * size_t(o.classes), V);
      if (t == tok.end) {
        active[size_t(b)] = false;
        continue;
      }
      out[size_t(b)].push_back(t);
      ++st.new_tokens;
      if (len + 1 > size_t(T)) {
        ++st.cut_targets;
        active[size_t(b)] = false;
        continue;
      }
      any = true;
    }
    if (!any) return;
  }
}

// Beam search of width k over one batch with the KV cache: rows b*k .. b*k + k-1 are line b's.
void beam_cached(GptDecoder& dec, const TranslationTokens& tok, int V, int k,
                 const std::vector<std::vector<int32_t>>& prompts,
                 std::vector<std::vector<int32_t>>& out, TranslateStats& st, int T) {
  const int R = dec.rows(), B = int(prompts.size());
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  struct Beam {
    std::vector<int32_t> ids;
    double score = kNone;  // summed log-probabilities
  };
  std::vector<std::vector<Beam>> live(static_cast<size_t>(B),
                                      std::vector<Beam>(static_cast<size_t>(k)));
  std::vector<std::vector<std::pair<double, std::vector<int32_t>>>> finished(
      static_cast<size_t>(B));
  std::vector<bool> done(static_cast<size_t>(B), false);
  int longest = 1;
  for (const auto& p : prompts) longest = std::max(longest, int(p.size()));
  std::vector<int32_t> feed(size_t(R) * longest, tok.pad), take(size_t(R), -1),
      from(static_cast<size_t>(R));
  for (int b = 0; b < B; ++b) {
    live[size_t(b)][0].score = 0;  // one beam to start from; the others join at the first step
    for (int j = 0; j < k; ++j) {
      std::copy(prompts[size_t(b)].begin(), prompts[size_t(b)].end(),
                feed.begin() + size_t(b * k + j) * longest);
      take[size_t(b * k + j)] = int32_t(prompts[size_t(b)].size()) - 1;
    }
  }
  std::vector<float> logits(size_t(R) * V);
  std::vector<double> lp;
  dec.reset();
  dec.feed(feed.data(), longest, take.data(), logits.data());
  std::vector<int32_t> next(size_t(R), tok.pad);
  for (;;) {
    bool any = false;
    for (int r = 0; r < R; ++r)
      from[size_t(r)] = r, take[size_t(r)] = -1, next[size_t(r)] = tok.pad;
    for (int b = 0; b < B; ++b) {
      if (done[size_t(b)]) continue;
      struct Candidate {
        double score;
        int beam, token;
      };
      std::vector<Candidate> cands;
      for (int j = 0; j < k; ++j) {
        const Beam& be = live[size_t(b)][size_t(j)];
        if (be.score == kNone) continue;
        log_softmax(logits.data() + size_t(b * k + j) * V, V, lp);
        std::vector<int> idx(static_cast<size_t>(V));
        for (int v = 0; v < V; ++v) idx[size_t(v)] = v;
        std::partial_sort(
            idx.begin(), idx.begin() + std::min(k + 1, V), idx.end(), [&](int x, int y) {
              return lp[size_t(x)] > lp[size_t(y)] || (lp[size_t(x)] == lp[size_t(y)] && x < y);
            });
        for (int c = 0; c < std::min(k + 1, V); ++c)
          cands.push_back({be.score + lp[size_t(idx[size_t(c)])], j, idx[size_t(c)]});
      }
      std::stable_sort(cands.begin(), cands.end(),
                       [](const Candidate& x, const Candidate& y) { return x.score > y.score; });
      std::vector<Beam> fresh;
      for (const Candidate& c : cands) {
        if (int(fresh.size()) == k) break;
        const Beam& parent = live[size_t(b)][size_t(c.beam)];
        if (c.token == tok.end) {
          finished[size_t(b)].push_back(
              {c.score / double(parent.ids.size() + 1), parent.ids});  // per token, [END] included
          continue;
        }
        Beam nb{parent.ids, c.score};
        nb.ids.push_back(c.token);
        const int row = b * k + int(fresh.size());
        from[size_t(row)] = b * k + c.beam;
        if (prompts[size_t(b)].size() + nb.ids.size() > size_t(T)) {  // full: finished as cut
          finished[size_t(b)].push_back({nb.score / double(nb.ids.size()), nb.ids});
          nb.score = kNone;
        } else {
          next[size_t(row)] = c.token;
          take[size_t(row)] = 0;
          any = true;
        }
        fresh.push_back(std::move(nb));
      }
      while (int(fresh.size()) < k) fresh.push_back(Beam{});
      live[size_t(b)] = std::move(fresh);
      // Done once k beams finished, or nothing is left to extend.
      bool extendable = false;
      for (const Beam& be : live[size_t(b)]) extendable = extendable || be.score != kNone;
      if (int(finished[size_t(b)].size()) >= k || !extendable) {
        done[size_t(b)] = true;
        for (int j = 0; j < k; ++j) take[size_t(b * k + j)] = -1;
      }
    }
    bool open = false;
    for (int b = 0; b < B; ++b) open = open || !done[size_t(b)];
    if (!open || !any) break;
    dec.reorder(from);
    dec.feed(next.data(), 1, take.data(), logits.data());
  }
  for (int b = 0; b < B; ++b) {
    auto& f = finished[size_t(b)];
    // Open beams have not paid for their [END]: only a line with no finished one falls back to
    // them.
    if (f.empty())
      for (const Beam& be : live[size_t(b)])
        if (be.score != kNone)
          f.push_back({be.score / double(std::max<size_t>(be.ids.size(), 1)), be.ids});
    std::stable_sort(f.begin(), f.end(),
                     [](const auto& x, const auto& y) { return x.first > y.first; });
    out[size_t(b)] = f.empty() ? std::vector<int32_t>{} : f.front().second;
    st.new_tokens += int64_t(out[size_t(b)].size());
    if (prompts[size_t(b)].size() + out[size_t(b)].size() > size_t(T)) ++st.cut_targets;
  }
}

}  // namespace

std::vector<std::vector<int32_t>> translate_ids(GptModel& model, const TranslationTokens& tokens,
                                                const std::vector<std::vector<int32_t>>& sources,
                                                const TranslateOptions& o, TranslateStats* stats) {
  if (o.batch < 1) throw UsageError("--batch-size must be at least 1");
  if (o.beam < 1) throw UsageError("--beam must be at least 1 (1: greedy)");
  const bool beam = o.beam > 1 || o.beam_search;
  if (beam && !o.cache) throw UsageError("beam search runs with the KV cache only");
  const int T = o.window > 0 ? o.window : model.cfg.block_size, V = model.cfg.vocab_size;
  if (T > model.cfg.block_size || T < 3)
    throw UsageError(
        fmt::format("a decoding window of {} tokens: it must be 3 to the block size {}", T,
                    model.cfg.block_size));
  const size_t keep = size_t(std::max(1, (T - 1) / 2));
  TranslateStats st;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::vector<int32_t>> out(sources.size());
  std::optional<GptDecoder> dec;
  if (o.cache) dec.emplace(model, o.batch * o.beam, T);
  for (size_t first = 0; first < sources.size(); first += size_t(o.batch)) {
    const size_t count = std::min(sources.size() - first, size_t(o.batch));
    std::vector<std::vector<int32_t>> prompts(count), got(count);
    for (size_t i = 0; i < count; ++i) {
      std::vector<int32_t> p = sources[first + i];
      if (p.size() > keep) {
        p.resize(keep);
        ++st.cut_sources;
      }
      p.push_back(tokens.sep);
      prompts[i] = std::move(p);
    }
    if (beam)
      beam_cached(*dec, tokens, V, o.beam, prompts, got, st, T);
    else if (o.cache)
      greedy_cached(*dec, tokens, V, prompts, got, st, T);
    else
      greedy_full(model, tokens, V, prompts, got, st, T);
    for (size_t i = 0; i < count; ++i) out[first + i] = std::move(got[i]);
    if (o.progress) o.progress(int64_t(first + count), int64_t(sources.size()));
  }
  st.lines = int64_t(sources.size());
  st.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (stats) *stats = st;
  return out;
}

}  // namespace mpitron
