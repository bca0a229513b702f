// Token + position embedding on the device (layers/cpu/embedding.cpp). The dwte scatter-add is
// deterministic without atomics: tokens are stably sorted with their positions (CUB radix sort),
// then each distinct token's block walks its positions in increasing order.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>

#include "base/check.hpp"
#include "base/cuda_check.hpp"
#include "layers/cuda/elementwise.cuh"
#include "layers/cuda/embedding.cuh"

namespace mpitron::cuda {

namespace {

using elementwise::from_float;
using elementwise::kMaxBlocks;
using elementwise::to_float;

constexpr int kMaxThreads = 256;
// Loads issued together before they are added one by one, in order (latency hiding only).
constexpr int kBatch = 8;

// Threads per row block: C rounded up to whole warps, at most kMaxThreads.
unsigned row_threads(int C) {
  return unsigned(std::clamp((int64_t(C) + 31) / 32 * 32, int64_t(32), int64_t(kMaxThreads)));
}

// Block b handles rows b, b + gridDim.x, ...; its threads stride over the channels.
template <class S>
__global__ void __launch_bounds__(kMaxThreads)
    embedding_forward_kernel(S* out, const int32_t* tokens, const S* wte, const S* wpe, int N,
                             int T, int C) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const S* e = wte + size_t(tokens[i]) * size_t(C);
    const S* p = wpe + size_t(i % T) * size_t(C);
    S* o = out + size_t(i) * size_t(C);
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x))
      o[c] = from_float<S>(to_float(e[c]) + to_float(p[c]));
  }
}

// Block b handles rows b, b + gridDim.x, ...: wte's row tokens[i] - v0, or zeros off the shard.
template <class S>
__global__ void __launch_bounds__(kMaxThreads)
    embedding_shard_forward_kernel(S* out, const int32_t* tokens, const S* wte, int N, int C,
                                   int v0, int Vl) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const int v = tokens[i] - v0;
    S* o = out + size_t(i) * size_t(C);
    if (v >= 0 && v < Vl) {
      const S* e = wte + size_t(v) * size_t(C);
      for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) o[c] = e[c];
    } else {
      for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) o[c] = from_float<S>(0.0f);
    }
  }
}

// out[i, c] += wpe[i % T, c].
template <class S>
__global__ void __launch_bounds__(kMaxThreads)
    embedding_add_positions_kernel(S* out, const S* wpe, int N, int T, int C) {
  for (int64_t i = blockIdx.x; i < N; i += gridDim.x) {
    const S* p = wpe + size_t(i % T) * size_t(C);
    S* o = out + size_t(i) * size_t(C);
    for (int c = int(threadIdx.x); c < C; c += int(blockDim.x))
      o[c] = from_float<S>(to_float(o[c]) + to_float(p[c]));
  }
}

__global__ void __launch_bounds__(kMaxThreads) iota_kernel(int32_t* x, int n) {
  // 64-bit index: n near INT_MAX plus the stride would overflow an int.
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x)
    x[i] = int32_t(i);
}

// Block k starts a run when sorted_tokens[k] differs from its predecessor; its run is
// [k, end) (binary search: the tokens are sorted ascending). For each channel, dwte[v - v0, c] +=
// dout[pos, c] for the run's positions in increasing order (the stable sort kept them so); a
// token outside the shard [v0, v0+Vl) adds nothing.
template <class S>
__global__ void __launch_bounds__(kMaxThreads)
    embedding_dwte_kernel(float* dwte, const S* dout, const int32_t* sorted_tokens,
                          const int32_t* sorted_positions, int N, int C, int v0, int Vl) {
  const int k = int(blockIdx.x);
  const int32_t v = sorted_tokens[k];
  if (k > 0 && sorted_tokens[k - 1] == v) return;  // not a run's head (uniform over the block)
  if (v - v0 < 0 || v - v0 >= Vl) return;          // another shard's token
  int lo = k + 1, hi = N;                          // [k, lo) holds v, [hi, N) does not
  while (lo < hi) {
    const int mid = lo + (hi - lo) / 2;
    if (sorted_tokens[mid] == v)
      lo = mid + 1;
    else
      hi = mid;
  }
  const int end = lo;
  float* w = dwte + size_t(v - v0) * size_t(C);
  for (int c = int(threadIdx.x); c < C; c += int(blockDim.x)) {
    float acc = w[c];
    int j = k;
    for (; j + kBatch <= end; j += kBatch) {
      float d[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
        d[u] = to_float(dout[size_t(sorted_positions[j + u]) * size_t(C) + size_t(c)]);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) acc += d[u];
    }
    for (; j < end; ++j) acc += to_float(dout[size_t(sorted_positions[j]) * size_t(C) + size_t(c)]);
    w[c] = acc;
  }
}

// dwpe[t, c] += dout[b, t, c] for b = 0..B-1 in order, a thread per (t, c).
template <class S>
__global__ void __launch_bounds__(kMaxThreads)
    embedding_dwpe_kernel(float* dwpe, const S* dout, int B, size_t TC) {
  const size_t stride = size_t(gridDim.x) * blockDim.x;
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < TC; idx += stride) {
    float acc = dwpe[idx];
    int b = 0;
    for (; b + kBatch <= B; b += kBatch) {
      float d[kBatch];
#pragma unroll
      for (int u = 0; u < kBatch; ++u) d[u] = to_float(dout[size_t(b + u) * TC + idx]);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) acc += d[u];
    }
    for (; b < B; ++b) acc += to_float(dout[size_t(b) * TC + idx]);
    dwpe[idx] = acc;
  }
}

size_t align256(size_t bytes) {
  return (bytes + 255) / 256 * 256;
}

// The scratch: sorted tokens, positions 0..N-1, sorted positions (each 256-byte aligned), then
// CUB's workspace.
struct ScratchLayout {
  size_t ints;       // bytes of each int32 array, rounded up to 256
  size_t cub_bytes;  // CUB's workspace
  size_t total() const { return 3 * ints + cub_bytes; }
};

ScratchLayout scratch_layout(int N) {
  ScratchLayout l{align256(size_t(N) * sizeof(int32_t)), 0};
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(
      nullptr, l.cub_bytes, static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), N, 0, 32));
  return l;
}

int checked_rows(int B, int T) {
  const int64_t N = int64_t(B) * int64_t(T);
  MPITRON_REQUIRE(B >= 0 && T >= 0 && N <= INT32_MAX, "embedding: B*T must fit an int");
  return int(N);
}

}  // namespace

template <class S>
void embedding_forward(S* out, const int32_t* tokens, const S* wte, const S* wpe, int B, int T,
                       int C, cudaStream_t s) {
  const int N = checked_rows(B, T);
  if (N == 0 || C <= 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(N, kMaxBlocks));
  embedding_forward_kernel<S><<<blocks, row_threads(C), 0, s>>>(out, tokens, wte, wpe, N, T, C);
  CUDA_CHECK_LAUNCH();
}

size_t embedding_backward_scratch_bytes(int B, int T) {
  const int N = checked_rows(B, T);
  return N == 0 ? 0 : scratch_layout(N).total();
}

template <class S>
void embedding_shard_backward(float* dwte, float* dwpe, const S* dout, const int32_t* tokens, int B,
                              int T, int C, int v0, int Vl, void* scratch, cudaStream_t s) {
  const int N = checked_rows(B, T);
  if (N == 0 || C <= 0) return;
  MPITRON_REQUIRE(reinterpret_cast<uintptr_t>(scratch) % 256 == 0,
                  "embedding_backward: scratch must be 256-byte aligned");
  ScratchLayout l = scratch_layout(N);
  char* base = static_cast<char*>(scratch);
  int32_t* sorted_tokens = reinterpret_cast<int32_t*>(base);
  int32_t* positions = reinterpret_cast<int32_t*>(base + l.ints);
  int32_t* sorted_positions = reinterpret_cast<int32_t*>(base + 2 * l.ints);
  void* cub_temp = base + 3 * l.ints;

  const unsigned iota_blocks =
      unsigned(std::min<int64_t>((int64_t(N) + kMaxThreads - 1) / kMaxThreads, kMaxBlocks));
  iota_kernel<<<iota_blocks, kMaxThreads, 0, s>>>(positions, N);
  CUDA_CHECK_LAUNCH();
  // Radix sort is stable: equal tokens keep their positions in increasing order.
  CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_temp, l.cub_bytes, tokens, sorted_tokens,
                                             positions, sorted_positions, N, 0, 32, s));
  embedding_dwte_kernel<S><<<unsigned(N), row_threads(C), 0, s>>>(dwte, dout, sorted_tokens,
                                                                  sorted_positions, N, C, v0, Vl);
  CUDA_CHECK_LAUNCH();

  const size_t TC = size_t(T) * size_t(C);
  const unsigned dwpe_blocks =
      unsigned(std::min<size_t>((TC + kMaxThreads - 1) / kMaxThreads, kMaxBlocks));
  embedding_dwpe_kernel<S><<<dwpe_blocks, kMaxThreads, 0, s>>>(dwpe, dout, B, TC);
  CUDA_CHECK_LAUNCH();
}

template <class S>
void embedding_backward(float* dwte, float* dwpe, const S* dout, const int32_t* tokens, int B,
                        int T, int C, void* scratch, cudaStream_t s) {
  embedding_shard_backward(dwte, dwpe, dout, tokens, B, T, C, 0, INT32_MAX, scratch, s);
}

template <class S>
void embedding_shard_forward(S* out, const int32_t* tokens, const S* wte, int N, int C, int v0,
                             int Vl, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(N, kMaxBlocks));
  embedding_shard_forward_kernel<S>
      <<<blocks, row_threads(C), 0, s>>>(out, tokens, wte, N, C, v0, Vl);
  CUDA_CHECK_LAUNCH();
}

template <class S>
void embedding_add_positions(S* out, const S* wpe, int B, int T, int C, cudaStream_t s) {
  const int N = checked_rows(B, T);
  if (N == 0 || C <= 0) return;
  const unsigned blocks = unsigned(std::min<int64_t>(N, kMaxBlocks));
  embedding_add_positions_kernel<S><<<blocks, row_threads(C), 0, s>>>(out, wpe, N, T, C);
  CUDA_CHECK_LAUNCH();
}

#define MPITRON_INSTANTIATE(S)                                                                  \
  template void embedding_forward<S>(S*, const int32_t*, const S*, const S*, int, int, int,     \
                                     cudaStream_t);                                             \
  template void embedding_backward<S>(float*, float*, const S*, const int32_t*, int, int, int,  \
                                      void*, cudaStream_t);                                     \
  template void embedding_shard_forward<S>(S*, const int32_t*, const S*, int, int, int, int,    \
                                           cudaStream_t);                                       \
  template void embedding_add_positions<S>(S*, const S*, int, int, int, cudaStream_t);          \
  template void embedding_shard_backward<S>(float*, float*, const S*, const int32_t*, int, int, \
                                            int, int, int, void*, cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
