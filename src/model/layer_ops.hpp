// The layers a model runs, as one table per device, chosen once when the model is built: call
// sites never branch on the device (as StepBackend does for the step's non-layer work). The CPU
// table holds layers/cpu; the CUDA table (src/cuda/layer_ops.cu) the layers/cuda twins on the
// calling thread's default stream. Arguments and contracts are the CPU layers' (layers/*.hpp);
// every pointer is in the device's memory except where "host" is said.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>

#include "src/philox.hpp"

namespace mpitron {

struct LayerOps {
  const char* device;

  // ---- memory ----
  void (*zero)(float* p, size_t n);
  void (*copy)(float* dst, const float* src, size_t n);
  void (*upload_int32)(int32_t* dst, const int32_t* host_src, size_t n);
  void (*upload)(float* dst, const float* host_src, size_t n);
  void (*download)(float* host_dst, const float* src, size_t n);  // waits for the device

  // ---- layers (float) ----
  void (*layernorm_forward)(float* out, float* mean, float* rstd, const float* inp,
                            const float* weight, const float* bias, int N, int C, double eps);
  void (*layernorm_backward)(float* dinp, float* dweight, float* dbias, const float* dout,
                             const float* inp, const float* weight, const float* mean,
                             const float* rstd, int N, int C);
  void (*linear_forward)(float* out, const float* inp, const float* weight, const float* bias,
                         int N, int IC, int OC);
  void (*linear_backward)(float* dinp, float* dweight, float* dbias, const float* dout,
                          const float* inp, const float* weight, int N, int IC, int OC);
  void (*gelu_forward)(float* out, const float* inp, size_t n);
  void (*gelu_backward)(float* dinp, const float* dout, const float* inp, size_t n);
  // saved: what backward needs of the softmax, attention_saved_elements(B, NH, T) of it (the CPU:
  // the (B,NH,T,T) probabilities; CUDA: the (B,NH,T) log-sum-exp). out is forward's output (the
  // CUDA backward reads it, the CPU's does not); scratch has as many elements as saved.
  void (*attention_forward)(float* out, float* saved, const float* qkv, int B, int T, int C, int NH,
                            bool causal, const int32_t* lengths);
  void (*attention_backward)(float* dqkv, float* scratch, const float* dout, const float* out,
                             const float* qkv, const float* saved, int B, int T, int C, int NH,
                             bool causal, const int32_t* lengths);
  size_t (*attention_saved_elements)(int B, int NH, int T);
  void (*dropout_forward)(float* out, const float* inp, float p, const PhiloxStream& rng,
                          uint64_t row0, int N, int C);
  void (*dropout_backward)(float* dinp, const float* dout, float p, const PhiloxStream& rng,
                           uint64_t row0, int N, int C);
  void (*residual_forward)(float* out, const float* a, const float* b, size_t n);
  void (*encoder_forward)(float* out, const int32_t* tokens, const float* wte, const float* wpe,
                          int B, int T, int C);
  void (*encoder_backward)(float* dwte, float* dwpe, const float* dout, const int32_t* tokens,
                           int B, int T, int C);
  void (*crossentropy_forward)(float* losses, float* lse, const float* logits,
                               const int32_t* targets, int N, int V);
  void (*crossentropy_backward)(float* dlogits, const float* logits, const float* lse,
                                const int32_t* targets, float dloss, int N, int V);
};

const LayerOps& cpu_layer_ops();
#ifdef MPITRON_HAVE_CUDA
const LayerOps& cuda_layer_ops();  // src/cuda/layer_ops.cu
#endif

// UsageError for a device this build has no layers for.
const LayerOps& layer_ops(const std::string& device);

}  // namespace mpitron
