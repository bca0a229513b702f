#include <cuda_runtime.h>
#include <fmt/format.h>

#include <filesystem>

#include "base/cuda_check.hpp"
#include "src/cuda/device_query.hpp"

namespace mpitron::cuda {

std::string no_device_reason(int cuda_error) {
  const auto err = cudaError_t(cuda_error);
  if (err == cudaErrorInsufficientDriver || err == cudaErrorNoDevice) {
    std::error_code ec;
    const bool driver = std::filesystem::exists("/proc/driver/nvidia/version", ec) ||
                        std::filesystem::exists("/dev/nvidiactl", ec);
    if (!driver) return "no NVIDIA GPU or driver was found on this machine";
    if (err == cudaErrorInsufficientDriver) {
      int runtime = 0;
      cudaRuntimeGetVersion(&runtime);
      return fmt::format(
          "the NVIDIA driver is older than this build's CUDA runtime ({}.{}): update the driver, "
          "or build with a CUDA toolkit the driver supports",
          runtime / 1000, runtime % 1000 / 10);
    }
  }
  return cudaGetErrorString(err);
}

DeviceQuery query_devices() {
  DeviceQuery q;
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    q.reason = no_device_reason(err);
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
