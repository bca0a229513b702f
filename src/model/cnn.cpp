#include "src/model/cnn.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <type_traits>

#include "base/check.hpp"
#include "layers/batchnorm.hpp"
#include "layers/crossentropy.hpp"
#include "layers/dropout.hpp"
#include "layers/linear.hpp"
#include "layers/relu.hpp"
#include "src/model/activation_plan.hpp"
#include "src/model/tensor_parallel.hpp"
#include "src/train/reduction_tree.hpp"

namespace mpitron {

namespace {

constexpr float kBnEps = 1e-5f;
constexpr double kBnMomentum = 0.1;  // running = (1 - m) running + m * batch statistic (PyTorch)

int key(const ModelConfig& m, const char* k) {
  return int(m.get(k));
}

ConvBnSpec conv_bn(std::string conv, std::string bn, int IC, int OC, int H, int K, int stride,
                   int pad, ChannelSplit split, bool relu, bool pool) {
  ConvBnSpec s;
  s.conv = std::move(conv);
  s.bn = std::move(bn);
  s.IC = IC, s.OC = OC, s.H = H, s.W = H, s.K = K, s.stride = stride, s.pad = pad;
  s.split = split, s.relu = relu, s.pool = pool;
  return s;
}

}  // namespace

CnnSpec cnn_spec(CnnKind kind, const ModelConfig& m) {
  CnnSpec s;
  s.kind = kind;
  s.channels = key(m, "channels");
  s.image = key(m, "image");
  s.classes = key(m, "classes");
  s.group = key(m, "norm_group");
  const int W = key(m, "width"), n = s.image;
  if (kind == CnnKind::alexnet) {
    using enum ChannelSplit;
    for (const ConvBnSpec& c :
         {conv_bn("conv1", "bn1", s.channels, W, n, 3, 1, 1, column, true, true),
          conv_bn("conv2", "bn2", W, 2 * W, n / 2, 3, 1, 1, row, true, true),
          conv_bn("conv3", "bn3", 2 * W, 4 * W, n / 4, 3, 1, 1, column, true, false),
          conv_bn("conv4", "bn4", 4 * W, 4 * W, n / 4, 3, 1, 1, row, true, true)}) {
      CnnBlockSpec b;
      b.c1 = c;
      b.residual = false;
      s.blocks.push_back(std::move(b));
    }
    const int side = s.blocks.back().c1.out_h();
    s.features = 4 * W * side * side;
    s.hidden = key(m, "hidden");
    return s;
  }
  s.convs = {conv_bn("conv1", "bn1", s.channels, W, n, 3, 1, 1, ChannelSplit::none, true, false)};
  int in = W, side = n;
  const int per_stage = key(m, "blocks_per_stage");
  for (int stage = 0; stage < 3; ++stage) {
    const int out = W << stage;
    for (int i = 0; i < per_stage; ++i) {
      const int stride = stage > 0 && i == 0 ? 2 : 1;
      const std::string p = fmt::format("layer{}.{}.", stage + 1, i);
      CnnBlockSpec b;
      b.c1 = conv_bn(p + "conv1", p + "bn1", in, out, side, 3, stride, 1, ChannelSplit::none, true,
                     false);
      const int next = b.c1.OH();
      b.c2 = conv_bn(p + "conv2", p + "bn2", out, out, next, 3, 1, 1, ChannelSplit::none, false,
                     false);
      b.projection = stride != 1 || in != out;
      if (b.projection)
        b.down = conv_bn(p + "downsample.0", p + "downsample.1", in, out, side, 1, stride, 0,
                         ChannelSplit::none, false, false);
      s.blocks.push_back(std::move(b));
      in = out, side = next;
    }
  }
  s.features = in;
  return s;
}

namespace {

void register_conv_bn(ParamRegistry& r, const ConvBnSpec& u, StageOwner owner, int block) {
  const int conv_dim = u.split == ChannelSplit::column ? 0 : u.split == ChannelSplit::row ? 1 : -1;
  const int bn_dim = u.split == ChannelSplit::column ? 0 : -1;
  const float fan_in = float(u.IC * u.K * u.K);
  r.add(u.conv + ".weight", {u.OC, u.IC, u.K, u.K}, InitKind::normal, std::sqrt(2.0f / fan_in),
        true, {conv_dim, 1, owner, block});
  r.add(u.bn + ".weight", {u.OC}, InitKind::ones, 0, false, {bn_dim, 1, owner, block});
  r.add(u.bn + ".bias", {u.OC}, InitKind::zeros, 0, false, {bn_dim, 1, owner, block});
  r.add_buffer(u.bn + ".running_mean", {u.OC}, InitKind::zeros, {bn_dim, 1, owner, block});
  r.add_buffer(u.bn + ".running_var", {u.OC}, InitKind::ones, {bn_dim, 1, owner, block});
}

}  // namespace

ParamRegistry cnn_registry(const CnnSpec& s, const RegistrySlice& slice) {
  ParamRegistry r(slice);
  const bool alexnet = s.kind == CnnKind::alexnet;
  for (const ConvBnSpec& u : s.convs) register_conv_bn(r, u, StageOwner::first, -1);
  for (size_t l = 0; l < s.blocks.size(); ++l) {
    const CnnBlockSpec& b = s.blocks[l];
    register_conv_bn(r, b.c1, StageOwner::block, int(l));
    if (b.residual) register_conv_bn(r, b.c2, StageOwner::block, int(l));
    if (b.projection) register_conv_bn(r, b.down, StageOwner::block, int(l));
  }
  const int64_t F = s.features, K = s.classes;
  if (alexnet) {
    const int64_t H = s.hidden;
    r.add("fc1.weight", {H, F}, InitKind::normal, std::sqrt(2.0f / float(F)), true,
          {0, 1, StageOwner::last});
    r.add("fc1.bias", {H}, InitKind::zeros, 0, false, {0, 1, StageOwner::last});
    r.add("fc2.weight", {K, H}, InitKind::normal, std::sqrt(1.0f / float(H)), true,
          {1, 1, StageOwner::last});
    r.add("fc2.bias", {K}, InitKind::zeros, 0, false, {-1, 1, StageOwner::last});
  } else {
    r.add("fc.weight", {K, F}, InitKind::normal, std::sqrt(1.0f / float(F)), true,
          {-1, 1, StageOwner::last});
    r.add("fc.bias", {K}, InitKind::zeros, 0, false, {-1, 1, StageOwner::last});
  }
  return r;
}

void validate_cnn(const ModelConfig& m, const TrainConfig&) {
  if (m.get("classes") < 2)
    throw UsageError(fmt::format("model.classes must be at least 2 (got {})", m.get("classes")));
  const int64_t minimum = m.type == "alexnet" ? 8 : 4;
  if (m.get("image") < minimum)
    throw UsageError(fmt::format(
        "model.image {} is too small for the {} family's pooling and strides (at least {})",
        m.get("image"), m.type, minimum));
}

void validate_alexnet_layout(const ModelConfig& m, int tp_ranks) {
  tp::require_tp_splits(tp_ranks,
                        {{"model.width", m.get("width"), "the channels split evenly over TP"},
                         {"model.hidden", m.get("hidden"), "the channels split evenly over TP"}});
}

void validate_resnet_layout(const ModelConfig&, int tp) {
  if (tp != 1)
    throw UsageError(fmt::format(
        "the resnet family runs at --tp 1 (got --tp {}); it splits over pipeline stages (--pp), "
        "and the alexnet family splits its channels over TP",
        tp));
}

// ---- the model ------------------------------------------------------------------------------

namespace {

// Per sample at this rank's sizes: a split convolution's input or output is its TP shard.
template <class U>
size_t per_sample_in(const U& u) {
  return size_t(u.shape.IC) * u.shape.H * u.shape.W;
}
template <class U>
size_t per_sample_out(const U& u) {
  return size_t(u.C) * u.spec.out_h() * u.spec.out_w();
}

template <class U>
size_t pooled(const U& u) {  // pool outputs of a planned micro-batch
  return size_t(u.shape.N) * u.C * (u.shape.OH() / 2) * (u.shape.OW() / 2);
}

PhiloxStream dropout_stream(const MicroBatch& mb) {
  return PhiloxStream{mb.seed, mix64(mix64(uint64_t(mb.step), 0), 0xD50Full)};
}

template <class A>
void require_convolutions(const LayerOpsT<A>& L, const std::string& type) {
  if (L.conv2d_forward) return;
  throw UsageError(fmt::format(
      "--device {}: this build has no convolutions for it (CUDA builds need cuDNN; the {} "
      "family runs on the cpu)",
      device_name(L.device), type));
}

// Another device's layers cannot read the host's images, nor 16-bit layers float ones: the model
// keeps a copy per slot.
template <class A>
bool cnn_owns_images(Device device) {
  return device != Device::cpu || !std::is_same_v<A, float>;
}

// Every conv-BN unit of the trunk and the chunks' blocks, in flat order.
template <class A, class Fn>
void for_each_unit(std::vector<ConvBnT<A>>& trunk,
                   std::vector<typename CnnModelT<A>::Chunk>& chunks, Fn&& fn) {
  for (ConvBnT<A>& u : trunk) fn(u);
  for (auto& ch : chunks)
    for (auto& b : ch.blocks) {
      fn(b.c1);
      if (b.residual) fn(b.c2);
      if (b.projection) fn(b.down);
    }
}

// The chunks of this rank's slice and their units at its sizes (B planned rows), each with its
// kernels' plan on L's device: the build's and the memory plan's.
template <class A>
void make_cnn_units(const CnnSpec& s, const RegistrySlice& slice, int B, const LayerOpsT<A>& L,
                    std::vector<ConvBnT<A>>& trunk,
                    std::vector<typename CnnModelT<A>::Chunk>& chunks, int tp_shards) {
  using Chunk = typename CnnModelT<A>::Chunk;
  using Block = typename CnnModelT<A>::Block;
  const int tp = slice.tp, nblocks = int(s.blocks.size());
  for (size_t k = 0; k < slice.chunks.size(); ++k) {
    Chunk ch;
    ch.first = slice.stage == 0 && k == 0;
    ch.last = slice.stage == slice.stages - 1 && k + 1 == slice.chunks.size();
    const int begin = slice.chunks[k].begin, end = std::min(slice.chunks[k].end, nblocks);
    MPITRON_REQUIRE(end > begin, "a chunk without blocks");
    for (int l = begin; l < end; ++l) ch.blocks.emplace_back().index = l;
    chunks.push_back(std::move(ch));
  }
  auto local = [&](const ConvBnSpec& u) {
    ConvBnT<A> c;
    c.spec = u;
    const int ic = u.split == ChannelSplit::row ? u.IC / tp : u.IC;
    const int oc = u.split == ChannelSplit::column ? u.OC / tp : u.OC;
    c.shape = {B, ic, u.H, u.W, oc, u.K, u.K, u.stride, u.pad};
    c.plan = L.conv2d_plan(c.shape);
    if (tp_shards > 0 && u.split != ChannelSplit::none) {
      cpu::Conv2dShape one = c.shape;
      (u.split == ChannelSplit::row ? one.IC : one.OC) =
          (u.split == ChannelSplit::row ? u.IC : u.OC) / tp_shards;
      if ((u.split == ChannelSplit::row ? u.IC : u.OC) % tp_shards != 0)
        throw UsageError(fmt::format(
            "--bitwise: {} channels of {} do not split into the {} TP shards (train.tp_shards)",
            u.split == ChannelSplit::row ? u.IC : u.OC, u.conv, tp_shards));
      c.shard_plan = L.conv2d_plan(one);
    }
    c.C = oc;
    return c;
  };
  if (chunks.front().first)
    for (const ConvBnSpec& u : s.convs) trunk.push_back(local(u));
  for (Chunk& ch : chunks)
    for (Block& b : ch.blocks) {
      const CnnBlockSpec& bs = s.blocks[b.index];
      b.c1 = local(bs.c1);
      b.residual = bs.residual;
      if (b.residual) b.c2 = local(bs.c2);
      b.projection = bs.projection;
      if (b.projection) b.down = local(bs.down);
    }
  for (Chunk& ch : chunks) {
    const Block& last = ch.blocks.back();
    ch.in_elements =
        ch.first ? size_t(s.channels) * s.image * s.image : per_sample_in(ch.blocks.front().c1);
    ch.out_elements =
        ch.last ? size_t(s.classes) : per_sample_out(last.residual ? last.c2 : last.c1);
  }
}

// Gradient segments in flat order: the trunk, each block, the classifier (those held here). Where
// given, the indices of the trunk's, each block's and the classifier's segment.
template <class A>
std::vector<GradSegment> cnn_segments(const ParamRegistry& registry, const CnnSpec& s,
                                      const std::vector<ConvBnT<A>>& trunk,
                                      const std::vector<typename CnnModelT<A>::Chunk>& chunks,
                                      size_t flat_size, size_t* trunk_segment = nullptr,
                                      std::vector<size_t>* segment_of_block = nullptr,
                                      size_t* head_segment = nullptr) {
  std::vector<std::pair<size_t, size_t*>> starts;  // (flat offset, where its index goes)
  if (segment_of_block) segment_of_block->assign(s.blocks.size(), SIZE_MAX);
  if (!trunk.empty())
    starts.push_back({registry.at(trunk.front().spec.conv + ".weight").offset, trunk_segment});
  for (const auto& ch : chunks)
    for (const auto& b : ch.blocks)
      starts.push_back({registry.at(b.c1.spec.conv + ".weight").offset,
                        segment_of_block ? &(*segment_of_block)[b.index] : nullptr});
  if (chunks.back().last)
    starts.push_back({registry.at(s.kind == CnnKind::alexnet ? "fc1.weight" : "fc.weight").offset,
                      head_segment});
  std::vector<GradSegment> segments;
  for (size_t i = 0; i < starts.size(); ++i) {
    if (starts[i].second) *starts[i].second = segments.size();
    segments.push_back({i == 0 ? 0 : starts[i].first,
                        i + 1 < starts.size() ? starts[i + 1].first : flat_size, false});
  }
  return segments;
}

// The running-statistics sums of every unit's batch norm: (mean, var) per channel, then the
// groups counted. Sets each unit's offset into them; returns their count.
template <class A>
size_t place_cnn_stat_sums(std::vector<ConvBnT<A>>& trunk,
                           std::vector<typename CnnModelT<A>::Chunk>& chunks) {
  size_t at = 0;
  for_each_unit<A>(trunk, chunks, [&](ConvBnT<A>& u) {
    u.stats = at;
    at += 2 * size_t(u.C);
  });
  return at + 1;
}

// Per micro-batch of B rows: the widest activation of any unit or the head (the backward
// ping-pong and scratch buffers), the largest convolution workspace, and the pool winners.
struct CnnScratchSizes {
  size_t widest = 0, work = 0, argmax = 0;
  size_t tp_fixed = 0;  // --bitwise: the split layers' TP scratch (tp::TpComm::fixed)
};

// --bitwise: a split convolution's TP scratch pieces, v of its shards on this rank, rows images
// (forward: a column split's shard output, or a row split's products, input and weight slices;
// backward: a column split's input-gradient products and output-gradient slice, or a row split's
// input, its gradient, weight and weight-gradient slices).
template <class A>
std::array<size_t, 4> conv_fixed_pieces(const ConvBnT<A>& u, int rows, int v, bool backward) {
  const cpu::Conv2dShape& s = u.shape;
  const size_t HW = size_t(s.H) * s.W, OHW = size_t(s.OH()) * s.OW(), KK = size_t(s.KH) * s.KW;
  if (u.spec.split == ChannelSplit::column) {
    const size_t k = size_t(s.OC / v), n = size_t(rows) * s.IC * HW;
    if (!backward) return {v > 1 ? rows * k * OHW : 0, 0, 0, 0};
    return {n * v, v > 1 ? rows * k * OHW : 0, 0, 0};
  }
  const size_t k = size_t(s.IC / v), xn = rows * k * HW, wn = size_t(s.OC) * k * KK;
  if (!backward) return {size_t(rows) * s.OC * OHW * v, xn, wn, 0};
  if (v == 1) return {};
  return {xn, xn, wn, wn};
}
template <class A>
CnnScratchSizes cnn_scratch_sizes(std::vector<ConvBnT<A>>& trunk,
                                  std::vector<typename CnnModelT<A>::Chunk>& chunks,
                                  const CnnSpec& s, int Hl, const LayerOpsT<A>& L, int B, int tp,
                                  int tp_shards) {
  CnnScratchSizes z;
  for_each_unit<A>(trunk, chunks, [&](ConvBnT<A>& u) {
    const size_t conv_out = size_t(u.shape.OC) * u.shape.OH() * u.shape.OW();
    z.widest = std::max({z.widest, size_t(u.shape.IC) * u.shape.H * u.shape.W, conv_out,
                         size_t(u.spec.OC) * u.shape.OH() * u.shape.OW()});
    z.work = std::max(z.work, L.conv2d_workspace(u.plan.get()));
    if (u.shard_plan) z.work = std::max(z.work, L.conv2d_workspace(u.shard_plan.get()));
    if (u.spec.pool) z.argmax += pooled(u);
    if (u.shard_plan) {
      const int v = tp_shards / tp;
      z.tp_fixed = std::max({z.tp_fixed, tp::fixed_pieces_floats(conv_fixed_pieces(u, B, v, false)),
                             tp::fixed_pieces_floats(conv_fixed_pieces(u, B, v, true))});
    }
  });
  z.widest = std::max({z.widest, size_t(s.features), size_t(s.classes), size_t(Hl)});
  if (s.kind == CnnKind::alexnet && tp_shards > 0)  // the head's split linears
    z.tp_fixed = std::max(
        {z.tp_fixed, tp::column_parallel_fixed_floats(tp_shards, tp, B, s.features, Hl, 1, false),
         tp::row_parallel_fixed_floats(tp_shards, tp, B, Hl, s.classes)});
  return z;
}

// Every slot's activations: each unit's, a received chunk input, the residual sums and outputs,
// the head's. Pool winners are int32 from their own allocation at am (null: only counting),
// handed out in the same order.
template <class A>
void carve_cnn_activations(ActivationCarver& a, int32_t* am, std::vector<ConvBnT<A>>& trunk,
                           std::vector<typename CnnModelT<A>::Chunk>& chunks,
                           std::vector<typename CnnModelT<A>::HeadActs>& head_slots,
                           const CnnSpec& s, int B, int Hl, int slot_count) {
  auto carve_unit = [&](ConvBnT<A>& u) {
    u.slots.resize(slot_count);
    const size_t n = size_t(B) * u.C * u.shape.OH() * u.shape.OW();
    const size_t groups = size_t(std::max(1, B / s.group)) * u.C;
    for (auto& x : u.slots) {
      x.conv = a.take_as<A>(n);
      x.mean = a.take(groups);
      x.rstd = a.take(groups);
      x.bn = a.take_as<A>(n);
      x.relu = u.spec.relu ? a.take_as<A>(n) : nullptr;
      x.pool = u.spec.pool ? a.take_as<A>(pooled(u)) : nullptr;
      x.argmax = u.spec.pool ? am : nullptr;
      if (u.spec.pool && am) am += pooled(u);
      x.out = x.pool ? x.pool : x.relu ? x.relu : x.bn;
    }
  };
  for (ConvBnT<A>& u : trunk) carve_unit(u);
  for (auto& ch : chunks) {
    ch.input.assign(slot_count, nullptr);
    if (!ch.first)
      for (A*& in : ch.input) in = a.take_as<A>(size_t(B) * ch.in_elements);
    for (auto& b : ch.blocks) {
      carve_unit(b.c1);
      b.sum.assign(slot_count, nullptr);
      b.out.assign(slot_count, nullptr);
      if (!b.residual) {
        for (int k = 0; k < slot_count; ++k) b.out[k] = b.c1.slots[k].out;
        continue;
      }
      carve_unit(b.c2);
      if (b.projection) carve_unit(b.down);
      const size_t n = size_t(B) * b.c2.C * b.c2.shape.OH() * b.c2.shape.OW();
      for (int k = 0; k < slot_count; ++k) b.sum[k] = a.take_as<A>(n), b.out[k] = a.take_as<A>(n);
    }
  }
  head_slots.assign(chunks.back().last ? slot_count : 0, {});
  for (auto& h : head_slots) {
    h.features = a.take_as<A>(size_t(B) * s.features);
    h.hidden = a.take_as<A>(size_t(B) * std::max(1, Hl));
    h.relu = a.take_as<A>(size_t(B) * std::max(1, Hl));
    h.logits = a.take_as<A>(size_t(B) * s.classes);
    h.lse = a.take(B);
    h.losses = a.take(B);
  }
}

// Backward's (B, widest) ping-pong gradients and scratch, and the convolutions' workspace.
template <class A>
void carve_cnn_scratch(ActivationCarver& d, A* (&buffers)[5], A*& workspace, float*& tp_fixed,
                       const CnnScratchSizes& z, int B) {
  for (A*& t : buffers) t = d.take_as<A>(size_t(B) * z.widest);
  workspace = d.take_as<A>(std::max<size_t>(z.work, 1));
  tp_fixed = z.tp_fixed > 0 ? d.take(z.tp_fixed) : nullptr;
}

}  // namespace

template <class A>
CnnModelT<A>::CnnModelT(const CnnSpec& s, const ModelConfig& m, const ModelBuild& how)
    : spec(s),
      B(how.micro_rows),
      layers_(&layer_ops<A>(how.layers ? how.layers->device : Device::cpu)),
      self_(comm::Group::solo()) {
  MPITRON_REQUIRE(how.precision == dtype_of<A>(), "a CNN built for another precision");
  const LayerOpsT<A>& L = *layers_;
  require_convolutions(L, m.type);
  tp_.group = tp::model_tp_group(how, self_);
  tp_.device = how.tp_device;
  tp_.shards = how.tp_shards;
  config = m;
  make_cnn_units(s, how.slice, B, L, trunk, chunks, how.tp_shards);
  registry = cnn_registry(s, how.slice);
  allocate_tensors(how);

  // Parameters (or their rounded copy), buffers and running-statistics sums.
  if constexpr (std::is_same_v<A, float>) {
    bind_weights(params.data());
  } else {
    weights = Buffer<A>(*how.alloc, flat_size);
    bind_weights(weights.data());
  }
  parameters_changed();
  head.Hl = s.hidden / how.slice.tp;
  float* buf = buffers.data();
  for_each_unit<A>(trunk, chunks, [&](ConvBn& u) {
    for (const ParamInfo& b : registry.buffers()) {
      if (b.name == u.spec.bn + ".running_mean") u.running_mean = buf + b.offset;
      if (b.name == u.spec.bn + ".running_var") u.running_var = buf + b.offset;
    }
    MPITRON_REQUIRE(u.running_mean && u.running_var, "batch norm without running statistics");
  });
  stat_stride = place_cnn_stat_sums<A>(trunk, chunks);  // the last: groups counted
  stat_shards = how.reduction_shards_per_rank;
  stat_sums.assign(stat_stride * size_t(std::max(1, stat_shards)), 0.0);
  stat_dev = stat_sums.data();
  if (L.device != Device::cpu) {
    stat_store_ = Buffer<double>(*how.alloc, stat_sums.size());
    stat_dev = stat_store_.data();
    L.upload_bytes(stat_dev, stat_sums.data(), stat_sums.size() * sizeof(double));
  }
  segments = cnn_segments<A>(registry, s, trunk, chunks, flat_size, &trunk_segment_,
                             &segment_of_block_, &head_segment_);

  // Activations of every slot, planned once.
  const int slot_count = std::max(1, how.slots);
  const CnnScratchSizes z =
      cnn_scratch_sizes<A>(trunk, chunks, s, head.Hl, L, B, tp_.size(), tp_.shards);
  argmax_store = Buffer<int32_t>(*how.alloc, std::max<size_t>(z.argmax * slot_count, 1));
  acts = plan_activations(*how.alloc, [&](ActivationCarver& a) {
    carve_cnn_activations<A>(a, argmax_store.data(), trunk, chunks, head_slots, s, B, head.Hl,
                             slot_count);
  });
  dacts = plan_activations(*how.alloc, [&](ActivationCarver& d) {
    A* scratch[5];
    carve_cnn_scratch<A>(d, scratch, workspace, tp_.fixed, z, B);
    d0 = scratch[0], d1 = scratch[1], t0 = scratch[2], t1 = scratch[3], t2 = scratch[4];
  });
  tp_.fixed_floats = z.tp_fixed;
  // Another device's layers cannot read the host's samples, nor 16-bit layers float images: they
  // go to a copy per micro-batch, one per slot (backward reads its micro-batch's images for the
  // first convolution's weight gradient, and its labels, after other micro-batches' forwards).
  if (cnn_owns_images<A>(L.device) && chunks.front().first) {
    images_ = Buffer<A>(*how.alloc, slot_count * image_elements());
    if (!std::is_same_v<A, float>) image_staging_ = Buffer<float>(*how.alloc, image_elements());
  }
  if (L.device != Device::cpu) labels_ = Buffer<int32_t>(*how.alloc, size_t(slot_count) * B);
  host_losses_.resize(size_t(B));
}

template <class A>
size_t CnnModelT<A>::image_elements() const {
  return size_t(B) * spec.channels * spec.image * spec.image;
}

template <class A>
const A* CnnModelT<A>::device_images(const MicroBatch& mb, bool upload) {
  if constexpr (std::is_same_v<A, float>)
    if (!images_.data()) return mb.samples.features;
  A* at = images_.data() + size_t(mb.slot) * image_elements();
  if (!upload) return at;
  const size_t n = size_t(mb.samples.rows) * spec.channels * spec.image * spec.image;
  if constexpr (std::is_same_v<A, float>) {
    layers_->upload(at, mb.samples.features, n);
  } else {  // rounded to A where the layers run, as the weights are
    layers_->upload(image_staging_.data(), mb.samples.features, n);
    layers_->round_weights(at, image_staging_.data(), n);
  }
  return at;
}

template <class A>
const int32_t* CnnModelT<A>::device_labels(const MicroBatch& mb, bool upload) {
  if (!labels_.data()) return mb.samples.labels;
  int32_t* at = labels_.data() + size_t(mb.slot) * B;
  if (upload) layers_->upload_int32(at, mb.samples.labels, size_t(mb.samples.rows));
  return at;
}

template <class A>
template <class Fn>
void CnnModelT<A>::for_each_parameter(Fn&& fn) {
  for_each_unit<A>(trunk, chunks, [&](ConvBn& u) {
    fn(u.spec.conv + ".weight", u.w, u.dw);
    fn(u.spec.bn + ".weight", u.bn_w, u.dbn_w);
    fn(u.spec.bn + ".bias", u.bn_b, u.dbn_b);
  });
  const bool alexnet = spec.kind == CnnKind::alexnet;
  fn(alexnet ? "fc1.weight" : "fc.weight", head.fc1_w, head.dfc1_w);
  fn(alexnet ? "fc1.bias" : "fc.bias", head.fc1_b, head.dfc1_b);
  if (!alexnet) return;
  fn("fc2.weight", head.fc2_w, head.dfc2_w);
  fn("fc2.bias", head.fc2_b, head.dfc2_b);
}

template <class A>
void CnnModelT<A>::bind_weights(A* read) {
  for_each_parameter([&](const std::string& name, A*& weight, float*&) {
    const ParamInfo* p = registry.find(name);
    weight = p ? read + p->offset : nullptr;
  });
}

template <class A>
void CnnModelT<A>::bind_gradients(const std::function<float*(size_t)>& address) {
  for_each_parameter([&](const std::string& name, A*&, float*& gradient) {
    const ParamInfo* p = registry.find(name);
    gradient = p ? address(p->offset) : nullptr;
  });
}

template <class A>
void CnnModelT<A>::parameters_changed() {
  if constexpr (!std::is_same_v<A, float>) round_weight_copy(*layers_, weights.data());
}

template <class A>
bool CnnModelT<A>::conv_bn_forward(ConvBn& u, int slot, const A* x, int rows, bool training,
                                   const A* shortcut, A* block_out) {
  auto& a = u.slots[slot];
  cpu::Conv2dShape shape = u.shape;
  shape.N = rows;
  const int HW = shape.OH() * shape.OW();
  const size_t n = size_t(rows) * u.C * HW;
  const LayerOpsT<A>& L = *layers_;
  if (u.shard_plan) {
    conv_forward_fixed(u, a.conv, x, rows);
  } else {
    L.conv2d_forward(a.conv, workspace, x, u.w, u.plan.get(), rows);
    if (u.spec.split == ChannelSplit::row) tp::reduce_from_tp_forward(tp_, a.conv, n, L);
  }
  // Training writes batch norm and what follows it in one pass where the device can.
  const bool fused =
      training && L.batchnorm2d_add_relu_forward && (u.spec.relu || shortcut != nullptr);
  if (training) {
    const int G = spec.group;
    if (fused)
      L.batchnorm2d_add_relu_forward(shortcut ? block_out : a.relu, a.mean, a.rstd, a.conv, u.bn_w,
                                     u.bn_b, shortcut, rows, u.C, HW, G, kBnEps);
    else
      L.batchnorm2d_forward(a.bn, a.mean, a.rstd, a.conv, u.bn_w, u.bn_b, rows, u.C, HW, G, kBnEps);
    L.batchnorm2d_group_stats(stat_now + u.stats, stat_now + u.stats + u.C, a.mean, a.rstd,
                              rows / G, u.C, HW, G, kBnEps);
  } else {
    L.batchnorm2d_forward_eval(a.bn, a.conv, u.bn_w, u.bn_b, u.running_mean, u.running_var, rows,
                               u.C, HW, kBnEps);
  }
  if (u.spec.relu && !fused) L.relu_forward(a.relu, a.bn, n);
  if (u.spec.pool)
    L.maxpool2d_forward(a.pool, a.argmax, a.relu ? a.relu : a.bn,
                        cpu::Pool2dShape{rows, u.C, shape.OH(), shape.OW(), 2, 2, 0});
  return fused;
}

template <class A>
void CnnModelT<A>::conv_bn_backward(ConvBn& u, int slot, A* dy, A* dx, const A* x, int rows) {
  const auto& a = u.slots[slot];
  cpu::Conv2dShape shape = u.shape;
  shape.N = rows;
  const int HW = shape.OH() * shape.OW();
  const size_t n = size_t(rows) * u.C * HW;
  const LayerOpsT<A>& L = *layers_;
  A* g = dy;
  if (u.spec.pool) {
    L.maxpool2d_backward(t0, g, a.argmax,
                         cpu::Pool2dShape{rows, u.C, shape.OH(), shape.OW(), 2, 2, 0});
    g = t0;
  }
  // ReLU's output is positive exactly where its input is: it stands in for the input.
  if (u.spec.relu) L.relu_backward(g, g, a.relu, n);
  L.batchnorm2d_backward(t1, u.dbn_w, u.dbn_b, g, a.conv, u.bn_w, a.mean, a.rstd, rows, u.C, HW,
                         spec.group);
  if (u.shard_plan) return conv_backward_fixed(u, dx, t1, x, rows);
  L.conv2d_backward(dx, u.dw, workspace, t1, x, u.w, u.plan.get(), rows);
  // A column split's input is replicated: its gradient is the sum of every rank's part.
  if (dx && u.spec.split == ChannelSplit::column)
    tp::copy_to_tp_backward(tp_, dx, size_t(rows) * shape.IC * shape.H * shape.W, L);
}

template <class A>
void CnnModelT<A>::conv_forward_fixed(ConvBn& u, A* out, const A* x, int rows) {
  if constexpr (!std::is_same_v<A, float>) {
    MPITRON_REQUIRE(false, "--bitwise tensor parallelism is fp32 only");
  } else {
    const LayerOpsT<A>& L = *layers_;
    const cpu::Conv2dShape& s = u.shape;
    const int v = tp::fixed_local_shards(tp_), KK = s.KH * s.KW;
    const size_t HW = size_t(s.H) * s.W, OHW = size_t(s.OH()) * s.OW();
    if (u.spec.split == ChannelSplit::column) {  // out's channels, shard by shard
      const int k = s.OC / v;
      if (v == 1) return L.conv2d_forward(out, workspace, x, u.w, u.shard_plan.get(), rows);
      float* ok = tp::fixed_pieces(tp_, conv_fixed_pieces(u, rows, v, false))[0];
      for (int j = 0; j < v; ++j) {
        L.conv2d_forward(ok, workspace, x, u.w + size_t(j) * k * s.IC * KK, u.shard_plan.get(),
                         rows);
        L.copy_strided(out + j * k * OHW, int(s.OC * OHW), ok, int(k * OHW), rows, int(k * OHW));
      }
      return;
    }
    const int k = s.IC / v;  // a row split: the tree over the input channels' shards
    const size_t n = size_t(rows) * s.OC * OHW;
    const auto pieces = tp::fixed_pieces(tp_, conv_fixed_pieces(u, rows, v, false));
    float *parts = pieces[0], *xk = pieces[1], *wk = pieces[2];
    for (int j = 0; j < v; ++j) {
      L.copy_strided(xk, int(k * HW), x + j * k * HW, int(s.IC * HW), rows, int(k * HW));
      L.copy_strided(wk, k * KK, u.w + j * k * KK, s.IC * KK, s.OC, k * KK);
      L.conv2d_forward(parts + j * n, workspace, xk, wk, u.shard_plan.get(), rows);
    }
    L.copy(out, tp::fixed_local_sum(L, parts, v, n), n);
    tp::fixed_allreduce_sum(tp_, L, out, n);
  }
}

template <class A>
void CnnModelT<A>::conv_backward_fixed(ConvBn& u, A* dx, const A* dout, const A* x, int rows) {
  if constexpr (!std::is_same_v<A, float>) {
    MPITRON_REQUIRE(false, "--bitwise tensor parallelism is fp32 only");
  } else {
    const LayerOpsT<A>& L = *layers_;
    const cpu::Conv2dShape& s = u.shape;
    const int v = tp::fixed_local_shards(tp_), KK = s.KH * s.KW;
    const size_t HW = size_t(s.H) * s.W, OHW = size_t(s.OH()) * s.OW();
    if (u.spec.split == ChannelSplit::column) {  // dx: the tree over the output channels' shards
      const int k = s.OC / v;
      const size_t n = size_t(rows) * s.IC * HW;
      const auto pieces = tp::fixed_pieces(tp_, conv_fixed_pieces(u, rows, v, true));
      float *parts = pieces[0], *dk = pieces[1];
      for (int j = 0; j < v; ++j) {
        const float* d = dout;
        if (v > 1) {
          L.copy_strided(dk, int(k * OHW), dout + j * k * OHW, int(s.OC * OHW), rows, int(k * OHW));
          d = dk;
        }
        L.conv2d_backward(dx ? parts + j * n : nullptr, u.dw + size_t(j) * k * s.IC * KK, workspace,
                          d, x, u.w + size_t(j) * k * s.IC * KK, u.shard_plan.get(), rows);
      }
      if (!dx) return;
      L.copy(dx, tp::fixed_local_sum(L, parts, v, n), n);
      tp::fixed_allreduce_sum(tp_, L, dx, n);
      return;
    }
    const int k = s.IC / v;  // a row split: each input-channel shard's gradients in place
    if (v == 1)
      return L.conv2d_backward(dx, u.dw, workspace, dout, x, u.w, u.shard_plan.get(), rows);
    const auto [xk, dxk, wk, dwk] = tp::fixed_pieces(tp_, conv_fixed_pieces(u, rows, v, true));
    for (int j = 0; j < v; ++j) {
      L.copy_strided(xk, int(k * HW), x + j * k * HW, int(s.IC * HW), rows, int(k * HW));
      L.copy_strided(wk, k * KK, u.w + j * k * KK, s.IC * KK, s.OC, k * KK);
      L.copy_strided(dwk, k * KK, u.dw + j * k * KK, s.IC * KK, s.OC, k * KK);  // += onto dw
      L.conv2d_backward(dx ? dxk : nullptr, dwk, workspace, dout, xk, wk, u.shard_plan.get(), rows);
      L.copy_strided(u.dw + j * k * KK, s.IC * KK, dwk, k * KK, s.OC, k * KK);
      if (dx) L.copy_strided(dx + j * k * HW, int(s.IC * HW), dxk, int(k * HW), rows, int(k * HW));
    }
  }
}

template <class A>
const A* CnnModelT<A>::trunk_forward(int slot, const A* x, int rows, bool training) {
  for (ConvBn& u : trunk) {
    conv_bn_forward(u, slot, x, rows, training);
    x = u.slots[slot].out;
  }
  return x;
}

template <class A>
void CnnModelT<A>::block_forward(Block& b, int slot, const A* x, int rows, bool training) {
  conv_bn_forward(b.c1, slot, x, rows, training);
  if (!b.residual) return;
  const A* shortcut = x;
  if (b.projection) {
    conv_bn_forward(b.down, slot, x, rows, training);
    shortcut = b.down.slots[slot].out;
  }
  if (conv_bn_forward(b.c2, slot, b.c1.slots[slot].out, rows, training, shortcut, b.out[slot]))
    return;  // c2's batch norm wrote relu(bn + shortcut)
  const size_t n = size_t(rows) * b.c2.C * b.c2.shape.OH() * b.c2.shape.OW();
  layers_->residual_forward(b.sum[slot], b.c2.slots[slot].out, shortcut, n);
  layers_->relu_forward(b.out[slot], b.sum[slot], n);
}

template <class A>
void CnnModelT<A>::block_backward(Block& b, int slot, A* dout, A* dx, const A* x, int rows) {
  if (!b.residual) return conv_bn_backward(b.c1, slot, dout, dx, x, rows);
  const size_t n = size_t(rows) * b.c2.C * b.c2.shape.OH() * b.c2.shape.OW();
  layers_->relu_backward(dout, dout, b.out[slot], n);                  // dout now holds d(sum)
  conv_bn_backward(b.c2, slot, dout, t2, b.c1.slots[slot].out, rows);  // c2 has no ReLU
  conv_bn_backward(b.c1, slot, t2, dx, x, rows);
  if (b.projection) {
    conv_bn_backward(b.down, slot, dout, t2, x, rows);
    layers_->residual_forward(dx, dx, t2,
                              size_t(rows) * b.c1.shape.IC * b.c1.shape.H * b.c1.shape.W);
  } else {
    layers_->residual_forward(dx, dx, dout, n);
  }
}

template <class A>
double CnnModelT<A>::forward(const MicroBatch& mb) {
  MPITRON_REQUIRE(mb.chunk >= 0 && mb.chunk < int(chunks.size()), "no such chunk on this stage");
  Chunk& ch = chunks[mb.chunk];
  const int rows = mb.samples.rows, slot = mb.slot;
  MPITRON_REQUIRE(rows <= B && slot >= 0 && slot < int(ch.input.size()),
                  "micro-batch larger than planned");
  MPITRON_REQUIRE(!mb.training || rows % spec.group == 0,
                  "a training micro-batch must hold whole batch-norm groups");
  if (mb.training && mb.chunk == 0) stat_groups += rows / spec.group;
  // --bitwise: the micro-batch is reduction shard first_sample / rows, this rank's in turn.
  stat_now =
      stat_dev + (stat_shards > 0 ? stat_stride * size_t(mb.first_sample / rows % stat_shards) : 0);
  const LayerOpsT<A>& L = *layers_;
  const A* x = ch.input[slot];
  if (ch.first) {
    MPITRON_REQUIRE(mb.samples.features && mb.samples.labels, "the model reads images");
    x = trunk_forward(slot, device_images(mb, true), rows, mb.training);
  }
  for (Block& b : ch.blocks) {
    block_forward(b, slot, x, rows, mb.training);
    x = b.out[slot];
  }
  if (!ch.last) return 0.0;
  HeadActs& h = head_slots[slot];
  const int F = spec.features, K = spec.classes;
  if (spec.kind == CnnKind::alexnet) {
    L.dropout_forward(h.features, x, mb.dropout, dropout_stream(mb), uint64_t(mb.first_sample),
                      rows, F);
    tp::column_parallel_linear_forward(tp_, h.hidden, h.features, head.fc1_w, head.fc1_b, rows, F,
                                       head.Hl, L);
    L.relu_forward(h.relu, h.hidden, size_t(rows) * head.Hl);
    tp::row_parallel_linear_forward(tp_, h.logits, h.relu, head.fc2_w, head.fc2_b, rows, head.Hl, K,
                                    L);
  } else {
    const ConvBn& last = ch.blocks.back().c2;
    L.global_avgpool_forward(h.features, x, rows, F, last.shape.OH() * last.shape.OW());
    L.linear_forward(h.logits, h.features, head.fc1_w, head.fc1_b, rows, F, K);
  }
  MPITRON_REQUIRE(mb.samples.labels || !ch.first, "the model reads labels");
  L.crossentropy_forward(h.losses, h.lse, h.logits, device_labels(mb, true), rows, K);
  const float* losses = h.losses;
  if (L.device != Device::cpu) {
    L.download(host_losses_.data(), h.losses, size_t(rows));
    losses = host_losses_.data();
  }
  double sum = 0.0;
  for (int i = 0; i < rows; ++i) sum += losses[i];
  return sum;
}

template <class A>
void CnnModelT<A>::backward(const MicroBatch& mb, float dloss, GradReadyHook ready) {
  Chunk& ch = chunks[mb.chunk];
  const int rows = mb.samples.rows, slot = mb.slot;
  const int F = spec.features, K = spec.classes;
  const LayerOpsT<A>& L = *layers_;
  if (ch.last) {
    HeadActs& h = head_slots[slot];
    L.crossentropy_backward(h.logits, h.logits, h.lse, device_labels(mb, false), dloss, rows, K);
    if (spec.kind == CnnKind::alexnet) {
      tp::row_parallel_linear_backward(tp_, t0, head.dfc2_w, head.dfc2_b, h.logits, h.relu,
                                       head.fc2_w, rows, head.Hl, K, L);
      L.relu_backward(t0, t0, h.hidden, size_t(rows) * head.Hl);
      tp::column_parallel_linear_backward(tp_, t1, head.dfc1_w, head.dfc1_b, t0, h.features,
                                          head.fc1_w, rows, F, head.Hl, L);
      L.dropout_backward(d0, t1, mb.dropout, dropout_stream(mb), uint64_t(mb.first_sample), rows,
                         F);
    } else {
      const ConvBn& last = ch.blocks.back().c2;
      L.linear_backward(t0, head.dfc1_w, head.dfc1_b, h.logits, h.features, head.fc1_w, rows, F, K);
      L.global_avgpool_backward(d0, t0, rows, F, last.shape.OH() * last.shape.OW());
    }
    ready(head_segment_);
  }  // else d0 holds the gradient of the chunk's output, received from the next stage
  const A* image = ch.first ? device_images(mb, false) : nullptr;
  A *g = d0, *other = d1;
  for (int k = int(ch.blocks.size()) - 1; k >= 0; --k) {
    Block& b = ch.blocks[k];
    const bool first = ch.first && k == 0 && trunk.empty();  // no gradient for the image
    const A* x = k > 0       ? ch.blocks[k - 1].out[slot]
                 : !ch.first ? ch.input[slot]
                 : first     ? image
                             : trunk.back().slots[slot].out;
    block_backward(b, slot, g, first ? nullptr : other, x, rows);
    std::swap(g, other);
    ready(segment_of_block_[b.index]);
  }
  // g is the chunk's input gradient (boundary().input_grad)
  if (!ch.first || trunk.empty()) return;
  for (int i = int(trunk.size()) - 1; i >= 0; --i) {
    const A* x = i > 0 ? trunk[i - 1].slots[slot].out : image;
    conv_bn_backward(trunk[i], slot, g, i > 0 ? other : nullptr, x, rows);
    std::swap(g, other);
  }
  ready(trunk_segment_);
}

template <class A>
ModelOutput CnnModelT<A>::output(int slot) const {
  return {host_floats(*layers_, head_slots[slot].logits, size_t(B) * spec.classes, host_logits_,
                      host_logits_16_),
          1, spec.classes};
}

template <class A>
StageBoundary CnnModelT<A>::boundary(int chunk, int slot) {
  Chunk& ch = chunks[chunk];
  StageBoundary b;
  b.input_elements = ch.in_elements;
  b.output_elements = ch.out_elements;
  b.element_bytes = sizeof(A);
  if (!ch.first) {
    b.input = ch.input[slot];
    b.input_grad = ch.blocks.size() % 2 == 0 ? d0 : d1;
  }
  if (!ch.last) {
    b.output = ch.blocks.back().out[slot];
    b.output_grad = d0;
  }
  return b;
}

template <class A>
void CnnModelT<A>::end_step(comm::Group& dp) {
  const LayerOpsT<A>& L = *layers_;
  std::vector<double>& sums = stat_sums;
  const bool off_host = L.device != Device::cpu;
  // Off the CPU the sums and the running statistics come to the host and go back: C values each.
  if (off_host) L.download_bytes(sums.data(), stat_dev, sums.size() * sizeof(double));
  const double groups = double(dp.allreduce_sum(stat_groups));
  std::vector<double> total;  // the step's sums, stat_stride of them
  if (stat_shards > 0) {
    // Every shard's set at its place (one rank's values among zeros: the all-reduce is exact),
    // then the sets summed in the fixed tree.
    const int shards = stat_shards * dp.size();
    std::vector<double> all(stat_stride * size_t(shards), 0.0);
    std::copy(sums.begin(), sums.end(),
              all.begin() + ptrdiff_t(stat_stride * stat_shards) * dp.rank());
    dp.allreduce_sum(all.data(), all.size());
    total.resize(stat_stride);
    for (size_t j = 0; j < stat_stride; ++j)
      total[j] = tree_sum(shards, [&](int s) { return all[size_t(s) * stat_stride + j]; });
  } else {
    total = sums;
    dp.allreduce_sum(total.data(), total.size());
  }
  stat_groups = 0;
  float* running = buffers.data();
  if (off_host && groups > 0) {
    host_buffers_.resize(buffers.size());
    L.download(host_buffers_.data(), buffers.data(), buffers.size());
    running = host_buffers_.data();
  }
  if (groups > 0)
    for_each_unit<A>(trunk, chunks, [&](ConvBn& u) {
      float* rm = running + (u.running_mean - buffers.data());
      float* rv = running + (u.running_var - buffers.data());
      for (int c = 0; c < u.C; ++c) {
        const double mean = total[u.stats + c] / groups, var = total[u.stats + u.C + c] / groups;
        rm[c] = float((1 - kBnMomentum) * rm[c] + kBnMomentum * mean);
        rv[c] = float((1 - kBnMomentum) * rv[c] + kBnMomentum * var);
      }
    });
  std::fill(sums.begin(), sums.end(), 0.0);
  if (!off_host) return;
  if (groups > 0) L.upload(buffers.data(), host_buffers_.data(), buffers.size());
  L.upload_bytes(stat_dev, sums.data(), sums.size() * sizeof(double));
}

template class CnnModelT<float>;
template class CnnModelT<bf16_t>;
template class CnnModelT<fp16_t>;

namespace {

template <class A>
ModelMemory cnn_memory(CnnKind kind, const ModelConfig& m, const ModelBuild& how) {
  const CnnSpec s = cnn_spec(kind, m);
  const LayerOpsT<A>& L = layer_ops<A>(how.layers ? how.layers->device : Device::cpu);
  require_convolutions(L, m.type);
  const int B = how.micro_rows, slot_count = std::max(1, how.slots), Hl = s.hidden / how.slice.tp;
  std::vector<ConvBnT<A>> trunk;
  std::vector<typename CnnModelT<A>::Chunk> chunks;
  make_cnn_units(s, how.slice, B, L, trunk, chunks, how.tp_shards);
  const ParamRegistry registry = cnn_registry(s, how.slice);
  ModelMemory out;
  out.flat_size = (registry.size() + how.flat_align - 1) / how.flat_align * how.flat_align;
  out.buffer_elements = registry.buffer_size();
  out.weight_copy_bytes = std::is_same_v<A, float> ? 0 : out.flat_size * sizeof(A);
  out.segments = cnn_segments<A>(registry, s, trunk, chunks, out.flat_size);
  const CnnScratchSizes z =
      cnn_scratch_sizes<A>(trunk, chunks, s, Hl, L, B, how.slice.tp, how.tp_shards);
  ActivationCarver a, d;
  std::vector<typename CnnModelT<A>::HeadActs> head_slots;
  carve_cnn_activations<A>(a, nullptr, trunk, chunks, head_slots, s, B, Hl, slot_count);
  A* scratch[5];
  A* workspace;
  float* tp_fixed;
  carve_cnn_scratch<A>(d, scratch, workspace, tp_fixed, z, B);
  size_t other = std::max<size_t>(z.argmax * slot_count, 1) * sizeof(int32_t);  // pool winners
  if (L.device != Device::cpu)  // the statistics' sums, and each slot's labels
    other += place_cnn_stat_sums<A>(trunk, chunks) * sizeof(double) *
                 size_t(std::max(1, how.reduction_shards_per_rank)) +
             size_t(slot_count) * B * sizeof(int32_t);
  if (cnn_owns_images<A>(L.device) && chunks.front().first) {  // each slot's images
    const size_t image = size_t(B) * s.channels * s.image * s.image;
    other += slot_count * image * sizeof(A);
    if (!std::is_same_v<A, float>) other += image * sizeof(float);  // the staging
  }
  out.activation_bytes = (a.used + d.used) * sizeof(float) + other;
  out.logit_bytes = head_slots.size() * carved_bytes<A>(size_t(B) * s.classes);
  if (how.slice.stages > 1)
    for (const auto& ch : chunks)
      out.boundary_elements = std::max({out.boundary_elements, ch.in_elements, ch.out_elements});
  return out;
}

template <class A>
std::unique_ptr<Model> build_cnn(CnnKind kind, const ModelConfig& m, const ModelBuild& how) {
  return std::make_unique<CnnModelT<A>>(cnn_spec(kind, m), m, how);
}

// The precision's instance of f<A>(kind, m, how).
template <template <class> class F>
auto for_precision(CnnKind kind, const ModelConfig& m, const ModelBuild& how) {
  switch (how.precision) {
    case DType::bf16:
      return F<bf16_t>::call(kind, m, how);
    case DType::f16:
      return F<fp16_t>::call(kind, m, how);
    case DType::f32:
      break;
  }
  return F<float>::call(kind, m, how);
}
template <class A>
struct Memory {
  static ModelMemory call(CnnKind k, const ModelConfig& m, const ModelBuild& how) {
    return cnn_memory<A>(k, m, how);
  }
};
template <class A>
struct Build {
  static std::unique_ptr<Model> call(CnnKind k, const ModelConfig& m, const ModelBuild& how) {
    return build_cnn<A>(k, m, how);
  }
};

}  // namespace

ModelMemory alexnet_model_memory(const ModelConfig& m, const ModelBuild& how) {
  return for_precision<Memory>(CnnKind::alexnet, m, how);
}

ModelMemory resnet_model_memory(const ModelConfig& m, const ModelBuild& how) {
  return for_precision<Memory>(CnnKind::resnet, m, how);
}

std::unique_ptr<Model> build_alexnet(const ModelConfig& m, const ModelBuild& how) {
  return for_precision<Build>(CnnKind::alexnet, m, how);
}

std::unique_ptr<Model> build_resnet(const ModelConfig& m, const ModelBuild& how) {
  return for_precision<Build>(CnnKind::resnet, m, how);
}

}  // namespace mpitron
