// Megatron-style tensor parallelism on the CPU (Shoeybi et al. 2019): each layer is the serial
// layer on this rank's shard plus at most one all-reduce (copy_to_tp / reduce_from_tp), and the
// vocab-parallel cross-entropy all-reduces N-sized row statistics instead of gathering logits.
#include "src/model/tensor_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>

#include "layers/cpu/column_blocks.hpp"
#include "layers/crossentropy.hpp"
#include "layers/encoder.hpp"
#include "layers/linear.hpp"
#include "base/check.hpp"
#include "base/fastmath.hpp"

namespace mpitron::tp {

namespace {

// Adds the replicated row vector v (C) to every row of x (N,C).
void add_rows(float* x, const float* v, int N, int C) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    float* row = x + ptrdiff_t(n) * C;
    for (int c = 0; c < C; ++c) row[c] += v[c];
  }
}

// Above tp 1 the collectives and the loops here take host memory: the CPU's layers only.
void require_host_layers_above_tp1(const comm::Group& tp, const LayerOps& ops) {
  MPITRON_REQUIRE(tp.size() == 1 || &ops == &cpu_layer_ops(),
                  std::string("tensor parallelism runs on the cpu only, not on ") + ops.device);
}

// Columns of [v0, v0+Vl) that are real vocabulary entries (< V): [0, real).
int real_columns(int Vl, int v0, int V) {
  return std::clamp(V - v0, 0, Vl);
}

}  // namespace

void require_serial(const comm::Group& tp, DType t) {
  if (tp.size() > 1)
    throw UsageError(fmt::format(
        "--precision {}: tensor parallelism runs in fp32 only (use --tp 1 or --precision fp32)",
        precision_name(t)));
}

// ---- communication pairs ----

// copy_to_tp forward: identity, the input is replicated.
void copy_to_tp_forward(comm::Group&, const float*, size_t) {}
// copy_to_tp backward: all-reduce (sum) of the input gradient; no collective at tp 1.
void copy_to_tp_backward(comm::Group& tp, float* dx, size_t n) {
  if (tp.size() > 1) tp.allreduce_sum(dx, n);
}

// reduce_from_tp forward: all-reduce (sum) of the partial outputs; no collective at tp 1.
void reduce_from_tp_forward(comm::Group& tp, float* y, size_t n) {
  if (tp.size() > 1) tp.allreduce_sum(y, n);
}
// reduce_from_tp backward: identity, the output gradient is replicated.
void reduce_from_tp_backward(comm::Group&, const float*, size_t) {}

// ---- column-parallel linear ----

void column_parallel_linear_forward(comm::Group& tp, float* out, const float* inp, const float* w,
                                    const float* b, int N, int IC, int OCl, const LayerOps& ops) {
  require_host_layers_above_tp1(tp, ops);
  copy_to_tp_forward(tp, inp, size_t(N) * IC);
  ops.linear_forward(out, inp, w, b, N, IC, OCl);
}

void column_parallel_linear_gelu_forward(comm::Group& tp, float* pre, float* out, const float* inp,
                                         const float* w, const float* b, int N, int IC, int OCl,
                                         const LayerOps& ops) {
  require_host_layers_above_tp1(tp, ops);
  copy_to_tp_forward(tp, inp, size_t(N) * IC);
  ops.linear_gelu_forward(pre, out, inp, w, b, N, IC, OCl);
}

void column_parallel_linear_backward(comm::Group& tp, float* dinp, float* dw, float* db,
                                     const float* dout, const float* inp, const float* w, int N,
                                     int IC, int OCl, const LayerOps& ops) {
  require_host_layers_above_tp1(tp, ops);
  ops.linear_backward(dinp, dw, db, dout, inp, w, N, IC, OCl);
  if (dinp) copy_to_tp_backward(tp, dinp, size_t(N) * IC);
}

// ---- row-parallel linear ----

void row_parallel_linear_forward(comm::Group& tp, float* out, const float* inp, const float* w,
                                 const float* b, int N, int ICl, int OC, const LayerOps& ops) {
  if (tp.size() == 1) return ops.linear_forward(out, inp, w, b, N, ICl, OC);
  require_host_layers_above_tp1(tp, ops);
  cpu::linear_forward(out, inp, w, static_cast<const float*>(nullptr), N, ICl, OC);
  reduce_from_tp_forward(tp, out, size_t(N) * OC);
  if (b) add_rows(out, b, N, OC);
}

void row_parallel_linear_backward(comm::Group& tp, float* dinp, float* dw, float* db,
                                  const float* dout, const float* inp, const float* w, int N,
                                  int ICl, int OC, const LayerOps& ops) {
  require_host_layers_above_tp1(tp, ops);
  reduce_from_tp_backward(tp, dout, size_t(N) * OC);
  ops.linear_backward(dinp, dw, db, dout, inp, w, N, ICl, OC);
}

// ---- vocab-parallel embedding ----

void vocab_parallel_embedding_forward(comm::Group& tp, float* out, const int32_t* tokens,
                                      const float* wte, const float* wpe, int B, int T, int C,
                                      int v0, int Vl, const LayerOps& ops) {
  if (tp.size() == 1) {
    MPITRON_REQUIRE(v0 == 0, "vocab_parallel_embedding_forward at tp 1 needs v0 = 0");
    return ops.encoder_forward(out, tokens, wte, wpe, B, T, C);
  }
  require_host_layers_above_tp1(tp, ops);
  const ptrdiff_t N = ptrdiff_t(B) * T;
#pragma omp parallel for schedule(static)
  for (ptrdiff_t i = 0; i < N; ++i) {
    const int v = tokens[i] - v0;
    float* o = out + i * C;
    if (v >= 0 && v < Vl)
      std::copy_n(wte + ptrdiff_t(v) * C, C, o);
    else
      std::fill_n(o, C, 0.0f);
  }
  // One rank contributes each row and the others add zeros: the sum is that row, exactly.
  reduce_from_tp_forward(tp, out, size_t(N) * C);
#pragma omp parallel for schedule(static)
  for (ptrdiff_t i = 0; i < N; ++i) {
    const float* p = wpe + (i % T) * C;
    float* o = out + i * C;
    for (int c = 0; c < C; ++c) o[c] += p[c];
  }
}

void vocab_parallel_embedding_backward(comm::Group& tp, float* dwte, float* dwpe, const float* dout,
                                       const int32_t* tokens, int B, int T, int C, int v0, int Vl,
                                       const LayerOps& ops) {
  if (tp.size() == 1) {
    MPITRON_REQUIRE(v0 == 0, "vocab_parallel_embedding_backward at tp 1 needs v0 = 0");
    return ops.encoder_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  require_host_layers_above_tp1(tp, ops);
  // As cpu::encoder_backward: whole columns per thread, rows added in token order.
  cpu::for_each_column_block(C, [&](int c0, int c1) {
    for (int b = 0; b < B; ++b) {
      for (int t = 0; t < T; ++t) {
        const ptrdiff_t i = ptrdiff_t(b) * T + t;
        const float* d = dout + i * C;
        float* p = dwpe + ptrdiff_t(t) * C;
        for (int c = c0; c < c1; ++c) p[c] += d[c];
        const int v = tokens[i] - v0;
        if (v < 0 || v >= Vl) continue;
        float* e = dwte + ptrdiff_t(v) * C;
        for (int c = c0; c < c1; ++c) e[c] += d[c];
      }
    }
  });
}

// ---- vocab-parallel cross-entropy ----

// lse = M + log(sum_ranks sum_j exp(x_j - M)) with M the global row max, loss = lse - x[target].
void vocab_parallel_crossentropy_forward(comm::Group& tp, float* losses, float* lse, float* scratch,
                                         const float* logits, const int32_t* targets, int N, int Vl,
                                         int v0, int V, const LayerOps& ops) {
  if (tp.size() == 1) {
    MPITRON_REQUIRE(v0 == 0 && Vl == V,
                    "vocab_parallel_crossentropy_forward at tp 1 needs v0 = 0 and Vl = V");
    return ops.crossentropy_forward(losses, lse, logits, targets, N, V);
  }
  require_host_layers_above_tp1(tp, ops);
  float* mx = scratch;              // (N) row max, then the global one
  float* sum = scratch + N;         // (N) sum of exp(x - global max)
  float* target = scratch + 2 * N;  // (N) the target's logit, from the rank that holds it
  const int real = real_columns(Vl, v0, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + ptrdiff_t(n) * Vl;
    float m = -std::numeric_limits<float>::infinity();  // a rank with only padding: -inf
#pragma omp simd reduction(max : m)
    for (int j = 0; j < real; ++j) m = std::max(m, x[j]);
    mx[n] = m;
    const int t = targets[n] - v0;
    target[n] = t >= 0 && t < real ? x[t] : 0.0f;
  }
  tp.allreduce_max(mx, size_t(N));
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + ptrdiff_t(n) * Vl;
    const float m = mx[n];
    float s = 0;
#pragma omp simd reduction(+ : s)
    for (int j = 0; j < real; ++j) s += cpu::exp_fast(x[j] - m);
    sum[n] = s;
  }
  tp.allreduce_sum(sum, size_t(N));
  tp.allreduce_sum(target, size_t(N));
  for (int n = 0; n < N; ++n) {
    const float l = mx[n] + std::log(sum[n]);
    lse[n] = l;
    losses[n] = l - target[n];
  }
}

// Each element is read before it is written at the same index, so dlogits may alias logits.
void vocab_parallel_crossentropy_backward(comm::Group& tp, float* dlogits, const float* logits,
                                          const float* lse, const int32_t* targets, float dloss,
                                          int N, int Vl, int v0, int V, const LayerOps& ops) {
  if (tp.size() == 1) {
    MPITRON_REQUIRE(v0 == 0 && Vl == V,
                    "vocab_parallel_crossentropy_backward at tp 1 needs v0 = 0 and Vl = V");
    return ops.crossentropy_backward(dlogits, logits, lse, targets, dloss, N, V);
  }
  require_host_layers_above_tp1(tp, ops);
  const int real = real_columns(Vl, v0, V);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; ++n) {
    const float* x = logits + ptrdiff_t(n) * Vl;
    float* d = dlogits + ptrdiff_t(n) * Vl;
    const float l = lse[n];
    const int t = targets[n] - v0;
#pragma omp simd
    for (int j = 0; j < real; ++j) d[j] = (cpu::exp_fast(x[j] - l) - float(j == t)) * dloss;
    for (int j = real; j < Vl; ++j) d[j] = 0.0f;
  }
}

}  // namespace mpitron::tp
