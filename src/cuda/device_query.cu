#include <cuda_runtime.h>

#include "base/cuda_check.hpp"
#include "src/cuda/device_query.hpp"

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
