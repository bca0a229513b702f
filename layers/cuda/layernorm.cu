// LayerNorm on the device (layers/cpu/layernorm.cpp's formulas in fp32): a warp per row for the
// row statistics and dinp, column partial sums over fixed row chunks for dweight/dbias.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "base/cuda_check.hpp"
#include "layers/cuda/elementwise.cuh"
#include "layers/cuda/layernorm.cuh"

namespace mpitron::cuda {

namespace {

using namespace elementwise;

constexpr int kWarp = 32;
constexpr int kRowsPerBlock = 8;  // warps per block, one row each
constexpr int kRowThreads = kRowsPerBlock * kWarp;

// Column partial sums: a block is kColTile columns by kColRows row lanes.
constexpr int kColTile = 32;
constexpr int kColRows = 8;
constexpr int kFinishThreads = 256;
// Row chunks: about one per kMinChunkRows rows, at most kMaxChunks; fixed by N alone.
constexpr int kMinChunkRows = 32;
constexpr int kMaxChunks = 128;

int row_chunks(int N) {
  const int64_t chunks = (int64_t(std::max(N, 0)) + kMinChunkRows - 1) / kMinChunkRows;
  return int(std::clamp<int64_t>(chunks, 1, kMaxChunks));
}

// Butterfly sum: every lane ends with the same bits (each step adds the same two values in
// either order, and IEEE addition commutes).
__device__ __forceinline__ float warp_sum(float x) {
#pragma unroll
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}

// Warp w of block b normalises row b * kRowsPerBlock + w: sum, then the squared deviations from
// the mean (two passes as on the CPU), then the output. A row's element is read before it is
// written by the same lane, so out may alias inp.
template <class T>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_forward_kernel(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                             const T* bias, int N, int C, float eps) {
  const int lane = int(threadIdx.x) % kWarp;
  const int row = int(blockIdx.x) * kRowsPerBlock + int(threadIdx.x) / kWarp;
  if (row >= N) return;  // the whole warp: no shuffle is left half-attended
  const T* x = inp + size_t(row) * size_t(C);
  T* y = out + size_t(row) * size_t(C);
  float sum = 0.0f;
  for (int c = lane; c < C; c += kWarp) sum += to_float(x[c]);
  const float m = warp_sum(sum) / float(C);
  float sq = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float d = to_float(x[c]) - m;
    sq += d * d;
  }
  const float r = 1.0f / sqrtf(warp_sum(sq) / float(C) + eps);
  for (int c = lane; c < C; c += kWarp)
    y[c] = from_float<T>((to_float(x[c]) - m) * r * to_float(weight[c]) + to_float(bias[c]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = r;
  }
}

// dinp += rstd * (dy*w - mean(dy*w) - xhat * mean(dy*w*xhat)), a warp per row.
template <class T>
__global__ void __launch_bounds__(kRowThreads)
    layernorm_backward_dx_kernel(T* dinp, const T* dout, const T* inp, const T* weight,
                                 const float* mean, const float* rstd, int N, int C) {
  const int lane = int(threadIdx.x) % kWarp;
  const int row = int(blockIdx.x) * kRowsPerBlock + int(threadIdx.x) / kWarp;
  if (row >= N) return;  // the whole warp
  const size_t offset = size_t(row) * size_t(C);
  const T* x = inp + offset;
  const T* dy = dout + offset;
  T* dx = dinp + offset;
  const float m = mean[row], r = rstd[row];
  float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
  for (int c = lane; c < C; c += kWarp) {
    const float dnorm = to_float(dy[c]) * to_float(weight[c]);
    dnorm_sum += dnorm;
    dnorm_xhat_sum += dnorm * (to_float(x[c]) - m) * r;
  }
  const float dnorm_mean = warp_sum(dnorm_sum) / float(C);
  const float dnorm_xhat_mean = warp_sum(dnorm_xhat_sum) / float(C);
  for (int c = lane; c < C; c += kWarp) {
    const float xhat = (to_float(x[c]) - m) * r;
    const float g =
        (to_float(dy[c]) * to_float(weight[c]) - dnorm_mean - xhat * dnorm_xhat_mean) * r;
    dx[c] = from_float<T>(to_float(dx[c]) + g);
  }
}

// Block (bx, chunk): columns c = bx * kColTile + tx of the rows [r0, r1) of row chunk `chunk`.
// Row lane ty sums rows r0 + ty, r0 + ty + kColRows, ... in increasing order; the kColRows lane
// sums are added in lane order. partial[chunk * C + c] gets the dweight sum, partial[(P + chunk)
// * C + c] the dbias sum, P = gridDim.y.
template <class T>
__global__ void __launch_bounds__(kColTile* kColRows)
    layernorm_param_partials_kernel(float* partial, const T* dout, const T* inp, const float* mean,
                                    const float* rstd, int N, int C, int rows_per_chunk) {
  __shared__ float dw_lanes[kColRows][kColTile];
  __shared__ float db_lanes[kColRows][kColTile];
  const int tx = int(threadIdx.x), ty = int(threadIdx.y);
  const int c = int(blockIdx.x) * kColTile + tx;
  const int chunk = int(blockIdx.y);
  const int64_t begin = int64_t(chunk) * rows_per_chunk;
  const int r0 = begin < N ? int(begin) : N;
  const int r1 = int64_t(r0) + rows_per_chunk < N ? r0 + rows_per_chunk : N;
  float dw = 0.0f, db = 0.0f;
  if (c < C) {
    for (int r = r0 + ty; r < r1; r += kColRows) {
      const size_t i = size_t(r) * size_t(C) + size_t(c);
      const float dy = to_float(dout[i]);
      dw += dy * (to_float(inp[i]) - mean[r]) * rstd[r];
      db += dy;
    }
  }
  dw_lanes[ty][tx] = dw;
  db_lanes[ty][tx] = db;
  __syncthreads();  // reached by every thread: nothing above returns
  if (ty == 0 && c < C) {
    float a = dw_lanes[0][tx], b = db_lanes[0][tx];
#pragma unroll
    for (int k = 1; k < kColRows; ++k) {
      a += dw_lanes[k][tx];
      b += db_lanes[k][tx];
    }
    const size_t P = gridDim.y;
    partial[size_t(chunk) * size_t(C) + size_t(c)] = a;
    partial[(P + size_t(chunk)) * size_t(C) + size_t(c)] = b;
  }
}

// dweight[c] += sum of the P chunk partials in chunk order (likewise dbias), a thread per column.
__global__ void __launch_bounds__(kFinishThreads)
    layernorm_param_finish_kernel(float* dweight, float* dbias, const float* partial, int P,
                                  int C) {
  const int c = int(blockIdx.x) * kFinishThreads + int(threadIdx.x);
  if (c >= C) return;
  float a = 0.0f, b = 0.0f;
  for (int k = 0; k < P; ++k) {
    a += partial[size_t(k) * size_t(C) + size_t(c)];
    b += partial[(size_t(P) + size_t(k)) * size_t(C) + size_t(c)];
  }
  dweight[c] += a;
  dbias[c] += b;
}

unsigned ceil_div(int64_t a, int64_t b) {
  return unsigned((a + b - 1) / b);
}

}  // namespace

template <class T>
void layernorm_forward(T* out, float* mean, float* rstd, const T* inp, const T* weight,
                       const T* bias, int N, int C, double eps, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  layernorm_forward_kernel<T><<<ceil_div(N, kRowsPerBlock), kRowThreads, 0, s>>>(
      out, mean, rstd, inp, weight, bias, N, C, float(eps));
  CUDA_CHECK_LAUNCH();
}

size_t layernorm_backward_scratch(int N, int C) {
  return 2 * size_t(row_chunks(N)) * size_t(std::max(C, 0));
}

template <class T>
void layernorm_backward(T* dinp, float* dweight, float* dbias, const T* dout, const T* inp,
                        const T* weight, const float* mean, const float* rstd, int N, int C,
                        float* scratch, cudaStream_t s) {
  if (N <= 0 || C <= 0) return;
  layernorm_backward_dx_kernel<T><<<ceil_div(N, kRowsPerBlock), kRowThreads, 0, s>>>(
      dinp, dout, inp, weight, mean, rstd, N, C);
  CUDA_CHECK_LAUNCH();
  const int P = row_chunks(N);
  const int rows_per_chunk = int((int64_t(N) + P - 1) / P);
  layernorm_param_partials_kernel<T>
      <<<dim3(ceil_div(C, kColTile), unsigned(P)), dim3(kColTile, kColRows), 0, s>>>(
          scratch, dout, inp, mean, rstd, N, C, rows_per_chunk);
  CUDA_CHECK_LAUNCH();
  layernorm_param_finish_kernel<<<ceil_div(C, kFinishThreads), kFinishThreads, 0, s>>>(
      dweight, dbias, scratch, P, C);
  CUDA_CHECK_LAUNCH();
}

#define MPITRON_INSTANTIATE(T)                                                                   \
  template void layernorm_forward<T>(T*, float*, float*, const T*, const T*, const T*, int, int, \
                                     double, cudaStream_t);                                      \
  template void layernorm_backward<T>(T*, float*, float*, const T*, const T*, const T*,          \
                                      const float*, const float*, int, int, float*, cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
