// Rows by index on the device (rows.cuh): one thread per element, grid-stride.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include "base/cuda_check.hpp"
#include "layers/cuda/elementwise.cuh"
#include "layers/cuda/rows.cuh"

namespace mpitron::cuda {

namespace {

using namespace elementwise;

template <class T>
__global__ void gather_rows_kernel(T* dst, const T* src, const int32_t* index, int M, int C) {
  const size_t n = size_t(M) * C, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t k = i / size_t(C), c = i % size_t(C);
    dst[i] = src[size_t(index[k]) * C + c];
  }
}

template <class T>
__global__ void scatter_add_rows_kernel(T* dst, const T* src, const int32_t* index, int M, int C) {
  const size_t n = size_t(M) * C, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t k = i / size_t(C), c = i % size_t(C);
    T* d = dst + size_t(index[k]) * C + c;
    store(d, to_float(*d) + to_float(src[i]));
  }
}

template <class T>
__global__ void add_table_rows_kernel(T* x, const T* table, const int32_t* index, int N, int C) {
  const size_t n = size_t(N) * C, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const size_t r = i / size_t(C), c = i % size_t(C);
    store(x + i, to_float(x[i]) + to_float(table[size_t(index[r]) * C + c]));
  }
}

template <class T>
__global__ void add_bias_rows_kernel(T* x, const T* b, int N, int C) {
  const size_t n = size_t(N) * C, stride = size_t(gridDim.x) * blockDim.x;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    store(x + i, to_float(x[i]) + to_float(b[i % size_t(C)]));
}

template <class T>
__global__ void table_rows_backward_kernel(float* dtable, const T* dout, const int32_t* index,
                                           int N, int C) {
  const int c = int(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= C) return;
  for (int n = 0; n < N; ++n) dtable[size_t(index[n]) * C + c] += to_float(dout[size_t(n) * C + c]);
}

}  // namespace

template <class T>
void copy_strided(T* dst, int dst_stride, const T* src, int src_stride, int rows, int cols,
                  cudaStream_t s) {
  if (rows == 0 || cols == 0) return;
  CUDA_CHECK(cudaMemcpy2DAsync(dst, size_t(dst_stride) * sizeof(T), src,
                               size_t(src_stride) * sizeof(T), size_t(cols) * sizeof(T),
                               size_t(rows), cudaMemcpyDeviceToDevice, s));
}

template <class T>
void gather_rows(T* dst, const T* src, const int32_t* index, int M, int C, cudaStream_t s) {
  if (M == 0) return;
  gather_rows_kernel<<<blocks_for(size_t(M) * C), kThreads, 0, s>>>(dst, src, index, M, C);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void scatter_add_rows(T* dst, const T* src, const int32_t* index, int M, int C, cudaStream_t s) {
  if (M == 0) return;
  scatter_add_rows_kernel<<<blocks_for(size_t(M) * C), kThreads, 0, s>>>(dst, src, index, M, C);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void add_table_rows(T* x, const T* table, const int32_t* index, int N, int C, cudaStream_t s) {
  if (N == 0) return;
  add_table_rows_kernel<<<blocks_for(size_t(N) * C), kThreads, 0, s>>>(x, table, index, N, C);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void add_bias_rows(T* x, const T* b, int N, int C, cudaStream_t s) {
  if (N == 0 || C == 0) return;
  add_bias_rows_kernel<<<blocks_for(size_t(N) * C), kThreads, 0, s>>>(x, b, N, C);
  CUDA_CHECK_LAUNCH();
}

template <class T>
void table_rows_backward(float* dtable, const T* dout, const int32_t* index, int N, int C,
                         cudaStream_t s) {
  if (N == 0) return;
  table_rows_backward_kernel<<<(C + kThreads - 1) / kThreads, kThreads, 0, s>>>(dtable, dout, index,
                                                                                N, C);
  CUDA_CHECK_LAUNCH();
}

#define MPITRON_INSTANTIATE(T)                                                             \
  template void copy_strided<T>(T*, int, const T*, int, int, int, cudaStream_t);           \
  template void gather_rows<T>(T*, const T*, const int32_t*, int, int, cudaStream_t);      \
  template void scatter_add_rows<T>(T*, const T*, const int32_t*, int, int, cudaStream_t); \
  template void add_table_rows<T>(T*, const T*, const int32_t*, int, int, cudaStream_t);   \
  template void add_bias_rows<T>(T*, const T*, int, int, cudaStream_t);                    \
  template void table_rows_backward<T>(float*, const T*, const int32_t*, int, int, cudaStream_t);
MPITRON_INSTANTIATE(float)
MPITRON_INSTANTIATE(__nv_bfloat16)
MPITRON_INSTANTIATE(__half)
#undef MPITRON_INSTANTIATE

}  // namespace mpitron::cuda
