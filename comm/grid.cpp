// comm::Grid: rank arithmetic of the DP x TP x PP layout, rank = (pp_rank * dp + dp_rank) * tp +
// tp_rank, and the one-time MPI_Comm_split of the world into the three axes' communicators.
#include "comm/grid.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <stdexcept>

#include "base/check.hpp"
#include "comm/mpi_check.hpp"

namespace mpitron::comm {

namespace {

std::string layout_text(const GridShape& s) {
  return "layout dp=" + std::to_string(s.dp) + " tp=" + std::to_string(s.tp) +
         " pp=" + std::to_string(s.pp);
}

// The pure functions take shapes from callers that may not have checked them: refuse loudly.
void require_valid(const GridShape& s) {
  const std::string why = check_grid_shape(s);
  if (!why.empty()) throw std::invalid_argument(why);
}

void require_rank(const GridShape& s, int rank) {
  if (rank < 0 || rank >= s.world)
    throw std::out_of_range("rank " + std::to_string(rank) + " outside a world of " +
                            std::to_string(s.world));
}

// World ranks of the group through `rank` along the axis whose coordinate `vary` sets, in order.
template <class Vary>
std::vector<int> group_ranks(const GridShape& s, int rank, int axis_size, Vary vary) {
  require_valid(s);
  require_rank(s, rank);
  std::vector<int> out;
  out.reserve(axis_size);
  for (int i = 0; i < axis_size; ++i) {
    GridCoords c = grid_coords(s, rank);
    vary(c, i);
    out.push_back(grid_rank(s, c));
  }
  return out;
}

}  // namespace

std::string check_grid_shape(const GridShape& s) {
  if (s.dp < 1 || s.tp < 1 || s.pp < 1)
    return layout_text(s) + " is impossible: dp, tp and pp must each be at least 1";
  if (s.world < 1) return "the job has " + std::to_string(s.world) + " ranks: it needs at least 1";
  const long long need = static_cast<long long>(s.dp) * s.tp * s.pp;
  if (need != s.world)
    return layout_text(s) + " needs " + std::to_string(need) + " ranks but the job has " +
           std::to_string(s.world) +
           ": make dp*tp*pp equal the number of ranks (mpirun -n / srun -n)";
  return "";
}

GridCoords grid_coords(const GridShape& s, int rank) {
  require_valid(s);
  require_rank(s, rank);
  return {(rank / s.tp) % s.dp, rank % s.tp, rank / (s.tp * s.dp)};
}

int grid_rank(const GridShape& s, const GridCoords& c) {
  require_valid(s);
  if (c.dp_rank < 0 || c.dp_rank >= s.dp || c.tp_rank < 0 || c.tp_rank >= s.tp || c.pp_rank < 0 ||
      c.pp_rank >= s.pp)
    throw std::out_of_range("coordinates dp_rank=" + std::to_string(c.dp_rank) +
                            " tp_rank=" + std::to_string(c.tp_rank) +
                            " pp_rank=" + std::to_string(c.pp_rank) + " outside " + layout_text(s));
  return (c.pp_rank * s.dp + c.dp_rank) * s.tp + c.tp_rank;
}

std::vector<int> dp_group_ranks(const GridShape& s, int rank) {
  return group_ranks(s, rank, s.dp, [](GridCoords& c, int i) { c.dp_rank = i; });
}

std::vector<int> tp_group_ranks(const GridShape& s, int rank) {
  return group_ranks(s, rank, s.tp, [](GridCoords& c, int i) { c.tp_rank = i; });
}

std::vector<int> pp_group_ranks(const GridShape& s, int rank) {
  return group_ranks(s, rank, s.pp, [](GridCoords& c, int i) { c.pp_rank = i; });
}

std::vector<int> embedding_group_ranks(const GridShape& s, int rank) {
  const std::vector<int> stages = pp_group_ranks(s, rank);
  if (s.pp == 1 || (rank != stages.front() && rank != stages.back())) return {};
  return {stages.front(), stages.back()};
}

namespace {

// Splits the world so that `members` (this rank's group, in group order, identical on all members)
// becomes one communicator; checks the result against the arithmetic.
Group split_group(const std::vector<int>& members, int world_rank) {
  int key = 0;
  while (members[key] != world_rank) ++key;
  MPI_Comm comm = MPI_COMM_NULL;
  MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, members.front(), key, &comm));
  Group g(comm, /*owned=*/true);
  MPITRON_REQUIRE(g.size() == static_cast<int>(members.size()) && g.rank() == key,
                  "MPI_Comm_split produced a group that differs from the grid arithmetic");
  return g;
}

}  // namespace

Grid make_grid(int dp, int tp, int pp) {
  Group world = Group::world();
  const GridShape shape{world.size(), dp, tp, pp};
  // Before any collective: every rank sees the same shape, so every rank throws the same message.
  if (std::string why = check_grid_shape(shape); !why.empty()) throw UsageError(why);
  const int rank = world.rank();
  Group dp_group = split_group(dp_group_ranks(shape, rank), rank);
  Group tp_group = split_group(tp_group_ranks(shape, rank), rank);
  Group pp_group = split_group(pp_group_ranks(shape, rank), rank);
  Group embedding;
  if (const std::vector<int> e = embedding_group_ranks(shape, rank); !e.empty()) {
    embedding = split_group(e, rank);
  } else {  // MPI_Comm_split is collective over the world: ranks outside every group take part too
    MPI_Comm none = MPI_COMM_NULL;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, MPI_UNDEFINED, 0, &none));
  }
  return Grid{shape,
              rank,
              grid_coords(shape, rank),
              std::move(world),
              std::move(dp_group),
              std::move(tp_group),
              std::move(pp_group),
              std::move(embedding)};
}

std::string ranks_by_host(const std::vector<std::string>& host_of_rank) {
  std::vector<std::string> hosts;
  std::vector<std::vector<std::pair<int, int>>> ranges;  // per host: [first, last] runs
  for (int r = 0; r < int(host_of_rank.size()); ++r) {
    const auto at = std::find(hosts.begin(), hosts.end(), host_of_rank[size_t(r)]);
    const size_t h = size_t(at - hosts.begin());
    if (at == hosts.end()) {
      hosts.push_back(host_of_rank[size_t(r)]);
      ranges.emplace_back();
    }
    if (!ranges[h].empty() && ranges[h].back().second == r - 1)
      ranges[h].back().second = r;
    else
      ranges[h].push_back({r, r});
  }
  std::vector<std::string> parts;
  for (size_t h = 0; h < hosts.size(); ++h) {
    std::vector<std::string> runs;
    for (const auto& [a, b] : ranges[h])
      runs.push_back(a == b ? std::to_string(a) : fmt::format("{}-{}", a, b));
    const bool one = ranges[h].size() == 1 && ranges[h][0].first == ranges[h][0].second;
    parts.push_back(fmt::format("{}: rank{} {}", hosts[h], one ? "" : "s", fmt::join(runs, ",")));
  }
  return fmt::format("{}", fmt::join(parts, "; "));
}

std::vector<std::string> tp_groups_across_hosts(const GridShape& s,
                                                const std::vector<std::string>& host_of_rank) {
  require_valid(s);
  if (int(host_of_rank.size()) != s.world)
    throw std::invalid_argument(
        fmt::format("{} host names for a world of {}", host_of_rank.size(), s.world));
  std::vector<std::string> out;
  for (int r = 0; r < s.world; ++r) {
    const GridCoords c = grid_coords(s, r);
    if (c.tp_rank != 0) continue;  // each group once, from its first rank
    const std::vector<int> group = tp_group_ranks(s, r);
    std::vector<std::string> hosts;
    for (int g : group)
      if (std::find(hosts.begin(), hosts.end(), host_of_rank[size_t(g)]) == hosts.end())
        hosts.push_back(host_of_rank[size_t(g)]);
    if (hosts.size() > 1)
      out.push_back(
          fmt::format("the TP group of dp rank {} and pp stage {} (ranks {}) spans "
                      "hosts {}",
                      c.dp_rank, c.pp_rank, fmt::join(group, ","), fmt::join(hosts, ", ")));
  }
  return out;
}

}  // namespace mpitron::comm
