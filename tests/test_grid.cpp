// Unit tests of comm::Grid's pure rank arithmetic (no MPI): coordinates, the three axes' groups,
// layout error messages, and ring_chunk_range (the ring collectives' chunks and ZeRO shards).
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <stdexcept>

#include "comm/grid.hpp"

namespace mpitron::comm {
namespace {

// Every (dp, tp, pp) with dp*tp*pp = world, for world = 1..16.
std::vector<GridShape> all_shapes() {
  std::vector<GridShape> out;
  for (int w = 1; w <= 16; ++w)
    for (int dp = 1; dp <= w; ++dp)
      for (int tp = 1; tp <= w; ++tp)
        if (w % (dp * tp) == 0) out.push_back({w, dp, tp, w / (dp * tp)});
  return out;
}

std::string name(const GridShape& s) {
  return "world=" + std::to_string(s.world) + " dp=" + std::to_string(s.dp) +
         " tp=" + std::to_string(s.tp) + " pp=" + std::to_string(s.pp);
}

TEST(Grid, AllShapesAreValid) {
  const auto shapes = all_shapes();
  EXPECT_EQ(shapes.size(), 110u);  // sum over w = 1..16 of the ordered 3-factorisations of w
  for (const auto& s : shapes) EXPECT_EQ(check_grid_shape(s), "") << name(s);
}

TEST(Grid, CoordsAndRankAreInverse) {
  for (const auto& s : all_shapes()) {
    std::set<std::tuple<int, int, int>> seen;
    for (int r = 0; r < s.world; ++r) {
      const GridCoords c = grid_coords(s, r);
      EXPECT_GE(c.dp_rank, 0);
      EXPECT_LT(c.dp_rank, s.dp);
      EXPECT_GE(c.tp_rank, 0);
      EXPECT_LT(c.tp_rank, s.tp);
      EXPECT_GE(c.pp_rank, 0);
      EXPECT_LT(c.pp_rank, s.pp);
      EXPECT_EQ(grid_rank(s, c), r) << name(s);
      EXPECT_EQ(r, (c.pp_rank * s.dp + c.dp_rank) * s.tp + c.tp_rank) << name(s);
      seen.insert({c.dp_rank, c.tp_rank, c.pp_rank});
    }
    EXPECT_EQ(static_cast<int>(seen.size()), s.world) << name(s);
  }
}

// Each axis's groups partition the world; members differ only in that axis's coordinate, appear in
// increasing axis coordinate (= group rank), and every member computes the same group.
enum class Axis { dp, tp, pp };

std::vector<int> group_of(Axis a, const GridShape& s, int r) {
  switch (a) {
    case Axis::dp:
      return dp_group_ranks(s, r);
    case Axis::tp:
      return tp_group_ranks(s, r);
    case Axis::pp:
      return pp_group_ranks(s, r);
  }
  return {};
}

void check_axis(Axis a, const GridShape& s) {
  const int axis_size = a == Axis::dp ? s.dp : a == Axis::tp ? s.tp : s.pp;
  auto axis_coord = [&](const GridCoords& c) {
    return a == Axis::dp ? c.dp_rank : a == Axis::tp ? c.tp_rank : c.pp_rank;
  };
  std::vector<int> covered(s.world, 0);
  for (int r = 0; r < s.world; ++r) {
    const auto g = group_of(a, s, r);
    ASSERT_EQ(static_cast<int>(g.size()), axis_size) << name(s);
    const GridCoords mine = grid_coords(s, r);
    for (int i = 0; i < axis_size; ++i) {
      const GridCoords c = grid_coords(s, g[i]);
      EXPECT_EQ(axis_coord(c), i) << name(s);
      if (a != Axis::dp) {
        EXPECT_EQ(c.dp_rank, mine.dp_rank) << name(s);
      }
      if (a != Axis::tp) {
        EXPECT_EQ(c.tp_rank, mine.tp_rank) << name(s);
      }
      if (a != Axis::pp) {
        EXPECT_EQ(c.pp_rank, mine.pp_rank) << name(s);
      }
      EXPECT_EQ(group_of(a, s, g[i]), g) << name(s);
    }
    EXPECT_EQ(g[axis_coord(mine)], r);
    // Count each group once, from its first member: together they must cover every rank once.
    if (g.front() == r)
      for (int m : g) ++covered[m];
  }
  for (int r = 0; r < s.world; ++r) EXPECT_EQ(covered[r], 1) << name(s) << " rank " << r;
}

TEST(Grid, DpGroupsPartitionTheWorld) {
  for (const auto& s : all_shapes()) check_axis(Axis::dp, s);
}
TEST(Grid, TpGroupsPartitionTheWorld) {
  for (const auto& s : all_shapes()) check_axis(Axis::tp, s);
}
TEST(Grid, PpGroupsPartitionTheWorld) {
  for (const auto& s : all_shapes()) check_axis(Axis::pp, s);
}

TEST(Grid, TpGroupsAreContiguousRankRanges) {
  for (const auto& s : all_shapes())
    for (int r = 0; r < s.world; ++r) {
      const auto g = tp_group_ranks(s, r);
      for (int i = 0; i < s.tp; ++i) EXPECT_EQ(g[i], r / s.tp * s.tp + i) << name(s);
    }
}

// The 16-rank dp=2 tp=2 pp=4 layout, written out by hand.
TEST(Grid, SixteenRanksDp2Tp2Pp4) {
  const GridShape s{16, 2, 2, 4};
  EXPECT_EQ(tp_group_ranks(s, 0), (std::vector<int>{0, 1}));
  EXPECT_EQ(tp_group_ranks(s, 7), (std::vector<int>{6, 7}));
  EXPECT_EQ(dp_group_ranks(s, 0), (std::vector<int>{0, 2}));
  EXPECT_EQ(dp_group_ranks(s, 5), (std::vector<int>{5, 7}));
  EXPECT_EQ(dp_group_ranks(s, 13), (std::vector<int>{13, 15}));
  EXPECT_EQ(pp_group_ranks(s, 0), (std::vector<int>{0, 4, 8, 12}));
  EXPECT_EQ(pp_group_ranks(s, 11), (std::vector<int>{3, 7, 11, 15}));
  EXPECT_EQ(embedding_group_ranks(s, 12), (std::vector<int>{0, 12}));
  EXPECT_EQ(embedding_group_ranks(s, 3), (std::vector<int>{3, 15}));
  EXPECT_TRUE(embedding_group_ranks(s, 7).empty());                      // a middle stage
  EXPECT_TRUE(embedding_group_ranks(GridShape{4, 2, 2, 1}, 1).empty());  // pp 1: one stage
  const GridCoords c = grid_coords(s, 11);                               // 11 = (2*2 + 1)*2 + 1
  EXPECT_EQ(c.pp_rank, 2);
  EXPECT_EQ(c.dp_rank, 1);
  EXPECT_EQ(c.tp_rank, 1);
  EXPECT_EQ(grid_rank(s, {0, 1, 3}), 13);
}

TEST(Grid, BadShapesGetClearMessages) {
  EXPECT_EQ(check_grid_shape({4, 2, 1, 1}),
            "layout dp=2 tp=1 pp=1 needs 2 ranks but the job has 4: make dp*tp*pp equal the number "
            "of ranks (mpirun -n / srun -n)");
  EXPECT_EQ(check_grid_shape({4, 3, 1, 1}),
            "layout dp=3 tp=1 pp=1 needs 3 ranks but the job has 4: make dp*tp*pp equal the number "
            "of ranks (mpirun -n / srun -n)");
  EXPECT_EQ(
      check_grid_shape({8, 2, 2, 4}),
      "layout dp=2 tp=2 pp=4 needs 16 ranks but the job has 8: make dp*tp*pp equal the number "
      "of ranks (mpirun -n / srun -n)");
  for (GridShape s : {GridShape{4, 0, 4, 1}, GridShape{4, 4, 0, 1}, GridShape{4, 4, 1, 0},
                      GridShape{4, -1, -4, 1}}) {
    const std::string m = check_grid_shape(s);
    EXPECT_NE(m.find("must each be at least 1"), std::string::npos) << m;
    EXPECT_NE(m.find("dp=" + std::to_string(s.dp)), std::string::npos) << m;
  }
  EXPECT_NE(check_grid_shape({0, 1, 1, 1}), "");
  // A product that overflows int must not wrap around to the world size: 65537^2 = 131073 mod 2^32.
  EXPECT_NE(check_grid_shape({131073, 65537, 65537, 1}), "");
}

TEST(Grid, PureFunctionsRefuseBadInput) {
  const GridShape s{4, 2, 2, 1};
  EXPECT_THROW(grid_coords(s, 4), std::out_of_range);
  EXPECT_THROW(grid_coords(s, -1), std::out_of_range);
  EXPECT_THROW(grid_rank(s, {2, 0, 0}), std::out_of_range);
  EXPECT_THROW(dp_group_ranks(s, 5), std::out_of_range);
  EXPECT_THROW(grid_coords({4, 3, 1, 1}, 0), std::invalid_argument);
  EXPECT_THROW(tp_group_ranks({4, 0, 1, 1}, 0), std::invalid_argument);
}

TEST(RingChunkRange, CoversExactlyWithoutOverlap) {
  for (size_t n : {0, 1, 2, 3, 5, 7, 8, 15, 16, 17, 100, 1023, 4099})
    for (int p = 1; p <= 17; ++p) {
      size_t next = 0;
      for (int r = 0; r < p; ++r) {
        const auto [b, e] = ring_chunk_range(n, p, r);
        EXPECT_EQ(b, next) << "n=" << n << " p=" << p << " r=" << r;
        EXPECT_LE(b, e);
        // The first n % p chunks hold one element more than the rest.
        EXPECT_EQ(e - b, n / p + (static_cast<size_t>(r) < n % p ? 1 : 0));
        next = e;
      }
      EXPECT_EQ(next, n) << "n=" << n << " p=" << p;
    }
}

TEST(RingChunkRange, ByteFiguresOfTheConvention) {
  // Over all ranks an all-reduce moves exactly 2(p-1)·n elements; each rank 2(p-1)/p·n when p | n.
  for (size_t n : {0, 1, 5, 12, 1001})
    for (int p = 1; p <= 9; ++p) {
      uint64_t total = 0;
      for (int r = 0; r < p; ++r) {
        const uint64_t b = allreduce_bytes_sent(n, 4, p, r);
        if (n % p == 0) {
          EXPECT_EQ(b, 2 * (p - 1) * (n / p) * 4);
        }
        total += b;
      }
      EXPECT_EQ(total, 2 * static_cast<uint64_t>(p - 1) * n * 4) << "n=" << n << " p=" << p;
      uint64_t bcast = 0;
      for (int r = 0; r < p; ++r) bcast += broadcast_bytes_sent(n, p, r, p / 2);
      EXPECT_EQ(bcast, static_cast<uint64_t>(p - 1) * n);
      EXPECT_EQ(broadcast_bytes_sent(n, p, (p / 2 + p - 1) % p, p / 2), 0u);
    }
}

// Placement: the log's host map, and TP groups that leave a node.
TEST(Grid, RanksByHostNamesRuns) {
  EXPECT_EQ(ranks_by_host({"a", "a", "a", "a", "b", "b", "b", "b"}), "a: ranks 0-3; b: ranks 4-7");
  EXPECT_EQ(ranks_by_host({"a", "b", "a", "b", "c"}), "a: ranks 0,2; b: ranks 1,3; c: rank 4");
}

TEST(Grid, TpGroupsAcrossHosts) {
  const GridShape s{8, 2, 2, 2};  // dp 2 x tp 2 x pp 2
  // Four ranks a node, block placement: every TP group (ranks 2k, 2k+1) inside a node.
  EXPECT_TRUE(tp_groups_across_hosts(s, {"a", "a", "a", "a", "b", "b", "b", "b"}).empty());
  // Three ranks on a, three on b, two on c: only the group of ranks 2,3 straddles two hosts.
  const auto spread = tp_groups_across_hosts(s, {"a", "a", "a", "b", "b", "b", "c", "c"});
  ASSERT_EQ(spread.size(), 1u);
  EXPECT_EQ(spread[0], "the TP group of dp rank 1 and pp stage 0 (ranks 2,3) spans hosts a, b");
  // Cyclic placement: every group spans two hosts.
  EXPECT_EQ(tp_groups_across_hosts(s, {"a", "b", "a", "b", "a", "b", "a", "b"}).size(), 4u);
  EXPECT_THROW(tp_groups_across_hosts(s, {"a", "b"}), std::invalid_argument);
}

}  // namespace
}  // namespace mpitron::comm
