// CUDA device query: proves the toolchain wiring until the CUDA backend lands, and reports the GPUs
// a run could use. Returns an empty list (with the reason) where no GPU or driver is present.
#pragma once
#include <string>
#include <vector>

namespace mpitron::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int major = 0, minor = 0;  // compute capability
  size_t total_bytes = 0;
};

struct DeviceQuery {
  std::vector<DeviceInfo> devices;
  std::string reason;  // why there are none, when devices is empty
};

DeviceQuery query_devices();

// Why cudaGetDeviceCount failed, in a user's words: no NVIDIA GPU or driver on this machine, a
// driver older than the build's CUDA runtime, else the runtime's own message.
std::string no_device_reason(int cuda_error);

}  // namespace mpitron::cuda
