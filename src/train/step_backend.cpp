#include "src/train/step_backend.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "base/check.hpp"
#include "base/staged_memory.hpp"
#include "src/cpu/adamw.hpp"
#include "src/cpu/step_ops.hpp"

#ifdef MPITRON_HAVE_CUDA
#include "base/cuda_check.hpp"
#include "src/cuda/adamw.cuh"
#include "src/cuda/device_memory.cuh"
#include "src/cuda/step_ops.cuh"
#endif

namespace mpitron {

namespace {
void host_copy(float* dst, const float* src, size_t n) {
  cpu::copy(dst, src, n);
}
void host_fill_bytes(uint8_t* p, uint8_t value, size_t n) {
  std::fill_n(p, n, value);
}
void host_synchronize() {}

constexpr StepBackend kCpuBackend{Device::cpu,
                                  cpu::zero,
                                  cpu::copy,
                                  cpu::sum_of_squares,
                                  cpu::adamw_update,
                                  cpu::adamw8bit_update,
                                  host_copy,
                                  host_copy,
                                  host_fill_bytes,
                                  host_synchronize,
                                  false};

// cpu-staged's: the CPU's step ops on the real pages of its device addresses
// (base/staged_memory.hpp), the ranges' pointers too.
void staged_adamw_update(std::span<const AdamWTensor> tensors, const AdamWRange& r,
                         const AdamWConfig& cfg, double lr, float grad_scale, int64_t t) {
  using staged_memory::real;
  AdamWRange x = r;
  x.params = real(x.params), x.grads = real(x.grads), x.m = real(x.m), x.v = real(x.v);
  x.weights = real(x.weights);
  cpu::adamw_update(tensors, x, cfg, lr, grad_scale, t);
}
void staged_adamw8bit_update(std::span<const AdamWTensor> tensors, const AdamW8bitRange& r,
                             const AdamWConfig& cfg, double lr, float grad_scale, int64_t t) {
  using staged_memory::real;
  AdamW8bitRange x = r;
  x.params = real(x.params), x.grads = real(x.grads), x.weights = real(x.weights);
  x.m_codes = real(x.m_codes), x.v_codes = real(x.v_codes);
  x.m_absmax = real(x.m_absmax), x.v_absmax = real(x.v_absmax);
  cpu::adamw8bit_update(tensors, x, cfg, lr, grad_scale, t);
}
#define MPITRON_DEVICE_CALL(m) staged_memory::device_call<kCpuBackend, &StepBackend::m>()
constexpr StepBackend kCpuStagedBackend{Device::cpu_staged,
                                        MPITRON_DEVICE_CALL(zero),
                                        MPITRON_DEVICE_CALL(copy),
                                        MPITRON_DEVICE_CALL(sum_of_squares),
                                        staged_adamw_update,
                                        staged_adamw8bit_update,
                                        MPITRON_DEVICE_CALL(upload),
                                        MPITRON_DEVICE_CALL(download),
                                        MPITRON_DEVICE_CALL(fill_bytes),
                                        host_synchronize,
                                        true};
#undef MPITRON_DEVICE_CALL
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
void cuda_fill_bytes(uint8_t* p, uint8_t value, size_t n) {
  CUDA_CHECK(cudaMemsetAsync(p, value, n, cudaStreamPerThread));
}
void cuda_synchronize() {
  CUDA_CHECK(cudaStreamSynchronize(cudaStreamPerThread));
}
double cuda_sum_of_squares(const float* g, size_t n) {
  return cuda::sum_of_squares(g, n, cudaStreamPerThread);
}
void cuda_adamw_update(std::span<const AdamWTensor> tensors, const AdamWRange& r,
                       const AdamWConfig& cfg, double lr, float grad_scale, int64_t t) {
  cuda::adamw_update(tensors.data(), tensors.size(), r, cfg, lr, grad_scale, t,
                     cudaStreamPerThread);
}
// The CPU's constants and tables, so that the device rounds as cpu::adamw8bit_update does.
const cuda::AdamW8bitTables& adamw8bit_tables() {
  static const cuda::AdamW8bitTables tables = [] {
    cuda::AdamW8bitTables t{};
    const cpu::QuantizationMap &m = cpu::signed_dynamic_map(), &v = cpu::unsigned_dynamic_map();
    const cpu::Midpoints m_mid = cpu::quantization_midpoints(m),
                         v_mid = cpu::quantization_midpoints(v);
    std::copy(m.begin(), m.end(), t.m_map);
    std::copy(v.begin(), v.end(), t.v_map);
    std::copy(m_mid.begin(), m_mid.end(), t.m_mid);
    std::copy(v_mid.begin(), v_mid.end(), t.v_mid);
    t.m_zero = cpu::quantize_nearest(m, 0.0f);
    t.v_zero = cpu::quantize_nearest(v, 0.0f);
    return t;
  }();
  return tables;
}
void cuda_adamw8bit_update(std::span<const AdamWTensor> tensors, const AdamW8bitRange& r,
                           const AdamWConfig& cfg, double lr, float grad_scale, int64_t t) {
  const cpu::AdamWStep c(cfg, lr, t);
  const cuda::AdamW8bitStep step{c.b1,        c.b2,           c.one_minus_b1, c.one_minus_b2,
                                 c.step_size, c.inv_sqrt_bc2, c.eps,          1.0f - c.lr_decay};
  cuda::adamw8bit_update(tensors.data(), tensors.size(), r, step, adamw8bit_tables(), grad_scale,
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
  if (device == Device::cpu) return kCpuBackend;
  if (device == Device::cpu_staged) return kCpuStagedBackend;
#ifdef MPITRON_HAVE_CUDA
  static constexpr StepBackend cuda_backend{Device::cuda,
                                            cuda_zero,
                                            cuda_copy,
                                            cuda_sum_of_squares,
                                            cuda_adamw_update,
                                            cuda_adamw8bit_update,
                                            cuda::upload,
                                            cuda::download,
                                            cuda_fill_bytes,
                                            cuda_synchronize,
                                            true};
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
