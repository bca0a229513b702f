// comm::Grid: the DP x TP x PP process layout, pure rank arithmetic (testable without MPI) and then
// one MPI_Comm_split per axis. TP is innermost (a TP group stays inside a node), then DP, then PP,
// as in Megatron-LM:  rank = (pp_rank * dp + dp_rank) * tp + tp_rank.
#pragma once
#include <string>
#include <vector>

#include "comm/group.hpp"

namespace mpitron::comm {

struct GridShape {
  int world, dp, tp, pp;
};

// "" when world == dp*tp*pp and every entry is >= 1; otherwise one message saying what is wrong and
// what to do, identical on every rank (it depends only on the shape).
std::string check_grid_shape(const GridShape& s);

struct GridCoords {
  int dp_rank, tp_rank, pp_rank;
};

// Inverse of each other for a valid shape. Throw std::invalid_argument for an invalid shape and
// std::out_of_range for a rank or coordinates outside it (the same for the *_group_ranks below).
GridCoords grid_coords(const GridShape& s, int rank);
int grid_rank(const GridShape& s, const GridCoords& c);

// World ranks of the group containing `rank` along one axis, in group-rank order (so the index of
// `rank` in the list is its rank in that group). The members differ only in that axis's coordinate.
std::vector<int> dp_group_ranks(const GridShape& s, int rank);  // same tp_rank, pp_rank; size dp
std::vector<int> tp_group_ranks(const GridShape& s, int rank);  // same dp_rank, pp_rank; size tp
std::vector<int> pp_group_ranks(const GridShape& s, int rank);  // same dp_rank, tp_rank; size pp
// The embedding group of a first or last pipeline stage (Megatron-LM's): the first and last rank of
// its pp group, which hold the tied token embedding and LM head and sum its gradient. Empty for
// the other stages and when pp == 1 (the one stage holds both).
std::vector<int> embedding_group_ranks(const GridShape& s, int rank);

// Placement, from each world rank's host name (host_of_rank[r]; gather_host_names collects it):
// "node1: ranks 0-3; node2: ranks 4-7" (consecutive ranks as ranges, hosts in order of first rank).
std::string ranks_by_host(const std::vector<std::string>& host_of_rank);
// One line per TP group whose ranks are not all on one host, naming the group, its ranks and their
// hosts (a TP group's all-reduces run every layer: across a network they dominate the step).
std::vector<std::string> tp_groups_across_hosts(const GridShape& s,
                                                const std::vector<std::string>& host_of_rank);

// The layout and its communicators, created once and passed explicitly. Move-only (it owns the
// split communicators, freed when the Grid is destroyed — before MPI_Finalize).
struct Grid {
  GridShape shape;
  int rank;  // in MPI_COMM_WORLD
  GridCoords coords;
  Group world, dp, tp, pp;
  Group embedding;  // embedding_group_ranks; a null group (size 0) where that is empty
};

// Collective over MPI_COMM_WORLD. Every rank checks the shape before any collective, so on a bad
// layout every rank throws mpitron::UsageError with the same message (no hang, no MPI_Abort; the
// caller's rank 0 prints it). Otherwise splits the world once per axis, with the groups of the pure
// functions above (color = the group's first world rank, key = rank in the group).
Grid make_grid(int dp, int tp, int pp);

}  // namespace mpitron::comm
