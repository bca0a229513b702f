// Shared by the CUDA unit tests (tests/test_cuda_*.cpp): skip without a device, device arrays
// freed on scope exit, a stream per test.
#pragma once
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "base/cuda_check.hpp"

namespace mpitron::cuda_test {

// Empty when a device is usable, else why not (the runtime's own words).
inline std::string no_device_reason() {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) return cudaGetErrorString(err);
  if (count == 0) return "cudaGetDeviceCount found 0 devices";
  return "";
}

#define SKIP_WITHOUT_DEVICE()                                          \
  do {                                                                 \
    const std::string why_ = ::mpitron::cuda_test::no_device_reason(); \
    if (!why_.empty()) GTEST_SKIP() << "no CUDA device: " << why_;     \
  } while (0)

// A device array of T, freed on scope exit.
template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  size_t n = 0;
  explicit DeviceArray(size_t count) : n(count) {
    if (n) CUDA_CHECK(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)));
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) { upload(host); }
  ~DeviceArray() {
    if (ptr) CUDA_CHECK(cudaFree(ptr));
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  // Complete on return: a pageable copy may still be in flight when cudaMemcpy returns, and the
  // tests' non-blocking streams do not wait for the legacy stream.
  void upload(const std::vector<T>& host) {
    if (n) CUDA_CHECK(cudaMemcpy(ptr, host.data(), n * sizeof(T), cudaMemcpyHostToDevice));
    CUDA_CHECK(cudaDeviceSynchronize());
  }
  std::vector<T> download() const {
    std::vector<T> host(n);
    CUDA_CHECK(cudaDeviceSynchronize());  // every stream's work on it is done, not only legacy's
    if (n) CUDA_CHECK(cudaMemcpy(host.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost));
    return host;
  }
};

struct Stream {
  cudaStream_t s = nullptr;
  Stream() { CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { CUDA_CHECK(cudaStreamDestroy(s)); }
  void sync() const { CUDA_CHECK(cudaStreamSynchronize(s)); }
};

}  // namespace mpitron::cuda_test
