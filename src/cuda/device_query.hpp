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

}  // namespace mpitron::cuda
