#include "src/train/grad_sync.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <vector>

#include "base/check.hpp"

namespace mpitron {

namespace {
// Adds the seconds of its lifetime to *total (GradSync::take_comm_seconds).
struct CommTimer {
  double* total;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  ~CommTimer() {
    *total += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};
}  // namespace

GradStorage GradStorage::full(Model& model, DeviceAllocator& alloc, size_t extra) {
  GradStorage s;
  s.data = Buffer<float>(alloc, model.flat_size + extra);
  for (const GradSegment& seg : model.segments) s.segment_data.push_back(s.data.data() + seg.begin);
  float* g = s.data.data();
  model.bind_gradients([g](size_t offset) { return g + offset; });
  return s;
}

GradStorage GradStorage::windowed(Model& model, DeviceAllocator& alloc) {
  size_t window = 0;
  for (const GradSegment& seg : model.segments)
    if (seg.window) window = std::max(window, seg.end - seg.begin);
  // Layout: the segments in flat order, all window segments at the first one's place.
  std::vector<size_t> at;
  size_t used = 0, window_at = SIZE_MAX;
  for (const GradSegment& seg : model.segments) {
    if (!seg.window) {
      at.push_back(used);
      used += seg.end - seg.begin;
    } else {
      if (window_at == SIZE_MAX) window_at = used, used += window;
      at.push_back(window_at);
    }
  }
  GradStorage s;
  s.data = Buffer<float>(alloc, used);
  for (size_t a : at) s.segment_data.push_back(s.data.data() + a);
  const std::vector<GradSegment>& segs = model.segments;
  const std::vector<float*>& base = s.segment_data;
  model.bind_gradients([&segs, &base](size_t offset) {
    auto it = std::upper_bound(segs.begin(), segs.end(), offset,
                               [](size_t o, const GradSegment& g) { return o < g.end; });
    MPITRON_REQUIRE(it != segs.end() && it->begin <= offset, "parameter outside every segment");
    return base[size_t(it - segs.begin())] + (offset - it->begin);
  });
  return s;
}

GradSync::GradSync(Model& model, comm::Group& dp, comm::Group* tp, const GradSyncOptions& opts,
                   const StepBackend& ops, DeviceAllocator& alloc, comm::Group* pp,
                   comm::Group* embedding)
    : model_(model),
      dp_(dp),
      tp_(tp),
      pp_(pp && pp->size() > 1 ? pp : nullptr),
      embedding_(embedding && embedding->size() > 1 ? embedding : nullptr),
      opts_(opts),
      ops_(ops) {
  const size_t flat = model.flat_size;
  const int p = dp.size();
  if (embedding_) {
    MPITRON_REQUIRE(opts.zero < 2 && opts.bucket_mb == 0,
                    "the tied embedding's gradient is summed after the pipeline flush: no ZeRO 2 "
                    "or buckets");
    for (const ParamInfo& info : model.registry.params())
      if (info.shard.stage == StageOwner::first_and_last)
        tied_.push_back({info.offset, info.offset + info.numel});
  }
  if (opts.reduction_shards > 0) {
    MPITRON_REQUIRE(opts.bucket_mb == 0 && !opts.device_dp && !opts.device_embedding,
                    "--bitwise reduces after the last shard, with MPI");
    MPITRON_REQUIRE(opts.reduction_shards % p == 0, "dp does not divide the reduction shards");
  }
  if (opts.device_dp)
    MPITRON_REQUIRE(opts.zero < 2 && opts.method == comm::DpReduce::allreduce,
                    "device collectives reduce with allreduce at ZeRO 0 or 1");
  const bool bitwise = opts.reduction_shards > 0;
  if (bitwise) {
    if (!pp_)  // one stage holds both ends of a tied embedding: its two parts apart
      for (const ParamInfo& info : model.registry.params())
        if (info.shard.stage == StageOwner::first_and_last) tied_part_ = {info.offset, info.numel};
    leaf_size_ = (flat + tied_part_.second + size_t(p) - 1) / size_t(p) * size_t(p);
    for (int k = 0; k <= p; ++k) tree_bounds_.push_back(leaf_size_ / size_t(p) * size_t(k));
    const int per = opts.reduction_shards / p;
    frontier_ =
        std::make_unique<FrontierSums>(opts.reduction_shards, dp.rank() * per, per, leaf_size_);
    if (ops.staged) leaf_host_.assign(leaf_size_, 0.0f);
    if (opts.leaves_per_segment) {
      MPITRON_REQUIRE(pp_ != nullptr, "leaves per segment are for a pipeline's model chunks");
      for (const GradSegment& seg : model.segments)
        segment_frontiers_.push_back(std::make_unique<FrontierSums>(
            opts.reduction_shards, dp.rank() * per, per, seg.end - seg.begin));
    }
  }
  grads_ = opts.zero == 2 && !bitwise
               ? GradStorage::windowed(model, alloc)
               : GradStorage::full(model, alloc, leaf_size_ - (bitwise ? flat : 0));
  if (tied_part_.second > 0) model.bind_tied_embedding_gradient(grads_.data.data() + flat);
  if (opts.zero == 0 && !bitwise) {
    shard_ = {0, flat};
  } else {
    MPITRON_REQUIRE(flat % size_t(p) == 0, "flat parameters not padded to a multiple of dp");
    const size_t chunk = flat / size_t(p);
    for (int k = 0; k <= p; ++k) shard_bounds_.push_back(chunk * size_t(k));
    shard_ = opts.zero == 0 ? ShardRange{0, flat}
                            : ShardRange{shard_bounds_[dp.rank()], shard_bounds_[dp.rank() + 1]};
    // gather_params' source where the host holds the parameters; the ring gathers in place, and
    // a device's parameters gather in place (NCCL) or through the host's staging copy.
    const bool host_params = opts.params_alloc != nullptr || !ops.staged;
    if (host_params && p > 1 && opts.method != comm::DpReduce::ring && opts.zero > 0)
      gather_scratch_ =
          Buffer<float>(opts.params_alloc ? *opts.params_alloc : alloc, shard_.size());
  }
  if (opts.zero == 2 && !bitwise) {
    grad_shard_ = Buffer<float>(alloc, shard_.size());
    segment_bounds_.resize(shard_bounds_.size());
  }
  // MPI's reductions over dp pass through the host; at dp 1 too ZeRO 2 sums its shard there, and
  // the tied embedding's sum over the first and last stage passes through it without NCCL.
  if (ops.staged && ((p > 1 && !opts.device_dp) || (opts.zero == 2 && !bitwise) ||
                     (!tied_.empty() && !opts.device_embedding))) {
    staging_.assign(std::max(flat, leaf_size_), 0.0f);
    if (opts.zero == 2 && !bitwise) shard_sums_.assign(shard_.size(), 0.0f);
  }
  if (opts.bucket_mb > 0 && opts.zero == 0 && p > 1 && !bitwise) {
    const double wanted = opts.bucket_mb * 1024 * 1024 / sizeof(float);
    const size_t per = size_t(std::clamp(wanted, 16.0, double(flat)));
    for (size_t end = flat; end > 0;) {
      const size_t begin = end > per ? end - per : 0;
      buckets_.push_back({begin, end});
      end = begin;
    }
    pending_.reserve(buckets_.size());
  }
}

template <class Collective>
void GradSync::staged(float* data, size_t b, size_t e, Collective collective) {
  ops_.download(staging_.data() + b, data, e - b);
  collective(staging_.data() + b);
  ops_.upload(data, staging_.data() + b, e - b);
}

void GradSync::begin_step() {
  ops_.zero(grads_.data.data(), grads_.data.size());
  if (frontier_) frontier_->reset();
  for (auto& f : segment_frontiers_) f->reset();
  announced_.clear();
  if (grad_shard_.size() > 0) ops_.zero(grad_shard_.data(), grad_shard_.size());
  std::fill(shard_sums_.begin(), shard_sums_.end(), 0.0f);
}

GradReadyHook GradSync::hook(bool last_micro_batch) {
  if (frontier_)
    return segment_frontiers_.empty() ? GradReadyHook{} : GradReadyHook{on_segment_ready, this};
  buckets_active_ = !buckets_.empty() && last_micro_batch;
  if (opts_.zero == 2 || buckets_active_) return {on_segment_ready, this};
  return {};
}

void GradSync::on_segment_ready(void* ctx, size_t segment) {
  static_cast<GradSync*>(ctx)->on_segment(segment);
}

void GradSync::on_segment(size_t segment) {
  if (frontier_) return announced_.push_back(segment);  // its leaf waits for end_shard
  CommTimer timer{&comm_s_};
  if (opts_.zero == 2) return reduce_segment_sharded(segment);
  // ZeRO 0 buckets: launch every bucket whose range is now final.
  const size_t ready_begin = model_.segments[segment].begin;
  float* g = grads_.data.data();
  while (next_bucket_ < buckets_.size() && buckets_[next_bucket_].first >= ready_begin) {
    auto [b, e] = buckets_[next_bucket_++];
    if (const DeviceCollectives* d = opts_.device_dp) {  // after backward's kernels so far
      d->allreduce_sum(d->ctx, g + b, e - b);
      continue;
    }
    float* x = g + b;  // the bucket itself, or its host copy (uploaded by finish_backward)
    if (ops_.staged) {
      x = staging_.data() + b;
      ops_.download(x, g + b, e - b);
    }
    if (opts_.method == comm::DpReduce::allreduce)  // the one method with a non-blocking form
      pending_.push_back(dp_.iallreduce_sum(x, e - b));
    else
      comm::allreduce_by(dp_, opts_.method, x, e - b);
  }
}

// The segment's gradients are reduce-scattered over dp, the owned part added to this rank's
// gradient shard, and the segment cleared for the next block or micro-batch.
void GradSync::reduce_segment_sharded(size_t segment) {
  const GradSegment& seg = model_.segments[segment];
  float* data = grads_.segment_data[segment];
  for (size_t k = 0; k < segment_bounds_.size(); ++k)
    segment_bounds_[k] = std::clamp(shard_bounds_[k], seg.begin, seg.end) - seg.begin;
  const size_t b = std::max(seg.begin, shard_.begin), e = std::min(seg.end, shard_.end);
  if (ops_.staged) {
    float* host = staging_.data() + seg.begin;
    ops_.download(host, data, seg.end - seg.begin);
    comm::reduce_scatter_by(dp_, opts_.method, host, segment_bounds_);
    for (size_t i = b; i < e; ++i) shard_sums_[i - shard_.begin] += host[i - seg.begin];
  } else {
    comm::reduce_scatter_by(dp_, opts_.method, data, segment_bounds_);
    float* shard = grad_shard_.data();
    for (size_t i = b; i < e; ++i) shard[i - shard_.begin] += data[i - seg.begin];
  }
  ops_.zero(data, seg.end - seg.begin);
}

void GradSync::end_shard(int shard) {
  MPITRON_REQUIRE(frontier_ != nullptr, "end_shard without --bitwise");
  float* g = grads_.data.data();
  if (!segment_frontiers_.empty()) {  // the segments this backward made final hold the leaf
    for (size_t s : announced_) {
      const GradSegment& seg = model_.segments[s];
      const size_t n = seg.end - seg.begin;
      const float* leaf = g + seg.begin;
      if (ops_.staged) {
        ops_.download(leaf_host_.data() + seg.begin, g + seg.begin, n);
        leaf = leaf_host_.data() + seg.begin;
      }
      segment_frontiers_[s]->push(shard, leaf);
      ops_.zero(g + seg.begin, n);
    }
    announced_.clear();
    return;
  }
  const float* leaf = g;
  if (ops_.staged) {
    ops_.download(leaf_host_.data(), g, leaf_size_);
    leaf = leaf_host_.data();
  }
  frontier_->push(shard, leaf);
  ops_.zero(g, leaf_size_);
}

// The frontier's chunks to the ranks that own them, the tree's top on this rank's chunk, then
// every chunk to every rank.
void GradSync::reduce_in_fixed_order() {
  if (!segment_frontiers_.empty()) {
    std::vector<std::pair<size_t, const FrontierSums*>> parts;
    for (size_t s = 0; s < segment_frontiers_.size(); ++s)
      parts.push_back({model_.segments[s].begin, segment_frontiers_[s].get()});
    frontier_->assemble(parts);
  }
  MPITRON_REQUIRE(frontier_->complete(), "a reduction shard of this rank has no gradient");
  float* g = grads_.data.data();
  const size_t flat = model_.flat_size;
  const int p = dp_.size(), me = dp_.rank(), shards = frontier_->shards();
  float* sum = nullptr;  // leaf_size_ values on the host: the tree's root
  if (p == 1) {          // this rank's frontier is the root
    MPITRON_REQUIRE(frontier_->nodes().size() == 1, "one rank's frontier is not the root");
    sum = frontier_->sum(0);
  } else {
    constexpr int kTag = 7;  // the dp group's only point-to-point messages
    const size_t b = tree_bounds_[size_t(me)], n = tree_bounds_[size_t(me) + 1] - b;
    std::vector<std::pair<TreeNode, float*>> parts;
    std::vector<comm::Request> requests;
    size_t used = 0;
    for (int r = 0; r < p; ++r) {
      if (r == me) continue;
      for (const TreeNode& node : tree_frontier(shards, r * (shards / p), shards / p)) {
        if (received_.size() <= used) received_.emplace_back();
        std::vector<float>& buf = received_[used++];
        buf.resize(n);
        parts.push_back({node, buf.data()});
        requests.push_back(dp_.irecv(buf.data(), n, r, kTag));
      }
    }
    for (int r = 0; r < p; ++r) {
      if (r == me) continue;
      const size_t rb = tree_bounds_[size_t(r)], rn = tree_bounds_[size_t(r) + 1] - rb;
      for (size_t k = 0; k < frontier_->nodes().size(); ++k)
        requests.push_back(dp_.isend(frontier_->sum(k) + rb, rn, r, kTag));
    }
    for (auto& r : requests) r.wait();
    for (size_t k = 0; k < frontier_->nodes().size(); ++k)
      parts.push_back({frontier_->nodes()[k], frontier_->sum(k) + b});
    chunk_sum_.resize(n);
    tree_top_sum(
        shards,
        [&](const TreeNode& node) -> float* {
          for (const auto& [at, data] : parts)
            if (at == node) return data;
          return nullptr;
        },
        chunk_sum_.data(), n);
    sum = ops_.staged ? staging_.data() : g;
    dp_.all_gather(chunk_sum_.data(), sum, n);
  }
  // The tied embedding's two parts, each summed over the shards, added as a pipeline's first and
  // last stage add them.
  if (tied_part_.second > 0) add_in_place(sum + tied_part_.first, sum + flat, tied_part_.second);
  if (sum != g) ops_.upload(g, sum, flat);
  for (const auto& [tb, te] : tied_) {  // a pipeline's: the first and last stage's parts
    const size_t n = te - tb;
    if (ops_.staged)
      staged(g + tb, tb, te, [&](float* host) { embedding_->allreduce_sum(host, n); });
    else
      embedding_->allreduce_sum(g + tb, n);
  }
}

void GradSync::finish_backward() {
  CommTimer timer{&comm_s_};
  if (frontier_) return reduce_in_fixed_order();
  float* g = grads_.data.data();
  // Megatron's embedding group: both copies of the tied embedding get the sum of their gradients.
  for (const auto& [b, e] : tied_) {
    const size_t n = e - b;  // clang 14 (the sanitizer build) captures no structured binding
    if (opts_.device_embedding)
      opts_.device_embedding->allreduce_sum(opts_.device_embedding->ctx, g + b, n);
    else if (ops_.staged)
      staged(g + b, b, e, [&](float* host) { embedding_->allreduce_sum(host, n); });
    else
      embedding_->allreduce_sum(g + b, n);
  }
  if (opts_.zero == 2) {  // the shard's sums, made as backward ran (on the host when staged)
    if (ops_.staged) ops_.upload(grad_shard_.data(), shard_sums_.data(), shard_sums_.size());
    return;
  }
  if (dp_.size() == 1) return;
  const size_t flat = model_.flat_size;
  if (const DeviceCollectives* d = opts_.device_dp) {
    if (opts_.zero == 1)  // in place: this rank's shard is its block of the flat gradients
      d->reduce_scatter_sum(d->ctx, g, g + shard_.begin, shard_.size());
    else if (buckets_.empty())
      d->allreduce_sum(d->ctx, g, flat);
    next_bucket_ = 0;
    d->synchronize(d->ctx);
    return;
  }
  if (opts_.zero == 1) {
    if (!ops_.staged) return comm::reduce_scatter_by(dp_, opts_.method, g, shard_bounds_);
    ops_.download(staging_.data(), g, flat);
    comm::reduce_scatter_by(dp_, opts_.method, staging_.data(), shard_bounds_);
    ops_.upload(g + shard_.begin, staging_.data() + shard_.begin, shard_.size());
    return;
  }
  if (!buckets_.empty()) {
    for (auto& r : pending_) r.wait();
    pending_.clear();
    if (ops_.staged)
      for (size_t k = 0; k < next_bucket_; ++k) {
        auto [b, e] = buckets_[k];
        ops_.upload(g + b, staging_.data() + b, e - b);
      }
    next_bucket_ = 0;
    return;
  }
  if (!ops_.staged) return comm::allreduce_by(dp_, opts_.method, g, flat);
  staged(g, 0, flat, [&](float* host) { comm::allreduce_by(dp_, opts_.method, host, flat); });
}

const float* GradSync::owned_grads() const {
  return opts_.zero == 2 && !frontier_ ? grad_shard_.data() : grads_.data.data() + shard_.begin;
}

namespace {

// Every rank's values, on every rank of the group (padded with -1, which no sum of squares is).
void gather_values(comm::Group& group, std::vector<double>& values) {
  const int64_t most = group.allreduce_max(int64_t(values.size()));
  values.resize(size_t(most), -1.0);
  std::vector<double> all(size_t(most) * size_t(group.size()));
  group.all_gather(values.data(), all.data(), values.size());
  values.clear();
  for (double x : all)
    if (x >= 0) values.push_back(x);
}

}  // namespace

// Every rank holds its stage's whole summed gradient. Its values: the sum of squares of each row
// (a row-parallel weight's rows cut into its TP shards' segments), a vector's squares one by one:
// the same values at any tp and stage split. TP-replicated tensors count on TP rank 0, the tied
// embedding on the first stage. Every rank's values gathered, sorted and added smallest first.
double GradSync::grad_norm_in_fixed_order() {
  const bool tp_split = tp_ && tp_->size() > 1;
  const int tp_size = tp_ ? tp_->size() : 1;
  const float* g = grads_.data.data();
  if (ops_.staged) {
    ops_.download(leaf_host_.data(), g, model_.flat_size);
    g = leaf_host_.data();
  }
  std::vector<double> sq;
  for (const ParamInfo& p : model_.registry.params()) {
    if (pp_ && p.shard.stage == StageOwner::first_and_last && pp_->rank() != 0) continue;
    if (tp_split && p.shard.tp_dim < 0 && tp_->rank() != 0) continue;
    const float* x = g + p.offset;
    if (p.local_shape.size() <= 1) {
      for (size_t i = 0; i < p.numel; ++i) sq.push_back(double(x[i]) * double(x[i]));
      continue;
    }
    const size_t rows = size_t(p.local_shape[0]), cols = p.numel / rows;
    const size_t per_rank = opts_.tp_shards > 0 ? size_t(opts_.tp_shards / tp_size) : 1;
    const size_t segments = p.shard.tp_dim == 1 && cols % per_rank == 0 ? per_rank : 1;
    const size_t at = sq.size(), n = rows * segments, w = cols / segments;
    sq.resize(at + n);
#pragma omp parallel for schedule(static)
    for (size_t r = 0; r < n; ++r) {  // row r / segments, its segment r % segments
      double s = 0;
      for (size_t c = 0; c < w; ++c) s += double(x[r * w + c]) * double(x[r * w + c]);
      sq[at + r] = s;
    }
  }
  if (tp_split) gather_values(*tp_, sq);
  if (pp_) gather_values(*pp_, sq);
  std::sort(sq.begin(), sq.end());
  double total = 0;
  for (double x : sq) total += x;
  return std::sqrt(total);
}

double GradSync::grad_norm() {
  if (frontier_) return grad_norm_in_fixed_order();
  const bool tp_split = tp_ && tp_->size() > 1;
  double sq = 0;
  if (!tp_split && !pp_) {
    sq = ops_.sum_of_squares(owned_grads(), shard_.size());
  } else {
    double sharded = 0, replicated = 0;
    const float* g = owned_grads();
    for (const ParamInfo& p : model_.registry.params()) {
      if (pp_ && p.shard.stage == StageOwner::first_and_last && pp_->rank() != 0) continue;
      const size_t b = std::max(shard_.begin, p.offset),
                   e = std::min(shard_.end, p.offset + p.numel);
      if (b >= e) continue;
      const double part = ops_.sum_of_squares(g + (b - shard_.begin), e - b);
      (p.shard.tp_dim >= 0 ? sharded : replicated) += part;
    }
    sq = sharded + (!tp_split || tp_->rank() == 0 ? replicated : 0.0);
  }
  if (opts_.zero > 0) sq = dp_.allreduce_sum(sq);
  if (tp_split) sq = tp_->allreduce_sum(sq);
  if (pp_) sq = pp_->allreduce_sum(sq);
  return std::sqrt(sq);
}

void GradSync::gather_params(float* params) {
  CommTimer timer{&comm_s_};
  if (opts_.zero == 0 || dp_.size() == 1) return;  // at dp 1 the shard is every parameter
  const bool host_params = opts_.params_alloc != nullptr || !ops_.staged;
  const DeviceCollectives* d = opts_.device_dp;
  if (d && !host_params) {  // in place, as the reduce-scatter
    d->all_gather(d->ctx, params + shard_.begin, params, shard_.size());
    d->synchronize(d->ctx);
    return;
  }
  if (!host_params) {  // this rank's shard up to the host, everyone's back down
    float* host = staging_.data();
    ops_.download(host + shard_.begin, params + shard_.begin, shard_.size());
    if (opts_.method == comm::DpReduce::ring) {
      dp_.ring_all_gather(host, model_.flat_size);
    } else {
      std::vector<float> mine(host + shard_.begin, host + shard_.end);
      dp_.all_gather(mine.data(), host, shard_.size());
    }
    ops_.upload(params, host, model_.flat_size);
    return;
  }
  if (opts_.method == comm::DpReduce::ring) return dp_.ring_all_gather(params, model_.flat_size);
  std::copy_n(params + shard_.begin, shard_.size(), gather_scratch_.data());
  dp_.all_gather(gather_scratch_.data(), params, shard_.size());
}

}  // namespace mpitron
