// AdamW, the learning-rate schedule and the gradient norm: against plain reference formulas, and
// the update of ZeRO shards against the update of the whole flat buffer (bit for bit).
#include <fmt/format.h>
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/gemm.hpp"
#include "src/cpu/adamw.hpp"
#include "src/cpu/step_ops.hpp"
#include "src/train/adamw.hpp"
#include "src/train/step_backend.hpp"

using namespace mpitron;

TEST(LearningRate, WarmupThenCosineToTheFloor) {
  EXPECT_DOUBLE_EQ(learning_rate(1, 1e-3, 10, 100, 0.1), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(10, 1e-3, 10, 100, 0.1), 1e-3);
  EXPECT_NEAR(learning_rate(55, 1e-3, 10, 100, 0.1), 1e-4 + 0.5 * 9e-4, 1e-15);  // half-way
  EXPECT_DOUBLE_EQ(learning_rate(100, 1e-3, 10, 100, 0.1), 1e-4);
  EXPECT_DOUBLE_EQ(learning_rate(150, 1e-3, 10, 100, 0.1), 1e-4);
  EXPECT_NEAR(learning_rate(1, 1e-3, 0, 100, 0.1), 1e-4 + 0.5 * 9e-4 * (1 + std::cos(M_PI / 100)),
              1e-15);  // no warm-up: cosine from step 0
  for (int s = 11; s < 100; ++s)
    EXPECT_LT(learning_rate(s + 1, 1e-3, 10, 100, 0.1), learning_rate(s, 1e-3, 10, 100, 0.1));
}

TEST(SumOfSquares, MatchesPlainSumAndIgnoresThreadCount) {
  std::mt19937 gen(3);
  std::normal_distribution<float> dist;
  for (size_t n : {0ul, 1ul, 63ul, 64ul, 65ul, 1000ul, 123457ul}) {
    std::vector<float> g(n);
    for (auto& x : g) x = dist(gen);
    double ref = 0;
    for (float x : g) ref += double(x) * double(x);
    cpu::set_compute_threads(1);
    const double one = cpu::sum_of_squares(g.data(), n);
    cpu::set_compute_threads(2);
    const double two = cpu::sum_of_squares(g.data(), n);
    EXPECT_NEAR(one, ref, 1e-12 * std::max(1.0, ref)) << n;
    EXPECT_EQ(one, two) << "thread count changed the bits, n=" << n;
  }
}

TEST(AdamW, MatchesReferenceAndShardsMatchTheWhole) {
  ParamRegistry reg;
  reg.add("w", {7, 5}, InitKind::normal, 0.1f, true);
  reg.add("b", {5}, InitKind::zeros, 0, false);
  reg.add("e", {3, 5}, InitKind::normal, 0.1f, false);
  const size_t n = reg.size();
  std::vector<float> p(n), g(n), m(n, 0.f), v(n, 0.f);
  reg.initialize(p.data(), 9);
  std::mt19937 gen(5);
  std::normal_distribution<float> dist;
  for (auto& x : g) x = dist(gen);
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  const double lr = 3e-3;
  const float scale = 0.5f;

  // Reference: PyTorch's AdamW formulas, in double, two steps.
  std::vector<double> rp(p.begin(), p.end()), rm(n, 0), rv(n, 0);
  std::vector<float> sp = p, sm = m, sv = v;  // sharded copy
  const std::vector<AdamWTensor> tensors = adamw_tensors(reg);
  for (int64_t t = 1; t <= 2; ++t) {
    for (const ParamInfo& info : reg.params())
      for (size_t i = info.offset; i < info.offset + info.numel; ++i) {
        const double gi = double(g[i]) * scale;
        rm[i] = cfg.beta1 * rm[i] + (1 - cfg.beta1) * gi;
        rv[i] = cfg.beta2 * rv[i] + (1 - cfg.beta2) * gi * gi;
        const double mhat = rm[i] / (1 - std::pow(cfg.beta1, t));
        const double vhat = rv[i] / (1 - std::pow(cfg.beta2, t));
        const double decay = info.weight_decay ? cfg.weight_decay : 0.0;
        rp[i] = rp[i] * (1 - lr * decay) - lr * mhat / (std::sqrt(vhat) + cfg.eps);
      }
    cpu::adamw_update(tensors, {0, n, p.data(), 0, g.data(), 0, m.data(), v.data(), 0}, cfg, lr,
                      scale, t);
    // Three uneven shards, each with moments starting at its own first element.
    const size_t cuts[] = {0, 13, 40, n};
    for (int k = 0; k < 3; ++k) {
      const size_t b = cuts[k], e = cuts[k + 1];
      cpu::adamw_update(tensors,
                        {b, e, sp.data(), 0, g.data() + b, b, sm.data() + b, sv.data() + b, b}, cfg,
                        lr, scale, t);
    }
  }
  for (const ParamInfo& info : reg.params())
    for (size_t i = info.offset; i < info.offset + info.numel; ++i) {
      EXPECT_NEAR(p[i], rp[i], 1e-6 * std::max(1.0, std::fabs(rp[i]))) << info.name << " " << i;
      EXPECT_EQ(p[i], sp[i]) << "shard update differs at " << i;
      EXPECT_EQ(m[i], sm[i]);
      EXPECT_EQ(v[i], sv[i]);
    }
}

// adamw_update (constants folded, one parallel region) against the simple path it replaced, over
// many tensors with and without decay and a range that starts and ends inside tensors: within a
// few ulps of it, and the same bits at 1 to 4 threads.
TEST(AdamW, FastPathMatchesTheSimplePathAtAnyThreadCount) {
  ParamRegistry reg;
  for (int k = 0; k < 12; ++k)
    reg.add(fmt::format("t{}", k), {37L * k + 5, 41}, InitKind::normal, 0.1f, k % 3 != 1);
  const size_t n = reg.size(), begin = 100, end = n - 77;
  std::vector<float> p(n);
  reg.initialize(p.data(), 4);
  std::mt19937 gen(8);
  std::normal_distribution<float> dist;
  std::vector<float> g(n), m0(n), v0(n);
  for (size_t i = 0; i < n; ++i) {
    g[i] = dist(gen);
    m0[i] = 0.1f * dist(gen);
    v0[i] = 0.01f * std::fabs(dist(gen));
  }
  const AdamWConfig cfg{0.9, 0.95, 1e-8, 0.1};
  const std::vector<AdamWTensor> tensors = adamw_tensors(reg);
  std::vector<float> rp = p, rm = m0, rv = v0;
  for (int64_t t = 1; t <= 3; ++t)
    cpu::adamw_update_reference(tensors,
                                {begin, end, rp.data(), 0, g.data(), 0, rm.data(), rv.data(), 0},
                                cfg, 1e-3, 0.7f, t);
  std::vector<float> first;
  for (int threads = 1; threads <= 4; ++threads) {
    cpu::set_compute_threads(threads);
    std::vector<float> fp = p, fm = m0, fv = v0;
    for (int64_t t = 1; t <= 3; ++t)
      cpu::adamw_update(tensors, {begin, end, fp.data(), 0, g.data(), 0, fm.data(), fv.data(), 0},
                        cfg, 1e-3, 0.7f, t);
    for (size_t i = 0; i < n; ++i) {
      if (i < begin || i >= end) {
        ASSERT_EQ(fp[i], p[i]) << "outside the range, element " << i;
        continue;
      }
      ASSERT_NEAR(fp[i], rp[i], 1e-6 * std::max(1e-2f, std::fabs(rp[i]))) << i;  // 8 ulps
      ASSERT_EQ(fm[i], rm[i]) << i;  // the moments' arithmetic is unchanged
      ASSERT_EQ(fv[i], rv[i]) << i;
    }
    if (threads == 1)
      first = fp;
    else
      ASSERT_EQ(first, fp) << "other bits at " << threads << " threads";
  }
  cpu::set_compute_threads(1);
}
