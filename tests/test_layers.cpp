// Gradient checks of every CPU layer against central finite differences in double precision, with
// L = sum(G * out) for a random upstream gradient G, plus the gradient rule (+= / =), aliasing,
// the dropout mask, the attention padding mask and thread-count determinism.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <random>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "layers/attention.hpp"
#include "layers/crossentropy.hpp"
#include "layers/dropout.hpp"
#include "layers/embedding.hpp"
#include "layers/gelu.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/relu.hpp"
#include "layers/residual.hpp"
#include "tests/grad_check.hpp"

namespace mpitron::cpu {
namespace {

using namespace grad_check;  // NOLINT: the shared helpers and constants

constexpr int B = 2, T = 5, C = 8, NH = 2, V = 11, N = B * T;

std::vector<int32_t> randint(size_t n, int hi, std::mt19937& g) {
  std::uniform_int_distribution<int32_t> d(0, hi - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = d(g);
  return v;
}

// ---- gradient checks ----------------------------------------------------------------------------

TEST(LayerGradCheck, Encoder) {
  std::mt19937 g(1);
  const int maxT = T + 3;  // rows of wpe past T get no gradient
  Vec wte = randn(V * C, g), wpe = randn(maxT * C, g), G = randn(N * C, g), out(N * C);
  std::vector<int32_t> tokens = randint(N, V, g);
  tokens[7] = tokens[2];  // a repeated token: its dwte row sums two contributions
  auto loss = [&] {
    embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return dot(G, out);
  };
  Vec dwte(V * C, kPrefill), dwpe(maxT * C, kPrefill);
  embedding_backward(dwte.data(), dwpe.data(), G.data(), tokens.data(), B, T, C);
  EXPECT_LT(grad_error(loss, wte, minus(dwte, kPrefill)), kTol);
  EXPECT_LT(grad_error(loss, wpe, minus(dwpe, kPrefill)), kTol);
  for (int i = T * C; i < maxT * C; ++i) EXPECT_EQ(dwpe[i], kPrefill);
}

TEST(LayerGradCheck, LayerNorm) {
  std::mt19937 g(2);
  Vec inp = randn(N * C, g, 2.0, 0.5), w = randn(C, g, 0.5, 1.0), b = randn(C, g),
      G = randn(N * C, g);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C);
    return dot(G, out);
  };
  loss();
  for (int n = 0; n < N; ++n) {  // statistics: biased variance, eps 1e-5
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += inp[n * C + c] / C;
    for (int c = 0; c < C; ++c) v += (inp[n * C + c] - m) * (inp[n * C + c] - m) / C;
    EXPECT_NEAR(mean[n], m, 1e-12);
    EXPECT_NEAR(rstd[n], 1.0 / std::sqrt(v + 1e-5), 1e-12);
  }
  Vec dinp(N * C, kPrefill), dw(C, kPrefill), db(C, kPrefill);
  layernorm_backward(dinp.data(), dw.data(), db.data(), G.data(), inp.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  EXPECT_LT(grad_error(loss, inp, minus(dinp, kPrefill)), kTol);
  EXPECT_LT(grad_error(loss, w, minus(dw, kPrefill)), kTol);
  EXPECT_LT(grad_error(loss, b, minus(db, kPrefill)), kTol);
}

void check_linear(bool with_bias) {
  std::mt19937 g(3);
  const int IC = C, OC = 3 * C;
  Vec inp = randn(N * IC, g), w = randn(OC * IC, g, 0.3), b = randn(OC, g), G = randn(N * OC, g);
  Vec out(N * OC);
  auto loss = [&] {
    linear_forward(out.data(), inp.data(), w.data(), with_bias ? b.data() : nullptr, N, IC, OC);
    return dot(G, out);
  };
  Vec dinp(N * IC, kNaN), dw(OC * IC, kPrefill), db(OC, kPrefill);
  linear_backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, G.data(), inp.data(),
                  w.data(), N, IC, OC);
  EXPECT_LT(grad_error(loss, inp, dinp), kTol);
  EXPECT_LT(grad_error(loss, w, minus(dw, kPrefill)), kTol);
  if (with_bias) {
    EXPECT_LT(grad_error(loss, b, minus(db, kPrefill)), kTol);
  } else {
    for (double x : db) EXPECT_EQ(x, kPrefill);
  }
  // dinp == nullptr skips the input gradient and still accumulates the weight gradient.
  Vec dw2(OC * IC, kPrefill);
  linear_backward<double>(nullptr, dw2.data(), nullptr, G.data(), inp.data(), w.data(), N, IC, OC);
  for (int i = 0; i < OC * IC; ++i) EXPECT_NEAR(dw2[i], dw[i], 1e-12);
  // The split form tensor parallelism overlaps a collective in: the input product alone (dweight
  // and dbias nullptr), then the weight products alone (dinp nullptr), the bits of one call.
  Vec dinp3(N * IC, kNaN), dw3(OC * IC, kPrefill), db3(OC, kPrefill);
  linear_backward<double>(dinp3.data(), nullptr, nullptr, G.data(), nullptr, w.data(), N, IC, OC);
  linear_backward<double>(nullptr, dw3.data(), with_bias ? db3.data() : nullptr, G.data(),
                          inp.data(), nullptr, N, IC, OC);
  EXPECT_EQ(dinp3, dinp);
  EXPECT_EQ(dw3, dw);
  EXPECT_EQ(db3, db);
}

TEST(LayerGradCheck, LinearWithBias) {
  check_linear(true);
}
TEST(LayerGradCheck, LinearWithoutBias) {
  check_linear(false);
}

void check_attention(bool causal) {
  std::mt19937 g(causal ? 4 : 5);
  Vec qkv = randn(N * 3 * C, g), G = randn(N * C, g), out(N * C), att(B * NH * T * T);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, causal);
    return dot(G, out);
  };
  loss();
  for (int r = 0; r < B * NH * T; ++r) {  // rows of P are distributions, masked entries 0
    const int i = r % T;
    double sum = 0;
    for (int j = 0; j < T; ++j) {
      const double p = att[r * T + j];
      if (causal && j > i) {
        EXPECT_EQ(p, 0.0);
      } else {
        EXPECT_GT(p, 0.0);
      }
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  Vec dqkv(N * 3 * C, kNaN), datt(B * NH * T * T, kNaN);
  attention_backward(dqkv.data(), datt.data(), G.data(), qkv.data(), att.data(), B, T, C, NH,
                     causal);
  EXPECT_LT(grad_error(loss, qkv, dqkv), kTol);
}

TEST(LayerGradCheck, AttentionCausal) {
  check_attention(true);
}
TEST(LayerGradCheck, AttentionBidirectional) {
  check_attention(false);
}

// Keys j >= L (the sequence's length) get probability 0 for every query, causal or not; queries at
// padded positions still attend over the valid keys.
int visible_keys(int i, int L, bool causal) {
  return causal ? std::min(i + 1, L) : L;
}

void check_attention_padded(bool causal) {
  std::mt19937 g(causal ? 15 : 16);
  const std::vector<int32_t> lengths = {3, T};  // one padded sequence, one full
  Vec qkv = randn(N * 3 * C, g), G = randn(N * C, g), out(N * C), att(B * NH * T * T, kNaN);
  auto loss = [&] {
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, causal, lengths.data());
    return dot(G, out);
  };
  loss();
  for (int r = 0; r < B * NH * T; ++r) {
    const int i = r % T, b = r / (NH * T), len = visible_keys(i, lengths[b], causal);
    double sum = 0;
    for (int j = 0; j < T; ++j) {
      const double p = att[r * T + j];
      if (j < len) {
        EXPECT_GT(p, 0.0);
      } else {
        EXPECT_EQ(p, 0.0) << "b " << b << " i " << i << " j " << j;
      }
      sum += p;
    }
    EXPECT_NEAR(sum, 1.0, 1e-12);
  }
  Vec dqkv(N * 3 * C, kNaN), datt(B * NH * T * T, kNaN);
  attention_backward(dqkv.data(), datt.data(), G.data(), qkv.data(), att.data(), B, T, C, NH,
                     causal, lengths.data());
  EXPECT_LT(grad_error(loss, qkv, dqkv), kTol);
  for (int t = lengths[0]; t < T; ++t)  // padded keys and values: no gradient
    for (int c = C; c < 3 * C; ++c) EXPECT_EQ(dqkv[t * 3 * C + c], 0.0);
}

TEST(LayerGradCheck, AttentionCausalPadded) {
  check_attention_padded(true);
}
TEST(LayerGradCheck, AttentionBidirectionalPadded) {
  check_attention_padded(false);
}

TEST(LayerGradCheck, Gelu) {
  std::mt19937 g(6);
  Vec inp = randn(N * C, g, 2.0), G = randn(N * C, g), out(N * C);
  auto loss = [&] {
    gelu_forward(out.data(), inp.data(), inp.size());
    return dot(G, out);
  };
  loss();
  for (size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    EXPECT_NEAR(out[i], 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))),
                1e-14);
  }
  Vec dinp(N * C, kNaN);
  gelu_backward(dinp.data(), G.data(), inp.data(), inp.size());
  EXPECT_LT(grad_error(loss, inp, dinp), kTol);
}

TEST(LayerGradCheck, GeluErf) {
  std::mt19937 g(16);
  Vec inp = randn(N * C, g, 2.0), G = randn(N * C, g), out(N * C);
  auto loss = [&] {
    gelu_erf_forward(out.data(), inp.data(), inp.size());
    return dot(G, out);
  };
  loss();
  for (size_t i = 0; i < inp.size(); ++i) {
    const double x = inp[i];
    EXPECT_NEAR(out[i], 0.5 * x * std::erfc(-x / std::sqrt(2.0)), 1e-14);
  }
  Vec dinp(N * C, kNaN);
  gelu_erf_backward(dinp.data(), G.data(), inp.data(), inp.size());
  EXPECT_LT(grad_error(loss, inp, dinp), kTol);
}

// BERT's LayerNorm: eps 1e-12; rows of tiny variance show the difference from 1e-5.
TEST(LayerGradCheck, LayerNormEps) {
  std::mt19937 g(21);
  Vec inp = randn(N * C, g, 1e-3, 0.5), w = randn(C, g, 0.5, 1.0), b = randn(C, g),
      G = randn(N * C, g);
  Vec out(N * C), mean(N), rstd(N);
  auto loss = [&] {
    layernorm_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C,
                      1e-12);
    return dot(G, out);
  };
  loss();
  for (int n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (int c = 0; c < C; ++c) m += inp[n * C + c] / C;
    for (int c = 0; c < C; ++c) v += (inp[n * C + c] - m) * (inp[n * C + c] - m) / C;
    EXPECT_NEAR(rstd[n] / (1.0 / std::sqrt(v + 1e-12)), 1.0, 1e-12);
  }
  Vec dinp(N * C, kPrefill), dw(C, kPrefill), db(C, kPrefill);
  layernorm_backward(dinp.data(), dw.data(), db.data(), G.data(), inp.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  EXPECT_LT(grad_error(loss, inp, minus(dinp, kPrefill)), kTol);
  EXPECT_LT(grad_error(loss, w, minus(dw, kPrefill)), kTol);
}

TEST(LayerGradCheck, Relu) {
  std::mt19937 g(17);
  Vec inp = randn(N * C, g), G = randn(N * C, g), out(N * C);
  for (double& x : inp) x += std::copysign(0.1, x);  // |x| >= 0.1: no finite difference at the kink
  auto loss = [&] {
    relu_forward(out.data(), inp.data(), inp.size());
    return dot(G, out);
  };
  loss();
  int negative = 0;
  for (size_t i = 0; i < inp.size(); ++i) {
    EXPECT_EQ(out[i], std::max(inp[i], 0.0));
    negative += inp[i] < 0;
  }
  EXPECT_GT(negative, 0);  // the check below covers both sides of the kink
  EXPECT_LT(negative, N * C);
  Vec dinp(N * C, kNaN);
  relu_backward(dinp.data(), G.data(), inp.data(), inp.size());
  EXPECT_LT(grad_error(loss, inp, dinp), kTol);
}

TEST(LayerGradCheck, Residual) {
  std::mt19937 g(7);
  Vec a = randn(N * C, g), b = randn(N * C, g), G = randn(N * C, g), out(N * C);
  auto loss = [&] {
    residual_forward(out.data(), a.data(), b.data(), a.size());
    return dot(G, out);
  };
  Vec da(N * C, kPrefill), db(N * C, kPrefill);
  residual_backward(da.data(), db.data(), G.data(), a.size());
  EXPECT_LT(grad_error(loss, a, minus(da, kPrefill)), kTol);
  EXPECT_LT(grad_error(loss, b, minus(db, kPrefill)), kTol);
}

TEST(LayerGradCheck, Dropout) {
  std::mt19937 g(8);
  const float p = 0.1f;
  const PhiloxStream rng{1234, 56};
  const uint64_t row0 = 7;
  Vec inp = randn(N * C, g), G = randn(N * C, g), out(N * C);
  auto loss = [&] {
    dropout_forward(out.data(), inp.data(), p, rng, row0, N, C);
    return dot(G, out);
  };
  loss();
  int dropped = 0;
  for (int i = 0; i < N * C; ++i) dropped += out[i] == 0.0;
  EXPECT_GT(dropped, 0);  // the check below covers both kept and dropped elements
  Vec dinp(N * C, kNaN);
  dropout_backward(dinp.data(), G.data(), p, rng, row0, N, C);
  EXPECT_LT(grad_error(loss, inp, dinp), kTol);
}

TEST(LayerGradCheck, CrossEntropy) {
  std::mt19937 g(9);
  const double dloss = 1.0 / N;  // a mean over the N tokens
  Vec logits = randn(N * V, g, 3.0), losses(N), lse(N);
  std::vector<int32_t> targets = randint(N, V, g);
  targets[1] = -1;  // a masked position: no loss term, no gradient
  auto loss = [&] {
    crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V);
    double s = 0;
    for (double l : losses) s += dloss * l;
    return s;
  };
  loss();
  for (int n = 0; n < N; ++n) {
    double s = 0;
    for (int j = 0; j < V; ++j) s += std::exp(logits[n * V + j]);
    EXPECT_NEAR(lse[n], std::log(s), 1e-12);
    if (targets[n] < 0)
      EXPECT_EQ(losses[n], 0.0);
    else
      EXPECT_NEAR(losses[n], std::log(s) - logits[n * V + targets[n]], 1e-12);
  }
  Vec dlogits(N * V, kNaN);
  crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dloss, N, V);
  for (int j = 0; j < V; ++j) EXPECT_EQ(dlogits[1 * V + j], 0.0);
  EXPECT_LT(grad_error(loss, logits, dlogits), kTol);
}

// ---- gradient rule, aliasing, masks -------------------------------------------------------------

// A second backward adds the same amount again to every += buffer and rewrites every = buffer.
TEST(LayerRule, SecondBackwardAccumulatesParamsAndReassignsActivations) {
  std::mt19937 g(10);
  const int IC = C, OC = 2 * C;
  Vec inp = randn(N * IC, g), w = randn(OC * IC, g), G = randn(N * OC, g);
  Vec dinp(N * IC), dw(OC * IC, 0.0), db(OC, 0.0);
  linear_backward(dinp.data(), dw.data(), db.data(), G.data(), inp.data(), w.data(), N, IC, OC);
  const Vec dinp1 = dinp, dw1 = dw, db1 = db;
  linear_backward(dinp.data(), dw.data(), db.data(), G.data(), inp.data(), w.data(), N, IC, OC);
  for (int i = 0; i < N * IC; ++i) EXPECT_EQ(dinp[i], dinp1[i]);
  for (int i = 0; i < OC * IC; ++i) EXPECT_NEAR(dw[i], 2 * dw1[i], 1e-12);
  for (int i = 0; i < OC; ++i) EXPECT_NEAR(db[i], 2 * db1[i], 1e-12);

  Vec x = randn(N * C, g), lw = randn(C, g), lb = randn(C, g), Gy = randn(N * C, g);
  Vec y(N * C), mean(N), rstd(N), dx(N * C, 0.0), dlw(C, 0.0), dlb(C, 0.0);
  layernorm_forward(y.data(), mean.data(), rstd.data(), x.data(), lw.data(), lb.data(), N, C);
  for (int k = 0; k < 2; ++k) {
    layernorm_backward(dx.data(), dlw.data(), dlb.data(), Gy.data(), x.data(), lw.data(),
                       mean.data(), rstd.data(), N, C);
    if (k == 0) {
      dinp = dx;  // reuse as the first result
      dw = dlw;
      db = dlb;
    }
  }
  for (int i = 0; i < N * C; ++i) EXPECT_NEAR(dx[i], 2 * dinp[i], 1e-12);  // dinp is += too
  for (int i = 0; i < C; ++i) EXPECT_NEAR(dlw[i], 2 * dw[i], 1e-12);
  for (int i = 0; i < C; ++i) EXPECT_NEAR(dlb[i], 2 * db[i], 1e-12);
}

TEST(LayerRule, CrossEntropyBackwardInPlace) {
  std::mt19937 g(11);
  Vec logits = randn(N * V, g, 3.0), losses(N), lse(N), dlogits(N * V);
  std::vector<int32_t> targets = randint(N, V, g);
  crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V);
  crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), 0.5, N, V);
  crossentropy_backward(logits.data(), logits.data(), lse.data(), targets.data(), 0.5, N, V);
  for (int i = 0; i < N * V; ++i) EXPECT_EQ(logits[i], dlogits[i]);
}

TEST(LayerRule, DropoutInPlaceMatchesOutOfPlace) {
  std::mt19937 g(12);
  const PhiloxStream rng{99, 3};
  for (float p : {0.0f, 0.25f}) {
    Vec x = randn(N * C, g), y(N * C), dx(N * C);
    dropout_forward(y.data(), x.data(), p, rng, 0, N, C);
    dropout_backward(dx.data(), x.data(), p, rng, 0, N, C);
    if (p == 0.0f) {
      for (int i = 0; i < N * C; ++i) EXPECT_EQ(y[i], x[i]);  // identity
    }
    EXPECT_EQ(y, dx);  // backward applies the same mask and scale
    Vec z = x;
    dropout_forward(z.data(), z.data(), p, rng, 0, N, C);
    EXPECT_EQ(z, y);
    z = x;
    dropout_backward(z.data(), z.data(), p, rng, 0, N, C);
    EXPECT_EQ(z, y);
  }
}

TEST(LayerRule, DropoutMaskIsKeyedAndKeepsOneMinusP) {
  const int rows = 64, cols = 256;
  const float p = 0.1f;
  std::vector<float> x(rows * cols, 1.0f), y1(rows * cols), y2(rows * cols), y3(rows * cols);
  const PhiloxStream step_a{42, mix64(1, 0)}, step_b{42, mix64(2, 0)};
  dropout_forward(y1.data(), x.data(), p, step_a, 0, rows, cols);
  dropout_forward(y2.data(), x.data(), p, step_a, 0, rows, cols);
  dropout_forward(y3.data(), x.data(), p, step_b, 0, rows, cols);
  EXPECT_EQ(0, std::memcmp(y1.data(), y2.data(), y1.size() * sizeof(float)));
  int kept = 0, differ = 0;
  for (int i = 0; i < rows * cols; ++i) {
    if (y1[i] != 0.0f) {
      ++kept;
      EXPECT_FLOAT_EQ(y1[i], 1.0f / (1.0f - p));
    }
    differ += (y1[i] != 0.0f) != (y3[i] != 0.0f);
  }
  EXPECT_NEAR(double(kept) / (rows * cols), 1.0 - p, 0.01);
  EXPECT_GT(differ, rows * cols / 20);  // another step's stream draws another mask
  // Rows are keyed globally: the rows [16, 64) of a shard starting at row 16 match.
  std::vector<float> shard((rows - 16) * cols);
  dropout_forward(shard.data(), x.data(), p, step_a, 16, rows - 16, cols);
  EXPECT_EQ(0, std::memcmp(shard.data(), y1.data() + 16 * cols, shard.size() * sizeof(float)));
}

// relu_backward assigns dinp (a prefilled buffer is overwritten) and works in place on dout.
TEST(LayerRule, ReluBackwardAssignsAndWorksInPlace) {
  std::mt19937 g(18);
  Vec x = randn(N * C, g), G = randn(N * C, g), dx(N * C, kPrefill);
  relu_backward(dx.data(), G.data(), x.data(), x.size());
  for (int i = 0; i < N * C; ++i) EXPECT_EQ(dx[i], x[i] > 0 ? G[i] : 0.0);
  relu_backward(dx.data(), G.data(), x.data(), x.size());  // again: same values, not doubled
  for (int i = 0; i < N * C; ++i) EXPECT_EQ(dx[i], x[i] > 0 ? G[i] : 0.0);
  Vec z = G;
  relu_backward(z.data(), z.data(), x.data(), x.size());
  EXPECT_EQ(z, dx);
}

// Attention with lengths: the q/k/v of padded positions do not reach the valid queries' outputs or
// probabilities (padded keys/values are not even read: NaN there stays out of every result), and
// lengths of all T give the bits of lengths == nullptr.
TEST(LayerRule, AttentionPaddingIsolatesValidQueries) {
  for (bool causal : {true, false}) {
    std::mt19937 g(causal ? 19 : 20);
    const std::vector<int32_t> lengths = {2, 4};
    Vec qkv = randn(N * 3 * C, g), G = randn(N * C, g), out(N * C), att(B * NH * T * T);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, causal, lengths.data());
    Vec qkv2 = qkv;
    std::normal_distribution<double> d(0.0, 3.0);
    for (int b = 0; b < B; ++b) {
      for (int t = lengths[b]; t < T; ++t) {
        double* row = qkv2.data() + (b * T + t) * 3 * C;
        for (int c = 0; c < C; ++c) row[c] = d(g);      // q: other values
        for (int c = C; c < 3 * C; ++c) row[c] = kNaN;  // k, v: never read
      }
    }
    Vec out2(N * C), att2(B * NH * T * T);
    attention_forward(out2.data(), att2.data(), qkv2.data(), B, T, C, NH, causal, lengths.data());
    for (double x : out2) EXPECT_FALSE(std::isnan(x));  // padded queries too
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < lengths[b]; ++t) {  // valid queries: the same bits
        for (int c = 0; c < C; ++c) EXPECT_EQ(out2[(b * T + t) * C + c], out[(b * T + t) * C + c]);
        for (int h = 0; h < NH; ++h) {
          for (int j = 0; j < T; ++j) {
            const int i = ((b * NH + h) * T + t) * T + j;
            EXPECT_EQ(att2[i], att[i]);
          }
        }
      }
    }
    Vec dqkv(N * 3 * C), datt(att.size());
    attention_backward(dqkv.data(), datt.data(), G.data(), qkv2.data(), att2.data(), B, T, C, NH,
                       causal, lengths.data());
    for (double x : dqkv) EXPECT_FALSE(std::isnan(x));

    const std::vector<int32_t> full = {T, T};
    Vec o1(N * C), a1(att.size()), d1(N * 3 * C), s1(att.size());
    Vec o2(N * C), a2(att.size()), d2(N * 3 * C), s2(att.size());
    attention_forward(o1.data(), a1.data(), qkv.data(), B, T, C, NH, causal);
    attention_backward(d1.data(), s1.data(), G.data(), qkv.data(), a1.data(), B, T, C, NH, causal);
    attention_forward(o2.data(), a2.data(), qkv.data(), B, T, C, NH, causal, full.data());
    attention_backward(d2.data(), s2.data(), G.data(), qkv.data(), a2.data(), B, T, C, NH, causal,
                       full.data());
    EXPECT_EQ(0, std::memcmp(o1.data(), o2.data(), o1.size() * sizeof(double)));
    EXPECT_EQ(0, std::memcmp(a1.data(), a2.data(), a1.size() * sizeof(double)));
    EXPECT_EQ(0, std::memcmp(d1.data(), d2.data(), d1.size() * sizeof(double)));
  }
}

// A length outside [1, T] stops the job with a message instead of computing garbage.
TEST(LayerRuleDeathTest, AttentionRejectsBadLengths) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  Vec qkv(N * 3 * C, 0.5), out(N * C), att(B * NH * T * T), dqkv(N * 3 * C), datt(att.size());
  const std::vector<int32_t> zero = {0, T}, over = {T, T + 1};
  EXPECT_DEATH(
      attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, false, zero.data()),
      "lengths\\[0\\] = 0");
  EXPECT_DEATH(attention_backward(dqkv.data(), datt.data(), out.data(), qkv.data(), att.data(), B,
                                  T, C, NH, true, over.data()),
               "lengths\\[1\\] = 6");
}

// ---- float instantiations and thread-count determinism ------------------------------------------

// Forward and backward of the float layers, outputs concatenated; sizes big enough for every
// parallel loop to split.
std::vector<float> run_float_layers(bool causal) {
  const int b = 3, t = 37, c = 96, nh = 4, v = 50, n = b * t;
  std::mt19937 g(13);
  std::normal_distribution<float> nd;
  auto rnd = [&](size_t k) {
    std::vector<float> x(k);
    for (float& e : x) e = nd(g);
    return x;
  };
  std::vector<float> result;
  auto keep = [&](const std::vector<float>& x) { result.insert(result.end(), x.begin(), x.end()); };

  std::vector<float> qkv = rnd(n * 3 * c), dout = rnd(n * c), out(n * c), att(b * nh * t * t);
  std::vector<float> dqkv(n * 3 * c), datt(b * nh * t * t);
  attention_forward(out.data(), att.data(), qkv.data(), b, t, c, nh, causal);
  attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), b, t, c, nh,
                     causal);
  keep(out);
  keep(att);
  keep(dqkv);

  std::vector<float> w = rnd(c), bias = rnd(c), mean(n), rstd(n), dx(n * c, 0.f), dw(c, 0.f),
                     db(c, 0.f);
  layernorm_forward(out.data(), mean.data(), rstd.data(), qkv.data(), w.data(), bias.data(), n, c);
  layernorm_backward(dx.data(), dw.data(), db.data(), dout.data(), qkv.data(), w.data(),
                     mean.data(), rstd.data(), n, c);
  keep(out);
  keep(dx);
  keep(dw);
  keep(db);

  std::vector<int32_t> tokens(n);
  for (int i = 0; i < n; ++i) tokens[i] = (i * 7) % v;
  std::vector<float> wte = rnd(v * c), wpe = rnd(t * c), dwte(v * c, 0.f), dwpe(t * c, 0.f);
  embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), b, t, c);
  embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), b, t, c);
  keep(out);
  keep(dwte);
  keep(dwpe);

  std::vector<float> lw = rnd(c * c), lb = rnd(c), dlw(c * c, 0.f), dlb(c, 0.f);
  linear_forward(out.data(), qkv.data(), lw.data(), lb.data(), n, c, c);
  linear_backward(dx.data(), dlw.data(), dlb.data(), dout.data(), qkv.data(), lw.data(), n, c, c);
  keep(out);
  keep(dx);
  keep(dlw);
  keep(dlb);

  std::vector<float> logits = rnd(n * v), losses(n), lse(n);
  crossentropy_forward(losses.data(), lse.data(), logits.data(), tokens.data(), n, v);
  crossentropy_backward(logits.data(), logits.data(), lse.data(), tokens.data(), 1.0f / n, n, v);
  keep(losses);
  keep(logits);

  std::vector<float> gx = rnd(1 << 15), gy(1 << 15), gd(1 << 15);
  gelu_forward(gy.data(), gx.data(), gx.size());
  gelu_backward(gd.data(), gy.data(), gx.data(), gx.size());
  keep(gy);
  keep(gd);
  return result;
}

#ifdef _OPENMP
// run(causal) for causal and bidirectional attention, at 1 and at 2 threads: the same bits.
void expect_same_bits_for_one_and_two_threads(
    const std::function<std::vector<float>(bool causal)>& run) {
  const int saved = omp_get_max_threads();
  for (bool causal : {true, false}) {
    omp_set_num_threads(1);
    const std::vector<float> one = run(causal);
    omp_set_num_threads(2);
    const std::vector<float> two = run(causal);
    ASSERT_EQ(one.size(), two.size());
    EXPECT_EQ(0, std::memcmp(one.data(), two.data(), one.size() * sizeof(float)));
  }
  omp_set_num_threads(saved);
}
#endif

TEST(LayerDeterminism, FloatBitIdenticalForOneAndTwoThreads) {
#ifdef _OPENMP
  expect_same_bits_for_one_and_two_threads(run_float_layers);
#else
  GTEST_SKIP() << "built without OpenMP";
#endif
}

TEST(LayerDeterminism, PaddedAttentionBitIdenticalForOneAndTwoThreads) {
#ifdef _OPENMP
  const int b = 3, t = 37, c = 96, nh = 4, n = b * t;
  const std::vector<int32_t> lengths = {20, t, 1};
  std::mt19937 g(21);
  std::normal_distribution<float> nd;
  std::vector<float> qkv(n * 3 * c), dout(n * c);
  for (float& e : qkv) e = nd(g);
  for (float& e : dout) e = nd(g);
  auto run = [&](bool causal) {
    std::vector<float> out(n * c), att(b * nh * t * t), dqkv(n * 3 * c), datt(att.size());
    attention_forward(out.data(), att.data(), qkv.data(), b, t, c, nh, causal, lengths.data());
    attention_backward(dqkv.data(), datt.data(), dout.data(), qkv.data(), att.data(), b, t, c, nh,
                       causal, lengths.data());
    out.insert(out.end(), att.begin(), att.end());
    out.insert(out.end(), dqkv.begin(), dqkv.end());
    return out;
  };
  expect_same_bits_for_one_and_two_threads(run);
#else
  GTEST_SKIP() << "built without OpenMP";
#endif
}

// The float instantiations agree with the double ones to float accuracy.
TEST(LayerFloat, AttentionAndLayerNormMatchDouble) {
  std::mt19937 g(14);
  Vec qkv = randn(N * 3 * C, g), G = randn(N * C, g);
  std::vector<float> qkvf(qkv.begin(), qkv.end()), Gf(G.begin(), G.end());
  Vec out(N * C), att(B * NH * T * T), dqkv(N * 3 * C), datt(att.size());
  std::vector<float> outf(out.size()), attf(att.size()), dqkvf(dqkv.size()), dattf(att.size());
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH, true);
  attention_backward(dqkv.data(), datt.data(), G.data(), qkv.data(), att.data(), B, T, C, NH, true);
  attention_forward(outf.data(), attf.data(), qkvf.data(), B, T, C, NH, true);
  attention_backward(dqkvf.data(), dattf.data(), Gf.data(), qkvf.data(), attf.data(), B, T, C, NH,
                     true);
  for (size_t i = 0; i < out.size(); ++i) EXPECT_NEAR(outf[i], out[i], 1e-5);
  for (size_t i = 0; i < dqkv.size(); ++i) EXPECT_NEAR(dqkvf[i], dqkv[i], 1e-5);

  Vec w = randn(C, g), b = randn(C, g), y(N * C), mean(N), rstd(N);
  std::vector<float> wf(w.begin(), w.end()), bf(b.begin(), b.end()), yf(N * C), meanf(N), rstdf(N);
  layernorm_forward(y.data(), mean.data(), rstd.data(), qkv.data(), w.data(), b.data(), N, C);
  layernorm_forward(yf.data(), meanf.data(), rstdf.data(), qkvf.data(), wf.data(), bf.data(), N, C);
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(yf[i], y[i], 1e-5);
}

}  // namespace
}  // namespace mpitron::cpu
