#include "src/cpu/step_ops.hpp"

#include <algorithm>
#include <cstring>

namespace mpitron::cpu {

void zero(float* p, size_t n) {
  std::memset(p, 0, n * sizeof(float));
}

void copy(float* dst, const float* src, size_t n) {
  std::memcpy(dst, src, n * sizeof(float));
}

double sum_of_squares(const float* g, size_t n) {
  // A fixed number of chunks, each summed in kLanes interleaved partial sums (element i of the
  // chunk into lane i mod kLanes: vector registers, not one dependent chain) added lane by lane,
  // then the chunks added in order: the same bits whatever the thread count.
  constexpr int kChunks = 64, kLanes = 16;
  double partial[kChunks];
  const size_t per = (n + kChunks - 1) / kChunks;
#pragma omp parallel for schedule(static)
  for (int c = 0; c < kChunks; ++c) {
    const size_t begin = std::min(n, size_t(c) * per), end = std::min(n, begin + per);
    double lane[kLanes] = {};
    size_t i = begin;
    for (; i + kLanes <= end; i += kLanes)
      for (int j = 0; j < kLanes; ++j) lane[j] += double(g[i + j]) * double(g[i + j]);
    double s = 0.0;
    for (double x : lane) s += x;
    for (; i < end; ++i) s += double(g[i]) * double(g[i]);
    partial[c] = s;
  }
  double total = 0.0;
  for (double s : partial) total += s;
  return total;
}

}  // namespace mpitron::cpu
