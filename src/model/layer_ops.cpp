#include "src/model/layer_ops.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "layers/attention.hpp"
#include "layers/crossentropy.hpp"
#include "layers/dropout.hpp"
#include "layers/encoder.hpp"
#include "layers/gelu.hpp"
#include "layers/layernorm.hpp"
#include "layers/linear.hpp"
#include "layers/residual.hpp"
#include "src/check.hpp"
#include "src/cpu/step_ops.hpp"

namespace mpitron {

namespace {

void upload_int32(int32_t* dst, const int32_t* src, size_t n) {
  std::copy_n(src, n, dst);
}
void copy_floats(float* dst, const float* src, size_t n) {
  std::copy_n(src, n, dst);
}
void attention_forward(float* out, float* saved, const float* qkv, int B, int T, int C, int NH,
                       bool causal, const int32_t* lengths) {
  cpu::attention_forward(out, saved, qkv, B, T, C, NH, causal, lengths);
}
void attention_backward(float* dqkv, float* scratch, const float* dout, const float*,
                        const float* qkv, const float* saved, int B, int T, int C, int NH,
                        bool causal, const int32_t* lengths) {
  cpu::attention_backward(dqkv, scratch, dout, qkv, saved, B, T, C, NH, causal, lengths);
}
size_t attention_saved_elements(int B, int NH, int T) {
  return size_t(B) * NH * T * T;
}

// The CPU's layers under another name: a model on "cpu-staged" takes the paths of a device whose
// memory the host cannot read (uploads, downloads), with the CPU's math.
template <bool kStaged>
const LayerOps& host_layer_ops() {
  static constexpr LayerOps ops{
      kStaged ? "cpu-staged" : "cpu",
      cpu::zero,
      cpu::copy,
      upload_int32,
      copy_floats,
      copy_floats,
      cpu::layernorm_forward<float>,
      cpu::layernorm_backward<float>,
      cpu::linear_forward<float>,
      cpu::linear_backward<float>,
      cpu::gelu_forward<float>,
      cpu::gelu_backward<float>,
      attention_forward,
      attention_backward,
      attention_saved_elements,
      cpu::dropout_forward<float>,
      cpu::dropout_backward<float>,
      cpu::residual_forward<float>,
      cpu::encoder_forward<float>,
      cpu::encoder_backward<float>,
      cpu::crossentropy_forward<float>,
      cpu::crossentropy_backward<float>,
  };
  return ops;
}

}  // namespace

const LayerOps& cpu_layer_ops() {
  return host_layer_ops<false>();
}

const LayerOps& layer_ops(const std::string& device) {
  if (device == "cpu") return cpu_layer_ops();
  if (device == "cpu-staged") return host_layer_ops<true>();
#ifdef MPITRON_HAVE_CUDA
  if (device == "cuda") return cuda_layer_ops();
#endif
  throw UsageError(fmt::format("--device {}: this build has no layers for it", device));
}

}  // namespace mpitron
