#include "src/train/reduction_tree.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <numeric>

#include "base/check.hpp"

namespace mpitron {

namespace {

void collect_frontier(const TreeNode& node, int lo, int hi, std::vector<TreeNode>& out) {
  if (node.hi <= lo || node.lo >= hi) return;
  if (node.lo >= lo && node.hi <= hi) {
    out.push_back(node);
    return;
  }
  collect_frontier({node.lo, node.mid()}, lo, hi, out);
  collect_frontier({node.mid(), node.hi}, lo, hi, out);
}

double tree_sum_of(const TreeNode& node, const std::function<double(int)>& leaf) {
  if (node.leaf()) return leaf(node.lo);
  return tree_sum_of({node.lo, node.mid()}, leaf) + tree_sum_of({node.mid(), node.hi}, leaf);
}

// The sum of `node` on the chunk, in a buffer of parts' (the node's own, or its left child's).
float* top_sum_of(const TreeNode& node, const std::function<float*(const TreeNode&)>& part,
                  size_t n) {
  if (float* p = part(node)) return p;
  MPITRON_REQUIRE(!node.leaf(), fmt::format("reduction shard {} has no partial sum", node.lo));
  float* left = top_sum_of({node.lo, node.mid()}, part, n);
  const float* right = top_sum_of({node.mid(), node.hi}, part, n);
  add_in_place(left, right, n);
  return left;
}

std::vector<int> divisors(int64_t v) {
  std::vector<int> d;
  for (int64_t k = 1; k <= v; ++k)
    if (v % k == 0) d.push_back(int(k));
  return d;
}

}  // namespace

std::vector<TreeNode> tree_frontier(int shards, int first, int count) {
  std::vector<TreeNode> out;
  collect_frontier({0, shards}, first, first + count, out);
  return out;
}

int default_reduction_shards(int64_t rows) {
  return int(std::gcd(rows, int64_t(24)));
}

std::string check_reduction_shards(int64_t rows, int shards, int dp, int micro_batches) {
  if (shards < 1 || rows % shards != 0)
    return fmt::format(
        "--bitwise: {} reduction shards do not split the batch of {} rows into equal shards: "
        "choose --reduction-shards among {} (the divisors of the batch)",
        shards, rows, fmt::join(divisors(rows), ", "));
  if (shards % dp != 0) {
    std::vector<int> ok = divisors(shards);
    std::stable_sort(ok.begin(), ok.end(),
                     [dp](int a, int b) { return std::abs(a - dp) < std::abs(b - dp); });
    ok.resize(std::min<size_t>(ok.size(), 2));
    return fmt::format(
        "--bitwise: dp {} does not divide the {} reduction shards of the batch (each DP rank sums "
        "whole shards): use --dp {} (the nearest that do), or --reduction-shards a multiple of {} "
        "that divides the batch of {}",
        dp, shards, fmt::join(ok, " or "), dp, rows);
  }
  if (micro_batches > 1 && shards % (int64_t(dp) * micro_batches) != 0) {
    std::vector<int> ok;  // micro-batch counts of whole shards, the nearest first
    for (int m : divisors(shards / dp))
      if (m > 1) ok.push_back(m);
    std::stable_sort(ok.begin(), ok.end(), [micro_batches](int a, int b) {
      return std::abs(a - micro_batches) < std::abs(b - micro_batches);
    });
    ok.resize(std::min<size_t>(ok.size(), 2));
    return fmt::format(
        "--bitwise: a micro-batch must hold whole reduction shards, so dp x micro-batches must "
        "divide the {} shards (got dp {} x {} = {}): use --micro-batches {}",
        shards, dp, micro_batches, int64_t(dp) * micro_batches,
        ok.empty() ? std::string("1") : fmt::format("{}", fmt::join(ok, " or ")));
  }
  return "";
}

double tree_sum(int shards, const std::function<double(int)>& leaf) {
  return tree_sum_of({0, shards}, leaf);
}

FrontierSums::FrontierSums(int shards, int first, int count, size_t n)
    : shards_(shards), first_(first), count_(count), next_(first), n_(n) {
  MPITRON_REQUIRE(shards >= 1 && first >= 0 && count >= 1 && first + count <= shards,
                  "reduction shards out of range");
}

void FrontierSums::reset() {
  next_ = first_;
  nodes_.clear();
  for (auto& b : buffers_) spare_.push_back(std::move(b));
  buffers_.clear();
}

bool FrontierSums::mergeable(const TreeNode& left, const TreeNode& right) const {
  const TreeNode parent{left.lo, right.hi};
  if (left.hi != right.lo || parent.lo < first_ || parent.hi > first_ + count_) return false;
  TreeNode at{0, shards_};  // walk down from the root: is `parent` a node of the tree?
  while (at.hi - at.lo > parent.hi - parent.lo)
    at = parent.lo < at.mid() ? TreeNode{at.lo, at.mid()} : TreeNode{at.mid(), at.hi};
  return at == parent && parent.mid() == left.hi;
}

void FrontierSums::push(int leaf, const float* values) {
  MPITRON_REQUIRE(leaf == next_,
                  fmt::format("reduction shard {} pushed where {} was due", leaf, next_));
  ++next_;
  const TreeNode node{leaf, leaf + 1};
  if (!nodes_.empty() && mergeable(nodes_.back(), node)) {
    add_in_place(buffers_.back().data(), values, n_);  // left + right
    nodes_.back() = {nodes_.back().lo, node.hi};
    while (nodes_.size() >= 2 && mergeable(nodes_[nodes_.size() - 2], nodes_.back())) {
      const size_t k = nodes_.size() - 2;
      add_in_place(buffers_[k].data(), buffers_[k + 1].data(), n_);
      nodes_[k] = {nodes_[k].lo, nodes_[k + 1].hi};
      nodes_.pop_back();
      spare_.push_back(std::move(buffers_.back()));
      buffers_.pop_back();
    }
    return;
  }
  std::vector<float> own;
  if (!spare_.empty()) {
    own = std::move(spare_.back());
    spare_.pop_back();
  }
  own.resize(n_);
  float* to = own.data();
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n_; ++i) to[i] = values[i];
  nodes_.push_back(node);
  buffers_.push_back(std::move(own));
}

void FrontierSums::assemble(const std::vector<std::pair<size_t, const FrontierSums*>>& parts) {
  MPITRON_REQUIRE(!parts.empty(), "no parts to assemble a frontier from");
  reset();
  nodes_ = parts.front().second->nodes_;
  for (size_t k = 0; k < nodes_.size(); ++k) {
    std::vector<float> own;
    if (!spare_.empty()) {
      own = std::move(spare_.back());
      spare_.pop_back();
    }
    own.assign(n_, 0.0f);
    for (const auto& [offset, part] : parts) {
      MPITRON_REQUIRE(part->complete() && part->nodes_ == nodes_ && offset + part->n_ <= n_,
                      "a part's frontier does not match the whole's");
      std::copy_n(part->sum(k), part->n_, own.data() + offset);
    }
    buffers_.push_back(std::move(own));
  }
  next_ = first_ + count_;
}

int frontier_peak_buffers(int shards, int first, int count) {
  FrontierSums f(shards, first, count, 0);
  int peak = 0;
  for (int s = first; s < first + count; ++s) {
    f.push(s, nullptr);
    peak = std::max(peak, int(f.nodes().size()));
  }
  return peak;
}

void tree_top_sum(int shards, const std::function<float*(const TreeNode&)>& part, float* out,
                  size_t n) {
  const float* root = top_sum_of({0, shards}, part, n);
  if (root != out) std::copy_n(root, n, out);
}

void add_in_place(float* a, const float* b, size_t n) {
#pragma omp parallel for schedule(static)
  for (size_t i = 0; i < n; ++i) a[i] += b[i];
}

}  // namespace mpitron
