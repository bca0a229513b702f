// The compute devices a run may use (--device), below every folder that picks by device: the
// layer tables (src/model/layer_ops), the step ops (src/train/step_backend) and the trainer.
#pragma once
#include <string>

namespace mpitron {

// cpu_staged: the CPU's math with every transfer a GPU run makes (src/train/step_backend.hpp).
enum class Device { cpu, cuda, cpu_staged };

// The --device names cpu, cuda, cpu-staged; UsageError naming the valid ones for anything else.
Device parse_device(const std::string& name);
const char* device_name(Device d);

}  // namespace mpitron
