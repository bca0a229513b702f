// The fixed reduction tree of --bitwise training: a step's global batch is cut into S reduction
// shards of equal rows, each shard's gradient (its loss, its batch-norm sums) is computed alone,
// and the S values are summed in one pairwise tree over the shards in batch order, whatever the
// layout: node [lo, hi) is left [lo, mid) + right [mid, hi), mid = lo + (hi - lo) / 2. A DP rank
// owning the consecutive shards [first, first + count) sums the tree's maximal nodes inside its
// range itself (its frontier) and sends those partial sums on; the nodes above the frontiers are
// summed where they meet. Every node is the same left + right of the same operands at any dp, and
// fp32 addition is commutative, so the sum has the same bits at dp 1, 2, 3, 4, 6 and 8.
#pragma once
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace mpitron {

struct TreeNode {
  int lo = 0, hi = 0;  // leaves [lo, hi)
  int mid() const { return lo + (hi - lo) / 2; }
  bool leaf() const { return hi - lo == 1; }
  bool operator==(const TreeNode&) const = default;
};

// The tree's maximal nodes inside [first, first + count), in leaf order.
std::vector<TreeNode> tree_frontier(int shards, int first, int count);

// The default shard count of a global batch of `rows`: gcd(rows, 24), which dp 1, 2, 3, 4, 6 and 8
// divide when the batch is a multiple of 24.
int default_reduction_shards(int64_t rows);

// "" when the layout can train with `shards` reduction shards, else the reason and the nearest
// layouts that work: shards must divide the batch, dp the shards, and dp x micro-batches (when
// micro_batches > 1) divide them. (The trainer then runs each micro-batch as its shards.)
std::string check_reduction_shards(int64_t rows, int shards, int dp, int micro_batches);

// The tree's sum of S scalars (losses, batch-norm sums), leaf(i) the value of shard i.
double tree_sum(int shards, const std::function<double(int)>& leaf);

// The frontier sums of one rank: leaves pushed in order, each merged with its left sibling while
// their parent lies inside the rank's range (a carry stack of at most log2(S) + 2 buffers).
class FrontierSums {
 public:
  FrontierSums(int shards, int first, int count, size_t n);
  // Starts a step: no leaf pushed.
  void reset();
  // Adds shard `leaf`'s values (n floats); leaves must come in order first, first + 1, ...
  void push(int leaf, const float* values);
  // After the last push: the frontier's nodes and their sums, in leaf order.
  const std::vector<TreeNode>& nodes() const { return nodes_; }
  const float* sum(size_t k) const { return buffers_[k].data(); }
  float* sum(size_t k) { return buffers_[k].data(); }
  int shards() const { return shards_; }
  int first() const { return first_; }
  int count() const { return count_; }
  bool complete() const { return next_ == first_ + count_; }
  // The frontier of the whole from the complete frontiers of its parts (each the sums of n values
  // at an offset, every part over the same shards; values in no part are zeros).
  void assemble(const std::vector<std::pair<size_t, const FrontierSums*>>& parts);
  size_t size() const { return n_; }

 private:
  // left and right are siblings whose parent lies in the rank's range.
  bool mergeable(const TreeNode& left, const TreeNode& right) const;

  int shards_, first_, count_, next_;
  size_t n_;
  std::vector<TreeNode> nodes_;
  std::vector<std::vector<float>> buffers_;  // one per node of nodes_ (kept allocated: spare_)
  std::vector<std::vector<float>> spare_;
};

// The most buffers a FrontierSums over [first, first + count) holds at once.
int frontier_peak_buffers(int shards, int first, int count);

// The tree's nodes above the frontiers, on one chunk of n values: parts holds a sum for each node
// of every rank's frontier (they cover [0, S) exactly); part(node) returns it. Writes the root's
// sum to out. Adds in place into the parts' buffers (each is read once).
void tree_top_sum(int shards, const std::function<float*(const TreeNode&)>& part, float* out,
                  size_t n);

// a[i] += b[i] for i < n (fp32, no fused operations: the same bits on any thread count).
void add_in_place(float* a, const float* b, size_t n);

}  // namespace mpitron
