#include "src/cpu/step_ops.hpp"

#include <algorithm>
#include <cstring>

namespace mpitron::cpu {

// Large ones in fixed pieces over the threads (--bitwise clears and copies the whole gradient
// once per reduction shard): the same bytes either way.
constexpr size_t kPiece = size_t(1) << 18;

void zero(float* p, size_t n) {
#pragma omp parallel for schedule(static) if (n >= 2 * kPiece)
  for (size_t b = 0; b < n; b += kPiece)
    std::memset(p + b, 0, std::min(kPiece, n - b) * sizeof(float));
}

void copy(float* dst, const float* src, size_t n) {
#pragma omp parallel for schedule(static) if (n >= 2 * kPiece)
  for (size_t b = 0; b < n; b += kPiece)
    std::memcpy(dst + b, src + b, std::min(kPiece, n - b) * sizeof(float));
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
