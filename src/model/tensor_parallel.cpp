// Megatron-style tensor parallelism (Shoeybi et al. 2019): each layer is the serial layer on this
// rank's shard; copy_to_tp / reduce_from_tp all-reduce once per region (a region's input gradient
// overlapping its weight products), and the vocab-parallel cross-entropy all-reduces N-sized row
// statistics instead of gathering logits. The work between the all-reduces is the device's layer
// table's; the all-reduces run on host copies where MPI cannot read the device's memory.
#include "src/model/tensor_parallel.hpp"

#include <fmt/format.h>

#include <cstddef>
#include <string>

#include "base/check.hpp"

namespace mpitron::tp {

namespace {

// Whether MPI reads and writes the layers' memory in place (else host copies).
bool host_memory(const LayerOps& ops) {
  return ops.device == Device::cpu;
}

// The host copy of n floats of the layers' memory x, in tp.staging.
float* download_to_staging(TpComm& tp, const LayerOps& ops, const float* x, size_t n) {
  if (tp.staging.size() < n) tp.staging.resize(n);
  ops.download(tp.staging.data(), x, n);
  return tp.staging.data();
}

// x (n floats of the layers' memory) through a blocking collective over TP, in place.
template <class Collective>
void all_reduce(TpComm& tp, const LayerOps& ops, float* x, size_t n, Collective collective) {
  if (host_memory(ops)) return collective(x);
  float* host = download_to_staging(tp, ops, x, n);
  collective(host);
  ops.upload(x, host, n);
}

void allreduce_sum(TpComm& tp, const LayerOps& ops, float* x, size_t n) {
  if (tp.device) return tp.device->allreduce_sum(tp.device->ctx, x, n);
  all_reduce(tp, ops, x, n, [&](float* p) { tp.group->allreduce_sum(p, n); });
}
void allreduce_max(TpComm& tp, const LayerOps& ops, float* x, size_t n) {
  if (tp.device) return tp.device->allreduce_max(tp.device->ctx, x, n);
  all_reduce(tp, ops, x, n, [&](float* p) { tp.group->allreduce_max(p, n); });
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

void require_serial(const TpComm& tp, DType t) {
  if (tp.size() > 1)
    throw UsageError(fmt::format(
        "--precision {}: tensor parallelism runs in fp32 only (use --tp 1 or --precision fp32)",
        precision_name(t)));
}

void require_tp_layers(const TpComm& tp, const LayerOps& ops) {
  MPITRON_REQUIRE(
      tp.size() == 1 || ops.add_bias_rows,
      std::string("the layers of ") + device_name(ops.device) + " have no tensor-parallel pieces");
}

// ---- communication pairs ----

// copy_to_tp forward: identity (the header's template).
// copy_to_tp backward: all-reduce (sum) of the input gradient; no collective at tp 1.
void copy_to_tp_backward(TpComm& tp, float* dx, size_t n, const LayerOps& ops) {
  if (tp.size() > 1) allreduce_sum(tp, ops, dx, n);
}

// reduce_from_tp forward: all-reduce (sum) of the partial outputs; no collective at tp 1.
void reduce_from_tp_forward(TpComm& tp, float* y, size_t n, const LayerOps& ops) {
  if (tp.size() > 1) allreduce_sum(tp, ops, y, n);
}
// reduce_from_tp backward: identity, the output gradient is replicated.
void reduce_from_tp_backward(TpComm&, const float*, size_t) {}

// ---- a region: copy_to_tp backward once for its consumers ----

TpRegion copy_to_tp_backward_begin(TpComm& tp, float* dinp, float* partial, const float* base,
                                   int N, int IC, bool per_layer, const LayerOps& ops) {
  require_tp_layers(tp, ops);
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
  const size_t n = size_t(r.N) * r.IC;
  // The device's own all-reduce runs in stream order with the weight products: nothing to wait for.
  if (r.tp->device) return r.tp->device->allreduce_sum(r.tp->device->ctx, r.dinp, n);
  r.staged = !host_memory(*r.ops);
  float* x = r.staged ? download_to_staging(*r.tp, *r.ops, r.dinp, n) : r.dinp;
  r.pending = r.tp->group->iallreduce_sum(x, n);
}

void copy_to_tp_backward_wait(TpRegion& r) {
  r.pending.wait();
  if (r.staged) r.ops->upload(r.dinp, r.tp->staging.data(), size_t(r.N) * r.IC);
  r.staged = false;
}

// ---- column-parallel linear ----

void column_parallel_linear_forward(TpComm& tp, float* out, const float* inp, const float* w,
                                    const float* b, int N, int IC, int OCl, const LayerOps& ops) {
  require_tp_layers(tp, ops);
  ops.linear_forward(out, inp, w, b, N, IC, OCl);
}

void column_parallel_linear_gelu_forward(TpComm& tp, float* pre, float* out, const float* inp,
                                         const float* w, const float* b, int N, int IC, int OCl,
                                         const LayerOps& ops) {
  require_tp_layers(tp, ops);
  ops.linear_gelu_forward(pre, out, inp, w, b, N, IC, OCl);
}

// The product goes straight into dinp when it is the first, else into partial and is added
// (ops.residual_forward: dinp = dinp + partial), consumers in call order.
void column_parallel_linear_backward_input(TpRegion& r, const float* dout, const float* w,
                                           int OCl) {
  MPITRON_REQUIRE(r.dinp, "column_parallel_linear_backward_input: the region has no dinp");
  MPITRON_REQUIRE(!r.pending.pending(), "column_parallel_linear_backward_input after start");
  const size_t n = size_t(r.N) * r.IC;
  float* const product = r.holds ? r.partial : r.dinp;
  MPITRON_REQUIRE(product, "a region's second product (or one after a base) needs partial");
  r.ops->linear_backward(product, nullptr, nullptr, dout, nullptr, w, r.N, r.IC, OCl);
  if (r.per_layer) copy_to_tp_backward(*r.tp, product, n, *r.ops);
  if (r.holds) r.ops->residual_forward(r.dinp, r.dinp, r.partial, n);
  r.holds = true;
}

void column_parallel_linear_backward_weights(TpRegion& r, float* dw, float* db, const float* dout,
                                             const float* inp, int OCl) {
  // A poke at the all-reduce in flight: MPI progresses a non-blocking collective inside its calls.
  if (r.pending.pending()) r.pending.test();
  r.ops->linear_backward(nullptr, dw, db, dout, inp, nullptr, r.N, r.IC, OCl);
}

void column_parallel_linear_backward(TpComm& tp, float* dinp, float* dw, float* db,
                                     const float* dout, const float* inp, const float* w, int N,
                                     int IC, int OCl, const LayerOps& ops) {
  if (tp.size() == 1) return ops.linear_backward(dinp, dw, db, dout, inp, w, N, IC, OCl);
  require_tp_layers(tp, ops);
  TpRegion r = copy_to_tp_backward_begin(tp, dinp, nullptr, nullptr, N, IC, false, ops);
  if (dinp) column_parallel_linear_backward_input(r, dout, w, OCl);
  copy_to_tp_backward_start(r);
  column_parallel_linear_backward_weights(r, dw, db, dout, inp, OCl);
  copy_to_tp_backward_wait(r);
}

// ---- row-parallel linear ----

void row_parallel_linear_forward(TpComm& tp, float* out, const float* inp, const float* w,
                                 const float* b, int N, int ICl, int OC, const LayerOps& ops) {
  if (tp.size() == 1) return ops.linear_forward(out, inp, w, b, N, ICl, OC);
  require_tp_layers(tp, ops);
  ops.linear_forward(out, inp, w, nullptr, N, ICl, OC);
  reduce_from_tp_forward(tp, out, size_t(N) * OC, ops);
  if (b) ops.add_bias_rows(out, b, N, OC);
}

void row_parallel_linear_backward(TpComm& tp, float* dinp, float* dw, float* db, const float* dout,
                                  const float* inp, const float* w, int N, int ICl, int OC,
                                  const LayerOps& ops) {
  require_tp_layers(tp, ops);
  reduce_from_tp_backward(tp, dout, size_t(N) * OC);
  ops.linear_backward(dinp, dw, db, dout, inp, w, N, ICl, OC);
}

// ---- vocab-parallel embedding ----

void vocab_parallel_embedding_forward(TpComm& tp, float* out, const int32_t* tokens,
                                      const float* wte, const float* wpe, int B, int T, int C,
                                      int v0, int Vl, const LayerOps& ops) {
  if (tp.size() == 1) {
    MPITRON_REQUIRE(v0 == 0, "vocab_parallel_embedding_forward at tp 1 needs v0 = 0");
    return ops.embedding_forward(out, tokens, wte, wpe, B, T, C);
  }
  require_tp_layers(tp, ops);
  const int N = B * T;
  ops.embedding_shard_forward(out, tokens, wte, N, C, v0, Vl);
  // One rank contributes each row and the others add zeros: the sum is that row, exactly.
  reduce_from_tp_forward(tp, out, size_t(N) * C, ops);
  ops.embedding_add_positions(out, wpe, B, T, C);
}

void vocab_parallel_embedding_backward(TpComm& tp, float* dwte, float* dwpe, const float* dout,
                                       const int32_t* tokens, int B, int T, int C, int v0, int Vl,
                                       const LayerOps& ops) {
  if (tp.size() == 1) {
    MPITRON_REQUIRE(v0 == 0, "vocab_parallel_embedding_backward at tp 1 needs v0 = 0");
    return ops.embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  require_tp_layers(tp, ops);
  ops.embedding_shard_backward(dwte, dwpe, dout, tokens, B, T, C, v0, Vl);
}

// ---- vocab-parallel cross-entropy ----

// lse = M + log(sum_ranks sum_j exp(x_j - M)) with M the global row max, loss = lse - x[target].
void vocab_parallel_crossentropy_forward(TpComm& tp, float* losses, float* lse, float* scratch,
                                         const float* logits, const int32_t* targets, int N, int Vl,
                                         int v0, int V, const LayerOps& ops) {
  if (tp.size() == 1) {
    MPITRON_REQUIRE(v0 == 0 && Vl == V,
                    "vocab_parallel_crossentropy_forward at tp 1 needs v0 = 0 and Vl = V");
    return ops.crossentropy_forward(losses, lse, logits, targets, N, V);
  }
  require_tp_layers(tp, ops);
  float* mx = scratch;              // (N) row max, then the global one
  float* sum = scratch + N;         // (N) sum of exp(x - global max)
  float* target = scratch + 2 * N;  // (N) the target's logit, from the rank that holds it
  ops.crossentropy_shard_stats(mx, target, logits, targets, N, Vl, v0, V);
  allreduce_max(tp, ops, mx, size_t(N));
  ops.crossentropy_shard_sumexp(sum, logits, mx, N, Vl, v0, V);
  allreduce_sum(tp, ops, sum, size_t(N));
  allreduce_sum(tp, ops, target, size_t(N));
  ops.crossentropy_shard_loss(losses, lse, mx, sum, target, targets, N);
}

// Each element is read before it is written at the same index, so dlogits may alias logits.
void vocab_parallel_crossentropy_backward(TpComm& tp, float* dlogits, const float* logits,
                                          const float* lse, const int32_t* targets, float dloss,
                                          int N, int Vl, int v0, int V, const LayerOps& ops) {
  if (tp.size() == 1) {
    MPITRON_REQUIRE(v0 == 0 && Vl == V,
                    "vocab_parallel_crossentropy_backward at tp 1 needs v0 = 0 and Vl = V");
    return ops.crossentropy_backward(dlogits, logits, lse, targets, dloss, N, V);
  }
  require_tp_layers(tp, ops);
  ops.crossentropy_shard_backward(dlogits, logits, lse, targets, dloss, N, Vl, v0, V);
}

}  // namespace mpitron::tp
