// CUDA twins of the CPU step ops (src/cpu/step_ops.cpp): same contracts, deterministic gradient
// norm. Contracts are documented in src/cuda/step_ops.cuh.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>

#include "base/cuda_check.hpp"
#include "src/cuda/step_ops.cuh"

namespace mpitron::cuda {

void zero(float* p, size_t n, cudaStream_t s) {
  if (n == 0) return;  // p may be null for an empty range
  CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), s));
}

void copy(float* dst, const float* src, size_t n, cudaStream_t s) {
  if (n == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, src, n * sizeof(float), cudaMemcpyDeviceToDevice, s));
}

namespace {

// The CPU's chunk count (the partials are added in this order on the host).
constexpr int kChunks = 64;
// Threads per chunk: a power of two, for the tree below.
constexpr int kSumThreads = 512;

// Block c sums chunk c: each thread a strided slice in order, then a fixed pairwise tree. No
// atomics, so the bits do not depend on scheduling.
__global__ void chunk_sums_of_squares(const float* __restrict__ g, size_t n, size_t per,
                                      double* __restrict__ partial) {
  __shared__ double sums[kSumThreads];
  const size_t begin = min(n, size_t(blockIdx.x) * per), end = min(n, begin + per);
  double acc = 0.0;
  for (size_t i = begin + threadIdx.x; i < end; i += kSumThreads) {
    const double x = g[i];
    acc += x * x;
  }
  sums[threadIdx.x] = acc;
  __syncthreads();
  for (int width = kSumThreads / 2; width > 0; width /= 2) {
    if (int(threadIdx.x) < width) sums[threadIdx.x] += sums[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) partial[blockIdx.x] = sums[0];
}

// The partials buffer of this host thread: thread_local so that concurrent callers on different
// threads never share it; tied to the device current when it was allocated and reallocated if the
// thread moves to another device. Freed at thread exit (errors ignored: the runtime may already be
// shutting down at process exit).
struct PartialsBuffer {
  int device = -1;
  double* data = nullptr;
  ~PartialsBuffer() {
    if (data) cudaFree(data);
  }
};

double* partials_on_current_device() {
  thread_local PartialsBuffer buffer;
  int device = 0;
  CUDA_CHECK(cudaGetDevice(&device));
  if (buffer.data == nullptr || buffer.device != device) {
    if (buffer.data) CUDA_CHECK(cudaFree(buffer.data));
    buffer.data = nullptr;
    CUDA_CHECK(cudaMalloc(&buffer.data, kChunks * sizeof(double)));
    buffer.device = device;
  }
  return buffer.data;
}

}  // namespace

double sum_of_squares(const float* g, size_t n, cudaStream_t s) {
  if (n == 0) return 0.0;
  double* partial = partials_on_current_device();
  const size_t per = (n + kChunks - 1) / kChunks;
  chunk_sums_of_squares<<<kChunks, kSumThreads, 0, s>>>(g, n, per, partial);
  CUDA_CHECK(cudaGetLastError());
  double host[kChunks];
  CUDA_CHECK(cudaMemcpyAsync(host, partial, sizeof(host), cudaMemcpyDeviceToHost, s));
  CUDA_CHECK(cudaStreamSynchronize(s));
  double total = 0.0;
  for (double x : host) total += x;
  return total;
}

}  // namespace mpitron::cuda
