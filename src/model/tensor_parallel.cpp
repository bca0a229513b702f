// Megatron-style tensor parallelism (Shoeybi et al. 2019): each layer is the serial layer on this
// rank's shard; copy_to_tp / reduce_from_tp all-reduce once per region (a region's input gradient
// overlapping its weight products), and the vocab-parallel cross-entropy all-reduces N-sized row
// statistics instead of gathering logits. The work between the all-reduces is the device's layer
// table's; the all-reduces run on host copies where MPI cannot read the device's memory, and in
// fp32 on the host for 16-bit tensors.
#include "src/model/tensor_parallel.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <string>
#include <type_traits>

#include "base/check.hpp"
#include "src/train/reduction_tree.hpp"

namespace mpitron::tp {

namespace {

// ---- --bitwise (TpComm::shards): split sums in one tree over fixed TP shards ----

constexpr int kTreeTag = 11;  // the TP group's only point-to-point messages

int local_shards(const TpComm& tp) {
  MPITRON_REQUIRE(tp.shards % tp.size() == 0 && (tp.size() & (tp.size() - 1)) == 0,
                  "--bitwise: tp must be a power of two dividing the TP shards");
  return tp.shards / tp.size();
}

// Whether MPI reads and writes the layers' fp32 memory in place (else host copies).
bool host_memory(Device d) {
  return d == Device::cpu;
}

// The tree over parts [lo, hi) (each n floats, part j at parts + j n): left + right, into left
// (the host's threads on the CPU, the device's layers elsewhere).
float* local_tree(const LayerOpsT<float>& ops, float* parts, int lo, int hi, size_t n) {
  if (hi - lo == 1) return parts + size_t(lo) * n;
  const int mid = lo + (hi - lo) / 2;
  float* left = local_tree(ops, parts, lo, mid, n);
  float* right = local_tree(ops, parts, mid, hi, n);
  if (host_memory(ops.device))
    add_in_place(left, right, n);
  else
    ops.residual_forward(left, left, right, n);
  return left;
}

// The tree's top over the ranks, each holding its shards' sum in x: recursive doubling, where at
// distance d ranks r and r ^ d add their nodes, which are siblings (tp a power of two). On the
// host: a device's x goes down once and back once (an fp32 sum has the same bits anywhere).
void tree_allreduce(TpComm& tp, const LayerOpsT<float>& ops, float* x, size_t n) {
  if (tp.size() == 1) return;
  float* host = x;
  if (!host_memory(ops.device)) {
    if (tp.staging.size() < n) tp.staging.resize(n);
    ops.download(tp.staging.data(), x, n);
    host = tp.staging.data();
  }
  if (tp.partner_sum.size() < n) tp.partner_sum.resize(n);
  for (int d = 1; d < tp.size(); d <<= 1) {
    const int partner = tp.rank() ^ d;
    comm::Request in = tp.group->irecv(tp.partner_sum.data(), n, partner, kTreeTag);
    comm::Request out = tp.group->isend(host, n, partner, kTreeTag);
    in.wait();
    out.wait();
    add_in_place(host, tp.partner_sum.data(), n);
  }
  if (host != x) ops.upload(x, host, n);
}

// Each fixed-order layer's scratch pieces (v: this rank's shards; k: a shard's width), named
// once so that the layer and the model's carving agree.
std::array<size_t, 4> column_forward_pieces(int v, int N, int IC, int OCl, int groups, bool gelu) {
  if (v == 1) return {};
  const size_t k = size_t(OCl / v);
  const bool in_place_rows = groups == 1;  // one block: a shard's weight rows and bias in place
  return {in_place_rows ? 0 : k * IC, in_place_rows ? 0 : k, size_t(N) * k, gelu ? N * k : 0};
}
std::array<size_t, 3> column_weights_pieces(int v, int N, int IC, int OCl, int groups) {
  if (v == 1) return {};
  const size_t k = size_t(OCl / v);
  const bool in_place_rows = groups == 1;
  return {size_t(N) * k, in_place_rows ? 0 : k * IC, in_place_rows ? 0 : k};
}
std::array<size_t, 3> column_input_pieces(int v, int N, int IC, int OCl, int groups) {
  const size_t k = size_t(OCl / v), n = size_t(N) * IC;
  return {n * v, v > 1 ? N * k : 0, v > 1 && groups > 1 ? k * IC : 0};
}
std::array<size_t, 3> row_forward_pieces(int v, int N, int ICl, int OC) {
  if (v == 1) return {};
  const size_t k = size_t(ICl / v);
  return {size_t(N) * OC * v, N * k, OC * k};
}
std::array<size_t, 4> row_backward_pieces(int v, int N, int ICl, int OC) {
  if (v == 1) return {};
  const size_t k = size_t(ICl / v);
  return {OC * k, N * k, N * k, OC * k};
}
std::array<size_t, 2> sumexp_pieces(int v, int N, int Vl) {
  return {size_t(N) * v, v > 1 ? size_t(N) * (Vl / v) : 0};
}

// Columns of TP shard j (of v on this rank) of a (rows, width) block with row stride `stride`,
// whose columns are `groups` equal blocks split over TP each: its part of every block, in order.
void gather_shard_columns(const LayerOpsT<float>& ops, float* dst, const float* src, int stride,
                          int rows, int width, int groups, int j, int v) {
  const int piece = width / groups / v;
  for (int g = 0; g < groups; ++g)
    ops.copy_strided(dst + g * piece, groups * piece, src + g * (width / groups) + j * piece,
                     stride, rows, piece);
}

// Rows of TP shard j of a (height, cols) matrix whose rows are `groups` blocks split over TP each.
void gather_shard_rows(const LayerOpsT<float>& ops, float* dst, const float* src, int height,
                       int cols, int groups, int j, int v) {
  const int piece = height / groups / v;
  for (int g = 0; g < groups; ++g)
    ops.copy(dst + size_t(g) * piece * cols,
             src + (size_t(g) * (height / groups) + size_t(j) * piece) * cols,
             size_t(piece) * cols);
}

// The inverses: a shard's columns (rows) back to their places.
void scatter_shard_columns(const LayerOpsT<float>& ops, float* dst, int stride, const float* src,
                           int rows, int width, int groups, int j, int v) {
  const int piece = width / groups / v;
  for (int g = 0; g < groups; ++g)
    ops.copy_strided(dst + g * (width / groups) + j * piece, stride, src + g * piece,
                     groups * piece, rows, piece);
}
void scatter_shard_rows(const LayerOpsT<float>& ops, float* dst, const float* src, int height,
                        int cols, int groups, int j, int v) {
  const int piece = height / groups / v;
  for (int g = 0; g < groups; ++g)
    ops.copy(dst + (size_t(g) * (height / groups) + size_t(j) * piece) * cols,
             src + size_t(g) * piece * cols, size_t(piece) * cols);
}

// Every product a split layer makes has the shape of one TP shard's at any tp (a library's
// kernel, so its sums, may change with the shape): at tp below the shards, one product per shard
// on gathered copies, its results put back in place.

// out (N,OCl) = inp w^T + b per shard of the output columns (pre: with GPT-2's GELU after it).
void column_parallel_forward_fixed(TpComm& tp, float* pre, float* out, const float* inp,
                                   const float* w, const float* b, int N, int IC, int OCl,
                                   int groups, const LayerOpsT<float>& ops) {
  const int v = local_shards(tp), k = OCl / v;
  MPITRON_REQUIRE(OCl % (v * groups) == 0, "--bitwise: the TP shards do not split an output");
  if (v == 1) {
    if (pre) return ops.linear_gelu_forward(pre, out, inp, w, b, N, IC, OCl);
    return ops.linear_forward(out, inp, w, b, N, IC, OCl);
  }
  const bool in_place_rows = groups == 1;
  const auto [wk, bk, ok, pk] =
      fixed_pieces(tp, column_forward_pieces(v, N, IC, OCl, groups, pre != nullptr));
  for (int j = 0; j < v; ++j) {
    const float* wj = w + size_t(j) * k * IC;
    const float* bj = b ? b + size_t(j) * k : nullptr;
    if (!in_place_rows) {
      gather_shard_rows(ops, wk, w, OCl, IC, groups, j, v);
      wj = wk;
      if (b) gather_shard_rows(ops, bk, b, OCl, 1, groups, j, v);
      bj = b ? bk : nullptr;
    }
    if (pre) {
      ops.linear_gelu_forward(pk, ok, inp, wj, bj, N, IC, k);
      scatter_shard_columns(ops, pre, OCl, pk, N, OCl, groups, j, v);
    } else {
      ops.linear_forward(ok, inp, wj, bj, N, IC, k);
    }
    scatter_shard_columns(ops, out, OCl, ok, N, OCl, groups, j, v);
  }
}

// dw (OCl,IC) += dout^T inp, db += column sums of dout, per shard of the output rows.
void column_parallel_weights_fixed(TpComm& tp, float* dw, float* db, const float* dout,
                                   const float* inp, int N, int IC, int OCl, int groups,
                                   const LayerOpsT<float>& ops) {
  const int v = local_shards(tp), k = OCl / v;
  if (v == 1) return ops.linear_backward(nullptr, dw, db, dout, inp, nullptr, N, IC, OCl);
  const bool in_place_rows = groups == 1;  // a shard's gradient rows in place, no copies
  const auto [dk, dwk, dbk] = fixed_pieces(tp, column_weights_pieces(v, N, IC, OCl, groups));
  for (int j = 0; j < v; ++j) {
    gather_shard_columns(ops, dk, dout, OCl, N, OCl, groups, j, v);
    if (in_place_rows) {
      ops.linear_backward(nullptr, dw + size_t(j) * k * IC, db ? db + size_t(j) * k : nullptr, dk,
                          inp, nullptr, N, IC, k);
      continue;
    }
    gather_shard_rows(ops, dwk, dw, OCl, IC, groups, j, v);  // += onto what dw holds
    if (db) gather_shard_rows(ops, dbk, db, OCl, 1, groups, j, v);
    ops.linear_backward(nullptr, dwk, db ? dbk : nullptr, dk, inp, nullptr, N, IC, k);
    scatter_shard_rows(ops, dw, dwk, OCl, IC, groups, j, v);
    if (db) scatter_shard_rows(ops, db, dbk, OCl, 1, groups, j, v);
  }
}

// dinp (N,ICl) = dout w per shard of its columns; dw (OC,ICl) += dout^T inp per shard of its
// columns; db += the column sums of dout (replicated, whole).
void row_parallel_backward_fixed(TpComm& tp, float* dinp, float* dw, float* db, const float* dout,
                                 const float* inp, const float* w, int N, int ICl, int OC,
                                 const LayerOpsT<float>& ops) {
  const int v = local_shards(tp), k = ICl / v;
  if (v == 1) return ops.linear_backward(dinp, dw, db, dout, inp, w, N, ICl, OC);
  const auto [wk, xk, dk, dwk] = fixed_pieces(tp, row_backward_pieces(v, N, ICl, OC));
  for (int j = 0; j < v; ++j) {
    if (dinp) {
      ops.copy_strided(wk, k, w + j * k, ICl, OC, k);
      ops.linear_backward(dk, nullptr, nullptr, dout, nullptr, wk, N, k, OC);
      ops.copy_strided(dinp + j * k, ICl, dk, k, N, k);
    }
    ops.copy_strided(xk, k, inp + j * k, ICl, N, k);
    ops.copy_strided(dwk, k, dw + j * k, ICl, OC, k);  // += onto what dw holds
    ops.linear_backward(nullptr, dwk, j == 0 ? db : nullptr, dout, xk, nullptr, N, k, OC);
    ops.copy_strided(dw + j * k, ICl, dwk, k, OC, k);
  }
}

// out (N,OC) = the tree over TP shards of inp's K-slices times w's.
void row_parallel_forward_fixed(TpComm& tp, float* out, const float* inp, const float* w,
                                const float* b, int N, int ICl, int OC,
                                const LayerOpsT<float>& ops) {
  const int v = local_shards(tp), k = ICl / v;
  MPITRON_REQUIRE(ICl % v == 0, "--bitwise: the TP shards do not split a row-parallel input");
  const size_t n = size_t(N) * OC;
  const auto [parts, xk, wk] = fixed_pieces(tp, row_forward_pieces(v, N, ICl, OC));
  if (v == 1) {
    ops.linear_forward(out, inp, w, nullptr, N, ICl, OC);
  } else {
    for (int j = 0; j < v; ++j) {
      ops.copy_strided(xk, k, inp + j * k, ICl, N, k);
      ops.copy_strided(wk, k, w + j * k, ICl, OC, k);
      ops.linear_forward(parts + size_t(j) * n, xk, wk, nullptr, N, k, OC);
    }
    ops.copy(out, local_tree(ops, parts, 0, v, n), n);
  }
  tree_allreduce(tp, ops, out, n);
  if (b) ops.add_bias_rows(out, b, N, OC);
}

// The region's input gradient gets the tree over TP shards of dout's K-slices times w's, summed
// over the ranks (the region is per layer: base on every rank, each product whole before it adds).
void column_parallel_input_fixed(TpRegionT<float>& r, const float* dout, const float* w, int OCl,
                                 int groups) {
  TpComm& tp = *r.tp;
  const LayerOpsT<float>& ops = *r.ops;
  const int v = local_shards(tp), k = OCl / v;
  MPITRON_REQUIRE(OCl % (v * groups) == 0,
                  "--bitwise: the TP shards do not split a column-parallel output");
  const size_t n = size_t(r.N) * r.IC;
  const bool in_place_rows = groups == 1;  // a shard's weight rows in place, no copies
  const auto [parts, dk, wk] = fixed_pieces(tp, column_input_pieces(v, r.N, r.IC, OCl, groups));
  for (int j = 0; j < v; ++j) {
    const float *d = dout, *wj = w + size_t(j) * k * r.IC;
    if (v > 1) {
      gather_shard_columns(ops, dk, dout, OCl, r.N, OCl, groups, j, v);
      d = dk;
      if (!in_place_rows) {
        gather_shard_rows(ops, wk, w, OCl, r.IC, groups, j, v);
        wj = wk;
      }
    }
    ops.linear_backward(parts + size_t(j) * n, nullptr, nullptr, d, nullptr, wj, r.N, r.IC, k);
  }
  float* sum = local_tree(ops, parts, 0, v, n);
  tree_allreduce(tp, ops, sum, n);
  if (r.holds)
    ops.residual_forward(r.dinp, r.dinp, sum, n);
  else
    ops.copy(r.dinp, sum, n);
  r.holds = true;
}

// The sum of exponentials per row as the tree over the vocabulary's TP shards.
void crossentropy_sumexp_fixed(TpComm& tp, float* sum, const float* logits, const float* mx, int N,
                               int Vl, int v0, int V, const LayerOpsT<float>& ops) {
  const int v = local_shards(tp), k = Vl / v;
  MPITRON_REQUIRE(Vl % v == 0, "--bitwise: the TP shards do not split the vocabulary");
  const auto [parts, lk] = fixed_pieces(tp, sumexp_pieces(v, N, Vl));
  for (int j = 0; j < v; ++j) {
    const float* l = logits;
    if (v > 1) {
      ops.copy_strided(lk, k, logits + j * k, Vl, N, k);
      l = lk;
    }
    ops.crossentropy_shard_sumexp(parts + size_t(j) * N, l, mx, N, k, v0 + j * k, V);
  }
  ops.copy(sum, local_tree(ops, parts, 0, v, size_t(N)), size_t(N));
  tree_allreduce(tp, ops, sum, size_t(N));
}

// n floats of the layers' memory (the device d) as a host fp32 copy in tp.staging.
float* floats_to_staging(TpComm& tp, void (*download)(float*, const float*, size_t), const float* x,
                         size_t n) {
  if (tp.staging.size() < n) tp.staging.resize(n);
  download(tp.staging.data(), x, n);
  return tp.staging.data();
}

// n elements of A in the layers' memory as host fp32 in tp.staging: MPI sums floats in place
// where it can (the CPU's fp32), else this copy (downloaded; 16-bit widened).
template <class A>
float* to_staging(TpComm& tp, const LayerOpsT<A>& ops, const A* x, size_t n) {
  if constexpr (std::is_same_v<A, float>) {
    return floats_to_staging(tp, ops.download, x, n);
  } else {
    if (tp.staging.size() < n) tp.staging.resize(n);
    const A* host = x;
    if (!host_memory(ops.device)) {
      if (tp.staging_16.size() < n * sizeof(A)) tp.staging_16.resize(n * sizeof(A));
      ops.download_bytes(tp.staging_16.data(), x, n * sizeof(A));
      host = reinterpret_cast<const A*>(tp.staging_16.data());
    }
    widen(tp.staging.data(), host, n);
    return tp.staging.data();
  }
}

// The summed staging copy back into x (16-bit: rounded once).
template <class A>
void from_staging(TpComm& tp, const LayerOpsT<A>& ops, A* x, size_t n) {
  if constexpr (std::is_same_v<A, float>) {
    ops.upload(x, tp.staging.data(), n);
  } else if (host_memory(ops.device)) {
    round_to(x, tp.staging.data(), n);
  } else {
    A* host = reinterpret_cast<A*>(tp.staging_16.data());
    round_to(host, tp.staging.data(), n);
    ops.upload_bytes(x, host, n * sizeof(A));
  }
}

// Whether x is summed in place: the device's own collectives (fp32), or MPI on the CPU's fp32.
template <class A>
bool in_place(const TpComm& tp, const LayerOpsT<A>& ops) {
  return std::is_same_v<A, float> && (tp.device || host_memory(ops.device));
}

template <class A>
void allreduce_sum(TpComm& tp, const LayerOpsT<A>& ops, A* x, size_t n) {
  if constexpr (std::is_same_v<A, float>) {
    if (tp.device) return tp.device->allreduce_sum(tp.device->ctx, x, n);
    if (host_memory(ops.device)) return tp.group->allreduce_sum(x, n);
  }
  float* host = to_staging(tp, ops, x, n);
  tp.group->allreduce_sum(host, n);
  from_staging(tp, ops, x, n);
}

// The cross-entropy's row statistics: float arrays in the layers' memory, whatever A is.
template <class A>
void allreduce_floats(TpComm& tp, const LayerOpsT<A>& ops, float* x, size_t n, bool max) {
  if (tp.device) {
    return max ? tp.device->allreduce_max(tp.device->ctx, x, n)
               : tp.device->allreduce_sum(tp.device->ctx, x, n);
  }
  float* host = host_memory(ops.device) ? x : floats_to_staging(tp, ops.download, x, n);
  max ? tp.group->allreduce_max(host, n) : tp.group->allreduce_sum(host, n);
  if (host != x) ops.upload(x, host, n);
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

int fixed_local_shards(const TpComm& tp) {
  return local_shards(tp);
}

float* fixed_local_sum(const LayerOpsT<float>& ops, float* parts, int v, size_t n) {
  return local_tree(ops, parts, 0, v, n);
}

void fixed_allreduce_sum(TpComm& tp, const LayerOpsT<float>& ops, float* x, size_t n) {
  tree_allreduce(tp, ops, x, n);
}

size_t column_parallel_fixed_floats(int shards, int tp, int N, int IC, int OCl, int groups,
                                    bool gelu) {
  if (shards == 0) return 0;
  const int v = shards / tp;
  return std::max({fixed_pieces_floats(column_forward_pieces(v, N, IC, OCl, groups, gelu)),
                   fixed_pieces_floats(column_weights_pieces(v, N, IC, OCl, groups)),
                   fixed_pieces_floats(column_input_pieces(v, N, IC, OCl, groups))});
}

size_t row_parallel_fixed_floats(int shards, int tp, int N, int ICl, int OC) {
  if (shards == 0) return 0;
  const int v = shards / tp;
  return std::max(fixed_pieces_floats(row_forward_pieces(v, N, ICl, OC)),
                  fixed_pieces_floats(row_backward_pieces(v, N, ICl, OC)));
}

size_t crossentropy_fixed_floats(int shards, int tp, int N, int Vl) {
  return shards == 0 ? 0 : fixed_pieces_floats(sumexp_pieces(shards / tp, N, Vl));
}

void require_tp_shards(int shards, int64_t n_embd) {
  if (shards > 0 && n_embd % shards != 0)
    throw UsageError(fmt::format(
        "--bitwise: n_embd ({}) does not split into the {} TP shards whose K-slices every "
        "row-parallel product sums (at every tp, tp 1 included): choose --tp-shards dividing it",
        n_embd, shards));
}

comm::Group* model_tp_group(const ModelBuild& how, comm::Group& self) {
  comm::Group* tp = how.tp ? how.tp : &self;
  MPITRON_REQUIRE(tp->size() == how.slice.tp && tp->rank() == how.slice.tp_rank,
                  "the TP group does not match the registry slice");
  return tp;
}

template <class A>
void require_tp_layers(const TpComm& tp, const LayerOpsT<A>& ops) {
  MPITRON_REQUIRE(tp.size() == 1 || ops.add_bias_rows,
                  fmt::format("the {} layers of {} have no tensor-parallel pieces",
                              precision_name(dtype_of<A>()), device_name(ops.device)));
}

// ---- communication pairs ----

// copy_to_tp forward: identity (the header's template).
// copy_to_tp backward: all-reduce (sum) of the input gradient; no collective at tp 1.
template <class A>
void copy_to_tp_backward(TpComm& tp, A* dx, size_t n, const LayerOpsT<A>& ops) {
  if (tp.size() > 1) allreduce_sum(tp, ops, dx, n);
}

// reduce_from_tp forward: all-reduce (sum) of the partial outputs; no collective at tp 1.
// reduce_from_tp backward: identity (the header's template).
template <class A>
void reduce_from_tp_forward(TpComm& tp, A* y, size_t n, const LayerOpsT<A>& ops) {
  if (tp.size() > 1) allreduce_sum(tp, ops, y, n);
}

// ---- a region: copy_to_tp backward once for its consumers ----

template <class A>
TpRegionT<A> copy_to_tp_backward_begin(TpComm& tp, A* dinp, std::type_identity_t<A>* partial,
                                       const std::type_identity_t<A>* base, int N, int IC,
                                       bool per_layer, const LayerOpsT<A>& ops) {
  require_tp_layers(tp, ops);
  TpRegionT<A> r;
  r.ops = &ops;
  r.tp = &tp;
  r.dinp = dinp;
  r.partial = partial;
  r.N = N;
  r.IC = IC;
  r.per_layer = per_layer || tp.shards > 0;  // --bitwise: each product summed in the tree alone
  if (base && dinp) {
    const size_t n = size_t(N) * IC;
    if (r.per_layer || tp.rank() == 0) {
      if (base != dinp) ops.copy(dinp, base, n);
    } else {
      ops.zero(dinp, n);
    }
    r.holds = true;
  }
  return r;
}

template <class A>
void copy_to_tp_backward_start(TpRegionT<A>& r) {
  MPITRON_REQUIRE(!r.pending.pending(), "copy_to_tp_backward_start: the region already started");
  if (r.tp->size() == 1 || r.per_layer || !r.dinp || !r.holds) return;
  const size_t n = size_t(r.N) * r.IC;
  TpComm& tp = *r.tp;
  if constexpr (std::is_same_v<A, float>) {
    // The device's own all-reduce runs in stream order with the weight products: nothing to wait.
    if (tp.device) return tp.device->allreduce_sum(tp.device->ctx, r.dinp, n);
  }
  r.staged = !in_place(tp, *r.ops);
  float* x;
  if constexpr (std::is_same_v<A, float>)
    x = r.staged ? to_staging(tp, *r.ops, r.dinp, n) : r.dinp;
  else
    x = to_staging(tp, *r.ops, r.dinp, n);
  r.pending = tp.group->iallreduce_sum(x, n);
}

template <class A>
void copy_to_tp_backward_wait(TpRegionT<A>& r) {
  r.pending.wait();
  if (r.staged) from_staging(*r.tp, *r.ops, r.dinp, size_t(r.N) * r.IC);
  r.staged = false;
}

// ---- column-parallel linear ----

template <class A>
void column_parallel_linear_forward(TpComm& tp, A* out, const A* inp, const A* w,
                                    const std::type_identity_t<A>* b, int N, int IC, int OCl,
                                    const LayerOpsT<A>& ops, int groups) {
  require_tp_layers(tp, ops);
  if (tp.shards > 0) {
    if constexpr (std::is_same_v<A, float>)
      return column_parallel_forward_fixed(tp, nullptr, out, inp, w, b, N, IC, OCl, groups, ops);
    MPITRON_REQUIRE(false, "--bitwise tensor parallelism is fp32 only");
  }
  ops.linear_forward(out, inp, w, b, N, IC, OCl);
}

template <class A>
void column_parallel_linear_gelu_forward(TpComm& tp, A* pre, A* out, const A* inp, const A* w,
                                         const std::type_identity_t<A>* b, int N, int IC, int OCl,
                                         const LayerOpsT<A>& ops) {
  require_tp_layers(tp, ops);
  if (tp.shards > 0) {
    if constexpr (std::is_same_v<A, float>)
      return column_parallel_forward_fixed(tp, pre, out, inp, w, b, N, IC, OCl, 1, ops);
    MPITRON_REQUIRE(false, "--bitwise tensor parallelism is fp32 only");
  }
  ops.linear_gelu_forward(pre, out, inp, w, b, N, IC, OCl);
}

// The product goes straight into dinp when it is the first, else into partial and is added
// (ops.residual_forward: dinp = dinp + partial), consumers in call order.
template <class A>
void column_parallel_linear_backward_input(TpRegionT<A>& r, const std::type_identity_t<A>* dout,
                                           const std::type_identity_t<A>* w, int OCl, int groups) {
  MPITRON_REQUIRE(r.dinp, "column_parallel_linear_backward_input: the region has no dinp");
  MPITRON_REQUIRE(!r.pending.pending(), "column_parallel_linear_backward_input after start");
  if (r.tp->shards > 0) {
    if constexpr (std::is_same_v<A, float>)
      return column_parallel_input_fixed(r, dout, w, OCl, groups);
    MPITRON_REQUIRE(false, "--bitwise tensor parallelism is fp32 only");
  }
  const size_t n = size_t(r.N) * r.IC;
  A* const product = r.holds ? r.partial : r.dinp;
  MPITRON_REQUIRE(product, "a region's second product (or one after a base) needs partial");
  r.ops->linear_backward(product, nullptr, nullptr, dout, nullptr, w, r.N, r.IC, OCl);
  if (r.per_layer) copy_to_tp_backward(*r.tp, product, n, *r.ops);
  if (r.holds) r.ops->residual_forward(r.dinp, r.dinp, r.partial, n);
  r.holds = true;
}

template <class A>
void column_parallel_linear_backward_weights(TpRegionT<A>& r, float* dw, float* db,
                                             const std::type_identity_t<A>* dout,
                                             const std::type_identity_t<A>* inp, int OCl,
                                             int groups) {
  // A poke at the all-reduce in flight: MPI progresses a non-blocking collective inside its calls.
  if (r.pending.pending()) r.pending.test();
  if (r.tp->shards > 0) {
    if constexpr (std::is_same_v<A, float>)
      return column_parallel_weights_fixed(*r.tp, dw, db, dout, inp, r.N, r.IC, OCl, groups,
                                           *r.ops);
    MPITRON_REQUIRE(false, "--bitwise tensor parallelism is fp32 only");
  }
  r.ops->linear_backward(nullptr, dw, db, dout, inp, nullptr, r.N, r.IC, OCl);
}

template <class A>
void column_parallel_linear_backward(TpComm& tp, std::type_identity_t<A>* dinp, float* dw,
                                     float* db, const A* dout, const A* inp, const A* w, int N,
                                     int IC, int OCl, const LayerOpsT<A>& ops, int groups) {
  if (tp.size() == 1 && tp.shards == 0)
    return ops.linear_backward(dinp, dw, db, dout, inp, w, N, IC, OCl);
  require_tp_layers(tp, ops);
  TpRegionT<A> r = copy_to_tp_backward_begin<A>(tp, dinp, nullptr, nullptr, N, IC, false, ops);
  if (dinp) column_parallel_linear_backward_input(r, dout, w, OCl, groups);
  copy_to_tp_backward_start(r);
  column_parallel_linear_backward_weights(r, dw, db, dout, inp, OCl, groups);
  copy_to_tp_backward_wait(r);
}

// ---- row-parallel linear ----

template <class A>
void row_parallel_linear_forward(TpComm& tp, A* out, const A* inp, const A* w,
                                 const std::type_identity_t<A>* b, int N, int ICl, int OC,
                                 const LayerOpsT<A>& ops) {
  if (tp.shards > 0) {
    if constexpr (std::is_same_v<A, float>)
      return row_parallel_forward_fixed(tp, out, inp, w, b, N, ICl, OC, ops);
    MPITRON_REQUIRE(false, "--bitwise tensor parallelism is fp32 only");
  }
  if (tp.size() == 1) return ops.linear_forward(out, inp, w, b, N, ICl, OC);
  require_tp_layers(tp, ops);
  ops.linear_forward(out, inp, w, nullptr, N, ICl, OC);
  reduce_from_tp_forward(tp, out, size_t(N) * OC, ops);
  if (b) ops.add_bias_rows(out, b, N, OC);
}

template <class A>
void row_parallel_linear_backward(TpComm& tp, std::type_identity_t<A>* dinp, float* dw, float* db,
                                  const A* dout, const A* inp, const A* w, int N, int ICl, int OC,
                                  const LayerOpsT<A>& ops) {
  require_tp_layers(tp, ops);
  reduce_from_tp_backward(tp, dout, size_t(N) * OC);
  if (tp.shards > 0) {
    if constexpr (std::is_same_v<A, float>)
      return row_parallel_backward_fixed(tp, dinp, dw, db, dout, inp, w, N, ICl, OC, ops);
    MPITRON_REQUIRE(false, "--bitwise tensor parallelism is fp32 only");
  }
  ops.linear_backward(dinp, dw, db, dout, inp, w, N, ICl, OC);
}

// ---- vocab-parallel embedding ----

template <class A>
void vocab_parallel_embedding_forward(TpComm& tp, A* out, const int32_t* tokens, const A* wte,
                                      const A* wpe, int B, int T, int C, int v0, int Vl,
                                      const LayerOpsT<A>& ops) {
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

template <class A>
void vocab_parallel_embedding_backward(TpComm& tp, float* dwte, float* dwpe, const A* dout,
                                       const int32_t* tokens, int B, int T, int C, int v0, int Vl,
                                       const LayerOpsT<A>& ops) {
  if (tp.size() == 1) {
    MPITRON_REQUIRE(v0 == 0, "vocab_parallel_embedding_backward at tp 1 needs v0 = 0");
    return ops.embedding_backward(dwte, dwpe, dout, tokens, B, T, C);
  }
  require_tp_layers(tp, ops);
  ops.embedding_shard_backward(dwte, dwpe, dout, tokens, B, T, C, v0, Vl);
}

// ---- vocab-parallel cross-entropy ----

// lse = M + log(sum_ranks sum_j exp(x_j - M)) with M the global row max, loss = lse - x[target].
template <class A>
void vocab_parallel_crossentropy_forward(TpComm& tp, float* losses, float* lse, float* scratch,
                                         const A* logits, const int32_t* targets, int N, int Vl,
                                         int v0, int V, const LayerOpsT<A>& ops) {
  if (tp.size() == 1 && tp.shards == 0) {
    MPITRON_REQUIRE(v0 == 0 && Vl == V,
                    "vocab_parallel_crossentropy_forward at tp 1 needs v0 = 0 and Vl = V");
    return ops.crossentropy_forward(losses, lse, logits, targets, N, V);
  }
  require_tp_layers(tp, ops);
  float* mx = scratch;              // (N) row max, then the global one
  float* sum = scratch + N;         // (N) sum of exp(x - global max)
  float* target = scratch + 2 * N;  // (N) the target's logit, from the rank that holds it
  ops.crossentropy_shard_stats(mx, target, logits, targets, N, Vl, v0, V);
  // The max, and the target's logit (one rank's among zeros), come out exact in any order.
  if (tp.size() > 1) allreduce_floats(tp, ops, mx, size_t(N), true);
  if (tp.shards > 0) {
    if constexpr (std::is_same_v<A, float>)
      crossentropy_sumexp_fixed(tp, sum, logits, mx, N, Vl, v0, V, ops);
    else
      MPITRON_REQUIRE(false, "--bitwise tensor parallelism is fp32 only");
  } else {
    ops.crossentropy_shard_sumexp(sum, logits, mx, N, Vl, v0, V);
    allreduce_floats(tp, ops, sum, size_t(N), false);
  }
  if (tp.size() > 1) allreduce_floats(tp, ops, target, size_t(N), false);
  ops.crossentropy_shard_loss(losses, lse, mx, sum, target, targets, N);
}

// Each element is read before it is written at the same index, so dlogits may alias logits.
template <class A>
void vocab_parallel_crossentropy_backward(TpComm& tp, A* dlogits, const A* logits, const float* lse,
                                          const int32_t* targets, float dloss, int N, int Vl,
                                          int v0, int V, const LayerOpsT<A>& ops) {
  if (tp.size() == 1 && tp.shards == 0) {
    MPITRON_REQUIRE(v0 == 0 && Vl == V,
                    "vocab_parallel_crossentropy_backward at tp 1 needs v0 = 0 and Vl = V");
    return ops.crossentropy_backward(dlogits, logits, lse, targets, dloss, N, V);
  }
  require_tp_layers(tp, ops);
  ops.crossentropy_shard_backward(dlogits, logits, lse, targets, dloss, N, Vl, v0, V);
}

#define MPITRON_TP_INSTANTIATE(A)                                                                  \
  template void require_tp_layers<A>(const TpComm&, const LayerOpsT<A>&);                          \
  template void copy_to_tp_backward<A>(TpComm&, A*, size_t, const LayerOpsT<A>&);                  \
  template void reduce_from_tp_forward<A>(TpComm&, A*, size_t, const LayerOpsT<A>&);               \
  template TpRegionT<A> copy_to_tp_backward_begin<A>(TpComm&, A*, A*, const A*, int, int, bool,    \
                                                     const LayerOpsT<A>&);                         \
  template void copy_to_tp_backward_start<A>(TpRegionT<A>&);                                       \
  template void copy_to_tp_backward_wait<A>(TpRegionT<A>&);                                        \
  template void column_parallel_linear_forward<A>(TpComm&, A*, const A*, const A*, const A*, int,  \
                                                  int, int, const LayerOpsT<A>&, int);             \
  template void column_parallel_linear_gelu_forward<A>(                                            \
      TpComm&, A*, A*, const A*, const A*, const A*, int, int, int, const LayerOpsT<A>&);          \
  template void column_parallel_linear_backward_input<A>(TpRegionT<A>&, const A*, const A*, int,   \
                                                         int);                                     \
  template void column_parallel_linear_backward_weights<A>(TpRegionT<A>&, float*, float*,          \
                                                           const A*, const A*, int, int);          \
  template void column_parallel_linear_backward<A>(TpComm&, A*, float*, float*, const A*,          \
                                                   const A*, const A*, int, int, int,              \
                                                   const LayerOpsT<A>&, int);                      \
  template void row_parallel_linear_forward<A>(TpComm&, A*, const A*, const A*, const A*, int,     \
                                               int, int, const LayerOpsT<A>&);                     \
  template void row_parallel_linear_backward<A>(TpComm&, A*, float*, float*, const A*, const A*,   \
                                                const A*, int, int, int, const LayerOpsT<A>&);     \
  template void vocab_parallel_embedding_forward<A>(TpComm&, A*, const int32_t*, const A*,         \
                                                    const A*, int, int, int, int, int,             \
                                                    const LayerOpsT<A>&);                          \
  template void vocab_parallel_embedding_backward<A>(TpComm&, float*, float*, const A*,            \
                                                     const int32_t*, int, int, int, int, int,      \
                                                     const LayerOpsT<A>&);                         \
  template void vocab_parallel_crossentropy_forward<A>(TpComm&, float*, float*, float*, const A*,  \
                                                       const int32_t*, int, int, int, int,         \
                                                       const LayerOpsT<A>&);                       \
  template void vocab_parallel_crossentropy_backward<A>(TpComm&, A*, const A*, const float*,       \
                                                        const int32_t*, float, int, int, int, int, \
                                                        const LayerOpsT<A>&);
MPITRON_TP_INSTANTIATE(float)
MPITRON_TP_INSTANTIATE(bf16_t)
MPITRON_TP_INSTANTIATE(fp16_t)
#undef MPITRON_TP_INSTANTIATE

}  // namespace mpitron::tp
