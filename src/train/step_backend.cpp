#include "src/train/step_backend.hpp"

#include <fmt/format.h>

#include "base/check.hpp"
#include "src/cpu/adamw.hpp"
#include "src/cpu/step_ops.hpp"

#ifdef MPITRON_HAVE_CUDA
#include "src/cuda/adamw.cuh"
#include "src/cuda/device_memory.cuh"
#include "src/cuda/step_ops.cuh"
#endif

namespace mpitron {

namespace {
void host_copy(float* dst, const float* src, size_t n) {
  cpu::copy(dst, src, n);
}
}  // namespace

#ifdef MPITRON_HAVE_CUDA
namespace {
// The CUDA twins on the calling thread's default stream, where the layers run too.
void cuda_zero(float* p, size_t n) {
  cuda::zero(p, n, cudaStreamPerThread);
}
void cuda_copy(float* dst, const float* src, size_t n) {
  cuda::copy(dst, src, n, cudaStreamPerThread);
}
double cuda_sum_of_squares(const float* g, size_t n) {
  return cuda::sum_of_squares(g, n, cudaStreamPerThread);
}
void cuda_adamw_update(std::span<const AdamWTensor> tensors, const AdamWRange& r,
                       const AdamWConfig& cfg, double lr, float grad_scale, int64_t t) {
  cuda::adamw_update(tensors.data(), tensors.size(), r, cfg, lr, grad_scale, t,
                     cudaStreamPerThread);
}
}  // namespace
#endif

std::vector<AdamWTensor> adamw_tensors(const ParamRegistry& reg) {
  std::vector<AdamWTensor> tensors;
  tensors.reserve(reg.params().size());
  for (const ParamInfo& p : reg.params()) tensors.push_back({p.offset, p.numel, p.weight_decay});
  return tensors;
}

const StepBackend& step_backend(Device device) {
  static constexpr StepBackend cpu_backend{
      Device::cpu,         cpu::zero,         cpu::copy,
      cpu::sum_of_squares, cpu::adamw_update, cpu::adamw8bit_update,
      host_copy,           host_copy,         false};
  static constexpr StepBackend cpu_staged_backend{
      Device::cpu_staged,  cpu::zero,         cpu::copy,
      cpu::sum_of_squares, cpu::adamw_update, cpu::adamw8bit_update,
      host_copy,           host_copy,         true};
  if (device == Device::cpu) return cpu_backend;
  if (device == Device::cpu_staged) return cpu_staged_backend;
#ifdef MPITRON_HAVE_CUDA
  static constexpr StepBackend cuda_backend{Device::cuda,        cuda_zero,         cuda_copy,
                                            cuda_sum_of_squares, cuda_adamw_update, nullptr,
                                            cuda::upload,        cuda::download,    true};
  if (device == Device::cuda) return cuda_backend;
  throw UsageError(fmt::format("--device {}: not a device (cpu or cuda)", device_name(device)));
#else
  throw UsageError(fmt::format(
      "--device {}: this build trains on the cpu only (built without CUDA: MPITRON_CUDA=OFF or "
      "no nvcc)",
      device_name(device)));
#endif
}

}  // namespace mpitron
