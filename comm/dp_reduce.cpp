#include "comm/dp_reduce.hpp"

#include <fmt/format.h>

#include "base/check.hpp"

namespace mpitron::comm {

std::string dp_reduce_name(DpReduce r) {
  switch (r) {
    case DpReduce::allreduce:
      return "allreduce";
    case DpReduce::ring:
      return "ring";
    case DpReduce::gather_scatter:
      return "gather-scatter";
  }
  return "?";
}

DpReduce parse_dp_reduce(const std::string& s) {
  if (s == "allreduce") return DpReduce::allreduce;
  if (s == "ring") return DpReduce::ring;
  if (s == "gather-scatter") return DpReduce::gather_scatter;
  throw UsageError(
      fmt::format("--dp-reduce '{}' is unknown (allreduce, ring or gather-scatter)", s));
}

void allreduce_by(Group& g, DpReduce method, float* buf, size_t n) {
  switch (method) {
    case DpReduce::allreduce:
      g.allreduce_sum(buf, n);
      break;
    case DpReduce::ring:
      g.ring_allreduce_sum(buf, n);
      break;
    case DpReduce::gather_scatter:
      g.gather_scatter_allreduce_sum(buf, n);
      break;
  }
}

void reduce_scatter_by(Group& g, DpReduce method, float* buf, std::span<const size_t> bounds) {
  switch (method) {
    case DpReduce::allreduce:
      g.reduce_scatter_sum_v(buf, bounds);
      break;
    case DpReduce::ring:
      g.ring_reduce_scatter_sum_v(buf, bounds);
      break;
    case DpReduce::gather_scatter:
      g.gather_scatter_allreduce_sum(buf, bounds.back());
      break;
  }
}

}  // namespace mpitron::comm
