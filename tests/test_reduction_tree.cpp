// The fixed reduction tree (--bitwise): every dp's frontier sums, met above the frontiers, give the
// bits of one process's tree; the tree is not a sequential sum (the test would pass for any order
// otherwise); the shard checks refuse what cannot split.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <random>

#include "src/train/reduction_tree.hpp"

namespace mpitron {
namespace {

// S leaves of n values spread over many magnitudes, so that the order of additions shows.
std::vector<std::vector<float>> random_leaves(int shards, size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal;
  std::uniform_int_distribution<int> exponent(-12, 12);
  std::vector<std::vector<float>> leaves(size_t(shards), std::vector<float>(n, 0.0f));
  for (auto& l : leaves)
    for (float& x : l) x = std::ldexp(normal(rng), exponent(rng));
  return leaves;
}

// The sum as dp ranks reach it: each its frontier, then the top on every chunk of n / dp values.
std::vector<float> sum_over_ranks(const std::vector<std::vector<float>>& leaves, int dp) {
  const int shards = int(leaves.size());
  const size_t n = leaves[0].size();
  std::vector<FrontierSums> ranks;
  for (int r = 0; r < dp; ++r) {
    const int count = shards / dp;
    ranks.emplace_back(shards, r * count, count, n);
    for (int s = r * count; s < (r + 1) * count; ++s)
      ranks.back().push(s, leaves[size_t(s)].data());
    EXPECT_TRUE(ranks.back().complete());
  }
  std::vector<float> out(n);
  const size_t chunk = (n + size_t(dp) - 1) / size_t(dp);
  for (size_t b = 0; b < n; b += chunk) {
    const size_t e = std::min(n, b + chunk);
    std::map<std::pair<int, int>, std::vector<float>> parts;  // copies: tree_top_sum adds in place
    for (const FrontierSums& f : ranks)
      for (size_t k = 0; k < f.nodes().size(); ++k)
        parts[{f.nodes()[k].lo, f.nodes()[k].hi}].assign(f.sum(k) + b, f.sum(k) + e);
    tree_top_sum(
        shards,
        [&](const TreeNode& node) -> float* {
          auto it = parts.find({node.lo, node.hi});
          return it == parts.end() ? nullptr : it->second.data();
        },
        out.data() + b, e - b);
  }
  return out;
}

TEST(ReductionTree, FrontiersCoverTheRanksRange) {
  for (int dp : {1, 2, 3, 4, 6, 8}) {
    for (int r = 0; r < dp; ++r) {
      const int count = 24 / dp;
      const std::vector<TreeNode> f = tree_frontier(24, r * count, count);
      int at = r * count;
      for (const TreeNode& node : f) {
        EXPECT_EQ(node.lo, at);
        at = node.hi;
      }
      EXPECT_EQ(at, (r + 1) * count) << "dp " << dp << " rank " << r;
    }
  }
  EXPECT_EQ(tree_frontier(24, 0, 24), (std::vector<TreeNode>{{0, 24}}));
  // dp 3 on 24 shards: rank 0 holds [0, 6) and leaves 6 and 7 ([6, 12) is [6, 9) + [9, 12), and
  // [6, 9) is [6, 7) + [7, 9)).
  EXPECT_EQ(tree_frontier(24, 0, 8), (std::vector<TreeNode>{{0, 6}, {6, 7}, {7, 8}}));
}

TEST(ReductionTree, EveryDpGivesTheBitsOfOneProcess) {
  const auto leaves = random_leaves(24, 1000, 7);
  const std::vector<float> one = sum_over_ranks(leaves, 1);
  for (int dp : {2, 3, 4, 6, 8, 12, 24}) {
    const std::vector<float> many = sum_over_ranks(leaves, dp);
    EXPECT_EQ(std::memcmp(one.data(), many.data(), one.size() * sizeof(float)), 0) << "dp " << dp;
  }
  // The tree's own scalar form agrees with it, value by value.
  for (size_t i = 0; i < 10; ++i) {
    const double t = tree_sum(24, [&](int s) { return double(leaves[size_t(s)][i]); });
    EXPECT_EQ(float(t), float(t));  // finite
  }
}

TEST(ReductionTree, TheTreeIsNotTheSequentialSum) {
  // Were it the sequential sum (what one process accumulating micro-batches computes), the test
  // above could not tell a layout-dependent order from a fixed one on its data.
  const auto leaves = random_leaves(24, 1000, 11);
  const std::vector<float> tree = sum_over_ranks(leaves, 1);
  size_t differ = 0;
  for (size_t i = 0; i < tree.size(); ++i) {
    float seq = 0;
    for (const auto& l : leaves) seq += l[i];
    differ += seq != tree[i];
  }
  EXPECT_GT(differ, 10u);
}

TEST(ReductionTree, ScalarTreeMatchesTheVectorTree) {
  const auto leaves = random_leaves(12, 50, 3);
  const std::vector<float> v = sum_over_ranks(leaves, 3);
  for (size_t i = 0; i < v.size(); ++i) {
    // In float: the scalar tree of the same leaves, added in float, has the vector's bits.
    std::function<float(TreeNode)> f = [&](TreeNode n) -> float {
      if (n.leaf()) return leaves[size_t(n.lo)][i];
      return f({n.lo, n.mid()}) + f({n.mid(), n.hi});
    };
    EXPECT_EQ(f({0, 12}), v[i]);
  }
}

TEST(ReductionTree, LeavesOutOfOrderAreRefused) {
  FrontierSums f(4, 0, 4, 3);
  const float x[3] = {1, 2, 3};
  f.push(0, x);
  EXPECT_DEATH(f.push(2, x), "reduction shard 2 pushed where 1 was due");
}

TEST(ReductionTree, ShardChecks) {
  EXPECT_EQ(default_reduction_shards(24), 24);
  EXPECT_EQ(default_reduction_shards(64), 8);
  EXPECT_EQ(default_reduction_shards(4), 4);
  EXPECT_EQ(check_reduction_shards(24, 24, 3, 1), "");
  EXPECT_EQ(check_reduction_shards(24, 24, 3, 8), "");
  EXPECT_NE(check_reduction_shards(24, 24, 5, 1).find("use --dp 4 or 6"), std::string::npos)
      << check_reduction_shards(24, 24, 5, 1);
  EXPECT_EQ(check_reduction_shards(24, 24, 2, 4), "");
  EXPECT_NE(check_reduction_shards(24, 24, 2, 5).find("use --micro-batches 4 or 6"),
            std::string::npos)
      << check_reduction_shards(24, 24, 2, 5);
  EXPECT_NE(check_reduction_shards(64, 24, 1, 1).find("divisors of the batch"), std::string::npos);
}

}  // namespace
}  // namespace mpitron
