#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#include "src/cuda/device_query.hpp"

// CUDA_CHECK for calls whose failure is fatal: "[rank r] file:line call: reason", then abort.
#define CUDA_CHECK(call)                                                                         \
  do {                                                                                           \
    cudaError_t err_ = (call);                                                                   \
    if (err_ != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #call, cudaGetErrorString(err_)); \
      std::abort();                                                                              \
    }                                                                                            \
  } while (0)

namespace mpitron::cuda {

DeviceQuery query_devices() {
  DeviceQuery q;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    q.reason = cudaGetErrorString(err);
    return q;
  }
  if (count == 0) q.reason = "no CUDA devices";
  for (int i = 0; i < count; ++i) {
    cudaDeviceProp prop{};
    CUDA_CHECK(cudaGetDeviceProperties(&prop, i));
    q.devices.push_back({i, prop.name, prop.major, prop.minor, prop.totalGlobalMem});
  }
  return q;
}

}  // namespace mpitron::cuda
