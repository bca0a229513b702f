#include "src/train/step_backend.hpp"

#include <fmt/format.h>

#include "base/check.hpp"
#include "src/cpu/step_ops.hpp"

#ifdef MPITRON_HAVE_CUDA
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
void cuda_adamw_update(const ParamRegistry& reg, const AdamWRange& r, const AdamWConfig& cfg,
                       double lr, float grad_scale, int64_t t) {
  cuda::adamw_update(reg, r, cfg, lr, grad_scale, t, cudaStreamPerThread);
}
}  // namespace
#endif

const StepBackend& step_backend(const std::string& device) {
  static constexpr StepBackend cpu_backend{
      "cpu",     cpu::zero, cpu::copy, cpu::sum_of_squares, cpu::adamw_update,
      host_copy, host_copy, false};
  static constexpr StepBackend cpu_staged_backend{
      "cpu-staged",      cpu::zero, cpu::copy, cpu::sum_of_squares,
      cpu::adamw_update, host_copy, host_copy, true};
  if (device == "cpu") return cpu_backend;
  if (device == "cpu-staged") return cpu_staged_backend;
#ifdef MPITRON_HAVE_CUDA
  static constexpr StepBackend cuda_backend{
      "cuda",       cuda_zero,      cuda_copy, cuda_sum_of_squares, cuda_adamw_update,
      cuda::upload, cuda::download, true};
  if (device == "cuda") return cuda_backend;
  throw UsageError(fmt::format("--device {}: not a device (cpu or cuda)", device));
#else
  throw UsageError(fmt::format(
      "--device {}: this build trains on the cpu only (built without CUDA: MPITRON_CUDA=OFF or "
      "no nvcc)",
      device));
#endif
}

}  // namespace mpitron
