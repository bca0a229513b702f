// Translation pairs and decoding: the rows source [SEP] target [END] [PAD]... and their loss spans
// against a reference written here, the batch drawn alike whichever rank fills which rows, the
// pair folder's errors; the GPT's masked loss (a sum over its span's positions alone); and the
// KV-cache decoder against the full forward (logits, greedy tokens, beam width 1 = greedy).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/allocator.hpp"
#include "base/check.hpp"
#include "io/pair_dataset.hpp"
#include "src/model/family.hpp"
#include "src/model/gpt.hpp"
#include "src/model/gpt_decoder.hpp"
#include "src/task/translation.hpp"

using namespace mpitron;
using namespace mpitron::io;
namespace fs = std::filesystem;

namespace {

const PairTokens kTok{256, 257, 258};
const TranslationTokens kSpecials{kTok.sep, kTok.end, kTok.pad};

// The row as the format states it: the sequence source' [SEP] target' [END], cut to T + 1 tokens
// by keeping at least min(source, (T - 1) / 2) source tokens, [END] only when the whole target
// fits; position t is a loss term when token t + 1 belongs to the target or is [END].
struct Expected {
  std::vector<int32_t> row;
  std::vector<bool> counts;
};

Expected reference_row(const std::vector<int32_t>& src, const std::vector<int32_t>& tgt, int T) {
  // Try every source length from the longest down; the first whose sequence fits (with the target
  // cut to what is left) and keeps the source's required share wins.
  const size_t min_src = std::min(src.size(), size_t((T - 1) / 2));
  for (size_t s = src.size();; --s) {
    std::vector<int32_t> seq(src.begin(), src.begin() + s);
    seq.push_back(kTok.sep);
    const size_t first_target = seq.size();
    if (seq.size() > size_t(T) + 1) continue;  // not even the source and [SEP] fit
    const size_t room = size_t(T) + 1 - seq.size();
    const bool whole = tgt.size() + 1 <= room;
    const size_t g = whole ? tgt.size() : std::min(tgt.size(), room);
    if (!whole && s > min_src) {
      if (s == 0) break;
      continue;  // cut the source further before the target
    }
    seq.insert(seq.end(), tgt.begin(), tgt.begin() + g);
    if (whole) seq.push_back(kTok.end);
    Expected e;
    e.counts.assign(size_t(T), false);
    for (size_t t = 0; t + 1 < seq.size(); ++t) e.counts[t] = t + 1 >= first_target;
    seq.resize(size_t(T) + 1, kTok.pad);
    e.row = seq;
    return e;
  }
  return {};
}

std::vector<int32_t> random_ids(std::mt19937& g, size_t n) {
  std::uniform_int_distribution<int32_t> d(0, 255);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

fs::path pair_folder(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("mpitron_pairs_" + std::to_string(getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

void write(const fs::path& p, const std::string& text) {
  std::ofstream(p) << text;
}

// A folder "xx-yy" of n training and m validation pairs "s<k>" -> "t<k> t<k>".
fs::path small_pairs(int n, int m) {
  const fs::path dir = pair_folder("xx-yy");
  std::string ts, tt, vs, vt;
  for (int k = 0; k < n; ++k) ts += fmt::format("s{}\n", k), tt += fmt::format("t{0} t{0}\n", k);
  for (int k = 0; k < m; ++k) vs += fmt::format("v{}\n", k), vt += fmt::format("w{}\n", k);
  write(dir / "train.xx", ts);
  write(dir / "train.yy", tt);
  write(dir / "valid.xx", vs);
  write(dir / "valid.yy", vt);
  return dir;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const UsageError& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST(PairRows, MatchTheReferenceForShortAndCutPairs) {
  std::mt19937 g(5);
  const int T = 16;
  int cut = 0;
  for (int trial = 0; trial < 400; ++trial) {
    const std::vector<int32_t> src = random_ids(g, size_t(g() % 24)),
                               tgt = random_ids(g, size_t(g() % 24));
    std::vector<int32_t> row(T + 1, -7), span(2, -7);
    pair_row(src.data(), int64_t(src.size()), tgt.data(), int64_t(tgt.size()), kTok, T, row.data(),
             span.data());
    const Expected e = reference_row(src, tgt, T);
    ASSERT_EQ(row, e.row) << "source " << src.size() << ", target " << tgt.size();
    for (int t = 0; t < T; ++t)
      ASSERT_EQ(t >= span[0] && t < span[1], bool(e.counts[size_t(t)]))
          << "position " << t << ", source " << src.size() << ", target " << tgt.size();
    cut += src.size() + tgt.size() + 2 > size_t(T) + 1;
  }
  EXPECT_GT(cut, 100);  // the cut rule was exercised
}

TEST(PairRows, AnyRankSliceIsTheBatchsRowsAndLossTermsSumTheSpans) {
  const PairDataset d = load_pair_dataset(small_pairs(50, 6).string());
  ASSERT_EQ(d.train.pairs(), 50);
  ASSERT_EQ(d.source, "xx");
  ASSERT_EQ(d.target, "yy");
  ASSERT_EQ(d.val_references[2], "w2");
  const int T = 12, rows = 10;
  std::vector<int32_t> all(size_t(rows) * (T + 1)), spans(size_t(rows) * 2);
  fill_pair_batch(d, Split::train, 3, 7, 0, rows, T, all.data(), spans.data());
  int64_t terms = 0;
  for (int r = 0; r < rows; ++r) terms += spans[size_t(2 * r + 1)] - spans[size_t(2 * r)];
  EXPECT_EQ(pair_batch_loss_terms(d, Split::train, 3, 7, rows, T), terms);
  for (int first : {0, 3, 7}) {
    const int n = std::min(4, rows - first);
    std::vector<int32_t> part(size_t(n) * (T + 1)), pspans(size_t(n) * 2);
    fill_pair_batch(d, Split::train, 3, 7, first, n, T, part.data(), pspans.data());
    EXPECT_TRUE(std::equal(part.begin(), part.end(), all.begin() + size_t(first) * (T + 1)));
    EXPECT_TRUE(std::equal(pspans.begin(), pspans.end(), spans.begin() + 2 * first));
  }
  // Another step draws other pairs.
  std::vector<int32_t> other(all.size()), ospans(spans.size());
  fill_pair_batch(d, Split::train, 3, 8, 0, rows, T, other.data(), ospans.data());
  EXPECT_NE(other, all);
}

// Length buckets: runs of equal count over the pairs sorted by length; a batch's rows all from one
// bucket; its positions its longest row's, rounded up to 8; rows filled at that length the first
// positions of rows filled at T, with the same spans.
TEST(PairRows, LengthBucketsDrawABatchFromOneBucketAtItsLongestRow) {
  const fs::path dir = pair_folder("ab-cd");
  std::string a, b;
  for (int k = 0; k < 60; ++k) {
    a += std::string(size_t(1 + (k * 7) % 37), 'a') + "\n";
    b += std::string(size_t(1 + (k * 11) % 23), 'b') + "\n";
  }
  write(dir / "train.ab", a);
  write(dir / "train.cd", b);
  write(dir / "valid.ab", "a\n");
  write(dir / "valid.cd", "b\n");
  PairDataset d = load_pair_dataset(dir.string());
  EXPECT_NE(error_of([&] { pair_length_buckets(d.train, 61); }).find("length_buckets = 61"),
            std::string::npos);
  d.train_buckets = pair_length_buckets(d.train, 4);
  ASSERT_EQ(d.train_buckets.bounds, (std::vector<int64_t>{0, 15, 30, 45, 60}));
  auto length = [&](int64_t k) {
    return d.train.begin[size_t(2 * k + 2)] - d.train.begin[size_t(2 * k)] + 2;
  };
  std::vector<std::pair<int64_t, int64_t>> range;  // each bucket's shortest and longest pair
  for (int q = 0; q < 4; ++q)
    range.emplace_back(length(d.train_buckets.order[size_t(d.train_buckets.bounds[q])]),
                       length(d.train_buckets.order[size_t(d.train_buckets.bounds[q + 1] - 1)]));
  for (size_t i = 1; i < d.train_buckets.order.size(); ++i)
    ASSERT_LE(length(d.train_buckets.order[i - 1]), length(d.train_buckets.order[i]));
  const int T = 64, rows = 6;  // no pair is cut (at most 37 + 23 + 2 tokens)
  std::set<int> lengths_seen;
  for (int64_t index = 0; index < 40; ++index) {
    const int Tm = pair_batch_seq_len(d, Split::train, 3, index, rows, T, 8);
    lengths_seen.insert(Tm);
    std::vector<int32_t> full(size_t(rows) * (T + 1)), short_rows(size_t(rows) * (Tm + 1));
    std::vector<int32_t> full_spans(size_t(rows) * 2), short_spans(size_t(rows) * 2);
    fill_pair_batch(d, Split::train, 3, index, 0, rows, T, full.data(), full_spans.data());
    fill_pair_batch(d, Split::train, 3, index, 0, rows, Tm, short_rows.data(), short_spans.data());
    EXPECT_EQ(short_spans, full_spans);
    int64_t shortest = T + 1, longest = 0;
    for (int r = 0; r < rows; ++r) {
      const int32_t* row = full.data() + size_t(r) * (T + 1);
      const int64_t n = std::find(row, row + T + 1, kTok.end) - row + 1;  // through [END]
      shortest = std::min(shortest, n);
      longest = std::max(longest, n);
      ASSERT_TRUE(std::equal(row, row + Tm + 1, short_rows.data() + size_t(r) * (Tm + 1)));
      ASSERT_TRUE(std::all_of(row + Tm + 1, row + T + 1, [](int32_t x) { return x == kTok.pad; }));
    }
    EXPECT_EQ(Tm, std::min<int64_t>(T, (longest - 1 + 7) / 8 * 8)) << "batch " << index;
    EXPECT_TRUE(
        std::any_of(range.begin(), range.end(),
                    [&](const auto& q) { return q.first <= shortest && longest <= q.second; }))
        << "batch " << index << ": lengths " << shortest << " to " << longest;
  }
  EXPECT_GE(lengths_seen.size(), 3u);
  EXPECT_EQ(pair_batch_seq_len(d, Split::val, 3, 0, 1, T, 8), 8);  // "a" [SEP] "b" [END]
}

TEST(PairRows, BadFoldersGetClearErrors) {
  const fs::path dir = small_pairs(5, 2);
  write(dir / "valid.yy", "w0\n");  // one line short
  EXPECT_NE(error_of([&] { load_pair_dataset(dir.string()); }).find("valid.xx has 2 lines but"),
            std::string::npos);
  write(dir / "valid.yy", "w0\n\n");
  EXPECT_NE(error_of([&] { load_pair_dataset(dir.string()); }).find("valid.yy:2: an empty line"),
            std::string::npos);
  fs::remove(dir / "valid.yy");
  EXPECT_NE(error_of([&] { load_pair_dataset(dir.string()); }).find("valid.yy does not exist"),
            std::string::npos);
  const fs::path plain = pair_folder("plain");
  EXPECT_NE(error_of([&] { load_pair_dataset(plain.string()); }).find("<source>-<target>"),
            std::string::npos);
}

// A question-answer folder: train.qa and valid.qa lines "question⁇answer" are pairs whose loss
// span covers the answer and [END] alone.
TEST(QuestionAnswerPairs, LoadAsPairsWithTheLossOnTheAnswerOnly) {
  const fs::path dir = pair_folder("kjv-qa");
  write(dir / "train.qa",
        "Who was the father of Cainan?\u2047Enos\nWho was the father of Enos?\u2047Seth\n");
  write(dir / "valid.qa", "Who was the father of Seth?\u2047Adam\n");
  const PairDataset d = load_pair_dataset(dir.string());
  EXPECT_TRUE(d.qa);
  EXPECT_EQ(d.source, "question");
  EXPECT_EQ(d.train.pairs(), 2);
  EXPECT_EQ(d.val_sources, std::vector<std::string>{"Who was the father of Seth?"});
  EXPECT_EQ(d.val_references, std::vector<std::string>{"Adam"});
  EXPECT_EQ(d.train_answers, (std::vector<std::string>{"Enos", "Seth"}));
  const int T = 40;
  std::vector<int32_t> row(T + 1), span(2);
  const auto& v = d.val;
  pair_row(v.ids.data(), v.begin[1], v.ids.data() + v.begin[1], v.begin[2] - v.begin[1], kTok, T,
           row.data(), span.data());
  const std::string q = "Who was the father of Seth?";
  EXPECT_EQ(span[0], int(q.size()));  // [SEP]'s position predicts the answer's first byte
  std::string predicted;
  for (int t = span[0]; t < span[1]; ++t)
    predicted += row[size_t(t) + 1] == kTok.end ? '$' : char(row[size_t(t) + 1]);
  EXPECT_EQ(predicted, "Adam$");  // the answer and [END], nothing of the question
  for (const char* bad : {"Who was the father of Seth? Adam\n", "Who?\u2047Adam\u2047Seth\n",
                          "Who was the father of Seth?\u2047\n"}) {
    write(dir / "valid.qa", bad);
    const std::string e = error_of([&] { load_pair_dataset(dir.string()); });
    EXPECT_NE(e.find("valid.qa:1:"), std::string::npos) << bad << " -> " << e;
  }
}

TEST(QuestionAnswerPairs, ExactMatchAndTheMostCommonAnswer) {
  const ExactMatch m = exact_match({"Enos", " Seth ", "Adam", ""}, {"Enos", "Seth", "Noah", "Adam"},
                                   {"Adam", "Noah", "Adam", "Seth"});
  EXPECT_EQ(m.correct, 2);
  EXPECT_EQ(m.total, 4);
  EXPECT_EQ(m.majority, "Adam");
  EXPECT_EQ(m.majority_correct, 1);
  EXPECT_DOUBLE_EQ(m.rate(), 0.5);
  EXPECT_DOUBLE_EQ(m.majority_rate(), 0.25);
}

namespace {

std::unique_ptr<Model> tiny_gpt(int rows, int T, DeviceAllocator& alloc) {
  ModelConfig m = default_model_config("gpt");
  m.dims["n_layer"] = 2;
  m.dims["n_head"] = 2;
  m.dims["n_embd"] = 32;
  m.dims["block_size"] = 24;
  m.dims["vocab_size"] = 259;
  m.dims["task"] = 1;
  ModelBuild how;
  how.micro_rows = rows;
  how.seq_len = T;
  how.seed = 11;
  how.alloc = &alloc;
  return build_model(m, how);
}

}  // namespace

// The masked loss is a sum over the span's positions alone: the spans [t, t+1) one at a time add
// up to the whole span.
TEST(PairLoss, MaskedLossSumsOnlyTheSpansPositions) {
  DeviceAllocator alloc;
  const int T = 24, rows = 2;
  auto model = tiny_gpt(rows, T, alloc);
  std::mt19937 g(3);
  std::vector<int32_t> tokens = random_ids(g, size_t(rows) * (T + 1));
  std::vector<int32_t> spans = {3, 15, 0, 24};
  MicroBatch mb;
  mb.samples = {tokens.data(), nullptr, nullptr, rows};
  mb.samples.loss_spans = spans.data();
  const double whole = model->forward(mb);
  double parts = 0;
  std::vector<int32_t> one(4);
  for (int t = 0; t < T; ++t) {
    one = {t, t + 1, 0, 0};  // row 1: an empty span
    if (t < 3 || t >= 15) one[1] = one[0];
    mb.samples.loss_spans = one.data();
    parts += model->forward(mb);
    one = {0, 0, t, t + 1};
    parts += model->forward(mb);
  }
  EXPECT_NEAR(whole, parts, 1e-4 * std::abs(whole));
  std::vector<int32_t> none = {0, 0, 5, 5};
  mb.samples.loss_spans = none.data();
  EXPECT_EQ(model->forward(mb), 0.0);
}

// The LM head on the loss rows alone (moved together, then back) gives the losses and gradients of
// the head over every row: with dropout, an empty span, the chunked head, and no loss row at all.
TEST(PairLoss, HeadOnTheLossRowsMatchesTheHeadOnEveryRow) {
  const int T = 24, rows = 3;
  std::mt19937 g(5);
  const std::vector<int32_t> tokens = random_ids(g, size_t(rows) * (T + 1));
  struct Run {
    double loss;
    std::vector<float> grads;
  };
  auto run = [&](bool on_loss_rows, int head_chunk_rows, const std::vector<int32_t>& spans) {
    DeviceAllocator alloc;
    ModelConfig m = default_model_config("gpt");
    m.dims["n_layer"] = 2;
    m.dims["n_head"] = 2;
    m.dims["n_embd"] = 32;
    m.dims["block_size"] = T;
    m.dims["vocab_size"] = 259;
    m.dims["task"] = 1;
    ModelBuild how;
    how.micro_rows = rows;
    how.seq_len = T;
    how.seed = 11;
    how.alloc = &alloc;
    how.head_on_loss_rows = on_loss_rows;
    how.head_chunk_rows = head_chunk_rows;
    auto model = build_model(m, how);
    Run r;
    r.grads.assign(model->flat_size, 0.0f);
    float* gp = r.grads.data();
    model->bind_gradients([gp](size_t offset) { return gp + offset; });
    MicroBatch mb;
    mb.samples = {tokens.data(), nullptr, nullptr, rows};
    mb.samples.loss_spans = spans.data();
    mb.training = true;
    mb.dropout = 0.1f;
    mb.seed = 7;
    mb.step = 3;
    r.loss = model->forward(mb);
    model->backward(mb, 0.01f, {});
    if (on_loss_rows) {
      EXPECT_THROW(model->output(0), std::exception);
    }
    return r;
  };
  const std::vector<std::vector<int32_t>> span_sets = {
      {3, 15, 0, 0, 10, 24}, {0, 24, 0, 24, 0, 24}, {5, 6, 0, 0, 23, 24}, {0, 0, 7, 7, 0, 0}};
  for (const auto& spans : span_sets)
    for (const int chunk : {0, 5}) {
      const Run every = run(false, chunk, spans), loss_rows = run(true, chunk, spans);
      EXPECT_NEAR(loss_rows.loss, every.loss, 1e-6 * std::abs(every.loss))
          << "spans " << spans[0] << " chunk " << chunk;
      double worst = 0, scale = 0;
      for (size_t i = 0; i < every.grads.size(); ++i) {
        worst = std::max(worst, double(std::abs(loss_rows.grads[i] - every.grads[i])));
        scale = std::max(scale, double(std::abs(every.grads[i])));
      }
      EXPECT_LE(worst, 1e-5 * scale) << "spans " << spans[0] << " chunk " << chunk;
      if (spans[1] == 0) {
        EXPECT_EQ(loss_rows.loss, 0.0);
        EXPECT_EQ(scale, 0.0);  // no loss term: no gradient anywhere
      } else {
        EXPECT_GT(scale, 0.0);
      }
    }
}

// A micro-batch of rows shorter than the model was built for (SampleView::seq_len: a batch of
// short pairs) trains as a model built for that length: the same loss and gradients.
TEST(PairLoss, ShortRowsTrainAsAModelBuiltForThem) {
  const int T = 24, Tm = 16, rows = 3;
  std::mt19937 g(9);
  const std::vector<int32_t> tokens = random_ids(g, size_t(rows) * (Tm + 1));
  const std::vector<int32_t> spans = {3, 15, 0, 0, 10, 16};
  auto run = [&](int built_for, int view_len, std::vector<float>& grads) {
    DeviceAllocator alloc;
    ModelConfig m = default_model_config("gpt");
    m.dims["n_layer"] = 2;
    m.dims["n_head"] = 2;
    m.dims["n_embd"] = 32;
    m.dims["block_size"] = T;
    m.dims["vocab_size"] = 259;
    m.dims["task"] = 1;
    ModelBuild how;
    how.micro_rows = rows;
    how.seq_len = built_for;
    how.seed = 11;
    how.alloc = &alloc;
    auto model = build_model(m, how);
    grads.assign(model->flat_size, 0.0f);
    float* gp = grads.data();
    model->bind_gradients([gp](size_t offset) { return gp + offset; });
    MicroBatch mb;
    mb.samples = {tokens.data(), nullptr, nullptr, rows};
    mb.samples.loss_spans = spans.data();
    mb.samples.seq_len = view_len;
    mb.training = true;
    mb.dropout = 0.1f;
    mb.seed = 7;
    mb.step = 2;
    mb.first_sample = 5;
    const double loss = model->forward(mb);
    model->backward(mb, 0.01f, {});
    return loss;
  };
  std::vector<float> built_grads, short_grads;
  const double built = run(Tm, 0, built_grads), short_rows = run(T, Tm, short_grads);
  EXPECT_GT(built, 0.0);
  EXPECT_EQ(short_rows, built);
  EXPECT_EQ(short_grads, built_grads);
}

TEST(KvCacheDecoder, LogitsAndGreedyTokensMatchTheFullForward) {
  DeviceAllocator alloc;
  const int T = 24, rows = 3;
  auto full = tiny_gpt(rows, T, alloc);
  auto& gpt = dynamic_cast<GptModel&>(*full);
  std::mt19937 g(8);
  // Prefill rows of different lengths, then two steps of one token each.
  const std::vector<int> lengths = {5, 9, 2};
  std::vector<int32_t> feed(size_t(rows) * 9, kTok.pad), take(rows);
  std::vector<std::vector<int32_t>> seqs(rows);
  for (int b = 0; b < rows; ++b) {
    seqs[size_t(b)] = random_ids(g, size_t(lengths[size_t(b)]));
    std::copy(seqs[size_t(b)].begin(), seqs[size_t(b)].end(), feed.begin() + b * 9);
    take[size_t(b)] = lengths[size_t(b)] - 1;
  }
  GptDecoder dec(gpt, rows);
  std::vector<float> logits(size_t(rows) * 259);
  dec.feed(feed.data(), 9, take.data(), logits.data());
  for (int step = 0; step < 3; ++step) {
    std::vector<int32_t> window(size_t(rows) * (T + 1), kTok.pad);
    for (int b = 0; b < rows; ++b)
      std::copy(seqs[size_t(b)].begin(), seqs[size_t(b)].end(), window.begin() + b * (T + 1));
    MicroBatch mb;
    mb.samples = {window.data(), nullptr, nullptr, rows};
    full->forward(mb);
    const ModelOutput out = full->output(0);
    for (int b = 0; b < rows; ++b) {
      const float* want = out.logits + (size_t(b) * T + seqs[size_t(b)].size() - 1) * 259;
      for (int v = 0; v < 259; ++v)
        ASSERT_NEAR(logits[size_t(b) * 259 + v], want[v], 2e-5)
            << "step " << step << " row " << b << " id " << v;
      EXPECT_EQ(dec.position(b), int(seqs[size_t(b)].size()));
    }
    std::vector<int32_t> next(rows), zero(rows, 0);
    for (int b = 0; b < rows; ++b) {
      next[size_t(b)] = int32_t(g() % 256);
      seqs[size_t(b)].push_back(next[size_t(b)]);
    }
    dec.feed(next.data(), 1, zero.data(), logits.data());
  }
}

TEST(KvCacheDecoder, GreedyWithAndWithoutTheCacheAndBeamOneAgree) {
  DeviceAllocator alloc;
  const int T = 24;
  auto model = tiny_gpt(4, T, alloc);
  auto& gpt = dynamic_cast<GptModel&>(*model);
  std::mt19937 g(13);
  std::vector<std::vector<int32_t>> sources;
  for (int k = 0; k < 7; ++k) sources.push_back(random_ids(g, size_t(1 + g() % 15)));
  TranslateOptions cached, full, beam1;
  cached.batch = 3;
  full.batch = 4;
  full.cache = false;
  beam1.batch = 2;
  beam1.beam_search = true;
  TranslateStats st;
  const auto a = translate_ids(gpt, kSpecials, sources, cached, &st);
  const auto b = translate_ids(gpt, kSpecials, sources, full, nullptr);
  const auto c = translate_ids(gpt, kSpecials, sources, beam1, nullptr);
  EXPECT_EQ(a, b);
  EXPECT_EQ(a, c);
  EXPECT_GT(st.new_tokens, 0);
  EXPECT_GT(st.cut_sources, 0);  // sources longer than (T - 1) / 2 = 11 tokens
  TranslateOptions beam3;
  beam3.beam = 3;
  const auto d = translate_ids(gpt, kSpecials, sources, beam3, nullptr);
  ASSERT_EQ(d.size(), sources.size());
}
