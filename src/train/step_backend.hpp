// The step's non-layer work (zeroing, copies, gradient norm, AdamW, host transfers) as one table
// per device, chosen once when the run starts: call sites never branch on the device. The CPU
// table holds src/cpu/step_ops; the CUDA table their src/cuda twins; "cpu-staged" is the CPU's
// math with every transfer a GPU run makes (see layer_ops), to check that movement anywhere.
#pragma once
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/device.hpp"
#include "src/model/registry.hpp"
#include "src/train/adamw.hpp"

namespace mpitron {

struct StepBackend {
  Device device;
  void (*zero)(float* p, size_t n);
  void (*copy)(float* dst, const float* src, size_t n);
  double (*sum_of_squares)(const float* g, size_t n);
  void (*adamw_update)(std::span<const AdamWTensor> tensors, const AdamWRange& r,
                       const AdamWConfig& cfg, double lr, float grad_scale, int64_t t);
  // --optimizer adamw8bit (the codes and absmax values where the state lives: see fill_bytes).
  void (*adamw8bit_update)(std::span<const AdamWTensor> tensors, const AdamW8bitRange& r,
                           const AdamWConfig& cfg, double lr, float grad_scale, int64_t t);
  // Between the device's memory and the host's, for MPI collectives on a device that MPI cannot
  // read (Open MPI here is not CUDA-aware). download waits for the copy.
  void (*upload)(float* dst, const float* host_src, size_t n);
  void (*download)(float* host_dst, const float* src, size_t n);
  // Every byte of [p, p + n) set to value (8-bit AdamW's codes of 0).
  void (*fill_bytes)(uint8_t* p, uint8_t value, size_t n);
  // Returns when the work queued so far has run (a GPU's kernels return at launch): the pipeline's
  // busy time is the device's, not the launches'.
  void (*synchronize)();
  // The device's memory is not the host's: gradients and parameters pass through host copies
  // around every collective (GradSync).
  bool staged;
};

// The registry's parameters as AdamW sees them (where each is, whether it decays), in order.
std::vector<AdamWTensor> adamw_tensors(const ParamRegistry& reg);

// UsageError for a device this build cannot train on.
const StepBackend& step_backend(Device device);

}  // namespace mpitron
