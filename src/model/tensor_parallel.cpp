// Megatron-style tensor parallelism on the CPU (Shoeybi et al. 2019): each layer is the serial
// layer on this rank's shard; copy_to_tp / reduce_from_tp all-reduce once per region (a region's
// input gradient overlapping its weight products), and the vocab-parallel cross-entropy
// all-reduces N-sized row statistics instead of gathering logits.
#include "src/model/tensor_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <string>

#include "base/check.hpp"
#include "base/fastmath.hpp"
#include "layers/cpu/column_blocks.hpp"
#include "layers/crossentropy.hpp"
#include "layers/embedding.hpp"
#include "layers/linear.hpp"
#include "layers/residual.hpp"

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

// Columns of [v0, v0+Vl) that are real vocabulary entries (< V): [0, real).
int real_columns(int Vl, int v0, int V) {
  return std::clamp(V - v0, 0, Vl);
}

}  // namespace

// ---- the layout ----

void require_tp_splits(int tp, std::initializer_list<TpSplit> splits) {
  for (const TpSplit& s : splits) {
    if (tp > s.size)
      throw UsageError(fmt::format("--tp {} is larger than {} ({}): {}", tp, s.key, s.size, s.why));
    if (s.size % tp != 0)
      throw UsageError(
          fmt::format("{} ({}) is not divisible by --tp {}: {}", s.key, s.size, tp, s.why));
  }
}

comm::Group* model_tp_group(const ModelBuild& how, comm::Group& self) {
  comm::Group* tp = how.tp ? how.tp : &self;
  MPITRON_REQUIRE(tp->size() == how.slice.tp && tp->rank() == how.slice.tp_rank,
                  "the TP group does not match the registry slice");
  return tp;
}

void require_serial(const comm::Group& tp, DType t) {
  if (tp.size() > 1)
    throw UsageError(fmt::format(
        "--precision {}: tensor parallelism runs in fp32 only (use --tp 1 or --precision fp32)",
        precision_name(t)));
}

void require_host_layers_above_tp1(const comm::Group& tp, const LayerOps& ops) {
  MPITRON_REQUIRE(
      tp.size() == 1 || &ops == &cpu_layer_ops(),
      std::string("tensor parallelism runs on the cpu only, not on ") + device_name(ops.device));
}

// ---- communication pairs ----

// copy_to_tp forward: identity (the header's template).
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

// ---- a region: copy_to_tp backward once for its consumers ----

TpRegion copy_to_tp_backward_begin(comm::Group& tp, float* dinp, float* partial, const float* base,
                                   int N, int IC, bool per_layer, const LayerOps& ops) {
  require_host_layers_above_tp1(tp, ops);
  TpRegion r;
  r.ops = &ops;
  r.tp = &tp;
  r.dinp = dinp;
  r.partial = partial;
  r.N = N;
  r.IC = IC;
  r.per_layer = per_layer;
  if (base && dinp) {
    const size_t n = size_t(N) * IC;
    if (per_layer || tp.rank() == 0) {
      if (base != dinp) ops.copy(dinp, base, n);
    } else {
      ops.zero(dinp, n);
    }
    r.holds = true;
  }
  return r;
}

void copy_to_tp_backward_start(TpRegion& r) {
  MPITRON_REQUIRE(!r.pending.pending(), "copy_to_tp_backward_start: the region already started");
  if (r.tp->size() == 1 || r.per_layer || !r.dinp || !r.holds) return;
  r.pending = r.tp->iallreduce_sum(r.dinp, size_t(r.N) * r.IC);
}

void copy_to_tp_backward_wait(TpRegion& r) {
  r.pending.wait();
}

// ---- column-parallel linear ----

void column_parallel_linear_forward(comm::Group& tp, float* out, const float* inp, const float* w,
                                    const float* b, int N, int IC, int OCl, const LayerOps& ops) {
  require_host_layers_above_tp1(tp, ops);
  ops.linear_forward(out, inp, w, b, N, IC, OCl);
}

void column_parallel_linear_gelu_forward(comm::Group& tp, float* pre, float* out, const float* inp,
                                         const float* w, const float* b, int N, int IC, int OCl,
                                         const LayerOps& ops) {
  require_host_layers_above_tp1(tp, ops);
  ops.linear_gelu_forward(pre, out, inp, w, b, N, IC, OCl);
}

// The product goes straight into dinp when it is the first, else into partial and is added
// (cpu::residual_forward: dinp = dinp + partial), consumers in call order.
void column_parallel_linear_backward_input(TpRegion& r, const float* dout, const float* w,
                                           int OCl) {
  MPITRON_REQUIRE(r.dinp, "column_parallel_linear_backward_input: the region has no dinp");
  MPITRON_REQUIRE(!r.pending.pending(), "column_parallel_linear_backward_input after start");
  const size_t n = size_t(r.N) * r.IC;
  float* const product = r.holds ? r.partial : r.dinp;
  MPITRON_REQUIRE(product, "a region's second product (or one after a base) needs partial");
  r.ops->linear_backward(product, nullptr, nullptr, dout, nullptr, w, r.N, r.IC, OCl);
  if (r.per_layer) copy_to_tp_backward(*r.tp, product, n);
  if (r.holds) r.ops->residual_forward(r.dinp, r.dinp, r.partial, n);
  r.holds = true;
}

void column_parallel_linear_backward_weights(TpRegion& r, float* dw, float* db, const float* dout,
                                             const float* inp, int OCl) {
  // A poke at the all-reduce in flight: MPI progresses a non-blocking collective inside its calls.
  if (r.pending.pending()) r.pending.test();
  r.ops->linear_backward(nullptr, dw, db, dout, inp, nullptr, r.N, r.IC, OCl);
}

void column_parallel_linear_backward(comm::Group& tp, float* dinp, float* dw, float* db,
                                     const float* dout, const float* inp, const float* w, int N,
                                     int IC, int OCl, const LayerOps& ops) {
  if (tp.size() == 1) return ops.linear_backward(dinp, dw, db, dout, inp, w, N, IC, OCl);
  require_host_layers_above_tp1(tp, ops);
  TpRegion r = copy_to_tp_backward_begin(tp, dinp, nullptr, nullptr, N, IC, false, ops);
  if (dinp) column_parallel_linear_backward_input(r, dout, w, OCl);
  copy_to_tp_backward_start(r);
  column_parallel_linear_backward_weights(r, dw, db, dout, inp, OCl);
  copy_to_tp_backward_wait(r);
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
    return ops.embedding_forward(out, tokens, wte, wpe, B, T, C);
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
    return ops.embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  require_host_layers_above_tp1(tp, ops);
  // As cpu::embedding_backward: whole columns per thread, rows added in token order.
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
    losses[n] = targets[n] < 0 ? 0.0f : l - target[n];
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
    if (targets[n] < 0) {
      std::fill(d, d + Vl, 0.0f);
      continue;
    }
#pragma omp simd
    for (int j = 0; j < real; ++j) d[j] = (cpu::exp_fast(x[j] - l) - float(j == t)) * dloss;
    for (int j = real; j < Vl; ++j) d[j] = 0.0f;
  }
}

}  // namespace mpitron::tp
