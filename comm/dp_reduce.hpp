// How data-parallel gradients are summed (--dp-reduce): MPI's collectives, the hand-written ring,
// or the naive gather-scatter, behind two calls the gradient synchronisation uses.
#pragma once
#include <cstddef>
#include <span>
#include <string>

#include "comm/group.hpp"

namespace mpitron::comm {

enum class DpReduce { allreduce, ring, gather_scatter };

std::string dp_reduce_name(DpReduce r);
DpReduce parse_dp_reduce(const std::string& s);  // UsageError when unknown

// Sums buf[0, n) over the group in place with the chosen method (blocking).
void allreduce_by(Group& g, DpReduce method, float* buf, size_t n);

// In place: afterwards buf[bounds[r], bounds[r+1]) holds the group's sum on rank r (the rest of
// buf is unspecified). gather-scatter sums everything, on purpose the naive way.
void reduce_scatter_by(Group& g, DpReduce method, float* buf, std::span<const size_t> bounds);

}  // namespace mpitron::comm
