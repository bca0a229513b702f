#include <cuda_runtime.h>
#include <fmt/format.h>

#include "base/check.hpp"
#include "base/cuda_check.hpp"
#include "src/cuda/device_memory.cuh"

namespace mpitron::cuda {

namespace {

void* allocate_zeroed(size_t bytes) {
  void* p = nullptr;
  const cudaError_t err = cudaMalloc(&p, bytes);
  if (err == cudaErrorMemoryAllocation) {
    size_t free_bytes = 0, total = 0;
    cudaGetLastError();  // clear the sticky-free error before asking
    cudaMemGetInfo(&free_bytes, &total);
    throw DeviceOutOfMemory(fmt::format(
        "the GPU had {:.1f} of {:.1f} MiB free (lower --batch-size or raise --micro-batches; "
        "--recompute block keeps less; `mpitron plan` predicts what fits)",
        double(free_bytes) / (1 << 20), double(total) / (1 << 20)));
  }
  CUDA_CHECK(err);
  CUDA_CHECK(cudaMemsetAsync(p, 0, bytes, cudaStreamPerThread));
  return p;
}

void release(void* p) {
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));  // no kernel may still use it
  CUDA_CHECK(cudaFree(p));
}

}  // namespace

int select_device(int local_rank) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess)
    throw UsageError(fmt::format("--device cuda: no CUDA device (cudaGetDeviceCount: {})",
                                 cudaGetErrorString(err)));
  if (count == 0) throw UsageError("--device cuda: no CUDA device (cudaGetDeviceCount found 0)");
  const int device = local_rank % count;
  CUDA_CHECK(cudaSetDevice(device));
  return device;
}

DeviceAllocator device_allocator() {
  DeviceAllocator a;
  a.device = "cuda";
  a.raw_allocate = allocate_zeroed;
  a.raw_release = release;
  return a;
}

void upload(float* dst, const float* host_src, size_t n) {
  if (n == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, n * sizeof(float), cudaMemcpyHostToDevice,
                             cudaStreamPerThread));
}

void upload_int32(int32_t* dst, const int32_t* host_src, size_t n) {
  if (n == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, n * sizeof(int32_t), cudaMemcpyHostToDevice,
                             cudaStreamPerThread));
}

void download(float* host_dst, const float* src, size_t n) {
  download_bytes(host_dst, src, n * sizeof(float));
}

void upload_bytes(void* dst, const void* host_src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(dst, host_src, bytes, cudaMemcpyHostToDevice, cudaStreamPerThread));
}

void download_bytes(void* host_dst, const void* src, size_t bytes) {
  if (bytes == 0) return;
  CUDA_CHECK(cudaMemcpyAsync(host_dst, src, bytes, cudaMemcpyDeviceToHost, cudaStreamPerThread));
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}

}  // namespace mpitron::cuda
