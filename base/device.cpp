#include "base/device.hpp"

#include <fmt/format.h>

#include "base/check.hpp"

namespace mpitron {

Device parse_device(const std::string& name) {
  if (name == "cpu") return Device::cpu;
  if (name == "cuda") return Device::cuda;
  if (name == "cpu-staged") return Device::cpu_staged;
  throw UsageError(fmt::format("--device {}: not a device (cpu, cuda or cpu-staged)", name));
}

const char* device_name(Device d) {
  switch (d) {
    case Device::cuda:
      return "cuda";
    case Device::cpu_staged:
      return "cpu-staged";
    case Device::cpu:
      break;
  }
  return "cpu";
}

}  // namespace mpitron
