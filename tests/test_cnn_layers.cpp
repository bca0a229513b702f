// CNN layers (conv2d, batchnorm2d with ghost groups, max/global-average pooling): gradient checks
// against central finite differences in double with L = sum(G * out), both fast convs (im2col and
// oneDNN) against the direct reference and each other, float against double, thread-count
// determinism at 1-4 threads and each layer's contracts.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#ifdef _OPENMP
#include <omp.h>
#endif

#include "layers/batchnorm.hpp"
#include "layers/conv2d.hpp"
#include "layers/pool.hpp"
#include "layers/relu.hpp"
#include "layers/residual.hpp"
#include "tests/grad_check.hpp"

namespace mpitron::cpu {
namespace {

using namespace grad_check;  // NOLINT: the shared helpers and constants
using VecF = std::vector<float>;

constexpr double kFloatTol = 1e-5;
constexpr float kEps = 1e-5f;

VecF to_float(const Vec& v) {
  return VecF(v.begin(), v.end());
}

// max|a - b| / max|b|, NaN anywhere gives NaN.
template <class A, class B>
double rel_error(const A& a, const B& b) {
  EXPECT_EQ(a.size(), b.size());
  double max_diff = 0, max_ref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double(a[i]) - double(b[i]));
    if (std::isnan(d)) return kNaN;
    max_diff = std::max(max_diff, d);
    max_ref = std::max(max_ref, std::fabs(double(b[i])));
  }
  return max_diff / std::max(max_ref, 1e-30);
}

size_t numel_in(const Conv2dShape& s) {
  return size_t(s.N) * s.IC * s.H * s.W;
}
size_t numel_out(const Conv2dShape& s) {
  return size_t(s.N) * s.OC * s.OH() * s.OW();
}
size_t numel_w(const Conv2dShape& s) {
  return size_t(s.OC) * s.IC * s.KH * s.KW;
}

// ---- conv2d
// ---------------------------------------------------------------------------------------

enum class Kernels { direct, im2col, onednn };

// The fast paths (a plan and its workspace) or the direct reference, forward and backward, on
// vectors; calls may pass fewer images (n) than planned.
template <class F>
struct Conv {
  Conv2dShape s;
  Kernels kernels = Kernels::im2col;
  Conv2dPlan plan;
  std::vector<F> ws;
  Conv(const Conv2dShape& shape, Kernels k)
      : s(shape),
        kernels(k),
        plan(conv2d_plan(shape, k == Kernels::onednn ? Conv2dPath::onednn : Conv2dPath::im2col)),
        ws(conv2d_workspace(plan), F(kNaN)) {}
  Conv(const Conv2dShape& shape, bool fast_path)
      : Conv(shape, fast_path ? Kernels::im2col : Kernels::direct) {}
  void forward(std::vector<F>& out, const std::vector<F>& inp, const std::vector<F>& w,
               const F* bias, int n = -1) {
    Conv2dShape sn = s;
    sn.N = n < 0 ? s.N : n;
    if (kernels == Kernels::direct) {
      conv2d_forward_direct(out.data(), inp.data(), w.data(), bias, sn);
    } else {
      conv2d_forward(out.data(), ws.data(), inp.data(), w.data(), bias, plan, sn.N);
    }
  }
  void backward(F* dinp, F* dw, F* db, const std::vector<F>& dout, const std::vector<F>& inp,
                const std::vector<F>& w, int n = -1) {
    Conv2dShape sn = s;
    sn.N = n < 0 ? s.N : n;
    if (kernels == Kernels::direct) {
      conv2d_backward_direct(dinp, dw, db, dout.data(), inp.data(), w.data(), sn);
    } else {
      conv2d_backward(dinp, dw, db, ws.data(), dout.data(), inp.data(), w.data(), plan, sn.N);
    }
  }
};

void check_conv_grads(const Conv2dShape& s, bool with_bias, bool fast) {
  SCOPED_TRACE(::testing::Message() << (fast ? "fast" : "direct") << " bias=" << with_bias);
  std::mt19937 g(7);
  Vec inp = randn(numel_in(s), g), w = randn(numel_w(s), g, 0.5), b = randn(s.OC, g),
      G = randn(numel_out(s), g), out(numel_out(s));
  Conv<double> conv(s, fast);
  auto loss = [&] {
    conv.forward(out, inp, w, with_bias ? b.data() : nullptr);
    return dot(G, out);
  };
  Vec dinp(inp.size(), kNaN), dw(w.size(), kPrefill), db(s.OC, kPrefill);
  conv.backward(dinp.data(), dw.data(), with_bias ? db.data() : nullptr, G, inp, w);
  EXPECT_LT(grad_error(loss, inp, dinp), kTol);
  EXPECT_LT(grad_error(loss, w, minus(dw, kPrefill)), kTol);
  if (with_bias) {
    EXPECT_LT(grad_error(loss, b, minus(db, kPrefill)), kTol);
  } else {
    for (double x : db) EXPECT_EQ(x, kPrefill);
  }
  // dinp nullptr: skipped, the parameter gradients unchanged.
  Vec dw2(w.size(), kPrefill);
  conv.backward(nullptr, dw2.data(), nullptr, G, inp, w);
  EXPECT_LT(rel_error(minus(dw2, kPrefill), minus(dw, kPrefill)), 1e-13);
}

void check_conv_grads(const Conv2dShape& s) {
  for (bool fast : {true, false})
    for (bool bias : {true, false}) check_conv_grads(s, bias, fast);
}

TEST(CnnGradCheck, Conv3x3Pad1Stride1) {
  check_conv_grads({.N = 2, .IC = 3, .H = 6, .W = 6, .OC = 4, .KH = 3, .KW = 3, .pad = 1});
}

TEST(CnnGradCheck, Conv3x3Stride2Pad1) {
  check_conv_grads(
      {.N = 2, .IC = 3, .H = 7, .W = 6, .OC = 4, .KH = 3, .KW = 3, .stride = 2, .pad = 1});
}

TEST(CnnGradCheck, Conv1x1Stride2) {
  check_conv_grads({.N = 2, .IC = 3, .H = 6, .W = 5, .OC = 4, .KH = 1, .KW = 1, .stride = 2});
}

TEST(CnnGradCheck, Conv5x3NonSquare) {
  check_conv_grads(
      {.N = 2, .IC = 2, .H = 9, .W = 6, .OC = 3, .KH = 5, .KW = 3, .stride = 1, .pad = 1});
}

TEST(CnnGradCheck, Conv1x1Pointwise) {  // stride 1, no padding: the GEMM reads the input directly
  check_conv_grads({.N = 2, .IC = 3, .H = 16, .W = 17, .OC = 2, .KH = 1, .KW = 1});
}

// Shapes exercising every branch of the fast path: several images per block with a short last
// block, one image per block, pointwise with and without the direct input, many slots.
std::vector<Conv2dShape> fast_path_shapes() {
  return {
      {.N = 5, .IC = 3, .H = 12, .W = 10, .OC = 6, .KH = 3, .KW = 3, .pad = 1},
      {.N = 11, .IC = 4, .H = 9, .W = 9, .OC = 8, .KH = 3, .KW = 3, .stride = 2, .pad = 1},
      {.N = 3, .IC = 8, .H = 16, .W = 17, .OC = 5, .KH = 1, .KW = 1},
      {.N = 6, .IC = 5, .H = 4, .W = 4, .OC = 7, .KH = 1, .KW = 1},
      {.N = 4, .IC = 2, .H = 20, .W = 20, .OC = 3, .KH = 5, .KW = 3, .pad = 2},
      {.N = 37, .IC = 3, .H = 7, .W = 7, .OC = 4, .KH = 3, .KW = 3, .pad = 1},
      {.N = 9, .IC = 6, .H = 11, .W = 8, .OC = 5, .KH = 1, .KW = 1, .stride = 2},
      {.N = 20, .IC = 16, .H = 14, .W = 14, .OC = 12, .KH = 3, .KW = 3, .stride = 2, .pad = 1},
  };
}

// Each fast path against the direct reference, forward and backward (dW and db accumulate).
void check_against_direct(const Conv2dShape& s, Kernels k, int n) {
  SCOPED_TRACE(::testing::Message()
               << (k == Kernels::onednn ? "onednn" : "im2col") << " N=" << s.N << " (call " << n
               << ") IC=" << s.IC << " H=" << s.H << " W=" << s.W << " OC=" << s.OC << " K=" << s.KH
               << "x" << s.KW << " s=" << s.stride << " p=" << s.pad);
  std::mt19937 g(11);
  const VecF inp = to_float(randn(numel_in(s), g)), w = to_float(randn(numel_w(s), g, 0.3)),
             b = to_float(randn(s.OC, g)), dout = to_float(randn(numel_out(s), g));
  Conv<float> fast(s, k), ref(s, Kernels::direct);
  if (k == Kernels::onednn) {
#ifdef MPITRON_ONEDNN
    ASSERT_EQ(fast.plan.path(), Conv2dPath::onednn) << "oneDNN refused a shape it should take";
#else
    ASSERT_EQ(fast.plan.path(), Conv2dPath::im2col);
#endif
  }
  // Only the first n images: the rest of every output stays as prefilled.
  VecF out_f(numel_out(s), kNaN), out_r(numel_out(s), kNaN);
  fast.forward(out_f, inp, w, b.data(), n);
  ref.forward(out_r, inp, w, b.data(), n);
  const size_t out_n = numel_out(s) / s.N * n, in_n = numel_in(s) / s.N * n;
  EXPECT_LT(rel_error(VecF(out_f.begin(), out_f.begin() + out_n),
                      VecF(out_r.begin(), out_r.begin() + out_n)),
            kFloatTol);
  for (size_t i = out_n; i < out_f.size(); ++i) ASSERT_TRUE(std::isnan(out_f[i]));
  VecF dx_f(inp.size(), kNaN), dx_r(inp.size(), kNaN), dw_f(w.size(), 1.f), dw_r(w.size(), 1.f),
      db_f(s.OC, 1.f), db_r(s.OC, 1.f);
  fast.backward(dx_f.data(), dw_f.data(), db_f.data(), dout, inp, w, n);
  ref.backward(dx_r.data(), dw_r.data(), db_r.data(), dout, inp, w, n);
  EXPECT_LT(
      rel_error(VecF(dx_f.begin(), dx_f.begin() + in_n), VecF(dx_r.begin(), dx_r.begin() + in_n)),
      kFloatTol);
  for (size_t i = in_n; i < dx_f.size(); ++i) ASSERT_TRUE(std::isnan(dx_f[i]));
  EXPECT_LT(rel_error(dw_f, dw_r), kFloatTol);
  EXPECT_LT(rel_error(db_f, db_r), kFloatTol);
  // dinp nullptr: skipped, the same weight gradient.
  VecF dw2(w.size(), 1.f);
  fast.backward(nullptr, dw2.data(), nullptr, dout, inp, w, n);
  EXPECT_EQ(0, std::memcmp(dw2.data(), dw_f.data(), dw2.size() * sizeof(float)));
}

TEST(CnnConv, FastMatchesDirectReference) {
  for (const Conv2dShape& s : fast_path_shapes()) check_against_direct(s, Kernels::im2col, s.N);
}

// Shapes oneDNN takes: strides, padding, a pointwise shortcut, a non-square kernel and image,
// sub-batches of unequal size (N not a multiple of the slots), fewer slots than threads.
std::vector<Conv2dShape> onednn_shapes() {
  return {
      {.N = 20, .IC = 16, .H = 14, .W = 14, .OC = 24, .KH = 3, .KW = 3, .stride = 2, .pad = 1},
      {.N = 11, .IC = 8, .H = 9, .W = 7, .OC = 16, .KH = 3, .KW = 3, .pad = 1},
      {.N = 5, .IC = 32, .H = 6, .W = 6, .OC = 8, .KH = 1, .KW = 1, .stride = 2},
      {.N = 3, .IC = 8, .H = 12, .W = 10, .OC = 8, .KH = 5, .KW = 3, .pad = 2},
      {.N = 17, .IC = 16, .H = 7, .W = 7, .OC = 16, .KH = 3, .KW = 3, .pad = 1},
  };
}

TEST(CnnConv, OnednnMatchesDirectReference) {
  for (const Conv2dShape& s : onednn_shapes()) {
    check_against_direct(s, Kernels::onednn, s.N);
    check_against_direct(s, Kernels::onednn, (s.N + 1) / 2);  // fewer images than planned
    check_against_direct(s, Kernels::onednn, 1);
  }
}

// The simple path oneDNN replaced, on the same shapes: the two agree to float rounding.
TEST(CnnConv, OnednnMatchesIm2col) {
  for (const Conv2dShape& s : onednn_shapes()) {
    std::mt19937 g(13);
    const VecF inp = to_float(randn(numel_in(s), g)), w = to_float(randn(numel_w(s), g, 0.3)),
               dout = to_float(randn(numel_out(s), g));
    Conv<float> a(s, Kernels::onednn), b(s, Kernels::im2col);
    VecF out_a(numel_out(s)), out_b(numel_out(s)), dx_a(inp.size()), dx_b(inp.size()),
        dw_a(w.size(), 0.f), dw_b(w.size(), 0.f);
    a.forward(out_a, inp, w, nullptr);
    b.forward(out_b, inp, w, nullptr);
    a.backward(dx_a.data(), dw_a.data(), nullptr, dout, inp, w);
    b.backward(dx_b.data(), dw_b.data(), nullptr, dout, inp, w);
    EXPECT_LT(rel_error(out_a, out_b), kFloatTol);
    EXPECT_LT(rel_error(dx_a, dx_b), kFloatTol);
    EXPECT_LT(rel_error(dw_a, dw_b), kFloatTol);
  }
}

TEST(CnnFloat, ConvMatchesDouble) {
  for (const Conv2dShape& s : fast_path_shapes()) {
    std::mt19937 g(12);
    const Vec inp = randn(numel_in(s), g), w = randn(numel_w(s), g, 0.3), b = randn(s.OC, g),
              dout = randn(numel_out(s), g);
    Conv<double> cd(s, true);
    Conv<float> cf(s, true);
    Vec out(numel_out(s)), dx(inp.size()), dw(w.size(), 0.0), db(s.OC, 0.0);
    VecF outf(out.size()), dxf(dx.size()), dwf(dw.size(), 0.f), dbf(s.OC, 0.f);
    cd.forward(out, inp, w, b.data());
    cd.backward(dx.data(), dw.data(), db.data(), dout, inp, w);
    const VecF inpf = to_float(inp), wf = to_float(w), bf = to_float(b), doutf = to_float(dout);
    cf.forward(outf, inpf, wf, bf.data());
    cf.backward(dxf.data(), dwf.data(), dbf.data(), doutf, inpf, wf);
    EXPECT_LT(rel_error(outf, out), kFloatTol);
    EXPECT_LT(rel_error(dxf, dx), kFloatTol);
    EXPECT_LT(rel_error(dwf, dw), kFloatTol);
    EXPECT_LT(rel_error(dbf, db), kFloatTol);
  }
}

// ---- batchnorm2d
// ----------------------------------------------------------------------------------

void check_batchnorm_grads(int N, int C, int HW, int G) {
  std::mt19937 g(5);
  Vec inp = randn(size_t(N) * C * HW, g, 2.0, 0.5), w = randn(C, g, 0.5, 1.0), b = randn(C, g),
      Gr = randn(inp.size(), g);
  Vec out(inp.size()), mean(size_t(N / G) * C), rstd(mean.size());
  auto loss = [&] {
    batchnorm2d_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C,
                        HW, G, kEps);
    return dot(Gr, out);
  };
  loss();
  Vec dinp(inp.size(), kNaN), dw(C, kPrefill), db(C, kPrefill);
  batchnorm2d_backward(dinp.data(), dw.data(), db.data(), Gr.data(), inp.data(), w.data(),
                       mean.data(), rstd.data(), N, C, HW, G);
  EXPECT_LT(grad_error(loss, inp, dinp), kTol);
  EXPECT_LT(grad_error(loss, w, minus(dw, kPrefill)), kTol);
  EXPECT_LT(grad_error(loss, b, minus(db, kPrefill)), kTol);
}

TEST(CnnGradCheck, BatchNormGhostGroupsOfTwo) {
  check_batchnorm_grads(4, 3, 6, 2);
}
TEST(CnnGradCheck, BatchNormWholeBatch) {
  check_batchnorm_grads(4, 3, 6, 4);
}

TEST(CnnBatchNorm, GhostGroupsAreIndependent) {
  const int N = 6, C = 3, HW = 10, G = 2, plane = C * HW;
  std::mt19937 g(6);
  const Vec inp = randn(size_t(N) * plane, g, 1.5, -0.7), w = randn(C, g), b = randn(C, g);
  Vec out(inp.size(), kNaN), mean(size_t(N / G) * C, kNaN), rstd(mean.size(), kNaN);
  batchnorm2d_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C,
                      HW, G, kEps);
  for (int grp = 0; grp < N / G; ++grp) {
    Vec part(size_t(G) * plane, kNaN), m(C, kNaN), r(C, kNaN);
    const double* x = inp.data() + size_t(grp) * G * plane;
    batchnorm2d_forward(part.data(), m.data(), r.data(), x, w.data(), b.data(), G, C, HW, G, kEps);
    for (size_t i = 0; i < part.size(); ++i) EXPECT_EQ(part[i], out[size_t(grp) * G * plane + i]);
    for (int c = 0; c < C; ++c) {
      EXPECT_EQ(m[c], mean[grp * C + c]);
      EXPECT_EQ(r[c], rstd[grp * C + c]);
    }
  }
  // Statistics: the group's mean and biased variance, eps inside the square root.
  for (int grp = 0; grp < N / G; ++grp)
    for (int c = 0; c < C; ++c) {
      double s = 0, sq = 0;
      for (int n = grp * G; n < (grp + 1) * G; ++n)
        for (int i = 0; i < HW; ++i) s += inp[(size_t(n) * C + c) * HW + i];
      const double m = s / (G * HW);
      for (int n = grp * G; n < (grp + 1) * G; ++n)
        for (int i = 0; i < HW; ++i) {
          const double d = inp[(size_t(n) * C + c) * HW + i] - m;
          sq += d * d;
        }
      EXPECT_NEAR(mean[grp * C + c], m, 1e-12);
      EXPECT_NEAR(rstd[grp * C + c], 1.0 / std::sqrt(sq / (G * HW) + double(kEps)), 1e-12);
    }
}

// The fused epilogue (the CPU layer table's, for training) against the layers it replaces.
TEST(CnnBatchNorm, AddReluForwardIsTheSeparateLayersBitForBit) {
  const int N = 8, C = 5, HW = 37, G = 4;  // HW: vector loops with a remainder
  const size_t n = size_t(N) * C * HW;
  std::mt19937 g(9);
  const VecF inp = to_float(randn(n, g, 1.3, 0.2)), w = to_float(randn(C, g)),
             b = to_float(randn(C, g)), shortcut = to_float(randn(n, g));
  const size_t stats = size_t(N / G) * C;
  VecF bn(n), sum(n), want(n), mean(stats), rstd(stats);
  batchnorm2d_forward(bn.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C, HW,
                      G, kEps);
  for (const bool with_shortcut : {false, true}) {
    SCOPED_TRACE(with_shortcut ? "relu(bn + shortcut)" : "relu(bn)");
    if (with_shortcut) {
      residual_forward(sum.data(), bn.data(), shortcut.data(), n);
      relu_forward(want.data(), sum.data(), n);
    } else {
      relu_forward(want.data(), bn.data(), n);
    }
    VecF got(n, std::numeric_limits<float>::quiet_NaN()), m(stats), r(stats);
    batchnorm2d_add_relu_forward(got.data(), m.data(), r.data(), inp.data(), w.data(), b.data(),
                                 with_shortcut ? shortcut.data() : nullptr, N, C, HW, G, kEps);
    EXPECT_EQ(0, std::memcmp(got.data(), want.data(), n * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(m.data(), mean.data(), stats * sizeof(float)));
    EXPECT_EQ(0, std::memcmp(r.data(), rstd.data(), stats * sizeof(float)));
    EXPECT_GT(std::count(got.begin(), got.end(), 0.0f), ptrdiff_t(n / 8));  // the ReLU bites
  }
}

TEST(CnnBatchNorm, EvalUsesRunningStatistics) {
  const int N = 3, C = 4, HW = 7;
  std::mt19937 g(8);
  const Vec inp = randn(size_t(N) * C * HW, g), w = randn(C, g), b = randn(C, g), rm = randn(C, g),
            rv = minus(Vec(C, 0.0), -1.0);
  Vec rvar = rv;
  for (int c = 0; c < C; ++c) rvar[c] = 0.5 + c;  // distinct positive variances
  Vec out(inp.size(), kNaN);
  batchnorm2d_forward_eval(out.data(), inp.data(), w.data(), b.data(), rm.data(), rvar.data(), N, C,
                           HW, kEps);
  for (int n = 0; n < N; ++n)
    for (int c = 0; c < C; ++c)
      for (int i = 0; i < HW; ++i) {
        const size_t k = (size_t(n) * C + c) * HW + i;
        const double want = (inp[k] - rm[c]) / std::sqrt(rvar[c] + double(kEps)) * w[c] + b[c];
        EXPECT_NEAR(out[k], want, 1e-12);
      }
}

TEST(CnnBatchNorm, GroupStatsAddUnbiasedVarianceInGroupOrder) {
  const int N = 6, C = 3, HW = 5, G = 3, groups = N / G, count = G * HW;
  std::mt19937 g(9);
  const Vec inp = randn(size_t(N) * C * HW, g, 3.0, 1.0), w(C, 1.0), b(C, 0.0);
  Vec out(inp.size()), mean(size_t(groups) * C), rstd(mean.size());
  batchnorm2d_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C,
                      HW, G, kEps);
  std::vector<double> mean_sum(C, 0.25), var_sum(C, 0.5);
  batchnorm2d_group_stats(mean_sum.data(), var_sum.data(), mean.data(), rstd.data(), groups, C, HW,
                          G, kEps);
  for (int c = 0; c < C; ++c) {
    double want_m = 0.25, want_v = 0.5;
    for (int grp = 0; grp < groups; ++grp) {
      double s = 0, sq = 0;
      for (int n = grp * G; n < (grp + 1) * G; ++n)
        for (int i = 0; i < HW; ++i) s += inp[(size_t(n) * C + c) * HW + i];
      const double m = s / count;
      for (int n = grp * G; n < (grp + 1) * G; ++n)
        for (int i = 0; i < HW; ++i) {
          const double d = inp[(size_t(n) * C + c) * HW + i] - m;
          sq += d * d;
        }
      want_m += m;
      want_v += sq / (count - 1);
    }
    EXPECT_NEAR(mean_sum[c], want_m, 1e-12);
    EXPECT_NEAR(var_sum[c], want_v, 1e-10 * want_v);
  }
  // The float instantiation reads float statistics the same way.
  const VecF meanf = to_float(mean), rstdf = to_float(rstd);
  std::vector<double> mf(C, 0.0), vf(C, 0.0), md(C, 0.0), vd(C, 0.0);
  batchnorm2d_group_stats(mf.data(), vf.data(), meanf.data(), rstdf.data(), groups, C, HW, G, kEps);
  batchnorm2d_group_stats(md.data(), vd.data(), mean.data(), rstd.data(), groups, C, HW, G, kEps);
  EXPECT_LT(rel_error(mf, md), kFloatTol);
  EXPECT_LT(rel_error(vf, vd), kFloatTol);
}

TEST(CnnFloat, BatchNormMatchesDouble) {
  const int N = 8, C = 5, HW = 49, G = 4;
  std::mt19937 g(10);
  // A mean far from 0 relative to the spread: float sums would lose digits without double.
  const Vec inp = randn(size_t(N) * C * HW, g, 0.5, 20.0), w = randn(C, g, 0.5, 1.0),
            b = randn(C, g), dout = randn(inp.size(), g);
  Vec out(inp.size()), mean(size_t(N / G) * C), rstd(mean.size()), dx(inp.size()), dw(C, 0.0),
      db(C, 0.0);
  batchnorm2d_forward(out.data(), mean.data(), rstd.data(), inp.data(), w.data(), b.data(), N, C,
                      HW, G, kEps);
  batchnorm2d_backward(dx.data(), dw.data(), db.data(), dout.data(), inp.data(), w.data(),
                       mean.data(), rstd.data(), N, C, HW, G);
  const VecF inpf = to_float(inp), wf = to_float(w), bf = to_float(b), doutf = to_float(dout);
  VecF outf(out.size()), meanf(mean.size()), rstdf(mean.size()), dxf(dx.size()), dwf(C, 0.f),
      dbf(C, 0.f);
  batchnorm2d_forward(outf.data(), meanf.data(), rstdf.data(), inpf.data(), wf.data(), bf.data(), N,
                      C, HW, G, kEps);
  batchnorm2d_backward(dxf.data(), dwf.data(), dbf.data(), doutf.data(), inpf.data(), wf.data(),
                       meanf.data(), rstdf.data(), N, C, HW, G);
  // The inputs are rounded to float: compare with the double layer on the rounded inputs.
  const Vec inp_r(inpf.begin(), inpf.end());
  batchnorm2d_forward(out.data(), mean.data(), rstd.data(), inp_r.data(), w.data(), b.data(), N, C,
                      HW, G, kEps);
  std::fill(dw.begin(), dw.end(), 0.0);
  std::fill(db.begin(), db.end(), 0.0);
  const Vec wr(wf.begin(), wf.end()), doutr(doutf.begin(), doutf.end());
  const Vec br(bf.begin(), bf.end());
  batchnorm2d_forward(out.data(), mean.data(), rstd.data(), inp_r.data(), wr.data(), br.data(), N,
                      C, HW, G, kEps);
  batchnorm2d_backward(dx.data(), dw.data(), db.data(), doutr.data(), inp_r.data(), wr.data(),
                       mean.data(), rstd.data(), N, C, HW, G);
  EXPECT_LT(rel_error(outf, out), kFloatTol);
  EXPECT_LT(rel_error(meanf, mean), kFloatTol);
  EXPECT_LT(rel_error(rstdf, rstd), kFloatTol);
  EXPECT_LT(rel_error(dxf, dx), kFloatTol);
  EXPECT_LT(rel_error(dwf, dw), kFloatTol);
  EXPECT_LT(rel_error(dbf, db), kFloatTol);
}

// ---- pooling
// --------------------------------------------------------------------------------------

// Distinct values 0.05 apart (far more than the finite-difference step), shuffled: no ties, no
// kinks within reach of the differences.
Vec distinct_values(size_t n, std::mt19937& g) {
  Vec v(n);
  std::iota(v.begin(), v.end(), 0.0);
  std::shuffle(v.begin(), v.end(), g);
  for (double& x : v) x = (x - double(n) / 2) * 0.05;
  return v;
}

size_t numel_in(const Pool2dShape& s) {
  return size_t(s.N) * s.C * s.H * s.W;
}
size_t numel_out(const Pool2dShape& s) {
  return size_t(s.N) * s.C * s.OH() * s.OW();
}

void check_maxpool_grads(const Pool2dShape& s) {
  std::mt19937 g(3);
  Vec inp = distinct_values(numel_in(s), g), G = randn(numel_out(s), g), out(numel_out(s));
  std::vector<int32_t> argmax(numel_out(s), -1);
  auto loss = [&] {
    maxpool2d_forward(out.data(), argmax.data(), inp.data(), s);
    return dot(G, out);
  };
  loss();
  Vec dinp(inp.size(), kNaN);
  maxpool2d_backward(dinp.data(), G.data(), argmax.data(), s);
  EXPECT_LT(grad_error(loss, inp, dinp), kTol);
}

TEST(CnnGradCheck, MaxPool3x3Stride2Pad1) {
  check_maxpool_grads({.N = 2, .C = 3, .H = 7, .W = 6, .K = 3, .stride = 2, .pad = 1});
}

TEST(CnnGradCheck, MaxPool2x2Stride2) {
  check_maxpool_grads({.N = 2, .C = 3, .H = 6, .W = 8, .K = 2, .stride = 2, .pad = 0});
}

TEST(CnnGradCheck, GlobalAvgPool) {
  const int N = 3, C = 4, HW = 9;
  std::mt19937 g(4);
  Vec inp = randn(size_t(N) * C * HW, g), G = randn(size_t(N) * C, g), out(size_t(N) * C);
  auto loss = [&] {
    global_avgpool_forward(out.data(), inp.data(), N, C, HW);
    return dot(G, out);
  };
  Vec dinp(inp.size(), kNaN);
  global_avgpool_backward(dinp.data(), G.data(), N, C, HW);
  EXPECT_LT(grad_error(loss, inp, dinp), kTol);
}

TEST(CnnPool, MaxPoolTiesGoToTheFirstInRowMajorOrder) {
  const Pool2dShape s{.N = 1, .C = 1, .H = 4, .W = 4, .K = 2, .stride = 2, .pad = 0};
  // Windows: [0,1;4,5] ties at 1 and 4; [2,3;6,7] all equal; [8,9;12,13] ties at 9, 12, 13;
  // [10,11;14,15] tie at 11 and 14.
  const Vec inp = {0, 5, 1, 1, 5, 2, 1, 1, 0, 3, -1, 2, 3, 3, 2, -1};
  Vec out(4, kNaN);
  std::vector<int32_t> argmax(4, -1);
  maxpool2d_forward(out.data(), argmax.data(), inp.data(), s);
  EXPECT_EQ(out, (Vec{5, 1, 3, 2}));
  EXPECT_EQ(argmax, (std::vector<int32_t>{1, 2, 9, 11}));
  // Overlapping windows (stride 1) that pick the same input add their gradients there.
  const Pool2dShape o{.N = 1, .C = 1, .H = 3, .W = 3, .K = 2, .stride = 1, .pad = 0};
  const Vec flat(9, 1.0);
  Vec out2(4), dinp(9, kNaN);
  std::vector<int32_t> am2(4);
  maxpool2d_forward(out2.data(), am2.data(), flat.data(), o);
  EXPECT_EQ(am2, (std::vector<int32_t>{0, 1, 3, 4}));
  const Vec dy = {1, 2, 4, 8};
  maxpool2d_backward(dinp.data(), dy.data(), am2.data(), o);
  EXPECT_EQ(dinp, (Vec{1, 2, 0, 4, 8, 0, 0, 0, 0}));
}

// The vectorised 2x2 stride-2 path against the window-at-a-time one it bypasses: values from a
// small set (many ties), NaNs sprinkled in (the first NaN wins), odd sizes (a last row and column
// no window reads), float and double.
template <class F>
void check_maxpool2x2_matches_windows() {
  const Pool2dShape s{.N = 3, .C = 5, .H = 13, .W = 11, .K = 2, .stride = 2, .pad = 0};
  std::mt19937 g(21);
  std::uniform_int_distribution<int> level(0, 3), nan_at(0, 9);
  std::vector<F> inp(numel_in(s));
  for (F& x : inp) x = nan_at(g) == 0 ? F(kNaN) : F(level(g));
  std::vector<F> out_a(numel_out(s), F(-7)), out_b(numel_out(s), F(-7));
  std::vector<int32_t> am_a(numel_out(s), -1), am_b(numel_out(s), -1);
  maxpool2d_forward(out_a.data(), am_a.data(), inp.data(), s);
  maxpool2d_forward_windows(out_b.data(), am_b.data(), inp.data(), s);
  EXPECT_EQ(am_a, am_b);
  for (size_t i = 0; i < out_a.size(); ++i) {
    if (std::isnan(out_b[i])) {
      EXPECT_TRUE(std::isnan(out_a[i])) << i;
    } else {
      EXPECT_EQ(out_a[i], out_b[i]) << i;
    }
  }
}

TEST(CnnPool, MaxPool2x2MatchesWindowAtATime) {
  check_maxpool2x2_matches_windows<float>();
  check_maxpool2x2_matches_windows<double>();
}

TEST(CnnPool, MaxPoolPaddingNeverWins) {
  const Pool2dShape s{.N = 1, .C = 2, .H = 3, .W = 3, .K = 3, .stride = 2, .pad = 1};
  Vec inp(18);
  for (int i = 0; i < 18; ++i) inp[i] = -1.0 - i;  // all negative: a padded 0 would win
  Vec out(8, kNaN);
  std::vector<int32_t> argmax(8, -1);
  maxpool2d_forward(out.data(), argmax.data(), inp.data(), s);
  // Windows (rows, cols) clipped to the image: top-left [0,1]x[0,1] -> index 0, top-right
  // [0,1]x[1,2] -> 1, bottom-left [1,2]x[0,1] -> 3, bottom-right -> 4.
  EXPECT_EQ(argmax, (std::vector<int32_t>{0, 1, 3, 4, 0, 1, 3, 4}));
  EXPECT_EQ(out, (Vec{-1, -2, -4, -5, -10, -11, -13, -14}));
}

TEST(CnnFloat, PoolingMatchesDouble) {
  const Pool2dShape s{.N = 2, .C = 3, .H = 9, .W = 7, .K = 3, .stride = 2, .pad = 1};
  std::mt19937 g(15);
  const Vec inp = distinct_values(numel_in(s), g), dout = randn(numel_out(s), g);
  const VecF inpf = to_float(inp), doutf = to_float(dout);
  Vec out(numel_out(s)), dx(inp.size());
  VecF outf(out.size()), dxf(dx.size());
  std::vector<int32_t> am(out.size()), amf(out.size());
  maxpool2d_forward(out.data(), am.data(), inp.data(), s);
  maxpool2d_forward(outf.data(), amf.data(), inpf.data(), s);
  maxpool2d_backward(dx.data(), dout.data(), am.data(), s);
  maxpool2d_backward(dxf.data(), doutf.data(), amf.data(), s);
  EXPECT_EQ(am, amf);
  EXPECT_LT(rel_error(outf, out), kFloatTol);
  EXPECT_LT(rel_error(dxf, dx), kFloatTol);
  const int N = 2, C = 3, HW = 63;
  Vec avg(size_t(N) * C), davg(inp.size());
  VecF avgf(avg.size()), davgf(inp.size());
  global_avgpool_forward(avg.data(), inp.data(), N, C, HW);
  global_avgpool_forward(avgf.data(), inpf.data(), N, C, HW);
  global_avgpool_backward(davg.data(), dout.data(), N, C, HW);
  global_avgpool_backward(davgf.data(), doutf.data(), N, C, HW);
  EXPECT_LT(rel_error(avgf, avg), kFloatTol);
  EXPECT_LT(rel_error(davgf, davg), kFloatTol);
}

// ---- gradient rule
// --------------------------------------------------------------------------------

TEST(CnnRule, SecondBackwardAccumulatesParamsAndReassignsActivations) {
  std::mt19937 g(16);
  const Conv2dShape s{.N = 3, .IC = 2, .H = 5, .W = 5, .OC = 3, .KH = 3, .KW = 3, .pad = 1};
  const Vec inp = randn(numel_in(s), g), w = randn(numel_w(s), g), G = randn(numel_out(s), g);
  Conv<double> conv(s, true);
  Vec dinp(inp.size(), kNaN), dw(w.size(), 0.0), db(s.OC, 0.0);
  conv.backward(dinp.data(), dw.data(), db.data(), G, inp, w);
  const Vec dinp1 = dinp, dw1 = dw, db1 = db;
  conv.backward(dinp.data(), dw.data(), db.data(), G, inp, w);
  EXPECT_EQ(dinp, dinp1);
  for (size_t i = 0; i < dw.size(); ++i) EXPECT_DOUBLE_EQ(dw[i], 2 * dw1[i]);
  for (int o = 0; o < s.OC; ++o) EXPECT_DOUBLE_EQ(db[o], 2 * db1[o]);

  const int N = 4, C = 3, HW = 6, Gr = 2;
  const Vec x = randn(size_t(N) * C * HW, g), bw = randn(C, g), bb = randn(C, g),
            dy = randn(x.size(), g);
  Vec y(x.size()), mean(size_t(N / Gr) * C), rstd(mean.size());
  batchnorm2d_forward(y.data(), mean.data(), rstd.data(), x.data(), bw.data(), bb.data(), N, C, HW,
                      Gr, kEps);
  Vec dx(x.size(), kNaN), dbw(C, 0.0), dbb(C, 0.0);
  batchnorm2d_backward(dx.data(), dbw.data(), dbb.data(), dy.data(), x.data(), bw.data(),
                       mean.data(), rstd.data(), N, C, HW, Gr);
  const Vec dx1 = dx, dbw1 = dbw, dbb1 = dbb;
  batchnorm2d_backward(dx.data(), dbw.data(), dbb.data(), dy.data(), x.data(), bw.data(),
                       mean.data(), rstd.data(), N, C, HW, Gr);
  EXPECT_EQ(dx, dx1);
  for (int c = 0; c < C; ++c) {
    EXPECT_DOUBLE_EQ(dbw[c], 2 * dbw1[c]);
    EXPECT_DOUBLE_EQ(dbb[c], 2 * dbb1[c]);
  }
}

// ---- thread-count determinism
// ---------------------------------------------------------------------

// Conv (fast path, shapes with many slots) and batch norm, forward and backward, outputs
// concatenated; big enough for every parallel loop to split.
VecF run_float_cnn_layers() {
  std::mt19937 g(17);
  std::normal_distribution<float> nd;
  auto rnd = [&](size_t k) {
    VecF x(k);
    for (float& e : x) e = nd(g);
    return x;
  };
  VecF result;
  auto keep = [&](const VecF& x) { result.insert(result.end(), x.begin(), x.end()); };
  const std::vector<Conv2dShape> shapes = {
      {.N = 24, .IC = 16, .H = 14, .W = 14, .OC = 24, .KH = 3, .KW = 3, .pad = 1},
      {.N = 40, .IC = 24, .H = 7, .W = 7, .OC = 32, .KH = 3, .KW = 3, .pad = 1},
      {.N = 16, .IC = 32, .H = 16, .W = 16, .OC = 16, .KH = 1, .KW = 1},
      {.N = 13, .IC = 3, .H = 14, .W = 14, .OC = 16, .KH = 3, .KW = 3, .stride = 2, .pad = 1},
  };
  for (const Conv2dShape& s : shapes)
    for (Kernels k : {Kernels::im2col, Kernels::onednn}) {
      const VecF inp = rnd(numel_in(s)), w = rnd(numel_w(s)), b = rnd(s.OC),
                 dout = rnd(numel_out(s));
      Conv<float> conv(s, k);  // planned at this thread count
      VecF out(numel_out(s)), dinp(inp.size()), dw(w.size(), 0.f), db(s.OC, 0.f);
      conv.forward(out, inp, w, b.data());
      conv.backward(dinp.data(), dw.data(), db.data(), dout, inp, w);
      keep(out);
      keep(dinp);
      keep(dw);
      keep(db);
    }
  const int N = 16, C = 24, HW = 49, G = 4;
  const VecF x = rnd(size_t(N) * C * HW), w = rnd(C), b = rnd(C), dy = rnd(x.size());
  VecF y(x.size()), mean(size_t(N / G) * C), rstd(mean.size()), dx(x.size()), dw(C, 0.f),
      db(C, 0.f);
  batchnorm2d_forward(y.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C, HW, G,
                      kEps);
  batchnorm2d_backward(dx.data(), dw.data(), db.data(), dy.data(), x.data(), w.data(), mean.data(),
                       rstd.data(), N, C, HW, G);
  keep(y);
  keep(mean);
  keep(rstd);
  keep(dx);
  keep(dw);
  keep(db);
  return result;
}

TEST(CnnDeterminism, FloatBitIdenticalForOneToFourThreads) {
#ifdef _OPENMP
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  const VecF one = run_float_cnn_layers();
  for (int threads = 2; threads <= 4; ++threads) {
    omp_set_num_threads(threads);
    const VecF other = run_float_cnn_layers();
    ASSERT_EQ(one.size(), other.size());
    EXPECT_EQ(0, std::memcmp(one.data(), other.data(), one.size() * sizeof(float)))
        << threads << " threads";
  }
  omp_set_num_threads(saved);
#else
  GTEST_SKIP() << "built without OpenMP";
#endif
}

}  // namespace
}  // namespace mpitron::cpu
