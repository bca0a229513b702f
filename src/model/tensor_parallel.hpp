// Megatron-style tensor-parallel building blocks on any device and in any storage type (Shoeybi et
// al. 2019, "Megatron-LM"): the conjugate communication pairs copy_to_tp / reduce_from_tp (the
// paper's f and g), applied once per region (TpRegion: however many column-parallel layers read its
// input), column- and row-parallel linears, a vocab-parallel embedding and cross-entropy.
#pragma once
#include <array>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <type_traits>
#include <vector>

#include "base/check.hpp"
#include "comm/group.hpp"
#include "src/model/layer_ops.hpp"
#include "src/model/model.hpp"

namespace mpitron::tp {

// Conventions (those of layers/README.md): N rows, IC/OC features of a linear, W stored (out, in);
// parameter gradients +=, activation gradients =. Every call takes the tensor-parallel group tp
// and every rank of it makes the same calls in the same order. At tp.size() == 1 each call is
// exactly the serial layer (ops.linear_forward, ...) with the same arguments: the same bits and
// no collective. Nothing allocates after the first step; scratch is an explicit argument.
// All-reduces go through Group::allreduce_sum / iallreduce_sum / allreduce_max (MPI), so the
// group's bytes_sent counts them. ops: the device's layers (the CPU's by default); every pointer
// is in their memory, and the work between the all-reduces is theirs (the shard pieces at the
// end of LayerOpsT), so the bits on cpu-staged are the CPU's.

// All-reduces on the device's own memory, queued in order with its layers (NCCL over the TP ranks
// on the compute stream, --comm nccl): no host copies, nothing to wait for on the host.
struct TpDeviceCollectives {
  void* ctx = nullptr;
  void (*allreduce_sum)(void* ctx, float* buf, size_t n) = nullptr;
  void (*allreduce_max)(void* ctx, float* buf, size_t n) = nullptr;
};

// The TP group as the layers see it: the device's own collectives where it has them (device, fp32
// tensors), else MPI over the TP ranks, on the tensors in place where the host reads the layers'
// fp32 memory (the CPU), or through host copies (download, MPI on the copy, upload): a device whose
// memory MPI cannot read (cpu-staged; CUDA under an Open MPI that is not CUDA-aware), and 16-bit
// tensors, which are widened to fp32 on the host, summed there and rounded once. The staging
// buffers grow to the largest all-reduce in the first step and are kept.
struct TpComm {
  comm::Group* group = nullptr;
  std::vector<float> staging;                   // host fp32 copies (unused for the CPU's fp32)
  const TpDeviceCollectives* device = nullptr;  // NCCL over the group, or nullptr: MPI
  std::vector<unsigned char> staging_16;        // a device's 16-bit tensor as downloaded
  // --bitwise: the TP shards every split sum is taken over, the same at every tp (a power of two
  // that tp divides; 0: off). A split sum (row-parallel outputs, column-parallel input gradients,
  // the vocabulary's sum of exponentials) is then the same pairwise tree over the shards' products
  // at any tp: each rank computes its shards / tp K-slices apart (at tp 1 all of them), adds them
  // in the tree, and the ranks add theirs by recursive doubling (the tree's top). fp32 on the CPU.
  // The K-slices and their products live in `fixed`, fixed_floats floats of the layers' memory
  // carved once by the model (sized by the *_fixed_floats functions below, so the memory plan
  // counts them); the ranks' tree top runs on the host (partner_sum, and staging for a device).
  int shards = 0;
  float* fixed = nullptr;
  size_t fixed_floats = 0;
  std::vector<float> partner_sum;
  int size() const { return group->size(); }
  int rank() const { return group->rank(); }
};

// --bitwise: each TP rank's vocabulary rows are a multiple of this, so that every tp pads the
// vocabulary to the same shards x ceil(V / shards) rows (rounded to the device's align): the
// sum of exponentials runs over the same shards at any tp. align itself otherwise.
inline int vocab_align_for(int64_t V, int shards, int align) {
  if (shards == 0) return align;
  const int64_t rows = (V + shards - 1) / shards;
  return int((rows + align - 1) / align * align);
}
// --bitwise pieces for layers that split their own way (the CNNs' channel-split convolutions):
// this rank's TP shards (shards / tp); the tree over v consecutive arrays of n floats at parts
// (returns the array holding the sum); x, this rank's shards' sum, becomes the sum over every
// rank's in the tree's order (recursive doubling, on the host). fp32 in the layers' memory.
int fixed_local_shards(const TpComm& tp);
float* fixed_local_sum(const LayerOpsT<float>& ops, float* parts, int v, size_t n);
void fixed_allreduce_sum(TpComm& tp, const LayerOpsT<float>& ops, float* x, size_t n);

// --bitwise scratch: arrays of the given sizes carved from tp.fixed, each on a 16-float grid
// (InternalError past fixed_floats), and the floats such a carving takes.
template <size_t K>
size_t fixed_pieces_floats(const std::array<size_t, K>& sizes) {
  size_t total = 0;
  for (size_t n : sizes) total += (n + 15) / 16 * 16;
  return total;
}
template <size_t K>
std::array<float*, K> fixed_pieces(TpComm& tp, const std::array<size_t, K>& sizes) {
  MPITRON_REQUIRE(fixed_pieces_floats(sizes) <= tp.fixed_floats,
                  "--bitwise: the model carved too little TP scratch for a split layer");
  std::array<float*, K> out{};
  size_t at = 0;
  for (size_t k = 0; k < K; ++k) {
    out[k] = tp.fixed + at;
    at += (sizes[k] + 15) / 16 * 16;
  }
  return out;
}
// The floats of tp.fixed one split layer needs at shards / tp local shards (the larger of its
// forward's and backward's; 0 when shards is 0): a column-parallel linear of N rows (IC in,
// OCl out on this rank, in `groups` blocks; gelu: linear_gelu's pre kept), a row-parallel one, the
// vocab-parallel cross-entropy over Vl rows of the vocabulary.
size_t column_parallel_fixed_floats(int shards, int tp, int N, int IC, int OCl, int groups,
                                    bool gelu);
size_t row_parallel_fixed_floats(int shards, int tp, int N, int ICl, int OC);
size_t crossentropy_fixed_floats(int shards, int tp, int N, int Vl);

// --bitwise: UsageError unless n_embd splits into the TP shards' K-slices.
void require_tp_shards(int shards, int64_t n_embd);

// ---- the layout: what tensor parallelism needs of a model, checked in one place ----

// A dimension a model splits evenly over TP: its config key, its size, and why it splits.
struct TpSplit {
  const char* key;  // "n_head"
  int64_t size;     // 12
  const char* why;  // "heads split evenly over TP"
};
// UsageError for the first split tp does not divide: "<key> (<size>) is not divisible by --tp
// <tp>: <why>" ("--tp <tp> is larger than <key> (<size>): <why>" where tp exceeds it). A family's
// validate_layout calls it (the trainer, before building, on every rank).
void require_tp_splits(int tp, std::initializer_list<TpSplit> splits);
// The group a model built by how runs its TP collectives on: *how.tp, or self (size 1) without
// one; InternalError unless its size and rank are the registry slice's.
comm::Group* model_tp_group(const ModelBuild& how, comm::Group& self);
// Where the layers may run: above tp 1 a table with the shard pieces (every CPU and CUDA table);
// InternalError otherwise. Every layer function here checks through it.
template <class A>
void require_tp_layers(const TpComm& tp, const LayerOpsT<A>& ops);

// Storage types: A is float, bf16_t or fp16_t (src/model/precision.hpp) for activations and the
// weights the layers read; parameter gradients, losses, lse and the cross-entropy's row statistics
// are float. A 16-bit all-reduce sums in fp32 on the host and rounds the sum once, so above tp 1 a
// sum of partial products is rounded twice (each rank's product, then the sum), as Megatron-LM's
// 16-bit all-reduces do. The default ops: the CPU's table of A.

// ---- communication pairs (a forward and its backward, side by side) ----

// copy_to_tp (the paper's f) enters a parallel region whose input is replicated on every rank.
// Forward: identity, nothing to do (it marks where a region begins).
template <class A>
void copy_to_tp_forward(TpComm&, const A*, size_t) {}
// Backward: dx = the sum over tp of every rank's partial input gradient (all-reduce, in place).
template <class A>
void copy_to_tp_backward(TpComm& tp, A* dx, size_t n,
                         const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu));

// reduce_from_tp (the paper's g) leaves a parallel region whose output is a sum of partials.
// Forward: y = the sum over tp of every rank's partial output (all-reduce, in place).
template <class A>
void reduce_from_tp_forward(TpComm& tp, A* y, size_t n,
                            const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu));
// Backward: identity, dy is already replicated; nothing to do.
template <class A>
void reduce_from_tp_backward(TpComm&, const A*, size_t) {}

// ---- a region: copy_to_tp once for every column-parallel layer that reads one input ----

// The backward of one copy_to_tp region: the gradient of a replicated input (N,IC) that one or
// more column-parallel layers read (BERT's query, key and value all read the attention input).
// Forward enters it once (copy_to_tp_forward). Backward, on every TP rank in the same order:
//   TpRegion r = copy_to_tp_backward_begin(...);
//   column_parallel_linear_backward_input(r, ...)      per consumer, a fixed order: r.dinp +=
//   copy_to_tp_backward_start(r);                       one all-reduce of r.dinp, non-blocking
//   column_parallel_linear_backward_weights(r, ...)    per consumer, overlapping the all-reduce
//   copy_to_tp_backward_wait(r);                        r.dinp: the full input gradient
// so a region costs one all-reduce of N·IC whatever its consumers. per_layer is the reference
// it is tested against, the fused per-layer form: each consumer's product all-reduced on its own,
// blocking, before it is added (one all-reduce per consumer). At tp 1 neither communicates and
// both give the bits of the serial layers (ops.linear_backward, then the additions).
template <class A>
struct TpRegionT {
  TpComm* tp = nullptr;
  A* dinp = nullptr;     // (N,IC) the input gradient; nullptr: no consumer wants it
  A* partial = nullptr;  // (N,IC) scratch for a product before it is added, or nullptr where
                         // the only product assigns dinp (one consumer, no base)
  int N = 0, IC = 0;
  bool per_layer = false;  // the reference: one blocking all-reduce per consumer
  bool holds = false;      // dinp holds a sum already (the base, or a product): products add
  comm::Request pending;   // the all-reduce in flight between start and wait
  bool staged = false;     // in flight on tp->staging: brought back to dinp at wait
  const LayerOpsT<A>* ops = nullptr;  // the device's layers
};
using TpRegion = TpRegionT<float>;

// Opens a region's backward. base (N,IC) or nullptr: a gradient of the input from outside the
// region (a skip connection), replicated on every rank. It must count once in the sum over TP, so
// dinp starts as base on TP rank 0 and as zeros on the others (per_layer: base on every rank, the
// consumers' products being summed on their own). base may alias dinp. Without base, the first
// product assigns dinp. Every rank passes base or none alike.
template <class A>
TpRegionT<A> copy_to_tp_backward_begin(TpComm& tp,
                                       A* dinp,                              // (N,IC) =, or nullptr
                                       std::type_identity_t<A>* partial,     // (N,IC) or nullptr
                                       const std::type_identity_t<A>* base,  // (N,IC) or nullptr
                                       int N, int IC, bool per_layer = false,
                                       const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu));
// Starts the all-reduce (sum) of r.dinp in place, after the region's last input product; nothing
// at tp 1, for per_layer, or without products.
template <class A>
void copy_to_tp_backward_start(TpRegionT<A>& r);
// Waits for it: r.dinp is the full input gradient, the same on every TP rank.
template <class A>
void copy_to_tp_backward_wait(TpRegionT<A>& r);

// ---- column-parallel linear: W split by output rows, this rank holds OCl of them ----

// inp is replicated on every TP rank (its region entered copy_to_tp forward); out holds this
// rank's columns. No communication.
template <class A>
void column_parallel_linear_forward(TpComm& tp,
                                    A* out,                            // (N,OCl) =
                                    const A* inp,                      // (N,IC)
                                    const A* w,                        // (OCl,IC)
                                    const std::type_identity_t<A>* b,  // (OCl) or nullptr
                                    int N, int IC, int OCl,
                                    const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu),
                                    int groups = 1);

// The same with GPT-2's tanh GELU after it: pre = the product, out = gelu(pre) (this rank's
// columns; ops.linear_gelu_forward, which a device may fuse).
template <class A>
void column_parallel_linear_gelu_forward(TpComm& tp,
                                         A* pre,                            // (N,OCl) =
                                         A* out,                            // (N,OCl) =
                                         const A* inp,                      // (N,IC)
                                         const A* w,                        // (OCl,IC)
                                         const std::type_identity_t<A>* b,  // (OCl) or nullptr
                                         int N, int IC, int OCl,
                                         const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu));

// A consumer's input product in region r: r.dinp += dout W, this rank's partial (the first
// product of a region without base assigns). No communication unless r.per_layer. r.dinp must
// not be nullptr.
// groups: the output columns are that many equal blocks split over TP each (the GPT's fused
// q, k, v): a TP shard's K-slice takes its part of every block (--bitwise).
template <class A>
void column_parallel_linear_backward_input(TpRegionT<A>& r,
                                           const std::type_identity_t<A>* dout,  // (N,OCl)
                                           const std::type_identity_t<A>* w,     // (OCl,IC)
                                           int OCl, int groups = 1);
// A consumer's weight products: dw += dout^T inp, db += the column sums of dout. No
// communication; between start and wait they overlap the region's all-reduce.
template <class A>
void column_parallel_linear_backward_weights(TpRegionT<A>& r,
                                             float* dw,                            // (OCl,IC) +=
                                             float* db,                            // (OCl) +=
                                             const std::type_identity_t<A>* dout,  // (N,OCl)
                                             const std::type_identity_t<A>* inp,   // (N,IC)
                                             int OCl, int groups = 1);

// A column-parallel linear that is a region of its own (the GPT's c_attn, c_fc and LM head):
// begin, input product, start, weight products, wait. dinp is the full input gradient, summed
// over TP: one all-reduce of N·IC, overlapping the weight products. dinp == nullptr skips it and
// the all-reduce (it must then be nullptr on every TP rank). At tp 1: ops.linear_backward.
template <class A>
void column_parallel_linear_backward(TpComm& tp,
                                     std::type_identity_t<A>* dinp,  // (N,IC)  =, or nullptr
                                     float* dw,                      // (OCl,IC) +=
                                     float* db,                      // (OCl)   +=, or nullptr
                                     const A* dout,                  // (N,OCl)
                                     const A* inp,                   // (N,IC)
                                     const A* w,                     // (OCl,IC)
                                     int N, int IC, int OCl,
                                     const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu),
                                     int groups = 1);

// ---- row-parallel linear: W split by input columns, this rank holds ICl of them ----

// out is the full product, summed over TP (reduce_from_tp forward: one all-reduce of N·OC); the
// bias is replicated and added once, after the sum.
template <class A>
void row_parallel_linear_forward(TpComm& tp,
                                 A* out,                            // (N,OC) =
                                 const A* inp,                      // (N,ICl) this rank's part
                                 const A* w,                        // (OC,ICl)
                                 const std::type_identity_t<A>* b,  // (OC) or nullptr, replicated
                                 int N, int ICl, int OC,
                                 const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu));

// No communication (reduce_from_tp backward is the identity). db gets the full column sums of dout
// on every rank: the bias is replicated and its gradient is the same everywhere.
template <class A>
void row_parallel_linear_backward(TpComm& tp,
                                  std::type_identity_t<A>* dinp,  // (N,ICl) =, or nullptr
                                  float* dw,                      // (OC,ICl) +=
                                  float* db,                      // (OC)    +=, or nullptr
                                  const A* dout,                  // (N,OC) replicated
                                  const A* inp,                   // (N,ICl)
                                  const A* w,                     // (OC,ICl)
                                  int N, int ICl, int OC,
                                  const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu));

// ---- vocab-parallel token + position embedding ----

// This rank holds wte rows [v0, v0+Vl) (rows past the vocabulary are padding, never read). Tokens
// outside the range contribute zeros; the sum over TP (reduce_from_tp forward: one all-reduce of
// B·T·C) is then added to wpe[t], once. At tp.size() == 1, v0 must be 0.
template <class A>
void vocab_parallel_embedding_forward(TpComm& tp,
                                      A* out,                 // (B,T,C) =
                                      const int32_t* tokens,  // (B,T), in [0, V)
                                      const A* wte,           // (Vl,C)
                                      const A* wpe,           // (maxT,C), replicated
                                      int B, int T, int C, int v0, int Vl,
                                      const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu));

// No communication. dwte rows of this rank's tokens +=; dwpe += the whole dout (replicated, the
// same on every rank). Sums in token order per column block (bits independent of threads).
template <class A>
void vocab_parallel_embedding_backward(TpComm& tp,
                                       float* dwte,            // (Vl,C)   +=
                                       float* dwpe,            // (maxT,C) +=
                                       const A* dout,          // (B,T,C)
                                       const int32_t* tokens,  // (B,T)
                                       int B, int T, int C, int v0, int Vl,
                                       const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu));

// ---- vocab-parallel softmax cross-entropy ----

// logits hold vocabulary columns [v0, v0+Vl) of which only global columns < V are real; the rest
// is padding for a vocabulary tp does not divide (v0 = tp_rank·Vl, Vl = ceil(V/tp)): never read.
// Three all-reduces of N floats: the row max (max), the sum of exp(x - max) (sum) and the
// target's logit (sum, from the rank that holds it); no rank ever holds the full (N,V) logits.
// losses and lse come out the same on every rank. scratch holds 3N floats (row max, sum of
// exponentials, target logit; overwritten, unused at tp.size() == 1). At tp.size() == 1 the
// serial layer needs v0 == 0 and Vl == V (no padding).
template <class A>
void vocab_parallel_crossentropy_forward(TpComm& tp,
                                         float* losses,           // (N) =
                                         float* lse,              // (N) =
                                         float* scratch,          // (3N) scratch
                                         const A* logits,         // (N,Vl)
                                         const int32_t* targets,  // (N), in [0, V)
                                         int N, int Vl, int v0, int V,
                                         const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu));

// No communication. dlogits = (softmax - onehot) · dloss on real columns, 0 on padding; may alias
// logits.
template <class A>
void vocab_parallel_crossentropy_backward(TpComm& tp,
                                          A* dlogits,              // (N,Vl) =
                                          const A* logits,         // (N,Vl)
                                          const float* lse,        // (N), from forward
                                          const int32_t* targets,  // (N)
                                          float dloss, int N, int Vl, int v0, int V,
                                          const LayerOpsT<A>& ops = layer_ops<A>(Device::cpu));

}  // namespace mpitron::tp
