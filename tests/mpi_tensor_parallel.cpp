// MPI test of src/model/tensor_parallel, run by CTest at 1-4 ranks with tp = the world size: each
// layer on this rank's shard against the serial layer on the full tensors (built identically on
// every rank from fixed seeds), the replicated results bitwise equal on every rank, and the bytes.
// Every check runs on the CPU's layers and again on cpu-staged's (the all-reduces through host
// copies, the work between them through the device's table), whose results must be the CPU's bits.
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "comm/grid.hpp"
#include "comm/group.hpp"
#include "comm/mpi_check.hpp"
#include "layers/crossentropy.hpp"
#include "layers/embedding.hpp"
#include "layers/linear.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/tensor_parallel.hpp"

namespace {

using mpitron::comm::allreduce_bytes_sent;
using mpitron::comm::Group;
namespace cpu = mpitron::cpu;
namespace tp = mpitron::tp;
using Vec = std::vector<float>;
using mpitron::LayerOps;

int g_failures = 0;
int g_rank = 0;

// Records a failure and carries on: control flow never depends on a check, so every rank still
// makes the same collective calls and a failure cannot turn into a hang.
void expect(bool ok, const std::string& what, int line) {
  if (ok) return;
  ++g_failures;
  std::fprintf(stderr, "[rank %d] mpi_tensor_parallel.cpp:%d FAILED: %s\n", g_rank, line,
               what.c_str());
}
#define EXPECT(cond, what) expect((cond), std::string(#cond " -- ") + (what), __LINE__)

// Tolerances. The shards compute the same products and sums as the serial layer but split into
// per-rank partial sums added by MPI in another order (and GEMMs blocked differently), so results
// agree to float round-off: a few ulp times the number of terms, ~1e-6 relative here. Forward
// outputs are checked at 1e-5; gradients at 1e-4, as they are one more GEMM (or softmax and
// subtraction) downstream of those differences. The error is norm-wise, max|a - ref| / max|ref|,
// since a gradient element may cancel to near zero while its round-off does not.
constexpr double kForwardTol = 1e-5;
constexpr double kGradTol = 1e-4;
const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::string ctx(const std::string& what, int p, int extra = -1) {
  return what + " tp=" + std::to_string(p) + (extra >= 0 ? " (" + std::to_string(extra) + ")" : "");
}

// Seeded normals, the same on every rank for the same seed.
Vec randn(size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 gen(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  Vec v(n);
  for (float& x : v) x = dist(gen);
  return v;
}

std::vector<int32_t> rand_tokens(size_t n, int V, unsigned seed) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int32_t> dist(0, V - 1);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = dist(gen);
  return v;
}

// Norm-wise relative error of got against ref (n elements); infinity on any NaN.
double rel_err(const float* got, const float* ref, size_t n) {
  double diff = 0, scale = 0;
  for (size_t i = 0; i < n; ++i) {
    if (std::isnan(got[i]) || std::isnan(ref[i])) return std::numeric_limits<double>::infinity();
    diff = std::max(diff, std::fabs(double(got[i]) - double(ref[i])));
    scale = std::max(scale, std::fabs(double(ref[i])));
  }
  return scale > 0 ? diff / scale : diff;
}

void expect_close(const Vec& got, const Vec& ref, double tol, const std::string& what, int line) {
  const bool same_size = got.size() == ref.size();
  const double err = same_size ? rel_err(got.data(), ref.data(), got.size()) : 1e300;
  expect(same_size && err <= tol, what + ": rel err " + std::to_string(err), line);
}
#define EXPECT_CLOSE(got, ref, tol, what) expect_close((got), (ref), (tol), (what), __LINE__)

bool bits_equal(const Vec& a, const Vec& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// FNV-1a over the bit patterns, folded to 62 bits so that its negation is representable.
int64_t bit_hash(const float* v, size_t n) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < n; ++i) {
    uint32_t u;
    std::memcpy(&u, v + i, 4);
    h = (h ^ u) * 1099511628211ull;
  }
  return static_cast<int64_t>(h >> 2);
}

// True on every rank iff v has the same bits on every rank of g. Both reductions always run (on
// world, so the tp group's byte counter is untouched).
bool same_bits_everywhere(const Vec& v) {
  Group world = Group::world();
  const int64_t x = bit_hash(v.data(), v.size());
  const int64_t hi = world.allreduce_max(x);
  const int64_t lo = -world.allreduce_max(-x);
  return hi == lo;
}

// Rows [r0, r1) of a row-major (R, C) matrix, and columns [c0, c1).
Vec rows(const Vec& m, int C, int r0, int r1) {
  return Vec(m.begin() + ptrdiff_t(r0) * C, m.begin() + ptrdiff_t(r1) * C);
}
Vec cols(const Vec& m, int R, int C, int c0, int c1) {
  Vec out;
  out.reserve(size_t(R) * (c1 - c0));
  for (int r = 0; r < R; ++r)
    out.insert(out.end(), m.begin() + ptrdiff_t(r) * C + c0, m.begin() + ptrdiff_t(r) * C + c1);
  return out;
}

// The vectors one after another (a test's results, compared between the two tables).
Vec concat(std::initializer_list<Vec> parts) {
  Vec out;
  for (const Vec& v : parts) out.insert(out.end(), v.begin(), v.end());
  return out;
}

// ---- the communication pairs ----

// copy_to_tp backward and reduce_from_tp forward: the sum over ranks, the same bits on every rank
// (replicated LayerNorms downstream must stay identical), the all-reduce's bytes, none at tp 1.
void test_allreduce_pairs(tp::TpComm& t, const LayerOps& ops) {
  Group& g = *t.group;
  const int p = g.size(), r = g.rank();
  for (size_t n : {size_t{1}, size_t{1000}, size_t{123457}}) {
    Vec ref(n, 0.0f);
    for (int q = 0; q < p; ++q) {
      const Vec part = randn(n, 100 + q);
      for (size_t i = 0; i < n; ++i) ref[i] += part[i];
    }
    const Vec mine = randn(n, 100 + r);
    for (int which = 0; which < 2; ++which) {
      Vec buf = mine;
      const uint64_t before = g.bytes_sent;
      if (which == 0)
        tp::copy_to_tp_backward(t, buf.data(), n, ops);
      else
        tp::reduce_from_tp_forward(t, buf.data(), n, ops);
      const std::string what = ctx(which == 0 ? "copy_to_tp_backward" : "reduce_from_tp_forward", p,
                                   static_cast<int>(n));
      EXPECT_CLOSE(buf, ref, kForwardTol, what);
      EXPECT(same_bits_everywhere(buf), what + " bitwise equal on every rank");
      EXPECT(g.bytes_sent - before == allreduce_bytes_sent(n, sizeof(float), p, r),
             what + " bytes");
      if (p == 1) EXPECT(bits_equal(buf, mine) && g.bytes_sent == before, what + " tp 1: no-op");
    }
    // The identity halves touch nothing and send nothing.
    Vec buf = mine;
    const uint64_t before = g.bytes_sent;
    tp::copy_to_tp_forward(t, buf.data(), n);
    tp::reduce_from_tp_backward(t, buf.data(), n);
    EXPECT(bits_equal(buf, mine) && g.bytes_sent == before, ctx("identity halves", p));
  }
  // allreduce_max, float and double, counted like allreduce_sum.
  for (size_t n : {size_t{1}, size_t{1000}}) {
    Vec ref(n, -std::numeric_limits<float>::infinity());
    for (int q = 0; q < p; ++q) {
      const Vec part = randn(n, 200 + q);
      for (size_t i = 0; i < n; ++i) ref[i] = std::max(ref[i], part[i]);
    }
    Vec buf = randn(n, 200 + r);
    std::vector<double> dbuf(buf.begin(), buf.end());
    uint64_t before = g.bytes_sent;
    g.allreduce_max(buf.data(), n);
    EXPECT(bits_equal(buf, ref), ctx("allreduce_max float", p, static_cast<int>(n)));
    EXPECT(g.bytes_sent - before == allreduce_bytes_sent(n, 4, p, r),
           ctx("allreduce_max bytes", p));
    before = g.bytes_sent;
    g.allreduce_max(dbuf.data(), n);
    EXPECT(Vec(dbuf.begin(), dbuf.end()) == ref, ctx("allreduce_max double", p));
    EXPECT(g.bytes_sent - before == allreduce_bytes_sent(n, 8, p, r),
           ctx("allreduce_max double bytes", p));
  }
}

// ---- an MLP: column-parallel then row-parallel ----

// x (N,C) -> h = x W1^T + b1 (N,H), W1 split by rows -> y = h W2^T + b2 (N,C), W2 split by
// columns. One all-reduce in forward (row-parallel), one in backward (column-parallel dinp).
Vec test_mlp(tp::TpComm& t, bool bias, const LayerOps& ops) {
  Group& g = *t.group;
  const int p = g.size(), r = g.rank();
  const int N = 10, C = 12, H = 48, Hl = H / p, h0 = r * Hl;
  const std::string tag = bias ? " (bias)" : " (no bias)";
  const Vec x = randn(size_t(N) * C, 1), W1 = randn(size_t(H) * C, 2, 0.3f), b1 = randn(H, 3),
            W2 = randn(size_t(C) * H, 4, 0.2f), b2 = randn(C, 5), dy = randn(size_t(N) * C, 6);
  // Prefilled parameter gradients (they accumulate); activation gradients start as NaN.
  const Vec dW1_0 = randn(size_t(H) * C, 7), db1_0 = randn(H, 8), dW2_0 = randn(size_t(C) * H, 9),
            db2_0 = randn(C, 10);

  // Serial on the full tensors.
  Vec h(size_t(N) * H), y(size_t(N) * C), dh(size_t(N) * H, kNaN), dx(size_t(N) * C, kNaN);
  Vec dW1 = dW1_0, db1 = db1_0, dW2 = dW2_0, db2 = db2_0;
  cpu::linear_forward(h.data(), x.data(), W1.data(), bias ? b1.data() : nullptr, N, C, H);
  cpu::linear_forward(y.data(), h.data(), W2.data(), bias ? b2.data() : nullptr, N, H, C);
  cpu::linear_backward(dh.data(), dW2.data(), bias ? db2.data() : nullptr, dy.data(), h.data(),
                       W2.data(), N, H, C);
  cpu::linear_backward(dx.data(), dW1.data(), bias ? db1.data() : nullptr, dh.data(), x.data(),
                       W1.data(), N, C, H);

  // This rank's shards.
  const Vec W1l = rows(W1, C, h0, h0 + Hl), b1l = rows(b1, 1, h0, h0 + Hl),
            W2l = cols(W2, C, H, h0, h0 + Hl);
  Vec hl(size_t(N) * Hl, kNaN), yt(size_t(N) * C, kNaN), dhl(size_t(N) * Hl, kNaN),
      dxt(size_t(N) * C, kNaN);
  Vec dW1l = rows(dW1_0, C, h0, h0 + Hl), db1l = rows(db1_0, 1, h0, h0 + Hl),
      dW2l = cols(dW2_0, C, H, h0, h0 + Hl), db2t = db2_0;

  const uint64_t start = g.bytes_sent;
  tp::column_parallel_linear_forward(t, hl.data(), x.data(), W1l.data(),
                                     bias ? b1l.data() : nullptr, N, C, Hl, ops);
  EXPECT(g.bytes_sent == start, ctx("column-parallel forward sends nothing" + tag, p));
  tp::row_parallel_linear_forward(t, yt.data(), hl.data(), W2l.data(), bias ? b2.data() : nullptr,
                                  N, Hl, C, ops);
  const uint64_t ar = allreduce_bytes_sent(size_t(N) * C, sizeof(float), p, r);
  EXPECT(g.bytes_sent - start == ar, ctx("forward: one all-reduce of N*C" + tag, p));
  tp::row_parallel_linear_backward(t, dhl.data(), dW2l.data(), bias ? db2t.data() : nullptr,
                                   dy.data(), hl.data(), W2l.data(), N, Hl, C, ops);
  EXPECT(g.bytes_sent - start == ar, ctx("row-parallel backward sends nothing" + tag, p));
  tp::column_parallel_linear_backward(t, dxt.data(), dW1l.data(), bias ? db1l.data() : nullptr,
                                      dhl.data(), x.data(), W1l.data(), N, C, Hl, ops);
  EXPECT(g.bytes_sent - start == 2 * ar, ctx("forward+backward: two all-reduces of N*C" + tag, p));
  if (p == 1) EXPECT(g.bytes_sent == start, ctx("tp 1 sends nothing" + tag, p));

  const Vec h_ref = cols(h, N, H, h0, h0 + Hl), dh_ref = cols(dh, N, H, h0, h0 + Hl),
            dW1_ref = rows(dW1, C, h0, h0 + Hl), db1_ref = rows(db1, 1, h0, h0 + Hl),
            dW2_ref = cols(dW2, C, H, h0, h0 + Hl);
  EXPECT_CLOSE(hl, h_ref, kForwardTol, ctx("column-parallel out" + tag, p));
  EXPECT_CLOSE(yt, y, kForwardTol, ctx("row-parallel out" + tag, p));
  EXPECT_CLOSE(dhl, dh_ref, kGradTol, ctx("row-parallel dinp" + tag, p));
  EXPECT_CLOSE(dW2l, dW2_ref, kGradTol, ctx("row-parallel dw" + tag, p));
  EXPECT_CLOSE(db2t, db2, kGradTol, ctx("row-parallel db" + tag, p));
  EXPECT_CLOSE(dxt, dx, kGradTol, ctx("column-parallel dinp" + tag, p));
  EXPECT_CLOSE(dW1l, dW1_ref, kGradTol, ctx("column-parallel dw" + tag, p));
  EXPECT_CLOSE(db1l, db1_ref, kGradTol, ctx("column-parallel db" + tag, p));
  if (!bias) {
    EXPECT(bits_equal(db1l, rows(db1_0, 1, h0, h0 + Hl)) && bits_equal(db2t, db2_0),
           ctx("no bias: db untouched", p));
  }
  // Replicated results: the same bits on every rank.
  EXPECT(same_bits_everywhere(yt), ctx("row-parallel out bitwise equal on every rank" + tag, p));
  EXPECT(same_bits_everywhere(dxt), ctx("column-parallel dinp bitwise equal everywhere" + tag, p));
  EXPECT(same_bits_everywhere(db2t), ctx("row-parallel db bitwise equal everywhere" + tag, p));
  if (p == 1) {
    EXPECT(bits_equal(hl, h) && bits_equal(yt, y) && bits_equal(dhl, dh) && bits_equal(dxt, dx) &&
               bits_equal(dW1l, dW1) && bits_equal(db1l, db1) && bits_equal(dW2l, dW2) &&
               bits_equal(db2t, db2),
           ctx("tp 1: bit-identical to the serial layers" + tag, p));
  }
  return concat({hl, yt, dhl, dxt, dW1l, db1l, dW2l, db2t});
}

// ---- vocab-parallel embedding ----

Vec test_embedding(tp::TpComm& t, int V, const LayerOps& ops) {
  Group& g = *t.group;
  const int p = g.size(), r = g.rank();
  const int B = 3, T = 5, C = 12, maxT = 7, N = B * T;
  const int Vl = (V + p - 1) / p, v0 = r * Vl, real = std::clamp(V - v0, 0, Vl);
  const auto tokens = rand_tokens(N, V, 20 + V);
  const Vec wte = randn(size_t(V) * C, 21), wpe = randn(size_t(maxT) * C, 22),
            dout = randn(size_t(N) * C, 23), dwte_0 = randn(size_t(V) * C, 24),
            dwpe_0 = randn(size_t(maxT) * C, 25);

  Vec out(size_t(N) * C), dwte = dwte_0, dwpe = dwpe_0;
  cpu::embedding_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  cpu::embedding_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);

  // This rank's rows of wte; rows past the vocabulary are NaN padding and must never be read.
  Vec wtel(size_t(Vl) * C, kNaN), dwtel(size_t(Vl) * C, 7.0f);
  const int first = std::min(v0, V);  // v0 itself may lie past V on a rank of padding only
  std::copy_n(wte.begin() + ptrdiff_t(first) * C, size_t(real) * C, wtel.begin());
  std::copy_n(dwte_0.begin() + ptrdiff_t(first) * C, size_t(real) * C, dwtel.begin());
  Vec outt(size_t(N) * C, kNaN), dwpet = dwpe_0;

  const uint64_t start = g.bytes_sent;
  tp::vocab_parallel_embedding_forward(t, outt.data(), tokens.data(), wtel.data(), wpe.data(), B, T,
                                       C, v0, Vl, ops);
  EXPECT(g.bytes_sent - start == allreduce_bytes_sent(size_t(N) * C, sizeof(float), p, r),
         ctx("embedding forward: one all-reduce of B*T*C", p, V));
  tp::vocab_parallel_embedding_backward(t, dwtel.data(), dwpet.data(), dout.data(), tokens.data(),
                                        B, T, C, v0, Vl, ops);
  EXPECT(g.bytes_sent - start == allreduce_bytes_sent(size_t(N) * C, sizeof(float), p, r),
         ctx("embedding backward sends nothing", p, V));

  EXPECT_CLOSE(outt, out, kForwardTol, ctx("embedding out", p, V));
  // One rank contributes each row and the rest add zeros, so the sum is exact: same bits.
  EXPECT(bits_equal(outt, out), ctx("embedding out bit-identical to serial", p, V));
  EXPECT(same_bits_everywhere(outt), ctx("embedding out bitwise equal on every rank", p, V));
  const Vec dwte_real(dwtel.begin(), dwtel.begin() + ptrdiff_t(real) * C);
  EXPECT_CLOSE(dwte_real, rows(dwte, C, first, first + real), kGradTol,
               ctx("embedding dwte", p, V));
  EXPECT(std::all_of(dwtel.begin() + ptrdiff_t(real) * C, dwtel.end(),
                     [](float v) { return v == 7.0f; }),
         ctx("embedding dwte padding untouched", p, V));
  EXPECT_CLOSE(dwpet, dwpe, kGradTol, ctx("embedding dwpe", p, V));
  if (p == 1)
    EXPECT(bits_equal(dwtel, dwte) && bits_equal(dwpet, dwpe),
           ctx("tp 1: embedding gradients bit-identical", p, V));
  return concat({outt, dwtel, dwpet});
}

// ---- vocab-parallel cross-entropy ----

Vec test_crossentropy(tp::TpComm& t, int V, const LayerOps& ops) {
  Group& g = *t.group;
  const int p = g.size(), r = g.rank();
  const int N = 9, Vl = (V + p - 1) / p, v0 = r * Vl, real = std::clamp(V - v0, 0, Vl);
  Vec logits = randn(size_t(N) * V, 30 + V, 3.0f);
  for (int j = 0; j < V; ++j) logits[j] += 100.0f;  // row 0: exp overflows without the max shift
  auto targets = rand_tokens(N, V, 31 + V);
  targets[2] = -1;  // a masked position: loss 0, gradient row 0 on every rank
  const float dloss = 1.0f / N;

  Vec losses(N), lse(N), dlogits(size_t(N) * V);
  cpu::crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V);
  cpu::crossentropy_backward(dlogits.data(), logits.data(), lse.data(), targets.data(), dloss, N,
                             V);

  // This rank's columns; padding (global column >= V) is garbage that must change nothing.
  Vec logitsl(size_t(N) * Vl);
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < Vl; ++j)
      logitsl[size_t(n) * Vl + j] =
          j < real ? logits[size_t(n) * V + v0 + j] : (j % 2 == 0 ? kNaN : 1e30f);
  Vec lossest(N, kNaN), lset(N, kNaN), scratch(3 * size_t(N), kNaN), dlogitsl(size_t(N) * Vl, kNaN);

  const uint64_t start = g.bytes_sent;
  tp::vocab_parallel_crossentropy_forward(t, lossest.data(), lset.data(), scratch.data(),
                                          logitsl.data(), targets.data(), N, Vl, v0, V, ops);
  const uint64_t three = 3 * allreduce_bytes_sent(N, sizeof(float), p, r);
  EXPECT(g.bytes_sent - start == three, ctx("CE forward: three all-reduces of N", p, V));
  tp::vocab_parallel_crossentropy_backward(t, dlogitsl.data(), logitsl.data(), lset.data(),
                                           targets.data(), dloss, N, Vl, v0, V, ops);
  EXPECT(g.bytes_sent - start == three, ctx("CE backward sends nothing", p, V));
  if (p == 1) EXPECT(g.bytes_sent == start, ctx("CE tp 1 sends nothing", p, V));

  EXPECT_CLOSE(lossest, losses, kForwardTol, ctx("CE losses", p, V));
  EXPECT_CLOSE(lset, lse, kForwardTol, ctx("CE lse", p, V));
  EXPECT(same_bits_everywhere(lossest) && same_bits_everywhere(lset),
         ctx("CE losses and lse bitwise equal on every rank", p, V));
  Vec dreal, dref;
  bool padding_zero = true;
  for (int n = 0; n < N; ++n)
    for (int j = 0; j < Vl; ++j) {
      const float d = dlogitsl[size_t(n) * Vl + j];
      if (j < real) {
        dreal.push_back(d);
        dref.push_back(dlogits[size_t(n) * V + v0 + j]);
      } else {
        padding_zero = padding_zero && d == 0.0f;
      }
    }
  EXPECT_CLOSE(dreal, dref, kGradTol, ctx("CE dlogits", p, V));
  EXPECT(padding_zero, ctx("CE dlogits padding is 0", p, V));
  // In place (dlogits aliasing logits) gives the same bits.
  Vec inplace = logitsl;
  tp::vocab_parallel_crossentropy_backward(t, inplace.data(), inplace.data(), lset.data(),
                                           targets.data(), dloss, N, Vl, v0, V, ops);
  EXPECT(bits_equal(inplace, dlogitsl), ctx("CE backward in place", p, V));
  if (p == 1)
    EXPECT(bits_equal(lossest, losses) && bits_equal(lset, lse) && bits_equal(dlogitsl, dlogits),
           ctx("tp 1: CE bit-identical to serial", p, V));
  return concat({lossest, lset, dlogitsl});
}

}  // namespace

int main(int argc, char** argv) {
  mpitron::init_mpi(&argc, &argv);
  int p = 0;
  MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &g_rank));
  MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &p));
  {
    mpitron::comm::Grid grid = mpitron::comm::make_grid(1, p, 1);  // tp = the world size
    const LayerOps& host = mpitron::cpu_layer_ops();
    const LayerOps& staged = mpitron::layer_ops<float>(mpitron::Device::cpu_staged);
    for (const LayerOps* ops : {&host, &staged}) {
      tp::TpComm t;
      t.group = &grid.tp;
      test_allreduce_pairs(t, *ops);
      if (ops == &staged)
        EXPECT(p == 1 || t.staging.size() == 123457, ctx("cpu-staged: the all-reduces staged", p));
    }
    // Each layer on both tables: the checks above on each, and the same bits from both.
    tp::TpComm t;
    t.group = &grid.tp;
    for (bool bias : {true, false})
      EXPECT(bits_equal(test_mlp(t, bias, host), test_mlp(t, bias, staged)),
             ctx("mlp: cpu-staged gives the cpu's bits", p));
    // 24: every tp in 1..4 divides it; 11: none above 1 does; 5 at tp 4: rank 3 holds only padding.
    for (int V : {5, 11, 24})
      EXPECT(bits_equal(test_embedding(t, V, host), test_embedding(t, V, staged)),
             ctx("embedding: cpu-staged gives the cpu's bits", p, V));
    for (int V : {5, 11, 24, 997})
      EXPECT(bits_equal(test_crossentropy(t, V, host), test_crossentropy(t, V, staged)),
             ctx("cross-entropy: cpu-staged gives the cpu's bits", p, V));

    const int64_t failed = Group::world().allreduce_sum(static_cast<int64_t>(g_failures));
    if (g_rank == 0) {
      if (failed == 0)
        std::printf("mpi_tensor_parallel: all checks passed at tp %d\n", p);
      else
        std::printf("mpi_tensor_parallel: %lld check(s) FAILED at tp %d\n",
                    static_cast<long long>(failed), p);
    }
    g_failures = static_cast<int>(failed);
  }
  mpitron::finalize_mpi();
  return g_failures == 0 ? 0 : 1;
}
